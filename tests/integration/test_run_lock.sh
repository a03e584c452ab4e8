#!/bin/bash
# test_run_lock.sh — one run per run dir, through the real binary. While a training run
# A holds its run dir:
#  - a second run in the same run dir exits 2 naming A's pid and host, starts no worker,
#    and leaves A's run.log and metrics.jsonl alone;
#  - a run in another run dir whose checkpoint dir is A's exits 2 the same way; so does
#    one that shares A2's checkpoint dir outside both run dirs;
#  - SIGKILL of A's driver (its workers die with it) leaves run.lock naming it; the
#    `--resume` of A takes the stale lock over, says so in run.log, and ends bitwise where
#    an uninterrupted run ends; no run.lock is left after a run.
# vflow-test: timeout=240
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

STEPS=300
COMMON=(--set batch=4 --set stages=2 --set shards=2 --set micro_batches=2 --set lr=2e-3 --set every=10 --set keep=2
        --set steps=$STEPS)
HOST=$(hostname)

# wait_steps DIR N PID: until DIR's metrics show N steps (fails if PID ended first)
wait_steps() {
  for i in $(seq 1 6000); do
    [ "$(steps_done "$1")" -ge "$2" ] && return 0
    kill -0 "$3" 2>/dev/null || fail "run $1 ended before step $2: $(tail -3 "$1.out")"
    sleep 0.01
  done
  fail "run $1 did not reach step $2"
}

"$VFLOW" run "$PIPE" --run-dir a --set cache="$CACHE" "${COMMON[@]}" > a.out 2>&1 &
apid=$!
"$VFLOW" run "$PIPE" --run-dir a2 --set cache="$CACHE" "${COMMON[@]}" --set ckpt="$TMP/shared" > a2.out 2>&1 &
a2pid=$!
# a failed check must not leave the background runs writing into the removed temp dir
trap 'kill -9 $apid $a2pid 2>/dev/null; wait 2>/dev/null; cleanup' EXIT
wait_steps a 12 $apid
wait_steps a2 2 $a2pid
grep -q "^pid=$apid host=$HOST " a/run.lock || fail "a/run.lock does not name the driver: $(cat a/run.lock)"
log_before=$(head -1 a/run.log)

# the same run dir
VFLOW_TRACE_SPAWN=$TMP/trace_b "$VFLOW" run "$PIPE" --run-dir a --set cache="$CACHE" "${COMMON[@]}" > b.out 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a second run in the same run dir: exit $rc, expected 2: $(tail -3 b.out)"
grep -q "run dir $TMP/a is in use by another run (pid $apid on host $HOST" b.out || fail "the holder is not named: $(cat b.out)"
[ -e trace_b ] && fail "the refused run started workers: $(cat trace_b)"
[ "$(head -1 a/run.log)" = "$log_before" ] || fail "the refused run truncated a/run.log"
echo "same run dir: exit 2, $(grep -o 'in use by another run ([^;]*' b.out)"

# another run dir, A's checkpoint dir (inside A's run dir)
"$VFLOW" run "$PIPE" --run-dir c --set cache="$CACHE" "${COMMON[@]}" --set ckpt="$TMP/a/ckpt" > c.out 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a run writing A's checkpoint dir: exit $rc, expected 2: $(tail -3 c.out)"
grep -q "$TMP/a/ckpt is in use by another run (pid $apid on host $HOST" c.out || fail "c: holder not named: $(cat c.out)"
[ -e c/run.lock ] && fail "the refused run c left its run.lock"
# another run dir, a checkpoint dir outside both
"$VFLOW" run "$PIPE" --run-dir d --set cache="$CACHE" "${COMMON[@]}" --set ckpt="$TMP/shared" > d.out 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a run sharing A2's checkpoint dir: exit $rc, expected 2: $(tail -3 d.out)"
grep -q "$TMP/shared is in use by another run (pid $a2pid on host $HOST" d.out || fail "d: holder not named: $(cat d.out)"
echo "checkpoint dirs: exit 2 for A's own and for a shared one outside both run dirs"
kill $a2pid
wait $a2pid

# SIGKILL of A's driver: a stale lock, taken over by the resume
exec 3>&2 2>/dev/null  # no "Killed" job notice
kill -9 $apid
wait $apid
exec 2>&3 3>&-
for i in $(seq 1 500); do  # the workers follow their driver (PR_SET_PDEATHSIG)
  pgrep -f -- "--run-dir $TMP/a " > /dev/null || break
  sleep 0.01
done
[ -e a/run.lock ] || fail "the killed run left no run.lock (test premise)"
train a "${COMMON[@]}" --resume || fail "resume after the driver was killed: $(tail -5 a.out)"
grep -q "WARN.*took over the lock of $TMP/a left by a run that ended without releasing it (pid $apid on host $HOST" a/run.log ||
  fail "the stale lock is not reported: $(grep -i lock a/run.log)"
grep -q "took over the lock of $TMP/a/ckpt" a/run.log || fail "the checkpoint dir's stale lock is not reported"
grep -q "resuming from $TMP/a/ckpt/step-" a/run.log || fail "the run did not resume"
[ -e a/run.lock ] || [ -e a/ckpt/run.lock ] && fail "a run.lock is left after the run"
train ref "${COMMON[@]}" || fail "reference: $(tail -5 ref.out)"
[ "$(model_md5 a $STEPS)" = "$(model_md5 ref $STEPS)" ] || fail "resumed weights differ from the uninterrupted run"
echo "driver killed: the resume took the stale lock over and ended bitwise as the uninterrupted run"
echo "PASS"
