#!/usr/bin/env python3
# test_train_set_links.py — values the training sugar (lua/train.lua) copies into several
# stages stay one value under `--set`, through the real `vflow graph --json`:
#  - each linked value (checkpoint dir, checkpoint interval, steps, seed, the timestep
#    distribution's t_mean, t_std, t_sampling, t_shift, t_min and t_max, micro_batches) overridden through every spelling — the script knob, a stage param
#    (each copy in turn), the group (dit, adamw) — ends up the same in every stage that
#    holds a copy, and nowhere else changes;
#  - copies whose value shapes the graph (model, splits, shards, shard, replicas, sync,
#    data, a replica reader's shard) refuse an override with exit 2 and one line saying
#    where the value is set;
#  - with replicas = 2, a reader param set on the first reader reaches the replica's.
# The reference is the set of stages the sugar's own comment promises, written out here.
import json
import os
import subprocess
import sys
import tempfile

VFLOW = os.path.abspath(os.environ.get("VFLOW_BIN", "build/vflow"))
SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TOOL = os.path.join(os.path.dirname(VFLOW), "tools", "train_tool")
PIPE = os.path.join(SRC, "pipelines", "train_dit.lua")
failures = []


def fail(name, msg):
    failures.append(name)
    print(f"FAIL {name}: {msg}", file=sys.stderr)


def graph(tmp, sets):
    args = [VFLOW, "graph", PIPE, "--json", "--set", "cache=c.lmdb", "--set", "shards=2", "--set", "stages=2"]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, cwd=tmp, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return None, r
    return {s["name"]: s["params"] for s in json.loads(r.stdout)["stages"]}, r


# value -> [(stage, param)] every copy; spellings: (knob, stage params, groups)
SHARDS, PARTS = ["adamw_0", "adamw_1"], ["dit_0", "dit_1"]
LINKED = {
    "ckpt_dir": ([("checkpoint", "dir")] + [(s, "ckpt_dir") for s in PARTS + SHARDS], "ckpt", ["adamw", "dit"],
                 ['"D1"', '"D2"']),
    "every": ([("checkpoint", "every")] + [(s, "every") for s in SHARDS], "every", ["adamw"], ["7", "9"]),
    "steps": ([(s, "steps") for s in PARTS + SHARDS], "steps", ["adamw", "dit"], ["11", "13"]),
    "seed": ([(s, "seed") for s in PARTS + SHARDS], None, ["adamw", "dit"], ["5", "6"]),
    "t_mean": ([(s, "t_mean") for s in PARTS + SHARDS], "t_mean", ["adamw", "dit"], ["0.5", "0.25"]),
    "t_std": ([(s, "t_std") for s in PARTS + SHARDS], "t_std", ["adamw", "dit"], ["2", "3"]),
    "t_sampling": ([(s, "t_sampling") for s in PARTS + SHARDS], "t_sampling", ["adamw", "dit"],
                   ['"uniform"', '"logit_normal"']),
    "t_shift": ([(s, "t_shift") for s in PARTS + SHARDS], "t_shift", ["adamw", "dit"], ["3", "5"]),
    "t_min": ([(s, "t_min") for s in PARTS + SHARDS], "t_min", ["adamw", "dit"], ["0.5", "0.25"]),
    "t_max": ([(s, "t_max") for s in PARTS + SHARDS], "t_max", ["adamw", "dit"], ["0.875", "0.9"]),
    "micro_batches": ([(s, "micro_batches") for s in PARTS], "micro_batches", ["dit"], ["4", "1"]),
}

REFUSED = [
    ("adamw_0.model.dim=8", "pipeline_parallel"), ("adamw.model.dim=8", "pipeline_parallel"),
    ("checkpoint.model.depth=3", "pipeline_parallel"), ("dit_1.model.dim=8", "pipeline_parallel"),
    ("dit.splits=[0,1,2]", "pipeline_parallel"), ("adamw_1.splits=[0,1,2]", "pipeline_parallel"),
    ("dit_0.shards=3", "shards"), ("checkpoint.shards=3", "shards"), ("adamw_1.shard=0", "shards"),
    ("adamw.shards=3", "shards"), ("dit_1.stage=0", "pipeline_parallel"), ("dit.replicas=2", "pipeline_parallel"),
    ("checkpoint.sync=true", "sync"), ("adamw.sync=true", "sync"), ("adamw_0.data=\"{}\"", "reader"),
]


def main():
    with tempfile.TemporaryDirectory(prefix="vf_links.") as tmp:
        r = subprocess.run([TOOL, "mkcache", os.path.join(tmp, "c.lmdb"), "8", "4", "1", "8", "8", "7"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"mkcache failed: {r.stderr}")
            return 1
        base, r = graph(tmp, [])
        if base is None:
            print(f"vflow graph failed: {r.stderr}")
            return 1
        for value, (copies, knob, groups, vals) in LINKED.items():
            spellings = []
            if knob:  # a knob's value is not JSON: a string goes as it is
                spellings.append(f"{knob}={json.loads(vals[0])}")
            spellings += [f"{s}.{p}={vals[1]}" for s, p in copies]
            for g in groups:  # the group's members call the value by their own param name
                spellings.append(f"{g}.{next(p for s, p in copies if s.startswith(g + '_'))}={vals[0]}")
            for sp in spellings:
                got, r = graph(tmp, [sp])
                if got is None:
                    fail(sp, f"exit {r.returncode}: {r.stderr.strip()}")
                    continue
                raw = sp.split("=", 1)[1]
                if sp.startswith("ckpt="):
                    want = "D1"
                elif sp.startswith(f"{knob}=") and not raw[:1].isdigit():
                    want = raw  # a knob's string (t_sampling=uniform) goes as it is
                else:
                    want = json.loads(raw)
                for s, p in copies:
                    if got[s].get(p) != want:
                        fail(sp, f"{s}.{p} = {got[s].get(p)!r}, want {want!r} like the other copies")
                for s, params in got.items():  # nothing else moved
                    for p, v in params.items():
                        if (s, p) not in copies and v != base[s].get(p):
                            fail(sp, f"{s}.{p} changed from {base[s].get(p)!r} to {v!r}")
        for sp, word in REFUSED:
            got, r = graph(tmp, [sp])
            lines = r.stderr.strip().splitlines()
            if got is not None or r.returncode != 2:
                fail(sp, f"exit {r.returncode}, want 2 (an override of a copy must be refused)")
            elif len(lines) != 1 or "set" not in lines[0] or word not in lines[0] or "train_dit.lua:" not in lines[0]:
                fail(sp, f"want one line naming where to set it ({word}, the script line): {r.stderr!r}")
        # replicas: the readers' copied params are one value
        got, r = graph(tmp, ["replicas=2", "latent_reader.batch=2"])
        if got is None:
            fail("replicas", r.stderr.strip())
        elif not (got["latent_reader"].get("batch") == 2 == got["latent_reader_r1"].get("batch")):
            fail("replicas", f"reader batch {got['latent_reader'].get('batch')} vs replica {got['latent_reader_r1'].get('batch')}")
        got, r = graph(tmp, ["replicas=2", "latent_reader_r1.shard=0"])
        if r.returncode != 2 or "replicas" not in r.stderr:
            fail("replica shard", f"exit {r.returncode}: {r.stderr!r}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok: every copy of a linked value agrees under every spelling; structural copies refuse overrides")
    return 0


if __name__ == "__main__":
    sys.exit(main())
