# test_pipeline_headers.py — every example command in the header of a pipelines/*.lua
# script works as written: it is run, in the header's order, from a directory where
# `pipelines/` is the project's and `data/samples` holds the sample videos
# (scripts/make_sample_videos.sh), so that the precompute lines make the caches the
# training lines read. A command exits 0 unless its line says "# exit 2" (a plan that
# does not fit, shown on purpose). Commands that need files only their users have (Wan
# 2.1's published weights, a umT5 model) are listed as not run.
# vflow-test: labels=slow timeout=1200
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import check, finish  # noqa: E402

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(os.environ.get("VFLOW_BUILD", "build"), "vflow")
# what only the user has: these commands are shown, not run
NEEDS = ["Wan2.1-T2V", "Wan2.1-I2V", "Wan2.2-T2V-A14B", "Wan2.2-TI2V", "wan_2.1_vae", "clips_emb.csv", "clips_i2v.csv",
         "umt5"]
# the order the scripts' commands build on each other (caches before training on them)
ORDER = ["precompute_latents", "precompute_buckets", "train_dit", "train_buckets"]


def header_commands(path):
    """(command words, expected exit code) of each `vflow ...` line of the header."""
    lines = []
    with open(path) as f:
        for line in f:
            if not line.startswith("--"):
                break
            lines.append(line[2:].rstrip("\n"))
    out, cur = [], None
    for text in lines:
        t = text.strip()
        if cur is not None:
            cur += " " + t
        elif t.startswith("vflow "):
            cur = t
        else:
            continue
        if cur.endswith("\\"):
            cur = cur[:-1]
            continue
        cmd, _, note = cur.partition("#")
        out.append((shlex.split(cmd), 2 if note.strip().startswith("exit 2") else 0))
        cur = None
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="vf_headers_")
    try:
        run_all(tmp)
    finally:
        subprocess.run(["rm", "-rf", tmp])
    finish()


def run_all(tmp):
    os.symlink(os.path.join(SRC, "pipelines"), os.path.join(tmp, "pipelines"))
    subprocess.run(["bash", os.path.join(SRC, "scripts", "make_sample_videos.sh"), "data/samples"], cwd=tmp,
                   check=True, capture_output=True)
    scripts = sorted(f[:-4] for f in os.listdir(os.path.join(SRC, "pipelines")) if f.endswith(".lua"))
    scripts = [s for s in ORDER if s in scripts] + [s for s in scripts if s not in ORDER]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ran = 0
    for s in scripts:
        cmds = header_commands(os.path.join(SRC, "pipelines", s + ".lua"))
        check(any(c[0][:1] == ["vflow"] for c in cmds), "%s.lua: its header shows no vflow command" % s)
        for words, want in cmds:
            line = " ".join(words)
            if "..." in words or any(n in line for n in NEEDS):
                print("not run (needs the user's files): " + line, flush=True)
                continue
            r = subprocess.run([VFLOW] + words[1:], cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
            ran += 1
            ok = check(r.returncode == want, "%s.lua header: `%s` exits %d, want %d:\n%s" %
                       (s, line, r.returncode, want, (r.stderr or r.stdout)[-1500:]))
            print("%s exit %d: %s" % ("ok" if ok else "FAIL", r.returncode, line), flush=True)
    check(ran >= 10, "only %d header commands ran" % ran)


if __name__ == "__main__":
    main()
