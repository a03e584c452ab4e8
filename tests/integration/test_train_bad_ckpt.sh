#!/bin/bash
# test_train_bad_ckpt.sh — bad run dirs and checkpoint dirs, through the real binary: each
# is refused with exit 2 and a line naming the path, or (a damaged checkpoint on resume)
# skipped loudly for an older complete one; never a crash, never a silent fresh start.
#  - a run dir on a read-only filesystem (a tmpfs remounted read-only in a private mount
#    namespace, as root; skipped with a note elsewhere);
#  - a checkpoint dir that is a file (given with ckpt=, and <run dir>/ckpt);
#  - `latest` a symlink leading outside the checkpoint dir (absolute, and ../);
#  - `latest` naming a step dir that is not there: WARN, resume from the newest complete;
#    with no step dir left, --resume and --resume=auto both exit 2;
#  - a manifest naming a file that is not there: that checkpoint is skipped with a WARN
#    naming the file; with every checkpoint so damaged, --resume and --resume=auto exit 2.
# vflow-test: timeout=240
set -u
source "$(dirname "$0")/train_lib.sh"
cd "$TMP"

COMMON=(--set batch=4 --set stages=2 --set shards=2 --set micro_batches=2 --set lr=2e-3 --set every=2 --set keep=3)

# expect2 NAME WHAT PATTERN: the run NAME (output NAME.out) exited 2 with PATTERN in a "vflow:" line
expect2() {
  local rc=$1 name=$2 what=$3 pat=$4
  [ "$rc" -eq 2 ] || fail "$what: exit $rc, expected 2: $(tail -3 "$name.out")"
  grep -q "^vflow: .*$pat" "$name.out" || fail "$what: no line matching '$pat': $(grep '^vflow:' "$name.out")"
  grep -qi "segmentation\|core dumped\|assert" "$name.out" && fail "$what: crashed: $(tail -3 "$name.out")"
  echo "$what: exit 2: $(grep -o "$pat.*" "$name.out" | head -1 | cut -c1-160)"
}

# a checkpoint dir that is a file
touch afile
train f1 "${COMMON[@]}" --set steps=4 --set ckpt="$TMP/afile"
expect2 $? f1 "ckpt= a file" "$TMP/afile is not a directory"
mkdir f2 && touch f2/ckpt
train f2 "${COMMON[@]}" --set steps=4 --resume
expect2 $? f2 "<run dir>/ckpt a file, --resume" "$TMP/f2/ckpt is not a directory"

# a good run to damage: checkpoints at steps 2, 4, 6
train g "${COMMON[@]}" --set steps=6 || fail "run g: $(tail -5 g.out)"
[ "$(ls -d g/ckpt/step-* | wc -l)" = 3 ] || fail "run g: $(ls g/ckpt)"
cp -a g g0

# latest leading outside the checkpoint dir
mkdir -p outside/step-6
rm g/ckpt/latest && ln -s "$TMP/outside/step-6" g/ckpt/latest
train g "${COMMON[@]}" --set steps=8 --resume
expect2 $? g "latest -> an absolute path outside" "$TMP/g/ckpt/latest points outside the checkpoint dir"
rm g/ckpt/latest && ln -s ../../outside/step-6 g/ckpt/latest
train g "${COMMON[@]}" --set steps=8 --resume=auto
expect2 $? g "latest -> ../ outside (--resume=auto)" "$TMP/g/ckpt/latest points outside the checkpoint dir"
[ "$(ls g/ckpt)" = "$(printf 'latest\nstep-2\nstep-4\nstep-6')" ] || fail "the refused runs touched the checkpoints: $(ls g/ckpt)"

# latest naming a step that is not there: loud, and the newest complete one is used
rm g/ckpt/latest && echo step-9 > g/ckpt/latest
train g "${COMMON[@]}" --set steps=8 --resume || fail "latest -> a missing step: $(tail -5 g.out)"
grep -q "WARN.*$TMP/g/ckpt/latest names step-9, which is not there" g/run.log || fail "latest -> step-9 not reported"
grep -q "resuming from $TMP/g/ckpt/step-6 (step 6)" g/run.log || fail "latest -> step-9: did not resume from step 6"
echo "latest -> a missing step-9: WARN, resumed from step 6"

# a manifest naming a file that is not there: skipped loudly for the previous checkpoint
rm -rf g && cp -a g0 g
rm g/ckpt/step-6/optimizer-01-of-02.safetensors
train g "${COMMON[@]}" --set steps=8 --resume || fail "manifest naming a missing file: $(tail -5 g.out)"
grep -q "WARN.*skipping damaged checkpoint $TMP/g/ckpt/step-6: .*optimizer-01-of-02.safetensors: listed in the manifest but not there" g/run.log ||
  fail "the missing file is not reported: $(grep -i 'skipping' g/run.log | head -2)"
grep -q "resuming from $TMP/g/ckpt/step-4 (step 4)" g/run.log || fail "missing file: did not resume from step 4"
echo "manifest naming a missing file: WARN naming it, resumed from step 4"

# every checkpoint damaged: --resume and --resume=auto refuse (no fresh start over them)
rm -rf g && cp -a g0 g
for s in 2 4 6; do rm g/ckpt/step-$s/model.safetensors; done
train g "${COMMON[@]}" --set steps=8 --resume
expect2 $? g "every checkpoint damaged, --resume" "every step dir in $TMP/g/ckpt is damaged (3 skipped)"
train g "${COMMON[@]}" --set steps=8 --resume=auto
expect2 $? g "every checkpoint damaged, --resume=auto" "every step dir in $TMP/g/ckpt is damaged"
[ "$(steps_done g)" = 6 ] || fail "a refused resume trained: $(steps_done g) step rows"
rm -rf g/ckpt/step-*
train g "${COMMON[@]}" --set steps=8 --resume=auto
expect2 $? g "no step dir, latest -> step-6, --resume=auto" "$TMP/g/ckpt/latest names step-6, which is not there, and there is no other step dir"

# a run dir on a read-only filesystem
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  mkdir ro
  unshare -m bash -c "mount -t tmpfs -o size=1m tmpfs '$TMP/ro' && mkdir '$TMP/ro/r' && mount -o remount,ro '$TMP/ro' && \
    { '$VFLOW' run '$PIPE' --run-dir '$TMP/ro/r' --set cache='$CACHE' ${COMMON[*]} --set steps=4 > ro1.out 2>&1; echo \$? > ro1.rc; \
      '$VFLOW' run '$PIPE' --run-dir '$TMP/ro/new' --set cache='$CACHE' ${COMMON[*]} --set steps=4 > ro2.out 2>&1; echo \$? > ro2.rc; }" ||
    fail "could not set up the read-only tmpfs"
  expect2 "$(cat ro1.rc)" ro1 "read-only run dir" "run dir $TMP/ro/r is not a writable directory: .*Read-only file system"
  expect2 "$(cat ro2.rc)" ro2 "run dir to create on a read-only fs" "run dir: cannot create $TMP/ro/new: Read-only file system"
else
  echo "note: the read-only filesystem part needs root and a private mount namespace; skipped"
fi
echo "PASS"
