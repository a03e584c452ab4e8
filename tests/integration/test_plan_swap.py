"""`vflow plan` and block swap (`swap_blocks`, docs/TRAINING.md "Block swap"): a LoRA run of
pipelines/train_dit.lua on cuda:0 (planned here without the GPU), one partition of 6 blocks.
  - the plan counts what swap moves: K blocks of base weights off the device (less the
    ring of min(K, 2) blocks the device gains) and onto the host, to the byte, for every K;
  - with a device budget between the plans of two K, the fixes list `swap_blocks` with the
    smallest K that fits (K found by re-planning each K here: an independent search), and
    its predicted device total is that K's plan;
  - swap_blocks = "auto" under those budgets takes that K (it says so; the plan is K's);
  - a budget that no K meets lists no fitting swap_blocks fix, and "auto" under it is
    one line, exit 2;
  - a full fine-tune (no LoRA): K blocks of weights and of gradients leave the device for
    the host and the ring holds min(K, 2) blocks of both, to the byte (a block being the
    LoRA base's block above), and "auto" under a budget takes the smallest K that fits.
vflow-test: labels=integration timeout=300
"""
import json
import os
import subprocess
import sys
import tempfile

VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(os.environ.get("VFLOW_BUILD", "build"), "vflow")
BUILD = os.environ.get("VFLOW_BUILD") or os.path.dirname(VFLOW)
TOOL = os.path.join(BUILD, "tools", "train_tool")
SRC = os.environ.get("VFLOW_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PIPE = os.path.join(SRC, "pipelines", "train_dit.lua")
FAILS = []
BASE = ["--set", "device=cuda:0", "--set", "depth=6", "--set", "dim=256", "--set", "heads=16", "--set", "ffn=1024",
        "--set", "stages=1", "--set", "micro_batches=1", "--set", "lora_rank=4", "--set", "tensorboard=false"]


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL: " + msg)
    return cond


def plan(tmp, sets, budget=None, base=BASE):
    args = [VFLOW, "plan", PIPE, "--json", "--set", "cache=" + os.path.join(tmp, "latents")] + base
    for s in sets:
        args += ["--set", s]
    if budget:
        args += ["--budget", budget]
    r = subprocess.run(args, cwd=tmp, capture_output=True, text=True, timeout=120)
    try:
        return r.returncode, json.loads(r.stdout), r.stderr
    except ValueError:
        return r.returncode, None, r.stderr + r.stdout


def lines(p, dev, what):
    return sum(x["bytes"] for x in p["lines"] if x["device"] == dev and what in x["what"])


def full_fine_tune(tmp, blk):
    full = [a for i, a in enumerate(BASE) if not a.startswith("lora_rank") and
            not (a == "--set" and BASE[i + 1].startswith("lora_rank"))]
    cuda = {}
    for K in range(0, 6):
        rc, p, err = plan(tmp, ["swap_blocks=%d" % K], base=full)
        if not check(rc == 0 and p, "full fine-tune, plan swap_blocks=%d: exit %d %s" % (K, rc, err[-500:])):
            return
        cuda[K] = p["totals"]["cuda:0"]
        got = [lines(p, "cuda:0", "weights (lent"), lines(p, "cuda:0", "gradients (lent"),
               lines(p, "cuda:0", "block swap ring (weights"), lines(p, "cuda:0", "block swap ring (gradients"),
               lines(p, "cpu", "swapped blocks' weights"), lines(p, "cpu", "swapped blocks' gradients")]
        if K == 0:
            w0, g0 = got[0], got[1]
            check(got[2:] == [0, 0, 0, 0], "full fine-tune, K=0: no swap lines %r" % got)
            continue
        r = min(K, 2)
        want = [w0 - K * blk, g0 - K * blk, r * blk, r * blk, K * blk, K * blk]
        print("full fine-tune K=%d: cuda total %d; weights, gradients, ring w/g, host w/g %r" % (K, cuda[K], got))
        check(got == want, "full fine-tune K=%d: lines %r, want %r (blocks of %d bytes)" % (K, got, want, blk))
        check(cuda[K] == cuda[0] - (K - r) * 2 * blk, "full fine-tune K=%d: device saves K - min(K, 2) blocks of both" % K)
    budget = "cuda=%dB" % (cuda[3] + blk // 2)
    rc, p, err = plan(tmp, ["swap_blocks=auto"], budget, base=full)
    line = "swap_blocks \"auto\": stage 'dit_0' (cuda:0) takes swap_blocks = 3: cuda:0 plans"
    print("full fine-tune, budget %s, auto: %s" % (budget, err.strip().splitlines()[-1] if err.strip() else "(nothing)"))
    check(rc == 0 and p and line in err and p["totals"]["cuda:0"] == cuda[3],
          "full fine-tune, auto under %s: exit %d, want K=3: %s" % (budget, rc, err[-300:]))


def main():
    tmp = tempfile.mkdtemp(prefix="vf_plan_swap_")
    r = subprocess.run([TOOL, "mkcache", os.path.join(tmp, "latents"), "8", "4", "1", "8", "8", "7"],
                       capture_output=True, text=True)
    if not check(r.returncode == 0, "train_tool mkcache: %s" % r.stderr):
        sys.exit(1)
    cuda = {}
    blk = None
    for K in range(0, 6):
        rc, p, err = plan(tmp, ["swap_blocks=%d" % K])
        if not check(rc == 0 and p, "plan swap_blocks=%d: exit %d %s" % (K, rc, err[-500:])):
            return
        cuda[K] = p["totals"]["cuda:0"]
        base = lines(p, "cuda:0", "frozen base weights")
        ring = lines(p, "cuda:0", "block swap ring")
        host = lines(p, "cpu", "block swap: swapped blocks")
        if K == 0:
            base0 = base
            check(ring == 0 and host == 0, "K=0: no swap lines")
            continue
        if K == 1:
            blk = base0 - base  # one block of base weights, bf16
        print("K=%d: cuda total %d, base %d, ring %d, host %d" % (K, cuda[K], base, ring, host))
        check(base == base0 - K * blk, "K=%d: resident base %d = %d - K x %d" % (K, base, base0, blk))
        check(ring == min(K, 2) * blk, "K=%d: ring %d = min(K, 2) x %d" % (K, ring, blk))
        check(host == K * blk, "K=%d: host %d = K x %d" % (K, host, blk))
        check(cuda[K] == cuda[0] - (K - min(K, 2)) * blk, "K=%d: device total saves K - min(K, 2) blocks" % K)
    rc, p, err = plan(tmp, ["swap_blocks=6"])
    check(rc == 2 and "swap_blocks 6 is not below the partition's 6 blocks" in err, "K=6 of 6 refused: %d %s" % (rc, err))

    for want in (3, 5):
        # a budget half a block above K's plan: K fits, K - 1 does not
        budget = "cuda=%dB" % (cuda[want] + blk // 2)
        smallest = min(K for K in cuda if cuda[K] <= cuda[want] + blk // 2)
        check(smallest == want, "independent search: smallest K %d" % smallest)
        rc, p, err = plan(tmp, [], budget)
        check(rc == 2 and p, "budget %s below the plan: exit 2 (%d)" % (budget, rc))
        fx = [f for f in (p or {}).get("fixes", []) if f["knob"] == "swap_blocks"]
        if check(len(fx) == 1, "budget %s: one swap_blocks fix in %r" % (budget, (p or {}).get("fixes"))):
            f = fx[0]
            print("budget %s: fix %s %s (fits: %s)" % (budget, f["knob"], f["change"], f["fits"]))
            check(f["fits"] and "swap_blocks=%d" % want in f["change"], "fix is swap_blocks=%d: %r" % (want, f))
            check(f["totals"]["cuda:0"] == cuda[want], "fix predicts K's plan %d: %r" % (cuda[want], f["totals"]))
        # swap_blocks = "auto" takes the fix's K: the plan is that K's, and fits
        rc, p, err = plan(tmp, ["swap_blocks=auto"], budget)
        line = "swap_blocks \"auto\": stage 'dit_0' (cuda:0) takes swap_blocks = %d: cuda:0 plans" % want
        print("budget %s, auto: %s" % (budget, err.strip().splitlines()[-1] if err.strip() else "(nothing)"))
        check(rc == 0 and p and line in err, "auto under %s: exit %d, want K=%d: %s" % (budget, rc, want, err[-300:]))
        check(p and p["totals"]["cuda:0"] == cuda[want], "auto under %s: plan is K=%d's" % (budget, want))
    # below what the most swap gives: no swap_blocks fix fits, and "auto" is refused
    rc, p, err = plan(tmp, [], "cuda=%dB" % (cuda[5] - blk))
    fx = [f for f in (p or {}).get("fixes", []) if f["knob"] == "swap_blocks" and f["fits"]]
    check(rc == 2 and not fx, "a budget below K=5's plan: no fitting swap_blocks fix (%r)" % fx)
    rc, p, err = plan(tmp, ["swap_blocks=auto"], "cuda=%dB" % (cuda[5] - blk))
    want = "stage 'dit_0' (cuda:0): swap_blocks \"auto\": no value fits: at swap_blocks = 5, the most it takes"
    check(rc == 2 and want in err and len(err.strip().splitlines()) == 1,
          "auto under a budget below K=5's plan: exit %d, %s" % (rc, err))
    full_fine_tune(tmp, blk)
    if FAILS:
        print("%d check(s) failed (kept %s)" % (len(FAILS), tmp))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
