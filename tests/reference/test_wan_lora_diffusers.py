# test_wan_lora_diffusers.py — a LoRA trained by vflow, as users load it, against diffusers:
#  - the base: a tiny random WanTransformer3DModel (the tiny preset with text_dim 16, every
#    parameter perturbed) written by diffusers' save_pretrained;
#  - pipelines/train_dit.lua trains rank-4 adapters (alpha 8) on every linear of the blocks
#    for 5 steps from that directory (P = 2, S = 2) on a cache with text embeddings
#    (cache_tool write --text 16); the checkpoint holds lora.safetensors with exactly the
#    keys diffusion_model.<original name>.lora_A.weight (rank, in) / .lora_B.weight
#    (out, rank) / .alpha, and B has moved off zero;
#  - diffusers' own Wan converter (_convert_non_diffusers_wan_lora_to_diffusers, what
#    WanLoraLoaderMixin.lora_state_dict calls for diffusion_model.* keys) renames the file
#    to WanTransformer3DModel's modules; diffusers 0.33.1's converter takes no .alpha keys,
#    so the test reads each module's scale as loaders that read .alpha do: the module's
#    .alpha over its rank, the rows of its A, both from the file (not from this test's
#    constants), and vflow gets the same alpha and rank (lora_cfg) from the file too; the
#    adapters are applied to WanTransformer3DModel both merged into its weights (W +=
#    s·B·A, what load_lora_adapter + fuse_lora compute) and unfused, as forward hooks
#    adding s·B·(A·x) to each linear's output (what peft's LoraLayer computes; peft itself
#    does not run on this torch);
#  - on a held sample both forwards equal vflow's forward with the adapters running on
#    the frozen base (dit_tool grad lora=), relative error <= 1e-5, and differ
#    from the base model's (the adapters are not zero);
#  - the gradient of the mean squared error with respect to every A and B of the file,
#    by torch autograd through the unfused hooks, equals vflow's gradient of the adapter
#    vector (relative L2 <= 1e-4 per tensor): this is what training follows, and it sees a
#    wrong scale s even where vflow's loader rescales B by the same wrong constant (the
#    forward then still agrees);
#  - the same adapters as lora_down/lora_up keys and as kohya lora_unet_* keys (another
#    alpha, B rescaled to the same delta) read into the same adapter vector bit for bit;
#  - lora_init = the file with lr = 0 continues from exactly those adapters;
#  - bad files (a key of another model, wrong in dims, a rank mismatch between A and B):
#    exit 2, one line naming the file and the key, from dit_tool and from `vflow check`.
# vflow-test: labels=reference timeout=600
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wan_ref  # noqa: E402  (before diffusers: shims torch 1.13)

wan_ref.reexec_in_ref_venv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import WanTransformer3DModel  # noqa: E402
from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_wan_lora_to_diffusers  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
BUILD = os.environ.get("VFLOW_BUILD", os.path.join(SRC, "build"))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
DIT_TOOL = os.path.join(BUILD, "tools", "dit_tool")
CACHE_TOOL = os.path.join(BUILD, "tools", "cache_tool")
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4,
              text_dim=16, freq_dim=64, ffn_dim=256, num_layers=4, cross_attn_norm=True, eps=1e-6, rope_max_seq_len=64)
CFG = ["preset=tiny", "text_dim=16", "text_emb=1"]
RANK, ALPHA, STEPS, DEPTH, TL = 4, 8, 5, 4, 32
TARGETS = ["self_attn.*", "cross_attn.*", "ffn.*"]
LORA_CFG = json.dumps({"rank": RANK, "alpha": ALPHA, "targets": TARGETS})
MODS = ["self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "cross_attn.q", "cross_attn.k", "cross_attn.v",
        "cross_attn.o", "ffn.0", "ffn.2"]
TOL, GRAD_TOL = 1e-5, 1e-4
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)
    return cond


def sh(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def vflow(cmd, run_dir, sets):
    args = [VFLOW, cmd, os.path.join(SRC, "pipelines", "train_dit.lua")] + (["--run-dir", run_dir] if run_dir else [])
    for s in sets:
        args += ["--set", s]
    return sh(args, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=400)


def make_dit(d):
    torch.manual_seed(0)
    model = WanTransformer3DModel.from_config(CONFIG)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.05 * torch.randn(p.shape, generator=g))
    model.save_pretrained(d)
    return model.eval()


def fwd(model, xt, ts, emb):
    with torch.no_grad():
        return model(hidden_states=torch.from_numpy(xt), timestep=torch.from_numpy(ts) * 1000,
                     encoder_hidden_states=torch.from_numpy(emb), return_dict=False)[0].numpy()


def st_keys(path):
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(n))


def main():
    for p in (VFLOW, DIT_TOOL, CACHE_TOOL):
        if not os.path.exists(p):
            print("missing %s (build the tools first)" % p)
            return 1
    tmp = tempfile.mkdtemp(prefix="vf_wan_lora.")
    f = lambda n: os.path.join(tmp, n)  # noqa: E731

    base = make_dit(f("wan_dir"))
    r = sh([CACHE_TOOL, "write", f("cache.lmdb"), "0", "16", "--shape", "4,1,8,8", "--text", "16"])
    if not check(r.returncode == 0, "cache_tool write: " + r.stderr):
        return 1
    common = ["cache=" + f("cache.lmdb"), "text_dim=16", "weights=" + f("wan_dir"), "lora_rank=%d" % RANK,
              "lora_alpha=%d" % ALPHA, "lora_targets=" + ",".join(TARGETS), "batch=4", "stages=2", "shards=2",
              "micro_batches=2", "tensorboard=false"]
    r = vflow("run", f("run"), common + ["steps=%d" % STEPS, "every=%d" % STEPS, "lr=1e-2"])
    if not check(r.returncode == 0, "training: exit %d %s" % (r.returncode, r.stderr[-800:])):
        return 1
    path = f("run/ckpt/step-%d/lora.safetensors" % STEPS)
    if not check(os.path.exists(path), "no lora.safetensors at step %d" % STEPS):
        return 1
    check(not os.path.exists(f("run/ckpt/step-%d/model.safetensors" % STEPS)), "the base was saved again")
    sd = load_file(path)
    want = set()
    for b in range(DEPTH):
        for m in MODS:
            p = "diffusion_model.blocks.%d.%s" % (b, m)
            want |= {p + ".lora_A.weight", p + ".lora_B.weight", p + ".alpha"}
            check(sd[p + ".alpha"].shape == () and sd[p + ".alpha"] == ALPHA, p + ".alpha")
            a, bb = sd[p + ".lora_A.weight"], sd[p + ".lora_B.weight"]
            check(a.shape[0] == RANK and bb.shape[1] == RANK, "%s: A %r B %r" % (p, a.shape, bb.shape))
    check(set(sd) == want, "keys: %r" % sorted(set(sd) ^ want)[:6])
    bmax = max(float(np.abs(v).max()) for k, v in sd.items() if k.endswith("lora_B.weight"))
    check(bmax > 0, "B is still zero")

    # alpha and rank as a loader reads them from the file: each module's .alpha, the rows of its A
    def module(k):
        return k.rsplit(".lora_", 1)[0]
    scale = {module(k): float(sd[module(k) + ".alpha"]) / sd[k].shape[0] for k in sd if k.endswith(".lora_A.weight")}
    ranks = sorted({int(sd[k].shape[0]) for k in sd if k.endswith(".lora_A.weight")})
    alphas = sorted({float(sd[k]) for k in sd if k.endswith(".alpha")})
    if not check(len(ranks) == 1 and len(alphas) == 1, "one rank and one alpha: %r %r" % (ranks, alphas)):
        return 1
    file_cfg = json.dumps({"rank": ranks[0], "alpha": alphas[0], "targets": TARGETS})

    # diffusers' converter, the file's scale applied to B, adapters merged into the base's weights
    scaled = {k: torch.from_numpy(v.copy()) * (scale[module(k)] if ".lora_B." in k else 1.0)
              for k, v in sd.items() if not k.endswith(".alpha")}
    conv = _convert_non_diffusers_wan_lora_to_diffusers(dict(scaled))
    check(len(conv) == 2 * DEPTH * len(MODS), "converted keys: %d" % len(conv))
    model = WanTransformer3DModel.from_config(CONFIG)
    model.load_state_dict(base.state_dict(), strict=True)
    with torch.no_grad():
        for k in conv:
            if not k.endswith(".lora_A.weight"):
                continue
            mod = model.get_submodule(k[len("transformer."):-len(".lora_A.weight")])
            A, B = conv[k], conv[k.replace(".lora_A.", ".lora_B.")]
            check(mod.weight.shape == (B.shape[0], A.shape[1]), "%s: %r vs B·A %r" % (k, mod.weight.shape,
                                                                                      (B.shape[0], A.shape[1])))
            mod.weight += (B.double() @ A.double()).float()
    model.eval()

    # held sample
    g = torch.Generator().manual_seed(5)
    xt = torch.randn((2, 4, 1, 8, 8), generator=g).numpy()
    target = torch.randn((2, 4, 1, 8, 8), generator=g).numpy()
    emb = np.zeros((2, TL, 16), np.float32)
    lens = np.array([5, 9], np.int32)
    for i, n in enumerate(lens):
        emb[i, :n] = torch.randn((n, 16), generator=g).numpy()
    ts = np.array([0.375, 0.6875], np.float32)
    ref = fwd(model, xt, ts, emb).ravel()
    ref0 = fwd(base, xt, ts, emb).ravel()
    # unfused, as peft's LoraLayer runs an adapter: base_layer(x) + s·lora_B(lora_A(x)), with the
    # file's A and B as leaves whose gradients autograd gives
    hooked = WanTransformer3DModel.from_config(CONFIG)
    hooked.load_state_dict(base.state_dict(), strict=True)
    hooked.eval().requires_grad_(False)
    leaves = {k: torch.from_numpy(v.copy()).requires_grad_() for k, v in sd.items() if not k.endswith(".alpha")}
    file_key = {id(v): k for k, v in leaves.items()}  # the converter renames, the tensors stay
    conv_leaves = _convert_non_diffusers_wan_lora_to_diffusers(dict(leaves))
    hooks = []
    for k in conv_leaves:
        if k.endswith(".lora_A.weight"):
            A, B = conv_leaves[k], conv_leaves[k.replace(".lora_A.", ".lora_B.")]
            s = scale[module(file_key[id(A)])]
            mod = hooked.get_submodule(k[len("transformer."):-len(".lora_A.weight")])
            hooks.append(mod.register_forward_hook(lambda m, i, o, A=A, B=B, s=s: o + s * ((i[0] @ A.t()) @ B.t())))
    check(len(hooks) == DEPTH * len(MODS), "hooked %d linears" % len(hooks))
    pred_t = hooked(hidden_states=torch.from_numpy(xt), timestep=torch.from_numpy(ts) * 1000,
                    encoder_hidden_states=torch.from_numpy(emb), return_dict=False)[0]
    ((pred_t - torch.from_numpy(target)) ** 2).mean().backward()
    ref_unfused = pred_t.detach().numpy().ravel()
    for name, arr in (("xt", xt), ("target", target), ("t", ts), ("emb", emb), ("len", lens)):
        np.ascontiguousarray(arr).tofile(f(name + ".bin"))
    r = sh([DIT_TOOL, "grad"] + CFG + ["dims=2,1,8,8", "weights=" + f("wan_dir"), "xt=" + f("xt.bin"),
                                       "t=" + f("t.bin"), "emb=" + f("emb.bin"), "len=" + f("len.bin"),
                                       "target=" + f("target.bin"), "pred=" + f("pred.bin"), "lora=" + path,
                                       "lora_cfg=" + file_cfg, "parts=2", "grads=" + f("lgrad.bin")])
    lay = sh([DIT_TOOL, "layout"] + CFG + ["lora_cfg=" + file_cfg])
    if check(r.returncode == 0 and lay.returncode == 0, "dit_tool grad / layout lora=: " + r.stderr + lay.stderr):
        pred = np.fromfile(f("pred.bin"), dtype=np.float32)
        e = float(np.abs(pred - ref).max() / np.abs(ref).max())
        eu = float(np.abs(pred - ref_unfused).max() / np.abs(ref_unfused).max())
        e0 = float(np.abs(pred - ref0).max() / np.abs(ref0).max())
        check(e <= TOL, "forward with the adapters: relative error %.3g > %g" % (e, TOL))
        check(eu <= TOL, "forward with the adapters unfused: relative error %.3g > %g" % (eu, TOL))
        check(e0 > 100 * TOL, "the adapted forward is the base model's (rel %.3g)" % e0)
        print("adapted forward vs diffusers (converted + merged): rel err %.2e, unfused %.2e; vs the base model "
              "%.2e; max |B| %.3g" % (e, eu, e0, bmax))
        grads = np.fromfile(f("lgrad.bin"), dtype=np.float32).astype(np.float64)
        names, worst = set(), (0.0, "")
        for line in lay.stdout.splitlines():
            name, off, numel = line.split()[:3]
            names.add(name)
            want = leaves[name].grad.numpy().astype(np.float64).ravel() if name in leaves else np.zeros(0)
            got = grads[int(off):int(off) + int(numel)]
            if not check(want.size == got.size and np.linalg.norm(want) > 0, "%s: no reference gradient" % name):
                continue
            eg = float(np.linalg.norm(got - want) / np.linalg.norm(want))
            worst = max(worst, (eg, name))
            check(eg <= GRAD_TOL, "gradient of %s: relative error %.3g > %g" % (name, eg, GRAD_TOL))
        check(names == set(leaves), "adapter layout vs the file's tensors: %r" % sorted(names ^ set(leaves))[:4])
        print("adapter gradients vs torch autograd at the file's scale alpha/rank = %g/%d: %d tensors, worst "
              "relative error %.2e (%s)" % (alphas[0], ranks[0], len(names), worst[0], worst[1]))

    # the other namings load to the same adapter vector
    down = {}
    kohya = {}
    for k, v in sd.items():
        down[k.replace(".lora_A.", ".lora_down.").replace(".lora_B.", ".lora_up.")] = v
        kk = "lora_unet_" + k[len("diffusion_model."):].rsplit(".lora_", 1)[0].rsplit(".alpha", 1)[0].replace(".", "_")
        if k.endswith(".alpha"):
            kohya[kk + ".alpha"] = np.array(RANK, np.float32)  # alpha = rank: B carries twice the values
        elif ".lora_A." in k:
            kohya[kk + ".lora_down.weight"] = v
        else:
            kohya[kk + ".lora_up.weight"] = v * np.float32(ALPHA / RANK)
    save_file(down, f("down.safetensors"))
    save_file(kohya, f("kohya.safetensors"))
    vecs = []
    for name in (path, f("down.safetensors"), f("kohya.safetensors")):
        out = f(os.path.basename(name) + ".bin")
        r = sh([DIT_TOOL, "lora"] + CFG + ["lora=" + name, "lora_cfg=" + LORA_CFG, "out=" + out])
        if check(r.returncode == 0, "dit_tool lora %s: %s" % (name, r.stderr)):
            vecs.append(np.fromfile(out, dtype=np.float32))
    if len(vecs) == 3:
        check(np.array_equal(vecs[0], vecs[1]), "lora_down/lora_up keys read to another adapter")
        check(np.array_equal(vecs[0], vecs[2]), "kohya lora_unet_* keys read to another adapter")
        print("lora_A/B, lora_down/up and kohya lora_unet_* files: the same %d adapter values" % vecs[0].size)

    # lora_init continues from the file: with lr 0 the next checkpoint holds the same adapters
    r = vflow("run", f("cont"), common + ["steps=1", "every=1", "lr=0", "lora_init=" + path])
    if check(r.returncode == 0, "lora_init run: " + r.stderr[-800:]):
        got = load_file(f("cont/ckpt/step-1/lora.safetensors"))
        check(sorted(got) == sorted(sd) and all(np.array_equal(got[k], sd[k]) for k in sd),
              "lora_init + lr 0 did not keep the file's adapters")

    # bad files: one line naming file and key, exit 2
    bad = {}
    other = dict(sd)
    other["diffusion_model.blocks.9.self_attn.q.lora_A.weight"] = other["diffusion_model.blocks.0.self_attn.q.lora_A.weight"]
    bad["other_model"] = (other, "blocks.9.self_attn.q.lora_A.weight")
    dims = dict(sd)
    k = "diffusion_model.blocks.1.ffn.0.lora_A.weight"
    dims[k] = np.zeros((RANK, 48), np.float32)
    bad["wrong_dims"] = (dims, k)
    rk = dict(sd)
    k2 = "diffusion_model.blocks.2.cross_attn.v.lora_B.weight"
    rk[k2] = np.zeros((64, RANK + 1), np.float32)
    bad["rank_mismatch"] = (rk, "blocks.2.cross_attn.v.lora_")
    for name, (d, key) in bad.items():
        p = f(name + ".safetensors")
        save_file(d, p)
        r = sh([DIT_TOOL, "lora"] + CFG + ["lora=" + p, "lora_cfg=" + LORA_CFG])
        msg = r.stderr.strip()
        check(r.returncode == 2 and p in msg and key in msg and "\n" not in msg,
              "%s: exit %d, %r" % (name, r.returncode, msg))
        print("%s: %s" % (name, msg))
    r = vflow("check", None, common + ["steps=1", "lora_init=" + f("rank_mismatch.safetensors")])
    check(r.returncode == 2 and "rank mismatch" in r.stderr, "vflow check with a bad lora_init: exit %d %s" % (
        r.returncode, r.stderr[-400:]))

    if fails:
        print("%d failures (kept %s)" % (len(fails), tmp))
        return 1
    shutil.rmtree(tmp)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
