#!/usr/bin/env bash
# test_decode_run.sh — `vflow run` of decode -> null_sink over a directory mixing good
# videos with bad ones (corrupt, truncated, zero bytes, text renamed .mp4, audio only,
# too short): every file gives exactly the clips that ffprobe's readable frames make
# (null_sink checks the total), damaged ones are logged as such, the files with no clip
# land in quarantine.jsonl with a reason, exit 0; workers = 2 splits the
# files between two decode processes; max_bad_fraction aborts with exit 1 and a message
# naming the fraction; a missing manifest or contradictory params exit 2; a decoder that
# hangs inside libav or crashes (simulated with VFLOW_FAULT_DECODE) fails the run naming
# the file, and the next run in the same run dir skips that file and succeeds.
# vflow-test: labels=decode timeout=300
set -euo pipefail

VFLOW_BIN=${VFLOW_BIN:?}
MKVIDEO="${VFLOW_BUILD:?}/tools/mkvideo"
PY=${VFLOW_PY:-/usr/bin/python3}
tmp=$(mktemp -d /tmp/vf_decode_run.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

v="$tmp/videos"
mkdir -p "$v"
# good: 24, 20 and 17 frames -> with frames=8: 3 + 2 + 2 = 7 clips
"$MKVIDEO" -o "$v/good_h264.mp4" -n 24 -s 128x96 >/dev/null 2>&1
"$MKVIDEO" -o "$v/good_vp9_audio.webm" -n 20 -s 96x96 --audio >/dev/null 2>&1
"$MKVIDEO" -o "$v/good_mpeg4.avi" -c mpeg4 -n 17 -s 96x64 >/dev/null 2>&1
# bad
"$MKVIDEO" -o "$tmp/src.mp4" -n 40 -s 128x96 --faststart >/dev/null 2>&1
head -c "$(( $(stat -c %s "$tmp/src.mp4") * 6 / 10 ))" "$tmp/src.mp4" > "$v/truncated.mp4"
"$MKVIDEO" -o "$tmp/src.mkv" -c mpeg4 -n 40 -s 128x96 >/dev/null 2>&1
cp "$tmp/src.mkv" "$v/corrupt.mkv"
# fixed garbage over 3%..45% of the file: damages the first clip, keeps the header
"$PY" - "$v/corrupt.mkv" <<'EOF'
import random, sys
b = bytearray(open(sys.argv[1], "rb").read())
r = random.Random(7)
for i in range(len(b) * 3 // 100, len(b) * 45 // 100):
    b[i] = r.randrange(256)
open(sys.argv[1], "wb").write(bytes(b))
EOF
: > "$v/zero.mp4"
echo "this is a text file, not a video" > "$v/notes.mp4"
ffmpeg -v error -f lavfi -i sine=frequency=440:duration=1 -c:a aac -y "$v/audio_only.mp4"
"$MKVIDEO" -o "$v/too_short.mp4" -n 5 -s 64x64 >/dev/null 2>&1

cat > "$tmp/p.lua" <<'EOF'
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "decode_run"
local d = p:stage("decode", {
  source = a.source, manifest = a.manifest, frames = 8, size = { 40, 32 },
  workers = a.workers or 1, max_bad_fraction = a.max_bad or 1.0, bad_min_files = a.bad_min, stride = a.stride, fps = a.fps,
  deadline_s = a.deadline,
})
if (a.workers or 1) > 1 then
  for i, m in ipairs(d.members) do
    p:connect(m, p:stage("null_sink", { name = "sink" .. i }))
  end
else
  p:connect(d, p:stage("null_sink", { expect_count = a.expect or -1 }), { capacity = 2 })
end
return p
EOF

# the reference: clips of 8 frames that ffprobe's readable frames make, per file
readable() { ffprobe -v error -select_streams v:0 -count_frames -show_entries stream=nb_read_frames \
  -of csv=p=0 "$1" 2>/dev/null | head -1 | tr -dc 0-9; }
total=0; damaged_clips=0
for f in "$v"/*; do
  n=$(readable "$f" || true); n=${n:-0}
  total=$(( total + n / 8 ))
  case "$(basename "$f")" in truncated.mp4|corrupt.mkv) damaged_clips=$(( damaged_clips + n / 8 ));; esac
done
[ "$damaged_clips" -gt 0 ] || fail "the damaged files should keep readable frames (ffprobe reads none)"
echo "ffprobe's frames make $total clips ($damaged_clips from the damaged files)"

# 1. mixed directory: exit 0, exact clip count, the files without a clip quarantined
rc=0
"$VFLOW_BIN" run "$tmp/p.lua" --set source="$v" --set expect=$total --run-dir "$tmp/r1" >"$tmp/out1" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/out1"; fail "mixed directory: exit $rc, want 0"; }
grep -q "damaged: .*truncated.mp4" "$tmp/r1/run.log" || { cat "$tmp/r1/run.log"; fail "truncated.mp4: damage not logged"; }
grep -q "damaged: .*corrupt.mkv" "$tmp/r1/run.log" || fail "corrupt.mkv: damage not logged"
grep -q '"damaged"' "$tmp/r1/metrics.jsonl" || fail "metrics lack damaged"
"$PY" - "$tmp/r1/quarantine.jsonl" "$v" <<'EOF' || fail "quarantine.jsonl content"
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
got = {os.path.basename(r["path"]): r["reason"] for r in rows}
want = {"zero.mp4": "empty", "notes.mp4": "not a media file", "audio_only.mp4": "no video stream",
        "too_short.mp4": "5 frames readable, 8 needed"}
ok = True
for name, word in want.items():
    if name not in got:
        print("missing from quarantine:", name); ok = False
    elif not got[name] or word not in got[name]:
        print("reason for %s lacks '%s': %s" % (name, word, got[name])); ok = False
for name in got:
    if name not in want:
        print("wrongly quarantined:", name, got[name]); ok = False
for r in rows:
    if r.get("stage") != "decode" or not os.path.isabs(r["path"]):
        print("bad row", r); ok = False
print("\n".join("  %-16s %s" % kv for kv in sorted(got.items())))
sys.exit(0 if ok else 1)
EOF

# 2. two decode processes share the files: same quarantine set, same clips in total
rc=0
"$VFLOW_BIN" run "$tmp/p.lua" --set source="$v" --set workers=2 --run-dir "$tmp/r2" >"$tmp/out2" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/out2"; fail "workers=2: exit $rc"; }
n=$(wc -l < "$tmp/r2/quarantine.jsonl")
[ "$n" -eq 4 ] || fail "workers=2: $n quarantined, want 4"
grep -q '"stage":"decode_0"' "$tmp/r2/quarantine.jsonl" && grep -q '"stage":"decode_1"' "$tmp/r2/quarantine.jsonl" \
  || fail "workers=2: both instances should have quarantined files"
clips=$(grep -E '^ +decode_[01] ' "$tmp/out2" | awk '{ s += $4 } END { print s }')
[ "$clips" = $total ] || { cat "$tmp/out2"; fail "workers=2: $clips clips, want $total"; }

# 3. max_bad_fraction: 4 of 9 bad > 0.3 -> exit 1 with the fraction in the message (judged
# from the first file on: bad_min_files=1; the default waits for 20)
rc=0
"$VFLOW_BIN" run "$tmp/p.lua" --set source="$v" --set max_bad=0.3 --set bad_min=1 --run-dir "$tmp/r3" >"$tmp/out3" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$tmp/out3"; fail "max_bad_fraction: exit $rc, want 1"; }
grep -q "max_bad_fraction 0.3" "$tmp/out3" || { cat "$tmp/out3"; fail "message lacks the fraction"; }
grep -q "last reasons:" "$tmp/out3" || fail "message lacks the last reasons"

# 4. bad input: missing manifest, contradictory params -> exit 2 naming the problem
rc=0
"$VFLOW_BIN" run "$tmp/p.lua" --set manifest="$tmp/nope.csv" --run-dir "$tmp/r4" >"$tmp/out4" 2>&1 || rc=$?
[ $rc -eq 2 ] || { cat "$tmp/out4"; fail "missing manifest: exit $rc, want 2"; }
grep -q "nope.csv" "$tmp/out4" || fail "missing manifest: message does not name the file"
rc=0
"$VFLOW_BIN" run "$tmp/p.lua" --set source="$v" --set stride=2 --set fps=10 --run-dir "$tmp/r5" >"$tmp/out5" 2>&1 || rc=$?
[ $rc -eq 2 ] || { cat "$tmp/out5"; fail "stride+fps: exit $rc, want 2"; }
grep -q "not both" "$tmp/out5" || { cat "$tmp/out5"; fail "stride+fps: unclear message"; }
# 5. a hung decoder: the watchdog ends the worker past deadline + grace (5 s), names the
#    file; the rerun skips it
rc=0
VFLOW_FAULT_DECODE=hang:good_mpeg4.avi "$VFLOW_BIN" run "$tmp/p.lua" --set source="$v" --set deadline=1 \
  --run-dir "$tmp/r6" >"$tmp/out6" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$tmp/out6"; fail "hang: exit $rc, want 1"; }
grep -q "good_mpeg4.avi: decoder hung" "$tmp/out6" || { cat "$tmp/out6"; fail "hang: file not named"; }
grep -q "good_mpeg4.avi" "$tmp/r6/decode_fatal.jsonl" || fail "hang: not recorded"
rc=0
VFLOW_FAULT_DECODE=hang:good_mpeg4.avi "$VFLOW_BIN" run "$tmp/p.lua" --set source="$v" --set deadline=1 \
  --set expect=$(( total - 2 )) --run-dir "$tmp/r6" >"$tmp/out7" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/out7"; fail "rerun after hang: exit $rc, want 0"; }
grep -q 'good_mpeg4.avi","reason":"skipped' "$tmp/r6/quarantine.jsonl" || fail "rerun after hang: not skipped"

# 6. a crashing decoder (SIGSEGV): recorded by the signal handler, skipped on rerun
rc=0
VFLOW_FAULT_DECODE=crash:good_h264.mp4 "$VFLOW_BIN" run "$tmp/p.lua" --set source="$v" \
  --run-dir "$tmp/r8" >"$tmp/out8" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$tmp/out8"; fail "crash: exit $rc, want 1"; }
grep -q "SIGSEGV" "$tmp/out8" || { cat "$tmp/out8"; fail "crash: signal not reported"; }
grep -q 'good_h264.mp4.*decoder crashed (SIGSEGV)' "$tmp/r8/decode_fatal.jsonl" || fail "crash: not recorded"
rc=0
VFLOW_FAULT_DECODE=crash:good_h264.mp4 "$VFLOW_BIN" run "$tmp/p.lua" --set source="$v" --set expect=$(( total - 3 )) \
  --run-dir "$tmp/r8" >"$tmp/out9" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$tmp/out9"; fail "rerun after crash: exit $rc, want 0"; }
echo "ok"
