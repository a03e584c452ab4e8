# test_wan_diffusers.py — the C DiT (models/dit*.c, text = embeddings) against diffusers'
# WanTransformer3DModel on the same weights, loaded by vflow from each form users have:
#  - diffusers names: one safetensors file, and the directory save_pretrained writes;
#  - the original Wan names, made here from the diffusers names with the inverse of
#    the name table (as convert_wan_transformer_to_diffusers renames) and checked to map back exactly through diffusers' own
#    convert_wan_transformer_to_diffusers; as one file and as a sharded checkpoint
#    (two files + diffusion_pytorch_model.safetensors.index.json);
#  - the original names under ComfyUI's prefix "model.diffusion_model.".
# The model is a tiny Wan config (below) with every parameter perturbed after init (norm
# gains, biases and the modulation tables too). The inputs: latents (B, z, T, H, W),
# timesteps sigma·1000, text embeddings of two lengths which vflow receives with
# non-zero rows past each length (the pipeline zero-pads them; diffusers gets the padded
# context), and a rectified-flow target noise − x0. Checked, for each form:
#  - the prediction equals diffusers' forward to a relative error <= 1e-5 (max abs
#    difference over max abs reference, f32 on the CPU);
#  - the loss mean((v − target)²) and the gradient of EVERY tensor equal torch autograd
#    through diffusers' model to <= 1e-4 (||g − ref|| / ||ref||), mapped by name.
# vflow-test: labels=reference timeout=600
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wan_ref  # noqa: E402  (before diffusers: shims torch 1.13)

wan_ref.reexec_in_ref_venv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import WanTransformer3DModel  # noqa: E402
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
TOOL = os.path.join(BUILD, "tools", "dit_tool")
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
              text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, eps=1e-6,
              rope_max_seq_len=32)
TL = 8
CFG = ["dim=32", "depth=2", "heads=2", "head_dim=16", "ffn=64", "z=4", "patch=1,2,2", "text_dim=32",
       "text_len=%d" % TL, "freq_dim=32", "text_emb=1"]
DIMS = (2, 3, 4, 6)
FWD_TOL, GRAD_TOL = 1e-5, 1e-4
PREFIX = "model.diffusion_model."

# diffusers name -> original name: the renames read backwards (applied in this order)
TO_ORIGINAL = [
    ("condition_embedder.time_embedder.linear_1", "time_embedding.0"),
    ("condition_embedder.time_embedder.linear_2", "time_embedding.2"),
    ("condition_embedder.text_embedder.linear_1", "text_embedding.0"),
    ("condition_embedder.text_embedder.linear_2", "text_embedding.2"),
    ("condition_embedder.time_proj", "time_projection.1"),
    ("attn2", "cross_attn"), ("attn1", "self_attn"),
    (".to_out.0.", ".o."), (".to_q.", ".q."), (".to_k.", ".k."), (".to_v.", ".v."),
    ("ffn.net.0.proj", "ffn.0"), ("ffn.net.2", "ffn.2"),
    ("norm2", "norm__x"), ("norm3", "norm2"), ("norm__x", "norm3"),
]


def original_name(k):
    if k.startswith("scale_shift_table"):
        return "head.modulation"
    if k.startswith("proj_out."):
        return "head.head." + k[len("proj_out."):]
    for a, b in TO_ORIGINAL:
        k = k.replace(a, b)
    return k.replace("scale_shift_table", "modulation")


rel_max = wan_ref.rel_max


def run(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


def main():
    if not os.path.exists(TOOL):
        print("missing %s (build the tools first)" % TOOL)
        return 1
    torch.manual_seed(0)
    model = WanTransformer3DModel.from_config(CONFIG)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in model.named_parameters():  # every parameter off its init
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.05 * torch.randn(p.shape, generator=g))
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    orig = {original_name(k): v for k, v in sd.items()}
    failed = 0

    def check(cond, msg):
        nonlocal failed
        if not cond:
            failed += 1
            print("FAIL: " + msg)
        return cond

    # the inverse naming is diffusers' converter's exact inverse, with and without the prefix
    for tag, src in (("original", orig), ("comfyui", {PREFIX + k: v for k, v in orig.items()})):
        back = convert_wan_transformer_to_diffusers({k: torch.from_numpy(v) for k, v in src.items()})
        check(sorted(back) == sorted(sd) and all(np.array_equal(back[k].numpy(), sd[k]) for k in sd),
              "%s names do not map back through convert_wan_transformer_to_diffusers" % tag)

    B, T, H, W = DIMS
    gen = torch.Generator().manual_seed(2)
    x0 = torch.randn(B, 4, T, H, W, generator=gen)
    noise = torch.randn(B, 4, T, H, W, generator=gen)
    sigma = torch.tensor([0.25, 0.8125])                          # exact in f32; timestep = sigma * 1000
    s = sigma.view(B, 1, 1, 1, 1)
    x_t = (1 - s) * x0 + s * noise
    target = noise - x0
    lens = torch.tensor([5, TL], dtype=torch.int32)
    emb = torch.randn(B, TL, 32, generator=gen)                   # vflow gets rows past each length too
    ctx = emb.clone()
    for b in range(B):
        ctx[b, lens[b]:] = 0                                      # WanPipeline zero-pads to max_sequence_length

    model.zero_grad()
    pred = model(hidden_states=x_t, timestep=sigma * 1000, encoder_hidden_states=ctx, return_dict=False)[0]
    loss = ((pred - target) ** 2).mean()
    loss.backward()
    ref_pred = pred.detach().numpy().ravel()
    ref_grads = {original_name(k): p.grad.detach().numpy().ravel() for k, p in model.named_parameters()}

    lay = run(["layout"] + CFG)
    if not check(lay.returncode == 0, "dit_tool layout: " + lay.stderr):
        return 1
    layout = []
    for line in lay.stdout.splitlines():
        name, off, numel, shape = line.split()
        layout.append((name, int(off), int(numel), tuple(int(x) for x in shape.split(","))))
    check(sorted(n for n, _, _, _ in layout) == sorted(orig),
          "layout names differ from the original names: vflow-only %s, diffusers-only %s" % (
              sorted(set(n for n, _, _, _ in layout) - set(orig)), sorted(set(orig) - set(n for n, _, _, _ in layout))))
    for n, _, _, shape in layout:
        check(n not in orig or tuple(orig[n].shape) == shape, "%s: shape %s vs %s" % (n, shape, orig.get(n, np.zeros(0)).shape))

    with tempfile.TemporaryDirectory() as d:
        f = lambda n: os.path.join(d, n)  # noqa: E731
        save_file(sd, f("diffusers.safetensors"))
        save_file(orig, f("original.safetensors"))
        save_file({PREFIX + k: v for k, v in orig.items()}, f("comfyui.safetensors"))
        os.makedirs(f("dir"))
        # what save_pretrained writes (its safetensors call fails on torch 1.13 here)
        with open(os.path.join(f("dir"), "config.json"), "w") as fh:
            json.dump(dict(model.config, _class_name="WanTransformer3DModel"), fh)
        save_file(sd, os.path.join(f("dir"), "diffusion_pytorch_model.safetensors"))
        os.makedirs(f("sharded"))
        names = sorted(orig)
        half = len(names) // 2
        wmap = {}
        for i, part in enumerate((names[:half], names[half:])):
            fn = "diffusion_pytorch_model-%05d-of-00002.safetensors" % (i + 1)
            save_file({k: orig[k] for k in part}, os.path.join(f("sharded"), fn))
            wmap.update({k: fn for k in part})
        with open(os.path.join(f("sharded"), "diffusion_pytorch_model.safetensors.index.json"), "w") as fh:
            json.dump({"metadata": {"total_size": sum(v.nbytes for v in orig.values())}, "weight_map": wmap}, fh)
        x_t.numpy().tofile(f("xt.bin"))
        target.numpy().tofile(f("target.bin"))
        sigma.numpy().astype(np.float32).tofile(f("t.bin"))
        emb.numpy().tofile(f("emb.bin"))
        lens.numpy().tofile(f("len.bin"))
        forms = [("diffusers file", f("diffusers.safetensors"), "diffusers"),
                 ("diffusers directory", f("dir"), "diffusers"),
                 ("original file", f("original.safetensors"), "original"),
                 ("original sharded", os.path.join(f("sharded"), "diffusion_pytorch_model.safetensors.index.json"),
                  "original"),
                 ("comfyui file", f("comfyui.safetensors"), "comfyui")]
        first = None
        for tag, path, naming in forms:
            r = run(["weights"] + CFG + ["weights=" + path])
            check(r.returncode == 0 and r.stdout.split()[:2] == ["naming", naming],
                  "%s: recognised as %r (exit %d) %s" % (tag, r.stdout.strip(), r.returncode, r.stderr))
            r = run(["grad"] + CFG + ["dims=%d,%d,%d,%d" % DIMS, "weights=" + path, "xt=" + f("xt.bin"),
                                      "t=" + f("t.bin"), "emb=" + f("emb.bin"), "len=" + f("len.bin"),
                                      "target=" + f("target.bin"), "grads=" + f("g.bin"), "pred=" + f("p.bin")])
            if not check(r.returncode == 0, "%s: dit_tool grad: %s" % (tag, r.stderr)):
                continue
            closs = float(r.stdout.split()[1])
            cpred = np.fromfile(f("p.bin"), dtype=np.float32)
            grads = np.fromfile(f("g.bin"), dtype=np.float32)
            e_pred = rel_max(cpred, ref_pred)
            e_loss = abs(closs - loss.item()) / loss.item()
            errs = wan_ref.grad_errors(layout, grads, ref_grads)
            for name, e, zero in errs:
                check(not zero, "%s: the reference gradient is zero" % name)
                check(e <= GRAD_TOL, "%s: gradient of %s: relative error %.3g > %g" % (tag, name, e, GRAD_TOL))
            worst, wname = max((e, n) for n, e, _ in errs)
            print("%-20s forward rel err %.2e, loss %.9g (ref %.9g, rel %.1e), %d gradients, worst %.2e (%s)" % (
                tag, e_pred, closs, loss.item(), e_loss, len(layout), worst, wname))
            check(e_pred <= FWD_TOL, "%s: forward relative error %.3g > %g" % (tag, e_pred, FWD_TOL))
            check(e_loss <= GRAD_TOL, "%s: loss %.9g vs %.9g" % (tag, closs, loss.item()))
            if first is None:
                first = (cpred, grads)
            else:
                check(np.array_equal(first[0], cpred) and np.array_equal(first[1], grads),
                      "%s: not bit-identical to the first form's results" % tag)
    print("PASS" if not failed else "FAIL (%d)" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
