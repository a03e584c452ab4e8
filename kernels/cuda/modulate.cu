/* modulate.cu — adaLN on the CUDA backend: modulate (x·(1 + scale) + shift), the same after
 * a LayerNorm as one op, and the gated residual (x + gate·y), forward and backward; the
 * backwards' per-sample gradients are deterministic column sums (reduce.cuh). */
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

/* ------------------------------------------------------------------ backwards
 * Every gradient is written (ops.h): dx, dy elementwise, the per-sample sums by colsum. */

struct ModBwdOp { /* dx = dout·(1+scale); s1 = Σ dout (dshift); s2 = Σ dout·x (dscale) */
    bf16 *dx;
    const bf16 *dout, *x, *scale;
    int64_t L, C;
    __device__ void at(int64_t b, int64_t l, int64_t c, float &s1, float &s2) const
    {
        const int64_t i = (b * L + l) * C + c;
        const float g = bf(dout[i]);
        if (dx) dx[i] = tobf(g * (1.0f + bf(scale[b * C + c])));
        s1 += g;
        s2 += g * bf(x[i]);
    }
};

extern "C" void vf_cuda_modulate_bwd(vf_backend *be, void *dx, void *dshift, void *dscale, const void *dout,
                                     const void *x, const void *scale, int64_t B, int64_t L, int64_t C)
{
    OpScope s(be);
    ModBwdOp op{(bf16 *)dx, (const bf16 *)dout, (const bf16 *)x, (const bf16 *)scale, L, C};
    colsum(s.c, op, B, L, C, (bf16 *)dshift, (bf16 *)dscale, false);
}

struct GatedBwdOp { /* dx = dout; dy = dout·gate; s1 = Σ dout·y (dgate) */
    bf16 *dx, *dy;
    const bf16 *dout, *gate, *y;
    int64_t L, C;
    __device__ void at(int64_t b, int64_t l, int64_t c, float &s1, float &s2) const
    {
        const int64_t i = (b * L + l) * C + c;
        const float g = bf(dout[i]);
        if (dx) dx[i] = dout[i];
        if (dy) dy[i] = tobf(g * bf(gate[b * C + c]));
        s1 += g * bf(y[i]);
    }
};

extern "C" void vf_cuda_gated_add_bwd(vf_backend *be, void *dx, void *dgate, void *dy, const void *dout,
                                      const void *gate, const void *y, int64_t B, int64_t L, int64_t C)
{
    OpScope s(be);
    GatedBwdOp op{(bf16 *)dx, (bf16 *)dy, (const bf16 *)dout, (const bf16 *)gate, (const bf16 *)y, L, C};
    colsum(s.c, op, B, L, C, (bf16 *)dgate, NULL, false);
}

/* ------------------------------------------------------------------ LayerNorm + modulate
 * The row kernels are norm.cu's (its LayerNorm with the modulate in place of the affine);
 * the per-sample sums are column sums here, x̂ formed from x and the saved statistics. */

extern "C" void vf_cuda_ln_modulate_fwd(vf_backend *be, void *out, float *mean, float *rstd, const void *x,
                                        const void *shift, const void *scale, int64_t B, int64_t L, int64_t C,
                                        float eps)
{
    OpScope s(be);
    vf_cuda_ln_mod_fwd(s.c, out, mean, rstd, x, shift, scale, B, L, C, eps);
}

struct LnModWOp { /* s1 = Σ dout (dshift); s2 = Σ dout·x̂ (dscale), x̂ = (x − mean)·rstd */
    const bf16 *dout, *x;
    const float *mean, *rstd;
    int64_t L, C;
    __device__ void at(int64_t b, int64_t l, int64_t c, float &s1, float &s2) const
    {
        const int64_t row = b * L + l, i = row * C + c;
        const float g = bf(dout[i]);
        s1 += g;
        s2 += g * ((bf(x[i]) - mean[row]) * rstd[row]);
    }
};

extern "C" void vf_cuda_ln_modulate_bwd(vf_backend *be, void *dx, void *dshift, void *dscale, const void *dout,
                                        const void *x, const float *mean, const float *rstd, const void *scale,
                                        int64_t B, int64_t L, int64_t C, float eps, vf_grad_mode mode)
{
    (void)eps; /* the device forms x̂ from the saved statistics */
    OpScope s(be);
    vf_cuda_ln_mod_dx(s.c, dx, dout, x, mean, rstd, scale, B, L, C, mode == VF_GRAD_ADD);
    if (dshift || dscale)
        colsum(s.c, LnModWOp{(const bf16 *)dout, (const bf16 *)x, mean, rstd, L, C}, B, L, C, (bf16 *)dshift,
               (bf16 *)dscale, false);
}
