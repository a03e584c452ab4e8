/* rope.cu — rotary position embedding on the CUDA backend, forward and backward. */
#include "kernels/cuda/common.cuh"

/* ------------------------------------------------------------------ RoPE */

/* One thread per slot of a head: slot i < P rotates the pair (2i, 2i+1) by angle[l, i];
 * slot P (odd D only) is the unpaired last element, passed through. In place is fine:
 * a thread reads its pair before writing it, and no other thread touches it. */
template <int BWD>
__global__ void k_rope(bf16 *out, const bf16 *inp, const float *cs, const float *sn, int64_t L, int64_t H,
                       int64_t D, int64_t total)
{
    const int64_t P = D / 2, Q = (D + 1) / 2;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = idx % Q, row = idx / Q; /* row = (b, l, h) */
        const int64_t l = (row / H) % L;
        const bf16 *x = inp + row * D;
        bf16 *y = out + row * D;
        if (i == P) { /* odd D: no partner */
            if (BWD) y[D - 1] = tobf(bf(y[D - 1]) + bf(x[D - 1]));
            else y[D - 1] = x[D - 1];
            continue;
        }
        const float c = cs[l * P + i], s = sn[l * P + i];
        const float x0 = bf(x[2 * i]), x1 = bf(x[2 * i + 1]);
        if (BWD) { /* dinp += R(−θ)·dout */
            y[2 * i] = tobf(bf(y[2 * i]) + (x0 * c + x1 * s));
            y[2 * i + 1] = tobf(bf(y[2 * i + 1]) + (x1 * c - x0 * s));
        } else {
            y[2 * i] = tobf(x0 * c - x1 * s);
            y[2 * i + 1] = tobf(x0 * s + x1 * c);
        }
    }
}

extern "C" void vf_cuda_rope_fwd(vf_backend *be, void *out, const void *inp, const float *cos, const float *sin,
                                 int64_t B, int64_t L, int64_t H, int64_t D)
{
    const int64_t total = B * L * H * ((D + 1) / 2);
    if (total <= 0) return;
    OpScope s(be);
    k_rope<0><<<grid_for(total, 256), 256, 0, s.c->stream>>>((bf16 *)out, (const bf16 *)inp, cos, sin, L, H, D,
                                                             total);
    VF_CUDA_NOTE_LAUNCH(s.c);
}

extern "C" void vf_cuda_rope_bwd(vf_backend *be, void *dinp, const void *dout, const float *cos, const float *sin,
                                 int64_t B, int64_t L, int64_t H, int64_t D)
{
    const int64_t total = B * L * H * ((D + 1) / 2);
    if (total <= 0) return;
    OpScope s(be);
    k_rope<1><<<grid_for(total, 256), 256, 0, s.c->stream>>>((bf16 *)dinp, (const bf16 *)dout, cos, sin, L, H, D,
                                                             total);
    VF_CUDA_NOTE_LAUNCH(s.c);
}
