#!/bin/bash
# test_train_ckpt_outcome.sh — a run's outcome includes its checkpoints, through the real
# binary (failures injected with VFLOW_CKPT_FAIL, and a real disk full):
#  - a failed checkpoint that a later one makes good: exit 0, the end-of-run summary
#    lists it, the checkpoint stage's final metrics count it (gauge ckpt_failed);
#  - a failed final checkpoint: exit 1, the message names the newest complete checkpoint
#    and the steps that are not saved;
#  - max_ckpt_failures failures in a row (default 3) stop the run with exit 1 long
#    before its last step, naming the failed steps; 0 lets it train on;
#  - the checkpoint dir on a full filesystem (a 6 MiB tmpfs mounted in a private mount
#    namespace; exit 77 = skipped where that is not allowed, after the rest passed):
#    exit 1 naming the last good checkpoint, ENOSPC in the summary.
# vflow-test: timeout=180
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

COMMON=(--set batch=4 --set stages=2 --set shards=2 --set micro_batches=2 --set lr=2e-3 --set every=2 --set keep=2)

# one failure, made good by the next checkpoint: done, but said
VFLOW_CKPT_FAIL=4 train a "${COMMON[@]}" --set steps=8 || fail "one failed checkpoint: exit $?: $(tail -5 a.out)"
grep -A3 "^  failed (1):" a.out | grep -q "checkpoint: checkpoint of step 4: .*injected write failure" ||
  fail "the summary does not list the failed checkpoint: $(tail -8 a.out)"
"$PY" - a/metrics.jsonl <<'PYEOF' || fail "metrics do not count the failure"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
fin = [r for r in rows if r.get("type") == "final" and r.get("kind") == "checkpoint"]
assert len(fin) == 1 and fin[0]["gauges"]["ckpt_failed"] == 1 and fin[0]["gauges"]["ckpt_failed_in_row"] == 0, fin
assert [r["step"] for r in rows if r.get("event") == "checkpoint_failed"] == [4]
assert [r for r in rows if r.get("type") == "run"][-1]["status"] == "done"
PYEOF
echo "one failed checkpoint (step 4): exit 0, listed in the summary, ckpt_failed = 1"

# the final checkpoint fails: exit 1, naming what is saved and what is not
VFLOW_CKPT_FAIL=8 train b "${COMMON[@]}" --set steps=8
rc=$?
[ $rc -eq 1 ] || fail "failed final checkpoint: exit $rc, expected 1: $(tail -3 b.out)"
grep -q "the final checkpoint (step 8) failed: .*; the newest complete checkpoint is $TMP/b/ckpt/step-6 (step 6): steps 7-8 are not saved" b.out ||
  fail "failed final checkpoint: $(grep 'vflow: stage' b.out)"
grep -q '"type":"run","status":"failed"' b/metrics.jsonl || fail "the run row does not say failed"
echo "failed final checkpoint: exit 1, $(grep -o 'the newest complete checkpoint is [^ ]* (step 6): steps 7-8 are not saved' b.out)"

# three in a row stop the run (default max_ckpt_failures = 3)
VFLOW_CKPT_FAIL=4,6,8 train c "${COMMON[@]}" --set steps=200
rc=$?
[ $rc -eq 1 ] || fail "3 failures in a row: exit $rc, expected 1: $(tail -3 c.out)"
grep -q "3 checkpoints in a row failed (steps 4, 6, 8; max_ckpt_failures = 3).*the newest complete checkpoint is $TMP/c/ckpt/step-2 (step 2): steps 3-8 are not saved" c.out ||
  fail "3 failures in a row: $(grep 'vflow: stage' c.out)"
n=$(steps_done c)
[ "$n" -lt 100 ] || fail "3 failures in a row: the run trained on to step $n"
grep -q "^  failed (3):" c.out || fail "the summary does not list 3 failures"
echo "3 failed checkpoints in a row: exit 1 after $n of 200 steps"

# max_ckpt_failures = 2 stops earlier; 0 never stops (and the final checkpoint is good)
VFLOW_CKPT_FAIL=4,6,8 train d "${COMMON[@]}" --set steps=200 --set checkpoint.max_ckpt_failures=2
[ $? -eq 1 ] && grep -q "2 checkpoints in a row failed (steps 4, 6; max_ckpt_failures = 2)" d.out ||
  fail "max_ckpt_failures = 2: $(grep 'vflow: stage' d.out)"
VFLOW_CKPT_FAIL=4,6,8,10 train e "${COMMON[@]}" --set steps=14 --set checkpoint.max_ckpt_failures=0 ||
  fail "max_ckpt_failures = 0: exit $?: $(tail -3 e.out)"
[ "$("$TOOL" ckpt-find e/ckpt | cut -d' ' -f1)" = 14 ] || fail "max_ckpt_failures = 0: step 14 not saved"
grep -q "^  failed (4):" e.out || fail "max_ckpt_failures = 0: the summary does not list 4 failures"
echo "max_ckpt_failures = 2 stops at the 2nd failure; = 0 trains on through 4 failures"

# a real disk full
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  mkdir small
  unshare -m bash -c "mount -t tmpfs -o size=6m tmpfs '$TMP/small' && \
    '$VFLOW' run '$PIPE' --run-dir f --set cache='$CACHE' ${COMMON[*]} --set steps=6 --set ckpt='$TMP/small/ck' > f.out 2>&1; \
    echo \$? > f.rc" || { echo "SKIP the disk-full part: mount not allowed"; exit 77; }
  [ "$(cat f.rc)" = 1 ] || fail "disk full: exit $(cat f.rc), expected 1: $(tail -5 f.out)"
  grep -q "the final checkpoint (step 6) failed: .*No space left on device.*the newest complete checkpoint is $TMP/small/ck/step-2 (step 2): steps 3-6 are not saved" f.out ||
    fail "disk full: $(grep 'vflow: stage' f.out)"
  grep -A3 "^  failed (2):" f.out | grep -q "checkpoint of step 4: .*No space left" || fail "disk full: summary: $(tail -5 f.out)"
  echo "disk full (6 MiB tmpfs): exit 1, checkpoints 4 and 6 failed with ENOSPC, step 2 named as the newest"
else
  echo "SKIP the disk-full part: not root or no private mount namespace"
  exit 77
fi
echo "PASS"
