#!/usr/bin/python3
# test_train_i2v.py — the image-to-video data path end to end through the real binary:
#  - pipelines/precompute_latents.lua with first_frame = true over two generated videos:
#    every cache entry holds "y" of the latent's shape and the summary records
#    "cond":"concat" (`vflow cache verify` clean); y is the encode of [first frame, zeros]: it agrees with vae_tool's
#    whole-clip encode (another code path: no stage, no chunking) of ffmpeg's own decode
#    of frame 0 followed by zero frames, far closer than to the clip's latent, and its
#    latent frame 0 equals the clip's (the VAE is causal: latent frame 0 sees frame 0);
#  - a tiny image-to-video DiT (z 4, in_dim 12 = 4 noisy + 4 mask + 4 y) trains on it
#    over P = 2 partitions; y reaches the model: without weight decay the columns of
#    patch_embedding.weight that take y move off their init only through a gradient,
#    exactly zero unless the batch's y arrives;
#  - bad input, each one line and exit 2 before any step: the same I2V model on a
#    text-only cache (naming both kinds), a text-to-video model on the concat cache, a
#    first_frame precompute into the text-only cache (naming both kinds), and samples
#    asked of the I2V model while it trains (refused at check time, not at the first
#    checkpoint: sampling takes text-to-video models).
# vflow-test: timeout=600
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import i2v_lib  # noqa: E402
from i2v_lib import TOOLS, run, train  # noqa: E402

SIZE, FRAMES = 32, 5
failed = []


def check(cond, msg):
    if not cond:
        failed.append(msg)
        print("FAIL: " + msg)
    return cond


def st_read(path):
    """{name: array} of a safetensors file (F32, I32 and BF16 tensors)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
        body = f.read()
    out = {}
    for k, t in hdr.items():
        if k == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = body[a:b]
        if t["dtype"] == "BF16":
            v = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            v = np.frombuffer(raw, {"F32": np.float32, "I32": np.int32}[t["dtype"]])
        out[k] = v.reshape(t["shape"])
    return out


def st_write(path, tensors):
    hdr, blobs, off = {}, [], 0
    for k, v in tensors.items():
        b = np.ascontiguousarray(v, np.float32).tobytes()
        hdr[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def precompute(tmp, name, manifest, cache, *sets):
    return i2v_lib.precompute(tmp, name, manifest, cache, SIZE, FRAMES, *sets)


def frame0(video):
    """ffmpeg's decode of the first frame, RGB24 (H, W, 3)."""
    r = subprocess.run(["ffmpeg", "-v", "error", "-i", video, "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24",
                        "-"], capture_output=True, check=True)
    return np.frombuffer(r.stdout, np.uint8).reshape(SIZE, SIZE, 3)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        videos, manifest, err = i2v_lib.videos(tmp, 2, SIZE, FRAMES)
        if not check(not err, "mkvideo: " + err):
            return 1
        i2v, t2v = os.path.join(tmp, "i2v.lmdb"), os.path.join(tmp, "t2v.lmdb")
        r = precompute(tmp, "pre_i2v", manifest, i2v, "first_frame=true")
        if not check(r.returncode == 0, "precompute first_frame: exit %d %s" % (r.returncode, r.stderr[-800:])):
            return 1
        r = precompute(tmp, "pre_t2v", manifest, t2v)
        check(r.returncode == 0, "precompute text-only: exit %d %s" % (r.returncode, r.stderr[-800:]))

        # the cache's entries and summary, read back through the reader library
        dump = os.path.join(tmp, "dump")
        os.makedirs(dump)
        r = run([os.path.join(TOOLS, "cache_tool"), "read", i2v, "--batch", "2", "--cond", "concat", "--dump", dump])
        if not check(r.returncode == 0, "cache_tool read --cond concat: %s" % r.stderr):
            return 1
        b = st_read(os.path.join(dump, "batch_0.safetensors"))
        lat, y = b["latent"], b["y"]
        check(y.shape == lat.shape == (2, 4, 2, SIZE // 8, SIZE // 8), "y and latent shapes %r %r" % (y.shape, lat.shape))
        r = run([os.path.join(TOOLS, "cache_tool"), "cli", "stat", i2v])
        check(any(ln.split() == ["cond", "concat"] for ln in r.stdout.splitlines()),
              "the summary records cond concat: %s" % r.stdout[-600:])
        check(np.array_equal(y[:, :, 0], lat[:, :, 0]), "latent frame 0 of y equals the clip's (causal VAE)")
        r = run([os.path.join(TOOLS, "cache_tool"), "cli", "verify", i2v])
        check(r.returncode == 0, "vflow cache verify: exit %d %s%s" % (r.returncode, r.stdout, r.stderr))
        # the reference: vae_tool's own encode of ffmpeg's frame 0 followed by zeros
        order = [0, 1]
        x = np.zeros((2, 3, FRAMES, SIZE, SIZE), np.float32)
        for j, v in enumerate(videos):
            x[j, :, 0] = frame0(v).transpose(2, 0, 1).astype(np.float32) / 127.5 - 1.0
        st_write(os.path.join(tmp, "x.safetensors"), {"x": x})
        r = run([os.path.join(TOOLS, "vae_tool"), "encode", "--preset", "tiny", "--seed", "0", "--input",
                 os.path.join(tmp, "x.safetensors"), "--out", os.path.join(tmp, "ref.safetensors")])
        if not check(r.returncode == 0, "vae_tool encode: %s" % r.stderr):
            return 1
        ref = st_read(os.path.join(tmp, "ref.safetensors"))["mean"]
        # batch order is the reader's shuffle: match each sample to its video by frame 0
        errs, far = [], []
        for s in range(2):
            d = [np.abs(y[s] - ref[k]).max() for k in order]
            k = int(np.argmin(d))
            errs.append(d[k])
            far.append(np.abs(lat[s] - ref[k]).max())
        print("y vs reference: max |diff| %s; latent vs reference %s" % (errs, far))
        check(max(errs) < 1e-3 and min(far) > 10 * max(errs),
              "y is the encode of [frame 0, zeros]: max diff %r, the clip's latent %r" % (errs, far))

        # training: an I2V model (in_dim 12) on the concat cache, y arriving
        lay = run([os.path.join(TOOLS, "dit_tool"), "layout", "in_dim=12"]).stdout.split("\n")
        init = os.path.join(tmp, "init.bin")
        run([os.path.join(TOOLS, "dit_tool"), "init", "in_dim=12", "seed=0", "out=" + init])
        r, rd, ln = train(tmp, "i2v", i2v, "in_dim=12", "weight_decay=0")
        if not check(r.returncode == 0 and len(ln) == 2 and all(np.isfinite(ln)),
                     "I2V training: exit %d, losses %r %s" % (r.returncode, ln, r.stderr[-800:])):
            return 1
        w1 = st_read(os.path.join(rd, "ckpt", "step-2", "model.safetensors"))["patch_embedding.weight"]
        check(w1.shape == (64, 12, 1, 2, 2), "patch_embedding.weight is (64, 12, 1, 2, 2): %r" % (w1.shape,))
        row = [x for x in lay if x.startswith("patch_embedding.weight ")]
        if check(len(row) == 1 and os.path.exists(init), "dit_tool layout/init: %r" % row):
            off, numel = int(row[0].split()[1]), int(row[0].split()[2])
            w0 = np.fromfile(init, np.float32)[off:off + numel].reshape(w1.shape)
            moved = np.abs(w1[:, 8:] - w0[:, 8:]).max()
            print("I2V losses %s; the y columns of patch_embedding moved by up to %g" % (ln, moved))
            check(moved > 0, "the y columns of patch_embedding moved off their init: %g" % moved)

        # bad inputs: one line, exit 2, no step
        for name, cache, sets, words in (
                ("i2v-on-t2v", t2v, ("in_dim=12",), ("conditioning kind is text", "needs concat", t2v)),
                ("t2v-on-i2v", i2v, (), ("conditioning kind is concat", "needs text", i2v)),
                ("i2v-samples", i2v, ("in_dim=12", "sample_captions=a cat"),
                 ("sample stage takes text-to-video models", "in_dim 12"))):
            r, _, ln = train(tmp, name, cache, *sets)
            out = r.stdout + r.stderr
            check(r.returncode == 2 and not ln and all(w in out for w in words),
                  "%s: exit %d, %d steps, want %r: %s" % (name, r.returncode, len(ln), words, out[-600:]))
        r = precompute(tmp, "pre_mixed", manifest, t2v, "first_frame=true")
        out = r.stdout + r.stderr
        check(r.returncode == 2 and "conditioning kind text" in out and "concat" in out,
              "first_frame into a text-only cache: exit %d %s" % (r.returncode, out[-600:]))
    print("PASS" if not failed else "FAIL (%d)" % len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
