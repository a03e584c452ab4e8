#!/bin/bash
# test_train_swap_auto.sh — swap_blocks = "auto" (README "Block swap"), resolved by
# `vflow plan` and `vflow run` before anything starts, on the CPU backend, where a
# partition's `swap_budget` bounds the device memory it stands for:
#  - the K it resolves to is the smallest K whose plan keeps the partition's own device
#    lines (all but the swapped blocks' pinned host copy) within the budget, found here
#    by planning every explicit K (an independent search over the plans' lines);
#  - `vflow plan` names that K for each partition; the run with "auto" trains adapters
#    BITWISE those of the run with that K given explicitly, and swaps K blocks;
#  - with two partitions under one swap_budget, each resolves to its own K, bitwise too;
#  - with a bucketed cache the plan of the largest bucket shapes decides K (at least
#    what the worst bucket alone needs), bitwise too;
#  - a full fine-tune (the swapped blocks' weights and gradients on the host): the same
#    search over its plans, and the run with "auto" trains the model bitwise that of the
#    K given explicitly and of no swap at all;
#  - without swap_budget the CPU device's budget (the machine's memory) holds: K = 0;
#  - a budget that no K meets is exit 2 with one line naming the stage, before any run
#    dir exists; so is a swap_budget that is no size.
# vflow-test: timeout=600
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

lora_md5() { md5sum < "$1/ckpt/step-$2/lora.safetensors" | cut -d' ' -f1; }
STEPS=6
LORA=(--set depth=6 --set lora_rank=4 --set lora_alpha=8 --set batch=4 --set lr=5e-3 --set steps=$STEPS
      --set every=0 --set shards=1 --set micro_batches=2 --set tensorboard=false)

# region STAGE K [--set k=v ...]: the bytes stage STAGE's plan lines hold on cpu with
# swap_blocks = K, the swapped blocks' pinned host copy left out (the run's knobs: RUN)
RUN=("${LORA[@]}")
region() {
  local stage=$1 k=$2
  shift 2
  "$VFLOW" plan "$PIPE" --json --set cache="$CACHE" "${RUN[@]}" "$@" --set swap_blocks=$k > plan.json \
    2> plan.err || fail "plan $* K=$k: $(tail -3 plan.err)"
  "$PY" - "$stage" <<'PY'
import json, sys
p = json.load(open("plan.json"))
print(sum(x["bytes"] for x in p["lines"] if x.get("stage") == sys.argv[1] and x["device"] == "cpu"
          and not x["what"].startswith("block swap: swapped blocks")))
PY
}

# regions NAME [--set k=v ...]: NAME[K] = dit_0's region with swap_blocks = K, K = 0 … 5
regions() {
  local -n out=$1
  local k
  shift
  for k in 0 1 2 3 4 5; do
    out[$k]=$(region dit_0 $k "$@")
    [[ "${out[$k]}" =~ ^[0-9]+$ ]] || fail "K=$k $*: ${out[$k]}"
  done
}
# smallest NAME BUDGET: the smallest K whose region NAME[K] is within BUDGET
smallest() {
  local -n in=$1
  local k
  for k in 0 1 2 3 4 5; do [ "${in[$k]}" -le "$2" ] && { echo $k; return; }; done
}

declare -A R
regions R --set stages=1
echo "partition of 6 blocks, its device memory by K: ${R[0]} ${R[1]} ${R[2]} ${R[3]} ${R[4]} ${R[5]}"
BLK=$(( R[3] - R[4] ))
[ "$BLK" -gt 0 ] || fail "swapping a 4th block saves nothing (${R[3]} -> ${R[4]})"
# a budget half a block above K=4's region: the smallest K that fits, searched here
BUDGET=$(( R[4] + BLK / 2 ))
WANT=$(smallest R $BUDGET)
[ "$WANT" = 4 ] || fail "independent search: smallest K $WANT for budget $BUDGET"

"$VFLOW" plan "$PIPE" --set cache="$CACHE" "${LORA[@]}" --set stages=1 --set swap_blocks=auto \
  --set swap_budget=${BUDGET}B > auto.plan 2>&1 || fail "plan with auto: $(tail -3 auto.plan)"
grep -q "swap_blocks \"auto\": stage 'dit_0' (cpu) takes swap_blocks = $WANT:" auto.plan \
  || fail "plan does not name K = $WANT: $(grep -m2 auto auto.plan)"
echo "plan: $(grep -m1 'swap_blocks "auto"' auto.plan)"

# the run: "auto" resolves to the same K and trains the bits of that K given explicitly
train explicit "${LORA[@]}" --set stages=1 --set swap_blocks=$WANT || fail "K=$WANT: $(tail -5 explicit.out)"
train auto "${LORA[@]}" --set stages=1 --set swap_blocks=auto --set swap_budget=${BUDGET}B \
  || fail "auto: $(tail -5 auto.out)"
grep -q "takes swap_blocks = $WANT:" auto.out || fail "run with auto does not say K = $WANT: $(grep -m2 auto auto.out)"
grep -q "\"event\":\"swap\".*\"blocks\":$WANT," auto/metrics.jsonl || fail "auto run swaps no $WANT blocks"
a=$(lora_md5 auto $STEPS) e=$(lora_md5 explicit $STEPS)
echo "adapters: auto $a, swap_blocks=$WANT $e"
[ "$a" = "$e" ] || fail "the auto run's adapters differ from K=$WANT's"

# two partitions of 4 blocks (depth 8) under one swap_budget: each resolves to its own
# smallest K (the first partition also holds the embeddings), and the run trains the bits
# of those Ks given explicitly, stage by stage
TWO=(--set depth=8 --set stages=2)
declare -A Q
for s in 0 1; do
  for K in 0 1 2 3; do
    Q[$s$K]=$(region dit_$s $K "${TWO[@]}")
    [[ "${Q[$s$K]}" =~ ^[0-9]+$ ]] || fail "P=2 dit_$s K=$K: ${Q[$s$K]}"
  done
done
B2=$(( Q[03] > Q[13] ? Q[03] : Q[13] ))
for s in 0 1; do
  W[$s]=""
  for K in 0 1 2 3; do [ -z "${W[$s]}" ] && [ "${Q[$s$K]}" -le "$B2" ] && W[$s]=$K; done
done
echo "P=2: budget $B2, independent search K = ${W[0]}, ${W[1]}"
train two "${LORA[@]}" "${TWO[@]}" --set swap_blocks=auto --set swap_budget=${B2}B || fail "P=2 auto: $(tail -5 two.out)"
for s in 0 1; do
  grep -q "stage 'dit_$s' (cpu) takes swap_blocks = ${W[$s]}:" two.out \
    || fail "P=2: dit_$s not K = ${W[$s]}: $(grep -m2 auto two.out)"
done
train twoexp "${LORA[@]}" "${TWO[@]}" --set dit_0.swap_blocks=${W[0]} --set dit_1.swap_blocks=${W[1]} \
  || fail "P=2 explicit: $(tail -5 twoexp.out)"
[ "$(lora_md5 two $STEPS)" = "$(lora_md5 twoexp $STEPS)" ] || fail "P=2: auto's adapters differ from the explicit Ks'"

# a bucketed cache: the run sizes its buffers once for the largest bucket shapes (the
# plan's), so K is the smallest with which that plan fits, and at least what the worst
# bucket planned alone (latent_reader.only) needs
make_buckets
BKS=(16x16x1 32x16x5 64x32x1)
declare -A BR
for K in 0 3 4 5; do
  for b in all "${BKS[@]}"; do
    only=(); [ $b = all ] || only=(--set latent_reader.only=$b)
    BR[$b$K]=$(region dit_0 $K --set stages=1 --set cache="$BK" "${only[@]}")
    [[ "${BR[$b$K]}" =~ ^[0-9]+$ ]] || fail "buckets $b K=$K: ${BR[$b$K]}"
  done
done
BB=$(( BR[all4] + (BR[all3] - BR[all4]) / 2 ))
KB=""; for K in 0 3 4 5; do [ -z "$KB" ] && [ "${BR[all$K]}" -le "$BB" ] && KB=$K; done
for b in "${BKS[@]}"; do
  kb=""; for K in 0 3 4 5; do [ -z "$kb" ] && [ "${BR[$b$K]}" -le "$BB" ] && kb=$K; done
  [ "$KB" -ge "$kb" ] || fail "buckets: the plan's K $KB is below bucket $b's $kb"
done
trainb bk "${LORA[@]}" --set stages=1 --set swap_blocks=auto --set swap_budget=${BB}B || fail "buckets auto: $(tail -5 bk.out)"
grep -q "stage 'dit_0' (cpu) takes swap_blocks = $KB:" bk.out || fail "buckets: not K = $KB: $(grep -m1 auto bk.out)"
trainb bkexp "${LORA[@]}" --set stages=1 --set swap_blocks=$KB || fail "buckets K=$KB: $(tail -5 bkexp.out)"
[ "$(lora_md5 bk $STEPS)" = "$(lora_md5 bkexp $STEPS)" ] || fail "buckets: auto's adapters differ from K=$KB's"
echo "buckets: budget $BB, K = $KB (each bucket alone: ${BR[16x16x1$KB]} ${BR[32x16x5$KB]} ${BR[64x32x1$KB]} at K)"

# a full fine-tune: its swapped blocks' weights and gradients leave the region, the ring
# of both enters it; "auto" takes the smallest K that fits and trains the same bits
RUN=(--set depth=6 --set batch=4 --set lr=2e-3 --set steps=$STEPS --set every=0 --set shards=2
     --set micro_batches=2 --set recompute=true --set tensorboard=false --set stages=1)
declare -A F
regions F
FBLK=$(( F[2] - F[3] ))
[ "$FBLK" -gt 0 ] || fail "full fine-tune: swapping a 3rd block saves nothing (${F[2]} -> ${F[3]})"
FBUD=$(( F[3] + FBLK / 2 ))
FW=$(smallest F $FBUD)
[ "$FW" = 3 ] || fail "full fine-tune, independent search: smallest K $FW for budget $FBUD"
echo "full fine-tune, device memory by K: ${F[0]} ${F[1]} ${F[2]} ${F[3]} ${F[4]} ${F[5]}; budget $FBUD: K = $FW"
train fauto "${RUN[@]}" --set swap_blocks=auto --set swap_budget=${FBUD}B || fail "full auto: $(tail -5 fauto.out)"
grep -q "stage 'dit_0' (cpu) takes swap_blocks = $FW:" fauto.out || fail "full auto: not K = $FW: $(grep -m1 auto fauto.out)"
grep -q "\"event\":\"swap\".*\"blocks\":$FW," fauto/metrics.jsonl || fail "full auto run swaps no $FW blocks"
train fexp "${RUN[@]}" --set swap_blocks=$FW || fail "full K=$FW: $(tail -5 fexp.out)"
train fnone "${RUN[@]}" || fail "full without swap: $(tail -5 fnone.out)"
a=$(model_md5 fauto $STEPS) e=$(model_md5 fexp $STEPS) z=$(model_md5 fnone $STEPS)
echo "full fine-tune weights: auto $a, swap_blocks=$FW $e, no swap $z"
[ "$a" = "$e" ] && [ "$e" = "$z" ] || fail "full fine-tune: auto, K=$FW and no swap differ"
RUN=("${LORA[@]}")

# no swap_budget: the CPU device's budget is the machine's memory, which the run fits as it is
"$VFLOW" plan "$PIPE" --set cache="$CACHE" "${LORA[@]}" --set stages=1 --set swap_blocks=auto > dev.plan 2>&1 \
  || fail "plan auto without swap_budget: $(tail -3 dev.plan)"
grep -q "stage 'dit_0' (cpu) takes swap_blocks = 0: cpu plans .* within its budget" dev.plan \
  || fail "auto without swap_budget: $(grep -m1 auto dev.plan)"

# refusals: exit 2, one line, nothing started
"$VFLOW" run "$PIPE" --run-dir small --set cache="$CACHE" "${LORA[@]}" --set stages=1 --set swap_blocks=auto \
  --set swap_budget=$(( R[5] - 1 ))B > small.out 2>&1
rc=$?
[ $rc = 2 ] || fail "budget below K=5's region: exit $rc, want 2 ($(tail -3 small.out))"
grep -q "stage 'dit_0' (cpu): swap_blocks \"auto\": no value fits: at swap_blocks = 5, the most it takes" small.out \
  || fail "too small a budget: $(tail -3 small.out)"
[ "$(grep -c . small.out)" = 1 ] || fail "too small a budget: more than one line: $(cat small.out)"
[ ! -e small ] || fail "the refused run made its run dir"
"$VFLOW" plan "$PIPE" --set cache="$CACHE" "${LORA[@]}" --set stages=1 --set swap_blocks=auto \
  --set swap_budget=12parsecs > bad.out 2>&1
rc=$?
[ $rc = 2 ] && grep -q "param 'swap_budget': bad size \"12parsecs\"" bad.out \
  || fail "bad swap_budget: exit $rc $(tail -2 bad.out)"
"$VFLOW" check "$PIPE" --set cache="$CACHE" "${LORA[@]}" --set swap_blocks=some > word.out 2>&1
rc=$?
[ $rc = 2 ] && grep -q 'swap_blocks must be an integer in 0..4096 or "auto"' word.out \
  || fail "swap_blocks=some: exit $rc $(tail -2 word.out)"
echo "refused: $(cut -c1-120 small.out)…"
echo "ok"
