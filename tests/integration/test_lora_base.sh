#!/usr/bin/env bash
# test_lora_base.sh — a LoRA checkpoint keeps its frozen base reachable:
#  - `weights=` takes vflow's own checkpoint step dir (the base run's step-N);
#  - the LoRA checkpoint's state.json records the base as "lora_base": its absolute path
#    and the SHA-256 of its bytes (checked against Python's hashlib), so `vflow sample`
#    finds it from any working directory;
#  - a base that is gone or changed: `vflow sample` and `--resume` exit 2 saying the LoRA's
#    base is missing or different, naming the recorded path and hash and how to give it
#    (--weights / --set weights=); with the base given where it moved to, both go on.
# vflow-test: labels=train timeout=300
set -euo pipefail
. "$(dirname "$0")/train_lib.sh"

base=$TMP/base
train "$base" --set steps=6 --set every=0 || { cat "$base.out"; fail "base run"; }
step=$base/ckpt/step-6
lora=$TMP/lora
train "$lora" --set steps=4 --set every=0 --set lora_rank=4 --set weights="$step" \
  || { cat "$lora.out"; fail "LoRA run on a vflow step dir as weights"; }

state=$lora/ckpt/step-4/state.json
"$PY" - "$state" "$step/model.safetensors" <<'EOF' || fail "state.json's lora_base"
import hashlib, json, os, sys
b = json.load(open(sys.argv[1])).get("lora_base")
want = hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest()
ok = b and os.path.isabs(b["path"]) and os.path.realpath(b["path"]) == os.path.realpath(os.path.dirname(sys.argv[2])) \
    and b["sha256"] == want and b["bytes"] == os.path.getsize(sys.argv[2])
print("lora_base", b, "want sha256", want)
sys.exit(0 if ok else 1)
EOF
sha=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["lora_base"]["sha256"])' "$state")

sample() { "$VFLOW" sample "$1" --prompt "class 1" --frames 5 --size 16x16 --steps 2 --out "$TMP/s.mp4" "${@:2}"; }
# from another working directory, by the recorded absolute path
mkdir -p "$TMP/elsewhere"
(cd "$TMP/elsewhere" && sample ../lora/ckpt > "$TMP/s.out" 2>&1) || { cat "$TMP/s.out"; fail "sample from another cwd"; }

# the base moves away: missing, named with its hash and the option that gives it
mv "$step" "$TMP/moved"
rc=0
sample "$lora/ckpt" > "$TMP/s.out" 2>&1 || rc=$?
[ $rc -eq 2 ] || { cat "$TMP/s.out"; fail "sample with the base gone: exit $rc, want 2"; }
grep -q "the LoRA's base $step (sha256 $sha) is missing: give it with --weights PATH" "$TMP/s.out" \
  || { cat "$TMP/s.out"; fail "sample: message for a missing base"; }
sample "$lora/ckpt" --weights "$TMP/moved" > "$TMP/s.out" 2>&1 || { cat "$TMP/s.out"; fail "sample --weights moved base"; }
rc=0
train "$lora" --set steps=6 --set every=0 --set lora_rank=4 --resume || rc=$?
[ $rc -eq 2 ] || { cat "$lora.out"; fail "resume without the base: exit $rc, want 2"; }
grep -q "the LoRA's base is missing from this run (no weights): the adapters were trained on $step (sha256 $sha): give it with --set weights=PATH" "$lora.out" \
  || { cat "$lora.out"; fail "resume: message for a missing base"; }

# the base changes: different, both hashes named
mkdir -p "$step"
cp "$TMP/moved/model.safetensors" "$step/model.safetensors"
cp "$TMP/moved/state.json" "$step/state.json"
"$PY" - "$step/model.safetensors" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-3] ^= 0x40  # one weight's bits: the same size and header, other content
open(sys.argv[1], "wb").write(bytes(b))
EOF
rc=0
sample "$lora/ckpt" > "$TMP/s.out" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "the LoRA's base is different: the adapters were trained on $step (sha256 $sha" "$TMP/s.out" \
  || { cat "$TMP/s.out"; fail "sample with a changed base: exit $rc"; }
rc=0
train "$lora" --set steps=6 --set every=0 --set lora_rank=4 --set weights="$step" --resume || rc=$?
[ $rc -eq 2 ] && grep -q "the LoRA's base is different: .*give that base with --set weights=PATH" "$lora.out" \
  || { cat "$lora.out"; fail "resume with a changed base: exit $rc"; }
# the right base, where it moved to: the resume goes on
train "$lora" --set steps=6 --set every=0 --set lora_rank=4 --set weights="$TMP/moved" --resume \
  || { cat "$lora.out"; fail "resume with the moved base"; }
grep -q "^  resumed from step 4 " "$lora.out" || { cat "$lora.out"; fail "resume did not say where it resumed"; }
echo ok
