/* modulate.cu — adaLN on the CUDA backend: modulate (x·(1 + scale) + shift) and the gated
 * residual (x + gate·y), forward and backward; the backwards' per-sample parameter
 * gradients are deterministic column sums (reduce.cuh). */
#include "kernels/cuda/reduce.cuh"

extern "C" void vf_cuda_modulate_fwd(vf_backend *be, void *out, const void *x, const void *shift,
                                     const void *scale, int64_t B, int64_t L, int64_t C)
{
    OpScope s(be);
    bcast(s.c, 0, (bf16 *)out, (const bf16 *)x, (const bf16 *)shift, (const bf16 *)scale, NULL, B, L, C);
}

extern "C" void vf_cuda_gated_add_fwd(vf_backend *be, void *out, const void *x, const void *gate, const void *y,
                                      int64_t B, int64_t L, int64_t C)
{
    OpScope s(be);
    bcast(s.c, 1, (bf16 *)out, (const bf16 *)x, NULL, (const bf16 *)gate, (const bf16 *)y, B, L, C);
}

/* ------------------------------------------------------------------ backwards */

struct ModBwdOp { /* dx += dout·(1+scale); s1 = Σ dout (dshift); s2 = Σ dout·x (dscale) */
    bf16 *dx;
    const bf16 *dout, *x, *scale;
    int64_t L, C;
    __device__ void at(int64_t b, int64_t l, int64_t c, float &s1, float &s2) const
    {
        const int64_t i = (b * L + l) * C + c;
        const float g = bf(dout[i]);
        if (dx) dx[i] = tobf(bf(dx[i]) + g * (1.0f + bf(scale[b * C + c])));
        s1 += g;
        s2 += g * bf(x[i]);
    }
};

extern "C" void vf_cuda_modulate_bwd(vf_backend *be, void *dx, void *dshift, void *dscale, const void *dout,
                                     const void *x, const void *scale, int64_t B, int64_t L, int64_t C)
{
    OpScope s(be);
    ModBwdOp op{(bf16 *)dx, (const bf16 *)dout, (const bf16 *)x, (const bf16 *)scale, L, C};
    colsum(s.c, op, B, L, C, (bf16 *)dshift, (bf16 *)dscale);
}

struct GatedBwdOp { /* dx += dout; dy += dout·gate; s1 = Σ dout·y (dgate) */
    bf16 *dx, *dy;
    const bf16 *dout, *gate, *y;
    int64_t L, C;
    __device__ void at(int64_t b, int64_t l, int64_t c, float &s1, float &s2) const
    {
        const int64_t i = (b * L + l) * C + c;
        const float g = bf(dout[i]);
        if (dx) dx[i] = tobf(bf(dx[i]) + g);
        if (dy) dy[i] = tobf(bf(dy[i]) + g * bf(gate[b * C + c]));
        s1 += g * bf(y[i]);
    }
};

extern "C" void vf_cuda_gated_add_bwd(vf_backend *be, void *dx, void *dgate, void *dy, const void *dout,
                                      const void *gate, const void *y, int64_t B, int64_t L, int64_t C)
{
    OpScope s(be);
    GatedBwdOp op{(bf16 *)dx, (bf16 *)dy, (const bf16 *)dout, (const bf16 *)gate, (const bf16 *)y, L, C};
    colsum(s.c, op, B, L, C, (bf16 *)dgate, NULL);
}

