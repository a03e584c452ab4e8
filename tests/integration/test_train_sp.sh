#!/bin/bash
# test_train_sp.sh — sequence parallelism in training runs (p:pipeline_parallel{sp = N},
# the `sp` knob of pipelines/train_dit.lua) on the CPU backend, P = 2 partitions, each
# run as N rank processes holding 1/N of every sample's 16 tokens (sp = 3: 6 tokens a
# rank, the last rank 4 and 2 pads). The model has 6 heads (dim 96) so 2 and 3 divide it.
#   - sp = 2 and sp = 3 train bit for bit as sp = 1 does: after 12 steps the weights are
#     the same bytes, and so is every step's loss and gradient norm in the metrics (the
#     sums over tokens run in grains cut at every sp's rank boundaries, their running sums
#     passed from rank to rank: models/dit_red.h);
#   - the same with D = 2 replicas (batch 1 each), with LoRA adapters (on a trained base)
#     and on a bucketed cache (1, 4 and 8 tokens a sample: ranks wholly of pads);
#   - D = 2 replicas of batch 1 agree with one replica of batch 2 within 1e-5 relative
#     (another split of the batch, which adds the samples' sums in another order);
#   - a run of 6 steps resumed to 12 ends bitwise on the uninterrupted sp = 2 weights,
#     and a rank SIGKILLed mid-run fails the run, whose --resume ends on them too;
#   - sp = 4 with 6 heads is refused at check time: exit 2, one line naming both.
# Each sp > 1 run is checked to have spawned its rank processes (dit_1_s1 in the driver's
# spawn trace). Breaking the ranks' token ranges, the loss's share, the grains or the
# passing of the running sums changes the bytes.
# vflow-test: labels=slow timeout=900
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

TOL=1e-5
STEPS=12
MODEL=(--set dim=96 --set heads=6 --set head_dim=16)
COMMON=("${MODEL[@]}" --set steps=$STEPS --set every=6 --set keep=2 --set lr=2e-3 --set stages=2
        --set micro_batches=2 --set batch=2 --set shards=2)

# sp = 4 does not divide 6 heads: refused before anything starts, one line naming both
"$VFLOW" check "$PIPE" --set cache="$CACHE" "${COMMON[@]}" --set sp=4 > bad.out 2>&1
rc=$?
[ $rc -eq 2 ] || fail "sp=4 with 6 heads: exit $rc, expected 2: $(cat bad.out)"
grep -q "sp = 4 does not divide the model's 6 heads" bad.out || fail "sp=4: no line naming both: $(cat bad.out)"
[ "$(grep -c . bad.out)" -eq 1 ] || fail "sp=4: more than one line: $(cat bad.out)"

# same_bits FILE RUN "SP…" ARGS…: trains RUN<sp> with ARGS for each sp, checks that every
# sp > 1 spawned its rank processes and that each run's FILE at the last step is the first
# sp's bytes, its losses and gradient norms too (TRAINF=trainb: on the bucketed cache)
same_bits() {
  local file=$1 run=$2 sps=$3 n want
  shift 3
  for n in $sps; do
    VFLOW_TRACE_SPAWN=$TMP/$run$n.trace ${TRAINF:-train} $run$n "$@" --set sp=$n || fail "$run sp=$n: $(tail -5 $run$n.out)"
    [ "$n" = 1 ] || grep -Eq "stages=dit_1(_r[0-9]+)?_s1( |$)" "$TMP/$run$n.trace" || fail "$run sp=$n: no rank process dit_1_s1"
  done
  want=$(md5sum < "$run${sps%% *}/ckpt/step-$STEPS/$file")
  for n in $sps; do
    # the bytes, and every step's loss and gradient norm as the metrics print them (tolerance 0)
    [ "$(md5sum < "$run$n/ckpt/step-$STEPS/$file")" = "$want" ] &&
      VF_COMPARE_FILE=$file "$PY" "$SRC/tests/integration/train_compare.py" 0 $STEPS $run${sps%% *} $run$n \
        > $run$n.cmp || fail "$run: sp=$n differs from sp=${sps%% *}: $(cat $run$n.cmp)"
  done
}
same_bits model.safetensors sp "1 2 3" "${COMMON[@]}"
echo "sp = 1, 2, 3: the same bytes"
train sp3b "${COMMON[@]}" --set sp=3 || fail "sp=3 again: $(tail -5 sp3b.out)"
[ "$(model_md5 sp3 $STEPS)" = "$(model_md5 sp3b $STEPS)" ] || fail "sp=3 twice: the weights differ"

# replicas: D = 2 of batch 1, sp = 1, 2, 3; and against one replica of batch 2
R=("${MODEL[@]}" --set steps=$STEPS --set every=0 --set lr=2e-3 --set stages=2 --set micro_batches=1 --set shards=3)
same_bits model.safetensors r "1 2 3" "${R[@]}" --set batch=1 --set replicas=2
train r0 "${R[@]}" --set batch=2 || fail "D=1: $(tail -5 r0.out)"
"$PY" "$SRC/tests/integration/train_compare.py" $TOL $STEPS r0 r2 || fail "D=2 sp=2 differs from D=1"

# LoRA adapters on a frozen base: sp1's trained weights (the seeded init's head is zero,
# which would leave the adapters without gradients)
L=("${COMMON[@]}" --set lora_rank=4 --set weights="$TMP/sp1/ckpt/step-$STEPS/model.safetensors")
same_bits lora.safetensors l "1 2 3" "${L[@]}"
grep '"event":"train_step"' l2/metrics.jsonl | grep -q '"grad_norm":0,' && fail "LoRA: a step without gradients"

# buckets: 1, 4 and 8 tokens a sample (sp = 3: ranks that hold pads only)
make_buckets
B=("${MODEL[@]}" --set steps=$STEPS --set every=0 --set lr=2e-3 --set stages=2 --set micro_batches=2)
TRAINF=trainb same_bits model.safetensors b "1 2 3" "${B[@]}"
echo "replicas, LoRA, buckets: sp = 1, 2, 3 give the same bytes"

# resume: 6 steps, then --resume to 12, bitwise the uninterrupted sp = 2 run
want=$(model_md5 sp2 $STEPS)
H=("${COMMON[@]}" --set sp=2)
train half "${H[@]}" --set steps=6 || fail "6 steps: $(tail -5 half.out)"
train half "${H[@]}" --resume || fail "resume: $(tail -5 half.out)"
[ "$(model_md5 half $STEPS)" = "$want" ] || fail "resumed sp=2 weights differ from the uninterrupted run's"

# kill: rank 1 of partition 1 SIGKILLed after a few steps; the run fails, --resume ends on
# the uninterrupted bits
why=$(train_kill kill dit_1_s1 7 "${H[@]}") || fail "kill: $why"
# the driver's report of the signal, or the partner rank's all-to-all naming the dead one
grep -Eq 'SIGKILL|rank 1 \(pid [0-9]+\) is gone' kill.out || fail "kill: the killed rank is not reported: $(tail -5 kill.out)"
train kill "${H[@]}" --resume || fail "kill: resume: $(tail -5 kill.out)"
[ "$(model_md5 kill $STEPS)" = "$want" ] || fail "kill: resumed weights differ from the uninterrupted run's"
echo "PASS"
