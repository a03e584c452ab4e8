#!/usr/bin/env bash
# bench_decode.sh — decode + resize + centre-crop throughput: vflow's decode core
# against the ffmpeg CLI, on the same files, output size and thread count.
#
#   bench/bench_decode.sh [BUILD_DIR] [THREADS...]        (default: build, "1 2")
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

build="${1:-build}"
shift || true
threads=("$@")
[ ${#threads[@]} -eq 0 ] && threads=(1 2)
repeats="${REPEATS:-3}"
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
