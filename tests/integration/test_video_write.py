#!/usr/bin/env python3
# test_video_write.py — sample videos and PNG strips written through formats/video_write.h
# (build/tools/vw_tool), checked with the tools users have:
#  - ffprobe reads the expected codec (h264 where libx264 is present, else mpeg4), frame
#    count, size and frame rate (24, 16 and NTSC 30000/1001) from mp4, mkv and avi;
#  - ffmpeg decodes each back to RGB24, every frame within 35 dB PSNR of the frames
#    written (the raw dump), mpeg4 forced as well as the default encoder, and no worse
#    (1 dB) than the ffmpeg CLI encoding the same frames with the same settings;
#  - the PNG strip decodes (ffmpeg) to exactly the first frames side by side (lossless);
#  - NaN and out-of-range samples are clamped, not carried into the file;
#  - bad input: an odd size, an unknown extension, an unknown encoder, a directory that
#    does not exist and a full disk (a 64 KiB tmpfs in a private mount namespace, root
#    only) give exit 2 or 1 with one line naming the file, and leave no file or .part.
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from media_lib import psnr  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", "build")
TOOL = os.path.join(BUILD, "tools", "vw_tool")
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, file=sys.stderr)
    return cond


def probe(path):
    r = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                        "stream=codec_name,width,height,r_frame_rate,nb_read_frames", "-of",
                        "default=noprint_wrappers=1", path], capture_output=True, text=True)
    return dict(l.split("=", 1) for l in r.stdout.split() if "=" in l)


def decode(path, w, h):
    r = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                       capture_output=True)
    n = w * h * 3
    return [r.stdout[i:i + n] for i in range(0, len(r.stdout), n)]




def main():
    if not os.path.exists(TOOL):
        print("skip: no " + TOOL)
        return 77
    tmp = tempfile.mkdtemp(prefix="vw_")
    cases = [("a.mp4", 96, 64, 17, "24", None, "24/1"), ("b.mkv", 64, 48, 9, "16", None, "16/1"),
             ("c.avi", 80, 48, 12, "29.97002997", "mpeg4", "30000/1001"),
             ("d.mp4", 64, 64, 5, "30000/1001", "mpeg4", "30000/1001")]
    for name, w, h, t, fps, codec, rate in cases:
        out, raw, png = (os.path.join(tmp, name + s) for s in ("", ".raw", ".png"))
        fps_arg = str(30000 / 1001) if "/" in fps else fps
        args = [TOOL, out, str(w), str(h), str(t), fps_arg, "raw=" + raw, "png=" + png]
        if codec:
            args.append("codec=" + codec)
        r = subprocess.run(args, capture_output=True, text=True)
        if not check(r.returncode == 0, "%s: exit %d: %s" % (name, r.returncode, r.stderr[-300:])):
            continue
        used = r.stdout.split()[1]
        p = probe(out)
        want_codec = "mpeg4" if used == "mpeg4" else "h264"
        check(p.get("codec_name") == want_codec, "%s: codec %s, vw_tool used %s" % (name, p.get("codec_name"), used))
        check(p.get("width") == str(w) and p.get("height") == str(h), "%s: size %s" % (name, p))
        check(p.get("nb_read_frames") == str(t), "%s: %s frames, wrote %d" % (name, p.get("nb_read_frames"), t))
        check(p.get("r_frame_rate") == rate, "%s: frame rate %s, expected %s" % (name, p.get("r_frame_rate"), rate))
        want = open(raw, "rb").read()
        n = w * h * 3
        got = decode(out, w, h)
        check(len(got) == t, "%s: ffmpeg decoded %d frames" % (name, len(got)))
        worst = min((psnr(got[i], want[i * n:(i + 1) * n]) for i in range(min(t, len(got)))), default=0)
        check(worst >= 35.0, "%s: worst frame PSNR %.1f dB < 35" % (name, worst))
        # the peer: the ffmpeg CLI encoding the same RGB frames with the same encoder and
        # settings; the writer's conversion and encode must lose no more than it does
        peer = os.path.join(tmp, "peer_" + name)
        enc = ["-c:v", "libx264", "-crf", "18", "-g", "12"] if used == "libx264" else ["-c:v", "mpeg4", "-q:v", "3", "-g", "12"]
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "%dx%d" % (w, h),
                        "-r", rate, "-i", raw] + enc + ["-pix_fmt", "yuv420p", peer], check=True)
        pgot = decode(peer, w, h)
        pworst = min((psnr(pgot[i], want[i * n:(i + 1) * n]) for i in range(min(t, len(pgot)))), default=0)
        check(worst >= pworst - 1.0, "%s: worst PSNR %.1f dB, the ffmpeg CLI's %.1f dB" % (name, worst, pworst))
        k = min(t, 4)
        strip = decode(png, k * w, h)
        exp = b"".join(want[(j * h + y) * w * 3:(j * h + y + 1) * w * 3] for y in range(h) for j in range(k))
        check(len(strip) == 1 and strip[0] == exp, "%s: PNG strip differs from the first %d frames" % (name, k))
        left = [f for f in os.listdir(tmp) if f.endswith(".part")]
        check(not left, "%s: .part files left: %s" % (name, left))
        print("%-6s %-8s %3dx%-3d %2d frames %-10s worst PSNR %.1f dB (ffmpeg CLI %.1f dB)" % (name, used, w, h, t, rate, worst, pworst))

    # NaN / out of range: clamped (frame 0's first pixel: R from NaN -> 0, G 7 -> 255, B -3 -> 0)
    raw = os.path.join(tmp, "n.raw")
    r = subprocess.run([TOOL, os.path.join(tmp, "n.mp4"), "32", "32", "2", "10", "raw=" + raw, "nan=1"],
                       capture_output=True, text=True)
    check(r.returncode == 0 and open(raw, "rb").read()[:3] == bytes([0, 255, 0]),
          "NaN/out-of-range samples not clamped: exit %d" % r.returncode)

    bad = [("odd.mp4", ["33", "32"], 2, "must be even"), ("x.unknownext", ["32", "32"], 2, "no container"),
           ("enc.mp4", ["32", "32", "codec=nosuchcodec"], 2, "no encoder"),
           (os.path.join("missing", "dir.mp4"), ["32", "32"], 1, "cannot create")]
    for name, dims, code, words in bad:
        out = os.path.join(tmp, name)
        extra = dims[2:]
        r = subprocess.run([TOOL, out, dims[0], dims[1], "3", "10"] + extra, capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == code and len(lines) == 1 and words in lines[0] and name.split("/")[-1] in lines[0],
              "%s: exit %d, stderr %r (expected exit %d, one line with %r)" % (name, r.returncode, r.stderr, code, words))
        check(not os.path.exists(out) and not os.path.exists(out + ".part"), "%s: a file was left" % name)

    if os.geteuid() == 0 and subprocess.run(["unshare", "-m", "true"]).returncode == 0:
        small = os.path.join(tmp, "small")
        os.mkdir(small)
        out = os.path.join(small, "full.mp4")
        sh = "mount -t tmpfs -o size=64k tmpfs %s && %s %s 256 256 60 24 codec=mpeg4; rc=$?; ls -A %s; exit $rc" % (
            small, TOOL, out, small)
        r = subprocess.run(["unshare", "-m", "sh", "-c", sh], capture_output=True, text=True)
        err = [l for l in r.stderr.splitlines() if l.startswith("vw_tool")]
        check(r.returncode == 1 and len(err) == 1 and "full.mp4" in err[0] and "cannot write" in err[0],
              "full disk: exit %d, stderr %r" % (r.returncode, r.stderr[-400:]))
        check(r.stdout.split()[2:] == [], "full disk: files left on the tmpfs: %r" % r.stdout)
        print("full disk: exit %d, %s" % (r.returncode, err[0] if err else r.stderr.strip()[-200:]))
    else:
        print("full disk case skipped (needs root and unshare)")

    subprocess.run(["rm", "-rf", tmp])
    if fails:
        print("%d failures" % len(fails))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
