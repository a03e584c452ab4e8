#!/usr/bin/env python3
"""test_train_sample.py — the `sample` stage: videos of a training run's checkpoints.

vflow-test: labels=integration timeout=300

  - a tiny DiT with text embeddings (text_dim 16, cache_tool write --text 16) trained 6
    steps with a checkpoint every 2 and the sample stage on (pipelines/train_dit.lua's
    sample_* knobs, p:train{sample = ...}) for two prompts and a negative, each a
    safetensors file of one (L, 16) tensor written here by hand;
  - every checkpoint step either has <run dir>/samples/step-N/<stem>.mp4 (+ .png, the
    strip, and .frame0.png, the first frame; test_tb_images.py checks their pixels) or the
    log line "step N skipped, still sampling step M"; the last step always has them;
  - ffprobe reads each mp4: 9 frames, 64x48, 12 fps;
  - the stage's video of the last step equals `vflow sample` of that checkpoint with the
    same args: both mp4s decoded by ffmpeg give the same bytes, and they are a video of
    the frames vflow sample wrote (--frames-out, PSNR > 20 dB);
  - sampling never changes training: the final model.safetensors is byte for byte that of
    the same run without the sample stage;
  - a bad prompt file (embeddings of another width) is an ERROR line naming it and a
    metrics row {"event":"sample_failed"} while the run exits 0 with its checkpoints;
  - by hand (p:stage("sample", {every = 2}) + p:connect from checkpoint.done): the 2nd
    checkpoint (step 4) and the final one (step 6) are sampled, the 1st (step 2) is not;
  - a frame count the VAE cannot make, and prompts with captions, are refused by vflow
    check (exit 2, one line);
  - a byte-caption model (no text_dim) with sample_captions: the stage writes
    step-N/<index>_<words>.mp4 per caption, each as close to the frames of
    `vflow sample --prompt CAPTION` on that checkpoint as the CLI's own video (0.2 dB).
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from media_lib import st_write, psnr  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", "build")
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
TOOLS = os.path.join(BUILD, "tools")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, file=sys.stderr)
    return cond


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=300, **kw)






def decode(path):
    return subprocess.run(["ffmpeg", "-v", "error", "-threads", "1", "-i", path, "-f", "rawvideo", "-pix_fmt",
                           "rgb24", "-"], capture_output=True).stdout


def rows(rd):
    out = []
    with open(os.path.join(rd, "metrics.jsonl")) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


W, H, F, FPS = 64, 48, 9, 12


def train(tmp, name, extra):
    rd = os.path.join(tmp, name)
    r = run([VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", rd, "--set",
             "cache=" + os.path.join(tmp, "c.lmdb"), "--set", "text_dim=16", "--set", "steps=6", "--set", "every=2",
             "--set", "keep=4", "--set", "tensorboard=false", "--set", "seed=2"] + extra)
    log = open(os.path.join(rd, "run.log")).read() if os.path.exists(os.path.join(rd, "run.log")) else ""
    return r, rd, log


def main():
    tmp = tempfile.mkdtemp(prefix="train_sample_")
    j = lambda *p: os.path.join(tmp, *p)  # noqa: E731
    r = run([os.path.join(TOOLS, "cache_tool"), "write", j("c.lmdb"), "0", "8", "--shape", "4,2,8,8", "--text", "16"])
    if not check(r.returncode == 0, "cache_tool: " + r.stderr):
        return 1
    rnd = random.Random(5)
    D = 16
    st_write(j("cat.safetensors"), {"emb": ((7, D), [rnd.gauss(0, 1) for _ in range(7 * D)])})
    st_write(j("dog.safetensors"), {"emb": ((4, D), [rnd.gauss(0, 1) for _ in range(4 * D)])})
    st_write(j("neg.safetensors"), {"emb": ((3, D), [rnd.gauss(0, 1) for _ in range(3 * D)])})
    st_write(j("wide.safetensors"), {"emb": ((4, 32), [0.5] * 128)})
    knobs = ["--set", "sample_negative=" + j("neg.safetensors"), "--set", "sample_frames=%d" % F, "--set",
             "sample_size=%dx%d" % (W, H), "--set", "sample_steps=5", "--set", "sample_shift=3", "--set",
             "sample_guidance=4.5", "--set", "sample_seed=11", "--set", "sample_fps=%d" % FPS]

    # training with the sample stage
    r, rd, log = train(tmp, "rs", ["--set", "sample_prompts=%s,%s" % (j("cat.safetensors"), j("dog.safetensors"))]
                       + knobs)
    if not check(r.returncode == 0, "training with sample: exit %d: %s" % (r.returncode, r.stderr[-800:])):
        return 1
    for step in (2, 4, 6):
        have = all(os.path.exists(os.path.join(rd, "samples", "step-%d" % step, s + ext))
                   for s in ("cat", "dog") for ext in (".mp4", ".png", ".frame0.png"))
        skipped = re.search(r"step %d skipped, still sampling step \d+" % step, log) is not None
        print("step %d: %s" % (step, "videos" if have else "skipped" if skipped else "neither"))
        check(have or skipped, "step %d has neither its videos nor a 'skipped' log line" % step)
        if step == 6:
            check(have, "the last checkpoint (step 6) has no videos: " + log[-1500:])
        for s in ("cat", "dog") if have else ():
            p = run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                     "stream=codec_name,width,height,r_frame_rate,nb_read_frames", "-of",
                     "default=noprint_wrappers=1", os.path.join(rd, "samples", "step-%d" % step, s + ".mp4")])
            info = dict(l.split("=", 1) for l in p.stdout.split())
            check(info.get("width") == str(W) and info.get("height") == str(H) and
                  info.get("nb_read_frames") == str(F) and info.get("r_frame_rate") == "%d/1" % FPS,
                  "step %d %s.mp4: ffprobe %r" % (step, s, info))
    leftovers = [f for _, _, fs in os.walk(os.path.join(rd, "samples")) for f in fs if f.endswith(".part")]
    check(not leftovers, "partial files left: %s" % leftovers)
    ev = [x for x in rows(rd) if x.get("event") == "sample"]
    check(any(x.get("step") == 6 for x in ev), "no sample metrics row for step 6: %s" % ev)
    check(all("/step-%d/" % x.get("step") in x.get("path", "") for x in ev), "rows name another step's video: %s" % ev)

    # the stage's video equals vflow sample's on the same checkpoint
    step6 = os.path.join(rd, "ckpt", "step-6")
    for s in ("cat", "dog"):
        out = j("cli_%s.mp4" % s)
        r = run([VFLOW, "sample", step6, "--prompt-embeds", j(s + ".safetensors"), "--negative-embeds",
                 j("neg.safetensors"), "--frames", str(F), "--size", "%dx%d" % (W, H), "--steps", "5", "--shift", "3",
                 "--guidance", "4.5", "--seed", "11", "--fps", str(FPS), "--out", out, "--frames-out",
                 j("cli_%s.rgb" % s)])
        if not check(r.returncode == 0, "vflow sample: " + r.stderr[-300:]):
            continue
        mine = os.path.join(rd, "samples", "step-6", s + ".mp4")
        a, b = decode(mine), decode(out)
        same_file = open(mine, "rb").read() == open(out, "rb").read()
        print("%s: decoded %d bytes, equal %s; mp4 files identical: %s" % (s, len(a), a == b, same_file))
        check(len(a) == F * W * H * 3 and a == b, "%s: the stage's mp4 decodes to other frames than vflow sample's" % s)
        rgb = open(j("cli_%s.rgb" % s), "rb").read()
        plane = W * H * 3
        worst = min(psnr(a[i * plane:(i + 1) * plane], rgb[i * plane:(i + 1) * plane]) for i in range(F))
        check(worst > 20.0, "%s: worst frame PSNR %.1f dB against vflow sample's frames" % (s, worst))

    # sampling never changes training
    r, rn, _ = train(tmp, "rn", [])
    check(r.returncode == 0, "training without sample: " + r.stderr[-300:])
    m1 = open(os.path.join(step6, "model.safetensors"), "rb").read()
    m2 = open(os.path.join(rn, "ckpt", "step-6", "model.safetensors"), "rb").read()
    check(m1 == m2, "the final weights differ with the sample stage on (%d vs %d bytes)" % (len(m1), len(m2)))
    check(not os.path.exists(os.path.join(rn, "samples")), "a run without the sample stage wrote samples/")

    # a bad prompt file fails loudly, training does not
    r, rb, log = train(tmp, "rb", ["--set", "sample_prompts=" + j("wide.safetensors")] + knobs)
    check(r.returncode == 0, "a bad prompt file failed the run: exit %d: %s" % (r.returncode, r.stderr[-500:]))
    check(os.path.exists(os.path.join(rb, "ckpt", "step-6", "model.safetensors")), "bad prompt: no final checkpoint")
    errs = [l for l in log.splitlines() if " ERROR " in l and "wide.safetensors" in l]
    check(errs, "bad prompt: no ERROR line naming wide.safetensors: " + log[-1500:])
    bad = [x for x in rows(rb) if x.get("event") == "sample_failed"]
    check(bad and "wide.safetensors" in bad[0].get("error", ""), "bad prompt: sample_failed rows %s" % bad)
    print("bad prompt: %s" % (errs[0] if errs else None))

    # by hand: p:stage + p:connect, every = 2
    text = open(os.path.join(SRC, "pipelines", "train_dit.lua")).read()
    call, end = "weights = a.weights, sample = sample,", "\nreturn p\n"
    check(call in text and text.endswith(end), "train_dit.lua's p:train call changed; update this test")
    hand = text.replace(call, "weights = a.weights,")[:-len(end)] + (
        "\nlocal s = p:stage(\"sample\", { prompts = { %s }, frames = %d, size = { %d, %d }, steps = 3,"
        " fps = %d, every = 2, model = model })\n"
        "p:connect({ ckpt, \"done\" }, { s, \"ckpt\" })" % (json.dumps(j("cat.safetensors")), F, W, H, FPS)) + end
    with open(j("hand.lua"), "w") as f:
        f.write(hand)
    rh = j("rh")
    r = run([VFLOW, "run", j("hand.lua"), "--run-dir", rh, "--set", "cache=" + j("c.lmdb"), "--set", "text_dim=16",
             "--set", "steps=6", "--set", "every=2", "--set", "keep=4", "--set", "tensorboard=false"])
    check(r.returncode == 0, "by hand: exit %d: %s" % (r.returncode, r.stderr[-500:]))
    got = [st for st in (2, 4, 6) if os.path.exists(os.path.join(rh, "samples", "step-%d" % st, "cat.mp4"))]
    check(got == [4, 6], "by hand, every = 2: videos for steps %s, expected [4, 6]" % got)

    # refused before launch
    r = run([VFLOW, "check", os.path.join(SRC, "pipelines", "train_dit.lua"), "--set", "cache=" + j("c.lmdb"),
             "--set", "text_dim=16", "--set", "sample_prompts=" + j("cat.safetensors"), "--set", "sample_frames=10"])
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "frames 10" in lines[0],
          "sample frames = 10: exit %d, %r" % (r.returncode, r.stderr))

    r = run([VFLOW, "check", os.path.join(SRC, "pipelines", "train_dit.lua"), "--set", "cache=" + j("c.lmdb"),
             "--set", "text_dim=16", "--set", "sample_prompts=" + j("cat.safetensors"), "--set",
             "sample_captions=a cat"])
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "not both" in lines[0],
          "prompts and captions: exit %d, %r" % (r.returncode, r.stderr))

    # a model trained on caption bytes samples captions given as text (what `make run` does);
    # the stage's video equals vflow sample --prompt's on the same checkpoint
    r = run([os.path.join(TOOLS, "cache_tool"), "write", j("bytes.lmdb"), "0", "8", "--shape", "4,2,8,8"])
    check(r.returncode == 0, "cache_tool (bytes): " + r.stderr)
    caps = ["a red square slides right", "A green square, falling!"]
    rc_ = j("rc")
    r = run([VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", rc_, "--set",
             "cache=" + j("bytes.lmdb"), "--set", "steps=2", "--set", "every=2", "--set", "tensorboard=false",
             "--set", "sample_captions=" + "|".join(caps), "--set", "sample_frames=%d" % F, "--set",
             "sample_size=%dx%d" % (W, H), "--set", "sample_steps=3", "--set", "sample_fps=%d" % FPS])
    check(r.returncode == 0, "byte-caption training with captions: exit %d: %s" % (r.returncode, r.stderr[-500:]))
    stems = ["00_a_red_square_slides_right", "01_a_green_square_falling"]
    for cap, stem in zip(caps, stems):
        mine = os.path.join(rc_, "samples", "step-2", stem + ".mp4")
        if not check(os.path.exists(mine), "no %s (have %s)" % (mine, os.listdir(os.path.join(rc_, "samples",
                                                                                                "step-2"))
                                                         if os.path.isdir(os.path.join(rc_, "samples", "step-2"))
                                                         else "no step-2 dir")):
            continue
        out = j("cap_%s.mp4" % stem)
        r = run([VFLOW, "sample", os.path.join(rc_, "ckpt"), "--prompt", cap, "--frames", str(F), "--size",
                 "%dx%d" % (W, H), "--steps", "3", "--fps", str(FPS), "--out", out, "--frames-out",
                 j("cap_%s.rgb" % stem)])
        if not check(r.returncode == 0, "vflow sample --prompt: " + r.stderr[-300:]):
            continue
        # libx264 does not always encode the same frames to the same bits in the stage's
        # worker as in the CLI (its second video of a process; the frames going in are the
        # same bytes), so the stage's video is held to the CLI's frames: every frame as
        # close to them as the CLI's own video, to 0.2 dB
        a, b, rgb = decode(mine), decode(out), open(j("cap_%s.rgb" % stem), "rb").read()
        plane = W * H * 3
        if not check(len(a) == F * plane and len(b) == F * plane, "%s: %d / %d decoded bytes" % (stem, len(a), len(b))):
            continue
        worst = max(abs(psnr(a[i * plane:(i + 1) * plane], rgb[i * plane:(i + 1) * plane]) -
                        psnr(b[i * plane:(i + 1) * plane], rgb[i * plane:(i + 1) * plane])) for i in range(F))
        print("%s: stage vs CLI video, worst frame PSNR difference %.3f dB" % (stem, worst))
        check(worst <= 0.2, "%s: the stage's video is %.2f dB off the CLI's on some frame" % (stem, worst))

    if fails:
        print("%d failures (files in %s)" % (len(fails), tmp))
        return 1
    subprocess.run(["rm", "-rf", tmp])
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
