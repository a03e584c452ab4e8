"""Bad input through `decode` in a real run: each file gets its one-line reason or the clips
its readable frames make, the run goes on, nothing hangs or crashes.

Files (made here with the ffmpeg CLI): zero bytes, text, random noise, a good MP4 cut at
twelve offsets, audio only, a PNG named .mp4, a 4096x4096 frame, an MPEG-TS whose frame
size changes mid-file (two resolutions, one stream), and two files changed on disk while
the stage reads them (truncated in place; overwritten in place with noise; a third is
deleted). The reference for clip counts is ffprobe's count of readable frames
(clips = floor((n - T) / T) + 1 at stride 1); a file quarantined must make no clip by that
count, with a reason of one line that names what was found.
vflow-test: labels=integration,decode timeout=300
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

VFLOW = os.environ.get("VFLOW_BIN", "build/vflow")
T = 8
FAILS = []

PIPE = """
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "bad"
local d = p:stage("decode", { manifest = a.manifest, frames = %d, size = { 32, 32 },
                              max_bad_fraction = 1.0, threads = 1, stall_s = 5, deadline_s = 60 })
p:connect(d, p:stage("null_sink", { name = "sink", delay_ms = a.delay or 0 }), { capacity = 1 })
return p
""" % T


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def ff(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y"] + list(args), check=True)


def readable(path):
    r = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
                        "-show_entries", "stream=nb_read_frames", "-of", "json", path],
                       capture_output=True, text=True, timeout=60)
    try:
        s = json.loads(r.stdout).get("streams", [])
        return int(s[0].get("nb_read_frames", 0) or 0) if s else 0
    except (ValueError, IndexError):
        return 0


def clips(n):
    return 0 if n < T else (n - T) // T + 1


def run(tmp, tag, files, delay=0, during=None):
    man = os.path.join(tmp, tag + ".csv")
    with open(man, "w") as m:
        m.write("path\n")
        for f in files:
            m.write('"%s"\n' % f)
    script = os.path.join(tmp, "p.lua")
    open(script, "w").write(PIPE)
    rd = os.path.join(tmp, "run_" + tag)
    t0 = time.monotonic()
    p = subprocess.Popen([VFLOW, "run", script, "--run-dir", rd, "--set", "manifest=" + man,
                          "--set", "delay=%d" % delay], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if during:
        threading.Thread(target=during, daemon=True).start()
    try:
        out, _ = p.communicate(timeout=200)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        check(False, "%s: the run hung (killed after 200 s)" % tag)
    dt = time.monotonic() - t0
    q = os.path.join(rd, "quarantine.jsonl")
    reasons = {}
    if os.path.exists(q):
        for line in open(q):
            if line.strip():
                j = json.loads(line)
                reasons[j["path"]] = j["reason"]
    sink = 0
    mf = os.path.join(rd, "metrics.jsonl")
    for line in open(mf) if os.path.exists(mf) else []:
        j = json.loads(line)
        if j.get("stage") == "sink" and "items" in j:
            sink = max(sink, int(j["items"]))
    print("%s: exit %d in %.1f s, %d clips, %d quarantined" % (tag, p.returncode, dt, sink, len(reasons)))
    for f, r in sorted(reasons.items()):
        print("   %-28s %s" % (os.path.basename(f), r[:150]))
    check(p.returncode == 0, "%s: exit %d\n%s" % (tag, p.returncode, out[-1500:]))
    check("Segmentation" not in out and "Aborted" not in out, "%s: a crash\n%s" % (tag, out[-1500:]))
    for f, r in reasons.items():
        check(r.strip() and "\n" not in r, "%s: reason is not one line: %r" % (f, r))
    return reasons, sink


def main():
    for tool in ("ffmpeg", "ffprobe"):
        if not shutil.which(tool):
            print("skip: %s missing" % tool)
            return 77
    tmp = tempfile.mkdtemp(prefix="vf_badin.")
    j = lambda n: os.path.join(tmp, n)
    rnd = random.Random(7)

    # --- static bad files: each is quarantined with what was found, or gives its clips
    ff("-f", "lavfi", "-i", "testsrc2=s=96x64:r=25:d=2", "-c:v", "mpeg4", "-g", "10",
       "-movflags", "+faststart", j("good.mp4"))  # index first: a cut file keeps frames
    open(j("zero.mp4"), "wb").close()
    open(j("text.mp4"), "w").write("this is not a video\n" * 20)
    open(j("noise.mp4"), "wb").write(bytes(rnd.getrandbits(8) for _ in range(200000)))
    ff("-f", "lavfi", "-i", "sine=d=1", "-c:a", "aac", j("audio_only.mp4"))
    ff("-f", "lavfi", "-i", "testsrc2=s=64x64", "-frames:v", "1", "-f", "image2", "-c:v", "png", j("image.png"))
    shutil.copy(j("image.png"), j("image_png.mp4"))
    ff("-f", "lavfi", "-i", "color=c=red:s=4096x4096:r=5:d=2", "-c:v", "mpeg4", "-q:v", "31", j("huge.mp4"))
    ff("-f", "lavfi", "-i", "testsrc2=s=64x48:r=25:d=1", "-c:v", "mpeg2video", "-f", "mpegts", j("a.ts"))
    ff("-f", "lavfi", "-i", "testsrc2=s=96x80:r=25:d=1", "-c:v", "mpeg2video", "-f", "mpegts", j("b.ts"))
    with open(j("size_change.ts"), "wb") as o:
        o.write(open(j("a.ts"), "rb").read() + open(j("b.ts"), "rb").read())
    good = open(j("good.mp4"), "rb").read()
    cuts = []
    for k, frac in enumerate([0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99]):
        c = j("cut%02d.mp4" % k)
        open(c, "wb").write(good[:int(len(good) * frac)])
        cuts.append(c)
    files = [j(n) for n in ("good.mp4", "zero.mp4", "text.mp4", "noise.mp4", "audio_only.mp4",
                            "image_png.mp4", "huge.mp4", "size_change.ts")] + cuts
    want = {f: clips(readable(f)) for f in files}
    want[j("huge.mp4")] = 0  # ffmpeg reads it; max_pixels refuses it by policy
    reasons, sink = run(tmp, "static", files)
    check(sink == sum(want.values()), "static: %d clips, ffprobe's readable frames make %d (%r)" %
          (sink, sum(want.values()), {os.path.basename(f): n for f, n in want.items()}))
    for f, n in want.items():
        check((f in reasons) == (n == 0), "%s: %s but ffprobe's frames make %d clips" %
              (os.path.basename(f), "quarantined: " + reasons[f] if f in reasons else "not quarantined", n))
    expect_words = {"zero.mp4": "empty", "text.mp4": "not a media file", "audio_only.mp4": "no video stream",
                    "huge.mp4": "exceeds max_pixels"}
    for name, word in expect_words.items():
        r = reasons.get(j(name), "")
        check(word in r, "%s: reason %r lacks %r" % (name, r, word))
    check(want[j("size_change.ts")] > 0, "size_change.ts: ffprobe reads no clip (the test is wrong)")

    # --- files changed on disk while the stage reads them: a slow sink keeps the stage
    # inside the first file long enough for the change to land mid-read
    ff("-f", "lavfi", "-i", "testsrc2=s=96x64:r=25:d=8", "-c:v", "mpeg4", "-g", "25", j("long1.mp4"))
    for n in ("long2.mp4", "long3.mp4"):
        shutil.copy(j("long1.mp4"), j(n))
    total = clips(readable(j("long1.mp4")))
    size = os.path.getsize(j("long1.mp4"))

    def mutate():
        time.sleep(1.0)
        with open(j("long1.mp4"), "r+b") as f:  # truncated in place (same inode)
            f.truncate(size // 3)
        with open(j("long2.mp4"), "r+b") as f:  # overwritten in place with noise
            f.seek(size // 4)
            f.write(bytes(rnd.getrandbits(8) for _ in range(size // 2)))
        os.unlink(j("long3.mp4"))  # deleted (before or while it is read)

    reasons, sink = run(tmp, "changing", [j("long1.mp4"), j("long2.mp4"), j("long3.mp4")],
                        delay=150, during=mutate)
    check(0 < sink <= 3 * total, "changing: %d clips (at most %d expected, some)" % (sink, 3 * total))
    check(j("long3.mp4") in reasons or sink > 0, "changing: the deleted file left no trace")

    if not FAILS:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failures" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
