# test_vae22_diffusers.py — the C causal VAE as Wan 2.2's (models/vae.h: residual levels
# with the average-down / duplicate-up shortcuts, pixel patchify 2, a decoder base width
# of its own) against diffusers 0.35.2's AutoencoderKLWan(is_residual=True, patch_size=2,
# decoder_base_dim=…) on the same weights, encode and decode, in each form users have
# them:
#  - a diffusers model directory (config.json + diffusion_pytorch_model.safetensors),
#  - the same state dict as one safetensors file (diffusers names),
#  - the original names of wan/modules/vae2_2.py (Wan2.2_VAE.pth, ComfyUI's
#    wan2.2_vae.safetensors), made here from diffusers' names by the inverse of
#    diffusers' convert_vae_22 (scripts/convert_wan_to_diffusers.py), also under a
#    prefix ("first_stage_model.").
# The model is a tiny Wan 2.2 config (below) with every parameter perturbed after init
# (norm gains and biases too). Checked:
#  - encode: vflow encodes whole and in chunks of 1, 4 and 5 frames through
#    build/tools/vae_tool; each latent mean must match AutoencoderKLWan.encode(x)'s
#    latent_dist.mode() (float64) to a relative error <= 1e-5 (max abs difference over
#    max abs reference), and the chunkings must agree bit for bit; the directory's
#    latents_mean/latents_std (z values each) give the normalised latent;
#  - decode: one latent frame per call (as Wan does), two, and whole; the frames must
#    match AutoencoderKLWan.decode(z) (float64, clamped) to the same tolerance and the
#    chunkings agree bit for bit;
#  - the shortcuts matter: the same model without them (is_residual's avg/dup paths
#    zeroed by giving diffusers a copy whose shortcut returns zeros) differs from the
#    reference by far more than the tolerance, so a missing shortcut cannot pass;
#  - a config.json that says is_residual false is refused naming the key.
# vflow-test: labels=reference timeout=900
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wan_ref  # noqa: E402  (before diffusers: shims torch 1.13)

wan_ref.use_diffusers_035()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import AutoencoderKLWan  # noqa: E402
from diffusers.models.autoencoders import autoencoder_kl_wan as akw  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
TOOL = os.path.join(BUILD, "tools", "vae_tool")
TOL = 1e-5
Z = 8
CONFIG = dict(base_dim=8, decoder_base_dim=16, z_dim=Z, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
              temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12,
              out_channels=12, scale_factor_temporal=4, scale_factor_spatial=16,
              latents_mean=[0.25, -0.5, 1.0, 0.125, 0.0, -0.25, 0.5, 0.75],
              latents_std=[2.0, 0.75, 1.5, 3.0, 1.25, 0.5, 1.0, 2.5])
TOOL_CFG = ["--dim", "8", "--dec-dim", "16", "--mult", "1,2,4,4", "--res", "2", "--tdown", "0,1,1", "--z", str(Z),
            "--eps", "1e-12", "--residual", "1", "--patch", "2"]
RES = CONFIG["num_res_blocks"]
RESNET = [("norm1.", "residual.0."), ("conv1.", "residual.2."), ("norm2.", "residual.3."),
          ("conv2.", "residual.6."), ("conv_shortcut.", "shortcut.")]


def original_name(k):
    """diffusers name -> wan/modules/vae2_2.py's name: the inverse of diffusers' convert_vae_22."""
    for a, b in [("quant_conv.", "conv1."), ("post_quant_conv.", "conv2.")]:
        if k.startswith(a):
            return b + k[len(a):]
    for half in ["encoder", "decoder"]:
        for a, b in [("conv_in.", "conv1."), ("norm_out.", "head.0."), ("conv_out.", "head.2."),
                     ("mid_block.resnets.0.", "middle.0."), ("mid_block.attentions.0.", "middle.1."),
                     ("mid_block.resnets.1.", "middle.2.")]:
            if k.startswith(half + "." + a):
                k = half + "." + b + k[len(half + "." + a):]
    parts = k.split(".")
    if parts[1] in ("down_blocks", "up_blocks"):
        what = "downsamples" if parts[1] == "down_blocks" else "upsamples"
        if parts[3] in ("downsampler", "upsampler"):
            j, rest = RES + (what == "upsamples"), parts[4:]
        else:
            j, rest = int(parts[4]), parts[5:]
        k = "%s.%s.%s.%s.%d.%s" % (parts[0], what, parts[2], what, j, ".".join(rest))
    if k.split(".")[1] in ("downsamples", "upsamples", "middle"):
        parts = k.split(".")
        n = 5 if parts[1] != "middle" else 3
        tail = ".".join(parts[n:])
        for a, b in RESNET:
            if tail.startswith(a):
                k = ".".join(parts[:n]) + "." + b + tail[len(a):]
    return k


rel_err = wan_ref.rel_max


def run_tool(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


def check_forms(label, forms, cmd, inp, ref, chunks, whole, tmp, extra=None):
    """Runs vae_tool cmd on every weights form and chunking; returns the failures."""
    failed = 0
    key = "mean" if cmd == "encode" else "x"
    for name, w in forms:
        outs = {}
        for chunk in chunks:
            out = os.path.join(tmp, "out.safetensors")
            r = run_tool([cmd] + TOOL_CFG + ["--weights", w, "--input", inp, "--chunk", str(chunk), "--out", out])
            what = "%s %s chunk %s" % (label, name, chunk if chunk != whole else "whole")
            if r.returncode != 0:
                print("FAIL %s: vae_tool exit %d: %s" % (what, r.returncode, r.stderr))
                failed += 1
                continue
            o = load_file(out)
            y = o[key]
            e = rel_err(y.astype(np.float64), ref) if y.shape == ref.shape else float("inf")
            ok = e <= TOL
            line = "%s: %s %s rel err %.3g" % (what, key, y.shape, e)
            if extra and w == forms[0][1]:
                ok2, more = extra(o)
                ok, line = ok and ok2, line + more
            print("%s %s" % ("ok  " if ok else "FAIL", line))
            failed += not ok
            outs[chunk] = y
        if len(outs) == len(chunks):
            ok = all(np.array_equal(outs[c], outs[whole]) for c in outs)
            print("%s %s %s: every chunking equals whole bit for bit" % ("ok  " if ok else "FAIL", label, name))
            failed += not ok
    return failed


def main():
    if not os.path.exists(TOOL):
        print("missing %s (build the tools first)" % TOOL)
        return 1
    torch.manual_seed(0)
    model = wan_ref.perturb(AutoencoderKLWan.from_config(CONFIG)).eval()
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    orig = {original_name(k): v for k, v in sd.items()}
    failed = 0
    ok = len(orig) == len(sd)
    print("%s %d tensors, %d distinct original names" % ("ok  " if ok else "FAIL", len(sd), len(orig)))
    failed += not ok

    g = torch.Generator().manual_seed(2)
    T = 9
    x = (torch.rand(1, 3, T, 32, 48, generator=g) * 2 - 1).float()
    Tl = 3
    z = (torch.randn(1, Z, Tl, 2, 3, generator=g) * 0.5).float()
    with torch.no_grad():
        m64 = model.double()
        ref_enc = m64.encode(x.double()).latent_dist.mode().numpy()
        ref_dec = m64.decode(z.double()).sample.numpy()
        # the shortcuts are part of what is checked: without them the reference moves
        keep = akw.AvgDown3D.forward, akw.DupUp3D.forward
        akw.AvgDown3D.forward = lambda self, t: torch.zeros_like(keep[0](self, t))
        akw.DupUp3D.forward = lambda self, t, first_chunk=False: torch.zeros_like(keep[1](self, t, first_chunk))
        no_enc = m64.encode(x.double()).latent_dist.mode().numpy()
        no_dec = m64.decode(z.double()).sample.numpy()
        akw.AvgDown3D.forward, akw.DupUp3D.forward = keep
    ok = ref_enc.shape == (1, Z, 3, 2, 3) and ref_dec.shape == (1, 3, 1 + 4 * (Tl - 1), 32, 48)
    print("%s reference shapes: latent %s, frames %s" % ("ok  " if ok else "FAIL", ref_enc.shape, ref_dec.shape))
    failed += not ok
    de, dd = rel_err(no_enc, ref_enc), rel_err(no_dec, ref_dec)
    ok = de > 1000 * TOL and dd > 1000 * TOL
    print("%s without the shortcuts diffusers moves by %.3g (encode) and %.3g (decode)" % (
        "ok  " if ok else "FAIL", de, dd))
    failed += not ok
    zm = np.asarray(CONFIG["latents_mean"]).reshape(1, -1, 1, 1, 1)
    zs = np.asarray(CONFIG["latents_std"]).reshape(1, -1, 1, 1, 1)
    ref_norm = (ref_enc - zm) / zs

    def normalised(o):
        en = rel_err(o["latent"].astype(np.float64), ref_norm) if "latent" in o else float("inf")
        return en <= TOL, ", normalised latent rel err %.3g" % en

    with tempfile.TemporaryDirectory() as tmp:
        ddir = os.path.join(tmp, "vae")
        os.makedirs(ddir)
        with open(os.path.join(ddir, "config.json"), "w") as f:
            json.dump(dict(model.config, _class_name="AutoencoderKLWan"), f)
        save_file(sd, os.path.join(ddir, "diffusion_pytorch_model.safetensors"))
        dfile = os.path.join(tmp, "vae_diffusers.safetensors")
        save_file(sd, dfile)
        ofile = os.path.join(tmp, "wan2.2_vae.safetensors")
        save_file(orig, ofile)
        pfile = os.path.join(tmp, "combined.safetensors")
        save_file({"first_stage_model." + k: v for k, v in orig.items()}, pfile)
        xpath = os.path.join(tmp, "x.safetensors")
        save_file({"x": x.numpy()}, xpath)
        zpath = os.path.join(tmp, "z.safetensors")
        save_file({"z": z.numpy()}, zpath)
        forms = [("diffusers dir", ddir), ("diffusers file", dfile), ("original names", ofile),
                 ("prefixed original names", pfile)]
        failed += check_forms("encode", forms, "encode", xpath, ref_enc, [0, 1, 4, 5], 0, tmp, normalised)
        failed += check_forms("decode", forms, "decode", zpath, ref_dec, [1, 2, Tl], Tl, tmp)

        bad = os.path.join(tmp, "bad")
        os.makedirs(bad)
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump(dict(model.config, is_residual=False), f)
        save_file(sd, os.path.join(bad, "diffusion_pytorch_model.safetensors"))
        r = run_tool(["encode"] + TOOL_CFG + ["--weights", bad, "--input", xpath, "--out", os.path.join(tmp, "o")])
        ok = r.returncode != 0 and "config.json" in r.stderr and "is_residual" in r.stderr
        print("%s contradicting config refused: %s" % ("ok  " if ok else "FAIL", r.stderr.strip()))
        failed += not ok
    print("FAILED %d" % failed if failed else "all ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
