#!/bin/bash
# test_train_kill_matrix.sh — SIGKILL at seeded random moments, each case resumed and
# compared BITWISE with an uninterrupted run: 24 cases over every process kind of a
# training run (the reader, both pipeline partitions, both optimizer shards, the
# checkpoint writer, and the driver itself), three of them timed to land while a
# checkpoint is being committed (a step-N.tmp dir exists), four in the middle of a
# snapshot's stream (the writer, or a shard, killed with part of a step's chunks written:
# ~60 small chunks a shard, each write held 5 ms), after which --resume must take the
# previous complete checkpoint and never the torn one. (A shard whose last chunk had
# already left when it was killed may see the writer complete that step: resume then
# takes it, whole and verified, and the case says so.)
#
# Each case kills after the first complete checkpoint, at a step drawn from the seed
# (so `--resume` always has a checkpoint to find), checks the killed run fails (or, for
# the driver, that every worker of the run is gone within 10 s: nothing is orphaned),
# resumes with the same arguments, and compares the final model.safetensors with the
# uninterrupted run's. It prints the figure (e.g. "24/24 resumed bitwise").
# vflow-test: labels=slow timeout=900
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

STEPS=40
COMMON=(--set steps=$STEPS --set every=4 --set keep=2 --set batch=4 --set stages=2 --set shards=2
        --set micro_batches=2 --set lr=2e-3)
train ref "${COMMON[@]}" || fail "reference run: $(tail -5 ref.out)"
want=$(model_md5 ref $STEPS)
echo "uninterrupted: $want"

kinds=(latent_reader dit_0 dit_1 adamw_0 adamw_1 checkpoint driver)
ok=0
cases=24
for seed in $(seq 1 $cases); do
  RANDOM=$((seed * 7919))
  kind=${kinds[$(((seed - 1) % ${#kinds[@]}))]}
  commit=0
  stream=()
  chunk_hold=0
  unset first
  # three cases kill the checkpoint writer while a commit is in flight
  case $seed in 6|13|20) kind=checkpoint; commit=1 ;; esac
  # four kill while a step's snapshot streams in (~60 chunks a shard, 5 ms each)
  case $seed in
    21|24) kind=checkpoint ;;
    22) kind=adamw_0 ;;
    23) kind=adamw_1 ;;
  esac
  if [ $seed -gt 20 ]; then commit=1; stream=(--set ckpt_chunk=24000); chunk_hold=5; fi
  at=$((5 + RANDOM % 30))
  run=k$seed
  rm -f "trace$seed"
  # the commit cases hold each commit 300 ms half written (the data are unchanged), so the
  # kill finds a step-N.tmp however fast the machine commits
  hold=0
  [ $commit = 1 ] && hold=300
  [ $seed -gt 20 ] && hold=0
  VFLOW_CKPT_COMMIT_HOLD_MS=$hold VFLOW_CKPT_CHUNK_HOLD_MS=$chunk_hold VFLOW_TRACE_SPAWN=$TMP/trace$seed \
    "$VFLOW" run "$PIPE" --run-dir "$run" --set cache="$CACHE" "${COMMON[@]}" "${stream[@]}" > "$run.out" 2>&1 &
  vpid=$!
  pid=""
  for i in $(seq 1 6000); do
    kill -0 $vpid 2>/dev/null || break
    if [ "$kind" = driver ]; then pid=$vpid
    elif [ -z "$pid" ]; then pid=$(awk -v v="stages=$kind" '$3 == v {sub("pid=", "", $1); print $1}' "trace$seed" 2>/dev/null)
    fi
    if [ -n "$pid" ] && [ "$(steps_done $run)" -ge $at ] && ls -d "$run"/ckpt/step-*[0-9] >/dev/null 2>&1; then  # a complete one: not step-N.tmp
      cur=$(ls -d "$run"/ckpt/step-*.tmp 2>/dev/null | tail -1)
      # mid-stream cases wait for the next stream to begin, so the kill lands near its start
      [ $seed -gt 20 ] && [ -z "${first+x}" ] && first=$cur
      if [ $commit = 0 ] || { [ -n "$cur" ] && { [ $seed -le 20 ] || [ "$cur" != "$first" ]; }; }; then break; fi
    fi
    sleep 0.005
  done
  [ -n "$pid" ] || fail "case $seed: no process for $kind: $(tail -5 $run.out)"
  # the step streaming when the kill lands (taken before it: a writer that survives a
  # shard's death removes its step-N.tmp as the run stops)
  torn=$(ls -d "$run"/ckpt/step-*.tmp 2>/dev/null | sed 's/.*step-\([0-9]*\)\.tmp/\1/' | sort -n | tail -1)
  kill -9 "$pid" 2>/dev/null || fail "case $seed: $kind (pid $pid) already gone: the run ended before step $at"
  killed_at=$(steps_done $run)
  tmp_seen=$(ls -d "$run"/ckpt/*.tmp 2>/dev/null | wc -l)
  wait $vpid
  rc=$?
  if [ "$kind" = driver ]; then
    # the driver is gone: its workers must notice and exit on their own
    for i in $(seq 1 100); do
      alive=0
      for w in $(awk '{sub("pid=", "", $1); print $1}' "trace$seed"); do
        kill -0 "$w" 2>/dev/null && alive=$((alive + 1))
      done
      [ $alive = 0 ] && break
      sleep 0.1
    done
    [ $alive = 0 ] || fail "case $seed: $alive workers outlived the killed driver by 10 s"
  else
    [ $rc -ne 0 ] || fail "case $seed: the run succeeded although $kind was killed"
  fi
  from=$("$TOOL" ckpt-find "$run/ckpt" 2>/dev/null | cut -d' ' -f1)
  left=$(ls -d "$run"/ckpt/step-*.tmp 2>/dev/null | wc -l)
  leftover=$(ls -d "$run"/ckpt/step-*.tmp 2>/dev/null | tail -1)
  whole=""
  if [ $seed -gt 20 ]; then
    # a torn stream: a step-N.tmp with part of the step's chunks (a writer still alive
    # removes it as the run stops; a killed one leaves it); resume takes the newest
    # complete step, which is older than the torn one, unless a killed shard had sent
    # all of its chunks and the writer completed the step
    [ -n "$torn" ] || fail "case $seed: no step-N.tmp when $kind was killed mid-stream"
    [ -n "$from" ] || fail "case $seed: no complete checkpoint to resume from (torn step $torn)"
    if [ "$from" -ge "$torn" ]; then
      case $kind in
        adamw_*) [ "$from" = "$torn" ] || fail "case $seed: resume would take step $from, after the torn step $torn"
                 whole=", its last chunk had left: step $torn completed" ;;
        *) fail "case $seed: resume would take step $from, torn step $torn" ;;
      esac
    fi
  fi
  train "$run" "${COMMON[@]}" "${stream[@]}" --resume || fail "case $seed ($kind): resume: $(tail -5 $run.out)"
  if [ $seed -gt 20 ]; then
    grep -q "resuming from .*step-$from " "$run/run.log" || fail "case $seed: the resume did not continue from step $from"
    if [ -n "$leftover" ]; then
      grep -q "removing the incomplete .*$(basename "$leftover")" "$run/run.log" ||
        fail "case $seed: the torn $(basename "$leftover") was not removed"
    fi
  fi
  got=$(model_md5 "$run" $STEPS)
  ls -d "$run"/ckpt/*.tmp >/dev/null 2>&1 && fail "case $seed ($kind): a .tmp dir is left after the resume"
  if [ "$got" = "$want" ]; then
    ok=$((ok + 1))
    what=""
    [ $commit = 1 ] && what=" during a commit ($tmp_seen .tmp)"
    [ $seed -gt 20 ] && what=" mid-stream (step-$torn.tmp torn, $left left$whole)"
    echo "case $seed: SIGKILL $kind after step $killed_at$what, resumed from ${from:-?}: bitwise"
  else
    fail "case $seed: SIGKILL $kind after step $killed_at, resumed from ${from:-?}: weights $got differ from $want"
  fi
done
echo "$ok/$cases resumed bitwise"
[ $ok = $cases ] || fail "$ok/$cases"
echo "PASS"
