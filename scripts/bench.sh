#!/usr/bin/env bash
# bench.sh BUILD_DIR — what `make bench` runs: the benchmarks of bench/ that run on this
# machine's CPUs, one after the other, each printing its figures and a ratio against a
# peer it measures in the same run:
#
#   matmul      bench_matmul: the CPU matmul against a naive triple loop (1 thread)
#   edges       bench_edges: ipc / tcp edges against memcpy and a bare ZeroMQ pair
#   edges_netns bench_edges_netns.sh: a tcp edge between two network-namespace hosts
#               against a plain TCP stream (root only; skipped otherwise)
#   decode      bench_decode.sh: decode + resize against the ffmpeg CLI (1 thread)
#   precompute  bench_precompute.sh: clips/s and peak RSS per worker, RSS at 17 vs 65 frames
#   checkpoint  bench_checkpoint.sh: step time with async / sync checkpoints against none,
#               the 1F1B bubble against theory
#   swap        bench_swap.sh: LoRA step time with K blocks' base swapped against none, and
#               the share of the copies hidden behind compute
#   vae         bench_vae.py: the VAE encoder against PyTorch's conv3d (Debian's torch)
#   sp          bench_sp.sh: the sequence-parallel all-to-all of 2-4 processes against memcpy
#   sp_train    bench_sp_train.sh: a training step with sp = 2 (and 4) against sp = 1
#
# By default each runs with fewer repeats and smaller sizes than the README's figures
# (a few minutes in all on an idle 2-core machine); BENCH_FULL=1 runs them as measured
# there. BENCH_ONLY="matmul decode" runs those only. The GPU benchmarks (bench_cuda.sh)
# need a GPU machine and are not run here. The closing table says what ran, was skipped
# (no root, no torch) or failed; the exit code is 1 when one failed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build=$ROOT/$build ;; esac
[ -x "$build/vflow" ] || { echo "bench: $build/vflow is not built (make build)" >&2; exit 2; }
full=${BENCH_FULL:-0}
only=${BENCH_ONLY:-}
cd "$ROOT"
names=() states=() secs=()

# bench NAME COMMAND...: runs it, records ok / skipped (exit 77) / failed and its time
bench() {
  local name=$1 rc t0
  shift
  if [ -n "$only" ] && ! grep -qw "$name" <<<"$only"; then return; fi
  echo
  echo "== $name: $*"
  t0=$(date +%s)
  "$@"
  rc=$?
  names+=("$name")
  secs+=($(( $(date +%s) - t0 )))
  case $rc in
    0) states+=(ok) ;;
    77) states+=(skipped) ;;
    *) states+=("failed ($rc)") ;;
  esac
}

# the peers of some benchmarks: skip cleanly where the machine lacks them
needs_root() { [ "$(id -u)" -eq 0 ] || { echo "skip: needs root (network namespaces)"; return 77; }; "$@"; }
needs_torch() {
  /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || { echo "skip: no torch for /usr/bin/python3"; return 77; }
  "$@"
}

echo "bench: $(uname -m), $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
if [ "$full" = 1 ]; then
  bench matmul "$build/bench/bench_matmul" 1
  bench edges "$build/bench/bench_edges" 24 20000 3
  bench edges_netns needs_root env VFLOW_BUILD="$build" bench/bench_edges_netns.sh 16 3
  bench decode bench/bench_decode.sh "$build" 1 2
  bench precompute bench/bench_precompute.sh "$build"
  bench checkpoint bench/bench_checkpoint.sh "$build"
  bench swap bench/bench_swap.sh "$build"
  bench vae needs_torch /usr/bin/python3 bench/bench_vae.py "$build" --threads 1
  bench sp bench/bench_sp.sh "$build" 32 10 3 4
  bench sp_train bench/bench_sp_train.sh "$build"
else
  bench matmul "$build/bench/bench_matmul" 1
  bench edges "$build/bench/bench_edges" 8 20000 1
  bench edges_netns needs_root env VFLOW_BUILD="$build" bench/bench_edges_netns.sh 4 1
  bench decode env REPEATS=1 bench/bench_decode.sh "$build" 1
  bench precompute env REPEATS=1 RSS_SIZES=64 bench/bench_precompute.sh "$build"
  bench checkpoint env STEPS=20 REPEATS=1 BSTEPS=8 bench/bench_checkpoint.sh "$build"
  bench swap env STEPS=6 REPEATS=1 DEPTH=4 K=2 bench/bench_swap.sh "$build"
  bench vae needs_torch /usr/bin/python3 bench/bench_vae.py "$build" --threads 1 --quick
  bench sp bench/bench_sp.sh "$build" 8 5 1 3
  bench sp_train env STEPS=6 REPEATS=1 SPS=2 DEPTH=2 bench/bench_sp_train.sh "$build"
fi

echo
echo "bench: $([ "$full" = 1 ] && echo "full settings" || echo "quick settings (BENCH_FULL=1: the README's)")"
failed=0
for i in "${!names[@]}"; do
  printf "  %-12s %-12s %5d s\n" "${names[$i]}" "${states[$i]}" "${secs[$i]}"
  case ${states[$i]} in failed*) failed=1 ;; esac
done
exit $failed
