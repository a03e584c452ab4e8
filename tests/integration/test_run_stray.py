"""A process that is not part of a run tries the run's tcp edge while items flow: a plain
ZeroMQ peer, a CURVE peer with its own keys, and raw bytes (tests/tools/zmq_stray). The
run's tcp sockets authenticate with CURVE (runtime/edge/curve.h): the strays are refused
in the handshake, no worker crashes, and the run ends as it would have alone — exactly the
items the source sent, with the same stream digest.
vflow-test: labels=integration timeout=120
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import Run, check, finish  # noqa: E402

TOOL = os.path.join(os.environ["VFLOW_BUILD"], "tools", "zmq_stray")

XFER = """
local vf = require "vflow"
local p = vf.pipeline "stray"
local src = p:stage("synthetic", { shape = {1024}, dtype = "f32", count = 60, seed = 5, worker = "A" })
local sink = p:stage("null_sink", { worker = "B", expect_count = 60, delay_ms = 40 })
p:connect(src, sink, { capacity = 2, transport = "tcp" })
return p
"""


def listening_ports(pid):
    """TCP ports a process listens on (from /proc: its socket inodes in /proc/net/tcp)."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if t.startswith("socket:["):
                inodes.add(t[8:-1])
    except OSError:
        return []
    ports = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                ports.append(int(f[1].split(":")[1], 16))
    return ports


r = Run("stray", XFER).start()
spawned = r.wait_spawned(2)
sink = r.worker_of("null_sink")
ports = []
t_end = time.monotonic() + 10
while sink and not ports and time.monotonic() < t_end:
    ports = listening_ports(sink["pid"])
    time.sleep(0.05)
check(ports, "the sink's worker listens on a tcp port: %r" % spawned)
for port in ports:
    out = subprocess.run([TOOL, "tcp://127.0.0.1:%d" % port], capture_output=True, text=True, timeout=30)
    check(out.returncode == 0, "zmq_stray ran: %s %s" % (out.stdout, out.stderr))
    print(out.stdout.strip())
r.wait(timeout=90)
check(r.rc == 0, "the run ends as alone: exit 0\n%s" % r.describe())
sent, got = r.event("synthetic_done"), r.event("null_sink_done")
if check(sent and got, "done events present"):
    check(sent[0]["count"] == 60 and got[0]["count"] == 60, "60 items each way: %r %r" % (sent, got))
    check(sent[0]["checksum"] == got[0]["checksum"], "the same stream digest: %r %r" % (sent, got))
if r.rc == 0:
    r.cleanup()
finish()
