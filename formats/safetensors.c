/* safetensors.c — the safetensors reader: mmap + strict validation (the streaming writer
 * is safetensors_write.c).
 *
 * The header JSON is parsed by a small private recursive-descent parser that knows the
 * one shape a safetensors header has; it follows serde_json's rules where the reference
 * reader depends on them (integers only for shapes and offsets, no leading zeros, no
 * trailing characters but whitespace, strict string escapes, lone surrogates refused,
 * duplicate fields inside a tensor entry refused, unknown fields skipped).
 * See safetensors.h for the contract and the one deliberate difference (duplicate names).
 */
#include "formats/safetensors.h"
#include "formats/st_json.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format is little-endian)"
#endif

#define ST_MAX_HEADER 100000000ull /* the reference's MAX_HEADER_SIZE */

static const struct { const char *name; int bits; } dtypes[VF_ST_DTYPE_COUNT] = {
    {"BOOL", 8},  {"F4", 4},        {"F6_E2M3", 6},     {"F6_E3M2", 6},
    {"U8", 8},    {"I8", 8},        {"F8_E5M2", 8},     {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
    {"U16", 16},  {"F16", 16},      {"BF16", 16},       {"I32", 32},
    {"U32", 32},  {"F32", 32},      {"C64", 64},        {"F64", 64},
    {"I64", 64},  {"U64", 64},
};

const char *vf_st_dtype_name(vf_st_dtype dt)
{
    return (unsigned)dt < VF_ST_DTYPE_COUNT ? dtypes[dt].name : "?";
}
int vf_st_dtype_bits(vf_st_dtype dt) { return (unsigned)dt < VF_ST_DTYPE_COUNT ? dtypes[dt].bits : 0; }

int vf_st_dtype_parse(const char *name, vf_st_dtype *out)
{
    for (int i = 0; i < VF_ST_DTYPE_COUNT; i++)
        if (strcmp(name, dtypes[i].name) == 0) {
            *out = (vf_st_dtype)i;
            return 0;
        }
    return VF_EINVAL;
}

vf_st_dtype vf_st_dtype_from_vf(vf_dtype dt)
{
    switch (dt) {
    case VF_DTYPE_U8: return VF_ST_U8;
    case VF_DTYPE_I32: return VF_ST_I32;
    case VF_DTYPE_BF16: return VF_ST_BF16;
    case VF_DTYPE_F16: return VF_ST_F16;
    default: return VF_ST_F32;
    }
}

int vf_st_dtype_to_vf(vf_st_dtype dt, vf_dtype *out)
{
    switch (dt) {
    case VF_ST_U8: *out = VF_DTYPE_U8; return 0;
    case VF_ST_I32: *out = VF_DTYPE_I32; return 0;
    case VF_ST_F32: *out = VF_DTYPE_F32; return 0;
    case VF_ST_BF16: *out = VF_DTYPE_BF16; return 0;
    case VF_ST_F16: *out = VF_DTYPE_F16; return 0;
    default: return VF_EINVAL;
    }
}

/* numel * bits / 8 with the reference's overflow and byte-boundary checks. */
static int nbytes_of(vf_st_dtype dt, int ndim, const int64_t *shape, int64_t *numel,
                     uint64_t *nbytes)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n)) return -1;
    uint64_t bits;
    if (__builtin_mul_overflow(n, (uint64_t)dtypes[dt].bits, &bits)) return -1;
    if (bits % 8) return -2;
    *numel = (int64_t)n; /* n * bits did not overflow, so n < 2^62 */
    *nbytes = bits / 8;
    return 0;
}

/* ================================================================== reader */

struct vf_st_file {
    char *label;
    const uint8_t *base;
    size_t len;
    bool mapped;
    uint64_t n;
    int nt, capt;
    vf_st_tensor *t;     /* sorted by offset */
    int *by_name;        /* indices of t sorted by name */
    int64_t *shapes;     /* all dims; t[i].shape points in here */
    size_t nshapes, capshapes;
    int nm, capm;
    char **mkey, **mval;
};

static const vf_st_file *sort_ctx; /* qsort has no user pointer in C11 */

static int cmp_offset(const void *a, const void *b)
{
    const vf_st_tensor *x = a, *y = b;
    uint64_t xe = x->offset + x->nbytes, ye = y->offset + y->nbytes;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return xe < ye ? -1 : xe > ye;
}

static int cmp_name_idx(const void *a, const void *b)
{
    return strcmp(sort_ctx->t[*(const int *)a].name, sort_ctx->t[*(const int *)b].name);
}

static int grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int parse_meta(jp *j, vf_st_file *f)
{
    vf_stj_ws(j);
    if (j->end - j->p >= 4 && memcmp(j->p, "null", 4) == 0) { j->p += 4; return 0; }
    if (vf_stj_lit(j, '{')) return -1;
    vf_stj_ws(j);
    if (j->p < j->end && *j->p == '}') { j->p++; return 0; }
    while (1) {
        char *k = NULL, *v = NULL;
        if (vf_stj_str(j, &k) || vf_stj_lit(j, ':')) { free(k); return -1; }
        vf_stj_ws(j);
        if (j->p >= j->end || *j->p != '"') {
            free(k);
            return vf_stj_err(j, "__metadata__ values must be strings");
        }
        if (vf_stj_str(j, &v)) { free(k); return -1; }
        int i = 0;
        while (i < f->nm && strcmp(f->mkey[i], k) != 0) i++;
        if (i < f->nm) { /* serde's map keeps the last value */
            free(k);
            free(f->mval[i]);
            f->mval[i] = v;
        } else {
            int c1 = f->capm, c2 = f->capm;
            if (grow((void **)&f->mkey, &c1, f->nm + 1, sizeof(char *)) ||
                grow((void **)&f->mval, &c2, f->nm + 1, sizeof(char *))) {
                free(k); free(v);
                return vf_stj_err(j, "out of memory");
            }
            f->capm = c1;
            f->mkey[f->nm] = k;
            f->mval[f->nm++] = v;
        }
        vf_stj_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        return vf_stj_lit(j, '}');
    }
}

/* One tensor entry {"dtype","shape","data_offsets"}; its name is already stored. */
static int parse_tensor(jp *j, vf_st_file *f, vf_st_tensor *t, size_t *shape_at)
{
    bool have_dt = false, have_shape = false, have_off = false;
    uint64_t off[2] = {0, 0};
    if (vf_stj_lit(j, '{')) return -1;
    vf_stj_ws(j);
    bool empty = j->p < j->end && *j->p == '}';
    if (empty) j->p++;
    while (!empty) {
        char *k = NULL;
        if (vf_stj_str(j, &k) || vf_stj_lit(j, ':')) { free(k); return -1; }
        int which = !strcmp(k, "dtype") ? 0 : !strcmp(k, "shape") ? 1 : !strcmp(k, "data_offsets") ? 2 : 3;
        free(k);
        if ((which == 0 && have_dt) || (which == 1 && have_shape) || (which == 2 && have_off))
            return vf_stj_err(j, which == 0 ? "duplicate field dtype" : which == 1 ? "duplicate field shape"
                                                                           : "duplicate field data_offsets");
        if (which == 0) {
            char *d = NULL;
            vf_stj_ws(j);
            if (j->p >= j->end || *j->p != '"') return vf_stj_err(j, "dtype must be a string");
            if (vf_stj_str(j, &d)) return -1;
            int bad = vf_st_dtype_parse(d, &t->dtype);
            if (bad) {
                snprintf(j->err, sizeof j->err, "unknown dtype \"%.40s\"", d);
                free(d);
                return -1;
            }
            free(d);
            have_dt = true;
        } else if (which == 1) {
            vf_stj_ws(j);
            if (j->p >= j->end || *j->p != '[') return vf_stj_err(j, "shape must be an array");
            j->p++;
            *shape_at = f->nshapes;
            t->ndim = 0;
            vf_stj_ws(j);
            if (j->p < j->end && *j->p == ']') j->p++;
            else
                while (1) {
                    uint64_t v;
                    if (vf_stj_uint(j, &v)) return -1;
                    if (v > INT64_MAX) return vf_stj_err(j, "dimension too large");
                    if (f->nshapes == f->capshapes) {
                        size_t nc = f->capshapes ? f->capshapes * 2 : 64;
                        int64_t *q = realloc(f->shapes, nc * sizeof *q);
                        if (!q) return vf_stj_err(j, "out of memory");
                        f->shapes = q;
                        f->capshapes = nc;
                    }
                    f->shapes[f->nshapes++] = (int64_t)v;
                    if (t->ndim == INT_MAX) return vf_stj_err(j, "too many dimensions");
                    t->ndim++;
                    vf_stj_ws(j);
                    if (j->p < j->end && *j->p == ',') { j->p++; continue; }
                    if (vf_stj_lit(j, ']')) return -1;
                    break;
                }
            have_shape = true;
        } else if (which == 2) {
            vf_stj_ws(j);
            if (j->p >= j->end || *j->p != '[') return vf_stj_err(j, "data_offsets must be an array");
            j->p++;
            for (int k = 0; k < 3; k++) {
                vf_stj_ws(j);
                if (j->p < j->end && *j->p == ']' && k == 2) { j->p++; break; }
                if (k == 2 || (j->p < j->end && *j->p == ']'))
                    return vf_stj_err(j, "data_offsets must have exactly 2 elements");
                if (vf_stj_uint(j, &off[k])) return -1;
                vf_stj_ws(j);
                if (k == 0 && j->p < j->end && *j->p == ']')
                    return vf_stj_err(j, "data_offsets must have exactly 2 elements");
                if (k == 0 && vf_stj_lit(j, ',')) return -1;
            }
            have_off = true;
        } else if (vf_stj_skip(j, 2)) {
            return -1;
        }
        vf_stj_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (vf_stj_lit(j, '}')) return -1;
        break;
    }
    if (!have_dt) return vf_stj_err(j, "missing field dtype");
    if (!have_shape) return vf_stj_err(j, "missing field shape");
    if (!have_off) return vf_stj_err(j, "missing field data_offsets");
    if (off[1] < off[0]) return vf_stj_err(j, "data_offsets end before begin");
    t->offset = off[0];
    t->nbytes = off[1] - off[0];
    return 0;
}

static int parse_header(vf_st_file *f, const char *h, size_t n, vf_status *st)
{
    int rc = 0;
    jp j = {.p = h, .end = h + n};
    size_t *shape_at = NULL;
    int cap_at = 0;
    bool have_meta = false;
    vf_stj_ws(&j);
    if (j.p >= j.end || *j.p != '{') { vf_stj_err(&j, "header is not a JSON object"); goto bad; }
    j.p++;
    vf_stj_ws(&j);
    if (j.p < j.end && *j.p == '}') j.p++;
    else
        while (1) {
            char *name = NULL;
            if (vf_stj_str(&j, &name) || vf_stj_lit(&j, ':')) { free(name); goto bad; }
            if (!strcmp(name, "__metadata__")) {
                free(name);
                if (have_meta) { vf_stj_err(&j, "duplicate field __metadata__"); goto bad; }
                have_meta = true;
                if (parse_meta(&j, f)) goto bad;
            } else {
                if (grow((void **)&f->t, &f->capt, f->nt + 1, sizeof *f->t) ||
                    grow((void **)&shape_at, &cap_at, f->nt + 1, sizeof *shape_at)) {
                    free(name);
                    VF_FAIL(st, VF_ENOMEM, "%s: out of memory reading the header", f->label);
                }
                vf_st_tensor *t = &f->t[f->nt++];
                memset(t, 0, sizeof *t);
                t->name = name;
                if (parse_tensor(&j, f, t, &shape_at[f->nt - 1])) {
                    char m[sizeof j.err];
                    snprintf(m, sizeof m, "%s", j.err);
                    VF_FAIL(st, VF_ECORRUPT, "%s: safetensors header: tensor \"%s\": %s", f->label,
                            name, m);
                }
            }
            vf_stj_ws(&j);
            if (j.p < j.end && *j.p == ',') { j.p++; continue; }
            if (vf_stj_lit(&j, '}')) goto bad;
            break;
        }
    vf_stj_ws(&j);
    if (j.p != j.end) { vf_stj_err(&j, "trailing characters after the JSON object"); goto bad; }
    for (int i = 0; i < f->nt; i++) f->t[i].shape = f->t[i].ndim ? f->shapes + shape_at[i] : NULL;
    free(shape_at);
    return 0;
bad:
    rc = vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__,
                       "%s: safetensors header: invalid JSON at byte %td: %s", f->label,
                       j.p - h + 8, j.err[0] ? j.err : "syntax error");
fail:
    free(shape_at);
    return rc;
}

static int validate(vf_st_file *f, vf_status *st)
{
    int rc = 0;
    if (f->nt > 1) qsort(f->t, (size_t)f->nt, sizeof *f->t, cmp_offset);
    uint64_t start = 0;
    for (int i = 0; i < f->nt; i++) {
        vf_st_tensor *t = &f->t[i];
        if (t->offset != start)
            VF_FAIL(st, VF_ECORRUPT,
                    "%s: tensor \"%s\": data_offsets [%llu, %llu) %s the previous tensor's end %llu",
                    f->label, t->name, (unsigned long long)t->offset,
                    (unsigned long long)(t->offset + t->nbytes),
                    t->offset > start ? "leave a gap after" : "overlap", (unsigned long long)start);
        start = t->offset + t->nbytes;
        uint64_t want;
        int e = nbytes_of(t->dtype, t->ndim, t->shape, &t->numel, &want);
        if (e == -1) VF_FAIL(st, VF_ECORRUPT, "%s: tensor \"%s\": shape overflows", f->label, t->name);
        if (e == -2)
            VF_FAIL(st, VF_ECORRUPT, "%s: tensor \"%s\": %s data does not end on a byte boundary",
                    f->label, t->name, vf_st_dtype_name(t->dtype));
        if (want != t->nbytes) {
            char sh[128] = "";
            if (t->ndim <= VF_MAX_DIMS) vf_shape_str(t->ndim, t->shape, sh, sizeof sh);
            VF_FAIL(st, VF_ECORRUPT,
                    "%s: tensor \"%s\": %s %s needs %llu bytes but data_offsets span %llu", f->label,
                    t->name, vf_st_dtype_name(t->dtype), sh, (unsigned long long)want,
                    (unsigned long long)t->nbytes);
        }
    }
    if (8 + f->n + start != (uint64_t)f->len)
        VF_FAIL(st, VF_ECORRUPT,
                "%s: file is %zu bytes but the header describes %llu (8 + %llu header + %llu data)",
                f->label, f->len, (unsigned long long)(8 + f->n + start), (unsigned long long)f->n,
                (unsigned long long)start);
    f->by_name = malloc(sizeof(int) * (size_t)(f->nt ? f->nt : 1));
    if (!f->by_name) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", f->label);
    for (int i = 0; i < f->nt; i++) {
        f->by_name[i] = i;
        f->t[i].data = f->base + 8 + f->n + f->t[i].offset;
    }
    sort_ctx = f;
    if (f->nt > 1) qsort(f->by_name, (size_t)f->nt, sizeof(int), cmp_name_idx);
    for (int i = 1; i < f->nt; i++)
        if (!strcmp(f->t[f->by_name[i]].name, f->t[f->by_name[i - 1]].name))
            VF_FAIL(st, VF_ECORRUPT, "%s: tensor name \"%s\" appears twice in the header", f->label,
                    f->t[f->by_name[i]].name);
fail:
    return rc;
}

/* Valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF), as Rust's from_utf8. */
static bool utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        int k;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return false;
        if (n - i <= (size_t)k) return false;
        for (int m = 1; m <= k; m++) {
            if ((s[i + m] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + m] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        i += (size_t)k + 1;
    }
    return true;
}

static int open_common(vf_st_file *f, vf_status *st)
{
    int rc = 0;
    if (f->len < 8) VF_FAIL(st, VF_ECORRUPT, "%s: %zu bytes is too small for a safetensors file",
                            f->label, f->len);
    uint64_t n;
    memcpy(&n, f->base, 8);
    if (n > ST_MAX_HEADER)
        VF_FAIL(st, VF_ECORRUPT, "%s: header length %llu is over the 100 MB limit", f->label,
                (unsigned long long)n);
    if (n > f->len - 8)
        VF_FAIL(st, VF_ECORRUPT, "%s: header length %llu runs past the end of the %zu-byte file",
                f->label, (unsigned long long)n, f->len);
    f->n = n;
    if (!utf8_ok(f->base + 8, (size_t)n))
        VF_FAIL(st, VF_ECORRUPT, "%s: header is not valid UTF-8", f->label);
    VF_TRY(parse_header(f, (const char *)f->base + 8, (size_t)n, st));
    VF_TRY(validate(f, st));
fail:
    return rc;
}

int vf_st_open_mem(const void *buf, size_t len, const char *label, vf_st_file **out,
                   vf_status *st)
{
    int rc = 0;
    *out = NULL;
    vf_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->label = strdup(label ? label : "(memory)")))
        VF_FAIL(st, VF_ENOMEM, "out of memory opening %s", label ? label : "(memory)");
    f->base = buf;
    f->len = len;
    VF_TRY(open_common(f, st));
    *out = f;
    return 0;
fail:
    vf_st_close(f);
    return rc;
}

int vf_st_open(const char *path, vf_st_file **out, vf_status *st)
{
    int rc = 0, fd = -1;
    *out = NULL;
    vf_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->label = strdup(path))) VF_FAIL(st, VF_ENOMEM, "out of memory opening %s", path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        VF_FAIL(st, errno == ENOENT ? VF_ENOTFOUND : VF_EIO, "%s: cannot open: %s", path,
                strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) VF_FAIL(st, VF_EIO, "%s: fstat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) VF_FAIL(st, VF_EIO, "%s: not a regular file", path);
    f->len = (size_t)sb.st_size;
    if (f->len > 0) {
        void *m = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) VF_FAIL(st, VF_EIO, "%s: mmap: %s", path, strerror(errno));
        f->base = m;
        f->mapped = true;
    }
    close(fd);
    fd = -1;
    VF_TRY(open_common(f, st));
    *out = f;
    return 0;
fail:
    if (fd >= 0) close(fd);
    vf_st_close(f);
    return rc;
}

void vf_st_close(vf_st_file *f)
{
    if (!f) return;
    if (f->mapped) munmap((void *)f->base, f->len);
    for (int i = 0; i < f->nt; i++) free((char *)f->t[i].name);
    for (int i = 0; i < f->nm; i++) {
        free(f->mkey[i]);
        free(f->mval[i]);
    }
    free(f->mkey);
    free(f->mval);
    free(f->t);
    free(f->by_name);
    free(f->shapes);
    free(f->label);
    free(f);
}

void vf_st_drop(const vf_st_file *f, const vf_st_tensor *t)
{
    if (!f->mapped || !t || t->nbytes == 0) return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)t->data + pg - 1) & ~(pg - 1);
    uintptr_t b = ((uintptr_t)t->data + (uintptr_t)t->nbytes) & ~(pg - 1);
    if (b > a) madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
}

int vf_st_count(const vf_st_file *f) { return f->nt; }
const vf_st_tensor *vf_st_at(const vf_st_file *f, int i) { return i >= 0 && i < f->nt ? &f->t[i] : NULL; }
int vf_st_meta_count(const vf_st_file *f) { return f->nm; }
uint64_t vf_st_header_len(const vf_st_file *f) { return f->n; }

void vf_st_meta_at(const vf_st_file *f, int i, const char **key, const char **val)
{
    *key = f->mkey[i];
    *val = f->mval[i];
}

const char *vf_st_meta_get(const vf_st_file *f, const char *key)
{
    for (int i = 0; i < f->nm; i++)
        if (!strcmp(f->mkey[i], key)) return f->mval[i];
    return NULL;
}

const vf_st_tensor *vf_st_find(const vf_st_file *f, const char *name)
{
    int lo = 0, hi = f->nt - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) return &f->t[f->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

static int find_or_fail(const vf_st_file *f, const char *name, const vf_st_tensor **out,
                        vf_status *st)
{
    int rc = 0;
    *out = vf_st_find(f, name);
    if (!*out) VF_FAIL(st, VF_ENOTFOUND, "%s: no tensor \"%s\"", f->label, name);
fail:
    return rc;
}

int vf_st_expect(const vf_st_file *f, const char *name, int ndim, const int64_t *shape,
                 const vf_st_tensor **out, vf_status *st)
{
    int rc = 0;
    VF_TRY(find_or_fail(f, name, out, st));
    bool same = (*out)->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = (*out)->shape[i] == shape[i];
    if (!same) {
        char a[128] = "(…)", b[128];
        if ((*out)->ndim <= VF_MAX_DIMS) vf_shape_str((*out)->ndim, (*out)->shape, a, sizeof a);
        vf_shape_str(ndim, shape, b, sizeof b);
        VF_FAIL(st, VF_EINVAL, "%s: tensor \"%s\" has shape %s, expected %s", f->label, name, a, b);
    }
fail:
    return rc;
}

int vf_st_read_f32(const vf_st_file *f, const char *name, float *dst, int64_t numel,
                   vf_status *st)
{
    int rc = 0;
    const vf_st_tensor *t;
    VF_TRY(find_or_fail(f, name, &t, st));
    if (t->numel != numel)
        VF_FAIL(st, VF_EINVAL, "%s: tensor \"%s\" has %lld elements, expected %lld", f->label, name,
                (long long)t->numel, (long long)numel);
    const uint8_t *s = t->data;
    switch (t->dtype) {
    case VF_ST_F32: memcpy(dst, s, (size_t)numel * 4); break;
    case VF_ST_F64:
        for (int64_t i = 0; i < numel; i++) {
            double d;
            memcpy(&d, s + 8 * i, 8);
            dst[i] = (float)d;
        }
        break;
    case VF_ST_BF16:
    case VF_ST_F16:
        for (int64_t i = 0; i < numel; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = t->dtype == VF_ST_BF16 ? vf_bf16_to_f32(h) : vf_f16_to_f32(h);
        }
        break;
    default:
        VF_FAIL(st, VF_EINVAL, "%s: tensor \"%s\" is %s; expected a float dtype (F32 F64 BF16 F16)",
                f->label, name, vf_st_dtype_name(t->dtype));
    }
fail:
    return rc;
}

int vf_st_read_tensor(const vf_st_file *f, const char *name, vf_tensor **out, vf_status *st)
{
    int rc = 0;
    const vf_st_tensor *t;
    vf_dtype dt;
    *out = NULL;
    VF_TRY(find_or_fail(f, name, &t, st));
    if (vf_st_dtype_to_vf(t->dtype, &dt) != 0)
        VF_FAIL(st, VF_EINVAL, "%s: tensor \"%s\": dtype %s has no runtime tensor type", f->label,
                name, vf_st_dtype_name(t->dtype));
    if (t->ndim > VF_MAX_DIMS)
        VF_FAIL(st, VF_EINVAL, "%s: tensor \"%s\" has %d dims (at most %d)", f->label, name, t->ndim,
                VF_MAX_DIMS);
    *out = vf_tensor_new(dt, t->ndim, t->shape, st);
    if (!*out) {
        vf_status_prefix(st, "%s: tensor \"%s\"", f->label, name);
        return st ? st->code : VF_ENOMEM;
    }
    if (t->nbytes) memcpy((*out)->data, t->data, (size_t)t->nbytes);
fail:
    return rc;
}

/* The writer lives in safetensors_write.c. */
