#!/bin/bash
# bench_cuda_pack.sh — what a lent GPU machine runs, made on THIS machine (which has nvcc
# and the build dependencies; the GPU machine has neither libzmq, lmdb, lua nor libav, and
# reaches no package registry). `make gpu-pack` runs it.
#
#   bash bench/bench_cuda_pack.sh [BUILD_DIR]
#
#  1. builds vflow with CUDA in BUILD_DIR (default build-cuda/, Release, incremental) and
#     packs what the GPU run uses — vflow, the gpu_test_* binaries, train_tool / vae_tool /
#     dit_tool, bench_cuda_dit — with the shared libraries they load and a VERSION file
#     (commit, build time, nvcc, CUDA architectures) into .cudapack/vflow-cuda.tar.xz;
#  2. fetches the Python wheels bench/bench_cuda.sh installs there with `pip install
#     --no-deps` into .whl/: diffusers (the VAE peer), pinned below to the release whose
#     huggingface_hub range matches the GPU image's; its other imports (torch, numpy,
#     safetensors, huggingface_hub, regex, requests, filelock, Pillow) are on the image;
#  3. checks that what the device tool carries — the working tree, .cudapack and .whl —
#     stays under its 64 MiB, and fails naming the largest parts when it does not.
# Both folders are git-ignored. Then, on the GPU machine (the device tool's run, with
# carry [".cudapack", ".whl"]): bash bench/bench_cuda.sh (docs/GPU_RUN.md).
#
# Left out of the pack (the GPU machine has its own): glibc, libstdc++/libgcc, the CUDA
# driver and toolkit libraries (cudart, cuBLASLt and cuDNN are dlopen'ed or come from
# PyTorch's wheels, NCCL). Both machines are x86-64; the GPU machine's glibc must not be
# older than this one's.
set -euo pipefail
DIFFUSERS=0.42.1
LIMIT=$((64 << 20))
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath -m "${1:-$SRC/build-cuda}")
t0=$(date +%s)
cmake -S "$SRC" -B "$BUILD" -DVFLOW_CUDA=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD" -j "$(nproc)" > "$BUILD/build.log" 2>&1 || { tail -30 "$BUILD/build.log"; exit 1; }
echo "built $BUILD in $(($(date +%s) - t0)) s"

OUTD="$SRC/.cudapack"
ROOT="$OUTD/vflow-cuda"
mkdir -p "$OUTD"
exec 9> "$OUTD/.lock" # two packs at once would pack each other's half-copied tree
flock -n 9 || { echo "bench_cuda_pack: another bench_cuda_pack.sh is packing into $OUTD" >&2; exit 1; }
rm -rf "$ROOT"
mkdir -p "$ROOT/tests" "$ROOT/tools" "$ROOT/bench" "$ROOT/lib"
cp "$BUILD/vflow" "$ROOT/"
cp "$BUILD"/tests/gpu_test_* "$ROOT/tests/"
for t in train_tool vae_tool dit_tool; do [ -x "$BUILD/tools/$t" ] && cp "$BUILD/tools/$t" "$ROOT/tools/"; done
cp "$BUILD/bench/bench_cuda_dit" "$ROOT/bench/"
skip='/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda|libcudart|libcublas[^/]*|libcudnn[^/]*|libnccl)\.so'
for b in "$ROOT/vflow" "$ROOT"/tests/* "$ROOT"/tools/* "$ROOT"/bench/*; do
  ldd "$b" | awk '/=> \//{print $3}' | grep -vE "$skip" || true
done | sort -u | while read -r lib; do cp -L "$lib" "$ROOT/lib/"; done
strip --strip-unneeded "$ROOT/vflow" "$ROOT"/tests/* "$ROOT"/tools/* "$ROOT"/bench/* "$ROOT"/lib/* 2>/dev/null || true
{
  echo "commit $(git -C "$SRC" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  echo "nvcc $(sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' "$BUILD"/CMakeFiles/*/CMakeCUDACompiler.cmake | head -1)"
  echo "cuda_code $(grep -ho -- '--generate-code=[^ ]*' "$BUILD/CMakeFiles/vf_kernels.dir/flags.make" | sort -u | tr '\n' ' ')"
} > "$ROOT/VERSION"
# xz -9: its 64 MiB dictionary spans several of the binaries, which share most of their
# code (each links all of vflow), so they pack once (1.2 MiB less than xz's default)
tar -C "$OUTD" -cf - vflow-cuda | xz -9 -T2 > "$OUTD/vflow-cuda.tar.xz"
rm -rf "$ROOT"

# ---------------------------------------------------------------- the wheels
WHL="$SRC/.whl"
mkdir -p "$WHL"
if [ ! -f "$WHL/diffusers-$DIFFUSERS-py3-none-any.whl" ]; then
  rm -f "$WHL"/diffusers-*.whl # one version of each: two would stop the install there
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$WHL" "diffusers==$DIFFUSERS" ||
    echo "bench_cuda_pack: could not fetch diffusers $DIFFUSERS into $WHL: the VAE sections will report it" >&2
fi

EX=$(git -C "$SRC" rev-parse --git-path info/exclude)
case "$EX" in /*) ;; *) EX="$SRC/$EX" ;; esac
mkdir -p "$(dirname "$EX")"
grep -qx '/.cudapack/' "$EX" 2>/dev/null || echo '/.cudapack/' >> "$EX"

# ---------------------------------------------------------------- what travels
tree=$(cd "$SRC" && git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
       awk '{s += $1} END {print s + 0}')
pack=$(stat -c %s "$OUTD/vflow-cuda.tar.xz")
whl=$(du -sb "$WHL" | cut -f1)
total=$((tree + pack + whl))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "packed $OUTD/vflow-cuda.tar.xz ($(mib "$pack")), wheels $WHL ($(mib "$whl")), working tree $(mib "$tree"):"
echo "the device tool carries $(mib "$total") of its $(mib "$LIMIT"); $(($(date +%s) - t0)) s in all"
if [ "$total" -gt "$LIMIT" ]; then
  echo "bench_cuda_pack: over the device tool's limit; the largest parts:" >&2
  tar -tvJf "$OUTD/vflow-cuda.tar.xz" | sort -k3 -n -r | head -8 | awk '{print "  " $3 " " $6}' >&2
  ls -l "$WHL" >&2
  exit 1
fi
