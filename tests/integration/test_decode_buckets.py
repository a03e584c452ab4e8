# test_decode_buckets.py — decode with buckets through the real `vflow` binary:
# pipelines/precompute_buckets.lua (decode -> tiny VAE -> latent_cache, three buckets
# 256x144, 144x256, 192x192 with lengths 17 and 33) over videos of several aspect ratios
# and lengths made here: landscape, portrait, square, a 90-degree rotation flag, anamorphic
# pixels (SAR 16:9 on a square frame), 4:3 (exactly between 16:9 and 1:1: the tie goes to
# the first listed of equal area), and one too short for any length. Checked against facts
# ffprobe gives and rules written again here in Python:
#  - each file's bucket is the nearest in log aspect ratio of its display aspect ratio
#    (SAR and rotation applied), its length the longest that its frame count allows, its
#    clip count floor((n - F) / F) + 1; the too-short file is dropped, named in
#    quarantine.jsonl with its bucket, and the run exits 0;
#  - every cache record carries bucket "<W>x<H>x<F>" and bucket_batch, its latent is
#    (4, (F-1)/4+1, H/8, W/8), its transform names F and WxH, its first frame is clip * F;
#    its key is an independent Python FNV-1a-128 of the provenance fields followed by
#    "bucket\0" name "\0";
#  - "__meta__" buckets == the counts computed here == the decode stages' metrics rows;
#    `vflow cache stat` prints them, `vflow cache verify` is clean;
#  - a rerun encodes and writes nothing (the skip key includes the bucket);
#  - each declared bucket that no video reached gets one warning line naming it;
#  - bad buckets exit 2 at check time naming the bucket (size not a multiple of 16, a
#    length not 1 + 4k, a batch of 0, lengths and batches of different counts).
# vflow-test: labels=decode,precompute timeout=600
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import lmdb
    import numpy as np
except ImportError as e:
    ref = os.environ.get("VFLOW_REF_PY", "/opt/vflow-ref/bin/python")
    if os.environ.get("VF_BKT_REEXEC") != "1" and os.path.exists(ref):
        os.environ["VF_BKT_REEXEC"] = "1"
        os.execv(ref, [ref, os.path.abspath(__file__)] + sys.argv[1:])
    print("skip: %s" % e)
    sys.exit(77)

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.abspath(os.environ.get("VFLOW_BUILD", "build"))
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(BUILD, "vflow")
MKVIDEO = os.path.join(BUILD, "tools", "mkvideo")
PIPELINE = os.path.join(SRC, "pipelines", "precompute_buckets.lua")
BUCKETS = [(256, 144), (144, 256), (192, 192)]
LENGTHS = [17, 33]
BATCH = {17: 4, 33: 2}
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def run(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    return p.returncode, p.stdout + p.stderr


# ---- independent implementations
def fnv128(data):
    h = 0x6C62272E07BB014262B821756295C58D
    prime = 0x0000000001000000000000000000013B
    for b in data:
        h ^= b
        h = (h * prime) & ((1 << 128) - 1)
    return "%032x" % h


def key_of(source, clip, transform, vae, bucket):
    parts = [b"vflow-latent-key/1", source.encode(), str(clip).encode(), transform.encode(), vae.encode()]
    parts += [b"bucket", bucket.encode()]
    return fnv128(b"".join(p + b"\0" for p in parts))


CRC_TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    CRC_TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def decode(rec):
    """The codec record (runtime/core/item.h) -> (id, meta, {name: shape})."""
    if rec[:4] != b"VFIT":
        raise ValueError("magic")
    ver, flags, total = struct.unpack_from("<HHQ", rec, 4)
    if ver != 1 or total != len(rec) or crc32c(rec[:total - 4]) != struct.unpack_from("<I", rec, total - 4)[0]:
        raise ValueError("header or crc")
    p = 16

    def take_str():
        nonlocal p
        n = struct.unpack_from("<I", rec, p)[0]
        s = rec[p + 4:p + 4 + n].decode()
        p += 4 + n
        return s

    iid = take_str()
    meta = {}
    nm = struct.unpack_from("<I", rec, p)[0]
    p += 4
    for _ in range(nm):
        k = take_str()
        kind = rec[p]
        p += 1
        if kind == 0:
            meta[k] = take_str()
        else:
            meta[k] = struct.unpack_from("<d", rec, p)[0]
            p += 8
    nt = struct.unpack_from("<I", rec, p)[0]
    p += 4
    shapes = {}
    for _ in range(nt):
        name = take_str()
        dt, nd, loc, _z = rec[p:p + 4]
        p += 4
        shapes[name] = tuple(struct.unpack_from("<%dq" % nd, rec, p))
        p += 8 * nd
        nloc = struct.unpack_from("<I", rec, p)[0]
        p += 4 + nloc
    return iid, meta, shapes


def probe(path):
    """(display aspect ratio, readable frames) from ffprobe."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
                          "stream=width,height,sample_aspect_ratio,nb_read_frames:stream_side_data=rotation",
                          "-of", "json", path], capture_output=True, text=True, check=True).stdout
    s = json.loads(out)["streams"][0]
    w, h = int(s["width"]), int(s["height"])
    sar = s.get("sample_aspect_ratio", "1:1")
    num, den = (int(x) for x in sar.split(":")) if sar not in ("0:1", "N/A") else (1, 1)
    rot = 0
    for sd in s.get("side_data_list", []):
        rot = int(sd.get("rotation", 0))
    dar = w * num / den / h
    if rot % 180:
        dar = 1 / dar
    return dar, int(s["nb_read_frames"])


def expected_bucket(dar):
    best, bd, barea = None, None, None
    for w, h in BUCKETS:  # nearest in |log ratio|; ties: larger area, then first listed
        d = abs(math.log(w / h) - math.log(dar))
        if best is None or d < bd - 1e-9 or (abs(d - bd) <= 1e-9 and w * h > barea):
            best, bd, barea = (w, h), d, w * h
    return best


def make_videos(v):
    os.makedirs(v)
    mk = [("wide.mp4", "320x180", 60, []), ("long_wide.mp4", "320x180", 100, []),
          ("tall.mp4", "180x320", 40, []), ("rot.mp4", "320x180", 36, ["--rotate", "90"]),
          ("square.mp4", "256x256", 20, []), ("four3.mp4", "320x240", 34, []),
          ("short.mp4", "256x256", 10, [])]
    for name, size, n, extra in mk:
        subprocess.run([MKVIDEO, "-o", os.path.join(v, name), "-n", str(n), "-s", size] + extra,
                       capture_output=True, check=True)
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=240x240:rate=25", "-frames:v", "24",
                    "-vf", "setsar=16/9", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-y",
                    os.path.join(v, "anam.mp4")], check=True)


def main():
    tmp = tempfile.mkdtemp(prefix="vf_buckets.")
    try:
        return body(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def body(tmp):
    v = os.path.join(tmp, "videos")
    make_videos(v)
    # ---- the expectation, from ffprobe and the rules
    want_files = {}   # path -> (bucket name, clips) or None (dropped)
    want_meta = {}
    for name in sorted(os.listdir(v)):
        path = os.path.join(v, name)
        dar, n = probe(path)
        w, h = expected_bucket(dar)
        fit = [f for f in LENGTHS if f <= n]
        if not fit:
            want_files[path] = None
            continue
        f = max(fit)
        b = "%dx%dx%d" % (w, h, f)
        want_files[path] = (b, (n - f) // f + 1)
        m = want_meta.setdefault(b, {"entries": 0, "batch": BATCH[f],
                                     "latent": "(4,%d,%d,%d)" % ((f - 1) // 4 + 1, h // 8, w // 8)})
        m["entries"] += want_files[path][1]
    check(want_files[os.path.join(v, "four3.mp4")][0] == "256x144x33", "the 4:3 tie goes to the first listed")
    check(want_files[os.path.join(v, "rot.mp4")][0].startswith("144x256"), "rotated file to the portrait bucket")
    check(want_files[os.path.join(v, "anam.mp4")][0] == "256x144x17", "anamorphic file to the 16:9 bucket")
    print("expected:", json.dumps(want_meta, sort_keys=True))

    cache = os.path.join(tmp, "c.lmdb")
    rd = os.path.join(tmp, "r1")
    rc, out = run([VFLOW, "run", PIPELINE, "--set", "source=" + v, "--set", "cache=" + cache, "--run-dir", rd])
    check(rc == 0, "precompute_buckets exit %d, want 0:\n%s" % (rc, out[-3000:]))
    if rc != 0:
        return 1

    # ---- a declared bucket no video reached: one warning line each, none for the others
    import re
    log = open(os.path.join(rd, "run.log")).read()
    warned = sorted(re.findall(r"bucket (\d+x\d+x\d+): no samples", log))
    empty = sorted("%dx%dx%d" % (w, h, f) for w, h in BUCKETS for f in LENGTHS
                   if "%dx%dx%d" % (w, h, f) not in want_meta)
    check(empty and warned == empty, "warned about %s, want %s" % (warned, empty))

    # ---- quarantine: exactly the dropped file, with its bucket
    q = [json.loads(l) for l in open(os.path.join(rd, "quarantine.jsonl"))]
    dropped = sorted(p for p, x in want_files.items() if x is None)
    check(sorted(r["path"] for r in q) == dropped, "quarantined %s, want %s" % ([r["path"] for r in q], dropped))
    for r in q:
        check("dropped: bucket 192x192" in r["reason"] and "too short" in r["reason"], "reason: %s" % r["reason"])

    # ---- the decode stages' counts (metrics rows), summed over the workers
    dec = {}
    nshort = 0
    for line in open(os.path.join(rd, "metrics.jsonl")):
        row = json.loads(line)
        if row.get("event") == "buckets":
            for k, n in row["clips"].items():
                dec[k] = dec.get(k, 0) + n
            nshort += row["dropped_short"]
    check({k: n for k, n in dec.items() if n} == {k: m["entries"] for k, m in want_meta.items()},
          "decode counts %s" % dec)
    check(nshort == len(dropped), "dropped_short %d, want %d" % (nshort, len(dropped)))

    # ---- every record
    env = lmdb.open(cache, readonly=True, lock=False, subdir=True)
    per_file = {}
    with env.begin() as txn:
        meta = json.loads(txn.get(b"__meta__"))
        for k, val in txn.cursor():
            if k == b"__meta__":
                continue
            iid, m, shapes = decode(bytes(val))
            path = m["path"]
            want = want_files.get(path)
            check(want is not None, "%s: a record of a file that makes no clip" % iid)
            if not want:
                continue
            b = want[0]
            W, H, F = (int(x) for x in b.split("x"))
            per_file[path] = per_file.get(path, 0) + 1
            check(m.get("bucket") == b, "%s: bucket %s, want %s" % (iid, m.get("bucket"), b))
            check(m.get("bucket_batch") == BATCH[F], "%s: bucket_batch %s" % (iid, m.get("bucket_batch")))
            check(shapes["latent"] == (4, (F - 1) // 4 + 1, H // 8, W // 8), "%s: latent %s" % (iid, shapes["latent"]))
            check(("frames=%d;" % F) in m["transform"] and ("size=%dx%d;" % (W, H)) in m["transform"],
                  "%s: transform %s" % (iid, m["transform"]))
            check(m["frame0"] == m["clip"] * F, "%s: frame0 %s clip %s" % (iid, m["frame0"], m["clip"]))
            want_key = key_of(m["source"], int(m["clip"]), m["transform"], m["vae"], b)
            check(k.decode() == want_key, "%s: key %s, want %s" % (iid, k.decode(), want_key))
    env.close()
    for path, want in want_files.items():
        check(per_file.get(path, 0) == (want[1] if want else 0),
              "%s: %d records, want %s" % (os.path.basename(path), per_file.get(path, 0), want))
    check(meta.get("buckets") == want_meta, "meta buckets %s, want %s" % (meta.get("buckets"), want_meta))
    print("meta buckets:", json.dumps(meta.get("buckets"), sort_keys=True))

    rc, out = run([VFLOW, "cache", "stat", cache])
    for b, m in want_meta.items():
        check(("%s" % b) in out and ("batch %d, latent %s" % (m["batch"], m["latent"])) in out,
              "cache stat lacks %s:\n%s" % (b, out))
    rc, out = run([VFLOW, "cache", "verify", cache])
    check(rc == 0 and "0 problems" in out, "verify: exit %d\n%s" % (rc, out))

    # ---- a rerun writes nothing
    rc, out = run([VFLOW, "run", PIPELINE, "--set", "source=" + v, "--set", "cache=" + cache,
                   "--run-dir", os.path.join(tmp, "r2")])
    log = open(os.path.join(tmp, "r2", "run.log")).read()
    nrec = sum(m["entries"] for m in want_meta.values())
    check(rc == 0 and ("skipped %d cached clips" % nrec) in log, "rerun: exit %d, no 'skipped %d cached':\n%s"
          % (rc, nrec, log[-2000:]))

    # ---- bad buckets: exit 2 at check time, naming the bucket
    bad = [(["buckets=250x144"], ["bucket 250x144", "multiple of 16"]),
           (["lengths=17,18"], ["bucket 256x144", "length 18 is not 1 + 4k"]),
           (["batch=0"], ["bucket 256x144", "batch 0"]),
           (["lengths=17,33", "batch=4,2,1"], ["bucket 256x144", "2 lengths (frames) but 3 batch sizes"])]
    for sets, want in bad:
        args = [VFLOW, "check", PIPELINE, "--set", "source=" + v, "--set", "cache=" + os.path.join(tmp, "x.lmdb")]
        for s_ in sets:
            args += ["--set", s_]
        rc, out = run(args)
        check(rc == 2 and all(w in out for w in want), "%s: exit %d, want 2 naming %s:\n%s" % (sets, rc, want, out))
    if fails:
        print("%d failures" % len(fails))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
