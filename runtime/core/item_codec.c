/* item_codec.c — the record codec of items (format in item.h): encode into one record,
 * or a split record whose large tensors travel as frames of their own (ZeroMQ edges), and
 * the strict decoders (every length and the CRC checked; a view decode keeps payloads in
 * the caller's buffer). */
#include "runtime/core/item_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the item codec stores tensor payloads in host order and assumes a little-endian host"
#endif

#define OOM(st) vf_status_set((st), VF_ENOMEM, __FILE__, __LINE__, "out of memory (item)")

/* ================================================================== codec: encode */

#define HDR_FIXED 16 /* magic, version, flags, total length */
#define ENC_CHUNK (128 * 1024)

static size_t align_up(size_t n) { return (n + VF_CODEC_ALIGN - 1) & ~(size_t)(VF_CODEC_ALIGN - 1); }

/* A tensor of a split record whose payload travels as a frame of its own. */
static bool in_frame(const vf_tensor *t, size_t min_frame)
{
    return min_frame && vf_tensor_nbytes(t) >= min_frame;
}

/* Bytes before the first payload (unpadded). */
static size_t header_size(const vf_item *it)
{
    size_t n = HDR_FIXED + 4 + strlen(it->id) + 4;
    for (int i = 0; i < it->nm; i++)
        n += 4 + strlen(it->m[i].key) + 1 + (it->m[i].str ? 4 + strlen(it->m[i].str) : 8);
    n += 4;
    for (int i = 0; i < it->nt; i++) n += 4 + strlen(it->t[i].name) + 4 + 8 * (size_t)it->t[i].t->ndim + 4;
    return n;
}

size_t vf_item_split_size(const vf_item *it, size_t min_frame)
{
    size_t n = align_up(header_size(it));
    for (int i = 0; i < it->nt; i++)
        if (!in_frame(it->t[i].t, min_frame)) n += align_up(vf_tensor_nbytes(it->t[i].t));
    return n + 4;
}

size_t vf_item_encoded_size(const vf_item *it) { return vf_item_split_size(it, 0); }

int64_t vf_codec_size_bound(int64_t id_meta_bytes, int ntensors, const size_t *name_lens, const int *ndims,
                            const int64_t *payload_bytes)
{
    if (id_meta_bytes < 0 || ntensors < 0) return -1;
    /* The codec adds 4-9 bytes of framing per metadata entry (key length, kind, string
     * length); entries whose key and value are at least that long are the norm, so the
     * framing is bounded by the raw bytes once more. Edges add VF_EDGE_SIZE_SLACK on
     * top for the odd item made of many tiny entries. */
    int64_t n = HDR_FIXED + 4 + 4 + 4 + 2 * id_meta_bytes + VF_CODEC_ALIGN;
    for (int i = 0; i < ntensors; i++) {
        if (payload_bytes[i] < 0) return -1;
        int64_t add = 4 + (int64_t)name_lens[i] + 4 + 8 * (int64_t)ndims[i] + 4 + VF_CODEC_ALIGN;
        if (__builtin_add_overflow(n, add, &n) || __builtin_add_overflow(n, payload_bytes[i], &n)) return -1;
    }
    return n + 4;
}

static unsigned char *put_u8(unsigned char *p, unsigned v)
{
    *p = (unsigned char)v;
    return p + 1;
}

static unsigned char *put_u16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    return p + 2;
}

static unsigned char *put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
    return p + 4;
}

static unsigned char *put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
    return p + 8;
}

static unsigned char *put_bytes(unsigned char *p, const char *s)
{
    size_t n = strlen(s);
    p = put_u32(p, (uint32_t)n);
    memcpy(p, s, n);
    return p + n;
}

/* The record of `it` into buf; tensors of at least min_frame bytes (0: none) are left
 * out as frames (*nframes of them, when nframes is given). */
static int encode_impl(const vf_item *it, size_t min_frame, void *buf, size_t cap, size_t *len, int *nframes,
                       vf_status *st)
{
    for (int i = 0; i < it->nt; i++) {
        if (it->t[i].t->device.kind != VF_DEV_CPU)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "item '%s': tensor '%s' is on a CUDA device; the codec inlines host tensors only "
                                 "(device tensors travel by the CUDA transports)",
                                 it->id, it->t[i].name);
    }
    size_t total = vf_item_split_size(it, min_frame);
    if (cap < total)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "item '%s': encoding needs %zu bytes, buffer has %zu", it->id, total, cap);
    int nf = 0;
    for (int i = 0; i < it->nt; i++) nf += in_frame(it->t[i].t, min_frame);
    unsigned char *b = buf, *p = b;
    memcpy(p, VF_CODEC_MAGIC, 4);
    p = put_u16(p + 4, VF_CODEC_VERSION);
    /* a record without frames is an ordinary one, byte for byte */
    p = put_u16(p, nf ? VF_CODEC_FLAG_SPLIT : 0);
    p = put_u64(p, total);
    p = put_bytes(p, it->id);
    p = put_u32(p, (uint32_t)it->nm);
    for (int i = 0; i < it->nm; i++) {
        p = put_bytes(p, it->m[i].key);
        if (it->m[i].str) {
            p = put_u8(p, 0);
            p = put_bytes(p, it->m[i].str);
        } else {
            uint64_t u;
            memcpy(&u, &it->m[i].num, 8);
            p = put_u64(put_u8(p, 1), u);
        }
    }
    p = put_u32(p, (uint32_t)it->nt);
    for (int i = 0; i < it->nt; i++) {
        const vf_tensor *t = it->t[i].t;
        bool fr = in_frame(t, min_frame);
        p = put_bytes(p, it->t[i].name);
        p = put_u8(p, (unsigned)t->dtype);
        p = put_u8(p, (unsigned)t->ndim);
        p = put_u8(p, fr ? VF_LOC_FRAME : VF_LOC_INLINE);
        p = put_u8(p, 0);
        for (int d = 0; d < t->ndim; d++) p = put_u64(p, (uint64_t)t->shape[d]);
        p = put_u32(p, 0); /* no location data */
    }
    size_t off = (size_t)(p - b);
    memset(p, 0, align_up(off) - off);
    off = align_up(off);
    uint32_t crc = vf_crc32c(0, b, off);
    for (int i = 0; i < it->nt; i++) {
        if (in_frame(it->t[i].t, min_frame)) continue;
        size_t nb = vf_tensor_nbytes(it->t[i].t), pad = align_up(nb) - nb;
        const unsigned char *src = it->t[i].t->data;
        /* Copy and checksum in cache-sized chunks: the CRC reads what the copy just
         * wrote while it is still in cache, one trip through memory instead of two. */
        for (size_t done = 0; done < nb;) {
            size_t k = nb - done < ENC_CHUNK ? nb - done : ENC_CHUNK;
            memcpy(b + off + done, src + done, k);
            crc = vf_crc32c(crc, b + off + done, k);
            done += k;
        }
        memset(b + off + nb, 0, pad);
        crc = vf_crc32c(crc, b + off + nb, pad);
        off += nb + pad;
    }
    put_u32(b + off, crc);
    VF_ASSERT(off + 4 == total);
    *len = total;
    if (nframes) *nframes = nf;
    return 0;
}

int vf_item_encode(const vf_item *it, void *buf, size_t cap, size_t *len, vf_status *st)
{
    return encode_impl(it, 0, buf, cap, len, NULL, st);
}

static int encode_alloc(const vf_item *it, size_t min_frame, void **buf, size_t *len, int *nframes, vf_status *st)
{
    size_t n = vf_item_split_size(it, min_frame);
    void *b = vf_alloc(n, st);
    if (!b) return VF_ENOMEM;
    int rc = encode_impl(it, min_frame, b, n, len, nframes, st);
    if (rc < 0) {
        vf_free(b);
        return rc;
    }
    *buf = b;
    return 0;
}

int vf_item_encode_alloc(const vf_item *it, void **buf, size_t *len, vf_status *st)
{
    return encode_alloc(it, 0, buf, len, NULL, st);
}

int vf_item_encode_split(const vf_item *it, size_t min_frame, void **buf, size_t *len, int *nframes, vf_status *st)
{
    return encode_alloc(it, min_frame, buf, len, nframes, st);
}

/* ================================================================== codec: decode */

typedef struct reader {
    const unsigned char *b;
    size_t len, off;
    vf_status *st;
} reader;

#define CORRUPT(r, ...) vf_status_set((r)->st, VF_ECORRUPT, __FILE__, __LINE__, __VA_ARGS__)

static int need(reader *r, size_t n, const char *what)
{
    if (r->len - r->off < n)
        return CORRUPT(r, "item record truncated at offset %zu: %s needs %zu bytes, %zu left", r->off, what, n,
                       r->len - r->off);
    return 0;
}

static uint64_t rd_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int get_u(reader *r, int n, const char *what, uint64_t *v)
{
    int rc = need(r, (size_t)n, what);
    if (rc < 0) return rc;
    *v = rd_le(r->b + r->off, n);
    r->off += (size_t)n;
    return 0;
}

/* A length-prefixed byte string of minlen..maxlen bytes, refused if it holds a NUL
 * (names and text) unless binary; *s points into the buffer. */
static int get_bytes(reader *r, const char *what, size_t minlen, size_t maxlen, bool binary, const char **s,
                     size_t *n)
{
    size_t at = r->off;
    uint64_t l;
    int rc = get_u(r, 4, what, &l);
    if (rc < 0) return rc;
    if (l < minlen || l > maxlen)
        return CORRUPT(r, "item record: %s at offset %zu has length %llu (allowed %zu..%zu)", what, at,
                       (unsigned long long)l, minlen, maxlen);
    if ((rc = need(r, (size_t)l, what)) < 0) return rc;
    *s = (const char *)r->b + r->off;
    if (!binary && memchr(*s, 0, (size_t)l))
        return CORRUPT(r, "item record: %s at offset %zu contains a NUL byte", what, r->off);
    *n = (size_t)l;
    r->off += (size_t)l;
    return 0;
}

static int get_str(reader *r, const char *what, size_t minlen, size_t maxlen, const char **s, size_t *n)
{
    return get_bytes(r, what, minlen, maxlen, false, s, n);
}

/* Shared owner of a buffer that decoded tensors alias (decode_view). The decoder holds
 * one reference while it builds the item; the user's release runs only once the item
 * was handed out (armed) and the last aliasing tensor is gone. */
typedef struct view_owner {
    _Atomic int refs;
    bool armed;
    vf_release_fn release;
    void *buf, *hint;
} view_owner;

static void view_unref(void *data, void *hint)
{
    (void)data;
    view_owner *o = hint;
    if (atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) != 1) return;
    if (o->armed && o->release) o->release(o->buf, o->hint);
    free(o);
}

static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

typedef struct tdesc {
    const char *name;
    size_t name_len;
    vf_dtype dt;
    int ndim;
    int64_t shape[VF_MAX_DIMS];
    size_t nbytes;
    size_t at;  /* offset of the descriptor, for messages */
    bool frame; /* payload in a frame of its own (split record) */
} tdesc;

static view_owner *owner_new(vf_release_fn release, const void *buf, void *hint)
{
    view_owner *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    atomic_init(&o->refs, 1);
    o->release = release;
    o->buf = (void *)buf;
    o->hint = hint;
    return o;
}

/* The tensor of descriptor d from its frame f (owned by fo): checks the frame's length,
 * then aliases it, or copies it when it is not aligned for the dtype. */
static int frame_tensor(vf_item *it, const tdesc *d, const vf_frame *f, view_owner *fo, vf_status *st)
{
    char name[VF_CODEC_MAX_NAME + 1];
    memcpy(name, d->name, d->name_len);
    name[d->name_len] = '\0';
    if (f->len != d->nbytes)
        return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__,
                             "item record: frame of tensor '%s' has %zu bytes, its dtype and shape take %zu", name,
                             f->len, d->nbytes);
    if (d->nbytes && !f->data)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "item record: frame of tensor '%s': NULL buffer",
                             name);
    vf_tensor *t;
    if (((uintptr_t)f->data % vf_dtype_size(d->dt)) == 0) {
        t = vf_tensor_wrap(d->dt, d->ndim, d->shape, (vf_device){VF_DEV_CPU, 0}, (void *)f->data, view_unref, fo,
                           st);
        if (t) atomic_fetch_add_explicit(&fo->refs, 1, memory_order_relaxed);
    } else {
        t = vf_tensor_new(d->dt, d->ndim, d->shape, st);
        if (t && d->nbytes) memcpy(t->data, f->data, d->nbytes);
    }
    if (!t) return st && st->code ? st->code : VF_ENOMEM;
    return vf_item_put(it, name, t, st);
}

/* frames[nframes]: the payloads of a split record's frame tensors, in order (NULL for an
 * ordinary decode, which refuses split records). */
/* meta_only: the id and metadata alone, without the CRC (which spans the payloads). */
static int decode_impl(const void *buf, size_t len, bool view, vf_release_fn release, void *hint,
                       const vf_frame *frames, int nframes, bool meta_only, vf_item **out, vf_status *st)
{
    reader r = {buf, len, 0, st};
    vf_item *it = NULL;
    tdesc *td = NULL;
    view_owner *own = NULL;
    view_owner **fown = NULL; /* one owner per frame */
    int rc, nf = 0;
    uint64_t v;
    bool split = false;

    if (!buf && len) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "item record: NULL buffer");
    if ((rc = need(&r, HDR_FIXED, "the record header")) < 0) return rc;
    if (memcmp(r.b, VF_CODEC_MAGIC, 4) != 0)
        return CORRUPT(&r, "not an item record: bad magic %02x%02x%02x%02x at offset 0 (expected \"%s\")", r.b[0],
                       r.b[1], r.b[2], r.b[3], VF_CODEC_MAGIC);
    unsigned version = (unsigned)rd_le(r.b + 4, 2), flags = (unsigned)rd_le(r.b + 6, 2);
    if (version != VF_CODEC_VERSION)
        return vf_status_set(st, VF_EVERSION, __FILE__, __LINE__,
                             "item record version %u at offset 4 is not supported (this build reads version %d)",
                             version, VF_CODEC_VERSION);
    if (flags & ~(unsigned)(frames ? VF_CODEC_FLAG_SPLIT : 0))
        return CORRUPT(&r, "item record: unknown flags 0x%04x at offset 6", flags);
    split = flags & VF_CODEC_FLAG_SPLIT;
    uint64_t total = rd_le(r.b + 8, 8);
    if (total != len)
        return CORRUPT(&r, "item record: length field at offset 8 says %llu bytes, buffer has %zu",
                       (unsigned long long)total, len);
    if (len < VF_CODEC_ALIGN + 4) /* smallest record: one padded header + CRC */
        return CORRUPT(&r, "item record truncated: %zu bytes is shorter than the smallest record", len);
    uint32_t want = (uint32_t)rd_le(r.b + len - 4, 4), got = meta_only ? want : vf_crc32c(0, r.b, len - 4);
    if (want != got)
        return CORRUPT(&r, "item record: CRC32C mismatch (stored %08x at offset %zu, computed %08x over %zu bytes)",
                       want, len - 4, got, len - 4);
    r.len = len - 4; /* the CRC is not part of the structure */
    r.off = HDR_FIXED;

    const char *s;
    size_t n;
    if ((rc = get_str(&r, "item id", 0, r.len, &s, &n)) < 0) goto fail;
    {
        char *id = vf_item_dupstr(s, n);
        if (!id) VF_FAIL(st, VF_ENOMEM, "out of memory (item)");
        it = vf_item_new(NULL, st);
        if (!it) {
            free(id);
            rc = VF_ENOMEM;
            goto fail;
        }
        free(it->id);
        it->id = id;
    }

    size_t at = r.off;
    if ((rc = get_u(&r, 4, "metadata count", &v)) < 0) goto fail;
    if (v > VF_CODEC_MAX_COUNT)
        VF_FAIL(st, VF_ECORRUPT, "item record: metadata count %llu at offset %zu exceeds %d", (unsigned long long)v,
                at, VF_CODEC_MAX_COUNT);
    uint32_t nmeta = (uint32_t)v;
    for (uint32_t i = 0; i < nmeta; i++) {
        const char *key;
        size_t kl;
        char keybuf[VF_CODEC_MAX_NAME + 1];
        at = r.off;
        if ((rc = get_str(&r, "metadata key", 1, VF_CODEC_MAX_NAME, &key, &kl)) < 0) goto fail;
        memcpy(keybuf, key, kl);
        keybuf[kl] = '\0';
        if (vf_item_find_meta(it, keybuf) >= 0)
            VF_FAIL(st, VF_ECORRUPT, "item record: duplicate metadata key '%s' at offset %zu", keybuf, at);
        size_t kat = r.off;
        if ((rc = get_u(&r, 1, "metadata kind", &v)) < 0) goto fail;
        if (v == 0) {
            if ((rc = get_str(&r, "metadata string", 0, r.len, &s, &n)) < 0) goto fail;
            if ((rc = vf_item_meta_set(it, keybuf, s, n, 0, st)) < 0) goto fail;
        } else if (v == 1) {
            uint64_t u;
            double d;
            if ((rc = get_u(&r, 8, "metadata number", &u)) < 0) goto fail;
            memcpy(&d, &u, 8);
            if ((rc = vf_item_meta_set(it, keybuf, NULL, 0, d, st)) < 0) goto fail;
        } else {
            VF_FAIL(st, VF_ECORRUPT, "item record: metadata '%s' has unknown kind %llu at offset %zu", keybuf,
                    (unsigned long long)v, kat);
        }
    }

    if (meta_only) {
        *out = it;
        return 0;
    }
    at = r.off;
    if ((rc = get_u(&r, 4, "tensor count", &v)) < 0) goto fail;
    if (v > VF_CODEC_MAX_COUNT)
        VF_FAIL(st, VF_ECORRUPT, "item record: tensor count %llu at offset %zu exceeds %d", (unsigned long long)v, at,
                VF_CODEC_MAX_COUNT);
    uint32_t nt = (uint32_t)v;
    /* Each descriptor takes at least 13 bytes: refuse counts the buffer cannot hold
     * before allocating for them. */
    if ((uint64_t)nt * 13 > r.len - r.off)
        VF_FAIL(st, VF_ECORRUPT, "item record: tensor count %u at offset %zu cannot fit in the %zu bytes left", nt, at,
                r.len - r.off);
    if (nt && !(td = calloc(nt, sizeof *td))) VF_FAIL(st, VF_ENOMEM, "out of memory (item decode)");
    for (uint32_t i = 0; i < nt; i++) {
        tdesc *d = &td[i];
        d->at = r.off;
        if ((rc = get_str(&r, "tensor name", 1, VF_CODEC_MAX_NAME, &d->name, &d->name_len)) < 0) goto fail;
        for (uint32_t j = 0; j < i; j++)
            if (td[j].name_len == d->name_len && memcmp(td[j].name, d->name, d->name_len) == 0)
                VF_FAIL(st, VF_ECORRUPT, "item record: duplicate tensor name '%.*s' at offset %zu", (int)d->name_len,
                        d->name, d->at);
        size_t fat = r.off;
        if ((rc = need(&r, 4, "tensor dtype/ndim/location")) < 0) goto fail;
        unsigned dt = r.b[r.off], nd = r.b[r.off + 1], loc = r.b[r.off + 2], pad = r.b[r.off + 3];
        r.off += 4;
        if (dt >= VF_DTYPE_COUNT)
            VF_FAIL(st, VF_ECORRUPT, "item record: tensor '%.*s' has unknown dtype %u at offset %zu", (int)d->name_len,
                    d->name, dt, fat);
        if (nd > VF_MAX_DIMS)
            VF_FAIL(st, VF_ECORRUPT, "item record: tensor '%.*s' has %u dims at offset %zu (at most %d)",
                    (int)d->name_len, d->name, nd, fat + 1, VF_MAX_DIMS);
        if (loc >= VF_LOC_COUNT)
            VF_FAIL(st, VF_ECORRUPT, "item record: tensor '%.*s' has unknown location %u at offset %zu",
                    (int)d->name_len, d->name, loc, fat + 2);
        if (pad != 0)
            VF_FAIL(st, VF_ECORRUPT, "item record: tensor '%.*s': reserved byte at offset %zu is %u, not 0",
                    (int)d->name_len, d->name, fat + 3, pad);
        d->dt = (vf_dtype)dt;
        d->ndim = (int)nd;
        uint64_t nb = vf_dtype_size(d->dt);
        for (int k = 0; k < d->ndim; k++) {
            at = r.off;
            if ((rc = get_u(&r, 8, "tensor dim", &v)) < 0) goto fail;
            if (v > (uint64_t)INT64_MAX)
                VF_FAIL(st, VF_ECORRUPT, "item record: tensor '%.*s' dim %d at offset %zu is negative (%lld)",
                        (int)d->name_len, d->name, k, at, (long long)v);
            d->shape[k] = (int64_t)v;
            if (__builtin_mul_overflow(nb, v, &nb) || nb > (uint64_t)INT64_MAX / 2)
                VF_FAIL(st, VF_ECORRUPT, "item record: tensor '%.*s': dims up to offset %zu overflow the size",
                        (int)d->name_len, d->name, at);
        }
        d->nbytes = (size_t)nb;
        at = r.off;
        if ((rc = get_bytes(&r, "tensor location data", 0, VF_CODEC_MAX_LOC, true, &s, &n)) < 0) goto fail;
        if (loc == VF_LOC_FRAME) {
            if (!split)
                VF_FAIL(st, VF_ECORRUPT,
                        "item record: tensor '%.*s' has its payload in a frame (location %u at offset %zu), but the "
                        "record is not split",
                        (int)d->name_len, d->name, loc, fat + 2);
            if (n != 0)
                VF_FAIL(st, VF_ECORRUPT, "item record: frame tensor '%.*s' carries location data at offset %zu",
                        (int)d->name_len, d->name, at);
            d->frame = true;
            nf++;
            continue;
        }
        if (loc == VF_LOC_INLINE && r.off - at != 4)
            VF_FAIL(st, VF_ECORRUPT, "item record: inline tensor '%.*s' carries location data at offset %zu",
                    (int)d->name_len, d->name, at);
        if (loc != VF_LOC_INLINE)
            VF_FAIL(st, VF_EINVAL,
                    "item record: tensor '%.*s' lives on a device (location %u at offset %zu); only the CUDA "
                    "transports can receive it",
                    (int)d->name_len, d->name, loc, fat + 2);
    }

    /* A split record has frames: one without is written as an ordinary record. */
    if (split && nf == 0) VF_FAIL(st, VF_ECORRUPT, "item record: split flag at offset 6, but no tensor is a frame");
    if (frames && nf != nframes)
        VF_FAIL(st, VF_ECORRUPT, "item record names %d frame tensor(s), %d frame(s) came with it", nf, nframes);
    if (nf && !(fown = calloc((size_t)nf, sizeof *fown))) VF_FAIL(st, VF_ENOMEM, "out of memory (item decode)");
    for (int k = 0; k < nf; k++)
        if (!(fown[k] = owner_new(frames[k].release, frames[k].data, frames[k].hint)))
            VF_FAIL(st, VF_ENOMEM, "out of memory (item decode)");
    /* Payloads: each at the next 64-byte boundary; the last one must end at the CRC. */
    size_t off = align_up(r.off);
    if (off > r.len)
        VF_FAIL(st, VF_ECORRUPT, "item record truncated: header padding at offset %zu runs past the end (%zu)", r.off,
                r.len);
    /* Padding must be zero: then a record has exactly one encoding, and decode→encode
     * reproduces it byte for byte (what the fuzz target checks). */
    if (!all_zero(r.b + r.off, off - r.off))
        VF_FAIL(st, VF_ECORRUPT, "item record: non-zero header padding at offset %zu", r.off);
    if (view && !(own = owner_new(release, buf, hint))) VF_FAIL(st, VF_ENOMEM, "out of memory (item decode)");
    for (uint32_t i = 0, k = 0; i < nt; i++) {
        tdesc *d = &td[i];
        if (d->frame) {
            const vf_frame *f = &frames[k];
            view_owner *fo = fown[k++];
            if ((rc = frame_tensor(it, d, f, fo, st)) < 0) goto fail;
            continue;
        }
        if (d->nbytes > r.len - off)
            VF_FAIL(st, VF_ECORRUPT,
                    "item record truncated: payload of tensor '%.*s' (%zu bytes) at offset %zu runs past the end "
                    "(%zu)",
                    (int)d->name_len, d->name, d->nbytes, off, r.len);
        const unsigned char *payload = r.b + off;
        char name[VF_CODEC_MAX_NAME + 1];
        memcpy(name, d->name, d->name_len);
        name[d->name_len] = '\0';
        vf_tensor *t;
        /* Alias only when the payload is aligned for its dtype (a ZeroMQ or LMDB buffer
         * need not be); otherwise copy that tensor. */
        if (view && ((uintptr_t)payload % vf_dtype_size(d->dt)) == 0) {
            t = vf_tensor_wrap(d->dt, d->ndim, d->shape, (vf_device){VF_DEV_CPU, 0}, (void *)payload, view_unref, own,
                               st);
            if (t) atomic_fetch_add_explicit(&own->refs, 1, memory_order_relaxed);
        } else {
            t = vf_tensor_new(d->dt, d->ndim, d->shape, st);
            if (t && d->nbytes) memcpy(t->data, payload, d->nbytes);
        }
        if (!t) {
            rc = st && st->code ? st->code : VF_ENOMEM;
            goto fail;
        }
        if ((rc = vf_item_put(it, name, t, st)) < 0) goto fail;
        size_t step = align_up(d->nbytes);
        if (step > r.len - off)
            VF_FAIL(st, VF_ECORRUPT, "item record truncated: padding after tensor '%s' at offset %zu runs past the end",
                    name, off + d->nbytes);
        if (!all_zero(payload + d->nbytes, step - d->nbytes))
            VF_FAIL(st, VF_ECORRUPT, "item record: non-zero padding after tensor '%s' at offset %zu", name,
                    off + d->nbytes);
        off += step;
    }
    if (off != r.len)
        VF_FAIL(st, VF_ECORRUPT, "item record: %zu unexpected bytes after the last payload at offset %zu", r.len - off,
                off);
    free(td);
    if (own) {
        own->armed = true;
        view_unref(NULL, own); /* drops the decoder's reference: releases now if nothing aliases */
    }
    for (int k = 0; k < nf; k++) {
        fown[k]->armed = true;
        view_unref(NULL, fown[k]);
    }
    free(fown);
    *out = it;
    return 0;
fail:
    free(td);
    vf_item_free(it); /* aliasing tensors drop their references; no owner is armed */
    if (own) view_unref(NULL, own);
    for (int k = 0; fown && k < nf; k++)
        if (fown[k]) view_unref(NULL, fown[k]);
    free(fown);
    return rc;
}

int vf_item_decode(const void *buf, size_t len, vf_item **out, vf_status *st)
{
    return decode_impl(buf, len, false, NULL, NULL, NULL, 0, false, out, st);
}

int vf_item_decode_meta(const void *buf, size_t len, vf_item **out, vf_status *st)
{
    return decode_impl(buf, len, false, NULL, NULL, NULL, 0, true, out, st);
}

int vf_item_decode_view(const void *buf, size_t len, vf_release_fn release, void *hint, vf_item **out,
                        vf_status *st)
{
    return decode_impl(buf, len, true, release, hint, NULL, 0, false, out, st);
}

int vf_item_decode_split(const void *buf, size_t len, vf_release_fn release, void *hint, const vf_frame *frames,
                         int nframes, vf_item **out, vf_status *st)
{
    static const vf_frame none;
    if (nframes < 0 || (nframes && !frames))
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "item record: %d frames at %p", nframes,
                             (const void *)frames);
    return decode_impl(buf, len, true, release, hint, frames ? frames : &none, nframes, false, out, st);
}
