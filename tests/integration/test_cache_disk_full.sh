#!/usr/bin/env bash
# test_cache_disk_full.sh — a latent cache on a file system that fills up (a 120 KiB tmpfs
# in a private mount namespace) through pipelines/precompute_latents.lua:
#  - the run exits 1 with one line naming the cache, the LMDB call that failed and the
#    cause, "no space left on device" with the bytes free (LMDB reports its short write
#    as EIO; the line says so instead of "m: Input/output error");
#  - nothing is half-written: `vflow cache verify` finds every record whole;
#  - with room again (the tmpfs remounted larger) the same command finishes the cache,
#    skipping what was committed, and it verifies clean.
# Needs root and unshare -m (skipped with 77 otherwise).
# vflow-test: labels=precompute timeout=300
set -euo pipefail
VFLOW_BIN=${VFLOW_BIN:?}
SRC=${VFLOW_SRC:?}
tmp=$(mktemp -d /tmp/vf_disk_full.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
  echo "SKIP: needs root and a private mount namespace (unshare -m)"
  exit 77
fi

mkdir -p "$tmp/clips" "$tmp/small"
for i in 1 2 3 4; do
  ffmpeg -v error -y -f lavfi -i "testsrc=size=96x64:rate=10:duration=4" -vf "hue=h=$((i * 70))" \
    -c:v mpeg4 "$tmp/clips/c$i.mp4"
done
cat > "$tmp/inside.sh" <<EOF
set -u
mount -t tmpfs -o size=120k tmpfs "$tmp/small" || { echo mount > "$tmp/skip"; exit 0; }
run() { "$VFLOW_BIN" run "$SRC/pipelines/precompute_latents.lua" --set source="$tmp/clips" \
  --set cache="$tmp/small/c.lmdb" --set frames=5 --set size=64 --set latent_cache.commit_every=4 --run-dir "\$1"; }
run "$tmp/r1" > "$tmp/out1" 2>&1; echo \$? > "$tmp/rc1"
"$VFLOW_BIN" cache verify "$tmp/small/c.lmdb" > "$tmp/verify1" 2>&1; echo \$? > "$tmp/vrc1"
mount -o remount,size=8m "$tmp/small"
run "$tmp/r2" > "$tmp/out2" 2>&1; echo \$? > "$tmp/rc2"
"$VFLOW_BIN" cache verify "$tmp/small/c.lmdb" > "$tmp/verify2" 2>&1; echo \$? > "$tmp/vrc2"
"$VFLOW_BIN" cache stat "$tmp/small/c.lmdb" > "$tmp/stat2" 2>&1
EOF
unshare -m bash "$tmp/inside.sh"
[ -f "$tmp/skip" ] && { echo "SKIP: tmpfs mount not allowed"; exit 77; }

[ "$(cat "$tmp/rc1")" = 1 ] || { cat "$tmp/out1"; fail "full disk: exit $(cat "$tmp/rc1"), want 1"; }
grep -Eq "failed: latent_cache: $tmp/small/c.lmdb: mdb_(txn_commit|put|env_sync): no space left on device \(.*the file system holding it has [0-9]+ bytes free\)" "$tmp/out1" \
  || { cat "$tmp/out1"; fail "the failure does not name the call and the cause"; }
grep -q ": m: " "$tmp/out1" && fail "the message names a variable: $(grep ': m: ' "$tmp/out1")"
[ "$(cat "$tmp/vrc1")" = 0 ] && grep -q " 0 problems" "$tmp/verify1" \
  || { cat "$tmp/verify1"; fail "the cache after the failure does not verify"; }
n1=$(sed -n 's/.*: \([0-9]*\) records checked.*/\1/p' "$tmp/verify1")
[ "$(cat "$tmp/rc2")" = 0 ] || { cat "$tmp/out2"; fail "with room again: exit $(cat "$tmp/rc2")"; }
[ "$(cat "$tmp/vrc2")" = 0 ] && grep -q " 0 problems" "$tmp/verify2" || { cat "$tmp/verify2"; fail "final verify"; }
n2=$(sed -n 's/.*: \([0-9]*\) records checked.*/\1/p' "$tmp/verify2")
[ "$n2" -gt "$n1" ] || fail "the rerun added nothing ($n1 -> $n2 records)"
echo "ok: full disk after $n1 records, named; finished with room: $n2 records"
