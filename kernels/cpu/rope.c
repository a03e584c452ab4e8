/* rope.c — rotary position embedding on (B, L, H, D) on the CPU.
 *
 * Pairs (2i, 2i+1) of every head are rotated by angle[l, i] (interleaved pairs, as
 * Wan's complex view of the last dim): y0 = x0·cos − x1·sin, y1 = x0·sin + x1·cos.
 * The backward applies the transpose rotation R(−θ). Odd D: the last element of a
 * head has no partner and passes through. In place (out == inp) is allowed.
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

/* dinp += R(−θ)·dout */
void vf_cpu_rope_bwd(float *dinp, const float *dout, const float *cos, const float *sin,
                     int64_t B, int64_t L, int64_t H, int64_t D)
{
    const int64_t P = D / 2;
#pragma omp parallel for collapse(2) schedule(static) if (B * L * H * D > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            const float *cs = cos + l * P, *sn = sin + l * P;
            for (int64_t h = 0; h < H; h++) {
                const float *g = dout + ((b * L + l) * H + h) * D;
                float *d = dinp + ((b * L + l) * H + h) * D;
                for (int64_t i = 0; i < P; i++) {
                    double g0 = g[2 * i], g1 = g[2 * i + 1], c = cs[i], s = sn[i];
                    d[2 * i] = (float)((double)d[2 * i] + (g0 * c + g1 * s));
                    d[2 * i + 1] = (float)((double)d[2 * i + 1] + (g1 * c - g0 * s));
                }
                if (D & 1) d[D - 1] += g[D - 1];
            }
        }
}
