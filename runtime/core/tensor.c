/* tensor.c — dtypes, devices, reference-counted tensors, bf16/f16 conversion.
 *
 * A tensor and its storage are one allocation; the storage's refcount is the tensor's
 * (vf_tensor_ref hands out the same pointer), so sharing a tensor between items of a
 * fan-out costs one atomic increment. Storage is either owned (vf_alloc'd, charged to
 * the creating thread's account) or external with a release callback (a ZeroMQ message,
 * a pool buffer, an mmap), which runs exactly once when the last reference drops.
 */
#include "runtime/vflow.h"
#include "runtime/core/shared.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vf_storage {
    _Atomic int refs;
    bool owned;            /* data came from vf_alloc */
    bool view;             /* data is lent memory (vf_tensor_view, or a received view) */
    vf_release_fn release; /* external data: called once at the last unref */
    void *hint;
};

typedef struct tensor_block {
    vf_tensor t;
    struct vf_storage s;
} tensor_block;

static const struct {
    const char *name;
    size_t size;
} g_dtypes[VF_DTYPE_COUNT] = {
    [VF_DTYPE_U8] = {"u8", 1},   [VF_DTYPE_I32] = {"i32", 4}, [VF_DTYPE_F32] = {"f32", 4},
    [VF_DTYPE_BF16] = {"bf16", 2}, [VF_DTYPE_F16] = {"f16", 2},
};

size_t vf_dtype_size(vf_dtype dt) { return (unsigned)dt < VF_DTYPE_COUNT ? g_dtypes[dt].size : 0; }
const char *vf_dtype_name(vf_dtype dt) { return (unsigned)dt < VF_DTYPE_COUNT ? g_dtypes[dt].name : "?"; }

int vf_dtype_parse(const char *name, vf_dtype *out)
{
    for (int i = 0; i < VF_DTYPE_COUNT; i++) {
        if (name && strcmp(name, g_dtypes[i].name) == 0) {
            *out = (vf_dtype)i;
            return 0;
        }
    }
    return VF_EINVAL;
}

int vf_device_parse(const char *s, vf_device *out, vf_status *st)
{
    if (!s) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "device: missing (expected \"cpu\", \"cuda\" or \"cuda:N\")");
    if (strcmp(s, "cpu") == 0) {
        *out = (vf_device){VF_DEV_CPU, 0};
        return 0;
    }
    if (strcmp(s, "cuda") == 0) {
        *out = (vf_device){VF_DEV_CUDA, 0};
        return 0;
    }
    if (strncmp(s, "cuda:", 5) == 0) {
        const char *p = s + 5;
        int idx = 0, nd = 0;
        for (; *p >= '0' && *p <= '9' && nd < 4; p++, nd++) idx = idx * 10 + (*p - '0');
        if (nd > 0 && *p == '\0') {
            *out = (vf_device){VF_DEV_CUDA, idx};
            return 0;
        }
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "device \"%s\": the index after \"cuda:\" must be a number 0..9999", s);
    }
    return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                         "unknown device \"%s\" (expected \"cpu\", \"cuda\" or \"cuda:N\")", s);
}

void vf_device_str(vf_device d, char *buf, size_t n)
{
    if (d.kind == VF_DEV_CPU) snprintf(buf, n, "cpu");
    else snprintf(buf, n, "cuda:%d", d.index);
}

void vf_shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    if (!n) return;
    size_t o = 0;
    int w = snprintf(buf, n, "(");
    o = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < ndim && o < n; i++) {
        w = snprintf(buf + o, n - o, "%s%lld", i ? "," : "", (long long)shape[i]);
        if (w < 0) break;
        o += (size_t)w;
    }
    if (o < n) snprintf(buf + o, n - o, ")");
}

/* Checks dtype/ndim/dims and computes the byte size without overflow. */
static int check_shape(vf_dtype dt, int ndim, const int64_t *shape, size_t *nbytes, vf_status *st)
{
    if ((unsigned)dt >= VF_DTYPE_COUNT)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "tensor: unknown dtype %d", (int)dt);
    if (ndim < 0 || ndim > VF_MAX_DIMS)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "tensor: %d dims (at most %d)", ndim, VF_MAX_DIMS);
    uint64_t n = vf_dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "tensor: dim %d is negative (%lld)", i,
                                 (long long)shape[i]);
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n) || n > (uint64_t)INT64_MAX / 2) {
            char s[160];
            vf_shape_str(ndim, shape, s, sizeof s);
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "tensor: shape %s %s is too large", s,
                                 vf_dtype_name(dt));
        }
    }
    *nbytes = (size_t)n;
    return 0;
}

static vf_tensor *block_new(vf_dtype dt, int ndim, const int64_t *shape, vf_device dev, vf_status *st)
{
    tensor_block *b = calloc(1, sizeof *b);
    if (!b) {
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (tensor header)");
        return NULL;
    }
    b->t.dtype = dt;
    b->t.ndim = ndim;
    for (int i = 0; i < ndim; i++) b->t.shape[i] = shape[i];
    b->t.device = dev;
    b->t.storage = &b->s;
    atomic_init(&b->s.refs, 1);
    return &b->t;
}

vf_tensor *vf_tensor_new(vf_dtype dt, int ndim, const int64_t *shape, vf_status *st)
{
    size_t nb;
    if (check_shape(dt, ndim, shape, &nb, st) < 0) return NULL;
    vf_tensor *t = block_new(dt, ndim, shape, (vf_device){VF_DEV_CPU, 0}, st);
    if (!t) return NULL;
    t->data = vf_alloc(nb, st);
    if (!t->data) {
        free(t);
        return NULL;
    }
    t->storage->owned = true;
    return t;
}

vf_tensor *vf_tensor_zeros(vf_dtype dt, int ndim, const int64_t *shape, vf_status *st)
{
    vf_tensor *t = vf_tensor_new(dt, ndim, shape, st);
    if (t) memset(t->data, 0, vf_tensor_nbytes(t));
    return t;
}

vf_tensor *vf_tensor_wrap(vf_dtype dt, int ndim, const int64_t *shape, vf_device dev, void *data,
                          vf_release_fn release, void *hint, vf_status *st)
{
    size_t nb;
    if (check_shape(dt, ndim, shape, &nb, st) < 0) return NULL;
    vf_tensor *t = block_new(dt, ndim, shape, dev, st);
    if (!t) return NULL;
    t->data = data;
    t->storage->release = release;
    t->storage->hint = hint;
    return t;
}

vf_tensor *vf_tensor_view_wrap(vf_dtype dt, int ndim, const int64_t *shape, vf_device dev, void *data,
                               vf_release_fn release, void *hint, vf_status *st)
{
    vf_tensor *t = vf_tensor_wrap(dt, ndim, shape, dev, data, release, hint, st);
    if (t) t->storage->view = true;
    return t;
}

vf_tensor *vf_tensor_view(vf_dtype dt, int ndim, const int64_t *shape, vf_device dev, void *data,
                          vf_status *st)
{
    return vf_tensor_view_wrap(dt, ndim, shape, dev, data, NULL, NULL, st);
}

bool vf_tensor_is_view(const vf_tensor *t) { return t && t->storage->view; }

vf_tensor *vf_tensor_ref(vf_tensor *t)
{
    if (t) atomic_fetch_add_explicit(&t->storage->refs, 1, memory_order_relaxed);
    return t;
}

void vf_tensor_unref(vf_tensor *t)
{
    if (!t) return;
    struct vf_storage *s = t->storage;
    int prev = atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel);
    VF_ASSERT(prev > 0);
    if (prev != 1) return;
    if (s->owned) vf_free(t->data);
    else if (s->release) s->release(t->data, s->hint);
    free(t); /* the block starts with the tensor */
}

int64_t vf_tensor_numel(const vf_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t vf_tensor_nbytes(const vf_tensor *t) { return (size_t)vf_tensor_numel(t) * vf_dtype_size(t->dtype); }

/* ------------------------------------------------------------------ bf16 / f16 */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t vf_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);                                          /* nearest even */
    return (uint16_t)(x >> 16);
}

float vf_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t vf_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) return sign | (ax > 0x7f800000 ? 0x7e00 : 0x7c00);
    if (ax >= 0x477ff000) return sign | 0x7c00; /* >= 65520 rounds to infinity */
    if (ax < 0x38800000) {                      /* below 2^-14: half subnormal or zero */
        int exp = (int)(ax >> 23);
        if (exp < 102) return sign; /* < 2^-25: rounds to zero */
        uint32_t mant = (ax & 0x7fffff) | 0x800000;
        int shift = 126 - exp; /* 14..24 */
        uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t h = (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ff);
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

float vf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        float v = (float)mant * 5.9604644775390625e-8f; /* 2^-24, exact */
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000 | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}
