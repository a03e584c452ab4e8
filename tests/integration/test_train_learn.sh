#!/bin/bash
# test_train_learn.sh — the tiny DiT learns: 200 steps of `vflow run pipelines/train_dit.lua`
# (P = 2 partitions, S = 2 shards, M = 2 micro-batches, batch 8, warmup + cosine lr) on a
# 64-sample structured latent cache (train_tool mkcache: four captioned classes of plane
# waves plus 10% noise). The rectified-flow loss starts near E|noise − x0|² ≈ 1.5 (the
# head starts at zero); a model that learned nothing would stay there, one that learned
# the class patterns and to denoise drops far below (~0.35 of the start in our runs). We
# assert mean(last 20 steps) < 0.6 × mean(first 20 steps): a wide margin for a drop that
# only real learning explains. Also checked: every step's row in metrics.jsonl carries
# loss, grad norm, lr, step time, samples/s, tokens/s and the measured bubble; the lr
# follows the schedule (linear warmup, cosine to min_lr); each partition reports its
# busy time per step.
# vflow-test: timeout=180
set -u
CACHE_N=64
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

train l --set steps=200 --set every=100 --set batch=8 --set stages=2 --set shards=2 --set micro_batches=2 \
  --set lr=2e-3 --set warmup=10 --set schedule=cosine --set min_lr=1e-4 || fail "training: $(tail -5 l.out)"
"$PY" - l/metrics.jsonl <<'EOF2' || fail "learning / metrics check"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = {r["step"]: r for r in rows if r.get("event") == "train_step"}
assert sorted(steps) == list(range(1, 201)), "missing steps"
for r in steps.values():
    for k in ("loss", "grad_norm", "lr", "step_s", "samples_s", "tokens_s", "bubble", "clip"):
        assert k in r and math.isfinite(r[k]), (k, r)
    assert 0 <= r["bubble"] < 1 and r["samples_s"] > 0, r
    assert abs(r["tokens_s"] - 16 * r["samples_s"]) <= 1e-4 * r["tokens_s"], r  # 16 tokens per sample
assert abs(steps[5]["lr"] - 1e-3) < 1e-12 and abs(steps[10]["lr"] - 2e-3) < 1e-12, (steps[5]["lr"], steps[10]["lr"])
assert abs(steps[200]["lr"] - 1e-4) < 1e-12 and steps[105]["lr"] < steps[11]["lr"], steps[200]["lr"]
loss = [steps[s]["loss"] for s in range(1, 201)]
first, last = sum(loss[:20]) / 20, sum(loss[-20:]) / 20
ratio = last / first
print("loss: first 20 steps %.4f, last 20 steps %.4f, ratio %.3f" % (first, last, ratio))
assert ratio < 0.6, ratio
parts = [r for r in rows if r.get("event") == "partition_step"]
assert {(r["partition"], r["step"]) for r in parts} == {(p, s) for p in (0, 1) for s in range(1, 201)}
assert all(0 < r["busy_s"] <= r["window_s"] + 1e-3 for r in parts)
lossrows = [r for r in rows if r.get("event") == "loss"]
assert len(lossrows) == 200 and all(abs(r["loss"] - steps[r["step"]]["loss"]) < 1e-12 for r in lossrows)
EOF2
echo "PASS"
