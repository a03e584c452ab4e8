#!/bin/bash
# test_train_offload.sh — activation offload (`offload_activations` of the dit partitions,
# README "Activation offload") on the CPU backend, where the partition's copy queue is a
# thread and the pinned host store plain memory:
#  - a full fine-tune of 6 blocks, 8 steps: with the block inputs (and kept self-attention
#    results) copied out after each block's forward and back ahead of its backward, the
#    weights are BITWISE those of the run without offload (nor recompute), for P ∈ {1, 2}
#    partitions, M ∈ {1, 2} micro-batches, S ∈ {1, 2} shards, recompute with and without
#    recompute_attention;
#  - LoRA with block swap and activation offload together: adapters bitwise those without;
#  - offload without recompute is refused at check time (exit 2, naming both knobs).
# vflow-test: timeout=600
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

lora_md5() { md5sum < "$1/ckpt/step-$2/lora.safetensors" | cut -d' ' -f1; }

STEPS=8
FULL=(--set depth=6 --set steps=$STEPS --set every=0 --set batch=4 --set lr=2e-3)
for m in 1 2; do
  train ref$m "${FULL[@]}" --set stages=1 --set shards=1 --set micro_batches=$m || fail "without offload: $(tail -5 ref$m.out)"
  echo "full fine-tune without offload, M=$m: $(model_md5 ref$m $STEPS)"
done
# P S M recompute_attention
for c in "1 1 1 false" "1 1 2 true" "2 1 2 false" "2 2 1 true" "2 2 2 true"; do
  set -- $c
  ref=$(model_md5 ref$3 $STEPS)
  d=p$1s$2m$3a$4
  train $d "${FULL[@]}" --set stages=$1 --set shards=$2 --set micro_batches=$3 --set recompute=true \
    --set recompute_attention=$4 --set offload_activations=true || fail "offload P=$1 S=$2 M=$3: $(tail -5 $d.out)"
  h=$(model_md5 $d $STEPS)
  echo "offload P=$1 S=$2 M=$3 recompute_attention=$4: $h"
  [ "$h" = "$ref" ] || fail "offload P=$1 S=$2 M=$3 recompute_attention=$4: weights differ from the run without offload ($h vs $ref)"
done

# LoRA on the full run's weights: swap and offload together against neither
BASE=$TMP/ref1/ckpt/step-$STEPS/model.safetensors
LORA=(--set depth=6 --set weights="$BASE" --set lora_rank=4 --set lora_alpha=8 --set batch=4 --set lr=5e-3
      --set steps=$STEPS --set every=0 --set micro_batches=2)
train lref "${LORA[@]}" --set stages=1 || fail "LoRA without offload: $(tail -5 lref.out)"
train lboth "${LORA[@]}" --set stages=2 --set swap_blocks=1 --set recompute=true --set offload_activations=true \
  || fail "LoRA with swap and offload: $(tail -5 lboth.out)"
a=$(lora_md5 lref $STEPS) b=$(lora_md5 lboth $STEPS)
echo "LoRA: $a without, $b with swap_blocks=1 and offload"
[ "$a" = "$b" ] || fail "LoRA with swap and offload: adapters differ from the run without ($b vs $a)"

"$VFLOW" check "$PIPE" --set cache="$CACHE" --set depth=6 --set offload_activations=true > norc.out 2>&1
rc=$?
[ $rc = 2 ] || fail "offload without recompute: exit $rc, want 2 ($(tail -3 norc.out))"
grep -q "offload_activations needs recompute = true" norc.out || fail "offload without recompute: $(tail -3 norc.out)"
echo "refused: $(grep -m1 -o 'dit partition.*' norc.out | cut -c1-90)…"
echo "ok"
