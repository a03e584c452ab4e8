"""Faults of a multi-node run on namespace hosts (netns_lib.py), two nodes training with
P = 2 (dit_1 on node 1):
  1. node 1's `vflow run` killed with SIGKILL after the first checkpoint: rank 0 fails the
     run within 10 s, its message naming node 1 and its stage dit_1, and no process of the
     run is left on node 1; then `--resume` on both nodes continues from the newest
     complete checkpoint and ends with bitwise the weights of the uninterrupted training
     on one node;
  2. SIGTERM to rank 0: every node drains (rank 0 says "drained cleanly", node 1's driver
     exits once its workers have flushed), nothing is left running;
  3. node 1 cut off (its link down): rank 0 fails within 10 s naming node 1, and node 1's
     driver, having lost the coordinator, stops its workers and exits too.
Exits 77 only where namespaces cannot be made.
vflow-test: labels=multinode timeout=600
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_lib import (FAILS, TRAIN, TRAIN_TOOL, Net, Nodes, Unavailable, check, md5, one_node,  # noqa: E402
                       run_log, tail)

STEPS = 200


def procs_of(run_dir):
    """Pids of processes whose command line names run_dir (the run's drivers and workers)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % d, "rb").read().decode(errors="replace")
        except OSError:
            continue
        if run_dir in cmd and "vflow" in cmd:
            out.append(int(d))
    return out


def wait_for(pred, timeout):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def started_training(n):
    return wait_for(lambda: glob.glob(os.path.join(n.run_dir, "ckpt", "step-*[0-9]")), 60)


def wait_exit(p, timeout):
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def kill_and_resume(net, tmp, common, ref):
    n = Nodes(net, tmp, "kill", "torchrun", TRAIN, common, port=29651)
    check(started_training(n), "kill: a first checkpoint\n%s" % n.describe())
    t0 = time.monotonic()
    n.procs[1].send_signal(signal.SIGKILL)
    rc0 = wait_exit(n.procs[0], 30)
    took = time.monotonic() - t0
    out = tail(n.outs[0], 40)
    print("kill: rank 0 exit %r after %.1f s" % (rc0, took))
    check(rc0 == 1 and took < 10, "kill: rank 0 fails within 10 s (exit %r after %.1f s)\n%s" % (rc0, took, out))
    check("node 1 (10.77.0.2) lost" in out and "dit_1" in out, "kill: the failure names node 1 and dit_1\n%s" % out)
    n.kill()
    check(wait_for(lambda: not procs_of(n.run_dir), 10), "kill: no process of the run left: %r" % procs_of(n.run_dir))
    # --resume on both nodes: from the newest complete checkpoint to the end
    r = Nodes(net, tmp, "kill", "torchrun", TRAIN, common, port=29652, extra={0: ["--resume"], 1: ["--resume"]})
    rcs = r.wait(timeout=240)
    check(rcs == {0: 0, 1: 0}, "resume after the node loss: exits %r\n%s" % (rcs, r.describe()))
    check("resum" in run_log(n.run_dir).lower(), "the second run resumed")
    a, b = md5(os.path.join(ref, "ckpt/step-%d/model.safetensors" % STEPS)), \
        md5(os.path.join(n.run_dir, "ckpt/step-%d/model.safetensors" % STEPS))
    print("uninterrupted one node %s, killed + resumed on two nodes %s" % (a, b))
    check(a is not None and a == b, "resume after a node loss is bitwise the uninterrupted run (%s vs %s)" % (a, b))


def cut(net, tmp, common):
    n = Nodes(net, tmp, "cut", "slurm", TRAIN, common, port=20000 + 9653)
    check(started_training(n), "cut: a first checkpoint\n%s" % n.describe())
    t0 = time.monotonic()
    net.cut(1)
    rc0 = wait_exit(n.procs[0], 30)
    took = time.monotonic() - t0
    out = tail(n.outs[0], 40)
    print("cut: rank 0 exit %r after %.1f s" % (rc0, took))
    check(rc0 == 1 and took < 10, "cut: rank 0 fails within 10 s (exit %r after %.1f s)\n%s" % (rc0, took, out))
    check("node 1 (10.77.0.2) lost" in out and "dit_1" in out, "cut: the failure names node 1 and dit_1\n%s" % out)
    rc1 = wait_exit(n.procs[1], 15)
    out1 = tail(n.outs[1], 10)
    check(rc1 == 1 and "lost the coordinator" in out1, "cut: node 1 stops on its own (exit %r)\n%s" % (rc1, out1))
    n.kill()
    check(wait_for(lambda: not procs_of(n.run_dir), 10), "cut: no process of the run left: %r" % procs_of(n.run_dir))


def sigterm(net, tmp, common):
    n = Nodes(net, tmp, "term", "openmpi", TRAIN, common, port=29654)
    check(started_training(n), "sigterm: a first checkpoint\n%s" % n.describe())
    n.procs[0].send_signal(signal.SIGTERM)
    rcs = n.wait(timeout=60)
    out = tail(n.outs[0], 30)
    check(rcs[0] == 1 and "drained cleanly" in out, "sigterm: rank 0 drains (exit %r)\n%s" % (rcs[0], out))
    check(rcs[1] is not None and rcs[1] != 0 and "lost the coordinator" not in tail(n.outs[1]),
          "sigterm: node 1 ends with the run, told by the coordinator (exit %r)\n%s" % (rcs[1], tail(n.outs[1])))
    log = run_log(n.run_dir)
    check("stage dit_1 done" not in log or "drained" in log, "sigterm: the drain reached node 1's stage")
    check(wait_for(lambda: not procs_of(n.run_dir), 10), "sigterm: nothing left running: %r" % procs_of(n.run_dir))


def main():
    tmp = tempfile.mkdtemp(prefix="vf_multinode_faults_")
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
        base = ["cache=" + cache, "steps=%d" % STEPS, "every=20", "keep=20", "batch=4", "lr=2e-3", "stages=2",
                "micro_batches=2"]
        ref = one_node(tmp, "one", TRAIN, base)
        common = base + ["nodes=2"]
        kill_and_resume(net, tmp, common, ref)
        sigterm(net, tmp, common)
        cut(net, tmp, common)  # last: host 1 stays cut off
    finally:
        net.close()
    if FAILS:
        print("%d check(s) failed (kept %s)" % (len(FAILS), tmp))
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


main()
