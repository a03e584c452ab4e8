# test_wan_ckpt_diffusers.py — a vflow checkpoint is a Wan checkpoint: the tiny DiT with
# text embeddings (text_dim 16) trained 3 steps from a cache with embeddings
# (pipelines/train_dit.lua, P = 2 partitions, S = 2 shards); its model.safetensors
#  - carries __metadata__ {format: pt, step: "3", preset: "tiny"} and the original Wan
#    names only (no byte-token table);
#  - goes through diffusers' own convert_wan_transformer_to_diffusers (as is, and under
#    ComfyUI's prefix) into a state dict that loads into WanTransformer3DModel of the
#    same shape with load_state_dict(strict=True);
#  - the loaded model's forward on a held sample equals vflow's forward from the same
#    file (dit_tool weights=) to a relative error <= 1e-5; the weights moved off the
#    seeded init, so the file holds trained numbers;
#  - Wan 2.2 A14B's two experts, trained in one run (pipelines/finetune_wan22.lua
#    experts=both, full fine-tune, the tiny preset on the same embeddings, each expert from
#    its own file: seeded inits 0 and 7 with a random head each): each of the joined step's
#    high_noise_model/ and low_noise_model/ loads into WanTransformer3DModel with
#    strict=True, its forward equals vflow's from that file to <= 1e-5, and its weights
#    moved off that expert's initial ones (and stay nearer them than the other expert's).
# vflow-test: labels=reference timeout=600
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import wan_ref  # noqa: E402  (before diffusers: shims torch 1.13)

wan_ref.reexec_in_ref_venv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import WanTransformer3DModel  # noqa: E402
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from run_harness import check, finish  # noqa: E402
from st_lib import f32, read_st, write_st  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
DIT_TOOL = os.path.join(BUILD, "tools", "dit_tool")
CACHE_TOOL = os.path.join(BUILD, "tools", "cache_tool")
# the tiny preset (lua/model_dit.lua) with text = embeddings of width 16
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4,
              text_dim=16, freq_dim=64, ffn_dim=256, num_layers=4, cross_attn_norm=True, eps=1e-6, rope_max_seq_len=64)
CFG = ["preset=tiny", "text_dim=16", "text_emb=1"]
TL = 32
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def load_strict(sd, tag):
    """WanTransformer3DModel of CONFIG with the converted sd loaded strictly; None if it
    does not load."""
    conv = convert_wan_transformer_to_diffusers(dict(sd))
    model = WanTransformer3DModel.from_config(CONFIG)
    try:
        model.load_state_dict(conv, strict=True)
    except RuntimeError as e:
        print(str(e)[:600])
        check(False, "%s: the converted checkpoint does not load with strict=True" % tag)
        return None
    return model.eval()


def moved_off(sd, init):
    """Tensors of the layout whose values in sd differ from init (name -> f32 array)."""
    lay = subprocess.run([DIT_TOOL, "layout"] + CFG, capture_output=True, text=True).stdout.split("\n")
    return sum(not np.array_equal(init[ln.split()[0]].ravel(), sd[ln.split()[0]].numpy().ravel()) for ln in lay if ln)


def forward_err(model, path, f):
    """Relative error of vflow's forward from weights file path against model's on a held
    sample (f: a scratch file name in the test's dir); None when dit_tool fails."""
    g = torch.Generator().manual_seed(5)
    B, T, H, W = 2, 1, 8, 8
    x = torch.randn(B, 4, T, H, W, generator=g)
    sigma = torch.tensor([0.375, 0.6875])
    lens = torch.tensor([3, 5], dtype=torch.int32)
    emb = torch.randn(B, TL, 16, generator=g)
    ctx = emb.clone()
    for b in range(B):
        ctx[b, lens[b]:] = 0
    with torch.no_grad():
        ref = model(hidden_states=x, timestep=sigma * 1000, encoder_hidden_states=ctx, return_dict=False)[0]
    x.numpy().tofile(f("x.bin"))
    x.numpy().tofile(f("target.bin"))
    sigma.numpy().tofile(f("t.bin"))
    emb.numpy().tofile(f("emb.bin"))
    lens.numpy().tofile(f("len.bin"))
    r = subprocess.run([DIT_TOOL, "grad"] + CFG + ["dims=%d,%d,%d,%d" % (B, T, H, W), "weights=" + path,
                                                   "xt=" + f("x.bin"), "t=" + f("t.bin"), "emb=" + f("emb.bin"),
                                                   "len=" + f("len.bin"), "target=" + f("target.bin"),
                                                   "pred=" + f("pred.bin")], capture_output=True, text=True)
    if not check(r.returncode == 0, "dit_tool grad %s: %s" % (path, r.stderr)):
        return None
    pred = np.fromfile(f("pred.bin"), dtype=np.float32)
    refv = ref.numpy().ravel()
    return float(np.abs(pred - refv).max() / np.abs(refv).max())


def two_experts(f):
    """experts=both full fine-tune: the joined step's two models load into diffusers
    strictly, run its forward as vflow does and hold trained numbers."""
    init = {}
    for e, seed in (("high", 0), ("low", 7)):
        r = subprocess.run([DIT_TOOL, "init"] + CFG + ["seed=%d" % seed, "out=" + f("init%d.bin" % seed)],
                           capture_output=True, text=True)
        r = subprocess.run([DIT_TOOL, "save"] + CFG + ["params=" + f("init%d.bin" % seed), "out=" + f(e + ".st")],
                           capture_output=True, text=True)
        if not check(r.returncode == 0, "dit_tool save: " + r.stderr):
            return
        init[e] = read_st(f(e + ".st"))
        # the init's head is zero: a head of its own per expert makes the forward non-zero
        head = init[e]["head.head.weight"]
        init[e]["head.head.weight"] = (np.random.default_rng(seed).standard_normal(head.shape) * 0.05).astype("<f4")
        write_st(f(e + ".st"), f32(init[e]))
    args = [VFLOW, "run", os.path.join(SRC, "pipelines", "finetune_wan22.lua"), "--run-dir", f("run22")]
    for s in ("cache=" + f("cache.lmdb"), "preset=tiny", "text_dim=16", "device=cpu", "frames=1", "size=64",
              "t_sampling=uniform", "steps=3", "every=3", "batch=4", "lr=1e-3", "warmup=0", "experts=both",
              "weights_high=" + f("high.st"), "weights_low=" + f("low.st")):
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=300)
    if not check(r.returncode == 0, "experts=both training: exit %d %s" % (r.returncode, r.stderr[-800:])):
        return
    step = f("run22/ckpt/step-3")
    with open(os.path.join(step, "state.json")) as fh:
        check(json.load(fh).get("experts") == ["high", "low"], "the joined step records both experts")
    for e, sub in (("high", "high_noise_model"), ("low", "low_noise_model")):
        path = os.path.join(step, sub, "model.safetensors")
        sd = load_file(path)
        model = load_strict(sd, sub)
        moved = moved_off(sd, init[e])
        check(moved > 0, "%s: no tensor moved off the expert's initial weights" % sub)
        # ... and it is this expert's: nearer its own initial weights than the other's
        other = init["low" if e == "high" else "high"]
        dist = lambda w0: max(float(np.abs(sd[k].numpy() - w0[k]).max()) for k in sd)  # noqa: E731
        check(dist(init[e]) < dist(other), "%s: nearer the other expert's initial weights (%.3g) than its own (%.3g)"
              % (sub, dist(other), dist(init[e])))
        err = forward_err(model, path, f) if model is not None else None
        if err is not None:
            print("two-expert step 3, %s: %d tensors, %d moved; forward vs diffusers rel err %.2e" % (sub, len(sd),
                                                                                                     moved, err))
            check(err <= 1e-5, "%s: forward relative error %.3g > 1e-5" % (sub, err))


def main():
    env = ENV
    with tempfile.TemporaryDirectory() as d:
        f = lambda n: os.path.join(d, n)  # noqa: E731
        r = subprocess.run([CACHE_TOOL, "write", f("cache.lmdb"), "0", "8", "--shape", "4,1,8,8", "--text", "16"],
                           capture_output=True, text=True)
        if not check(r.returncode == 0, "cache_tool: " + r.stderr):
            return finish()
        args = [VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", f("run")]
        for s in ("cache=" + f("cache.lmdb"), "text_dim=16", "steps=3", "every=0", "batch=4", "stages=2",
                  "micro_batches=2", "shards=2"):
            args += ["--set", s]
        r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
        if not check(r.returncode == 0, "training: exit %d %s" % (r.returncode, r.stderr[-800:])):
            return finish()
        path = f("run/ckpt/step-3/model.safetensors")
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            meta = json.loads(fh.read(n)).get("__metadata__", {})
        check(meta == {"format": "pt", "step": "3", "preset": "tiny"}, "metadata %r" % meta)
        sd = load_file(path)
        check("text_tokens.weight" not in sd and all(v.dtype == torch.float32 for v in sd.values()),
              "original names in F32, no byte-token table")
        for tag, src in (("original", sd), ("comfyui", {"model.diffusion_model." + k: v for k, v in sd.items()})):
            model = load_strict(src, tag)

        # trained: the weights moved off the seeded init
        r = subprocess.run([DIT_TOOL, "init"] + CFG + ["seed=0", "out=" + f("init.bin")], capture_output=True, text=True)
        r = subprocess.run([DIT_TOOL, "save"] + CFG + ["params=" + f("init.bin"), "out=" + f("init.st")],
                           capture_output=True, text=True)
        moved = moved_off(sd, read_st(f("init.st"))) if check(r.returncode == 0, "dit_tool save: " + r.stderr) else 0
        check(moved > 0, "no tensor moved off the init")

        # a held sample: vflow's forward from the file = diffusers' from the converted dict
        e = forward_err(model, path, f) if model is not None else None
        if e is not None:
            print("checkpoint step 3: %d tensors, %d moved; forward vs diffusers rel err %.2e" % (len(sd), moved, e))
            check(e <= 1e-5, "forward relative error %.3g > 1e-5" % e)
        two_experts(f)
    finish()


if __name__ == "__main__":
    main()
