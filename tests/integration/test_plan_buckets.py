"""`vflow plan` per bucket against what runs hold, and admission of buckets.

A bucketed cache of three buckets of different token counts (16, 64 and 192 tokens per
sample at batches 4, 2 and 2; train_tool mkbucket) trained by pipelines/train_dit.lua:
  - `vflow plan --json` lists each bucket with its peak, activations (and with recompute
    flipped: equal to the plan with recompute=true), edges and items per device; the
    activations grow with the bucket's B·L; each bucket's figures are the
    plan of the script with latent_reader.only=<bucket>; the run's peak (all buckets,
    buffers sized once for the largest) is at least the worst bucket's and within 10 %
    of it; the text output has the table;
  - each bucket run alone (latent_reader.only=<bucket>): every stage's measured peak
    within 10 % of its plan, as tests/integration/test_plan_measured.py holds them;
  - a budget between the smaller buckets' peaks and the largest one's: `vflow plan` and
    `vflow run` exit 2 with one line naming the bucket, its need, the budget and the
    fixes, nothing launched; --force runs;
  - admission = "shrink": a budget that fits the large bucket at batch 4 of 8 lowers it
    to 4 (one line, and the run starts and trains those batches); a budget below its
    smallest batch leaves it out and the run trains the other bucket only;
  - bad buckets (exit 2 naming the bucket): a size the patch does not divide (8·patch),
    frames not 1 + 4k, batch 0, a declared bucket the cache lacks;
  - planned for cuda:0, each DiT partition counts the cuDNN attention workspace of the
    bucket whose micro-batch needs the most (B·L², not the largest B with the largest L).
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
import test_plan_measured as tpm  # noqa: E402  (its compare(): plan vs measured per stage)

SRC = tpm.SRC
PIPE = os.path.join(SRC, "pipelines", "train_dit.lua")
BUCKETS = [("64x64x1", 4, 0), ("128x64x5", 2, 100), ("128x128x9", 2, 200)]  # 16, 64, 192 tokens
check = tpm.check


def attn_ws(B, Lq, Lk, H):
    """cuDNN's deterministic Hopper backward keeps the bf16 score gradient of every (query,
    key) pair: in 128-row tiles, plus two f32 per query row and 16 MiB (kernels/ops.h)."""
    tq, tk = -(-Lq // 128) * 128, -(-Lk // 128) * 128
    return B * H * tq * tk * 2 + B * H * tq * 8 + (16 << 20)


def cudnn_workspace(tmp, base):
    """On a GPU the dit stage counts the cuDNN attention workspace of its largest
    micro-batch shape, bucket by bucket (the tiny preset: 4 heads, 32 caption tokens; the
    micro-batches: 2 x 16, 1 x 64, 1 x 192 tokens), not of the largest B with the largest L."""
    r = tpm.vflow(["plan", PIPE, "--json", "--set", "device=cuda:0"] + base, tmp)
    check(r.returncode == 0, "plan on cuda:0: exit %d %s" % (r.returncode, r.stderr))
    lines = [x for x in json.loads(r.stdout)["lines"] if x["what"] == "cuDNN attention workspace (bound)"]
    want = max(max(attn_ws(B, L, L, 4), attn_ws(B, L, 32, 4)) for B, L in ((2, 16), (1, 64), (1, 192)))
    got = {x["stage"]: x["bytes"] for x in lines if x["device"] == "cuda:0"}
    print("cuDNN attention workspace on cuda:0: %s (want %d per partition)" % (got, want))
    check(sorted(got) == ["dit_0", "dit_1"] and all(v == want for v in got.values()),
          "each partition counts the largest bucket's cuDNN workspace %d: %s" % (want, got))
    check(want < attn_ws(2, 192, 192, 4), "the buckets' largest B and L together would be more")
    cpu = tpm.vflow(["plan", PIPE, "--json"] + base, tmp)
    check(not any(x["what"].startswith("cuDNN") for x in json.loads(cpu.stdout)["lines"]),
          "no cuDNN workspace on the CPU")


def main():
    tmp = tempfile.mkdtemp(prefix="vf_plan_buckets_")
    try:
        cache = os.path.join(tmp, "cache")
        for name, batch, first in BUCKETS:
            w, h, f = name.split("x")
            r = subprocess.run([tpm.TOOL, "mkbucket", cache, "8", "4", w, h, f, str(batch), str(first)],
                               capture_output=True, text=True)
            check(r.returncode == 0, "mkbucket %s: %s" % (name, r.stderr))
        base = ["--set", "cache=" + cache, "--set", "stages=2", "--set", "micro_batches=2", "--set", "steps=6",
                "--set", "every=3"]
        r = tpm.vflow(["plan", PIPE, "--json"] + base, tmp)
        check(r.returncode == 0, "plan --json: exit %d %s" % (r.returncode, r.stderr))
        plan = json.loads(r.stdout)
        bk = {b["bucket"]: b for b in plan.get("buckets", [])}
        check(sorted(bk) == sorted(n for n, _, _ in BUCKETS), "plan lists the three buckets: %s" % sorted(bk))
        cpu = {n: next(d for d in b["devices"] if d["device"] == "cpu") for n, b in bk.items()}
        acts = [cpu[n]["activations"] for n, _, _ in BUCKETS]
        check(acts[0] < acts[1] < acts[2], "activations grow with the bucket's tokens: %s" % acts)
        for n in cpu:
            print("bucket %-10s peak %10d activations %9d edges %9d items %9d" %
                  (n, cpu[n]["peak"], cpu[n]["activations"], cpu[n]["edges"], cpu[n]["items"]))
        rc_on = json.loads(tpm.vflow(["plan", PIPE, "--json", "--set", "recompute=true"] + base, tmp).stdout)
        for b in rc_on["buckets"]:
            on = next(d for d in b["devices"] if d["device"] == "cpu")
            check(cpu[b["bucket"]]["activations_recompute_on"] == on["activations"] < cpu[b["bucket"]]["activations"],
                  "bucket %s: activations with recompute on %d as the plan with recompute=true %d" %
                  (b["bucket"], cpu[b["bucket"]]["activations_recompute_on"], on["activations"]))
        worst = max(cpu[n]["peak"] for n in cpu)
        total = plan["totals"]["cpu"]
        print("run peak %d, worst bucket %d" % (total, worst))
        check(worst <= total <= 1.10 * worst, "run peak %d within [worst bucket %d, +10%%]" % (total, worst))
        for n, _, _ in BUCKETS:
            one = tpm.vflow(["plan", PIPE, "--json", "--set", "latent_reader.only=" + n] + base, tmp)
            check(one.returncode == 0 and json.loads(one.stdout)["totals"]["cpu"] == cpu[n]["peak"],
                  "bucket %s: its figures are the plan with only=%s" % (n, n))
        text = tpm.vflow(["plan", PIPE] + base, tmp).stdout
        check(re.search(r"^buckets of 'latent_reader'", text, re.M) is not None and "128x128x9" in text,
              "text plan has the buckets' table")
        cudnn_workspace(tmp, base)

        # each bucket alone: measured within 10 % of its plan, stage by stage
        for n, _, _ in BUCKETS:
            run_dir = os.path.join(tmp, "run-" + n)
            rr = tpm.vflow(["run", PIPE, "--run-dir", run_dir, "--set", "latent_reader.only=" + n] + base, tmp)
            if check(rr.returncode == 0, "run only=%s: exit %d %s" % (n, rr.returncode, rr.stderr[-2000:])):
                tpm.compare("bucket-" + n, run_dir, rr.stdout)

        # admission: a budget the largest bucket does not fit
        small = max(cpu[n]["peak"] for n, _, _ in BUCKETS[:2])
        budget = "cpu=%dB" % ((small + cpu["128x128x9"]["peak"]) // 2)
        check(small < cpu["128x128x9"]["peak"], "the largest bucket needs the most")
        rp = tpm.vflow(["plan", PIPE, "--budget", budget] + base, tmp)
        want = (r"vflow: .*train_dit\.lua: bucket 128x128x9 of 'latent_reader' \(batch,z,T',h',w' 2,4,3,16,16\) "
                r"needs [0-9.]+ MiB on cpu, over the budget of [0-9.]+ MiB: give it a smaller batch .*micro_batches, "
                r"recompute, or fewer frames; or admission = \"shrink\" .*\n")
        check(rp.returncode == 2 and re.fullmatch(want, rp.stderr) is not None,
              "plan refuses naming the bucket: %d %r" % (rp.returncode, rp.stderr))
        run_dir = os.path.join(tmp, "run-refused")
        rr = tpm.vflow(["run", PIPE, "--run-dir", run_dir, "--budget", budget] + base, tmp)
        check(rr.returncode == 2 and rr.stderr == rp.stderr and not os.path.exists(run_dir),
              "run refuses with the same line, nothing launched: %d %r" % (rr.returncode, rr.stderr))
        rr = tpm.vflow(["run", PIPE, "--run-dir", run_dir, "--budget", budget, "--force"] + base, tmp)
        check(rr.returncode == 0 and "warning (--force)" in rr.stderr, "--force runs: %d %r" % (rr.returncode, rr.stderr[-500:]))

        # admission = "shrink": a cache whose large bucket has batch 8
        adm = os.path.join(tmp, "adm")
        for args in (["64", "64", "1", "4", "0"], ["128", "128", "9", "8", "100"]):
            subprocess.run([tpm.TOOL, "mkbucket", adm, "16", "4"] + args, capture_output=True, check=True)
        abase = ["--set", "cache=" + adm] + base[2:]

        def peak_at(name, b):
            r = tpm.vflow(["plan", PIPE, "--json", "--set", "latent_reader.only=" + name,
                           "--set", 'latent_reader.shrink=["%s:%d"]' % (name, b)] + abase, tmp)
            return json.loads(r.stdout)["totals"]["cpu"]

        p4, p5, p2 = peak_at("128x128x9", 4), peak_at("128x128x9", 5), peak_at("128x128x9", 2)
        small = peak_at("64x64x1", 4)
        check(small < p2 < p4 < p5, "peaks grow with the batch: %d %d %d %d" % (small, p2, p4, p5))
        budget = "cpu=%dB" % ((p4 + p5) // 2)
        shrink = ["--set", "latent_reader.admission=shrink"]
        rp = tpm.vflow(["plan", PIPE, "--budget", budget] + shrink + abase, tmp)
        lines = [l for l in rp.stdout.splitlines() if l.startswith("admission:")]
        check(rp.returncode == 0 and len(lines) == 1 and "bucket 128x128x9 of 'latent_reader': batch 8 -> 4, the "
              "largest that fits" in lines[0], "shrink to 4: %d %r %r" % (rp.returncode, lines, rp.stderr))
        run_dir = os.path.join(tmp, "run-shrink")
        rr = tpm.vflow(["run", PIPE, "--run-dir", run_dir, "--budget", budget] + shrink + abase, tmp)
        if check(rr.returncode == 0 and "batch 8 -> 4" in rr.stdout, "run with shrink starts: %d %r" %
                 (rr.returncode, rr.stderr[-800:])):
            rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
            steps = [r for r in rows if r.get("event") == "train_step"]
            per = {(round(r["samples_s"] * r["step_s"]), round(r["tokens_s"] / r["samples_s"])) for r in steps}
            check(per <= {(4, 16), (4, 192)} and (4, 192) in per, "the large bucket trains at batch 4: %s" % per)
        budget = "cpu=%dB" % ((small + p2) // 2)
        rp = tpm.vflow(["plan", PIPE, "--budget", budget] + shrink + abase, tmp)
        check(rp.returncode == 0 and re.search(r"^admission: bucket 128x128x9 of 'latent_reader' left out: even a "
                                               r"batch of 2 needs [0-9.]+ MiB on cpu, over the budget of", rp.stdout,
                                               re.M) is not None, "left out: %d %r" % (rp.returncode, rp.stdout[-600:]))
        rr = tpm.vflow(["run", PIPE, "--run-dir", os.path.join(tmp, "run-out"), "--budget", budget] + shrink + abase,
                       tmp)
        check(rr.returncode == 0, "run without the large bucket: %d %r" % (rr.returncode, rr.stderr[-800:]))
        rr = tpm.vflow(["plan", PIPE, "--budget", "cpu=%dB" % (small // 2)] + shrink + abase, tmp)
        check(rr.returncode == 2 and "left every bucket out" in rr.stderr, "nothing fits: exit 2: %r" % rr.stderr)

        # bad buckets, declared on the reader (before the cache exists, and over it)
        all3 = ['{"w":%s,"h":%s,"frames":[%s],"batch":%d}' % (tuple(n.split("x")) + (b,)) for n, b, _ in BUCKETS]
        none = os.path.join(tmp, "none")
        for decl, where, name, what in [
            ('[{"w":60,"h":64,"frames":[1],"batch":4}]', none, "60x64x1", "multiples of the VAE stride 8"),
            ('[{"w":64,"h":64,"frames":[3],"batch":4}]', none, "64x64x3", "1 + 4k"),
            ('[{"w":64,"h":64,"frames":[1],"batch":[0]}]', none, "64x64x1", "batch 0"),
            ('[{"w":24,"h":64,"frames":[1],"batch":4}]', none, "24x64x1", "8·patch"),
            ("[" + ",".join(all3 + ['{"w":64,"h":64,"frames":[5],"batch":2}']) + "]", cache, "64x64x5",
             "holds no entry"),
        ]:
            rc = tpm.vflow(["check", PIPE, "--set", "cache=" + where, "--set", "latent_reader.buckets=" + decl,
                            "--set", "latent_reader.latent_shape=[4,1,8,8]"], tmp)
            check(rc.returncode == 2 and name in rc.stderr and what in rc.stderr and rc.stderr.count("\n") == 1,
                  "declared %s: exit 2 naming %s (%s): %d %r" % (decl, name, what, rc.returncode, rc.stderr))
        rc = tpm.vflow(["check", PIPE, "--set", "cache=" + cache, "--set", "latent_reader.buckets=[" + ",".join(all3) + "]"],
                       tmp)
        check(rc.returncode == 0, "the cache's own buckets declared: check passes: %r" % rc.stderr)
    finally:
        if not tpm.FAILS:
            shutil.rmtree(tmp, ignore_errors=True)
    if tpm.FAILS:
        print("%d check(s) failed (kept %s)" % (len(tpm.FAILS), tmp))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
