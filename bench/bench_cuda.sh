#!/bin/bash
# bench_cuda.sh — THE GPU run, the one command a lent GPU machine runs: versions, every
# `gpu` test, then each benchmark next to its PyTorch peer, each under its own timeout,
# results appended as they come, all inside a deadline (default 450 s). Nothing is built
# on the GPU machine: it runs the pack that the development machine made.
#
#   here (development machine):  make gpu-pack   (bench/bench_cuda_pack.sh: the CUDA build
#                                                 packed into .cudapack/, the diffusers
#                                                 wheel into .whl/)
#   GPU machine (one call, carry .cudapack and .whl):
#                                bash bench/bench_cuda.sh
#   then here: copy $OUT/gpu-<date>-<gpu>.json into bench/results/ and run
#   scripts/gen_gpu_table on it (README's GPU table). docs/GPU_RUN.md is the guide.
#
#   bash bench/bench_cuda.sh [--pack FILE | --prebuilt DIR] [--out DIR] [--deadline S]
#                            [--only a,b,...] [--quick]
#
#   --pack FILE      the pack (default .cudapack/vflow-cuda.tar.xz), unpacked into $TMPDIR
#   --prebuilt DIR   a CUDA build directory (or an unpacked pack) instead
#   --out DIR        results (default $OUT, the device tool's output folder, else
#                    build-gpu-run/): results.jsonl (one JSON line per measurement, each
#                    tagged with its section, appended as it comes), gpu-<date>-<gpu>.json
#                    (bench/bench_cuda_results.py, also when the run was cut short),
#                    run.log (this console), logs.tgz (each section's own log)
#   --deadline S     the whole run's budget in seconds; a section that would start with
#                    less than 10 s left is skipped as "out of time"
#   --only LIST      only these sections (a second run that confirms fixes)
#   --quick          small shapes (a smoke run)
#
# Sections, in order (the order is the priority when time runs out; on an H200 on
# 2026-11-27 they took 55 s for the tests, 14 s for each vflow DiT step, about 60 s for
# torch.compile, 26 s eager, 22 s the attention, 28 and 45 s the VAE, 57 s block swap):
#   versions          GPU, driver, CUDA, cuDNN, torch, diffusers, the pack's commit
#   tests             every tests/gpu test: the packed gpu_test_* binaries and the
#                     tests/gpu/*.py scripts, each under its own timeout
#   dit_vflow         DiT training step, Wan-1.3B dims, 13 104 tokens, bf16, recompute:
#                     tokens/s, MFU, peak, and one step op by op (phases: attention,
#                     GEMM, norm/elementwise, optimizer, transfers, memsets, idle)
#   dit_torch_compile dit_torch_eager
#                     the DiT step in PyTorch (bench_cuda_dit.py), torch.compile (each
#                     block compiled), eager
#   dit_vflow_graphs  the same step with VFLOW_CUDA_GRAPHS=1 (each block's passes
#                     replayed as CUDA graphs), timed steps only: tokens/s
#   attn_vflow attn_torch xattn_vflow xattn_torch
#                     attention fwd+bwd TFLOP/s, self (13 104 tokens) and cross (512
#                     keys), vflow and torch's SDPA
#   vae_small         Wan 2.1 VAE encode and decode of a 17x256x256 clip, vflow and
#                     diffusers' AutoencoderKLWan on the same weights (bench_cuda_vae.py)
#   vae_large         the same VAE comparison at 81x480x832
#   swap_vflow        block swap: a LoRA step (Wan-1.3B dims, recompute) with the whole
#                     frozen base on the GPU, then with the last depth−4 blocks streamed
#                     from pinned host memory on the copy stream: step times, their
#                     ratio, the copies' own time and the share of it hidden; and the
#                     step with the block inputs offloaded to host memory instead
#                     (offload_activations), its ratio to the resident step
#   ipc               CUDA IPC handoff between two processes vs a device copy
#   a2a               the sequence-parallel all-to-all vs plain NCCL (2+ GPUs)
#
# The environment it sets up: the pack's libraries and PyTorch's cuDNN wheel (vflow
# dlopens libcudnn.so.9) on LD_LIBRARY_PATH; the carried wheels in .whl/ installed with
# `pip install --no-deps` into a fresh folder on PYTHONPATH (the GPU machine reaches no
# package registry). VFLOW_BENCH_PY picks the Python with PyTorch (default python3).
# Without a GPU every section reports itself skipped and the results JSON is still made.
set -u
START=$(date +%s)
SRC=$(cd "$(dirname "$0")/.." && pwd)
PACK="$SRC/.cudapack/vflow-cuda.tar.xz"
BUILD=""
OUTD=${OUT:-$SRC/build-gpu-run}
DEADLINE=450
ONLY=""
QUICK=0
usage() { echo "usage: bash bench/bench_cuda.sh [--pack FILE | --prebuilt DIR] [--out DIR] [--deadline S] [--only a,b] [--quick]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --pack) [ $# -ge 2 ] || usage; PACK=$2; shift ;;
    --prebuilt) [ $# -ge 2 ] || usage; BUILD=$2; shift ;;
    --out) [ $# -ge 2 ] || usage; OUTD=$2; shift ;;
    --deadline) [ $# -ge 2 ] || usage; DEADLINE=$2; shift ;;
    --only) [ $# -ge 2 ] || usage; ONLY=",$2,"; shift ;;
    --quick) QUICK=1 ;;
    *) echo "bench_cuda: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
case "$DEADLINE" in ''|*[!0-9]*) echo "bench_cuda: --deadline '$DEADLINE' is not a number of seconds" >&2; exit 2 ;; esac
if [ -z "$BUILD" ] && [ ! -f "$PACK" ]; then
  echo "bench_cuda: no pack at $PACK: run 'make gpu-pack' on the development machine and carry .cudapack" >&2
  exit 2
fi
if [ -n "$BUILD" ] && [ ! -x "$BUILD/vflow" ]; then
  echo "bench_cuda: --prebuilt $BUILD has no vflow binary" >&2
  exit 2
fi
END=$((START + DEADLINE))
PY=${VFLOW_BENCH_PY:-python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vflow-gpu-run.XXXXXX")
mkdir -p "$OUTD" "$TMP/logs"
OUTD=$(cd "$OUTD" && pwd)
RES="$OUTD/results.jsonl"
LOGS="$TMP/logs"
: > "$RES"
exec > >(tee "$OUTD/run.log") 2>&1
TEE=$!

# one JSON line into the results, tagged with its section
note() { # section key=value-json ...
  local s=$1 line
  shift
  line="{\"section\":\"$s\""
  for kv in "$@"; do line="$line,\"${kv%%=*}\":${kv#*=}"; done
  echo "$line}" >> "$RES"
}
jstr() { printf '"%s"' "$(printf '%s' "$1" | tr -d '\000-\037' | cut -c1-400 | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
want() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }

# ---------------------------------------------------------------- the pack
if [ -z "$BUILD" ]; then
  tar -xJf "$PACK" -C "$TMP" || { echo "bench_cuda: cannot unpack $PACK" >&2; exit 2; }
  BUILD="$TMP/vflow-cuda"
fi
BUILD=$(cd "$BUILD" && pwd) || exit 2
[ -d "$BUILD/lib" ] && export LD_LIBRARY_PATH="$BUILD/lib:${LD_LIBRARY_PATH:-}"

# PyTorch's cuDNN wheel: vflow dlopens libcudnn.so.9 and finds it through LD_LIBRARY_PATH
CUDNN_LIB=$("$PY" - 2>/dev/null <<'EOF'
import glob, os
roots = []
try:
    import nvidia.cudnn as m
    roots += [os.path.join(p, "lib") for p in m.__path__] + [os.path.join(p, "**") for p in m.__path__]
except ImportError:
    pass
try:
    import nvidia
    roots += [os.path.join(p, "**") for p in nvidia.__path__]
except ImportError:
    pass
for r in roots:
    hits = sorted(glob.glob(os.path.join(r, "libcudnn.so.9*"), recursive=True))
    if hits:
        print(os.path.dirname(hits[0]))
        break
EOF
)
[ -n "$CUDNN_LIB" ] && export LD_LIBRARY_PATH="$CUDNN_LIB:$LD_LIBRARY_PATH"

# the carried wheels (diffusers), without their dependencies: the machine has them
SITE="$TMP/site"
WHEELS=$(ls "$SRC"/.whl/*.whl 2>/dev/null)
WHEEL_NOTE="no wheels carried in .whl/"
if [ -n "$WHEELS" ]; then
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" $WHEELS \
      > "$LOGS/pip.log" 2>&1; then
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    WHEEL_NOTE="installed $(echo $WHEELS | wc -w) wheel(s) from .whl/"
  else
    WHEEL_NOTE="pip install of .whl/ failed: $(tail -1 "$LOGS/pip.log")"
  fi
fi
export PYTHONUNBUFFERED=1 VFLOW_BIN="$BUILD/vflow" VFLOW_BUILD="$BUILD" VFLOW_SRC="$SRC" VFLOW_PY="$PY"
HAVE_TORCH=0
"$PY" -c 'import torch' > /dev/null 2>&1 && HAVE_TORCH=1

# ---------------------------------------------------------------- versions first
echo "== bench_cuda $(date -u +%Y-%m-%dT%H:%M:%SZ), deadline ${DEADLINE}s, results in $OUTD"
"$PY" - "$BUILD" "$CUDNN_LIB" "$WHEEL_NOTE" > "$LOGS/versions.log" 2>&1 <<'EOF'
import json, os, platform, re, subprocess, sys
build, cudnn_lib, wheel_note = sys.argv[1:4]
v = {"python": platform.python_version(), "cudnn_lib_dir": cudnn_lib or None, "wheels": wheel_note}
def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
q = sh("nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv,noheader")
if q:
    f = [s.strip() for s in q.splitlines()[0].split(",")]
    v.update(gpu=f[0], driver=f[1], gpu_memory=f[2], sm_clock_max=f[3] if len(f) > 3 else None,
             gpu_count=len(q.splitlines()))
m = re.search(r"CUDA Version:\s*([0-9.]+)", sh("nvidia-smi"))
v["cuda_driver_api"] = m.group(1) if m else None
m = re.search(r"release ([0-9.]+)", sh("nvcc", "--version"))
v["nvcc"] = m.group(1) if m else None
lib = [l.split("=>")[1].split()[0] for l in sh("ldd", os.path.join(build, "vflow")).splitlines()
       if "libcudart" in l and "=>" in l]
v["vflow_cudart"] = os.path.realpath(lib[0]) if lib and lib[0] != "not" else None
v["vflow_missing_libs"] = [l.split()[0] for l in sh("ldd", os.path.join(build, "vflow")).splitlines() if "not found" in l]
try:  # bench_cuda_pack.sh's "key value" lines: commit, built, nvcc, cuda_code
    for line in open(os.path.join(build, "VERSION")):
        key, _, val = line.strip().partition(" ")
        v["pack_" + key] = val
except OSError:
    v["pack_commit"] = None
try:
    import torch
    v["torch"] = torch.__version__
    v["torch_cuda"] = torch.version.cuda
    v["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        v.update(torch_device=p.name, sm=p.multi_processor_count, capability="%d.%d" % (p.major, p.minor))
except Exception as e:  # noqa: BLE001  (a broken torch is a finding, not a crash)
    v["torch"] = "not importable: %s" % e
from importlib import metadata
for pkg in ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "diffusers", "huggingface-hub", "transformers"):
    try:
        v[pkg] = metadata.version(pkg)
    except metadata.PackageNotFoundError:
        pass
try:
    import diffusers
    v["diffusers"] = diffusers.__version__
except Exception as e:  # noqa: BLE001
    v["diffusers"] = "not importable: %s" % str(e)[:200]
for k in sorted(v):
    print("  %-18s %s" % (k, v[k]))
print(json.dumps(v))
EOF
grep -v '^{' "$LOGS/versions.log"
grep '^{' "$LOGS/versions.log" | tail -1 | sed 's/^{/{"section":"versions",/' >> "$RES"
GPU_OK=0
nvidia-smi -L > /dev/null 2>&1 && GPU_OK=1

# ---------------------------------------------------------------- sections
# section NAME CAP NEEDS_TORCH CMD...: runs CMD under `timeout` (CAP seconds or what the
# deadline leaves), keeps its log, appends every JSON line it printed (tagged with the
# section), an attn_path line if it printed one and the conv paths it printed (the VAE
# sections: conv_path=cudnn, hand or cudnn+hand per encode and decode), then the status.
section() {
  local name=$1 cap=$2 torch=$3
  shift 3
  want "$name" || want "${GROUP:-.}" || return 0
  local left=$((END - $(date +%s) - 15)) # 15 s kept for the results file
  local t=$((cap < left ? cap : left))
  if [ "$torch" = 1 ] && [ "$HAVE_TORCH" = 0 ]; then
    note "$name" status='"skipped"' reason="$(jstr "$PY has no torch")"
    echo "== $name: skipped ($PY has no torch)"
    return 0
  fi
  if [ "$t" -lt 10 ]; then
    note "$name" status='"skipped"' reason='"out of time"'
    echo "== $name: skipped (out of time)"
    return 0
  fi
  local t0 rc status log="$LOGS/$name.log"
  t0=$(date +%s%N)
  echo "== $name (timeout ${t}s): $*" > "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1
  rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000)) dt
  dt=$((ms / 1000)).$(((ms % 1000) / 100))
  grep '^{' "$log" | sed "s/^{/{\"section\":\"$name\",/" >> "$RES"
  local ap cp
  ap=$(grep -o 'attn_path=[A-Za-z0-9_.+-]*' "$log" | tail -1)
  [ -n "$ap" ] && note "$name" attn_path="$(jstr "${ap#attn_path=}")"
  cp=$(grep -o 'conv_path=[A-Za-z0-9_.+-]*' "$log" | sort -u | sed 's/^conv_path=//' | paste -sd, -)
  [ -n "$cp" ] && note "$name" conv_path="$(jstr "$cp")"
  case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124|137) status=timeout ;;
    *) status=failed ;;
  esac
  note "$name" status="\"$status\"" rc=$rc s="$dt" last="$(jstr "$(grep -v '^{' "$log" | tail -1)")"
  echo "== $name: $status (rc $rc, $dt s)"
  grep -v '^{' "$log" | grep -v '^step \|^== ' | tail -"${SHOW:-4}" | sed 's/^/   /'
}

# the tests: each gpu test on its own clock
if want tests; then
  echo "== tests"
  for t in "$BUILD"/tests/gpu_test_* "$SRC"/tests/gpu/test_*.py; do
    [ -e "$t" ] || continue
    n=$(basename "$t" .py)
    n=${n#gpu_}
    case "$t" in *.py) cmd=("$PY" "$t"); cap=150 ;; *) cmd=("$t"); cap=60 ;; esac
    GROUP=tests SHOW=1 section "${n/test_/test.}" $cap 0 "${cmd[@]}"
  done
fi

if [ "$QUICK" = 1 ]; then
  DIT="T=5 H=32 W=32 steps=3 warmup=1"; DITPY="--T 5 --H 32 --W 32 --steps 3 --warmup 1"
  L=2048; VSMALL="5x64x64"; VLARGE="9x128x128"; SIZES="1 16"
else
  DIT="T=13 H=48 W=84 steps=6 warmup=2"; DITPY="--T 13 --H 48 --W 84 --steps 5 --warmup 2"
  L=13104; VSMALL="17x256x256"; VLARGE="81x480x832"; SIZES="1 16 64 256"
fi
B="$BUILD/bench/bench_cuda_dit"
section dit_vflow 100 0 "$B" step preset=wan-1.3b recompute=1 $DIT
section dit_torch_compile 150 1 "$PY" "$SRC/bench/bench_cuda_dit.py" step --preset wan-1.3b --compile $DITPY
section dit_torch_eager 80 1 "$PY" "$SRC/bench/bench_cuda_dit.py" step --preset wan-1.3b $DITPY
section dit_vflow_graphs 60 0 env VFLOW_CUDA_GRAPHS=1 "$B" step preset=wan-1.3b recompute=1 phases=0 $DIT
section attn_vflow 30 0 "$B" attn L=$L H=12 D=128 iters=10
section attn_torch 40 1 "$PY" "$SRC/bench/bench_cuda_dit.py" attn --L $L --heads 12 --D 128 --iters 10
section xattn_vflow 30 0 "$B" attn L=$L Lk=512 H=12 D=128 iters=10
section xattn_torch 40 1 "$PY" "$SRC/bench/bench_cuda_dit.py" attn --L $L --Lk 512 --heads 12 --D 128 --iters 10
section vae_small 100 1 "$PY" "$SRC/bench/bench_cuda_vae.py" "$BUILD" --shape $VSMALL --repeat 3 --budget 90
section vae_large 150 1 "$PY" "$SRC/bench/bench_cuda_vae.py" "$BUILD" --shape $VLARGE --repeat 2 --budget 140
section swap_vflow 90 0 "$B" swap preset=wan-1.3b $DIT
section ipc 40 0 "$BUILD/tests/gpu_test_cuda_xfer" bench $SIZES
section a2a 60 0 "$BUILD/tests/gpu_test_cuda_a2a" bench 256 20   # exit 77 (skip) on one GPU

# ---------------------------------------------------------------- results
echo "== results ($(( $(date +%s) - START )) s so far)"
(cd "$TMP" && tar -czf "$OUTD/logs.tgz" logs)
if ! "$PY" "$SRC/bench/bench_cuda_results.py" "$RES" --out "$OUTD"; then
  echo "bench_cuda: $PY could not assemble the results; trying python3" >&2
  python3 "$SRC/bench/bench_cuda_results.py" "$RES" --out "$OUTD"
fi
echo "== done in $(( $(date +%s) - START )) s; GPU present: $GPU_OK"
rm -rf "$TMP"
exec > /dev/null 2>&1
wait "$TEE" # run.log complete before the results are collected
