#!/bin/bash
# bench_cuda_pack.sh — builds vflow with CUDA on THIS machine (which has nvcc and the
# build dependencies) and packs what the GPU tests and benchmarks run — vflow, the
# gpu_test_* binaries, train_tool / vae_tool / dit_tool, bench_cuda_dit — with the shared
# libraries they load, for a GPU machine that lacks libzmq, lmdb, lua and libav:
#
#   bash bench/bench_cuda_pack.sh [BUILD_DIR]      -> .cudapack/vflow-cuda.tar.xz (git-ignored)
#   then on the GPU machine (the device tool, carry = [".cudapack"]):
#     tar -xJf .cudapack/vflow-cuda.tar.xz -C /tmp && bash bench/bench_cuda.sh --prebuilt /tmp/vflow-cuda --tests
#
# Left out of the pack (the GPU machine has its own): glibc, libstdc++/libgcc, the CUDA
# driver and toolkit libraries (cudart, cuBLASLt — dlopen'ed —, NCCL). Both machines are
# x86-64; the GPU machine's glibc must not be older than this one's.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath -m "${1:-$SRC/build-cuda}")
cmake -S "$SRC" -B "$BUILD" -DVFLOW_CUDA=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD" -j "$(nproc)" > "$BUILD/build.log" 2>&1 || { tail -30 "$BUILD/build.log"; exit 1; }

OUTD="$SRC/.cudapack"
ROOT="$OUTD/vflow-cuda"
rm -rf "$ROOT"
mkdir -p "$ROOT/tests" "$ROOT/tools" "$ROOT/bench" "$ROOT/lib"
cp "$BUILD/vflow" "$ROOT/"
cp "$BUILD"/tests/gpu_test_* "$ROOT/tests/"
for t in train_tool vae_tool dit_tool; do [ -x "$BUILD/tools/$t" ] && cp "$BUILD/tools/$t" "$ROOT/tools/"; done
cp "$BUILD/bench/bench_cuda_dit" "$ROOT/bench/"
skip='/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda|libcudart|libcublas[^/]*|libnccl)\.so'
for b in "$ROOT/vflow" "$ROOT"/tests/* "$ROOT"/tools/* "$ROOT"/bench/*; do
  ldd "$b" | awk '/=> \//{print $3}' | grep -vE "$skip" || true
done | sort -u | while read -r lib; do cp -L "$lib" "$ROOT/lib/"; done
strip --strip-unneeded "$ROOT/vflow" "$ROOT"/tests/* "$ROOT"/tools/* "$ROOT"/bench/* "$ROOT"/lib/* 2>/dev/null || true
tar -C "$OUTD" -cJf "$OUTD/vflow-cuda.tar.xz" vflow-cuda
rm -rf "$ROOT"
EX=$(git -C "$SRC" rev-parse --git-path info/exclude)
case "$EX" in /*) ;; *) EX="$SRC/$EX" ;; esac
mkdir -p "$(dirname "$EX")"
grep -qx '/.cudapack/' "$EX" 2>/dev/null || echo '/.cudapack/' >> "$EX"
echo "packed $(du -h "$OUTD/vflow-cuda.tar.xz" | cut -f1) into $OUTD/vflow-cuda.tar.xz (the device tool carries at most 64 MiB)"
