# train_lib.sh — shared by the training tests (test_train_*.sh) and bench_checkpoint.sh:
# sourced, not run. Sets up a temp dir with a small structured latent cache and offers
# `train` (vflow run pipelines/train_dit.lua with the given knobs) and helpers to read
# the run's metrics.
#
# The model is the tiny preset at the cache's latent shape (4, 1, 8, 8): 16 tokens per
# sample, ~0.01-0.05 s per step on one core, so a 20-step run is a second or two of
# compute on top of process startup. One OpenMP thread per process: the partitions and
# shards are processes of their own sharing the machine's cores.
BUILD=${VFLOW_BUILD:-.}
VFLOW=${VFLOW_BIN:-$BUILD/vflow}
SRC=${VFLOW_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
PY=${VFLOW_PY:-/usr/bin/python3}
TOOL=$BUILD/tools/train_tool
PIPE=$SRC/pipelines/train_dit.lua
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
[ -x "$VFLOW" ] && [ -x "$TOOL" ] || { echo "vflow or train_tool not built"; exit 1; }

TMP=$(mktemp -d /tmp/vf_train.XXXXXX)
CACHE=$TMP/cache.lmdb
fail() { echo "FAIL: $*"; echo "(kept $TMP)"; exit 1; }
cleanup() { [ -n "${KEEP:-}" ] || rm -rf "$TMP"; }
trap cleanup EXIT

"$TOOL" mkcache "$CACHE" "${CACHE_N:-32}" 4 1 8 8 7 > /dev/null || fail "mkcache"

# train RUN_DIR [--set k=v ...] [--resume]: runs to the end; output in RUN_DIR.out
train() {
  local dir=$1
  shift
  "$VFLOW" run "$PIPE" --run-dir "$dir" --set cache="$CACHE" "$@" > "$dir.out" 2>&1
}

# model_md5 RUN_DIR STEP
model_md5() { md5sum < "$1/ckpt/step-$2/model.safetensors" | cut -d' ' -f1; }

# steps_done RUN_DIR: train_step rows in metrics.jsonl so far
steps_done() {
  local n
  n=$(grep -c '"event":"train_step"' "$1/metrics.jsonl" 2>/dev/null)
  echo "${n:-0}"
}
