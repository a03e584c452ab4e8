#!/usr/bin/python3
# test_train_ti2v.py — image-to-video by the first frame (Wan 2.2 TI2V) end to end through
# the real binary:
#  - pipelines/precompute_latents.lua with ti2v = true over two generated videos: the
#    summary records "cond":"first_frame" (`vflow cache verify` clean) and the latents are
#    those of a plain precompute (no second encode: latent frame 0 is the first frame's own
#    encode, the causal VAE; tests/unit/test_vae22.c checks that for the Wan 2.2 VAE);
#  - a tiny TI2V-shaped DiT (time = "token") trains on it over P = 2 partitions with two
#    micro-batches (the per-token e and e0 cross the boundary), finite losses, and two runs
#    are bit for bit the same (losses and checkpoint);
#  - the kind decides the path: the same model on the text-only cache of the same videos
#    (cond = text: text-to-video) trains to other losses;
#  - bad input, each one line and exit 2 before any step: the TI2V reader on the text-only
#    cache (naming both kinds), a per-sample-time model on the first_frame cache (naming
#    the model's time), and a ti2v precompute into the text-only cache (naming both kinds).
# That the loss leaves frame 0 out (its target moves neither loss nor gradients, frame 1's
# does) is tests/unit/test_dit_ti2v.c; the construction against diffusers' pipeline is
# tests/reference/test_wan_ti2v_diffusers.py.
# vflow-test: timeout=600
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import FAILS, check  # noqa: E402
import i2v_lib  # noqa: E402
from i2v_lib import TOOLS, run, train  # noqa: E402

SIZE, FRAMES = 32, 9
TI2V = ("time=token", "cond=first_frame")



def precompute(tmp, name, manifest, cache, *sets):
    return i2v_lib.precompute(tmp, name, manifest, cache, SIZE, FRAMES, *sets)


def latent_of(path):
    """Tensor "latent" (F32) of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        t = json.loads(f.read(n))["latent"]
        body = f.read()
    a, b = t["data_offsets"]
    return np.frombuffer(body[a:b], np.float32).reshape(t["shape"])


def model_bytes(rd):
    p = os.path.join(rd, "ckpt", "step-2", "model.safetensors")
    if not os.path.exists(p):
        return None
    with open(p, "rb") as f:
        return f.read()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        _, manifest, err = i2v_lib.videos(tmp, 2, SIZE, FRAMES)
        if not check(not err, "mkvideo: " + err):
            return 1
        ti2v, t2v = os.path.join(tmp, "ti2v.lmdb"), os.path.join(tmp, "t2v.lmdb")
        r = precompute(tmp, "pre_ti2v", manifest, ti2v, "ti2v=true")
        if not check(r.returncode == 0, "precompute ti2v: exit %d %s" % (r.returncode, r.stderr[-800:])):
            return 1
        r = precompute(tmp, "pre_t2v", manifest, t2v)
        check(r.returncode == 0, "precompute text-only: exit %d %s" % (r.returncode, r.stderr[-800:]))
        r = run([os.path.join(TOOLS, "cache_tool"), "cli", "stat", ti2v])
        check(any(ln.split() == ["cond", "first_frame"] for ln in r.stdout.splitlines()),
              "the summary records cond first_frame: %s" % r.stdout[-600:])
        r = run([os.path.join(TOOLS, "cache_tool"), "cli", "verify", ti2v])
        check(r.returncode == 0, "vflow cache verify: exit %d %s%s" % (r.returncode, r.stdout, r.stderr))
        # the same latents as the text-only cache's: read both back in one order
        lat = []
        for c, kind in ((ti2v, "first_frame"), (t2v, "text")):
            dump = os.path.join(tmp, "dump_" + os.path.basename(c))
            os.makedirs(dump)
            r = run([os.path.join(TOOLS, "cache_tool"), "read", c, "--batch", "2", "--cond", kind, "--dump", dump])
            if check(r.returncode == 0, "cache_tool read %s: %s" % (c, r.stderr)):
                lat.append(latent_of(os.path.join(dump, "batch_0.safetensors")))
        check(len(lat) == 2 and lat[0].shape == (2, 4, 3, SIZE // 8, SIZE // 8) and np.array_equal(lat[0], lat[1]),
              "the first_frame cache's latents are the text-only cache's, bit for bit")

        # training: a tiny TI2V model (a time per token) over 2 partitions, twice
        r, rd, ln = train(tmp, "ti2v", ti2v, *TI2V)
        if not check(r.returncode == 0 and len(ln) == 2 and all(np.isfinite(ln)),
                     "TI2V training: exit %d, losses %r %s" % (r.returncode, ln, r.stderr[-800:])):
            return 1
        r2, rd2, ln2 = train(tmp, "ti2v_again", ti2v, *TI2V)
        m1, m2 = model_bytes(rd), model_bytes(rd2)
        check(r2.returncode == 0 and ln2 == ln and m1 is not None and m1 == m2,
              "TI2V training is deterministic: losses %r vs %r, checkpoints equal %s" % (ln, ln2, m1 == m2))
        # the cache's kind decides the path: the same model text-to-video on the same latents
        r3, _, ln3 = train(tmp, "t2v", t2v, "time=token")
        check(r3.returncode == 0 and len(ln3) == 2 and ln3 != ln,
              "the same model on the text-only cache trains another path: exit %d, losses %r vs %r %s" % (
                  r3.returncode, ln3, ln, r3.stderr[-600:]))
        print("TI2V losses %s (twice the same); text-to-video on the same latents %s" % (ln, ln3))

        # bad inputs: one line, exit 2, no step
        for ok, msg in i2v_lib.refusals(tmp, (
                ("ti2v-on-t2v", t2v, TI2V, ("conditioning kind is text", "needs first_frame", t2v)),
                ("per-sample-on-ti2v", ti2v, ("cond=first_frame",), ("first_frame", "one time a sample")))):
            check(ok, msg)
        r = precompute(tmp, "pre_mixed", manifest, t2v, "ti2v=true")
        out = r.stdout + r.stderr
        check(r.returncode == 2 and "conditioning kind text" in out and "first_frame" in out,
              "ti2v into a text-only cache: exit %d %s" % (r.returncode, out[-600:]))
    print("PASS" if not FAILS else "FAIL (%d)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
