#!/bin/bash
# bench_cuda.sh — the CUDA benchmarks in one command: builds vflow with CUDA,
# runs each benchmark next to its PyTorch peer in the same run, prints the ratios.
#
#   bash bench/bench_cuda.sh [BUILD_DIR] [--quick] [--tests] [--prebuilt DIR]
#
#   DiT training step   Wan-1.3B dims, bf16, 13104 tokens/sample, recompute on:
#                       bench/bench_cuda_dit (vflow) vs bench/bench_cuda_dit.py (PyTorch,
#                       SDPA, per-block checkpointing; eager and torch.compile):
#                       tokens/s, MFU (989 TF/s peak), peak device memory.
#   attention           fwd+bwd TFLOP/s, self (13104 tokens) and cross (512 keys),
#                       vs torch.nn.functional.scaled_dot_product_attention.
#   VAE encode          Wan-2.1 encoder widths, 17x256x256 clips, bf16: clips/s vs PyTorch
#                       conv3d on the same weights (bench/bench_cuda_vae.py).
#   CUDA IPC handoff    GB/s between two processes on one GPU vs a device copy
#                       (tests/gpu/test_cuda_xfer bench).
#   --quick             smaller shapes (a smoke run); --tests also runs `ctest -L gpu`.
#
# Environment: VFLOW_BENCH_PY = the Python with PyTorch 2.x + CUDA (default python3).
# A GPU machine without vflow's build dependencies (libzmq, lmdb, lua5.4, libav*): build
# elsewhere with bench/bench_cuda_pack.sh, carry .cudapack, unpack it and pass
# --prebuilt DIR (binaries in the build-dir layout plus the shared libraries they load).
# Or put .deb files of the -dev packages and their libraries in $SRC/.debs: they are
# unpacked into $SRC/.deproot and built against. Full logs and the JSON lines go to
# BUILD_DIR/bench-cuda/.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=""
QUICK=0
TESTS=0
PREBUILT=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --tests) TESTS=1 ;;
    --prebuilt) PREBUILT=1; BUILD="$2"; shift ;;
    *) BUILD="$1" ;;
  esac
  shift
done
BUILD=$(realpath -m "${BUILD:-$SRC/build-cuda}")
PY=${VFLOW_BENCH_PY:-python3}
LOG="$BUILD/bench-cuda"

if [ "$PREBUILT" = 1 ]; then
  export LD_LIBRARY_PATH="$BUILD/lib:${LD_LIBRARY_PATH:-}"
else
# ---------------------------------------------------------------- dependencies
need="libzmq lmdb lua5.4 libavformat libavcodec libavutil libswscale"
if ! pkg-config --exists $need 2>/dev/null && [ -d "$SRC/.debs" ]; then
  ROOT="$SRC/.deproot"
  mkdir -p "$ROOT"
  for f in "$SRC"/.debs/*.deb; do dpkg -x "$f" "$ROOT"; done
  ML=$(ls -d "$ROOT"/usr/lib/*-linux-gnu 2>/dev/null | head -1)
  export PKG_CONFIG_SYSROOT_DIR="$ROOT" PKG_CONFIG_PATH="$ML/pkgconfig:$ROOT/usr/share/pkgconfig"
  export CPATH="$ROOT/usr/include:${CPATH:-}" LIBRARY_PATH="$ML:${LIBRARY_PATH:-}"
  export LD_LIBRARY_PATH="$ML:${LD_LIBRARY_PATH:-}"
fi
if ! pkg-config --exists $need 2>/dev/null; then
  echo "bench_cuda: missing build dependencies ($need); see the header of this script" >&2
  exit 1
fi

# ---------------------------------------------------------------- build
mkdir -p "$BUILD"
gen=""
command -v ninja > /dev/null && gen="-G Ninja"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S "$SRC" -B "$BUILD" $gen -DVFLOW_CUDA=ON -DCMAKE_BUILD_TYPE=Release > /dev/null || exit 1
fi
cmake --build "$BUILD" -j "$(nproc)" > "$BUILD/build.log" 2>&1 || { tail -30 "$BUILD/build.log"; exit 1; }
fi
mkdir -p "$LOG"
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "bench_cuda: $(date -u +%Y-%m-%dT%H:%MZ) on ${GPU:-unknown GPU}; torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null)"

if [ "$TESTS" = 1 ]; then # the GPU tests, directly (a prebuilt tree has no ctest files)
  export VFLOW_BIN="$BUILD/vflow" VFLOW_BUILD="$BUILD" VFLOW_SRC="$SRC" VFLOW_PY="$PY"
  for t in "$BUILD"/tests/gpu_test_*; do
    "$t" > "$LOG/$(basename "$t").log" 2>&1
    echo "  $(basename "$t"): rc $? ($(tail -1 "$LOG/$(basename "$t").log"))"
  done
  for t in "$SRC"/tests/gpu/test_*.py; do
    "$PY" "$t" > "$LOG/$(basename "$t").log" 2>&1
    echo "  $(basename "$t"): rc $? ($(tail -1 "$LOG/$(basename "$t").log"))"
  done
fi

# runs a command, keeps its log, appends its last JSON line to results.jsonl
run() {
  local name=$1
  shift
  echo "== $name: $*" >> "$LOG/all.log"
  if "$@" > "$LOG/$name.log" 2>&1; then
    grep '^{' "$LOG/$name.log" | tail -1 | sed "s/^{/{\"name\":\"$name\",/" >> "$LOG/results.jsonl"
    grep -v '^{' "$LOG/$name.log" | grep -v '^step ' | tail -3
  else
    echo "  $name FAILED (rc $?): $(tail -3 "$LOG/$name.log")"
  fi
}
rm -f "$LOG/results.jsonl"; touch "$LOG/results.jsonl"

if [ "$QUICK" = 1 ]; then
  DIT="T=5 H=32 W=32 steps=3 warmup=1"; DITPY="--T 5 --H 32 --W 32 --steps 3 --warmup 1"
  L=2048; FR=5; SZ=128; SIZES="1 16"
else
  DIT="T=13 H=48 W=84 steps=8 warmup=2"; DITPY="--T 13 --H 48 --W 84 --steps 8 --warmup 3"
  L=13104; FR=17; SZ=256; SIZES="1 16 64 256"
fi

run attn_vflow "$BUILD/bench/bench_cuda_dit" attn L=$L H=12 D=128
run attn_torch "$PY" "$SRC/bench/bench_cuda_dit.py" attn --L $L --heads 12 --D 128
run xattn_vflow "$BUILD/bench/bench_cuda_dit" attn L=$L Lk=512 H=12 D=128
run xattn_torch "$PY" "$SRC/bench/bench_cuda_dit.py" attn --L $L --Lk 512 --heads 12 --D 128
run dit_vflow "$BUILD/bench/bench_cuda_dit" step preset=wan-1.3b recompute=1 $DIT
run dit_torch_eager "$PY" "$SRC/bench/bench_cuda_dit.py" step --preset wan-1.3b $DITPY
run dit_torch_compile "$PY" "$SRC/bench/bench_cuda_dit.py" step --preset wan-1.3b --compile $DITPY
run vae "$PY" "$SRC/bench/bench_cuda_vae.py" "$BUILD" --frames $FR --size $SZ
echo "== CUDA IPC handoff between two processes on one GPU vs a device copy"
"$BUILD/tests/gpu_test_cuda_xfer" bench $SIZES 2>&1 | tee "$LOG/ipc.log"

# ---------------------------------------------------------------- ratios
"$PY" - "$LOG/results.jsonl" <<'EOF'
import json, sys
r = {}
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
        r[d["name"]] = d
    except ValueError:
        pass
def g(n, k):
    return r.get(n, {}).get(k)
def ratio(a, b):
    return "%.2fx" % (a / b) if a and b else "n/a"
print("\n== ratios (vflow / peer; goals in README)")
v, e, c = "dit_vflow", "dit_torch_eager", "dit_torch_compile"
print("DiT step tokens/s   vs torch.compile %s (goal >= 1.0x), vs eager %s" %
      (ratio(g(v, "tokens_per_s"), g(c, "tokens_per_s")), ratio(g(v, "tokens_per_s"), g(e, "tokens_per_s"))))
print("DiT peak memory     vs torch.compile %s (goal <= 0.7x), vs eager %s" %
      (ratio(g(v, "peak_bytes"), g(c, "peak_bytes")), ratio(g(v, "peak_bytes"), g(e, "peak_bytes"))))
for n in (v, e, c):
    if n in r:
        print("  %-18s %8.0f tokens/s  MFU %5.1f%%  peak %6.2f GiB" %
              (n, g(n, "tokens_per_s"), 100 * g(n, "mfu"), g(n, "peak_bytes") / 2 ** 30))
print("attention fwd+bwd   self %s, cross %s of SDPA (goal >= 0.8x)" %
      (ratio(g("attn_vflow", "fwdbwd_tflops"), g("attn_torch", "fwdbwd_tflops")),
       ratio(g("xattn_vflow", "fwdbwd_tflops"), g("xattn_torch", "fwdbwd_tflops"))))
print("VAE encode clips/s  whole %s, chunked %s of PyTorch conv3d (goal >= 1.0x)" %
      ("%.2fx" % g("vae", "ratio_whole") if g("vae", "ratio_whole") else "n/a",
       "%.2fx" % g("vae", "ratio_chunk4") if g("vae", "ratio_chunk4") else "n/a"))
EOF
