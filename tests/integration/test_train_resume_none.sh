#!/bin/bash
# test_train_resume_none.sh — `--resume` means resume, through the real binary:
#  - nothing to resume from where the run looks (<run dir>/ckpt, or the dir `--set ckpt=`
#    names): exit 2, the message names that directory, no training step runs and no
#    checkpoint is written;
#  - `--resume=auto` there starts from step 0 with a WARN that says so;
#  - a resumed run says in run.log which checkpoint (path and step) it continues from,
#    with `--resume` and with `--resume=auto`, and ends where an uninterrupted run ends.
# vflow-test: timeout=120
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

COMMON=(--set batch=4 --set stages=2 --set shards=2 --set micro_batches=2 --set lr=2e-3 --set every=2 --set keep=2)

# nothing there: refused, naming the directory it looked in
train none "${COMMON[@]}" --set steps=6 --resume
rc=$?
[ $rc -eq 2 ] || fail "--resume with no checkpoint: exit $rc, expected 2: $(tail -3 none.out)"
grep -q "no complete checkpoint.*$TMP/none/ckpt" none.out || fail "the directory is not named: $(tail -3 none.out)"
[ "$(steps_done none)" = 0 ] || fail "--resume with no checkpoint trained $(steps_done none) steps"
ls -d none/ckpt/step-* 2>/dev/null && fail "--resume with no checkpoint wrote a checkpoint"
echo "--resume, nothing in none/ckpt: exit 2, $(grep -o 'no complete checkpoint[^;]*' none.out | head -1)"

# the same with the checkpoint dir elsewhere: that directory is the one named
mkdir elsewhere
train none2 "${COMMON[@]}" --set steps=6 --set ckpt="$TMP/elsewhere/ck" --resume
rc=$?
[ $rc -eq 2 ] || fail "--resume with ckpt=elsewhere: exit $rc, expected 2: $(tail -3 none2.out)"
grep -q "no complete checkpoint.*$TMP/elsewhere/ck" none2.out || fail "ckpt=elsewhere not named: $(tail -3 none2.out)"
[ "$(steps_done none2)" = 0 ] || fail "--resume with ckpt=elsewhere trained"

# --resume=auto: starts from step 0, loudly
train auto "${COMMON[@]}" --set steps=6 --resume=auto || fail "--resume=auto on a new run dir: $(tail -5 auto.out)"
grep -q "WARN.*--resume=auto: .*auto/ckpt has no step dir: the run starts from step 0" auto/run.log ||
  fail "--resume=auto: no WARN about starting from step 0: $(grep -i resum auto/run.log)"
[ "$(steps_done auto)" = 6 ] || fail "--resume=auto trained $(steps_done auto) of 6 steps"

# an uninterrupted reference, and resumes that log where they continue from
train ref "${COMMON[@]}" --set steps=10 || fail "reference: $(tail -5 ref.out)"
train auto "${COMMON[@]}" --set steps=8 --resume || fail "--resume: $(tail -5 auto.out)"
grep -q "resuming from $TMP/auto/ckpt/step-6 (step 6)" auto/run.log ||
  fail "the resumed run does not say where it continues from: $(grep -i resum auto/run.log)"
grep -q "resuming at step 6 from $TMP/auto/ckpt/step-6" auto/run.log || fail "the shards do not say it"
train auto "${COMMON[@]}" --set steps=10 --resume=auto || fail "--resume=auto over a checkpoint: $(tail -5 auto.out)"
grep -q "resuming from $TMP/auto/ckpt/step-8 (step 8)" auto/run.log || fail "--resume=auto did not resume from step 8"
[ "$(model_md5 auto 10)" = "$(model_md5 ref 10)" ] || fail "resumed twice: weights differ from the uninterrupted run"
echo "resumed from step 6 and from step 8 (--resume=auto): bitwise the uninterrupted run"

# a misspelt mode is bad usage
"$VFLOW" run "$PIPE" --run-dir bad --set cache="$CACHE" --resume=yes > bad.out 2>&1
[ $? -eq 2 ] || fail "--resume=yes was accepted"
echo "PASS"
