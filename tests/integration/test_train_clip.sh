#!/bin/bash
# test_train_clip.sh — gradient clipping below its threshold is no clipping at all, bit for
# bit. torch's clip_grad_norm_ multiplies the gradients by min(1, clip / (norm + 1e-6)),
# which is exactly 1 while the norm stays under the threshold; so on the CPU backend a run
# whose threshold is never reached (clip = 1000; the tiny model's norms are about 1) ends
# with the same model.safetensors bytes as one without clipping (clip = 0), and reports a
# factor of 1 on every step. A threshold under every norm (clip = 0.01) changes the
# weights, so the comparison can fail. P = 2 partitions, S = 2 shards (the norm is summed
# across shards), 10 steps.
# vflow-test: timeout=180
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

COMMON=(--set steps=10 --set every=0 --set batch=4 --set lr=2e-3 --set stages=2 --set shards=2)
for c in 0 1000 0.01; do
  train "clip$c" "${COMMON[@]}" --set clip=$c || fail "clip=$c: $(tail -5 clip$c.out)"
done
off=$(model_md5 clip0 10)
[ "$(model_md5 clip1000 10)" = "$off" ] || fail "a threshold never reached changed the weights"
[ "$(model_md5 clip0.01 10)" != "$off" ] || fail "clip = 0.01 gave the unclipped weights (clipping ignored?)"
"$PY" - clip1000/metrics.jsonl clip0.01/metrics.jsonl <<'EOF' || fail "clip factors"
import json, sys
for path, below in zip(sys.argv[1:], (True, False)):
    rows = [r for r in map(json.loads, open(path)) if r.get("event") == "train_step"]
    assert len(rows) == 10, path
    for r in rows:
        if below:
            assert r["grad_norm"] < 1000 and r["clip"] == 1, r
        else:
            assert r["grad_norm"] > 0.01 and abs(r["clip"] - 0.01 / (r["grad_norm"] + 1e-6)) <= 1e-5 * r["clip"], r  # the row has 6 digits
print("clip 1000: factor 1 on all 10 steps; clip 0.01: factor 0.01 / (norm + 1e-6)")
EOF
echo "PASS: clip = 1000 gives the clip = 0 bytes ($off)"
