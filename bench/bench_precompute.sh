#!/usr/bin/env bash
# bench_precompute.sh — the precompute half through the real `vflow run`
# (pipelines/precompute_latents.lua: decode x2 -> vae_encode -> latent_cache, tiny VAE on
# the CPU) over the project's sample videos (scripts/make_sample_videos.sh).
#
#   bench/bench_precompute.sh [BUILD_DIR]          (default: build)
#   env: REPEATS (default 2), SIZE (default 64), RSS_SIZES (default "64 128"),
#        CHUNK (default 4), MICRO_BATCH (default 2), KEEP=1 keeps the work dir
#
# 1. throughput: clips/s of a fresh precompute (frames=17, best of REPEATS; clips over
#    the run's own elapsed time and over the wall time of the command), and of a rerun
#    over the complete cache (every key exists: vae_encode drops each clip before
#    encoding it, skip_cached; decode still decodes them);
# 2. peak RSS of every worker process: VmHWM read from /proc/PID/status every 20 ms
#    until the process ends (pids from VFLOW_TRACE_SPAWN); VmHWM only grows, so the last
#    read is the peak unless the peak falls in the last 20 ms;
# 3. the vae_encode worker for 17- vs 65-frame clips at the same chunk and micro_batch
#    (and frame size, per RSS_SIZES; the same videos: those with >= 65 frames): its peak RSS, the stage's own peak (vf_alloc
#    accounting, "peak" in metrics.jsonl) and what it declares to `vflow plan`. The goal
#    is peak RSS(65) / peak RSS(17) <= 1.2: encoder memory depends on chunk, not on T.
#    What does grow with T is the clips themselves (micro_batch x T x H x W x 3 bytes held
#    while a micro-batch fills, plus the ones in flight), which the plan declares.
# Print: one line per measurement, ratios last. Machine load is printed too: on a shared
# machine, compare only numbers from the same run of this script.
set -euo pipefail

build="$(cd "${1:-build}" && pwd)"
src="$(cd "$(dirname "$0")/.." && pwd)"
vflow="$build/vflow"
[ -x "$vflow" ] || { echo "bench_precompute: build it first ($vflow missing)" >&2; exit 1; }
repeats="${REPEATS:-2}"
size="${SIZE:-64}"
rss_sizes="${RSS_SIZES:-64 128}"
chunk="${CHUNK:-4}"
mb="${MICRO_BATCH:-2}"
py=/usr/bin/python3
work="$(mktemp -d /tmp/vf_bench_precompute.XXXXXX)"
trap '[ "${KEEP:-0}" = 1 ] || rm -rf "$work"' EXIT

bash "$src/scripts/make_sample_videos.sh" "$work/samples" > /dev/null
manifest="$work/samples/manifest.csv"
# the 17- vs 65-frame runs read the same files: those with at least 65 frames
long="$work/samples/long.csv"
awk -F, 'NR == 1 || $(NF - 3) >= 65' "$manifest" > "$long"
echo "bench_precompute: $(date -u +%Y-%m-%dT%H:%MZ), $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  videos: $(($(wc -l < "$manifest") - 1)) sample videos ($manifest); vflow $("$vflow" version 2>/dev/null | head -1)"

declare -A hwm # pid -> last VmHWM (kB)
# run_once TAG FRAMES SIZE CACHE [MANIFEST]: one `vflow run`, polling every worker's VmHWM;
# sets wall_s and leaves the run dir in $work/run_TAG
run_once() {
  local tag=$1 frames=$2 sz=$3 cache=$4 man=${5:-$manifest}
  local trace="$work/trace_$tag" rd="$work/run_$tag"
  rm -f "$trace"
  hwm=()
  local t0 t1
  t0=$(date +%s.%N)
  VFLOW_TRACE_SPAWN="$trace" OMP_WAIT_POLICY=PASSIVE "$vflow" run "$src/pipelines/precompute_latents.lua" \
    --run-dir "$rd" --set manifest="$man" --set cache="$cache" --set size="$sz" --set frames="$frames" \
    --set workers=2 --set chunk="$chunk" --set micro_batch="$mb" > "$work/out_$tag" 2>&1 &
  local vpid=$! k v _ pid
  while kill -0 $vpid 2>/dev/null; do
    for pid in $vpid $( [ -f "$trace" ] && sed -n 's/^pid=\([0-9]*\) .*/\1/p' "$trace" ); do
      [ -r /proc/$pid/status ] || continue
      while read -r k v _; do
        [ "$k" = "VmHWM:" ] && { hwm[$pid]=$v; break; }
      done < /proc/$pid/status 2>/dev/null || true
    done
    sleep 0.02
  done
  wait $vpid || { echo "bench_precompute: run $tag failed:" >&2; cat "$work/out_$tag" >&2; exit 1; }
  t1=$(date +%s.%N)
  wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  hwm_driver=${hwm[$vpid]:-0}
  : > "$work/hwm_$tag"
  while read -r p w s; do
    echo "${w#worker=} ${s#stages=} ${hwm[${p#pid=}]:-0}" >> "$work/hwm_$tag"
  done < "$trace"
  echo "driver - $hwm_driver" >> "$work/hwm_$tag"
}

# summary of a run: clips, elapsed, written/skipped, and per stage the accounted peak
summary() { # TAG
  "$py" - "$work/run_$1/metrics.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
run = [r for r in rows if r.get("type") == "run"][-1]
done = [r for r in rows if r.get("event") == "latent_cache_done"][-1]
peaks = {r["stage"]: r["peak"] for r in rows if r.get("type") == "final"}
# skipped: by vae_encode before encoding (skip_cached) plus by the writer
cached = sum(r.get("gauges", {}).get("skipped_cached", 0) for r in rows
             if r.get("type") == "final" and r.get("kind") == "vae_encode")
print(run["elapsed_s"], done["written"], done["skipped"] + cached, " ".join("%s=%d" % kv for kv in sorted(peaks.items())))
EOF
}

# FRAMES SIZE -> bytes the vae_encode stage declares to `vflow plan`: in all, and for the
# clips and latents it holds (its "micro-batch" entries: the part that grows with T)
declared_vae() {
  "$vflow" plan "$src/pipelines/precompute_latents.lua" --json --set manifest="$manifest" \
    --set cache="$work/plan.lmdb" --set size="$2" --set frames="$1" --set chunk="$chunk" --set micro_batch="$mb" |
    "$py" -c '
import json, sys
mem = [m for s in json.load(sys.stdin)["stages"] if s["kind"] == "vae_encode" for m in s["mem"]]
print(sum(m["bytes"] for m in mem), sum(m["bytes"] for m in mem if "micro-batch" in m["what"]))'
}

mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }

# ---------------------------------------------------------------- 1 + 2: throughput, RSS
best=""
for r in $(seq 1 "$repeats"); do
  rm -rf "$work/cache_$r.lmdb"
  run_once "fresh$r" 17 "$size" "$work/cache_$r.lmdb"
  read -r el written skipped peaks < <(summary "fresh$r")
  cps=$(awk -v n="$written" -v t="$el" 'BEGIN { printf "%.2f", n / t }')
  echo "  fresh run $r: $written clips (17 frames, ${size}x$size) in ${el} s run time, ${wall_s} s wall: $cps clips/s"
  if [ -z "$best" ] || awk -v a="$cps" -v b="$best" 'BEGIN { exit !(a > b) }'; then
    best=$cps; best_wall=$(awk -v n="$written" -v t="$wall_s" 'BEGIN { printf "%.2f", n / t }')
    cp "$work/hwm_fresh$r" "$work/hwm_best"; best_peaks=$peaks; clips=$written
  fi
done
echo "precompute: $best clips/s (run time), $best_wall clips/s (wall, incl. start-up), $clips clips, best of $repeats"
echo "peak RSS per worker (VmHWM), best run:"
while read -r w s k; do
  printf "  %-18s %-28s %s\n" "$w" "$s" "$(mib "$k")"
done < "$work/hwm_best"
echo "  stage peaks (vf_alloc accounting): $best_peaks"

run_once rerun 17 "$size" "$work/cache_1.lmdb"
read -r el written skipped _ < <(summary rerun)
echo "rerun over the complete cache: wrote $written, skipped $skipped in ${el} s run time" \
     "($(awk -v n="$skipped" -v t="$el" 'BEGIN { printf "%.2f", n / t }') clips/s: decode runs again, vae_encode drops every clip before encoding)"

# ---------------------------------------------------------------- 3: 17 vs 65 frames
for sz in $rss_sizes; do
  declare -A vae_rss=() vae_peak=() vae_decl=() vae_enc=() vae_clips=()
  for T in 17 65; do
    rm -rf "$work/cache_T$T.lmdb"
    run_once "T${T}_$sz" "$T" "$sz" "$work/cache_T$T.lmdb" "$long"
    read -r el written skipped peaks < <(summary "T${T}_$sz")
    vae_rss[$T]=$(awk '$2 == "vae_encode" { print $3 }' "$work/hwm_T${T}_$sz")
    vae_peak[$T]=$(tr ' ' '\n' <<<"$peaks" | sed -n 's/^vae_encode=//p')
    read -r decl data < <(declared_vae "$T" "$sz")
    vae_decl[$T]=$decl
    vae_enc[$T]=$(( vae_peak[$T] - data )) # the stage's peak less the clips/latents it holds
    vae_clips[$T]=$written
    echo "vae_encode worker, ${T}-frame clips ${sz}x$sz, chunk $chunk, micro_batch $mb: ${written} clips," \
         "peak RSS $(mib "${vae_rss[$T]}"), stage peak ${vae_peak[$T]} B, declared ${vae_decl[$T]} B" \
         "($(d=$(( vae_peak[$T] - vae_decl[$T] )); [ $d -gt 0 ] && echo "$d B over" || echo "$(( -d )) B under"))"
  done
  awk -v a="${vae_rss[65]}" -v b="${vae_rss[17]}" -v c="${vae_peak[65]}" -v d="${vae_peak[17]}" \
      -v e="${vae_enc[65]}" -v f="${vae_enc[17]}" -v s="$sz" \
    'BEGIN { printf "ratio 65/17 frames at %sx%s: peak RSS %.3fx, stage peak %.3fx, stage peak less held clips %.3fx (goal <= 1.2x)\n",
             s, s, a / b, c / d, e / f }'
  unset vae_rss vae_peak vae_decl vae_enc vae_clips
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
