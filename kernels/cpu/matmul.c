/* matmul.c — the dense layer on the CPU: out = inp·wᵀ + bias and its backward, with GELU
 * fused on either side, and several layers over one input as one call.
 *
 * All three products go through the f64-accumulating gemm engine (gemm.c) with strides
 * standing in for the transposes. dbias is a column sum over N rows, done per column
 * chunk in f64 so that each output has one owner and one summation order.
 */
#include <string.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

/* out (N, OC) = inp (N, C) · w (OC, C)ᵀ + bias (OC) */
void vf_cpu_matmul_fwd(float *out, const float *inp, const float *w, const float *bias,
                       int64_t N, int64_t C, int64_t OC)
{
    vf_gemm g = {.M = N, .N = OC, .K = C, .A = inp, .sam = C, .sak = 1, .B = w, .sbk = 1,
                 .sbn = C, .C = out, .ldc = OC, .bias_n = bias, .alpha = 1.0};
    vf_cpu_gemm(&g, 1);
}

/* dbias (OC) += Σ_n dout (N, OC)[n]: columns split into chunks, rows in order. */
static void bias_grad(float *dbias, const float *dout, int64_t N, int64_t OC)
{
    const int64_t CH = 64;
    const int64_t nch = (OC + CH - 1) / CH;
#pragma omp parallel for schedule(static) if (N * OC > VF_CPU_PAR_MIN)
    for (int64_t ch = 0; ch < nch; ch++) {
        double acc[64];
        int64_t o0 = ch * CH, no = OC - o0 < CH ? OC - o0 : CH;
        for (int64_t j = 0; j < no; j++) acc[j] = 0.0;
        for (int64_t n = 0; n < N; n++) {
            const float *row = dout + n * OC + o0;
            for (int64_t j = 0; j < no; j++) acc[j] += row[j];
        }
        for (int64_t j = 0; j < no; j++) dbias[o0 + j] = (float)(dbias[o0 + j] + acc[j]);
    }
}

void vf_cpu_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int64_t N, int64_t C, int64_t OC, int acc)
{
    if (dinp) { /* dinp (N, C) = or += dout (N, OC) · w (OC, C); written it is the sum
                   rounded from +0.0, what accumulating into zeros gave */
        vf_gemm g = {.M = N, .N = C, .K = OC, .A = dout, .sam = OC, .sak = 1, .B = w,
                     .sbk = C, .sbn = 1, .C = dinp, .ldc = C, .accumulate = acc, .alpha = 1.0};
        vf_cpu_gemm(&g, 1);
    }
    if (dw) { /* dw (OC, C) += dout (N, OC)ᵀ · inp (N, C) */
        vf_gemm g = {.M = OC, .N = C, .K = N, .A = dout, .sam = 1, .sak = OC, .B = inp,
                     .sbk = C, .sbn = 1, .C = dw, .ldc = C, .accumulate = 1, .alpha = 1.0};
        vf_cpu_gemm(&g, 1);
    }
    if (dbias) bias_grad(dbias, dout, N, OC);
}

/* The fused forms compute exactly what their unfused sequences compute (the GEMM into
 * f32, then the activation; each bias gradient by bias_grad), so the CPU reference's
 * bits do not depend on whether a model fuses. */

void vf_cpu_matmul_gelu_fwd(float *out, float *pre, const float *inp, const float *w,
                            const float *bias, int64_t N, int64_t C, int64_t OC)
{
    vf_cpu_matmul_fwd(pre, inp, w, bias, N, C, OC);
    vf_cpu_gelu_fwd(out, pre, N * OC);
}

void vf_cpu_matmul_dgelu_bwd(float *dpre, float *dbias_pre, float *dw, float *dbias,
                             const float *dout, const float *inp, const float *w,
                             const float *pre, int64_t N, int64_t C, int64_t OC)
{
    vf_cpu_matmul_bwd(dpre, dw, dbias, dout, inp, w, N, C, OC, 0); /* dpre = dout·w */
    vf_cpu_gelu_bwd(dpre, dpre, pre, N * C);                        /* ⊙ gelu'(pre), in place */
    if (dbias_pre) bias_grad(dbias_pre, dpre, N, C);
}

void vf_cpu_matmul_batch_fwd(float *out, const float *inp, const float *w, const float *bias,
                             int64_t N, int64_t C, int64_t OC, int nb, int64_t wstride,
                             int64_t ostride)
{
    for (int i = 0; i < nb; i++)
        vf_cpu_matmul_fwd(out + i * ostride, inp, w + i * wstride, bias ? bias + i * wstride : NULL,
                          N, C, OC);
}

/* The frozen FP8 weight: dequantised once per call into the caller's scratch, so the
 * GEMM is the plain one and its bits are those of a matmul on the dequantised weight. */
void vf_cpu_matmul_fp8_fwd(float *out, const float *inp, const uint8_t *w8, float wscale,
                           const float *bias, float *wbuf, int64_t N, int64_t C, int64_t OC)
{
    vf_fp8_dequantise(w8, OC * C, wscale, wbuf);
    vf_cpu_matmul_fwd(out, inp, wbuf, bias, N, C, OC);
}

void vf_cpu_matmul_fp8_bwd(float *dinp, const float *dout, const uint8_t *w8, float wscale,
                           float *wbuf, int64_t N, int64_t C, int64_t OC, int acc)
{
    if (!dinp) return;
    vf_fp8_dequantise(w8, OC * C, wscale, wbuf);
    vf_cpu_matmul_bwd(dinp, NULL, NULL, dout, NULL, wbuf, N, C, OC, acc);
}

void vf_cpu_matmul_batch_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                             int nb, int64_t wstride, int64_t ostride, int acc)
{
    for (int i = 0; i < nb; i++)
        vf_cpu_matmul_bwd(dinp, dw ? dw + i * wstride : NULL, dbias ? dbias + i * wstride : NULL,
                          dout + i * ostride, inp, w + i * wstride, N, C, OC, i ? 1 : acc);
}
