# test_precompute_folder.py — a user's own folder of clips through
# pipelines/precompute_latents.lua, as musubi-tuner and diffusion-pipe keep one: videos
# with a same-stem .txt caption beside each, one corrupt clip, and a stray file.
#  - `--set source=DIR` takes the videos by extension and each caption from its .txt
#    (`vflow cache ls` shows the caption text of every clip); the .txt files and the stray
#    file are skipped and counted in one summary line, never quarantined;
#  - one corrupt file of five with two decode workers finishes: exit 0, the rest cached,
#    the file named in the closing summary and the only row of quarantine.jsonl;
#  - max_bad_fraction counts over the whole run's files once bad_min_files were tried: 4
#    bad of 24 (0.17 > 0.1) stops the run with exit 1 and a line naming the knob
#    (`--set max_bad_fraction=`), while a run of fewer files than bad_min_files is never
#    stopped by the fraction, only when none of its files is good (not with
#    max_bad_fraction=1, which accepts any share).
# The clips are made with ffmpeg's testsrc; the expected clip counts come from ffprobe.
# vflow-test: labels=precompute timeout=300
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import check, finish  # noqa: E402

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("VFLOW_BUILD", "build")
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(BUILD, "vflow")
PIPELINE = os.path.join(SRC, "pipelines", "precompute_latents.lua")


def clip(path, n_frames, hue):
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc=size=48x32:rate=10:duration=%g" % (n_frames / 10.0),
                    "-vf", "hue=h=%d" % hue, "-c:v", "mpeg4", "-q:v", "5", path], check=True)


def readable(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
                          "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", path],
                         capture_output=True, text=True).stdout.strip()
    return int(out or 0)


def run(args, cwd):
    p = subprocess.run([VFLOW, "run", PIPELINE] + args, cwd=cwd, capture_output=True, text=True, timeout=240)
    return p.returncode, p.stdout + p.stderr


def main():
    tmp = tempfile.mkdtemp(prefix="vf_folder_")
    clips = os.path.join(tmp, "clips")
    os.makedirs(clips)
    captions = {}
    for i in range(1, 5):
        name = "clip%d.mp4" % i
        clip(os.path.join(clips, name), 12 + 5 * i, 40 * i)
        captions[name] = "a test pattern, number %d, in its own colour" % i
        with open(os.path.join(clips, "clip%d.txt" % i), "w") as f:
            f.write("  " + captions[name] + "\n\n")  # users' files end in newlines
    with open(os.path.join(clips, "clip5.mp4"), "wb") as f:
        f.write(os.urandom(20000))
    with open(os.path.join(clips, "clip5.txt"), "w") as f:
        f.write("the broken one\n")
    with open(os.path.join(clips, "notes.md"), "w") as f:
        f.write("# my dataset\n")
    want = {n: readable(os.path.join(clips, n)) // 5 for n in captions}

    # 1 + 2: the folder as it is, two decode workers
    rc, out = run(["--set", "source=" + clips, "--set", "cache=" + os.path.join(tmp, "c.lmdb"),
                   "--set", "frames=5", "--set", "size=32", "--set", "workers=2",
                   "--run-dir", os.path.join(tmp, "r1")], tmp)
    check(rc == 0, "one corrupt clip of five: exit %d, want 0\n%s" % (rc, out))
    check("5 videos, 5 with a .txt caption; 1 other file skipped (not a video by extension)" in out,
          "the summary counts the videos, captions and skipped files in one line:\n" + out)
    summary = [l for l in out.splitlines() if "quarantined (" in l]
    check(len(summary) == 1 and os.path.join(clips, "clip5.mp4") in summary[0],
          "the summary names the corrupt file: %s" % summary)
    rows = [json.loads(l) for l in open(os.path.join(tmp, "r1", "quarantine.jsonl"))]
    check([os.path.basename(r["path"]) for r in rows] == ["clip5.mp4"],
          "quarantine.jsonl holds only the corrupt video: %s" % [r["path"] for r in rows])
    ls = subprocess.run([VFLOW, "cache", "ls", os.path.join(tmp, "c.lmdb")], capture_output=True, text=True).stdout
    got = {}
    for line in ls.splitlines()[1:]:
        key, ident, shape, caption = line.split("\t")
        name = os.path.basename(ident.split("#")[0])
        check(caption == captions.get(name), "%s: caption %r, want %r" % (ident, caption, captions.get(name)))
        got[name] = got.get(name, 0) + 1
    check(got == want, "clips per file %s, ffprobe's frames make %s" % (got, want))

    # the guard: 20 good + 4 bad files = 4 of 24 bad over the run, judged from 20 files on
    big = os.path.join(tmp, "big")
    os.makedirs(big)
    for i in range(20):
        clip(os.path.join(big, "g%02d.mp4" % i), 5, 9 * i)
    for i in range(4):
        with open(os.path.join(big, "b%d.mp4" % i), "wb") as f:
            f.write(os.urandom(5000))
    rc, out = run(["--set", "source=" + big, "--set", "cache=" + os.path.join(tmp, "big.lmdb"),
                   "--set", "frames=5", "--set", "size=32", "--set", "workers=2",
                   "--run-dir", os.path.join(tmp, "r2")], tmp)
    check(rc == 1, "4 of 24 bad: exit %d, want 1\n%s" % (rc, out))
    check("--set max_bad_fraction=" in out and "max_bad_fraction 0.1" in out,
          "the guard's line names the knob and the bound:\n" + out)
    rc, out = run(["--set", "source=" + big, "--set", "cache=" + os.path.join(tmp, "big2.lmdb"),
                   "--set", "frames=5", "--set", "size=32", "--set", "workers=2", "--set", "max_bad_fraction=0.2",
                   "--run-dir", os.path.join(tmp, "r3")], tmp)
    check(rc == 0, "4 of 24 bad under max_bad_fraction=0.2: exit %d\n%s" % (rc, out))

    # a run of fewer files than bad_min_files: only all-bad stops it
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    for i in range(3):
        with open(os.path.join(bad, "x%d.mkv" % i), "wb") as f:
            f.write(os.urandom(3000))
    rc, out = run(["--set", "source=" + bad, "--set", "cache=" + os.path.join(tmp, "bad.lmdb"),
                   "--set", "frames=5", "--set", "size=32", "--run-dir", os.path.join(tmp, "r4")], tmp)
    check(rc == 1 and "none of the run's 3 files gives a clip" in out, "all bad: exit %d\n%s" % (rc, out))
    rc, out = run(["--set", "source=" + bad, "--set", "cache=" + os.path.join(tmp, "bad.lmdb"),
                   "--set", "frames=5", "--set", "size=32", "--set", "max_bad_fraction=1",
                   "--run-dir", os.path.join(tmp, "r5")], tmp)
    check(rc == 0, "all bad with max_bad_fraction=1 (any share accepted): exit %d\n%s" % (rc, out))

    subprocess.run(["rm", "-rf", tmp])
    finish()


if __name__ == "__main__":
    main()
