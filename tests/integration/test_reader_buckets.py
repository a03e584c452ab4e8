#!/usr/bin/python3
# test_reader_buckets.py — latent_reader over a cache of three buckets (entries with
# "bucket" metadata and three latent shapes, written by tests/tools/cache_tool.c), read
# back through cache_tool and checked against this file's own model of the documented
# order (stages/reader/latent_reader.h; Philox4x32-10 written here, not taken from the C code):
#  - every batch holds one bucket's entries, as many as that bucket's batch size (from
#    the entries' "bucket_batch", the summary's "buckets", the declared list, else the
#    reader's batch); its latent is (B, z, (F-1)/4+1, H/8, W/8) and holds the values the
#    writer put in those entries;
#  - each epoch covers every entry exactly once, less each bucket's n mod B (drop_last),
#    and the batches are exactly the ones recomputed here from the seed and epoch;
#  - resuming from any batch's cursor yields the remaining batches bitwise (tensors too);
#  - two shards: disjoint, same bucket at every step, union = every full-batch entry;
#  - the declared bucket list: agreeing gives the same batches; a bucket the cache lacks,
#    a batch that disagrees with the summary, frames not 1 + 4k, sizes not multiples of
#    8, batch 0, or a cache bucket left undeclared are refused naming the bucket;
#  - a cursor of other buckets (another batch size) is refused;
#  - a damaged payload fails the read naming the entry, or (on_bad = skip) drops its batch.
# vflow-test: timeout=300
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import lmdb
    import numpy as np
    from safetensors.numpy import load_file
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

BUILD = os.environ.get("VFLOW_BUILD", "build")
TOOL = os.path.join(BUILD, "tools", "cache_tool")
M32 = 0xFFFFFFFF
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def run(args):
    p = subprocess.run([TOOL] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------- Philox4x32-10 (runtime/philox.h)
def philox(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
    return c0, c1, c2, c3


def shuffle(n, seed, epoch, ident):
    """Fisher-Yates of latent_reader.h on stream (seed, step = epoch, id, SHUFFLE = 4)."""
    out = philox((4, epoch & M32, epoch >> 32, 0x67726676), (seed & M32, seed >> 32))
    key = (out[0], out[1])
    cache = {}

    def word(i):
        b = i // 4
        if b not in cache:
            cache[b] = philox((b & M32, b >> 32, ident & M32, ident >> 32), key)
        return cache[b][i % 4]

    p = list(range(n))
    for i in range(n - 1, 0, -1):
        rnd = word(2 * i) | word(2 * i + 1) << 32
        j = (rnd * (i + 1)) >> 64
        p[i], p[j] = p[j], p[i]
    return p


def model_epoch(buckets, seed, epoch, shard, nshards, drop_last=True):
    """buckets: [(name, [keys in key order], batch)] -> [(name, [keys])] of the epoch."""
    buckets = sorted(buckets)
    lists = []
    for b, (name, keys, B) in enumerate(buckets):
        perm = shuffle(len(keys), seed, epoch, 1 + b)
        L = len(keys) // nshards
        mine = [keys[perm[shard + p * nshards]] for p in range(L)]
        nb = L // B if drop_last else (L + B - 1) // B
        lists += [(name, mine[q * B:(q + 1) * B]) for q in range(nb)]
    order = shuffle(len(lists), seed, epoch, 0)
    return [lists[order[i]] for i in range(len(lists))]


def read(path, *args):
    rc, out, err = run(["read", path] + list(args))
    lines = [l.split("\t") for l in out.splitlines()]
    return rc, lines, err


tmp = tempfile.mkdtemp(prefix="vflow_buckets_")
try:
    cache = os.path.join(tmp, "cache")
    # three buckets of different token counts; batch sizes from the entries (3), from the
    # summary (2, added below with python-lmdb) and from the reader's --batch (4)
    spec = [("64x32x9", 0, 11, ["--bucket-batch", "3"]), ("32x32x5", 11, 18, []), ("48x16x1", 18, 31, [])]
    for name, lo, hi, extra in spec:
        rc, out, err = run(["write", cache, str(lo), str(hi), "--bucket", name] + extra)
        check(rc == 0, "write %s: %s" % (name, err.strip()))
    env = lmdb.open(cache, readonly=False, subdir=True, lock=True, max_dbs=0)
    with env.begin(write=True) as txn:
        meta = json.loads(txn.get(b"__meta__"))
        meta["buckets"] = {"32x32x5": {"entries": 7, "batch": 2, "latent": "(4,2,4,4)"}}
        txn.put(b"__meta__", json.dumps(meta, separators=(",", ":"), sort_keys=True).encode())
    env.close()

    def keys_of(lo, hi, name):
        return run(["keys", str(lo), str(hi), "--bucket", name])[1].split()

    index = {}
    buckets = []
    batch_of = {"64x32x9": 3, "32x32x5": 2, "48x16x1": 4}
    for name, lo, hi, _ in spec:
        ks = keys_of(lo, hi, name)
        for i, k in enumerate(ks):
            index[k] = (lo + i, name)
        buckets.append((name, sorted(ks), batch_of[name]))

    seed = 11
    rc, lines, err = read(cache, "--batch", "4", "--seed", str(seed), "--epochs", "2",
                          "--dump", tmp)
    check(rc == 0, "read: %s" % err.strip())
    got = [(l[2], l[1].split(",")) for l in lines]
    want = model_epoch(buckets, seed, 0, 0, 1) + model_epoch(buckets, seed, 1, 0, 1)
    check(got == want, "batches equal the documented order (%d vs %d batches)" % (len(got), len(want)))
    per_epoch = sum(len(k) // batch_of[n] for n, k, _ in buckets)
    check(len(got) == 2 * per_epoch, "two epochs of %d batches: %d" % (per_epoch, len(got)))
    for e in range(2):
        seen = [k for _, ks in got[e * per_epoch:(e + 1) * per_epoch] for k in ks]
        check(len(seen) == len(set(seen)), "epoch %d: no entry twice" % e)
        for name, ks, B in buckets:
            mine = [k for k in seen if index[k][1] == name]
            check(len(mine) == len(ks) - len(ks) % B, "epoch %d bucket %s: %d of %d entries" % (e, name, len(mine), len(ks)))
    for j, (name, ks) in enumerate(got):
        check(all(index[k][1] == name for k in ks), "batch %d: keys of bucket %s only" % (j, name))
        check(len(ks) == batch_of[name], "batch %d: %d samples, bucket %s's batch is %d" % (j, len(ks), name, batch_of[name]))
        w, h, f = map(int, name.split("x"))
        t = load_file(os.path.join(tmp, "batch_%d.safetensors" % j))
        lat = t["latent"]
        check(lat.shape == (len(ks), 4, (f - 1) // 4 + 1, h // 8, w // 8), "batch %d latent %s" % (j, lat.shape))
        for s, k in enumerate(ks):
            i = index[k][0]
            check(np.array_equal(lat[s].ravel(), (i * 1000 + np.arange(lat[s].size)).astype(np.float32)),
                  "batch %d sample %d holds item %d's latent" % (j, s, i))

    # resume from every cursor: the remaining batches, tensors bitwise
    full = {}
    for j in range(len(got)):
        full[j] = load_file(os.path.join(tmp, "batch_%d.safetensors" % j))
    for j in [0, 1, per_epoch - 1, per_epoch + 2]:
        cur = lines[j][0]
        rdir = os.path.join(tmp, "r%d" % j)
        os.makedirs(rdir)
        rc, rest, err = read(cache, "--batch", "4", "--seed", str(seed), "--epochs", "2", "--cursor", cur, "--dump", rdir)
        check(rc == 0 and rest == lines[j + 1:], "resume after batch %d gives the remaining batches" % j)
        for q in range(len(rest)):
            a, b = load_file(os.path.join(rdir, "batch_%d.safetensors" % q)), full[j + 1 + q]
            check(all(np.array_equal(a[n], b[n]) for n in b), "resume after %d: batch %d bitwise" % (j, q))

    # two shards
    r0 = read(cache, "--batch", "4", "--seed", str(seed), "--shard", "0/2")[1]
    r1 = read(cache, "--batch", "4", "--seed", str(seed), "--shard", "1/2")[1]
    check([l[2] for l in r0] == [l[2] for l in r1], "shards: the same bucket at every step")
    k0 = [k for l in r0 for k in l[1].split(",")]
    k1 = [k for l in r1 for k in l[1].split(",")]
    check(not set(k0) & set(k1), "shards are disjoint")
    want0 = model_epoch(buckets, seed, 0, 0, 2)
    check([(l[2], l[1].split(",")) for l in r0] == want0, "shard 0/2 equals the documented order")

    # declared buckets
    decl = "64x32x9:3,32x32x5:2,48x16x1:4"
    rc, d, err = read(cache, "--batch", "4", "--seed", str(seed), "--epochs", "2", "--buckets", decl)
    check(rc == 0 and d == lines, "declared buckets that agree: the same batches (%s)" % err.strip())
    bad = [("64x32x9:3,32x32x5:2,48x16x1:4,64x64x9:1", "64x64x9", "no entry"),
           ("64x32x9:3,32x32x5:3,48x16x1:4", "32x32x5", "summary says 2"),
           ("64x32x9:3,32x32x5:2,48x16x3:4", "48x16x3", "1 + 4k"),
           ("64x32x9:3,32x32x5:2,48x20x1:4", "48x20x1", "multiples of"),
           ("64x32x9:0,32x32x5:2,48x16x1:4", "64x32x9", "batch 0"),
           ("64x32x9:3,32x32x5:2", "48x16x1", "do not declare")]
    for dl, name, what in bad:
        rc, _, err = read(cache, "--batch", "4", "--buckets", dl)
        check(rc != 0 and name in err and what in err, "declared %s: refused naming %s (%s)" % (dl, name, err.strip()))
    # a cursor over other batch sizes
    rc, _, err = read(cache, "--batch", "4", "--seed", str(seed), "--cursor", lines[2][0],
                      "--buckets", "64x32x9:3,32x32x5:2,48x16x1:5")
    check(rc != 0 and "other buckets" in err, "cursor of other buckets refused (%s)" % err.strip())
    # a damaged payload (a flipped latent byte): skipped with on_bad = skip when its
    # batch is read (that batch, short, dropped), named otherwise; the rest unchanged
    bad = os.path.join(tmp, "bad")
    shutil.copytree(cache, bad)
    victim = got[0][1][0]
    env = lmdb.open(bad, readonly=False, subdir=True, lock=True, max_dbs=0)
    with env.begin(write=True) as txn:
        rec = bytearray(txn.get(victim.encode()))
        rec[len(rec) - 16] ^= 0x40
        txn.put(victim.encode(), bytes(rec))
    env.close()
    rc, _, err = read(bad, "--batch", "4", "--seed", str(seed))
    check(rc != 0 and victim in err, "a damaged record fails the read naming it: %r" % err.strip())
    rc, skipped, err = read(bad, "--batch", "4", "--seed", str(seed), "--skip-bad")
    check(rc == 0 and [l for l in lines[:per_epoch] if victim not in l[1]] == skipped,
          "skip: the damaged record's batch is dropped, the others unchanged (%s)" % err.strip())
finally:
    shutil.rmtree(tmp, ignore_errors=True)

if fails:
    print("%d failures" % len(fails))
    sys.exit(1)
print("ok")
