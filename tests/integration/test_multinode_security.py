"""Every tcp socket of a multi-node run authenticates its peers: a process on a third
namespace host, not part of the run, connects to the coordinator's control socket and
to every data edge the two nodes listen on while the run trains, and to the edges' bulk
lanes while they listen (tests/tools/zmq_stray: a plain ZeroMQ peer sending a well-formed
item and an end of stream, a CURVE peer with keys of its own, raw bytes). Each is refused
in the CURVE handshake (the run's ZAP handlers allow the run's own keys only, and say how
many they refused) or, on a lane, fails its admission challenge, no worker
crashes, and the run's result is what it is without the strays: the weights are bitwise
those of the same training on one node. Exits 77 only where namespaces cannot be made.
vflow-test: labels=multinode timeout=300
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_lib import (BUILD, FAILS, TRAIN, TRAIN_TOOL, Net, Nodes, Unavailable, check, listening, md5,  # noqa: E402
                       one_node, run_log)

STRAY = os.path.join(BUILD, "tools", "zmq_stray")
PORT = 29641
KEY = os.urandom(32).hex()  # the launcher's secret: the test knows it to derive the run's public keys


def main():
    tmp = tempfile.mkdtemp(prefix="vf_multinode_sec_")
    try:
        net = Net(3)  # hosts 0 and 1 run the nodes, host 2 the stray
    except Unavailable as e:
        print("skip: %s" % e)
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(77)
    n = None
    try:
        cache = os.path.join(tmp, "cache.lmdb")
        subprocess.run([TRAIN_TOOL, "mkcache", cache, "32", "4", "1", "8", "8", "7"], check=True,
                       stdout=subprocess.DEVNULL)
        common = ["cache=" + cache, "steps=200", "every=100", "batch=4", "lr=2e-3", "stages=2", "micro_batches=2"]
        ref = one_node(tmp, "one", TRAIN, common)
        n = Nodes(net, tmp, "two", "torchrun", TRAIN, common + ["nodes=2"], port=PORT, env={"VFLOW_RUN_KEY": KEY})
        # the data edges: what the workers listen on besides the control socket (the tcp
        # receivers: dit_0's grad_in and adamw's grads on node 0, dit_1's act_in and
        # weights on node 1), and the bulk lanes of those edges (runtime/edge/edge_bulk.h:
        # a second port per receiver, listening until its sender is admitted). Everything
        # seen listening in the first moments of the run is a target.
        targets, t_end, t_seen = set(), time.monotonic() + 30, None
        while time.monotonic() < t_end:
            targets |= {(a, p) for h in (0, 1) for a, p in listening(net, h) if a.startswith("10.77.0.")}
            if len(targets) >= 5 and t_seen is None:
                t_seen = time.monotonic()
            if (t_seen and time.monotonic() > t_seen + 0.3) or any(p.poll() is not None for p in n.procs.values()):
                break
            time.sleep(0.02)
        check(("10.77.0.1", PORT) in targets, "the control socket listens on node 0's address: %r" % targets)
        check(sum(a == "10.77.0.2" for a, _ in targets) >= 2 and sum(a == "10.77.0.1" for a, _ in targets) >= 3,
              "the tcp receivers listen on their node's address: %r" % targets)
        check(all(a != "0.0.0.0" for a, _ in listening(net, 0) + listening(net, 1)),
              "nothing listens on every interface")
        # all at once, while the run trains: each tries a plain peer, CURVE peers that know
        # every public key of the run (identities -1..4: the coordinator, the workers), raw bytes
        strays = [(a, p, net.popen(2, [STRAY, "tcp://%s:%d" % (a, p), "--run-key", KEY, "-1:4"],
                                   os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
                  for a, p in sorted(targets)]
        for a, p, r in strays:
            out = r.communicate(timeout=60)[0]
            print("stray at %s:%d: %s" % (a, p, " / ".join(out.strip().splitlines())))
        # that they reached live sockets shows in the refusals logged below
        print("the run %s when the strays were done" %
              ("was still going" if all(p.poll() is None for p in n.procs.values()) else "had ended"))
        rcs = n.wait()
        check(rcs == {0: 0, 1: 0}, "the run ends as alone: exits %r\n%s" % (rcs, n.describe()))
        log = run_log(n.run_dir)
        check("control plane: refused" in log, "the coordinator refused the stray's handshakes")
        check("data plane: refused" in log, "a worker refused the stray's handshakes on a data edge")
        a, b = md5(os.path.join(ref, "ckpt/step-200/model.safetensors")), \
            md5(os.path.join(n.run_dir, "ckpt/step-200/model.safetensors"))
        print("one node %s, two nodes with strays %s" % (a, b))
        check(a is not None and a == b, "the weights are the one-node weights bitwise (%s vs %s)" % (a, b))
    finally:
        if n:
            n.kill()
        net.close()
    if FAILS:
        print("%d check(s) failed (kept %s)" % (len(FAILS), tmp))
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


main()
