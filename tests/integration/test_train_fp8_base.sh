#!/bin/bash
# test_train_fp8_base.sh — LoRA on a frozen base held in FP8 (`fp8_base` of
# pipelines/train_dit.lua, the dit stages' base_dtype = "fp8") on the CPU backend, on a
# base trained 20 steps in full first:
#  - the run trains (B moves off zero), each step's loss within 2 % of the run on the f32
#    base, and its checkpoints hold lora.safetensors with the same keys, dtypes and shapes
#    as that run's (the adapters stay f32);
#  - P = 1 and P = 2 partitions with S = 2 shards give the same lora.safetensors bytes;
#  - a base file that ships FP8 (ComfyUI fp8_scaled: F8_E4M3 block linears with a
#    .scale_weight each; here the scale is 1.5 times what vflow's rule picks, so that
#    requantising would change the values) is kept as it is: step 1's loss is bitwise
#    that of a LoRA run on the f32 base holding the values those bytes stand for;
#  - base_dtype "fp8" without LoRA is exit 2 at plan time, naming the stage and the param;
#  - `vflow plan` counts the FP8 base: its block linears at 1 byte a weight.
# vflow-test: timeout=300
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"
FP8=$BUILD/tools/fp8_tool

lora_md5() { md5sum < "$1/ckpt/step-$2/lora.safetensors" | cut -d' ' -f1; }
loss1() { grep -o '"loss": [^,]*' "$1/ckpt/step-1/state.json"; }

train base --set steps=20 --set every=0 --set batch=4 --set lr=2e-3 || fail "base: $(tail -5 base.out)"
BASE=$TMP/base/ckpt/step-20/model.safetensors
[ -f "$BASE" ] || fail "no base model"
STEPS=8
LORA=(--set lora_rank=4 --set lora_alpha=8 --set batch=4 --set lr=5e-3 --set every=0 --set steps=$STEPS)

train f32 --set weights="$BASE" "${LORA[@]}" --set stages=2 --set shards=2 || fail "f32 base: $(tail -5 f32.out)"
train p1 --set weights="$BASE" "${LORA[@]}" --set fp8_base=true --set stages=1 --set shards=2 \
  || fail "fp8 base P=1: $(tail -5 p1.out)"
train p2 --set weights="$BASE" "${LORA[@]}" --set fp8_base=true --set stages=2 --set shards=2 \
  || fail "fp8 base P=2: $(tail -5 p2.out)"
[ "$(lora_md5 p1 $STEPS)" = "$(lora_md5 p2 $STEPS)" ] || fail "fp8 base: P=2 adapters differ from P=1"
echo "fp8 base: P=1 and P=2 give the same adapters"

# the FP8 file: every block linear as F8_E4M3 bytes with scale 1.5·absmax/448 (fp8_tool
# quantises by vflow's rule at that scale), the rest f32; and the f32 file of the values
# those bytes stand for
"$PY" - "$BASE" "$FP8" base_fp8.safetensors base_deq.safetensors <<'PYEOF' || fail "making the FP8 file"
import json, re, struct, subprocess, sys
import numpy as np
src, tool, out8, outd = sys.argv[1:5]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
lin = re.compile(r"^blocks\.\d+\.(self_attn|cross_attn)\.(q|k|v|o)\.weight$|^blocks\.\d+\.ffn\.(0|2)\.weight$")

def write(path, tensors):
    hdr, off, blobs = {}, 0, []
    for k, (dt, shape, data) in tensors.items():
        hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    j = json.dumps(hdr).encode()
    j += b" " * (-len(j) % 8)
    open(path, "wb").write(struct.pack("<Q", len(j)) + j + b"".join(blobs))

t8, td, nlin = {}, {}, 0
for k, v in h.items():
    if k == "__metadata__":
        continue
    w = np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)
    if not lin.match(k):
        t8[k] = td[k] = ("F32", v["shape"], w.tobytes())
        continue
    nlin += 1
    scale = np.float32(1.5) * (np.abs(w).max() / np.float32(448))
    open("q.f32", "wb").write((w / scale).astype(np.float32).tobytes())
    subprocess.run([tool, "cast", "q.f32", "q.u8"], check=True)
    codes = open("q.u8", "rb").read()
    subprocess.run([tool, "decode", "q.u8", "c.f32"], check=True)
    deq = (np.fromfile("c.f32", np.float32) * scale).astype(np.float32)
    t8[k] = ("F8_E4M3", v["shape"], codes)
    t8[k[:-len(".weight")] + ".scale_weight"] = ("F32", [], np.float32(scale).tobytes())
    td[k] = ("F32", v["shape"], deq.tobytes())
write(out8, t8)
write(outd, td)
print("FP8 file: %d block linears in F8_E4M3" % nlin)
PYEOF
train ship --set weights="$TMP/base_fp8.safetensors" "${LORA[@]}" --set steps=1 --set fp8_base=true --set stages=2 \
  || fail "fp8 base from an FP8 file: $(tail -5 ship.out)"
train deq --set weights="$TMP/base_deq.safetensors" "${LORA[@]}" --set steps=1 --set stages=2 \
  || fail "f32 base of the FP8 file's values: $(tail -5 deq.out)"
train requant --set weights="$TMP/base_deq.safetensors" "${LORA[@]}" --set steps=1 --set fp8_base=true --set stages=2 \
  || fail "fp8 base requantised from f32: $(tail -5 requant.out)"
echo "step 1: FP8 file kept $(loss1 ship), its values in f32 $(loss1 deq), requantised $(loss1 requant)"
[ -n "$(loss1 ship)" ] && [ "$(loss1 ship)" = "$(loss1 deq)" ] || fail "the FP8 file's bytes were not kept as they are"
[ "$(loss1 requant)" != "$(loss1 deq)" ] || fail "requantising should change the values (the file's scale is not the rule's)"

"$PY" - f32 p2 $STEPS <<'PYEOF' || fail "LoRA checks"
import json, struct, sys
import numpy as np
def keys(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return {k: (v["dtype"], v["shape"]) for k, v in json.loads(b[8:8 + n]).items() if k != "__metadata__"}
def bmax(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return max(np.abs(np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)).max()
               for k, v in h.items() if k.endswith("lora_B.weight"))
def losses(d):
    return [r["loss"] for r in map(json.loads, open(d + "/metrics.jsonl")) if r.get("event") == "loss"]
a, b, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
ka, kb = keys("%s/ckpt/step-%d/lora.safetensors" % (a, steps)), keys("%s/ckpt/step-%d/lora.safetensors" % (b, steps))
assert ka == kb, sorted(set(ka.items()) ^ set(kb.items()))[:5]
assert all(dt == "F32" for dt, _ in kb.values()), "adapters not f32"
la, lb = losses(a), losses(b)
rel = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
print("losses f32 base %s" % ["%.5f" % x for x in la])
print("losses fp8 base %s (largest relative difference %.3g)" % (["%.5f" % x for x in lb], rel))
mb = bmax("%s/ckpt/step-%d/lora.safetensors" % (b, steps))
print("max |B| after %d steps on the FP8 base: %.3g" % (steps, mb))
assert mb > 0, "the adapters did not train on the FP8 base (B still zero)"
assert rel < 2e-2, rel
PYEOF

# base_dtype without LoRA: refused at plan time, naming the stage and the param
rc=0
"$VFLOW" plan "$PIPE" --set cache="$CACHE" --set fp8_base=true > noLora.out 2>&1 || rc=$?
[ $rc -eq 2 ] || { cat noLora.out; fail "fp8_base without LoRA: exit $rc, want 2"; }
grep -q 'dit_0.*base_dtype "fp8" needs LoRA' noLora.out || { cat noLora.out; fail "fp8_base without LoRA: message"; }
"$VFLOW" plan "$PIPE" --set cache="$CACHE" --set lora_rank=4 --set fp8_base=true --set stages=1 > plan.out 2>&1 \
  || { cat plan.out; fail "plan with the FP8 base"; }
grep -q "frozen base: block linears in FP8 (1 B/param)" plan.out || { cat plan.out; fail "plan: no FP8 base entry"; }
echo "ok"
