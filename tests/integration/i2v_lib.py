"""i2v_lib.py — what the image-to-video script tests share (test_train_i2v.py,
test_train_ti2v.py): the binary's paths, one command run, a precompute of a manifest into
a cache, and a short training run with its logged losses. Not a test itself."""
import json
import os
import subprocess

BUILD = os.environ.get("VFLOW_BUILD", "build")
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
TOOLS = os.path.join(BUILD, "tools")
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def run(args, timeout=240):
    return subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=timeout)


def videos(tmp, n, size, frames):
    """n generated videos (size x size, frames, x264 intra) and a manifest of them with a
    caption each: (paths, manifest, "" or mkvideo's error)."""
    paths = []
    for i in range(n):
        v = os.path.join(tmp, "v%d.mp4" % i)
        r = run([os.path.join(TOOLS, "mkvideo"), "-o", v, "-n", str(frames), "-s", "%dx%d" % (size, size),
                 "-c", "libx264", "-q", "1", "-g", "1"])
        if r.returncode != 0:
            return paths, None, r.stderr or "exit %d" % r.returncode
        paths.append(v)
    manifest = os.path.join(tmp, "m.csv")
    with open(manifest, "w") as f:
        f.write("path,text\n" + "".join("%s,clip %d\n" % (v, i) for i, v in enumerate(paths)))
    return paths, manifest, ""


def precompute(tmp, name, manifest, cache, size, frames, *sets):
    """pipelines/precompute_latents.lua over manifest into cache (size x size, frames)."""
    args = [VFLOW, "run", os.path.join(SRC, "pipelines", "precompute_latents.lua"), "--run-dir",
            os.path.join(tmp, name), "--set", "manifest=" + manifest, "--set", "cache=" + cache,
            "--set", "size=%d" % size, "--set", "frames=%d" % frames, "--set", "workers=1"]
    for s in sets:
        args += ["--set", s]
    return run(args)


def train(tmp, name, cache, *sets):
    """Two steps of pipelines/train_dit.lua on cache (batch 2, P = 2, M = 2): (result,
    run dir, the logged losses)."""
    rd = os.path.join(tmp, name)
    args = [VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", rd, "--set",
            "cache=" + cache, "--set", "steps=2", "--set", "every=0", "--set", "batch=2", "--set", "stages=2",
            "--set", "micro_batches=2"]
    for s in sets:
        args += ["--set", s]
    r = run(args)
    losses = []
    if os.path.exists(os.path.join(rd, "metrics.jsonl")):
        with open(os.path.join(rd, "metrics.jsonl")) as f:
            losses = [json.loads(ln)["loss"] for ln in f if '"event":"train_step"' in ln]
    return r, rd, losses


def refusals(tmp, cases):
    """Trains each case (name, cache, sets, words) that must be refused: yields (ok, message),
    ok when the run exits 2 before its first step with every word in its output."""
    for name, cache, sets, words in cases:
        r, _, ln = train(tmp, name, cache, *sets)
        out = r.stdout + r.stderr
        yield (r.returncode == 2 and not ln and all(w in out for w in words),
               "%s: exit %d, %d steps, want %r: %s" % (name, r.returncode, len(ln), words, out[-600:]))
