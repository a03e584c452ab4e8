#!/usr/bin/env python3
"""bench_cuda_dit.py — the PyTorch peer of bench/bench_cuda_dit.c: the same video DiT
(Wan 2.1 structure, as models/dit.h and tests/reference/test_dit_parity.py: patch embed,
adaLN modulation, self-attention with QK-RMSNorm and 3D RoPE, cross-attention to 512
caption tokens, GELU MLP, head) trained one step at a time on the GPU, in the usual
mixed-precision recipe: f32 parameters, bf16 autocast, F.scaled_dot_product_attention,
fused AdamW, activation checkpointing per block (as vflow's recompute; --no-ckpt turns
it off), eager and torch.compile (each block compiled: regional compilation).

  python3 bench/bench_cuda_dit.py step [--preset wan-1.3b] [--B 1] [--T 13] [--H 48] [--W 84]
                                       [--steps 8] [--warmup 3] [--no-ckpt] [--compile]
  python3 bench/bench_cuda_dit.py attn [--B 1] [--L 13104] [--Lk L] [--heads 12] [--D 128]

Last line: one JSON object with the same keys as the C side (tokens/s, MFU with the same
FLOP count, peak = torch.cuda.max_memory_reserved()).
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt

PRESETS = {
    "tiny": dict(dim=64, depth=4, heads=4, head_dim=16, ffn=256, z=4, text_dim=64, text_len=32, freq_dim=64,
                 text_emb=False),
    "wan-1.3b": dict(dim=1536, depth=30, heads=12, head_dim=128, ffn=8960, z=16, text_dim=4096, text_len=512,
                     freq_dim=256, text_emb=True),
    "wan-14b": dict(dim=5120, depth=40, heads=40, head_dim=128, ffn=13824, z=16, text_dim=4096, text_len=512,
                    freq_dim=256, text_emb=True),
}
EPS = 1e-6
PEAK = 989e12


def rope_tables(f, h, w, d, device):
    """cos/sin (f·h·w, d/2): Wan's split of the d/2 frequencies over t, h, w (base 10000)."""
    c = d // 2
    parts = [c - 2 * (c // 3), c // 3, c // 3]
    outs = []
    for n, size, axis in zip(parts, (f, h, w), range(3)):
        dim = 2 * n
        inv = 1.0 / torch.pow(10000.0, torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        ang = torch.outer(torch.arange(size, dtype=torch.float64), inv)  # (size, n)
        shape = [f, h, w, n]
        view = [1, 1, 1, n]
        view[axis] = size
        outs.append(ang.view(*view).expand(*shape))
    a = torch.cat(outs, dim=-1).reshape(f * h * w, c)
    return torch.cos(a).float().to(device), torch.sin(a).float().to(device)


def rope(x, cos, sin):
    # x (b, s, n, d): rotate interleaved pairs (2i, 2i+1) by angle[s, i]
    x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).type_as(x) * self.weight


class Attn(nn.Module):
    def __init__(self, dim, heads, cross):
        super().__init__()
        self.n, self.d, self.cross = heads, dim // heads, cross
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm_q, self.norm_k = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, kv, cos=None, sin=None):
        b = x.shape[0]
        q = self.norm_q(self.q(x)).view(b, -1, self.n, self.d)
        k = self.norm_k(self.k(kv)).view(b, -1, self.n, self.d)
        v = self.v(kv).view(b, -1, self.n, self.d)
        if not self.cross:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.o(y.transpose(1, 2).flatten(2))


class Block(nn.Module):
    def __init__(self, dim, ffn, heads):
        super().__init__()
        self.dim = dim
        self.self_attn = Attn(dim, heads, False)
        self.norm3 = nn.LayerNorm(dim, eps=EPS)
        self.cross_attn = Attn(dim, heads, True)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(approximate="tanh"), nn.Linear(ffn, dim))
        self.modulation = nn.Parameter(torch.randn(1, 6, dim) / dim ** 0.5)

    def forward(self, x, e0, ctx, cos, sin):
        e = (self.modulation + e0).chunk(6, dim=1)
        ln = lambda t: F.layer_norm(t, (self.dim,), eps=EPS)
        h = ln(x) * (1 + e[1]) + e[0]
        x = x + self.self_attn(h, h, cos, sin) * e[2]
        x = x + self.cross_attn(self.norm3(x), ctx)
        return x + self.ffn(ln(x) * (1 + e[4]) + e[3]) * e[5]


class DiT(nn.Module):
    def __init__(self, c, use_ckpt):
        super().__init__()
        self.c, self.use_ckpt = c, use_ckpt
        dim = c["dim"]
        self.patch_embedding = nn.Conv3d(c["z"], dim, kernel_size=(1, 2, 2), stride=(1, 2, 2))
        # the Wan presets take umT5 embeddings (B, text_len, text_dim); tiny takes caption bytes
        self.text_tokens = None if c["text_emb"] else nn.Embedding(257, c["text_dim"])
        self.text_embedding = nn.Sequential(nn.Linear(c["text_dim"], dim), nn.GELU(approximate="tanh"),
                                            nn.Linear(dim, dim))
        self.time_embedding = nn.Sequential(nn.Linear(c["freq_dim"], dim), nn.SiLU(), nn.Linear(dim, dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        self.blocks = nn.ModuleList([Block(dim, c["ffn"], c["heads"]) for _ in range(c["depth"])])
        self.head_mod = nn.Parameter(torch.randn(1, 2, dim) / dim ** 0.5)
        self.head = nn.Linear(dim, 4 * c["z"])

    def forward(self, x, t, text, cos, sin):
        c = self.c
        b = x.shape[0]
        x = self.patch_embedding(x)
        grid = x.shape[2:]
        x = x.flatten(2).transpose(1, 2)
        half = c["freq_dim"] // 2
        om = torch.pow(10000.0, -torch.arange(half, device=x.device, dtype=torch.float32) / half)
        a = torch.outer(t * 1000.0, om)
        e = self.time_embedding(torch.cat([torch.cos(a), torch.sin(a)], dim=1))
        e0 = self.time_projection(e).unflatten(1, (6, c["dim"]))
        ctx = self.text_embedding(text if self.text_tokens is None else self.text_tokens(text))
        for blk in self.blocks:
            if self.use_ckpt and self.training:
                x = ckpt.checkpoint(blk, x, e0, ctx, cos, sin, use_reentrant=False)
            else:
                x = blk(x, e0, ctx, cos, sin)
        hm = (self.head_mod + e.unsqueeze(1)).chunk(2, dim=1)
        y = self.head(F.layer_norm(x, (c["dim"],), eps=EPS) * (1 + hm[1]) + hm[0])
        f, h, w = grid
        y = y.view(b, f, h, w, 1, 2, 2, c["z"])
        return torch.einsum("bfhwpqrc->bcfphqwr", y).reshape(b, c["z"], f, 2 * h, 2 * w)


def flops(model, c, B, S):
    n_tok = n_txt = 0
    for name, p in model.named_parameters():
        if "modulation" in name or name.startswith("time_") or name == "head_mod":
            continue
        if "cross_attn.k." in name or "cross_attn.v." in name or name.startswith("text_"):
            n_txt += p.numel()
        else:
            n_tok += p.numel()
    St, L, d = c["text_len"], c["depth"], c["dim"]
    return B * (6 * n_tok * S + 6 * n_txt * St + 12 * L * d * S * S + 12 * L * d * S * St), n_tok + n_txt


def step_bench(a):
    c = PRESETS[a.preset]
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = DiT(c, not a.no_ckpt).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    # Regional compilation (torch's recipe for models of repeated blocks, diffusers'
    # compile_repeated_blocks): each block compiled, one graph reused by all 30, so the
    # compile takes one block's time instead of the whole unrolled model's (minutes)
    if a.compile:
        for blk in model.blocks:
            blk.compile()
    fwd = model
    B, T, H, W = a.B, a.T, a.H, a.W
    S = T * (H // 2) * (W // 2)
    cos, sin = rope_tables(T, H // 2, W // 2, c["head_dim"], dev)
    x = torch.randn(B, c["z"], T, H, W, device=dev)
    tgt = torch.randn_like(x)
    t = torch.rand(B, device=dev)
    if c["text_emb"]:
        text = torch.randn(B, c["text_len"], c["text_dim"], device=dev)
    else:
        text = torch.randint(0, 257, (B, c["text_len"]), device=dev)
    times = []
    for s in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pred = fwd(x, t, text, cos, sin)
        loss = F.mse_loss(pred.float(), tgt)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        print("step %d: %.1f ms loss %.4f" % (s, times[-1] * 1e3, loss.item()), flush=True)
    ts = sorted(times[a.warmup:])[len(times[a.warmup:]) // 2]
    fl, n = flops(model, c, B, S)
    peak = torch.cuda.max_memory_reserved()
    mode = ("compile" if a.compile else "eager") + ("" if a.no_ckpt else "+ckpt")
    print("torch %s dit step: %s B=%d tokens=%d params=%.3fB: %.1f ms, %.0f tokens/s, MFU %.1f%%, peak %.2f GiB" %
          (mode, a.preset, B, S, n / 1e9, ts * 1e3, B * S / ts, 100 * fl / ts / PEAK, peak / 2 ** 30))
    print(json.dumps({"bench": "dit_step", "impl": "torch-" + mode, "step_ms": ts * 1e3, "tokens_per_s": B * S / ts,
                      "tflops": fl / ts / 1e12, "mfu": fl / ts / PEAK, "peak_bytes": peak, "tokens": S,
                      "torch": torch.__version__}))


def attn_bench(a):
    dev = torch.device("cuda")
    Lk = a.Lk or a.L
    q = torch.randn(a.B, a.heads, a.L, a.D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(a.B, a.heads, Lk, a.D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(a.B, a.heads, Lk, a.D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(a.B, a.heads, a.L, a.D, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v).backward(g)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    tf = tb = 0.0
    for _ in range(a.iters):
        ev[0].record()
        o = F.scaled_dot_product_attention(q, k, v)
        ev[1].record()
        o.backward(g)
        ev[2].record()
        torch.cuda.synchronize()
        tf += ev[0].elapsed_time(ev[1]) / 1e3
        tb += ev[1].elapsed_time(ev[2]) / 1e3
    tf, tb = tf / a.iters, tb / a.iters
    ff = 4.0 * a.B * a.heads * a.L * Lk * a.D
    fb = 2.5 * ff
    print("torch sdpa B=%d Lq=%d Lk=%d H=%d D=%d: fwd %.3f ms %.0f TF/s, bwd %.3f ms, fwd+bwd %.0f TF/s" %
          (a.B, a.L, Lk, a.heads, a.D, tf * 1e3, ff / tf / 1e12, tb * 1e3, (ff + fb) / (tf + tb) / 1e12))
    print(json.dumps({"bench": "attention", "impl": "torch-sdpa", "fwd_ms": tf * 1e3, "bwd_ms": tb * 1e3,
                      "fwd_tflops": ff / tf / 1e12, "fwdbwd_tflops": (ff + fb) / (tf + tb) / 1e12}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["step", "attn"])
    p.add_argument("--preset", default="wan-1.3b")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--T", type=int, default=13)
    p.add_argument("--H", type=int, default=48)
    p.add_argument("--W", type=int, default=84)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-ckpt", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--L", type=int, default=13104)
    p.add_argument("--Lk", type=int, default=0)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--D", type=int, default=128)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("skip: no CUDA device for torch")
        raise SystemExit(77)
    step_bench(a) if a.mode == "step" else attn_bench(a)


if __name__ == "__main__":
    main()
