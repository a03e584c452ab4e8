/* norm.c — LayerNorm, RMSNorm (over the last dim) and the VAE's channel RMSNorm over a
 * channel-first tensor, forward and backward, on the CPU.
 *
 * Row statistics are computed in f64 (two passes for the variance, as a mean-shifted
 * sum of squares) and saved as f32 for the backward. Backward passes are split in two:
 * input gradients per row (independent rows), parameter gradients per column chunk
 * walking the rows in order, so that every output has one owner and one order.
 */
#include <math.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

#define CH 64 /* columns per work item of the parameter-gradient passes */

void vf_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int64_t N, int64_t C, float eps)
{
#pragma omp parallel for schedule(static) if (N * C > VF_CPU_PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float *o = out + n * C;
        double mu, r;
        vf_cpu_ln_stats(x, C, eps, &mu, &r);
        for (int64_t c = 0; c < C; c++) {
            double y = ((double)x[c] - mu) * r;
            if (w) y *= (double)w[c];
            if (b) y += (double)b[c];
            o[c] = (float)y;
        }
        if (mean) mean[n] = (float)mu;
        if (rstd) rstd[n] = (float)r;
    }
}

void vf_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean,
                          const float *rstd, int64_t N, int64_t C)
{
    if (dinp) {
#pragma omp parallel for schedule(static) if (N * C > VF_CPU_PAR_MIN)
        for (int64_t n = 0; n < N; n++) {
            const float *x = inp + n * C, *g = dout + n * C;
            float *d = dinp + n * C;
            double mu = mean[n], r = rstd[n], m1 = 0.0, m2 = 0.0;
            for (int64_t c = 0; c < C; c++) {
                double dxh = (double)g[c] * (w ? (double)w[c] : 1.0);
                m1 += dxh;
                m2 += dxh * ((double)x[c] - mu) * r;
            }
            m1 /= (double)C;
            m2 /= (double)C;
            for (int64_t c = 0; c < C; c++) {
                double dxh = (double)g[c] * (w ? (double)w[c] : 1.0);
                double xh = ((double)x[c] - mu) * r;
                d[c] = (float)((double)d[c] + r * (dxh - m1 - xh * m2));
            }
        }
    }
    if (dw || db) {
        const int64_t nch = (C + CH - 1) / CH;
#pragma omp parallel for schedule(static) if (N * C > VF_CPU_PAR_MIN)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t c0 = ch * CH, nc = C - c0 < CH ? C - c0 : CH;
            double aw[CH], ab[CH];
            for (int64_t j = 0; j < nc; j++) aw[j] = ab[j] = 0.0;
            for (int64_t n = 0; n < N; n++) {
                const float *x = inp + n * C + c0, *g = dout + n * C + c0;
                double mu = mean[n], r = rstd[n];
                for (int64_t j = 0; j < nc; j++) {
                    aw[j] += (double)g[j] * (((double)x[j] - mu) * r);
                    ab[j] += g[j];
                }
            }
            for (int64_t j = 0; j < nc; j++) {
                if (dw) dw[c0 + j] = (float)((double)dw[c0 + j] + aw[j]);
                if (db) db[c0 + j] = (float)((double)db[c0 + j] + ab[j]);
            }
        }
    }
}

void vf_cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                        int64_t C, float eps)
{
#pragma omp parallel for schedule(static) if (N * C > VF_CPU_PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float *o = out + n * C;
        const double r = vf_cpu_rms_rstd(x, C, eps);
        for (int64_t c = 0; c < C; c++) {
            double y = (double)x[c] * r;
            if (w) y *= (double)w[c];
            o[c] = (float)y;
        }
        if (rstd) rstd[n] = (float)r;
    }
}

void vf_cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                        const float *w, const float *rstd, int64_t N, int64_t C)
{
    if (dinp) {
#pragma omp parallel for schedule(static) if (N * C > VF_CPU_PAR_MIN)
        for (int64_t n = 0; n < N; n++) {
            const float *x = inp + n * C, *g = dout + n * C;
            float *d = dinp + n * C;
            double r = rstd[n], m2 = 0.0;
            for (int64_t c = 0; c < C; c++)
                m2 += (double)g[c] * (w ? (double)w[c] : 1.0) * ((double)x[c] * r);
            m2 /= (double)C;
            for (int64_t c = 0; c < C; c++) {
                double dxh = (double)g[c] * (w ? (double)w[c] : 1.0);
                d[c] = (float)(0.0 + r * (dxh - (double)x[c] * r * m2)); /* written (ops.h) */
            }
        }
    }
    if (dw) {
        const int64_t nch = (C + CH - 1) / CH;
#pragma omp parallel for schedule(static) if (N * C > VF_CPU_PAR_MIN)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t c0 = ch * CH, nc = C - c0 < CH ? C - c0 : CH;
            double aw[CH];
            for (int64_t j = 0; j < nc; j++) aw[j] = 0.0;
            for (int64_t n = 0; n < N; n++) {
                const float *x = inp + n * C + c0, *g = dout + n * C + c0;
                double r = rstd[n];
                for (int64_t j = 0; j < nc; j++) aw[j] += (double)g[j] * ((double)x[j] * r);
            }
            for (int64_t j = 0; j < nc; j++) dw[c0 + j] = (float)((double)dw[c0 + j] + aw[j]);
        }
    }
}

/* ---- channel RMSNorm of (B, C, S): statistics per (b, s) over c (stride S). Work is
 * split by (b, chunk of positions); channels are walked in order. */

#define SCH 256 /* positions per work item */

/* r[j] = 1/sqrt(mean_c x[b,c,s0+j]² + eps) for j < ns */
static void ch_rstd(double *r, const float *inp, int64_t b, int64_t s0, int64_t ns, int64_t C,
                    int64_t S, float eps)
{
    for (int64_t j = 0; j < ns; j++) r[j] = 0.0;
    for (int64_t c = 0; c < C; c++) {
        const float *x = inp + (b * C + c) * S + s0;
        for (int64_t j = 0; j < ns; j++) r[j] += (double)x[j] * (double)x[j];
    }
    for (int64_t j = 0; j < ns; j++) r[j] = 1.0 / sqrt(r[j] / (double)C + (double)eps);
}

void vf_cpu_rmsnorm_ch_fwd(float *out, const float *inp, const float *w, int64_t B, int64_t C,
                           int64_t S, float eps)
{
    const int64_t nch = (S + SCH - 1) / SCH;
#pragma omp parallel for collapse(2) schedule(static) if (B * C * S > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t s0 = ch * SCH, ns = S - s0 < SCH ? S - s0 : SCH;
            double r[SCH];
            ch_rstd(r, inp, b, s0, ns, C, S, eps);
            for (int64_t c = 0; c < C; c++) {
                const float *x = inp + (b * C + c) * S + s0;
                float *o = out + (b * C + c) * S + s0;
                double wc = w ? (double)w[c] : 1.0;
                for (int64_t j = 0; j < ns; j++) o[j] = (float)((double)x[j] * r[j] * wc);
            }
        }
}

void vf_cpu_rmsnorm_ch_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, int64_t B, int64_t C, int64_t S, float eps)
{
    const int64_t nch = (S + SCH - 1) / SCH;
    /* rstd per (b, s), needed by both passes */
    double *rs = vf_cpu_scratch((size_t)(B * S) * sizeof(double));
#pragma omp parallel for collapse(2) schedule(static) if (B * C * S > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t s0 = ch * SCH, ns = S - s0 < SCH ? S - s0 : SCH;
            double *r = rs + b * S + s0;
            ch_rstd(r, inp, b, s0, ns, C, S, eps);
            if (!dinp) continue;
            double m2[SCH];
            for (int64_t j = 0; j < ns; j++) m2[j] = 0.0;
            for (int64_t c = 0; c < C; c++) {
                const float *x = inp + (b * C + c) * S + s0, *g = dout + (b * C + c) * S + s0;
                double wc = w ? (double)w[c] : 1.0;
                for (int64_t j = 0; j < ns; j++) m2[j] += (double)g[j] * wc * ((double)x[j] * r[j]);
            }
            for (int64_t j = 0; j < ns; j++) m2[j] /= (double)C;
            for (int64_t c = 0; c < C; c++) {
                const float *x = inp + (b * C + c) * S + s0, *g = dout + (b * C + c) * S + s0;
                float *d = dinp + (b * C + c) * S + s0;
                double wc = w ? (double)w[c] : 1.0;
                for (int64_t j = 0; j < ns; j++)
                    d[j] = (float)((double)d[j] +
                                   r[j] * ((double)g[j] * wc - (double)x[j] * r[j] * m2[j]));
            }
        }
    if (dw) {
#pragma omp parallel for schedule(static) if (B * C * S > VF_CPU_PAR_MIN)
        for (int64_t c = 0; c < C; c++) {
            double a = 0.0;
            for (int64_t b = 0; b < B; b++) {
                const float *x = inp + (b * C + c) * S, *g = dout + (b * C + c) * S;
                const double *r = rs + b * S;
                for (int64_t s = 0; s < S; s++) a += (double)g[s] * ((double)x[s] * r[s]);
            }
            dw[c] = (float)((double)dw[c] + a);
        }
    }
    vf_cpu_scratch_free(rs);
}
