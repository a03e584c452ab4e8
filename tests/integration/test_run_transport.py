"""1 GiB through an ipc edge and 1 GiB through a tcp edge between two worker processes:
no loss, no duplication, no reordering, no corruption. The source computes the stream
digest of what it sent (id + payload of every item, order-sensitive); the sink computes
it over what arrived and also checks it in-run (expect_count); the test compares both.
vflow-test: labels=integration timeout=180
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import GiB, Run, check, finish  # noqa: E402

XFER = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "xfer"
local src = p:stage("synthetic", { shape = {256, 1024}, dtype = "f32", count = a.count, seed = 21,
                                   worker = "A" })
local sink = p:stage("null_sink", { worker = "B", expect_count = a.count })
p:connect(src, sink, { capacity = 4, transport = a.tr })
return p
"""

ITEM = 256 * 1024 * 4  # 1 MiB
COUNT = GiB // ITEM

for tr in ("ipc", "tcp"):
    r = Run("xfer_" + tr, XFER, sets=["count=%d" % COUNT, "tr=" + tr]).run(timeout=120)
    check(r.rc == 0, "%s: exit 0\n%s" % (tr, r.describe()))
    spawned = r.spawned()
    check(len(spawned) == 2 and len({w["pid"] for w in spawned}) == 2,
          "%s: two worker processes: %r" % (tr, spawned))
    sent, got = r.event("synthetic_done"), r.event("null_sink_done")
    if check(sent and got, "%s: done events present" % tr):
        s, g = sent[0], got[0]
        check(s["count"] == COUNT and g["count"] == COUNT, "%s: %d items each way: %r %r" % (tr, COUNT, s, g))
        check(g["bytes"] == COUNT * ITEM, "%s: %d payload bytes arrived: %r" % (tr, COUNT * ITEM, g))
        check(s["checksum"] == g["checksum"], "%s: checksums equal: %r %r" % (tr, s, g))
    graph = json.load(open(os.path.join(r.run_dir, "graph.json")))
    check(graph["edges"][0]["transport"] == tr, "%s: graph.json records the transport: %r" % (tr, graph["edges"]))
    fin = r.finals()
    if "synthetic" in fin:
        mbs = fin["synthetic"]["bytes_s"] / (1 << 20)
        print("%s: 1 GiB in %.2f s of stage time (%.0f MiB/s), run %.2f s" %
              (tr, fin["synthetic"]["time_s"], mbs, r.elapsed()))
    if r.rc == 0:
        r.cleanup()
finish()
