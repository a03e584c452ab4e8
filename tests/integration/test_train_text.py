#!/usr/bin/python3
# test_train_text.py — training on a cache's text embeddings, through the real binary:
#  - a cache with "text_emb" records (cache_tool write --text 16) and train_dit.lua with
#    text_dim = 16: the model takes the embeddings (text = embeddings), trains over P = 2
#    partitions, and its checkpoint's model.safetensors has text_embedding.0.weight
#    (dim, 16) and no byte-token table;
#  - the embeddings reach the model: without weight decay, text_embedding.0.weight moves
#    off its init (dit_tool init, the run's seed) only through a gradient, which is
#    exactly zero unless the batch's embeddings arrive; a cache with other embeddings
#    (more rows) gives another step-1 loss; the byte-token model keeps its table;
#  - bad input: a model text_dim that differs from the cache's width is exit 2 naming
#    text_emb and both widths, before any worker starts.
# vflow-test: timeout=300
import json
import os
import struct
import subprocess
import sys
import tempfile

BUILD = os.environ.get("VFLOW_BUILD", "build")
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
CACHE_TOOL = os.path.join(BUILD, "tools", "cache_tool")
PIPE = os.path.join(SRC, "pipelines", "train_dit.lua")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
failed = []


def check(cond, msg):
    if not cond:
        failed.append(msg)
        print("FAIL: " + msg)
    return cond


def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def train(tmp, name, cache, *sets):
    run = os.path.join(tmp, name)
    args = [VFLOW, "run", PIPE, "--run-dir", run, "--set", "cache=" + cache, "--set", "steps=2",
            "--set", "every=0", "--set", "batch=4", "--set", "stages=2", "--set", "micro_batches=2"]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=120)
    losses = []
    if os.path.exists(os.path.join(run, "metrics.jsonl")):
        with open(os.path.join(run, "metrics.jsonl")) as f:
            losses = [json.loads(ln)["loss"] for ln in f if '"event":"train_step"' in ln]
    return r, run, losses


def tensor_bytes(path, name):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
        b, e = h[name]["data_offsets"]
        f.seek(8 + n + b)
        return f.read(e - b)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        c1, c2 = os.path.join(tmp, "c1.lmdb"), os.path.join(tmp, "c2.lmdb")
        for c, extra in ((c1, []), (c2, ["--text-rows", "5"])):
            r = subprocess.run([CACHE_TOOL, "write", c, "0", "8", "--shape", "4,1,8,8", "--text", "16"] + extra,
                               capture_output=True, text=True)
            if not check(r.returncode == 0, "cache_tool write: " + r.stderr):
                return 1
        r, run, l1 = train(tmp, "emb1", c1, "text_dim=16")
        if not check(r.returncode == 0 and len(l1) == 2, "text embeddings run: exit %d %s" % (r.returncode, r.stderr[-600:])):
            return 1
        h = header(os.path.join(run, "ckpt", "step-2", "model.safetensors"))
        check("text_tokens.weight" not in h, "no byte-token table with text embeddings")
        check(h.get("text_embedding.0.weight", {}).get("shape") == [64, 16],
              "text_embedding.0.weight is (64, 16): %r" % h.get("text_embedding.0.weight"))
        lay = subprocess.run([os.path.join(BUILD, "tools", "dit_tool"), "layout", "text_emb=1", "text_dim=16"],
                             capture_output=True, text=True).stdout.split("\n")
        init = os.path.join(tmp, "init.bin")
        subprocess.run([os.path.join(BUILD, "tools", "dit_tool"), "init", "text_emb=1", "text_dim=16", "seed=0",
                        "out=" + init], check=True)
        off, numel = [(int(x.split()[1]), int(x.split()[2])) for x in lay if x.startswith("text_embedding.0.weight ")][0]
        with open(init, "rb") as f:
            w0 = f.read()[4 * off:4 * (off + numel)]
        r, runw, _ = train(tmp, "wd0", c1, "text_dim=16", "weight_decay=0")
        for t in ("text_embedding.0.weight", "patch_embedding.weight"):
            w1 = tensor_bytes(os.path.join(runw, "ckpt", "step-2", "model.safetensors"), t)
            if t == "patch_embedding.weight":
                off, numel = [(int(x.split()[1]), int(x.split()[2])) for x in lay if x.startswith(t + " ")][0]
                with open(init, "rb") as f:
                    w0 = f.read()[4 * off:4 * (off + numel)]
            check(r.returncode == 0 and len(w1) == len(w0) and w1 != w0,
                  "%s moved off its init by its gradient (exit %d)" % (t, r.returncode))
        r, _, l2 = train(tmp, "emb2", c2, "text_dim=16")
        check(r.returncode == 0 and len(l2) == 2 and l2[0] != l1[0],
              "other embeddings, other loss: %r vs %r (exit %d)" % (l2, l1, r.returncode))
        r, runb, b1 = train(tmp, "bytes1", c1)
        check(r.returncode == 0 and len(b1) == 2, "byte-token run: exit %d" % r.returncode)
        hb = header(os.path.join(runb, "ckpt", "step-2", "model.safetensors"))
        check("text_tokens.weight" in hb, "byte-token model keeps its table")
        r, run, _ = train(tmp, "bad", c1, "text_dim=8")
        out = r.stdout + r.stderr
        check(r.returncode == 2 and "text_emb" in out and "16" in out and "8" in out
              and not os.path.exists(os.path.join(run, "ckpt")),
              "text_dim 8 on a cache of width 16: exit %d %s" % (r.returncode, out[-400:]))
    print("PASS" if not failed else "FAIL (%d)" % len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
