#!/bin/bash
# test_train_replicas.sh — data parallelism against one replica. The readers deal each
# epoch's order to the D replicas round-robin and replica r keys sample j's noise and
# timestep by j·D + r, so D replicas of batch b train on the same samples, noise and
# timesteps as one replica of batch D·b, with the loss scaled by 1/D per replica
# (docs/TRAINING.md, "One step"). What differs is only the order of the gradient sums
# (each replica's batch apart, then the replicas in replica order), so after 20 steps
# the weights, and every step's loss and gradient norm, agree to rounding: ≤ 1e-6
# relative (measured 2.7e-8). Replicas summed instead of averaged double the gradient
# norm; a replica keyed like another trains on other noise: both fail here.
# Runs: D = 1 at batch 4 (P = 1, S = 1); D = 2 at batch 2 (P = 2, S = 3); D = 4 at batch 1
# (P = 1, S = 2); M = 1 micro-batch each.
# vflow-test: timeout=240
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

COMMON=(--set steps=20 --set every=0 --set lr=2e-3 --set micro_batches=1)
train d1 "${COMMON[@]}" --set replicas=1 --set batch=4 --set stages=1 --set shards=1 || fail "D=1: $(tail -5 d1.out)"
train d2 "${COMMON[@]}" --set replicas=2 --set batch=2 --set stages=2 --set shards=3 || fail "D=2: $(tail -5 d2.out)"
train d4 "${COMMON[@]}" --set replicas=4 --set batch=1 --set stages=1 --set shards=2 || fail "D=4: $(tail -5 d4.out)"
grep -q 'shard=1/2' d2/ckpt/step-20/state.json || fail "D=2: no cursor of replica 1 in state.json"
grep -q 'shard=3/4' d4/ckpt/step-20/state.json || fail "D=4: no cursor of replica 3 in state.json"
"$PY" "$SRC/tests/integration/train_compare.py" 1e-6 20 d1 d2 d4 || fail "D replicas of batch b differ from one of batch D·b"
echo "PASS"
