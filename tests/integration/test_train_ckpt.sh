#!/bin/bash
# test_train_ckpt.sh — the checkpoint files and the ways resume can go wrong, through the
# real binary:
#  - layout: step-N/ with model.safetensors, optimizer-kk-of-SS.safetensors, state.json,
#    manifest.json; keep = 2 leaves the newest two; `latest`; no .tmp;
#  - model.safetensors read by the `safetensors` package (numpy and torch) and by torch:
#    every tensor of the model's layout (dit_tool layout) by name, shape, F32; the
#    optimizer shards' moments cover the parameter count; state.json's fields;
#  - a damaged newest checkpoint (one flipped byte) is skipped loudly for the previous
#    one, and the resumed run ends bitwise where an uninterrupted run ends;
#  - a resume with a different config is refused with exit code 2 naming each differing
#    key (lr and depth), launching no training and touching no checkpoint; so is one over
#    another cache (the checkpoint's data cursor names another stream);
#  - a run started without --resume where an earlier run's checkpoints are moves them
#    (after reading the one it may start from: `weights` inside them works),
#    byte for byte, into ckpt/earlier-<time>/ with a WARN naming the steps; its --resume
#    then continues its own newest step and ends bitwise on an uninterrupted run;
#  - a failing checkpoint write (injected with VFLOW_CKPT_FAIL, and a real ENOSPC on a
#    small tmpfs where `unshare -m` may mount one) fails that checkpoint only: the error
#    is reported, the previous checkpoint stays complete, no .tmp; the run trains to the
#    end (and fails there when the final checkpoint is among the failed ones:
#    test_train_ckpt_outcome.sh).
# vflow-test: timeout=240
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

COMMON=(--set batch=4 --set stages=2 --set shards=3 --set micro_batches=2 --set lr=2e-3 --set every=2 --set keep=2)
train a "${COMMON[@]}" --set steps=6 || fail "run a: $(tail -5 a.out)"
[ "$(ls a/ckpt)" = "$(printf 'latest\nstep-4\nstep-6')" ] || fail "checkpoint dir: $(ls a/ckpt)"
[ "$(cat a/ckpt/latest)" = "step-6" ] || fail "latest: $(cat a/ckpt/latest)"
for f in model.safetensors optimizer-00-of-03.safetensors optimizer-02-of-03.safetensors state.json manifest.json; do
  [ -s "a/ckpt/step-6/$f" ] || fail "step-6/$f missing"
done
[ "$(grep -c '"event":"checkpoint"' a/metrics.jsonl)" = 3 ] || fail "expected 3 checkpoint rows"

"$BUILD/tools/dit_tool" layout preset=tiny > layout.txt || fail "dit_tool layout"
"$PY" - a/ckpt/step-6 layout.txt <<'EOF' || fail "checkpoint files do not read back"
import json, sys
import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import load_file as np_load
from safetensors.torch import load_file as pt_load

d, layout = sys.argv[1], sys.argv[2]
want = {}
for line in open(layout):
    name, off, numel, dims = line.split()
    want[name] = tuple(int(x) for x in dims.split(","))
m = pt_load(d + "/model.safetensors")
assert set(m) == set(want), sorted(set(m) ^ set(want))[:5]
for k, t in m.items():
    assert t.dtype == torch.float32 and tuple(t.shape) == want[k], (k, t.dtype, t.shape, want[k])
    assert torch.isfinite(t).all(), k
n = np_load(d + "/model.safetensors")
assert all(np.array_equal(n[k], m[k].numpy()) for k in want)
with safe_open(d + "/model.safetensors", framework="pt") as f:
    assert f.metadata()["step"] == "6"
total = sum(int(np.prod(s)) for s in want.values())
state = json.load(open(d + "/state.json"))
assert state["step"] == 6 and state["params"] == total and state["shards"] == 3, state
assert state["cursors"][0].startswith("v1;epoch=0;pos=24;"), state["cursors"]
assert state["config"]["optim.lr"] == 0.002 and state["config"]["model.depth"] == 4
covered = 0
for k in range(3):
    with safe_open(d + "/optimizer-%02d-of-03.safetensors" % k, framework="pt") as f:
        meta = f.metadata()
        assert int(meta["offset"]) == covered and int(meta["shard"]) == k, meta
        ea, es = f.get_tensor("exp_avg"), f.get_tensor("exp_avg_sq")
        assert ea.shape == es.shape == (int(meta["numel"]),)
        assert (es >= 0).all() and ea.abs().sum() > 0
        covered += int(meta["numel"])
assert covered == total, (covered, total)
man = json.load(open(d + "/manifest.json"))
assert set(man["files"]) == {"model.safetensors", "state.json"} | {"optimizer-%02d-of-03.safetensors" % k for k in range(3)}
print("read back: %d tensors, %d parameters, 3 optimizer shards" % (len(m), total))
EOF

# a damaged newest checkpoint: skipped, loudly; the run continues from step 4 exactly
train b "${COMMON[@]}" --set steps=8 || fail "run b: $(tail -5 b.out)"
"$PY" -c "
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read()); b[len(b) // 2] ^= 0x10; open(p, 'wb').write(b)" a/ckpt/step-6/model.safetensors
train a "${COMMON[@]}" --set steps=8 --resume || fail "resume over a damaged checkpoint: $(tail -5 a.out)"
grep -q "WARN.*skipping damaged checkpoint .*step-6" a/run.log || fail "the damaged checkpoint was not reported"
grep -q "resuming at step 4" a/run.log || fail "did not resume from step 4: $(grep -i resum a/run.log)"
[ "$(model_md5 a 8)" = "$(model_md5 b 8)" ] || fail "resumed over a damaged checkpoint: weights differ"

# another config: refused with exit 2 and the differing keys, nothing trained
before=$(cat a/ckpt/latest; ls a/ckpt)
train a "${COMMON[@]}" --set steps=10 --set lr=4e-3 --set depth=2 --set t_shift=3 --resume
rc=$?
[ $rc -eq 2 ] || fail "mismatched config: exit $rc, expected 2: $(tail -5 a.out)"
grep -q "model.depth (checkpoint 4, now 2)" a.out || fail "model.depth not named: $(tail -3 a.out)"
grep -q "optim.lr (checkpoint 0.002, now 0.004)" a.out || fail "optim.lr not named: $(tail -3 a.out)"
grep -q "train.t_shift" a.out || fail "another timestep shift not named: $(tail -3 a.out)"
[ "$(cat a/ckpt/latest; ls a/ckpt)" = "$before" ] || fail "the refused run touched the checkpoints"

# another cache (more entries): the checkpoint's data cursor belongs to another stream
"$TOOL" mkcache other.lmdb 40 4 1 8 8 7 > /dev/null || fail "mkcache other"
train a "${COMMON[@]}" --set steps=10 --set cache="$TMP/other.lmdb" --resume
rc=$?
[ $rc -eq 2 ] || fail "resume over another cache: exit $rc, expected 2: $(tail -3 a.out)"
grep -q "another stream" a.out || fail "resume over another cache: $(tail -2 a.out)"
[ "$(cat a/ckpt/latest; ls a/ckpt)" = "$before" ] || fail "the refused run touched the checkpoints"

# a fresh run (no --resume) in a run dir that holds another run's checkpoints: those move,
# whole, to ckpt/earlier-<time>/; the fresh run's own steps are what --resume continues
b8=$(model_md5 b 8)
train b "${COMMON[@]}" --set steps=4 || fail "fresh run over run b: $(tail -5 b.out)"
aside=$(ls -d b/ckpt/earlier-* 2>/dev/null)
[ "$(echo "$aside" | wc -w)" = 1 ] || fail "the earlier run's checkpoints not set aside once: $(ls b/ckpt)"
[ "$(ls b/ckpt | grep -v '^earlier-')" = "$(printf 'latest\nstep-2\nstep-4')" ] || fail "fresh run's dir: $(ls b/ckpt)"
[ "$(ls "$aside")" = "$(printf 'latest\nstep-6\nstep-8')" ] || fail "set aside: $(ls "$aside")"
[ "$(md5sum < "$aside/step-8/model.safetensors" | cut -d' ' -f1)" = "$b8" ] || fail "the earlier step 8 changed"
grep -q "WARN.*earlier run's checkpoints (steps 6 to 8): moved to .*earlier-" b/run.log ||
  fail "no WARN naming the steps set aside: $(grep -i earlier b/run.log)"
train b "${COMMON[@]}" --set steps=6 --resume || fail "resume of the fresh run: $(tail -5 b.out)"
grep -q "resuming at step 4" b/run.log || fail "did not resume the fresh run's step 4: $(grep -i resum b/run.log)"
train e "${COMMON[@]}" --set steps=6 || fail "run e: $(tail -5 e.out)"
[ "$(model_md5 b 6)" = "$(model_md5 e 6)" ] || fail "the fresh run resumed to 6 differs from a run of 6"
# a fresh run in the same run dir that starts from that run's step 6 (`weights`): the
# step is read before it goes aside with the rest
b6=$(model_md5 b 6)
train b "${COMMON[@]}" --set steps=2 --set weights="$TMP/b/ckpt/step-6" ||
  fail "a fresh run from its run dir's own step 6: $(tail -5 b.out)"
moved=$(ls -d b/ckpt/earlier-*/step-6 2>/dev/null | tail -1)
[ -n "$moved" ] && [ "$(md5sum < "$moved/model.safetensors" | cut -d' ' -f1)" = "$b6" ] ||
  fail "step 6 not set aside whole after the run started from it: $(ls b/ckpt b/ckpt/earlier-*)"
[ -d b/ckpt/step-2 ] || fail "the run from step 6 wrote no step 2: $(ls b/ckpt)"

# write failures: the failed checkpoints only
VFLOW_CKPT_FAIL=4,6 train c "${COMMON[@]}" --set steps=6
[ $? -eq 1 ] || fail "run with failing writes, the final one among them: exit 0"
[ "$(grep -c '"event":"checkpoint_failed"' c/metrics.jsonl)" = 2 ] || fail "failures not reported in metrics"
grep -q "ERROR.*checkpoint of step 4 failed" c/run.log || fail "failure not in the run log"
[ "$("$TOOL" ckpt-find c/ckpt | cut -d' ' -f1)" = 2 ] || fail "step 2 is not the newest complete checkpoint"
ls -d c/ckpt/*.tmp 2>/dev/null && fail "a .tmp is left after failed writes"
grep -q '"step":6.*"loss"' c/metrics.jsonl || fail "training did not reach step 6"

if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  mkdir small
  unshare -m bash -c "mount -t tmpfs -o size=6m tmpfs '$TMP/small' && \
    '$VFLOW' run '$PIPE' --run-dir d --set cache='$CACHE' ${COMMON[*]} --set steps=6 --set ckpt='$TMP/small/ck' > d.out 2>&1; \
    echo \$? > d.rc; '$TOOL' ckpt-find '$TMP/small/ck' > d.find 2>&1; ls '$TMP/small/ck' > d.ls"
  [ "$(cat d.rc)" = 1 ] || fail "disk-full run whose final checkpoint failed: exit $(cat d.rc): $(tail -5 d.out)"
  grep -q '"event":"checkpoint_failed".*No space left' d/metrics.jsonl || fail "ENOSPC not reported: $(grep checkpoint d/metrics.jsonl)"
  [ "$(cut -d' ' -f1 d.find)" = 2 ] || fail "after ENOSPC the newest complete checkpoint is not step 2: $(cat d.find)"
  grep -q tmp d.ls && fail "a .tmp is left on the full disk: $(cat d.ls)"
  echo "disk full (6 MiB tmpfs): checkpoints 4 and 6 failed with ENOSPC, step 2 intact"
else
  echo "skip the tmpfs part: cannot mount in a private namespace here"
fi
echo "PASS"
