/* decode_bucket_config.c — the Open-Sora form of the decode stage's buckets: a table
 * resolution -> length -> {keep probability, batch} expanded into buckets, the
 * resolution a video goes to, and the seeded keep decision of a clip (decode_bucket.h).
 */
#include "stages/decode/decode_bucket.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIE_EPS 1e-9
#define AREA_REACH 0.8 /* a video reaches a resolution with 80 % of its pixels */

const int vf_bucket_ratios[VF_BUCKET_NRATIOS][2] = {{9, 16}, {3, 4}, {1, 1}, {4, 3}, {16, 9}};

/* Open-Sora's nominal pixel counts of its resolution names (datasets/aspect.py). */
static const struct { const char *name; int64_t area; } RES[] = {
    {"144p", 36864},    {"256", 65536},     {"240p", 102240},  {"360p", 230400},
    {"512", 262144},    {"480p", 409920},   {"720p", 921600},  {"1024", 1048576},
    {"1080p", 2073600}, {"2k", 3686400},    {"2048", 4194304},
};
#define NRES ((int)(sizeof RES / sizeof RES[0]))

int64_t vf_bucket_res_area(const char *name)
{
    for (int i = 0; i < NRES; i++)
        if (!strcmp(RES[i].name, name)) return RES[i].area;
    return 0;
}

static void res_names(char *buf, size_t n)
{
    size_t l = 0;
    buf[0] = 0;
    for (int i = 0; i < NRES && l < n; i++) l += (size_t)snprintf(buf + l, n - l, "%s%s", i ? ", " : "", RES[i].name);
}

/* a decimal integer key ("49") into *v; false otherwise */
static bool key_int(const char *s, int64_t *v)
{
    char *end;
    if (!*s || strlen(s) > 9) return false;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9') return false;
    *v = strtoll(s, &end, 10);
    return *end == 0;
}

static bool json_num(const vf_json *j, double *v)
{
    if (!j) return false;
    if (j->type == VF_JSON_INT) { *v = (double)j->i; return true; }
    if (j->type == VF_JSON_NUM) { *v = j->n; return true; }
    return false;
}

/* One resolution's lengths into the template bucket t (frames, batch, keep). */
static int parse_lengths(const char *res, const vf_json *lens, vf_bucket *t, vf_status *st)
{
    int rc = 0;
    if (!lens || lens->type != VF_JSON_OBJ || lens->len == 0)
        VF_FAIL(st, VF_EUSAGE, "decode: bucket_config[\"%s\"] must be a table length -> {keep, batch}, "
                "e.g. { [49] = {1.0, 8} }", res);
    if (lens->len > VF_BUCKET_MAX_LENS)
        VF_FAIL(st, VF_EUSAGE, "decode: bucket_config[\"%s\"]: %d lengths; at most %d", res, lens->len,
                VF_BUCKET_MAX_LENS);
    t->nlens = 0;
    for (int k = 0; k < lens->len; k++) {
        const char *key = vf_json_key_at(lens, k);
        const vf_json *e = vf_json_at(lens, k);
        int64_t f;
        double keep, batch;
        if (!key_int(key, &f) || f < 1 || f > 4096)
            VF_FAIL(st, VF_EUSAGE, "decode: bucket_config[\"%s\"]: length '%s' must be an integer in 1..4096", res, key);
        if ((f - 1) % 4)
            VF_FAIL(st, VF_EUSAGE, "decode: bucket_config[\"%s\"][%lld]: length %lld is not 1 + 4k (the causal "
                    "VAE's frame grouping); try %lld or %lld", res, (long long)f, (long long)f,
                    (long long)(1 + (f - 1) / 4 * 4), (long long)(1 + ((f - 1) / 4 + 1) * 4));
        if (!e || e->type != VF_JSON_ARR || e->len != 2 || !json_num(vf_json_at(e, 0), &keep) ||
            !json_num(vf_json_at(e, 1), &batch))
            VF_FAIL(st, VF_EUSAGE, "decode: bucket_config[\"%s\"][%lld] must be {keep, batch}, e.g. {0.5, 8}", res,
                    (long long)f);
        if (!(keep >= 0 && keep <= 1))
            VF_FAIL(st, VF_EUSAGE, "decode: bucket_config[\"%s\"][%lld]: keep probability %g is outside [0, 1]", res,
                    (long long)f, keep);
        if (batch != floor(batch) || batch < 1 || batch > 65536)
            VF_FAIL(st, VF_EUSAGE, "decode: bucket_config[\"%s\"][%lld]: batch %g; it must be an integer in 1..65536",
                    res, (long long)f, batch);
        t->frames[t->nlens] = (int)f;
        t->keep[t->nlens] = keep;
        t->batch[t->nlens] = (int)batch;
        t->nlens++;
    }
fail:
    return rc;
}

/* the multiple of m nearest to x, at least m */
static int round_to(double x, int m)
{
    long q = lround(x / m);
    return (int)(q < 1 ? m : q * m);
}

int vf_bucket_config_parse(const vf_json *obj, int vae_stride, int patch, vf_buckets *out, vf_status *st)
{
    int rc = 0, mult = vae_stride * patch;
    int order[VF_BUCKET_MAX_RES];
    char names[256];
    memset(out, 0, sizeof *out);
    if (obj && (obj->type == VF_JSON_ARR || obj->type == VF_JSON_OBJ) && obj->len == 0)
        VF_FAIL(st, VF_EUSAGE, "decode: bucket_config is empty; give { [\"480p\"] = { [49] = {1.0, 8} }, ... }");
    if (!obj || obj->type != VF_JSON_OBJ)
        VF_FAIL(st, VF_EUSAGE, "decode: bucket_config must be a table resolution -> { [length] = {keep, batch} }, "
                "e.g. { [\"480p\"] = { [49] = {0.5, 8} } }");
    if (obj->len > VF_BUCKET_MAX_RES)
        VF_FAIL(st, VF_EUSAGE, "decode: bucket_config: %d resolutions; at most %d", obj->len, VF_BUCKET_MAX_RES);
    for (int i = 0; i < obj->len; i++) {
        const char *name = vf_json_key_at(obj, i);
        int64_t area = vf_bucket_res_area(name);
        if (!area) {
            res_names(names, sizeof names);
            VF_FAIL(st, VF_EUSAGE, "decode: bucket_config: unknown resolution \"%s\" (known: %s)", name, names);
        }
        snprintf(out->res_name[i], sizeof out->res_name[i], "%s", name);
        out->res_area[i] = area;
        order[i] = i;
    }
    out->nres = obj->len;
    for (int i = 1; i < out->nres; i++) /* largest area first */
        for (int j = i; j > 0 && out->res_area[order[j]] > out->res_area[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    char rn[VF_BUCKET_MAX_RES][16];
    int64_t ra[VF_BUCKET_MAX_RES];
    for (int i = 0; i < out->nres; i++) {
        memcpy(rn[i], out->res_name[order[i]], sizeof rn[i]);
        ra[i] = out->res_area[order[i]];
    }
    for (int i = 0; i < out->nres; i++) {
        memcpy(out->res_name[i], rn[i], sizeof rn[i]);
        out->res_area[i] = ra[i];
    }
    for (int r = 0; r < out->nres; r++) {
        vf_bucket t = {0};
        VF_TRY(parse_lengths(out->res_name[r], vf_json_get(obj, out->res_name[r]), &t, st));
        t.res = r;
        for (int a = 0; a < VF_BUCKET_NRATIOS; a++) {
            double ratio = (double)vf_bucket_ratios[a][0] / vf_bucket_ratios[a][1];
            double area = (double)out->res_area[r];
            t.w = round_to(sqrt(area * ratio), mult);
            t.h = round_to(sqrt(area / ratio), mult);
            bool dup = false;
            for (int j = 0; j < out->n; j++) {
                const vf_bucket *o = &out->b[j];
                if (o->w != t.w || o->h != t.h) continue;
                if (o->res != r)
                    VF_FAIL(st, VF_EUSAGE, "decode: bucket_config: resolutions \"%s\" and \"%s\" both give bucket "
                            "%dx%d; keep one of them", out->res_name[o->res], out->res_name[r], t.w, t.h);
                dup = true; /* two ratios round to one size at this resolution */
            }
            if (dup) continue;
            if (out->n == VF_BUCKET_MAX)
                VF_FAIL(st, VF_EUSAGE, "decode: bucket_config expands into more than %d buckets", VF_BUCKET_MAX);
            out->b[out->n++] = t;
        }
    }
fail:
    return rc;
}

int vf_bucket_pick_area(const vf_buckets *bs, double dar, double area)
{
    if (!bs->nres) return vf_bucket_pick(bs, dar);
    int r = -1;
    for (int i = 0; i < bs->nres && r < 0; i++) /* largest first */
        if (area >= AREA_REACH * (double)bs->res_area[i]) r = i;
    if (r < 0) return -1;
    int best = -1;
    double ld = log(dar > 0 ? dar : 1), bd = INFINITY;
    for (int i = 0; i < bs->n; i++) {
        const vf_bucket *b = &bs->b[i];
        if (b->res != r) continue;
        double d = fabs(log((double)b->w / b->h) - ld);
        if (d < bd - TIE_EPS) best = i, bd = d;
    }
    return best;
}

double vf_bucket_keep_u(uint64_t seed, const char *path, int64_t clip, int frames)
{
    char tail[96];
    int tn = snprintf(tail, sizeof tail, "\n%lld\n%d", (long long)clip, frames);
    char head[32];
    int hn = snprintf(head, sizeof head, "%llu\n", (unsigned long long)seed);
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64 of "<seed>\n<path>\n<clip>\n<frames>" */
    for (int i = 0; i < hn; i++) { h ^= (unsigned char)head[i]; h *= 0x100000001b3ULL; }
    for (const char *c = path; *c; c++) { h ^= (unsigned char)*c; h *= 0x100000001b3ULL; }
    for (int i = 0; i < tn; i++) { h ^= (unsigned char)tail[i]; h *= 0x100000001b3ULL; }
    /* splitmix64's finalizer: FNV's low bits alone are poorly mixed */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

bool vf_bucket_keep(uint64_t seed, const char *path, int64_t clip, int frames, double p)
{
    if (p >= 1) return true;
    if (p <= 0) return false;
    return vf_bucket_keep_u(seed, path, clip, frames) < p;
}
