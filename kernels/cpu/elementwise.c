/* elementwise.c — add, axpy, GELU (tanh) and SiLU on the CPU, forward and backward.
 *
 * Each element is computed in double from its float inputs and rounded once, so the
 * results are as close to the exact function as f32 storage allows and independent of
 * how the range is split across threads or vector lanes. Transcendentals (tanh, exp)
 * come from libm in double; glibc may pick an FMA variant by CPU, but those differ in
 * the last bits of a double only, which the rounding to float absorbs except in
 * astronomically rare ties.
 */
#include <math.h>
#include <omp.h>

#include "cpu_internal.h"
#include "cpu_ops.h"

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

/* torch.nn.GELU(approximate="tanh"): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) */
#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_C 0.044715

void vf_cpu_gelu_fwd(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        double t = tanh(GELU_K * (x + GELU_C * x * x * x));
        out[i] = (float)(0.5 * x * (1.0 + t));
    }
}

void vf_cpu_gelu_bwd(float *dinp, const float *dout, const float *inp, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        double t = tanh(GELU_K * (x + GELU_C * x * x * x));
        double dt = GELU_K * (1.0 + 3.0 * GELU_C * x * x);
        double g = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dt;
        dinp[i] = (float)((double)dinp[i] + g * (double)dout[i]);
    }
}

/* SiLU: x·σ(x); σ written so that exp never overflows. */
static inline double sigmoid(double x)
{
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

void vf_cpu_silu_fwd(float *out, const float *inp, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (float)(x * sigmoid(x));
    }
}

void vf_cpu_silu_bwd(float *dinp, const float *dout, const float *inp, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i], s = sigmoid(x);
        double g = s * (1.0 + x * (1.0 - s));
        dinp[i] = (float)((double)dinp[i] + g * (double)dout[i]);
    }
}
