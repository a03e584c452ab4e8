#!/usr/bin/python3
# test_train_reference.py — three optimizer steps of `vflow run pipelines/train_dit.lua`
# (P = 2 partitions, S = 3 shards, M = 1) against an independent re-implementation of the
# training loop: torch.optim.AdamW (float64) with torch.nn.utils.clip_grad_norm_ and a
# warmup + cosine learning rate, fed by a Python rebuild of everything vflow decides
# about the data:
#   - the reader's order: the cache's keys sorted, epoch e permuted by Fisher-Yates with
#     Philox4x32-10 words (seed, step = e, id = 0, purpose SHUFFLE), batches of B in order;
#   - each sample's rectified-flow pair: Philox (seed, step, position in the global batch,
#     NOISE / TIMESTEP), Box-Muller normals, t = sigmoid(t_mean + t_std·n), x_t = (1−t)x0
#     + t·noise, target = noise − x0; the caption bytes as tokens;
#   - gradients of the mean loss of the whole batch from dit_tool (the C model, whose
#     gradients tests/reference/test_dit_parity.py checks against PyTorch).
# Philox, the permutation and the pairs are written here from the documented rules
# (runtime/philox.h, stages/reader/latent_reader.h, models/dit.h), not taken from the C code.
# Checked per step: vflow's loss, gradient norm, clip factor and lr against the reference;
# at the end every weight of model.safetensors against the reference's (relative L2 ≤
# 1e-5, max abs ≤ 1e-5) — which fails for a wrong sample order, noise, timestep, gradient
# scale, clip factor, schedule, weight decay or bias correction. Two runs, one on each
# side of the clip threshold: clip = 0.5 lies under every step's gradient norm (the
# gradients are scaled down), clip = 50 above every one (clip_grad_norm_ leaves them as
# they are: a factor of exactly 1, never more).
# vflow-test: labels=reference timeout=300
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

BUILD = os.environ.get("VFLOW_BUILD", ".")
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
TOOL = os.path.join(BUILD, "tools", "train_tool")
DIT = os.path.join(BUILD, "tools", "dit_tool")
M32 = 0xFFFFFFFF

# ---------------------------------------------------------------- Philox4x32-10


def philox(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
    return c0, c1, c2, c3


PURPOSE = {"noise": 2, "timestep": 3, "shuffle": 4}


class Stream:
    def __init__(self, seed, step, ident, purpose):
        out = philox((PURPOSE[purpose], step & M32, step >> 32, 0x67726676), (seed & M32, seed >> 32))
        self.key = (out[0], out[1])
        self.id = (ident & M32, ident >> 32)

    def block(self, j):
        return philox((j & M32, j >> 32, self.id[0], self.id[1]), self.key)

    def u32(self, i):
        return self.block(i // 4)[i % 4]

    def normals(self, n):
        out = np.empty(n, np.float32)
        for j in range((n + 3) // 4):
            w = self.block(j)
            z = []
            for p in range(2):
                u1 = (w[2 * p] + 0.5) * (1.0 / 4294967296.0)
                u2 = (w[2 * p + 1] + 0.5) * (1.0 / 4294967296.0)
                rad = math.sqrt(-2.0 * math.log(u1))
                z += [rad * math.cos(6.283185307179586476925286766559 * u2),
                      rad * math.sin(6.283185307179586476925286766559 * u2)]
            for k in range(4):
                if 4 * j + k < n:
                    out[4 * j + k] = z[k]
        return out


def permutation(seed, epoch, n):
    p = list(range(n))
    s = Stream(seed, epoch, 0, "shuffle")
    for i in range(n - 1, 0, -1):
        r = s.u32(2 * i) | (s.u32(2 * i + 1) << 32)
        j = (r * (i + 1)) >> 64
        p[i], p[j] = p[j], p[i]
    return p

# ---------------------------------------------------------------- the run


def run(CLIP, above):
    """One run at clip threshold CLIP; above: every gradient norm must exceed it (else
    stay under it), so the run tests the side of the threshold it is meant to."""
    N, Z, T, H, W = 32, 4, 1, 8, 8
    B, STEPS, SEED, TL = 4, 3, 11, 32
    LR, MIN_LR, WARMUP, WD = 5e-3, 1e-3, 2, 0.1
    per = Z * T * H * W
    tmp = tempfile.mkdtemp(prefix="vf_train_ref.")
    cache, dump = os.path.join(tmp, "cache.lmdb"), os.path.join(tmp, "dump.bin")
    subprocess.run([TOOL, "mkcache", cache, str(N), str(Z), str(T), str(H), str(W), "5", dump], check=True,
                   stdout=subprocess.DEVNULL)
    run = os.path.join(tmp, "run")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", run,
                        "--set", "cache=" + cache, "--set", "steps=%d" % STEPS, "--set", "batch=%d" % B,
                        "--set", "stages=2", "--set", "shards=3", "--set", "micro_batches=1",
                        "--set", "seed=%d" % SEED, "--set", "lr=%g" % LR, "--set", "min_lr=%g" % MIN_LR,
                        "--set", "warmup=%d" % WARMUP, "--set", "schedule=cosine",
                        "--set", "weight_decay=%g" % WD, "--set", "clip=%g" % CLIP, "--set", "every=0"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = {x["step"]: x for x in map(json.loads, open(os.path.join(run, "metrics.jsonl")))
            if x.get("event") == "train_step"}

    # the cache as the reader sees it: entries in key order
    raw = open(dump, "rb").read()
    rec = 32 + 96 + 4 * per
    ents = []
    for i in range(N):
        b = raw[i * rec:(i + 1) * rec]
        cap = b[32:128].split(b"\0")[0]
        ents.append((b[:32], cap, np.frombuffer(b[128:], np.float32)))
    ents.sort(key=lambda e: e[0])

    # the reference trainer
    lay = [l.split() for l in subprocess.run([DIT, "layout", "preset=tiny"], check=True, capture_output=True,
                                             text=True).stdout.splitlines()]
    pfile = os.path.join(tmp, "params.bin")
    subprocess.run([DIT, "init", "preset=tiny", "seed=%d" % SEED, "out=" + pfile], check=True)
    p = torch.tensor(np.fromfile(pfile, np.float32).astype(np.float64), requires_grad=True)
    opt = torch.optim.AdamW([p], lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)
    perm = permutation(SEED, 0, N)
    for step in range(1, STEPS + 1):
        idx = perm[(step - 1) * B:step * B]
        xt, tgt = np.empty((B, per), np.float32), np.empty((B, per), np.float32)
        ts = np.empty(B, np.float32)
        text, lens = np.zeros((B, TL), np.int32), np.zeros(B, np.int32)
        for j, e in enumerate(idx):
            _, cap, x0 = ents[e]
            # t from the double-precision normal (not rounded to f32 first), as models/dit.h says
            w0 = Stream(SEED, step, j, "timestep").block(0)
            u1, u2 = (w0[0] + 0.5) / 4294967296.0, (w0[1] + 0.5) / 4294967296.0
            n0 = math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586476925286766559 * u2)
            t = np.float32(1.0 / (1.0 + math.exp(-(0.0 + 1.0 * n0))))
            noise = Stream(SEED, step, j, "noise").normals(per)
            xt[j] = (np.float32(1.0) - t) * x0 + t * noise
            tgt[j] = noise - x0
            ts[j] = t
            toks = list(cap[:TL])
            text[j, :len(toks)] = toks
            lens[j] = len(toks)
        files = {}
        for name, arr in (("xt", xt), ("t", ts), ("text", text), ("len", lens), ("target", tgt)):
            files[name] = os.path.join(tmp, "%s.bin" % name)
            arr.tofile(files[name])
        gfile = os.path.join(tmp, "grads.bin")
        np.asarray(p.detach().numpy(), np.float32).tofile(pfile)
        out = subprocess.run([DIT, "grad", "preset=tiny", "dims=%d,%d,%d,%d" % (B, T, H, W), "params=" + pfile,
                              "xt=" + files["xt"], "t=" + files["t"], "text=" + files["text"],
                              "len=" + files["len"], "target=" + files["target"], "grads=" + gfile],
                             check=True, capture_output=True, text=True).stdout
        loss = float(out.split()[1])
        p.grad = torch.tensor(np.fromfile(gfile, np.float32).astype(np.float64))
        norm = float(torch.nn.utils.clip_grad_norm_([p], CLIP))
        lr = LR * step / WARMUP if step <= WARMUP else \
            MIN_LR + (LR - MIN_LR) * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - WARMUP) / (STEPS - WARMUP))))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        v = rows[step]
        print("clip %g step %d: loss %.8f (vflow %.8f), grad norm %.6f (vflow %.6f), lr %.6g (vflow %.6g)"
              % (CLIP, step, loss, v["loss"], norm, v["grad_norm"], lr, v["lr"]))
        assert (norm > CLIP) == above, ("the norm is on the other side of the threshold", step, norm, CLIP)
        assert abs(v["loss"] - loss) <= 1e-6 * abs(loss), (step, v["loss"], loss)
        assert abs(v["grad_norm"] - norm) <= 1e-6 * norm, (step, v["grad_norm"], norm)
        assert abs(v["lr"] - lr) <= 1e-9 * lr, (step, v["lr"], lr)
        assert abs(v["clip"] - min(1.0, CLIP / (norm + 1e-6))) <= 1e-5, (step, v["clip"])

    # final weights, by name in layout order
    b = open(os.path.join(run, "ckpt", "step-%d" % STEPS, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    got = np.concatenate([np.frombuffer(b[8 + n + hdr[name]["data_offsets"][0]:8 + n + hdr[name]["data_offsets"][1]],
                                        np.float32) for name, *_ in lay]).astype(np.float64)
    ref = p.detach().numpy()
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    worst = np.abs(got - ref).max()
    moved = np.linalg.norm(ref - np.fromfile(os.path.join(tmp, "params.bin"), np.float32)) / np.linalg.norm(ref)
    print("clip %g final weights: relative L2 %.3e, max abs %.3e (the last step moved them by %.3e)"
          % (CLIP, rel, worst, moved))
    assert rel <= 1e-5 and worst <= 1e-5, (rel, worst)
    subprocess.run(["rm", "-rf", tmp])


def main():
    run(0.5, above=True)
    run(50.0, above=False)
    print("PASS")


if __name__ == "__main__":
    main()
