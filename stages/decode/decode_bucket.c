/* decode_bucket.c — bucket params, assignment and per-video length (see decode_bucket.h). */
#include "stages/decode/decode_bucket.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TIE_EPS 1e-9

void vf_bucket_name(const vf_bucket *b, int f, char *buf, size_t n)
{
    snprintf(buf, n, "%dx%dx%d", b->w, b->h, f);
}

/* an integral JSON number into *v; false otherwise */
static bool json_int(const vf_json *j, int64_t *v)
{
    if (!j) return false;
    if (j->type == VF_JSON_INT) { *v = j->i; return true; }
    if (j->type == VF_JSON_NUM && j->n == floor(j->n) && fabs(j->n) < 9e15) { *v = (int64_t)j->n; return true; }
    return false;
}

static int parse_one(const vf_json *o, int i, int mult, vf_bucket *b, vf_status *st)
{
    int rc = 0;
    int64_t w = 0, h = 0, v;
    char who[64];
    if (!o || o->type != VF_JSON_OBJ)
        VF_FAIL(st, VF_EUSAGE, "decode: buckets[%d] is not a table {w = W, h = H, frames = {...}, batch = ...}", i + 1);
    for (int k = 0; k < vf_json_len(o); k++) {
        const char *key = vf_json_key_at(o, k);
        if (strcmp(key, "w") && strcmp(key, "h") && strcmp(key, "frames") && strcmp(key, "batch"))
            VF_FAIL(st, VF_EUSAGE, "decode: buckets[%d]: unknown key '%s' (known: w, h, frames, batch)", i + 1, key);
    }
    if (!json_int(vf_json_get(o, "w"), &w) || !json_int(vf_json_get(o, "h"), &h) || w < 1 || h < 1 ||
        w > 16384 || h > 16384)
        VF_FAIL(st, VF_EUSAGE, "decode: buckets[%d]: w and h must be integers in 1..16384", i + 1);
    snprintf(who, sizeof who, "decode: bucket %lldx%lld (buckets[%d])", (long long)w, (long long)h, i + 1);
    if (w % mult || h % mult)
        VF_FAIL(st, VF_EUSAGE, "%s: %s %lld is not a multiple of %d (VAE stride x DiT patch); try %lldx%lld",
                who, w % mult ? "width" : "height", (long long)(w % mult ? w : h), mult,
                (long long)((w + mult - 1) / mult * mult), (long long)((h + mult - 1) / mult * mult));
    b->w = (int)w, b->h = (int)h;
    const vf_json *fr = vf_json_get(o, "frames"), *ba = vf_json_get(o, "batch");
    if (!fr || fr->type != VF_JSON_ARR || fr->len == 0)
        VF_FAIL(st, VF_EUSAGE, "%s: frames must be a non-empty list of clip lengths (1 + 4k: 17, 33, 49, ...)", who);
    if (fr->len > VF_BUCKET_MAX_LENS)
        VF_FAIL(st, VF_EUSAGE, "%s: %d lengths; at most %d", who, fr->len, VF_BUCKET_MAX_LENS);
    b->nlens = fr->len;
    for (int k = 0; k < fr->len; k++) {
        if (!json_int(vf_json_at(fr, k), &v) || v < 1 || v > 4096)
            VF_FAIL(st, VF_EUSAGE, "%s: frames[%d] must be an integer in 1..4096", who, k + 1);
        if ((v - 1) % 4)
            VF_FAIL(st, VF_EUSAGE, "%s: length %lld is not 1 + 4k (the causal VAE's frame grouping); try %lld or %lld",
                    who, (long long)v, (long long)(1 + (v - 1) / 4 * 4), (long long)(1 + ((v - 1) / 4 + 1) * 4));
        for (int j = 0; j < k; j++)
            if (b->frames[j] == v) VF_FAIL(st, VF_EUSAGE, "%s: length %lld listed twice", who, (long long)v);
        b->frames[k] = (int)v;
    }
    if (!ba)
        VF_FAIL(st, VF_EUSAGE, "%s: batch missing (one integer, or a list with one batch per length)", who);
    if (ba->type == VF_JSON_ARR && ba->len != fr->len)
        VF_FAIL(st, VF_EUSAGE, "%s: %d lengths (frames) but %d batch sizes; give one per length or one integer",
                who, fr->len, ba->len);
    for (int k = 0; k < fr->len; k++) {
        const vf_json *e = ba->type == VF_JSON_ARR ? vf_json_at(ba, k) : ba;
        if (!json_int(e, &v))
            VF_FAIL(st, VF_EUSAGE, "%s: batch%s must be an integer", who, ba->type == VF_JSON_ARR ? " entries" : "");
        if (v < 1 || v > 65536)
            VF_FAIL(st, VF_EUSAGE, "%s: batch %lld for length %d; it must be in 1..65536", who, (long long)v,
                    b->frames[k]);
        b->batch[k] = (int)v;
        b->keep[k] = 1;
    }
    b->res = -1;
fail:
    return rc;
}

int vf_buckets_parse(const vf_json *arr, int vae_stride, int patch, vf_buckets *out, vf_status *st)
{
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (!arr || arr->type != VF_JSON_ARR || arr->len == 0)
        VF_FAIL(st, VF_EUSAGE, "decode: buckets must be a non-empty list of {w = W, h = H, frames = {...}, batch = ...}");
    if (arr->len > VF_BUCKET_MAX) VF_FAIL(st, VF_EUSAGE, "decode: %d buckets; at most %d", arr->len, VF_BUCKET_MAX);
    for (int i = 0; i < arr->len; i++) {
        VF_TRY(parse_one(vf_json_at(arr, i), i, vae_stride * patch, &out->b[i], st));
        for (int j = 0; j < i; j++)
            if (out->b[j].w == out->b[i].w && out->b[j].h == out->b[i].h)
                VF_FAIL(st, VF_EUSAGE, "decode: bucket %dx%d listed twice (buckets[%d] and buckets[%d]); "
                        "give its lengths in one entry", out->b[i].w, out->b[i].h, j + 1, i + 1);
        out->n = i + 1;
    }
fail:
    return rc;
}

double vf_bucket_dar(int coded_w, int coded_h, double sar, bool transpose)
{
    if (!(sar > 0)) sar = 1;
    double pw = coded_w * sar, ph = coded_h; /* physical size in source orientation */
    if (coded_w < 1 || coded_h < 1) return 1;
    return transpose ? ph / pw : pw / ph;
}

int vf_bucket_pick(const vf_buckets *bs, double dar)
{
    int best = 0;
    double ld = log(dar > 0 ? dar : 1), bd = INFINITY;
    int64_t barea = -1;
    for (int i = 0; i < bs->n; i++) {
        const vf_bucket *b = &bs->b[i];
        double d = fabs(log((double)b->w / b->h) - ld);
        int64_t area = (int64_t)b->w * b->h;
        if (d < bd - TIE_EPS || (fabs(d - bd) <= TIE_EPS && area > barea)) {
            best = i, bd = d, barea = area;
        }
    }
    return best;
}

int vf_bucket_plan(const double *times, int64_t n, double duration_s, const vf_bucket *b,
                   vf_clip_opts *co, vf_clip_plan *plan, int *len, vf_status *st)
{
    int order[VF_BUCKET_MAX_LENS];
    for (int i = 0; i < b->nlens; i++) order[i] = i;
    for (int i = 1; i < b->nlens; i++) /* longest first */
        for (int j = i; j > 0 && b->frames[order[j]] > b->frames[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int rc = VF_EBADINPUT;
    for (int i = 0; i < b->nlens; i++) {
        vf_clip_plan_fini(plan);
        if (st) vf_status_clear(st);
        co->frames = b->frames[order[i]];
        rc = vf_clip_plan_make(times, n, duration_s, co, plan, st);
        if (rc == 0) {
            *len = order[i];
            return 0;
        }
        if (rc != VF_EBADINPUT) return rc;
    }
    return rc;
}
