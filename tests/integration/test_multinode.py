"""Multi-node runs on real network hosts: network namespaces joined by a bridge
(netns_lib.py), each node's `vflow run` started inside its namespace with the variables
a launcher would set for it, one rank per node.

  1. torchrun-style (MASTER_PORT held by a stand-in for torchrun's agent, vflow meeting on
     VFLOW_MASTER_PORT): training with P = 2 partitions on two nodes (`--set nodes=2`:
     dit_1 on node 1, its edges tcp between the hosts) gives bitwise the weights of the same
     training on one node (model.safetensors of the last checkpoint, compared byte for
     byte, as test_train_determinism.sh does);
  2. Slurm-style (SLURM_PROCID, a compact SLURM_JOB_NODELIST whose first name is the
     meeting host, the port from SLURM_JOB_ID): D = 2 replicas, one per node, bitwise the
     one-node D = 2 weights; and sequence parallelism, P = 2 partitions of sp = 2 ranks,
     each partition's ranks on its node, bitwise the one-node sp = 1 weights;
  3. Open MPI-style (OMPI_COMM_WORLD_*, the meeting place passed as VFLOW_MASTER_*):
     precompute with a decoder and a VAE encoder on each node feeding one latent_cache
     on node 0 gives the same cache as the same pipeline on one node: every key and every
     value equal (mdb_dump, LMDB's own tool, over both);
  4. ranks that disagree on --set values: the other rank refuses the graph it is sent
     (exit 2 on both, the message names the hashes); a rank whose meeting address is
     wrong fails with a clear message after its bounded wait; a meeting port already taken
     is exit 2 at once; a node without the GPUs placed on it is exit 2 there; bad node
     values and ipc edges between nodes are exit 2 naming the line; a topology naming more
     nodes than the run has is exit 2 at check time; `vflow graph` and `vflow plan` show
     the nodes, and the fixes for a node over its budget are that node's plan re-planned
     with each change;
  5. `vflow launch --slurm` prints an sbatch script; run with a stand-in `srun` that starts
     one task per namespace host, it trains to the one-node weights.
Exits 77 only when network namespaces cannot be made (not root, no iproute2).
vflow-test: labels=multinode timeout=600
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_lib import (FAILS, SRC, TRAIN, TRAIN_TOOL, VFLOW, Net, Nodes, Unavailable, check, clean_env, md5,  # noqa: E402
                       one_node, tail)

PRECOMPUTE = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "pre"
local n = a.nodes or 1
local cache = p:stage("latent_cache", { path = a.cache })
for k = 0, 1 do
  local node = n > 1 and k or 0
  local d = p:stage("decode", { name = "decode_" .. k, manifest = a.manifest, frames = 9, size = { 32, 32 },
                                shard = k, nshards = 2, node = node })
  local v = p:stage("vae_encode", { name = "vae_" .. k, model = vf.models.vae "tiny", micro_batch = 2, chunk = 4,
                                    node = node, device = k == 1 and a.device1 or "cpu" })
  p:connect(d, v, { capacity = 4 })
  p:connect(v, cache, { capacity = 8 })
end
return p
"""


def training(net, tmp, cache):
    common = ["cache=" + cache, "steps=8", "every=4", "batch=4", "lr=2e-3", "stages=2", "micro_batches=2"]
    ref = one_node(tmp, "p2_one", TRAIN, common)
    # torchrun's agent on rank 0's host holds MASTER_PORT (its rendezvous store): a stand-in
    # listens there, and vflow meets on VFLOW_MASTER_PORT, its own variable, which wins
    agent = net.popen(0, [sys.executable, "-c", "import socket,time\ns=socket.socket()\n"
                          "s.bind(('10.77.0.1', 29631))\ns.listen()\ntime.sleep(600)"], clean_env())
    try:
        n = Nodes(net, tmp, "p2_two", "torchrun", TRAIN, common + ["nodes=2"], port=29631,
                  env={"VFLOW_MASTER_PORT": "29632"})
        rcs = n.wait()
    finally:
        agent.kill()
        agent.wait()
    check(rcs == {0: 0, 1: 0}, "torchrun-style P=2 on two nodes: exits %r\n%s" % (rcs, n.describe()))
    log = open(os.path.join(n.run_dir, "run.log")).read() if os.path.exists(os.path.join(n.run_dir, "run.log")) else ""
    check("node 1 joined from 10.77.0.2" in log, "run.log names node 1 and its address")
    a, b = md5(os.path.join(ref, "ckpt/step-8/model.safetensors")), md5(os.path.join(n.run_dir, "ckpt/step-8/model.safetensors"))
    print("P=2 one node %s, two nodes %s" % (a, b))
    check(a is not None and a == b, "P=2: two nodes give the one-node weights bitwise (%s vs %s)" % (a, b))
    graph = open(os.path.join(n.run_dir, "graph.json")).read() if os.path.exists(os.path.join(n.run_dir, "graph.json")) else ""
    check('"transport": "tcp"' in graph, "the edges between the nodes are tcp")
    # the summary knows the resident set of node 1's workers too (they report their own)
    finals = {}
    for line in open(os.path.join(n.run_dir, "metrics.jsonl")):
        row = json.loads(line)
        if row.get("type") == "final":
            finals[row["stage"]] = row
    check("dit_1" in finals and finals["dit_1"].get("rss_peak", 0) > 1 << 20,
          "the summary has node 1's worker RSS: %r" % {k: v.get("rss_peak") for k, v in finals.items()})

    # D = 2 replicas, one per node, Slurm-style variables (the port from the job id)
    common_d = ["cache=" + cache, "steps=8", "every=4", "batch=4", "lr=2e-3", "stages=1", "replicas=2",
                "micro_batches=2"]
    ref_d = one_node(tmp, "d2_one", TRAIN, common_d)
    # the run key from the launcher's environment (an sbatch script exports a fresh one)
    key = {"VFLOW_RUN_KEY": os.urandom(32).hex()}
    n = Nodes(net, tmp, "d2_two", "slurm", TRAIN, common_d + ["nodes=2"], port=20000 + 4242, env=key)
    rcs = n.wait()
    check(rcs == {0: 0, 1: 0}, "Slurm-style D=2 on two nodes: exits %r\n%s" % (rcs, n.describe()))
    check("tcp://10.77.0.1:24242" in tail(n.outs[1], 50), "Slurm: the meeting host is the node list's first, "
          "the port 20000 + job id\n%s" % tail(n.outs[1]))
    a, b = md5(os.path.join(ref_d, "ckpt/step-8/model.safetensors")), md5(os.path.join(n.run_dir, "ckpt/step-8/model.safetensors"))
    print("D=2 one node %s, two nodes %s" % (a, b))
    check(a is not None and a == b, "D=2: two nodes give the one-node weights bitwise (%s vs %s)" % (a, b))

    # sequence parallelism: P = 2 partitions of sp = 2 ranks (6 heads), a partition's ranks
    # on its node (their all-to-all is over the node's shared memory), the activations
    # between the nodes over tcp rank to rank
    common_s = common + ["dim=96", "heads=6", "head_dim=16", "sp=2"]
    r = subprocess.run([VFLOW, "graph", TRAIN] + sum([["--set", v] for v in common_s + ["nodes=2"]], []),
                       env=clean_env(), capture_output=True, text=True)
    check(r.returncode == 0 and all(re.search(r'label="node %d: w\d+-dit_%d_s%d"' % (q, q, k), r.stdout)
                                    for q in (0, 1) for k in (0, 1)),
          "sp=2: each partition's ranks on its node:\n%s%s" % (r.stdout, r.stderr))
    ref_s = one_node(tmp, "sp1_one", TRAIN, common_s[:-1] + ["sp=1"])
    n = Nodes(net, tmp, "sp2_two", "slurm", TRAIN, common_s + ["nodes=2"], port=20000 + 4243,
              env={"VFLOW_RUN_KEY": os.urandom(32).hex()})
    rcs = n.wait()
    check(rcs == {0: 0, 1: 0}, "sp=2 P=2 on two nodes: exits %r\n%s" % (rcs, n.describe()))
    a, b = md5(os.path.join(ref_s, "ckpt/step-8/model.safetensors")), md5(os.path.join(n.run_dir, "ckpt/step-8/model.safetensors"))
    print("sp=1 P=2 one node %s; sp=2 P=2 two nodes %s" % (a, b))
    check(a is not None and a == b, "sp=2 on two nodes gives the one-node sp=1 weights bitwise (%s vs %s)" % (a, b))
    return ref


FAKE_SRUN = """#!/bin/bash
# srun as the test's hosts give it: task k of N on namespace host k, Slurm's variables set
set -u
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift; done   # srun's own options
read -r -a hosts <<< "$FAKE_SRUN_HOSTS"
n=${#hosts[@]}
pids=()
for k in $(seq 0 $((n - 1))); do
  ip netns exec "${hosts[$k]}" env SLURM_PROCID=$k SLURM_NTASKS=$n SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=1 \
    SLURM_NODEID=$k SLURM_NNODES=$n SLURM_STEP_NODELIST="$SLURM_JOB_NODELIST" "$@" > "srun.task$k.out" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
"""


def launch_slurm(net, tmp, cache, ref):
    """`vflow launch --slurm` writes an sbatch script; run under a stand-in srun that starts
    one task per namespace host, it trains as the one-node run does."""
    sets = ["cache=" + cache, "steps=8", "every=4", "batch=4", "lr=2e-3", "stages=2", "micro_batches=2", "nodes=2"]
    r = subprocess.run([VFLOW, "launch", "--slurm", TRAIN] + [x for s in sets for x in ("--set", s)],
                       env=clean_env(), capture_output=True, text=True)
    check(r.returncode == 0 and "#SBATCH --nodes=2" in r.stdout and "srun" in r.stdout,
          "launch --slurm prints an sbatch script for 2 nodes: %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    d = os.path.join(tmp, "sbatch")
    os.makedirs(os.path.join(d, "bin"))
    open(os.path.join(d, "job.sh"), "w").write(r.stdout)
    fake = os.path.join(d, "bin", "srun")
    open(fake, "w").write(FAKE_SRUN)
    os.chmod(fake, 0o755)
    env = clean_env({"PATH": os.path.join(d, "bin") + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                     "SLURM_JOB_ID": "4343", "SLURM_JOB_NODELIST": "10.77.0.[1-2]",
                     "FAKE_SRUN_HOSTS": " ".join(net.hosts[:2]), "OMP_NUM_THREADS": "1"})
    r = subprocess.run(["bash", "job.sh"], cwd=d, env=env, capture_output=True, text=True, timeout=240)
    check(r.returncode == 0, "the sbatch script runs: %d %s\n%s" % (r.returncode, r.stderr[-800:],
                                                                    tail(os.path.join(d, "srun.task0.out"))))
    a = md5(os.path.join(ref, "ckpt/step-8/model.safetensors"))
    b = md5(os.path.join(d, "runs", "train-4343", "ckpt/step-8/model.safetensors"))
    print("sbatch script on two nodes %s, one node %s" % (b, a))
    check(a is not None and a == b, "the sbatch script's run gives the one-node weights (%s vs %s)" % (a, b))


def precompute(net, tmp):
    samples = os.path.join(tmp, "samples")
    r = subprocess.run(["bash", os.path.join(SRC, "scripts", "make_sample_videos.sh"), samples], capture_output=True,
                       text=True)
    if not check(r.returncode == 0, "sample videos: %s" % r.stderr[-500:]):
        return
    script = os.path.join(tmp, "pre.lua")
    open(script, "w").write(PRECOMPUTE)
    manifest = os.path.join(samples, "manifest.csv")
    one_cache, two_cache = os.path.join(tmp, "one.lmdb"), os.path.join(tmp, "two.lmdb")
    one_node(tmp, "pre_one", script, ["manifest=" + manifest, "cache=" + one_cache])
    n = Nodes(net, tmp, "pre_two", "openmpi", script, ["manifest=" + manifest, "cache=" + two_cache, "nodes=2"],
              port=29633)
    rcs = n.wait()
    check(rcs == {0: 0, 1: 0}, "Open MPI-style precompute on two nodes: exits %r\n%s" % (rcs, n.describe()))
    log = open(os.path.join(n.run_dir, "run.log")).read() if os.path.exists(os.path.join(n.run_dir, "run.log")) else ""
    check("stages: decode_1, vae_1" in log, "node 1 runs decode_1 and vae_1")
    dumps = []
    for c in (one_cache, two_cache):
        d = subprocess.run(["mdb_dump", "-p", c], capture_output=True, text=True)
        check(d.returncode == 0, "mdb_dump %s: %s" % (c, d.stderr))
        body = d.stdout.split("HEADER=END\n", 1)[-1]
        dumps.append(body.splitlines())
    n_keys = len(dumps[0]) // 2
    print("cache: %d records one node, %d two nodes" % (n_keys, len(dumps[1]) // 2))
    check(n_keys > 20, "the one-node cache has records (%d)" % n_keys)
    check(dumps[0] == dumps[1], "two nodes give the one-node cache: same keys, same values")


def bad_input(net, tmp, cache):
    pre = os.path.join(tmp, "pre.lua")
    common = ["cache=" + cache, "steps=4", "every=0", "stages=2"]
    # ranks that disagree on a --set value: rank 1 refuses the graph rank 0 sends
    n = Nodes(net, tmp, "mismatch", "torchrun", TRAIN, common + ["nodes=2"], port=29634,
              extra={1: ["--set", "lr=5e-3"]})
    rcs = n.wait(timeout=60)
    check(rcs == {0: 2, 1: 2}, "a rank resolving another graph: exit 2 on both, got %r\n%s" % (rcs, n.describe()))
    check("refused the graph" in tail(n.outs[1], 30) and "refused the graph" in tail(n.outs[0], 30),
          "both say the graph was refused\n%s" % n.describe())
    # a wrong meeting address: a clear error after the bounded wait, not a hang
    t0 = time.monotonic()
    n = Nodes(net, tmp, "wrongaddr", "torchrun", TRAIN, common + ["nodes=2"], port=29635, ranks=[1],
              env={"MASTER_ADDR": "10.77.0.99", "VFLOW_JOIN_TIMEOUT_MS": "3000",
                   "VFLOW_RUN_KEY": os.urandom(32).hex()})
    rcs = n.wait(timeout=30)
    took = time.monotonic() - t0
    out = tail(n.outs[1], 10)
    check(rcs[1] not in (0, None) and "no coordinator answered at tcp://10.77.0.99:29635" in out,
          "wrong meeting address: rank 1 fails naming it (rc %r)\n%s" % (rcs, out))
    check(took < 20, "wrong meeting address: bounded wait (%.1f s)" % took)
    # a second run on the same meeting port: rank 0 cannot bind it, exit 2 at once
    other = net.popen(0, [sys.executable, "-c", "import socket,time\ns=socket.socket()\n"
                          "s.bind(('10.77.0.1', 29636))\ns.listen()\ntime.sleep(600)"], clean_env())
    try:
        time.sleep(0.5)
        n = Nodes(net, tmp, "sameport", "torchrun", TRAIN, common + ["nodes=2"], port=29636, ranks=[0])
        rcs = n.wait(timeout=30)
    finally:
        other.kill()
        other.wait()
    out = tail(n.outs[0], 10)
    check(rcs[0] == 2 and "another run on this port" in out, "a taken meeting port: exit 2 (%r)\n%s" % (rcs, out))
    # a node with fewer GPUs than placed on it (vae_1 on cuda:15): that rank refuses, and
    # tells the coordinator, which fails at once naming it (exit 2 on both)
    t0 = time.monotonic()
    n = Nodes(net, tmp, "gpus", "torchrun", pre, ["manifest=" + os.path.join(tmp, "samples", "manifest.csv"), "cache=" + os.path.join(tmp, "g.lmdb"),
                                                  "nodes=2", "device1=cuda:15"], port=29637)
    rcs = n.wait(timeout=60)
    took = time.monotonic() - t0
    out0, out1 = tail(n.outs[0], 30), tail(n.outs[1], 5)
    msg = "stage 'vae_1' (vae_encode) runs on cuda:15, but this machine (node 1) has"
    check(rcs == {0: 2, 1: 2} and msg in out1 and msg in out0 and "node 1" in out0 and took < 20,
          "a node without the GPUs placed on it: exit 2 on both within %.1f s (%r)\n%s" % (took, rcs, n.describe()))
    # placement errors: a bad node value, an ipc edge between nodes
    bad = os.path.join(tmp, "bad.lua")
    for body, msg in (
            ('p:stage("synthetic", { node = -1 })', "node must be an integer in 0..4095"),
            ('p:stage("synthetic", { node = 1.5 })', "node must be an integer in 0..4095"),
            ('p:connect(p:stage("synthetic", {}), p:stage("null_sink", { node = 1 }), { transport = "ipc" })',
             'transport "ipc" cannot cross nodes (node 0 -> node 1)')):
        open(bad, "w").write('local vf = require "vflow"\nlocal p = vf.pipeline "bad"\n%s\nreturn p\n' % body)
        r = subprocess.run([VFLOW, "check", bad, "--nodes", "2"], env=clean_env(), capture_output=True, text=True)
        check(r.returncode == 2 and msg in r.stderr and "bad.lua:3" in r.stderr,
              "%s: exit 2 naming the line: %d %s" % (body, r.returncode, r.stderr))
    # more nodes in the topology than the run has: exit 2 at check time
    env = clean_env()
    r = subprocess.run([VFLOW, "check", TRAIN, "--set", "cache=" + cache, "--set", "nodes=2"], env=env,
                       capture_output=True, text=True)
    check(r.returncode == 2 and "is placed on node 1, but the run has 1 node" in r.stderr,
          "check: node 1 on a one-node run is exit 2: %d %s" % (r.returncode, r.stderr))
    r = subprocess.run([VFLOW, "check", TRAIN, "--set", "cache=" + cache, "--set", "nodes=2", "--nodes", "2"],
                       env=env, capture_output=True, text=True)
    check(r.returncode == 0, "check --nodes 2: ok: %d %s" % (r.returncode, r.stderr))
    r = subprocess.run([VFLOW, "graph", TRAIN, "--set", "cache=" + cache, "--set", "nodes=2"], env=env,
                       capture_output=True, text=True)
    check(r.returncode == 0 and 'label="node 1: w2-dit_1"' in r.stdout, "graph shows the nodes:\n%s" % r.stdout)
    r = subprocess.run([VFLOW, "plan", TRAIN, "--set", "cache=" + cache, "--set", "nodes=2", "--nodes", "2"],
                       env=env, capture_output=True, text=True)
    node1 = r.stdout.split("node 1 of 2, what it holds")[-1]
    check(r.returncode == 0 and "node 0 of 2, what it holds" in r.stdout and "worker w2-dit_1 (cpu, node 1)" in node1
          and "w1-dit_0" not in node1 and "verdict: fits" in node1,
          "plan: one plan per node, each with its own workers and verdict:\n%s" % r.stdout[-1500:])
    # a node over its budget: each fix is that node's plan with the change (the same
    # figure `vflow plan --set <change>` shows for the node), not the whole graph's
    def node0_cpu(text):
        m = re.search(r"total per device\n\s+cpu\s+([\d.]+) MiB", text.split("node 1 of 2, what it holds")[0])
        return float(m.group(1)) if m else None
    base = node0_cpu(r.stdout)
    budget = "cpu=%dKiB" % int((base or 0) * 1024 * 0.97)
    r = subprocess.run([VFLOW, "plan", TRAIN, "--set", "cache=" + cache, "--set", "nodes=2", "--nodes", "2",
                        "--budget", budget], env=env, capture_output=True, text=True)
    node0 = r.stdout.split("node 1 of 2, what it holds")[0]
    m = re.search(r"recompute\s+\S+\s+--set recompute=true\n\s+cpu ([\d.]+) MiB", node0)
    r2 = subprocess.run([VFLOW, "plan", TRAIN, "--set", "cache=" + cache, "--set", "nodes=2", "--nodes", "2",
                         "--set", "recompute=true"], env=env, capture_output=True, text=True)
    want = node0_cpu(r2.stdout)
    check(base and "OVER by" in node0 and m and want and abs(float(m.group(1)) - want) < 0.01 and want < base,
          "plan: node 0's fix is node 0's plan with the change (%s MiB, re-planned %s MiB, base %s MiB):\n%s" %
          (m.group(1) if m else None, want, base, node0[-1200:]))


def main():
    tmp = tempfile.mkdtemp(prefix="vf_multinode_")
    try:
        net = Net(2)
    except Unavailable as e:
        print("skip: %s" % e)
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(77)
    try:
        cache = os.path.join(tmp, "cache.lmdb")
        subprocess.run([TRAIN_TOOL, "mkcache", cache, "32", "4", "1", "8", "8", "7"], check=True,
                       stdout=subprocess.DEVNULL)
        ref = training(net, tmp, cache)
        launch_slurm(net, tmp, cache, ref)
        precompute(net, tmp)
        bad_input(net, tmp, cache)
    finally:
        net.close()
    if FAILS:
        print("%d check(s) failed (kept %s)" % (len(FAILS), tmp))
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


main()
