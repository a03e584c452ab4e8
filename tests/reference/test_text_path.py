# test_text_path.py — caption text embeddings from the encoder to what latent_reader
# emits, against transformers' UMT5EncoderModel:
#  - a tiny random UMT5EncoderModel (vocab 256, d_model 32, every parameter perturbed)
#    and a word-level PreTrainedTokenizerFast built here (nothing is downloaded), both
#    saved with save_pretrained;
#  - tools/encode_captions.py writes one safetensors per distinct caption and a manifest
#    with the text_emb column; each file equals the encoder's last hidden state of the
#    caption's real tokens, computed here independently;
#  - pipelines/precompute_latents.lua (decode -> vae_encode -> latent_cache) stores
#    them: one text record per distinct caption (python-lmdb), entries referencing them;
#  - latent_reader (build/tools/cache_tool read --dump) emits text_emb (B, text_len, D)
#    f32 equal bit for bit to the bf16 rounding (round to nearest even, torch's
#    .to(bfloat16)) of the encoder output, rows past each caption's length zero, and
#    text_len = that length;
#  - a rerun skips every clip before the VAE; a changed caption (a new embedding) gives
#    its clips new entries and one new text record;
#  - bad input: a manifest with the column but text_dim = 0 is exit 2 before any
#    decoding; an embedding of another width is quarantined naming file and tensor;
#    encode_captions.py without a model directory is one line, exit 2.
# vflow-test: labels=reference timeout=600
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wan_ref  # noqa: E402  (before transformers: shims torch 1.13)

wan_ref.reexec_in_ref_venv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, processors  # noqa: E402
from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel  # noqa: E402

SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
BUILD = os.environ.get("VFLOW_BUILD", os.path.join(SRC, "build"))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
CACHE_TOOL = os.path.join(BUILD, "tools", "cache_tool")
MKVIDEO = os.path.join(BUILD, "tools", "mkvideo")
TOOL = os.path.join(SRC, "tools", "encode_captions.py")
PIPELINE = os.path.join(SRC, "pipelines", "precompute_latents.lua")
D, TL = 32, 12
WORDS = "a the cat dog runs jumps over under red blue small big river forest at night".split()
# the last is "blue forest" after diffusers' prompt_clean (HTML entity, whitespace)
CAPTIONS = ["a red cat runs", "the big dog jumps over the small river at night", "a red cat runs",
            "  blue&#32;&amp;#32;forest "]
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)
    return cond


def sh(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def make_encoder(d):
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for w in WORDS:
        vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    cfg = UMT5Config(vocab_size=256, d_model=D, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                     relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0)
    torch.manual_seed(0)
    m = UMT5EncoderModel(cfg).eval()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for _, p in m.named_parameters():  # norm gains start at exactly 1: move them
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.02 * torch.randn(p.shape, generator=g))
    # torch 1.13 + safetensors 0.8 cannot serialise this model's tied embedding: a .bin
    m.save_pretrained(d, safe_serialization=False)
    tok.save_pretrained(d)
    return tok, m


def wan_prompt_clean():
    """diffusers' own prompt_clean, taken from the installed pipeline_wan.py (whose module
    does not import on torch 1.13); ftfy.fix_text is the identity when ftfy is absent, as
    in tools/encode_captions.py."""
    import ast
    import html
    import re
    import types

    import diffusers
    path = os.path.join(os.path.dirname(diffusers.__file__), "pipelines", "wan", "pipeline_wan.py")
    tree = ast.parse(open(path).read())
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and
           n.name in ("basic_clean", "whitespace_clean", "prompt_clean")]
    try:
        import ftfy
    except ImportError:
        ftfy = types.SimpleNamespace(fix_text=lambda t: t)
    ns = {"html": html, "re": re, "ftfy": ftfy}
    exec(compile(ast.Module(body=fns, type_ignores=[]), path, "exec"), ns)
    return ns["prompt_clean"]


def reference(tok, m, caption):
    """The encoder output for the caption's real tokens (Wan's pipeline, before padding)."""
    caption = wan_prompt_clean()(caption)
    t = tok([caption], padding="max_length", max_length=TL, truncation=True, return_tensors="pt")
    with torch.no_grad():
        h = m(input_ids=t.input_ids, attention_mask=t.attention_mask).last_hidden_state[0]
    return h[: int(t.attention_mask.sum())].float()


def main():
    for p in (VFLOW, CACHE_TOOL, MKVIDEO):
        if not os.path.exists(p):
            print("missing", p)
            return 1
    tmp = tempfile.mkdtemp(prefix="vf_text_path.")
    enc = os.path.join(tmp, "umt5")
    tok, m = make_encoder(enc)

    # videos and a manifest (two rows share a caption)
    rows = []
    for i, c in enumerate(CAPTIONS):
        v = os.path.join(tmp, "v%d.mp4" % i)
        r = sh([MKVIDEO, "-o", v, "-s", "64x48", "-n", "12"])
        check(r.returncode == 0, "mkvideo: " + r.stderr)
        rows.append({"path": "v%d.mp4" % i, "text": c})
    man = os.path.join(tmp, "manifest.csv")
    with open(man, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "text"])
        w.writeheader()
        w.writerows(rows)

    out_man = os.path.join(tmp, "out", "manifest_emb.csv")
    os.makedirs(os.path.dirname(out_man))
    r = sh([sys.executable, TOOL, "--model", enc, "--manifest", man, "--out-dir", os.path.join(tmp, "emb"),
            "--out-manifest", out_man, "--text-len", str(TL), "--batch", "2"])
    if not check(r.returncode == 0, "encode_captions: %s %s" % (r.stdout, r.stderr)):
        return 1
    with open(out_man) as f:
        got = list(csv.DictReader(f))
    refs = {c: reference(tok, m, c) for c in set(CAPTIONS)}
    check(len({g["text_emb"] for g in got}) == 3, "one file per distinct caption: %r" % got)
    for g in got:
        e = load_file(g["text_emb"])
        check(list(e) == ["text_emb"], "one tensor in %s" % g["text_emb"])
        want = refs[g["text"]].numpy()
        check(e["text_emb"].dtype == np.float32 and np.array_equal(e["text_emb"], want),
              "%s: the file is the encoder's output for its real tokens" % g["text"])
        check(os.path.isabs(g["path"]) and os.path.exists(g["path"]), "path made absolute: " + g["path"])

    # precompute into a cache
    cache = os.path.join(tmp, "cache.lmdb")
    sets = ["manifest=" + out_man, "cache=" + cache, "frames=5", "size=32", "workers=1", "text_dim=%d" % D,
            "text_len=%d" % TL]
    args = [VFLOW, "run", PIPELINE, "--run-dir", os.path.join(tmp, "run")]
    for s in sets:
        args += ["--set", s]
    r = sh(args, timeout=300)
    if not check(r.returncode == 0, "precompute: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr)):
        return 1
    with open(os.path.join(tmp, "run", "metrics.jsonl")) as f:
        done = [json.loads(ln) for ln in f if '"latent_cache_done"' in ln]
    check(len(done) == 1 and done[0]["written"] == 8 and done[0]["texts"] == 3 and done[0]["entries"] == 8,
          "latent_cache_done counts entries and text records apart: %r" % done)
    try:
        import lmdb
        env = lmdb.open(cache, readonly=True, lock=False, subdir=True)
        with env.begin() as txn:
            keys = [bytes(k).decode() for k, _ in txn.cursor()]
            meta = json.loads(txn.get(b"__meta__"))
        env.close()
        texts = [k for k in keys if k.startswith("text:")]
        check(len(texts) == 3, "three text records (one per distinct caption): %r" % texts)
        check(meta.get("text_dim") == D and meta.get("text_entries") == meta.get("entries") and meta["entries"] == 8,
              "summary: %r" % meta)
    except ImportError:
        print("python3-lmdb missing: record counts not checked")

    # what latent_reader emits
    dump = os.path.join(tmp, "dump")
    os.makedirs(dump)
    r = sh([CACHE_TOOL, "read", cache, "--batch", "2", "--epochs", "1", "--text-len", str(TL), "--text-dim", str(D),
            "--dump", dump])
    if not check(r.returncode == 0, "cache_tool read: " + r.stderr):
        return 1
    r2 = sh([VFLOW, "cache", "ls", cache])
    caption_of = {}
    for line in r2.stdout.strip().split("\n")[1:]:
        f = line.split("\t")
        caption_of[f[0]] = f[3]
    seen = 0
    for name in sorted(os.listdir(dump)):
        b = load_file(os.path.join(dump, name))
        with open(os.path.join(dump, name), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            keys = json.loads(f.read(n))["__metadata__"]["keys"].split(",")
        emb, lens = b["text_emb"], b["text_len"]
        check(emb.dtype == np.float32 and emb.shape == (len(keys), TL, D), "text_emb shape %r" % (emb.shape,))
        for i, k in enumerate(keys):
            ref = refs[caption_of[k]]
            want = np.zeros((TL, D), np.float32)
            want[: ref.shape[0]] = ref.to(torch.bfloat16).float().numpy()
            check(lens[i] == ref.shape[0], "%s: text_len %d, want %d" % (k, lens[i], ref.shape[0]))
            check(np.array_equal(emb[i].view(np.uint32), want.view(np.uint32)),
                  "%s (%r): text_emb differs from the bf16 encoder output in %d values" % (
                      k, caption_of[k], int((emb[i] != want).sum())))
            seen += 1
    check(seen == len(caption_of) == 8, "read %d samples of %d entries, want 8 (4 videos x 2 clips)" % (
        seen, len(caption_of)))

    # a rerun skips every clip before encoding; a changed caption makes new entries
    def rerun(manifest, tag):
        run_dir = os.path.join(tmp, "run_" + tag)
        a2 = [VFLOW, "run", PIPELINE, "--run-dir", run_dir]
        for s2 in ["manifest=" + manifest] + sets[1:]:
            a2 += ["--set", s2]
        r2 = sh(a2, timeout=300)
        check(r2.returncode == 0, "%s: exit %d %s" % (tag, r2.returncode, r2.stderr[-400:]))
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            d = [json.loads(ln) for ln in f if '"latent_cache_done"' in ln]
        with open(os.path.join(run_dir, "run.log")) as f:
            log = f.read()
        return (d[0] if d else {}), log
    d, log = rerun(out_man, "again")
    check(d.get("written") == 0 and "skipped 8 cached clips" in log, "rerun: %r" % d)
    check(refs[CAPTIONS[3]].shape[0] == 3, "the cleaned caption is 2 words + </s>: %r" % (refs[CAPTIONS[3]].shape,))
    with open(man, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "text"])
        w.writeheader()
        w.writerows([dict(r, text="a blue dog") if i == 3 else r for i, r in enumerate(rows)])
    man2 = os.path.join(tmp, "out", "manifest_emb2.csv")
    r = sh([sys.executable, TOOL, "--model", enc, "--manifest", man, "--out-dir", os.path.join(tmp, "emb"),
            "--out-manifest", man2, "--text-len", str(TL)])
    check(r.returncode == 0 and "1 encoded now" in r.stdout, "encode_captions after a caption change: " + r.stdout)
    d, log = rerun(man2, "changed")
    check(d.get("written") == 2 and d.get("texts") == 1 and d.get("entries") == 10 and "skipped 6 cached clips" in log,
          "a changed caption: new entries for its 2 clips, one new text record: %r" % d)

    # bad input
    r = sh([sys.executable, TOOL, "--model", os.path.join(tmp, "nothing"), "--manifest", man, "--out-dir",
            os.path.join(tmp, "e2"), "--out-manifest", os.path.join(tmp, "m2.csv")])
    check(r.returncode == 2 and "nothing" in r.stderr and len(r.stderr.strip().split("\n")) == 1,
          "encode_captions without a model: exit %d %r" % (r.returncode, r.stderr))
    r = sh([VFLOW, "run", PIPELINE, "--run-dir", os.path.join(tmp, "run_bad0"), "--set", "manifest=" + out_man,
            "--set", "cache=" + os.path.join(tmp, "c0"), "--set", "frames=5", "--set", "size=32", "--set", "workers=1"],
           timeout=120)
    check(r.returncode == 2 and "text_emb" in r.stderr + r.stdout and "text_dim" in r.stderr + r.stdout,
          "column without text_dim: exit %d %s" % (r.returncode, r.stderr[-400:]))
    wide = os.path.join(tmp, "wide.safetensors")
    save_file({"emb": np.zeros((3, D + 1), np.float32)}, wide)
    bad_man = os.path.join(tmp, "bad.csv")
    with open(bad_man, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["path", "text", "text_emb"])
        w.writeheader()
        w.writerow({"path": "v0.mp4", "text": "x", "text_emb": wide})
        w.writerow({"path": "v1.mp4", "text": "y", "text_emb": got[1]["text_emb"]})
    run_bad = os.path.join(tmp, "run_bad1")
    r = sh([VFLOW, "run", PIPELINE, "--run-dir", run_bad, "--set", "manifest=" + bad_man, "--set",
            "cache=" + os.path.join(tmp, "c1"), "--set", "frames=5", "--set", "size=32", "--set", "workers=1",
            "--set", "text_dim=%d" % D, "--set", "text_len=%d" % TL, "--set", "decode.max_bad_fraction=1"], timeout=300)
    q = ""
    if os.path.exists(os.path.join(run_bad, "quarantine.jsonl")):
        q = open(os.path.join(run_bad, "quarantine.jsonl")).read()
    check(r.returncode == 0 and "wide.safetensors" in q and '\\"emb\\"' in q,
          "a wrong-width embedding is quarantined naming file and tensor: exit %d, quarantine %r %s" % (
              r.returncode, q, r.stderr[-400:]))

    if fails:
        print("%d failures (kept %s)" % (len(fails), tmp))
        return 1
    shutil.rmtree(tmp)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
