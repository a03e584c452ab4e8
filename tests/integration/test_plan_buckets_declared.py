"""Admission of buckets declared on the reader (its `buckets`), before the cache exists,
against the same buckets named by a cache's summary.

pipelines/train_buckets.lua, three buckets 64x64x17 (batch 2), 128x128x17 (batch 4) and
256x256x33 (batch 8), each way of declaring them: in the script, with --set
'latent_reader.buckets=[...]' (no cache in either), and a cache whose summary names them
(train_tool mkbucket, no declaration):
  - the reference, with no admission in it: each bucket planned alone with its batch
    declared (only=<bucket>, the batch in `buckets`), the `small` model;
  - a budget between the 256x256x33 peaks at batches 4 and 5: refused without admission
    (exit 2, naming it); with admission = "shrink" exit 0, one line "batch 8 -> 4" (the
    largest batch whose reference peak is within the budget), the table holds it at
    batch 4 with the reference's peak, and (declared) the whole plan is the plan of the
    buckets declared with batch 4;
  - a budget below its reference peak at every batch and above the two others': left
    out, exit 0, the table and the whole plan without it (declared: the plan of the two
    others declared alone); the same line from every source;
  - a budget below every bucket: exit 2, "left every bucket out"; a `shrink` that names a
    bucket the declared list lacks, or raises a batch: exit 2 naming it;
  - `vflow run` (the tiny model, a cache of the three geometries, the buckets declared
    in the script) with a budget that leaves 256x256x33 out: exit 0, every train step is a
    batch of one of the two others (samples x tokens per sample), both seen, and the
    reader's epoch (its cursor in the checkpoint) holds their batches only.
vflow-test: labels=integration timeout=600
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_plan_measured as tpm  # noqa: E402  (the binary, the tools, check())

PIPE = os.path.join(tpm.SRC, "pipelines", "train_buckets.lua")
BUCKETS = [("64x64x17", 2), ("128x128x17", 4), ("256x256x33", 8)]
BIG = "256x256x33"
check = tpm.check


def decl_json(buckets):
    return "[" + ",".join('{"w":%s,"h":%s,"frames":[%s],"batch":%d}' % (tuple(n.split("x")) + (b,))
                          for n, b in buckets) + "]"


def decl_lua(buckets):
    return "{ " + ", ".join("{ w = %s, h = %s, frames = {%s}, batch = %d }" % (tuple(n.split("x")) + (b,))
                            for n, b in buckets) + " }"


def script_with(tmp, name, buckets):
    """train_buckets.lua with the buckets declared on its reader."""
    text = open(PIPE).read()
    at = '  only = a.only or "",\n'
    check(text.count(at) == 1, "train_buckets.lua sets the reader's `only` once")
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text.replace(at, at + "  buckets = %s,\n" % decl_lua(buckets)))
    return path


def plan(tmp, script, args):
    """`vflow plan --json`: (exit code, the plan or None, the admission lines, stderr)."""
    r = tpm.vflow(["plan", script, "--json"] + args, tmp)
    try:
        p = json.loads(r.stdout)
    except ValueError:
        p = None
    return r.returncode, p, [l for l in r.stderr.splitlines() if l.startswith("admission:")], r.stderr


def table(p):
    """bucket -> (batch, cpu peak) of the plan's buckets table."""
    out = {}
    for b in (p or {}).get("buckets", []):
        cpu = next(d for d in b["devices"] if d["device"] == "cpu")
        out[b["bucket"]] = (int(b["batch_latent"].split(",")[0]), cpu["peak"])
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="vf_plan_declared_")
    try:
        nocache = ["--set", "model=small", "--set", "cache=" + os.path.join(tmp, "none.lmdb")]
        cache = os.path.join(tmp, "small.lmdb")
        for (name, batch), (n, first) in zip(BUCKETS, [(4, 0), (8, 100), (8, 200)]):
            w, h, f = name.split("x")
            r = subprocess.run([tpm.TOOL, "mkbucket", cache, str(n), "16", w, h, f, str(batch), str(first)],
                               capture_output=True, text=True)
            check(r.returncode == 0, "mkbucket %s: %s" % (name, r.stderr))
        sources = {
            "script": (script_with(tmp, "declared.lua", BUCKETS), nocache),
            "--set": (PIPE, nocache + ["--set", "latent_reader.buckets=" + decl_json(BUCKETS)]),
            "summary": (PIPE, ["--set", "model=small", "--set", "cache=" + cache]),
        }

        # the reference: each bucket alone at a declared batch, no admission
        def ref(name, b):
            rc, p, _, err = plan(tmp, PIPE, nocache + ["--set", "latent_reader.buckets=" + decl_json([(name, b)])])
            return p["totals"]["cpu"] if rc == 0 and p else None  # a batch that does not plan: None

        big = {b: ref(BIG, b) for b in range(1, 9)}
        others = max(ref(n, b) for n, b in BUCKETS[:2])
        planned = sorted(b for b in big if big[b] is not None)
        print("reference peaks of %s by batch: %s; the others' worst %d" % (BIG, big, others))
        check(planned and planned[-1] == 8 and all(big[a] <= big[b] for a, b in zip(planned, planned[1:])),
              "%s: peaks grow with the batch: %s" % (BIG, big))
        check(others < big[planned[0]], "the others need less than %s at its smallest batch" % BIG)
        shrink = ["--set", "admission=shrink"]

        # a budget that fits 256x256x33 at batch 4, not 5
        budget = ["--budget", "cpu=%dB" % ((big[4] + big[5]) // 2)]
        want = max(b for b in planned if big[b] <= (big[4] + big[5]) // 2)
        check(want == 4, "the largest batch within the budget is 4: %d" % want)
        whole = plan(tmp, PIPE, nocache + ["--set", "latent_reader.buckets=" +
                                           decl_json(BUCKETS[:2] + [(BIG, want)])] + budget)[1]
        for src, (script, args) in sources.items():
            rc, p, adm, err = plan(tmp, script, args + budget)
            check(rc == 2 and BIG in err and "over the budget" in err,
                  "%s: refused naming %s without admission: %d %r" % (src, BIG, rc, err[-300:]))
            rc, p, adm, err = plan(tmp, script, args + budget + shrink)
            t = table(p)
            print("%-8s 4 of 5: exit %d %s %s" % (src, rc, adm, t))
            check(rc == 0 and len(adm) == 1 and re.match(r"admission: bucket 256x256x33 of 'latent_reader': batch 8 -> "
                                                         r"%d, the largest that fits \(needs " % want, adm[0]),
                  "%s: shrunk to batch %d, exit 0: %d %r %r" % (src, want, rc, adm, err[-300:]))
            check(sorted(t) == sorted(n for n, _ in BUCKETS) and t.get(BIG, (0, 0))[0] == want,
                  "%s: the table holds %s at batch %d: %s" % (src, BIG, want, t))
            if src != "summary":  # the cache's key lists add a few bytes to the peaks
                check(t.get(BIG, (0, 0))[1] == big[want], "%s: %s's peak is the reference's at batch %d: %s vs %d" %
                      (src, BIG, want, t.get(BIG), big[want]))
                check(whole is not None and p is not None and p["totals"] == whole["totals"],
                      "%s: the plan is the plan of %s declared at batch %d: %s vs %s" %
                      (src, BIG, want, p and p["totals"], whole and whole["totals"]))

        # a budget it fits at no batch: left out, not in the verdict
        cut = (others + big[planned[0]]) // 2
        budget = ["--budget", "cpu=%dB" % cut]
        whole = plan(tmp, PIPE, nocache + ["--set", "latent_reader.buckets=" + decl_json(BUCKETS[:2])] + budget)[1]
        for src, (script, args) in sources.items():
            rc, p, adm, err = plan(tmp, script, args + budget + shrink)
            t = table(p)
            print("%-8s none:     exit %d %s %s" % (src, rc, adm, t))
            check(rc == 0 and len(adm) == 1 and re.match(r"admission: bucket 256x256x33 of 'latent_reader' left out: "
                                                         r"even a batch of %d needs " % planned[0], adm[0]),
                  "%s: left out, exit 0: %d %r %r" % (src, rc, adm, err[-300:]))
            check(sorted(t) == sorted(n for n, _ in BUCKETS[:2]) and all(pk <= cut for _, pk in t.values()),
                  "%s: the table without %s, the others within the budget: %s" % (src, BIG, t))
            check(p is not None and p["totals"]["cpu"] <= cut, "%s: the plan fits: %s" % (src, p and p["totals"]))
            if src != "summary":
                check(p is not None and whole is not None and p["totals"] == whole["totals"],
                      "%s: the plan is the plan of the two others: %s vs %s" %
                      (src, p and p["totals"], whole and whole["totals"]))
            rc, p, adm, err = plan(tmp, script, args + ["--budget", "cpu=%dB" % (others // 4)] + shrink)
            rest = [l for l in err.splitlines() if not l.startswith("admission:")]
            check(rc == 2 and len(adm) == 3 and len(rest) == 1 and "left every bucket out" in rest[0],
                  "%s: nothing fits: exit 2, one line: %d %r" % (src, rc, err))

        # the planner's decision names a bucket the declared list lacks, or raises a batch: exit 2
        for src in ("script", "--set"):
            script, args = sources[src]
            for pair, what in [("96x96x17:1", "shrink names bucket 96x96x17, which the declared list lacks"),
                               ("64x64x17:3", "shrink raises bucket 64x64x17's batch 2 to 3")]:
                rc, _, _, err = plan(tmp, script, args + ["--set", 'latent_reader.shrink=["%s"]' % pair])
                check(rc == 2 and err.count("\n") == 1 and what in err, "%s: shrink %s: exit 2 (%s): %d %r" %
                      (src, pair, what, rc, err))

        # the run: the tiny model over a cache of the three geometries, declared in the script
        tiny = os.path.join(tmp, "tiny.lmdb")
        for (name, batch), (n, first) in zip(BUCKETS, [(4, 0), (8, 100), (8, 200)]):
            w, h, f = name.split("x")
            subprocess.run([tpm.TOOL, "mkbucket", tiny, str(n), "4", w, h, f, str(batch), str(first)],
                           capture_output=True, check=True)
        script = script_with(tmp, "declared_tiny.lua", BUCKETS)
        base = ["--set", "cache=" + tiny, "--set", "steps=6", "--set", "every=3"]
        rc, p, _, err = plan(tmp, script, base)
        t = table(p)
        check(rc == 0 and sorted(t) == sorted(n for n, _ in BUCKETS), "tiny: the plan of the three: %d %s" % (rc, t))
        rc, p2, _, _ = plan(tmp, script, base + ["--set", 'latent_reader.shrink=["%s:2"]' % BIG,
                                                 "--set", "latent_reader.only=" + BIG])
        if rc == 0 and t and p2:
            cut = (max(t[n][1] for n, _ in BUCKETS[:2]) + p2["totals"]["cpu"]) // 2
            run_dir = os.path.join(tmp, "run-out")
            rr = tpm.vflow(["run", script, "--run-dir", run_dir, "--budget", "cpu=%dB" % cut] + shrink + base, tmp)
            if check(rr.returncode == 0 and "admission: bucket 256x256x33 of 'latent_reader' left out" in rr.stdout,
                     "run leaves %s out: %d %r" % (BIG, rr.returncode, rr.stderr[-800:])):
                rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
                steps = [r for r in rows if r.get("event") == "train_step"]
                per = {(round(r["samples_s"] * r["step_s"]), round(r["tokens_s"] / r["samples_s"])) for r in steps}
                print("run: %d steps, (samples, tokens per sample): %s" % (len(steps), sorted(per)))
                # tokens per sample: (F-1)/4+1 frames x (H/16) x (W/16) patches
                check(len(steps) == 6 and per == {(2, 80), (4, 320)},
                      "every step a batch of the two others, none of %s: %s" % (BIG, per))
                # an epoch is 4/2 + 8/4 batches, none of 256x256x33's: after 6 the 3rd of the 2nd
                state = json.load(open(os.path.join(run_dir, "ckpt", "step-6", "state.json")))
                check(";epoch=1;batch=2;" in ";" + state["cursors"][0],
                      "the reader's schedule holds the two others' batches only: cursor %s" % state["cursors"])
        else:
            check(False, "tiny: the plans for the run's budget: %d %r" % (rc, err[-300:]))
    finally:
        if not tpm.FAILS:
            shutil.rmtree(tmp, ignore_errors=True)
    if tpm.FAILS:
        print("%d check(s) failed (kept %s)" % (len(tpm.FAILS), tmp))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
