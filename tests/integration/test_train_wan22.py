#!/usr/bin/python3
# test_train_wan22.py — the two experts of a Wan 2.2 A14B source (models/dit_experts.h) and
# pipelines/finetune_wan22.lua, on the tiny preset through the real binaries:
#  - each layout holds the high-noise expert (the tiny init of seed 0) and the low-noise
#    one (seed 7): Wan-AI's (high_noise_model/ + low_noise_model/, WanModel config.json,
#    original names; the low one as a sharded index in BF16), a diffusers pipeline
#    directory (transformer/ + transformer_2/, diffusers names), two ComfyUI single files;
#    `dit_tool weights expert=...` reads each expert bit for bit as written here (BF16
#    rounded here), never the other one; so does a two-expert checkpoint step
#    (high_noise_model/ with a sharded index, low_noise_model/ a trained model.safetensors);
#  - `vflow check pipelines/finetune_wan22.lua` takes each layout and each expert, and
#    refuses with exit 2 and one line: a mis-shaped tensor in one expert (the file, the
#    tensor, both shapes), a directory without the expert named (what it looked for), a
#    two-expert directory given where one model is expected (train_dit.lua), a timestep
#    range crossing the boundary, a range given to experts=both, devices_high / devices_low
#    given to a one-expert run, experts=both without one expert's weights, a routing other
#    than t or each, routing given to a one-expert run;
#  - a run of one expert from the two-expert directory ends bitwise where the run from
#    that expert's own file ends (full fine-tune and LoRA), and not where a run of the other
#    expert's weights on the same timesteps ends; a resume as the other expert is refused
#    naming train.expert;
#  - experts=both routing=each: each expert's model ends bitwise where the run of that
#    expert alone ends (full fine-tune and LoRA), each in its checkpoint dir (ckpt/high, ckpt/low) and in the
#    two-expert step the run joins them into (ckpt/step-N: high_noise_model/ +
#    low_noise_model/, or lora_high_noise / lora_low_noise; state.json's experts and
#    boundary; verified against its manifest); each
#    expert's micro-batches drew their t on its side of the boundary, 3 steps x 2 each,
#    mapped from the draws of an unrestricted run of finetune_wan.lua on the same seed;
#    TensorBoard has train/<expert>/loss, lr and grad_norm for each; `vflow sample` of the
#    run's checkpoint dir equals sampling the high expert's dir with --low the low one's
#    and --boundary, and differs from the high one alone;
#  - sampling the LoRA run's joined step (lora_high_noise / lora_low_noise) merges each
#    adapter into the base its expert trained on (the high one's recorded base, the low
#    one's recorded in the joined state.json): its latent is bitwise the one of the high
#    expert's one-expert LoRA checkpoint with --low a file holding the low base with the low
#    adapter merged here, and of a model whose two experts are both merged here
#    (W + alpha/rank·B·A, in models/dit_lora_io.c's order of sums); it differs with either
#    adapter dropped; --low naming the recorded low base changes nothing; with the low base
#    moved away sampling is refused with exit 2 and one line naming it;
#  - lora_init_high / lora_init_low: each expert of a both-experts LoRA run continues from
#    its own file (the pair trained above, crossed) and ends bitwise where that expert alone
#    with lora_init that file ends; given to a one-expert run, exit 2 naming them;
#  - `vflow plan` with devices_high / devices_low puts each expert on its own GPUs.
# vflow-test: timeout=600
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_harness import FAILS, check  # noqa: E402
from st_lib import bf16, f32, read_st, write_st  # noqa: E402

# formats/ckpt.h: the subdirs of a two-expert checkpoint step
VF_EXPERT = {"high": "high_noise_model", "low": "low_noise_model"}
BUILD = os.environ.get("VFLOW_BUILD", "build")
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
TRAIN_TOOL = os.path.join(BUILD, "tools", "train_tool")
DIT_TOOL = os.path.join(BUILD, "tools", "dit_tool")
PIPE = os.path.join(SRC, "pipelines", "finetune_wan22.lua")
ENV = dict(os.environ, OMP_NUM_THREADS="1")

# diffusers' TRANSFORMER_KEYS_RENAME_DICT (convert_wan_transformer_to_diffusers), in its order
TO_DIFFUSERS = [
    ("time_embedding.0", "condition_embedder.time_embedder.linear_1"),
    ("time_embedding.2", "condition_embedder.time_embedder.linear_2"),
    ("text_embedding.0", "condition_embedder.text_embedder.linear_1"),
    ("text_embedding.2", "condition_embedder.text_embedder.linear_2"),
    ("time_projection.1", "condition_embedder.time_proj"),
    ("cross_attn", "attn2"), ("self_attn", "attn1"), (".o.", ".to_out.0."), (".q.", ".to_q."),
    (".k.", ".to_k."), (".v.", ".to_v."), ("head.modulation", "scale_shift_table"), ("head.head", "proj_out"),
    ("modulation", "scale_shift_table"), ("ffn.0", "ffn.net.0.proj"), ("ffn.2", "ffn.net.2"),
    ("norm2", "norm__placeholder"), ("norm3", "norm2"), ("norm__placeholder", "norm3"),
]
WANMODEL = {"_class_name": "WanModel", "dim": 64, "eps": 1e-06, "ffn_dim": 256, "freq_dim": 64, "in_dim": 4,
            "model_type": "t2v", "num_heads": 4, "num_layers": 4, "out_dim": 4, "text_len": 32}



def f32_named(tensors, rename=lambda k: k):
    return {rename(k): v for k, v in f32(tensors).items()}


def bf16_named(tensors, rename=lambda k: k):
    """BF16 tensors under rename(name), and the f32 values they stand for."""
    out, vals = {}, {}
    for k, v in tensors.items():
        raw, vals[k] = bf16(v)
        out[rename(k)] = ("BF16", v.shape, raw)
        vals[k] = vals[k].reshape(v.shape)
    return out, vals


def diffusers_name(k):
    for a, b in TO_DIFFUSERS:
        k = k.replace(a, b)
    return k


def model_dir(d, cls_config, tensors, shards=1):
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cls_config, f)
    if shards == 1:
        write_st(os.path.join(d, "diffusion_pytorch_model.safetensors"), tensors)
        return
    names, wmap = sorted(tensors), {}
    for i in range(shards):
        fn = "diffusion_pytorch_model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = names[i * len(names) // shards:(i + 1) * len(names) // shards]
        write_st(os.path.join(d, fn), {k: tensors[k] for k in part})
        wmap.update({k: fn for k in part})
    with open(os.path.join(d, "diffusion_pytorch_model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f)


def layout_order():
    rows = [ln.split() for ln in subprocess.run([DIT_TOOL, "layout"], capture_output=True, text=True,
                                                check=True).stdout.splitlines()]
    return [(nm, int(o), int(n)) for nm, o, n, _ in rows]


def vflow(cmd, tmp, name, *sets, pipe=PIPE, resume=False):
    run = os.path.join(tmp, name)
    args = [VFLOW, cmd, pipe] + (["--run-dir", run] if cmd == "run" else []) + (["--resume"] if resume else [])
    base = ("cache=" + os.path.join(tmp, "cache.lmdb"), "batch=2", "every=0")
    if pipe == PIPE:
        base += ("preset=tiny", "device=cpu", "frames=1", "size=64", "t_sampling=uniform")
    for s in base + sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=180)
    return r, run


def merged(base, lora_path):
    """base (name -> f32) with the ComfyUI-keyed adapters of lora_path merged, W +=
    alpha/rank·B·A, in models/dit_lora_io.c's arithmetic: B rescaled to the file's first
    alpha, the rank's products summed in f64 in order, the sum added in f64, rounded once."""
    t = read_st(lora_path)
    out = {k: v.copy() for k, v in base.items()}
    pre, suf = "diffusion_model.", ".lora_A.weight"
    first = next((float(v.ravel()[0]) for k, v in t.items() if k.endswith(".alpha") and v.ravel()[0] > 0), None)
    for ka in (k for k in t if k.endswith(suf)):
        m = ka[len(pre):-len(suf)]
        a, b = t[ka].astype(np.float64), t[pre + m + ".lora_B.weight"]
        rank = a.shape[0]
        scale = np.float32((first if first is not None else 0.0) / rank)
        al = t.get(pre + m + ".alpha")
        k = (float(al.ravel()[0]) / rank if al is not None else 1.0) / float(scale)
        if k != 1.0:
            b = (b.astype(np.float64) * k).astype(np.float32)
        b = b.astype(np.float64)
        d = np.zeros((b.shape[0], a.shape[1]), np.float64)
        for r in range(rank):
            d += b[:, r, None] * a[None, r, :]
        out[m + ".weight"] = (out[m + ".weight"].astype(np.float64) + float(scale) * d).astype(np.float32)
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda n: os.path.join(tmp, n)  # noqa: E731
        subprocess.run([TRAIN_TOOL, "mkcache", p("cache.lmdb"), "16", "4", "1", "8", "8", "7"], check=True,
                       capture_output=True)
        w = {}
        for tag, seed in (("high", 0), ("low", 7)):
            subprocess.run([DIT_TOOL, "init", "seed=%d" % seed, "out=" + p("init%d.bin" % seed)], check=True)
            subprocess.run([DIT_TOOL, "save", "params=" + p("init%d.bin" % seed), "out=" + p("%s.safetensors" % tag)],
                           check=True)
            w[tag] = read_st(p("%s.safetensors" % tag))
            # the init's head is zero, which would leave a frozen base's adapters without
            # gradients: a head of its own per expert makes the LoRA runs depend on the base
            head = w[tag]["head.head.weight"]
            w[tag]["head.head.weight"] = (np.random.default_rng(seed).standard_normal(head.shape) * 0.05).astype("<f4")
            write_st(p("%s.safetensors" % tag), f32(w[tag]))
        # the tiny inits differ in every weight matrix (zero-initialised ones aside)
        check(any(not np.array_equal(w["high"][k], w["low"][k]) for k in w["high"]), "two distinct experts")

        # Wan-AI's layout: high F32 in one file, low BF16 as an index of 3 shards
        low_bf16, low_vals = bf16_named(w["low"])
        model_dir(p("wanai/high_noise_model"), WANMODEL, f32(w["high"]))
        model_dir(p("wanai/low_noise_model"), WANMODEL, low_bf16, shards=3)
        # a diffusers pipeline: transformer = high, transformer_2 = low, diffusers names
        dcfg = {"_class_name": "WanTransformer3DModel", "num_attention_heads": 4, "attention_head_dim": 16,
                "num_layers": 4, "ffn_dim": 256, "in_channels": 4, "out_channels": 4, "text_dim": 64,
                "freq_dim": 64, "patch_size": [1, 2, 2], "eps": 1e-06}
        model_dir(p("pipe/transformer"), dcfg, f32_named(w["high"], diffusers_name))
        model_dir(p("pipe/transformer_2"), dcfg, f32_named(w["low"], diffusers_name))
        with open(p("pipe/model_index.json"), "w") as f:
            json.dump({"_class_name": "WanPipeline", "boundary_ratio": 0.875}, f)
        # two ComfyUI single files, BF16
        comfy = lambda k: "model.diffusion_model." + k  # noqa: E731
        high_c, high_cvals = bf16_named(w["high"], comfy)
        low_c, _ = bf16_named(w["low"], comfy)
        write_st(p("comfy_high.safetensors"), high_c)
        write_st(p("comfy_low.safetensors"), low_c)

        lay = layout_order()

        def read_expert(src, expert):
            r = subprocess.run([DIT_TOOL, "weights", "weights=" + src, "expert=" + expert, "out=" + p("got.bin")],
                               capture_output=True, text=True)
            return r, (np.fromfile(p("got.bin"), dtype="<f4") if r.returncode == 0 else None)

        def same(got, want):
            return got is not None and all(np.array_equal(got[o:o + n].view("<u4"), want[nm].ravel().view("<u4"))
                                           for nm, o, n in lay)

        for src, expert, want, tag in ((p("wanai"), "high", w["high"], "Wan-AI high"),
                                       (p("wanai"), "low", low_vals, "Wan-AI low (BF16 shards)"),
                                       (p("pipe"), "high", w["high"], "diffusers transformer"),
                                       (p("pipe"), "low", w["low"], "diffusers transformer_2"),
                                       (p("comfy_high.safetensors"), "high", high_cvals, "ComfyUI file")):
            r, got = read_expert(src, expert)
            other = w["low"] if expert == "high" else w["high"]
            check(r.returncode == 0 and same(got, want) and not same(got, other),
                  "%s: read bit for bit: exit %d %s" % (tag, r.returncode, r.stderr[-300:]))

        # vflow check: every layout and expert
        for tag, sets in (("wanai-high", ("weights=" + p("wanai"), "experts=high")),
                          ("wanai-low", ("weights=" + p("wanai"), "experts=low")),
                          ("pipe-low", ("weights=" + p("pipe"), "experts=low")),
                          ("comfy-low", ("weights_low=" + p("comfy_low.safetensors"), "experts=low"))):
            r, _ = vflow("check", tmp, tag, *sets)
            check(r.returncode == 0, "check %s: exit %d %s" % (tag, r.returncode, (r.stdout + r.stderr)[-400:]))

        def bad(tag, words, *sets, pipe=PIPE):
            r, _ = vflow("check", tmp, tag, *sets, pipe=pipe)
            out = (r.stdout + r.stderr).strip()
            ok = check(r.returncode == 2 and all(x in out for x in words),
                       "%s: want exit 2 naming %s, got %d: %s" % (tag, words, r.returncode, out[-400:]))
            if ok:
                print("%-14s exit 2: %s" % (tag, out.splitlines()[-1][-170:]))

        # one expert with a mis-shaped tensor: the other still loads, this one is refused
        shp = dict(w["low"], **{"head.head.bias": np.ones(8, np.float32)})
        model_dir(p("badlow/low_noise_model"), WANMODEL, f32(shp))
        model_dir(p("badlow/high_noise_model"), WANMODEL, f32(w["high"]))
        r, _ = vflow("check", tmp, "badlow-high", "weights=" + p("badlow"), "experts=high")
        check(r.returncode == 0, "the sound expert of a pair with one bad: exit %d %s" % (r.returncode, r.stderr[-300:]))
        bad("badlow-low", ("low_noise_model/diffusion_pytorch_model.safetensors", "head.head.bias", "[8]", "[16]"),
            "weights=" + p("badlow"), "experts=low")
        os.makedirs(p("onlyhigh"))
        os.symlink(p("wanai/high_noise_model"), p("onlyhigh/high_noise_model"))
        bad("no-low", ("onlyhigh", "low_noise_model/", "transformer_2/"), "weights=" + p("onlyhigh"), "experts=low")
        bad("two-as-one", ("wanai", "two experts", "high_noise_model/"), "weights=" + p("wanai"),
            pipe=os.path.join(SRC, "pipelines", "train_dit.lua"))
        bad("t-range", ("t_min 0.5", "boundary 0.875"), "weights=" + p("wanai"), "experts=high", "t_min=0.5")
        bad("both-t-range", ("t_min", "experts=both", "boundary 0.875"), "weights=" + p("wanai"), "experts=both",
            "t_min=0.5")
        bad("one-devices", ("devices_high", "experts=both"), "weights=" + p("wanai"), "experts=high",
            "devices_high=cpu")
        bad("both-no-low", ("weights_low",), "weights_high=" + p("comfy_high.safetensors"), "experts=both")
        bad("routing", ("routing=x", "t", "each"), "weights=" + p("wanai"), "experts=both", "routing=x")
        bad("one-routing", ("routing=each", "experts=both"), "weights=" + p("wanai"), "experts=high", "routing=each")
        for tag, sets in (("both-wanai", ("weights=" + p("wanai"), "experts=both")),
                          ("both-files", ("weights_high=" + p("comfy_high.safetensors"),
                                          "weights_low=" + p("comfy_low.safetensors"), "experts=both",
                                          "devices_high=cpu", "devices_low=cpu"))):
            r, _ = vflow("check", tmp, tag, *sets)
            check(r.returncode == 0, "check %s: exit %d %s" % (tag, r.returncode, (r.stdout + r.stderr)[-400:]))

        # a run of one expert from the pair = the run from that expert's own file, bitwise
        def model_of(run, name="model.safetensors", sub=""):
            path = os.path.join(run, "ckpt", sub, "step-3", name)
            return open(path, "rb").read() if os.path.exists(path) else None

        for tag, extra, fname in (("full", (), "model.safetensors"),
                                  ("lora", ("lora_rank=4",), "lora.safetensors")):
            runs = {}
            for src_tag, sets in (("pair-low", ("weights=" + p("wanai"), "experts=low")),
                                  ("file-low", ("weights_low=" + p("wanai/low_noise_model/"
                                                                   "diffusion_pytorch_model.safetensors.index.json"),
                                                "experts=low")),
                                  ("high-file-as-low", ("weights_low=" + p("high.safetensors"), "experts=low"))):
                r, run = vflow("run", tmp, tag + "-" + src_tag, "steps=3", "every=3", *(sets + extra))
                check(r.returncode == 0, "%s %s run: exit %d %s" % (tag, src_tag, r.returncode, r.stderr[-400:]))
                runs[src_tag] = model_of(run, fname)
            check(runs["pair-low"] is not None and runs["pair-low"] == runs["file-low"],
                  "%s: the low expert from the pair ends where the run from its file ends" % tag)
            check(runs["pair-low"] != runs["high-file-as-low"],
                  "%s: the high expert's weights (same timesteps) end elsewhere" % tag)
            # both experts in one run: each ends bitwise where the run of that expert alone
            # ends (it trains on its own micro-batches only), and each moved from its start
            r, run = vflow("run", tmp, tag + "-pair-high", "steps=3", "every=3", "weights=" + p("wanai"),
                           "experts=high", *extra)
            check(r.returncode == 0, "%s pair-high run: exit %d %s" % (tag, r.returncode, r.stderr[-400:]))
            runs["pair-high"] = model_of(run, fname)
            r, run = vflow("run", tmp, tag + "-both", "steps=3", "every=3", "weights=" + p("wanai"), "experts=both",
                           "routing=each", *extra)
            check(r.returncode == 0, "%s both run: exit %d %s" % (tag, r.returncode, r.stderr[-400:]))
            # ... in its own checkpoint dir and in the two-expert step the run joins them into
            for e in ("high", "low"):
                joined = VF_EXPERT[e] + "/" + fname if tag == "full" else "lora_%s_noise.safetensors" % e
                got, two = model_of(run, fname, e), model_of(run, joined)
                check(got is not None and got == runs["pair-" + e] and two == got,
                      "%s: experts=both's %s expert (ckpt/%s and the joined step) ends where experts=%s alone ends"
                      % (tag, e, e, e))
            check(model_of(run, fname, "high") != model_of(run, fname, "low"), "%s: the two experts differ" % tag)
            r = subprocess.run([TRAIN_TOOL, "ckpt-find", os.path.join(run, "ckpt")], capture_output=True, text=True)
            check(r.returncode == 0 and r.stdout.split()[:1] == ["3"],
                  "%s: the joined step verifies against its manifest: %s %s" % (tag, r.stdout, r.stderr[-300:]))
            sp = os.path.join(run, "ckpt", "step-3", "state.json")
            state = json.load(open(sp)) if os.path.exists(sp) else {}
            check(state.get("experts") == ["high", "low"] and state.get("boundary") == 0.875,
                  "%s: state.json records the experts and the boundary: %s" % (tag, state))
            if tag == "full":
                both_run = run
            else:
                lora_run = run
                # each expert continues from its own adapter file (the pair just trained,
                # crossed: high from the low one's, low from the high one's) and ends where
                # that expert alone, from that file, ends
                step = os.path.join(run, "ckpt", "step-3")
                init = {e: os.path.join(step, "lora_%s_noise.safetensors" % e) for e in ("high", "low")}
                r, cont = vflow("run", tmp, "lora-init-both", "steps=2", "every=2", "weights=" + p("wanai"),
                                "experts=both", "routing=each", "lora_init_high=" + init["low"],
                                "lora_init_low=" + init["high"], *extra)
                check(r.returncode == 0, "lora_init_high/low run: exit %d %s" % (r.returncode, r.stderr[-400:]))
                for e, other in (("high", "low"), ("low", "high")):
                    r, alone = vflow("run", tmp, "lora-init-" + e, "steps=2", "every=2", "weights=" + p("wanai"),
                                     "experts=" + e, "lora_init=" + init[other], *extra)
                    got = os.path.join(cont, "ckpt", e, "step-2", fname)
                    want = os.path.join(alone, "ckpt", "step-2", fname)
                    check(r.returncode == 0 and os.path.exists(got) and os.path.exists(want) and
                          open(got, "rb").read() == open(want, "rb").read(),
                          "lora_init_%s: the %s expert ends where experts=%s from that file ends" % (e, e, e))
                bad("lora-init-one", ("lora_init_high", "experts=both"), "weights=" + p("wanai"), "experts=high",
                    "lora_rank=4", "lora_init_high=" + init["high"])
        # loss, lr and gradient norm per expert: TensorBoard tags with the expert's name
        tb = os.path.join(both_run, "tb")
        events = b"".join(open(os.path.join(tb, f), "rb").read() for f in os.listdir(tb)) if os.path.isdir(tb) else b""
        for e in ("high", "low"):
            for k in ("loss", "lr", "grad_norm"):
                check(("train/%s/%s" % (e, k)).encode() in events, "TensorBoard tag train/%s/%s" % (e, k))
        # and as TensorBoard's own reader sees them (the reference venv scripts/setup.sh makes)
        ref = os.environ.get("VFLOW_REF_PY", "/opt/vflow-ref/bin/python")
        if os.path.exists(ref) and os.path.isdir(tb):
            code = ("import sys\nfrom tensorboard.backend.event_processing.event_accumulator import "
                    "EventAccumulator\na = EventAccumulator(sys.argv[1]); a.Reload()\n"
                    "print(' '.join(sorted(a.Tags()['scalars'])))")
            r = subprocess.run([ref, "-c", code, tb], capture_output=True, text=True, timeout=120)
            tags = set(r.stdout.split())
            for e in ("high", "low"):
                for k in ("loss", "lr", "grad_norm"):
                    check("train/%s/%s" % (e, k) in tags, "EventAccumulator: scalar train/%s/%s in %s (%s)"
                          % (e, k, sorted(tags)[:8], r.stderr.strip()[-200:]))
        # the agreed two-expert checkpoint step: each expert's dir holds a step's model files
        # (the index of shards for high, the low run's trained model.safetensors for low)
        trained = os.path.join(tmp, "full-pair-low", "ckpt", "step-3", "model.safetensors")
        os.makedirs(p("step/high_noise_model"))
        os.makedirs(p("step/low_noise_model"))
        with open(p("step/state.json"), "w") as f:
            json.dump({"experts": ["high", "low"], "boundary": 0.875}, f)
        names, wmap = sorted(w["high"]), {}
        for i in range(2):
            fn = "model-%05d-of-00002.safetensors" % (i + 1)
            part = names[i * len(names) // 2:(i + 1) * len(names) // 2]
            write_st(p("step/high_noise_model/" + fn), f32({k: w["high"][k] for k in part}))
            wmap.update({k: fn for k in part})
        with open(p("step/high_noise_model/model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wmap}, f)
        if os.path.exists(trained):
            os.link(trained, p("step/low_noise_model/model.safetensors"))
        for expert, want in (("high", w["high"]), ("low", read_st(trained) if os.path.exists(trained) else None)):
            r, got = read_expert(p("step"), expert)
            check(want is not None and r.returncode == 0 and same(got, want),
                  "two-expert checkpoint step, %s: read bit for bit: exit %d %s" % (expert, r.returncode,
                                                                                  r.stderr[-300:]))
        # the routing: each expert's micro-batches drew their t on its side of the boundary,
        # batch x steps of them each, as t = boundary + (1 - boundary)·s (high) and
        # boundary·s (low) of the draws s of an unrestricted run (finetune_wan.lua, same seed)
        def timesteps(run):
            out = {}
            if not os.path.exists(os.path.join(run, "metrics.jsonl")):
                return out
            with open(os.path.join(run, "metrics.jsonl")) as f:
                for ln in f:
                    row = json.loads(ln)
                    if row.get("event") == "timesteps":
                        out.setdefault(row.get("stage"), []).extend(row["timesteps"])
            return out

        r, free = vflow("run", tmp, "free", "steps=3", "every=3", "weights=" + p("high.safetensors"),
                        "preset=tiny", "device=cpu", "frames=1", "size=64", "t_sampling=uniform",
                        pipe=os.path.join(SRC, "pipelines", "finetune_wan.lua"))
        check(r.returncode == 0, "unrestricted run: exit %d %s" % (r.returncode, r.stderr[-400:]))
        s0 = np.array(timesteps(free).get("dit_0", []), np.float64)
        ts = timesteps(both_run)
        hi, lo = np.array(ts.get("dit_high_0", [])), np.array(ts.get("dit_low_0", []))
        check(len(s0) == 6 and len(hi) == 6 and len(lo) == 6,
              "timesteps drawn: %d unrestricted, %d high, %d low; want 3 steps x 2 each" % (len(s0), len(hi), len(lo)))
        if len(s0) == len(hi) == len(lo) == 6:
            check(hi.min() >= 0.875 and lo.max() < 0.875, "each expert on its side: high %s, low %s" % (hi, lo))
            check(np.allclose(hi, 0.875 + 0.125 * s0, rtol=0, atol=1e-6) and np.allclose(lo, 0.875 * s0, rtol=0,
                                                                                          atol=1e-6),
                  "the experts' t are the draws mapped onto their sides: %s %s %s" % (s0, hi, lo))
        # `vflow sample` of the run's checkpoint dir (its newest two-expert step) switches
        # experts at the recorded boundary: the latent is the one of the high expert's dir
        # with --low the low one's and --boundary, and differs from the high expert's alone
        lat = {}
        hi_ck, lo_ck = (os.path.join(both_run, "ckpt", e, "step-3") for e in ("high", "low"))
        for tag, src, extra in (("joined", os.path.join(both_run, "ckpt"), []),
                                ("two", hi_ck, ["--low", lo_ck, "--boundary", "0.875"]), ("high", hi_ck, [])):
            r = subprocess.run([VFLOW, "sample", src, "--prompt", "a cat", "--frames", "1", "--size", "64x64", "--steps",
                                "4", "--out", p("s-%s.mp4" % tag), "--latent-out", p("l-%s.bin" % tag)] + extra,
                               capture_output=True, text=True, env=ENV)
            check(r.returncode == 0, "sample %s: exit %d %s" % (tag, r.returncode, r.stderr[-300:]))
            lat[tag] = open(p("l-%s.bin" % tag), "rb").read() if r.returncode == 0 else None
        check(lat["joined"] is not None and lat["joined"] == lat["two"] and lat["two"] != lat["high"],
              "sampling the joined step = the two expert dirs with --low and --boundary, not the high expert alone")
        # the LoRA run's joined step: each adapter on its expert's recorded base (wanai/'s
        # high_noise_model F32, low_noise_model the BF16 shards), against bases merged here
        lj = os.path.join(lora_run, "ckpt", "step-3")
        state = json.load(open(os.path.join(lj, "state.json"))) if os.path.exists(lj) else {}
        low_rec = state.get("low_noise", {}).get("lora_base", {}).get("path", "")
        check(low_rec == os.path.realpath(p("wanai/low_noise_model")) and
              state.get("lora_base", {}).get("path") == os.path.realpath(p("wanai/high_noise_model")),
              "the joined LoRA step records each expert's base: %s" % state)
        if os.path.exists(lj):
            write_st(p("low_merged.safetensors"), f32(merged(low_vals, os.path.join(lj, "lora_low_noise.safetensors"))))
            write_st(p("high_merged.safetensors"),
                     f32(merged(w["high"], os.path.join(lj, "lora_high_noise.safetensors"))))
            write_st(p("low_base.safetensors"), f32(low_vals))
        lhi = os.path.join(lora_run, "ckpt", "high", "step-3")
        two = ["--boundary", "0.875"]
        for tag, src, extra in (("lora-joined", os.path.join(lora_run, "ckpt"), []),
                                ("lora-joined-low", lj, ["--low", p("wanai/low_noise_model")]),
                                ("lora-two", lhi, ["--low", p("low_merged.safetensors")] + two),
                                ("lora-merged", hi_ck, ["--weights", p("high_merged.safetensors"),
                                                        "--low", p("low_merged.safetensors")] + two),
                                ("lora-no-low", lhi, ["--low", p("low_base.safetensors")] + two),
                                ("lora-no-high", hi_ck, ["--weights", p("wanai/high_noise_model"),
                                                         "--low", p("low_merged.safetensors")] + two)):
            r = subprocess.run([VFLOW, "sample", src, "--prompt", "a cat", "--frames", "1", "--size", "64x64", "--steps",
                                "4", "--out", p("s-%s.mp4" % tag), "--latent-out", p("l-%s.bin" % tag)] + extra,
                               capture_output=True, text=True, env=ENV)
            check(r.returncode == 0, "sample %s: exit %d %s" % (tag, r.returncode, r.stderr[-300:]))
            lat[tag] = open(p("l-%s.bin" % tag), "rb").read() if r.returncode == 0 else None
        check(lat["lora-joined"] is not None and lat["lora-joined"] == lat["lora-two"] == lat["lora-merged"],
              "sampling the joined LoRA step = the high expert's LoRA checkpoint with --low the low base + adapter "
              "merged = both experts merged independently")
        check(lat["lora-joined-low"] == lat["lora-joined"], "--low naming the recorded low base changes nothing")
        check(None not in (lat["lora-joined"], lat["lora-no-low"], lat["lora-no-high"]) and
              lat["lora-joined"] not in (lat["lora-no-low"], lat["lora-no-high"]),
              "sampling the joined LoRA step differs with either adapter dropped")
        # the low expert's base gone: one line naming it, exit 2
        os.rename(p("wanai/low_noise_model"), p("wanai-low-moved"))
        try:
            r = subprocess.run([VFLOW, "sample", lj, "--prompt", "a cat", "--frames", "1", "--size", "64x64",
                                "--steps", "4", "--out", p("s-gone.mp4")], capture_output=True, text=True, env=ENV)
        finally:
            os.rename(p("wanai-low-moved"), p("wanai/low_noise_model"))
        err = r.stderr.strip()
        ok = check(r.returncode == 2 and len(err.splitlines()) == 1 and "low_noise_model" in err and "--low" in err,
                   "a joined LoRA step whose low base is gone: want exit 2 and one line, got %d: %s"
                   % (r.returncode, err[-400:]))
        if ok:
            print("low base gone   exit 2: %s" % err[-200:])
        # devices_high / devices_low: disjoint device groups, each expert's stages on its own
        r, _ = vflow("plan", tmp, "plan-both", "weights=" + p("wanai"), "experts=both", "stages=2",
                     "devices_high=cuda:0,cuda:1", "devices_low=cuda:2,cuda:3")
        where, dev = {}, None
        for ln in r.stdout.splitlines():
            f = ln.split()
            if len(f) > 1 and f[0].startswith("cuda:") and "of state:" in ln:
                dev = f[0]
            elif dev and f and f[0].startswith(("dit_", "adamw_")):
                where.setdefault(f[0], set()).add(dev)
        want = {"dit_high_0": {"cuda:0"}, "dit_high_1": {"cuda:1"}, "adamw_high_0": {"cuda:0"},
                "dit_low_0": {"cuda:2"}, "dit_low_1": {"cuda:3"}, "adamw_low_0": {"cuda:2"}}
        check(r.returncode == 0 and where == want, "plan of disjoint groups: exit %d, %s %s" % (
            r.returncode, where, r.stderr[-300:]))
        # resuming the low expert's run as the high expert is refused
        r, _ = vflow("run", tmp, "full-pair-low", "steps=4", "every=3", "weights=" + p("wanai"), "experts=high",
                     resume=True)
        out = r.stdout + r.stderr
        check(r.returncode == 2 and "train.expert" in out, "resume as the other expert: exit %d %s" % (
            r.returncode, out[-400:]))
    print("PASS" if not FAILS else "FAIL (%d)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
