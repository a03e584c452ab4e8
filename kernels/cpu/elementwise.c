/* elementwise.c — add, axpy, GELU (tanh and exact) and SiLU on the CPU, forward and backward
 * (the backwards write their gradient, or add it where a mode says so: ops.h).
 *
 * Each element is computed in double from its float inputs and rounded once, so the
 * results are as close to the exact function as f32 storage allows and independent of
 * how the range is split across threads or vector lanes. The exponential is the
 * backend's own (vf_cpu_exp, basic IEEE operations only), not libm's, so the bits do not
 * depend on which libm variant a CPU gets. The exact GELU needs erf, which is libm's in
 * double: its error is far below the one rounding to float, so the float results are
 * the correctly rounded ones wherever libm's erf is faithful.
 */
#include <math.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

/* out = a + b (out may be a or b). A float sum rounded from float operands is already
 * correctly rounded, so no widening is needed. */
void vf_cpu_add(float *out, const float *a, const float *b, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* y += alpha·x, with alpha·x exact in double and one rounding. */
void vf_cpu_axpy(float *y, const float *x, float alpha, int64_t n)
{
    const double al = alpha;
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = (float)((double)y[i] + al * (double)x[i]);
}

void vf_cpu_axpy_bf16(uint16_t *y, const uint16_t *x, float alpha, int64_t n)
{
    const double al = alpha;
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = vf_f32_to_bf16((float)((double)vf_bf16_to_f32(y[i]) + al * (double)vf_bf16_to_f32(x[i])));
}

/* GELU (tanh) and SiLU: the loops are in simd_body.h (per-ISA builds, same bits);
 * here the range is cut into fixed chunks for the threads. */
#define CHUNK 4096

typedef void (*unary_fn)(float *out, const float *inp, int64_t n);
typedef void (*unary_bwd_fn)(float *dinp, const float *dout, const float *inp, int64_t n, int acc);

static void unary(unary_fn f, float *out, const float *inp, int64_t n)
{
    const int64_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t c = 0; c < nch; c++) {
        int64_t i0 = c * CHUNK;
        f(out + i0, inp + i0, n - i0 < CHUNK ? n - i0 : CHUNK);
    }
}

static void unary_bwd(unary_bwd_fn f, float *dinp, const float *dout, const float *inp, int64_t n,
                      int acc)
{
    const int64_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t c = 0; c < nch; c++) {
        int64_t i0 = c * CHUNK;
        f(dinp + i0, dout + i0, inp + i0, n - i0 < CHUNK ? n - i0 : CHUNK, acc);
    }
}

void vf_cpu_gelu_fwd(float *out, const float *inp, int64_t n)
{
    unary(vf_cpu_simd_get()->gelu_fwd, out, inp, n);
}

void vf_cpu_gelu_bwd(float *dinp, const float *dout, const float *inp, int64_t n)
{
    unary_bwd(vf_cpu_simd_get()->gelu_bwd, dinp, dout, inp, n, 0);
}

/* Exact GELU: x·Φ(x), Φ(x) = (1 + erf(x/√2))/2; its derivative Φ(x) + x·φ(x). Every
 * element is independent, so the thread split does not change the bits. */
void vf_cpu_gelu_erf_fwd(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (float)(0.5 * x * (1.0 + erf(x * M_SQRT1_2)));
    }
}

void vf_cpu_gelu_erf_bwd(float *dinp, const float *dout, const float *inp, int64_t n)
{
    const double inv_sqrt_2pi = 0.5 * M_2_SQRTPI * M_SQRT1_2;
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        double g = 0.5 * (1.0 + erf(x * M_SQRT1_2)) + x * inv_sqrt_2pi * exp(-0.5 * x * x);
        dinp[i] = (float)(g * (double)dout[i]);
    }
}

void vf_cpu_silu_fwd(float *out, const float *inp, int64_t n)
{
    unary(vf_cpu_simd_get()->silu_fwd, out, inp, n);
}

void vf_cpu_silu_bwd(float *dinp, const float *dout, const float *inp, int64_t n, int acc)
{
    unary_bwd(vf_cpu_simd_get()->silu_bwd, dinp, dout, inp, n, acc);
}
