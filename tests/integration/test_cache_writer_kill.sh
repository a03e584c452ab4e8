#!/bin/bash
# test_cache_writer_kill.sh — the latent cache writer killed with SIGKILL mid-run, three
# times, then run to the end: the cache holds exactly the expected keys, the "__meta__"
# summary is exact after every kill (`vflow cache verify` clean), `mdb_stat` reads it and
# the reruns skipped what was already committed. Uses tests/tools/cache_tool (the
# latent_cache writer without a graph); test_cache_kill.sh does the same through
# `vflow run`.
# vflow-test: timeout=120
set -u
BUILD=${VFLOW_BUILD:-.}
TOOL=$BUILD/tools/cache_tool
PY=${VFLOW_PY:-/usr/bin/python3}
[ -x "$TOOL" ] || { echo "cache_tool not built"; exit 1; }
command -v mdb_stat >/dev/null || { echo "skip: mdb_stat (lmdb-utils) missing"; exit 77; }
cli() { if [ -x "${VFLOW_BIN:-}" ]; then "$VFLOW_BIN" cache "$@"; else "$TOOL" cli "$@"; fi; }
TMP=$(mktemp -d /tmp/vf_cache_kill.XXXXXX)
DB=$TMP/latents.lmdb
N=240
fail() { echo "FAIL: $*"; echo "(kept $TMP)"; exit 1; }

entries() { mdb_stat -e "$DB" | awk '/Entries:/ {print $2}'; }

prev=0
for extra in 0.01 0.03 0.02; do
  "$TOOL" write "$DB" 0 $N --commit 7 --map 65536 --sleep-ms 4 > "$TMP/out" 2>&1 &
  pid=$!
  # kill once this run committed two batches of its own (mdb_stat reads alongside the
  # writer), plus a little, so the kill lands at varying points of a batch
  for i in $(seq 1 1000); do
    n=$(entries 2>/dev/null || echo 0)
    [ "${n:-0}" -ge $((prev + 15)) ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
  done
  sleep $extra
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  st=$?
  [ $st -eq 137 ] || fail "writer was not killed mid-run (exit $st): $(cat $TMP/out)"
  mdb_stat "$DB" > /dev/null || fail "mdb_stat after kill"
  cli verify "$DB" > "$TMP/verify" || fail "verify after kill: $(cat $TMP/verify)"
  n=$(($(entries) - 1))
  echo "killed: $n records committed"
  [ $n -gt $prev ] || fail "no progress between kills ($prev -> $n)"
  [ $n -lt $N ] || fail "the writer finished before the kill"
  prev=$n
done

"$TOOL" write "$DB" 0 $N --commit 7 --sleep-ms 0 > "$TMP/out" 2>&1 || fail "final run: $(cat $TMP/out)"
cat "$TMP/out"
grep -q "written $((N - prev)) skipped $prev " "$TMP/out" || fail "final run should write $((N - prev)) and skip $prev"
mdb_stat -e "$DB" > "$TMP/stat" || fail "mdb_stat"
grep -q "Entries: $((N + 1))" "$TMP/stat" || fail "expected $((N + 1)) entries: $(cat $TMP/stat)"
cli verify "$DB" > "$TMP/verify" || fail "verify: $(cat $TMP/verify)"
"$TOOL" keys 0 $N | sort > "$TMP/expect"
"$PY" -c "
import lmdb, sys
env = lmdb.open(sys.argv[1], readonly=True, lock=False)
with env.begin() as t:
    for k, _ in t.cursor():
        if k != b'__meta__': print(k.decode())
" "$DB" | sort > "$TMP/got" || fail "python-lmdb"
cmp -s "$TMP/expect" "$TMP/got" || fail "key set differs: $(diff $TMP/expect $TMP/got | head)"
rm -rf "$TMP"
echo ok
