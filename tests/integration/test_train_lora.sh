#!/bin/bash
# test_train_lora.sh — LoRA training (`lora_rank` of pipelines/train_dit.lua, p:train's
# lora option) on the CPU backend, on a frozen base: a model trained 20 steps in full first
# (the seeded init zeroes the head, through which no adapter would learn).
#  - step 1 with LoRA has BITWISE the loss of a full fine-tune of the same base (B = 0: the
#    adapted model starts as the base);
#  - the checkpoint holds lora.safetensors (no model.safetensors): the targeted linears'
#    lora_A (rank, in), lora_B (out, rank) and alpha, nothing else; B has moved off zero;
#  - P ∈ {1, 2, 4} partitions × S ∈ {1, 3} shards, recompute, all stages in one process,
#    give the same lora.safetensors bytes; so do D = 2 replicas for P = 1 S = 1 and P = 2
#    S = 3 (other bytes than D = 1);
#  - the optimizer files hold the adapters' moments only (numel = the adapters' count);
#  - SIGKILL of a partition and of a shard mid-run, then --resume: the same bytes as the
#    uninterrupted run;
#  - a resume with another rank is refused (exit 2, naming lora.rank);
#  - a target that matches no linear is exit 2 at check time, naming the pattern.
# vflow-test: timeout=300
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

lora_md5() { md5sum < "$1/ckpt/step-$2/lora.safetensors" | cut -d' ' -f1; }

train base --set steps=20 --set every=0 --set batch=4 --set lr=2e-3 || fail "base: $(tail -5 base.out)"
BASE=$TMP/base/ckpt/step-20/model.safetensors
[ -f "$BASE" ] || fail "no base model"

STEPS=12
LORA=(--set weights="$BASE" --set lora_rank=4 --set lora_alpha=8 --set lora_targets="self_attn.q,self_attn.v,cross_attn.*,ffn.*"
      --set batch=4 --set lr=5e-3 --set steps=$STEPS)
train full --set weights="$BASE" --set steps=1 --set every=0 --set batch=4 --set lr=5e-3 --set stages=2 \
  || fail "full fine-tune: $(tail -5 full.out)"
# step 1's loss to all 17 digits (state.json of the step-1 checkpoints): the same double
train lora1 "${LORA[@]}" --set steps=1 --set every=0 --set stages=2 || fail "LoRA step 1: $(tail -5 lora1.out)"
l_full=$(grep -o '"loss": [^,]*' full/ckpt/step-1/state.json)
l_lora=$(grep -o '"loss": [^,]*' lora1/ckpt/step-1/state.json)
echo "step 1: full fine-tune $l_full, LoRA $l_lora"
[ -n "$l_full" ] && [ "$l_full" = "$l_lora" ] || fail "step 1 loss with LoRA differs: $l_lora vs $l_full"

ref=""
for c in "1 1" "2 3" "4 1" "2 1 recompute=true" "4 3 isolate=false"; do
  set -- $c
  d=p$1s$2${3:+_${3%%=*}}
  train $d "${LORA[@]}" --set every=0 --set stages=$1 --set shards=$2 --set micro_batches=2 ${3:+--set $3} \
    || fail "LoRA P=$1 S=$2 ${3:-}: $(tail -5 $d.out)"
  [ ! -e $d/ckpt/step-$STEPS/model.safetensors ] || fail "$d: a LoRA checkpoint re-saved the base model"
  h=$(lora_md5 $d $STEPS)
  echo "LoRA P=$1 S=$2 ${3:-}: lora.safetensors $h"
  [ -z "$ref" ] && ref=$h
  [ "$h" = "$ref" ] || fail "LoRA P=$1 S=$2 ${3:-}: adapters differ from P=1 S=1 ($h vs $ref)"
done
# D = 2 data-parallel replicas: the same bits for any P and S again
for c in "1 1" "2 3"; do
  set -- $c
  train d2p$1s$2 "${LORA[@]}" --set every=0 --set replicas=2 --set stages=$1 --set shards=$2 --set micro_batches=2 \
    || fail "LoRA D=2 P=$1 S=$2: $(tail -5 d2p$1s$2.out)"
done
[ "$(lora_md5 d2p1s1 $STEPS)" = "$(lora_md5 d2p2s3 $STEPS)" ] || fail "LoRA D=2: P=2 S=3 differs from P=1 S=1"
[ "$(lora_md5 d2p1s1 $STEPS)" != "$ref" ] || fail "LoRA D=2 gave the D=1 adapters (replicas ignored?)"
echo "LoRA D=2: P=1 S=1 and P=2 S=3 agree"

"$PY" - full p2s3 $STEPS <<'EOF' || fail "LoRA checks"
import json, struct, sys
import numpy as np

def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: (v["shape"], np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32))
            for k, v in h.items() if k != "__metadata__"}, h.get("__metadata__", {})

def rows(d, ev):
    return [r for r in map(json.loads, open(d + "/metrics.jsonl")) if r.get("event") == ev]

full, lora, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
# step 1: the same loss as the full fine-tune of the same base, to the last printed digit
lf = [r for r in rows(full, "loss")][0]
ll = [r for r in rows(lora, "loss") if r["step"] == 1][0]
print("step 1 loss: full %r, LoRA %r" % (lf["loss"], ll["loss"]))
assert lf["loss"] == ll["loss"], (lf, ll)
gn = [r["grad_norm"] for r in rows(lora, "train_step")]
assert gn[0] > 0 and all(g > 0 for g in gn), gn

T, meta = load(lora + "/ckpt/step-%d/lora.safetensors" % steps)
dim, ffn, depth, rank = 64, 256, 4, 4
mods = ["self_attn.q", "self_attn.v", "cross_attn.q", "cross_attn.k", "cross_attn.v", "cross_attn.o", "ffn.0", "ffn.2"]
io = {"ffn.0": (dim, ffn), "ffn.2": (ffn, dim)}
want = set()
for b in range(depth):
    for m in mods:
        p = "diffusion_model.blocks.%d.%s" % (b, m)
        want |= {p + ".lora_A.weight", p + ".lora_B.weight", p + ".alpha"}
        i, o = io.get(m, (dim, dim))
        assert T[p + ".lora_A.weight"][0] == [rank, i], (p, T[p + ".lora_A.weight"][0])
        assert T[p + ".lora_B.weight"][0] == [o, rank], (p, T[p + ".lora_B.weight"][0])
        assert T[p + ".alpha"][0] == [] and T[p + ".alpha"][1][0] == 8.0
assert set(T) == want, sorted(set(T) ^ want)[:5]
bmax = max(np.abs(v).max() for k, (s, v) in T.items() if k.endswith("lora_B.weight"))
assert bmax > 0, "B is still zero after training"
total = sum(v.size for k, (s, v) in T.items() if not k.endswith(".alpha"))
O, om = load(lora + "/ckpt/step-%d/optimizer-00-of-03.safetensors" % steps)
assert int(om["total"]) == total, (om["total"], total)
st = json.load(open(lora + "/ckpt/step-%d/state.json" % steps))
assert st["config"]["lora.rank"] == 4 and st["config"]["lora.alpha"] == 8, st["config"]
print("lora.safetensors: %d adapters, %d parameters, max |B| %.3g" % (len(want) // 3, total, bmax))
EOF

# SIGKILL of one worker, then --resume: the adapters of the uninterrupted run
RES=("${LORA[@]}" --set every=3 --set keep=2 --set stages=2 --set shards=2 --set micro_batches=2)
train ref "${RES[@]}" || fail "reference: $(tail -5 ref.out)"
want=$(lora_md5 ref $STEPS)
for victim in dit_1 adamw_0; do
  run=kill_$victim
  rm -f trace
  VFLOW_TRACE_SPAWN=$TMP/trace "$VFLOW" run "$PIPE" --run-dir $run --set cache="$CACHE" "${RES[@]}" > $run.out 2>&1 &
  vpid=$!
  pid=""
  for i in $(seq 1 3000); do
    [ -z "$pid" ] && pid=$(awk -v v="stages=$victim" '$3 == v {sub("pid=", "", $1); print $1}' trace 2>/dev/null)
    [ -n "$pid" ] && [ "$(steps_done $run)" -ge 5 ] && break
    kill -0 $vpid 2>/dev/null || break
    sleep 0.01
  done
  [ -n "$pid" ] || fail "$victim: not in the spawn trace: $(tail -5 $run.out)"
  kill -9 "$pid" 2>/dev/null || fail "$victim already gone: the run ended first"
  wait $vpid && fail "$victim: the run succeeded although it was killed"
  from=$("$TOOL" ckpt-find "$run/ckpt" 2>/dev/null | cut -d' ' -f1)
  mode=--resume
  [ -n "$from" ] || mode=--resume=auto
  train $run "${RES[@]}" $mode || fail "$victim: resume: $(tail -5 $run.out)"
  got=$(lora_md5 $run $STEPS)
  echo "killed $victim (newest checkpoint ${from:-none}), resumed: $got"
  [ "$got" = "$want" ] || fail "$victim: resumed adapters $got differ from the uninterrupted $want"
done

# a resume with other adapters is refused, naming the setting
train ref "${RES[@]}" --set lora_rank=8 --set steps=$((STEPS + 3)) --resume
rc=$?
[ $rc -eq 2 ] && grep -q "lora.rank" ref.out || fail "resume with another rank: exit $rc: $(tail -3 ref.out)"

# a target that matches no linear: exit 2 before any worker starts, naming it
"$VFLOW" check "$PIPE" --set cache="$CACHE" --set lora_rank=4 --set lora_targets="self_attn.q,nope.*" > bad.out 2>&1
rc=$?
[ $rc -eq 2 ] || fail "unmatched target: exit $rc, want 2: $(cat bad.out)"
grep -q '"nope.\*" matches no linear' bad.out || fail "unmatched target not named: $(cat bad.out)"
echo "PASS"
