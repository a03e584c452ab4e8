/* synthetic.c — stage kind `synthetic`: a tensor source for tests and benchmarks.
 *
 * Emits `count` items (-1: until the run drains), each with one tensor `tensor` of the
 * given shape and dtype whose content is a pure function of (seed, item index, element
 * index) — a counter-based hash, so any item can be regenerated anywhere and two runs
 * with the same seed send the same bytes. Floating dtypes get finite values in (-1, 1);
 * u8/i32 get raw hash bits. Item id: the index in decimal; metadata "index".
 *
 * At the end it reports the stream checksum of what it sent (the same digest null_sink
 * computes over what it received, so loss or reordering on any transport shows up as a
 * mismatch): an event row {"event":"synthetic_done","count","checksum"} and a log line.
 * The digest of one item is CRC32C over its id bytes then each tensor's raw bytes in
 * order; the stream digest is h = (h XOR item_crc) * 0x100000001b3 (mod 2^64), h0 =
 * 0xcbf29ce484222325: order-sensitive.
 *
 * `rate` (items/s) paces the source; 0 sends as fast as credits allow. Tensor buffers
 * come from a small pool (a freed item's buffer is reused), not one malloc per item.
 */
#include "runtime/vflow.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const vf_param_spec synthetic_params[] = {
    {"shape", VF_P_LIST_INT, "[1024]", VF_RANGE(1, 1 << 30), "tensor shape (each dim >= 1)", NULL, NULL},
    {"dtype", VF_P_STR, "\"f32\"", VF_ANY, "tensor dtype", "u8|i32|f32|bf16|f16", NULL},
    {"count", VF_P_INT, "100", VF_RANGE(-1, 1e15), "items to emit; -1 = until the run drains", NULL, NULL},
    {"seed", VF_P_INT, "0", VF_RANGE(0, 9.007199254740991e15), "content seed", NULL, NULL},
    {"rate", VF_P_NUM, "0", VF_RANGE(0, 1e9), "items per second; 0 = as fast as possible", NULL, NULL},
    {"tensor", VF_P_STR, "\"x\"", VF_ANY, "name of the tensor in each item", NULL, NULL},
    {0},
};

#define META_BYTES 256 /* id (<= 20 digits) + "index" */
#define POOL_KEEP 16   /* free buffers kept for reuse */

/* ------------------------------------------------------------------ content */

static inline uint64_t mix64(uint64_t x)
{
    /* splitmix64 finaliser: a bijection with full avalanche */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static void fill(void *data, size_t nbytes, vf_dtype dt, uint64_t seed, uint64_t index)
{
    uint64_t key = mix64(mix64(seed + 0x9e3779b97f4a7c15ull) ^ (index * 0xd1b54a32d192ed03ull));
    size_t words = nbytes / 8;
    uint64_t *w = data;
    for (size_t j = 0; j < words; j++) {
        uint64_t h = mix64(key + j * 0x9e3779b97f4a7c15ull);
        switch (dt) {
        case VF_DTYPE_F32: {
            /* two floats: 23 random bits each -> [1,2) -> subtract 1.5 -> [-0.5,0.5) x2 */
            uint32_t a = 0x3f800000u | (uint32_t)(h & 0x7fffff);
            uint32_t b = 0x3f800000u | (uint32_t)((h >> 32) & 0x7fffff);
            float fa, fb;
            memcpy(&fa, &a, 4);
            memcpy(&fb, &b, 4);
            fa = (fa - 1.5f) * 2.0f;
            fb = (fb - 1.5f) * 2.0f;
            memcpy(&a, &fa, 4);
            memcpy(&b, &fb, 4);
            h = (uint64_t)a | ((uint64_t)b << 32);
            break;
        }
        case VF_DTYPE_BF16:
        case VF_DTYPE_F16: {
            /* four halves: random sign and mantissa, exponent giving |v| in [2^-8, 1) */
            uint64_t out = 0;
            for (int k = 0; k < 4; k++) {
                uint32_t r = (uint32_t)(h >> (16 * k)) & 0xffff;
                uint32_t sign = (r >> 15) & 1, e = (r >> 12) & 7;
                uint32_t v = dt == VF_DTYPE_BF16 ? (sign << 15) | ((119 + e) << 7) | (r & 0x7f)
                                                 : (sign << 15) | ((7 + e) << 10) | (r & 0x3ff);
                out |= (uint64_t)v << (16 * k);
            }
            h = out;
            break;
        }
        default: break; /* u8, i32: raw bits */
        }
        memcpy(&w[j], &h, 8);
    }
    size_t tail = nbytes - words * 8;
    if (tail) {
        /* element sizes divide 8, so a tail holds whole elements; raw bits are finite
         * only for integer dtypes, so floats get zeros there */
        uint64_t h = dt == VF_DTYPE_U8 || dt == VF_DTYPE_I32 ? mix64(key + words * 0x9e3779b97f4a7c15ull) : 0;
        memcpy((char *)data + words * 8, &h, tail);
    }
}

/* ------------------------------------------------------------------ buffer pool */

/* Buffers outlive the stage when a consumer in this process still holds an item, so the
 * pool is reference counted: one reference per buffer out plus one for the stage. */
typedef struct pool {
    pthread_mutex_t mu;
    size_t bytes;
    int refs, nfree;
    void *free[POOL_KEEP];
} pool;

static void pool_unref_locked(pool *p)
{
    if (--p->refs > 0) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    for (int i = 0; i < p->nfree; i++) vf_free(p->free[i]);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void pool_release(void *data, void *hint)
{
    pool *p = hint;
    pthread_mutex_lock(&p->mu);
    if (p->nfree < POOL_KEEP && p->refs > 1)
        p->free[p->nfree++] = data;
    else
        vf_free(data);
    pool_unref_locked(p);
}

static void *pool_get(pool *p, vf_status *st)
{
    pthread_mutex_lock(&p->mu);
    void *b = p->nfree ? p->free[--p->nfree] : NULL;
    p->refs++;
    pthread_mutex_unlock(&p->mu);
    if (!b) b = vf_alloc(p->bytes ? p->bytes : 1, st);
    if (!b) {
        pthread_mutex_lock(&p->mu);
        pool_unref_locked(p);
    }
    return b;
}

/* ------------------------------------------------------------------ stage */

typedef struct synth {
    vf_dtype dtype;
    int ndim;
    int64_t shape[VF_MAX_DIMS];
    size_t nbytes;
    pool *pool;
} synth;

static int parse_spec(const vf_params *p, vf_dtype *dt, int *ndim, int64_t *shape, vf_status *st)
{
    if (vf_dtype_parse(vf_param_str(p, "dtype"), dt) < 0)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "synthetic: bad dtype \"%s\"",
                             vf_param_str(p, "dtype"));
    *ndim = vf_param_len(p, "shape");
    if (*ndim < 1 || *ndim > VF_MAX_DIMS)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "synthetic: shape needs 1 to %d dims, got %d", VF_MAX_DIMS, *ndim);
    for (int i = 0; i < *ndim; i++) shape[i] = vf_param_int_at(p, "shape", i);
    return 0;
}

static int synthetic_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out,
                           vf_status *st)
{
    vf_dtype dt;
    int ndim;
    int64_t shape[VF_MAX_DIMS];
    int rc = parse_spec(p, &dt, &ndim, shape, st);
    if (rc < 0) return rc;
    vf_port_spec *o = vf_port_add(out, "out", VF_PORT_OUT, false);
    vf_port_tensor(o, vf_param_str(p, "tensor"), dt, ndim, shape, NULL);
    o->meta_bytes = META_BYTES;
    return 0;
}

static int synthetic_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out,
                            vf_status *st)
{
    const vf_port_spec *o = vf_port_find(ports, "out");
    int64_t item = o ? vf_port_max_item_bytes(o) : 0;
    /* the one item being built: the pool allocates a buffer only when none of the sent
     * ones has come back, so its buffers never outnumber the items alive at once — the
     * one in hand plus those on the edge and held by the consumer, which the plan counts
     * (edge buffers, the consumer's "input" entries) */
    vf_mem_plan_add(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_ITEMS, "item being built", item);
    return 0;
}

static int synthetic_init(vf_stage *s, const vf_params *p, vf_status *st)
{
    int rc = 0;
    synth *y = calloc(1, sizeof *y);
    if (!y) VF_FAIL(st, VF_ENOMEM, "synthetic %s: out of memory", vf_stage_name(s));
    vf_stage_set_state(s, y);
    VF_TRY(parse_spec(p, &y->dtype, &y->ndim, y->shape, st));
    y->nbytes = vf_dtype_size(y->dtype);
    for (int i = 0; i < y->ndim; i++) y->nbytes *= (size_t)y->shape[i];
    y->pool = calloc(1, sizeof *y->pool);
    if (!y->pool) VF_FAIL(st, VF_ENOMEM, "synthetic %s: out of memory", vf_stage_name(s));
    pthread_mutex_init(&y->pool->mu, NULL);
    y->pool->bytes = y->nbytes;
    y->pool->refs = 1;
fail:
    return rc;
}

static void pace(vf_ctx *ctx, double rate, int64_t t0_ns, int64_t i)
{
    if (rate <= 0) return;
    int64_t due = t0_ns + (int64_t)((double)i / rate * 1e9);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        if (now >= due || vf_stopping(ctx)) return;
        int64_t wait = due - now;
        if (wait > 100000000) wait = 100000000; /* look at the stop flag every 100 ms */
        struct timespec d = {(time_t)(wait / 1000000000), (long)(wait % 1000000000)};
        nanosleep(&d, NULL);
    }
}

static int synthetic_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    int rc = 0;
    synth *y = vf_stage_state(s);
    const vf_params *p = vf_stage_params(s);
    vf_port *out = vf_out(ctx, "out");
    int64_t count = vf_param_int(p, "count");
    uint64_t seed = (uint64_t)vf_param_int(p, "seed");
    double rate = vf_param_num(p, "rate");
    const char *tname = vf_param_str(p, "tensor");
    uint64_t digest = 0xcbf29ce484222325ull;
    int64_t sent = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t t0 = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;

    for (int64_t i = 0; count < 0 || i < count; i++) {
        pace(ctx, rate, t0, i);
        /* drain: stop producing; returning closes the output (end of stream) */
        if (vf_stopping(ctx)) break;
        char id[24];
        snprintf(id, sizeof id, "%lld", (long long)i);
        void *buf = pool_get(y->pool, st);
        if (!buf) VF_FAIL(st, VF_ENOMEM, "synthetic %s: item %lld: out of memory", vf_stage_name(s), (long long)i);
        fill(buf, y->nbytes, y->dtype, seed, (uint64_t)i);
        vf_tensor *t = vf_tensor_wrap(y->dtype, y->ndim, y->shape, (vf_device){VF_DEV_CPU, 0}, buf,
                                      pool_release, y->pool, st);
        if (!t) {
            pool_release(buf, y->pool);
            rc = st->code ? st->code : VF_ENOMEM;
            goto fail;
        }
        vf_item *it = vf_item_new(id, st);
        if (!it) {
            vf_tensor_unref(t);
            rc = st->code ? st->code : VF_ENOMEM;
            goto fail;
        }
        uint32_t c = vf_crc32c(0, id, strlen(id));
        c = vf_crc32c(c, buf, y->nbytes);
        if ((rc = vf_item_put(it, tname, t, st)) < 0 ||
            (rc = vf_item_set_num(it, "index", (double)i, st)) < 0) {
            vf_item_free(it);
            goto fail;
        }
        rc = out ? vf_send(out, it, st) : (vf_item_free(it), 0);
        if (rc == VF_EOS) break; /* every consumer closed its input: nobody wants more */
        if (rc < 0) goto fail;
        digest = (digest ^ c) * 0x100000001b3ull;
        sent++;
    }
    rc = 0;
    char row[160];
    snprintf(row, sizeof row, "{\"event\":\"synthetic_done\",\"count\":%lld,\"checksum\":\"%016llx\"}",
             (long long)sent, (unsigned long long)digest);
    vf_metric_row(ctx, row);
    vf_log(ctx, VF_LOG_INFO, "sent %lld items of %zu bytes, checksum %016llx", (long long)sent, y->nbytes,
           (unsigned long long)digest);
fail:
    return rc;
}

static void synthetic_fini(vf_stage *s)
{
    synth *y = vf_stage_state(s);
    if (!y) return;
    if (y->pool) {
        pthread_mutex_lock(&y->pool->mu);
        pool_unref_locked(y->pool);
    }
    free(y);
    vf_stage_set_state(s, NULL);
}

static const vf_stage_ops synthetic_ops = {
    .api_version = VF_API_VERSION,
    .kind = "synthetic",
    .doc = "deterministic tensor source (shape, dtype, count, seed, rate) for tests and benchmarks",
    .params = synthetic_params,
    .flags = VF_STAGE_SOURCE,
    .ports = synthetic_ports,
    .memory = synthetic_memory,
    .init = synthetic_init,
    .run = synthetic_run,
    .fini = synthetic_fini,
};
VF_REGISTER_STAGE(synthetic_ops)
