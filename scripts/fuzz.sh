#!/usr/bin/env bash
# fuzz.sh — runs the libFuzzer targets (tests/fuzz/fuzz_*.c) built by `make fuzz`.
#
#   scripts/fuzz.sh [BUILD_DIR] [TARGET...]        (default: build-fuzz, every target)
#   FUZZ_SECONDS=600 (per target)  FUZZ_TIMEOUT=10 (seconds one input may take: a hang)
#
# Each target starts from its committed corpus (tests/fuzz/corpus/NAME, replayed by
# `make test`) copied into BUILD_DIR/fuzz-corpus/NAME, which grows as coverage does.
# Crashes, leaks, timeouts and out-of-memory inputs are written to
# BUILD_DIR/findings/NAME-*; copy each into tests/fuzz/corpus/NAME once fixed so the
# replay keeps it. Prints per target: runs, execs/s, coverage (edges), features, corpus
# size, findings. Exit 1 when any target found something.
set -uo pipefail
build="${1:-build-fuzz}"
shift || true
secs="${FUZZ_SECONDS:-600}"
tmo="${FUZZ_TIMEOUT:-10}"
src="$(cd "$(dirname "$0")/.." && pwd)"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$src"/tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
mkdir -p "$build/findings"
bad=0
for t in "${targets[@]}"; do
  bin="$build/tests/$t"
  [ -x "$bin" ] || { echo "fuzz: $bin missing (run make fuzz)" >&2; exit 2; }
  corp="$build/fuzz-corpus/$t"
  mkdir -p "$corp"
  cp -n "$src/tests/fuzz/corpus/$t"/* "$corp"/ 2>/dev/null || true
  log="$build/findings/$t.log"
  before=$(ls "$build/findings" | grep -c "^$t-" || true)
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$bin" -max_total_time="$secs" -timeout="$tmo" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t-" "$corp" >"$log" 2>&1
  rc=$?
  after=$(ls "$build/findings" | grep -c "^$t-" || true)
  stats=$(grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$log" | tail -1)
  runs=$(awk '/stat::number_of_executed_units/{print $2}' "$log")
  speed=$(awk '/stat::average_exec_per_sec/{print $2}' "$log")
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$stats")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$stats")
  printf "%-20s %6ss  runs %-9s exec/s %-6s cov %-6s ft %-6s corpus %-5s findings %d (exit %d)\n" \
    "$t" "$secs" "${runs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "$(ls "$corp" | wc -l)" \
    $((after - before)) "$rc"
  if [ "$rc" -ne 0 ] || [ $((after - before)) -gt 0 ]; then bad=1; tail -30 "$log"; fi
done
exit $bad
