# test_wan_i2v_diffusers.py — the C DiT as Wan 2.1 I2V (36 input channels, CLIP image
# branch) and as Wan 2.2 I2V-A14B (36 input channels, no image branch) against diffusers
# 0.35.2's WanTransformer3DModel(in_channels=36, image_dim=…, added_kv_proj_dim=…) on the
# same weights, loaded by vflow under diffusers' names, the original names and ComfyUI's
# prefix. The original names are made from vflow's layout names by diffusers' own
# convert_wan_transformer_to_diffusers, which must give exactly the model's state dict.
# Tiny configs (below) with every parameter perturbed after init. Inputs: noisy latents
# (B, 16, T, H, W) and the 20 conditioning channels (the first-frame mask, 4 channels of
# ones on frame 0, then a latent standing in for the first frame's), concatenated for
# diffusers; timesteps sigma·1000; text embeddings zero-padded to 512 rows (diffusers'
# attention takes the last 512 context rows as the text); image features (B, 7, 12).
# Checked, per model and weights form:
#  - the prediction equals diffusers' forward to a relative error <= 1e-5;
#  - the loss and the gradient of EVERY tensor equal torch autograd through diffusers'
#    model to <= 1e-4 (||g − ref|| / ||ref||), mapped by name;
#  - the reference itself depends on what is checked: zeroing the image features or the
#    conditioning channels moves diffusers' prediction by far more than the tolerance.
# vflow-test: labels=reference timeout=600
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wan_ref  # noqa: E402  (before diffusers: shims torch 1.13)

wan_ref.use_diffusers_035()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import WanTransformer3DModel  # noqa: E402
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
TOOL = os.path.join(BUILD, "tools", "dit_tool")
TL, LI, DI = 512, 7, 12                 # text rows (diffusers' fixed 512), image rows, image width
# head_dim 24: diffusers 0.35's WanRotaryPosEmbed builds the t/h/w frequencies with
# head_dim − 4·(head_dim//6) / 2·(head_dim//6) / 2·(head_dim//6) and splits them with
# head_dim − 2·(head_dim//3) / head_dim//3 / head_dim//3, which agree for Wan's 128 (44/42/42)
# and for 24 (8/8/8), not for 16 (8/4/4 built, 6/5/5 split)
BASE = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=24, in_channels=36, out_channels=16,
            text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, eps=1e-6,
            rope_max_seq_len=32)
CFG = ["dim=48", "depth=2", "heads=2", "head_dim=24", "ffn=64", "z=16", "patch=1,2,2", "text_dim=32",
       "text_len=%d" % TL, "freq_dim=32", "text_emb=1", "in_dim=36"]
MODELS = [("wan2.1-i2v", dict(BASE, image_dim=DI, added_kv_proj_dim=48), CFG + ["img_dim=%d" % DI, "img_len=%d" % LI]),
          ("wan2.2-i2v-a14b", BASE, CFG)]
DIMS = (2, 3, 4, 6)
FWD_TOL, GRAD_TOL = 1e-5, 1e-4
PREFIX = "model.diffusion_model."


rel_max = wan_ref.rel_max


def run(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


def inputs():
    B, T, H, W = DIMS
    gen = torch.Generator().manual_seed(2)
    x0 = torch.randn(B, 16, T, H, W, generator=gen)
    noise = torch.randn(B, 16, T, H, W, generator=gen)
    sigma = torch.tensor([0.25, 0.8125])                          # exact in f32; timestep = sigma * 1000
    s = sigma.view(B, 1, 1, 1, 1)
    mask = torch.zeros(B, 4, T, H, W)
    mask[:, :, 0] = 1                                             # WanImageToVideoPipeline's first-frame mask
    cond = torch.cat([mask, torch.randn(B, 16, T, H, W, generator=gen)], dim=1)
    emb = torch.randn(B, TL, 32, generator=gen)
    emb[0, 9:] = 0                                                # a short caption, zero-padded
    img = torch.randn(B, LI, DI, generator=gen)
    return (1 - s) * x0 + s * noise, cond, sigma, emb, img, noise - x0


def check_model(tag, config, cfg, d, check):
    torch.manual_seed(0)
    model = wan_ref.perturb(WanTransformer3DModel.from_config(config))
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    img_branch = "image_dim" in config

    lay = run(["layout"] + cfg)
    if not check(lay.returncode == 0, "%s: dit_tool layout: %s" % (tag, lay.stderr)):
        return
    layout = []
    for line in lay.stdout.splitlines():
        name, off, numel, shape = line.split()
        layout.append((name, int(off), int(numel), tuple(int(x) for x in shape.split(","))))
    # vflow's names are the original names: diffusers' converter maps them onto the model
    to_diff = {n: next(iter(convert_wan_transformer_to_diffusers({n: torch.zeros(1)}))) for n, _, _, _ in layout}
    check(sorted(to_diff.values()) == sorted(sd),
          "%s: layout names through convert_wan_transformer_to_diffusers: vflow-only %s, diffusers-only %s" % (
              tag, sorted(set(to_diff.values()) - set(sd)), sorted(set(sd) - set(to_diff.values()))))
    for n, _, _, shape in layout:
        check(to_diff[n] in sd and tuple(sd[to_diff[n]].shape) == shape, "%s: %s: shape %s" % (tag, n, shape))
    orig = {n: sd[to_diff[n]] for n, _, _, _ in layout if to_diff[n] in sd}

    x_t, cond, sigma, emb, img, target = inputs()
    kw = dict(timestep=sigma * 1000, encoder_hidden_states=emb, return_dict=False)
    if img_branch:
        kw["encoder_hidden_states_image"] = img
    model.zero_grad()
    pred = model(hidden_states=torch.cat([x_t, cond], dim=1), **kw)[0]
    loss = ((pred - target) ** 2).mean()
    loss.backward()
    ref_pred = pred.detach().numpy().ravel()
    by_diff = {v: k for k, v in to_diff.items()}
    ref_grads = {by_diff[k]: p.grad.detach().numpy().ravel() for k, p in model.named_parameters() if k in by_diff}
    # what the comparison rests on moves the reference's prediction
    with torch.no_grad():
        for what, hs, k2 in (("conditioning channels", torch.cat([x_t, 0 * cond], dim=1), kw),
                             ("image features", torch.cat([x_t, cond], dim=1),
                              dict(kw, encoder_hidden_states_image=0 * img) if img_branch else None)):
            if k2 is None:
                continue
            e = rel_max(model(hidden_states=hs, **k2)[0].numpy().ravel(), ref_pred)
            check(e > 100 * FWD_TOL, "%s: zeroing the %s moves diffusers' prediction by only %.2e" % (tag, what, e))

    f = lambda n: os.path.join(d, tag + "-" + n)  # noqa: E731
    save_file(sd, f("diffusers.safetensors"))
    save_file(orig, f("original.safetensors"))
    save_file({PREFIX + k: v for k, v in orig.items()}, f("comfyui.safetensors"))
    x_t.numpy().tofile(f("xt.bin"))
    cond.numpy().tofile(f("cond.bin"))
    img.numpy().tofile(f("img.bin"))
    target.numpy().tofile(f("target.bin"))
    sigma.numpy().astype(np.float32).tofile(f("t.bin"))
    emb.numpy().tofile(f("emb.bin"))
    np.full(DIMS[0], TL, np.int32).tofile(f("len.bin"))
    first = None
    for form, naming in (("diffusers", "diffusers"), ("original", "original"), ("comfyui", "comfyui")):
        path = f(form + ".safetensors")
        r = run(["weights"] + cfg + ["weights=" + path])
        check(r.returncode == 0 and r.stdout.split()[:2] == ["naming", naming],
              "%s %s: recognised as %r (exit %d) %s" % (tag, form, r.stdout.strip(), r.returncode, r.stderr))
        args = ["grad"] + cfg + ["dims=%d,%d,%d,%d" % DIMS, "weights=" + path, "xt=" + f("xt.bin"), "t=" + f("t.bin"),
                                 "emb=" + f("emb.bin"), "len=" + f("len.bin"), "target=" + f("target.bin"),
                                 "cond=" + f("cond.bin"), "grads=" + f("g.bin"), "pred=" + f("p.bin")]
        if img_branch:
            args.append("img=" + f("img.bin"))
        r = run(args)
        if not check(r.returncode == 0, "%s %s: dit_tool grad: %s" % (tag, form, r.stderr)):
            continue
        closs = float(r.stdout.split()[1])
        cpred = np.fromfile(f("p.bin"), dtype=np.float32)
        grads = np.fromfile(f("g.bin"), dtype=np.float32)
        e_pred = rel_max(cpred, ref_pred)
        e_loss = abs(closs - loss.item()) / loss.item()
        errs = wan_ref.grad_errors(layout, grads, ref_grads)
        for name, e, zero in errs:
            check(not zero, "%s: the reference gradient of %s is zero" % (tag, name))
            check(e <= GRAD_TOL, "%s %s: gradient of %s: relative error %.3g > %g" % (tag, form, name, e, GRAD_TOL))
        worst, wname = max((e, n) for n, e, _ in errs)
        print("%-16s %-9s forward rel err %.2e, loss %.9g (rel %.1e), %d gradients, worst %.2e (%s)" % (
            tag, form, e_pred, closs, e_loss, len(layout), worst, wname))
        check(e_pred <= FWD_TOL, "%s %s: forward relative error %.3g > %g" % (tag, form, e_pred, FWD_TOL))
        check(e_loss <= GRAD_TOL, "%s %s: loss %.9g vs %.9g" % (tag, form, closs, loss.item()))
        if first is None:
            first = (cpred, grads)
        else:
            check(np.array_equal(first[0], cpred) and np.array_equal(first[1], grads),
                  "%s %s: not bit-identical to the first form's results" % (tag, form))


def main():
    if not os.path.exists(TOOL):
        print("missing %s (build the tools first)" % TOOL)
        return 1
    failed = []

    def check(cond, msg):
        if not cond:
            failed.append(msg)
            print("FAIL: " + msg)
        return cond

    with tempfile.TemporaryDirectory() as d:
        for tag, config, cfg in MODELS:
            check_model(tag, config, cfg, d, check)
    print("PASS" if not failed else "FAIL (%d)" % len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
