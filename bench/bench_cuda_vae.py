#!/usr/bin/env python3
"""bench_cuda_vae.py — the Wan 2.1 causal VAE, encode and decode, vflow against diffusers'
AutoencoderKLWan on the same weights and clip, in bf16 on the same GPU, in the same run.

  python3 bench/bench_cuda_vae.py [BUILD_DIR] [--shape 17x256x256 ...] [--repeat 3]
                                  [--budget SECONDS] [--device cuda|cpu] [--tiny]

The model is AutoencoderKLWan at Wan's widths (its default config: base_dim 96, z 16)
with every parameter perturbed from its init; its state dict is handed to vflow as a
diffusers-named safetensors file (build/tools/vae_tool loads it). Per shape (frames x
height x width, one clip):
  - diffusers encode (latent_dist.mode()) and vflow encode (vae_tool encode, chunks of 4
    frames, as Wan's own 1 + 4 + 4 ... schedule), each the best of --repeat after one
    warm-up; the latent means compared (max |vflow - diffusers| / max |diffusers|);
  - diffusers decode and vflow decode (vae_tool decode, one latent frame per call, as
    Wan does) of diffusers' latent, timed and compared the same way.
vflow's times include its host-to-device copy of the f32 clip (latent); diffusers starts
from a bf16 clip on the GPU. vae_tool also prints the phases of one more pass (kernels/
phases.h), which are passed on. Each measurement prints one JSON line as soon as it is
made ({"bench": "vae", "side": "vflow"|"diffusers", "op": "encode"|"decode", "shape",
"s", "clips_per_s", "conv_path", "attn_path", ...}), so a run cut short keeps what it measured; --budget bounds the
whole run (a vae_tool call that would outlast it is stopped and reported with "s": null).

--device cpu --tiny runs the same comparison with a tiny config on the CPU (a check of
this harness on a machine without a GPU; the figures mean nothing there).
Exits 77 when asked for CUDA and torch has none.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))
import wan_ref  # noqa: E402,F401  (fills in what an old torch lacks; nothing on torch 2.x)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

TINY = dict(base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True])
TINY_TOOL = ["--dim", "8", "--mult", "1,2,4,4", "--res", "2", "--tdown", "0,1,1", "--z", "4", "--eps", "1e-12"]


def parse_args(argv):
    a = dict(build=None, shapes=[], repeat=3, budget=3600.0, device="cuda", tiny=False)
    i = 0
    while i < len(argv):
        k = argv[i]
        if k in ("--shape", "--repeat", "--budget", "--device"):
            if i + 1 >= len(argv):
                sys.exit("bench_cuda_vae: %s needs a value" % k)
            v = argv[i + 1]
            i += 1
            if k == "--shape":
                try:
                    f, h, w = (int(s) for s in v.lower().split("x"))
                except ValueError:
                    sys.exit("bench_cuda_vae: --shape %s: expected FRAMESxHEIGHTxWIDTH" % v)
                a["shapes"].append((f, h, w))
            elif k == "--device":
                a["device"] = v
            else:
                a[k[2:]] = float(v) if k == "--budget" else int(v)
        elif k == "--tiny":
            a["tiny"] = True
        elif k.startswith("--"):
            sys.exit("bench_cuda_vae: unknown option %s" % k)
        else:
            a["build"] = k
        i += 1
    if not a["shapes"]:
        a["shapes"] = [(5, 32, 32)] if a["tiny"] else [(17, 256, 256)]
    return a


def rel_err(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    if a.shape != ref.shape:
        return float("inf")
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


def emit(d):
    print(json.dumps(d), flush=True)


class Bench:
    def __init__(self, a):
        self.a = a
        self.t_end = time.monotonic() + a["budget"]
        self.dev = torch.device(a["device"])
        self.dtype = torch.bfloat16 if self.dev.type == "cuda" else torch.float32
        build = os.path.abspath(a["build"] or os.environ.get("VFLOW_BUILD", os.path.join(SRC, "build")))
        self.tool = os.path.join(build, "tools", "vae_tool")
        self.tool_cfg = TINY_TOOL if a["tiny"] else ["--preset", "wan"]
        self.tool_dev = "cuda:0" if self.dev.type == "cuda" else "cpu"

    def left(self):
        return self.t_end - time.monotonic()

    def release(self):
        """PyTorch's cached device memory back to the driver: vae_tool, another process,
        runs next on the same GPU"""
        if self.dev.type == "cuda":
            torch.cuda.empty_cache()

    def sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize()

    def timed(self, fn):
        """best of repeat after one warm-up, fewer when the budget runs out (the warm-up
        alone if need be); (seconds, timed runs, last result)"""
        best, n, out = float("inf"), 0, None
        for i in range(self.a["repeat"] + 1):
            self.sync()
            t0 = time.perf_counter()
            with torch.no_grad():
                out = fn()
            self.sync()
            dt = time.perf_counter() - t0
            if i:
                best, n = min(best, dt), n + 1
            elif self.left() < 0:  # no time for more: the warm-up is the figure
                best = dt
                break
            if self.left() < 0:
                break
        return best, n, out

    def tool_run(self, args):
        """vae_tool within the time left: (result, finished). result: "s" (its best run, or
        the best of those that ended before it had to be stopped; None if none did),
        "timed_runs", "phases_ms", "conv_path" and "attn_path" (what ran the convolutions and the
        mid-block attention: cudnn, hand, gemm, joined by '+'), "error" when it failed or was stopped."""
        limit = max(5.0, self.left())
        cmd = [self.tool] + args + self.tool_cfg + ["--device", self.tool_dev, "--repeat", str(self.a["repeat"]),
                                                    "--phases", "1"]
        r, done = {}, True
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
            out = p.stdout
            if p.returncode != 0:
                return {"s": None, "error": "vae_tool exit %d: %s" % (p.returncode, p.stderr.strip()[-400:])}, False
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            done = False
        runs = [float(line.split()[1]) for line in out.splitlines() if line.split()[:1] in (["encode_run_s"],
                                                                                          ["decode_run_s"])]
        for line in out.splitlines():
            if line.startswith("phases "):
                r["phases_ms"] = json.loads(line[len("phases "):])
            for key in ("conv_path", "attn_path"):  # what ran the convolutions / the mid-block attention
                if line.startswith(key + "="):
                    r[key] = line[len(key) + 1:].strip()
        r["s"] = min(runs) if runs else None
        r["timed_runs"] = len(runs)
        if not done:
            r["error"] = "stopped after %.0f s (the run's budget), %d run(s) done" % (limit, len(runs))
            if not runs:
                r["clips_per_s_below"] = 1 / limit
        return r, done

    def run(self):
        from diffusers import AutoencoderKLWan

        torch.manual_seed(0)
        model = AutoencoderKLWan.from_config(TINY) if self.a["tiny"] else AutoencoderKLWan()
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for _, p in model.named_parameters():  # every parameter off its init (norm gains, biases)
                p.mul_(1 + 0.1 * torch.randn(p.shape, generator=g)).add_(0.02 * torch.randn(p.shape, generator=g))
        model.eval()
        sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
        model = model.to(self.dev, self.dtype)
        import diffusers
        print("diffusers %s AutoencoderKLWan (%.1f M parameters) on %s, %s; vflow %s" % (
            diffusers.__version__, sum(v.size for v in sd.values()) / 1e6,
            torch.cuda.get_device_name() if self.dev.type == "cuda" else "cpu", str(self.dtype).split(".")[-1],
            self.tool), flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            wpath = os.path.join(tmp, "vae.safetensors")
            save_file(sd, wpath)
            del sd
            for shape in self.a["shapes"]:
                if self.left() <= 0:
                    emit({"bench": "vae", "shape": "x".join(map(str, shape)), "skipped": "out of time"})
                    continue
                self.shape(model, wpath, tmp, shape)

    def shape(self, model, wpath, tmp, shape):
        F, H, W = shape
        tag = "%dx%dx%d" % shape
        base = {"bench": "vae", "shape": tag}
        x = torch.rand(1, 3, F, H, W, generator=torch.Generator().manual_seed(3)) * 2 - 1
        xpath, zpath = os.path.join(tmp, "x.safetensors"), os.path.join(tmp, "z.safetensors")
        out = os.path.join(tmp, "out.safetensors")
        save_file({"x": x.numpy()}, xpath)
        xd = x.to(self.dev, self.dtype)
        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()

        # encode: diffusers, then vflow on the same clip
        s, n, mean = self.timed(lambda: model.encode(xd).latent_dist.mode())
        peak = torch.cuda.max_memory_allocated() if self.dev.type == "cuda" else 0
        emit(dict(base, side="diffusers", op="encode", s=s, clips_per_s=1 / s, timed_runs=n, peak_bytes=peak))
        mean_h = mean.float().cpu().numpy()
        save_file({"z": mean_h}, zpath)
        xd = None
        self.release()
        r, done = self.tool_run(["encode", "--weights", wpath, "--input", xpath, "--chunk", "4", "--out", out])
        r = dict(base, side="vflow", op="encode", clips_per_s=1 / r["s"] if r["s"] else None, **r)
        if done:
            r["rel_err"] = rel_err(load_file(out)["mean"], mean_h)
        emit(r)
        say_paths(r)

        # decode diffusers' latent: diffusers, then vflow
        if self.left() <= 0:
            emit(dict(base, op="decode", skipped="out of time"))
            return
        if self.dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        s, n, frames = self.timed(lambda: model.decode(mean).sample)
        peak = torch.cuda.max_memory_allocated() if self.dev.type == "cuda" else 0
        emit(dict(base, side="diffusers", op="decode", s=s, clips_per_s=1 / s, timed_runs=n, peak_bytes=peak))
        frames_h = frames.float().cpu().numpy()
        frames = mean = None
        self.release()
        r, done = self.tool_run(["decode", "--weights", wpath, "--input", zpath, "--chunk", "1", "--out", out])
        r = dict(base, side="vflow", op="decode", clips_per_s=1 / r["s"] if r["s"] else None, **r)
        if done:
            r["rel_err"] = rel_err(load_file(out)["x"], frames_h)
        emit(r)
        say_paths(r)


def say_paths(r):
    """the paths of a vflow run as lines bench_cuda.sh notes for the section (conv_path=…)"""
    for key in ("conv_path", "attn_path"):
        if r.get(key):
            print("%s %s %s=%s" % (r["op"], r["shape"], key, r[key]), flush=True)


def main():
    a = parse_args(sys.argv[1:])
    if a["device"] == "cuda" and not torch.cuda.is_available():
        print("skip: no CUDA device for torch")
        return 77
    b = Bench(a)
    if not os.path.exists(b.tool):
        print("bench_cuda_vae: missing %s: build first" % b.tool)
        return 1
    try:
        import diffusers  # noqa: F401
    except ImportError as e:
        print("bench_cuda_vae: diffusers is not importable (%s); bench/bench_cuda.sh installs the carried wheel" % e)
        return 1
    b.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
