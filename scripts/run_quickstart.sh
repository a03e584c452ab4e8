#!/usr/bin/env bash
# run_quickstart.sh BUILD_DIR — what `make run` does, end to end, from the repo root:
#
#   1. scripts/make_sample_videos.sh          sample videos + manifest (data/samples)
#   2. vflow run pipelines/precompute_latents.lua   decode + VAE encode -> cache/latents.lmdb
#   3. vflow run pipelines/train_dit.lua      the tiny DiT, 2 pipeline partitions x 2 micro-
#                                             batches, 2 optimizer shards, async checkpoints
#                                             every 100 steps, for QUICKSTART_STEPS (300) steps
#                                             and a `sample` stage that turns each checkpoint
#                                             into a video of two of the captions
#   4. the loss curve (from runs/quickstart/metrics.jsonl), the final checkpoint path, the
#      sample videos of the last checkpoint and where the TensorBoard event files are, with
#      the `tensorboard --logdir` line.
#
# Under 3 minutes on 2 cores. Training runs one OpenMP thread per process: the partitions
# and shards are processes of their own and share the cores. Rerunning skips what exists
# (videos, cached latents) and trains again from scratch, the earlier run's checkpoints
# moved to runs/quickstart/ckpt/earlier-<time>/ (QUICKSTART_RESUME=1: --resume=auto,
# which continues from the newest checkpoint when there is one).
set -euo pipefail

BUILD=${1:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
VFLOW=$BUILD/vflow
STEPS=${QUICKSTART_STEPS:-300}
[ -x "$VFLOW" ] || { echo "run_quickstart: $VFLOW is not built" >&2; exit 1; }
cd "$ROOT"
t0=$(date +%s)

echo "== 1/3 sample videos"
bash scripts/make_sample_videos.sh data/samples

echo "== 2/3 precompute latents -> cache/latents.lmdb"
"$VFLOW" run pipelines/precompute_latents.lua --set manifest=data/samples/manifest.csv \
  --set cache=cache/latents.lmdb --run-dir runs/precompute
"$VFLOW" cache stat cache/latents.lmdb | sed -n '1,6p'

# The first N captions of the manifest, '|'-separated (the sample stage's captions).
captions() {
  python3 -c 'import csv, sys
rows = list(csv.DictReader(open("data/samples/manifest.csv")))
print("|".join(r["text"].replace("|", " ") for r in rows[:int(sys.argv[1])]))' "$1"
}

echo "== 3/3 train the tiny DiT for $STEPS steps"
resume=()
[ "${QUICKSTART_RESUME:-0}" = 1 ] && resume=(--resume=auto)
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} \
  "$VFLOW" run pipelines/train_dit.lua --run-dir runs/quickstart --set run=quickstart \
  --set cache=cache/latents.lmdb --set steps="$STEPS" --set batch=4 --set stages=2 \
  --set micro_batches=2 --set shards=2 --set lr=2e-3 --set warmup=20 --set schedule=cosine \
  --set min_lr=2e-4 --set every=100 --set keep=2 \
  --set sample_captions="$(captions 2)" --set sample_size=64x64 --set sample_frames=17 \
  --set sample_steps=20 --set sample_fps=12 --set sample_cache=cache/latents.lmdb "${resume[@]}"

metrics=runs/quickstart/metrics.jsonl
echo
echo "loss curve (mean per bucket of steps; $metrics):"
awk -v rows=15 '
  /"event":"train_step"/ {
    match($0, /"step":[0-9]+/); s = substr($0, RSTART + 7, RLENGTH - 7) + 0
    match($0, /"loss":[-0-9.eE+]+/); l = substr($0, RSTART + 7, RLENGTH - 7) + 0
    match($0, /"step_s":[-0-9.eE+]+/); dt = substr($0, RSTART + 9, RLENGTH - 9) + 0
    match($0, /"bubble":[-0-9.eE+]+/); b = substr($0, RSTART + 9, RLENGTH - 9) + 0
    loss[s] = l; n = s > n ? s : n; tsum += dt; bsum += b; cnt++
  }
  END {
    if (n == 0) { print "  (no training steps recorded)"; exit 1 }
    per = int((n + rows - 1) / rows); max = 0
    for (i = 1; i <= n; i += per) {
      m = 0; k = 0
      for (j = i; j < i + per && j <= n; j++) if (j in loss) { m += loss[j]; k++ }
      if (k) { mean[i] = m / k; if (mean[i] > max) max = mean[i] }
    }
    printf "  %-11s %-9s\n", "steps", "loss"
    for (i = 1; i <= n; i += per) {
      if (!(i in mean)) continue
      bar = ""; w = int(50 * mean[i] / max + 0.5)
      for (c = 0; c < w; c++) bar = bar "#"
      last = (i + per - 1 < n ? i + per - 1 : n)
      printf "  %4d-%-6d %-9.4f %s\n", i, last, mean[i], bar
    }
    printf "  %d steps, %.3f s/step, measured pipeline bubble %.2f (1F1B theory (P-1)/(M+P-1) = 0.33)\n",
           n, tsum / cnt, bsum / cnt
  }' "$metrics"

ckpt=runs/quickstart/ckpt
if [ -f "$ckpt/latest" ]; then
  echo "checkpoint: $ROOT/$ckpt/$(cat "$ckpt/latest") (model.safetensors, optimizer shards, state.json)"
else
  echo "no checkpoint written (see runs/quickstart/run.log)" >&2
  exit 1
fi
samples=$(ls -d runs/quickstart/samples/step-* 2>/dev/null | sort -t- -k2 -n | tail -1)
if [ -n "$samples" ] && ls "$samples"/*.mp4 >/dev/null 2>&1; then
  echo "sample videos of the last checkpoint ($ROOT/$samples):"
  for f in "$samples"/*.mp4; do echo "  $(basename "$f")  (+ ${f%.mp4}.png, a strip of 4 frames)"; done
else
  echo "no sample video written (see runs/quickstart/run.log)" >&2
  exit 1
fi
echo "TensorBoard event files: $ROOT/runs/quickstart/tb/ (precompute: $ROOT/runs/precompute/tb/)"
# the TensorBoard scripts/setup.sh installs (any other reads the same files)
echo "  ${VFLOW_REF_VENV:-/opt/vflow-ref}/bin/tensorboard --logdir runs/quickstart/tb"
echo "make run: done in $(( $(date +%s) - t0 )) s"
