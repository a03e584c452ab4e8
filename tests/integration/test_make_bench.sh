#!/usr/bin/env bash
# test_make_bench.sh — `make bench`, which README advertises, runs:
#  - every script the Makefile's targets run (`bash scripts/…`) is in the tree;
#  - scripts/bench.sh names every CPU benchmark of bench/ (bench_*.c, .sh, .py but the
#    CUDA ones), so a new one is not forgotten;
#  - it runs one of them (BENCH_ONLY=matmul) to the end: exit 0, the benchmark's ratio
#    against its peer, and the closing table saying it ran.
# vflow-test: labels=bench timeout=300
set -euo pipefail
SRC=${VFLOW_SRC:?}
BUILD=${VFLOW_BUILD:?}
fail() { echo "FAIL: $*" >&2; exit 1; }

for s in $(grep -oE 'bash scripts/[A-Za-z0-9_./-]+' "$SRC/Makefile" | cut -d' ' -f2 | sort -u); do
  [ -f "$SRC/$s" ] || fail "the Makefile runs $s, which is not in the tree"
done
for f in "$SRC"/bench/bench_*.c "$SRC"/bench/bench_*.sh "$SRC"/bench/bench_*.py; do
  name=$(basename "$f")
  case $name in *cuda*) continue ;; esac
  stem=${name%.*}
  grep -q "$stem" "$SRC/scripts/bench.sh" || fail "scripts/bench.sh does not run $name"
done
[ -x "$BUILD/bench/bench_matmul" ] || { echo "SKIP: the benchmarks are not built (VFLOW_BUILD_BENCH=OFF)"; exit 77; }
out=$(BENCH_ONLY=matmul bash "$SRC/scripts/bench.sh" "$BUILD" 2>&1) || { echo "$out"; fail "scripts/bench.sh failed"; }
grep -qE "ratio +[0-9.]+x" <<<"$out" || { echo "$out"; fail "no ratio against the naive peer"; }
grep -qE "^  matmul +ok " <<<"$out" || { echo "$out"; fail "the closing table does not say matmul ran"; }
echo ok
