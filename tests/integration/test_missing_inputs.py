# test_missing_inputs.py — inputs that are not there stop `vflow run` before anything is
# made or started (the stages' preflight), through the real binary:
#  - a missing manifest, or a source folder that is not there: exit 2 naming it, no worker
#    spawned (VFLOW_TRACE_SPAWN), no run dir and no empty cache left behind;
#  - training on a cache that does not exist: exit 2 saying to run the precompute first,
#    at check time and, with a latent_shape to plan by, at run time (where `vflow plan`
#    still works without the cache); nothing spawned;
#  - the sample stage's cache missing: exit 2 before training starts;
#  - `vflow sample --cache` naming no cache: exit 2.
# vflow-test: labels=precompute timeout=300
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import check, finish  # noqa: E402

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(os.environ.get("VFLOW_BUILD", "build"), "vflow")


def main():
    tmp = tempfile.mkdtemp(prefix="vf_missing_")
    trace = os.path.join(tmp, "spawned.txt")
    env = dict(os.environ, VFLOW_TRACE_SPAWN=trace)

    def run(args):
        return subprocess.run([VFLOW] + args, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)

    def nothing_started(what):
        check(not os.path.exists(trace), what + ": a worker was spawned")
        check(not os.path.exists(os.path.join(tmp, "runs")), what + ": a run dir was made")
        check(not os.path.exists(os.path.join(tmp, "c.lmdb")), what + ": an empty cache was left")

    pre = os.path.join(SRC, "pipelines", "precompute_latents.lua")
    r = run(["run", pre, "--set", "manifest=nope.csv", "--set", "cache=c.lmdb"])
    check(r.returncode == 2 and "decode: manifest nope.csv: No such file or directory" in r.stderr,
          "missing manifest: rc %d %s" % (r.returncode, r.stderr))
    nothing_started("missing manifest")
    r = run(["run", pre, "--set", "source=nodir", "--set", "cache=c.lmdb"])
    check(r.returncode == 2 and "source nodir matches no files" in r.stderr, "missing source: %s" % r.stderr)
    nothing_started("missing source")

    train = os.path.join(SRC, "pipelines", "train_dit.lua")
    want = "latent_reader: c.lmdb: no latent cache there: run the precompute first (vflow run " \
           "pipelines/precompute_latents.lua --set cache=c.lmdb ...)"
    r = run(["check", train, "--set", "cache=c.lmdb"])
    check(r.returncode == 2 and want in r.stderr, "check on a missing cache: rc %d %s" % (r.returncode, r.stderr))
    shape = ["--set", "latent_reader.latent_shape=[4,5,8,8]"]
    r = run(["plan", train, "--set", "cache=c.lmdb"] + shape)
    check(r.returncode == 0, "plan with latent_shape needs no cache: rc %d %s" % (r.returncode, r.stderr))
    r = run(["run", train, "--set", "cache=c.lmdb", "--set", "steps=2"] + shape)
    check(r.returncode == 2 and want in r.stderr, "run on a missing cache: rc %d %s" % (r.returncode, r.stderr))
    nothing_started("missing cache")

    # the sample stage's cache, before any training step (the training cache exists)
    subprocess.run([os.path.join(os.environ.get("VFLOW_BUILD", "build"), "tools", "train_tool"), "mkcache",
                    os.path.join(tmp, "t.lmdb"), "8", "4", "1", "8", "8", "7"], check=True, capture_output=True)
    r = run(["run", train, "--set", "cache=t.lmdb", "--set", "steps=2", "--set", "sample_captions=a cat",
             "--set", "sample_cache=c.lmdb"])
    check(r.returncode == 2 and "sample: cache c.lmdb: No such file or directory" in r.stderr,
          "sample stage's missing cache: rc %d %s" % (r.returncode, r.stderr))
    nothing_started("the sample stage's missing cache")

    r = run(["run", train, "--set", "cache=t.lmdb", "--set", "steps=2", "--run-dir", "r"])
    check(r.returncode == 0, "a 2-step run to sample from: rc %d %s" % (r.returncode, r.stderr))
    r = run(["sample", "r/ckpt", "--prompt", "a", "--frames", "5", "--size", "16", "--steps", "1",
             "--cache", "c.lmdb", "--out", "x.mp4"])
    check(r.returncode == 2 and "cache: c.lmdb: no LMDB environment here" in r.stderr,
          "vflow sample --cache missing: rc %d %s" % (r.returncode, r.stderr))
    subprocess.run(["rm", "-rf", tmp])
    finish()


if __name__ == "__main__":
    main()
