"""`vflow plan` against what runs hold: for several configurations of a precompute
pipeline (synthetic clips -> vae_encode -> latent_cache) and of training (latent_reader ->
dit partitions in 1F1B -> adamw shards -> checkpoint; LoRA, with and without block swap; a full
fine-tune with block swap; activation offload; sequence parallelism sp = 1 against 2), run
the real binary, read the
plan the run wrote (<run dir>/plan.json: each stage's predicted account peak) and the
measured peaks (metrics.jsonl "final" rows), and compare per stage:
  - never above the plan: measured <= plan x 1.10 (the plan is a bound), every stage;
  - tight: measured >= plan x 0.90: every hook declares exactly what its stage allocates
    (LOOSE, PAIRED and LOOSE_RUNS name the exceptions and why).
Also: a budget below the plan is refused (exit 2, one line on stderr, nothing launched,
the plan with its fixes on stdout); a budget above it runs; `plan` accepts a CUDA
device this machine lacks while `run` refuses it; `run` prints plan vs measured.
vflow-test: labels=integration timeout=600
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(os.environ.get("VFLOW_BUILD", "build"), "vflow")
BUILD = os.environ.get("VFLOW_BUILD") or os.path.dirname(VFLOW)
SRC = os.environ.get("VFLOW_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(BUILD, "tools", "train_tool")
FAILS = []
SLACK = 4096

# Every stage is held to 0.9 <= measured / plan <= 1.1, except these (why, each):
# Stage kinds whose measured peak is not a deterministic function of the configuration.
LOOSE = {
    "latent_reader": "its key list, batch being filled, decoded record and the batch held while sent are not "
                     "always alive at once: 0.67-0.95 of their sum, by timing",
    # A ZeroMQ edge sends large tensors from the item's own memory: the sender holds the
    # item until ZeroMQ has written it, and the plan counts it once more ("held while
    # sent") because a stage may build its next item meanwhile (synthetic, dit do).
    "adamw": "what ZeroMQ holds while it sends adamw's snapshot is the snapshot staging its hook declares, and "
             "it builds no next one before it is written, so the plan's held-while-sent line of the snap port "
             "is never alive beside it: 0.665 of the plan (0.99 with LoRA's small snapshots), a bound",
}
# Stage kinds whose account the plan splits differently from the runtime, held together
# with the named partner instead: vae_encode's hook declares the micro-batch of clips it
# receives as its own ("vae micro-batch clips", not an "input ..." entry), so on an
# in-process edge the plan charges them to vae_encode while the runtime charges them to
# synthetic, which allocated them; the two accounts' sum is what both predict (measured
# 1.000 of it in process). Over ipc (pre-c) synthetic holds the clip it builds and the
# ones ZeroMQ is still sending from its pool (the plan: one held while sent); the sum is
# 1.01 there.
PAIRED = {"synthetic": "vae_encode"}
# (run, stage kind) pairs whose peak is a matter of timing: none. (A dit partition lends
# its weights and gradients to the shards, so what it holds does not depend on when the
# shards take them.)
LOOSE_RUNS = {}


PRECOMPUTE = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "pre"
local T, S = a.frames or 9, a.size or 64
local src = p:stage("synthetic", { shape = {T, S, S, 3}, dtype = "u8", tensor = "frames",
                                   count = a.count or 8 })
local vae = p:stage("vae_encode", { model = vf.models.vae "tiny", micro_batch = a.mb or 2,
                                    chunk = a.chunk or 4 })
local cache = p:stage("latent_cache", { path = a.cache, key = "id", commit_every = a.commit or 4 })
p:connect(src, vae, { capacity = a.cap or 4, transport = a.tr or "auto" })
p:connect(vae, cache, { capacity = a.cap2 or 4 })
return p
"""


def sanitized():
    """ASan keeps freed memory resident on purpose (its quarantine): RSS says nothing there."""
    r = subprocess.run(["ldd", VFLOW], capture_output=True, text=True)
    return "libasan" in r.stdout or "libtsan" in r.stdout


ASAN = sanitized()


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("CHECK FAILED: " + msg, flush=True)
    return cond


def vflow(args, cwd, timeout=240):
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    return subprocess.run([VFLOW] + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def final_peaks(run_dir):
    peaks = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "final":
                peaks[r["stage"]] = (r["kind"], r["peak"])
    return peaks


def compare(name, run_dir, out):
    with open(os.path.join(run_dir, "plan.json")) as f:
        plan = json.load(f)
    peaks = final_peaks(run_dir)
    check("plan vs measured" in out, "%s: run prints plan vs measured" % name)
    rows = []
    by_kind = {}
    for s in plan["stages"]:
        kind, peak = peaks.get(s["name"], (s["kind"], None))
        want = s["account"]
        if not check(peak is not None and want > 0, "%s: %s has a final row and a plan" % (name, s["name"])):
            continue
        by_kind.setdefault(kind, []).append((want, peak))
        ratio = peak / want
        why = LOOSE.get(kind) or LOOSE_RUNS.get((name, kind))
        if kind in PAIRED:
            why = "held with " + PAIRED[kind]
        rows.append((s["name"], kind, want, peak, ratio, why))
        if kind in PAIRED:
            continue
        # +-10%, and a few KiB either way for accounts of a few KiB (whether one small
        # record is still being sent when the next is built is a matter of timing)
        check(peak <= 1.10 * want + SLACK, "%s: %s measured %d > 1.1 x plan %d" % (name, s["name"], peak, want))
        if not why:
            check(peak >= 0.90 * want - SLACK, "%s: %s measured %d < 0.9 x plan %d" % (name, s["name"], peak, want))
    for kind, partner in PAIRED.items():
        if kind in by_kind and partner in by_kind:
            want = sum(w for w, _ in by_kind[kind] + by_kind[partner])
            peak = sum(p for _, p in by_kind[kind] + by_kind[partner])
            print("  %-8s %s + %s: plan %d measured %d ratio %.3f" % (name, kind, partner, want, peak, peak / want))
            check(0.90 * want - SLACK <= peak <= 1.10 * want + SLACK,
                  "%s: %s + %s measured %d not within 10%% of plan %d" % (name, kind, partner, peak, want))
    # each worker process: its resident peak within its plan (+ the shared code, which
    # RSS counts in every process)
    rss = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "final" and r.get("rss_peak", -1) > 0:
                rss[r["worker"]] = r["rss_peak"]
    shared = next(x["bytes"] for x in plan["lines"] if x["what"].startswith("code and libraries"))
    for w in plan["workers"]:
        want = w["totals"].get("cpu", 0) + shared
        got = rss.get(w["name"])
        if got is None or ASAN:  # the driver samples /proc: a short-lived worker may have none
            print("  %-8s worker %-18s (RSS not checked)" % (name, w["name"]))
        else:
            print("  %-8s worker %-18s plan+code %10d rss peak %10d ratio %.3f" % (name, w["name"], want, got, got / want))
            # 1.15, not 1.10: items under VF_ALLOC_BIG come from malloc, whose heap keeps
            # what they churn through (glibc raises its mmap threshold after the first
            # free), and runtime/plan/plan.c counts a reuse cache only for big blocks; measured
            # 1.04-1.11 for the precompute worker of 204 KiB clips (pre-b), and 1.16 once
            # on a loaded CI machine: that retention is a few MiB whatever the plan, so the
            # bound also allows a fixed 4 MiB. An undeclared buffer of the item sizes these
            # configs use (MiBs per clip, x micro-batch) still breaks it.
            slack = 4 << 20
            check(got <= 1.15 * want + slack, "%s: worker %s RSS peak %d over 1.15 x its plan %d + 4 MiB" % (name, w["name"], got, want))
    for r in rows:
        print("  %-8s %-14s %-14s plan %10d measured %10d ratio %.3f%s" %
              ((name,) + r[:5] + ("" if not r[5] else "  (" + r[5] + ")",)))


def precompute(tmp, name, sets):
    script = os.path.join(tmp, "pre.lua")
    with open(script, "w") as f:
        f.write(PRECOMPUTE)
    run_dir = os.path.join(tmp, "run-" + name)
    cache = os.path.join(tmp, "cache-" + name)
    args = ["run", script, "--run-dir", run_dir, "--set", "cache=" + cache]
    for s in sets:
        args += ["--set", s]
    r = vflow(args, tmp)
    if check(r.returncode == 0, "%s: run exit %d\n%s\n%s" % (name, r.returncode, r.stdout[-2000:], r.stderr[-2000:])):
        compare(name, run_dir, r.stdout)
    return r


def train(tmp, cache, name, sets):
    run_dir = os.path.join(tmp, "run-" + name)
    args = ["run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", run_dir,
            "--set", "cache=" + cache, "--set", "steps=6", "--set", "every=3"]
    for s in sets:
        args += ["--set", s]
    r = vflow(args, tmp)
    if check(r.returncode == 0, "%s: run exit %d\n%s\n%s" % (name, r.returncode, r.stdout[-2000:], r.stderr[-2000:])):
        compare(name, run_dir, r.stdout)
        return run_dir
    return None


def sequence_parallel(tmp, cache):
    """sp = 2 against sp = 1 (16 tokens a sample, 6 heads, 8 caption tokens): each rank's
    measured peak within 10 % of its plan (compare), and a rank holding its 8 tokens: its
    planned activations at most 0.6 of one rank's over all 16 (the saved stores'
    per-token tensors halve; the caption's keys and values and the time embedding do
    not: 0.54-0.56), its measured peak below one rank's. A rank that allocated for whole
    sequences plans and holds at least one rank's. The activation item a rank sends is
    its tokens' x and target (the declared item bytes), the last partition plans nothing
    whole and the first only its patchify of the whole clips."""
    common = ["stages=2", "micro_batches=2", "shards=1", "dim=96", "heads=6", "head_dim=16", "text_len=8"]
    runs = {n: train(tmp, cache, "train-sp%d" % n, common + ["sp=%d" % n]) for n in (1, 2)}
    if not runs[1] or not runs[2]:
        return
    plans, peaks = {}, {}
    for n, run_dir in runs.items():
        with open(os.path.join(run_dir, "plan.json")) as f:
            plans[n] = json.load(f)
        peaks[n] = final_peaks(run_dir)
    for q in (0, 1):
        one, rank = "dit_%d" % q, "dit_%d_s0" % q
        acts = {n: sum(x["bytes"] for x in plans[n]["lines"] if x.get("stage") == (one if n == 1 else rank)
                       and x["category"] == "activations") for n in (1, 2)}
        check(0 < acts[2] <= 0.6 * acts[1], "sp=2 %s: planned activations %d, one rank's %d: not divided by 2" %
              (rank, acts[2], acts[1]))
        check(peaks[2][rank][1] < peaks[1][one][1], "sp=2 %s: measured peak %d, not below one rank's %d" %
              (rank, peaks[2][rank][1], peaks[1][one][1]))
        print("  sp: partition %d: activations planned %d (sp=1) -> %d (sp=2 rank); measured peak %d -> %d" %
              (q, acts[1], acts[2], peaks[1][one][1], peaks[2][rank][1]))
    # the activation item a rank sends holds its tokens' x and target: against one rank's,
    # B = 2 samples of 8 tokens fewer, dim 96 + z·patch 16 f32 values a token each
    items = {n: [e["item_bytes"] for e in plans[n]["edges"] if e["src"] == ("dit_0" if n == 1 else "dit_0_s0") +
                 ".act_out"] for n in (1, 2)}
    if check(len(items[1]) == 1 and len(items[2]) == 1, "sp: the act_out edges %r" % items):
        drop, want = items[1][0] - items[2][0], 4 * 2 * 8 * (96 + 16)
        check(want <= drop <= want + 64, "sp=2: a rank's activation item is %d bytes below one rank's, its tokens' x "
              "and target %d" % (drop, want))
        print("  sp: activation item %d (sp=1) -> %d (sp=2 rank)" % (items[1][0], items[2][0]))
    # the last partition takes the targets as the rank's rows: nothing whole there; the
    # first embeds its tokens' patches, and stages whole only the clips' patchify (its
    # output and staging: 2 samples of 16 tokens of 16 f32 values each)
    whole = {q: [(x["what"], x["bytes"]) for x in plans[2]["lines"] if x.get("stage") == "dit_%d_s0" % q and
                 "whole" in x["what"]] for q in (0, 1)}
    check(not whole[1], "sp=2 dit_1_s0 plans whole sequences: %r" % whole[1])
    check(whole[0] == [("sequence parallel: whole clips' patchify (first partition)", 2 * 4 * 2 * 16 * 16)],
          "sp=2 dit_0_s0: whole sequences %r, not the clips' patchify" % whole[0])


def budgets(tmp):
    script = os.path.join(tmp, "pre.lua")
    cache = os.path.join(tmp, "cache-budget")
    base = ["--set", "cache=" + cache, "--set", "frames=17", "--set", "size=64"]
    r = vflow(["plan", script, "--json"] + base, tmp)
    check(r.returncode == 0, "plan --json exit %d: %s" % (r.returncode, r.stderr))
    plan = json.loads(r.stdout)
    total = plan["totals"]["cpu"]
    check(plan["fits"] and plan["devices"][0]["budget_source"] == "MemTotal",
          "plan without --budget is checked against MemTotal: %r" % plan["devices"][0])
    # the lines add up to the totals, by device and by category
    check(sum(x["bytes"] for x in plan["lines"] if x["device"] == "cpu") == total, "lines add up to the cpu total")
    check(sum(plan["devices"][0]["categories"].values()) == total, "categories add up to the cpu total")

    # below the plan: refused, one line on stderr, the fixes on stdout, nothing launched
    below = "cpu=%dB" % (total - (1 << 20))
    run_dir = os.path.join(tmp, "run-below")
    r = vflow(["run", script, "--run-dir", run_dir, "--budget", below] + base, tmp)
    check(r.returncode == 2, "run over budget: exit 2, got %d" % r.returncode)
    check(re.fullmatch(r"vflow: .*pre\.lua: the plan needs [0-9.]+ MiB on cpu, over the budget of [0-9.]+ MiB "
                       r"\(see `vflow plan`; --force runs anyway\)\n", r.stderr) is not None,
          "one-line refusal on stderr: %r" % r.stderr)
    check(not os.path.exists(run_dir), "nothing launched (no run dir)")
    check("fixes (each re-planned" in r.stdout and re.search(r"^  (chunk|micro_batch|capacity|combined)\s+fits ",
                                                             r.stdout, re.M) is not None,
          "the refusal lists fixes that fit:\n%s" % r.stdout[-3000:])
    # the same message from plan, and the fixes' totals are real re-plans
    rp = vflow(["plan", script, "--json", "--budget", below] + base, tmp)
    check(rp.returncode == 2 and rp.stderr == r.stderr, "plan refuses with the same message: %r" % rp.stderr)
    fixes = json.loads(rp.stdout)["fixes"]
    check(any(f["fits"] for f in fixes), "a fix fits: %r" % fixes)
    for f in fixes:
        if f["knob"] in ("chunk", "micro_batch") and f["change"].startswith("--set "):
            sets = f["change"].replace("--set ", "").split()
            args = ["plan", script, "--json"] + base
            for s in sets:
                args += ["--set", s]
            again = json.loads(vflow(args, tmp).stdout)
            check(again["totals"]["cpu"] == f["totals"]["cpu"],
                  "fix %s: predicted %d == plan of the changed script %d" %
                  (f["change"], f["totals"]["cpu"], again["totals"]["cpu"]))
            print("fix %-12s %-40s cpu %d (fits: %s)" % (f["knob"], f["change"], f["totals"]["cpu"], f["fits"]))
    # --force runs anyway, with a warning
    r = vflow(["run", script, "--run-dir", os.path.join(tmp, "run-force"), "--budget", below, "--force"] + base, tmp)
    check(r.returncode == 0 and "warning (--force)" in r.stderr, "--force runs: %d %r" % (r.returncode, r.stderr))
    # above the plan: runs
    above = "cpu=%dB" % (total + (1 << 20))
    shutil.rmtree(cache, ignore_errors=True)
    r = vflow(["run", script, "--run-dir", os.path.join(tmp, "run-above"), "--budget", above] + base, tmp)
    check(r.returncode == 0, "run within budget: exit %d %s" % (r.returncode, r.stderr[-500:]))
    print("budget: plan %d bytes; %s refused, %s ran" % (total, below, above))


def devices(tmp):
    script = os.path.join(tmp, "gpu.lua")
    with open(script, "w") as f:
        f.write(PRECOMPUTE.replace('chunk = a.chunk or 4 }', 'chunk = a.chunk or 4, device = "cuda:7" }'))
    r = vflow(["plan", script, "--budget", "cuda=80GiB", "--set", "cache=" + os.path.join(tmp, "c")], tmp)
    check(r.returncode == 0 and "cuda:7" in r.stdout, "plan accepts an absent cuda:7: %d %r" % (r.returncode, r.stderr))
    run_dir = os.path.join(tmp, "run-gpu")
    r = vflow(["run", script, "--run-dir", run_dir, "--set", "cache=" + os.path.join(tmp, "c")], tmp)
    n = r.stderr.count("\n")
    check(r.returncode == 2 and n == 1 and "runs on cuda:7, but this machine has" in r.stderr and
          not os.path.exists(run_dir), "run refuses the absent device: %d %r" % (r.returncode, r.stderr))


def main():
    tmp = tempfile.mkdtemp(prefix="vf_plan_")
    try:
        # precompute: micro-batch, chunk, capacity, transport between source and encoder
        precompute(tmp, "pre-a", ["mb=2", "chunk=4", "cap=4"])
        precompute(tmp, "pre-b", ["mb=1", "chunk=1", "cap=1", "frames=17"])
        precompute(tmp, "pre-c", ["mb=4", "chunk=8", "cap=2", "frames=17", "size=96", "tr=ipc", "count=12"])
        # training: partitions P, micro-batches M, recompute, shards S, LoRA
        cache = os.path.join(tmp, "latents")
        r = subprocess.run([TOOL, "mkcache", cache, "32", "4", "1", "8", "8", "7"], capture_output=True, text=True)
        if check(r.returncode == 0, "train_tool mkcache: %s" % r.stderr):
            train(tmp, cache, "train-a", ["stages=2", "micro_batches=2", "shards=1"])
            train(tmp, cache, "train-b", ["stages=3", "micro_batches=4", "recompute=true", "shards=2"])
            train(tmp, cache, "train-c", ["stages=1", "micro_batches=1", "shards=3"])
            # LoRA: the frozen base, the adapters and their scratch in the partitions,
            # the adapters' slices in the shards
            train(tmp, cache, "train-lora", ["stages=2", "micro_batches=2", "shards=2", "lora_rank=4"])
            # block swap: the partitions' base split into resident blocks, the ring and the
            # host copy of the swapped ones, each as declared
            train(tmp, cache, "train-swap", ["stages=2", "micro_batches=2", "shards=1", "lora_rank=4", "depth=6",
                                             "swap_blocks=2", "recompute=true"])
            # block swap in a full fine-tune: the resident weights and gradients, the ring of
            # both and the swapped blocks' host copies of both (lent to the shards)
            train(tmp, cache, "train-swap-full", ["stages=2", "micro_batches=2", "shards=2", "depth=6",
                                                  "swap_blocks=2", "recompute=true"])
            # activation offload: the saved stores without the offloaded block inputs, the
            # ring of three records and the pinned host store per micro-batch in flight
            train(tmp, cache, "train-offload", ["stages=2", "micro_batches=2", "shards=1", "depth=6",
                                                "recompute=true", "offload_activations=true"])
            # sequence parallelism: a rank's partition, saved stores and x items for its tokens
            sequence_parallel(tmp, cache)
        budgets(tmp)
        devices(tmp)
    finally:
        if FAILS:
            print("(kept %s)" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
