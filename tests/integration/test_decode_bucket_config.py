# test_decode_bucket_config.py — decode with an Open-Sora-style bucket_config through the
# real `vflow` binary: decode -> tiny VAE -> latent_cache over videos of several aspect
# ratios, sizes and lengths made here, with the table written as Open-Sora writes it
# (integer length keys, { [33] = {0.5, 2}, ... }). Checked against rules written again
# here in Python:
#  - the expansion: every resolution gives one bucket per ratio 9:16, 3:4, 1:1, 4:3, 16:9,
#    W x H the multiples of 16 nearest sqrt(area * r) x sqrt(area / r);
#  - each file goes to the largest resolution whose area its display size reaches to
#    80 %, there to the nearest ratio; a file below every resolution is dropped, named
#    in quarantine.jsonl; each file's clips are planned at its longest length;
#  - each clip is kept at that length when the hash of (seed, path, clip, length),
#    recomputed here, is below the length's keep, else at the next shorter length whose
#    decision keeps it (its first frames), else dropped; so every record's bucket,
#    bucket_batch, latent shape, transform and frame0 are as computed here, and the
#    decode stages' metrics rows count the dropped and shortened clips;
#  - a rerun into a fresh cache gives the same keys, a second seed does not;
#  - bad tables exit 2 at check time naming the entry.
# vflow-test: labels=decode,precompute timeout=600
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_decode_buckets as tdb  # noqa: E402  (re-execs into the reference venv when needed)

import lmdb  # noqa: E402

VFLOW, MKVIDEO, check, run, fails = tdb.VFLOW, tdb.MKVIDEO, tdb.check, tdb.run, tdb.fails

CONFIG_LUA = """{
  ["256"] = { [17] = {1.0, 4}, [33] = {0.5, 2} },
  ["144p"] = { [9] = {0.6, 8}, [17] = {0.5, 4} },
}"""
CONFIG = {"256": {17: (1.0, 4), 33: (0.5, 2)}, "144p": {9: (0.6, 8), 17: (0.5, 4)}}
AREA = {"144p": 36864, "256": 65536}
RATIOS = [(9, 16), (3, 4), (1, 1), (4, 3), (16, 9)]

PIPE = """local vf = require "vflow"
local a = vf.args
local p = vf.pipeline("bucket_config")
local clips = p:stage("decode", { source = a.source, bucket_config = %s, seed = a.seed or 0, workers = 2%s })
local vae = p:stage("vae_encode", { model = vf.models.vae("tiny"), micro_batch = 2, chunk = 4, device = "cpu" })
local cache = p:stage("latent_cache", { path = a.cache })
p:connect(clips, vae, { capacity = 4 })
p:connect(vae, cache, { capacity = 8 })
return p
"""

M64 = (1 << 64) - 1


def keep_u(seed, path, clip, frames):
    """FNV-1a 64 of "<seed>\\n<path>\\n<clip>\\n<frames>", splitmix64's finalizer, top 53 bits."""
    h = 0xCBF29CE484222325
    for b in ("%d\n%s\n%d\n%d" % (seed, path, clip, frames)).encode():
        h ^= b
        h = (h * 0x100000001B3) & M64
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & M64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & M64
    h ^= h >> 31
    return (h >> 11) / float(1 << 53)


def buckets():
    """[(res, W, H)] in resolution order largest first, ratios in list order."""
    out = []
    for res in sorted(CONFIG, key=lambda r: -AREA[r]):
        for rw, rh in RATIOS:
            w = max(16, int(math.floor(math.sqrt(AREA[res] * rw / rh) / 16 + 0.5)) * 16)
            h = max(16, int(math.floor(math.sqrt(AREA[res] * rh / rw) / 16 + 0.5)) * 16)
            if (res, w, h) not in out:
                out.append((res, w, h))
    return out


def pick(dar, area):
    for res in sorted(CONFIG, key=lambda r: -AREA[r]):
        if area >= 0.8 * AREA[res]:
            cands = [(abs(math.log(w / h) - math.log(dar)), w, h) for r, w, h in buckets() if r == res]
            d, w, h = min(cands, key=lambda c: c[0])
            return res, w, h
    return None


def probe_size(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=width,height,sample_aspect_ratio", "-of", "json", path],
                         capture_output=True, text=True, check=True).stdout
    s = json.loads(out)["streams"][0]
    sar = s.get("sample_aspect_ratio", "1:1")
    num, den = (int(x) for x in sar.split(":")) if sar not in ("0:1", "N/A") else (1, 1)
    return int(s["width"]) * int(s["height"]) * num / den


def expected(v, seed):
    """path -> None (dropped as too small) or [(clip, bucket name, batch, F, planned F)]."""
    want = {}
    for name in sorted(os.listdir(v)):
        path = os.path.join(v, name)
        dar, n = tdb.probe(path)
        p = pick(dar, probe_size(path))
        if p is None:
            want[path] = None
            continue
        res, w, h = p
        lens = sorted(CONFIG[res], reverse=True)
        plan = max(f for f in lens if f <= n)
        clips = []
        for k in range((n - plan) // plan + 1):
            for f in [f for f in lens if f <= plan]:
                if CONFIG[res][f][0] >= 1 or keep_u(seed, path, k, f) < CONFIG[res][f][0]:
                    clips.append((k, "%dx%dx%d" % (w, h, f), CONFIG[res][f][1], f, plan))
                    break
        want[path] = clips
    return want


def make_videos(v):
    os.makedirs(v)
    mk = [("wide.mp4", "320x180", 140, []), ("wide_small.mp4", "256x144", 120, []),
          ("tall.mp4", "180x320", 100, []), ("rot.mp4", "320x180", 70, ["--rotate", "90"]),
          ("square.mp4", "200x200", 110, []), ("four3.mp4", "320x240", 100, []),
          ("tiny.mp4", "96x96", 40, [])]
    for name, size, n, extra in mk:
        subprocess.run([MKVIDEO, "-o", os.path.join(v, name), "-n", str(n), "-s", size] + extra,
                       capture_output=True, check=True)


def records(cache):
    env = lmdb.open(cache, readonly=True, lock=False, subdir=True)
    out = {}
    with env.begin() as txn:
        for k, val in txn.cursor():
            if k != b"__meta__":
                out[k.decode()] = tdb.decode(bytes(val))
    env.close()
    return out


def body(tmp):
    v = os.path.join(tmp, "videos")
    make_videos(v)
    pipe = os.path.join(tmp, "p.lua")
    with open(pipe, "w") as f:
        f.write(PIPE % (CONFIG_LUA, ""))
    want = expected(v, 0)
    check(want[os.path.join(v, "tiny.mp4")] is None, "96x96 is below 80 % of 144p")
    shortened = sum(1 for c in sum((x for x in want.values() if x), []) if c[3] != c[4])
    total = sum(len(x) for x in want.values() if x)
    print("expected:", json.dumps({os.path.basename(p): x for p, x in want.items()}))

    cache = os.path.join(tmp, "c.lmdb")
    rd = os.path.join(tmp, "r1")
    rc, out = run([VFLOW, "run", pipe, "--set", "source=" + v, "--set", "cache=" + cache, "--run-dir", rd])
    check(rc == 0, "run exit %d, want 0:\n%s" % (rc, out[-3000:]))
    if rc != 0:
        return 1

    # ---- quarantine: the too-small file, with the reason
    q = [json.loads(l) for l in open(os.path.join(rd, "quarantine.jsonl"))]
    dropped = sorted(p for p, x in want.items() if x is None)
    check(sorted(r["path"] for r in q) == dropped, "quarantined %s, want %s" % ([r["path"] for r in q], dropped))
    for r in q:
        check("below 80% of the smallest resolution" in r["reason"] and "144p" in r["reason"], "reason: %s" % r["reason"])

    # ---- every record is the clip computed here
    recs = records(cache)
    got = {}
    for key, (iid, m, shapes) in recs.items():
        got.setdefault(m["path"], []).append((int(m["clip"]), m["bucket"], int(m["bucket_batch"]), m, shapes))
    for path, clips in want.items():
        g = sorted(got.get(path, []), key=lambda c: c[0])
        w_ = clips or []
        check([c[:3] for c in g] == [c[:3] for c in w_],
              "%s: clips %s, want %s" % (os.path.basename(path), [c[:3] for c in g], [c[:3] for c in w_]))
        for (k, b, batch, m, shapes), (_, _, _, F, plan) in zip(g, w_):
            W, H, _ = (int(x) for x in b.split("x"))
            check(shapes["latent"] == (4, (F - 1) // 4 + 1, H // 8, W // 8), "%s: latent %s" % (b, shapes["latent"]))
            check(("frames=%d;" % F) in m["transform"] and ("size=%dx%d;" % (W, H)) in m["transform"],
                  "%s: transform %s" % (b, m["transform"]))
            check(m["frame0"] == k * plan, "%s clip %d: frame0 %s, want %d" % (b, k, m["frame0"], k * plan))
    n_keep_dropped = 0
    for path, clips in want.items():
        if clips is None:
            continue
        dar, n = tdb.probe(path)
        res, _, _ = pick(dar, probe_size(path))
        plan = max(f for f in CONFIG[res] if f <= n)
        n_keep_dropped += (n - plan) // plan + 1 - len(clips)
    check(n_keep_dropped > 0 and shortened > 0, "the videos exercise neither dropping (%d) nor shortening (%d)"
          % (n_keep_dropped, shortened))

    # ---- the decode stages' metrics rows, summed over the workers
    sums = {"dropped_small": 0, "dropped_keep": 0, "fell_shorter": 0}
    clips = {}
    for line in open(os.path.join(rd, "metrics.jsonl")):
        row = json.loads(line)
        if row.get("event") == "buckets":
            for k in sums:
                sums[k] += row.get(k, -1000)
            for k, n in row["clips"].items():
                clips[k] = clips.get(k, 0) + n
    check(sums == {"dropped_small": len(dropped), "dropped_keep": n_keep_dropped, "fell_shorter": shortened},
          "metrics %s, want small %d keep %d shorter %d" % (sums, len(dropped), n_keep_dropped, shortened))
    want_counts = {}
    for c in sum((x for x in want.values() if x), []):
        want_counts[c[1]] = want_counts.get(c[1], 0) + 1
    check({k: n for k, n in clips.items() if n} == want_counts, "decode counts %s, want %s" % (clips, want_counts))
    check(sum(clips.values()) == total == len(recs), "%d clips counted, %d expected, %d records"
          % (sum(clips.values()), total, len(recs)))
    names = set(clips)
    check(names == set("%dx%dx%d" % (w, h, f) for r, w, h in buckets() for f in CONFIG[r]),
          "declared buckets %s" % sorted(names))

    # ---- a rerun into a fresh cache: the same keys; another seed: other keys
    cache2 = os.path.join(tmp, "c2.lmdb")
    rc, out = run([VFLOW, "run", pipe, "--set", "source=" + v, "--set", "cache=" + cache2,
                   "--run-dir", os.path.join(tmp, "r2")])
    check(rc == 0 and set(records(cache2)) == set(recs), "rerun: exit %d, keys differ" % rc)
    want1 = expected(v, 1)
    check(want1 != want, "seed 1 keeps the same clips as seed 0")
    cache3 = os.path.join(tmp, "c3.lmdb")
    rc, out = run([VFLOW, "run", pipe, "--set", "source=" + v, "--set", "cache=" + cache3, "--set", "seed=1",
                   "--run-dir", os.path.join(tmp, "r3")])
    r3 = records(cache3)
    got1 = sorted((m["path"], int(m["clip"]), m["bucket"]) for _, m, _ in r3.values())
    exp1 = sorted((p, c[0], c[1]) for p, x in want1.items() if x for c in x)
    check(rc == 0 and got1 == exp1, "seed 1: exit %d, clips %s, want %s" % (rc, got1, exp1))

    # ---- bad tables: exit 2 at check time, naming the entry
    bad = [('{ ["470p"] = { [17] = {1.0, 4} } }', "", ["unknown resolution \"470p\""]),
           ('{ ["256"] = { [18] = {1.0, 4} } }', "", ["bucket_config[\"256\"][18]", "not 1 + 4k"]),
           ('{ ["256"] = { [17] = {1.5, 4} } }', "", ["bucket_config[\"256\"][17]", "keep probability 1.5"]),
           ('{ ["256"] = { [17] = {1.0, 0} } }', "", ["bucket_config[\"256\"][17]", "batch 0"]),
           ('{ ["256"] = { [17] = {1.0, 4} } }', ", buckets = { {w = 256, h = 256, frames = {17}, batch = 1} }",
            ["buckets", "bucket_config", "not both"])]
    for cfg, extra, words in bad:
        bp = os.path.join(tmp, "bad.lua")
        with open(bp, "w") as f:
            f.write(PIPE % (cfg, extra))
        rc, out = run([VFLOW, "check", bp, "--set", "source=" + v, "--set", "cache=" + os.path.join(tmp, "x.lmdb")])
        check(rc == 2 and all(w in out for w in words), "%s: exit %d, want 2 naming %s:\n%s" % (cfg, rc, words, out))
    if fails:
        print("%d failures" % len(fails))
        return 1
    print("ok: %d clips, %d dropped by keep, %d shortened" % (total, n_keep_dropped, shortened))
    return 0


def main():
    tmp = tempfile.mkdtemp(prefix="vf_bktcfg.")
    try:
        return body(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
