#!/usr/bin/env python3
# test_set_groups.py — `--set NAME.PARAM=V` where NAME is the group an expansion made
# (decode with workers = N becomes decode_0 .. decode_{N-1}, group "decode"), through
# the real `vflow` binary:
#  - `vflow graph --json` shows the override on every member, and only there; a stage
#    override (decode_1.fps) still reaches one instance and, given later, wins over the
#    group's; name = "dec" makes the group "dec"; a stage named like a group takes the
#    override alone; workers = 1 is the plain stage "decode" as before;
#  - typos keep the one-line exit-2 errors with a did-you-mean (group names included);
#    a value out of range names the member and the Lua line;
#  - pipelines/precompute_latents.lua reads max_bad_fraction and fps from vf.args;
#  - a real run over a folder of three bad files and a good one with workers = 2 (and
#    decode.bad_min_files=1, so that so few files are judged) fails on the default
#    max_bad_fraction and, with --set decode.max_bad_fraction=1 (the QA case that said
#    "no stage named 'decode'"), quarantines every bad file and exits 0.
import json
import os
import subprocess
import sys
import tempfile

VFLOW = os.environ.get("VFLOW_BIN", "build/vflow")
SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
failures = []


def fail(name, msg):
    failures.append(name)
    print(f"FAIL {name}: {msg}", file=sys.stderr)


def vflow(args, cwd):
    return subprocess.run([VFLOW] + args, cwd=cwd, capture_output=True, text=True, timeout=120)


PIPE = """local vf = require "vflow"
local p = vf.pipeline "g"
local d = p:stage("decode", { manifest = "m.csv", frames = 5, size = {32, 32},
                              workers = vf.args.workers or 3, name = vf.args.dname })
local v = p:stage("vae_encode", { model = vf.models.vae "tiny" })
p:connect(d, v)
p:connect(v, p:stage("null_sink"))
if vf.args.extra then p:stage("synthetic", { name = vf.args.extra }) end
return p
"""


def graph(tmp, sets, script="g.lua"):
    args = ["graph", script, "--json"]
    for s in sets:
        args += ["--set", s]
    r = vflow(args, tmp)
    if r.returncode != 0:
        return None, r
    return {s["name"]: s for s in json.loads(r.stdout)["stages"]}, r


def check_graph(name, tmp, sets, want, script="g.lua"):
    """want: {stage: {param: value or None (absent)}} plus optional '@group' per stage."""
    st, r = graph(tmp, sets, script)
    if st is None:
        fail(name, f"rc {r.returncode}: {r.stderr.strip()}")
        return
    for sname, params in want.items():
        if sname not in st:
            fail(name, f"no stage {sname} in {sorted(st)}")
            continue
        for k, v in params.items():
            got = st[sname].get("group") if k == "@group" else st[sname]["params"].get(k)
            if got != v:
                fail(name, f"{sname}.{k} = {got!r}, want {v!r}")
    print(f"ok {name}")


def check_error(name, tmp, sets, want, script="g.lua"):
    args = ["check", script]
    for s in sets:
        args += ["--set", s]
    r = vflow(args, tmp)
    lines = r.stderr.splitlines()
    if r.returncode != 2 or lines != ["vflow: " + want]:
        fail(name, f"rc {r.returncode}, stderr {r.stderr!r}\n  want: {'vflow: ' + want!r}")
    else:
        print(f"ok {name}")


def main():
    if not os.path.exists(VFLOW):
        print(f"no vflow binary at {VFLOW}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="vflow-setgroups-") as tmp:
        with open(os.path.join(tmp, "g.lua"), "w") as fh:
            fh.write(PIPE)
        with open(os.path.join(tmp, "m.csv"), "w") as fh:
            fh.write("path,text\na.mp4,a\nb.mp4,b\nc.mp4,c\n")

        # the group reaches every instance, and only them
        check_graph("group_all_members", tmp, ["decode.max_bad_fraction=1"], {
            "decode_0": {"max_bad_fraction": 1, "@group": "decode", "shard": 0},
            "decode_1": {"max_bad_fraction": 1, "@group": "decode", "shard": 1},
            "decode_2": {"max_bad_fraction": 1, "@group": "decode", "shard": 2},
            "vae_encode": {"max_bad_fraction": None, "@group": None},
        })
        # a stage override reaches one; in command-line order, the later one wins
        check_graph("stage_and_group_in_order", tmp, ["decode.fps=8", "decode_2.fps=4"], {
            "decode_0": {"fps": 8}, "decode_1": {"fps": 8}, "decode_2": {"fps": 4}})
        check_graph("stage_only", tmp, ["decode_1.fps=4"], {
            "decode_0": {"fps": 0}, "decode_1": {"fps": 4}, "decode_2": {"fps": 0}})
        check_graph("group_then_stage_reversed", tmp, ["decode_2.fps=4", "decode.fps=8"], {
            "decode_2": {"fps": 8}})
        # nested keys and JSON values go to every member
        check_graph("group_list_value", tmp, ["decode.size=[16,16]"], {
            "decode_0": {"size": [16, 16]}, "decode_2": {"size": [16, 16]}})
        # a custom name names the group
        check_graph("named_group", tmp, ["dname=dec", "workers=2", "dec.threads=1"], {
            "dec_0": {"threads": 1, "@group": "dec"}, "dec_1": {"threads": 1, "@group": "dec"}})
        # a stage named like the group takes the override alone
        check_graph("stage_beats_group", tmp, ["dname=x", "workers=2", "extra=x", "x.count=7"], {
            "x": {"count": 7}, "x_0": {"count": None}, "x_1": {"count": None}})
        # workers = 1: the plain stage "decode", no group
        check_graph("one_worker_plain_stage", tmp, ["workers=1", "decode.fps=8"], {
            "decode": {"fps": 8, "@group": None}})

        # errors: exit 2, one line, did-you-mean
        check_error("typo_in_group_name", tmp, ["decod.max_bad_fraction=1"],
                    "--set decod.max_bad_fraction=1: no stage named 'decod'; did you mean 'decode'?")
        check_error("unknown_name", tmp, ["zzzzzz.fps=1"], "--set zzzzzz.fps=1: no stage named 'zzzzzz'")
        check_error("typo_in_param", tmp, ["decode.max_bad_fractoin=1"],
                    "--set decode.max_bad_fractoin=1: stage 'decode_0' of group 'decode' (decode) has no "
                    "param 'max_bad_fractoin'; did you mean 'max_bad_fraction'?")
        check_error("out_of_range", tmp, ["decode.max_bad_fraction=2"],
                    "g.lua:3: stage 'decode_0' (decode): param 'max_bad_fraction': 2 is out of range [0, 1]")
        check_error("stage_typo_unchanged", tmp, ["vae_encod.chunk=2"],
                    "--set vae_encod.chunk=2: no stage named 'vae_encod'; did you mean 'vae_encode'?")

        # the precompute pipeline reads max_bad_fraction and fps
        pipe = os.path.join(SRC, "pipelines", "precompute_latents.lua")
        check_graph("precompute_knobs", tmp,
                    ["manifest=m.csv", "workers=2", "max_bad_fraction=0.5", "fps=8"], {
                        "decode_0": {"max_bad_fraction": 0.5, "fps": 8},
                        "decode_1": {"max_bad_fraction": 0.5, "fps": 8}}, script=pipe)
        check_graph("precompute_defaults", tmp, ["manifest=m.csv", "workers=2"], {
            "decode_0": {"max_bad_fraction": 0.1, "fps": 0}}, script=pipe)

        # a real run: a folder of bad files only, two decode workers
        bad = os.path.join(tmp, "bad")
        os.mkdir(bad)
        open(os.path.join(bad, "empty.mp4"), "w").close()
        with open(os.path.join(bad, "notes.mp4"), "w") as fh:
            fh.write("not a video\n")
        with open(os.path.join(bad, "short.mkv"), "wb") as fh:
            fh.write(b"\x1a\x45\xdf\xa3" + b"\0" * 60)
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=32x32:rate=10:duration=1",
                        "-c:v", "mpeg4", os.path.join(bad, "good.mp4")], check=True)
        base = ["run", pipe, "--set", "source=" + bad, "--set", "workers=2", "--set", "frames=5",
                "--set", "size=32", "--set", "decode.bad_min_files=1"]
        r = vflow(base + ["--run-dir", "r1", "--set", "cache=c1.lmdb"], tmp)
        if r.returncode != 1 or "max_bad_fraction 0.1" not in r.stderr:
            fail("run_default_fails", f"rc {r.returncode}: {r.stderr[-600:]}")
        else:
            print("ok run_default_fails")
        r = vflow(base + ["--run-dir", "r2", "--set", "cache=c2.lmdb", "--set", "decode.max_bad_fraction=1"], tmp)
        q = os.path.join(tmp, "r2", "quarantine.jsonl")
        rows = [json.loads(l) for l in open(q)] if os.path.exists(q) else []
        stages = sorted({row["stage"] for row in rows})
        if r.returncode != 0 or len(rows) != 3 or stages != ["decode_0", "decode_1"]:
            fail("run_group_override", f"rc {r.returncode}, quarantined {len(rows)} by {stages}: {r.stderr[-600:]}")
        else:
            print("ok run_group_override")

    if failures:
        print(f"{len(failures)} failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
