# test_tb_events.py — the TensorBoard event files of real runs, read by the readers users
# have: TensorBoard's own EventAccumulator (PyPI tensorboard) and tbparse's SummaryReader,
# each compared scalar by scalar (tag, step, value at f32 precision) with what the same run
# wrote to metrics.jsonl, plan.json and quarantine.jsonl:
#  - a short training (pipelines/train_dit.lua, 2 partitions, 2 shards): train/loss,
#    train/lr, train/grad_norm, perf/step_s, perf/samples_s, perf/tokens_s equal the
#    train_step rows, one point per step; mem/<stage>/measured is a peak the stage's rows
#    report (the last one its final peak), mem/<stage>/plan the stage's account in
#    plan.json, edge/<from>-<to>/fill a fill the receiver's rows report for that port;
#    every stage and edge of the plan has its tags; no perf/mfu on the CPU;
#  - a precompute (pipelines/precompute_latents.lua over generated videos and an empty
#    file): data/quarantined counts quarantine.jsonl, data/clips_s times the wall-clock
#    interval between points is a whole number of clips, and those numbers add up along the
#    clips the decode stages' rows report;
#  - a training whose partition is SIGKILLed after a checkpoint, then --resume: the killed
#    run's file holds steps past the checkpoint; afterwards both readers see exactly one
#    train/loss point per step, bitwise (f32) the uninterrupted run's loss;
#  - with a device peak (VFLOW_PEAK_TFLOPS standing in for a GPU's) the rows' mfu is the
#    step's model FLOPs, counted here from graph.json's model and latent shape, over
#    step_s · peak, and perf/mfu equals it; without one (the CPU) there is no perf/mfu;
#  - tensorboard=false and --no-tensorboard write no event file.
# The readers live in the reference venv (scripts/setup.sh): the test re-runs itself with
# $VFLOW_REF_PY when /usr/bin/python3 lacks them, and skips (77) when neither has them.
# vflow-test: timeout=600
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tbparse import SummaryReader
except ImportError as e:
    ref = os.environ.get("VFLOW_REF_PY", "/opt/vflow-ref/bin/python")
    if os.environ.get("VF_TB_REEXEC") != "1" and os.path.exists(ref):
        os.environ["VF_TB_REEXEC"] = "1"
        os.execv(ref, [ref, os.path.abspath(__file__)] + sys.argv[1:])
    print("skip: %s (scripts/setup.sh installs tensorboard and tbparse)" % e)
    sys.exit(77)

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.abspath(os.environ.get("VFLOW_BUILD", "build"))
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(BUILD, "vflow")
TRAIN_TOOL = os.path.join(BUILD, "tools", "train_tool")
MKVIDEO = os.path.join(BUILD, "tools", "mkvideo")
TRAIN = os.path.join(SRC, "pipelines", "train_dit.lua")
PRECOMPUTE = os.path.join(SRC, "pipelines", "precompute_latents.lua")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
STEPS = 40
COMMON = ["--set", "steps=%d" % STEPS, "--set", "every=10", "--set", "keep=2", "--set", "batch=4",
          "--set", "stages=2", "--set", "shards=2", "--set", "micro_batches=2", "--set", "lr=2e-3"]
TRAIN_TAGS = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm", "step_s": "perf/step_s",
              "samples_s": "perf/samples_s", "tokens_s": "perf/tokens_s"}
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def run(args, out, env=ENV):
    with open(out, "w") as f:
        return subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, env=env).returncode


def tail(path, n=5):
    with open(path) as f:
        return "".join(f.readlines()[-n:])


def rows(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_ea(tb):
    """{tag: [(step, value, wall)]} as TensorBoard's EventAccumulator loads the directory."""
    acc = EventAccumulator(tb, size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value, e.wall_time) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def read_tbparse(tb):
    """{tag: [(step, value, wall)]} as tbparse's SummaryReader loads the directory."""
    df = SummaryReader(tb, extra_columns={"wall_time"}).scalars
    out = {}
    for tag, step, value, wall in zip(df["tag"], df["step"], df["value"], df["wall_time"]):
        out.setdefault(tag, []).append((int(step), float(value), float(wall)))
    return out


def readers(tb, what):
    """Both readers' scalars; they must agree point for point."""
    ea, tp = read_ea(tb), read_tbparse(tb)
    check(sorted(ea) == sorted(tp), "%s: tags differ between EventAccumulator %s and tbparse %s"
          % (what, sorted(ea), sorted(tp)))
    for tag in ea:
        a = sorted((s, v) for s, v, _ in ea[tag])
        b = sorted((s, v) for s, v, _ in tp.get(tag, []))
        check(a == b, "%s: %s differs between the readers: %s vs %s" % (what, tag, a[:5], b[:5]))
    return ea, tp


def one_per_step(points):
    steps = [s for s, _, _ in points]
    return len(steps) == len(set(steps))


def check_stage_tags(sc, run_dir, what):
    """mem/ and edge/ points against the run's stage rows and plan.json."""
    with open(os.path.join(run_dir, "plan.json")) as f:
        plan = json.load(f)
    peaks, fills, final_peak = {}, {}, {}
    for r in rows(run_dir):
        if r.get("type") in ("stage", "final"):
            peaks.setdefault(r["stage"], set()).add(f32(r["peak"]))
            for port, v in r.get("fill", {}).items():
                fills.setdefault((r["stage"], port), []).append(v)
            if r["type"] == "final":
                final_peak[r["stage"]] = f32(r["peak"])
    producers = {}
    for e in plan["edges"]:
        producers.setdefault(e["dst"], set()).add(e["src"].split(".")[0])
    seen = set()
    for st in plan["stages"]:
        name = st["name"]
        for kind in ("measured", "plan"):
            tag = "mem/%s/%s" % (name, kind)
            seen.add(tag)
            pts = sc.get(tag, [])
            if not check(pts, "%s: no %s" % (what, tag)):
                continue
            check(one_per_step(pts), "%s: %s has two points at one step" % (what, tag))
            if kind == "plan":
                bad = [v for _, v, _ in pts if v != f32(st["account"])]
                check(not bad, "%s: %s = %s, plan.json says %d" % (what, tag, bad[:3], st["account"]))
            else:
                bad = [v for _, v, _ in pts if v not in peaks.get(name, set())]
                check(not bad, "%s: %s values %s are no peak of %s in metrics.jsonl" % (what, tag, bad[:3], name))
                last = max(pts)[1]
                check(last == final_peak.get(name), "%s: %s ends at %s, the final row says %s"
                      % (what, tag, last, final_peak.get(name)))
    for e in plan["edges"]:
        src, (dst, port) = e["src"].split(".")[0], e["dst"].split(".")
        tag = "edge/%s-%s/fill" % (src, dst)
        seen.add(tag)
        pts = sc.get(tag, [])
        if not check(pts, "%s: no %s" % (what, tag)):
            continue
        check(one_per_step(pts), "%s: %s has two points at one step" % (what, tag))
        got = fills.get((dst, port), [])
        for _, v, _ in pts:
            if len(producers[e["dst"]]) == 1:  # the port's fill is this edge's (6 digits in the row)
                ok = any(abs(v - x) <= 5e-6 * max(1.0, abs(x)) for x in got)
            else:  # the port's fill is the fullest of its producers'
                ok = 0 <= v <= max(got, default=0) + 5e-6
            check(ok, "%s: %s = %s is no fill of %s.%s in metrics.jsonl" % (what, tag, v, dst, port))
    return seen


def check_training(sc, run_dir, what, steps):
    """train/ and perf/ points equal the train_step rows (the last row of a step wins)."""
    want = {}
    for r in rows(run_dir):
        if r.get("event") == "train_step":
            want[r["step"]] = r
    check(sorted(want) == list(range(1, steps + 1)), "%s: train_step rows for steps %s" % (what, sorted(want)))
    for key, tag in TRAIN_TAGS.items():
        pts = sc.get(tag, [])
        if not check(pts, "%s: no %s" % (what, tag)):
            continue
        check(one_per_step(pts), "%s: %s has two points at one step" % (what, tag))
        check(sorted(s for s, _, _ in pts) == sorted(want), "%s: %s steps %s" % (what, tag, [s for s, _, _ in pts]))
        bad = [(s, v, want[s][key]) for s, v, _ in pts if s in want and v != f32(want[s][key])]
        check(not bad, "%s: %s differs from metrics.jsonl (step, tb, jsonl): %s" % (what, tag, bad[:3]))
    check("perf/mfu" not in sc, "%s: perf/mfu on a CPU run" % what)
    return set(TRAIN_TAGS.values())


def tb_dir(run_dir):
    return os.path.join(run_dir, "tb")


def event_files(run_dir):
    d = tb_dir(run_dir)
    return sorted(f for f in os.listdir(d) if f.startswith("events.out.tfevents.")) if os.path.isdir(d) else []


def training(tmp, cache):
    ref = os.path.join(tmp, "ref")
    if not check(run([VFLOW, "run", TRAIN, "--run-dir", ref, "--set", "cache=" + cache] + COMMON, ref + ".out") == 0,
                 "training: %s" % tail(ref + ".out")):
        return None
    check(len(event_files(ref)) == 1, "training: event files %s" % event_files(ref))
    ea, tp = readers(tb_dir(ref), "training")
    for sc, reader in ((ea, "EventAccumulator"), (tp, "tbparse")):
        what = "training (%s)" % reader
        seen = check_training(sc, ref, what, STEPS) | check_stage_tags(sc, ref, what)
        check(set(sc) == seen, "%s: tags nobody checked: %s" % (what, sorted(set(sc) - seen)))
    print("training: %d tags, %d train/loss points, both readers equal metrics.jsonl"
          % (len(ea), len(ea.get("train/loss", []))), flush=True)
    return {s: v for s, v, _ in ea.get("train/loss", [])}


def steps_done(run_dir):
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return sum('"event":"train_step"' in line for line in f)
    except OSError:
        return 0


def kill_resume(tmp, cache, ref_loss):
    kd, trace = os.path.join(tmp, "kill"), os.path.join(tmp, "trace")
    env = dict(ENV, VFLOW_TRACE_SPAWN=trace)
    args = [VFLOW, "run", TRAIN, "--run-dir", kd, "--set", "cache=" + cache] + COMMON
    with open(kd + ".out", "w") as out:
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    pid, t_end = None, time.time() + 120
    while time.time() < t_end and p.poll() is None:
        if pid is None and os.path.exists(trace):
            with open(trace) as f:
                for line in f:
                    w = line.split()
                    if len(w) >= 3 and w[2] == "stages=dit_1":
                        pid = int(w[0][4:])
        if pid is not None and steps_done(kd) >= 13 and os.path.isdir(os.path.join(kd, "ckpt", "step-10")):
            break
        time.sleep(0.01)
    if not check(pid is not None and p.poll() is None, "kill: the run ended before step 13: %s" % tail(kd + ".out")):
        p.wait()
        return
    os.kill(pid, signal.SIGKILL)
    rc = p.wait()
    check(rc != 0, "kill: the run succeeded although dit_1 was killed")
    ck = [int(d[5:]) for d in os.listdir(os.path.join(kd, "ckpt")) if d.startswith("step-") and "." not in d]
    killed = read_ea(tb_dir(kd)).get("train/loss", [])
    last = max((s for s, _, _ in killed), default=0)
    print("kill: dit_1 killed after step %d; checkpoints %s; the killed run's file has train/loss to step %d"
          % (steps_done(kd), sorted(ck), last), flush=True)
    check(last > max(ck, default=0), "kill: the killed run logged no step past its checkpoint (%d <= %s): "
          "the resume check below would prove nothing" % (last, ck))
    if not check(run(args + ["--resume"], kd + ".resume.out") == 0, "resume: %s" % tail(kd + ".resume.out")):
        return
    check(len(event_files(kd)) == 2, "resume: event files %s" % event_files(kd))
    nfails = len(FAILS)
    ea, tp = readers(tb_dir(kd), "resumed")
    for sc, reader in ((ea, "EventAccumulator"), (tp, "tbparse")):
        pts = sc.get("train/loss", [])
        steps = sorted(s for s, _, _ in pts)
        check(steps == list(range(1, STEPS + 1)), "resumed (%s): train/loss steps %s, want 1..%d once each"
              % (reader, steps, STEPS))
        bad = [(s, v, ref_loss.get(s)) for s, v, _ in pts if v != ref_loss.get(s)]
        check(not bad, "resumed (%s): train/loss differs from the uninterrupted run (step, got, want): %s"
              % (reader, bad[:3]))
        for tag, p in sc.items():
            check(one_per_step(p), "resumed (%s): %s has two points at one step" % (reader, tag))
        check_training(sc, kd, "resumed (%s)" % reader, STEPS)
    if len(FAILS) == nfails:
        print("resume: one train/loss point per step 1..%d in both readers, equal to the uninterrupted run" % STEPS,
              flush=True)


def precompute(tmp):
    vids = os.path.join(tmp, "videos")
    os.makedirs(vids)
    for i in range(6):
        subprocess.run([MKVIDEO, "-o", os.path.join(vids, "v%d.mp4" % i), "-n", "300", "-s", "96x64"],
                       check=True, capture_output=True)
    open(os.path.join(vids, "empty.mp4"), "w").close()
    pd = os.path.join(tmp, "pre")
    args = [VFLOW, "run", PRECOMPUTE, "--run-dir", pd, "--set", "source=%s/*.mp4" % vids, "--set",
            "cache=%s/pre.lmdb" % tmp, "--set", "size=32", "--set", "max_bad_fraction=0.5"]
    if not check(run(args, pd + ".out") == 0, "precompute: %s" % tail(pd + ".out")):
        return
    with open(os.path.join(pd, "quarantine.jsonl")) as f:
        quarantined = sum(1 for line in f if line.strip())
    # the cumulative clips the decode stages reported, after each of their rows
    last, sums = {}, {0}
    for r in rows(pd):
        if r.get("type") in ("stage", "final") and "clips" in r.get("gauges", {}):
            last[r["stage"]] = r["gauges"]["clips"]
            sums.add(sum(last.values()))
    ea, tp = readers(tb_dir(pd), "precompute")
    for sc, reader in ((ea, "EventAccumulator"), (tp, "tbparse")):
        what = "precompute (%s)" % reader
        seen = check_stage_tags(sc, pd, what) | {"data/clips_s", "data/quarantined"}
        check(set(sc) == seen, "%s: tags nobody checked: %s" % (what, sorted(set(sc) - seen)))
        q = sorted(sc.get("data/quarantined", []))
        check(q and q[-1][1] == quarantined and all(0 <= v <= quarantined for _, v, _ in q),
              "%s: data/quarantined %s, quarantine.jsonl has %d" % (what, [v for _, v, _ in q], quarantined))
        rate = sorted(sc.get("data/clips_s", []))
        if not check(len(rate) >= 1, "%s: no data/clips_s point (the run took < 2 s?)" % what):
            continue
        wall = {s: w for s, _, w in q}
        steps = sorted(wall)
        deltas = []
        for s, v, w in rate:
            prev = max((x for x in steps if x < s), default=None)
            if not check(prev is not None and math.isfinite(v) and v >= 0, "%s: data/clips_s %s at %d" % (what, v, s)):
                break
            d = v * (w - wall[prev])
            deltas.append(round(d))
            check(abs(d - round(d)) <= 0.05 + 0.01 * d, "%s: data/clips_s at step %d: %.4f clips in the "
                  "interval, not a whole number" % (what, s, d))
        ok = any(all(c0 + sum(deltas[:k + 1]) in sums for k in range(len(deltas))) for c0 in sums)
        check(ok and sum(deltas) > 0, "%s: clips per interval %s do not follow the decode rows' counts %s"
              % (what, deltas, sorted(sums)))
    print("precompute: %d tags; data/quarantined %d; clips per interval from data/clips_s match the rows"
          % (len(ea), quarantined), flush=True)


def model_flops(run_dir, recompute):
    """The step's model FLOPs from graph.json's model and latent shape, counted here."""
    with open(os.path.join(run_dir, "graph.json")) as f:
        g = json.load(f)
    st = [x for x in g["stages"] if x["kind"] == "dit" and x["params"]["stage"] == 0][0]
    m = st["params"]["model"]
    B, _, T, H, W = [t for p in st["ports"] if p["name"] == "batch" for t in p["tensors"]
                     if t["name"] == "latent"][0]["shape"]
    L = (T // m["patch"][0]) * (H // m["patch"][1]) * (W // m["patch"][2])
    d, f, Lt = m["dim"], m["ffn"], m["text_len"]
    attn = 4 * 2 * L * d * d + 2 * 2 * L * L * d
    cross = 2 * 2 * L * d * d + 2 * 2 * Lt * d * d + 2 * 2 * L * Lt * d
    mlp = 2 * 2 * L * d * f
    blk = attn + cross + mlp
    # recompute reruns the forward but the self-attention's scores and AV, whose output the
    # forward keeps (recompute_attention = false, the default)
    rerun = blk - 2 * 2 * L * L * d if recompute else 0
    return B * (3 * blk + rerun) * m["depth"]


def mfu_run(tmp, cache):
    """perf/mfu where the device's peak is known: VFLOW_PEAK_TFLOPS stands in for a GPU's."""
    d, peak = os.path.join(tmp, "mfu"), 1e-3
    env = dict(ENV, VFLOW_PEAK_TFLOPS=str(peak))
    args = [VFLOW, "run", TRAIN, "--run-dir", d, "--set", "cache=" + cache, "--set", "steps=6",
            "--set", "recompute=true"]
    if not check(run(args, d + ".out", env) == 0, "mfu: %s" % tail(d + ".out")):
        return
    want = {r["step"]: r for r in rows(d) if r.get("event") == "train_step"}
    flops = model_flops(d, True)
    for s, r in sorted(want.items()):
        exp = flops / r["step_s"] / (peak * 1e12)
        check("mfu" in r and abs(r["mfu"] - exp) <= 1e-3 * exp, "mfu: step %d row mfu %s, the formula gives %.6g"
              % (s, r.get("mfu"), exp))
    ea, tp = readers(tb_dir(d), "mfu")
    for sc, reader in ((ea, "EventAccumulator"), (tp, "tbparse")):
        pts = sc.get("perf/mfu", [])
        check(sorted(x for x, _, _ in pts) == sorted(want), "mfu (%s): perf/mfu steps %s" % (reader, pts))
        bad = [(x, v) for x, v, _ in pts if x in want and v != f32(want[x].get("mfu", -1))]
        check(not bad, "mfu (%s): perf/mfu differs from metrics.jsonl: %s" % (reader, bad[:3]))
    print("mfu: %d perf/mfu points equal the rows, which equal %.4g FLOP a step / step_s / peak"
          % (len(ea.get("perf/mfu", [])), flops), flush=True)


def switched_off(tmp, cache):
    for name, extra in (("off_param", ["--set", "tensorboard=false"]), ("off_flag", ["--no-tensorboard"])):
        d = os.path.join(tmp, name)
        rc = run([VFLOW, "run", TRAIN, "--run-dir", d, "--set", "cache=" + cache, "--set", "steps=2"] + extra,
                 d + ".out")
        check(rc == 0 and not os.path.exists(tb_dir(d)), "%s: rc %d, tb dir exists: %s"
              % (name, rc, os.path.exists(tb_dir(d))))


def main():
    for tool in (VFLOW, TRAIN_TOOL, MKVIDEO):
        if not os.access(tool, os.X_OK):
            print("FAIL: %s is not built" % tool)
            return 1
    tmp = tempfile.mkdtemp(prefix="vf_tb_")
    try:
        cache = os.path.join(tmp, "cache.lmdb")
        subprocess.run([TRAIN_TOOL, "mkcache", cache, "32", "4", "1", "8", "8", "7"], check=True, capture_output=True)
        ref_loss = training(tmp, cache)
        if ref_loss:
            kill_resume(tmp, cache, ref_loss)
        mfu_run(tmp, cache)
        precompute(tmp)
        switched_off(tmp, cache)
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
