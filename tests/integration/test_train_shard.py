#!/usr/bin/python3
# test_train_shard.py — checkpoints whose model is written in Hugging Face's sharded form
# (the checkpoint stage's model_shard_bytes), through the real binary, read back with the
# `safetensors` package:
#  - the tiny model trained 4 steps (P = 2, S = 3) with model_shard_bytes below its
#    largest tensor: step-N/ holds model-0000k-of-0000N.safetensors (3 or more) and
#    model.safetensors.index.json instead of model.safetensors; the weight map names
#    every tensor exactly once, each shard holds exactly the tensors mapped to it, the
#    cut is the one this file recomputes (tensors in file order, a shard closes before it
#    would exceed the limit, a larger tensor alone), total_size is the sum of the tensors'
#    bytes, every shard carries the unsharded file's __metadata__, and every tensor equals
#    the unsharded run's model.safetensors (same seed, same steps) bit for bit; the
#    manifest lists each shard and the index;
#  - `weights=<ckpt>/model.safetensors.index.json` passes `vflow check`, and a run from it
#    ends bitwise where a run from the unsharded model.safetensors ends;
#  - --resume from the sharded checkpoint continues to step 6 and ends bitwise where the
#    unsharded run's step 6 is; a shard deleted from the newest checkpoint makes it
#    damaged (the manifest lists the shard): resume skips it for the previous one;
#  - model_shard_bytes negative, a string or a fraction: exit 2 naming the param.
# vflow-test: timeout=300
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

BUILD = os.environ.get("VFLOW_BUILD", "build")
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
TRAIN_TOOL = os.path.join(BUILD, "tools", "train_tool")
PIPE = os.path.join(SRC, "pipelines", "train_dit.lua")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
LIMIT = 90000  # bytes: below the tiny model's largest tensor (time_projection.1.weight, 98304)
failed = []


def check(cond, msg):
    if not cond:
        failed.append(msg)
        print("FAIL: " + msg)
    return cond


def vflow(cmd, tmp, name, *sets, resume=False):
    run = os.path.join(tmp, name)
    args = [VFLOW, cmd, PIPE] + (["--run-dir", run] if cmd == "run" else []) + (["--resume"] if resume else [])
    for s in ("cache=" + os.path.join(tmp, "cache.lmdb"), "batch=4", "stages=2", "micro_batches=2", "shards=3",
              "lr=2e-3") + sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=120)
    losses = []
    mp = os.path.join(run, "metrics.jsonl")
    if cmd == "run" and os.path.exists(mp):
        with open(mp) as f:
            losses = [json.loads(ln)["loss"] for ln in f if '"event":"train_step"' in ln]
    return r, run, losses


def bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def sharded(step_dir):
    """The model of a sharded checkpoint: (index, {file: {tensor: array}}, {file: metadata})."""
    index = json.load(open(os.path.join(step_dir, "model.safetensors.index.json")))
    files = sorted(set(index["weight_map"].values()))
    tensors, meta = {}, {}
    for fn in files:
        tensors[fn] = load_file(os.path.join(step_dir, fn))
        with safe_open(os.path.join(step_dir, fn), framework="np") as f:
            meta[fn] = f.metadata()
    return index, tensors, meta


def expected_cut(single):
    """The shards of `single` ({name: array}) by the rule, recomputed: file order is the
    safetensors writers' (all F32: by name); a shard closes before it would exceed LIMIT."""
    shards, cur, size = [], [], 0
    for name in sorted(single):
        b = single[name].nbytes
        if cur and size + b > LIMIT:
            shards.append(cur)
            cur, size = [], 0
        cur.append(name)
        size += b
    shards.append(cur)
    return shards


def check_step(step_dir, single_path, step):
    """Checks the sharded step_dir against the unsharded model file single_path."""
    single = load_file(single_path)
    with safe_open(single_path, framework="np") as f:
        single_meta = f.metadata()
    check(not os.path.exists(os.path.join(step_dir, "model.safetensors")),
          "%s: a sharded checkpoint has no model.safetensors" % step_dir)
    index, tensors, meta = sharded(step_dir)
    wm = index["weight_map"]
    cut = expected_cut(single)
    n = len(cut)
    names = ["model-%05d-of-%05d.safetensors" % (k + 1, n) for k in range(n)]
    check(n >= 3, "%s: %d shards, want 3 or more" % (step_dir, n))
    check(sorted(tensors) == names, "%s: %d shard files (%s ...), want %d (%s ...)" % (
        step_dir, len(tensors), sorted(tensors)[:1], n, names[:1]))
    check(set(wm) == set(single) and len(wm) == len(single),
          "%s: weight_map covers %d tensors, the model has %d (differ: %s)" % (
              step_dir, len(wm), len(single), sorted(set(wm) ^ set(single))[:4]))
    held = [k for fn in tensors for k in tensors[fn]]
    check(len(held) == len(set(held)) == len(single), "%s: the shards hold %d tensors (%d distinct), want %d once each"
          % (step_dir, len(held), len(set(held)), len(single)))
    for k, fn in zip(range(n), names):
        got = sorted(tensors.get(fn, {}))
        check(got == sorted(cut[k]), "%s: %s holds %s..., the rule puts %s... there" % (step_dir, fn, got[:2], cut[k][:2]))
        check(all(wm.get(t) == fn for t in got), "%s: weight_map disagrees with %s's tensors" % (step_dir, fn))
        check(meta.get(fn) == single_meta, "%s: %s metadata %r, the unsharded file's %r" % (
            step_dir, fn, meta.get(fn), single_meta))
    total = sum(a.nbytes for a in single.values())
    check(index["metadata"]["total_size"] == total, "%s: total_size %r, the tensors' bytes %d" % (
        step_dir, index["metadata"].get("total_size"), total))
    alone = [fn for fn in tensors if sum(a.nbytes for a in tensors[fn].values()) > LIMIT]
    check(alone and all(len(tensors[fn]) == 1 for fn in alone),
          "%s: shards over the limit must hold one tensor each: %s" % (step_dir, alone))
    diff = [t for t in single for fn in tensors if t in tensors[fn] and not bits_equal(tensors[fn][t], single[t])]
    check(not diff, "%s: tensors differ from the unsharded run's: %s" % (step_dir, diff[:4]))
    man = json.load(open(os.path.join(step_dir, "manifest.json")))
    want = set(names) | {"model.safetensors.index.json", "state.json"} | {
        "optimizer-%02d-of-03.safetensors" % k for k in range(3)}
    check(set(man["files"]) == want, "%s: manifest lists %s" % (step_dir, sorted(set(man["files"]) ^ want)))
    print("%s: %d shards (%s bytes of data), %d tensors, bitwise equal to the unsharded file" % (
        os.path.basename(step_dir), n, total, len(single)))
    return n


def final_model(run, step):
    d = os.path.join(run, "ckpt", "step-%d" % step)
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return load_file(os.path.join(d, "model.safetensors"))
    _, tensors, _ = sharded(d)
    return {k: v for t in tensors.values() for k, v in t.items()}


def same_model(a, b):
    return set(a) == set(b) and all(bits_equal(a[k], b[k]) for k in a)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda n: os.path.join(tmp, n)  # noqa: E731
        subprocess.run([TRAIN_TOOL, "mkcache", p("cache.lmdb"), "32", "4", "1", "8", "8", "7"], check=True,
                       capture_output=True)
        # the unsharded reference: 6 steps, every checkpoint kept
        r, run_a, la = vflow("run", tmp, "one", "steps=6", "every=2", "keep=3", "model_shard_bytes=0")
        if not check(r.returncode == 0 and len(la) == 6, "unsharded run: exit %d %s" % (r.returncode, r.stderr[-500:])):
            return 1
        # sharded: 4 steps, then resumed to 6
        r, run_b, lb = vflow("run", tmp, "sharded", "steps=4", "every=2", "keep=2", "model_shard_bytes=%d" % LIMIT)
        if not check(r.returncode == 0 and lb == la[:4], "sharded run: exit %d, losses %r vs %r %s" % (
                r.returncode, lb, la[:4], r.stderr[-500:])):
            return 1
        for s in (2, 4):
            check_step(os.path.join(run_b, "ckpt", "step-%d" % s), os.path.join(run_a, "ckpt", "step-%d" % s,
                                                                                "model.safetensors"), s)

        # the index as weights: checked, and trained from as from the single file
        index = os.path.join(run_b, "ckpt", "step-4", "model.safetensors.index.json")
        r, _, _ = vflow("check", tmp, "check_index", "weights=" + index)
        check(r.returncode == 0, "vflow check weights=<index>: exit %d %s" % (r.returncode, r.stderr[-400:]))
        r, run_c, lc = vflow("run", tmp, "from_index", "steps=2", "every=0", "weights=" + index)
        r2, run_d, ld = vflow("run", tmp, "from_file", "steps=2", "every=0",
                              "weights=" + os.path.join(run_a, "ckpt", "step-4", "model.safetensors"))
        check(r.returncode == 0 and r2.returncode == 0 and len(lc) == 2 and lc == ld,
              "weights from the index vs the file: exit %d/%d, losses %r vs %r %s" % (
                  r.returncode, r2.returncode, lc, ld, (r.stderr + r2.stderr)[-400:]))
        if r.returncode == 0 and r2.returncode == 0:
            check(same_model(final_model(run_c, 2), final_model(run_d, 2)),
                  "the run from the index ends bitwise where the run from the file ends")

        # --resume from the sharded step 4 ends where the unsharded run's step 6 is
        r, _, lr = vflow("run", tmp, "sharded", "steps=6", "every=2", "keep=2", "model_shard_bytes=%d" % LIMIT,
                         resume=True)
        log = open(os.path.join(run_b, "run.log")).read() if os.path.exists(os.path.join(run_b, "run.log")) else ""
        check(r.returncode == 0 and "resuming at step 4" in log and lr == la,
              "resume from the sharded checkpoint: exit %d, losses %r vs %r %s" % (
                  r.returncode, lr, la, r.stderr[-500:]))
        if r.returncode == 0:
            check_step(os.path.join(run_b, "ckpt", "step-6"), os.path.join(run_a, "ckpt", "step-6",
                                                                          "model.safetensors"), 6)
        # a shard gone from the newest checkpoint: damaged, skipped for step 4
        d6 = os.path.join(run_b, "ckpt", "step-6")
        shard = sorted(f for f in os.listdir(d6) if f.startswith("model-"))[1]
        os.unlink(os.path.join(d6, shard))
        f = subprocess.run([TRAIN_TOOL, "ckpt-find", os.path.join(run_b, "ckpt")], capture_output=True, text=True)
        out = f.stdout + f.stderr
        check(f.stdout.split()[:1] == ["4"] and shard in out,
              "a missing shard makes step 6 damaged and step 4 the newest complete: %s" % out[-400:])

        # bad values: exit 2 naming the param
        for v in ("-1", "abc", "1.5"):
            r, _, _ = vflow("check", tmp, "bad", "model_shard_bytes=" + v)
            out = (r.stdout + r.stderr).strip()
            if check(r.returncode == 2 and "model_shard_bytes" in out,
                     "model_shard_bytes=%s: want exit 2 naming the param, got %d: %s" % (v, r.returncode, out[-300:])):
                print("model_shard_bytes=%-4s exit 2: %s" % (v, out.splitlines()[-1][-120:]))
    print("PASS" if not failed else "FAIL (%d)" % len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
