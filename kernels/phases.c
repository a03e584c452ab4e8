/* phases.c — the per-phase op timer (phases.h): a second op table whose entries bracket
 * each op of the wrapped backend with two marks and forward the call.
 *
 * Marks 2k and 2k+1 bracket the k-th op timed in a round; phase[k] is its phase. The
 * marks are CUDA events on the wrapped backend's stream (kernels/cuda/phases_cuda.c) or,
 * on the CPU backend, host clock readings. Reading a round turns the marks into times
 * after mark 0 and sums each bracket into its phase.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/phases.h"

struct vf_phases {
    vf_backend be;       /* first member: every wrapped op gets this as its `be` */
    vf_backend *inner;   /* borrowed */
    bool on;
    bool cuda;           /* marks are events on inner's stream */
    vf_cuda_marks *marks;
    bool unit_eager;     /* the recorded unit in progress runs op by op (timing was on) */
    int rc;              /* first mark failure of this round (reported by read) */
    vf_status err;
    int nops, cap;       /* ops timed this round; capacity of phase / host */
    uint8_t *phase;      /* (cap) */
    double *host;        /* (2·cap) host mark times, ms (CPU backend) */
};

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static void fail_round(vf_phases *p, int rc, const vf_status *st)
{
    if (!p->rc) {
        p->rc = rc;
        p->err = *st;
    }
    p->on = false; /* the round is lost: stop adding marks */
}

static int record(vf_phases *p, int i)
{
    if (!p->cuda) {
        p->host[i] = now_ms();
        return 0;
    }
    vf_status st = {0};
    int rc = p->marks ? 0 : vf_cuda_marks_new(p->inner, &p->marks, &st);
    if (!rc) rc = vf_cuda_marks_record(p->marks, i, &st);
    if (rc) fail_round(p, rc, &st);
    return rc;
}

/* Starts op k of the round in phase ph: its index, or -1 when it is not timed. */
static int mark_begin(vf_phases *p, vf_phase ph)
{
    if (p->nops == p->cap) {
        int cap = p->cap ? 2 * p->cap : 1024;
        uint8_t *phase = realloc(p->phase, (size_t)cap);
        if (phase) p->phase = phase;
        double *host = phase ? realloc(p->host, sizeof(double) * 2 * (size_t)cap) : NULL;
        if (host) p->host = host;
        if (!phase || !host) {
            vf_status st = {0};
            vf_status_set(&st, VF_ENOMEM, __FILE__, __LINE__, "phase timer: out of memory (%d ops)", cap);
            fail_round(p, VF_ENOMEM, &st);
            return -1;
        }
        p->cap = cap;
    }
    int k = p->nops;
    if (record(p, 2 * k)) return -1;
    p->phase[k] = (uint8_t)ph;
    p->nops++;
    return k;
}

static void mark_end(vf_phases *p, int k)
{
    if (record(p, 2 * k + 1)) p->nops = k; /* drop the half-bracketed op */
}

/* ------------------------------------------------------------------ the wrappers */

#define PH(be) ((vf_phases *)(be))
#define WRAP(name, ph, params, args)                          \
    static void w_##name params                               \
    {                                                         \
        vf_phases *p = PH(be);                                \
        int k_ = p->on ? mark_begin(p, ph) : -1;              \
        p->inner->name args;                                  \
        if (k_ >= 0) mark_end(p, k_);                         \
    }
#define WRAP_F64(name, ph, params, args)                      \
    static double w_##name params                             \
    {                                                         \
        vf_phases *p = PH(be);                                \
        int k_ = p->on ? mark_begin(p, ph) : -1;              \
        double r_ = p->inner->name args;                      \
        if (k_ >= 0) mark_end(p, k_);                         \
        return r_;                                            \
    }
#define IN p->inner
typedef const void cv;

WRAP(memset0, VF_PHASE_MEMSET, (vf_backend *be, void *d, size_t n), (IN, d, n))
WRAP(upload, VF_PHASE_TRANSFER, (vf_backend *be, void *d, const float *s, int64_t n, vf_dtype t), (IN, d, s, n, t))
WRAP(download, VF_PHASE_TRANSFER, (vf_backend *be, float *d, cv *s, int64_t n, vf_dtype t), (IN, d, s, n, t))
WRAP(copy, VF_PHASE_TRANSFER, (vf_backend *be, void *d, cv *s, size_t n), (IN, d, s, n))
WRAP(copy2d, VF_PHASE_TRANSFER, (vf_backend *be, void *d, size_t dp, cv *s, size_t sp, size_t w, size_t r),
     (IN, d, dp, s, sp, w, r))
WRAP(matmul_fwd, VF_PHASE_GEMM,
     (vf_backend *be, void *o, cv *x, cv *w, cv *b, int64_t N, int64_t C, int64_t OC), (IN, o, x, w, b, N, C, OC))
WRAP(matmul_bwd, VF_PHASE_GEMM,
     (vf_backend *be, void *dx, void *dw, void *db, cv *dy, cv *x, cv *w, int64_t N, int64_t C, int64_t OC,
      vf_grad_mode m),
     (IN, dx, dw, db, dy, x, w, N, C, OC, m))
WRAP(matmul_gelu_fwd, VF_PHASE_GEMM,
     (vf_backend *be, void *o, void *pre, cv *x, cv *w, cv *b, int64_t N, int64_t C, int64_t OC),
     (IN, o, pre, x, w, b, N, C, OC))
WRAP(matmul_dgelu_bwd, VF_PHASE_GEMM,
     (vf_backend *be, void *dpre, void *dbp, void *dw, void *db, cv *dy, cv *x, cv *w, cv *pre, int64_t N,
      int64_t C, int64_t OC),
     (IN, dpre, dbp, dw, db, dy, x, w, pre, N, C, OC))
WRAP(matmul_batch_fwd, VF_PHASE_GEMM,
     (vf_backend *be, void *o, cv *x, cv *w, cv *b, int64_t N, int64_t C, int64_t OC, int nb, int64_t ws,
      int64_t os),
     (IN, o, x, w, b, N, C, OC, nb, ws, os))
WRAP(matmul_batch_bwd, VF_PHASE_GEMM,
     (vf_backend *be, void *dx, void *dw, void *db, cv *dy, cv *x, cv *w, int64_t N, int64_t C, int64_t OC,
      int nb, int64_t ws, int64_t os, vf_grad_mode m),
     (IN, dx, dw, db, dy, x, w, N, C, OC, nb, ws, os, m))
WRAP(matmul_fp8_fwd, VF_PHASE_GEMM,
     (vf_backend *be, void *o, cv *x, const uint8_t *w8, float sc, cv *b, void *wb, int64_t N, int64_t C,
      int64_t OC),
     (IN, o, x, w8, sc, b, wb, N, C, OC))
WRAP(matmul_fp8_bwd, VF_PHASE_GEMM,
     (vf_backend *be, void *dx, cv *dy, const uint8_t *w8, float sc, void *wb, int64_t N, int64_t C, int64_t OC,
      vf_grad_mode m),
     (IN, dx, dy, w8, sc, wb, N, C, OC, m))
WRAP(add, VF_PHASE_ELEMENTWISE, (vf_backend *be, void *o, cv *a, cv *b, int64_t n), (IN, o, a, b, n))
WRAP(axpy, VF_PHASE_ELEMENTWISE, (vf_backend *be, void *y, cv *x, float al, int64_t n), (IN, y, x, al, n))
WRAP(gelu_fwd, VF_PHASE_ELEMENTWISE, (vf_backend *be, void *o, cv *x, int64_t n), (IN, o, x, n))
WRAP(gelu_bwd, VF_PHASE_ELEMENTWISE, (vf_backend *be, void *dx, cv *dy, cv *x, int64_t n), (IN, dx, dy, x, n))
WRAP(gelu_erf_fwd, VF_PHASE_ELEMENTWISE, (vf_backend *be, void *o, cv *x, int64_t n), (IN, o, x, n))
WRAP(gelu_erf_bwd, VF_PHASE_ELEMENTWISE, (vf_backend *be, void *dx, cv *dy, cv *x, int64_t n), (IN, dx, dy, x, n))
WRAP(silu_fwd, VF_PHASE_ELEMENTWISE, (vf_backend *be, void *o, cv *x, int64_t n), (IN, o, x, n))
WRAP(silu_bwd, VF_PHASE_ELEMENTWISE, (vf_backend *be, void *dx, cv *dy, cv *x, int64_t n, vf_grad_mode m),
     (IN, dx, dy, x, n, m))
WRAP(layernorm_fwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, float *mu, float *rs, cv *x, cv *w, cv *b, int64_t N, int64_t C, float eps),
     (IN, o, mu, rs, x, w, b, N, C, eps))
WRAP(layernorm_bwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *dx, void *dw, void *db, cv *dy, cv *x, cv *w, const float *mu, const float *rs,
      int64_t N, int64_t C),
     (IN, dx, dw, db, dy, x, w, mu, rs, N, C))
WRAP(rmsnorm_fwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, float *rs, cv *x, cv *w, int64_t N, int64_t C, float eps), (IN, o, rs, x, w, N, C, eps))
WRAP(rmsnorm_bwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *dx, void *dw, cv *dy, cv *x, cv *w, const float *rs, int64_t N, int64_t C),
     (IN, dx, dw, dy, x, w, rs, N, C))
WRAP(rmsnorm_ch_fwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, cv *x, cv *w, int64_t B, int64_t C, int64_t S, float eps), (IN, o, x, w, B, C, S, eps))
WRAP(modulate_fwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, cv *x, cv *sh, cv *sc, int64_t B, int64_t L, int64_t C), (IN, o, x, sh, sc, B, L, C))
WRAP(modulate_bwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *dx, void *dsh, void *dsc, cv *dy, cv *x, cv *sc, int64_t B, int64_t L, int64_t C),
     (IN, dx, dsh, dsc, dy, x, sc, B, L, C))
WRAP(ln_modulate_fwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, float *mu, float *rs, cv *x, cv *sh, cv *sc, int64_t B, int64_t L, int64_t C,
      float eps),
     (IN, o, mu, rs, x, sh, sc, B, L, C, eps))
WRAP(ln_modulate_bwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *dx, void *dsh, void *dsc, cv *dy, cv *x, const float *mu, const float *rs, cv *sc,
      int64_t B, int64_t L, int64_t C, float eps, vf_grad_mode m),
     (IN, dx, dsh, dsc, dy, x, mu, rs, sc, B, L, C, eps, m))
WRAP(gated_add_fwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, cv *x, cv *g, cv *y, int64_t B, int64_t L, int64_t C), (IN, o, x, g, y, B, L, C))
WRAP(gated_add_bwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *dx, void *dg, void *dy, cv *dout, cv *g, cv *y, int64_t B, int64_t L, int64_t C),
     (IN, dx, dg, dy, dout, g, y, B, L, C))
WRAP(rope_fwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, cv *x, const float *c, const float *s, int64_t B, int64_t L, int64_t H, int64_t D),
     (IN, o, x, c, s, B, L, H, D))
WRAP(rope_bwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *dx, cv *dy, const float *c, const float *s, int64_t B, int64_t L, int64_t H, int64_t D),
     (IN, dx, dy, c, s, B, L, H, D))
WRAP(rmsnorm_rope_fwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, float *rs, cv *x, cv *w, const float *c, const float *s, int64_t B, int64_t L,
      int64_t H, int64_t D, float eps),
     (IN, o, rs, x, w, c, s, B, L, H, D, eps))
WRAP(rmsnorm_rope_bwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *dx, void *dw, cv *dy, cv *x, cv *w, const float *rs, const float *c, const float *s,
      int64_t B, int64_t L, int64_t H, int64_t D),
     (IN, dx, dw, dy, x, w, rs, c, s, B, L, H, D))
WRAP(attention_fwd, VF_PHASE_ATTENTION,
     (vf_backend *be, void *o, float *lse, cv *q, cv *k, cv *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
      int64_t D, float sc),
     (IN, o, lse, q, k, v, B, Lq, Lk, H, D, sc))
WRAP(attention_bwd, VF_PHASE_ATTENTION,
     (vf_backend *be, void *dq, void *dk, void *dv, cv *dy, cv *q, cv *k, cv *v, cv *o, const float *lse, int64_t B,
      int64_t Lq, int64_t Lk, int64_t H, int64_t D, float sc),
     (IN, dq, dk, dv, dy, q, k, v, o, lse, B, Lq, Lk, H, D, sc))
WRAP(permute, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, cv *x, int nd, const int64_t *shape, const int *perm), (IN, o, x, nd, shape, perm))
WRAP(conv3d_fwd, VF_PHASE_CONV,
     (vf_backend *be, void *o, cv *x, cv *w, cv *b, int64_t B, int64_t C, int64_t T, int64_t H, int64_t W,
      int64_t OC, int KT, int KH, int KW, int st, int sh, int sw, int pt0, int pt1, int ph0, int ph1, int pw0,
      int pw1),
     (IN, o, x, w, b, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1))
WRAP(conv3d_bwd, VF_PHASE_CONV,
     (vf_backend *be, void *dx, void *dw, void *db, cv *dy, cv *x, cv *w, int64_t B, int64_t C, int64_t T,
      int64_t H, int64_t W, int64_t OC, int KT, int KH, int KW, int st, int sh, int sw, int pt0, int pt1, int ph0,
      int ph1, int pw0, int pw1),
     (IN, dx, dw, db, dy, x, w, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1))
WRAP(embed_fwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *o, const int32_t *tok, cv *tab, int64_t N, int64_t C), (IN, o, tok, tab, N, C))
WRAP(embed_bwd, VF_PHASE_ELEMENTWISE,
     (vf_backend *be, void *dtab, cv *dy, const int32_t *tok, int64_t N, int64_t C), (IN, dtab, dy, tok, N, C))
WRAP_F64(mse_fwd_bwd, VF_PHASE_ELEMENTWISE,
         (vf_backend *be, void *dp, cv *pr, cv *tg, int64_t n, int64_t cnt, float gs), (IN, dp, pr, tg, n, cnt, gs))
WRAP(adamw, VF_PHASE_OPTIMIZER,
     (vf_backend *be, float *ms, float *m, float *v, cv *g, void *wo, int64_t n, float lr, float b1, float b2,
      float eps, float wd, float gs, int64_t t),
     (IN, ms, m, v, g, wo, n, lr, b1, b2, eps, wd, gs, t))
WRAP_F64(sumsq, VF_PHASE_OPTIMIZER, (vf_backend *be, cv *g, int64_t n), (IN, g, n))

/* Recorded units: while timing is on a unit runs op by op, each op between its marks (the
 * events of a recorded unit would be graph nodes, which have no timestamps); off, the
 * calls go through to the backend, which may record and replay. */
static bool w_graph_begin(vf_backend *be, const uint64_t *key, int nkey)
{
    vf_phases *p = PH(be);
    p->unit_eager = p->on;
    return p->unit_eager || p->inner->graph_begin(p->inner, key, nkey);
}

static bool w_graph_end(vf_backend *be)
{
    vf_phases *p = PH(be);
    if (p->unit_eager) {
        p->unit_eager = false;
        return false;
    }
    return p->inner->graph_end(p->inner);
}

/* alloc, free and sync pass through untimed: they enqueue no device work of a phase */
static void *w_alloc(vf_backend *be, size_t bytes, vf_status *st) { return PH(be)->inner->alloc(PH(be)->inner, bytes, st); }
static void w_free(vf_backend *be, void *ptr) { PH(be)->inner->free(PH(be)->inner, ptr); }
static void *w_alloc_shared(vf_backend *be, size_t bytes, vf_status *st)
{
    return PH(be)->inner->alloc_shared(PH(be)->inner, bytes, st);
}
static void w_free_shared(vf_backend *be, void *ptr) { PH(be)->inner->free_shared(PH(be)->inner, ptr); }
static void *w_alloc_pinned(vf_backend *be, size_t bytes, vf_status *st)
{
    return PH(be)->inner->alloc_pinned(PH(be)->inner, bytes, st);
}
static void w_free_pinned(vf_backend *be, void *ptr) { PH(be)->inner->free_pinned(PH(be)->inner, ptr); }
static int w_sync(vf_backend *be, vf_status *st) { return PH(be)->inner->sync(PH(be)->inner, st); }
/* the block-swap copies run on their own stream, beside the phases of the compute stream:
 * passed through untimed (swap_stats measures them) */
static void *w_swap_new(vf_backend *be, int slots, vf_status *st) { return PH(be)->inner->swap_new(PH(be)->inner, slots, st); }
static void w_swap_free(vf_backend *be, void *q) { PH(be)->inner->swap_free(PH(be)->inner, q); }
static void w_swap_in(vf_backend *be, void *q, int slot, void *dst, const void *src, size_t bytes)
{
    PH(be)->inner->swap_in(PH(be)->inner, q, slot, dst, src, bytes);
}
static void w_swap_wait(vf_backend *be, void *q, int slot) { PH(be)->inner->swap_wait(PH(be)->inner, q, slot); }
static void w_swap_stats(vf_backend *be, void *q, double *copy_s, double *wait_s)
{
    PH(be)->inner->swap_stats(PH(be)->inner, q, copy_s, wait_s);
}

/* the all-to-all is transfer time (what a rank waits for its peers is part of it) */
static void *w_a2a_open(vf_backend *be, vf_a2a *boot, int n, int rank, size_t chunk_max, vf_status *st)
{
    return PH(be)->inner->a2a_open(PH(be)->inner, boot, n, rank, chunk_max, st);
}
static int w_a2a_run(vf_backend *be, void *g, const void *send, void *recv, size_t chunk, vf_status *st)
{
    vf_phases *p = PH(be);
    int k = p->on ? mark_begin(p, VF_PHASE_TRANSFER) : -1;
    int rc = p->inner->a2a_run(p->inner, g, send, recv, chunk, st);
    if (k >= 0) mark_end(p, k);
    return rc;
}
static void w_a2a_close(vf_backend *be, void *g) { PH(be)->inner->a2a_close(PH(be)->inner, g); }

const char *vf_phase_name(vf_phase ph)
{
    static const char *const names[VF_PHASE_N] = {"attention", "gemm",     "conv",  "elementwise",
                                                  "optimizer", "transfer", "memset"};
    return (unsigned)ph < VF_PHASE_N ? names[ph] : "?";
}

size_t vf_phase_times_json(const vf_phase_times *t, char *buf, size_t n)
{
    double sum = 0;
    size_t k = 0;
#define PUT(...) (k += (size_t)snprintf(buf + (k < n ? k : n), k < n ? n - k : 0, __VA_ARGS__))
    PUT("{");
    for (int i = 0; i < VF_PHASE_N; i++) {
        sum += t->ms[i];
        PUT("\"%s\":%.3f,", vf_phase_name((vf_phase)i), t->ms[i]);
    }
    PUT("\"idle\":%.3f,\"span\":%.3f,\"calls\":{", t->total_ms - sum, t->total_ms);
    for (int i = 0; i < VF_PHASE_N; i++) PUT("%s\"%s\":%lld", i ? "," : "", vf_phase_name((vf_phase)i), (long long)t->calls[i]);
    PUT("}}");
#undef PUT
    return k;
}

/* ------------------------------------------------------------------ the wrapper */

int vf_phases_new(vf_backend *be, vf_phases **out, vf_status *st)
{
    int rc = 0;
    vf_phases *p = calloc(1, sizeof *p);
    if (!p) VF_FAIL(st, VF_ENOMEM, "phase timer: out of memory");
    p->inner = be;
    p->cuda = be->device.kind == VF_DEV_CUDA;
    p->be = *be; /* identity, dtypes, context */
/* every op of kernels/ops_list.h: an op added there without its w_ wrapper stops the build */
#define SET(name, family) p->be.name = w_##name;
    VF_OPS(SET)
#undef SET
    *out = p;
fail:
    return rc;
}

vf_backend *vf_phases_backend(vf_phases *p) { return &p->be; }

void vf_phases_enable(vf_phases *p, bool on) { p->on = on; }

int vf_phases_read(vf_phases *p, vf_phase_times *t, vf_status *st)
{
    int rc = 0;
    double *ms = NULL;
    memset(t, 0, sizeof *t);
    if (p->rc) {
        rc = p->rc;
        *st = p->err;
        goto fail;
    }
    const int n = 2 * p->nops;
    if (n == 0) goto fail;
    if (p->cuda) {
        if (!(ms = malloc(sizeof(double) * (size_t)n))) VF_FAIL(st, VF_ENOMEM, "phase timer: out of memory");
        VF_TRY(vf_cuda_marks_times(p->marks, n, ms, st));
    } else {
        ms = p->host;
    }
    for (int k = 0; k < p->nops; k++) {
        t->ms[p->phase[k]] += ms[2 * k + 1] - ms[2 * k];
        t->calls[p->phase[k]]++;
    }
    t->total_ms = ms[n - 1] - ms[0];
fail:
    if (ms != p->host) free(ms);
    p->nops = 0;
    p->rc = 0;
    return rc;
}

void vf_phases_free(vf_phases *p)
{
    if (!p) return;
    vf_cuda_marks_free(p->marks);
    free(p->phase);
    free(p->host);
    free(p);
}

#ifndef VFLOW_HAVE_CUDA
/* Without CUDA no backend is a CUDA backend: these are never reached through the
 * wrapper, and say so to anyone else. */
int vf_cuda_marks_new(vf_backend *be, vf_cuda_marks **out, vf_status *st)
{
    (void)be, *out = NULL;
    return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "phase timer: this build has no CUDA");
}
int vf_cuda_marks_record(vf_cuda_marks *m, int i, vf_status *st)
{
    (void)m, (void)i;
    return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "phase timer: this build has no CUDA");
}
int vf_cuda_marks_times(vf_cuda_marks *m, int n, double *ms, vf_status *st)
{
    (void)m, (void)n, (void)ms;
    return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "phase timer: this build has no CUDA");
}
void vf_cuda_marks_free(vf_cuda_marks *m) { (void)m; }
#endif
