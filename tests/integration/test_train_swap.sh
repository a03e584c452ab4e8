#!/bin/bash
# test_train_swap.sh — block swap (`swap_blocks` of the dit partitions, README "Block swap")
# on the CPU backend, where the partition's copy queue is a thread:
#  - LoRA on a frozen base (a model of 6 blocks trained 8 steps in full first): with K
#    blocks of each partition swapped the adapters after 8 steps are BITWISE those without
#    swap, for P ∈ {1, 2} partitions × S ∈ {1, 2} shards, micro-batches, and recompute;
#  - each swapped partition's metrics report its copies (swap rows, copy_s > 0);
#  - with the base in FP8 (fp8_base) the swapped blocks' FP8 bytes stream instead: the
#    adapters are bitwise those of the FP8 base without swap, for P ∈ {1, 2}, M = 2;
#  - a full fine-tune (every weight trained: the swapped blocks' gradients come in with
#    their weights in the backward and go back to the host after each block's backward;
#    the shards update the host copy in place): the model after 8 steps is BITWISE the
#    one trained without swap, for P ∈ {1, 2} partitions, S = 2 shards, M = 2
#    micro-batches, with and without recompute, and with a shard boundary inside the
#    swapped blocks (S = 3), with D = 2 replicas, and resumed from a checkpoint;
#  - K not below the partition's blocks is refused at check time (exit 2, both numbers).
# vflow-test: timeout=600
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

lora_md5() { md5sum < "$1/ckpt/step-$2/lora.safetensors" | cut -d' ' -f1; }

train base --set depth=6 --set steps=8 --set every=0 --set batch=4 --set lr=2e-3 --set stages=1 \
  || fail "base: $(tail -5 base.out)"
BASE=$TMP/base/ckpt/step-8/model.safetensors
[ -f "$BASE" ] || fail "no base model"

STEPS=8
LORA=(--set depth=6 --set weights="$BASE" --set lora_rank=4 --set lora_alpha=8 --set batch=4 --set lr=5e-3
      --set steps=$STEPS --set every=0)
# the references, without swap: M = 1 and M = 2 micro-batches (a different sum order)
for m in 1 2; do
  train ref$m "${LORA[@]}" --set stages=1 --set shards=1 --set micro_batches=$m || fail "LoRA without swap: $(tail -5 ref$m.out)"
  echo "LoRA without swap, M=$m: $(lora_md5 ref$m $STEPS)"
done
# the FP8 base without swap: the reference of the runs that stream its FP8 bytes
train fp8ref "${LORA[@]}" --set stages=1 --set micro_batches=2 --set fp8_base=true || fail "FP8 without swap: $(tail -5 fp8ref.out)"
echo "FP8 base without swap: $(lora_md5 fp8ref $STEPS)"
[ "$(lora_md5 fp8ref $STEPS)" != "$(lora_md5 ref2 $STEPS)" ] || fail "the FP8 base's adapters equal the bf16 base's: FP8 not in use"
# P S M K reference [k=v ...]: partitions of 6/P blocks, K of them swapped in each
for c in "1 1 1 4 ref1" "1 2 2 2 ref2" "2 1 2 2 ref2" "2 2 2 1 ref2" "2 2 2 2 ref2 recompute=true" \
         "1 1 2 5 ref2 recompute=true" "1 1 2 4 fp8ref fp8_base=true" "2 1 2 2 fp8ref fp8_base=true recompute=true"; do
  set -- $c
  ref=$(lora_md5 $5 $STEPS)
  extra=()
  for kv in "${@:6}"; do extra+=(--set "$kv"); done
  d=p$1s$2m$3k$4_$5${6:+_${6%%=*}}${7:+_${7%%=*}}
  what="swap P=$1 S=$2 M=$3 K=$4 ${*:6}"
  train $d "${LORA[@]}" --set stages=$1 --set shards=$2 --set micro_batches=$3 --set swap_blocks=$4 "${extra[@]}" \
    || fail "$what: $(tail -5 $d.out)"
  h=$(lora_md5 $d $STEPS)
  echo "$what: $h"
  [ "$h" = "$ref" ] || fail "$what: adapters differ from the run without swap, $5 ($h vs $ref)"
  n=$(grep '"event":"swap"' $d/metrics.jsonl | grep -c '"copy_s":[0-9.]*[1-9]')
  [ "$n" -ge "$1" ] || fail "$d: $n swap rows with copies in metrics.jsonl (want one per partition at least)"
done

# a full fine-tune: the references without swap, one per P (S = 2, M = 2, recompute on and off)
FULL=(--set depth=6 --set steps=$STEPS --set every=0 --set batch=4 --set lr=2e-3 --set micro_batches=2)
for c in "1 2 true" "2 2 true" "2 2 false" "2 3 true"; do
  set -- $c
  train fref$1$2$3 "${FULL[@]}" --set stages=$1 --set shards=$2 --set recompute=$3 \
    || fail "full fine-tune P=$1 S=$2 recompute=$3 without swap: $(tail -5 fref$1$2$3.out)"
done
# P S recompute K
for c in "1 2 true 4" "1 2 true 5" "2 2 true 2" "2 2 false 1" "2 3 true 2"; do
  set -- $c
  d=full_p$1s$2r$3k$4
  what="full fine-tune, swap P=$1 S=$2 M=2 recompute=$3 K=$4"
  train $d "${FULL[@]}" --set stages=$1 --set shards=$2 --set recompute=$3 --set swap_blocks=$4 \
    || fail "$what: $(tail -5 $d.out)"
  h=$(model_md5 $d $STEPS) ref=$(model_md5 fref$1$2$3 $STEPS)
  echo "$what: $h"
  [ "$h" = "$ref" ] || fail "$what: weights differ from the run without swap ($h vs $ref)"
  n=$(grep '"event":"swap"' $d/metrics.jsonl | grep -c '"copy_s":[0-9.]*[1-9]')
  [ "$n" -ge "$1" ] || fail "$d: $n swap rows with copies in metrics.jsonl (want one per partition at least)"
done

# D = 2 data-parallel replicas: the shards sum the replicas' gradients view by view
DP=(--set stages=2 --set shards=2 --set recompute=true --set replicas=2)
train fdp "${FULL[@]}" "${DP[@]}" || fail "full fine-tune D=2 without swap: $(tail -5 fdp.out)"
train fdps "${FULL[@]}" "${DP[@]}" --set swap_blocks=2 || fail "full fine-tune D=2 with swap: $(tail -5 fdps.out)"
[ "$(model_md5 fdps $STEPS)" = "$(model_md5 fdp $STEPS)" ] || fail "full fine-tune D=2: weights differ with swap"
echo "full fine-tune, D=2 replicas, K=2: $(model_md5 fdps $STEPS)"

# resume: 4 steps with swap, then --resume to the 8th: the model of the uninterrupted run
# without swap (the shards' checkpoint holds the swapped blocks' weights like the others)
RES=(--set stages=2 --set shards=2 --set recompute=true --set swap_blocks=2 --set every=4)
train fres "${FULL[@]}" "${RES[@]}" --set steps=4 || fail "full fine-tune with swap, 4 steps: $(tail -5 fres.out)"
train fres "${FULL[@]}" "${RES[@]}" --resume || fail "full fine-tune with swap, resumed: $(tail -5 fres.out)"
grep -q "resumed from step 4" fres.out || fail "full fine-tune with swap: not resumed from step 4: $(tail -5 fres.out)"
[ "$(model_md5 fres $STEPS)" = "$(model_md5 fref22true $STEPS)" ] || fail "full fine-tune with swap: resumed weights differ"
echo "full fine-tune with swap, resumed at step 4: $(model_md5 fres $STEPS)"

# refusals: one line naming the knob, exit 2, before anything runs
"$VFLOW" check "$PIPE" --set cache="$CACHE" --set depth=6 --set stages=2 --set swap_blocks=3 > full.out 2>&1
rc=$?
[ $rc = 2 ] || fail "full fine-tune with swap_blocks 3 of 3 blocks: exit $rc, want 2 ($(tail -3 full.out))"
grep -q "swap_blocks 3 is not below the partition's 3 blocks" full.out || fail "full fine-tune, swap_blocks 3 of 3: $(tail -3 full.out)"
"$VFLOW" check "$PIPE" --set cache="$CACHE" "${LORA[@]}" --set stages=2 --set swap_blocks=3 > big.out 2>&1
rc=$?
[ $rc = 2 ] || fail "swap_blocks 3 of 3 blocks: exit $rc, want 2 ($(tail -3 big.out))"
grep -q "swap_blocks 3 is not below the partition's 3 blocks" big.out || fail "swap_blocks 3 of 3: $(tail -3 big.out)"
echo "refused: $(grep -m1 -o 'dit partition.*' full.out | cut -c1-90)…; $(grep -m1 -o 'dit partition.*' big.out | cut -c1-80)…"
echo "ok"
