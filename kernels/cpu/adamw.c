/* adamw.c — the AdamW step and the gradient sum of squares on the CPU.
 *
 * The update follows torch.optim.AdamW (non-amsgrad, non-fused) term for term, in double
 * per element, with m, v and the weight each rounded to f32 once:
 *   g = grad · grad_scale                      (global-norm clipping factor first)
 *   m = β1·m + (1−β1)·g ;  v = β2·v + (1−β2)·g²
 *   p = p·(1 − lr·wd)                          (decoupled weight decay)
 *   p = p − lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps)
 * Elementwise, so any split across threads gives the same bits.
 *
 * sumsq is the fixed-order partial the trainer adds up for the global gradient norm:
 * 256 blocks determined by n alone, each summed in f64 in index order, added in block
 * order.
 */
#include <math.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

void vf_cpu_adamw(float *master, float *m, float *v, const float *grad, float *weights_out,
                  int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int64_t t)
{
    VF_ASSERT(t >= 1);
    const double b1 = beta1, b2 = beta2, gsc = grad_scale;
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    const double step = (double)lr / bc1, sbc2 = sqrt(bc2);
    const double decay = 1.0 - (double)lr * (double)weight_decay;
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        double g = (double)grad[i] * gsc;
        double mi = b1 * (double)m[i] + (1.0 - b1) * g;
        double vi = b2 * (double)v[i] + (1.0 - b2) * g * g;
        float mf = (float)mi, vf = (float)vi;
        double p = (double)master[i] * decay;
        p -= step * (double)mf / (sqrt((double)vf) / sbc2 + (double)eps);
        m[i] = mf;
        v[i] = vf;
        master[i] = (float)p;
        if (weights_out) weights_out[i] = (float)p;
    }
}

#define NBLK 256

double vf_cpu_sumsq(const float *grad, int64_t n)
{
    if (n <= 0) return 0.0;
    double part[NBLK];
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
    for (int k = 0; k < NBLK; k++) {
        int64_t lo = n * k / NBLK, hi = n * (k + 1) / NBLK;
        double s = 0.0;
        for (int64_t i = lo; i < hi; i++) s += (double)grad[i] * (double)grad[i];
        part[k] = s;
    }
    double s = 0.0;
    for (int k = 0; k < NBLK; k++) s += part[k];
    return s;
}
