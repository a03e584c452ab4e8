/* modulate.c — the DiT's adaLN pieces on the CPU: modulate (x·(1+scale)+shift) and the
 * gated residual (x + gate·y), forward and backward.
 *
 * The per-sample parameters (B, C) are broadcast over L tokens, so their gradients are
 * sums over L. The backward splits work by (batch, channel chunk): one thread owns the
 * chunk's parameter gradients and the matching columns of dx/dy, and walks the tokens
 * in order with f64 accumulators.
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

/* dx += dout·(1+scale); dshift += Σ_l dout; dscale += Σ_l dout·x (each may be NULL) */
void vf_cpu_modulate_bwd(float *dx, float *dshift, float *dscale, const float *dout,
                         const float *x, const float *scale, int64_t B, int64_t L, int64_t C)
{
    const int64_t nch = (C + CH - 1) / CH;
#pragma omp parallel for collapse(2) schedule(static) if (B * L * C > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t c0 = ch * CH, nc = C - c0 < CH ? C - c0 : CH;
            double ash[CH], asc[CH];
            for (int64_t j = 0; j < nc; j++) ash[j] = asc[j] = 0.0;
            const float *sc = scale + b * C + c0;
            for (int64_t l = 0; l < L; l++) {
                const float *g = dout + (b * L + l) * C + c0, *xr = x + (b * L + l) * C + c0;
                if (dx) {
                    float *d = dx + (b * L + l) * C + c0;
                    for (int64_t j = 0; j < nc; j++)
                        d[j] = (float)((double)d[j] + (double)g[j] * (1.0 + (double)sc[j]));
                }
                for (int64_t j = 0; j < nc; j++) {
                    ash[j] += g[j];
                    asc[j] += (double)g[j] * (double)xr[j];
                }
            }
            if (dshift)
                for (int64_t j = 0; j < nc; j++)
                    dshift[b * C + c0 + j] = (float)((double)dshift[b * C + c0 + j] + ash[j]);
            if (dscale)
                for (int64_t j = 0; j < nc; j++)
                    dscale[b * C + c0 + j] = (float)((double)dscale[b * C + c0 + j] + asc[j]);
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

/* dx += dout; dgate += Σ_l dout·y; dy += dout·gate (each may be NULL; none may alias
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
                    for (int64_t j = 0; j < nc; j++) dx[off + j] += g[j];
                if (dy)
                    for (int64_t j = 0; j < nc; j++)
                        dy[off + j] = (float)((double)dy[off + j] + (double)g[j] * (double)gt[j]);
                for (int64_t j = 0; j < nc; j++) ag[j] += (double)g[j] * (double)yr[j];
            }
            if (dgate)
                for (int64_t j = 0; j < nc; j++)
                    dgate[b * C + c0 + j] = (float)((double)dgate[b * C + c0 + j] + ag[j]);
        }
}
