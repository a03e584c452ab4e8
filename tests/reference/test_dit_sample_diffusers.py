# test_dit_sample_diffusers.py — the C sampler (models/dit_sample.c through dit_tool sample)
# against diffusers' own WanPipeline denoising loop: WanPipeline.__call__ with
# FlowMatchEulerDiscreteScheduler(shift=s) driving WanTransformer3DModel in f32 on the CPU,
# given the prompt / negative embeddings and the initial latents (output_type="latent", so
# no text encoder or VAE is involved). The model is a tiny Wan config (below) with every
# parameter perturbed, its weights handed to vflow as diffusers' safetensors file; the
# text embeddings have rows past each caption's length which vflow receives with the
# lengths (WanPipeline gets them zero-padded). Checked:
#  - the schedule dit_tool prints equals the scheduler's sigmas bit for bit, here and for
#    other step counts (1, 2, 13, 50) and shifts (0.5, 5, 7.3);
#  - the final latent after N = 6 steps equals the pipeline's to a relative error <= 1e-4
#    (max abs difference over max abs reference) for shift 3 and shift 1 with guidance
#    5.0 and a negative text, and for guidance 1.0 without one (WanPipeline then runs the
#    positive branch alone);
#  - the same seed twice gives bit-identical latents, another seed another latent, and
#    the seed's noise (written by noise_out=) is standard normal and, passed back as
#    noise=, gives the seeded latent bit for bit;
#  - bad input (steps 0, guidance NaN or negative, shift 0, embeddings of the wrong width,
#    guidance > 1 without a negative text) exits 2 with one line naming it.
# vflow-test: labels=reference timeout=600
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wan_ref  # noqa: E402  (before diffusers: shims torch 1.13)

wan_ref.reexec_in_ref_venv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel  # noqa: E402
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
STEPS = 6
TOL = 1e-4
# (shift, guidance, with a negative text)
CASES = [(3.0, 5.0, True), (1.0, 5.0, True), (3.0, 1.0, False)]


def rel_max(a, ref):
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


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
    model.eval()
    sd = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    failed = 0

    def check(cond, msg):
        nonlocal failed
        if not cond:
            failed += 1
            print("FAIL: " + msg)
        return cond

    B, T, H, W = DIMS
    gen = torch.Generator().manual_seed(2)
    noise = torch.randn(B, 4, T, H, W, generator=gen)
    pos_len = torch.tensor([5, TL], dtype=torch.int32)
    neg_len = torch.tensor([3, 6], dtype=torch.int32)
    pos = torch.randn(B, TL, 32, generator=gen)                    # vflow gets rows past each length too
    neg = torch.randn(B, TL, 32, generator=gen)

    def padded(e, lens):                                           # what WanPipeline feeds the model
        e = e.clone()
        for b in range(B):
            e[b, lens[b]:] = 0
        return e

    with tempfile.TemporaryDirectory() as d:
        f = lambda n: os.path.join(d, n)  # noqa: E731
        save_file(sd, f("w.safetensors"))
        noise.numpy().tofile(f("noise.bin"))
        pos.numpy().tofile(f("pos.bin"))
        neg.numpy().tofile(f("neg.bin"))
        pos_len.numpy().tofile(f("pos_len.bin"))
        neg_len.numpy().tofile(f("neg_len.bin"))
        pos[:, :, :16].contiguous().numpy().tofile(f("narrow.bin"))
        pos[:1].contiguous().numpy().tofile(f("pos1.bin"))
        base = ["sample"] + CFG + ["dims=%d,%d,%d,%d" % DIMS, "weights=" + f("w.safetensors"), "pos=" + f("pos.bin"),
                                   "pos_len=" + f("pos_len.bin"), "steps=%d" % STEPS]
        neg_args = ["neg=" + f("neg.bin"), "neg_len=" + f("neg_len.bin")]

        for shift, guidance, with_neg in CASES:
            tag = "shift %g guidance %g%s" % (shift, guidance, " + negative" if with_neg else "")
            sched = FlowMatchEulerDiscreteScheduler(shift=shift)
            pipe = WanPipeline(tokenizer=None, text_encoder=None, transformer=model, vae=None, scheduler=sched)
            pipe.set_progress_bar_config(disable=True)
            with torch.no_grad():
                ref = pipe(prompt_embeds=padded(pos, pos_len),
                           negative_prompt_embeds=padded(neg, neg_len) if with_neg else None,
                           height=H * 8, width=W * 8, num_frames=(T - 1) * 4 + 1, num_inference_steps=STEPS,
                           guidance_scale=guidance, latents=noise.clone(), output_type="latent",
                           return_dict=False)[0]
            ref = ref.float().numpy().ravel()
            r = run(base + (neg_args if with_neg else []) + ["shift=%r" % shift, "guidance=%r" % guidance,
                                                              "noise=" + f("noise.bin"), "out=" + f("lat.bin")])
            if not check(r.returncode == 0, "%s: dit_tool sample: %s" % (tag, r.stderr)):
                continue
            lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
            sig = np.array([float(x) for x in lines["sigmas"].split()], dtype=np.float32)
            ref_sig = sched.sigmas.numpy()
            check(sig.shape == ref_sig.shape and np.array_equal(sig, ref_sig),
                  "%s: sigmas %s, the scheduler's %s" % (tag, sig.tolist(), ref_sig.tolist()))
            lat = np.fromfile(f("lat.bin"), dtype=np.float32)
            e = rel_max(lat, ref)
            moved = rel_max(noise.numpy().ravel(), ref)
            print("%-32s latent rel err %.2e (noise vs final %.2f), sigmas %s, %s ms" % (
                tag, e, moved, " ".join("%.6g" % s for s in ref_sig), lines["ms"]))
            check(e <= TOL, "%s: latent relative error %.3g > %g" % (tag, e, TOL))
            check(moved > 0.1, "%s: the latent barely moved from the noise (%.3g)" % (tag, moved))

        # the schedule alone for other step counts and shifts (one step, a fractional shift)
        for steps, shift in ((1, 3.0), (2, 5.0), (50, 5.0), (13, 7.3), (4, 0.5)):
            sched = FlowMatchEulerDiscreteScheduler(shift=shift)
            sched.set_timesteps(steps)
            r = run(["sample"] + CFG + ["dims=1,1,2,2", "weights=" + f("w.safetensors"), "pos=" + f("pos1.bin"),
                                        "steps=%d" % steps, "shift=%r" % shift, "guidance=1", "out=" + f("x.bin")])
            if check(r.returncode == 0, "schedule N=%d shift %g: %s" % (steps, shift, r.stderr)):
                sig = np.array([float(x) for x in r.stdout.splitlines()[0].split()[1:]], dtype=np.float32)
                check(sig.shape == sched.sigmas.shape and np.array_equal(sig, sched.sigmas.numpy()),
                      "schedule N=%d shift %g: sigmas %s, the scheduler's %s" % (
                          steps, shift, sig.tolist(), sched.sigmas.tolist()))
        print("schedules N=1, 2, 50, 13, 4 (shift 3, 5, 5, 7.3, 0.5) checked")

        # seeded noise: deterministic, seed-dependent, standard normal, and the noise= path
        seeded = base + neg_args + ["shift=3", "guidance=5"]
        outs = []
        for i, seed in enumerate((7, 7, 8)):
            r = run(seeded + ["seed=%d" % seed, "out=" + f("s%d.bin" % i), "noise_out=" + f("n%d.bin" % i)])
            check(r.returncode == 0, "seed %d: dit_tool sample: %s" % (seed, r.stderr))
            outs.append(open(f("s%d.bin" % i), "rb").read() if r.returncode == 0 else b"")
        check(outs[0] == outs[1] and len(outs[0]) == 4 * B * 4 * T * H * W,
              "seed 7 twice: latents not bit-identical")
        check(outs[0] != outs[2], "seeds 7 and 8 give the same latent")
        z = np.fromfile(f("n0.bin"), dtype=np.float32)
        check(abs(z.mean()) < 0.15 and abs(z.std() - 1) < 0.15, "seed noise mean %.3f std %.3f" % (z.mean(), z.std()))
        r = run(seeded + ["noise=" + f("n0.bin"), "out=" + f("s3.bin")])
        check(r.returncode == 0 and open(f("s3.bin"), "rb").read() == outs[0],
              "the seed's noise passed as noise= does not give the seeded latent")
        print("seed 7 twice bit-identical: %s; noise mean %.3f std %.3f" % (outs[0] == outs[1], z.mean(), z.std()))

        # bad input: exit 2 and one line naming the field
        bad = [(["steps=0"], "steps"), (["guidance=nan"], "guidance"), (["guidance=-1"], "guidance"),
               (["shift=0"], "shift"), (["pos=" + f("narrow.bin")], "pos: text embeddings of width 16"),
               (["neg=" + f("narrow.bin")], "neg: text embeddings of width 16"),
               (["guidance=5"], "negative text")]
        for args, want in bad:
            extra = neg_args if not args[0].startswith("guidance=5") else []
            r = run(["sample"] + args + base[1:] + extra + ["out=" + f("x.bin")])
            msg = r.stderr.strip()
            check(r.returncode == 2 and want in msg and len(msg.splitlines()) == 1,
                  "%s: exit %d, %r (expected exit 2 naming %r)" % (args, r.returncode, msg, want))
    print("PASS" if not failed else "FAIL (%d)" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
