"""End of stream through a 5-stage chain spread over 3 worker processes, the run dir
it leaves, and the synthetic source's content checked against an independent Python
implementation of its documented generator and stream digest.
vflow-test: labels=integration timeout=120
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import Run, check, finish  # noqa: E402

CHAIN = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "chain"
local src = p:stage("synthetic", { shape = {64, 256}, dtype = a.dtype or "f32", count = a.count,
                                   seed = 11, worker = "A" })
local p1 = p:stage("passthrough", { name = "p1", worker = "A" })
local p2 = p:stage("passthrough", { name = "p2", worker = "B" })
local p3 = p:stage("passthrough", { name = "p3", worker = "C", delay_ms = a.delay or 0 })
local sink = p:stage("null_sink", { name = "sink", worker = "C", expect_count = a.count })
p:connect(src, p1, { capacity = 2 })
p:connect(p1, p2, { capacity = 3 })
p:connect(p2, p3, { capacity = 1 })
p:connect(p3, sink, { capacity = 2 })
return p
"""


def chain(count, dtype="f32"):
    r = Run("chain", CHAIN, sets=["count=%d" % count, "dtype=" + dtype]).run(timeout=90)
    ok = check(r.rc == 0, "chain count=%d: exit code 0\n%s" % (count, r.describe()))
    spawned = r.spawned()
    check(len(spawned) == 3, "3 worker processes spawned, got %r" % spawned)
    by_worker = {w["worker"]: set(w["stages"]) for w in spawned}
    check({frozenset(v) for v in by_worker.values()} ==
          {frozenset(["synthetic", "p1"]), frozenset(["p2"]), frozenset(["p3", "sink"])},
          "placement by worker hint: %r" % by_worker)
    check(len({w["pid"] for w in spawned}) == 3, "3 distinct pids")
    sent = r.event("synthetic_done")
    got = r.event("null_sink_done")
    if check(len(sent) == 1 and len(got) == 1, "one done event each: %r %r" % (sent, got)):
        check(sent[0]["count"] == count and got[0]["count"] == count,
              "count %d sent and received: %r %r" % (count, sent[0], got[0]))
        check(sent[0]["checksum"] == got[0]["checksum"], "stream checksum preserved: %r %r" % (sent[0], got[0]))
    finals = r.finals()
    check(sorted(finals) == ["p1", "p2", "p3", "sink", "synthetic"], "final row per stage: %r" % sorted(finals))
    for name, row in finals.items():
        check(row["phase"] == "done", "%s final phase done: %r" % (name, row))
        check(row["items"] == count, "%s processed %d items: %r" % (name, count, row))
    check(len({row["worker"] for row in finals.values()}) == 3, "final rows name 3 workers")
    rr = r.run_row()
    check(rr is not None and rr["status"] == "done", "run row status done: %r" % rr)
    graph = json.load(open(os.path.join(r.run_dir, "graph.json")))
    check(len(graph["stages"]) == 5 and len(graph["edges"]) == 4, "graph.json has the resolved graph")
    log = r.log()
    for s in ("synthetic", "p1", "p2", "p3", "sink"):
        check("stage %s done: %d items" % (s, count) in log, "run.log says %s is done" % s)
    check("run chain done" in r.out, "summary on stdout:\n" + r.out)
    if ok:
        r.cleanup()
    return sent[0]["checksum"] if sent else None


# ---- independent reference of synthetic's content and the stream digest (synthetic.c)

M64 = (1 << 64) - 1


def mix64(x):
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return x


def crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t


TABLE = crc32c_table()


def crc32c(crc, data):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def synth_bytes(nbytes, dtype, seed, index):
    key = mix64(mix64((seed + 0x9E3779B97F4A7C15) & M64) ^ ((index * 0xD1B54A32D192ED03) & M64))
    out = bytearray()
    for j in range(nbytes // 8):
        h = mix64((key + j * 0x9E3779B97F4A7C15) & M64)
        if dtype == "f32":
            words = []
            for part in (h & 0x7FFFFF, (h >> 32) & 0x7FFFFF):
                f = struct.unpack("<f", struct.pack("<I", 0x3F800000 | part))[0]
                words.append(struct.pack("<f", (f - 1.5) * 2.0))
            out += b"".join(words)
        else:  # u8 / i32: raw bits
            out += struct.pack("<Q", h)
    return bytes(out)


def expected_digest(count, nbytes, dtype, seed):
    h = 0xCBF29CE484222325
    for i in range(count):
        ident = str(i).encode()
        c = crc32c(0, ident)
        c = crc32c(c, synth_bytes(nbytes, dtype, seed, i))
        h = ((h ^ c) * 0x100000001B3) & M64
    return "%016x" % h


REF = """
local vf = require "vflow"
local p = vf.pipeline "ref"
local src = p:stage("synthetic", { shape = {3, 8}, dtype = vf.args.dtype, count = 4, seed = 5, worker = "A" })
local sink = p:stage("null_sink", { worker = "B" })
p:connect(src, sink)
return p
"""


def reference(dtype, esize):
    r = Run("ref", REF, sets=["dtype=" + dtype]).run(timeout=60)
    check(r.rc == 0, "reference run %s\n%s" % (dtype, r.describe()))
    want = expected_digest(4, 3 * 8 * esize, dtype, 5)
    got = r.event("null_sink_done")
    check(got and got[0]["checksum"] == want,
          "synthetic %s content matches the Python reference digest %s: %r" % (dtype, want, got))
    r.cleanup()


# 500 items of 64 KiB through 5 stages and 3 processes
c1 = chain(500)
# an empty stream: end of stream alone travels the whole chain
chain(0)
# same seed, same content: the checksum is deterministic across runs
c2 = chain(500)
check(c1 == c2, "same seed gives the same stream checksum: %s %s" % (c1, c2))
# a run dir too deep for ipc socket paths (sun_path: 107 bytes): sockets go to /tmp
deep = Run("deep", CHAIN, sets=["count=20"])
deep.args[deep.args.index("--run-dir") + 1] = deep.run_dir = os.path.join(deep.dir, "d" * 120, "run")
deep.run(timeout=60)
check(deep.rc == 0, "deep run dir: exit 0\n" + deep.describe())
sockline = [ln for ln in deep.log().splitlines() if "too long for ipc sockets; using " in ln]
if check(sockline, "deep run dir: run.log names the socket dir it used"):
    sockdir = sockline[0].split("using ")[-1].strip()
    check(len(sockdir) < 90 and not os.path.exists(sockdir), "deep run dir: %s short and removed" % sockdir)
got = deep.event("null_sink_done")
check(got and got[0]["count"] == 20, "deep run dir: all items arrived: %r" % got)
deep.cleanup()

reference("f32", 4)
reference("u8", 1)
reference("i32", 4)
finish()
