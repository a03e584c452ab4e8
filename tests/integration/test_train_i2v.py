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
#    checkpoint: the sample stage needs the first frame, `image`, for an I2V model);
#  - vflow sample from an image: a constructed model that copies y into the latent (copy_model)
#    makes frame 0 the VAE's decode of the image's own latent (vae_tool encode + decode of
#    [image, zeros]) within 80 dB PSNR, and at least 30 dB above what another image gives;
#    the sample stage of an I2V run with sample_image writes its video; bad input (no
#    --image, an image of another size, a missing image, --image-embeds for a model without
#    an image branch, --image for a text-to-video checkpoint) is exit 2 with one line.
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
from i2v_lib import TOOLS, VFLOW, run, train  # noqa: E402

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


def copy_model(lay, K=4.0, C=1e4):
    """A tiny I2V DiT (in_dim 12) built to predict v = K·(x_t − y) per latent element: every
    block's gates, the time path, the text path and the head's modulation are zero, so the
    model is proj_out(LN(patch_embedding(input))). patch_embedding puts u = x − y of each of
    the patch's 16 elements into a pair of rows (u, −u) and ±C into the other 32 rows, so
    the LayerNorm's mean is 0 and its deviation C/√2 up to (|u|/C)²: LN is linear here and
    proj_out scales back by K·C/√2. With shift 1 and 5 steps (Δσ ≈ −0.25) each Euler step
    multiplies x − y by 1 + K·Δσ ≈ 0: the sample ends at y, the latent of [image, zeros]."""
    rows = {}
    for ln in lay:
        f = ln.split()
        if len(f) == 4:
            rows[f[0]] = tuple(int(x) for x in f[3].split(","))
    t = {k: np.zeros(v, np.float32) for k, v in rows.items()}
    pe, pb, hw = t["patch_embedding.weight"], t["patch_embedding.bias"], t["head.head.weight"]
    dim = pe.shape[0]
    for c in range(4):
        for dy in range(2):
            for dx in range(2):
                j = c * 4 + dy * 2 + dx
                for r, sg in ((2 * j, 1.0), (2 * j + 1, -1.0)):
                    pe[r, c, 0, dy, dx] = sg             # the noisy latent's channel c
                    pe[r, 8 + c, 0, dy, dx] = -sg        # y's channel c (after 4 of x, 4 of mask)
                hw[(dy * 2 + dx) * 4 + c, 2 * j] = K * C / np.sqrt(2.0)  # outputs (ph, pw, C), C fastest
    pb[32:] = [C if i % 2 == 0 else -C for i in range(dim - 32)]
    return t


def sample_from_image(tmp, rd, videos, lay, cache):
    """vflow sample from an image: the first frame follows the image (the constructed model
    copies y, so frame 0 must be the VAE's decode of the image's own latent), another image
    does not give it, and bad input is exit 2 with one line."""
    j = lambda *n: os.path.join(tmp, *n)  # noqa: E731
    st_write(j("copy.safetensors"), copy_model(lay))
    # image 0: the first frame of a clip; image 1: a flat colour (the clips share their frame 0)
    pngs = {0: j("img0.png"), 1: j("img1.png")}
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", videos[0], "-frames:v", "1", pngs[0]], check=True)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "color=c=0x336699:s=%dx%d" % (SIZE, SIZE),
                    "-frames:v", "1", pngs[1]], check=True)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", videos[0], "-frames:v", "1", "-s", "48x32", j("wide.png")],
                   check=True)
    # the reference: vae_tool's encode of [image 0, zeros] decoded by vae_tool (seeded tiny VAE)
    x = np.zeros((1, 3, FRAMES, SIZE, SIZE), np.float32)
    x[0, :, 0] = frame0(videos[0]).transpose(2, 0, 1).astype(np.float32) / 127.5 - 1.0
    st_write(j("x0.safetensors"), {"x": x})
    r = run([os.path.join(TOOLS, "vae_tool"), "encode", "--preset", "tiny", "--seed", "0", "--input",
             j("x0.safetensors"), "--out", j("y0.safetensors")])
    if r.returncode == 0:
        st_write(j("z0.safetensors"), {"z": st_read(j("y0.safetensors"))["mean"]})
    r2 = r.returncode == 0 and run([os.path.join(TOOLS, "vae_tool"), "decode", "--preset", "tiny", "--seed", "0",
                                    "--input", j("z0.safetensors"), "--out", j("d0.safetensors")])
    if not check(r.returncode == 0 and r2.returncode == 0, "vae_tool encode/decode: %s" % (r.stderr + (
            r2.stderr if r2 else ""))):
        return
    ref = st_read(j("d0.safetensors"))["x"][0, :, 0].transpose(1, 2, 0)
    ref = np.clip(np.round((ref + 1.0) * 127.5), 0, 255)
    base = [VFLOW, "sample", os.path.join(rd, "ckpt"), "--prompt", "a cat", "--frames", str(FRAMES), "--size",
            str(SIZE), "--steps", "5", "--shift", "1", "--guidance", "1", "--weights", j("copy.safetensors")]
    got = {}
    for name, img in (("image 0", pngs[0]), ("image 1", pngs[1])):
        r = run(base + ["--image", img, "--out", j("s.mp4"), "--frames-out", j("s.rgb")])
        if check(r.returncode == 0, "vflow sample --image %s: exit %d %s" % (img, r.returncode, r.stderr[-600:])):
            rgb = np.fromfile(j("s.rgb"), np.uint8).reshape(FRAMES, SIZE, SIZE, 3)
            mse = float(((rgb[0].astype(np.float64) - ref) ** 2).mean())
            got[name] = 10 * np.log10(255.0 ** 2 / max(mse, 1e-10))
    print("frame 0 vs the VAE's decode of image 0's latent: PSNR %s" % {k: "%.1f dB" % v for k, v in got.items()})
    check(got.get("image 0", 0) >= 80 and got.get("image 0", 0) >= got.get("image 1", 999) + 30,
          "the first frame follows the image: PSNR %r (image 0 at least 80 dB and 30 dB above image 1)" % got)

    # the sample stage of an I2V training run, from the same image: a video of the final checkpoint
    r, srd, ln = train(tmp, "i2v-sampled", cache, "in_dim=12", "sample_captions=a cat", "sample_image=" + pngs[0],
                       "sample_size=%d" % SIZE, "sample_frames=%d" % FRAMES, "sample_steps=2")
    vids = [f for f in os.listdir(os.path.join(srd, "samples", "step-2"))
            if f.endswith(".mp4")] if os.path.isdir(os.path.join(srd, "samples", "step-2")) else []
    check(r.returncode == 0 and len(ln) == 2 and len(vids) == 1,
          "the sample stage with image: exit %d, videos %r %s" % (r.returncode, vids, r.stderr[-600:]))

    # bad input: one line naming it, exit 2
    r, t2v_rd, _ = train(tmp, "t2v", os.path.join(tmp, "t2v.lmdb"))
    for name, args, words in (
            ("no image", [], ("--image", "image-to-video")),
            ("image of another size", ["--image", j("wide.png")], ("--image", "48x32", "32x32")),
            ("missing image", ["--image", j("nothere.png")], ("nothere.png",)),
            ("image_embeds without an image branch", ["--image", pngs[0], "--image-embeds", j("x0.safetensors")],
             ("--image-embeds", "no image branch")),
            ("T2V checkpoint", ["--image", pngs[0]], ("--image", "text-to-video"))):
        ckpt = os.path.join(t2v_rd if name == "T2V checkpoint" else rd, "ckpt")
        r = run(base[:2] + [ckpt] + base[3:] + args + ["--out", j("bad.mp4")])
        msg = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(msg) == 1 and all(w in r.stderr for w in words)
              and not os.path.exists(j("bad.mp4")),
              "%s: exit %d, want one line naming %r: %s" % (name, r.returncode, words, r.stderr[-400:]))


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

        sample_from_image(tmp, rd, videos, lay, i2v)

        # bad inputs: one line, exit 2, no step
        for ok, msg in i2v_lib.refusals(tmp, (
                ("i2v-on-t2v", t2v, ("in_dim=12",), ("conditioning kind is text", "needs concat", t2v)),
                ("t2v-on-i2v", i2v, (), ("conditioning kind is concat", "needs text", i2v)),
                ("i2v-samples", i2v, ("in_dim=12", "sample_captions=a cat"),
                 ("image-to-video model", "in_dim 12", "needs image")))):
            check(ok, msg)
        r = precompute(tmp, "pre_mixed", manifest, t2v, "first_frame=true")
        out = r.stdout + r.stderr
        check(r.returncode == 2 and "conditioning kind text" in out and "concat" in out,
              "first_frame into a text-only cache: exit %d %s" % (r.returncode, out[-600:]))
    print("PASS" if not failed else "FAIL (%d)" % len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
