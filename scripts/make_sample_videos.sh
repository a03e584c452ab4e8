#!/usr/bin/env bash
# make_sample_videos.sh — the sample videos `make run` precomputes, and their manifest.
#
#   scripts/make_sample_videos.sh [OUT_DIR]      (default data/samples)
#
# Writes short clips of moving shapes made with ffmpeg's lavfi sources, in several
# codecs (H.264 via libx264 when Debian's ffmpeg has it, MPEG-4 part 2, VP9, MJPEG),
# containers (mp4, mkv, avi, webm), sizes (odd, portrait, rotated by metadata), frame
# rates (15 .. 30000/1001) and one with an audio track, plus OUT_DIR/manifest.csv in the
# Open-Sora layout (path,text,num_frames,height,width,fps; paths relative to the
# manifest). Idempotent: does nothing when the manifest and every file it lists exist.
set -euo pipefail

out="${1:-data/samples}"
dur=3
mkdir -p "$out"
manifest="$out/manifest.csv"

if [ -f "$manifest" ]; then
  ok=1
  while IFS=, read -r path _; do
    [ "$path" = "path" ] && continue
    [ -s "$out/$path" ] || { ok=0; break; }
  done < "$manifest"
  if [ "$ok" = 1 ]; then
    echo "samples: $manifest is up to date"
    exit 0
  fi
fi

command -v ffmpeg >/dev/null || { echo "samples: ffmpeg is missing (scripts/setup.sh installs it)" >&2; exit 1; }
encoders="$(ffmpeg -hide_banner -encoders 2>/dev/null)"
have() { grep -q " $1 " <<<"$encoders"; }
h264=mpeg4; h264_pix=yuv420p
if have libx264; then h264=libx264; fi
vp9=mpeg4; vp9_ext=avi
if have libvpx-vp9; then vp9=libvpx-vp9; vp9_ext=webm; fi

rows=()
# make NAME EXT SIZE FPS CODEC PIXFMT "LAVFI GRAPH" "CAPTION" [extra output args...]
# (AUDIO=1 make ... adds a sine audio track; ROTATE=DEG make ... tags the video with a
#  display rotation, which ffmpeg 5.1 writes only when remuxing)
make() {
  local name=$1 ext=$2 size=$3 fps=$4 codec=$5 pix=$6 graph=$7 caption=$8
  shift 8
  local file="$name.$ext" w=${size%x*} h=${size#*x}
  local -a copts=(-c:v "$codec" -pix_fmt "$pix")
  case "$codec" in
    libx264) copts+=(-preset veryfast -crf 23) ;;
    libvpx-vp9) copts+=(-deadline realtime -cpu-used 8 -crf 32 -b:v 0) ;;
    mpeg4|mjpeg) copts+=(-q:v 4) ;;
  esac
  local -a ains=()
  if [ "${AUDIO:-0}" = 1 ]; then
    ains=(-f lavfi -t "$dur" -i "sine=frequency=440:sample_rate=44100")
    copts+=(-c:a aac -shortest)
  fi
  if [ -n "${ROTATE:-}" ]; then
    ffmpeg -v error -y -f lavfi -i "$graph" "${ains[@]}" -t "$dur" "${copts[@]}" "$@" "$out/.tmp.$file"
    ffmpeg -v error -y -i "$out/.tmp.$file" -c copy -metadata:s:v:0 rotate="$ROTATE" "$out/$file"
    rm -f "$out/.tmp.$file"
  else
    ffmpeg -v error -y -f lavfi -i "$graph" "${ains[@]}" -t "$dur" "${copts[@]}" "$@" "$out/$file"
  fi
  local n
  n=$(ffprobe -v error -select_streams v:0 -count_packets -show_entries stream=nb_read_packets \
        -of default=nw=1:nk=1 "$out/$file" | head -n 1)
  case "${ROTATE:-0}" in 90|270) local t=$w; w=$h; h=$t ;; esac # display size
  # captions are quoted; embedded quotes doubled (RFC 4180)
  local fpsd
  fpsd=$(awk -F/ '{ printf "%.6g", ($2 ? $1 / $2 : $1) }' <<<"$fps")
  rows+=("$file,\"${caption//\"/\"\"}\",$n,$h,$w,$fpsd")
  echo "samples: $file ($codec $pix ${w}x$h @ $fps fps, $n frames)"
}

# moving squares: a coloured box travelling over a plain background
box() { # W H FPS BG FG BOXSIZE XEXPR YEXPR
  echo "color=c=$4:s=$1x$2:r=$3:d=$dur[bg];color=c=$5:s=$6x$6:r=$3:d=$dur[fg];[bg][fg]overlay=x='$7':y='$8':eval=frame[out0]"
}

make red_square_right mp4 160x120 24 "$h264" "$h264_pix" \
  "$(box 160 120 24 navy red 30 'mod(t*70,W)' '(H-h)/2')" \
  "a red square slides from left to right across a navy background"
make green_square_down mkv 128x128 25 "$h264" "$h264_pix" \
  "$(box 128 128 25 white green 24 '(W-w)/2' 'mod(t*50,H)')" \
  "a green square falls from the top to the bottom of a white frame"
make orange_diagonal avi 176x144 25 mpeg4 yuv420p \
  "$(box 176 144 25 black orange 28 'mod(t*60,W)' 'mod(t*45,H)')" \
  "an orange square drifts diagonally, wrapping around a black background"
make gradients_odd "$vp9_ext" 161x97 30 "$vp9" yuv420p \
  "gradients=s=161x97:r=30:speed=0.03:d=$dur[out0]" \
  "soft colour gradients, slowly rotating (odd frame size)"
make life_mjpeg avi 120x90 15 mjpeg yuvj420p \
  "life=s=120x90:r=15:mold=10:ratio=0.1:life_color=#00ff00:death_color=#c83232[out0]" \
  "cellular automaton, green cells growing and dying on a dark red field"
AUDIO=1 make testsrc_ntsc mp4 192x108 30000/1001 "$h264" "$h264_pix" \
  "testsrc2=s=192x108:r=30000/1001:d=$dur[out0]" \
  "a test pattern with colour bars, a moving gradient and a running counter, at 29.97 fps"
make mandelbrot_zoom mkv 96x96 20 mpeg4 yuv420p \
  "mandelbrot=s=96x96:r=20[out0]" \
  "zooming into the Mandelbrot set, colours cycling"
ROTATE=90 make portrait_rotated mp4 160x96 24 "$h264" "$h264_pix" \
  "$(box 160 96 24 maroon yellow 20 'mod(t*60,W)' '(H-h)/2')" \
  "a yellow square moving vertically in a portrait video stored sideways with rotation metadata"

{
  echo "path,text,num_frames,height,width,fps"
  printf '%s\n' "${rows[@]}"
} > "$manifest.tmp"
mv "$manifest.tmp" "$manifest"
echo "samples: wrote $manifest (${#rows[@]} videos)"
