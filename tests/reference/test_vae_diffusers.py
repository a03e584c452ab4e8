# test_vae_diffusers.py — the C causal VAE encoder (models/vae.h) against diffusers'
# AutoencoderKLWan on the same weights, in each form users have them:
#  - a diffusers model directory (config.json + diffusion_pytorch_model.safetensors),
#  - the same state dict as one safetensors file (diffusers names),
#  - the original Wan names (ComfyUI's wan_2.1_vae.safetensors form), made here from
#    the diffusers names and checked to map back exactly through diffusers' own
#    convert_wan_vae_to_diffusers; also under a prefix ("first_stage_model.").
# The model is a tiny Wan config (below) with every parameter perturbed after init (norm
# gains and biases too). vflow encodes whole and in chunks of 1, 4 and 5 frames through
# build/tools/vae_tool; each latent mean must match AutoencoderKLWan.encode(x)'s
# latent_dist.mode() (float64) to a relative error <= 1e-5 (max abs difference over max
# abs reference). The per-channel normalisation of the directory's config.json must give
# (mode - latents_mean) / latents_std. A config that contradicts the preset and a
# missing tensor are refused naming the field / the tensor as the file spells it.
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


def original_name(k):
    """diffusers name -> original Wan name (encoder half), written from diffusers' naming of AutoencoderKLWan."""
    if k.startswith("quant_conv."):
        return "conv1." + k[len("quant_conv."):]
    for a, b in [("encoder.conv_in.", "encoder.conv1."), ("encoder.norm_out.", "encoder.head.0."),
                 ("encoder.conv_out.", "encoder.head.2."),
                 ("encoder.mid_block.resnets.0.", "encoder.middle.0."),
                 ("encoder.mid_block.attentions.0.", "encoder.middle.1."),
                 ("encoder.mid_block.resnets.1.", "encoder.middle.2."),
                 ("encoder.down_blocks.", "encoder.downsamples.")]:
        k = k.replace(a, b)
    for a, b in [(".norm1.", ".residual.0."), (".conv1.", ".residual.2."), (".norm2.", ".residual.3."),
                 (".conv2.", ".residual.6."), (".conv_shortcut.", ".shortcut.")]:
        if k.startswith("encoder.downsamples.") or k.startswith("encoder.middle."):
            k = k.replace(a, b)
    return k


def rel_err(a, ref):
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


def run_tool(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


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
    enc = {k: v for k, v in sd.items() if k.startswith("encoder.") or k.startswith("quant_conv.")}
    orig = {original_name(k): v for k, v in enc.items()}
    back = convert_wan_vae_to_diffusers({k: torch.from_numpy(v) for k, v in orig.items()})
    ok = set(back) == set(enc) and all(np.array_equal(back[k].numpy(), enc[k]) for k in enc)
    print("%s original names map back through convert_wan_vae_to_diffusers (%d tensors)" % (
        "ok  " if ok else "FAIL", len(enc)))
    failed += not ok

    x = (torch.rand(1, 3, 9, 32, 24, generator=g) * 2 - 1).float()
    with torch.no_grad():
        ref = model.double().encode(x.double()).latent_dist.mode().numpy()
    z = np.asarray(CONFIG["latents_mean"]).reshape(1, -1, 1, 1, 1)
    ref_norm = (ref - z) / np.asarray(CONFIG["latents_std"]).reshape(1, -1, 1, 1, 1)

    with tempfile.TemporaryDirectory() as tmp:
        ddir = os.path.join(tmp, "vae")
        os.makedirs(ddir)
        with open(os.path.join(ddir, "config.json"), "w") as f:
            json.dump(dict(model.config, _class_name="AutoencoderKLWan"), f)
        save_file(sd, os.path.join(ddir, "diffusion_pytorch_model.safetensors"))
        dfile = os.path.join(tmp, "vae_diffusers.safetensors")
        save_file(sd, dfile)
        ofile = os.path.join(tmp, "wan_2.1_vae.safetensors")
        save_file(dict(orig, **{"decoder.conv1.weight": sd["decoder.conv_in.weight"]}), ofile)
        xpath = os.path.join(tmp, "x.safetensors")
        save_file({"x": x.numpy()}, xpath)
        pfile = os.path.join(tmp, "combined.safetensors")  # a checkpoint holding the VAE under a prefix
        save_file({"first_stage_model." + k: v for k, v in orig.items()}, pfile)
        for label, w in [("diffusers dir", ddir), ("diffusers file", dfile), ("original names", ofile),
                         ("prefixed original names", pfile)]:
            for chunk in [0, 1, 4, 5]:
                out = os.path.join(tmp, "out.safetensors")
                r = run_tool(["encode"] + TOOL_CFG + ["--weights", w, "--input", xpath, "--chunk", str(chunk),
                                                      "--out", out])
                if r.returncode != 0:
                    print("FAIL %s chunk %d: vae_tool exit %d: %s" % (label, chunk, r.returncode, r.stderr))
                    failed += 1
                    continue
                o = load_file(out)
                e = rel_err(o["mean"].astype(np.float64), ref) if o["mean"].shape == ref.shape else float("inf")
                ok = e <= TOL
                line = "%s %s chunk %s: mean %s rel err %.3g" % ("ok  " if ok else "FAIL", label, chunk or "whole",
                                                                 o["mean"].shape, e)
                if w == ddir:  # the directory's config.json carries the normalisation
                    en = rel_err(o["latent"].astype(np.float64), ref_norm) if "latent" in o else float("inf")
                    ok = ok and en <= TOL
                    line += ", normalised latent rel err %.3g" % en
                print(("ok  " if ok else "FAIL") + line[4:])
                failed += not ok

        # a config.json that contradicts the preset, a missing tensor: refused by name
        bad = os.path.join(tmp, "bad")
        os.makedirs(bad)
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump(dict(model.config, z_dim=8), f)
        save_file(sd, os.path.join(bad, "diffusion_pytorch_model.safetensors"))
        r = run_tool(["encode"] + TOOL_CFG + ["--weights", bad, "--input", xpath, "--out", os.path.join(tmp, "o")])
        ok = r.returncode != 0 and "config.json" in r.stderr and "z_dim 8" in r.stderr
        print("%s contradicting config refused: %s" % ("ok  " if ok else "FAIL", r.stderr.strip()))
        failed += not ok
        miss = dict(sd)
        del miss["encoder.mid_block.attentions.0.proj.bias"]
        mfile = os.path.join(tmp, "missing.safetensors")
        save_file(miss, mfile)
        r = run_tool(["encode"] + TOOL_CFG + ["--weights", mfile, "--input", xpath, "--out", os.path.join(tmp, "o")])
        ok = r.returncode != 0 and "encoder.mid_block.attentions.0.proj.bias" in r.stderr
        print("%s missing tensor refused: %s" % ("ok  " if ok else "FAIL", r.stderr.strip()))
        failed += not ok
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
