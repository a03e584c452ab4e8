#!/usr/bin/python3
# test_train_weights.py — training that starts from a weights file (`--set weights=`),
# through the real binary:
#  - the tiny model's seeded init saved as a file (dit_tool save) and trained from with
#    P = 2 partitions and S = 3 optimizer shards (whose slices cut tensors) ends bitwise
#    where the run initialised from the same seed ends: every shard and partition took
#    exactly the file's numbers;
#  - the same weights under the ComfyUI prefix in BF16 (rounded here), and a sharded
#    index of them, train too; scaled FP8 (E4M3 + per-tensor scale, ComfyUI's and
#    diffusers' forms, quantised here) reads as code value times scale, bit for bit; another init gives other losses after step 1 (the
#    init's zero head makes step 1's the same for any weights);
#  - `vflow plan` counts each shard's loading peak: the file's largest tensor, on the host;
#  - bad input, each refused by `vflow check` (before any worker starts) with exit 2 and
#    one line naming the file and the tensor: a VAE given as the DiT, an I2V checkpoint
#    (img_emb), a T2V checkpoint for an I2V model (patch_embedding's input channels, both
#    shapes), a missing, an extra and a mis-shaped tensor (expected and found shape),
#    an FP8 format vflow does not read (E4M3FNUZ), a model directory whose config.json
#    says other heads (shapes alone cannot tell) or an I2V model, a truncated shard, an index naming a missing file, a header over the
#    size limit; a NaN (found only when the data are read) fails `vflow run` with exit 2
#    naming the tensor, before any step; so does an image-to-video model (in_dim 8) on a
#    cache of text-to-video data, naming both conditioning kinds.
# vflow-test: timeout=300
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_lib import bf16, f32, read_st, write_st  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", "build")
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
TRAIN_TOOL = os.path.join(BUILD, "tools", "train_tool")
DIT_TOOL = os.path.join(BUILD, "tools", "dit_tool")
PIPE = os.path.join(SRC, "pipelines", "train_dit.lua")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
failed = []


def check(cond, msg):
    if not cond:
        failed.append(msg)
        print("FAIL: " + msg)
    return cond


def vflow(cmd, tmp, name, *sets):
    run = os.path.join(tmp, name)
    args = [VFLOW, cmd, PIPE] + (["--run-dir", run] if cmd == "run" else [])
    for s in ("cache=" + os.path.join(tmp, "cache.lmdb"), "steps=3", "every=0", "batch=4", "stages=2",
              "micro_batches=2", "shards=3") + sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=120)
    losses = []
    mp = os.path.join(run, "metrics.jsonl")
    if cmd == "run" and os.path.exists(mp):
        with open(mp) as f:
            losses = [json.loads(ln)["loss"] for ln in f if '"event":"train_step"' in ln]
    return r, run, losses


def main():
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda n: os.path.join(tmp, n)  # noqa: E731
        subprocess.run([TRAIN_TOOL, "mkcache", p("cache.lmdb"), "16", "4", "1", "8", "8", "7"], check=True,
                       capture_output=True)
        for seed in (0, 7):
            subprocess.run([DIT_TOOL, "init", "seed=%d" % seed, "out=" + p("init%d.bin" % seed)], check=True)
            subprocess.run([DIT_TOOL, "save", "params=" + p("init%d.bin" % seed), "out=" + p("w%d.safetensors" % seed)],
                           check=True)
        w0 = read_st(p("w0.safetensors"))

        r, run_a, la = vflow("run", tmp, "seeded")
        check(r.returncode == 0 and len(la) == 3, "seeded run: exit %d %s" % (r.returncode, r.stderr[-500:]))
        r, run_b, lb = vflow("run", tmp, "from_file", "weights=" + p("w0.safetensors"))
        check(r.returncode == 0 and lb == la, "run from the init's file: exit %d, losses %r vs %r %s" % (
            r.returncode, lb, la, r.stderr[-500:]))
        ma = open(os.path.join(run_a, "ckpt", "step-3", "model.safetensors"), "rb").read()
        mb = open(os.path.join(run_b, "ckpt", "step-3", "model.safetensors"), "rb").read()
        check(ma == mb, "the run from the file ends bitwise where the seeded run ends")
        # the plan counts each shard's loading peak: the file's largest tensor, by its header
        r = subprocess.run([VFLOW, "plan", PIPE, "--json", "--set", "cache=" + p("cache.lmdb"), "--set", "shards=3",
                            "--set", "weights=" + p("w0.safetensors")], capture_output=True, text=True, env=ENV)
        hdr = json.loads(open(p("w0.safetensors"), "rb").read()[8:8 + struct.unpack("<Q", open(p("w0.safetensors"), "rb").read(8))[0]])
        largest = max(v["data_offsets"][1] - v["data_offsets"][0] for k, v in hdr.items() if k != "__metadata__")
        lines = [x for x in json.loads(r.stdout)["lines"] if x["what"].startswith("weights file")] if r.returncode == 0 else []
        check(len(lines) == 3 and all(x["bytes"] == largest and x["device"] == "cpu" for x in lines),
              "plan: one loading line of %d bytes per shard: %r" % (largest, lines))
        r, _, l7 = vflow("run", tmp, "other", "weights=" + p("w7.safetensors"))
        # (the step-1 loss is the init's zero head's: the same for any weights; later ones differ)
        check(r.returncode == 0 and len(l7) == 3 and l7[1:] != la[1:], "another init, another loss: %r vs %r" % (l7, la))

        # ComfyUI prefix in BF16, and the same as a sharded index
        comfy = {}
        for k, v in w0.items():
            raw, _ = bf16(v)
            comfy["model.diffusion_model." + k] = ("BF16", v.shape, raw)
        write_st(p("comfy_bf16.safetensors"), comfy)
        names = sorted(comfy)
        os.makedirs(p("sharded"))
        wmap = {}
        for i, part in enumerate((names[:40], names[40:])):
            fn = "model-%05d-of-00002.safetensors" % (i + 1)
            write_st(os.path.join(p("sharded"), fn), {k: comfy[k] for k in part})
            wmap.update({k: fn for k in part})
        index = os.path.join(p("sharded"), "model.safetensors.index.json")
        with open(index, "w") as f:
            json.dump({"weight_map": wmap}, f)
        r, _, lc = vflow("run", tmp, "comfy", "weights=" + p("comfy_bf16.safetensors"))
        check(r.returncode == 0 and len(lc) == 3 and lc[1:] != la[1:],
              "BF16 ComfyUI file trains (bf16-rounded weights: another loss): exit %d %r %s" % (
                  r.returncode, lc, r.stderr[-400:]))
        r, _, ls = vflow("run", tmp, "sharded_run", "weights=" + index)
        check(r.returncode == 0 and ls == lc, "sharded index = the single file: %r vs %r %s" % (ls, lc, r.stderr[-400:]))

        # scaled FP8 (ComfyUI's form: F8_E4M3 weights, F32 scalar .scale_weight, .scale_input,
        # the scaled_fp8 marker; and diffusers' .weight_scale): dequantised exactly as
        # fp8 value (decoded here from the bits) times the scale, in f32
        codes = np.arange(256, dtype=np.uint8)
        e, m = (codes >> 3) & 15, (codes & 7).astype(np.float64)
        mag = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e.astype(np.float64) - 7))
        table = np.where(codes >> 7, -mag, mag).astype(np.float32)
        valid = np.array([c & 0x7F != 0x7F for c in range(256)])
        pos = np.flatnonzero(valid & (codes < 128))                 # 0 .. 448, increasing
        for form, sfx in (("comfyui", "scale_weight"), ("diffusers", "weight_scale")):
            q8, want = {}, {}
            for k, v in w0.items():
                pk = ("model.diffusion_model." + k) if form == "comfyui" else k
                if v.ndim < 2 or not v.any() or not k.endswith(".weight"):  # linear and conv weights
                    q8[pk] = ("F32", v.shape, v.astype("<f4").tobytes())
                    want[k] = v
                    continue
                sc = np.float32(np.abs(v).max() / 448.0)
                x = np.abs(v / sc).ravel()
                i = np.clip(np.searchsorted(table[pos], x), 1, len(pos) - 1)
                lo, hi = pos[i - 1], pos[i]
                c = np.where(x - table[lo] <= table[hi] - x, lo, hi).astype(np.uint8)
                c = np.where(v.ravel() < 0, c | 0x80, c).astype(np.uint8)
                q8[pk] = ("F8_E4M3", v.shape, c.tobytes())
                q8[pk[:-len(".weight")] + "." + sfx] = ("F32", (), sc.tobytes())
                if form == "comfyui":
                    q8[pk[:-len(".weight")] + ".scale_input"] = ("F32", (), np.float32(1).tobytes())
                want[k] = (table[c] * sc).reshape(v.shape)
            if form == "comfyui":
                q8["scaled_fp8"] = ("F8_E4M3", (0,), b"")
            write_st(p("fp8_%s.safetensors" % form), q8)
            r = subprocess.run([DIT_TOOL, "weights", "weights=" + p("fp8_%s.safetensors" % form),
                                "out=" + p("fp8.bin")], capture_output=True, text=True)
            got = np.fromfile(p("fp8.bin"), dtype=np.float32) if r.returncode == 0 else np.zeros(0)
            lay = [ln.split() for ln in subprocess.run([DIT_TOOL, "layout"], capture_output=True,
                                                        text=True).stdout.splitlines()]
            ok = r.returncode == 0 and all(
                np.array_equal(got[int(o):int(o) + int(n)].view(np.uint32), want[nm].ravel().view(np.uint32))
                for nm, o, n, _ in lay)
            if r.returncode == 0 and not ok:
                for nm, o, n, _ in lay:
                    g = got[int(o):int(o) + int(n)]
                    if not np.array_equal(g.view(np.uint32), want[nm].ravel().view(np.uint32)):
                        print(nm, g[:4], want[nm].ravel()[:4], np.abs(g - want[nm].ravel()).max())
                        break
            check(ok, "FP8 (%s) dequantised bit for bit: exit %d %s" % (form, r.returncode, r.stderr[-300:]))
        r, _, l8 = vflow("run", tmp, "fp8_run", "weights=" + p("fp8_comfyui.safetensors"))
        check(r.returncode == 0 and len(l8) == 3, "training from the FP8 file: exit %d %s" % (r.returncode, r.stderr[-300:]))

        # bad input at check time
        def bad(tag, path, *words, sets=()):
            r, _, _ = vflow("check", tmp, tag, "weights=" + path, *sets)
            out = (r.stdout + r.stderr).strip()
            ok = check(r.returncode == 2 and all(w in out for w in words),
                       "%s: want exit 2 naming %s, got %d: %s" % (tag, words, r.returncode, out[-400:]))
            if ok:
                print("%-14s exit 2: %s" % (tag, out.splitlines()[-1][-160:]))

        vae = {"encoder.conv1.weight": np.ones((8, 3, 3, 3, 3), np.float32), "conv1.weight": np.ones((8, 8, 1, 1, 1), np.float32)}
        write_st(p("vae.safetensors"), f32(vae))
        bad("vae", p("vae.safetensors"), "vae.safetensors", "encoder.conv1.weight", "VAE")
        i2v = dict(w0, **{"img_emb.proj.0.weight": np.ones(4, np.float32)})
        write_st(p("i2v.safetensors"), f32(i2v))
        bad("i2v", p("i2v.safetensors"), "i2v.safetensors", "img_emb.proj.0.weight", "I2V")
        miss = {k: v for k, v in w0.items() if k != "blocks.1.ffn.0.bias"}
        write_st(p("missing.safetensors"), f32(miss))
        bad("missing", p("missing.safetensors"), "missing.safetensors", "blocks.1.ffn.0.bias", "missing", "[256]")
        write_st(p("extra.safetensors"), f32(dict(w0, **{"blocks.9.extra.weight": np.ones(3, np.float32)})))
        bad("extra", p("extra.safetensors"), "extra.safetensors", "blocks.9.extra.weight")
        # a text-to-video checkpoint for an image-to-video model (4 noisy + 4 mask + 4 first-frame
        # channels) on a cache of image-to-video entries
        subprocess.run([os.path.join(BUILD, "tools", "cache_tool"), "write", p("i2v.lmdb"), "0", "16", "--shape",
                        "4,1,8,8", "--y"], check=True, capture_output=True)
        bad("t2v-for-i2v", p("w0.safetensors"), "w0.safetensors", "patch_embedding.weight", "[64, 4, 1, 2, 2]",
            "[64, 12, 1, 2, 2]", "text-to-video", sets=("in_dim=12", "cache=" + p("i2v.lmdb")))
        shp = dict(w0, **{"head.head.bias": np.ones(8, np.float32)})
        write_st(p("shape.safetensors"), f32(shp))
        bad("shape", p("shape.safetensors"), "shape.safetensors", "head.head.bias", "[8]", "[16]")
        fnuz = f32(w0)
        fnuz["blocks.0.ffn.0.weight"] = ("F8_E4M3FNUZ", w0["blocks.0.ffn.0.weight"].shape,
                                         bytes(w0["blocks.0.ffn.0.weight"].size))
        write_st(p("fnuz.safetensors"), fnuz)
        bad("fp8-fnuz", p("fnuz.safetensors"), "fnuz.safetensors", "blocks.0.ffn.0.weight", "F8_E4M3FNUZ")
        trunc = os.path.join(p("sharded"), "model-00002-of-00002.safetensors")
        data = open(trunc, "rb").read()
        os.makedirs(p("trunc"))
        for fn in os.listdir(p("sharded")):
            blob = open(os.path.join(p("sharded"), fn), "rb").read()
            open(os.path.join(p("trunc"), fn), "wb").write(blob[:-100] if fn == os.path.basename(trunc) else blob)
        bad("truncated", os.path.join(p("trunc"), "model.safetensors.index.json"), "model-00002-of-00002.safetensors")
        os.makedirs(p("gone"))
        for fn in os.listdir(p("sharded")):
            if fn != "model-00001-of-00002.safetensors":
                open(os.path.join(p("gone"), fn), "wb").write(open(os.path.join(p("sharded"), fn), "rb").read())
        bad("index-missing", os.path.join(p("gone"), "model.safetensors.index.json"), "model-00001-of-00002.safetensors",
            "missing", "model.diffusion_model.")
        write_st(p("huge.safetensors"), f32({"patch_embedding.weight": np.ones(4, np.float32)}), header_len=200 << 20)
        bad("header-limit", p("huge.safetensors"), "huge.safetensors", "header length", "limit")
        check(len(data) > 100, "shard size")

        # a model directory as Wan-AI publish it (WanModel config.json + original names): its
        # config must describe the model, heads included (the shapes cannot tell 4x16 from 8x8)
        cfg = {"_class_name": "WanModel", "dim": 64, "eps": 1e-06, "ffn_dim": 256, "freq_dim": 64, "in_dim": 4,
               "model_type": "t2v", "num_heads": 4, "num_layers": 4, "out_dim": 4, "text_len": 32}
        for tag, over, words in (("dir-ok", {}, None), ("dir-heads", {"num_heads": 8}, ("num_heads 8", "heads 4")),
                                 ("dir-i2v", {"model_type": "i2v"}, ("i2v", "I2V"))):
            dd = p(tag)
            os.makedirs(dd)
            with open(os.path.join(dd, "config.json"), "w") as f:
                json.dump(dict(cfg, **over), f)
            os.link(p("w0.safetensors"), os.path.join(dd, "diffusion_pytorch_model.safetensors"))
            if words is None:
                r, _, _ = vflow("check", tmp, tag, "weights=" + dd)
                check(r.returncode == 0, "WanModel directory: exit %d %s" % (r.returncode, r.stderr[-300:]))
            else:
                bad(tag, dd, "config.json", *words)

        # NaN: found when the shard reads its slice; the run stops before any step
        nan = dict(w0)
        v = nan["blocks.2.cross_attn.v.weight"].copy()
        v[3, 5] = np.nan
        nan["blocks.2.cross_attn.v.weight"] = v
        write_st(p("nan.safetensors"), f32(nan))
        r, _, ln = vflow("run", tmp, "nan", "weights=" + p("nan.safetensors"))
        out = r.stdout + r.stderr
        check(r.returncode == 2 and "nan.safetensors" in out and "blocks.2.cross_attn.v.weight" in out
              and "NaN" in out and not ln, "NaN: exit %d, %d steps: %s" % (r.returncode, len(ln), out[-500:]))
        # an image-to-video model on a cache of text-to-video data: refused before any step
        r, _, ln = vflow("run", tmp, "i2v-data", "in_dim=8")
        out = r.stdout + r.stderr
        check(r.returncode == 2 and "conditioning kind is text" in out and "needs concat" in out and not ln,
              "I2V model on T2V data: exit %d, %d steps: %s" % (r.returncode, len(ln), out[-500:]))
    print("PASS" if not failed else "FAIL (%d)" % len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
