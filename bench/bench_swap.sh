#!/usr/bin/env bash
# bench_swap.sh — what block swap costs a training step on the CPU backend, and how much
# of its copying the compute hides.
#
#   bench/bench_swap.sh [BUILD_DIR]        (default: build)
#   LORA_RANK=0 bench/bench_swap.sh        a full fine-tune instead of LoRA
#
# LoRA (rank LORA_RANK, 8) on a frozen DiT of DEPTH blocks (dim 256 = 16 heads of 16, ffn 1024; the tiny
# preset's other fields), or with LORA_RANK=0 a full fine-tune of it, one partition, batch 4 of
# (4, 2, 16, 16) latents, STEPS steps, with
#   none   every block resident,
#   swapK  the last K blocks' base weights in host memory (a full fine-tune: weights and
#          gradients, the gradients back after each block's backward), streamed into a ring
#          of two buffers by the copy queue's thread ahead of each block,
# interleaved REPEATS times, best run of each. Printed: ms/step (the mean of the step
# windows in metrics.jsonl, first 2 skipped), the ratio swapK / none, and from the same
# swapK run the partition's copy time per step and the share of it hidden behind compute
# (1 − the time the compute waited for a copy / the copies' time; goal ≥ 0.8).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/train_env.sh" "${1:-build}"
STEPS=${STEPS:-12}
REPEATS=${REPEATS:-2}
DEPTH=${DEPTH:-8}
K=${K:-6}
LORA_RANK=${LORA_RANK:-8}
source "$VFLOW_SRC/tests/integration/train_lib.sh"
cd "$TMP"
"$TOOL" mkcache big.lmdb 32 4 2 16 16 3 > /dev/null

run() { # NAME knobs... -> prints "mean_ms copy_ms_per_step hidden"
  local name=$1
  shift
  "$VFLOW" run "$PIPE" --run-dir "$name" --set cache=big.lmdb --set steps=$STEPS --set batch=4 --set every=0 \
    --set stages=1 --set micro_batches=1 --set dim=256 --set heads=16 --set ffn=1024 --set depth=$DEPTH --set lora_rank=$LORA_RANK \
    "$@" > "$name.out" 2>&1 || fail "$name: $(tail -3 $name.out)"
  "$PY" - "$name/metrics.jsonl" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
w = [x["window_s"] for x in rows if x.get("event") == "partition_step"][2:]
sw = [x for x in rows if x.get("event") == "swap"]
copy = sw[-1]["copy_s"] / sw[-1]["step"] if sw else 0.0
hidden = sw[-1]["hidden"] if sw else 1.0
print("%.3f %.3f %.4f" % (1e3 * statistics.mean(w), 1e3 * copy, hidden))
PY
}

what="LoRA rank $LORA_RANK"
[ "$LORA_RANK" != 0 ] || what="full fine-tune"
echo "block swap on the CPU backend: $what, dim 256, depth $DEPTH, P=1, batch 4 x 128 tokens, $STEPS steps, best of $REPEATS"
declare -A best
for i in $(seq 1 "$REPEATS"); do
  for mode in none swap; do
    case $mode in
      none) k=() ;;
      swap) k=(--set swap_blocks=$K) ;;
    esac
    line=$(run "$mode$i" "${k[@]}")
    if [ -z "${best[$mode]:-}" ] || awk -v a="${line%% *}" -v b="${best[$mode]%% *}" 'BEGIN { exit !(a < b) }'; then
      best[$mode]=$line
    fi
  done
done
printf "%s\n%s\n" "none ${best[none]}" "swap ${best[swap]}" | awk -v K="$K" '
  { ms[$1] = $2; cp[$1] = $3; hid[$1] = $4 }
  END {
    printf "  none      %8.2f ms/step\n", ms["none"]
    printf "  swap%-3d   %8.2f ms/step  ratio %.3f  copies %.2f ms/step, hidden %.1f %%\n", K, ms["swap"],
           ms["swap"] / ms["none"], cp["swap"], 100 * hid["swap"]
  }'
