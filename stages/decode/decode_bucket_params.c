/* decode_bucket_params.c — the decode stage's bucket params: `buckets` (a list) or
 * `bucket_config` (Open-Sora's table) read into buckets, and the largest frame and clip
 * they make, which memory and ports are sized for (decode_bucket.h).
 */
#include "stages/decode/decode_bucket.h"

#include <string.h>

/* The largest frame size and clip of the buckets: what memory and ports are sized for. */
void vf_decode_bucket_bounds(const vf_buckets *bk, int *maxW, int *maxH, int *maxT, int64_t *max_clip)
{
    *maxW = *maxH = *maxT = 0;
    *max_clip = 0;
    for (int i = 0; i < bk->n; i++) {
        const vf_bucket *b = &bk->b[i];
        if (b->w > *maxW) *maxW = b->w;
        if (b->h > *maxH) *maxH = b->h;
        for (int k = 0; k < b->nlens; k++) {
            if (b->frames[k] > *maxT) *maxT = b->frames[k];
            int64_t c = (int64_t)b->frames[k] * b->h * b->w * 3;
            if (c > *max_clip) *max_clip = c;
        }
    }
}

int vf_decode_read_buckets(const vf_params *p, vf_buckets *bk, vf_status *st)
{
    int rc = 0;
    memset(bk, 0, sizeof *bk);
    bool has_l = vf_param_has(p, "buckets"), has_c = vf_param_has(p, "bucket_config");
    if (has_l && has_c)
        VF_FAIL(st, VF_EUSAGE, "decode: give buckets (a list of {w, h, frames, batch}) or bucket_config "
                "(resolution -> length -> {keep, batch}), not both");
    if (!has_l && !has_c) return 0;
    int vs = (int)vf_param_int(p, "vae_stride"), pa = (int)vf_param_int(p, "patch");
    if (has_l) VF_TRY(vf_buckets_parse(vf_json_get(vf_params_ctree(p), "buckets"), vs, pa, bk, st));
    else VF_TRY(vf_bucket_config_parse(vf_json_get(vf_params_ctree(p), "bucket_config"), vs, pa, bk, st));
    for (int i = 0; i < bk->n; i++)
        if ((int64_t)bk->b[i].w * bk->b[i].h > vf_param_int(p, "max_pixels"))
            VF_FAIL(st, VF_EUSAGE, "decode: bucket %dx%d is larger than max_pixels=%lld", bk->b[i].w, bk->b[i].h,
                    (long long)vf_param_int(p, "max_pixels"));
fail:
    return rc;
}
