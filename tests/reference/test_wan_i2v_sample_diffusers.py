# test_wan_i2v_sample_diffusers.py — image-to-video sampling in C (models/dit_i2v.c builds
# the conditioning, models/dit_sample.c runs the loop, through dit_tool sample image=…)
# against diffusers 0.35.2's WanImageToVideoPipeline on the same weights, 6 steps, f32 on
# the CPU, output_type="latent", the same initial latents. Tiny configs with every
# parameter perturbed: a VAE of vflow's "tiny" preset shape (z 4, base 8, mults 1,2,2,2,
# one residual block, per-channel latents_mean/std off 0/1) as a diffusers directory, and
# a DiT taking in_dim 12 = 4 noisy + 4 mask + 4 y channels, as
#  - the Wan 2.1 I2V layout (image_dim, CLIP features handed to the pipeline as what its
#    encode_image returns, to vflow as img=), and
#  - the Wan 2.2 I2V-A14B layout (no image branch).
# The image is a random RGB PNG of the video's size (the pipeline's resize is then the
# identity). Checked:
#  - the conditioning vflow builds (mask ‖ y) equals the `condition` prepare_latents
#    returns, relative error <= 1e-5 (max abs difference over max abs reference);
#  - the final latents after 6 steps (shift 3, guidance 5 with a negative text; shift 5,
#    guidance 1 positive alone) equal the pipeline's to <= 1e-4;
#  - Wan 2.2 I2V-A14B's two experts (WanImageToVideoPipeline(transformer_2=…,
#    boundary_ratio=0.9), guidance 3.5 / 2) switching mid-run: final latents to <= 1e-4;
#  - the checks can fail: the pipeline run on a condition with the y part zeroed, or with
#    the mask on every frame, lies far outside the tolerance from vflow's latent.
# vflow-test: labels=reference timeout=600
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
from diffusers import (AutoencoderKLWan, FlowMatchEulerDiscreteScheduler,  # noqa: E402
                       WanImageToVideoPipeline, WanTransformer3DModel)
from PIL import Image  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
TOOL = os.path.join(BUILD, "tools", "dit_tool")
TL, LI, DI = 512, 7, 12      # text rows (diffusers' image attention takes the last 512 as text), image rows, width
VAE = dict(base_dim=8, z_dim=4, dim_mult=[1, 2, 2, 2], num_res_blocks=1, temperal_downsample=[False, True, True],
           latents_mean=[0.25, -0.5, 1.0, 0.125], latents_std=[2.0, 0.75, 1.5, 3.0])
# head_dim 24: diffusers 0.35's rotary split agrees with Wan's for it (see test_wan_i2v_diffusers.py)
BASE = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=24, in_channels=12, out_channels=4,
            text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, eps=1e-6, rope_max_seq_len=32)
CFG = ["dim=48", "depth=2", "heads=2", "head_dim=24", "ffn=64", "z=4", "patch=1,2,2", "text_dim=32",
       "text_len=%d" % TL, "freq_dim=32", "text_emb=1", "in_dim=12"]
MODELS = [("wan2.1-i2v", dict(BASE, image_dim=DI, added_kv_proj_dim=48), CFG + ["img_dim=%d" % DI, "img_len=%d" % LI]),
          ("wan2.2-i2v-a14b", BASE, CFG)]
DIMS = (2, 3, 4, 6)          # B, latent T, h, w: 9 frames of 32x48
STEPS = 6
COND_TOL, TOL = 1e-5, 1e-4
CASES = [(3.0, 5.0), (5.0, 1.0)]  # (shift, guidance); guidance 1 runs the positive text alone

rel_max = wan_ref.rel_max


def run(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


def perturbed_vae():
    torch.manual_seed(0)
    return wan_ref.perturb(AutoencoderKLWan.from_config(VAE), seed=3)


def pipeline(model, vae, shift, feats, low=None, boundary=None):
    kw = dict(transformer_2=low, boundary_ratio=boundary) if low is not None else {}
    pipe = WanImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=vae,
                                   scheduler=FlowMatchEulerDiscreteScheduler(shift=shift), transformer=model, **kw)
    pipe.set_progress_bar_config(disable=True)
    pipe.encode_image = lambda image, device: feats  # the features a CLIPVisionModel would give
    captured = {}
    prepare = pipe.prepare_latents

    def keep(*a, **k):
        out = prepare(*a, **k)
        captured["condition"] = out[1]
        if "edit" in captured:
            out = (out[0], captured["edit"](out[1].clone()))
        return out

    pipe.prepare_latents = keep
    return pipe, captured


def main():
    if not os.path.exists(TOOL):
        print("missing %s (build the tools first)" % TOOL)
        return 1
    checks = wan_ref.Checks()
    check = checks.check

    B, T, H, W = DIMS
    gen = torch.Generator().manual_seed(2)
    noise = torch.randn(B, 4, T, H, W, generator=gen)
    pos = torch.randn(B, TL, 32, generator=gen)
    neg = torch.randn(B, TL, 32, generator=gen)
    pos[0, 9:] = 0                                 # a short caption, zero-padded as the pipeline pads
    feats = torch.randn(1, LI, DI, generator=gen)
    pixels = (torch.rand(H * 8, W * 8, 3, generator=gen) * 255).round().to(torch.uint8).numpy()
    vae = perturbed_vae()
    vsd = {k: v.detach().float().numpy().copy() for k, v in vae.state_dict().items()}

    with tempfile.TemporaryDirectory() as d:
        f = lambda n: os.path.join(d, n)  # noqa: E731
        os.makedirs(f("vae"))
        with open(f("vae/config.json"), "w") as fh:
            json.dump(dict(vae.config, _class_name="AutoencoderKLWan"), fh)
        save_file(vsd, f("vae/diffusion_pytorch_model.safetensors"))
        Image.fromarray(pixels).save(f("image.png"))
        image = Image.open(f("image.png")).convert("RGB")
        noise.numpy().tofile(f("noise.bin"))
        pos.numpy().tofile(f("pos.bin"))
        neg.numpy().tofile(f("neg.bin"))
        feats.repeat(B, 1, 1).numpy().tofile(f("img.bin"))

        for tag, config, cfg in MODELS:
            torch.manual_seed(0)
            model = wan_ref.perturb(WanTransformer3DModel.from_config(config))
            save_file({k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()},
                      f("w.safetensors"))
            clip = ["img=" + f("img.bin")] if "image_dim" in config else []
            for shift, guidance in CASES:
                name = "%s shift %g guidance %g" % (tag, shift, guidance)
                pipe, captured = pipeline(model, vae, shift, feats)
                call = dict(image=image, prompt_embeds=pos, negative_prompt_embeds=neg if guidance > 1 else None,
                            height=H * 8, width=W * 8, num_frames=(T - 1) * 4 + 1, num_inference_steps=STEPS,
                            guidance_scale=guidance, output_type="latent", return_dict=False)
                with torch.no_grad():
                    ref = pipe(latents=noise.clone(), **call)[0].float().numpy().ravel()
                cond_ref = captured["condition"][0].float().numpy().ravel()
                r = run(["sample"] + cfg + clip + [
                    "dims=%d,%d,%d,%d" % DIMS, "weights=" + f("w.safetensors"), "pos=" + f("pos.bin"),
                    "steps=%d" % STEPS, "shift=%r" % shift, "guidance=%r" % guidance, "noise=" + f("noise.bin"),
                    "image=" + f("image.png"), "vae=" + f("vae"), "cond_out=" + f("cond.bin"),
                    "out=" + f("lat.bin")] + (["neg=" + f("neg.bin")] if guidance > 1 else []))
                if not check(r.returncode == 0, "%s: dit_tool sample: %s" % (name, r.stderr.strip())):
                    continue
                cond = np.fromfile(f("cond.bin"), dtype=np.float32)
                ec = rel_max(cond, cond_ref) if cond.shape == cond_ref.shape else float("inf")
                lat = np.fromfile(f("lat.bin"), dtype=np.float32)
                e = rel_max(lat, ref)
                moved = rel_max(noise.numpy().ravel(), ref)
                print("%-40s condition rel err %.2e, latent rel err %.2e (noise vs final %.2f)" % (name, ec, e, moved))
                check(ec <= COND_TOL, "%s: condition (mask ‖ y) relative error %.3g > %g" % (name, ec, COND_TOL))
                check(e <= TOL, "%s: latent relative error %.3g > %g" % (name, e, TOL))
                check(moved > 0.1, "%s: the latent barely moved from the noise (%.3g)" % (name, moved))
                if shift != CASES[0][0]:
                    continue
                # the comparison sees what it checks: a broken condition moves the reference far
                for what, edit in (("y zeroed", lambda c: torch.cat([c[:, :4], 0 * c[:, 4:]], 1)),
                                   ("mask on every frame", lambda c: torch.cat([0 * c[:, :4] + 1, c[:, 4:]], 1))):
                    pipe, captured = pipeline(model, vae, shift, feats)
                    captured["edit"] = edit
                    with torch.no_grad():
                        broken = pipe(latents=noise.clone(), **call)[0].float().numpy().ravel()
                    eb = rel_max(lat, broken)
                    print("%-40s vflow vs pipeline with %s: rel err %.2e" % (name, what, eb))
                    check(eb > 100 * TOL, "%s: a pipeline with %s is within %.3g of vflow" % (name, what, eb))
        # Wan 2.2 I2V-A14B: two experts of the Wan 2.2 layout switching at boundary 0.9 (shift 5,
        # guidance 3.5 high-noise, 2 low-noise), WanImageToVideoPipeline(transformer_2=, boundary_ratio=)
        torch.manual_seed(0)
        high = wan_ref.perturb(WanTransformer3DModel.from_config(BASE))
        low = wan_ref.perturb(WanTransformer3DModel.from_config(BASE), seed=7)
        for name, m in (("high.st", high), ("low.st", low)):
            save_file({k: v.detach().float().numpy().copy() for k, v in m.state_dict().items()}, f(name))
        pipe, _ = pipeline(high, vae, 5.0, None, low=low, boundary=0.9)
        with torch.no_grad():
            ref = pipe(image=image, prompt_embeds=pos, negative_prompt_embeds=neg, height=H * 8, width=W * 8,
                       num_frames=(T - 1) * 4 + 1, num_inference_steps=STEPS, guidance_scale=3.5,
                       guidance_scale_2=2.0, latents=noise.clone(), output_type="latent",
                       return_dict=False)[0].float().numpy().ravel()
        r = run(["sample"] + CFG + ["dims=%d,%d,%d,%d" % DIMS, "weights=" + f("high.st"), "pos=" + f("pos.bin"),
                                    "neg=" + f("neg.bin"), "steps=%d" % STEPS, "shift=5", "guidance=3.5",
                                    "noise=" + f("noise.bin"), "image=" + f("image.png"), "vae=" + f("vae"),
                                    "low=" + f("low.st"), "boundary=0.9", "guidance2=2", "out=" + f("lat.bin")])
        if check(r.returncode == 0, "two experts: dit_tool sample: %s" % r.stderr.strip()):
            lat = np.fromfile(f("lat.bin"), dtype=np.float32)
            experts = dict(line.split(" ", 1) for line in r.stdout.splitlines()).get("experts", "")
            e = rel_max(lat, ref)
            print("%-40s experts %s, latent rel err %.2e" % ("wan2.2-i2v-a14b two experts", experts, e))
            check("high" in experts and "low" in experts, "two experts: no switch mid-run: %s" % experts)
            check(e <= TOL, "two experts: latent relative error %.3g > %g" % (e, TOL))
    return checks.verdict()


if __name__ == "__main__":
    sys.exit(main())
