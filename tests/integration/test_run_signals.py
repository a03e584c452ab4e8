"""Failures and signals of `vflow run`: a worker killed with -9 or stopped (missed
heartbeats) fails the run within 5 s naming its stages; a failing stage fails the run
with its message; SIGINT drains (sources stop, everything in flight reaches the sink)
and leaves a complete run dir; a second SIGINT aborts; a bad topology starts nothing.
No test leaves a worker process behind.
vflow-test: labels=integration timeout=240
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import Run, alive, check, finish  # noqa: E402

CHAIN = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "sig"
local src = p:stage("synthetic", { shape = {64, 1024}, count = a.count or -1, rate = a.rate or 0,
                                   seed = 4, worker = "A" })
local mid = p:stage("passthrough", { name = "mid", worker = "B" })
local sink = p:stage("null_sink", { name = "sink", worker = "C", delay_ms = a.delay or 0,
                                    expect_count = a.expect or -1 })
p:connect(src, mid, { capacity = 4 })
p:connect(mid, sink, { capacity = 4 })
return p
"""


def wait_flowing(r, timeout=20):
    """Waits until metrics.jsonl shows items at the sink."""
    t = time.monotonic() + timeout
    path = os.path.join(r.run_dir, "metrics.jsonl")
    while time.monotonic() < t and r.proc.poll() is None:
        try:
            for line in open(path):
                row = json.loads(line)
                if row.get("stage") == "sink" and row.get("items", 0) > 0:
                    return True
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return False


def no_orphans(r, what):
    left = [w for w in r.spawned() if alive(w["pid"])]
    check(not left, "%s: no worker left running: %r" % (what, left))


def started(sets, **kw):
    r = Run("sig", CHAIN, sets=sets, **kw).start()
    check(len(r.wait_spawned(3)) == 3, "3 workers spawned")
    check(wait_flowing(r), "items reach the sink\n" + r.log()[-2000:])
    return r


# ---- kill -9 of the sink's worker mid-run
r = started(["rate=2000"])
victim = r.worker_of("sink")
t0 = time.monotonic()
os.kill(victim["pid"], signal.SIGKILL)
r.wait(timeout=30)
dt = time.monotonic() - t0
print("kill -9: exit %s after %.2f s" % (r.rc, dt))
check(r.rc == 1, "kill -9: exit code 1\n" + r.describe())
check(dt < 5.0, "kill -9: the run ends within 5 s (took %.2f s)" % dt)
check("worker %s (stages: sink) killed by signal 9" % victim["worker"] in r.err,
      "kill -9: the message names the worker, its stage and the signal:\n" + r.err)
rr = r.run_row()
check(rr is not None and rr["status"] == "failed" and "killed by signal 9" in rr["message"],
      "kill -9: metrics.jsonl ends with a failed run row: %r" % rr)
no_orphans(r, "kill -9")
r.cleanup()

# ---- a stopped worker misses its heartbeats
r = started(["rate=2000"])
victim = r.worker_of("mid")
t0 = time.monotonic()
os.kill(victim["pid"], signal.SIGSTOP)
r.wait(timeout=30)
dt = time.monotonic() - t0
print("SIGSTOP: exit %s after %.2f s" % (r.rc, dt))
check(r.rc == 1, "SIGSTOP: exit code 1\n" + r.describe())
check(dt < 5.0, "SIGSTOP: the run ends within 5 s (took %.2f s)" % dt)
check("(stages: mid) sent no heartbeat" in r.err, "SIGSTOP: message names the stage:\n" + r.err)
no_orphans(r, "SIGSTOP")
r.cleanup()

# ---- a stage that fails: its message, with the stage named
r = Run("fail", CHAIN, sets=["count=10", "expect=5"]).run(timeout=60)
check(r.rc == 1, "failing stage: exit code 1\n" + r.describe())
check("stage sink (null_sink, worker" in r.err and "expected 5 items, received 10" in r.err,
      "failing stage: message names the stage and says why:\n" + r.err)
no_orphans(r, "failing stage")
r.cleanup()

# ---- SIGINT: drain. Sources stop; everything already sent reaches the sink.
r = started(["rate=500"])
t0 = time.monotonic()
r.proc.send_signal(signal.SIGINT)
r.wait(timeout=60)
dt = time.monotonic() - t0
print("SIGINT: exit %s after %.2f s" % (r.rc, dt))
check(r.rc == 1, "SIGINT: exit code 1 (interrupted)\n" + r.describe())
check(dt < 10.0, "SIGINT: drained within 10 s (took %.2f s)" % dt)
check("interrupted by SIGINT: drained cleanly (3 of 3 stages" in r.err, "SIGINT: says it drained:\n" + r.err)
graph = json.load(open(os.path.join(r.run_dir, "graph.json")))
check(len(graph["stages"]) == 3, "SIGINT: graph.json is there")
check("SIGINT: draining" in r.log() and "run interrupted" in r.log(), "SIGINT: run.log tells the story")
sent, got = r.event("synthetic_done"), r.event("null_sink_done")
if check(sent and got, "SIGINT: both ends reported: %r %r" % (sent, got)):
    check(sent[0]["count"] > 0 and sent[0]["count"] == got[0]["count"],
          "SIGINT: every item sent was received (%r / %r)" % (sent[0], got[0]))
    check(sent[0]["checksum"] == got[0]["checksum"], "SIGINT: checksums equal")
fin = r.finals()
check(sorted(fin) == ["mid", "sink", "synthetic"] and all(f["phase"] == "done" for f in fin.values()),
      "SIGINT: a final row per stage, all done: %r" % {k: v["phase"] for k, v in fin.items()})
rr = r.run_row()
check(rr is not None and rr["status"] == "interrupted", "SIGINT: run row says interrupted: %r" % rr)
check(not os.path.exists(os.path.join(r.run_dir, "sock")) or not os.listdir(os.path.join(r.run_dir, "sock")),
      "SIGINT: no socket files left")
no_orphans(r, "SIGINT")
r.cleanup()

# ---- SIGTERM drains the same way
r = started(["rate=500"])
r.proc.send_signal(signal.SIGTERM)
r.wait(timeout=60)
check(r.rc == 1 and "interrupted by SIGTERM: drained cleanly" in r.err, "SIGTERM drains:\n" + r.describe())
no_orphans(r, "SIGTERM")
r.cleanup()

# ---- a second SIGINT aborts a drain that would take long (slow sink, full queues)
r = started(["delay=400"])
r.proc.send_signal(signal.SIGINT)
time.sleep(0.3)
t0 = time.monotonic()
r.proc.send_signal(signal.SIGINT)
r.wait(timeout=30)
dt = time.monotonic() - t0
print("second SIGINT: exit %s after %.2f s" % (r.rc, dt))
check(r.rc == 1 and "interrupted by SIGINT: aborted" in r.err, "second SIGINT aborts:\n" + r.describe())
check(dt < 5.0, "second SIGINT: ends within 5 s (took %.2f s)" % dt)
rr = r.run_row()
check(rr is not None and rr["status"] == "interrupted", "abort: run row written: %r" % rr)
no_orphans(r, "second SIGINT")
r.cleanup()

# ---- a bad topology starts no worker
BAD = """
local vf = require "vflow"
local p = vf.pipeline "bad"
local src = p:stage("synthetic", { count = 3 })
local sink = p:stage("null_sinc", {})
p:connect(src, sink)
return p
"""
r = Run("bad", BAD).run(timeout=30)
check(r.rc == 2, "bad topology: exit 2\n" + r.describe())
check("null_sinc" in r.err and "did you mean 'null_sink'" in r.err, "bad topology: message:\n" + r.err)
check(not os.path.exists(r.trace), "bad topology: no worker was spawned")
check(not os.path.exists(r.run_dir), "bad topology: no run dir was created")
r.cleanup()
finish()
