/* cache_format.c — keys, record checks and the "__meta__" summary of the LMDB latent
 * cache (conventions in cache_format.h). */
#include "formats/cache_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ keys */

typedef unsigned __int128 u128;

/* FNV-1a, 128-bit (offset basis and prime from the FNV specification) */
static u128 fnv_basis(void)
{
    return ((u128)0x6c62272e07bb0142ull << 64) | 0x62b821756295c58dull;
}

static u128 fnv_add(u128 h, const void *data, size_t n)
{
    const u128 prime = ((u128)0x0000000001000000ull << 64) | 0x000000000000013bull;
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= prime;
    }
    return h;
}

/* a string and its terminating NUL: fields cannot run into each other */
static u128 fnv_field(u128 h, const char *s) { return fnv_add(h, s, strlen(s) + 1); }

static void to_hex(u128 h, char out[VF_CACHE_KEY_LEN + 1])
{
    snprintf(out, VF_CACHE_KEY_LEN + 1, "%016llx%016llx", (unsigned long long)(h >> 64),
             (unsigned long long)h);
}

/* "bucket\0" name "\0" after the other fields of an item that has a bucket: keys of
 * items without one stay as they were */
static u128 add_bucket(u128 h, const char *bucket)
{
    if (bucket && bucket[0]) h = fnv_field(fnv_field(h, "bucket"), bucket);
    return h;
}

void vf_cache_key_bucket(const char *source, int64_t clip, const char *transform, const char *vae,
                         const char *text_hash, const char *bucket, char out[VF_CACHE_KEY_LEN + 1])
{
    char c[24];
    snprintf(c, sizeof c, "%lld", (long long)clip);
    u128 h = fnv_field(fnv_basis(), "vflow-latent-key/1");
    h = fnv_field(h, source);
    h = fnv_field(h, c);
    h = fnv_field(h, transform);
    h = fnv_field(h, vae);
    if (text_hash && text_hash[0]) h = fnv_field(h, text_hash);
    to_hex(add_bucket(h, bucket), out);
}

void vf_cache_key_text(const char *source, int64_t clip, const char *transform, const char *vae,
                       const char *text_hash, char out[VF_CACHE_KEY_LEN + 1])
{
    vf_cache_key_bucket(source, clip, transform, vae, text_hash, NULL, out);
}

void vf_cache_key(const char *source, int64_t clip, const char *transform, const char *vae,
                  char out[VF_CACHE_KEY_LEN + 1])
{
    vf_cache_key_text(source, clip, transform, vae, NULL, out);
}

static void key_of_id_text(const char *id, const char *text_hash, const char *bucket,
                           char out[VF_CACHE_KEY_LEN + 1])
{
    u128 h = fnv_field(fnv_field(fnv_basis(), "vflow-latent-key/id/1"), id);
    if (text_hash && text_hash[0]) h = fnv_field(h, text_hash);
    to_hex(add_bucket(h, bucket), out);
}

void vf_cache_key_of_id(const char *id, char out[VF_CACHE_KEY_LEN + 1]) { key_of_id_text(id, NULL, NULL, out); }

void vf_cache_vae_id(const char *vae_hash, const char *norm, char out[VF_CACHE_KEY_LEN + 1])
{
    to_hex(fnv_field(fnv_field(fnv_field(fnv_basis(), "vflow-vae-norm/1"), vae_hash), norm), out);
}

static const vf_cache_shared shared_kinds[2] = {
    {VF_CACHE_TEXT_TENSOR, VF_CACHE_TEXT_PREFIX, "vflow-text-key/1", "text_key", "text_tokens", "text"},
    {VF_CACHE_CLIP_TENSOR, VF_CACHE_CLIP_PREFIX, "vflow-clip-key/1", "clip_key", "clip_rows", "clip"},
};
const vf_cache_shared *const vf_cache_text = &shared_kinds[0];
const vf_cache_shared *const vf_cache_clip = &shared_kinds[1];

void vf_cache_shared_hash(const vf_cache_shared *k, const vf_tensor *t, char out[VF_CACHE_KEY_LEN + 1])
{
    char shape[64];
    snprintf(shape, sizeof shape, "(%lld,%lld)", (long long)t->shape[0], (long long)t->shape[1]);
    u128 h = fnv_field(fnv_basis(), k->tag);
    h = fnv_field(h, shape);
    h = fnv_add(h, t->data, (size_t)(t->shape[0] * t->shape[1]) * 2);
    to_hex(h, out);
}

void vf_cache_text_hash(const vf_tensor *t, char out[VF_CACHE_KEY_LEN + 1])
{
    vf_cache_shared_hash(vf_cache_text, t, out);
}

void vf_cache_item_text_hash(const vf_item *it, char out[VF_CACHE_KEY_LEN + 1])
{
    const vf_tensor *t = vf_item_get(it, VF_CACHE_TEXT_TENSOR);
    const char *k = vf_item_str(it, "text_key");
    out[0] = 0;
    if (t && t->dtype == VF_DTYPE_BF16 && t->ndim == 2) vf_cache_text_hash(t, out);
    else if (k) snprintf(out, VF_CACHE_KEY_LEN + 1, "%s", k);
}

void vf_cache_item_cond_hash(const vf_item *it, const char *th, char out[VF_CACHE_KEY_LEN + 1])
{
    const vf_tensor *t = vf_item_get(it, VF_CACHE_CLIP_TENSOR);
    const char *k = vf_item_str(it, vf_cache_clip->ref);
    char ch[VF_CACHE_KEY_LEN + 1] = "";
    if (t && t->dtype == VF_DTYPE_BF16 && t->ndim == 2) vf_cache_shared_hash(vf_cache_clip, t, ch);
    else if (k) snprintf(ch, sizeof ch, "%s", k);
    if (!ch[0]) { /* no CLIP features: the text hash, so those keys stay as they were */
        snprintf(out, VF_CACHE_KEY_LEN + 1, "%s", th);
        return;
    }
    u128 h = fnv_field(fnv_basis(), "vflow-cond-key/1");
    h = fnv_field(h, th);
    h = fnv_field(h, ch);
    to_hex(h, out);
}

static bool is_hex32(const char *k)
{
    for (size_t i = 0; i < VF_CACHE_KEY_LEN; i++)
        if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'f'))) return false;
    return true;
}

bool vf_cache_is_shared_key(const vf_cache_shared *k, const void *key, size_t klen)
{
    return klen == VF_CACHE_TEXT_KEY_LEN && !memcmp(key, k->prefix, 5) && is_hex32((const char *)key + 5);
}

bool vf_cache_is_text_key(const void *key, size_t klen) { return vf_cache_is_shared_key(vf_cache_text, key, klen); }

const char *vf_cache_keying_name(vf_cache_keying k) { return k == VF_CACHE_KEY_ID ? "id" : "provenance"; }

int vf_cache_keying_parse(const char *s, vf_cache_keying *out)
{
    if (!strcmp(s, "provenance")) *out = VF_CACHE_KEY_PROVENANCE;
    else if (!strcmp(s, "id")) *out = VF_CACHE_KEY_ID;
    else return VF_EINVAL;
    return 0;
}

int vf_cache_key_of_item(const vf_item *it, vf_cache_keying k, char out[VF_CACHE_KEY_LEN + 1],
                         vf_status *st)
{
    char th[VF_CACHE_KEY_LEN + 1];
    vf_cache_item_text_hash(it, th);
    return vf_cache_key_of_item_text(it, k, th, out, st);
}

int vf_cache_key_of_item_text(const vf_item *it, vf_cache_keying k, const char *th,
                              char out[VF_CACHE_KEY_LEN + 1], vf_status *st)
{
    int rc = 0;
    const char *bucket = vf_item_str(it, "bucket");
    char kh[VF_CACHE_KEY_LEN + 1];
    vf_cache_item_cond_hash(it, th, kh);
    th = kh;
    if (k == VF_CACHE_KEY_ID) {
        key_of_id_text(vf_item_id(it), th, bucket, out);
        return 0;
    }
    static const char *const need[] = {"source", "transform", "vae"};
    const char *v[3];
    for (int i = 0; i < 3; i++)
        if (!(v[i] = vf_item_str(it, need[i])))
            VF_FAIL(st, VF_EINVAL,
                    "item \"%s\" has no string metadata \"%s\" for its cache key (docs/ITEMS.md; "
                    "key = \"id\" keys items by id instead)", vf_item_id(it), need[i]);
    double clip;
    if (vf_item_num(it, "clip", &clip) != 0)
        VF_FAIL(st, VF_EINVAL, "item \"%s\" has no number metadata \"clip\" for its cache key",
                vf_item_id(it));
    vf_cache_key_bucket(v[0], (int64_t)clip, v[1], v[2], th, bucket, out);
fail:
    return rc;
}

int vf_cache_item_bucket(const vf_item *it, char name[VF_CACHE_BUCKET_MAX], int64_t *batch, vf_status *st)
{
    int rc = 0;
    const char *b = vf_item_str(it, "bucket");
    double bb = 0;
    int w, h, f, used = 0;
    name[0] = 0;
    *batch = 0;
    if (!b) {
        if (vf_item_num(it, "bucket_batch", &bb) == 0)
            VF_FAIL(st, VF_EINVAL, "item \"%s\" has bucket_batch but no string metadata \"bucket\"", vf_item_id(it));
        return 0;
    }
    if (strlen(b) >= VF_CACHE_BUCKET_MAX || sscanf(b, "%dx%dx%d%n", &w, &h, &f, &used) != 3 || b[used] ||
        w < 1 || h < 1 || f < 1)
        VF_FAIL(st, VF_EINVAL, "item \"%s\": metadata bucket \"%.64s\" is not \"<W>x<H>x<F>\"", vf_item_id(it), b);
    /* bucket_batch is optional (0: the reader's batch decides); when given, an integer >= 1 */
    if (vf_item_num(it, "bucket_batch", &bb) == 0 && (bb < 1 || bb != (double)(int64_t)bb))
        VF_FAIL(st, VF_EINVAL, "item \"%s\" (bucket %s): metadata bucket_batch %g is not an integer >= 1",
                vf_item_id(it), b, bb);
    snprintf(name, VF_CACHE_BUCKET_MAX, "%s", b);
    *batch = (int64_t)bb;
fail:
    return rc;
}

bool vf_cache_is_entry_key(const void *key, size_t klen)
{
    return klen == VF_CACHE_KEY_LEN && is_hex32(key);
}

/* ------------------------------------------------------------------ records */

int vf_cache_check_item(const vf_item *it, vf_status *st)
{
    int rc = 0;
    const vf_tensor *t = vf_item_get(it, VF_CACHE_TENSOR);
    if (!t) VF_FAIL(st, VF_EINVAL, "item \"%s\" has no tensor \"" VF_CACHE_TENSOR "\"", vf_item_id(it));
    if (t->dtype != VF_DTYPE_F32 || t->ndim != 4) {
        char sh[96];
        vf_shape_str(t->ndim, t->shape, sh, sizeof sh);
        VF_FAIL(st, VF_EINVAL, "item \"%s\": tensor \"" VF_CACHE_TENSOR "\" is %s %s; expected f32 (z, T', h, w)",
                vf_item_id(it), vf_dtype_name(t->dtype), sh);
    }
    if (t->device.kind != VF_DEV_CPU)
        VF_FAIL(st, VF_EINVAL, "item \"%s\": tensor \"" VF_CACHE_TENSOR "\" is not in host memory", vf_item_id(it));
    const vf_tensor *te = vf_item_get(it, VF_CACHE_TEXT_TENSOR);
    if (te) {
        char what[300];
        snprintf(what, sizeof what, "item \"%.200s\"", vf_item_id(it));
        VF_TRY(vf_cache_check_text(te, what, st));
    }
    const vf_tensor *tc = vf_item_get(it, VF_CACHE_CLIP_TENSOR);
    if (tc) {
        char what[300];
        snprintf(what, sizeof what, "item \"%.200s\"", vf_item_id(it));
        VF_TRY(vf_cache_check_shared(vf_cache_clip, tc, what, st));
    }
    VF_TRY(vf_cache_check_y(it, st));
fail:
    return rc;
}

int vf_cache_check_shared(const vf_cache_shared *k, const vf_tensor *t, const char *what, vf_status *st)
{
    int rc = 0;
    if (t->dtype != VF_DTYPE_BF16 || t->ndim != 2 || t->shape[0] < 1 || t->shape[1] < 1) {
        char sh[96];
        vf_shape_str(t->ndim, t->shape, sh, sizeof sh);
        VF_FAIL(st, VF_EINVAL, "%s: tensor \"%s\" is %s %s; expected bf16 (L, D)", what, k->tensor,
                vf_dtype_name(t->dtype), sh);
    }
    if (t->device.kind != VF_DEV_CPU)
        VF_FAIL(st, VF_EINVAL, "%s: tensor \"%s\" is not in host memory", what, k->tensor);
fail:
    return rc;
}

int vf_cache_check_text(const vf_tensor *t, const char *what, vf_status *st)
{
    return vf_cache_check_shared(vf_cache_text, t, what, st);
}

void vf_cache_shape_key(const vf_item *it, char *buf, size_t n)
{
    const vf_tensor *t = vf_item_get(it, VF_CACHE_TENSOR);
    if (t) vf_shape_str(t->ndim, t->shape, buf, n);
    else snprintf(buf, n, "(none)");
}

static void key_text(const void *key, size_t klen, char *buf, size_t n)
{
    size_t o = 0;
    const unsigned char *k = key;
    for (size_t i = 0; i < klen && o + 5 < n; i++)
        o += (size_t)snprintf(buf + o, n - o, k[i] >= 0x20 && k[i] < 0x7f ? "%c" : "\\x%02x", k[i]);
    buf[o < n ? o : n - 1] = 0;
}

int vf_cache_record_decode(const char *path, const void *key, size_t klen, const void *val,
                           size_t vlen, vf_item **out, vf_status *st)
{
    *out = NULL;
    int rc = vf_item_decode(val, vlen, out, st);
    if (rc == 0) rc = vf_cache_check_item(*out, st);
    if (rc != 0) {
        char k[80];
        key_text(key, klen, k, sizeof k);
        vf_status_prefix(st, "%s: record \"%s\" (%zu bytes)", path, k, vlen);
        if (st && st->code == VF_EINVAL) st->code = VF_ECORRUPT; /* a stored record is damaged data */
        vf_item_free(*out);
        *out = NULL;
        return st ? st->code : rc;
    }
    return 0;
}

int vf_cache_shared_decode(const vf_cache_shared *kind, const char *path, const void *key, size_t klen,
                           const void *val, size_t vlen, vf_item **out, vf_status *st)
{
    char k[80], what[32];
    key_text(key, klen, k, sizeof k);
    snprintf(what, sizeof what, "%s record", kind->what);
    *out = NULL;
    int rc = vf_item_decode(val, vlen, out, st);
    if (rc == 0) {
        const vf_tensor *t = vf_item_get(*out, kind->tensor);
        if (!t) rc = vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "no tensor \"%s\"", kind->tensor);
        else rc = vf_cache_check_shared(kind, t, what, st);
        if (rc == 0 && (strlen(vf_item_id(*out)) != klen || memcmp(vf_item_id(*out), key, klen) != 0))
            rc = vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "record id \"%.80s\" is not its key", vf_item_id(*out));
        char h[VF_CACHE_KEY_LEN + 1];
        if (rc == 0 && (vf_cache_shared_hash(kind, t, h), klen != VF_CACHE_TEXT_KEY_LEN ||
                        memcmp(h, (const char *)key + 5, VF_CACHE_KEY_LEN) != 0))
            rc = vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "its content hashes to %s%s", kind->prefix, h);
    }
    if (rc != 0) {
        vf_status_prefix(st, "%s: %s \"%s\" (%zu bytes)", path, what, k, vlen);
        if (st) st->code = VF_ECORRUPT;
        vf_item_free(*out);
        *out = NULL;
        return VF_ECORRUPT;
    }
    return 0;
}

int vf_cache_text_decode(const char *path, const void *key, size_t klen, const void *val,
                         size_t vlen, vf_item **out, vf_status *st)
{
    return vf_cache_shared_decode(vf_cache_text, path, key, klen, val, vlen, out, st);
}

/* ------------------------------------------------------------------ summary */

vf_json *vf_cache_meta_new(vf_cache_keying k)
{
    vf_json *m = vf_json_obj();
    if (!m) return NULL;
    if (vf_json_set(m, "format", vf_json_str(VF_CACHE_FORMAT)) || vf_json_set(m, "version", vf_json_int(VF_CACHE_VERSION)) ||
        vf_json_set(m, "key", vf_json_str(vf_cache_keying_name(k))) ||
        vf_json_set(m, "tensor", vf_json_str(VF_CACHE_TENSOR)) || vf_json_set(m, "dtype", vf_json_str("f32")) ||
        vf_json_set(m, "entries", vf_json_int(0)) || vf_json_set(m, "bytes", vf_json_int(0)) ||
        vf_json_set(m, "shapes", vf_json_obj()) || vf_json_set(m, "vae", vf_json_obj())) {
        vf_json_free(m);
        return NULL;
    }
    return m;
}

vf_cache_keying vf_cache_meta_keying(const vf_json *meta)
{
    vf_cache_keying k = VF_CACHE_KEY_PROVENANCE;
    vf_cache_keying_parse(vf_json_get_str(meta, "key", "provenance"), &k);
    return k;
}

static int bump(vf_json *obj, const char *key, int64_t by)
{
    return vf_json_set(obj, key, vf_json_int(vf_json_get_int(obj, key, 0) + by));
}

int vf_cache_meta_count(vf_json *meta, const char *shape, const char *vae, int64_t bytes,
                        vf_status *st)
{
    vf_json *shapes = vf_json_get(meta, "shapes"), *vaes = vf_json_get(meta, "vae");
    if (!shapes || !vaes || bump(meta, "entries", 1) || bump(meta, "bytes", bytes) ||
        bump(shapes, shape, 1) || bump(vaes, vae && *vae ? vae : "none", 1))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    return 0;
}

int vf_cache_meta_count_bucket(vf_json *meta, const char *bucket, int64_t batch, const char *shape,
                               vf_status *st)
{
    vf_json *all = vf_json_get(meta, "buckets");
    if (!all) {
        if (vf_json_set(meta, "buckets", vf_json_obj()) || !(all = vf_json_get(meta, "buckets")))
            return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    }
    vf_json *b = vf_json_get(all, bucket);
    if (b) {
        int64_t have = vf_json_get_int(b, "batch", 0);
        if (have != batch)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "bucket %s: batch %lld, but the cache records batch %lld for it (a bucket's "
                                 "batch is fixed when its first entry is written; use another cache)",
                                 bucket, (long long)batch, (long long)have);
        return bump(b, "entries", 1) ? vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory") : 0;
    }
    if (!(b = vf_json_obj()) || vf_json_set(b, "entries", vf_json_int(1)) || vf_json_set(b, "batch", vf_json_int(batch)) ||
        vf_json_set(b, "latent", vf_json_str(shape)) || vf_json_set(all, bucket, b))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    return 0;
}

int vf_cache_meta_count_text(vf_json *meta, int64_t L, int64_t D, int64_t bytes, vf_status *st)
{
    int64_t have = vf_json_get_int(meta, "text_dim", 0);
    if (have && have != D)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "text embedding of width %lld; the cache holds embeddings of width %lld",
                             (long long)D, (long long)have);
    if (bump(meta, "texts", 1) || bump(meta, "text_bytes", bytes) || vf_json_set(meta, "text_dim", vf_json_int(D)) ||
        (L > vf_json_get_int(meta, "text_max_len", 0) && vf_json_set(meta, "text_max_len", vf_json_int(L))))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    return 0;
}

int vf_cache_meta_count_clip(vf_json *meta, int64_t L, int64_t D, int64_t bytes, vf_status *st)
{
    int64_t have_d = vf_json_get_int(meta, "clip_dim", 0), have_l = vf_json_get_int(meta, "clip_len", 0);
    if ((have_d && have_d != D) || (have_l && have_l != L))
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "CLIP image features (%lld, %lld); the cache holds features (%lld, %lld)", (long long)L,
                             (long long)D, (long long)have_l, (long long)have_d);
    if (bump(meta, "clips", 1) || bump(meta, "clip_bytes", bytes) || vf_json_set(meta, "clip_dim", vf_json_int(D)) ||
        vf_json_set(meta, "clip_len", vf_json_int(L)))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    return 0;
}

int vf_cache_meta_note_norm(vf_json *meta, const char *vae, const char *norm, vf_status *st)
{
    vf_json *all = vf_json_get(meta, "latent_norm");
    if (all && vf_json_get(all, vae)) return 0;
    vf_json *n = vf_json_parse(norm, st);
    if (!n) return st ? st->code : VF_EINVAL;
    if (!all) {
        if (vf_json_set(meta, "latent_norm", vf_json_obj()) || !(all = vf_json_get(meta, "latent_norm"))) {
            vf_json_free(n);
            return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
        }
    }
    if (vf_json_set(all, vae, n))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    return 0;
}

int vf_cache_meta_count_text_entry(vf_json *meta, vf_status *st)
{
    if (bump(meta, "text_entries", 1))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    return 0;
}

int vf_cache_meta_parse(const char *path, const void *val, size_t vlen, vf_json **out, vf_status *st)
{
    int rc = 0;
    *out = NULL;
    vf_status js;
    vf_status_clear(&js);
    vf_json *m = vf_json_parse_n(val, vlen, &js);
    if (!m || m->type != VF_JSON_OBJ || !vf_json_get(m, "shapes") || !vf_json_get(m, "vae"))
        VF_FAIL(st, VF_ECORRUPT, "%s: record \"" VF_CACHE_META_KEY "\" is not a cache summary%s%s",
                path, js.code ? ": " : "", js.code ? js.msg : "");
    const char *fmt = vf_json_get_str(m, "format", "");
    int64_t ver = vf_json_get_int(m, "version", -1);
    if (strcmp(fmt, VF_CACHE_FORMAT) != 0 || ver != VF_CACHE_VERSION)
        VF_FAIL(st, VF_EVERSION, "%s: cache format \"%.64s\" version %lld; this vflow reads \"" VF_CACHE_FORMAT "\" version %d",
                path, fmt, (long long)ver, VF_CACHE_VERSION);
    *out = m;
    return 0;
fail:
    vf_json_free(m);
    return rc;
}

int vf_cache_meta_read(vf_lmdb *db, MDB_txn *txn, vf_json **out, vf_status *st)
{
    MDB_val v;
    *out = NULL;
    int rc = vf_lmdb_get(db, txn, VF_CACHE_META_KEY, strlen(VF_CACHE_META_KEY), &v, st);
    if (rc == VF_ENOTFOUND) return 0;
    if (rc) return rc;
    return vf_cache_meta_parse(vf_lmdb_path(db), v.mv_data, v.mv_size, out, st);
}

int vf_cache_meta_write(vf_lmdb *db, MDB_txn *txn, const vf_json *meta, vf_status *st)
{
    char *text = vf_json_emit(meta, true, 0);
    if (!text) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    int rc = vf_lmdb_put(db, txn, VF_CACHE_META_KEY, strlen(VF_CACHE_META_KEY), text, strlen(text), 0, st);
    free(text);
    return rc;
}
