#!/bin/bash
# test_train_buckets.sh — training on a bucketed cache (three buckets of 1, 4 and 8
# tokens per sample with batches of 4, 2 and 2, so the largest micro-batch by B·L is
# not the one of the largest B): `vflow run pipelines/train_dit.lua` on the CPU backend
# gives BITWISE the same weights for P=1 S=1, P=2 S=2 and P=2 S=1 (M = 2), and with D = 2
# replicas for P=1 S=1 and P=2 S=2, the steps
# mix the buckets (samples and tokens per step vary as the reader's schedule says), a
# different seed gives different weights; SIGKILL of a partition mid-run then --resume
# ends bitwise on the uninterrupted weights (the data cursor covers the bucket schedule);
# a bucket with entries but not one full batch gets a WARN line naming it.
# vflow-test: timeout=300
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

make_buckets

STEPS=24
COMMON=(--set steps=$STEPS --set every=4 --set keep=2 --set lr=2e-3 --set micro_batches=2)
ref=""
for c in "1 1" "2 2" "2 1"; do
  set -- $c
  trainb "p$1s$2" "${COMMON[@]}" --set stages=$1 --set shards=$2 || fail "P=$1 S=$2: $(tail -5 p$1s$2.out)"
  h=$(model_md5 "p$1s$2" $STEPS)
  echo "P=$1 S=$2: model.safetensors $h"
  [ -z "$ref" ] && ref=$h
  [ "$h" = "$ref" ] || fail "P=$1 S=$2: weights differ from P=1 S=1 ($h vs $ref)"
done
# D = 2 data-parallel replicas: both readers take the same bucket at every step
for c in "1 1" "2 2"; do
  set -- $c
  trainb "d2p$1s$2" "${COMMON[@]}" --set replicas=2 --set stages=$1 --set shards=$2 || fail "D=2 P=$1 S=$2: $(tail -5 d2p$1s$2.out)"
done
[ "$(model_md5 d2p1s1 $STEPS)" = "$(model_md5 d2p2s2 $STEPS)" ] || fail "D=2: P=2 S=2 differs from P=1 S=1"
[ "$(model_md5 d2p1s1 $STEPS)" != "$ref" ] || fail "D=2 gave the D=1 weights (replicas ignored?)"
echo "D=2: P=1 S=1 and P=2 S=2 agree"
trainb seed2 "${COMMON[@]}" --set stages=2 --set seed=2 || fail "seed 2: $(tail -5 seed2.out)"
[ "$(model_md5 seed2 $STEPS)" != "$ref" ] || fail "another seed gave the same weights"

# the steps follow the schedule: per step, samples x tokens per sample of its bucket
"$PY" - p2s2 <<'PYEOF' || fail "the steps do not mix the buckets"
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1] + "/metrics.jsonl")) if r.get("event") == "train_step"]
per = sorted({round(r["tokens_s"] / r["samples_s"]) for r in rows})
print("tokens per sample over the steps:", per)
assert per == [1, 4, 8], per
PYEOF

# SIGKILL of partition dit_1 mid-run, then --resume: the uninterrupted weights
run=kill
VFLOW_TRACE_SPAWN=$TMP/trace "$VFLOW" run "$PIPE" --run-dir "$run" --set cache="$BK" "${COMMON[@]}" --set stages=2 \
  --set shards=2 > "$run.out" 2>&1 &
vpid=$!
pid=""
for i in $(seq 1 3000); do
  [ -z "$pid" ] && pid=$(awk '$3 == "stages=dit_1" {sub("pid=", "", $1); print $1}' trace 2>/dev/null)
  [ -n "$pid" ] && [ "$(steps_done $run)" -ge 9 ] && break
  kill -0 $vpid 2>/dev/null || break
  sleep 0.01
done
[ -n "$pid" ] || fail "no worker for dit_1 in the spawn trace: $(tail -5 $run.out)"
kill -9 "$pid" 2>/dev/null || fail "dit_1 (pid $pid) already gone: the run ended before step 9"
wait $vpid && fail "the run succeeded although dit_1 was killed"
from=$("$TOOL" ckpt-find "$run/ckpt" 2>/dev/null | cut -d' ' -f1)
echo "killed dit_1 after step $(steps_done $run); newest complete checkpoint: ${from:-none}"
[ -n "$from" ] || fail "no checkpoint before the kill"
trainb "$run" "${COMMON[@]}" --set stages=2 --set shards=2 --resume || fail "resume: $(tail -5 $run.out)"
grep -q "resumed the data at cursor v2;" "$run/run.log" || fail "the reader was not replayed to a bucketed cursor"
[ "$(model_md5 "$run" $STEPS)" = "$(model_md5 p2s2 $STEPS)" ] || fail "resumed weights differ from the uninterrupted run"

# a bucket with entries but not one full batch is never read, and the reader says so
SM=$TMP/small.lmdb
"$TOOL" mkbucket "$SM" 13 4 16 16 1 4 0 > /dev/null || fail "mkbucket small"
"$TOOL" mkbucket "$SM" 3 4 32 16 5 4 100 > /dev/null || fail "mkbucket small 32x16x5"
"$VFLOW" run "$PIPE" --run-dir small --set cache="$SM" --set steps=2 --set micro_batches=2 > small.out 2>&1 ||
  fail "small: $(tail -5 small.out)"
grep -q "WARN .*bucket 32x16x5: 3 entries, batch 4: no full batch, its entries are never read" small/run.log ||
  fail "no warning for the bucket without a full batch: $(grep WARN small/run.log)"
grep -q "WARN .*bucket 16x16x1" small/run.log && fail "a warning for a bucket with full batches"
echo "PASS"
