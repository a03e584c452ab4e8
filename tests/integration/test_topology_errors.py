#!/usr/bin/env python3
# test_topology_errors.py — malformed pipeline scripts through the real `vflow` binary.
#
# Each case writes a small Lua file into a temp dir and runs `vflow run` on it (the
# command that would launch workers), asserting: exit code 2, stderr exactly
# "vflow: FILE:LINE: message" (first line; a Lua runtime error adds its traceback),
# no worker spawned (the launcher appends a line per spawned worker to
# $VFLOW_TRACE_SPAWN) and no run dir created. Positive controls prove that the spawn
# trace works and that `vflow check` / `vflow graph` accept a sound pipeline.
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap

VFLOW = os.environ.get("VFLOW_BIN", "build/vflow")
HEAD = 'local vf = require "vflow"\nlocal p = vf.pipeline "t"\n'

# (name, Lua source, extra args, expected first stderr line after "vflow: ")
# Sources start with HEAD unless they begin with "!" (then used verbatim, minus "!").
CASES = [
    ("unknown_kind",
     'p:stage("synthetc", {})\nreturn p\n', [],
     "{f}:3: stage 'synthetc': unknown stage kind 'synthetc'; did you mean 'synthetic'?"),
    ("unknown_param",
     'local s = p:stage("synthetic", { cout = 3 })\np:connect(s, p:stage("null_sink"))\nreturn p\n', [],
     "{f}:3: stage 'synthetic' (synthetic): param 'cout': unknown param; did you mean 'count'?"),
    ("wrong_type",
     'local s = p:stage("synthetic", { count = "ten" })\np:connect(s, p:stage("null_sink"))\nreturn p\n', [],
     "{f}:3: stage 'synthetic' (synthetic): param 'count': expected an integer, got string \"ten\""),
    ("out_of_range",
     'local s = p:stage("synthetic", {})\nlocal m = p:stage("passthrough", { delay_ms = -1 })\n'
     'p:connect(s, m)\np:connect(m, p:stage("null_sink"))\nreturn p\n', [],
     "{f}:4: stage 'passthrough' (passthrough): param 'delay_ms': -1 is out of range [0, 3600000]"),
    ("missing_required",
     'local s = p:stage("synthetic", {})\nlocal c = p:stage("latent_cache", {})\np:connect(s, c)\nreturn p\n', [],
     "{f}:4: stage 'latent_cache' (latent_cache): param 'path': required param is missing"),
    ("bad_choice",
     'local s = p:stage("synthetic", { dtype = "f23" })\np:connect(s, p:stage("null_sink"))\nreturn p\n', [],
     "{f}:3: stage 'synthetic' (synthetic): param 'dtype': \"f23\" is not one of: u8, i32, f32, bf16, f16; "
     "did you mean 'f32'?"),
    ("dtype_mismatch",
     'local s = p:stage("synthetic", { tensor = "frames", dtype = "f32", shape = {17, 64, 64, 3} })\n'
     'local v = p:stage("vae_encode", { model = vf.models.vae "tiny" })\n'
     'p:connect(s, v)\np:connect(v, p:stage("null_sink"))\nreturn p\n', [],
     "{f}:5: connect 'synthetic.out' -> 'vae_encode.in': tensor 'frames' dtype mismatch: sends f32, expects u8"),
    ("shape_mismatch",
     'local s = p:stage("synthetic", { tensor = "frames", dtype = "u8", shape = {17, 64, 64, 4} })\n'
     'local v = p:stage("vae_encode", { model = vf.models.vae "tiny" })\n'
     'p:connect(s, v)\np:connect(v, p:stage("null_sink"))\nreturn p\n', [],
     "{f}:5: connect 'synthetic.out' -> 'vae_encode.in': tensor 'frames' shape mismatch: sends (17,64,64,4), "
     "expects (17,64,64,3) (dim 3: 4 vs 3)"),
    ("unconnected_port",
     'local s = p:stage("synthetic", {})\nlocal n = p:stage("null_sink")\nreturn p\n', [],
     "{f}:4: stage 'null_sink' (null_sink): required input 'in' is not connected"),
    ("unintended_cycle",
     'local s = p:stage("synthetic", {})\nlocal a = p:stage("passthrough", { name = "a" })\n'
     'local b = p:stage("passthrough", { name = "b" })\nlocal m = p:stage("passthrough", { name = "m" })\n'
     'p:connect(a, b)\np:connect(b, m)\np:connect(m, a)\nreturn p\n', [],
     "{f}:9: unintended cycle a -> b -> m -> a (mark the back edge of a training loop with {{loop = true}})"),
    ("unknown_device",
     'local s = p:stage("synthetic", { tensor = "frames", dtype = "u8", shape = {17, 64, 64, 3} })\n'
     'local v = p:stage("vae_encode", { model = vf.models.vae "tiny", device = "gpu:0" })\n'
     'p:connect(s, v)\nreturn p\n', [],
     "{f}:4: stage 'vae_encode' (vae_encode): param 'device': unknown device \"gpu:0\" "
     "(expected \"cpu\", \"cuda\" or \"cuda:N\")"),
    ("duplicate_name",
     'local a = p:stage("passthrough", {})\nlocal b = p:stage("passthrough", {})\nreturn p\n', [],
     "{f}:4: duplicate stage name 'passthrough' (first defined at {f}:3); give one of them name = \"...\""),
    ("unknown_port",
     'local s = p:stage("synthetic", {})\np:connect(s:port("outt"), p:stage("null_sink"))\nreturn p\n', [],
     "{f}:4: connect: stage 'synthetic' (synthetic) has no output port 'outt'; did you mean 'out'?"),
    ("fan_in_single_input",
     'local a = p:stage("synthetic", { name = "a" })\nlocal b = p:stage("synthetic", { name = "b" })\n'
     'local n = p:stage("null_sink")\np:connect(a, n)\np:connect(b, n)\nreturn p\n', [],
     "{f}:7: connect: input 'in' of stage 'null_sink' (null_sink) already has an edge (from 'a.out' at {f}:6) "
     "and takes only one"),
    ("connect_option_typo",
     'local s = p:stage("synthetic", {})\np:connect(s, p:stage("null_sink"), { capcity = 4 })\nreturn p\n', [],
     "{f}:4: connect: unknown option 'capcity'; did you mean 'capacity'? (options: capacity, loop, transport)"),
    ("stage_as_param",
     'local s = p:stage("synthetic", {})\nlocal m = p:stage("passthrough", { from = s })\nreturn p\n', [],
     "{f}:4: stage 'passthrough' (passthrough): param 'from': a stage cannot be a param value "
     "(connect stages with p:connect)"),
    ("deep_recursion",
     '!local function f(n) return f(n + 1) + 1 end\nf(1)\n', [],
     "{f}:1: stack overflow"),
    ("lua_syntax_error",
     'local s = p:stage("synthetic", {)\nreturn p\n', [],
     "{f}:3: unexpected symbol near ')'"),
    ("lua_runtime_error",
     '!local vf = require "vflow"\nlocal function knobs(a)\n  return a.model.depth\nend\n'
     'local p = vf.pipeline "t"\nknobs(vf.args)\nreturn p\n', [],
     "{f}:3: attempt to index a nil value (field 'model')"),
    ("sandbox_io",
     '!local f = io.open("/etc/passwd")\n', [],
     "{f}:1: 'io' is not available in a pipeline script (sandboxed: no io, os, debug, package, dofile, "
     "loadfile, coroutine)"),
    ("sandbox_os",
     '!local vf = require "vflow"\nos.execute("touch pwned")\n', [],
     "{f}:2: 'os' is not available in a pipeline script (sandboxed: no io, os, debug, package, dofile, "
     "loadfile, coroutine)"),
    ("sandbox_binary_chunk",
     '!local f = assert(load("\\27Lua\\84\\0\\25\\147\\r\\n\\26\\n"))\n', [],
     "{f}:1: attempt to load a binary chunk (mode is 't')"),
    ("sandbox_string_dump",
     '!local s = string.dump(function() end)\n', [],
     "{f}:1: attempt to call a nil value (field 'dump')"),
    ("sandbox_require_os",
     '!local os = require "os"\n', [],
     "{f}:1: module 'os' is not available in a pipeline script (the sandbox offers require \"vflow\"; "
     "io, os, debug and package are disabled)"),
    ("sandbox_dofile",
     '!dofile("/etc/passwd")\n', [],
     "{f}:1: 'dofile' is not available in a pipeline script (sandboxed: no io, os, debug, package, dofile, "
     "loadfile, coroutine)"),
    ("instruction_cap",
     '!local vf = require "vflow"\nlocal n = 0\nwhile true do\n  n = n + 1\nend\n', [],
     "{f}:4: instruction limit exceeded (100000000 Lua instructions): a pipeline script describes the "
     "graph and must not loop forever"),
    ("instruction_cap_caught",
     '!local ok = pcall(function() while true do end end)\nlocal vf = require "vflow"\n'
     'return vf.pipeline "t"\n', [],
     "{f}:1: instruction limit exceeded (100000000 Lua instructions): a pipeline script describes the "
     "graph and must not loop forever"),
    ("memory_cap",
     '!local t = {}\nfor i = 1, 1e9 do\n  t[i] = { i, i }\nend\n', [],
     "{f}:3: memory limit exceeded (256 MiB of Lua memory)"),
    ("returns_non_pipeline",
     'local s = p:stage("synthetic", {})\n\nreturn 42\n\n', [],
     "{f}:5: the script must return its pipeline (end it with `return p`), but it returned a number"),
    ("returns_nothing",
     'local s = p:stage("synthetic", {})\n', [],
     "{f}:3: the script must return its pipeline (end it with `return p`), but it returned nothing"),
    ("set_unknown_stage",
     'local s = p:stage("synthetic", {})\np:connect(s, p:stage("null_sink"))\nreturn p\n',
     ["--set", "synthetik.count=3"],
     "--set synthetik.count=3: no stage named 'synthetik'; did you mean 'synthetic'?"),
    ("set_unknown_param",
     'local s = p:stage("synthetic", {})\np:connect(s, p:stage("null_sink"))\nreturn p\n',
     ["--set", "synthetic.cont=3"],
     "--set synthetic.cont=3: stage 'synthetic' (synthetic) has no param 'cont'; did you mean 'count'?"),
    ("set_wrong_type",
     'local s = p:stage("synthetic", {})\np:connect(s, p:stage("null_sink"))\nreturn p\n',
     ["--set", "synthetic.count=many"],
     "{f}:3: stage 'synthetic' (synthetic): param 'count': expected an integer, got string \"many\""),
    ("bad_pipeline_name",
     '!local vf = require "vflow"\nlocal p = vf.pipeline "../x"\nreturn p\n', [],
     "{f}:2: vf.pipeline: bad pipeline name \"../x\" (use letters, digits, _ and -)"),
    ("empty_pipeline",
     'return p\n', [],
     "{f}: pipeline 't' has no stages"),
    # a --set knob the script never reads: a typo (with the knob it resembles) or not a
    # knob of this script at all; nothing runs without it
    ("knob_typo",
     'local s = p:stage("synthetic", { count = vf.args.steps or 3 })\np:connect(s, p:stage("null_sink"))\nreturn p\n',
     ["--set", "stpes=10"],
     "--set stpes=10: {f} does not read vf.args.stpes; did you mean 'steps'?"),
    ("knob_unknown",
     'local s = p:stage("synthetic", { count = vf.args.steps or 3 })\np:connect(s, p:stage("null_sink"))\nreturn p\n',
     ["--set", "unused=1"],
     "--set unused=1: {f} does not read vf.args.unused (its knobs are listed at its top)"),
]

OK_LUA = textwrap.dedent("""\
    -- a sound pipeline: the positive control
    local vf = require "vflow"
    local p = vf.pipeline "ok"
    local src = p:stage("synthetic", { shape = {4, 8}, count = vf.args.count or 10 })
    local mid = p:stage("passthrough", { name = "mid", worker = "side" })
    local sink = p:stage("null_sink", { name = "sink" })
    p:connect(src, mid)
    p:connect(mid:port("out"), "sink.in", { capacity = 4 })
    return p
    """)

OK_DOT = textwrap.dedent("""\
    digraph "ok" {
      rankdir=LR;
      node [shape=box, style=rounded];
      subgraph "cluster_0" {
        label="w0-cpu";
        "synthetic" [label="synthetic\\nsynthetic"];
        "sink" [label="sink\\nnull_sink"];
      }
      subgraph "cluster_1" {
        label="w1-side";
        "mid" [label="mid\\npassthrough"];
      }
      "synthetic" -> "mid" [label="out -> in\\ncap 2, ipc"];
      "mid" -> "sink" [label="out -> in\\ncap 4, ipc"];
    }
    """)

failures = []


def fail(name, msg):
    failures.append(name)
    print(f"FAIL {name}: {msg}", file=sys.stderr)


def vflow(args, cwd, env):
    return subprocess.run([VFLOW] + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def main():
    if not os.path.exists(VFLOW):
        print(f"no vflow binary at {VFLOW}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="vflow-topo-") as tmp:
        trace = os.path.join(tmp, "spawned.txt")
        env = dict(os.environ, VFLOW_TRACE_SPAWN=trace)
        for i, (name, src, extra, want) in enumerate(CASES):
            fname = f"t{i:02d}_{name}.lua"
            body = src[1:] if src.startswith("!") else HEAD + src
            with open(os.path.join(tmp, fname), "w") as fh:
                fh.write(body)
            r = vflow(["run", fname] + extra, tmp, env)
            lines = r.stderr.splitlines()
            want_line = "vflow: " + want.format(f=fname)
            if name.startswith("knob_"):  # check and plan refuse it the same way
                for cmd in ("check", "plan"):
                    rc = vflow([cmd, fname] + extra, tmp, env)
                    if rc.returncode != 2 or rc.stderr.splitlines()[:1] != [want_line]:
                        fail(name + " " + cmd, f"rc {rc.returncode}, stderr {rc.stderr!r}, want {want_line!r}")
            if r.returncode != 2:
                fail(name, f"exit code {r.returncode}, want 2; stderr: {r.stderr!r}")
            if not lines or lines[0] != want_line:
                fail(name, f"\n  got:  {lines[0] if lines else ''!r}\n  want: {want_line!r}")
            if name == "lua_runtime_error":
                # the script's own frames, innermost first
                tb = ["stack traceback:", f"  {fname}:3: in function 'knobs'", f"  {fname}:6: in main chunk"]
                if lines[1:] != tb:
                    fail(name, f"traceback {lines[1:]!r}, want {tb!r}")
            elif name == "deep_recursion":
                tb = ["stack traceback:"] + [f"  {fname}:1: in function 'f'"] * 10 + ["  ..."]
                if lines[1:] != tb:
                    fail(name, f"traceback {lines[1:]!r}, want {tb!r}")
            elif len(lines) != 1:
                fail(name, f"more than one stderr line: {r.stderr!r}")
            if os.path.exists(trace):
                fail(name, "a worker was spawned: " + open(trace).read())
                os.unlink(trace)
            for d in ("runs", "pwned"):
                if os.path.exists(os.path.join(tmp, d)):
                    fail(name, f"{d} was created")
            print(f"ok {name}")

        # Usage errors of the CLI itself.
        for args, want in [
            (["run", "missing.lua"], "vflow: missing.lua: cannot open pipeline script: No such file or directory"),
            (["run", "x.lua", "--set", "novalue"], "vflow: --set novalue: expected KEY=VALUE"),
            (["check", "x.lua", "--forse"], "vflow: unknown option '--forse'; did you mean '--force'?"),
            (["chek", "x.lua"], "vflow: unknown command 'chek'; did you mean 'check'?"),
        ]:
            r = vflow(args, tmp, env)
            got = r.stderr.splitlines()[0] if r.stderr else ""
            if r.returncode != 2 or got != want:
                fail("cli " + " ".join(args), f"rc {r.returncode}, stderr {r.stderr!r}, want {want!r}")
            else:
                print(f"ok cli {' '.join(args)}")

        # The usage's example names a script that exists, from any working directory (the
        # checkout the binary was built in, or the installed copy).
        r = vflow(["run"], tmp, env)
        m = re.match(r"^vflow: run: which pipeline\? e\.g\. vflow run (\S+)\n", r.stderr)
        if r.returncode != 2 or not m or not m.group(1).endswith("/train_dit.lua") or \
                not os.path.isfile(os.path.join(tmp, m.group(1))):
            fail("cli run", f"rc {r.returncode}, stderr {r.stderr!r}: the example names no script that exists")
        else:
            print("ok cli run")

        # Positive controls.
        with open(os.path.join(tmp, "ok.lua"), "w") as fh:
            fh.write(OK_LUA)
        r = vflow(["check", "ok.lua"], tmp, env)
        want = "ok.lua: ok: pipeline 'ok', 3 stages, 2 edges, 2 workers\n"
        if r.returncode != 0 or r.stdout != want:
            fail("check ok.lua", f"rc {r.returncode} stdout {r.stdout!r} stderr {r.stderr!r}")
        r = vflow(["graph", "ok.lua"], tmp, env)
        if r.returncode != 0 or r.stdout != OK_DOT:
            fail("graph ok.lua", f"rc {r.returncode}\n{r.stdout}\n{r.stderr}")
        # vf.args and a stage override reach the resolved graph.
        r = vflow(["graph", "ok.lua", "--json", "--set", "count=3", "--set", "sink.expect_count=3"], tmp, env)
        try:
            g = json.loads(r.stdout)
            st = {s["name"]: s for s in g["stages"]}
            assert st["synthetic"]["params"]["count"] == 3, st["synthetic"]["params"]
            assert st["sink"]["params"]["expect_count"] == 3, st["sink"]["params"]
            assert st["mid"]["worker_hint"] == "side"
            assert st["mid"]["where"] == "ok.lua:5", st["mid"]["where"]
            assert [(e["src"], e["dst"], e["capacity"], e["where"]) for e in g["edges"]] == \
                [("synthetic", "mid", 2, "ok.lua:7"), ("mid", "sink", 4, "ok.lua:8")], g["edges"]
            assert r.stderr == "", r.stderr
        except Exception as e:  # noqa: BLE001 - report any mismatch as a test failure
            fail("graph --json", f"{e!r}: rc {r.returncode} {r.stdout[:300]!r} {r.stderr!r}")
        # plan: per-device totals add up the stages' declarations and the edge buffers.
        r = vflow(["plan", "ok.lua", "--json"], tmp, env)
        try:
            plan = json.loads(r.stdout)
            declared = sum(m["bytes"] for s in plan["stages"] for m in s["mem"] if m["device"] == "cpu")
            buffers = sum(e["bytes"] for e in plan["edges"])
            assert all(e["bytes"] == e["capacity"] * e["item_bytes"] for e in plan["edges"]), plan["edges"]
            assert [e["capacity"] for e in plan["edges"]] == [2, 4]
            # (the planner adds lines of its own: ZeroMQ send copies, processes)
            lines = sum(x["bytes"] for x in plan["lines"] if x["device"] == "cpu")
            assert plan["totals"]["cpu"] == lines >= declared + buffers > 0, plan["totals"]
            print("ok plan --json")
        except Exception as e:  # noqa: BLE001
            fail("plan --json", f"{e!r}: rc {r.returncode} {r.stdout[:300]!r} {r.stderr!r}")
        r = vflow(["plan", "ok.lua"], tmp, env)
        if r.returncode != 0 or "total per device\n  cpu" not in r.stdout:
            fail("plan", f"rc {r.returncode} {r.stdout!r} {r.stderr!r}")
        r = vflow(["run", "ok.lua", "--budget", "cpu=1KiB"], tmp, env)
        if r.returncode != 2 or not re.fullmatch(
                r"vflow: ok\.lua: the plan needs [0-9.]+ [KMG]iB on cpu, over the budget of 1\.00 KiB "
                r"\(see `vflow plan`; --force runs anyway\)\n", r.stderr):
            fail("run over budget", f"rc {r.returncode} {r.stderr!r}")
        r = vflow(["plan", "ok.lua", "--budget", "gpu=1KiB"], tmp, env)
        if r.returncode != 2 or r.stdout or \
                r.stderr != "vflow: --budget gpu=1KiB: unknown device 'gpu' (cpu, cuda or cuda:N)\n":
            fail("bad budget", f"rc {r.returncode} {r.stdout!r} {r.stderr!r}")
        if os.path.exists(trace) or os.path.exists(os.path.join(tmp, "runs")):
            fail("controls", "check/graph/plan launched something")
        # The spawn trace works: a real run spawns (whatever its outcome), so the
        # "no worker" assertions above can fail.
        r = vflow(["run", "ok.lua", "--run-dir", os.path.join(tmp, "run-ok")], tmp, env)
        spawned = open(trace).read().splitlines() if os.path.exists(trace) else []
        if len(spawned) != 2:
            fail("spawn trace", f"want 2 spawned workers, trace: {spawned!r}; rc {r.returncode} {r.stderr!r}")
        else:
            print("ok spawn trace")

    n = len(CASES)
    print(f"{n} malformed topologies, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
