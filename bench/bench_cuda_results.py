#!/usr/bin/env python3
"""bench_cuda_results.py — the results of one GPU run (bench/bench_cuda.sh) as one JSON
file, bench/results/gpu-<date>-<gpu>.json, and a summary of it on the console.

  python3 bench/bench_cuda_results.py RESULTS.jsonl [--out DIR] [--date YYYY-MM-DD]

RESULTS.jsonl holds one JSON object per line, each tagged with its "section" (what
bench_cuda.sh appends as the run goes). A section that was skipped, stopped or failed
leaves its fields null and says why under "notes", so a run cut short still gives a
file. Fields (README's GPU table is made from them by scripts/gen_gpu_table):

  device, date, versions        the GPU's name, the run's UTC date, what versions printed
  attn_path, attn_paths         the attention path vflow's benches reported (attn_path=…),
                                per section, and their distinct values joined by "+"
                                ("hand" when none reported one)
  dit_tokens_s, mfu, peak_bytes vflow's DiT step; phases_ms: one step op by op
  dit_graphs_tokens_s           the same step with its blocks replayed as CUDA graphs
  torch_eager_tokens_s, torch_compile_tokens_s, torch_compile_peak_bytes (and the
                                eager peak, both MFUs)
  attn_self_tflops, sdpa_self_tflops, attn_cross_tflops, sdpa_cross_tflops  fwd+bwd
  vae_encode_clips_s, diffusers_vae_encode_clips_s, vae_decode_clips_s,
  diffusers_vae_decode_clips_s  {"FxHxW": clips/s} per clip shape; vae_rel_err,
                                vae_phases_ms, vae_conv_path and vae_attn_path (what ran
                                the convolutions and the mid-block attention) per "op FxHxW"
  ratios, goals                 vflow over its peer, and whether each goal of the
                                issue is met (null where a figure is missing)
  offload_step_ratio            the step with the optimizer shard on the host over the step
                                with it on the GPU (tests/gpu/test_cuda_dit_ipc.py, tiny model)
  ipc_gb_s, ipc_copy_gb_s, ipc_vs_copy   the CUDA IPC handoff between two processes per
                                size (MiB), a device copy's, their ratio
  tests, sections, notes        each test's and section's status, what went wrong
"""
import json
import os
import re
import sys
import time

GOALS = {"dit_vs_compile": 1.2, "mfu": 0.40, "attn_self_vs_sdpa": 0.95, "attn_cross_vs_sdpa": 0.9,
         "vae_encode_vs_diffusers": 1.0, "vae_decode_vs_diffusers": 1.0}


def load(path):
    rows = []
    with open(path, errors="replace") as f:  # a log line cut inside a character stays readable
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                print("bench_cuda_results: %s:%d: not JSON, left out: %s" % (path, n, line[:120]), file=sys.stderr)
    return rows


def ratio(a, b):
    return a / b if a and b else None


def slug(name):
    s = re.sub(r"^nvidia\s+", "", (name or "").strip(), flags=re.I).lower()
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "nogpu"


def assemble(rows, date=None):
    by = {}
    for r in rows:
        by.setdefault(r.get("section"), []).append(r)

    def bench(section, key):
        """the section's last benchmark line (not its status line) that has key"""
        for r in reversed(by.get(section, [])):
            if key in r and "status" not in r:
                return r[key]
        return None

    versions = next((r for r in by.get("versions", [])), {})
    versions = {k: v for k, v in versions.items() if k != "section"}
    out = {
        "device": versions.get("gpu") or versions.get("torch_device"),
        "date": date or time.strftime("%Y-%m-%d", time.gmtime()),
        "versions": versions,
    }
    paths = {s: r["attn_path"] for s in ("dit_vflow", "attn_vflow", "xattn_vflow") for r in by.get(s, [])
             if "attn_path" in r}
    distinct = list(dict.fromkeys(paths.values()))
    out["attn_path"] = "+".join(distinct) if distinct else "hand"
    out["attn_paths"] = paths
    out["dit_tokens_s"] = bench("dit_vflow", "tokens_per_s")
    out["dit_graphs_tokens_s"] = bench("dit_vflow_graphs", "tokens_per_s")
    out["swap_ratio"] = bench("swap_vflow", "ratio")
    out["swap_hidden"] = bench("swap_vflow", "hidden")
    out["offload_step_ratio"] = bench("test.cuda_dit_ipc", "ratio")  # optimizer shard on the host vs on the GPU
    out["torch_eager_tokens_s"] = bench("dit_torch_eager", "tokens_per_s")
    out["torch_compile_tokens_s"] = bench("dit_torch_compile", "tokens_per_s")
    out["mfu"] = bench("dit_vflow", "mfu")
    out["torch_eager_mfu"] = bench("dit_torch_eager", "mfu")
    out["torch_compile_mfu"] = bench("dit_torch_compile", "mfu")
    out["peak_bytes"] = bench("dit_vflow", "peak_bytes")
    out["torch_eager_peak_bytes"] = bench("dit_torch_eager", "peak_bytes")
    out["torch_compile_peak_bytes"] = bench("dit_torch_compile", "peak_bytes")
    out["dit_tokens"] = bench("dit_vflow", "tokens") or bench("dit_torch_compile", "tokens")
    out["phases_ms"] = bench("dit_vflow", "phases_ms")
    out["attn_tokens"] = bench("attn_vflow", "lq")
    out["attn_self_tflops"] = bench("attn_vflow", "fwdbwd_tflops")
    out["sdpa_self_tflops"] = bench("attn_torch", "fwdbwd_tflops")
    out["attn_cross_tflops"] = bench("xattn_vflow", "fwdbwd_tflops")
    out["sdpa_cross_tflops"] = bench("xattn_torch", "fwdbwd_tflops")
    vae = {k: {} for k in ("vae_encode_clips_s", "diffusers_vae_encode_clips_s", "vae_decode_clips_s",
                           "diffusers_vae_decode_clips_s", "vae_rel_err", "vae_phases_ms", "vae_conv_path",
                           "vae_attn_path")}
    for s in ("vae_small", "vae_large"):
        for r in by.get(s, []):
            if r.get("bench") != "vae" or "op" not in r or "side" not in r:
                continue
            key = "%svae_%s_clips_s" % ("diffusers_" if r["side"] == "diffusers" else "", r["op"])
            vae[key][r["shape"]] = r.get("clips_per_s")
            if r["side"] == "vflow":
                tag = "%s %s" % (r["op"], r["shape"])
                if r.get("rel_err") is not None:
                    vae["vae_rel_err"][tag] = r["rel_err"]
                if r.get("phases_ms"):
                    vae["vae_phases_ms"][tag] = r["phases_ms"]
                for k in ("conv_path", "attn_path"):
                    if r.get(k):
                        vae["vae_" + k][tag] = r[k]
    out.update(vae)
    out["ipc_gb_s"] = {str(r["mib"]): r.get("ipc_gb_s") for r in by.get("ipc", []) if r.get("bench") == "ipc"}
    out["ipc_copy_gb_s"] = {str(r["mib"]): r.get("copy_gb_s") for r in by.get("ipc", []) if r.get("bench") == "ipc"}
    out["ipc_vs_copy"] = {str(r["mib"]): r.get("ratio") for r in by.get("ipc", []) if r.get("bench") == "ipc"}

    ratios = {
        "dit_vs_compile": ratio(out["dit_tokens_s"], out["torch_compile_tokens_s"]),
        "dit_vs_eager": ratio(out["dit_tokens_s"], out["torch_eager_tokens_s"]),
        "peak_vs_compile": ratio(out["peak_bytes"], out["torch_compile_peak_bytes"]),
        "attn_self_vs_sdpa": ratio(out["attn_self_tflops"], out["sdpa_self_tflops"]),
        "attn_cross_vs_sdpa": ratio(out["attn_cross_tflops"], out["sdpa_cross_tflops"]),
    }
    for op in ("encode", "decode"):
        mine, peer = out["vae_%s_clips_s" % op], out["diffusers_vae_%s_clips_s" % op]
        ratios["vae_%s_vs_diffusers" % op] = {sh: ratio(mine.get(sh), peer.get(sh)) for sh in sorted(set(mine) | set(peer))}
    out["ratios"] = ratios

    def met(v, goal):
        return None if v is None else v >= goal
    goals = {}
    for k, g in GOALS.items():
        if k == "mfu":
            goals[k] = {"goal": g, "value": out["mfu"], "met": met(out["mfu"], g)}
        elif isinstance(ratios.get(k), dict):
            vals = ratios[k]
            goals[k] = {"goal": g, "value": vals,
                        "met": None if not vals or None in vals.values() else all(v >= g for v in vals.values())}
        else:
            goals[k] = {"goal": g, "value": ratios.get(k), "met": met(ratios.get(k), g)}
    out["goals"] = goals

    notes, sections, tests, skipped = [], {}, {}, {}
    for s, rs in by.items():
        st = [r for r in rs if "status" in r]
        if not st or s is None:
            continue
        r = st[-1]
        entry = {"status": r["status"], "s": r.get("s"), "rc": r.get("rc")}
        if r.get("reason"):
            entry["reason"] = r["reason"]
        (tests if s.startswith("test.") else sections)[s] = entry
        if r["status"] in ("failed", "timeout"):
            notes.append("%s: %s (rc %s after %s s): %s" % (s, r["status"], r.get("rc"), r.get("s"), r.get("last", "")))
        elif r["status"] == "skipped":
            skipped.setdefault(r.get("reason") or r.get("last") or "no reason given", []).append(s)
    for why, names in skipped.items():
        notes.append("skipped: %s (%s)" % (", ".join(names), why))
    for s in ("vae_small", "vae_large"):
        for r in by.get(s, []):
            if r.get("error") or r.get("skipped"):
                notes.append("%s %s %s: %s" % (s, r.get("op", ""), r.get("shape", ""), r.get("error") or r.get("skipped")))
    if not out["device"]:
        notes.append("no GPU: nvidia-smi found none")
    out["tests"], out["sections"], out["notes"] = tests, sections, notes
    return out


def fmt(v, spec="%.0f"):
    return spec % v if isinstance(v, (int, float)) else "n/a"


def summary(o):
    r = o["ratios"]
    lines = ["== %s, %s, attention path %s" % (o["device"] or "no GPU", o["date"], o["attn_path"]),
             "tests: " + (", ".join("%s %s" % (k[5:], v["status"]) for k, v in sorted(o["tests"].items())) or "none"),
             "DiT step      vflow %s tokens/s (MFU %s), torch.compile %s, eager %s: %s x compile (goal >= 1.2)" % (
                 fmt(o["dit_tokens_s"]), fmt(o["mfu"] and 100 * o["mfu"], "%.1f %%"), fmt(o["torch_compile_tokens_s"]),
                 fmt(o["torch_eager_tokens_s"]), fmt(r["dit_vs_compile"], "%.2f")),
             "self-attn     vflow %s TF/s, SDPA %s: %s x (goal >= 0.95)" % (
                 fmt(o["attn_self_tflops"]), fmt(o["sdpa_self_tflops"]), fmt(r["attn_self_vs_sdpa"], "%.2f")),
             "cross-attn    vflow %s TF/s, SDPA %s: %s x (goal >= 0.9)" % (
                 fmt(o["attn_cross_tflops"]), fmt(o["sdpa_cross_tflops"]), fmt(r["attn_cross_vs_sdpa"], "%.2f"))]
    for op in ("encode", "decode"):
        for sh, x in r["vae_%s_vs_diffusers" % op].items():
            lines.append("VAE %s %-11s vflow %s clips/s, diffusers %s: %s x (goal >= 1.0); conv %s" % (
                op, sh, fmt(o["vae_%s_clips_s" % op].get(sh), "%.3g"),
                fmt(o["diffusers_vae_%s_clips_s" % op].get(sh), "%.3g"), fmt(x, "%.3f"),
                o.get("vae_conv_path", {}).get("%s %s" % (op, sh), "n/a")))
    if o["phases_ms"]:
        p = o["phases_ms"]
        span = p.get("span") or 1
        lines.append("DiT step op by op: " + ", ".join(
            "%s %.0f%%" % (k, 100 * p[k] / span) for k in ("attention", "gemm", "elementwise", "optimizer", "transfer",
                                                          "memset", "idle") if k in p))
    lines += ["note: " + n for n in o["notes"]]
    return "\n".join(lines)


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out_dir, date = None, None
    path = args[0]
    i = 1
    while i < len(args):
        if args[i] in ("--out", "--date") and i + 1 < len(args):
            if args[i] == "--out":
                out_dir = args[i + 1]
            else:
                date = args[i + 1]
            i += 2
        else:
            print("bench_cuda_results: unknown argument %s" % args[i], file=sys.stderr)
            return 2
    if not os.path.exists(path):
        print("bench_cuda_results: %s: no such file" % path, file=sys.stderr)
        return 2
    o = assemble(load(path), date)
    name = "gpu-%s-%s.json" % (o["date"], slug(o["device"]))
    dest = os.path.join(out_dir or os.path.dirname(os.path.abspath(path)), name)
    with open(dest, "w") as f:
        json.dump(o, f, indent=1, sort_keys=False)
        f.write("\n")
    print(summary(o))
    print("results: %s" % dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
