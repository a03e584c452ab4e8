# test_vae_dec_diffusers.py — the C causal VAE decoder (models/vae.h, vae_dec.c) against
# diffusers' AutoencoderKLWan.decode on the same weights, in each form users have them:
#  - a diffusers model directory (config.json + diffusion_pytorch_model.safetensors),
#  - the same state dict as one safetensors file (diffusers names),
#  - the original Wan names (ComfyUI's wan_2.1_vae.safetensors form, encoder and decoder),
#    made here from the diffusers names and checked to map back exactly through
#    diffusers' own convert_wan_vae_to_diffusers; also the decoder half alone and under
#    a prefix ("first_stage_model.").
# The model is a tiny Wan config (below) with every parameter perturbed after init (norm
# gains and biases too). vflow decodes one latent frame per call (as Wan does), two, and
# whole through build/tools/vae_tool; the frames must match AutoencoderKLWan.decode(z)
# (float64) to a relative error <= 1e-5 (max abs difference over max abs reference), and
# the chunkings must agree bit for bit. A normalised latent with the directory's
# latents_mean/latents_std is de-normalised (z = latent * std + mean) before decoding.
# A missing decoder tensor is refused naming it as the file spells it. Last, Wan's own
# widths (AutoencoderKLWan's defaults: base_dim 96, z_dim 16, perturbed the same way) on
# a small latent, loaded from a decoder-only diffusers file, to the same tolerance.
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
from diffusers import AutoencoderKLWan  # noqa: E402
from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
TOOL = os.path.join(BUILD, "tools", "vae_tool")
TOL = 1e-5
CONFIG = dict(base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
              temperal_downsample=[False, True, True],
              latents_mean=[0.25, -0.5, 1.0, 0.125], latents_std=[2.0, 0.75, 1.5, 3.0])
TOOL_CFG = ["--dim", "8", "--mult", "1,2,4,4", "--res", "2", "--tdown", "0,1,1", "--z", "4", "--eps", "1e-12"]
RES = CONFIG["num_res_blocks"]


def original_name(k):
    """diffusers name -> original Wan name, written from diffusers' naming of AutoencoderKLWan."""
    for a, b in [("quant_conv.", "conv1."), ("post_quant_conv.", "conv2.")]:
        if k.startswith(a):
            return b + k[len(a):]
    for half in ["encoder", "decoder"]:
        for a, b in [("conv_in.", "conv1."), ("norm_out.", "head.0."), ("conv_out.", "head.2."),
                     ("mid_block.resnets.0.", "middle.0."), ("mid_block.attentions.0.", "middle.1."),
                     ("mid_block.resnets.1.", "middle.2."), ("down_blocks.", "downsamples.")]:
            k = k.replace(half + "." + a, half + "." + b)
    if k.startswith("decoder.up_blocks."):
        parts = k.split(".")
        i = int(parts[2])
        if parts[3] == "upsamplers":
            k = "decoder.upsamples.%d.%s" % (i * (RES + 2) + RES + 1, ".".join(parts[5:]))
        else:
            k = "decoder.upsamples.%d.%s" % (i * (RES + 2) + int(parts[4]), ".".join(parts[5:]))
    if k.split(".")[1] in ("downsamples", "upsamples", "middle"):
        for a, b in [("norm1.", "residual.0."), ("conv1.", "residual.2."), ("norm2.", "residual.3."),
                     ("conv2.", "residual.6."), ("conv_shortcut.", "shortcut.")]:
            parts = k.split(".")
            tail = ".".join(parts[3:])
            if tail.startswith(a):
                k = ".".join(parts[:3]) + "." + b + tail[len(a):]
    return k


def rel_err(a, ref):
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


def run_tool(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


def wan_widths(tmp):
    """AutoencoderKLWan's default config, decoder half only, 3 latent frames of 2x3."""
    torch.manual_seed(0)
    model = AutoencoderKLWan()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.05 * torch.randn(p.shape, generator=g))
    model.eval()
    wfile = os.path.join(tmp, "wan_decoder.safetensors")
    save_file({k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()
               if k.startswith("decoder.") or k.startswith("post_quant_conv.")}, wfile)
    z = (torch.randn(1, 16, 3, 2, 3, generator=g) * 0.5).float()
    zpath = os.path.join(tmp, "z_wan.safetensors")
    save_file({"z": z.numpy()}, zpath)
    with torch.no_grad():
        ref = model.double().decode(z.double()).sample.numpy()
    del model
    out = os.path.join(tmp, "out_wan.safetensors")
    r = run_tool(["decode", "--preset", "wan", "--weights", wfile, "--input", zpath, "--out", out])
    if r.returncode != 0:
        print("FAIL wan widths: vae_tool exit %d: %s" % (r.returncode, r.stderr))
        return 1
    x = load_file(out)["x"]
    e = rel_err(x.astype(np.float64), ref) if x.shape == ref.shape else float("inf")
    ok = e <= TOL
    print("%s wan widths (preset wan, decoder-only diffusers file) chunk 1: frames %s rel err %.3g" % (
        "ok  " if ok else "FAIL", x.shape, e))
    return 0 if ok else 1


def main():
    if not os.path.exists(TOOL):
        print("missing %s (build the tools first)" % TOOL)
        return 1
    torch.manual_seed(0)
    model = AutoencoderKLWan.from_config(CONFIG)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in model.named_parameters():  # every parameter off its init
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.05 * torch.randn(p.shape, generator=g))
    model.eval()
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    failed = 0

    # the original names, checked against diffusers' own converter
    orig = {original_name(k): v for k, v in sd.items()}
    back = convert_wan_vae_to_diffusers({k: torch.from_numpy(v) for k, v in orig.items()})
    ok = set(back) == set(sd) and all(np.array_equal(back[k].numpy(), sd[k]) for k in sd)
    print("%s original names map back through convert_wan_vae_to_diffusers (%d tensors)" % (
        "ok  " if ok else "FAIL", len(sd)))
    failed += not ok
    dec_orig = {k: v for k, v in orig.items() if k.startswith("decoder.") or k.startswith("conv2.")}

    Tl = 3
    z = (torch.randn(1, 4, Tl, 4, 3, generator=g) * 0.5).float()
    with torch.no_grad():
        ref = model.double().decode(z.double()).sample.numpy()
    inside = float(np.mean(np.abs(ref) < 1))
    ok = ref.shape == (1, 3, 1 + 4 * (Tl - 1), 32, 24) and inside > 0.5
    print("%s reference frames %s, %.0f%% inside (-1, 1) (the clamp leaves most values)" % (
        "ok  " if ok else "FAIL", ref.shape, 100 * inside))
    failed += not ok
    zm = np.asarray(CONFIG["latents_mean"], np.float32).reshape(1, -1, 1, 1, 1)
    zs = np.asarray(CONFIG["latents_std"], np.float32).reshape(1, -1, 1, 1, 1)
    latent = ((z.numpy() - zm) / zs).astype(np.float32)

    with tempfile.TemporaryDirectory() as tmp:
        ddir = os.path.join(tmp, "vae")
        os.makedirs(ddir)
        with open(os.path.join(ddir, "config.json"), "w") as f:
            json.dump(dict(model.config, _class_name="AutoencoderKLWan"), f)
        save_file(sd, os.path.join(ddir, "diffusion_pytorch_model.safetensors"))
        dfile = os.path.join(tmp, "vae_diffusers.safetensors")
        save_file(sd, dfile)
        ofile = os.path.join(tmp, "wan_2.1_vae.safetensors")
        save_file(orig, ofile)
        decfile = os.path.join(tmp, "decoder_only.safetensors")
        save_file(dec_orig, decfile)
        pfile = os.path.join(tmp, "combined.safetensors")  # a checkpoint holding the VAE under a prefix
        save_file({"first_stage_model." + k: v for k, v in orig.items()}, pfile)
        zpath = os.path.join(tmp, "z.safetensors")
        save_file({"z": z.numpy()}, zpath)
        lpath = os.path.join(tmp, "latent.safetensors")
        save_file({"latent": latent}, lpath)
        for label, w in [("diffusers dir", ddir), ("diffusers file", dfile), ("original names", ofile),
                         ("decoder-only original names", decfile), ("prefixed original names", pfile)]:
            outs = {}
            for chunk in [1, 2, Tl]:
                for inp in ([zpath, lpath] if w == ddir else [zpath]):
                    out = os.path.join(tmp, "out.safetensors")
                    r = run_tool(["decode"] + TOOL_CFG + ["--weights", w, "--input", inp, "--chunk", str(chunk),
                                                          "--out", out])
                    what = "%s chunk %s%s" % (label, chunk if chunk < Tl else "whole",
                                              ", normalised latent" if inp == lpath else "")
                    if r.returncode != 0:
                        print("FAIL %s: vae_tool exit %d: %s" % (what, r.returncode, r.stderr))
                        failed += 1
                        continue
                    x = load_file(out)["x"]
                    e = rel_err(x.astype(np.float64), ref) if x.shape == ref.shape else float("inf")
                    ok = e <= TOL
                    print("%s %s: frames %s rel err %.3g" % ("ok  " if ok else "FAIL", what, x.shape, e))
                    failed += not ok
                    if inp == zpath:
                        outs[chunk] = x
            if len(outs) == 3:
                ok = all(np.array_equal(outs[c], outs[Tl]) for c in outs)
                print("%s %s: chunks of 1 and 2 latent frames equal whole bit for bit" % (
                    "ok  " if ok else "FAIL", label))
                failed += not ok

        # a missing decoder tensor: refused by name
        miss = dict(sd)
        del miss["decoder.up_blocks.1.upsamplers.0.time_conv.bias"]
        mfile = os.path.join(tmp, "missing.safetensors")
        save_file(miss, mfile)
        r = run_tool(["decode"] + TOOL_CFG + ["--weights", mfile, "--input", zpath, "--out", os.path.join(tmp, "o")])
        ok = r.returncode != 0 and "decoder.up_blocks.1.upsamplers.0.time_conv.bias" in r.stderr
        print("%s missing tensor refused: %s" % ("ok  " if ok else "FAIL", r.stderr.strip()))
        failed += not ok
        failed += wan_widths(tmp)
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
