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

void vf_cache_key(const char *source, int64_t clip, const char *transform, const char *vae,
                  char out[VF_CACHE_KEY_LEN + 1])
{
    char c[24];
    snprintf(c, sizeof c, "%lld", (long long)clip);
    u128 h = fnv_field(fnv_basis(), "vflow-latent-key/1");
    h = fnv_field(h, source);
    h = fnv_field(h, c);
    h = fnv_field(h, transform);
    h = fnv_field(h, vae);
    to_hex(h, out);
}

void vf_cache_key_of_id(const char *id, char out[VF_CACHE_KEY_LEN + 1])
{
    to_hex(fnv_field(fnv_field(fnv_basis(), "vflow-latent-key/id/1"), id), out);
}

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
    int rc = 0;
    if (k == VF_CACHE_KEY_ID) {
        vf_cache_key_of_id(vf_item_id(it), out);
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
    vf_cache_key(v[0], (int64_t)clip, v[1], v[2], out);
fail:
    return rc;
}

bool vf_cache_is_entry_key(const void *key, size_t klen)
{
    if (klen != VF_CACHE_KEY_LEN) return false;
    const char *k = key;
    for (size_t i = 0; i < klen; i++)
        if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'f'))) return false;
    return true;
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
fail:
    return rc;
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

int vf_cache_meta_read(vf_lmdb *db, MDB_txn *txn, vf_json **out, vf_status *st)
{
    int rc = 0;
    MDB_val v;
    *out = NULL;
    rc = vf_lmdb_get(db, txn, VF_CACHE_META_KEY, strlen(VF_CACHE_META_KEY), &v, st);
    if (rc == VF_ENOTFOUND) return 0;
    if (rc) return rc;
    vf_status js;
    vf_status_clear(&js);
    vf_json *m = vf_json_parse_n(v.mv_data, v.mv_size, &js);
    if (!m || m->type != VF_JSON_OBJ || !vf_json_get(m, "shapes") || !vf_json_get(m, "vae"))
        VF_FAIL(st, VF_ECORRUPT, "%s: record \"" VF_CACHE_META_KEY "\" is not a cache summary%s%s",
                vf_lmdb_path(db), js.code ? ": " : "", js.code ? js.msg : "");
    const char *fmt = vf_json_get_str(m, "format", "");
    int64_t ver = vf_json_get_int(m, "version", -1);
    if (strcmp(fmt, VF_CACHE_FORMAT) != 0 || ver != VF_CACHE_VERSION)
        VF_FAIL(st, VF_EVERSION, "%s: cache format \"%s\" version %lld; this vflow reads \"" VF_CACHE_FORMAT "\" version %d",
                vf_lmdb_path(db), fmt, (long long)ver, VF_CACHE_VERSION);
    *out = m;
    return 0;
fail:
    vf_json_free(m);
    return rc;
}

int vf_cache_meta_write(vf_lmdb *db, MDB_txn *txn, const vf_json *meta, vf_status *st)
{
    char *text = vf_json_emit(meta, true, 0);
    if (!text) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    int rc = vf_lmdb_put(db, txn, VF_CACHE_META_KEY, strlen(VF_CACHE_META_KEY), text, strlen(text), 0, st);
    free(text);
    return rc;
}
