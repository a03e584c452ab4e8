/* cache_cond.c — the image-to-video conditioning of a latent cache (formats/cache_format.h,
 * "Image-to-video conditioning"): the kind of an entry and of a cache, and the check of
 * an entry's first-frame latent "y". The kind lives in the summary so a reader can refuse
 * a cache that does not fit its model before it reads one entry. */
#include "formats/cache_format.h"

#include <string.h>

static const char *const cond_names[] = {"text", "concat", "concat+clip", "first_frame"};

const char *vf_cache_cond_name(vf_cache_cond c)
{
    return c >= VF_CACHE_COND_TEXT && c <= VF_CACHE_COND_FIRST_FRAME ? cond_names[c] : "?";
}

int vf_cache_cond_parse(const char *s, vf_cache_cond *out)
{
    for (int i = 0; i < 4; i++)
        if (s && !strcmp(s, cond_names[i])) {
            *out = (vf_cache_cond)i;
            return 0;
        }
    return VF_EINVAL;
}

vf_cache_cond vf_cache_item_cond(const vf_item *it)
{
    double ff;
    if (!vf_item_get(it, VF_CACHE_Y_TENSOR))
        return vf_item_num(it, VF_CACHE_FIRST_FRAME_KEY, &ff) == 0 && ff == 1 ? VF_CACHE_COND_FIRST_FRAME
                                                                            : VF_CACHE_COND_TEXT;
    if (vf_item_get(it, VF_CACHE_CLIP_TENSOR) || vf_item_str(it, "clip_key")) return VF_CACHE_COND_CONCAT_CLIP;
    return VF_CACHE_COND_CONCAT;
}

vf_cache_cond vf_cache_meta_cond(const vf_json *meta)
{
    vf_cache_cond c = VF_CACHE_COND_TEXT;
    if (meta && vf_cache_cond_parse(vf_json_get_str(meta, "cond", "text"), &c) != 0) return VF_CACHE_COND_TEXT;
    return c;
}

int vf_cache_meta_count_cond(vf_json *meta, vf_cache_cond c, vf_status *st)
{
    /* called after vf_cache_meta_count: "entries" already holds this one */
    int64_t before = vf_json_get_int(meta, "entries", 0) - 1;
    vf_cache_cond have = vf_cache_meta_cond(meta);
    if (before > 0 && have != c)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "an entry of conditioning kind %s into a cache of kind %s (%lld entries): write it to "
                             "a cache of its own", vf_cache_cond_name(c), vf_cache_cond_name(have), (long long)before);
    if (c == VF_CACHE_COND_TEXT || before > 0) return 0;
    vf_json *v = vf_json_str(vf_cache_cond_name(c));
    if (!v || vf_json_set(meta, "cond", v) != 0)
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    return 0;
}

int vf_cache_check_y(const vf_item *it, vf_status *st)
{
    const vf_tensor *y = vf_item_get(it, VF_CACHE_Y_TENSOR), *lat = vf_item_get(it, VF_CACHE_TENSOR);
    if (!y) return 0;
    if (y->dtype != VF_DTYPE_F32 || y->device.kind != VF_DEV_CPU || !lat || y->ndim != lat->ndim ||
        memcmp(y->shape, lat->shape, sizeof(int64_t) * (size_t)lat->ndim) != 0) {
        char a[96], b[96] = "none";
        vf_shape_str(y->ndim, y->shape, a, sizeof a);
        if (lat) vf_shape_str(lat->ndim, lat->shape, b, sizeof b);
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "item \"%s\": tensor \"" VF_CACHE_Y_TENSOR "\" is %s %s; expected host f32 of the "
                             "latent's shape %s", vf_item_id(it), vf_dtype_name(y->dtype), a, b);
    }
    return 0;
}
