# train_env.sh — sourced by the training benchmarks (bench_checkpoint.sh, bench_swap.sh,
# bench_sp_train.sh) with the build directory as $1 (default: build): exports the paths
# tests/integration/train_lib.sh reads (VFLOW_BUILD, VFLOW_BIN, VFLOW_SRC) and sets $build.
build="${1:-build}"
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
export VFLOW_BUILD=$build VFLOW_BIN=$build/vflow
VFLOW_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export VFLOW_SRC
