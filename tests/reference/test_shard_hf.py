# test_shard_hf.py — a vflow checkpoint written in the sharded form (the checkpoint
# stage's model_shard_bytes) is the one Hugging Face's own code writes and reads: the tiny
# DiT with text embeddings trained 2 steps (P = 2, S = 2) with model_shard_bytes =
# 300000 (no tensor larger than that);
#  - huggingface_hub's save_torch_state_dict (what transformers' and diffusers'
#    save_pretrained(max_shard_size=…) call) given the same tensors, limit and stem writes
#    the same file names, the same weight_map and the same total_size, and each of its
#    shards holds the same tensors, bit for bit, as vflow's;
#  - transformers' load_sharded_checkpoint(strict=True) reads vflow's step dir (it looks
#    for model.safetensors.index.json) into a module of exactly the checkpoint's names,
#    and the state dict it loads goes through diffusers' convert_wan_transformer_to_diffusers
#    into WanTransformer3DModel with load_state_dict(strict=True).
# vflow-test: labels=reference timeout=600
import contextlib
import json
import os
import subprocess
import sys
import tempfile

# safetensors.torch before wan_ref: its float8 placeholders (aliases of float32) would
# otherwise enter safetensors' dtype tables and make it write F32 tensors as F8
import safetensors.torch  # noqa: E402,F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wan_ref  # noqa: E402  (before diffusers: shims torch 1.13)

wan_ref.reexec_in_ref_venv()

import torch  # noqa: E402
from diffusers import WanTransformer3DModel  # noqa: E402
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers  # noqa: E402
from huggingface_hub import save_torch_state_dict  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers.modeling_utils import load_sharded_checkpoint  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
CACHE_TOOL = os.path.join(BUILD, "tools", "cache_tool")
LIMIT = 300000
# the tiny preset (lua/model_dit.lua) with text = embeddings of width 16
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4,
              text_dim=16, freq_dim=64, ffn_dim=256, num_layers=4, cross_attn_norm=True, eps=1e-6, rope_max_seq_len=64)


@contextlib.contextmanager
def real_float32():
    """wan_ref's float8 placeholders are float32 itself; huggingface_hub's dtype-size table
    (built at its first call) would then size F32 tensors as one byte. Without them for
    the call, as on a torch that has no float8."""
    names = [n for n in ("float8_e4m3fn", "float8_e5m2") if getattr(torch, n, None) is torch.float32]
    for n in names:
        delattr(torch, n)
    try:
        yield
    finally:
        for n in names:
            setattr(torch, n, torch.float32)


class Holder(torch.nn.Module):
    """A module whose state dict has exactly the given names and shapes."""

    def __init__(self, shapes):
        super().__init__()
        for name, shape in shapes.items():
            mod, parts = self, name.split(".")
            for p in parts[:-1]:
                if not hasattr(mod, p):
                    mod.add_module(p, torch.nn.Module())
                mod = getattr(mod, p)
            mod.register_parameter(parts[-1], torch.nn.Parameter(torch.zeros(shape), requires_grad=False))


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.int32),
                                                                     b.view(-1).view(torch.int32))


def main():
    failed = 0

    def check(cond, msg):
        nonlocal failed
        if not cond:
            failed += 1
            print("FAIL: " + msg)
        return cond

    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as d:
        f = lambda n: os.path.join(d, n)  # noqa: E731
        r = subprocess.run([CACHE_TOOL, "write", f("cache.lmdb"), "0", "8", "--shape", "4,1,8,8", "--text", "16"],
                           capture_output=True, text=True)
        if not check(r.returncode == 0, "cache_tool: " + r.stderr):
            return 1
        args = [VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", f("run")]
        for s in ("cache=" + f("cache.lmdb"), "text_dim=16", "steps=2", "every=0", "batch=4", "stages=2",
                  "micro_batches=2", "shards=2", "model_shard_bytes=%d" % LIMIT):
            args += ["--set", s]
        r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
        if not check(r.returncode == 0, "training: exit %d %s" % (r.returncode, r.stderr[-800:])):
            return 1
        step = f("run/ckpt/step-2")
        ours = json.load(open(os.path.join(step, "model.safetensors.index.json")))
        files = sorted(set(ours["weight_map"].values()))
        sd = {}
        for fn in files:
            sd.update(load_file(os.path.join(step, fn)))
            with safe_open(os.path.join(step, fn), framework="pt") as fh:
                check(fh.metadata() == {"format": "pt", "step": "2", "preset": "tiny"},
                      "%s: metadata %r" % (fn, fh.metadata()))
        check(len(files) >= 3, "%d shards, want 3 or more" % len(files))

        # Hugging Face's writer, the tensors in the file order (the writers' order: by name)
        os.makedirs(f("hf"))
        with real_float32():
            save_torch_state_dict({k: sd[k] for k in sorted(sd)}, f("hf"), max_shard_size=LIMIT,
                                  filename_pattern="model{suffix}.safetensors")
        theirs = json.load(open(f("hf/model.safetensors.index.json")))
        check(ours["weight_map"] == theirs["weight_map"], "weight_map differs from save_torch_state_dict's: %s" % (
            sorted(k for k in set(ours["weight_map"]) | set(theirs["weight_map"])
                   if ours["weight_map"].get(k) != theirs["weight_map"].get(k))[:4]))
        check(ours["metadata"]["total_size"] == theirs["metadata"]["total_size"],
              "total_size %r, save_torch_state_dict's %r" % (ours["metadata"], theirs["metadata"]))
        check(sorted(x for x in os.listdir(f("hf")) if x.endswith(".safetensors")) == files,
              "file names %s vs %s" % (sorted(os.listdir(f("hf"))), files))
        for fn in files:
            a = load_file(os.path.join(step, fn))
            b = load_file(f("hf/" + fn)) if os.path.exists(f("hf/" + fn)) else {}
            check(set(a) == set(b) and all(same(a[k], b[k]) for k in a), "%s: tensors differ from HF's shard" % fn)

        # transformers reads the step dir; diffusers takes what it read
        holder = Holder({k: v.shape for k, v in sd.items()})
        try:
            load_sharded_checkpoint(holder, step, strict=True)
            ok = True
        except Exception as e:  # noqa: BLE001  (any refusal is the failure reported)
            ok = False
            print(str(e)[:600])
        loaded = holder.state_dict()
        check(ok and set(loaded) == set(sd) and all(same(loaded[k], sd[k]) for k in sd),
              "load_sharded_checkpoint(strict=True) of the step dir")
        model = WanTransformer3DModel.from_config(CONFIG)
        try:
            model.load_state_dict(convert_wan_transformer_to_diffusers(dict(loaded)), strict=True)
            ok = True
        except RuntimeError as e:
            ok = False
            print(str(e)[:600])
        check(ok, "the loaded checkpoint, converted, does not load into WanTransformer3DModel with strict=True")
        print("step-2: %d shards of <= %d bytes, %d tensors (%d bytes): the same split as save_torch_state_dict; "
              "load_sharded_checkpoint and WanTransformer3DModel (strict) read it" % (
                  len(files), LIMIT, len(sd), ours["metadata"]["total_size"]))
    print("PASS" if not failed else "FAIL (%d)" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
