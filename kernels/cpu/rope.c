/* rope.c — rotary position embedding on (B, L, H, D) on the CPU, alone and after an
 * RMSNorm of the whole row as one op (the DiT's q and k).
 *
 * Pairs (2i, 2i+1) of every head are rotated by angle[l, i] (interleaved pairs, as
 * Wan's complex view of the last dim): y0 = x0·cos − x1·sin, y1 = x0·sin + x1·cos.
 * The backward applies the transpose rotation R(−θ) and writes its gradient (ops.h), as
 * the sum rounded from +0.0: the bits accumulating into zeroed memory gave. Odd D: the
 * last element of a head has no partner and passes through. In place (out == inp) is
 * allowed for rope_fwd and rope_bwd.
 */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

void vf_cpu_rope_fwd(float *out, const float *inp, const float *cos, const float *sin,
                     int64_t B, int64_t L, int64_t H, int64_t D)
{
    const int64_t P = D / 2;
#pragma omp parallel for collapse(2) schedule(static) if (B * L * H * D > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            const float *cs = cos + l * P, *sn = sin + l * P;
            for (int64_t h = 0; h < H; h++) {
                const float *x = inp + ((b * L + l) * H + h) * D;
                float *y = out + ((b * L + l) * H + h) * D;
                for (int64_t i = 0; i < P; i++) {
                    double x0 = x[2 * i], x1 = x[2 * i + 1], c = cs[i], s = sn[i];
                    y[2 * i] = (float)(x0 * c - x1 * s);
                    y[2 * i + 1] = (float)(x0 * s + x1 * c);
                }
                if (D & 1) y[D - 1] = x[D - 1];
            }
        }
}

/* Element j (< D) of R(−θ)·g for one head g, angles cs/sn of its position */
static inline float rope_bwd_at(const float *g, const float *cs, const float *sn, int64_t j,
                                int64_t D)
{
    if ((D & 1) && j == D - 1) return 0.0f + g[j];
    const int64_t i = j / 2;
    const double c = cs[i], s = sn[i];
    if (j & 1) return (float)(0.0 + ((double)g[j] * c - (double)g[j - 1] * s));
    return (float)(0.0 + ((double)g[j] * c + (double)g[j + 1] * s));
}

/* dinp = R(−θ)·dout */
void vf_cpu_rope_bwd(float *dinp, const float *dout, const float *cos, const float *sin,
                     int64_t B, int64_t L, int64_t H, int64_t D)
{
#pragma omp parallel for collapse(2) schedule(static) if (B * L * H * D > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            const float *cs = cos + l * (D / 2), *sn = sin + l * (D / 2);
            for (int64_t h = 0; h < H; h++) {
                const float *g = dout + ((b * L + l) * H + h) * D;
                float *d = dinp + ((b * L + l) * H + h) * D;
                for (int64_t j = 0; j + 1 < D; j += 2) { /* both of a pair before writing (in place) */
                    const float u0 = rope_bwd_at(g, cs, sn, j, D), u1 = rope_bwd_at(g, cs, sn, j + 1, D);
                    d[j] = u0;
                    d[j + 1] = u1;
                }
                if (D & 1) d[D - 1] = rope_bwd_at(g, cs, sn, D - 1, D);
            }
        }
}

/* ---- RMSNorm + RoPE: what rmsnorm_fwd then rope_fwd computed, the normalised row
 * rounded to f32 before the rotation; the backward is rope_bwd's f32 gradient fed to
 * rmsnorm_bwd's formulas, formed per element where each pass needs it. */

void vf_cpu_rmsnorm_rope_fwd(float *out, float *rstd, const float *inp, const float *w,
                             const float *cos, const float *sin, int64_t B, int64_t L,
                             int64_t H, int64_t D, float eps)
{
    const int64_t C = H * D, P = D / 2;
#pragma omp parallel for collapse(2) schedule(static) if (B * L * C > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            const int64_t n = b * L + l;
            const float *x = inp + n * C, *cs = cos + l * P, *sn = sin + l * P;
            float *y = out + n * C;
            const double r = vf_cpu_rms_rstd(x, C, eps);
            for (int64_t h = 0; h < H; h++) {
                const float *xh = x + h * D, *wh = w ? w + h * D : NULL;
                float *yh = y + h * D;
                for (int64_t j = 0; j < D; j++) { /* rmsnorm_fwd's f32 output */
                    double t = (double)xh[j] * r;
                    if (wh) t *= (double)wh[j];
                    yh[j] = (float)t;
                }
                for (int64_t i = 0; i < P; i++) {
                    const double x0 = yh[2 * i], x1 = yh[2 * i + 1], c = cs[i], s = sn[i];
                    yh[2 * i] = (float)(x0 * c - x1 * s);
                    yh[2 * i + 1] = (float)(x0 * s + x1 * c);
                }
            }
            if (rstd) rstd[n] = (float)r;
        }
}

#define RCH 64 /* columns per work item of the gain-gradient pass */

void vf_cpu_rmsnorm_rope_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, const float *cos,
                             const float *sin, int64_t B, int64_t L, int64_t H, int64_t D)
{
    const int64_t C = H * D, N = B * L, P = D / 2;
    if (dinp) {
#pragma omp parallel for schedule(static) if (N * C > VF_CPU_PAR_MIN)
        for (int64_t n = 0; n < N; n++) {
            const float *x = inp + n * C, *g = dout + n * C;
            const float *cs = cos + (n % L) * P, *sn = sin + (n % L) * P;
            float *d = dinp + n * C;
            const double r = rstd[n];
            double m2 = 0.0;
            for (int64_t c = 0; c < C; c++) {
                const double u = rope_bwd_at(g + c / D * D, cs, sn, c % D, D);
                m2 += u * (w ? (double)w[c] : 1.0) * ((double)x[c] * r);
            }
            m2 /= (double)C;
            for (int64_t c = 0; c < C; c++) {
                const double u = rope_bwd_at(g + c / D * D, cs, sn, c % D, D);
                const double dxh = u * (w ? (double)w[c] : 1.0);
                d[c] = (float)(0.0 + r * (dxh - (double)x[c] * r * m2));
            }
        }
    }
    if (dw) {
        const int64_t nch = (C + RCH - 1) / RCH;
#pragma omp parallel for schedule(static) if (N * C > VF_CPU_PAR_MIN)
        for (int64_t ch = 0; ch < nch; ch++) {
            const int64_t c0 = ch * RCH, nc = C - c0 < RCH ? C - c0 : RCH;
            double aw[RCH];
            for (int64_t j = 0; j < nc; j++) aw[j] = 0.0;
            for (int64_t n = 0; n < N; n++) {
                const float *x = inp + n * C, *g = dout + n * C;
                const float *cs = cos + (n % L) * P, *sn = sin + (n % L) * P;
                const double r = rstd[n];
                for (int64_t j = 0; j < nc; j++) {
                    const int64_t c = c0 + j;
                    const double u = rope_bwd_at(g + c / D * D, cs, sn, c % D, D);
                    aw[j] += u * ((double)x[c] * r);
                }
            }
            for (int64_t j = 0; j < nc; j++) dw[c0 + j] = (float)((double)dw[c0 + j] + aw[j]);
        }
    }
}
