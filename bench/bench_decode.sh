#!/usr/bin/env bash
# bench_decode.sh — decode + resize + centre-crop throughput: vflow's decode core
# against the ffmpeg CLI, on the same files, output size and thread count.
#
#   bench/bench_decode.sh [BUILD_DIR] [THREADS...]        (default: build, "1 2")
#   bench/bench_decode.sh --corpus [BUILD_DIR] [THREADS...]
#
# --corpus: the real videos of the public corpus (tests/corpus/test_corpus.py fetches them
# from Debian packages), every file ffmpeg reads at least 16 frames from, one run each
# per tool (REPEATS=1 by default there), output 256x256. Per file the source frames per
# wall second of both tools and their ratio; at the end the overall ratio (all frames
# over all seconds) and the smallest per-file ratio (goals: >= 1.0x overall, none below
# 0.5x). Tiny files are dominated by process start and probing, which both tools pay.
#
# Files (made once into BUILD_DIR/bench_videos with ffmpeg's testsrc2, which has fine
# detail and motion): 1280x720 H.264 (B-frames), 1920x1080 H.264, 854x480 VP9,
# 1280x720 MPEG-4; 240 frames each, output 256x256 RGB. The peer is
#   ffmpeg -threads N -filter_threads N -i F
#          -vf scale=256:256:force_original_aspect_ratio=increase,crop=256:256
#          -pix_fmt rgb24 -f null -
# Both decode every frame and convert every frame (clips of 16 x 15 = 240). Each tool
# is timed the same way from this shell, best of REPEATS runs (default 3): frames per
# wall second, and frames per CPU second (user + sys over all threads; robust when the
# machine is shared). ratio = vflow / ffmpeg; the goal is >= 0.9x. vflow crops before
# scaling, ffmpeg's filter chain scales the whole frame and then crops: same picture
# (tests/unit/test_decode.c compares them), less work.
set -euo pipefail

corpus=0
if [ "${1:-}" = "--corpus" ]; then corpus=1; shift; fi
build="${1:-build}"
shift || true
threads=("$@")
[ ${#threads[@]} -eq 0 ] && threads=(1 2)
repeats="${REPEATS:-$((corpus ? 1 : 3))}"
drv="$build/bench/bench_decode"
[ -x "$drv" ] || { echo "bench_decode: build it first ($drv missing)" >&2; exit 1; }
vids="$build/bench_videos"
mkdir -p "$vids"

gen() { # NAME SIZE CODEC EXTRA...
  local f="$vids/$1"
  [ -s "$f" ] && return 0
  ffmpeg -v error -y -f lavfi -i "testsrc2=s=$2:r=30:d=8" "${@:4}" -c:v "$3" -pix_fmt yuv420p "$f"
}
encoders="$(ffmpeg -hide_banner -encoders 2>/dev/null)"
files=()
if grep -q " libx264 " <<<"$encoders"; then
  gen h264_720p.mp4 1280x720 libx264 -preset veryfast -bf 3 -g 60; files+=("$vids/h264_720p.mp4")
  gen h264_1080p.mp4 1920x1080 libx264 -preset veryfast -bf 3 -g 60; files+=("$vids/h264_1080p.mp4")
fi
if grep -q " libvpx-vp9 " <<<"$encoders"; then
  gen vp9_480p.webm 854x480 libvpx-vp9 -deadline realtime -cpu-used 8 -b:v 1M; files+=("$vids/vp9_480p.webm")
fi
gen mpeg4_720p.avi 1280x720 mpeg4 -q:v 4; files+=("$vids/mpeg4_720p.avi")

# best wall and best CPU (user+sys, all threads) seconds of REPEATS runs of a command
measure() {
  local bw=1e9 bc=1e9 line w c
  for _ in $(seq "$repeats"); do
    line=$( { TIMEFORMAT="%R %U %S"; time "$@" >/dev/null 2>&1; } 2>&1 | tail -n1 )
    w=$(awk '{print $1}' <<<"$line")
    c=$(awk '{print $2 + $3}' <<<"$line")
    bw=$(awk -v a="$bw" -v b="$w" 'BEGIN{print (b<a)?b:a}')
    bc=$(awk -v a="$bc" -v b="$c" 'BEGIN{print (b<a)?b:a}')
  done
  echo "$bw $bc"
}

if [ "$corpus" = 1 ]; then
  src="$(cd "$(dirname "$0")/.." && pwd)"
  mapfile -t all < <(python3 "$src/tests/corpus/test_corpus.py" --list) || true
  [ ${#all[@]} -gt 0 ] || { echo "bench_decode: the corpus could not be fetched" >&2; exit 1; }
  for t in "${threads[@]}"; do
    printf "%-44s %3s %6s | %9s %9s %6s\n" file thr frames "vflow f/s" "ffmpeg" ratio
    tot_n=0; tot_o=0; tot_p=0; worst=1e9; worst_f=""; nf=0
    for f in "${all[@]}"; do
      line=$("$drv" -t "$t" -s 256x256 -f 16 -r 1 "$f" 2>/dev/null) || continue  # < 16 frames, or not a video
      n=$(awk '{print $2}' <<<"$line")
      read -r ow _ < <(measure "$drv" -t "$t" -s 256x256 -f 16 -r 1 "$f")
      read -r pw _ < <(measure ffmpeg -nostdin -v error -threads "$t" -filter_threads "$t" -i "$f" -an \
        -vf "scale=256:256:force_original_aspect_ratio=increase:flags=bicubic,crop=256:256" \
        -pix_fmt rgb24 -f null -)
      r=$(awk -v o="$ow" -v p="$pw" 'BEGIN{print p/o}')
      awk -v f="$(basename "$f")" -v t="$t" -v n="$n" -v o="$ow" -v p="$pw" -v r="$r" 'BEGIN{
        printf "%-44s %3s %6d | %9.1f %9.1f %5.2fx\n", substr(f, 1, 44), t, n, n/o, n/p, r }'
      tot_n=$((tot_n + n)); nf=$((nf + 1))
      tot_o=$(awk -v a="$tot_o" -v b="$ow" 'BEGIN{print a+b}')
      tot_p=$(awk -v a="$tot_p" -v b="$pw" 'BEGIN{print a+b}')
      if awk -v a="$r" -v b="$worst" 'BEGIN{exit !(a<b)}'; then worst=$r; worst_f=$(basename "$f"); fi
    done
    awk -v nf="$nf" -v t="$t" -v n="$tot_n" -v o="$tot_o" -v p="$tot_p" -v w="$worst" -v wf="$worst_f" 'BEGIN{
      printf "corpus: %d files, %d threads, %d frames: vflow %.1f f/s (%.1f s), ffmpeg %.1f f/s (%.1f s), overall %.2fx, lowest %.2fx (%s)\n",
             nf, t, n, n/o, o, n/p, p, p/o, w, wf }'
  done
  exit 0
fi

printf "%-15s %3s | %9s %9s %6s | %11s %11s %6s\n" file thr "vflow f/s" "ffmpeg" ratio "vflow f/cpu-s" "ffmpeg" ratio
for t in "${threads[@]}"; do
  for f in "${files[@]}"; do
    n=$("$drv" -t "$t" -s 256x256 -f 16 -r 1 "$f" | awk '{print $3}')
    read -r ow oc < <(measure "$drv" -t "$t" -s 256x256 -f 16 -r 1 "$f")
    read -r pw pc < <(measure ffmpeg -nostdin -v error -threads "$t" -filter_threads "$t" -i "$f" \
      -vf "scale=256:256:force_original_aspect_ratio=increase:flags=bicubic,crop=256:256" \
      -pix_fmt rgb24 -f null -)
    awk -v f="$(basename "$f")" -v t="$t" -v n="$n" -v ow="$ow" -v oc="$oc" -v pw="$pw" -v pc="$pc" 'BEGIN{
      printf "%-15s %3s | %9.1f %9.1f %5.2fx | %11.1f %11.1f %5.2fx\n", f, t, n/ow, n/pw, pw/ow, n/oc, n/pc, pc/oc }'
  done
done
