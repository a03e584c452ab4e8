# test_sizes.py — one spelling of a frame size across the shipped scripts' knobs, and one
# check at precompute time of what training will need:
#  - `size` (precompute_latents.lua, finetune_wan.lua, the plan scripts) and `sample_size`
#    (train_dit.lua) take WxH or one number for a square: `vflow graph --json` shows the
#    stage params they become (decode's size, the sample stage's size, the latent shape the
#    reader plans with); a malformed size is one exit-2 line naming the knob;
#  - `vflow sample --size 16` is --size 16x16;
#  - precompute refuses (exit 2, before anything runs) a frame size whose latents a patch
#    of 2 cannot cut, naming the VAE's stride and the DiT's patch; 64x48 passes and
#    `vae_encode.patch=1` lets 72x72 through.
# vflow-test: labels=precompute timeout=300
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import check, finish  # noqa: E402

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(os.environ.get("VFLOW_BUILD", "build"), "vflow")


def pipe(name):
    return os.path.join(SRC, "pipelines", name)


def vflow(args, cwd):
    return subprocess.run([VFLOW] + args, cwd=cwd, capture_output=True, text=True, timeout=120)


def graph(script, sets, cwd):
    args = ["graph", pipe(script), "--json"]
    for s in sets:
        args += ["--set", s]
    r = vflow(args, cwd)
    if not check(r.returncode == 0, "%s %s: rc %d %s" % (script, sets, r.returncode, r.stderr)):
        return {}
    return {s["name"]: s["params"] for s in json.loads(r.stdout)["stages"]}


def main():
    tmp = tempfile.mkdtemp(prefix="vf_sizes_")
    with open(os.path.join(tmp, "m.csv"), "w") as f:
        f.write("path,text\nx.mp4,a\n")
    for spelled, want in [("64x48", [64, 48]), ("64", [64, 64]), ("96X32", [96, 32])]:
        st = graph("precompute_latents.lua", ["manifest=m.csv", "workers=1", "size=" + spelled], tmp)
        check(st.get("decode", {}).get("size") == want, "precompute size=%s: decode size %s" % (spelled, st.get("decode")))
    for spelled, (w, h) in [("832x480", (832, 480)), ("512", (512, 512))]:
        st = graph("plan_wan13b_1x80.lua", ["size=" + spelled], tmp)
        shape = st.get("latent_reader", {}).get("latent_shape")
        check(shape == [16, 21, h // 8, w // 8], "plan size=%s: latent_shape %s" % (spelled, shape))
        st = graph("plan_precompute_129f_480p.lua", ["size=" + spelled], tmp)
        check(st.get("decode_0", {}).get("size") == [w, h], "plan_precompute size=%s: %s" % (spelled, st.get("decode_0")))
    cache = os.path.join(tmp, "none.lmdb")
    for spelled, want in [("48x32", [48, 32]), ("32", [32, 32])]:
        st = graph("train_dit.lua", ["cache=" + cache, "sample_captions=a cat", "sample_size=" + spelled,
                                     "latent_reader.latent_shape=[4,5,4,4]"], tmp)
        check(st.get("sample", {}).get("size") == want, "sample_size=%s: %s" % (spelled, st.get("sample")))
    r = vflow(["check", pipe("precompute_latents.lua"), "--set", "manifest=m.csv", "--set", "size=64x"], tmp)
    check(r.returncode == 2 and "size 64x: expected WxH (e.g. 832x480) or one number for a square" in r.stderr,
          "a malformed size: rc %d %s" % (r.returncode, r.stderr))

    # the check at precompute time
    r = vflow(["check", pipe("precompute_latents.lua"), "--set", "manifest=m.csv", "--set", "size=72"], tmp)
    check(r.returncode == 2 and "frames of 72x72 (WxH): training needs sides that are multiples of 16 = the VAE's "
          "spatial stride 8 x the DiT's patch 2 (vae_encode.patch); e.g. 64x64 or 80x80" in r.stderr,
          "size=72 at precompute: rc %d %s" % (r.returncode, r.stderr))
    r = vflow(["check", pipe("precompute_latents.lua"), "--set", "manifest=m.csv", "--set", "size=72",
               "--set", "vae_encode.patch=1"], tmp)
    check(r.returncode == 0, "size=72 with vae_encode.patch=1: rc %d %s" % (r.returncode, r.stderr))

    # vflow sample --size S: S x S (the checkpoint is not needed to see the size parsed)
    r = vflow(["sample", os.path.join(tmp, "nockpt"), "--prompt", "a", "--size", "16", "--out", "x.mp4"], tmp)
    check("--size" not in r.stderr and r.returncode == 2, "sample --size 16 parses: %s" % r.stderr)
    r = vflow(["sample", os.path.join(tmp, "nockpt"), "--prompt", "a", "--size", "16y", "--out", "x.mp4"], tmp)
    check(r.returncode == 2 and "--size 16y: expected WxH" in r.stderr, "sample --size 16y: %s" % r.stderr)
    subprocess.run(["rm", "-rf", tmp])
    finish()


if __name__ == "__main__":
    main()
