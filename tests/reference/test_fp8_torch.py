# test_fp8_torch.py — vflow's FP8 E4M3 conversion and per-tensor quantiser
# (runtime/core/fp8.c, driven through tests/tools/fp8_tool.c) against the reference cast
# to float8_e4m3fn, bit for bit:
#  1. every f32 bit pattern of a dense sweep over the range the quantiser produces
#     (|x| ≤ 448: normals, subnormals, each midpoint between neighbouring codes and the
#     floats either side of it) casts to the same byte;
#  2. weights quantised by the documented rule (scale = absmax/448 in f32, byte =
#     e4m3(w / scale)) give the same scale and bytes as the rule written in the reference
#     (torch: (w / scale).to(torch.float8_e4m3fn), musubi-tuner's fp8_scaled rule);
#  3. every code decodes to the reference's value.
# The reference is torch's float8_e4m3fn where the torch at hand has it (2.1 and newer),
# else ml_dtypes' float8_e4m3fn (the same format and rounding; scripts/setup.sh installs
# it beside Debian's torch 1.13 in $VFLOW_REF_PY); neither: skip (77).
import os
import subprocess
import sys
import tempfile

import numpy as np


def reference():
    try:
        import torch
        if hasattr(torch, "float8_e4m3fn"):
            return "torch", lambda a: torch.from_numpy(a).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    except ImportError:
        pass
    try:
        import ml_dtypes
        return "ml_dtypes", lambda a: a.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    except ImportError:
        return None, None


NAME, CAST = reference()
if CAST is None:
    ref = os.environ.get("VFLOW_REF_PY", "/opt/vflow-ref/bin/python")
    if os.environ.get("VF_FP8_REEXEC") != "1" and os.path.exists(ref):
        os.environ["VF_FP8_REEXEC"] = "1"
        os.execv(ref, [ref, os.path.abspath(__file__)] + sys.argv[1:])
    print("skip: no float8_e4m3fn reference (torch >= 2.1 or ml_dtypes; scripts/setup.sh installs ml_dtypes)")
    sys.exit(77)

BUILD = os.path.abspath(os.environ.get("VFLOW_BUILD", "build"))
TOOL = os.path.join(BUILD, "tools", "fp8_tool")
fails = []


def check(cond, what):
    """what: the failure's text, or a function giving it (formed only on a failure)"""
    if not cond:
        what = what() if callable(what) else what
        fails.append(what)
        print("FAIL:", what)


def tool(cmd, data, tmp):
    src, dst = os.path.join(tmp, "in"), os.path.join(tmp, "out")
    with open(src, "wb") as f:
        f.write(data)
    subprocess.run([TOOL, cmd, src, dst], check=True)
    with open(dst, "rb") as f:
        return f.read()


def first_diff(a, b, x):
    i = int(np.flatnonzero(a != b)[0])
    return "x=%r (0x%08x): ours 0x%02x, %s 0x%02x" % (float(x[i]), int(x.view(np.uint32)[i]), a[i], NAME, b[i])


with tempfile.TemporaryDirectory() as tmp:
    # 1. the cast over |x| <= 448: a stride through every f32 bit pattern there, plus each
    #    code, each midpoint and the floats just off it
    top = int(np.float32(448.0).view(np.uint32))
    pos = np.arange(0, top + 1, 997, dtype=np.uint32).view(np.float32)
    codes = np.arange(0, 0x7f, dtype=np.uint8).view(np.uint8)
    vals = codes.view(np.uint8).astype(np.uint8)
    if NAME == "torch":
        import torch
        cv = torch.from_numpy(vals).view(torch.float8_e4m3fn).float().numpy()
    else:
        import ml_dtypes
        cv = vals.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    mids = ((cv[:-1].astype(np.float64) + cv[1:]) / 2).astype(np.float32)
    near = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0))])
    x = np.concatenate([pos, cv, near]).astype(np.float32)
    x = np.concatenate([x, -x])
    ours = np.frombuffer(tool("cast", x.tobytes(), tmp), np.uint8)
    want = CAST(x)
    check(ours.shape == want.shape and np.array_equal(ours, want),
          lambda: "cast of %d values differs from %s: %s" % (len(x), NAME, first_diff(ours, want, x)))
    print("cast: %d values, %s" % (len(x), "same bytes" if np.array_equal(ours, want) else "DIFFERENT"))

    # 2. the quantiser on weight-like tensors (normal, heavy-tailed, tiny, with zeros)
    rng = np.random.default_rng(28)
    tensors = [rng.standard_normal(4096).astype(np.float32) * 0.02,
               rng.standard_t(3, 4096).astype(np.float32),
               (rng.standard_normal(1000) * 1e-6).astype(np.float32),
               np.concatenate([np.zeros(50, np.float32), rng.uniform(-3, 3, 500).astype(np.float32)])]
    for k, w in enumerate(tensors):
        got = tool("quant", w.tobytes(), tmp)
        scale = np.frombuffer(got[:4], np.float32)[0]
        ours = np.frombuffer(got[4:], np.uint8)
        want_scale = np.float32(np.abs(w).max()) / np.float32(448.0)
        want = CAST((w / want_scale).astype(np.float32))
        check(scale == want_scale, "tensor %d: scale %r, %s %r" % (k, float(scale), NAME, float(want_scale)))
        check(np.array_equal(ours, want),
              lambda: "tensor %d: quantised bytes differ from %s: %s" % (k, NAME, first_diff(ours, want, w)))
    print("quantiser: %d tensors" % len(tensors))

    # 3. decoding every code but the two NaNs
    allc = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)
    ours = np.frombuffer(tool("decode", allc.tobytes(), tmp), np.float32)
    if NAME == "torch":
        want = torch.from_numpy(allc).view(torch.float8_e4m3fn).float().numpy()
    else:
        want = allc.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    check(np.array_equal(ours.view(np.uint32), want.view(np.uint32)), "decoded values differ from %s" % NAME)

print("reference: %s" % NAME)
if fails:
    print("%d failed" % len(fails))
    sys.exit(1)
print("ok")
