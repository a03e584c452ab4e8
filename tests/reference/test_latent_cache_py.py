# test_latent_cache_py.py — an LMDB latent cache written by vflow, checked with tools
# that share no code with it (/usr/bin/python3):
#  - `mdb_stat` (lmdb-utils) reads the environment; python3-lmdb lists exactly the keys
#    vflow derived, plus "__meta__";
#  - the keys equal an independent Python FNV-1a-128 of the provenance fields;
#  - every record parses with an independent Python decoder of the codec (magic,
#    version, total length, CRC32C computed here), holds the expected latent values and
#    caption; "__meta__" counts what is there;
#  - `vflow cache verify` is clean, then reports exactly the keys damaged here by
#    python-lmdb (flipped byte, truncated record, record under a wrong key) with exit 1;
#    `vflow cache stat` / `ls` agree with the data;
#  - a cache with text embeddings: one "text:<hash>" record per distinct embedding,
#    its key the Python FNV-1a-128 of the shape and the bf16 bytes, its values the bf16
#    of the expected embedding; entry keys extended by that hash, entries referencing
#    it; the summary's text counts; verify clean, then naming the entries of a text
#    record deleted here.
# Drives tests/tools/cache_tool.c (the writer) and `vflow cache` (or cache_tool cli).
# vflow-test: timeout=300
import json
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
    print("skip: %s" % e)
    sys.exit(77)

BUILD = os.environ.get("VFLOW_BUILD", ".")
TOOL = os.path.join(BUILD, "tools", "cache_tool")
VFLOW = os.environ.get("VFLOW_BIN", "")
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def run(args):
    p = subprocess.run(args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def cache_cli(*args):
    if VFLOW and os.access(VFLOW, os.X_OK):
        return run([VFLOW, "cache"] + list(args))
    return run([TOOL, "cli"] + list(args))


# ---- independent implementations
def fnv128(data):
    h = 0x6C62272E07BB014262B821756295C58D
    prime = 0x0000000001000000000000000000013B
    for b in data:
        h ^= b
        h = (h * prime) & ((1 << 128) - 1)
    return "%032x" % h


def key_of(source, clip, transform, vae, text_hash=None):
    parts = [b"vflow-latent-key/1", source.encode(), str(clip).encode(), transform.encode(), vae.encode()]
    if text_hash:
        parts.append(text_hash.encode())
    return fnv128(b"".join(p + b"\0" for p in parts))


def bf16_bits(a):
    """float32 array -> uint16 bf16 bits, round to nearest even (finite values)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def text_hash_of(emb_bits):
    L, D = emb_bits.shape
    return fnv128(b"vflow-text-key/1\0" + ("(%d,%d)" % (L, D)).encode() + b"\0" + emb_bits.astype("<u2").tobytes())


def expected_text(i, D):
    c = i % 3
    r = np.arange(2 + c, dtype=np.float32)[:, None]
    k = np.arange(D, dtype=np.float32)[None, :]
    return bf16_bits(np.float32(c + 1) + r / np.float32(8) - k / np.float32(64))


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


DTYPES = {0: ("u8", 1), 1: ("i32", 4), 2: ("f32", 4), 3: ("bf16", 2), 4: ("f16", 2)}


def decode(rec):
    """The codec record (runtime/core/item.h) -> (id, meta, {name: (dtype, shape, bytes)})."""
    if rec[:4] != b"VFIT":
        raise ValueError("magic")
    ver, flags, total = struct.unpack_from("<HHQ", rec, 4)
    if ver != 1 or flags != 0:
        raise ValueError("version %d" % ver)
    if total != len(rec):
        raise ValueError("length %d vs %d" % (total, len(rec)))
    crc = struct.unpack_from("<I", rec, total - 4)[0]
    if crc32c(rec[:total - 4]) != crc:
        raise ValueError("crc")
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
    heads = []
    for _ in range(nt):
        name = take_str()
        dt, nd, loc, _z = rec[p:p + 4]
        p += 4
        shape = struct.unpack_from("<%dq" % nd, rec, p)
        p += 8 * nd
        nloc = struct.unpack_from("<I", rec, p)[0]
        p += 4 + nloc
        heads.append((name, dt, shape, loc))
    off = (p + 63) // 64 * 64
    tensors = {}
    for name, dt, shape, loc in heads:
        nb = int(np.prod(shape)) * DTYPES[dt][1]
        tensors[name] = (DTYPES[dt][0], shape, rec[off:off + nb])
        off += (nb + 63) // 64 * 64
    if off + 4 != total:
        raise ValueError("payload layout")
    return iid, meta, tensors


def main():
    if not os.path.exists(TOOL):
        print("cache_tool not built at", TOOL)
        return 1
    tmp = tempfile.mkdtemp(prefix="vf_cache_py.")
    path = os.path.join(tmp, "latents.lmdb")
    N = 40
    # a tiny map: the writer has to grow it several times
    rc, out, err = run([TOOL, "write", path, "0", str(N), "--map", "65536", "--shape", "4,2,8,8", "--commit", "6"])
    check(rc == 0, "write: " + err)
    check("growths 0" not in out, "the map never grew: " + out)

    rc, out, err = run(["mdb_stat", "-e", path])
    check(rc == 0, "mdb_stat: " + err)
    check("Entries: %d" % (N + 1) in out, "mdb_stat entries: " + out)

    rc, out, _ = run([TOOL, "keys", "0", str(N)])
    ours = out.split()
    expect = [key_of("src%d" % (i // 3), i % 3, "frames=5;size=32x24", "vaeA") for i in range(N)]
    check(ours == expect, "key derivation differs from the Python FNV-1a-128")

    env = lmdb.open(path, readonly=True, lock=False, subdir=True)
    with env.begin() as txn:
        items = {bytes(k).decode(): bytes(v) for k, v in txn.cursor()}
    env.close()
    check(set(items) == set(expect) | {"__meta__"}, "python-lmdb keys differ")
    meta = json.loads(items.pop("__meta__"))
    check(meta.get("format") == "vflow-latent-cache" and meta.get("version") == 1, "meta format: %r" % meta)
    check(meta.get("entries") == N and meta.get("shapes") == {"(4,2,8,8)": N} and meta.get("vae") == {"vaeA": N},
          "meta counts: %r" % meta)
    check(meta.get("bytes") == sum(len(v) for v in items.values()), "meta bytes")
    for i in range(N):
        k = expect[i]
        try:
            iid, m, t = decode(items[k])
        except Exception as e:  # noqa: BLE001
            check(False, "record %s: %s" % (k, e))
            continue
        check(iid == "vid%d.mp4#%d" % (i // 3, i % 3), "id of %s: %s" % (k, iid))
        check(m.get("caption") == "clip %d" % i and m.get("clip") == i % 3, "meta of %s: %r" % (k, m))
        dt, shape, raw = t["latent"]
        lat = np.frombuffer(raw, dtype=np.float32)
        check(dt == "f32" and shape == (4, 2, 8, 8), "latent spec of %s" % k)
        check(np.array_equal(lat, (i * 1000 + np.arange(512)).astype(np.float32)), "latent values of %s" % k)

    # ---- verify, stat, ls
    rc, out, err = cache_cli("verify", path)
    check(rc == 0 and "0 problems" in out, "verify of a clean cache: rc %d %s %s" % (rc, out, err))
    rc, out, err = cache_cli("stat", path)
    check(rc == 0 and "entries    %d" % N in out and "(4,2,8,8)  %d" % N in out and "vaeA  %d" % N in out,
          "stat: " + out + err)
    rc, out, err = cache_cli("ls", path, "--limit", "5")
    lines = out.strip().split("\n")
    check(rc == 0 and len(lines) == 6, "ls --limit 5: " + out + err)
    first = sorted(expect)[0]
    i0 = expect.index(first)
    check(lines[1] == "%s\tvid%d.mp4#%d\t(4,2,8,8)\tclip %d" % (first, i0 // 3, i0 % 3, i0), "ls line: " + lines[1])

    # ---- damage three records with python-lmdb
    bad = sorted(expect)[3:6]
    env = lmdb.open(path, subdir=True, map_size=1 << 30)
    with env.begin(write=True) as txn:
        v = bytearray(txn.get(bad[0].encode()))
        v[len(v) // 2] ^= 0x10  # a flipped payload bit: CRC
        txn.put(bad[0].encode(), bytes(v))
        txn.put(bad[1].encode(), txn.get(bad[1].encode())[:-100])  # truncated
        txn.put(bad[2].encode(), txn.get(sorted(expect)[10].encode()))  # under the wrong key
    env.close()
    rc, out, err = cache_cli("verify", path)
    check(rc == 1, "verify exit code on damage: %d" % rc)
    listed = [ln.split("\t")[0] for ln in out.strip().split("\n")[:-1]]
    # the summary's byte count also disagrees now (the truncated record)
    check(set(listed) == set(bad) | {"__meta__"}, "verify listed %r, damaged %r" % (listed, bad))
    check("belongs under key" in out, "wrong-key record not explained: " + out)
    rc, out, err = cache_cli("verify", os.path.join(tmp, "nothing"))
    check(rc == 2 and "nothing" in err, "verify of a missing cache: %d %s" % (rc, err))
    rc, out, err = cache_cli("frobnicate", path)
    check(rc == 2, "usage error exit code")

    text_cache(tmp)

    if fails:
        print("%d failures (kept %s)" % (len(fails), tmp))
        return 1
    shutil.rmtree(tmp)
    print("ok")
    return 0


def text_cache(tmp):
    path = os.path.join(tmp, "text.lmdb")
    N, D = 12, 6
    rc, out, err = run([TOOL, "write", path, "0", str(N), "--text", str(D), "--commit", "5"])
    check(rc == 0 and "texts 3 " in out, "write with text: " + out + err)
    hashes = [text_hash_of(expected_text(i, D)) for i in range(N)]
    expect = [key_of("src%d" % (i // 3), i % 3, "frames=5;size=32x24", "vaeA", hashes[i]) for i in range(N)]
    rc, out, _ = run([TOOL, "keys", "0", str(N), "--text", str(D)])
    check(out.split() == expect, "entry keys with text differ from the Python derivation")
    env = lmdb.open(path, readonly=True, lock=False, subdir=True)
    with env.begin() as txn:
        items = {bytes(k).decode(): bytes(v) for k, v in txn.cursor()}
    env.close()
    tkeys = {"text:" + h for h in set(hashes)}
    check(set(items) == set(expect) | tkeys | {"__meta__"}, "python-lmdb keys of the text cache: %r" % sorted(items))
    meta = json.loads(items.pop("__meta__"))
    check(meta.get("texts") == 3 and meta.get("text_dim") == D and meta.get("text_max_len") == 4 and
          meta.get("text_entries") == N, "text summary: %r" % meta)
    check(meta.get("text_bytes") == sum(len(items[k]) for k in tkeys), "text_bytes")
    for i in range(N):
        try:
            iid, m, t = decode(items[expect[i]])
            tid, _, tt = decode(items["text:" + hashes[i]])
        except Exception as e:  # noqa: BLE001
            check(False, "records of item %d: %s" % (i, e))
            continue
        check("text_emb" not in t and m.get("text_key") == hashes[i] and m.get("text_tokens") == 2 + i % 3,
              "entry %d references its text: %r" % (i, m))
        dt, shape, raw = tt["text_emb"]
        check(tid == "text:" + hashes[i] and dt == "bf16" and shape == (2 + i % 3, D), "text record spec of %d" % i)
        check(np.array_equal(np.frombuffer(raw, dtype="<u2").reshape(shape), expected_text(i, D)),
              "text values of item %d" % i)
    rc, out, err = cache_cli("verify", path)
    check(rc == 0 and "0 problems" in out, "verify of a clean text cache: rc %d %s %s" % (rc, out, err))
    rc, out, err = cache_cli("stat", path)
    check(rc == 0 and "text       3 records" in out and "width %d" % D in out, "stat with text: " + out + err)
    rc, out, err = cache_cli("ls", path)
    check(rc == 0 and ("2 tokens text:" + hashes[0]) in out, "ls with text: " + out)
    # a deleted text record: verify names every entry that referenced it
    gone = "text:" + hashes[1]
    env = lmdb.open(path, subdir=True, map_size=1 << 30)
    with env.begin(write=True) as txn:
        txn.delete(gone.encode())
    env.close()
    rc, out, err = cache_cli("verify", path)
    listed = {ln.split("\t")[0] for ln in out.strip().split("\n")[:-1]}
    orphans = {expect[i] for i in range(N) if hashes[i] == hashes[1]}
    check(rc == 1 and orphans <= listed and gone in out, "verify after deleting %s: %s" % (gone, out))


if __name__ == "__main__":
    sys.exit(main())
