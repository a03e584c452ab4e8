"""Backpressure between processes: a fast synthetic source and a slow null_sink in two
worker processes. While 2 GiB flow, the VmRSS of both workers (sampled from /proc every
20 ms) stays within capacity x item size + a fixed slack, i.e. nothing queues beyond
the edge's credits, and metrics.jsonl shows the sink's input queue full.

The slack (96 MiB) is:
  ~30 MiB  an idle worker (shared libraries: libav*, ZeroMQ, Lua; heap; stacks),
           measured by the `idle` run below;
  32 MiB   4 items the producer holds outside the edge's credits: the tensor being
           generated, the source's idle reuse buffer, the record being encoded, and
           one freed block the allocator has not returned yet (the worker trims once
           a second);
  32 MiB   margin: allocator fragments and ZeroMQ's I/O buffers.
A negative control shows the sampling sees queued data: with capacity 16 the sink's RSS
goes past the capacity-4 limit.
vflow-test: labels=integration timeout=180
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import GiB, MiB, Run, RssSampler, check, finish, rss_bytes  # noqa: E402

LUA = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "backpressure"
local src = p:stage("synthetic", { shape = {2048, 1024}, dtype = "f32", count = a.count, seed = 2,
                                   worker = "A" })
local sink = p:stage("null_sink", { worker = "B", delay_ms = a.delay, expect_count = a.count })
p:connect(src, sink, { capacity = a.cap })
return p
"""

ITEM = 2048 * 1024 * 4  # 8 MiB
SLACK = 96 * MiB


def flow(count, cap, delay, min_samples=20):
    r = Run("bp", LUA, sets=["count=%d" % count, "cap=%d" % cap, "delay=%d" % delay]).start()
    workers = r.wait_spawned(2)
    pids = [w["pid"] for w in workers]
    sampler = RssSampler(pids, every=0.02)
    sampler.start()
    r.wait(timeout=150)
    sampler.stop = True
    sampler.join()
    check(r.rc == 0, "cap %d: exit 0\n%s" % (cap, r.describe()))
    names = {w["pid"]: ("source" if "synthetic" in w["stages"] else "sink") for w in workers}
    peak = {names[p]: sampler.max[p] for p in pids}
    check(all(sampler.samples[p] >= min_samples for p in pids), "enough RSS samples: %r" % sampler.samples)
    return r, peak


# An idle-ish run: the RSS of a worker that moves almost nothing.
r0, idle = flow(count=1, cap=1, delay=0, min_samples=1)
print("idle worker RSS: source %.1f MiB, sink %.1f MiB" % (idle["source"] / MiB, idle["sink"] / MiB))
check(max(idle.values()) < 64 * MiB, "an idle worker stays under 64 MiB: %r" % idle)
r0.cleanup()

CAP = 4
COUNT = 2 * GiB // ITEM  # 256 items of 8 MiB
r, peak = flow(COUNT, CAP, delay=60)
limit = CAP * ITEM + SLACK
print("2 GiB, capacity %d x %d MiB items: peak RSS source %.1f MiB, sink %.1f MiB, limit %.1f MiB, %.1f s" %
      (CAP, ITEM // MiB, peak["source"] / MiB, peak["sink"] / MiB, limit / MiB, r.elapsed()))
for side in ("source", "sink"):
    check(peak[side] <= limit, "%s RSS %.1f MiB within capacity x item + slack = %.1f MiB" %
          (side, peak[side] / MiB, limit / MiB))
sent, got = r.event("synthetic_done"), r.event("null_sink_done")
check(sent and got and sent[0]["checksum"] == got[0]["checksum"] and got[0]["bytes"] == COUNT * ITEM,
      "all 2 GiB arrived intact: %r %r" % (sent, got))
rows = [x for x in r.rows() if x.get("type") == "stage"]
fills = [x["fill"].get("in", 0) for x in rows if x["stage"] == "null_sink"]
check(fills and max(fills) >= 0.75, "the sink's input queue ran full (backpressure engaged): %r" % fills)
check(all(f <= 1.0 + 1e-9 for f in fills), "queue fill never above capacity: %r" % fills)
src_busy = [x["busy"] for x in rows if x["stage"] == "synthetic" and x["phase"] == "run"]
check(src_busy and min(src_busy) < 0.9, "the source spent time blocked on credits: busy %r" % src_busy)
rss_rows = [x["rss"] for x in rows]
check(rss_rows and max(rss_rows) <= limit, "metrics rows report the workers' RSS within the limit")
if r.rc == 0:
    r.cleanup()

# Negative control: a deep edge really holds its items, and the sampling sees them.
r2, peak2 = flow(count=48, cap=16, delay=60)
print("control, capacity 16: peak RSS sink %.1f MiB (capacity-4 limit %.1f MiB)" % (peak2["sink"] / MiB, limit / MiB))
check(peak2["sink"] > limit, "with capacity 16 the sink holds more than the capacity-4 limit: %.1f MiB" %
      (peak2["sink"] / MiB))
if r2.rc == 0:
    r2.cleanup()
finish()
