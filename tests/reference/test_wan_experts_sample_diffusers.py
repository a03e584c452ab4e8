# test_wan_experts_sample_diffusers.py — sampling with two experts (Wan 2.2 A14B: a
# high-noise and a low-noise model switching at a boundary in t after the shift) in C
# (models/dit_sample.c through dit_tool sample low=… boundary=… guidance2=…) against
# diffusers 0.35.2's WanPipeline(transformer=high, transformer_2=low, boundary_ratio=b),
# 6 steps, f32 on the CPU, output_type="latent", the same initial latents and text
# embeddings. Two tiny text-to-video DiTs of one config, each with every parameter
# perturbed differently. Checked:
#  - the latents after 6 steps equal the pipeline's to a relative error <= 1e-4 for
#    boundaries that switch mid-run (0.875 and 0.6 at shift 3, so both experts run), with
#    a guidance per expert (guidance_scale with the high-noise expert, guidance_scale_2
#    with the low-noise one), with guidance_scale_2 left to default, and with
#    guidance_scale 1 (no negative branch at all, whatever guidance_scale_2 says);
#  - which expert each step runs (vf_dit_sample_is_low as dit_tool prints it) is the
#    pipeline's choice, recorded from the transformers' calls;
#  - the comparison can fail: the pipeline with the experts swapped, or with one expert
#    only, lies far outside the tolerance from vflow's latent;
#  - bad input (a boundary outside [0, 1], a low expert of another shape) exits 2 naming it.
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
from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
TOOL = os.path.join(BUILD, "tools", "dit_tool")
TL = 8
# head_dim 24: diffusers 0.35's rotary split agrees with Wan's for it (see test_wan_i2v_diffusers.py)
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=24, in_channels=4, out_channels=4,
              text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, eps=1e-6, rope_max_seq_len=32)
CFG = ["dim=48", "depth=2", "heads=2", "head_dim=24", "ffn=64", "z=4", "patch=1,2,2", "text_dim=32",
       "text_len=%d" % TL, "freq_dim=32", "text_emb=1"]
DIMS = (2, 3, 4, 6)
STEPS = 6
TOL = 1e-4
# (boundary, shift, guidance, guidance_2 or None: the pipeline's default, guidance_scale)
CASES = [(0.875, 3.0, 4.0, 3.0), (0.6, 3.0, 5.0, None), (0.875, 3.0, 1.0, 3.0), (0.9, 5.0, 3.5, 1.0)]

rel_max = wan_ref.rel_max


def run(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


def expert(seed):
    torch.manual_seed(0)
    return wan_ref.perturb(WanTransformer3DModel.from_config(CONFIG), seed=seed)


def pipe_run(high, low, boundary, shift, guidance, guidance_2, noise, pos, neg, H, W, T, calls=None):
    kw = dict(transformer_2=low, boundary_ratio=boundary) if low is not None else {}
    pipe = WanPipeline(tokenizer=None, text_encoder=None, transformer=high, vae=None,
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=shift), **kw)
    pipe.set_progress_bar_config(disable=True)
    hooks = []
    if calls is not None:
        for name, m in (("high", high), ("low", low)):
            hooks.append(m.register_forward_pre_hook(lambda mod, a, n=name: calls.append(n)))
    extra = {"guidance_scale_2": guidance_2} if guidance_2 is not None and low is not None else {}
    with torch.no_grad():
        out = pipe(prompt_embeds=pos, negative_prompt_embeds=neg if guidance > 1 else None, height=H * 8,
                   width=W * 8, num_frames=(T - 1) * 4 + 1, num_inference_steps=STEPS, guidance_scale=guidance,
                   latents=noise.clone(), output_type="latent", return_dict=False, **extra)[0]
    for h in hooks:
        h.remove()
    return out.float().numpy().ravel()


def main():
    if not os.path.exists(TOOL):
        print("missing %s (build the tools first)" % TOOL)
        return 1
    checks = wan_ref.Checks()
    check = checks.check

    high, low = expert(1), expert(5)
    B, T, H, W = DIMS
    gen = torch.Generator().manual_seed(2)
    noise = torch.randn(B, 4, T, H, W, generator=gen)
    pos = torch.randn(B, TL, 32, generator=gen)
    neg = torch.randn(B, TL, 32, generator=gen)
    with tempfile.TemporaryDirectory() as d:
        f = lambda n: os.path.join(d, n)  # noqa: E731
        for name, m in (("high", high), ("low", low)):
            save_file({k: v.detach().float().numpy().copy() for k, v in m.state_dict().items()}, f(name + ".st"))
        other = WanTransformer3DModel.from_config(dict(CONFIG, num_layers=1))
        save_file({k: v.detach().float().numpy().copy() for k, v in other.state_dict().items()}, f("other.st"))
        noise.numpy().tofile(f("noise.bin"))
        pos.numpy().tofile(f("pos.bin"))
        neg.numpy().tofile(f("neg.bin"))
        base = ["sample"] + CFG + ["dims=%d,%d,%d,%d" % DIMS, "weights=" + f("high.st"), "pos=" + f("pos.bin"),
                                   "neg=" + f("neg.bin"), "steps=%d" % STEPS, "noise=" + f("noise.bin"),
                                   "out=" + f("lat.bin")]

        for boundary, shift, guidance, guidance_2 in CASES:
            tag = "boundary %g shift %g guidance %g/%s" % (boundary, shift, guidance,
                                                          "%g" % guidance_2 if guidance_2 is not None else "default")
            calls = []
            ref = pipe_run(high, low, boundary, shift, guidance, guidance_2, noise, pos, neg, H, W, T, calls)
            per_step = 2 if guidance > 1 else 1
            ref_experts = calls[::per_step]
            args = base + ["shift=%r" % shift, "guidance=%r" % guidance, "low=" + f("low.st"),
                           "boundary=%r" % boundary] + (["guidance2=%r" % guidance_2] if guidance_2 is not None else [])
            r = run(args)
            if not check(r.returncode == 0, "%s: dit_tool sample: %s" % (tag, r.stderr.strip())):
                continue
            lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
            experts = lines.get("experts", "").split()
            check(experts == ref_experts, "%s: experts by step %s, the pipeline's %s" % (tag, experts, ref_experts))
            check("high" in ref_experts and "low" in ref_experts, "%s: the boundary does not switch mid-run" % tag)
            lat = np.fromfile(f("lat.bin"), dtype=np.float32)
            e = rel_max(lat, ref)
            print("%-44s experts %s, latent rel err %.2e" % (tag, " ".join(experts), e))
            check(e <= TOL, "%s: latent relative error %.3g > %g" % (tag, e, TOL))
            if boundary == CASES[0][0] and guidance == CASES[0][2]:
                for what, h2, l2 in (("the experts swapped", low, high), ("the high-noise expert only", high, None)):
                    broken = pipe_run(h2, l2, boundary, shift, guidance, guidance_2, noise, pos, neg, H, W, T)
                    eb = rel_max(lat, broken)
                    print("%-44s vflow vs pipeline with %s: rel err %.2e" % (tag, what, eb))
                    check(eb > 100 * TOL, "%s: a pipeline with %s is within %.3g of vflow" % (tag, what, eb))

        for args, want in ((["boundary=1.5"], "boundary"), (["boundary=nan"], "boundary"),
                           (["guidance2=-1"], "guidance of the low-noise expert")):
            # dit_tool takes a key's first value: the bad one goes first
            r = run(["sample"] + args + base[1:] + ["shift=3", "guidance=4", "low=" + f("low.st"), "boundary=0.875"])
            msg = r.stderr.strip()
            check(r.returncode == 2 and want in msg and len(msg.splitlines()) == 1,
                  "%s: exit %d, %r (expected exit 2 naming %r)" % (args, r.returncode, msg, want))
        r = run(base + ["shift=3", "guidance=4", "low=" + f("other.st"), "boundary=0.875"])
        check(r.returncode != 0 and "other.st" in r.stderr,
              "a low expert of another shape: exit %d, %r" % (r.returncode, r.stderr.strip()))
    return checks.verdict()


if __name__ == "__main__":
    sys.exit(main())
