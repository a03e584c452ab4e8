/* decode_replan.h — plan a file's clips again after frames proved unreadable.
 *
 * The decode core reports frames the decoder cannot deliver (vf_decode_lost). They are
 * not the file's frames as ffmpeg counts them, so they are dropped from the index and the
 * clips are planned again over the frames that remain. Clips already taken lie before
 * the loss and keep their grid positions; the walk continues at the first new clip whose
 * grid position is at or after the failed one. The decode stage, its tests and the bench
 * share this one rule.
 */
#ifndef VF_DECODE_REPLAN_H
#define VF_DECODE_REPLAN_H
#include "stages/decode/decode_av.h"
#include "stages/decode/decode_clip.h"

/* After vf_decode_read of clip *k of *plan failed: when the read proved frames unreadable,
 * drops them from f, replaces *plan (owned by the caller before and after) with the plan
 * over the remaining frames and sets *k to one before the clip to read next (the caller's
 * loop increments it); *nlost grows by the frames dropped; st is cleared.
 * Returns 1 when the read proved nothing lost (its own error stands; nothing changed),
 * 0 when planned again (the loop ends when no new clip lies at or after the failed one),
 * VF_EBADINPUT when the remaining frames make no clip at all (st says why; *plan is
 * empty), VF_ENOMEM. */
int vf_decode_replan(vf_decode_file *f, const vf_clip_opts *co, vf_clip_plan *plan, int64_t *k,
                     int64_t *nlost, vf_status *st);

#endif
