# bench_vae.py — causal VAE encode on the CPU: vflow (models/vae.c through
# build/tools/vae_tool) against PyTorch conv3d running the same architecture on the same
# weights and input, in the same run; then peak memory for 17- vs 65-frame clips at the
# same chunk, for the vae_encode stage (its account peak and the worker's RSS, from a
# `vflow run` of synthetic -> vae_encode -> null_sink) and for PyTorch encoding the clip
# whole (child process max RSS).
#
#   /usr/bin/python3 bench/bench_vae.py [BUILD_DIR] [--threads N] [--quick]
#
# The PyTorch peer is the reference model of tests/reference/test_vae_parity.py in f32
# with torch.set_num_threads(N); both sides get N threads (OMP_NUM_THREADS for vflow).
# Outputs are compared (relative error printed) so the two sides provably did the same
# work. Timings are the best of `repeat` encodes, excluding process start and loading.
import importlib.util
import json
import os
import resource
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
THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else (os.cpu_count() or 1)
QUICK = "--quick" in sys.argv
TOOL = os.path.join(BUILD, "tools", "vae_tool")
VFLOW = os.path.join(BUILD, "vflow")

spec = importlib.util.spec_from_file_location("vae_ref", os.path.join(SRC, "tests/reference/test_vae_parity.py"))
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)

SMALL = dict(name="small", dim=32, mult=[1, 2, 4, 4], res=1, tdown=[0, 1, 1], z=16, eps=1e-12)
TINY = dict(name="tiny", dim=8, mult=[1, 2, 2, 2], res=1, tdown=[0, 1, 1], z=4, eps=1e-12)


def torch_encode_time(W, cfg, x, repeat):
    torch.set_num_threads(THREADS)
    Wf = {k: v.float() for k, v in W.items()}
    best = 1e300
    with torch.no_grad():
        for _ in range(repeat):
            t0 = time.perf_counter()
            mean, lv = ref.encode(Wf, cfg, x)
            best = min(best, time.perf_counter() - t0)
    return best, mean.numpy(), lv.numpy()


def throughput(tmp, cfg, B, T, H, Wd, chunks, repeat):
    W = ref.make_weights(cfg, 1)
    wpath = os.path.join(tmp, "w.safetensors")
    ref.save_weights(wpath, W)
    x = (torch.rand(B, 3, T, H, Wd, generator=torch.Generator().manual_seed(3)) * 2 - 1).float()
    xpath = os.path.join(tmp, "x.safetensors")
    save_file({"x": x.numpy()}, xpath)
    tt, mref, _ = torch_encode_time(W, cfg, x, repeat)
    print("%-6s %d clip(s) of %dx%dx%d: pytorch (whole clip) %.3f s = %.2f clips/s" %
          (cfg["name"], B, T, H, Wd, tt, B / tt))
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    for chunk in chunks:
        out = os.path.join(tmp, "o.safetensors")
        r = subprocess.run([TOOL, "encode"] + ref.cfg_args(cfg) + ["--weights", wpath, "--input", xpath,
                           "--chunk", str(chunk), "--repeat", str(repeat), "--out", out],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            print("vae_tool failed: " + r.stderr)
            return
        tv = float(r.stdout.split("encode_s")[1])
        err = ref.rel_err(load_file(out)["mean"].astype(np.float64), mref.astype(np.float64))
        print("       vflow chunk %-5s %.3f s = %.2f clips/s  (%.2fx pytorch; rel err vs pytorch %.1e)" %
              (chunk or "whole", tv, B / tv, tt / tv, err))


def vflow_peak(tmp, cfg, T, H, chunk, clips):
    lua = os.path.join(tmp, "vae_bench.lua")
    with open(lua, "w") as f:
        f.write("""local vf = require "vflow"
local p = vf.pipeline "vae_bench"
local src = p:stage("synthetic", { tensor = "frames", dtype = "u8", shape = { %d, %d, %d, 3 }, count = %d })
local vae = p:stage("vae_encode", { model = { name = "%s", dim = %d, dim_mult = { %s }, num_res_blocks = %d,
  temporal_downsample = { %s }, z_dim = %d }, micro_batch = 1, chunk = %d })
local sink = p:stage("null_sink", { expect_count = %d })
p:connect(src, vae, { capacity = 1 })
p:connect(vae, sink)
return p
""" % (T, H, H, clips, cfg["name"], cfg["dim"], ",".join(map(str, cfg["mult"])), cfg["res"],
       ",".join(map(str, cfg["tdown"])), cfg["z"], chunk, clips))
    run_dir = os.path.join(tmp, "run%d" % T)
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    r = subprocess.run([VFLOW, "run", lua, "--run-dir", run_dir], capture_output=True, text=True, env=env, cwd=tmp)
    if r.returncode != 0:
        print("vflow run failed: " + r.stdout[-2000:] + r.stderr[-2000:])
        return None
    peak = rss = None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("type") == "final" and row.get("stage") == "vae_encode":
                peak, rss = row.get("peak"), row.get("rss_peak")
    return peak, rss


TORCH_CHILD = r"""
import importlib.util, resource, sys, torch
from safetensors.numpy import load_file
spec = importlib.util.spec_from_file_location("vae_ref", sys.argv[1]); ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
cfg = eval(sys.argv[2]); T = int(sys.argv[3]); H = int(sys.argv[4]); torch.set_num_threads(int(sys.argv[5]))
W = {k: torch.from_numpy(v) for k, v in load_file(sys.argv[6]).items()}
x = torch.rand(1, 3, T, H, H) * 2 - 1
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with torch.no_grad():
    ref.encode(W, cfg, x)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, base * 1024)
"""


def torch_peak(tmp, cfg, T, H):
    wpath = os.path.join(tmp, "w_peak.safetensors")
    if not os.path.exists(wpath):
        ref.save_weights(wpath, ref.make_weights(cfg, 1))
    r = subprocess.run([sys.executable, "-c", TORCH_CHILD, os.path.join(SRC, "tests/reference/test_vae_parity.py"),
                        repr(cfg), str(T), str(H), str(THREADS), wpath], capture_output=True, text=True)
    if r.returncode != 0:
        print("pytorch child failed: " + r.stderr[-2000:])
        return None
    peak, base = map(int, r.stdout.split())
    return peak, base


def mib(b):
    return "%.1f MiB" % (b / 1048576.0) if b is not None else "n/a"


def main():
    for p in (TOOL, VFLOW):
        if not os.path.exists(p):
            print("missing %s: build first" % p)
            return 1
    print("threads: %d (vflow OMP_NUM_THREADS, torch.set_num_threads); torch %s" % (THREADS, torch.__version__))
    with tempfile.TemporaryDirectory() as tmp:
        throughput(tmp, TINY, 2, 17, 64, 64, [4, 0], 1 if QUICK else 3)
        if not QUICK:
            throughput(tmp, SMALL, 1, 17, 128, 128, [4, 0], 1)

        cfg, H, chunk = (TINY, 64, 4) if QUICK else (SMALL, 128, 4)
        print("\npeak memory, %s at %dx%d, chunk %d:" % (cfg["name"], H, H, chunk))
        res = {}
        for T in (17, 65):
            v = vflow_peak(tmp, cfg, T, H, chunk, 2)
            t = torch_peak(tmp, cfg, T, H)
            res[T] = (v, t)
            print("  %2d frames: vae_encode account peak %s, worker peak RSS %s | pytorch whole-clip peak RSS %s "
                  "(%s before the encode)" % (T, mib(v[0] if v else None), mib(v[1] if v else None),
                                              mib(t[0] if t else None), mib(t[1] if t else None)))
        v17, v65 = res[17][0], res[65][0]
        t17, t65 = res[17][1], res[65][1]
        if v17 and v65:
            print("  65/17 ratio: vae_encode account %.3f, worker RSS %.3f" % (v65[0] / v17[0], v65[1] / v17[1]))
        if t17 and t65:
            print("  65/17 ratio: pytorch peak RSS %.3f; growth during the encode %s -> %s" %
                  (t65[0] / t17[0], mib(t17[0] - t17[1]), mib(t65[0] - t65[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
