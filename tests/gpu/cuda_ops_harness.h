/* cuda_ops_harness.h — what the CUDA-vs-CPU op tests share (test_cuda_ops.c and its
 * siblings test_cuda_attn.c, test_cuda_conv.c, test_cuda_mem.c, one binary each): the two
 * backends, random bf16-rounded inputs, device buffers that start as NaN and may sit off
 * 16-byte alignment, the relative-error comparison and its tolerances, which ops each file
 * compares (test_cuda_ops.c's every_op_compared checks them all against kernels/ops.h's
 * table), and main.
 *
 * Both backends get the SAME inputs: values are drawn, rounded to bf16 once, and the
 * CPU backend computes in f32/f64 from those rounded values, so the difference measures
 * the CUDA kernels only (bf16 storage of their outputs, f32 accumulation), not the
 * input rounding. Pass criteria: relative error ‖gpu − cpu‖ / ‖cpu‖ ≤ 2e-2 (BF) for bf16
 * outputs, ≤ 1e-5 (F32) for f32 outputs; NaN or Inf never passes.
 */
#ifndef VF_TESTS_GPU_CUDA_OPS_HARNESS_H
#define VF_TESTS_GPU_CUDA_OPS_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/vf_test.h"
#include "tests/gpu/gpu_test_main.h"

#include "kernels/ops.h"
#include "runtime/core/alloc.h"
#ifdef VFLOW_HAVE_CUDA
#include "kernels/cuda/cudnn_att.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/graph.h"
#endif

/* the backend under test and the reference */
static vf_backend *G, *C;

/* ------------------------------------------------------------------ helpers */

static uint64_t rs = 0x2545f4914f6cdd1dull;
static inline double unif(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) * (1.0 / 9007199254740992.0);
}
static inline float bfr(float x) { return vf_bf16_to_f32(vf_f32_to_bf16(x)); }

/* n values in [lo, hi), rounded to bf16 (what both backends see) */
static inline float *rnd(int64_t n, double lo, double hi)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = bfr((float)(lo + (hi - lo) * unif()));
    return p;
}
static inline float *dup(const float *x, int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    memcpy(p, x, sizeof(float) * (size_t)(n > 0 ? n : 0));
    return p;
}
static inline float *nanv(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* A device buffer of n elements of dtype dt, `off` elements past a 16-byte boundary
 * (off = 1 exercises the unaligned paths), filled from host h (NULL: NaN). */
typedef struct dbuf {
    void *base, *p;
    int64_t n;
    vf_dtype dt;
} dbuf;

static inline dbuf dnew(const float *h, int64_t n, vf_dtype dt, int off)
{
    vf_status st = {0};
    dbuf b = {.n = n, .dt = dt};
    size_t es = vf_dtype_size(dt);
    b.base = G->alloc(G, (size_t)(n + off + 8) * es, &st);
    if (!b.base) {
        fprintf(stderr, "alloc: %s\n", st.msg);
        exit(1);
    }
    b.p = (char *)b.base + (size_t)off * es;
    float *tmp = h ? NULL : nanv(n);
    G->upload(G, b.p, h ? h : tmp, n, dt);
    free(tmp);
    return b;
}
static inline dbuf dbf(const float *h, int64_t n, int off) { return dnew(h, n, G->act_dtype, off); }
static inline float *dget(dbuf b)
{
    float *h = malloc(sizeof(float) * (size_t)(b.n > 0 ? b.n : 1));
    G->download(G, h, b.p, b.n, b.dt);
    return h;
}
static inline void dfree(dbuf b) { G->free(G, b.base); }

static inline int sync_ok(const char *what)
{
    vf_status st = {0};
    if (G->sync(G, &st) < 0) {
        fprintf(stderr, "%s: %s (%s:%d)\n", what, st.msg, st.file ? st.file : "?", st.line);
        return 0;
    }
    return 1;
}

/* ‖got − want‖ / ‖want‖ ≤ tol; any non-finite value fails */
static inline void close_(const char *what, const float *got, const float *want, int64_t n, double tol, int line)
{
    double num = 0, den = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(want[i])) {
            if (bad < 0) bad = i;
            continue;
        }
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    int ok = bad < 0 && rel <= tol;
    fprintf(stderr, "  %-40s rel %.3e (tol %.0e)%s\n", what, rel, tol, ok ? "" : "  <-- FAIL");
    if (bad >= 0) fprintf(stderr, "    non-finite at %lld: got %g want %g\n", (long long)bad, got[bad], want[bad]);
    if (!ok) {
        fprintf(stderr, "%s:%d: %s failed\n", __FILE__, line, what);
        vf_test_failed_ = 1;
    }
}
#define CLOSE(what, got, want, n, tol) close_((what), (got), (want), (n), (tol), __LINE__)
#define BF 2e-2
#define F32 1e-5

/* device bf16 result vs cpu f32 array */
static inline void cmpd(const char *what, dbuf d, const float *want, double tol)
{
    if (!sync_ok(what)) {
        vf_test_failed_ = 1;
        return;
    }
    float *g = dget(d);
    CLOSE(what, g, want, d.n, tol);
    free(g);
}

/* Which comparison of the sibling files covers which ops of kernels/ops_list.h (the first
 * field names the VF_TEST; each file's listed_cases_exist names them, so dropping one
 * without its entry breaks that file's build). test_cuda_ops.c lists its own. */
#define VF_CUDA_OP_CASES_ATTN(X) X(attention, "attention_fwd attention_bwd")
#define VF_CUDA_OP_CASES_CONV(X) X(conv3d, "conv3d_fwd conv3d_bwd")
#define VF_CUDA_OP_CASES_MEM(X)                                                                              \
    X(memory_ops, "alloc free alloc_shared free_shared alloc_pinned free_pinned memset0 upload download copy " \
                  "copy2d sync")                                                                             \
    X(swap_ops, "swap_new swap_free swap_in swap_wait swap_stats")                                           \
    X(collective, "a2a_open a2a_run a2a_close")
#define VF_CASE_FN(fn, ops) (void)vf_test_##fn;

/* the backends (tests/gpu/gpu_test_main.h), then the file's VF_TESTs */
static inline int vf_cuda_ops_main(void) { return vf_gpu_test_main(&G, &C); }

#endif
