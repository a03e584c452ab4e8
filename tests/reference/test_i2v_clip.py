# test_i2v_clip.py — Wan 2.1 image-to-video's CLIP image features from the encoder to the
# trainer, against transformers' CLIPVisionModel:
#  - a tiny random CLIPVisionModel (image_size 28, patch 14: 5 rows of width 16; every
#    parameter perturbed), saved with save_pretrained (nothing is downloaded);
#  - tools/encode_images.py writes one safetensors per row and a manifest with the
#    clip_emb column; each file equals hidden_states[-2] of the model on the row's frame
#    at `start`, preprocessed here independently: ffmpeg's frame, Wan's bicubic resize to
#    28x28 by a numpy cubic convolution (a = -0.75, half-pixel centres, clamped edges:
#    torch's interpolate(bicubic, align_corners=False)), CLIP's mean/std; and differs
#    from the last layer's states (the penultimate is the one Wan takes);
#  - pipelines/precompute_latents.lua with first_frame = true and image_dim 16 stores
#    them once per content ("clips" in the summary, cond concat+clip; `vflow cache
#    verify` clean); latent_reader
#    (cache_tool read --cond concat+clip --dump) emits clip_emb (B, 5, 16) f32 equal bit
#    for bit to the bf16 rounding (torch's .to(bfloat16)) of each row's file;
#  - a tiny I2V DiT with an image branch (in_dim 12, img_dim 16, img_len 5) trains on it;
#    the features reach it: without weight decay img_emb.proj.1.weight (the Linear after
#    img_emb's first LayerNorm, whose input is zero unless features arrive) moves off its
#    init;
#  - bad input, one line and exit 2: a manifest row without clip_emb with image_dim 16
#    (before decoding), the image-branch model on a cache without CLIP features (naming
#    both kinds), encode_images.py without a model directory.
# vflow-test: labels=reference timeout=600
import csv
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wan_ref  # noqa: E402  (before transformers: shims torch 1.13)

wan_ref.reexec_in_ref_venv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import CLIPVisionConfig, CLIPVisionModel  # noqa: E402

SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
BUILD = os.environ.get("VFLOW_BUILD", os.path.join(SRC, "build"))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
TOOLS = os.path.join(BUILD, "tools")
TOOL = os.path.join(SRC, "tools", "encode_images.py")
SIZE, FRAMES, IMG, ROWS, WIDTH = 32, 5, 28, 5, 16
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], np.float32)
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)
    return cond


def sh(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), **kw)


def make_encoder(d):
    cfg = CLIPVisionConfig(hidden_size=WIDTH, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
                           image_size=IMG, patch_size=14, projection_dim=WIDTH)
    torch.manual_seed(0)
    m = CLIPVisionModel(cfg).eval()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for _, p in m.named_parameters():  # norm gains start at exactly 1: move them
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.02 * torch.randn(p.shape, generator=g))
    m.save_pretrained(d, safe_serialization=False)
    return m


def cubic_matrix(n_in, n_out, a=-0.75):
    """(n_out, n_in) weights of a bicubic resize, half-pixel centres, edges clamped."""
    w = np.zeros((n_out, n_in), np.float64)
    scale = n_in / n_out
    for o in range(n_out):
        x = (o + 0.5) * scale - 0.5
        x0 = int(np.floor(x))
        t = x - x0
        for k in range(-1, 3):
            d = abs(k - t)
            c = ((a + 2) * d - (a + 3)) * d * d + 1 if d <= 1 else (((d - 5) * d + 8) * d - 4) * a
            w[o, min(max(x0 + k, 0), n_in - 1)] += c
    return w


def frame(video, start):
    args = ["ffmpeg", "-v", "error"] + (["-ss", repr(start)] if start > 0 else []) + [
        "-i", video, "-frames:v", "1", "-vf",
        "scale=%d:%d:force_original_aspect_ratio=increase:flags=bicubic,crop=%d:%d" % (SIZE, SIZE, SIZE, SIZE),
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    return np.frombuffer(subprocess.run(args, capture_output=True, check=True).stdout, np.uint8).reshape(SIZE, SIZE, 3)


def reference(m, rgb):
    x = rgb.astype(np.float64).transpose(2, 0, 1) / 127.5 - 1.0
    R = cubic_matrix(SIZE, IMG)
    x = np.einsum("oh,chw,pw->cop", R, x, R)
    x = ((x * 0.5 + 0.5) - MEAN[:, None, None]) / STD[:, None, None]
    with torch.no_grad():
        hs = m(pixel_values=torch.tensor(x[None], dtype=torch.float32), output_hidden_states=True).hidden_states
    return hs[-2][0].numpy(), hs[-1][0].numpy()


def st_read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
        body = f.read()
    out = {}
    for k, t in hdr.items():
        if k != "__metadata__":
            a, b = t["data_offsets"]
            dt = {"F32": np.float32, "I32": np.int32}[t["dtype"]]
            out[k] = np.frombuffer(body[a:b], dt).reshape(t["shape"])
    return out


def precompute(tmp, name, manifest, cache, *sets):
    args = [VFLOW, "run", os.path.join(SRC, "pipelines", "precompute_latents.lua"), "--run-dir",
            os.path.join(tmp, name), "--set", "manifest=" + manifest, "--set", "cache=" + cache,
            "--set", "size=%d" % SIZE, "--set", "frames=%d" % FRAMES, "--set", "workers=1",
            "--set", "clips_per_video=1", "--set", "text_dim=%d" % WIDTH, "--set", "text_len=8"]
    for s in sets:
        args += ["--set", s]
    return sh(args, timeout=240)


def train(tmp, name, cache, *sets):
    rd = os.path.join(tmp, name)
    args = [VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", rd, "--set",
            "cache=" + cache, "--set", "steps=2", "--set", "every=0", "--set", "batch=2", "--set", "stages=2",
            "--set", "micro_batches=2", "--set", "in_dim=12", "--set", "text_dim=%d" % WIDTH, "--set", "img_dim=%d" % WIDTH,
            "--set", "img_len=%d" % ROWS]
    for s in sets:
        args += ["--set", s]
    r = sh(args, timeout=240)
    n = 0
    if os.path.exists(os.path.join(rd, "metrics.jsonl")):
        n = sum('"event":"train_step"' in ln for ln in open(os.path.join(rd, "metrics.jsonl")))
    return r, rd, n


def main():
    tmp = tempfile.mkdtemp(prefix="vf_i2v_clip.")
    enc = os.path.join(tmp, "clip")
    m = make_encoder(enc)
    videos, rows = [], []
    for i, start in enumerate((0.0, 0.1)):  # another start: another first frame (mkvideo numbers them)
        v = os.path.join(tmp, "v%d.mp4" % i)
        r = sh([os.path.join(TOOLS, "mkvideo"), "-o", v, "-s", "48x32", "-n", "12", "-c", "libx264", "-q", "1"])
        check(r.returncode == 0, "mkvideo: " + r.stderr)
        videos.append((v, start))
        te = os.path.join(tmp, "text%d.safetensors" % i)  # the image branch comes with text embeddings
        save_file({"emb": np.random.default_rng(i).standard_normal((3, WIDTH)).astype(np.float32)}, te)
        rows.append({"path": "v%d.mp4" % i, "text": "clip %d" % i, "start": repr(start), "text_emb": te})
    man = os.path.join(tmp, "manifest.csv")
    with open(man, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "text", "start", "text_emb"])
        w.writeheader()
        w.writerows(rows)
    man2 = os.path.join(tmp, "manifest_clip.csv")
    r = sh([sys.executable, TOOL, "--model", enc, "--manifest", man, "--out-dir", os.path.join(tmp, "feat"),
            "--out-manifest", man2, "--size", str(SIZE)])
    if not check(r.returncode == 0, "encode_images.py: exit %d %s" % (r.returncode, r.stderr[-800:])):
        return 1
    got = list(csv.DictReader(open(man2)))
    feats = []
    for row, (v, start) in zip(got, videos):
        f = load_file(row["clip_emb"])["clip_emb"]
        want, last = reference(m, frame(v, start))
        err = float(np.abs(f - want).max())
        print("clip_emb %s: shape %s, max |diff| vs reference %.3g, vs last layer %.3g" % (
            os.path.basename(v), f.shape, err, float(np.abs(f - last).max())))
        check(f.shape == (ROWS, WIDTH) and err < 1e-4, "features of %s: %s, max diff %g" % (v, f.shape, err))
        check(float(np.abs(f - last).max()) > 100 * max(err, 1e-6), "the penultimate layer, not the last")
        feats.append(f)
    check(float(np.abs(feats[0] - feats[1]).max()) > 1e-3, "two first frames, two feature sets")

    # precompute, then the reader's clip_emb = the bf16 rounding of each file
    cache = os.path.join(tmp, "i2v.lmdb")
    r = precompute(tmp, "pre", man2, cache, "first_frame=true", "image_dim=%d" % WIDTH, "image_len=%d" % ROWS)
    if not check(r.returncode == 0, "precompute: exit %d %s" % (r.returncode, r.stderr[-800:])):
        return 1
    r = sh([os.path.join(TOOLS, "cache_tool"), "cli", "stat", cache])
    lines = [ln.split() for ln in r.stdout.splitlines()]
    check(["cond", "concat+clip"] in lines, "summary cond concat+clip: %s" % r.stdout)
    check(["clip", "2", "records,"] == [x for x in lines if x[:1] == ["clip"]][0][:3] if any(
        x[:1] == ["clip"] for x in lines) else False, "two clip records, one per first frame: %s" % r.stdout)
    r = sh([os.path.join(TOOLS, "cache_tool"), "cli", "verify", cache])
    check(r.returncode == 0, "vflow cache verify: exit %d %s%s" % (r.returncode, r.stdout, r.stderr))
    dump = os.path.join(tmp, "dump")
    os.makedirs(dump)
    r = sh([os.path.join(TOOLS, "cache_tool"), "read", cache, "--batch", "2", "--cond", "concat+clip", "--image",
            "%d,%d" % (ROWS, WIDTH), "--dump", dump])
    if check(r.returncode == 0, "cache_tool read: %s" % r.stderr):
        b = st_read(os.path.join(dump, "batch_0.safetensors"))
        bf = [torch.tensor(f).to(torch.bfloat16).float().numpy() for f in feats]
        ok = b["clip_emb"].shape == (2, ROWS, WIDTH) and all(
            any(np.array_equal(b["clip_emb"][s], x) for x in bf) for s in range(2))
        check(ok and not np.array_equal(b["clip_emb"][0], b["clip_emb"][1]),
              "reader's clip_emb = bf16 of the files: %s" % (b["clip_emb"].shape,))

    # training: the image branch gets the features
    cfg = ["in_dim=12", "text_emb=1", "text_dim=%d" % WIDTH, "img_dim=%d" % WIDTH, "img_len=%d" % ROWS]
    lay = sh([os.path.join(TOOLS, "dit_tool"), "layout"] + cfg).stdout.split("\n")
    init = os.path.join(tmp, "init.bin")
    sh([os.path.join(TOOLS, "dit_tool"), "init"] + cfg + ["seed=0", "out=" + init])
    r, rd, n = train(tmp, "train", cache, "weight_decay=0")
    if check(r.returncode == 0 and n == 2, "I2V training with CLIP: exit %d, %d steps %s" % (
            r.returncode, n, r.stderr[-800:])):
        w1 = load_file(os.path.join(rd, "ckpt", "step-2", "model.safetensors"))["img_emb.proj.1.weight"]
        row = [x.split() for x in lay if x.startswith("img_emb.proj.1.weight ")]
        off, numel = int(row[0][1]), int(row[0][2])
        w0 = np.fromfile(init, np.float32)[off:off + numel].reshape(w1.shape)
        check(float(np.abs(w1.astype(np.float32) - w0).max()) > 0, "img_emb.proj.1.weight moved off its init")

    # bad input
    r = precompute(tmp, "pre_bad", man, os.path.join(tmp, "bad.lmdb"), "first_frame=true", "image_dim=%d" % WIDTH,
                   "image_len=%d" % ROWS)
    out = r.stdout + r.stderr
    check(r.returncode == 2 and "clip_emb" in out and "image_dim" in out,
          "rows without clip_emb: exit %d %s" % (r.returncode, out[-400:]))
    concat = os.path.join(tmp, "concat.lmdb")
    r = precompute(tmp, "pre_concat", man, concat, "first_frame=true")
    check(r.returncode == 0, "concat precompute: exit %d %s" % (r.returncode, r.stderr[-400:]))
    r, _, n = train(tmp, "bad_kind", concat)
    out = r.stdout + r.stderr
    check(r.returncode == 2 and n == 0 and "conditioning kind is concat" in out and "needs concat+clip" in out,
          "image-branch model on a concat cache: exit %d %s" % (r.returncode, out[-400:]))
    r = sh([sys.executable, TOOL, "--model", os.path.join(tmp, "nowhere"), "--manifest", man, "--out-dir",
            os.path.join(tmp, "f2"), "--out-manifest", os.path.join(tmp, "m3.csv"), "--size", str(SIZE)])
    check(r.returncode == 2 and r.stderr.count("\n") == 1 and "nowhere" in r.stderr,
          "encode_images.py without a model: exit %d %r" % (r.returncode, r.stderr))
    if not fails:
        shutil.rmtree(tmp)
    print("PASS" if not fails else "FAIL (%d): %s" % (len(fails), tmp))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
