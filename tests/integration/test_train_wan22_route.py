#!/usr/bin/python3
# test_train_wan22_route.py — routing by the drawn t (stage dit's route, stages/train/
# dit_route.c; finetune_wan22.lua experts=both, routing=t), on the tiny preset through the
# real binaries, against runs that route nothing:
#  - p:train{route = "high" | "low"} on a bucketed cache (batches of 4, 2 and 2) with D = 2
#    replicas, P = 2, M = 2: per step, the (position, t) pairs the two routed runs trained
#    are together exactly the pairs a run without routing draws (same seed, every position
#    once), each expert's on its side of the boundary, every micro-batch on one side;
#  - finetune_wan22.lua experts=both (routing t by default), full fine-tune and LoRA: per
#    step the union of the experts' (position, t) is what finetune_wan.lua draws on the
#    same seed; an expert's train_step row counts its samples, and a step with none of them
#    says "samples":0 with no loss; its checkpoint of that step (model or adapters, and the
#    optimizer files) is bitwise the one of the step before, while a step with samples
#    changes it; state.json's adam_step counts the steps with samples; a resume with
#    routing=each is refused naming train.route;
#  - sequence parallelism: a routed run with sp = 2 trains the positions and t of sp = 1,
#    with the same sample counts and adam_step, and losses within 1e-5 relative;
#  - over 250 steps of 4 samples (logit-normal, shift 3) the high expert's share is
#    P(t >= boundary) computed here from the distribution's formula (within 4 sigma).
# vflow-test: timeout=600
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import check, finish  # noqa: E402
from st_lib import f32, read_st, write_st  # noqa: E402

BUILD = os.path.abspath(os.environ.get("VFLOW_BUILD", "build"))
VFLOW = os.path.abspath(os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow")))
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
TRAIN_TOOL = os.path.join(BUILD, "tools", "train_tool")
DIT_TOOL = os.path.join(BUILD, "tools", "dit_tool")
ENV = dict(os.environ, OMP_NUM_THREADS="1")

# a one-model training whose p:train takes route / boundary from the knobs
ROUTE_LUA = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline("route")
local model = vf.models.dit("tiny")
local data = p:stage("latent_reader", { path = a.cache, batch = a.batch or 4, seed = 0, text_len = model.text_len })
local dit = p:pipeline_parallel(model, { stages = a.stages or 2, micro_batches = a.micro_batches or 2,
                                         devices = "cpu", replicas = a.replicas or 1, sp = a.sp })
local opt = p:stage("adamw", { lr = 1e-3, device = "cpu" })
local ckpt = p:stage("checkpoint", { every = 0, keep = 2 })
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = a.steps or 4, seed = 0,
          t_sampling = a.t_sampling, t_shift = a.t_shift, route = a.route, boundary = a.boundary }
return p
"""


def tensors(path):
    """{name: raw bytes} of a safetensors file's tensors (its metadata, which names the
    step, left out)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in hdr.items() if k != "__metadata__"}


def rows(run, event):
    out = []
    path = os.path.join(run, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for ln in f:
                row = json.loads(ln)
                if row.get("event") == event:
                    out.append(row)
    return out


def drawn(run, stage_prefix):
    """{step: [(position, t), ...]} of the first partitions' "timesteps" rows, and whether
    every micro-batch's row lies on one side of b (checked by the caller)."""
    out, mbs = {}, []
    for r in rows(run, "timesteps"):
        if not r.get("stage", "").startswith(stage_prefix):
            continue
        pairs = list(zip(r.get("positions", []), r["timesteps"]))
        check(len(pairs) == len(r["timesteps"]), "a timesteps row names each sample's position: %s" % r)
        out.setdefault(r["step"], []).extend(pairs)
        mbs.append(r["timesteps"])
    return {s: sorted(v) for s, v in out.items()}, mbs


def run(args, name):
    r = subprocess.run([VFLOW, "run"] + args[:1] + ["--run-dir", name] +
                       [x for kv in args[1:] for x in ("--set", kv)], capture_output=True, text=True, env=ENV,
                       timeout=240)
    check(r.returncode == 0, "%s: exit %d %s" % (name, r.returncode, (r.stdout + r.stderr)[-500:]))
    return name


def union_is_plain(tag, plain, parts, b):
    """parts: {expert: {step: pairs}}: every expert on its side, the union the plain draw."""
    steps = sorted(plain)
    check(len(steps) > 0, "%s: the plain run drew timesteps" % tag)
    for s in steps:
        got = sorted(parts["high"].get(s, []) + parts["low"].get(s, []))
        check(got == plain[s], "%s step %d: the experts' (position, t) %s are the plain run's %s" % (tag, s, got,
                                                                                                     plain[s]))
        check(all(t >= b for _, t in parts["high"].get(s, [])) and all(t < b for _, t in parts["low"].get(s, [])),
              "%s step %d: high %s >= %g > low %s" % (tag, s, parts["high"].get(s), b, parts["low"].get(s)))
    count = {e: sum(map(len, parts[e].values())) for e in parts}
    check(all(count.values()), "%s: samples routed to each expert: %s" % (tag, count))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        subprocess.run([TRAIN_TOOL, "mkcache", "cache.lmdb", "16", "4", "1", "8", "8", "7"], check=True,
                       capture_output=True)
        # buckets of 1, 4 and 8 tokens a sample in batches of 4, 2 and 2 (train_lib.sh)
        for w, h, f, bsz, first in ((16, 16, 1, 4, 0), (32, 16, 5, 2, 100), (64, 32, 1, 2, 200)):
            subprocess.run([TRAIN_TOOL, "mkbucket", "buckets.lmdb", "13", "4", str(w), str(h), str(f), str(bsz),
                            str(first)], check=True, capture_output=True)
        for tag, seed in (("high", 0), ("low", 7)):
            subprocess.run([DIT_TOOL, "init", "seed=%d" % seed, "out=init.bin"], check=True, capture_output=True)
            subprocess.run([DIT_TOOL, "save", "params=init.bin", "out=%s.safetensors" % tag], check=True,
                           capture_output=True)
            # the init's head is zero, which would leave LoRA adapters on a frozen base
            # without gradients: a head of its own per expert
            w = read_st("%s.safetensors" % tag)
            w["head.head.weight"] = (np.random.default_rng(seed).standard_normal(w["head.head.weight"].shape) *
                                     0.05).astype("<f4")
            write_st("%s.safetensors" % tag, f32(w))
        with open("route.lua", "w") as f:
            f.write(ROUTE_LUA)

        # 1. buckets, D = 2 replicas: the routed runs' union is the plain run's draw
        b = 0.6
        common = ["route.lua", "cache=buckets.lmdb", "replicas=2", "steps=6", "t_sampling=uniform"]
        plain, _ = drawn(run(common, "plain-d2"), "dit_0")
        parts = {}
        for e in ("high", "low"):
            parts[e], mbs = drawn(run(common + ["route=" + e, "boundary=%g" % b], "route-d2-" + e), "dit_0")
            check(all(all(t >= b for t in mb) if e == "high" else all(t < b for t in mb) for mb in mbs),
                  "D=2 %s: every micro-batch on its side: %s" % (e, mbs))
        union_is_plain("buckets D=2", plain, parts, b)
        # positions are j·D + r: each replica's first partition logs its own residue
        for r in rows("route-d2-high", "timesteps"):
            check(all(p % 2 == r["replica"] for p in r["positions"]), "replica %d logs positions j·2 + %d: %s" % (
                r["replica"], r["replica"], r["positions"]))

        # 2. finetune_wan22.lua experts=both: routing by default, against finetune_wan.lua
        b = 0.875
        w22 = [os.path.join(SRC, "pipelines", "finetune_wan22.lua"), "cache=cache.lmdb", "batch=2", "preset=tiny",
               "device=cpu", "frames=1", "size=64", "t_sampling=uniform", "steps=6", "every=1", "keep=10",
               "stages=2", "micro_batches=2", "lr=2e-3", "experts=both", "weights_high=high.safetensors",
               "weights_low=low.safetensors"]
        free = run([os.path.join(SRC, "pipelines", "finetune_wan.lua"), "cache=cache.lmdb", "batch=2",
                    "preset=tiny", "device=cpu", "frames=1", "size=64", "t_sampling=uniform", "steps=6", "every=0",
                    "weights=high.safetensors"], "free")
        plain, _ = drawn(free, "dit_0")
        for tag, extra, fname in (("full", [], "model.safetensors"), ("lora", ["lora_rank=4"], "lora.safetensors")):
            both = run(w22 + extra, "both-" + tag)
            parts = {e: drawn(both, "dit_%s_0" % e)[0] for e in ("high", "low")}
            union_is_plain("experts=both " + tag, plain, parts, b)

            def files(e, s):
                d = os.path.join(both, "ckpt", e, "step-%d" % s)
                if not os.path.isdir(d):
                    return None
                return {n: tensors(os.path.join(d, n)) for n in sorted(os.listdir(d)) if n.endswith(".safetensors")}

            for e in ("high", "low"):
                steps = {r["step"]: r for r in rows(both, "train_step") if r.get("expert") == e}
                check(sorted(steps) == list(range(1, 7)), "%s %s: a train_step row a step: %s" % (tag, e, sorted(steps)))
                updated = 0
                for s, r in sorted(steps.items()):
                    n = len(parts[e].get(s, []))
                    check(r.get("samples") == n, "%s %s step %d: the row counts its %d samples: %s" % (tag, e, s, n, r))
                    if n == 0:
                        check("loss" not in r and "grad_norm" not in r, "%s %s step %d: no loss without samples: %s"
                              % (tag, e, s, r))
                    else:
                        updated += 1
                        check(isinstance(r.get("loss"), float) and r["loss"] > 0, "%s %s step %d: a loss: %s" % (
                            tag, e, s, r))
                    if s > 1:
                        now, before = files(e, s), files(e, s - 1)
                        if n == 0:
                            check(now is not None and now == before,
                                  "%s %s step %d without samples: model and optimizer files bitwise those of step %d"
                                  % (tag, e, s, s - 1))
                        else:
                            check(now is not None and before is not None and now[fname] != before[fname],
                                  "%s %s step %d with %d samples: the %s moved" % (tag, e, s, n, fname))
                state = os.path.join(both, "ckpt", e, "step-6", "state.json")
                st = json.load(open(state)) if os.path.exists(state) else {}
                check(st.get("adam_step") == updated and st.get("step") == 6,
                      "%s %s: state.json's adam_step counts the %d steps with samples: %s" % (
                          tag, e, updated, {k: st.get(k) for k in ("step", "adam_step")}))
            zero = [s for s in range(2, 7) if not parts["high"].get(s)]
            check(len(zero) > 0, "the high expert had a step without samples (seed 0, uniform, batch 2)")
            print("%s: high expert's samples per step %s" % (tag, [len(parts["high"].get(s, [])) for s in range(1, 7)]))
        # the checkpoints record the routing: resuming as routing=each is refused
        r = subprocess.run([VFLOW, "run", w22[0], "--run-dir", "both-full", "--resume"] +
                           [x for kv in w22[1:] + ["routing=each", "steps=7"] for x in ("--set", kv)],
                           capture_output=True, text=True, env=ENV, timeout=240)
        out = r.stdout + r.stderr
        check(r.returncode == 2 and "train.route" in out, "resume as routing=each: exit %d %s" % (
            r.returncode, out[-400:]))

        # 4. sequence parallelism: sp = 2 ranks route as one does (the same positions and t,
        # the same sample counts and Adam step count), the losses within SP's tolerance
        sp_runs = {}
        for n in (1, 2):
            sp_runs[n] = run(["route.lua", "cache=cache.lmdb", "sp=%d" % n, "route=high", "boundary=0.6",
                              "t_sampling=uniform", "steps=4"], "route-sp%d" % n)
        got = {n: drawn(sp_runs[n], "dit_0_s0" if n > 1 else "dit_0")[0] for n in (1, 2)}
        check(got[1] and got[1] == got[2], "sp=2 routes the positions and t of sp=1: %s vs %s" % (got[2], got[1]))
        steps = {n: {r["step"]: r for r in rows(sp_runs[n], "train_step")} for n in (1, 2)}
        for s_, r1 in sorted(steps[1].items()):
            r2 = steps[2].get(s_, {})
            check(r2.get("samples") == r1.get("samples") and ("loss" in r1) == ("loss" in r2) and
                  ("loss" not in r1 or abs(r2["loss"] - r1["loss"]) <= 1e-5 * abs(r1["loss"])),
                  "sp=2 step %d: samples and loss as sp=1: %s vs %s" % (s_, r2, r1))
        ad = {n: json.load(open(os.path.join(sp_runs[n], "ckpt", "step-4", "state.json"))).get("adam_step")
              for n in (1, 2)}
        check(ad[1] is not None and ad[1] == ad[2], "sp=2's adam_step is sp=1's: %s" % ad)

        # 3. the share: P(t >= b), t = shift·s / (1 + (shift − 1)·s), s = sigmoid(x), x ~ N(0, 1)
        shift = 3.0
        s_star = b / (shift - (shift - 1.0) * b)
        x_star = math.log(s_star / (1.0 - s_star))
        p_high = 0.5 * math.erfc(x_star / math.sqrt(2.0))
        n_steps, batch = 250, 4
        share_run = run(["route.lua", "cache=cache.lmdb", "stages=1", "micro_batches=1", "batch=%d" % batch,
                         "steps=%d" % n_steps, "t_shift=%g" % shift, "route=high", "boundary=%g" % b], "share")
        got, _ = drawn(share_run, "dit_0")
        k = sum(len(v) for v in got.values())
        n = n_steps * batch
        sigma = math.sqrt(p_high * (1 - p_high) / n)
        check(abs(k / n - p_high) < 4 * sigma,
              "high share %d/%d = %.4f, P(t >= %g) = %.4f (4 sigma %.4f)" % (k, n, k / n, b, p_high, 4 * sigma))
        print("high share %d/%d = %.4f, P(t >= %g) = %.4f" % (k, n, k / n, b, p_high))
    finish()


if __name__ == "__main__":
    main()
