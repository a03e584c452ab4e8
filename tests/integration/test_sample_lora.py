#!/usr/bin/env python3
# test_sample_lora.py — sampling with a LoRA adapter, against a model merged by hand here:
#  - a tiny DiT with text embeddings (text_dim 16) trained 4 steps in full (the base), then
#    rank-4 adapters (alpha 8) trained 4 steps on it (pipelines/train_dit.lua lora_rank);
#  - `vflow sample LORA_CKPT` (a checkpoint holding lora.safetensors, no model) samples the
#    run's base with the adapter: its latent equals, bit for bit, `vflow sample BASE_CKPT
#    --weights merged.safetensors` where merged = base + (alpha/rank)·B·A formed in f64 by
#    numpy here and rounded once to f32; and `--lora lora.safetensors` on the base
#    checkpoint gives the same bits; the base alone samples another latent;
#  - the `sample` stage of a LoRA training run writes the adapted model's video: its PNG
#    strip equals `vflow sample` of the same checkpoint with the same settings, byte for byte;
#  - `--lora` with a file for another model: exit 2, one line naming the file and the key.
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from media_lib import st_write  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", "build")
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
TOOLS = os.path.join(BUILD, "tools")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
RANK, ALPHA = 4, 8
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, file=sys.stderr)
    return cond


def run(args):
    return subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=300)


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)
            .reshape(v["shape"]) for k, v in h.items() if k != "__metadata__"}


def train(rd, sets):
    args = [VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", rd]
    for s in sets:
        args += ["--set", s]
    return run(args)


def main():
    tmp = tempfile.mkdtemp(prefix="sample_lora_")
    j = lambda *p: os.path.join(tmp, *p)  # noqa: E731
    r = run([os.path.join(TOOLS, "cache_tool"), "write", j("c.lmdb"), "0", "8", "--shape", "4,2,8,8", "--text", "16"])
    if not check(r.returncode == 0, "cache_tool: " + r.stderr):
        return 1
    common = ["cache=" + j("c.lmdb"), "text_dim=16", "steps=4", "every=4", "tensorboard=false", "seed=2"]
    r = train(j("base"), common)
    if not check(r.returncode == 0, "base training: " + r.stderr[-500:]):
        return 1
    base_step = j("base", "ckpt", "step-4")
    base_file = os.path.join(base_step, "model.safetensors")
    rng = np.random.default_rng(5)
    pos = rng.standard_normal((7, 16)).astype(np.float32)
    st_write(j("pos.safetensors"), {"emb": ((7, 16), [float(x) for x in pos.ravel()])})
    W, H, F = 32, 32, 5
    settings = ["--frames", str(F), "--size", "%dx%d" % (W, H), "--steps", "4", "--shift", "3", "--guidance", "3",
                "--seed", "7", "--fps", "8"]
    r = train(j("lora"), common + ["weights=" + base_file, "lora_rank=%d" % RANK, "lora_alpha=%d" % ALPHA,
                                   "lr=1e-2", "sample_prompts=" + j("pos.safetensors"), "sample_every=4",
                                   "sample_frames=%d" % F, "sample_size=%dx%d" % (W, H), "sample_steps=4",
                                   "sample_shift=3", "sample_guidance=3", "sample_seed=7", "sample_fps=8"])
    if not check(r.returncode == 0, "LoRA training: " + r.stderr[-500:]):
        return 1
    lora_step = j("lora", "ckpt", "step-4")
    lora_file = os.path.join(lora_step, "lora.safetensors")
    check(os.path.exists(lora_file) and not os.path.exists(os.path.join(lora_step, "model.safetensors")),
          "the LoRA checkpoint holds lora.safetensors alone")

    def sample(ckpt, name, extra=()):
        r = run([VFLOW, "sample", ckpt, "--prompt-embeds", j("pos.safetensors"), "--out", j(name + ".mp4"),
                 "--png", j(name + ".png"), "--latent-out", j(name + ".lat")] + settings + list(extra))
        check(r.returncode == 0, "vflow sample %s: exit %d %s" % (name, r.returncode, r.stderr[-400:]))
        return open(j(name + ".lat"), "rb").read() if r.returncode == 0 else b""

    # the adapter merged by hand
    base, ad = load(base_file), load(lora_file)
    merged = {k: v.astype(np.float64) for k, v in base.items()}
    n = 0
    for k in ad:
        if not k.endswith(".lora_A.weight"):
            continue
        mod = k[len("diffusion_model."):-len(".lora_A.weight")]
        A, B = ad[k].astype(np.float64), ad[k.replace("lora_A", "lora_B")].astype(np.float64)
        s = float(ad["diffusion_model." + mod + ".alpha"]) / RANK
        merged[mod + ".weight"] = merged[mod + ".weight"] + s * (B @ A)
        n += 1
    check(n == 4 * 10, "adapters on the 10 linears of 4 blocks: %d" % n)
    st_write(j("merged.safetensors"), {k: (v.shape, [float(x) for x in v.astype(np.float32).ravel()])
                                       for k, v in merged.items()})

    lat = sample(lora_step, "lora")
    ref = sample(base_step, "merged", ["--weights", j("merged.safetensors")])
    via = sample(base_step, "via", ["--lora", lora_file])
    plain = sample(base_step, "plain")
    a, b = np.frombuffer(lat, np.float32), np.frombuffer(ref, np.float32)
    if check(a.size and a.size == b.size, "latent sizes %d, %d" % (a.size, b.size)):
        err = float(np.abs(a - b).max() / np.abs(b).max())
        check(lat == ref, "LoRA checkpoint vs hand-merged weights: not the same bits (rel %.2e)" % err)
        d0 = float(np.abs(a - np.frombuffer(plain, np.float32)).max() / np.abs(b).max())
        check(d0 > 1e-4, "the adapter changes nothing (rel %.2e from the base's latent)" % d0)
        print("LoRA checkpoint vs merged by hand: max rel %.2e (%s); vs the base alone %.2e" % (
            err, "same bits" if lat == ref else "differ", d0))
    check(via == lat, "--lora on the base checkpoint differs from the LoRA checkpoint")

    # the sample stage of the LoRA run
    stage_png = j("lora", "samples", "step-4", "pos.png")
    if check(os.path.exists(stage_png), "the sample stage wrote no %s: %s" % (stage_png, os.listdir(j("lora")))):
        check(open(stage_png, "rb").read() == open(j("lora.png"), "rb").read(),
              "the sample stage's strip differs from vflow sample of the LoRA checkpoint")

    # bad input: an adapter for another model
    other = {"diffusion_model.blocks.7.self_attn.q.lora_A.weight": ((RANK, 64), [0.0] * (RANK * 64)),
             "diffusion_model.blocks.7.self_attn.q.lora_B.weight": ((64, RANK), [0.0] * (RANK * 64))}
    st_write(j("other.safetensors"), other)
    r = run([VFLOW, "sample", base_step, "--prompt-embeds", j("pos.safetensors"), "--out", j("bad.mp4"),
             "--lora", j("other.safetensors")] + settings)
    msg = r.stderr.strip()
    check(r.returncode == 2 and "other.safetensors" in msg and "blocks.7.self_attn.q.lora_A.weight" in msg and
          "\n" not in msg and not os.path.exists(j("bad.mp4")), "--lora for another model: exit %d %r" % (
              r.returncode, msg))
    print("bad --lora: " + msg)
    if fails:
        print("%d failures (kept %s)" % (len(fails), tmp))
        return 1
    shutil.rmtree(tmp)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
