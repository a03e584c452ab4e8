"""Real videos no one here made: the media files shipped inside a set of Debian packages
(phone and screen recordings, game cut-scenes, physics-lab clips, test media of other
projects; h264, mpeg4, msmpeg4v3, theora, vp8, vp9, cinepak, msvideo1, gif, ...), each run
through `decode` alone, with three clip settings at once (17 frames at stride 1; 8 frames at
stride 2; buckets 64x32, 32x64, 48x48 of lengths 17 and 33, one clip per file so that the
third setting costs little decoding). The reference is ffprobe: the
frames it can read (-count_frames) make exactly floor((n - span) / (T * stride)) + 1 clips
(span = (T - 1) * stride + 1), and the run must emit exactly those (null_sink's
expect_count); with buckets the file goes to the bucket nearest its display aspect ratio
(ffprobe's size, sample aspect ratio and rotation; ties to the larger area, then the first
listed) at the longest length its frames allow, and the decoder's per-bucket count
(metrics row "buckets") must be exactly that; a file that makes none is quarantined with
a reason (audio-only files: "no video stream"; files libavformat cannot open, such as the
scripts and translation files that share a media extension: "not a media file"); no file takes more than a few seconds
beyond ffprobe's own decode of all its frames.

The packages are fetched with `apt-get download` into $VFLOW_CORPUS_DIR (default
~/.cache/vflow/corpus) and only their media files extracted; exit 77 when they cannot be
fetched. `test_corpus.py --list` fetches and prints the files (the decode bench uses it).
vflow-test: labels=corpus,decode timeout=400
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

PKGS = ["libevas-loaders", "python3-mecavideo", "gnome-user-docs", "linphone-common",
        "mkvtoolnix-gui", "planetblupi-common", "python3-sage", "lebiniou-data"]
MEDIA = ("avi", "flv", "gif", "mkv", "mov", "mp4", "m4v", "mpg", "mpeg", "ogv", "webm", "wmv", "3gp", "ts")
VFLOW = os.environ.get("VFLOW_BIN", "build/vflow")
SLACK_S = 5.0  # beyond ffprobe's own decode time and vflow's process start

PIPE = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "corpus"
local d1 = p:stage("decode", { name = "d17", manifest = a.manifest, frames = 17, size = { 64, 64 },
                               max_bad_fraction = 1.0, threads = 1 })
local d2 = p:stage("decode", { name = "d8s2", manifest = a.manifest, frames = 8, stride = 2,
                               size = { 48, 32 }, max_bad_fraction = 1.0, threads = 1 })
local d3 = p:stage("decode", { name = "dbk", manifest = a.manifest, max_bad_fraction = 1.0, threads = 1,
                               clips_per_video = 1,
                               buckets = { { w = 64, h = 32, frames = { 17, 33 }, batch = 1 },
                                           { w = 32, h = 64, frames = { 17, 33 }, batch = 1 },
                                           { w = 48, h = 48, frames = { 17, 33 }, batch = 1 } } })
p:connect(d1, p:stage("null_sink", { name = "s17", expect_count = a.n17 }), { capacity = 2 })
p:connect(d2, p:stage("null_sink", { name = "s8", expect_count = a.n8 }), { capacity = 2 })
p:connect(d3, p:stage("null_sink", { name = "sbk", expect_count = a.nbk }), { capacity = 2 })
return p
"""


def fetch(cache):
    """Media files of the packages, extracted once under cache/x; None when unavailable."""
    debs, root = os.path.join(cache, "debs"), os.path.join(cache, "x")
    os.makedirs(debs, exist_ok=True)
    for pkg in PKGS:
        if glob.glob(os.path.join(debs, pkg + "_*.deb")):
            continue
        r = subprocess.run(["apt-get", "download", pkg], cwd=debs, capture_output=True, text=True)
        if r.returncode != 0 or not glob.glob(os.path.join(debs, pkg + "_*.deb")):
            print("skip: apt-get download %s failed: %s" % (pkg, r.stderr.strip()[-300:]))
            return None
    done = os.path.join(root, ".extracted")
    if not os.path.exists(done):
        os.makedirs(root, exist_ok=True)
        pats = ["*." + e for e in MEDIA]
        for deb in sorted(glob.glob(os.path.join(debs, "*.deb"))):
            ds = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", root, "--wildcards"] + pats, stdin=ds.stdout,
                           stderr=subprocess.DEVNULL)
            ds.wait()
        open(done, "w").close()
    files = []
    for d, _, names in os.walk(root):
        files += [os.path.join(d, n) for n in names if n.rsplit(".", 1)[-1].lower() in MEDIA]
    return sorted(files)


BUCKETS = [(64, 32), (32, 64), (48, 48)]
LENGTHS = [17, 33]


def ffprobe(path):
    """(video streams, frames ffprobe's decoder reads from the first, seconds it took,
    whether libavformat could open the file at all, display aspect ratio of the first)."""
    t = time.monotonic()
    r = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                        "stream=codec_type,nb_read_frames,width,height,sample_aspect_ratio"
                        ":stream_side_data=rotation", "-of", "json", path],
                       capture_output=True, text=True, timeout=120)
    dt = time.monotonic() - t
    try:
        streams = json.loads(r.stdout).get("streams", [])
    except ValueError:
        streams = []
    video = [s for s in streams if s.get("codec_type") == "video"]
    n = int(video[0].get("nb_read_frames", 0) or 0) if video else 0
    dar = 1.0
    if video and video[0].get("width") and video[0].get("height"):
        v = video[0]
        sar = v.get("sample_aspect_ratio", "1:1")
        num, den = (int(x) for x in sar.split(":")) if ":" in sar else (0, 1)
        dar = v["width"] * (num / den if num > 0 and den > 0 else 1) / v["height"]
        rot = [int(d.get("rotation", 0)) for d in v.get("side_data_list", []) if "rotation" in d]
        if rot and round(rot[0] / 90) % 2:
            dar = 1 / dar
    return len(video), n, dt, r.returncode == 0, dar


def bucket_of(dar, n):
    """The bucket name "WxHxF" a file of n readable frames goes to, and its clip count."""
    best, bd, barea = None, None, None
    for w, h in BUCKETS:
        d = abs(math.log(w / h) - math.log(dar))
        if best is None or d < bd - 1e-9 or (abs(d - bd) <= 1e-9 and w * h > barea):
            best, bd, barea = (w, h), d, w * h
    fit = [f for f in LENGTHS if f <= n]
    if not fit:
        return None, 0
    f = max(fit)
    return "%dx%dx%d" % (best[0], best[1], f), min(clips(n, f, 1), 1)  # clips_per_video = 1


def clips(n, T, stride):
    span = (T - 1) * stride + 1
    return 0 if n < span else (n - span) // (T * stride) + 1


def main():
    for tool in ("ffprobe", "apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            print("skip: %s missing" % tool)
            return 77
    cache = os.environ.get("VFLOW_CORPUS_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vflow", "corpus")
    files = fetch(cache)
    if files is None:
        return 77
    if sys.argv[1:] == ["--list"]:  # for bench/bench_decode.sh --corpus
        print("\n".join(files))
        return 0
    if len(files) < 40:
        print("FAIL: only %d media files found under %s" % (len(files), cache))
        return 1
    tmp = tempfile.mkdtemp(prefix="vf_corpus.")
    script = os.path.join(tmp, "p.lua")
    open(script, "w").write(PIPE)
    fails, total, made, t0 = [], 0, 0, time.monotonic()
    for i, f in enumerate(files):
        nv, n, t_ref, opens, dar = ffprobe(f)
        n17, n8 = clips(n, 17, 1), clips(n, 8, 2)
        bk, nbk = bucket_of(dar, n)
        total += n17 + n8 + nbk
        man = os.path.join(tmp, "m%d.csv" % i)
        with open(man, "w") as m:
            m.write('path\n"%s"\n' % f.replace('"', '""'))
        rd = os.path.join(tmp, "r%d" % i)
        t = time.monotonic()
        r = subprocess.run([VFLOW, "run", script, "--run-dir", rd, "--set", "manifest=" + man,
                            "--set", "n17=%d" % n17, "--set", "n8=%d" % n8, "--set", "nbk=%d" % nbk],
                           capture_output=True, text=True, timeout=300)
        dt = time.monotonic() - t
        name = os.path.relpath(f, cache)
        q = os.path.join(rd, "quarantine.jsonl")
        reasons = [json.loads(l)["reason"] for l in open(q) if l.strip()] if os.path.exists(q) else []
        line = "%-70s ffprobe %4d frames %5.2fs -> %3d + %3d + %3d %s clips, vflow %5.2fs%s" % (
            name[-70:], n, t_ref, n17, n8, nbk, bk or "-", dt, (" quarantined: " + reasons[0][:90]) if reasons else "")
        print(line)
        bad = []
        if r.returncode != 0:
            bad.append("exit %d: %s" % (r.returncode, (r.stderr or r.stdout).strip()[-400:]))
        if dt > t_ref + SLACK_S:
            bad.append("took %.2f s, ffprobe decodes it in %.2f s" % (dt, t_ref))
        if len(reasons) != (n17 == 0) + (n8 == 0) + (nbk == 0):
            bad.append("quarantine %r does not fit %d + %d + %d clips" % (reasons, n17, n8, nbk))
        mpath = os.path.join(rd, "metrics.jsonl")
        rows = [json.loads(l) for l in open(mpath) if '"buckets"' in l] if os.path.exists(mpath) else []
        got = {k: v for r_ in rows if r_.get("stage") == "dbk" for k, v in r_["clips"].items() if v}
        want_bk = {bk: nbk} if nbk else {}
        if r.returncode == 0 and nv and got != want_bk:
            bad.append("buckets %r, expected %r (display aspect %.4g)" % (got, want_bk, dar))
        # The reason says what ffprobe found: a file it cannot open is "not a media file",
        # one it opens without a video stream (audio only) is "no video stream"; a link
        # whose target the package holds under a name the extraction skips (libevas-loaders'
        # evas_image_loader.mp4 -> evas_image_loader.gst) is no file at all: "cannot stat".
        want = "no video stream" if opens else "not a media file" if os.path.exists(f) else "cannot stat"
        if nv == 0 and not all(want in x for x in reasons):
            bad.append("expected reasons with %r, got %r" % (want, reasons))
        if bad:
            fails.append("%s: %s" % (name, "; ".join(bad)))
        else:
            made += n17 + n8 + nbk
            shutil.rmtree(rd, ignore_errors=True)
    print("%d files, %d clips expected by ffprobe's frame counts, %d made as expected; %.1f s" %
          (len(files), total, made, time.monotonic() - t0))
    for x in fails:
        print("FAIL: " + x)
    if not fails:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
