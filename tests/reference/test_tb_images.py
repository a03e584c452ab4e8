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
#  - a --resume from the step-2 checkpoint (the later ones removed): the first run logged
#    its step-2 images after steps 3..6's scalars, and its file, cut at step 3, keeps
#    them and nothing of step 3 or later; afterwards the images are one per sampled step
#    (2 from the first run, 4 and 6 sampled again) and equal the files, as above;
#  - tbparse decodes images only through TensorFlow, which the reference venv does not
#    have: its image reading is not checked here.
# The readers live in the reference venv (scripts/setup.sh): the test re-runs itself with
# $VFLOW_REF_PY when /usr/bin/python3 lacks them, and skips (77) when neither has them.
# vflow-test: timeout=300
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from media_lib import st_write, psnr  # noqa: E402

try:
    from PIL import Image
    from tbparse import SummaryReader
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
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






def first_frame(mp4):
    return subprocess.run(["ffmpeg", "-v", "error", "-threads", "1", "-i", mp4, "-frames:v", "1", "-f", "rawvideo",
                           "-pix_fmt", "rgb24", "-"], capture_output=True).stdout


def sample_rows(rd):
    with open(os.path.join(rd, "metrics.jsonl")) as f:
        return [x for x in map(json.loads, filter(str.strip, f)) if x.get("event") == "sample"]


def check_files(rd, what):
    """The .frame0.png of every sample row: {(stem, step): bytes}."""
    files = {}
    rows = sample_rows(rd)
    sampled = sorted({x["step"] for x in rows})
    check(STEPS in sampled, "%s: no sample rows for the last step: %s" % (what, rows))
    for x in rows:
        stem = os.path.basename(x["path"])[:-4]
        want = "samples/step-%d/%s.frame0.png" % (x["step"], stem)
        check(x.get("image") == want and x.get("tag") == "sample/" + stem, "%s: step %d %s: row image %r tag %r, "
              "want %r" % (what, x["step"], stem, x.get("image"), x.get("tag"), want))
        path = os.path.join(rd, want)
        if not check(os.path.exists(path), "%s: %s is missing" % (what, want)):
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
          "%s: frame0 files %s for steps %s" % (what, sorted(files), sampled))
    return files, sampled


def check_tb(rd, files, sampled, what):
    """EventAccumulator's images equal the files; the scalars beside them still read."""
    tb = os.path.join(rd, "tb")
    ea = EventAccumulator(tb, size_guidance={"images": 0, "scalars": 0})
    ea.Reload()
    tags = sorted(ea.Tags()["images"])
    check(tags == ["sample/" + s for s in STEMS], "%s: image tags %s" % (what, tags))
    n = 0
    for stem in STEMS:
        imgs = ea.Images("sample/" + stem) if "sample/" + stem in tags else []
        steps = [e.step for e in imgs]
        check(sorted(steps) == sampled, "%s: sample/%s: images at steps %s, sampled %s" % (what, stem, steps, sampled))
        for e in imgs:
            want = files.get((stem, e.step))
            check(want is not None and e.encoded_image_string == want,
                  "%s: sample/%s step %d: %d image bytes, the .frame0.png has %s" %
                  (what, stem, e.step, len(e.encoded_image_string), None if want is None else len(want)))
            check((e.width, e.height) == (W, H), "%s: sample/%s step %d: %dx%d, want %dx%d"
                  % (what, stem, e.step, e.width, e.height, W, H))
            n += 1
    loss = sorted(e.step for e in ea.Scalars("train/loss")) if "train/loss" in ea.Tags()["scalars"] else []
    check(loss == list(range(1, STEPS + 1)), "%s: EventAccumulator: train/loss steps %s" % (what, loss))
    df = SummaryReader(tb, event_types={"scalars"}).scalars
    tp = sorted(int(s) for t, s in zip(df["tag"], df["step"]) if t == "train/loss")
    check(tp == list(range(1, STEPS + 1)), "%s: tbparse: train/loss steps %s" % (what, tp))
    print("%s: %d images in %d tags at steps %s equal the .frame0.png files (%dx%d); train/loss %d points"
          % (what, n, len(tags), sampled, W, H, len(loss)), flush=True)


def records(path):
    """[(step, tag or event kind)] of one event file, in file order."""
    return [(e.step, e.summary.value[0].tag if e.summary.value else e.WhichOneof("what"))
            for e in EventFileLoader(path).Load()]


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
            rc = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=ENV, timeout=120).returncode
        if not check(rc == 0, "training with samples: exit %d: %s" % (rc, open(rd + ".out").read()[-800:])):
            return 1
        files, sampled = check_files(rd, "run")
        check_tb(rd, files, sampled, "run")

        # A resume from the step-2 checkpoint: the first file's step-2 images were logged
        # after later steps' scalars, and the cut at step 3 keeps them (and drops the rest).
        first = [os.path.join(rd, "tb", f) for f in os.listdir(os.path.join(rd, "tb"))]
        before = records(first[0])
        late = [i for i, (s, t) in enumerate(before) if s == 2 and t.startswith("sample/")]
        check(len(late) == 2 and any(s >= 3 for s, _ in before[:min(late)]),
              "run: the step-2 images came before any later step's record, the resume below proves nothing: %s"
              % [(s, t) for s, t in before if s >= 2][:12])
        for st in (4, 6):
            shutil.rmtree(os.path.join(rd, "ckpt", "step-%d" % st), ignore_errors=True)
        with open(os.path.join(rd, "ckpt", "latest"), "w") as f:
            f.write("step-2")
        with open(rd + ".resume.out", "w") as out:
            rc = subprocess.run(args + ["--resume"], stdout=out, stderr=subprocess.STDOUT, env=ENV,
                                timeout=120).returncode
        if not check(rc == 0, "resume: exit %d: %s" % (rc, open(rd + ".resume.out").read()[-800:])):
            return 1
        after = records(first[0])
        check(not [s for s, _ in after if s >= 3], "resume: the first file keeps steps >= 3: %s" % after[-6:])
        check(sorted(t for s, t in after if t.startswith("sample/")) == ["sample/" + x for x in STEMS],
              "resume: the first file lost its step-2 images: %s" % after)
        ev = os.listdir(os.path.join(rd, "tb"))
        check(len(ev) == 2, "resume: event files %s" % ev)
        files, sampled = check_files(rd, "resumed")
        check(2 in sampled, "resumed: no step-2 sample rows left: %s" % sampled)
        check_tb(rd, files, sampled, "resumed")
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
