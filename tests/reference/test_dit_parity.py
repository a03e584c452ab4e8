#!/usr/bin/python3
# test_dit_parity.py — the C DiT (models/dit*.c on the CPU backend) against an independent
# PyTorch float64 implementation written after Wan 2.1's WanModel (Conv3d patch embedding,
# complex-number 3D RoPE, einsum unpatchify), on the same weights and inputs.
#
# Weights are random (every tensor non-trivial, unlike the real init whose zero head would
# leave most gradients zero), exchanged as a raw f32 vector in the C layout order; the
# names and shapes the C layout reports must be exactly this module's state_dict. Inputs
# x_t, t, caption tokens (with padding) and target are given explicitly, so no RNG is
# compared. Checked: loss, prediction and EVERY parameter gradient, each as
# ||c - ref|| / ||ref|| <= 1e-4, for two configurations (patch 1x2x2 and 2x2x2) and for
# one partitioned + recompute run, with caption bytes; and with text embeddings (Wan's
# conditioning: no byte table, the (B, text_len, text_dim) states zero-padded past each
# caption's length, the rows past it given non-zero here so that a model reading them fails).
# vflow-test: labels=reference timeout=300
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
EPS = 1e-6
PAD = 256


def sinusoidal_embedding_1d(dim, position):
    half = dim // 2
    position = position.type(torch.float64)
    sinusoid = torch.outer(position, torch.pow(10000, -torch.arange(half).to(position).div(half)))
    return torch.cat([torch.cos(sinusoid), torch.sin(sinusoid)], dim=1)


def rope_params(max_seq_len, dim, theta=10000):
    freqs = torch.outer(torch.arange(max_seq_len),
                        1.0 / torch.pow(theta, torch.arange(0, dim, 2).to(torch.float64).div(dim)))
    return torch.polar(torch.ones_like(freqs), freqs)


def rope_apply(x, grid, freqs):
    b, s, n, c2 = x.shape
    c = c2 // 2
    parts = freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
    f, h, w = grid
    xc = torch.view_as_complex(x.reshape(b, s, n, c, 2))
    fr = torch.cat([parts[0][:f].view(f, 1, 1, -1).expand(f, h, w, -1),
                    parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
                    parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1)], dim=-1).reshape(f * h * w, 1, -1)
    return torch.view_as_real(xc * fr).flatten(3)


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * self.weight


def attention(q, k, v):
    # q (b, lq, n, d), k/v (b, lk, n, d)
    d = q.shape[-1]
    s = torch.einsum("bqnd,bknd->bnqk", q, k) / math.sqrt(d)
    return torch.einsum("bnqk,bknd->bqnd", torch.softmax(s, dim=-1), v)


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.n, self.d = heads, dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm_q, self.norm_k = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, grid, freqs):
        b, s, _ = x.shape
        q = self.norm_q(self.q(x)).view(b, s, self.n, self.d)
        k = self.norm_k(self.k(x)).view(b, s, self.n, self.d)
        v = self.v(x).view(b, s, self.n, self.d)
        y = attention(rope_apply(q, grid, freqs), rope_apply(k, grid, freqs), v)
        return self.o(y.flatten(2))


class CrossAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.n, self.d = heads, dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm_q, self.norm_k = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, ctx):
        b = x.shape[0]
        q = self.norm_q(self.q(x)).view(b, -1, self.n, self.d)
        k = self.norm_k(self.k(ctx)).view(b, -1, self.n, self.d)
        v = self.v(ctx).view(b, -1, self.n, self.d)
        return self.o(attention(q, k, v).flatten(2))


class Block(nn.Module):
    def __init__(self, dim, ffn, heads):
        super().__init__()
        self.dim = dim
        self.self_attn = SelfAttention(dim, heads)
        self.norm3 = nn.LayerNorm(dim, eps=EPS, elementwise_affine=True)
        self.cross_attn = CrossAttention(dim, heads)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(approximate="tanh"), nn.Linear(ffn, dim))
        self.modulation = nn.Parameter(torch.zeros(1, 6, dim))

    def forward(self, x, e0, ctx, grid, freqs):
        e = (self.modulation + e0).chunk(6, dim=1)
        ln = lambda t: F.layer_norm(t, (self.dim,), eps=EPS)
        x = x + self.self_attn(ln(x) * (1 + e[1]) + e[0], grid, freqs) * e[2]
        x = x + self.cross_attn(self.norm3(x), ctx)
        x = x + self.ffn(ln(x) * (1 + e[4]) + e[3]) * e[5]
        return x


class Head(nn.Module):
    def __init__(self, dim, out_dim, patch):
        super().__init__()
        self.dim = dim
        self.head = nn.Linear(dim, math.prod(patch) * out_dim)
        self.modulation = nn.Parameter(torch.zeros(1, 2, dim))

    def forward(self, x, e):
        e = (self.modulation + e.unsqueeze(1)).chunk(2, dim=1)
        return self.head(F.layer_norm(x, (self.dim,), eps=EPS) * (1 + e[1]) + e[0])


class DiT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        dim = c["dim"]
        self.patch_embedding = nn.Conv3d(c["z"], dim, kernel_size=c["patch"], stride=c["patch"])
        self.emb = c.get("text") == "embeddings"
        if not self.emb:
            self.text_tokens = nn.Embedding(257, c["text_dim"])
        self.text_embedding = nn.Sequential(nn.Linear(c["text_dim"], dim), nn.GELU(approximate="tanh"),
                                            nn.Linear(dim, dim))
        self.time_embedding = nn.Sequential(nn.Linear(c["freq_dim"], dim), nn.SiLU(), nn.Linear(dim, dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(dim, dim * 6))
        self.blocks = nn.ModuleList([Block(dim, c["ffn"], c["heads"]) for _ in range(c["depth"])])
        self.head = Head(dim, c["z"], c["patch"])
        d = c["head_dim"]
        self.freqs = torch.cat([rope_params(1024, d - 4 * (d // 6)), rope_params(1024, 2 * (d // 6)),
                                rope_params(1024, 2 * (d // 6))], dim=1)

    def forward(self, x, t, text, text_len):
        c = self.c
        x = self.patch_embedding(x)                       # (b, dim, f, h, w)
        grid = tuple(x.shape[2:])
        x = x.flatten(2).transpose(1, 2)                  # (b, L, dim)
        e = self.time_embedding(sinusoidal_embedding_1d(c["freq_dim"], t * 1000.0))
        e0 = self.time_projection(e).unflatten(1, (6, c["dim"]))
        pos = torch.arange(text.shape[1]).unsqueeze(0)
        if self.emb:  # zero rows past each caption's length, as WanPipeline pads them
            ctx = self.text_embedding(torch.where((pos < text_len.unsqueeze(1)).unsqueeze(2), text,
                                                  torch.zeros_like(text)))
        else:
            tok = torch.where(pos < text_len.unsqueeze(1), text, torch.full_like(text, PAD))
            ctx = self.text_embedding(self.text_tokens(tok))
        for blk in self.blocks:
            x = blk(x, e0, ctx, grid, self.freqs)
        x = self.head(x, e)                               # (b, L, pt*ph*pw*z)
        b = x.shape[0]
        p, z = c["patch"], c["z"]
        u = x.view(b, *grid, *p, z)
        u = torch.einsum("bfhwpqrc->bcfphqwr", u)
        return u.reshape(b, z, *[g * s for g, s in zip(grid, p)])


def tool_path():
    if os.environ.get("DIT_TOOL"):
        return os.environ["DIT_TOOL"]
    build = os.environ.get("VFLOW_BUILD", "build")
    return os.path.join(build, "tools", "dit_tool")


def run(*args):
    r = subprocess.run([tool_path(), *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("dit_tool %s failed (%d):\n%s" % (" ".join(args), r.returncode, r.stderr))
    return r.stdout


def read_safetensors(path):
    """The format by hand (u64 header length, JSON header, data), cross-checked with the
    safetensors package where it is installed."""
    import json
    import struct
    with open(path, "rb") as fh:
        blob = fh.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(arr.astype(np.float64))
    try:
        from safetensors.numpy import load_file
    except ImportError:
        return out
    for name, arr in load_file(path).items():
        assert np.array_equal(arr.astype(np.float64), out[name].numpy()), name
    return out


def rel(a, b):
    den = np.linalg.norm(b)
    return np.linalg.norm(a - b) / (den if den > 0 else 1.0)


def check(c, dims, runs, seed):
    B, T, H, W = dims
    cfg = ["dim=%d" % c["dim"], "depth=%d" % c["depth"], "heads=%d" % c["heads"],
           "head_dim=%d" % c["head_dim"], "ffn=%d" % c["ffn"], "z=%d" % c["z"],
           "patch=%d,%d,%d" % tuple(c["patch"]), "text_dim=%d" % c["text_dim"],
           "text_len=%d" % c["text_len"], "freq_dim=%d" % c["freq_dim"],
           "text_emb=%d" % (c.get("text") == "embeddings")]
    layout = []
    for line in run("layout", *cfg).splitlines():
        name, off, numel, shape = line.split()
        layout.append((name, int(off), int(numel), tuple(int(s) for s in shape.split(","))))

    torch.manual_seed(seed)
    model = DiT(c)
    sd = dict(model.named_parameters())
    names = [n for n, _, _, _ in layout]
    assert sorted(names) == sorted(sd.keys()), "names differ: C-only %s, torch-only %s" % (
        sorted(set(names) - set(sd)), sorted(set(sd) - set(names)))
    total = layout[-1][1] + layout[-1][2]
    flat = np.zeros(total, dtype=np.float32)
    with torch.no_grad():
        for name, off, numel, shape in layout:
            p = sd[name]
            assert tuple(p.shape) == shape, "%s: C shape %s, torch %s" % (name, shape, tuple(p.shape))
            if name.endswith("norm_q.weight") or name.endswith("norm_k.weight") or name.endswith("norm3.weight"):
                v = 1.0 + 0.2 * torch.randn(shape)
            elif name == "text_tokens.weight":
                v = torch.randn(shape)
            elif name.endswith("modulation"):
                v = 0.3 * torch.randn(shape)
            elif name.endswith("bias"):
                v = 0.1 * torch.randn(shape)
            else:
                fan_in = numel // shape[0]
                v = torch.randn(shape) / math.sqrt(fan_in)
            v = v.float().double()                      # the exact values C sees
            p.copy_(v)
            flat[off:off + numel] = v.numpy().astype(np.float32).ravel()

    gen = torch.Generator().manual_seed(seed + 1)
    x_t = torch.randn(B, c["z"], T, H, W, generator=gen).float().double()
    target = torch.randn(B, c["z"], T, H, W, generator=gen).float().double()
    t = torch.rand(B, generator=gen).float().double()
    text = torch.randint(32, 127, (B, c["text_len"]), generator=gen, dtype=torch.int32)
    emb = torch.randn(B, c["text_len"], c["text_dim"], generator=gen).float().double()
    text_len = torch.tensor([c["text_len"] // 2 + i for i in range(B)], dtype=torch.int32).clamp(max=c["text_len"])
    text_len[0] = 0 if B > 2 else text_len[0]                 # an empty caption: all pads

    pred = model(x_t, t, emb if model.emb else text.long(), text_len.long())
    loss = F.mse_loss(pred, target)
    loss.backward()

    with tempfile.TemporaryDirectory() as d:
        f = lambda n: os.path.join(d, n)
        flat.tofile(f("params.bin"))
        # the C model's safetensors file loads into this module by name, strictly
        run("save", *cfg, "params=" + f("params.bin"), "out=" + f("model.safetensors"))
        loaded = read_safetensors(f("model.safetensors"))
        probe = DiT(c)
        probe.load_state_dict(loaded, strict=True)
        for name, p in probe.named_parameters():
            assert torch.equal(p, sd[name].detach()), "%s differs after the safetensors round trip" % name
        x_t.float().numpy().tofile(f("xt.bin"))
        target.float().numpy().tofile(f("target.bin"))
        t.float().numpy().tofile(f("t.bin"))
        text.numpy().astype(np.int32).tofile(f("text.bin"))
        emb.float().numpy().tofile(f("emb.bin"))
        text_len.numpy().astype(np.int32).tofile(f("len.bin"))
        worst = 0.0
        for parts, recompute in runs:
            out = run("grad", *cfg, "dims=%d,%d,%d,%d" % dims, "params=" + f("params.bin"),
                      "xt=" + f("xt.bin"), "t=" + f("t.bin"), "text=" + f("text.bin"), "emb=" + f("emb.bin"),
                      "len=" + f("len.bin"), "target=" + f("target.bin"), "grads=" + f("g.bin"),
                      "pred=" + f("pred.bin"), "parts=%d" % parts, "recompute=%d" % recompute)
            closs = float(out.split()[1])
            grads = np.fromfile(f("g.bin"), dtype=np.float32).astype(np.float64)
            cpred = np.fromfile(f("pred.bin"), dtype=np.float32).astype(np.float64)
            tag = "patch=%s text=%s parts=%d recompute=%d" % (c["patch"], c.get("text", "bytes"), parts,
                                                             recompute)
            errs = [("loss", abs(closs - loss.item()) / abs(loss.item())),
                    ("pred", rel(cpred, pred.detach().numpy().ravel()))]
            for name, off, numel, shape in layout:
                g = sd[name].grad.numpy().ravel()
                assert np.linalg.norm(g) > 0, "%s: reference gradient is zero" % name
                errs.append((name, rel(grads[off:off + numel], g)))
            bad = [(n, e) for n, e in errs if not e <= 1e-4]
            name, e = max(errs, key=lambda ne: ne[1])
            worst = max(worst, e)
            print("%s: loss %.9g (ref %.9g), %d tensors, worst relative error %.3g (%s)" % (
                tag, closs, loss.item(), len(layout), e, name))
            for n, e in bad:
                print("  FAIL %s: relative error %.3g > 1e-4" % (n, e))
            if bad:
                return False
    return True


def main():
    torch.manual_seed(0)
    base = dict(dim=32, depth=2, heads=2, head_dim=16, ffn=64, z=4, patch=(1, 2, 2), text_dim=16,
                text_len=8, freq_dim=16)
    ok = check(base, (3, 3, 4, 6), [(1, 0), (2, 1)], seed=1)
    c2 = dict(base, patch=(2, 2, 2), heads=4, head_dim=8, depth=1, z=3)
    ok = check(c2, (2, 4, 4, 4), [(1, 0)], seed=2) and ok
    c3 = dict(base, text="embeddings", text_dim=24)
    ok = check(c3, (3, 3, 4, 6), [(1, 0), (2, 1)], seed=3) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
