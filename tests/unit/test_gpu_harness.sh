#!/bin/bash
# test_gpu_harness.sh — runs the GPU parity tests (tests/gpu/test_cuda_*.c) with the CPU
# backend standing in for the GPU (VFLOW_GPU_TEST_ON_CPU=1): every comparison must then
# pass with zero error. This keeps the GPU tests' own harness (buffer set-up, dtype
# handling, reference calls, tolerances' plumbing) checked on every CI run, although CI
# has no GPU to run them for real.
set -euo pipefail
fail=0
for t in gpu_test_cuda_ops gpu_test_cuda_attn gpu_test_cuda_conv gpu_test_cuda_mem gpu_test_cuda_dit gpu_test_cuda_vae gpu_test_cuda_phases gpu_test_cuda_a2a \
         gpu_test_cuda_swap; do
  bin="$VFLOW_BUILD/tests/$t"
  if [ ! -x "$bin" ]; then echo "missing $bin"; fail=1; continue; fi
  if out=$(VFLOW_GPU_TEST_ON_CPU=1 OMP_NUM_THREADS=2 "$bin" 2>&1); then
    echo "$t: $(echo "$out" | tail -1)"
  else
    echo "$out" | tail -20
    echo "$t: FAILED"
    fail=1
  fi
done
exit $fail
