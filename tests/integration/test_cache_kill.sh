#!/bin/bash
# test_cache_kill.sh — `vflow run` of synthetic -> latent_cache with the cache worker
# killed by SIGKILL mid-run, twice, then run again to the end: the run reports the
# killed worker, the cache stays readable and consistent after every kill (`mdb_stat`,
# `vflow cache verify`), and the final run skips exactly what was committed and leaves
# exactly the expected key set (checked with python3-lmdb against keys derived by
# cache_tool). The full decode -> vae_encode -> latent_cache kill test is the lead's.
# vflow-test: timeout=180
set -u
BUILD=${VFLOW_BUILD:-.}
VFLOW=${VFLOW_BIN:-$BUILD/vflow}
TOOL=$BUILD/tools/cache_tool
PY=${VFLOW_PY:-/usr/bin/python3}
command -v mdb_stat >/dev/null || { echo "skip: mdb_stat (lmdb-utils) missing"; exit 77; }
[ -x "$VFLOW" ] && [ -x "$TOOL" ] || { echo "vflow or cache_tool not built"; exit 1; }
TMP=$(mktemp -d /tmp/vf_cache_kill_run.XXXXXX)
cd "$TMP"
DB=$TMP/cache.lmdb
N=600
fail() { echo "FAIL: $*"; echo "(kept $TMP)"; exit 1; }
entries() { mdb_stat -e "$DB" 2>/dev/null | awk '/Entries:/ {print $2}'; }

cat > kill.lua <<'EOF'
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "cachekill"
local src = p:stage("synthetic", { shape = {4, 2, 8, 8}, count = a.count, seed = 3,
                                   tensor = "latent", rate = a.rate or 0 })
local cache = p:stage("latent_cache", { path = a.cache, key = "id", commit_every = 6,
                                        map_size = 65536 })
p:connect(src, cache, { capacity = 4 })
return p
EOF

prev=0
for round in 1 2; do
  rm -f trace
  VFLOW_TRACE_SPAWN=$TMP/trace "$VFLOW" run kill.lua --run-dir "run$round" --set count=$N \
    --set rate=500 --set cache="$DB" > "out$round" 2>&1 &
  vpid=$!
  pid=""
  for i in $(seq 1 1000); do
    [ -z "$pid" ] && pid=$(awk '/stages=latent_cache/ {sub("pid=", "", $1); print $1}' trace 2>/dev/null)
    n=$(entries); n=${n:-0}
    [ -n "$pid" ] && [ "$n" -ge $((prev + 30)) ] && break
    kill -0 $vpid 2>/dev/null || break
    sleep 0.01
  done
  [ -n "$pid" ] || fail "round $round: no latent_cache worker in the spawn trace: $(cat out$round)"
  sleep 0.0$((round * 3))
  kill -9 "$pid" || fail "round $round: cache worker $pid already gone: $(cat out$round)"
  wait $vpid
  rc=$?
  [ $rc -ne 0 ] || fail "round $round: the run succeeded although its cache worker was killed"
  grep -q "SIGKILL" "out$round" || fail "round $round: the killed worker is not reported: $(cat out$round)"
  mdb_stat "$DB" > /dev/null || fail "round $round: mdb_stat after the kill"
  "$VFLOW" cache verify "$DB" > verify || fail "round $round: verify after the kill: $(cat verify)"
  n=$(($(entries) - 1))
  echo "round $round: cache worker killed with $n records committed (run exit $rc)"
  [ $n -gt $prev ] && [ $n -lt $N ] || fail "round $round: $n records (previous $prev, total $N)"
  prev=$n
done

"$VFLOW" run kill.lua --run-dir final --set count=$N --set cache="$DB" > out_final 2>&1 \
  || fail "final run: $(cat out_final)"
"$PY" - "$TMP/final/metrics.jsonl" $((N - prev)) $prev <<'EOF' || fail "final run's latent_cache_done event"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"latent_cache_done"' in l]
assert len(rows) == 1, rows
r = rows[0]
assert r["written"] == int(sys.argv[2]) and r["skipped"] == int(sys.argv[3]), r
print("final run: wrote %d, skipped %d" % (r["written"], r["skipped"]))
EOF
mdb_stat -e "$DB" > stat || fail "mdb_stat"
grep -q "Entries: $((N + 1))" stat || fail "expected $((N + 1)) entries: $(cat stat)"
"$VFLOW" cache verify "$DB" > verify || fail "verify: $(cat verify)"
"$TOOL" idkeys 0 $N | sort > expect
"$PY" -c "
import lmdb, sys
env = lmdb.open(sys.argv[1], readonly=True, lock=False)
with env.begin() as t:
    for k, _ in t.cursor():
        if k != b'__meta__': print(k.decode())
" "$DB" | sort > got || fail "python-lmdb"
cmp -s expect got || fail "key set differs: $(diff expect got | head)"
cd /
rm -rf "$TMP"
echo ok
