#!/bin/bash
# test_train_sp.sh — sequence parallelism in training runs (p:pipeline_parallel{sp = N},
# the `sp` knob of pipelines/train_dit.lua) on the CPU backend, P = 2 partitions, each
# run as N rank processes holding 1/N of every sample's 16 tokens (sp = 3: 6 tokens a
# rank, the last rank 4 and 2 pads). The model has 6 heads (dim 96) so 2 and 3 divide it.
#   - sp = 2 and sp = 3 train as sp = 1 does: after 12 steps the weights, and every
#     step's loss and gradient norm, agree with sp = 1 within 1e-5 relative. Not to the
#     bit: a rank's weight gradients are sums over its own tokens, which the shards add
#     rank after rank, another order of the same sums (measured below 1e-6).
#   - each sp is deterministic: sp = 3 run twice gives bitwise the same weights;
#   - with D = 2 replicas (batch 1 each) sp = 2 agrees with one replica of batch 2;
#   - with LoRA adapters (on a trained base) sp = 2 agrees with sp = 1;
#   - on a bucketed cache (1, 4 and 8 tokens a sample: ranks wholly of pads) sp = 3
#     agrees with sp = 1;
#   - a run of 6 steps resumed to 12 ends bitwise on the uninterrupted sp = 2 weights,
#     and a rank SIGKILLed mid-run fails the run, whose --resume ends on them too;
#   - sp = 4 with 6 heads is refused at check time: exit 2, one line naming both.
# Breaking the ranks' token ranges, the loss's share or the shards' sum over the ranks
# fails the comparisons (each pad or missing token moves the loss by far more than 1e-5).
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

for n in 1 2 3; do
  train sp$n "${COMMON[@]}" --set sp=$n || fail "sp=$n: $(tail -5 sp$n.out)"
done
"$PY" "$SRC/tests/integration/train_compare.py" $TOL $STEPS sp1 sp2 sp3 || fail "sp = 2, 3 differ from sp = 1"
train sp3b "${COMMON[@]}" --set sp=3 || fail "sp=3 again: $(tail -5 sp3b.out)"
[ "$(model_md5 sp3 $STEPS)" = "$(model_md5 sp3b $STEPS)" ] || fail "sp=3 twice: the weights differ"
[ "$(model_md5 sp1 $STEPS)" != "$(model_md5 sp2 $STEPS)" ] || fail "sp=2 gave sp=1's bits: no SP ran?"
echo "sp = 1, 2, 3 agree within $TOL; sp = 3 is deterministic"

# replicas: D = 2 of batch 1 with sp = 2 against one replica of batch 2
R=("${MODEL[@]}" --set steps=$STEPS --set every=0 --set lr=2e-3 --set stages=2 --set micro_batches=1 --set shards=3)
train r1 "${R[@]}" --set batch=2 || fail "D=1: $(tail -5 r1.out)"
train r2 "${R[@]}" --set batch=1 --set replicas=2 --set sp=2 || fail "D=2 sp=2: $(tail -5 r2.out)"
"$PY" "$SRC/tests/integration/train_compare.py" $TOL $STEPS r1 r2 || fail "D=2 sp=2 differs from D=1"

# LoRA adapters on a frozen base: sp1's trained weights (the seeded init's head is zero,
# which would leave the adapters without gradients)
L=("${COMMON[@]}" --set lora_rank=4 --set weights="$TMP/sp1/ckpt/step-$STEPS/model.safetensors")
train l1 "${L[@]}" || fail "LoRA sp=1: $(tail -5 l1.out)"
train l2 "${L[@]}" --set sp=2 || fail "LoRA sp=2: $(tail -5 l2.out)"
VF_COMPARE_FILE=lora.safetensors "$PY" "$SRC/tests/integration/train_compare.py" $TOL $STEPS l1 l2 ||
  fail "LoRA: sp=2 differs from sp=1"
grep '"event":"train_step"' l2/metrics.jsonl | grep -q '"grad_norm":0,' && fail "LoRA: a step without gradients"

# buckets: 1, 4 and 8 tokens a sample (sp = 3: ranks that hold pads only)
make_buckets
B=("${MODEL[@]}" --set steps=$STEPS --set every=0 --set lr=2e-3 --set stages=2 --set micro_batches=2)
trainb b1 "${B[@]}" || fail "buckets sp=1: $(tail -5 b1.out)"
trainb b3 "${B[@]}" --set sp=3 || fail "buckets sp=3: $(tail -5 b3.out)"
"$PY" "$SRC/tests/integration/train_compare.py" $TOL $STEPS b1 b3 || fail "buckets: sp=3 differs from sp=1"

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
