# test_wan_ti2v_diffusers.py — the C DiT with a time embedding per token (t_tokens = 1, the
# Wan 2.2 TI2V-5B path) against diffusers 0.35.2's WanTransformer3DModel fed timesteps of
# shape (B, L) on the same weights (every parameter perturbed after init), a tiny config of
# TI2V's shape (48 latent channels in and out, no conditioning channels).
# Two sets of per-token times:
#  - "ti2v": WanImageToVideoPipeline's expand_timesteps construction, read off its code:
#    first_frame_mask (1 everywhere, 0 on latent frame 0), the model input
#    (1 − mask)·condition + mask·latents with the clean first-frame latent as condition,
#    and the timestep mask[0][0][:, ::2, ::2]·t flattened per token (frame 0 at 0);
#  - "free": every token at a time of its own, so no two neighbours share one.
# The C construction (vf_dit_first_frame through dit_tool first_frame) of the model input
# and the token times from the noisy latents, the clean ones and sigma equals the
# pipeline's bit for bit. Checked per set:
#  - the prediction equals diffusers' forward to a relative error <= 1e-5;
#  - the loss (for "ti2v" over latent frames 1.., frame 0 left out, skip=1) and the
#    gradient of EVERY tensor equal torch autograd through diffusers' model to <= 1e-4
#    (||g − ref|| / ||ref||), mapped by name;
#  - the reference depends on the per-token times: feeding it each sample's t for every
#    token moves its prediction by far more than the tolerance.
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
TL, Z = 512, 48                         # text rows (diffusers' fixed 512), TI2V's latent channels
# head_dim 24: the RoPE split diffusers 0.35 and vflow agree on (test_wan_i2v_diffusers.py)
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=24, in_channels=Z, out_channels=Z,
              text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, eps=1e-6,
              rope_max_seq_len=32)
CFG = ["dim=48", "depth=2", "heads=2", "head_dim=24", "ffn=64", "z=%d" % Z, "patch=1,2,2", "text_dim=32",
       "text_len=%d" % TL, "freq_dim=32", "text_emb=1", "t_tokens=1"]
DIMS = (2, 3, 4, 6)
FWD_TOL, GRAD_TOL = 1e-5, 1e-4

rel_max = wan_ref.rel_max


def run(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


def inputs():
    """Noisy latents, the clean first-frame latent, sigma per sample, text embeddings, the
    velocity target; the model input and the per-token timesteps of both sets."""
    B, T, H, W = DIMS
    gen = torch.Generator().manual_seed(3)
    x0 = torch.randn(B, Z, T, H, W, generator=gen)
    noise = torch.randn(B, Z, T, H, W, generator=gen)
    sigma = torch.tensor([0.25, 0.8125])                          # exact in f32; timestep = sigma * 1000
    s = sigma.view(B, 1, 1, 1, 1)
    latents = (1 - s) * x0 + s * noise
    condition = x0[:, :, :1]                                      # the image's latent: frame 0, clean
    emb = torch.randn(B, TL, 32, generator=gen)
    emb[0, 9:] = 0                                                # a short caption, zero-padded
    # WanImageToVideoPipeline (expand_timesteps): the mask, the model input, the timesteps
    first_frame_mask = torch.ones(1, 1, T, H, W)
    first_frame_mask[:, :, 0] = 0
    model_input = (1 - first_frame_mask) * condition + first_frame_mask * latents
    ts = torch.stack([(first_frame_mask[0][0][:, ::2, ::2] * t).flatten() for t in sigma * 1000])
    L = ts.shape[1]
    # every token a time of its own: sigma · (k + 1)/16, k = 0..15 cycling (exact in f32)
    free = torch.stack([t * (torch.arange(L) % 16 + 1).float() / 16 for t in sigma * 1000])
    return model_input, emb, noise - x0, {"ti2v": ts, "free": free}, sigma, latents, x0


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

    torch.manual_seed(0)
    model = wan_ref.perturb(WanTransformer3DModel.from_config(CONFIG))
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    lay = run(["layout"] + CFG)
    if not check(lay.returncode == 0, "dit_tool layout: %s" % lay.stderr):
        return 1
    layout = []
    for line in lay.stdout.splitlines():
        name, off, numel, shape = line.split()
        layout.append((name, int(off), int(numel), tuple(int(x) for x in shape.split(","))))
    to_diff = {n: next(iter(convert_wan_transformer_to_diffusers({n: torch.zeros(1)}))) for n, _, _, _ in layout}
    check(sorted(to_diff.values()) == sorted(sd), "layout names differ from the diffusers model's")
    by_diff = {v: k for k, v in to_diff.items()}

    x_in, emb, target, sets, sigma, latents, x0 = inputs()
    with tempfile.TemporaryDirectory() as d:
        f = lambda n: os.path.join(d, n)  # noqa: E731
        save_file(sd, f("w.safetensors"))
        # the C construction of the model input and the token times from the noisy latents,
        # the clean latents and sigma: the pipeline's, bit for bit
        latents.numpy().tofile(f("noisy.bin"))
        x0.numpy().tofile(f("x0.bin"))
        sigma.numpy().astype(np.float32).tofile(f("t.bin"))
        r = run(["first_frame"] + CFG + ["dims=%d,%d,%d,%d" % DIMS, "xt=" + f("noisy.bin"), "x0=" + f("x0.bin"),
                                         "t=" + f("t.bin"), "out=" + f("xin.bin"), "ttok_out=" + f("tt.bin")])
        if check(r.returncode == 0, "dit_tool first_frame: %s" % r.stderr):
            cx = np.fromfile(f("xin.bin"), dtype=np.float32)
            ct = np.fromfile(f("tt.bin"), dtype=np.float32)
            check(np.array_equal(cx, x_in.numpy().ravel()),
                  "the model input is not the pipeline's (1 - mask)·condition + mask·latents")
            check(np.array_equal(ct, (sets["ti2v"] / 1000).numpy().ravel()),
                  "the token times are not the pipeline's mask[0][0][:, ::2, ::2]·t")
        x_in.numpy().tofile(f("xt.bin"))
        target.numpy().tofile(f("target.bin"))
        emb.numpy().tofile(f("emb.bin"))
        np.full(DIMS[0], TL, np.int32).tofile(f("len.bin"))
        for tag, ts in sets.items():
            model.zero_grad()
            pred = model(hidden_states=x_in, timestep=ts, encoder_hidden_states=emb, return_dict=False)[0]
            skip = 1 if tag == "ti2v" else 0   # TI2V leaves the image's frame out of the loss
            loss = ((pred - target)[:, :, skip:] ** 2).mean()
            loss.backward()
            ref_pred = pred.detach().numpy().ravel()
            ref_grads = {by_diff[k]: p.grad.detach().numpy().ravel() for k, p in model.named_parameters()}
            with torch.no_grad():  # what the comparison rests on moves the reference
                per_sample = model(hidden_states=x_in, timestep=sigma * 1000, encoder_hidden_states=emb,
                                   return_dict=False)[0]
            e = rel_max(per_sample.numpy().ravel(), ref_pred)
            check(e > 100 * FWD_TOL, "%s: the per-token times move diffusers' prediction by only %.2e" % (tag, e))
            (ts / 1000).numpy().astype(np.float32).tofile(f("ttok.bin"))
            r = run(["grad"] + CFG + ["dims=%d,%d,%d,%d" % DIMS, "weights=" + f("w.safetensors"),
                                      "xt=" + f("xt.bin"), "t=" + f("t.bin"), "ttok=" + f("ttok.bin"),
                                      "emb=" + f("emb.bin"), "len=" + f("len.bin"), "target=" + f("target.bin"),
                                      "skip=%d" % skip, "grads=" + f("g.bin"), "pred=" + f("p.bin")])
            if not check(r.returncode == 0, "%s: dit_tool grad: %s" % (tag, r.stderr)):
                continue
            closs = float(r.stdout.split()[1])
            e_pred = rel_max(np.fromfile(f("p.bin"), dtype=np.float32), ref_pred)
            e_loss = abs(closs - loss.item()) / loss.item()
            errs = wan_ref.grad_errors(layout, np.fromfile(f("g.bin"), dtype=np.float32), ref_grads)
            for name, e, zero in errs:
                check(not zero, "%s: the reference gradient of %s is zero" % (tag, name))
                check(e <= GRAD_TOL, "%s: gradient of %s: relative error %.3g > %g" % (tag, name, e, GRAD_TOL))
            worst, wname = max((e, n) for n, e, _ in errs)
            print("%-5s forward rel err %.2e, loss %.9g (rel %.1e), %d gradients, worst %.2e (%s)" % (
                tag, e_pred, closs, e_loss, len(layout), worst, wname))
            check(e_pred <= FWD_TOL, "%s: forward relative error %.3g > %g" % (tag, e_pred, FWD_TOL))
            check(e_loss <= GRAD_TOL, "%s: loss %.9g vs %.9g" % (tag, closs, loss.item()))
    print("PASS" if not failed else "FAIL (%d)" % len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
