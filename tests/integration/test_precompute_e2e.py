# test_precompute_e2e.py — the precompute half end to end through the real `vflow` binary:
# pipelines/precompute_latents.lua over the project's sample videos
# (scripts/make_sample_videos.sh: several codecs, containers, sizes, frame rates, an audio
# track, rotation metadata) mixed with bad files (corrupt, truncated, zero bytes, a text
# file named .mp4, audio only, too short), with workers = 2. Every claim is checked
# against tools that share no code with vflow:
#  - exit 0; a damaged file whose readable frames (ffprobe) make a clip gives those clips;
#    every file that makes none is in <run dir>/quarantine.jsonl with a reason, no other is;
#  - the cache holds exactly the clips the clip planner promises for the frame counts
#    ffprobe counts (floor(n / T) clips of T frames at stride 1); each record's id, clip
#    index, first frame, pts range and fps agree with ffprobe's frame timestamps; each
#    key is an independent Python FNV-1a-128 of (source identity of path/size/mtime,
#    clip, transform, VAE hash); records parse with a Python codec decoder (CRC32C here);
#    captions and the manifest's extra columns match Python's csv reading of it;
#  - `vflow cache verify` is clean, `mdb_stat` reads the environment, python3-lmdb sees the
#    same key count, the "__meta__" summary counts what is there;
#  - latent_reader -> null_sink through `vflow run`: the stream digest equals a Python
#    digest of the order the reader library gives (tests/tools/cache_tool read) for that
#    seed; the same seed gives the same digest, another seed another order and digest;
#    a resume cursor continues with exactly the remaining batches;
#  - a rerun writes nothing (no LMDB txn committed, values unchanged) and encodes
#    nothing: vae_encode (skip_cached = the cache) drops every clip before the VAE;
#  - another `size` and another VAE seed add new keys beside the old ones (no collision)
#    and skip nothing (the skip key covers the transform and the VAE hash).
# vflow-test: labels=precompute timeout=300
import csv
import json
import os
import random
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

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("VFLOW_BUILD", "build")
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(BUILD, "vflow")
MKVIDEO = os.path.join(BUILD, "tools", "mkvideo")
CACHE_TOOL = os.path.join(BUILD, "tools", "cache_tool")
PIPELINE = os.path.join(SRC, "pipelines", "precompute_latents.lua")
T = 17      # frames per clip
SIZE = 32   # output W = H
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


def sh(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


# ------------------------------------------------------------ independent implementations
M64 = (1 << 64) - 1


def fnv128(data):
    h = 0x6C62272E07BB014262B821756295C58D
    for b in data:
        h = ((h ^ b) * 0x0000000001000000000000000000013B) & ((1 << 128) - 1)
    return "%032x" % h


def cache_key(source, clip, transform, vae):
    parts = [b"vflow-latent-key/1", source.encode(), str(clip).encode(), transform.encode(), vae.encode()]
    return fnv128(b"".join(p + b"\0" for p in parts))


def source_id(path, size, mtime_ns):
    """(path, size, mtime) identity as decode.c documents it: two FNV-1a-64 lanes."""
    data = path.encode() + ("\n%d\n%d" % (size, mtime_ns)).encode()
    out = ""
    for lane, h in enumerate((0xCBF29CE484222325, 0x84222325CBF29CE4)):
        for b in data:
            h = ((h ^ b) * (0x100000001B3 + 2 * lane)) & M64
        out += "%016x" % h
    return out


CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    CRC_TABLE.append(_c)


def crc32c(data, crc=0):
    c = crc ^ 0xFFFFFFFF
    t = CRC_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


DTYPES = {0: ("u8", 1), 1: ("i32", 4), 2: ("f32", 4), 3: ("bf16", 2), 4: ("f16", 2)}


def decode_record(rec):
    """Codec record (runtime/core/item.h) -> (id, meta, {name: (dtype, shape, bytes)})."""
    if rec[:4] != b"VFIT":
        raise ValueError("magic")
    ver, flags, total = struct.unpack_from("<HHQ", rec, 4)
    if ver != 1 or flags != 0 or total != len(rec):
        raise ValueError("header (version %d, length %d of %d)" % (ver, total, len(rec)))
    if crc32c(rec[:total - 4]) != struct.unpack_from("<I", rec, total - 4)[0]:
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
    (nm,) = struct.unpack_from("<I", rec, p)
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
    (nt,) = struct.unpack_from("<I", rec, p)
    p += 4
    heads = []
    for _ in range(nt):
        name = take_str()
        dt, nd = rec[p], rec[p + 1]
        p += 4
        shape = struct.unpack_from("<%dq" % nd, rec, p)
        p += 8 * nd
        (nloc,) = struct.unpack_from("<I", rec, p)
        p += 4 + nloc
        heads.append((name, dt, shape))
    off = (p + 63) // 64 * 64
    tensors = {}
    for name, dt, shape in heads:
        nb = int(np.prod(shape)) * DTYPES[dt][1]
        tensors[name] = (DTYPES[dt][0], tuple(shape), rec[off:off + nb])
        off += (nb + 63) // 64 * 64
    if off + 4 != total:
        raise ValueError("payload layout")
    return iid, meta, tensors


def read_cache(path):
    env = lmdb.open(path, readonly=True, lock=False, subdir=True)
    with env.begin() as txn:
        items = {bytes(k).decode(): bytes(v) for k, v in txn.cursor()}
    env.close()
    return items


def ffprobe(path):
    """(frames decoded, average fps, [frame times]) of the first video stream."""
    r = sh(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
            "frame=best_effort_timestamp_time:stream=avg_frame_rate", "-of", "json", path])
    j = json.loads(r.stdout)
    num, den = j["streams"][0]["avg_frame_rate"].split("/")
    times = [float(f["best_effort_timestamp_time"]) for f in j["frames"]]
    return len(times), float(num) / float(den), times


# ------------------------------------------------------------ runs
def vflow_run(script, run_dir, sets, timeout=180):
    args = [VFLOW, "run", script, "--run-dir", run_dir]
    for s in sets:
        args += ["--set", s]
    r = sh(args, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def events(run_dir, name):
    rows = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            if ('"%s"' % name) in line:
                rows.append(json.loads(line))
    return rows


def precompute(tmp, tag, manifest, cache, extra=(), size=SIZE):
    run_dir = os.path.join(tmp, "run_" + tag)
    sets = ["manifest=" + manifest, "cache=" + cache, "size=%d" % size, "frames=%d" % T, "workers=2",
            # the mix is mostly bad files on purpose: let each decode instance take them all
            "decode_0.max_bad_fraction=1", "decode_1.max_bad_fraction=1"] + list(extra)
    rc, out = vflow_run(PIPELINE, run_dir, sets)
    if not check(rc == 0, "%s: vflow run exit %d, want 0\n%s" % (tag, rc, out)):
        return run_dir, None
    done = events(run_dir, "latent_cache_done")
    check(len(done) == 1, "%s: one latent_cache_done event, got %r" % (tag, done))
    return run_dir, done[0] if done else None


def vae_final(run_dir):
    """vae_encode's final metrics row: (clips skipped as cached, items sent on)."""
    rows = [r for r in events(run_dir, "final") if r.get("type") == "final" and r.get("stage") == "vae_encode"]
    check(len(rows) == 1, "one final vae_encode row, got %r" % rows)
    r = rows[0] if rows else {}
    return r.get("gauges", {}).get("skipped_cached", 0), r.get("items_out")


def mdb_stat(cache):
    r = sh(["mdb_stat", "-e", cache])
    check(r.returncode == 0, "mdb_stat %s: %s" % (cache, r.stderr))
    info = {}
    for line in r.stdout.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    return info


def verify(cache, n):
    r = sh([VFLOW, "cache", "verify", cache])
    check(r.returncode == 0 and ("%d records checked, 0 problems" % n) in r.stdout,
          "vflow cache verify %s: rc %d: %s%s" % (cache, r.returncode, r.stdout, r.stderr))


# ------------------------------------------------------------ inputs
def make_inputs(tmp):
    samples = os.path.join(tmp, "samples")
    r = sh(["bash", os.path.join(SRC, "scripts", "make_sample_videos.sh"), samples])
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(1)
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    scratch = os.path.join(tmp, "scratch")
    os.makedirs(scratch)
    src = os.path.join(scratch, "src.mp4")
    sh([MKVIDEO, "-o", src, "-n", "40", "-s", "128x96", "--faststart"], check=True)
    data = open(src, "rb").read()
    open(os.path.join(bad, "truncated.mp4"), "wb").write(data[:len(data) * 6 // 10])
    src = os.path.join(scratch, "src.mkv")
    sh([MKVIDEO, "-o", src, "-c", "mpeg4", "-n", "40", "-s", "128x96"], check=True)
    b = bytearray(open(src, "rb").read())
    rnd = random.Random(7)
    for i in range(len(b) * 3 // 100, len(b) * 45 // 100):  # keeps the header, damages the clips
        b[i] = rnd.randrange(256)
    open(os.path.join(bad, "corrupt.mkv"), "wb").write(bytes(b))
    open(os.path.join(bad, "zero.mp4"), "wb").close()
    with open(os.path.join(bad, "notes.mp4"), "w") as f:
        f.write("this is a text file, not a video\n")
    sh(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:duration=1", "-c:a", "aac", "-y",
        os.path.join(bad, "audio_only.mp4")], check=True)
    sh([MKVIDEO, "-o", os.path.join(bad, "too_short.mp4"), "-n", "10", "-s", "64x64"], check=True)
    want_reason = {"truncated.mp4": "", "corrupt.mkv": "", "zero.mp4": "empty",
                   "notes.mp4": "not a media file", "audio_only.mp4": "no video stream",
                   "too_short.mp4": "10 frames readable, 17 needed"}
    # manifest: the samples' own rows (relative paths) with the bad files dealt in
    # between them, absolute paths, one caption with a comma and quotes
    rows = open(os.path.join(samples, "manifest.csv")).read().splitlines()
    header, good_rows = rows[0], rows[1:]
    bad_names = sorted(want_reason)
    mixed = [header]
    for i, row in enumerate(good_rows):
        mixed.append(row)
        if i < len(bad_names):
            mixed.append('%s,"bad, ""%s""",,,,' % (os.path.join(bad, bad_names[i]), bad_names[i]))
    manifest = os.path.join(samples, "mixed.csv")
    with open(manifest, "w") as f:
        f.write("\n".join(mixed) + "\n")
    good = [os.path.join(samples, r.split(",", 1)[0]) for r in good_rows]
    # the rule is ffmpeg's: a damaged file whose readable frames make a clip gives those
    # clips; only files that make none are quarantined
    quarantined, extra_rows = {}, {}
    for n, w in want_reason.items():
        path = os.path.join(bad, n)
        try:
            readable = ffprobe(path)[0]
        except (KeyError, IndexError, ValueError):
            readable = 0  # no video stream ffprobe can read
        if readable >= T:
            good.append(path)
            extra_rows[path] = {"text": 'bad, "%s"' % n, "num_frames": "", "height": "", "width": ""}
        else:
            quarantined[path] = w
    check(len(extra_rows) >= 1, "the damaged files should keep readable clips: %r" % sorted(quarantined))
    return manifest, os.path.join(samples, "manifest.csv"), good, quarantined, extra_rows


def expected_clips(good, size, extra_rows):
    """{id: (path, clip, ffprobe times, fps, manifest row)} and the transform string, from
    ffprobe and Python's csv module alone."""
    rows = dict(extra_rows)
    for path in good:
        if path in extra_rows:
            continue
        with open(os.path.join(os.path.dirname(path), "manifest.csv"), newline="") as f:
            rows.update({os.path.join(os.path.dirname(path), r["path"]): r for r in csv.DictReader(f)})
    want = {}
    for path in good:
        n, fps, times = ffprobe(path)
        for clip in range(n // T if n >= T else 0):
            want["%s#%d" % (path, clip)] = (path, clip, times, fps, rows[path])
    transform = "frames=%d;stride=1;fps=0;size=%dx%d;crop=center;filter=bicubic" % (T, size, size)
    return want, transform


# ------------------------------------------------------------ checks
def check_quarantine(run_dir, bad):
    path = os.path.join(run_dir, "quarantine.jsonl")
    rows = [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
    got = {os.path.normpath(r["path"]): r for r in rows}
    check(len(rows) == len(got), "quarantine lists a file twice: %r" % rows)
    for f, word in bad.items():
        r = got.get(f)
        if check(r is not None, "%s not quarantined" % f):
            check(r.get("reason") and word in r.get("reason", ""), "reason for %s lacks '%s': %r" % (f, word, r.get("reason")))
            check(r.get("stage") in ("decode_0", "decode_1"), "quarantine row of %s: stage %r" % (f, r.get("stage")))
    for f in got:
        check(f in bad, "wrongly quarantined: %s (%s)" % (f, got[f].get("reason")))


def check_cache(cache, want, transform, size):
    """Checks the records against the ffprobe-derived expectation; returns {key: record}."""
    items = read_cache(cache)
    meta = json.loads(items.pop("__meta__", b"{}"))
    check(meta.get("format") == "vflow-latent-cache" and meta.get("key") == "provenance", "summary: %r" % meta)
    vaes = list(meta.get("vae", {}))
    check(len(vaes) == 1, "one VAE hash in the summary, got %r" % vaes)
    vae = vaes[0] if vaes else ""
    shape = (4, 1 + (T - 1) // 4, size // 8, size // 8)  # tiny VAE: z=4, time /4 causal, space /8
    check(meta.get("entries") == len(want) and meta.get("shapes") == {"(%d,%d,%d,%d)" % shape: len(want)},
          "summary counts %r, want %d of %r" % (meta, len(want), shape))
    check(meta.get("bytes") == sum(len(v) for v in items.values()), "summary bytes")
    ids = {}
    for key, rec in items.items():
        try:
            iid, m, t = decode_record(rec)
        except Exception as e:  # noqa: BLE001
            check(False, "record %s: %s" % (key, e))
            continue
        check(iid not in ids, "clip %s stored twice (%s, %s)" % (iid, ids.get(iid), key))
        ids[iid] = key
        if not check(iid in want, "unexpected record %s (%s)" % (key, iid)):
            continue
        path, clip, times, fps, row = want[iid]
        st = os.stat(path)
        src = source_id(path, st.st_size, st.st_mtime_ns)
        check(m.get("source") == src and m.get("transform") == transform and m.get("vae") == vae,
              "%s provenance: %r" % (iid, {k: m.get(k) for k in ("source", "transform", "vae")}))
        check(key == cache_key(src, clip, transform, vae), "%s: key %s is not hash(provenance)" % (iid, key))
        f0 = clip * T
        check(m.get("clip") == clip and m.get("frame0") == f0, "%s: clip %r frame0 %r" % (iid, m.get("clip"), m.get("frame0")))
        t0 = times[0]
        check(abs(m.get("pts_start", -1) - (times[f0] - t0)) < 2e-3 and
              abs(m.get("pts_end", -1) - (times[f0 + T - 1] - t0)) < 2e-3,
              "%s: pts %r..%r, ffprobe %.4f..%.4f" % (iid, m.get("pts_start"), m.get("pts_end"),
                                                      times[f0] - t0, times[f0 + T - 1] - t0))
        check(abs(m.get("fps", 0) - fps) < 1e-3 * fps, "%s: fps %r, ffprobe %.4f" % (iid, m.get("fps"), fps))
        dt, shp, raw = t.get("latent", (None, None, b""))
        check(dt == "f32" and shp == shape, "%s: latent %s %r, want f32 %r" % (iid, dt, shp, shape))
        lat = np.frombuffer(raw, dtype=np.float32)
        check(lat.size and np.all(np.isfinite(lat)) and float(np.std(lat)) > 0, "%s: latent not finite/constant" % iid)
        # caption (quoted CSV with commas) and the extra columns pass through as text
        check(m.get("caption") == row["text"], "%s: caption %r, manifest %r" % (iid, m.get("caption"), row["text"]))
        check(all(m.get(k) == row[k] for k in ("num_frames", "height", "width")),
              "%s: extra columns %r, manifest %r" % (iid, {k: m.get(k) for k in ("num_frames", "height", "width")}, row))
    missing = sorted(set(want) - set(ids))
    check(not missing, "%d clips missing from the cache, e.g. %s" % (len(missing), missing[:3]))
    return items


def reader_digest(items, batches, text_len=64):
    """null_sink's stream digest (null_sink.c) of latent_reader batches (latent_reader.h)."""
    h = 0xCBF29CE484222325
    for index, keys in batches:
        lat, text, tlen = b"", b"", b""
        for k in keys:
            _, m, t = decode_record(items[k])
            lat += t["latent"][2]
            cap = m.get("caption", "").encode()[:text_len]
            text += struct.pack("<%di" % text_len, *(list(cap) + [0] * (text_len - len(cap))))
            tlen += struct.pack("<i", len(cap))
        c = crc32c(("e0.b%d" % index).encode())
        c = crc32c(lat + text + tlen, c)
        h = ((h ^ c) * 0x100000001B3) & M64
    return "%016x" % h


def library_order(cache, seed, batch, cursor=None):
    args = [CACHE_TOOL, "read", cache, "--batch", str(batch), "--seed", str(seed), "--epochs", "1"]
    if cursor:
        args += ["--cursor", cursor]
    r = sh(args)
    check(r.returncode == 0, "cache_tool read: " + r.stderr)
    rows = []
    for line in r.stdout.splitlines():
        cur, keys = line.split("\t")
        rows.append((cur, keys.split(",")))
    return rows


READER_LUA = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "reader_check"
local r = p:stage("latent_reader", { path = a.cache, batch = a.batch, seed = a.seed, epochs = 1,
                                     cursor = a.cursor })
p:connect(r, p:stage("null_sink", { expect_count = a.expect }))
return p
"""


def check_reader(tmp, cache, items):
    script = os.path.join(tmp, "reader.lua")
    with open(script, "w") as f:
        f.write(READER_LUA)
    B = 4
    n = len(items)

    def run(tag, seed, expect, cursor=None):
        sets = ["cache=" + cache, "batch=%d" % B, "seed=%d" % seed, "expect=%d" % expect]
        if cursor:
            sets.append("cursor=" + cursor)
        run_dir = os.path.join(tmp, "run_" + tag)
        rc, out = vflow_run(script, run_dir, sets)
        if not check(rc == 0, "reader %s: exit %d\n%s" % (tag, rc, out)):
            return None
        done = events(run_dir, "null_sink_done")
        return done[0]["checksum"] if check(len(done) == 1, "reader %s: null_sink_done %r" % (tag, done)) else None

    orders = {}
    for seed in (11, 12):
        rows = library_order(cache, seed, B)
        order = [k for _, ks in rows for k in ks]
        check(len(rows) == n // B and len(set(order)) == len(order) == n // B * B and set(order) <= set(items),
              "seed %d: %d batches covering %d distinct keys of %d" % (seed, len(rows), len(set(order)), n))
        orders[seed] = rows
        want = reader_digest(items, [(i, ks) for i, (_, ks) in enumerate(rows)])
        a = run("reader_s%d_a" % seed, seed, n // B)
        b = run("reader_s%d_b" % seed, seed, n // B)
        check(a == want, "seed %d: vflow run digest %s, Python digest of the library order %s" % (seed, a, want))
        check(a == b, "seed %d: two runs gave %s and %s" % (seed, a, b))
        orders[seed] = (rows, a)
    (r11, d11), (r12, d12) = orders[11], orders[12]
    check([ks for _, ks in r11] != [ks for _, ks in r12], "seeds 11 and 12 give the same order")
    check(d11 != d12, "seeds 11 and 12 give the same digest %s" % d11)
    # resume after batch 3: the rest of the epoch, same order, same batch ids
    cur = r11[2][0]
    rest = library_order(cache, 11, B, cursor=cur)
    check([ks for _, ks in rest] == [ks for _, ks in r11[3:]], "cursor %s: library order does not continue" % cur)
    want = reader_digest(items, [(i + 3, ks) for i, (_, ks) in enumerate(r11[3:])])
    got = run("reader_resume", 11, len(r11) - 3, cursor=cur)
    check(got == want, "resumed at %s: digest %s, want %s" % (cur, got, want))


def main():
    for tool in ("ffmpeg", "ffprobe", "mdb_stat"):
        if not shutil.which(tool):
            print("skip: %s missing" % tool)
            return 77
    for exe in (VFLOW, MKVIDEO, CACHE_TOOL):
        if not os.access(exe, os.X_OK):
            print("not built: " + exe)
            return 1
    tmp = tempfile.mkdtemp(prefix="vf_precompute_e2e.")
    mixed, clean_manifest, good, bad, extra_rows = make_inputs(tmp)
    want, transform = expected_clips(good, SIZE, extra_rows)
    n = len(want)
    print("%d good videos -> %d clips of %d frames expected (ffprobe); %d bad files" % (len(good), n, T, len(bad)))
    cache = os.path.join(tmp, "cache.lmdb")

    # 1. mixed manifest: exit 0, quarantine, exactly the promised clips
    run_dir, done = precompute(tmp, "first", mixed, cache)
    if done is None:
        return 1
    check(done["written"] == n and done["skipped"] == 0, "first run wrote %r, want %d" % (done, n))
    check(vae_final(run_dir) == (0, n), "first run: vae_encode skipped/sent %r, want (0, %d)" % (vae_final(run_dir), n))
    check_quarantine(run_dir, bad)
    items = check_cache(cache, want, transform, SIZE)
    verify(cache, n)
    st1 = mdb_stat(cache)
    check(st1.get("Entries") == str(n + 1), "mdb_stat entries %r, want %d" % (st1.get("Entries"), n + 1))
    r = sh([VFLOW, "cache", "stat", cache])
    check(r.returncode == 0 and "entries    %d" % n in r.stdout, "vflow cache stat: " + r.stdout + r.stderr)

    # 2. latent_reader -> null_sink: order by seed, resume
    check_reader(tmp, cache, {k: v for k, v in items.items()})

    # 3. rerun: nothing new, no txn committed, the same bytes; every clip dropped by
    #    vae_encode before encoding (none reaches the writer)
    run_dir, done = precompute(tmp, "rerun", mixed, cache)
    if done is not None:
        check(done["written"] == 0 and done["skipped"] == 0, "rerun: writer %r, want 0 written, 0 skipped" % done)
        check(vae_final(run_dir) == (n, 0), "rerun: vae_encode skipped/sent %r, want (%d, 0)" % (vae_final(run_dir), n))
        with open(os.path.join(run_dir, "run.log")) as f:
            log = f.read()
        check("skipped %d cached clips" % n in log, "rerun: no 'skipped %d cached clips' line in run.log" % n)
    check_quarantine(run_dir, bad)
    st2 = mdb_stat(cache)
    check(st2.get("Last transaction ID") == st1.get("Last transaction ID"),
          "rerun committed a txn (%s -> %s)" % (st1.get("Last transaction ID"), st2.get("Last transaction ID")))
    again = read_cache(cache)
    again.pop("__meta__", None)
    check(again == items, "rerun changed the cache")

    # 4. another size and another VAE seed over the clean manifest: new keys beside the old ones
    want48, tf48 = expected_clips([g for g in good if g not in extra_rows], 48, {})
    nc = len(want48)  # the clips of the good files alone
    run_dir, done = precompute(tmp, "size48", clean_manifest, cache, size=48)
    if done is not None:
        check(done["written"] == nc and done["skipped"] == 0, "size=48: %r, want %d new" % (done, nc))
        check(vae_final(run_dir)[0] == 0, "size=48: vae_encode skipped %r cached clips" % (vae_final(run_dir),))
    run_dir, done = precompute(tmp, "seed7", clean_manifest, cache, extra=["vae_encode.seed=7"])
    if done is not None:
        check(done["written"] == nc and done["skipped"] == 0, "VAE seed 7: %r, want %d new" % (done, nc))
        check(vae_final(run_dir)[0] == 0, "VAE seed 7: vae_encode skipped %r cached clips" % (vae_final(run_dir),))
    allk = read_cache(cache)
    meta = json.loads(allk.pop("__meta__"))
    check(len(allk) == n + 2 * nc, "after size/seed runs: %d entries, want %d" % (len(allk), n + 2 * nc))
    check(all(allk.get(k) == v for k, v in items.items()), "the first run's records changed")
    check(len(meta.get("vae", {})) == 2 and len(meta.get("shapes", {})) == 2 and meta.get("entries") == n + 2 * nc,
          "summary after size/seed runs: %r" % meta)
    seen = {}
    for k, rec in allk.items():
        iid, m, t = decode_record(rec)
        seen.setdefault((m["transform"], m["vae"]), set()).add(iid)
    check(sorted(len(s) for s in seen.values()) == [nc, nc, n] and
          all(s == set(want) or s == set(want48) for s in seen.values()),
          "each (transform, vae) should hold every clip once: %r" % {k: len(s) for k, s in seen.items()})
    check(any(tf == tf48 for tf, _ in seen), "no records of size 48")
    verify(cache, n + 2 * nc)
    st3 = mdb_stat(cache)
    check(st3.get("Entries") == str(n + 2 * nc + 1), "mdb_stat entries %r, want %d" % (st3.get("Entries"), n + 2 * nc + 1))

    if FAILS:
        print("%d check(s) failed; kept %s" % (len(FAILS), tmp))
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
