#!/usr/bin/env bash
# bench_sp.sh — the CPU all-to-all of sequence parallelism against memcpy of the same
# bytes, in the same run (bench/bench_sp.c says what each column is).
#
#   bench/bench_sp.sh [BUILD_DIR] [MIB] [CALLS] [REPS] [MAX_RANKS]   (default: build 32 10 3 4)
#
# Ranks are processes: on a machine with fewer cores than ranks they also wait for a
# core, which the measurement counts against the all-to-all.
set -euo pipefail

build="${1:-build}"
bin="$build/bench/bench_sp"
if [[ ! -x "$bin" ]]; then
  echo "bench_sp.sh: $bin not built (cmake --build $build --target bench_sp)" >&2
  exit 2
fi
"$bin" "${2:-32}" "${3:-10}" "${4:-3}" "${5:-4}"
