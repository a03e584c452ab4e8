# test_vae_parity.py — the C causal VAE encoder (models/vae.c) against an independent
# PyTorch implementation of the same architecture (float64, whole clip, torch conv3d),
# on the same weights, exchanged through safetensors files written here with the
# `safetensors` package and read by the C side through formats/safetensors.h.
#
# The C side runs through build/tools/vae_tool, in chunks of 1, 4 and 5 frames (and
# whole): every run must match the reference to a relative error <= 1e-4 (max abs
# difference over max abs reference) on the latent mean and on the logvar.
# It also checks that a wrong tensor shape or a missing tensor is refused with a message
# naming the tensor, and that tensors the encoder does not use (a decoder) are ignored.
# vflow-test: labels=reference timeout=300
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file, save_file

BUILD = os.environ.get("VFLOW_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
TOOL = os.path.join(BUILD, "tools", "vae_tool")
TOL = 1e-4


# ---------------------------------------------------------------- the reference model
# Written from the architecture description (models/vae.h), not from the C code.

def rms(x, g, eps):
    """RMSNorm over dim 1 (channels) at every other position, gain g (C, 1, ...)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + eps) * g.reshape(1, -1, *([1] * (x.dim() - 2)))


def causal_conv(x, w, b):
    """Conv3d padded with kt-1 zero frames in front only, spatially 'same'."""
    kt, kh, kw = w.shape[2:]
    x = F.pad(x, (kw // 2, kw // 2, kh // 2, kh // 2, kt - 1, 0))
    return F.conv3d(x, w, b)


def per_frame(x, fn):
    B, C, T, H, W = x.shape
    y = fn(x.transpose(1, 2).reshape(B * T, C, H, W))
    return y.reshape(B, T, *y.shape[1:]).transpose(1, 2)


def resblock(P, pre, x, eps):
    h = causal_conv(F.silu(rms(x, P[pre + ".residual.0.gamma"], eps)),
                    P[pre + ".residual.2.weight"], P[pre + ".residual.2.bias"])
    h = causal_conv(F.silu(rms(h, P[pre + ".residual.3.gamma"], eps)),
                    P[pre + ".residual.6.weight"], P[pre + ".residual.6.bias"])
    if pre + ".shortcut.weight" in P:
        x = F.conv3d(x, P[pre + ".shortcut.weight"], P[pre + ".shortcut.bias"])
    return h + x


def spatial_down(P, pre, x):
    # zero pad right and bottom by one, 3x3 conv with stride 2, frame by frame
    return per_frame(x, lambda f: F.conv2d(F.pad(f, (0, 1, 0, 1)), P[pre + ".resample.1.weight"],
                                           P[pre + ".resample.1.bias"], stride=2))


def temporal_down(P, pre, x):
    # frame 0 passes alone; then every output j >= 1 sees frames 2j-2, 2j-1, 2j
    out = [x[:, :, :1]]
    if x.shape[2] >= 3:
        out.append(F.conv3d(x, P[pre + ".time_conv.weight"], P[pre + ".time_conv.bias"], stride=(2, 1, 1)))
    return torch.cat(out, dim=2)


def attention(P, pre, x, eps):
    C = x.shape[1]

    def frame_attn(f):
        BT, _, H, W = f.shape
        y = rms(f, P[pre + ".norm.gamma"], eps)
        qkv = F.conv2d(y, P[pre + ".to_qkv.weight"], P[pre + ".to_qkv.bias"])
        qkv = qkv.reshape(BT, 3 * C, H * W).transpose(1, 2)
        q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
        a = torch.softmax(q @ k.transpose(1, 2) / C ** 0.5, dim=-1) @ v
        o = a.transpose(1, 2).reshape(BT, C, H, W)
        return F.conv2d(o, P[pre + ".proj.weight"], P[pre + ".proj.bias"]) + f

    return per_frame(x, frame_attn)


def encode(P, cfg, x):
    eps = cfg["eps"]
    x = causal_conv(x, P["encoder.conv1.weight"], P["encoder.conv1.bias"])
    k = 0
    L = len(cfg["mult"])
    for i in range(L):
        for _ in range(cfg["res"]):
            x = resblock(P, "encoder.downsamples.%d" % k, x, eps)
            k += 1
        if i != L - 1:
            x = spatial_down(P, "encoder.downsamples.%d" % k, x)
            if cfg["tdown"][i]:
                x = temporal_down(P, "encoder.downsamples.%d" % k, x)
            k += 1
    x = resblock(P, "encoder.middle.0", x, eps)
    x = attention(P, "encoder.middle.1", x, eps)
    x = resblock(P, "encoder.middle.2", x, eps)
    x = causal_conv(F.silu(rms(x, P["encoder.head.0.gamma"], eps)), P["encoder.head.2.weight"],
                    P["encoder.head.2.bias"])
    x = F.conv3d(x, P["conv1.weight"], P["conv1.bias"])
    z = cfg["z"]
    return x[:, :z], x[:, z:]


# ---------------------------------------------------------------- weights

def make_weights(cfg, seed):
    """Random tensors under the Wan-2.1 names; gains and biases non-trivial on purpose."""
    g = torch.Generator().manual_seed(seed)
    W = {}

    def conv(name, oc, ic, *k):
        fan = ic * int(np.prod(k))
        W[name + ".weight"] = (torch.rand(oc, ic, *k, generator=g, dtype=torch.float64) * 2 - 1) * (1.5 / fan ** 0.5)
        W[name + ".bias"] = (torch.rand(oc, generator=g, dtype=torch.float64) * 2 - 1) * 0.2

    def gain(name, c, nd):
        W[name] = 1 + 0.3 * torch.randn(c, *([1] * nd), generator=g, dtype=torch.float64)

    def res(pre, i, o):
        gain(pre + ".residual.0.gamma", i, 3)
        conv(pre + ".residual.2", o, i, 3, 3, 3)
        gain(pre + ".residual.3.gamma", o, 3)
        conv(pre + ".residual.6", o, o, 3, 3, 3)
        if i != o:
            conv(pre + ".shortcut", o, i, 1, 1, 1)

    d = cfg["dim"]
    conv("encoder.conv1", d, 3, 3, 3, 3)
    k, cin = 0, d
    L = len(cfg["mult"])
    for i in range(L):
        cout = d * cfg["mult"][i]
        for _ in range(cfg["res"]):
            res("encoder.downsamples.%d" % k, cin, cout)
            cin = cout
            k += 1
        if i != L - 1:
            conv("encoder.downsamples.%d.resample.1" % k, cout, cout, 3, 3)
            if cfg["tdown"][i]:
                conv("encoder.downsamples.%d.time_conv" % k, cout, cout, 3, 1, 1)
            k += 1
    C = cin
    res("encoder.middle.0", C, C)
    gain("encoder.middle.1.norm.gamma", C, 2)
    conv("encoder.middle.1.to_qkv", 3 * C, C, 1, 1)
    conv("encoder.middle.1.proj", C, C, 1, 1)
    res("encoder.middle.2", C, C)
    gain("encoder.head.0.gamma", C, 3)
    conv("encoder.head.2", 2 * cfg["z"], C, 3, 3, 3)
    conv("conv1", 2 * cfg["z"], 2 * cfg["z"], 1, 1, 1)
    # Rounded to f32: the file holds f32 and the reference must use the same values.
    return {k: v.float().double() for k, v in W.items()}


def save_weights(path, W, extra=None):
    d = {k: v.float().numpy() for k, v in W.items()}
    if extra:
        d.update(extra)
    save_file(d, path)


def cfg_args(cfg):
    return ["--dim", str(cfg["dim"]), "--mult", ",".join(map(str, cfg["mult"])),
            "--res", str(cfg["res"]), "--tdown", ",".join(map(str, cfg["tdown"])) or "0",
            "--z", str(cfg["z"]), "--eps", repr(cfg["eps"])]


def run_tool(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


def rel_err(a, ref):
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


# ---------------------------------------------------------------- the test

CONFIGS = [
    # the tiny preset: 8x space, 4x time, shortcut convs at the width change
    dict(name="tiny", dim=8, mult=[1, 2, 2, 2], res=1, tdown=[0, 1, 1], z=4, eps=1e-12,
         B=2, T=9, H=32, W=24, chunks=[0, 1, 4, 5]),
    # another shape: 4x space, time downsample at the first level, two blocks per level
    dict(name="alt", dim=4, mult=[1, 3, 2], res=2, tdown=[1, 1], z=3, eps=1e-6,
         B=1, T=13, H=16, W=16, chunks=[0, 1, 3]),
]


def main():
    if not os.path.exists(TOOL):
        print("missing %s (build the tools first)" % TOOL)
        return 1
    torch.manual_seed(0)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ci, cfg in enumerate(CONFIGS):
            W = make_weights(cfg, 1234 + ci)
            wpath = os.path.join(tmp, "w_%s.safetensors" % cfg["name"])
            # a decoder tensor the encoder must ignore
            save_weights(wpath, W, extra={"decoder.conv1.weight": np.zeros((2, 2, 3, 3, 3), np.float32)})
            g = torch.Generator().manual_seed(99 + ci)
            x = (torch.rand(cfg["B"], 3, cfg["T"], cfg["H"], cfg["W"], generator=g) * 2 - 1).float()
            xpath = os.path.join(tmp, "x_%s.safetensors" % cfg["name"])
            save_file({"x": x.numpy()}, xpath)
            with torch.no_grad():
                mean_ref, lv_ref = encode(W, cfg, x.double())
            mean_ref, lv_ref = mean_ref.numpy(), lv_ref.numpy()
            tf = 2 ** sum(cfg["tdown"])
            assert mean_ref.shape[2] == 1 + (cfg["T"] - 1) // tf
            for chunk in cfg["chunks"]:
                out = os.path.join(tmp, "out.safetensors")
                r = run_tool(["encode"] + cfg_args(cfg) + ["--weights", wpath, "--input", xpath,
                              "--chunk", str(chunk), "--out", out])
                if r.returncode != 0:
                    print("FAIL %s chunk %d: vae_tool exit %d: %s" % (cfg["name"], chunk, r.returncode, r.stderr))
                    failed += 1
                    continue
                o = load_file(out)
                em = rel_err(o["mean"].astype(np.float64), mean_ref)
                el = rel_err(o["logvar"].astype(np.float64), lv_ref)
                ok = o["mean"].shape == mean_ref.shape and em <= TOL and el <= TOL
                print("%s %s chunk %s: latent %s rel err mean %.3g logvar %.3g" % (
                    "ok  " if ok else "FAIL", cfg["name"], chunk or "whole", o["mean"].shape, em, el))
                failed += not ok

        # errors name the tensor: wrong shape, missing tensor
        cfg = CONFIGS[0]
        W = make_weights(cfg, 7)
        bad = dict(W)
        bad["encoder.downsamples.2.residual.2.weight"] = torch.zeros(16, 8, 3, 3, 1, dtype=torch.float64)
        p = os.path.join(tmp, "bad_shape.safetensors")
        save_weights(p, bad)
        r = run_tool(["encode"] + cfg_args(cfg) + ["--weights", p, "--input", os.path.join(tmp, "x_tiny.safetensors"),
                      "--out", os.path.join(tmp, "o.safetensors")])
        ok = r.returncode != 0 and "encoder.downsamples.2.residual.2.weight" in r.stderr
        print("%s wrong shape refused: %s" % ("ok  " if ok else "FAIL", r.stderr.strip()))
        failed += not ok
        miss = dict(W)
        del miss["encoder.middle.1.proj.bias"]
        p = os.path.join(tmp, "missing.safetensors")
        save_weights(p, miss)
        r = run_tool(["encode"] + cfg_args(cfg) + ["--weights", p, "--input", os.path.join(tmp, "x_tiny.safetensors"),
                      "--out", os.path.join(tmp, "o.safetensors")])
        ok = r.returncode != 0 and "encoder.middle.1.proj.bias" in r.stderr
        print("%s missing tensor refused: %s" % ("ok  " if ok else "FAIL", r.stderr.strip()))
        failed += not ok

        # a clip length that is not 1 + 4k is refused
        xb = os.path.join(tmp, "x_bad.safetensors")
        save_file({"x": np.zeros((1, 3, 8, 32, 24), np.float32)}, xb)
        r = run_tool(["encode"] + cfg_args(cfg) + ["--seed", "1", "--input", xb, "--out", os.path.join(tmp, "o.safetensors")])
        ok = r.returncode != 0 and "1 + 4" in r.stderr
        print("%s 8-frame clip refused: %s" % ("ok  " if ok else "FAIL", r.stderr.strip()))
        failed += not ok
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
