#!/usr/bin/python3
# test_train_wan22_resume.py — pipelines/finetune_wan22.lua with experts=both (routing by
# the drawn t, uniform timesteps: the high expert gets no sample in most steps, so its
# Adam step count lags the run's) is deterministic and resumable on the CPU backend (the
# tiny preset, a file per expert):
#  - the same run twice ends with the same bits in both experts' checkpoints; so does
#    routing=each, whose experts end elsewhere;
#  - a SIGKILL of one expert's worker (a partition of the low expert, then the high
#    expert's optimizer shard) fails the run, naming the signal; `--resume` then ends each
#    expert bitwise where the uninterrupted run ends it, each from its own newest
#    checkpoint (ckpt/high, ckpt/low), the final two-expert step (ckpt/step-N) holding
#    both, with no .tmp dir left;
#  - killed after the low expert's final checkpoint and before the high one's (the high
#    one's final step and the joined one removed), `--resume` trains the high expert only
#    and still joins the final step: both experts' final models, bitwise the reference.
# vflow-test: timeout=600
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("VFLOW_BUILD", "build")
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
TRAIN_TOOL = os.path.join(BUILD, "tools", "train_tool")
DIT_TOOL = os.path.join(BUILD, "tools", "dit_tool")
PIPE = os.path.join(SRC, "pipelines", "finetune_wan22.lua")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
STEPS = 40
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import check, finish  # noqa: E402


def md5(run, expert, sub=""):
    """The model of `expert`'s checkpoint dir; with sub, the joined two-expert step's copy."""
    path = os.path.join(run, "ckpt", "step-%d" % STEPS, sub, "model.safetensors") if sub else \
        os.path.join(run, "ckpt", expert, "step-%d" % STEPS, "model.safetensors")
    return hashlib.md5(open(path, "rb").read()).hexdigest() if os.path.exists(path) else None


def steps_done(run, stage):
    try:
        with open(os.path.join(run, "metrics.jsonl")) as f:
            return sum(1 for ln in f if '"event":"train_step"' in ln and '"stage":"%s"' % stage in ln)
    except OSError:
        return 0


def main():
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda n: os.path.join(tmp, n)  # noqa: E731
        subprocess.run([TRAIN_TOOL, "mkcache", p("cache.lmdb"), "16", "4", "1", "8", "8", "7"], check=True,
                       capture_output=True)
        for tag, seed in (("high", 0), ("low", 7)):
            subprocess.run([DIT_TOOL, "init", "seed=%d" % seed, "out=" + p("init.bin")], check=True)
            subprocess.run([DIT_TOOL, "save", "params=" + p("init.bin"),
                            "out=" + p(tag + ".safetensors")], check=True)

        def args(run, *extra):
            a = [VFLOW, "run", PIPE, "--run-dir", p(run)]
            for s in ("cache=" + p("cache.lmdb"), "preset=tiny", "device=cpu", "frames=1", "size=64", "batch=2",
                      "stages=2", "micro_batches=2", "lr=2e-3", "steps=%d" % STEPS, "every=4", "keep=2",
                      "t_sampling=uniform",
                      "experts=both", "weights_high=" + p("high.safetensors"),
                      "weights_low=" + p("low.safetensors")):
                a += ["--set", s]
            return a + list(extra)

        def run(name, *extra):
            r = subprocess.run(args(name, *extra), capture_output=True, text=True, env=ENV, timeout=240)
            check(r.returncode == 0, "%s: exit %d %s" % (name, r.returncode, r.stderr[-400:]))
            return {e: md5(p(name), e) for e in ("high", "low")}

        ref = run("ref")
        check(None not in ref.values() and ref["high"] != ref["low"], "the reference run's experts: %s" % ref)
        check(run("again") == ref, "the same run twice: the same bits")
        each = run("each", "--set", "routing=each")
        check(None not in each.values() and each == run("each-again", "--set", "routing=each") and
              each["high"] != ref["high"] and each["low"] != ref["low"],
              "routing=each twice: the same bits, not routing=t's: %s %s" % (each, ref))

        for victim, watch, at in (("dit_low_1", "adamw_low_0", 9), ("adamw_high_0", "adamw_high_0", 17)):
            name = "kill-" + victim
            trace = p("trace-" + victim)
            env = dict(ENV, VFLOW_TRACE_SPAWN=trace)
            with open(p(name + ".out"), "w") as out:
                proc = subprocess.Popen(args(name), stdout=out, stderr=subprocess.STDOUT, env=env)
            pid = None
            deadline = time.time() + 120
            while time.time() < deadline and proc.poll() is None:
                if pid is None and os.path.exists(trace):
                    for ln in open(trace):
                        f = ln.split()
                        if len(f) >= 3 and f[2] == "stages=" + victim:
                            pid = int(f[0].split("=")[1])
                if pid is not None and steps_done(p(name), watch) >= at:
                    break
                time.sleep(0.01)
            if not check(pid is not None and proc.poll() is None,
                         "%s: the run ended before its worker could be killed" % victim):
                proc.wait()
                continue
            os.kill(pid, signal.SIGKILL)
            rc = proc.wait(timeout=120)
            log = open(p(name + ".out")).read()
            check(rc != 0 and "SIGKILL" in log, "%s killed: exit %d %s" % (victim, rc, log[-300:]))
            print("%s killed after %d steps of %s" % (victim, steps_done(p(name), watch), watch))
            got = run(name, "--resume")
            with open(os.path.join(p(name), "run.log")) as f:
                resumed = [ln for ln in f if "resuming at step" in ln]
            for e in ("high", "low"):
                check(any("adamw_%s_0" % e in ln for ln in resumed),
                      "%s: the %s expert's shard resumed from a checkpoint: %s" % (victim, e, resumed))
            check(got == ref, "%s: the resumed experts %s end where the uninterrupted run's %s do" % (victim, got, ref))
            joined = {e: md5(p(name), e, sub) for e, sub in (("high", "high_noise_model"), ("low", "low_noise_model"))}
            check(joined == ref, "%s: the joined two-expert step holds both experts' final models: %s" % (victim, joined))
            for d in (os.path.join(p(name), "ckpt", e) for e in ("high", "low", "")):
                check(not [x for x in os.listdir(d) if x.endswith(".tmp")], "%s: a .tmp is left in %s" % (victim, d))
        # a kill after the low expert's final checkpoint and before the high one's: the
        # resumed run has nothing left for low to train, and still joins the final step
        run("late")
        for d in (("high", "step-%d" % STEPS), ("step-%d" % STEPS,)):
            shutil.rmtree(os.path.join(p("late"), "ckpt", *d))
        got = run("late", "--resume")
        joined = {e: md5(p("late"), e, sub) for e, sub in (("high", "high_noise_model"), ("low", "low_noise_model"))}
        check(got == ref and joined == ref, "low already final at the resume: the experts %s and the joined step %s "
              "end as the uninterrupted run's %s" % (got, joined, ref))
    finish()


if __name__ == "__main__":
    main()
