#!/bin/bash
# test_train_xchg.sh — the exchange between the DiT partitions and the optimizer shards
# (stages/train/dit_xchg.c, adamw_xchg.c) on the CPU backend, every partition and shard a
# process of its own talking over ZeroMQ ipc:
#   - the shards read the gradients and write the weights in the partitions' own shared
#     memory: with one partition (no norm block cut by a partition boundary) not one byte
#     is copied, every "xchg" metric row says copied_bytes 0; with P = 2 only the norm
#     blocks cut by the boundary are gathered, a few KiB;
#   - with views turned off (VFLOW_EDGE_VIEW=0: they cross as copies, as across nodes) the
#     bytes do cross (copied_bytes > 0: the weights come back as data) and the weights
#     are bitwise the same;
#   - backpressure: shards that hold the views 30 ms longer each step
#     (VFLOW_TEST_XCHG_DELAY_MS) leave the weights bitwise the same, with D = 2 replicas
#     too: a partition touches its buffers only after every shard has replied.
# vflow-test: timeout=240
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

COMMON=(--set steps=6 --set every=0 --set batch=4 --set lr=2e-3 --set micro_batches=2)

# copied RUN_DIR: the most bytes one shard copied in one step, and the number of rows
copied() {
  "$PY" - "$1/metrics.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"event":"xchg"' in l.replace(" ", "")]
print(max([r["copied_bytes"] for r in rows] or [-1]), len(rows))
PYEOF
}

train p1s2 "${COMMON[@]}" --set stages=1 --set shards=2 || fail "P=1 S=2: $(tail -5 p1s2.out)"
read -r most rows < <(copied p1s2)
[ "$rows" = 12 ] || fail "P=1 S=2: $rows xchg rows (expected 6 steps x 2 shards)"
[ "$most" = 0 ] || fail "P=1 S=2: a shard copied $most bytes in a step (views: none)"
echo "P=1 S=2: views, 0 bytes copied"

train p2s3 "${COMMON[@]}" --set stages=2 --set shards=3 || fail "P=2 S=3: $(tail -5 p2s3.out)"
read -r most rows < <(copied p2s3)
[ "$most" -ge 0 ] && [ "$most" -le 65536 ] || fail "P=2 S=3: a shard copied $most bytes in a step"
echo "P=2 S=3: at most $most bytes copied per shard and step (cut norm blocks)"
ref=$(model_md5 p2s3 6)
[ "$(model_md5 p1s2 6)" = "$ref" ] || fail "P=1 S=2 and P=2 S=3 differ"

VFLOW_EDGE_VIEW=0 train copies "${COMMON[@]}" --set stages=2 --set shards=3 || fail "copies: $(tail -5 copies.out)"
read -r most rows < <(copied copies)
[ "$most" -gt 65536 ] || fail "views turned off: only $most bytes copied (the weights must come back as data)"
[ "$(model_md5 copies 6)" = "$ref" ] || fail "views turned off: the weights differ"
echo "views turned off: $most bytes copied per shard and step, same bits"

VFLOW_TEST_XCHG_DELAY_MS=30 train slow "${COMMON[@]}" --set stages=2 --set shards=3 || fail "delay: $(tail -5 slow.out)"
[ "$(model_md5 slow 6)" = "$ref" ] || fail "shards holding the views longer changed the weights"
train d2 "${COMMON[@]}" --set replicas=2 --set stages=2 --set shards=3 || fail "D=2: $(tail -5 d2.out)"
VFLOW_TEST_XCHG_DELAY_MS=30 train d2slow "${COMMON[@]}" --set replicas=2 --set stages=2 --set shards=3 \
  || fail "D=2 delay: $(tail -5 d2slow.out)"
[ "$(model_md5 d2slow 6)" = "$(model_md5 d2 6)" ] || fail "D=2: shards holding the views longer changed the weights"
echo "shards holding the views 30 ms longer: same bits (D=1 and D=2)"
echo ok
