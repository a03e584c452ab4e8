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

# train_kill RUN_DIR STAGE STEPS [--set k=v ...]: like train, but SIGKILLs STAGE's worker
# once STEPS steps are done (its pid from the driver's spawn trace) and waits for the run;
# 0 when the run failed after the kill, else 1 with the reason on stdout
train_kill() {
  local dir=$1 stage=$2 at=$3 pid="" vpid i
  shift 3
  rm -f "$dir.trace"
  VFLOW_TRACE_SPAWN=$TMP/$dir.trace "$VFLOW" run "$PIPE" --run-dir "$dir" --set cache="$CACHE" "$@" \
    > "$dir.out" 2>&1 &
  vpid=$!
  for i in $(seq 1 3000); do
    [ -z "$pid" ] && pid=$(awk -v v="stages=$stage" '$3 == v {sub("pid=", "", $1); print $1}' "$dir.trace" 2>/dev/null)
    [ -n "$pid" ] && [ "$(steps_done "$dir")" -ge "$at" ] && break
    kill -0 $vpid 2>/dev/null || break
    sleep 0.01
  done
  [ -n "$pid" ] || { echo "no worker $stage in the spawn trace: $(tail -5 "$dir.out")"; return 1; }
  kill -9 "$pid" 2>/dev/null || { echo "$stage (pid $pid) already gone: the run ended first"; return 1; }
  wait $vpid && { echo "the run succeeded although $stage was killed"; return 1; }
  return 0
}

# make_buckets: a bucketed cache $BK of three buckets, 1, 4 and 8 tokens a sample, in
# batches of 4, 2 and 2 (so the largest micro-batch by B·L is not the one of the largest
# B); trainb RUN_DIR [--set k=v ...]: train on it
BK=$TMP/buckets.lmdb
make_buckets() {
  local b
  for b in "16 16 1 4 0" "32 16 5 2 100" "64 32 1 2 200"; do
    set -- $b
    "$TOOL" mkbucket "$BK" 13 4 $1 $2 $3 $4 $5 > /dev/null || fail "mkbucket $b"
  done
}
trainb() {
  local dir=$1
  shift
  "$VFLOW" run "$PIPE" --run-dir "$dir" --set cache="$BK" "$@" > "$dir.out" 2>&1
}
