/* decode_clip.h — which source frames each clip of a video holds.
 *
 * Pure arithmetic over a file's frame times (decode_av.h gives them), so it is tested
 * without any video. Clips sit on a fixed grid of non-overlapping positions: with
 * `stride` S and `frames` T, grid clip m holds frames a + m*T*S + j*S (j < T), a being
 * the first frame of the window [start, end); with a target `fps`, grid clip m samples
 * the times t0 + (m*T + j)/fps and takes the nearest frame to each (ties: the earlier
 * one). A grid clip that would repeat a frame (source slower than the target rate) or
 * run past the end is not offered: frames are never duplicated or invented.
 * `clips_per_video` = n picks n of the valid grid clips spread evenly (all when 0 or
 * when fewer exist). The grid index m is the clip's identity (item meta "clip").
 */
#ifndef VF_DECODE_CLIP_H
#define VF_DECODE_CLIP_H
#include "runtime/vflow.h"

typedef struct vf_clip_opts {
    int frames;           /* T >= 1 */
    int stride;           /* >= 1; ignored when fps > 0 */
    double fps;           /* target frame rate; 0: use stride */
    int clips_per_video;  /* 0: all */
    double start_s;       /* window start, seconds from frame 0; <= 0: from the start */
    double end_s;         /* window end (exclusive); <= 0: to the end */
} vf_clip_opts;

typedef struct vf_clip_plan {
    int frames;           /* T */
    int64_t nclips;
    int64_t *grid;        /* (nclips) grid index of each clip, increasing */
    int64_t *idx;         /* (nclips, frames) source frame indices, increasing */
} vf_clip_plan;

/* times: (n) increasing seconds of each frame; duration_s: end of the last frame.
 * Fills *out (caller calls vf_clip_plan_fini, also after a failure). No valid clip is
 * an error: VF_EBADINPUT with the reason ("too short: ...", "source frame rate ...").
 * VF_ENOMEM when the plan does not fit. */
int vf_clip_plan_make(const double *times, int64_t n, double duration_s,
                      const vf_clip_opts *o, vf_clip_plan *out, vf_status *st);
void vf_clip_plan_fini(vf_clip_plan *p);

/* Source frames one clip spans (for messages and budgets). */
static inline int64_t vf_clip_span(const vf_clip_opts *o)
{
    return (int64_t)(o->frames - 1) * (o->stride > 0 ? o->stride : 1) + 1;
}
#endif
