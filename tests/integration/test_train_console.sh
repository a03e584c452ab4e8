#!/usr/bin/env bash
# test_train_console.sh — what the console says about a short training run, with no
# progress line to go by (the run is over in a second or two):
#  - the closing summary has the steps trained, the last loss (equal to the last
#    train_step row of metrics.jsonl) and the path of the checkpoint written (which exists);
#  - `--resume` says the step and checkpoint it resumes from; a resume whose `steps` (the
#    run's total) is already reached says "already at step 30 of 10: nothing to train" and
#    exits 0;
#  - captions longer than the model's text_len are one WARN with their count, which
#    equals the cache's entries with longer captions as `vflow cache ls` lists them.
# vflow-test: labels=train timeout=300
set -euo pipefail
. "$(dirname "$0")/train_lib.sh"

r=$TMP/run
train "$r" --set steps=20 --set every=0 --set text_len=16 || { cat "$r.out"; fail "training run failed"; }
last=$("$PY" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"train_step\"" in l]
print("%d %.6g" % (rows[-1]["step"], rows[-1]["loss"]))' "$r/metrics.jsonl")
grep -q "^  trained steps 1-20 of 20, last loss ${last#* }\$" "$r.out" \
  || { cat "$r.out"; fail "the summary lacks 'trained steps 1-20 of 20, last loss ${last#* }'"; }
line=$(grep "^  checkpoint of step 20: " "$r.out") || { cat "$r.out"; fail "the summary lacks the checkpoint path"; }
[ -f "${line#*: }/model.safetensors" ] || fail "the summary's checkpoint ${line#*: } holds no model"

# the cut captions: one WARN, counted as the cache's entries with captions over 16 bytes
want=$("$VFLOW" cache ls "$CACHE" | tail -n +2 | awk -F'\t' 'length($4) > 16' | wc -l)
[ "$want" -gt 0 ] || fail "the test cache has no caption over 16 bytes"
n=$(grep -c "have captions longer than text_len = 16 bytes" "$r.out" || true)
[ "$n" -eq 1 ] || { cat "$r.out"; fail "$n WARN lines about cut captions, want 1"; }
grep -q "WARN .* $want of the [0-9]* clips read have captions longer than text_len = 16 bytes" "$r.out" \
  || { cat "$r.out"; fail "the WARN does not count $want cut captions"; }

train "$r" --set steps=30 --set every=0 --set text_len=16 --resume || { cat "$r.out"; fail "resume failed"; }
grep -q "^  resumed from step 20 (.*/step-20)\$" "$r.out" || { cat "$r.out"; fail "resume: no 'resumed from step 20'"; }
grep -q "^  trained steps 21-30 of 30, " "$r.out" || { cat "$r.out"; fail "resume: no 'trained steps 21-30'"; }

rc=0
train "$r" --set steps=10 --set every=0 --set text_len=16 --resume || rc=$?
[ $rc -eq 0 ] || { cat "$r.out"; fail "resume past steps: exit $rc, want 0"; }
grep -q "already at step 30 of 10: nothing to train" "$r.out" || { cat "$r.out"; fail "resume past steps: no 'nothing to train'"; }
echo ok
