#!/usr/bin/env bash
# test_precompute_kill.sh — a precompute (pipelines/precompute_latents.lua: decode x2 ->
# vae_encode -> latent_cache, through the real `vflow run`) killed with SIGKILL three
# times after records were committed, then run again to the end, all in one run dir:
#   round 1: the vae_encode worker, round 2: the latent_cache worker (the LMDB writer),
#   round 3: the driver itself (its workers must follow it: PR_SET_PDEATHSIG).
# After every kill `mdb_stat` reads the environment, `vflow cache verify` is clean and the
# committed count grew but stayed short of the total; no worker outlives the driver. The
# final run exits 0, writes exactly the missing records and skips the committed ones
# (vae_encode drops them before encoding: skip_cached; the writer skips none), and
# the cache holds exactly the expected key set: keys derived in Python from each video's
# (path, size, mtime), the clip count ffprobe's frame count gives, the transform and the
# VAE hash (python3-lmdb reads the keys); no clip is stored twice.
# vflow-test: labels=precompute timeout=300
set -u
VFLOW=${VFLOW_BIN:?}
SRC=${VFLOW_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${VFLOW_PY:-/usr/bin/python3}
for t in ffmpeg ffprobe mdb_stat; do
  command -v $t >/dev/null || { echo "skip: $t missing"; exit 77; }
done
"$PY" -c "import lmdb" 2>/dev/null || { echo "skip: python3-lmdb missing"; exit 77; }
TMP=$(mktemp -d /tmp/vf_precompute_kill.XXXXXX)
fail() { echo "FAIL: $*"; echo "(kept $TMP)"; exit 1; }
CACHE=$TMP/cache.lmdb
RUN=$TMP/run
FRAMES=5
SIZE=64

bash "$SRC/scripts/make_sample_videos.sh" "$TMP/samples" > "$TMP/samples.log" 2>&1 \
  || fail "make_sample_videos: $(cat "$TMP/samples.log")"
MANIFEST=$TMP/samples/manifest.csv

# The expected key set, from the files and ffprobe alone; VAE hash from the summary.
expect_keys() {
  "$PY" - "$MANIFEST" "$FRAMES" "$SIZE" "$CACHE" <<'EOF'
import json, os, subprocess, sys
import lmdb
manifest, T, size, cache = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
M64 = (1 << 64) - 1
def fnv128(data):
    h = 0x6C62272E07BB014262B821756295C58D
    for b in data:
        h = ((h ^ b) * 0x0000000001000000000000000000013B) & ((1 << 128) - 1)
    return "%032x" % h
def source_id(path, size, mtime_ns):
    data = path.encode() + ("\n%d\n%d" % (size, mtime_ns)).encode()
    out = ""
    for lane, h in enumerate((0xCBF29CE484222325, 0x84222325CBF29CE4)):
        for b in data:
            h = ((h ^ b) * (0x100000001B3 + 2 * lane)) & M64
        out += "%016x" % h
    return out
env = lmdb.open(cache, readonly=True, lock=False)
with env.begin() as t:
    vaes = list(json.loads(bytes(t.get(b"__meta__")))["vae"])
assert len(vaes) == 1, vaes
transform = "frames=%d;stride=1;fps=0;size=%dx%d;crop=center;filter=bicubic" % (T, size, size)
d = os.path.dirname(manifest)
for row in open(manifest).read().splitlines()[1:]:
    path = os.path.join(d, row.split(",", 1)[0])
    n = int(subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
                            "stream=nb_read_frames", "-of", "default=nw=1:nk=1", path],
                           capture_output=True, text=True, check=True).stdout.split()[0])
    st = os.stat(path)
    src = source_id(path, st.st_size, st.st_mtime_ns)
    for clip in range(n // T):
        parts = [b"vflow-latent-key/1", src.encode(), str(clip).encode(), transform.encode(), vaes[0].encode()]
        print(fnv128(b"".join(p + b"\0" for p in parts)))
EOF
}

cache_keys() { # entry keys and item ids (python3-lmdb; the id is the record's first string)
  "$PY" - "$CACHE" "$1" <<'EOF'
import lmdb, struct, sys
env = lmdb.open(sys.argv[1], readonly=True, lock=False)
ids = []
with env.begin() as t:
    for k, v in t.cursor():
        if k == b"__meta__":
            continue
        print(k.decode())
        n = struct.unpack_from("<I", v, 16)[0]
        ids.append(bytes(v[20:20 + n]).decode())
open(sys.argv[2], "w").write("\n".join(sorted(ids)) + "\n")
EOF
}

entries() { mdb_stat -e "$CACHE" 2>/dev/null | awk '/Entries:/ {print $2}'; }

export VFLOW_TRACE_SPAWN=$TMP/trace
run_args=(run "$SRC/pipelines/precompute_latents.lua" --run-dir "$RUN" --set manifest="$MANIFEST"
          --set cache="$CACHE" --set size=$SIZE --set frames=$FRAMES --set workers=2
          --set latent_cache.commit_every=4)

prev=0
for round in 1 2 3; do
  case $round in
    1) what="vae_encode worker"; pat="stages=vae_encode" ;;
    2) what="latent_cache worker"; pat="stages=latent_cache" ;;
    3) what="driver"; pat="" ;;
  esac
  rm -f "$TMP/trace"
  "$VFLOW" "${run_args[@]}" > "$TMP/out$round" 2>&1 &
  vpid=$!
  pid=""
  for i in $(seq 1 1200); do
    if [ -z "$pid" ]; then
      if [ $round = 3 ]; then pid=$vpid
      else pid=$(awk -v p="$pat" '$3 == p {sub("pid=", "", $1); print $1}' "$TMP/trace" 2>/dev/null); fi
    fi
    n=$(entries); n=${n:-1}
    [ -n "$pid" ] && [ "$n" -ge $((prev + 1 + 6)) ] && break
    kill -0 $vpid 2>/dev/null || break
    sleep 0.01
  done
  [ -n "$pid" ] || fail "round $round: no $what in the spawn trace: $(cat "$TMP/out$round")"
  workers=$(awk '{sub("pid=", "", $1); print $1}' "$TMP/trace")
  kill -9 "$pid" 2>/dev/null || fail "round $round: $what ($pid) already gone (run too fast?): $(cat "$TMP/out$round")"
  wait $vpid 2>/dev/null
  rc=$?
  if [ $round = 3 ]; then
    [ $rc = 137 ] || fail "round 3: driver exit $rc, want 137 (SIGKILL)"
    for i in $(seq 1 100); do # workers die with their driver (PR_SET_PDEATHSIG)
      alive=""
      for w in $workers; do kill -0 "$w" 2>/dev/null && alive="$alive $w"; done
      [ -z "$alive" ] && break
      sleep 0.1
    done
    [ -z "$alive" ] || fail "round 3: workers$alive outlived the killed driver"
  else
    [ $rc = 1 ] || fail "round $round: exit $rc after killing the $what, want 1: $(cat "$TMP/out$round")"
    grep -q "SIGKILL" "$TMP/out$round" || fail "round $round: the killed $what is not reported: $(cat "$TMP/out$round")"
  fi
  mdb_stat -e "$CACHE" > "$TMP/stat$round" 2>&1 || fail "round $round: mdb_stat: $(cat "$TMP/stat$round")"
  n=$(($(entries) - 1))
  "$VFLOW" cache verify "$CACHE" > "$TMP/verify$round" 2>&1 \
    || fail "round $round: verify after the kill: $(cat "$TMP/verify$round")"
  grep -q "$n records checked, 0 problems" "$TMP/verify$round" || fail "round $round: $(cat "$TMP/verify$round")"
  echo "round $round: killed the $what with $n records committed (run exit $rc)"
  [ $n -gt $prev ] || fail "round $round: $n records committed, no more than before ($prev)"
  prev=$n
done

"$VFLOW" "${run_args[@]}" > "$TMP/out_final" 2>&1 || fail "final run: $(cat "$TMP/out_final")"
expect_keys | sort > "$TMP/expect" || fail "deriving the expected keys"
N=$(wc -l < "$TMP/expect")
[ "$prev" -lt "$N" ] || fail "the kills came too late: $prev of $N records were committed before the final run"
"$PY" - "$RUN/metrics.jsonl" $((N - prev)) $prev <<'EOF' || fail "final run's latent_cache_done event"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
done = [r for r in rows if r.get("event") == "latent_cache_done"]
assert len(done) == 1, done
r = done[0]
vae = [x for x in rows if x.get("type") == "final" and x.get("stage") == "vae_encode"]
assert len(vae) == 1, vae
cached = vae[0].get("gauges", {}).get("skipped_cached", 0)
# the committed records are dropped before the VAE; none reaches the writer twice
assert r["written"] == int(sys.argv[2]) and cached == int(sys.argv[3]) and r["skipped"] == 0, (r, vae[0])
assert r["entries"] == r["written"] + cached, r
print("final run: wrote %d, vae_encode skipped %d cached clips" % (r["written"], cached))
EOF
mdb_stat -e "$CACHE" > "$TMP/stat" || fail "mdb_stat"
grep -q "Entries: $((N + 1))$" "$TMP/stat" || fail "expected $((N + 1)) entries: $(cat "$TMP/stat")"
# slots of the killed processes were cleared at a later open (mdb_stat -r exits 1 by design)
mdb_stat -r "$CACHE" > "$TMP/readers" 2>&1
grep -q "(no active readers)" "$TMP/readers" || fail "reader slots left: $(cat "$TMP/readers")"
"$VFLOW" cache verify "$CACHE" > "$TMP/verify" 2>&1 || fail "verify: $(cat "$TMP/verify")"
grep -q "$N records checked, 0 problems" "$TMP/verify" || fail "verify: $(cat "$TMP/verify")"
cache_keys "$TMP/ids" | sort > "$TMP/got" || fail "python-lmdb"
cmp -s "$TMP/expect" "$TMP/got" || fail "key set differs from the expected one: $(diff "$TMP/expect" "$TMP/got" | head)"
[ "$(sort -u "$TMP/ids" | wc -l)" = "$N" ] || fail "some clip is stored twice: $(uniq -d "$TMP/ids" | head -3)"
rm -rf "$TMP"
echo "ok ($N records)"
