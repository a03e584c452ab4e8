#!/usr/bin/env python3
"""encode_images.py — CLIP image features of each manifest row's first frame, for vflow's
image-to-video precompute (Wan 2.1 I2V).

Reads a CSV or JSONL manifest (docs/PRECOMPUTE.md), takes each row's conditioning image
as vflow's decoder sees it — the frame at the row's `start` (seconds; 0 without one),
resized to cover --size and centre-cropped (ffmpeg: scale …:force_original_aspect_ratio=
increase, crop) — and encodes it as Wan 2.1's image encoder does: the RGB image in
[-1, 1] resized to the model's image_size (224 for ViT-H/14) with bicubic interpolation
(torch.nn.functional.interpolate, align_corners False), mapped to [0, 1], normalised with
CLIP's mean/std, through transformers' CLIPVisionModel from a local directory the user
has (nothing is downloaded), keeping hidden_states[-2] (the output of all blocks but the
last, no post-layernorm: Wan's use_31_block). It writes

  OUT_DIR/<sha256 of path, start and size, 32 hex>.safetensors  one tensor "clip_emb"
      (L, D) (ViT-H/14: (257, 1280)) in float32 (--dtype bf16 halves the files; vflow
      stores bf16 in its cache either way)
  OUT_MANIFEST  the input manifest with a column `clip_emb` naming each row's file.

A rerun skips rows whose file exists (--force redoes them). Every clip of a row carries
the row's features: for image-to-video take one clip per video (clips_per_video = 1).
Then: vflow run pipelines/precompute_latents.lua --set manifest=OUT_MANIFEST
      --set first_frame=true --set image_dim=D --set image_len=L ...

usage: encode_images.py --model DIR --manifest IN --out-dir DIR --out-manifest OUT
                        --size WxH [--device cpu|cuda] [--dtype f32|bf16] [--force]
Exit 0 done, 2 bad usage or input (one line naming the file / row).
"""
import argparse
import hashlib
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from encode_captions import read_manifest, write_manifest  # noqa: E402  (the same manifest files)

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def fail(msg):
    print("encode_images: " + msg, file=sys.stderr)
    sys.exit(2)


def first_frame(path, start, w, h):
    """The frame at `start` seconds as vflow's decoder crops it: bytes RGB24 (h, w, 3)."""
    args = ["ffmpeg", "-v", "error"] + (["-ss", repr(start)] if start > 0 else []) + [
        "-i", path, "-frames:v", "1", "-vf",
        "scale=%d:%d:force_original_aspect_ratio=increase:flags=bicubic,crop=%d:%d" % (w, h, w, h),
        "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    r = subprocess.run(args, capture_output=True)
    if r.returncode != 0 or len(r.stdout) != w * h * 3:
        why = r.stderr.decode(errors="replace").strip().splitlines()
        fail("%s: no frame at %gs (%s)" % (path, start, why[-1] if why else "ffmpeg gave %d bytes" % len(r.stdout)))
    return r.stdout


def preprocess(rgb, w, h, size, torch):
    """Wan 2.1's CLIP input: (1, 3, size, size) from RGB24 bytes."""
    import torch.nn.functional as F
    x = torch.frombuffer(bytearray(rgb), dtype=torch.uint8).reshape(h, w, 3).permute(2, 0, 1).float()
    x = (x / 127.5 - 1.0).unsqueeze(0)
    x = F.interpolate(x, size=(size, size), mode="bicubic", align_corners=False)
    x = x.mul(0.5).add(0.5)
    mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)
    return (x - mean) / std


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="CLIPVisionModel directory (save_pretrained)")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--out-manifest", required=True)
    ap.add_argument("--size", required=True, help="the precompute's frame size WxH (or one number)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32", help="dtype of the files written")
    ap.add_argument("--force", action="store_true", help="re-encode rows whose file exists")
    a = ap.parse_args()
    try:
        w, h = (int(v) for v in (a.size.split("x") if "x" in a.size else (a.size, a.size)))
    except ValueError:
        fail("--size %r: WxH or one number" % a.size)
    if w < 1 or h < 1:
        fail("--size %r: sides >= 1" % a.size)
    kind, names, rows = read_manifest(a.manifest)
    if "path" not in names and "file_name" not in names:
        fail("%s: no `path` column" % a.manifest)
    if not os.path.isdir(a.model):
        fail("%s: not a directory (a saved CLIPVisionModel)" % a.model)

    import torch
    from safetensors.torch import save_file
    from transformers import CLIPVisionModel

    try:
        enc = CLIPVisionModel.from_pretrained(a.model, local_files_only=True).to(a.device).eval()
    except (OSError, ValueError) as e:
        fail("%s: %s" % (a.model, str(e).splitlines()[0]))
    size = enc.config.image_size
    os.makedirs(a.out_dir, exist_ok=True)
    src_dir = os.path.dirname(os.path.abspath(a.manifest))
    out_rows, done = [], 0
    for i, r in enumerate(rows, 1):
        r = dict(r)
        pk = "path" if "path" in r else "file_name"
        if not r.get(pk):
            fail("%s: row %d has no path" % (a.manifest, i))
        path = r[pk] if os.path.isabs(r[pk]) else os.path.join(src_dir, r[pk])
        try:
            start = float(r.get("start") or 0)
        except ValueError:
            fail("%s: row %d: start %r is not a number" % (a.manifest, i, r.get("start")))
        key = "%s\0%r\0%dx%d" % (os.path.realpath(path), start, w, h)
        out = os.path.join(os.path.abspath(a.out_dir), hashlib.sha256(key.encode()).hexdigest()[:32] + ".safetensors")
        if a.force or not os.path.exists(out):
            x = preprocess(first_frame(path, start, w, h), w, h, size, torch).to(a.device)
            with torch.no_grad():
                f = enc(pixel_values=x, output_hidden_states=True).hidden_states[-2][0].float().cpu().contiguous()
            f = f.to(torch.bfloat16) if a.dtype == "bf16" else f
            save_file({"clip_emb": f}, out + ".tmp", metadata={"encoder": os.path.abspath(a.model), "video": path})
            os.replace(out + ".tmp", out)
            done += 1
        if src_dir != os.path.dirname(os.path.abspath(a.out_manifest)):
            r[pk] = path
        r["clip_emb"] = out
        out_rows.append(r)
    write_manifest(a.out_manifest, kind, names, out_rows, "clip_emb")
    print("wrote %s (%d rows, %d encoded now; features (%d, %d))" % (
        a.out_manifest, len(rows), done, (size // enc.config.patch_size) ** 2 + 1, enc.config.hidden_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
