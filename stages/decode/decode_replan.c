/* decode_replan.c — plan a file's clips again after frames proved unreadable (see the header). */
#include "stages/decode/decode_replan.h"

int vf_decode_replan(vf_decode_file *f, const vf_clip_opts *co, vf_clip_plan *plan, int64_t *k,
                     int64_t *nlost, vf_status *st)
{
    int64_t lo, hi;
    if (!vf_decode_lost(f, &lo, &hi)) return 1;
    const int64_t g = plan->grid[*k];
    vf_decode_drop(f, lo, hi);
    *nlost += hi - lo;
    vf_clip_plan_fini(plan);
    vf_status_clear(st);
    const vf_decode_info *info = vf_decode_get_info(f);
    int rc = vf_clip_plan_make(vf_decode_frame_times(f), info->nframes, info->duration_s, co, plan, st);
    if (rc < 0) return rc;
    int64_t j = 0;
    while (j < plan->nclips && plan->grid[j] < g) j++;
    *k = j - 1;
    return 0;
}
