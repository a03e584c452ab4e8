#!/bin/bash
# test_gpu_run_dry.sh — the GPU run (bench/bench_cuda.sh) on a machine without a GPU, from
# this build directory in place of the pack: it finishes well inside its deadline, every
# section it runs reports itself skipped (none fails, times out or hangs), the results
# JSON is made with null figures and the reasons in its notes, the console log and the
# sections' logs come back beside it, and bad arguments are refused with exit 2. Where a
# GPU is present this test skips: the script would run the real benchmarks there.
# vflow-test: labels=integration timeout=300
set -euo pipefail
if nvidia-smi -L > /dev/null 2>&1; then
  echo "skip: a GPU is present (bench/bench_cuda.sh would run for real)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
script="$VFLOW_SRC/bench/bench_cuda.sh"
py=${VFLOW_PY:-python3}

t0=$(date +%s)
if ! VFLOW_BENCH_PY="$py" bash "$script" --prebuilt "$VFLOW_BUILD" --out "$tmp/out" --deadline 240 \
    > "$tmp/log" 2>&1; then
  cat "$tmp/log"
  echo "FAIL: bench_cuda.sh exited non-zero without a GPU"
  exit 1
fi
echo "bench_cuda.sh without a GPU: $(($(date +%s) - t0)) s"

"$py" - "$tmp/out" "$tmp/log" <<'EOF'
import glob, json, os, sys
out, log = sys.argv[1], sys.argv[2]
fails = []
def check(c, m):
    if not c:
        fails.append(m)
        print("FAIL " + m)
rows = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip()]
status = {r["section"]: r for r in rows if "status" in r}
want = ["dit_vflow", "attn_vflow", "attn_torch", "xattn_vflow", "xattn_torch", "vae_small", "dit_torch_compile",
        "dit_torch_eager", "vae_large", "ipc", "test.cuda_ops", "test.cuda_dit", "test.cuda_vae", "test.cuda_phases",
        "test.cuda_xfer", "test.plan_gpu", "test.cuda_dit_ipc"]
for s in want:
    check(s in status, "no status for section %s" % s)
for s, r in status.items():
    check(r["status"] == "skipped", "%s: %s (%s)" % (s, r["status"], r.get("last") or r.get("reason")))
check(any(r["section"] == "versions" for r in rows), "no versions line")
files = glob.glob(os.path.join(out, "gpu-*-nogpu.json"))
check(len(files) == 1, "results JSON: %s" % os.listdir(out))
if files:
    o = json.load(open(files[0]))
    for k in ("dit_tokens_s", "torch_compile_tokens_s", "mfu", "attn_self_tflops", "sdpa_cross_tflops"):
        check(k in o and o[k] is None, "%s: %r" % (k, o.get(k)))
    check(o["attn_path"] == "hand", "attn_path %r" % o["attn_path"])
    check(any(n.startswith("skipped: ") for n in o["notes"]), "notes: %r" % o["notes"])
for f in ("run.log", "logs.tgz"):
    check(os.path.getsize(os.path.join(out, f)) > 0, "%s missing or empty" % f)
text = open(log).read()
check("== versions" in text or "  python" in text, "versions not printed first")
check(text.index("python ") < text.index("== tests"), "versions after the tests")
print("%d failed" % len(fails) if fails else "dry run: %d sections skipped cleanly" % len(status))
sys.exit(1 if fails else 0)
EOF

# bad arguments: refused, exit 2, naming what is wrong
set +e
bash "$script" --deadline soon > "$tmp/e1" 2>&1
rc1=$?
bash "$script" --pack "$tmp/none.tar.xz" --out "$tmp/o2" > "$tmp/e2" 2>&1
rc2=$?
bash "$script" --frobnicate > "$tmp/e3" 2>&1
rc3=$?
set -e
[ $rc1 = 2 ] && grep -q "'soon' is not a number" "$tmp/e1" || { cat "$tmp/e1"; echo "FAIL: --deadline soon: rc $rc1"; exit 1; }
[ $rc2 = 2 ] && grep -q "no pack at $tmp/none.tar.xz" "$tmp/e2" || { cat "$tmp/e2"; echo "FAIL: missing pack: rc $rc2"; exit 1; }
[ $rc3 = 2 ] && grep -q "unknown argument '--frobnicate'" "$tmp/e3" || { cat "$tmp/e3"; echo "FAIL: unknown arg: rc $rc3"; exit 1; }
echo "bad arguments refused"
