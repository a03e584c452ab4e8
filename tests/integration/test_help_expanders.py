# test_help_expanders.py — what `vflow help KIND` tells a user about the keys p:stage
# takes for a kind with a Lua expander, checked against what the expander does:
#  - `vflow help decode` lists `workers`, `vflow help adamw` lists `isolate`, under the
#    heading saying the expander consumes them; README's generated table has them too
#    (`vflow help --params-md`, between its markers, is what README holds);
#  - they work as documented: decode with workers = 3 becomes decode_0..decode_2 in three
#    processes, adamw with shards = 2 and isolate = false shares one worker, isolate = true
#    (the default) gives each shard its own.
# vflow-test: labels=cli timeout=120
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import check, finish  # noqa: E402

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(os.environ.get("VFLOW_BUILD", "build"), "vflow")
HEAD = "its Lua expander consumes them"


def vflow(args, cwd=None):
    return subprocess.run([VFLOW] + args, cwd=cwd, capture_output=True, text=True, timeout=60)


def graph(tmp, lua):
    with open(os.path.join(tmp, "g.lua"), "w") as f:
        f.write('local vf = require "vflow"\nlocal p = vf.pipeline "g"\n' + lua + "\nreturn p\n")
    r = vflow(["graph", "g.lua", "--json"], tmp)
    check(r.returncode == 0, "graph: %s" % r.stderr)
    return json.loads(r.stdout) if r.returncode == 0 else {"stages": []}


def main():
    for kind, key in [("decode", "workers"), ("adamw", "isolate")]:
        out = vflow(["help", kind]).stdout
        tail = out.split(HEAD, 1)[1] if HEAD in out else ""
        check(any(line.split()[:1] == [key] for line in tail.splitlines()),
              "vflow help %s does not list %s as an expander key:\n%s" % (kind, key, out))
    md = vflow(["help", "--params-md"]).stdout
    readme = open(os.path.join(SRC, "README.md")).read()
    block = readme.split("<!-- params:begin -->", 1)[1].split("<!-- params:end -->", 1)[0]
    check("| `workers` |" in md and "| `isolate` |" in md, "--params-md lacks the expander keys")
    check(md.strip() in block, "README's params table is not `vflow help --params-md` (scripts/gen_params_table)")

    tmp = tempfile.mkdtemp(prefix="vf_help_exp_")
    g = graph(tmp, 'local d = p:stage("decode", { source = "x/*.mp4", workers = 3, size = {32, 32} })\n'
                   'local v = p:stage("vae_encode", { model = vf.models.vae "tiny", patch = 1 })\n'
                   'p:connect(d, v)\np:connect(v, p:stage("null_sink"))')
    dec = {s["name"]: s for s in g["stages"] if s["kind"] == "decode"}
    check(sorted(dec) == ["decode_0", "decode_1", "decode_2"], "workers = 3: %s" % sorted(dec))
    check(len({s.get("worker") for s in dec.values()}) == 3, "workers = 3: not three processes")
    for isolate, want in [("false", 1), ("true", 2)]:
        g = graph(tmp, 'p:train{ data = p:stage("latent_reader", { path = "c.lmdb", latent_shape = {4, 1, 8, 8} }),\n'
                       '  model = p:pipeline_parallel(vf.models.dit "tiny", { stages = 1 }),\n'
                       '  optimizer = p:stage("adamw", { shards = 2, isolate = %s }),\n'
                       '  checkpoint = p:stage("checkpoint", {}), steps = 2 }' % isolate)
        workers = {s.get("worker") for s in g["stages"] if s["kind"] == "adamw"}
        check(len(workers) == want, "adamw isolate = %s: shards in %d workers, want %d" % (isolate, len(workers), want))
    subprocess.run(["rm", "-rf", tmp])
    finish()


if __name__ == "__main__":
    main()
