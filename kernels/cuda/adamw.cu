/* adamw.cu — the optimizer ops of the CUDA backend: the fused AdamW step and the
 * gradient sum of squares for global-norm clipping.
 *
 * AdamW reads the bf16 gradient and the f32 master / moments, and writes the f32 state
 * and the bf16 compute copy of the weights in the same pass; its per-element arithmetic
 * is f64, term for term the CPU reference's (torch.optim.AdamW), so GPU and CPU
 * optimizer shards agree to the last f32 bit up to the rounding of the bf16 gradient.
 * The sum of squares is f64 like the CPU's: fixed blocks, a fixed tree (reduce.cuh).
 */
#include "kernels/cuda/reduce.cuh"

/* ------------------------------------------------------------------ AdamW */

struct AdamArgs {
    double b1, b2, gsc, step, sbc2, decay, eps;
};

__global__ void k_adamw(float *master, float *m, float *v, const bf16 *grad, bf16 *wout, int64_t n, AdamArgs a)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double g = (double)bf(grad[i]) * a.gsc;
        double mi = a.b1 * (double)m[i] + (1.0 - a.b1) * g;
        double vi = a.b2 * (double)v[i] + (1.0 - a.b2) * g * g;
        float mf = (float)mi, vf = (float)vi;
        double p = (double)master[i] * a.decay;
        p -= a.step * (double)mf / (sqrt((double)vf) / a.sbc2 + a.eps);
        m[i] = mf;
        v[i] = vf;
        master[i] = (float)p;
        if (wout) wout[i] = tobf((float)p);
    }
}

extern "C" void vf_cuda_adamw(vf_backend *be, float *master, float *m, float *v, const void *grad,
                              void *weights_out, int64_t n, float lr, float beta1, float beta2, float eps,
                              float weight_decay, float grad_scale, int64_t t)
{
    if (n <= 0) return;
    OpScope s(be);
    if (t < 1) {
        vf_cuda_note_msg(s.c, __FILE__, __LINE__, "adamw: step t = %lld (must be >= 1)", (long long)t);
        return;
    }
    AdamArgs a;
    a.b1 = beta1;
    a.b2 = beta2;
    a.gsc = grad_scale;
    const double bc1 = 1.0 - pow((double)beta1, (double)t), bc2 = 1.0 - pow((double)beta2, (double)t);
    a.step = (double)lr / bc1;
    a.sbc2 = sqrt(bc2);
    a.decay = 1.0 - (double)lr * (double)weight_decay;
    a.eps = eps;
    k_adamw<<<grid_for(n, 256, (int64_t)s.c->sm_count * 16), 256, 0, s.c->stream>>>(
        master, m, v, (const bf16 *)grad, (bf16 *)weights_out, n, a);
    VF_CUDA_NOTE_LAUNCH(s.c);
}

extern "C" double vf_cuda_sumsq(vf_backend *be, const void *grad, int64_t n)
{
    if (n <= 0) return 0.0;
    OpScope s(be);
    double *part = (double *)vf_cuda_partials(s.c);
    k_red<0><<<VF_CUDA_RED_BLOCKS, RED_THREADS, 0, s.c->stream>>>(part, NULL, (const bf16 *)grad, NULL, n, 0.0);
    VF_CUDA_NOTE_LAUNCH(s.c);
    return red_finish(s.c, part);
}
