#!/usr/bin/env bash
# bench_sp_train.sh — what sequence parallelism costs a training step on the CPU backend,
# against the same step with sp = 1 in the same run.
#
#   bench/bench_sp_train.sh [BUILD_DIR]     (default: build)
#   SPS="2 4" STEPS=10 REPEATS=2 DEPTH=4 bench/bench_sp_train.sh
#
# A full fine-tune of a DiT of DEPTH blocks (dim 256 = 16 heads of 16, ffn 1024; the tiny
# preset's other fields), one partition, batch 2 of (4, 2, 16, 16) latents (128 tokens a
# sample), for sp = 1 and each of SPS, interleaved REPEATS times, best run of each.
# Printed: ms/step (the mean of the partition's step windows in metrics.jsonl, first 2
# skipped; with sp > 1 the slowest rank's) and the ratio to sp = 1. On the CPU backend a
# rank's sums over tokens wait for the rank before it (models/dit_red.h), and the ranks
# share the machine's cores, so this measures what SP costs here, not what it saves.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/train_env.sh" "${1:-build}"
STEPS=${STEPS:-10}
REPEATS=${REPEATS:-2}
DEPTH=${DEPTH:-4}
SPS=${SPS:-2 4}
source "$VFLOW_SRC/tests/integration/train_lib.sh"
cd "$TMP"
"$TOOL" mkcache big.lmdb 32 4 2 16 16 3 > /dev/null

run() { # NAME sp -> prints mean ms/step of the slowest rank
  local name=$1 sp=$2
  "$VFLOW" run "$PIPE" --run-dir "$name" --set cache=big.lmdb --set steps=$STEPS --set batch=2 --set every=0 \
    --set stages=1 --set micro_batches=1 --set dim=256 --set heads=16 --set head_dim=16 --set ffn=1024 \
    --set depth=$DEPTH --set sp=$sp > "$name.out" 2>&1 || fail "$name: $(tail -3 $name.out)"
  "$PY" - "$name/metrics.jsonl" <<'PY'
import json, sys, statistics, collections
w = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = json.loads(l)
    if x.get("event") == "partition_step":
        w[(x.get("partition"), x.get("replica"))].append(x["window_s"])
print("%.3f" % max(1e3 * statistics.mean(v[2:]) for v in w.values()))
PY
}

echo "sequence parallelism on the CPU backend: full fine-tune, dim 256, depth $DEPTH, P=1, batch 2 x 128 tokens," \
  "$STEPS steps, best of $REPEATS, one OpenMP thread a process, $(getconf _NPROCESSORS_ONLN) cores"
declare -A best
for i in $(seq 1 "$REPEATS"); do
  for sp in 1 $SPS; do
    ms=$(run "sp$sp.$i" "$sp")
    if [ -z "${best[$sp]:-}" ] || awk -v a="$ms" -v b="${best[$sp]}" 'BEGIN { exit !(a < b) }'; then best[$sp]=$ms; fi
  done
done
for sp in 1 $SPS; do
  awk -v sp="$sp" -v ms="${best[$sp]}" -v one="${best[1]}" \
    'BEGIN { printf "  sp = %d  %9.2f ms/step  ratio to sp = 1: %.3f\n", sp, ms, ms / one }'
done
