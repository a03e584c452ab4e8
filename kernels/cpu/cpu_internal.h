/* cpu_internal.h — shared plumbing of the CPU backend's kernel files (not public).
 *
 * Include it AFTER the system headers: its pragma applies to the rest of the
 * translation unit and sets three things.
 *  - fp-contract=off: the backend promises the same bits for the same inputs on every
 *    thread count and on every ISA build of its hot loops (simd.c: AVX-512, AVX2,
 *    baseline); that holds only if every a*b+c is two IEEE operations. C11 mode already
 *    defaults to it, but a gnu11 build or a target("avx512f") function (which implies
 *    FMA in GCC 12) would contract silently, so it is a property of the source here.
 *  - vect-cost-model=dynamic: the build compiles kernels at -O2, whose "very cheap"
 *    model skips every loop that needs an epilogue, i.e. nearly all of ours.
 *  - no-trapping-math: lets the vectoriser if-convert the clamps in vf_cpu_exp; it
 *    concerns floating-point exception flags, not values.
 *
 * Parallelism rule for every kernel: OpenMP splits only independent outputs (rows,
 * columns, tiles, heads); each output is reduced by one thread in a fixed order, so the
 * result does not depend on how many threads run or how work is scheduled.
 */
#ifndef VF_CPU_INTERNAL_H
#define VF_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/vflow.h"

#pragma GCC optimize("fp-contract=off", "vect-cost-model=dynamic", "no-trapping-math")
#if defined(__clang__) /* clang ignores the GCC pragma and contracts by default */
#pragma STDC FP_CONTRACT OFF
#endif

/* Below this many scalar operations a kernel runs on the calling thread: an OpenMP
 * fork costs a few microseconds. Thresholds never change results, only speed. */
#define VF_CPU_PAR_MIN 32768

/* Scratch for one kernel call on one thread (packed panels, score blocks). Kernels
 * cannot report errors (the op table returns void), so running out of memory for a
 * few megabytes of scratch is treated as fatal: it aborts with a message. Freed with
 * vf_cpu_scratch_free. */
void *vf_cpu_scratch(size_t bytes);
void vf_cpu_scratch_free(void *p);

/* exp in double from basic IEEE operations only: 2^n · p(r), n = round(x/ln2),
 * r = x − n·ln2 (Cody–Waite with fdlibm's two-part ln2), p the degree-13 Taylor
 * polynomial (truncation < 5e-18 on |r| ≤ ln2/2), so ~1 ulp of double. Why not libm:
 * glibc picks an FMA or a non-FMA exp by CPU, and its calls block vectorisation; this
 * one vectorises (loops of it run 2–8 lanes wide) and gives the same bits on every x86
 * path. Range: below −708 it returns e^−708 (callers round to f32, where that is 0);
 * above 709 it returns +inf (already inf in f32); NaN stays NaN. */
static inline double vf_cpu_exp(double x)
{
    const double shifter = 0x1.8p52, inv_ln2 = 0x1.71547652b82fep0;
    const double ln2_hi = 0x1.62e42feep-1, ln2_lo = 0x1.a39ef35793c76p-33;
    double xc = x < -708.0 ? -708.0 : x;
    xc = xc > 709.0 ? 709.0 : xc;
    double kd = xc * inv_ln2 + shifter; /* round(x/ln2) in the low mantissa bits */
    double n = kd - shifter;
    double r = (xc - n * ln2_hi) - n * ln2_lo;
    double p = 1.0 / 6227020800.0; /* 1/13! */
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t ki, bits;
    memcpy(&ki, &kd, sizeof ki);
    bits = (ki + 1023) << 52; /* 2^n: n + 1023 into the exponent field */
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    double res = p * scale;
    return x > 709.0 ? (double)INFINITY : res;
}

/* ---- row statistics, shared by the norms (norm.c) and the fused ops that hold one
 * (modulate.c, rope.c): the same f64 operations in the same order wherever a row's
 * statistics are formed, so a fused op computes what its unfused sequence did, bit for
 * bit (and a backward can form the forward's f64 statistics again from x). */

/* LayerNorm over x[0..C): mean, and rstd = 1/sqrt(var + eps) with the mean-shifted
 * two-pass variance */
static inline void vf_cpu_ln_stats(const float *x, int64_t C, float eps, double *mu, double *r)
{
    double s = 0.0, ss = 0.0;
    for (int64_t c = 0; c < C; c++) s += x[c];
    const double m = s / (double)C;
    for (int64_t c = 0; c < C; c++) {
        double d = (double)x[c] - m;
        ss += d * d;
    }
    *mu = m;
    *r = 1.0 / sqrt(ss / (double)C + (double)eps);
}

/* RMSNorm over x[0..C): 1/sqrt(mean x² + eps) */
static inline double vf_cpu_rms_rstd(const float *x, int64_t C, float eps)
{
    double ss = 0.0;
    for (int64_t c = 0; c < C; c++) ss += (double)x[c] * (double)x[c];
    return 1.0 / sqrt(ss / (double)C + (double)eps);
}

/* ---- the GEMM engine (gemm.c): C = init + alpha · A·B with f64 accumulation.
 *
 * A(m,k) = A[m*sam + k*sak], B(k,n) = B[k*sbk + n*sbn]: any strides, so transposes
 * and strided head views need no copies. The products of two floats are exact in
 * double, the sum over k runs in k order in double, and each output is rounded once.
 * Output goes to f32 C (ldc) or, when C64 is set, to f64 C64 (ldc).
 *   init = accumulate ? C_old : bias_n[n] + bias_m[m] (each NULL = 0)
 */
typedef struct vf_gemm {
    int64_t M, N, K;
    const float *A;
    int64_t sam, sak;
    const float *B;
    int64_t sbk, sbn;
    float *C;
    double *C64;
    int64_t ldc;
    int accumulate;
    const float *bias_n;
    const float *bias_m;
    double alpha;
} vf_gemm;

/* Runs g; parallel = 0 keeps it on the calling thread (callers already inside an
 * OpenMP region), 1 splits output tiles across threads. */
void vf_cpu_gemm(const vf_gemm *g, int parallel);

#define VF_GEMM_KC 256 /* k block: a KC row of the packed panels stays in cache */

/* The constants of one AdamW step (adamw.c), in double. */
typedef struct vf_cpu_adam {
    double b1, b2, gsc, step, sbc2, decay, eps;
} vf_cpu_adam;

/* ---- the hot loops, one build per ISA (simd_body.h, simd.c); all builds give the same
 * bits. vf_cpu_simd_get returns the build in use (see vf_cpu_set_isa). */
typedef struct vf_cpu_simd {
    const char *name;
    int mr, nr; /* gemm micro-tile */
    /* one output tile of g over all K (see gemm.c); Ap ≥ mc·KC, Bp ≥ nc·KC and
     * Cb ≥ mc·nc doubles rounded up to MR, NR multiples */
    void (*gemm_tile)(const vf_gemm *g, int64_t m0, int64_t mc, int64_t n0, int64_t nc,
                      double *Ap, double *Bp, double *Cb);
    void (*exp_f64)(double *e, const float *s, double shift, int64_t n); /* e = exp(s − shift) */
    void (*exp_f32)(float *p, const float *s, double shift, int64_t n);  /* p = (float)… */
    /* p[i] = (float)exp(p[i] − shift[i]) */
    void (*exp_sub_f32)(float *p, const float *shift, int64_t n);
    void (*gelu_fwd)(float *out, const float *inp, int64_t n);
    /* dinp = or += f'(inp)·dout (acc); dinp may be dout (each element read, then written) */
    void (*gelu_bwd)(float *dinp, const float *dout, const float *inp, int64_t n, int acc);
    void (*silu_fwd)(float *out, const float *inp, int64_t n);
    void (*silu_bwd)(float *dinp, const float *dout, const float *inp, int64_t n, int acc);
    /* AdamW on n elements: grad f32 or bf16, wout (may be NULL) f32 or bf16 */
    void (*adamw)(const vf_cpu_adam *a, float *master, float *m, float *v, const void *grad, vf_dtype gdt,
                  void *wout, vf_dtype wdt, int64_t n);
} vf_cpu_simd;

const vf_cpu_simd *vf_cpu_simd_get(void);

#endif
