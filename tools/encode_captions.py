#!/usr/bin/env python3
"""encode_captions.py — text embeddings of a manifest's captions, for vflow's precompute.

Reads a CSV or JSONL manifest (docs/PRECOMPUTE.md: columns `path`, `text` or `caption`,
others passed through), encodes every distinct caption with transformers'
UMT5EncoderModel and its tokenizer from a local model directory the user has (Wan 2.1's
umT5-xxl: google/umt5-xxl or the text_encoder/ + tokenizer/ folders of
Wan-AI/Wan2.1-T2V-1.3B-Diffusers; nothing is downloaded) as diffusers' WanPipeline does
(the caption cleaned by its prompt_clean: ftfy.fix_text when ftfy is installed, HTML
entities unescaped twice, whitespace collapsed; --no-clean keeps it as is; then
tokenised to --text-len with truncation and the attention mask passed to the encoder),
and writes

  OUT_DIR/<sha256 of the caption, 32 hex>.safetensors   one tensor "text_emb" (L, D):
      the encoder's last hidden state for the L real tokens of the caption (the
      tokenizer's attention mask; L <= --text-len), as Wan's pipeline computes it before
      it zero-pads to 512 rows (vflow's latent_reader does that padding), in float32
      (--dtype bf16 halves the files; vflow stores bf16 in its cache either way)
  OUT_MANIFEST   the input manifest with a column `text_emb` naming each row's file
      (and `path` made absolute when the manifest moves to another directory).

Same caption, same file: a rerun skips captions whose file exists (--force redoes them).
Then: vflow run pipelines/precompute_latents.lua --set manifest=OUT_MANIFEST
      --set text_dim=D --set text_len=L ...

usage: encode_captions.py --model DIR [--tokenizer DIR] --manifest IN --out-dir DIR
                          --out-manifest OUT [--text-len 512] [--batch 8]
                          [--device cpu|cuda] [--dtype f32|bf16] [--force] [--no-clean]
Exit 0 done, 2 bad usage or input (one line naming the file / row).
"""
import argparse
import csv
import hashlib
import html
import io
import json
import os
import re
import sys


def fail(msg):
    print("encode_captions: " + msg, file=sys.stderr)
    sys.exit(2)


def read_manifest(path):
    """-> (kind, fieldnames, rows as dicts)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    first = text.lstrip()[:1]
    if path.endswith((".jsonl", ".json")) or first == "{":
        rows, names = [], []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                fail("%s:%d: %s" % (path, i, e))
            if not isinstance(r, dict):
                fail("%s:%d: not an object" % (path, i))
            rows.append(r)
            names += [k for k in r if k not in names]
        return "jsonl", names, rows
    rd = csv.DictReader(io.StringIO(text))
    rows = list(rd)
    return "csv", list(rd.fieldnames or []), rows


def write_manifest(path, kind, names, rows, column):
    """Writes rows (dicts) as the input's kind, `column` last among the CSV's columns;
    atomically (a .tmp beside it, renamed)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        if kind == "jsonl":
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        else:
            w = csv.DictWriter(f, fieldnames=[n for n in names if n != column] + [column])
            w.writeheader()
            w.writerows(rows)
    os.replace(tmp, path)


def prompt_clean(text):
    """diffusers' WanPipeline prompt_clean: ftfy (when installed), HTML unescape, whitespace."""
    try:
        import ftfy
        text = ftfy.fix_text(text)
    except ImportError:
        pass
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


def caption_of(row):
    for k in ("text", "caption"):
        if k in row and row[k] is not None:
            return str(row[k])
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="UMT5EncoderModel directory (save_pretrained)")
    ap.add_argument("--tokenizer", help="tokenizer directory (default: --model)")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--out-manifest", required=True)
    ap.add_argument("--text-len", type=int, default=512, help="tokens kept per caption (Wan: 512)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32", help="dtype of the files written")
    ap.add_argument("--force", action="store_true", help="re-encode captions whose file exists")
    ap.add_argument("--no-clean", action="store_true", help="tokenise captions as they are (no prompt_clean)")
    a = ap.parse_args()
    if a.text_len < 1 or a.batch < 1:
        fail("--text-len and --batch must be >= 1")
    kind, names, rows = read_manifest(a.manifest)
    if "path" not in names and "file_name" not in names:
        fail("%s: no `path` column" % a.manifest)

    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, UMT5EncoderModel

    for d in (a.model, a.tokenizer or a.model):
        if not os.path.isdir(d):
            fail("%s: not a directory (a saved UMT5EncoderModel / tokenizer)" % d)
    try:
        tok = AutoTokenizer.from_pretrained(a.tokenizer or a.model, local_files_only=True)
        enc = UMT5EncoderModel.from_pretrained(a.model, local_files_only=True).to(a.device).eval()
    except (OSError, ValueError) as e:
        fail("%s: %s" % (a.model, str(e).splitlines()[0]))
    os.makedirs(a.out_dir, exist_ok=True)

    name_of = {}
    todo = []
    for r in rows:
        c = caption_of(r)
        if c not in name_of:
            name_of[c] = os.path.join(os.path.abspath(a.out_dir),
                                      hashlib.sha256(c.encode()).hexdigest()[:32] + ".safetensors")
            if a.force or not os.path.exists(name_of[c]):
                todo.append(c)
    for i in range(0, len(todo), a.batch):
        caps = todo[i:i + a.batch]
        text = caps if a.no_clean else [prompt_clean(c) for c in caps]
        t = tok(text, padding="max_length", max_length=a.text_len, truncation=True, add_special_tokens=True,
                return_attention_mask=True, return_tensors="pt")
        ids, mask = t.input_ids.to(a.device), t.attention_mask.to(a.device)
        with torch.no_grad():
            h = enc(input_ids=ids, attention_mask=mask).last_hidden_state.float().cpu()
        lens = mask.gt(0).sum(dim=1).tolist()
        for c, x, n in zip(caps, h, lens):
            if n < 1:
                fail("caption %r gives no tokens" % c[:80])
            e = x[:n].contiguous()
            e = e.to(torch.bfloat16) if a.dtype == "bf16" else e
            tmp = name_of[c] + ".tmp"
            save_file({"text_emb": e}, tmp, metadata={"encoder": os.path.abspath(a.model), "caption": c[:2000]})
            os.replace(tmp, name_of[c])
        print("encoded %d / %d captions" % (min(i + a.batch, len(todo)), len(todo)), file=sys.stderr)

    src_dir = os.path.dirname(os.path.abspath(a.manifest))
    moved = src_dir != os.path.dirname(os.path.abspath(a.out_manifest))
    out_rows = []
    for r in rows:
        r = dict(r)
        pk = "path" if "path" in r else "file_name"
        if moved and r.get(pk) and not os.path.isabs(r[pk]):
            r[pk] = os.path.join(src_dir, r[pk])
        r["text_emb"] = name_of[caption_of(r)]
        out_rows.append(r)
    write_manifest(a.out_manifest, kind, names, out_rows, "text_emb")
    print("wrote %s (%d rows, %d distinct captions, %d encoded now)" % (a.out_manifest, len(rows), len(name_of),
                                                                        len(todo)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
