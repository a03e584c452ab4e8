# test_tb_images.py — the sample stage's first frames as TensorBoard images, read by
# TensorBoard's own EventAccumulator (PyPI tensorboard):
#  - a tiny DiT with text embeddings (cache_tool write --text 16, train_dit.lua text_dim=16)
#    trained 6 steps with a checkpoint every 2 and the sample stage on for two prompts
#    (sample_* knobs, as tests/integration/test_train_sample.py);
#  - each sampled step has samples/step-N/<stem>.frame0.png, a W x H RGB PNG (Pillow reads
#    it) whose pixels are the first W columns of the 4-frame strip <stem>.png and, within
#    the codec's loss (PSNR > 20 dB), the first frame ffmpeg decodes from <stem>.mp4;
#  - the sample metrics rows name it ("image", relative to the run dir; "tag");
#  - ea.Images("sample/<stem>") holds one image per sampled step, at that step, whose
#    encoded_image_string is the .frame0.png file byte for byte and whose width and
#    height are the frame's; the scalars next to them still read (train/loss one point
#    per step, in EventAccumulator and tbparse);
#  - tbparse decodes images only through TensorFlow, which the reference venv does not
#    have: its image reading is not checked here.
# The readers live in the reference venv (scripts/setup.sh): the test re-runs itself with
# $VFLOW_REF_PY when /usr/bin/python3 lacks them, and skips (77) when neither has them.
# vflow-test: timeout=300
import io
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    from PIL import Image
    from tbparse import SummaryReader
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:
    ref = os.environ.get("VFLOW_REF_PY", "/opt/vflow-ref/bin/python")
    if os.environ.get("VF_TB_REEXEC") != "1" and os.path.exists(ref):
        os.environ["VF_TB_REEXEC"] = "1"
        os.execv(ref, [ref, os.path.abspath(__file__)] + sys.argv[1:])
    print("skip: %s (scripts/setup.sh installs tensorboard, tbparse and Pillow)" % e)
    sys.exit(77)

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.abspath(os.environ.get("VFLOW_BUILD", "build"))
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(BUILD, "vflow")
CACHE_TOOL = os.path.join(BUILD, "tools", "cache_tool")
TRAIN = os.path.join(SRC, "pipelines", "train_dit.lua")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
W, H, F, FPS, STEPS = 64, 48, 9, 12, 6
STEMS = ("cat", "dog")
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


def st_write(path, tensors):
    """A safetensors file of F32 tensors {name: (shape, list)}."""
    hdr, blobs, off = {}, [], 0
    for name, (shape, vals) in tensors.items():
        b = struct.pack("<%df" % len(vals), *vals)
        hdr[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def psnr(a, b):
    mse = sum((x - y) ** 2 for x, y in zip(a, b)) / len(a)
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def first_frame(mp4):
    return subprocess.run(["ffmpeg", "-v", "error", "-threads", "1", "-i", mp4, "-frames:v", "1", "-f", "rawvideo",
                           "-pix_fmt", "rgb24", "-"], capture_output=True).stdout


def main():
    for tool in (VFLOW, CACHE_TOOL):
        if not os.access(tool, os.X_OK):
            print("FAIL: %s is not built" % tool)
            return 1
    tmp = tempfile.mkdtemp(prefix="vf_tbimg_")
    j = lambda *p: os.path.join(tmp, *p)  # noqa: E731
    try:
        r = subprocess.run([CACHE_TOOL, "write", j("c.lmdb"), "0", "8", "--shape", "4,2,8,8", "--text", "16"],
                           capture_output=True, text=True)
        if not check(r.returncode == 0, "cache_tool: " + r.stderr):
            return 1
        rnd = random.Random(5)
        for name, n in (("cat", 7), ("dog", 4), ("neg", 3)):
            st_write(j(name + ".safetensors"), {"emb": ((n, 16), [rnd.gauss(0, 1) for _ in range(n * 16)])})
        rd = j("run")
        args = [VFLOW, "run", TRAIN, "--run-dir", rd, "--set", "cache=" + j("c.lmdb"), "--set", "text_dim=16",
                "--set", "steps=%d" % STEPS, "--set", "every=2", "--set", "keep=4", "--set", "seed=2",
                "--set", "sample_prompts=%s,%s" % (j("cat.safetensors"), j("dog.safetensors")),
                "--set", "sample_negative=" + j("neg.safetensors"), "--set", "sample_frames=%d" % F,
                "--set", "sample_size=%dx%d" % (W, H), "--set", "sample_steps=3", "--set", "sample_fps=%d" % FPS]
        with open(rd + ".out", "w") as out:
            rc = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=ENV, timeout=280).returncode
        if not check(rc == 0, "training with samples: exit %d: %s" % (rc, open(rd + ".out").read()[-800:])):
            return 1

        with open(os.path.join(rd, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        sample_rows = [x for x in rows if x.get("event") == "sample"]
        sampled = sorted({x["step"] for x in sample_rows})
        check(STEPS in sampled, "no sample rows for the last step: %s" % sample_rows)
        files = {}  # (stem, step) -> bytes of the .frame0.png
        for x in sample_rows:
            stem = os.path.basename(x["path"])[:-4]
            want = "samples/step-%d/%s.frame0.png" % (x["step"], stem)
            check(x.get("image") == want and x.get("tag") == "sample/" + stem,
                  "step %d %s: row image %r tag %r, want %r" % (x["step"], stem, x.get("image"), x.get("tag"), want))
            path = os.path.join(rd, want)
            if not check(os.path.exists(path), "%s is missing" % want):
                continue
            data = open(path, "rb").read()
            files[(stem, x["step"])] = data
            im = Image.open(io.BytesIO(data))
            check(im.size == (W, H) and im.mode == "RGB", "%s: %s %s, want RGB %dx%d" % (want, im.mode, im.size, W, H))
            strip = Image.open(os.path.join(rd, "samples", "step-%d" % x["step"], stem + ".png")).convert("RGB")
            check(im.tobytes() == strip.crop((0, 0, W, H)).tobytes(),
                  "%s is not the first frame of the strip %s.png" % (want, stem))
            dec = first_frame(os.path.join(rd, "samples", "step-%d" % x["step"], stem + ".mp4"))
            p = psnr(im.tobytes(), dec) if len(dec) == W * H * 3 else 0.0
            check(p > 20.0, "%s against the mp4's first frame: PSNR %.1f dB (%d bytes decoded)" % (want, p, len(dec)))
        check(sorted(files) == sorted((s, t) for s in STEMS for t in sampled),
              "frame0 files %s for steps %s" % (sorted(files), sampled))

        tb = os.path.join(rd, "tb")
        ea = EventAccumulator(tb, size_guidance={"images": 0, "scalars": 0})
        ea.Reload()
        tags = sorted(ea.Tags()["images"])
        check(tags == ["sample/" + s for s in STEMS], "image tags %s" % tags)
        n = 0
        for stem in STEMS:
            imgs = ea.Images("sample/" + stem) if "sample/" + stem in tags else []
            steps = [e.step for e in imgs]
            check(sorted(steps) == sampled, "sample/%s: images at steps %s, sampled %s" % (stem, steps, sampled))
            for e in imgs:
                want = files.get((stem, e.step))
                check(want is not None and e.encoded_image_string == want,
                      "sample/%s step %d: %d image bytes, the .frame0.png has %s" %
                      (stem, e.step, len(e.encoded_image_string), None if want is None else len(want)))
                check((e.width, e.height) == (W, H), "sample/%s step %d: %dx%d, want %dx%d"
                      % (stem, e.step, e.width, e.height, W, H))
                n += 1
        loss = sorted(e.step for e in ea.Scalars("train/loss")) if "train/loss" in ea.Tags()["scalars"] else []
        check(loss == list(range(1, STEPS + 1)), "EventAccumulator: train/loss steps %s" % loss)
        df = SummaryReader(tb, event_types={"scalars"}).scalars
        tp = sorted(int(s) for t, s in zip(df["tag"], df["step"]) if t == "train/loss")
        check(tp == list(range(1, STEPS + 1)), "tbparse: train/loss steps %s" % tp)
        print("images: %d in %d tags at steps %s equal the .frame0.png files (%dx%d); train/loss %d points"
              % (n, len(tags), sampled, W, H, len(loss)), flush=True)
    finally:
        if FAILS:
            print("(kept %s)" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
