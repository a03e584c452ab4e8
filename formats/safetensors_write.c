/* safetensors_write.c — the streaming safetensors writer (contract in safetensors.h).
 *
 * The writer only records descriptors (name, dtype, shape, where the bytes are); at
 * write time it builds the header, then copies each tensor straight from the caller's
 * memory (or a fill callback through one 1 MiB bounce buffer) to the file. Header text
 * follows serde_json's compact output so files equal the reference writer's byte for
 * byte: same key order, same escapes (\" \\ \b \f \n \r \t, \u00xx for other control
 * characters, everything else raw UTF-8), padding with spaces to a multiple of 8.
 *
 * A file whose bytes arrive in pieces, in any order (vf_st_stream: the checkpoint
 * writer's, fed by the optimizer shards' snapshot chunks), gets the same header; each
 * piece is written at its place and its CRC32C kept, and at the end the pieces must
 * tile the file exactly, their CRCs combined in file order into the whole file's.
 */
#include "formats/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILL_CHUNK (1u << 20)

typedef struct wtensor {
    char *name;
    vf_st_dtype dt;
    int ndim;
    int64_t *shape;
    int64_t numel;
    uint64_t nbytes, offset;
    const void *data;
    vf_st_fill_fn fill;
    void *user;
    bool streamed; /* bytes come through a vf_st_stream */
} wtensor;

struct vf_st_writer {
    wtensor *t;
    int n, cap;
    char **mkey, **mval;
    int nm, capm;
    char *hdr; /* built by prepare(); freed when tensors/metadata change */
    size_t hlen;
    uint64_t data_bytes;
};

/* ------------------------------------------------------------ growable text */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *q = realloc(b->s, nc);
        if (!q) { b->oom = true; return; }
        b->s = q;
        b->cap = nc;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}
static void sb_puts(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }
static void sb_u64(sbuf *b, uint64_t v)
{
    char t[24];
    sb_add(b, t, (size_t)snprintf(t, sizeof t, "%llu", (unsigned long long)v));
}
static void sb_jstr(sbuf *b, const char *s)
{
    sb_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[8];
        const char *r = NULL;
        switch (*p) {
        case '"': r = "\\\""; break;
        case '\\': r = "\\\\"; break;
        case '\b': r = "\\b"; break;
        case '\f': r = "\\f"; break;
        case '\n': r = "\\n"; break;
        case '\r': r = "\\r"; break;
        case '\t': r = "\\t"; break;
        default:
            if (*p < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", *p);
                r = e;
            }
        }
        if (r) sb_puts(b, r);
        else sb_add(b, (const char *)p, 1);
    }
    sb_add(b, "\"", 1);
}

/* ------------------------------------------------------------ building */

static bool utf8_valid(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s, k, cp;
        if (c < 0x80) { s++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return false;
        for (unsigned m = 1; m <= k; m++) {
            if ((s[m] & 0xC0) != 0x80) return false; /* also stops at the NUL */
            cp = cp << 6 | (s[m] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        s += k + 1;
    }
    return true;
}

vf_st_writer *vf_st_writer_new(vf_status *st)
{
    vf_st_writer *w = calloc(1, sizeof *w);
    if (!w) vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "safetensors writer: out of memory");
    return w;
}

void vf_st_writer_free(vf_st_writer *w)
{
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].shape);
    }
    for (int i = 0; i < w->nm; i++) {
        free(w->mkey[i]);
        free(w->mval[i]);
    }
    free(w->t);
    free(w->mkey);
    free(w->mval);
    free(w->hdr);
    free(w);
}

static int add_common(vf_st_writer *w, const char *name, vf_st_dtype dt, int ndim,
                      const int64_t *shape, const void *data, vf_st_fill_fn fill, void *user,
                      bool streamed, vf_status *st)
{
    int rc = 0;
    wtensor t = {0};
    if ((unsigned)dt >= VF_ST_DTYPE_COUNT)
        VF_FAIL(st, VF_EINVAL, "safetensors writer: tensor \"%s\": bad dtype %d", name, (int)dt);
    if (!utf8_valid(name))
        VF_FAIL(st, VF_EINVAL, "safetensors writer: tensor name is not valid UTF-8");
    if (!strcmp(name, "__metadata__"))
        VF_FAIL(st, VF_EINVAL, "safetensors writer: \"__metadata__\" cannot name a tensor");
    if (ndim < 0) VF_FAIL(st, VF_EINVAL, "safetensors writer: tensor \"%s\": ndim %d", name, ndim);
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name))
            VF_FAIL(st, VF_EINVAL, "safetensors writer: tensor \"%s\" added twice", name);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            VF_FAIL(st, VF_EINVAL, "safetensors writer: tensor \"%s\": negative dim %lld", name,
                    (long long)shape[i]);
    uint64_t bits = (uint64_t)vf_st_dtype_bits(dt), n = 1;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n))
            VF_FAIL(st, VF_EINVAL, "safetensors writer: tensor \"%s\": shape overflows", name);
    if (__builtin_mul_overflow(n, bits, &bits) || bits % 8)
        VF_FAIL(st, VF_EINVAL, "safetensors writer: tensor \"%s\": %s data of %llu elements is not a whole number of bytes",
                name, vf_st_dtype_name(dt), (unsigned long long)n);
    if (bits / 8 && !data && !fill && !streamed)
        VF_FAIL(st, VF_EINVAL, "safetensors writer: tensor \"%s\": no data", name);
    t.name = strdup(name);
    t.shape = malloc(sizeof(int64_t) * (size_t)(ndim ? ndim : 1));
    if (!t.name || !t.shape) VF_FAIL(st, VF_ENOMEM, "safetensors writer: out of memory");
    if (ndim) memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
    t.dt = dt;
    t.ndim = ndim;
    t.numel = (int64_t)n;
    t.nbytes = bits / 8;
    t.data = data;
    t.fill = fill;
    t.user = user;
    t.streamed = streamed;
    if (w->n == w->cap) {
        int nc = w->cap ? w->cap * 2 : 16;
        wtensor *q = realloc(w->t, sizeof *q * (size_t)nc);
        if (!q) VF_FAIL(st, VF_ENOMEM, "safetensors writer: out of memory");
        w->t = q;
        w->cap = nc;
    }
    w->t[w->n++] = t;
    free(w->hdr);
    w->hdr = NULL;
    return 0;
fail:
    free(t.name);
    free(t.shape);
    return rc;
}

int vf_st_writer_add(vf_st_writer *w, const char *name, vf_st_dtype dt, int ndim,
                     const int64_t *shape, const void *data, vf_status *st)
{
    return add_common(w, name, dt, ndim, shape, data, NULL, NULL, false, st);
}

int vf_st_writer_add_fill(vf_st_writer *w, const char *name, vf_st_dtype dt, int ndim,
                          const int64_t *shape, vf_st_fill_fn fill, void *user,
                          vf_status *st)
{
    return add_common(w, name, dt, ndim, shape, NULL, fill, user, false, st);
}

int vf_st_writer_add_streamed(vf_st_writer *w, const char *name, vf_st_dtype dt, int ndim,
                              const int64_t *shape, vf_status *st)
{
    return add_common(w, name, dt, ndim, shape, NULL, NULL, NULL, true, st);
}

int vf_st_writer_add_tensor(vf_st_writer *w, const char *name, const vf_tensor *t,
                            vf_status *st)
{
    if (t->device.kind != VF_DEV_CPU)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "safetensors writer: tensor \"%s\" is not in host memory", name);
    return add_common(w, name, vf_st_dtype_from_vf(t->dtype), t->ndim, t->shape, t->data, NULL,
                      NULL, false, st);
}

int vf_st_writer_meta(vf_st_writer *w, const char *key, const char *value, vf_status *st)
{
    int rc = 0;
    if (!utf8_valid(key) || !utf8_valid(value))
        VF_FAIL(st, VF_EINVAL, "safetensors writer: metadata \"%s\" is not valid UTF-8", key);
    char *v = strdup(value);
    if (!v) VF_FAIL(st, VF_ENOMEM, "safetensors writer: out of memory");
    for (int i = 0; i < w->nm; i++)
        if (!strcmp(w->mkey[i], key)) {
            free(w->mval[i]);
            w->mval[i] = v;
            goto done;
        }
    if (w->nm == w->capm) {
        int nc = w->capm ? w->capm * 2 : 8;
        char **a = realloc(w->mkey, sizeof *a * (size_t)nc);
        if (a) w->mkey = a;
        char **b = a ? realloc(w->mval, sizeof *b * (size_t)nc) : NULL;
        if (b) w->mval = b;
        if (!a || !b) { free(v); VF_FAIL(st, VF_ENOMEM, "safetensors writer: out of memory"); }
        w->capm = nc;
    }
    w->mkey[w->nm] = strdup(key);
    if (!w->mkey[w->nm]) { free(v); VF_FAIL(st, VF_ENOMEM, "safetensors writer: out of memory"); }
    w->mval[w->nm++] = v;
done:
    free(w->hdr);
    w->hdr = NULL;
fail:
    return rc;
}

static int cmp_wt(const void *a, const void *b)
{
    const wtensor *x = a, *y = b;
    if (x->dt != y->dt) return x->dt > y->dt ? -1 : 1; /* descending: widest first */
    return strcmp(x->name, y->name);
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int prepare(vf_st_writer *w, vf_status *st)
{
    if (w->hdr) return 0;
    if (w->n > 1) qsort(w->t, (size_t)w->n, sizeof *w->t, cmp_wt);
    sbuf b = {0};
    sb_add(&b, "{", 1);
    if (w->nm) {
        /* keys sorted so the header is deterministic (the reference's HashMap is not) */
        char **ks = malloc(sizeof(char *) * (size_t)w->nm);
        if (!ks) b.oom = true;
        else {
            memcpy(ks, w->mkey, sizeof(char *) * (size_t)w->nm);
            qsort(ks, (size_t)w->nm, sizeof *ks, cmp_str);
            sb_puts(&b, "\"__metadata__\":{");
            for (int i = 0; i < w->nm; i++) {
                int k = 0;
                while (w->mkey[k] != ks[i]) k++;
                if (i) sb_add(&b, ",", 1);
                sb_jstr(&b, w->mkey[k]);
                sb_add(&b, ":", 1);
                sb_jstr(&b, w->mval[k]);
            }
            sb_add(&b, "}", 1);
        }
        free(ks);
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        wtensor *t = &w->t[i];
        t->offset = off;
        if (i || w->nm) sb_add(&b, ",", 1);
        sb_jstr(&b, t->name);
        sb_puts(&b, ":{\"dtype\":\"");
        sb_puts(&b, vf_st_dtype_name(t->dt));
        sb_puts(&b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) sb_add(&b, ",", 1);
            sb_u64(&b, (uint64_t)t->shape[d]);
        }
        sb_puts(&b, "],\"data_offsets\":[");
        sb_u64(&b, off);
        sb_add(&b, ",", 1);
        if (__builtin_add_overflow(off, t->nbytes, &off)) b.oom = true;
        sb_u64(&b, off);
        sb_puts(&b, "]}");
    }
    sb_add(&b, "}", 1);
    while (!b.oom && b.len % 8) sb_add(&b, " ", 1);
    if (b.oom) {
        free(b.s);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "safetensors writer: out of memory");
    }
    if (b.len > 100000000u) {
        free(b.s);
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "safetensors writer: header of %zu bytes is over the 100 MB limit", b.len);
    }
    w->hdr = b.s;
    w->hlen = b.len;
    w->data_bytes = off;
    return 0;
}

uint64_t vf_st_writer_size(vf_st_writer *w)
{
    if (prepare(w, NULL)) return 0;
    return 8 + w->hlen + w->data_bytes;
}

/* ------------------------------------------------------------ output */

typedef struct sink {
    int fd;
    FILE *fp;
    const char *label;
    uint32_t crc;
} sink;

static int sink_write(sink *k, const void *p, size_t n, vf_status *st)
{
    k->crc = vf_crc32c(k->crc, p, n);
    if (k->fp) {
        if (n && fwrite(p, 1, n, k->fp) != n)
            return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: write: %s", k->label,
                                 strerror(errno));
        return 0;
    }
    const char *c = p;
    while (n) {
        ssize_t r = write(k->fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: write: %s", k->label,
                                 r < 0 ? strerror(errno) : "no progress");
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_all(vf_st_writer *w, sink *k, unsigned flags, uint32_t *crc, vf_status *st)
{
    int rc = 0;
    void *bounce = NULL;
    VF_TRY(prepare(w, st));
    uint64_t n = w->hlen;
    uint8_t len8[8];
    memcpy(len8, &n, 8);
    VF_TRY(sink_write(k, len8, 8, st));
    VF_TRY(sink_write(k, w->hdr, w->hlen, st));
    for (int i = 0; i < w->n; i++) {
        wtensor *t = &w->t[i];
        if (!t->nbytes) continue;
        if (t->streamed)
            VF_FAIL(st, VF_EINVAL, "%s: tensor \"%s\" is streamed: write the file with vf_st_stream",
                    k->label, t->name);
        if (t->data) {
            VF_TRY(sink_write(k, t->data, (size_t)t->nbytes, st));
            continue;
        }
        if (!bounce && !(bounce = malloc(FILL_CHUNK)))
            VF_FAIL(st, VF_ENOMEM, "%s: out of memory", k->label);
        for (uint64_t o = 0; o < t->nbytes; o += FILL_CHUNK) {
            size_t m = t->nbytes - o < FILL_CHUNK ? (size_t)(t->nbytes - o) : FILL_CHUNK;
            rc = t->fill(t->user, o, bounce, m, st);
            if (rc < 0) {
                vf_status_prefix(st, "%s: tensor \"%s\"", k->label, t->name);
                goto fail;
            }
            VF_TRY(sink_write(k, bounce, m, st));
        }
    }
    if (k->fp && fflush(k->fp) != 0)
        VF_FAIL(st, VF_EIO, "%s: flush: %s", k->label, strerror(errno));
    if ((flags & VF_ST_FSYNC) && fsync(k->fp ? fileno(k->fp) : k->fd) != 0)
        VF_FAIL(st, VF_EIO, "%s: fsync: %s", k->label, strerror(errno));
    if (crc) *crc = k->crc;
fail:
    free(bounce);
    return rc;
}

int vf_st_writer_write_fd(vf_st_writer *w, int fd, const char *label, unsigned flags,
                          uint32_t *crc, vf_status *st)
{
    sink k = {.fd = fd, .label = label ? label : "(fd)"};
    return write_all(w, &k, flags, crc, st);
}

int vf_st_writer_write_file(vf_st_writer *w, FILE *fp, const char *label, unsigned flags,
                            uint32_t *crc, vf_status *st)
{
    sink k = {.fd = -1, .fp = fp, .label = label ? label : "(stream)"};
    return write_all(w, &k, flags, crc, st);
}

int vf_st_writer_save(vf_st_writer *w, const char *path, unsigned flags, uint32_t *crc,
                      vf_status *st)
{
    int rc = 0, fd = -1;
    bool atomic = flags & VF_ST_ATOMIC;
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 5), *dir = strdup(path);
    if (!tmp || !dir) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", path);
    snprintf(tmp, pl + 5, "%s%s", path, atomic ? ".tmp" : "");
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) VF_FAIL(st, VF_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    VF_TRY(vf_st_writer_write_fd(w, fd, tmp, atomic ? (flags | VF_ST_FSYNC) : flags, crc, st));
    if (close(fd) != 0) {
        fd = -1;
        VF_FAIL(st, VF_EIO, "%s: close: %s", tmp, strerror(errno));
    }
    fd = -1;
    if (atomic) {
        if (rename(tmp, path) != 0)
            VF_FAIL(st, VF_EIO, "%s: rename to %s: %s", tmp, path, strerror(errno));
        int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) != 0) {
            if (dfd >= 0) close(dfd);
            VF_FAIL(st, VF_EIO, "%s: fsync of its directory: %s", path, strerror(errno));
        }
        close(dfd);
    }
    free(tmp);
    free(dir);
    return 0;
fail:
    if (fd >= 0) close(fd);
    if (atomic && tmp) unlink(tmp);
    free(tmp);
    free(dir);
    return rc;
}

/* ------------------------------------------------------------ a file in pieces */

typedef struct piece {
    uint64_t at, n;
    uint32_t crc;
} piece;

struct vf_st_stream {
    vf_st_writer *w; /* borrowed */
    int fd;
    char *path;
    uint64_t size;
    piece *p;
    size_t np, capp;
};

static int pwrite_all(int fd, const char *label, uint64_t at, const void *buf, size_t n, vf_status *st)
{
    const char *c = buf;
    while (n) {
        ssize_t r = pwrite(fd, c, n > (1u << 30) ? (1u << 30) : n, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: write: %s", label,
                                 r < 0 ? strerror(errno) : "no progress");
        c += r;
        at += (uint64_t)r;
        n -= (size_t)r;
    }
    return 0;
}

int vf_st_stream_put(vf_st_stream *s, uint64_t at, const void *buf, size_t n, vf_status *st)
{
    if (!n) return 0;
    if (at > s->size || n > s->size - at)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: bytes [%llu, +%zu) lie outside the file's %llu",
                             s->path, (unsigned long long)at, n, (unsigned long long)s->size);
    if (s->np == s->capp) {
        size_t nc = s->capp ? 2 * s->capp : 64;
        piece *q = realloc(s->p, sizeof *q * nc);
        if (!q) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", s->path);
        s->p = q;
        s->capp = nc;
    }
    int rc = pwrite_all(s->fd, s->path, at, buf, n, st);
    if (rc) return rc;
    s->p[s->np++] = (piece){at, n, vf_crc32c(0, buf, n)};
    return 0;
}

int vf_st_stream_open(vf_st_writer *w, const char *path, vf_st_stream **out, vf_status *st)
{
    int rc = 0;
    *out = NULL;
    vf_st_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", path);
    }
    s->w = w;
    s->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s->fd < 0) VF_FAIL(st, VF_EIO, "%s: cannot create: %s", path, strerror(errno));
    VF_TRY(prepare(w, st));
    s->size = 8 + w->hlen + w->data_bytes;
    uint64_t hn = w->hlen;
    uint8_t len8[8];
    memcpy(len8, &hn, 8);
    VF_TRY(vf_st_stream_put(s, 0, len8, 8, st));
    VF_TRY(vf_st_stream_put(s, 8, w->hdr, w->hlen, st));
    for (int i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        if (!t->nbytes || t->streamed) continue;
        if (!t->data)
            VF_FAIL(st, VF_EINVAL, "%s: tensor \"%s\" has a fill callback; a stream takes its bytes in pieces",
                    path, t->name);
        VF_TRY(vf_st_stream_put(s, 8 + w->hlen + t->offset, t->data, (size_t)t->nbytes, st));
    }
    *out = s;
    return 0;
fail:
    vf_st_stream_abort(s);
    return rc;
}

int64_t vf_st_stream_offset(const vf_st_stream *s, const char *name)
{
    for (int i = 0; i < s->w->n; i++)
        if (!strcmp(s->w->t[i].name, name)) return (int64_t)(8 + s->w->hlen + s->w->t[i].offset);
    return -1;
}

uint64_t vf_st_stream_size(const vf_st_stream *s) { return s->size; }

static int cmp_piece(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    return (x->at > y->at) - (x->at < y->at);
}

int vf_st_stream_finish(vf_st_stream *s, unsigned flags, int64_t *bytes, uint32_t *crc, vf_status *st)
{
    int rc = 0;
    if (s->np) qsort(s->p, s->np, sizeof *s->p, cmp_piece);
    uint64_t at = 0;
    uint32_t c = 0;
    for (size_t i = 0; i < s->np; i++) {
        if (s->p[i].at != at)
            VF_FAIL(st, VF_EINVAL, "%s: bytes [%llu, %llu) were %s", s->path, (unsigned long long)at,
                    (unsigned long long)s->p[i].at, s->p[i].at > at ? "never written" : "written twice");
        c = vf_crc32c_combine(c, s->p[i].crc, s->p[i].n);
        at += s->p[i].n;
    }
    if (at != s->size)
        VF_FAIL(st, VF_EINVAL, "%s: bytes [%llu, %llu) were never written", s->path, (unsigned long long)at,
                (unsigned long long)s->size);
    if ((flags & VF_ST_FSYNC) && fsync(s->fd) != 0) VF_FAIL(st, VF_EIO, "%s: fsync: %s", s->path, strerror(errno));
    int fd = s->fd;
    s->fd = -1;
    if (close(fd) != 0) VF_FAIL(st, VF_EIO, "%s: close: %s", s->path, strerror(errno));
    if (bytes) *bytes = (int64_t)s->size;
    if (crc) *crc = c;
fail:
    vf_st_stream_abort(s);
    return rc;
}

void vf_st_stream_abort(vf_st_stream *s)
{
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    free(s->p);
    free(s->path);
    free(s);
}
