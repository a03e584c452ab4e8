/* modulate.c — the DiT's adaLN pieces on the CPU: modulate (x·(1+scale)+shift), the same
 * after a LayerNorm as one op, and the gated residual (x + gate·y), forward and backward.
 *
 * The per-sample parameters (B, C) are broadcast over L tokens, so their gradients are
 * sums over L. The backward splits work by (batch, channel chunk): one thread owns the
 * chunk's parameter gradients and the matching columns of dx/dy, and walks the tokens
 * in order with f64 accumulators. Gradients are written (ops.h) as the sum rounded from
 * +0.0: the bits accumulating into zeroed memory gave.
 */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

#define CH 64 /* channels per work item in the backward passes */

/* out (B, L, C) = x·(1 + scale[b]) + shift[b]; out may alias x */
void vf_cpu_modulate_fwd(float *out, const float *x, const float *shift, const float *scale,
                         int64_t B, int64_t L, int64_t C)
{
#pragma omp parallel for collapse(2) schedule(static) if (B * L * C > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            const float *xr = x + (b * L + l) * C, *sh = shift + b * C, *sc = scale + b * C;
            float *o = out + (b * L + l) * C;
            for (int64_t c = 0; c < C; c++)
                o[c] = (float)((double)xr[c] * (1.0 + (double)sc[c]) + (double)sh[c]);
        }
}

/* Column sums of the adaLN backwards: for sample b and channels [c0, c0 + nc), ash = Σ_l
 * dout, asc = Σ_l dout·x̂ in token order, x̂ read from x, or formed as LayerNorm's output
 * from the row statistics mu, r (f64, per row) when they are given. */
static void ada_colsums(double *ash, double *asc, const float *dout, const float *x,
                        const double *mu, const double *r, int64_t b, int64_t c0, int64_t nc,
                        int64_t L, int64_t C)
{
    for (int64_t j = 0; j < nc; j++) ash[j] = asc[j] = 0.0;
    for (int64_t l = 0; l < L; l++) {
        const int64_t row = b * L + l;
        const float *g = dout + row * C + c0, *xr = x + row * C + c0;
        for (int64_t j = 0; j < nc; j++) {
            const float xh = mu ? (float)(((double)xr[j] - mu[row]) * r[row]) : xr[j];
            ash[j] += g[j];
            asc[j] += (double)g[j] * (double)xh;
        }
    }
}

/* dx = dout·(1+scale); dshift = Σ_l dout; dscale = Σ_l dout·x (each may be NULL) */
void vf_cpu_modulate_bwd(float *dx, float *dshift, float *dscale, const float *dout,
                         const float *x, const float *scale, int64_t B, int64_t L, int64_t C)
{
    const int64_t nch = (C + CH - 1) / CH;
#pragma omp parallel for collapse(2) schedule(static) if (B * L * C > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t c0 = ch * CH, nc = C - c0 < CH ? C - c0 : CH;
            double ash[CH], asc[CH];
            const float *sc = scale + b * C + c0;
            if (dx)
                for (int64_t l = 0; l < L; l++) {
                    const float *g = dout + (b * L + l) * C + c0;
                    float *d = dx + (b * L + l) * C + c0;
                    for (int64_t j = 0; j < nc; j++)
                        d[j] = (float)(0.0 + (double)g[j] * (1.0 + (double)sc[j]));
                }
            ada_colsums(ash, asc, dout, x, NULL, NULL, b, c0, nc, L, C);
            if (dshift)
                for (int64_t j = 0; j < nc; j++) dshift[b * C + c0 + j] = (float)(0.0 + ash[j]);
            if (dscale)
                for (int64_t j = 0; j < nc; j++) dscale[b * C + c0 + j] = (float)(0.0 + asc[j]);
        }
}

/* out = LN(x)·(1 + scale[b]) + shift[b]: LayerNorm's output rounded to f32 first, as
 * layernorm_fwd then modulate_fwd computed it */
void vf_cpu_ln_modulate_fwd(float *out, float *mean, float *rstd, const float *x,
                            const float *shift, const float *scale, int64_t B, int64_t L,
                            int64_t C, float eps)
{
#pragma omp parallel for collapse(2) schedule(static) if (B * L * C > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            const int64_t n = b * L + l;
            const float *xr = x + n * C, *sh = shift + b * C, *sc = scale + b * C;
            float *o = out + n * C;
            double mu, r;
            vf_cpu_ln_stats(xr, C, eps, &mu, &r);
            for (int64_t c = 0; c < C; c++) {
                const float h = (float)(((double)xr[c] - mu) * r);
                o[c] = (float)((double)h * (1.0 + (double)sc[c]) + (double)sh[c]);
            }
            if (mean) mean[n] = (float)mu;
            if (rstd) rstd[n] = (float)r;
        }
}

/* What modulate_bwd then layernorm_bwd computed: the modulate gradient g = dout·(1+scale)
 * rounded to f32, LayerNorm's backward of it from the saved f32 statistics, and dscale
 * from the forward's x̂, which needs the forward's f64 statistics: formed again from x. */
void vf_cpu_ln_modulate_bwd(float *dx, float *dshift, float *dscale, const float *dout,
                            const float *x, const float *mean, const float *rstd,
                            const float *scale, int64_t B, int64_t L, int64_t C, float eps,
                            int acc)
{
    const int64_t N = B * L, nch = (C + CH - 1) / CH;
    double *st = (dshift || dscale) ? vf_cpu_scratch(sizeof(double) * 2 * (size_t)N) : NULL;
#pragma omp parallel for schedule(static) if (N * C > VF_CPU_PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * C, *gr = dout + n * C, *sc = scale + (n / L) * C;
        if (st) vf_cpu_ln_stats(xr, C, eps, &st[n], &st[N + n]);
        if (!dx) continue;
        const double mu = mean[n], r = rstd[n];
        double m1 = 0.0, m2 = 0.0;
        for (int64_t c = 0; c < C; c++) {
            const double dxh = (double)(float)(0.0 + (double)gr[c] * (1.0 + (double)sc[c]));
            m1 += dxh;
            m2 += dxh * ((double)xr[c] - mu) * r;
        }
        m1 /= (double)C;
        m2 /= (double)C;
        float *d = dx + n * C;
        for (int64_t c = 0; c < C; c++) {
            const double dxh = (double)(float)(0.0 + (double)gr[c] * (1.0 + (double)sc[c]));
            const double xh = ((double)xr[c] - mu) * r, v = r * (dxh - m1 - xh * m2);
            d[c] = (float)((acc ? (double)d[c] : 0.0) + v);
        }
    }
    if (st) {
#pragma omp parallel for collapse(2) schedule(static) if (N * C > VF_CPU_PAR_MIN)
        for (int64_t b = 0; b < B; b++)
            for (int64_t ch = 0; ch < nch; ch++) {
                int64_t c0 = ch * CH, nc = C - c0 < CH ? C - c0 : CH;
                double ash[CH], asc[CH];
                ada_colsums(ash, asc, dout, x, st, st + N, b, c0, nc, L, C);
                if (dshift)
                    for (int64_t j = 0; j < nc; j++) dshift[b * C + c0 + j] = (float)(0.0 + ash[j]);
                if (dscale)
                    for (int64_t j = 0; j < nc; j++) dscale[b * C + c0 + j] = (float)(0.0 + asc[j]);
            }
        vf_cpu_scratch_free(st);
    }
}

/* out (B, L, C) = x + gate[b]·y; out may alias x */
void vf_cpu_gated_add_fwd(float *out, const float *x, const float *gate, const float *y,
                          int64_t B, int64_t L, int64_t C)
{
#pragma omp parallel for collapse(2) schedule(static) if (B * L * C > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            const float *xr = x + (b * L + l) * C, *yr = y + (b * L + l) * C, *gt = gate + b * C;
            float *o = out + (b * L + l) * C;
            for (int64_t c = 0; c < C; c++)
                o[c] = (float)((double)xr[c] + (double)gt[c] * (double)yr[c]);
        }
}

/* dx = dout; dgate = Σ_l dout·y; dy = dout·gate (each may be NULL; none may alias
 * dout — a caller that wants dx == dout passes dx = NULL and keeps dout). */
void vf_cpu_gated_add_bwd(float *dx, float *dgate, float *dy, const float *dout,
                          const float *gate, const float *y, int64_t B, int64_t L, int64_t C)
{
    const int64_t nch = (C + CH - 1) / CH;
#pragma omp parallel for collapse(2) schedule(static) if (B * L * C > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t c0 = ch * CH, nc = C - c0 < CH ? C - c0 : CH;
            double ag[CH];
            for (int64_t j = 0; j < nc; j++) ag[j] = 0.0;
            const float *gt = gate + b * C + c0;
            for (int64_t l = 0; l < L; l++) {
                int64_t off = (b * L + l) * C + c0;
                const float *g = dout + off, *yr = y + off;
                if (dx)
                    for (int64_t j = 0; j < nc; j++) dx[off + j] = 0.0f + g[j];
                if (dy)
                    for (int64_t j = 0; j < nc; j++)
                        dy[off + j] = (float)(0.0 + (double)g[j] * (double)gt[j]);
                for (int64_t j = 0; j < nc; j++) ag[j] += (double)g[j] * (double)yr[j];
            }
            if (dgate)
                for (int64_t j = 0; j < nc; j++) dgate[b * C + c0 + j] = (float)(0.0 + ag[j]);
        }
}
