# test_wan_finetune_e2e.py — a Wan fine-tune end to end on the CPU, every link against
# diffusers / transformers:
#  - a tiny random WanTransformer3DModel (the tiny preset with text_dim 16, every
#    parameter perturbed) written by diffusers' save_pretrained into a directory, whose
#    safetensors holds exactly the model's state dict;
#  - a tiny random UMT5EncoderModel (d_model 16) and a word-level tokenizer of the sample
#    videos' caption words, built here and saved with save_pretrained (nothing is
#    downloaded); tools/encode_captions.py embeds the captions of
#    scripts/make_sample_videos.sh's manifest, each file equal to the encoder's output
#    for the caption's real tokens computed here;
#  - pipelines/precompute_latents.lua (text_dim 16) caches latents and embeddings; the
#    reader's first batch (tests/tools/cache_tool read) carries each clip's embedding as
#    the bf16 rounding of the encoder's output, zero past its length;
#  - pipelines/train_dit.lua fine-tunes 20 steps from the diffusers directory
#    (weights=DIR) with P = 2 partitions and S = 2 optimizer shards, a checkpoint at
#    step 20; step 1's loss equals diffusers' loss of the initial model on the first
#    batch (the reader's order, the noise and timesteps rebuilt from Philox as
#    tests/reference/test_train_reference.py documents them): training started from the
#    directory's numbers and saw the cached embeddings;
#  - the step-20 model.safetensors (original Wan names, metadata step 20) goes through
#    diffusers' own convert_wan_transformer_to_diffusers and loads into
#    WanTransformer3DModel with strict=True; every tensor moved off the initial model, and
#    by no more than 20 AdamW steps move it (3·lr a step: a run that started elsewhere
#    is far off);
#  - on a held sample (a cached clip's latents and embedding, fixed noise and sigmas) the
#    loaded model's forward equals vflow's forward from the same file (dit_tool
#    weights=) to a relative error <= 1e-5, and differs from the initial model's.
# vflow-test: labels=reference timeout=600
import csv
import json
import math
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
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, processors  # noqa: E402
from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel  # noqa: E402

from test_train_reference import Stream  # noqa: E402  (Philox streams written from runtime/philox.h)

SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
BUILD = os.environ.get("VFLOW_BUILD", os.path.join(SRC, "build"))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
DIT_TOOL = os.path.join(BUILD, "tools", "dit_tool")
CACHE_TOOL = os.path.join(BUILD, "tools", "cache_tool")
ENCODE = os.path.join(SRC, "tools", "encode_captions.py")
# the tiny preset (lua/model_dit.lua) with text = embeddings of width 16
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4,
              text_dim=16, freq_dim=64, ffn_dim=256, num_layers=4, cross_attn_norm=True, eps=1e-6, rope_max_seq_len=64)
CFG = ["preset=tiny", "text_dim=16", "text_emb=1"]
D, TL = 16, 32
STEPS, BATCH, LR, SEED = 20, 4, 1e-3, 0
FWD_TOL, LOSS_TOL = 1e-5, 1e-5
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)
    return cond


def sh(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def vflow_run(pipeline, run_dir, sets):
    args = [VFLOW, "run", os.path.join(SRC, "pipelines", pipeline), "--run-dir", run_dir]
    for s in sets:
        args += ["--set", s]
    return sh(args, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=400)


def make_dit(d):
    """The tiny Wan DiT, every parameter off its init, saved by save_pretrained."""
    torch.manual_seed(0)
    model = WanTransformer3DModel.from_config(CONFIG)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.05 * torch.randn(p.shape, generator=g))
    model.save_pretrained(d)
    return model.eval()


def make_encoder(d, captions):
    """A tiny random umT5 encoder of width D and a word-level tokenizer of the captions' words."""
    pre = pre_tokenizers.Whitespace()
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for c in captions:
        for w, _ in pre.pre_tokenize_str(c):
            vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    cfg = UMT5Config(vocab_size=len(vocab), d_model=D, d_kv=8, d_ff=32, num_layers=2, num_heads=2,
                     relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0)
    torch.manual_seed(0)
    m = UMT5EncoderModel(cfg).eval()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for _, p in m.named_parameters():  # norm gains start at exactly 1: move them
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.02 * torch.randn(p.shape, generator=g))
    # torch 1.13 cannot serialise this model's tied embedding as safetensors: a .bin
    m.save_pretrained(d, safe_serialization=False)
    tok.save_pretrained(d)
    return tok, m


def encode(tok, m, caption):
    """The encoder output for the caption's real tokens (the sample captions are clean)."""
    t = tok([caption], padding="max_length", max_length=TL, truncation=True, return_tensors="pt")
    with torch.no_grad():
        h = m(input_ids=t.input_ids, attention_mask=t.attention_mask).last_hidden_state[0]
    return h[: int(t.attention_mask.sum())].float()


def bf16(x):
    return x.to(torch.bfloat16).float()


def flow_pair(x0, step):
    """Training's rectified-flow pair for each sample of the global batch (models/dit.h)."""
    B, per = x0.shape[0], x0[0].size
    xt, tgt, ts = np.empty_like(x0), np.empty_like(x0), np.empty(B, np.float32)
    for j in range(B):
        w0 = Stream(SEED, step, j, "timestep").block(0)
        u1, u2 = (w0[0] + 0.5) / 4294967296.0, (w0[1] + 0.5) / 4294967296.0
        n0 = math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586476925286766559 * u2)
        t = np.float32(1.0 / (1.0 + math.exp(-n0)))
        noise = Stream(SEED, step, j, "noise").normals(per).reshape(x0[j].shape)
        xt[j] = (np.float32(1.0) - t) * x0[j] + t * noise
        tgt[j] = noise - x0[j]
        ts[j] = t
    return xt, tgt, ts


def diffusers_fwd(model, xt, ts, emb):
    with torch.no_grad():
        return model(hidden_states=torch.from_numpy(xt), timestep=torch.from_numpy(ts) * 1000,
                     encoder_hidden_states=torch.from_numpy(emb), return_dict=False)[0].numpy()


def main():
    for p in (VFLOW, DIT_TOOL, CACHE_TOOL):
        if not os.path.exists(p):
            print("missing %s (build the tools first)" % p)
            return 1
    tmp = tempfile.mkdtemp(prefix="vf_wan_e2e.")
    f = lambda n: os.path.join(tmp, n)  # noqa: E731

    # 1. the diffusers directory
    model0 = make_dit(f("wan_dir"))
    init = {k: v.detach().numpy().copy() for k, v in model0.state_dict().items()}
    saved = load_file(os.path.join(f("wan_dir"), "diffusion_pytorch_model.safetensors"))
    check(sorted(saved) == sorted(init) and all(np.array_equal(saved[k], init[k]) for k in init),
          "save_pretrained's file holds the model's state dict")

    # 2. caption embeddings and the latent cache
    r = sh(["bash", os.path.join(SRC, "scripts", "make_sample_videos.sh"), f("samples")])
    if not check(r.returncode == 0, "make_sample_videos: %s %s" % (r.stdout[-400:], r.stderr[-400:])):
        return 1
    with open(f("samples/manifest.csv"), newline="") as fh:
        captions = sorted({row["text"] for row in csv.DictReader(fh)})
    tok, enc = make_encoder(f("umt5"), captions)
    r = sh([sys.executable, ENCODE, "--model", f("umt5"), "--manifest", f("samples/manifest.csv"), "--out-dir",
            f("emb"), "--out-manifest", f("manifest_emb.csv"), "--text-len", str(TL)])
    if not check(r.returncode == 0, "encode_captions: %s %s" % (r.stdout, r.stderr)):
        return 1
    refs = {c: encode(tok, enc, c) for c in captions}
    with open(f("manifest_emb.csv"), newline="") as fh:
        rows = list(csv.DictReader(fh))
    check(len(rows) == 8, "8 sample videos in the manifest: %d" % len(rows))
    for row in rows:
        e = load_file(row["text_emb"])
        check(list(e) == ["text_emb"] and np.array_equal(e["text_emb"], refs[row["text"]].numpy()),
              "%s: the embedding is the encoder's output for its real tokens" % row["text_emb"])
    cache = f("cache.lmdb")
    r = vflow_run("precompute_latents.lua", f("run_pre"),
                  ["manifest=" + f("manifest_emb.csv"), "cache=" + cache, "frames=5", "size=64", "workers=1",
                   "clips_per_video=2", "text_dim=%d" % D, "text_len=%d" % TL, "tensorboard=false"])
    if not check(r.returncode == 0, "precompute: exit %d %s" % (r.returncode, r.stderr[-800:])):
        return 1
    os.makedirs(f("dump"))
    r = sh([CACHE_TOOL, "read", cache, "--batch", str(BATCH), "--seed", str(SEED), "--epochs", "1",
            "--text-len", str(TL), "--text-dim", str(D), "--dump", f("dump")])
    if not check(r.returncode == 0, "cache_tool read: " + r.stderr):
        return 1
    n_batches = len(os.listdir(f("dump")))
    caption_of = {}
    for line in sh([VFLOW, "cache", "ls", cache]).stdout.strip().split("\n")[1:]:
        cols = line.split("\t")
        caption_of[cols[0]] = cols[3]
    check(len(caption_of) == 16 and n_batches == 4, "16 clips (8 videos x 2) in 4 batches: %d, %d" % (
        len(caption_of), n_batches))
    first = os.path.join(f("dump"), sorted(os.listdir(f("dump")))[0])
    b1 = load_file(first)
    with open(first, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        keys = json.loads(fh.read(n))["__metadata__"]["keys"].split(",")
    x0, emb, lens = b1["latent"], b1["text_emb"], b1["text_len"]
    check(x0.shape == (BATCH, 4, 2, 8, 8) and emb.shape == (BATCH, TL, D), "batch shapes %r %r" % (
        x0.shape, emb.shape))
    for i, k in enumerate(keys):
        ref = refs.get(caption_of.get(k), torch.zeros(0, D))
        want = np.zeros((TL, D), np.float32)
        want[: ref.shape[0]] = bf16(ref).numpy()
        check(lens[i] == ref.shape[0] and np.array_equal(emb[i], want),
              "%s: the cached embedding is the bf16 encoder output, zero past %d rows" % (k, ref.shape[0]))

    # 3. fine-tune from the diffusers directory
    r = vflow_run("train_dit.lua", f("run"),
                  ["cache=" + cache, "text_dim=%d" % D, "weights=" + f("wan_dir"), "steps=%d" % STEPS,
                   "every=%d" % STEPS, "batch=%d" % BATCH, "stages=2", "micro_batches=2", "shards=2",
                   "lr=%g" % LR, "seed=%d" % SEED, "tensorboard=false"])
    if not check(r.returncode == 0, "training: exit %d %s" % (r.returncode, r.stderr[-800:])):
        return 1
    with open(f("run/metrics.jsonl")) as fh:
        steps = {x["step"]: x for x in map(json.loads, fh) if x.get("event") == "train_step"}
    check(sorted(steps) == list(range(1, STEPS + 1)), "train_step events for steps 1..%d: %r" % (STEPS, sorted(steps)))
    xt, tgt, ts = flow_pair(x0, 1)
    loss0 = float(((diffusers_fwd(model0, xt, ts, emb).astype(np.float64) - tgt) ** 2).mean())
    loss1 = steps.get(1, {}).get("loss", float("nan"))
    e_loss = abs(loss1 - loss0) / loss0
    check(e_loss <= LOSS_TOL, "step 1's loss %.9g vs diffusers' %.9g on the first batch (rel %.2e)" % (
        loss1, loss0, e_loss))

    # 4. the step-20 checkpoint in diffusers
    path = f("run/ckpt/step-%d/model.safetensors" % STEPS)
    if not check(os.path.exists(path), "no checkpoint at step %d" % STEPS):
        return 1
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        meta = json.loads(fh.read(n)).get("__metadata__", {})
    check(meta.get("step") == str(STEPS) and meta.get("preset") == "tiny", "metadata %r" % meta)
    sd = {k: torch.from_numpy(v) for k, v in load_file(path).items()}
    conv = convert_wan_transformer_to_diffusers(dict(sd))
    model = WanTransformer3DModel.from_config(CONFIG)
    try:
        model.load_state_dict(conv, strict=True)
    except RuntimeError as e:
        check(False, "the converted checkpoint does not load with strict=True: " + str(e)[:600])
        return 1
    model.eval()
    trained = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    # AdamW moves an element by lr·|m̂|/(√v̂ + eps) + lr·wd·|w| a step: a few lr at most
    delta = {k: float(np.abs(trained[k] - init[k]).max()) for k in init}
    moved = sum(d > 0 for d in delta.values())
    worst = max(delta, key=delta.get)
    check(moved == len(init), "%d of %d tensors moved off the initial model" % (moved, len(init)))
    check(delta[worst] <= 3 * STEPS * LR, "%s moved by %.3g: more than %d steps of lr %g" % (
        worst, delta[worst], STEPS, LR))

    # held sample: the first cached clip and the last, fixed noise and sigmas
    g = torch.Generator().manual_seed(5)
    hx0 = x0[[0, BATCH - 1]]
    noise = torch.randn(hx0.shape, generator=g).numpy()
    sig = np.array([0.375, 0.6875], np.float32)
    s = sig.reshape(2, 1, 1, 1, 1)
    hxt = ((1 - s) * hx0 + s * noise).astype(np.float32)
    hemb, hlen = emb[[0, BATCH - 1]].copy(), lens[[0, BATCH - 1]].copy()
    ref = diffusers_fwd(model, hxt, sig, hemb).ravel()
    ref0 = diffusers_fwd(model0, hxt, sig, hemb).ravel()
    for name, arr in (("xt", hxt), ("target", noise - hx0), ("t", sig), ("emb", hemb), ("len", hlen)):
        np.ascontiguousarray(arr).tofile(f(name + ".bin"))
    r = sh([DIT_TOOL, "grad"] + CFG + ["dims=2,%d,%d,%d" % hx0.shape[2:], "weights=" + path, "xt=" + f("xt.bin"),
                                       "t=" + f("t.bin"), "emb=" + f("emb.bin"), "len=" + f("len.bin"),
                                       "target=" + f("target.bin"), "pred=" + f("pred.bin")])
    if check(r.returncode == 0, "dit_tool grad: " + r.stderr):
        pred = np.fromfile(f("pred.bin"), dtype=np.float32)
        e = float(np.abs(pred - ref).max() / np.abs(ref).max())
        e0 = float(np.abs(pred - ref0).max() / np.abs(ref0).max())
        check(e <= FWD_TOL, "forward relative error %.3g > %g" % (e, FWD_TOL))
        check(e0 > 100 * FWD_TOL, "the trained forward is the initial model's (rel %.3g)" % e0)
        print("step 1 loss %.8f (diffusers %.8f, rel %.1e); step %d loss %.8f; %d tensors moved, at most %.3g (%s); "
              "held forward vs diffusers rel err %.2e, vs the initial model %.2e" % (
                  loss1, loss0, e_loss, STEPS, steps.get(STEPS, {}).get("loss", float("nan")), moved, delta[worst],
                  worst, e, e0))
    if fails:
        print("%d failures (kept %s)" % (len(fails), tmp))
        return 1
    shutil.rmtree(tmp)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
