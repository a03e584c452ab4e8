#!/bin/bash
# test_train_resume.sh — SIGKILL of one training worker (a pipeline partition, an optimizer
# shard or the checkpoint writer, each a process of its own) at a random step, then
# `vflow run … --resume`: the final weights are BITWISE those of an uninterrupted run.
# Five seeds, one victim kind each (dit_1, adamw_1, checkpoint, dit_0, adamw_0), killed
# after a random number of observed steps (a kill can land mid-checkpoint: the writer
# then leaves a .tmp, which is never read). The killed run must fail and name the
# signal; the resumed run continues from the newest complete checkpoint (or, with
# --resume=auto, from step 0 when none was written yet), replays the reader to the
# checkpoint's data cursor across epoch boundaries, and leaves no .tmp behind. Then the
# same with D = 2 data-parallel replicas (a replica's partition killed), and with SIGINT
# to the driver (a drain: the shards snapshot the last finished step). A resume of a finished run trains nothing.
# vflow-test: timeout=300
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

STEPS=40
COMMON=(--set steps=$STEPS --set every=4 --set keep=2 --set batch=4 --set stages=2 --set shards=2
        --set micro_batches=2 --set lr=2e-3)
train ref "${COMMON[@]}" || fail "reference run: $(tail -5 ref.out)"
want=$(model_md5 ref $STEPS)
echo "uninterrupted: $want"

victims=(dit_1 adamw_1 checkpoint dit_0 adamw_0)
for seed in 1 2 3 4 5; do
  victim=${victims[$((seed - 1))]}
  RANDOM=$seed
  at=$((2 + RANDOM % 16))  # of 40 steps: room for the metrics rows to lag behind
  run=kill$seed
  rm -f "trace$seed"
  VFLOW_TRACE_SPAWN=$TMP/trace$seed "$VFLOW" run "$PIPE" --run-dir "$run" --set cache="$CACHE" "${COMMON[@]}" \
    > "$run.out" 2>&1 &
  vpid=$!
  pid=""
  for i in $(seq 1 3000); do
    [ -z "$pid" ] && pid=$(awk -v v="stages=$victim" '$3 == v {sub("pid=", "", $1); print $1}' "trace$seed" 2>/dev/null)
    [ -n "$pid" ] && [ "$(steps_done $run)" -ge $at ] && break
    kill -0 $vpid 2>/dev/null || break
    sleep 0.01
  done
  [ -n "$pid" ] || fail "seed $seed: no worker for $victim in the spawn trace: $(tail -5 $run.out)"
  kill -9 "$pid" 2>/dev/null || fail "seed $seed: $victim (pid $pid) already gone: the run ended before step $at"
  killed_at=$(steps_done $run)
  wait $vpid
  rc=$?
  [ $rc -ne 0 ] || fail "seed $seed: the run succeeded although $victim was killed"
  grep -q "SIGKILL" "$run.out" || fail "seed $seed: the killed worker is not reported: $(tail -5 $run.out)"
  from=$("$TOOL" ckpt-find "$run/ckpt" 2>/dev/null | cut -d' ' -f1)
  echo "seed $seed: killed $victim after step $killed_at (exit $rc); newest complete checkpoint: ${from:-none}"
  mode=--resume
  [ -n "$from" ] || mode=--resume=auto  # killed before the first checkpoint: start over
  train "$run" "${COMMON[@]}" $mode || fail "seed $seed: resume: $(tail -5 $run.out)"
  got=$(model_md5 "$run" $STEPS)
  [ "$got" = "$want" ] || fail "seed $seed: resumed weights $got differ from the uninterrupted $want"
  ls -d "$run"/ckpt/*.tmp 2>/dev/null && fail "seed $seed: a .tmp dir is left"
  if [ -n "$from" ]; then
    grep -q "resuming at step $from" "$run/run.log" || fail "seed $seed: the shards did not resume at $from"
    grep -q "resumed the data at cursor" "$run/run.log" || fail "seed $seed: the reader was not replayed"
  fi
done

# D = 2 replicas: a replica's partition killed, the resume replays both readers
COMMON2=("${COMMON[@]}" --set replicas=2)
train ref2 "${COMMON2[@]}" || fail "reference run with 2 replicas: $(tail -5 ref2.out)"
rm -f trace6
VFLOW_TRACE_SPAWN=$TMP/trace6 "$VFLOW" run "$PIPE" --run-dir kill6 --set cache="$CACHE" "${COMMON2[@]}" > kill6.out 2>&1 &
vpid=$!
pid=""
for i in $(seq 1 3000); do
  [ -z "$pid" ] && pid=$(awk '$3 == "stages=dit_0_r1" {sub("pid=", "", $1); print $1}' trace6 2>/dev/null)
  [ -n "$pid" ] && [ "$(steps_done kill6)" -ge 13 ] && break
  kill -0 $vpid 2>/dev/null || break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null || fail "replicas: dit_0_r1 already gone"
wait $vpid && fail "replicas: the run succeeded although dit_0_r1 was killed"
train kill6 "${COMMON2[@]}" --resume || fail "replicas: resume: $(tail -5 kill6.out)"
[ "$(model_md5 kill6 $STEPS)" = "$(model_md5 ref2 $STEPS)" ] || fail "replicas: resumed weights differ"
[ "$(grep -c 'resumed the data at cursor' kill6/run.log)" = 2 ] || fail "replicas: both readers must be replayed"
echo "replicas: killed dit_0_r1 after step 13, resumed bitwise"

# SIGINT (drain): the shards snapshot the last finished step, the run exits 1 as
# interrupted, and --resume continues from that step bitwise (no checkpoint interval hit)
"$VFLOW" run "$PIPE" --run-dir int --set cache="$CACHE" "${COMMON[@]}" --set every=100 > int.out 2>&1 &
vpid=$!
for i in $(seq 1 3000); do
  [ "$(steps_done int)" -ge 10 ] && break
  kill -0 $vpid 2>/dev/null || break
  sleep 0.01
done
kill -INT $vpid || fail "SIGINT: the run ended before step 10"
wait $vpid && fail "SIGINT: the run exited 0"
grep -q "interrupted by SIGINT" int.out || fail "SIGINT: not reported: $(tail -3 int.out)"
stopped=$("$TOOL" ckpt-find int/ckpt | cut -d' ' -f1)
[ -n "$stopped" ] && [ "$stopped" -ge 10 ] || fail "SIGINT: no checkpoint of the last step (found '${stopped}')"
train int "${COMMON[@]}" --set every=100 --resume || fail "SIGINT: resume: $(tail -5 int.out)"
[ "$(model_md5 int $STEPS)" = "$want" ] || fail "SIGINT: resumed weights differ"
echo "SIGINT after step $stopped: final checkpoint written, resumed bitwise"

# resuming a finished run: nothing to train, weights untouched
train kill1 "${COMMON[@]}" --resume || fail "resume of a finished run: $(tail -5 kill1.out)"
grep -q "nothing to train" kill1/run.log || fail "resume of a finished run trained again"
[ "$(model_md5 kill1 $STEPS)" = "$want" ] || fail "resume of a finished run changed the weights"
echo "PASS"
