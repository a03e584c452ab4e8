/* adamw.c — the AdamW step and the gradient sum of squares on the CPU.
 *
 * The update follows torch.optim.AdamW (non-amsgrad, non-fused) term for term, in double
 * per element, with m, v and the weight each rounded to f32 once:
 *   g = grad · grad_scale                      (global-norm clipping factor first)
 *   m = β1·m + (1−β1)·g ;  v = β2·v + (1−β2)·g²
 *   p = p·(1 − lr·wd)                          (decoupled weight decay)
 *   p = p − lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps)
 * Elementwise, so any split across threads gives the same bits; the loop is simd_body.h's
 * (AVX-512, AVX2 or baseline: the same bits too), threads taking fixed ranges. The
 * gradient may be bf16 and the new weights may be written as bf16: the optimizer shard
 * of bf16 partitions kept in host memory (offload) reads their gradients and writes
 * their weights in their dtype, and bf16 → f32 is exact, so its state is the one an f32
 * step on the bf16-rounded gradient gives, bit for bit.
 *
 * sumsq is the fixed-order partial the trainer adds up for the global gradient norm:
 * 256 blocks determined by n alone, each summed in f64 in index order, added in block
 * order.
 */
#include <math.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

/* Threads take fixed ranges of CHUNK elements, each run by the ISA build's loop. */
#define CHUNK 8192

void vf_cpu_adamw_dt(float *master, float *m, float *v, const void *grad, vf_dtype grad_dtype, void *weights_out,
                     vf_dtype out_dtype, int64_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, float grad_scale, int64_t t)
{
    VF_ASSERT(t >= 1);
    VF_ASSERT(grad_dtype == VF_DTYPE_F32 || grad_dtype == VF_DTYPE_BF16);
    VF_ASSERT(!weights_out || out_dtype == VF_DTYPE_F32 || out_dtype == VF_DTYPE_BF16);
    const double b1 = beta1, b2 = beta2;
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    const vf_cpu_adam a = {.b1 = b1, .b2 = b2, .gsc = grad_scale, .step = (double)lr / bc1, .sbc2 = sqrt(bc2),
                           .decay = 1.0 - (double)lr * (double)weight_decay, .eps = eps};
    const vf_cpu_simd *simd = vf_cpu_simd_get();
    const size_t gs = vf_dtype_size(grad_dtype), ws = vf_dtype_size(out_dtype);
    const int64_t nch = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n > VF_CPU_PAR_MIN)
    for (int64_t c = 0; c < nch; c++) {
        int64_t i = c * CHUNK, k = n - i < CHUNK ? n - i : CHUNK;
        simd->adamw(&a, master + i, m + i, v + i, (const char *)grad + (size_t)i * gs, grad_dtype,
                    weights_out ? (char *)weights_out + (size_t)i * ws : NULL, out_dtype, k);
    }
}

void vf_cpu_adamw(float *master, float *m, float *v, const float *grad, float *weights_out,
                  int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int64_t t)
{
    vf_cpu_adamw_dt(master, m, v, grad, VF_DTYPE_F32, weights_out, VF_DTYPE_F32, n, lr, beta1, beta2, eps,
                    weight_decay, grad_scale, t);
}

#define NBLK 256

double vf_cpu_sumsq_dt(const void *grad, vf_dtype grad_dtype, int64_t n)
{
    if (n <= 0) return 0.0;
    VF_ASSERT(grad_dtype == VF_DTYPE_F32 || grad_dtype == VF_DTYPE_BF16);
    const float *gf = grad;
    const uint16_t *gb = grad;
    double part[NBLK];
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
    for (int k = 0; k < NBLK; k++) {
        int64_t lo = n * k / NBLK, hi = n * (k + 1) / NBLK;
        double s = 0.0;
        if (grad_dtype == VF_DTYPE_BF16)
            for (int64_t i = lo; i < hi; i++) {
                double x = (double)vf_bf16_to_f32(gb[i]);
                s += x * x;
            }
        else
            for (int64_t i = lo; i < hi; i++) s += (double)gf[i] * (double)gf[i];
        part[k] = s;
    }
    double s = 0.0;
    for (int k = 0; k < NBLK; k++) s += part[k];
    return s;
}

double vf_cpu_sumsq(const float *grad, int64_t n) { return vf_cpu_sumsq_dt(grad, VF_DTYPE_F32, n); }
