#!/usr/bin/env python3
"""bench_cuda_vae.py — causal VAE encode on the GPU: vflow's CUDA backend (models/vae.c
through build/tools/vae_tool --device cuda:0) against PyTorch conv3d running the same
architecture (tests/reference/test_vae_parity.py's encode) on the same weights and clip,
in bf16 on the same GPU, in the same run. Outputs are compared (relative error printed),
so both sides provably did the same work.

  python3 bench/bench_cuda_vae.py [BUILD_DIR] [--frames 17] [--size 256] [--batch 1] [--repeat 5]

vflow encodes the clip whole and in causal chunks of 4 frames (its memory-bounded
mode); PyTorch encodes it whole. Last line: one JSON object.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
args = [a for a in sys.argv[1:] if not a.startswith("--")]
BUILD = os.path.abspath(args[0] if args else os.environ.get("VFLOW_BUILD", os.path.join(SRC, "build")))


def opt(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


FRAMES, SIZE, BATCH, REPEAT = opt("--frames", 17), opt("--size", 256), opt("--batch", 1), opt("--repeat", 5)
TOOL = os.path.join(BUILD, "tools", "vae_tool")
WAN = dict(name="wan", dim=96, mult=[1, 2, 4, 4], res=2, tdown=[0, 1, 1], z=16, eps=1e-12)

spec = importlib.util.spec_from_file_location("vae_ref", os.path.join(SRC, "tests/reference/test_vae_parity.py"))
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)


def torch_encode(W, x):
    Wd = {k: v.to("cuda", torch.bfloat16) for k, v in W.items()}
    xd = x.to("cuda", torch.bfloat16)
    best = 1e300
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        for i in range(REPEAT + 1):  # the first one warms up (cuDNN algorithm search)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            mean, _ = ref.encode(Wd, WAN, xd)
            torch.cuda.synchronize()
            if i:
                best = min(best, time.perf_counter() - t0)
    return best, mean.float().cpu().numpy(), torch.cuda.max_memory_allocated()


def main():
    if not torch.cuda.is_available():
        print("skip: no CUDA device for torch")
        return 77
    if not os.path.exists(TOOL):
        print("missing %s: build first" % TOOL)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        W = ref.make_weights(WAN, 1)
        wpath = os.path.join(tmp, "w.safetensors")
        ref.save_weights(wpath, W)
        x = (torch.rand(BATCH, 3, FRAMES, SIZE, SIZE, generator=torch.Generator().manual_seed(3)) * 2 - 1).float()
        xpath = os.path.join(tmp, "x.safetensors")
        save_file({"x": x.numpy()}, xpath)
        tt, mref, tpeak = torch_encode(W, x)
        print("wan VAE, %d clip(s) of %dx%dx%d, bf16 on %s" % (BATCH, FRAMES, SIZE, SIZE, torch.cuda.get_device_name()))
        print("  pytorch conv3d (whole clip): %.4f s = %.2f clips/s, peak %.2f GiB" %
              (tt, BATCH / tt, tpeak / 2 ** 30))
        res = {"bench": "vae_encode", "torch_s": tt, "torch_clips_per_s": BATCH / tt, "torch_peak_bytes": tpeak}
        for chunk in (FRAMES, 4):
            out = os.path.join(tmp, "o.safetensors")
            r = subprocess.run([TOOL, "encode"] + ref.cfg_args(WAN) + ["--weights", wpath, "--input", xpath,
                               "--chunk", str(chunk), "--repeat", str(REPEAT), "--device", "cuda:0", "--out", out],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print("vae_tool failed: " + r.stderr[-2000:])
                return 1
            tv = float(r.stdout.split("encode_s")[1].split()[0])
            err = ref.rel_err(load_file(out)["mean"].astype(np.float64), mref.astype(np.float64))
            tag = "whole" if chunk == FRAMES else "chunk%d" % chunk
            print("  vflow cuda (%s): %.4f s = %.2f clips/s (%.2fx pytorch; rel err vs pytorch %.1e)" %
                  (tag, tv, BATCH / tv, tt / tv, err))
            res["vflow_%s_s" % tag] = tv
            res["ratio_%s" % tag] = tt / tv
            res["rel_err_%s" % tag] = err
        print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
