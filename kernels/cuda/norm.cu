/* norm.cu — LayerNorm and RMSNorm over the last dim (forward, backward), the LayerNorm of
 * adaLN with its modulate fused (modulate.cu's ln_modulate ops run these kernels), and the
 * VAE's channel RMSNorm over a channel-first tensor, on CUDA.
 *
 * One warp per row: the row is read in 8-element (16-byte) pieces when aligned, the
 * statistics are f32 warp sums (xor butterflies: a fixed order), the variance is the
 * mean-shifted two-pass one as in the CPU reference, and mean / rstd are saved in f32.
 * Rows are read two or three times; at DiT widths (≤ 5120 bf16 = 10 KB) the re-reads
 * hit L1/L2, so the kernels run at the speed of one pass over DRAM.
 * Parameter gradients (sums over rows) go through the deterministic column sums of
 * reduce.cuh.
 */
#include "kernels/cuda/reduce.cuh"

#define ROWS_PER_BLOCK 8

/* ------------------------------------------------------------------ forward */

/* RMS = 0: LayerNorm (mean saved); RMS = 1: RMSNorm (no mean). MOD = 0: the affine
 * y·w + bias (each optional); MOD = 1: adaLN's modulate y·(1 + scale[b]) + shift[b] with
 * scale in w and shift in bias, per sample b = row / L. */
template <int RMS, bool VEC, int MOD>
__global__ void k_norm_fwd(bf16 *out, float *mean, float *rstd, const bf16 *inp, const bf16 *w, const bf16 *bias,
                           int64_t N, int64_t L, int64_t C, float eps)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= N) return;
    const bf16 *x = inp + row * C;
    bf16 *o = out + row * C;
    if (MOD) {
        if (w) w += (row / L) * C;
        if (bias) bias += (row / L) * C;
    }
    float mu, r;
    warp_row_stats<RMS, VEC>(x, C, eps, mu, r);
    if (VEC) {
        for (int64_t c = lane * 8; c < C; c += 256) {
            float v[8], g[8], b[8];
            ld8(x + c, v);
            if (w) ld8(w + c, g);
            if (bias) ld8(bias + c, b);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float y = (v[j] - mu) * r;
                if (w) y *= MOD ? 1.0f + g[j] : g[j];
                if (bias) y += b[j];
                v[j] = y;
            }
            st8(o + c, v);
        }
    } else {
        for (int64_t c = lane; c < C; c += 32) {
            float y = (bf(x[c]) - mu) * r;
            if (w) y *= MOD ? 1.0f + bf(w[c]) : bf(w[c]);
            if (bias) y += bf(bias[c]);
            o[c] = tobf(y);
        }
    }
    if (lane == 0) {
        if (mean) mean[row] = mu;
        if (rstd) rstd[row] = r;
    }
}

template <int RMS, int MOD>
static void norm_fwd(vf_cuda_ctx *c, void *out, float *mean, float *rstd, const void *inp, const void *w,
                     const void *b, int64_t N, int64_t L, int64_t C, float eps)
{
    if (N <= 0 || C <= 0) return;
    const bool vec = C % 8 == 0 && aligned16(out) && aligned16(inp) && (!w || aligned16(w)) && (!b || aligned16(b));
    const unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    if (vec)
        k_norm_fwd<RMS, true, MOD><<<grid, 32 * ROWS_PER_BLOCK, 0, c->stream>>>(
            (bf16 *)out, mean, rstd, (const bf16 *)inp, (const bf16 *)w, (const bf16 *)b, N, L, C, eps);
    else
        k_norm_fwd<RMS, false, MOD><<<grid, 32 * ROWS_PER_BLOCK, 0, c->stream>>>(
            (bf16 *)out, mean, rstd, (const bf16 *)inp, (const bf16 *)w, (const bf16 *)b, N, L, C, eps);
    VF_CUDA_NOTE_LAUNCH(c);
}

extern "C" void vf_cuda_layernorm_fwd(vf_backend *be, void *out, float *mean, float *rstd, const void *inp,
                                      const void *w, const void *b, int64_t N, int64_t C, float eps)
{
    OpScope s(be);
    norm_fwd<0, 0>(s.c, out, mean, rstd, inp, w, b, N, 1, C, eps);
}

extern "C" void vf_cuda_rmsnorm_fwd(vf_backend *be, void *out, float *rstd, const void *inp, const void *w,
                                    int64_t N, int64_t C, float eps)
{
    OpScope s(be);
    norm_fwd<1, 0>(s.c, out, NULL, rstd, inp, w, NULL, N, 1, C, eps);
}

extern "C" void vf_cuda_ln_mod_fwd(vf_cuda_ctx *c, void *out, float *mean, float *rstd, const void *x,
                                   const void *shift, const void *scale, int64_t B, int64_t L, int64_t C, float eps)
{
    norm_fwd<0, 1>(c, out, mean, rstd, x, scale, shift, B * L, L, C, eps);
}

/* ------------------------------------------------------------------ backward (dinp) */

/* dinp = or += (ACC) rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)), dx̂ = dout·w (LayerNorm; MOD:
 * dout·(1 + scale[b]) with scale in w); rstd·(dx̂ − x̂·mean(dx̂·x̂)) (RMSNorm, x̂ = x·rstd) */
template <int RMS, bool VEC, int MOD, bool ACC>
__global__ void k_norm_bwd(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *w, const float *mean,
                           const float *rstd, int64_t N, int64_t L, int64_t C)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= N) return;
    const bf16 *x = inp + row * C, *g = dout + row * C;
    bf16 *d = dinp + row * C;
    if (MOD && w) w += (row / L) * C;
    const float mu = RMS ? 0.0f : mean[row], r = rstd[row];
    float m1 = 0.0f, m2 = 0.0f;
    if (VEC) {
        for (int64_t c = lane * 8; c < C; c += 256) {
            float xv[8], gv[8], wv[8];
            ld8(x + c, xv);
            ld8(g + c, gv);
            if (w) ld8(w + c, wv);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float dxh = gv[j] * (w ? (MOD ? 1.0f + wv[j] : wv[j]) : 1.0f);
                m1 += dxh;
                m2 += dxh * (xv[j] - mu) * r;
            }
        }
    } else {
        for (int64_t c = lane; c < C; c += 32) {
            const float dxh = bf(g[c]) * (w ? (MOD ? 1.0f + bf(w[c]) : bf(w[c])) : 1.0f);
            m1 += dxh;
            m2 += dxh * (bf(x[c]) - mu) * r;
        }
    }
    m1 = RMS ? 0.0f : warp_sum(m1) / (float)C;
    m2 = warp_sum(m2) / (float)C;
    if (VEC) {
        for (int64_t c = lane * 8; c < C; c += 256) {
            float xv[8], gv[8], wv[8], dv[8];
            ld8(x + c, xv);
            ld8(g + c, gv);
            if (ACC) ld8(d + c, dv);
            if (w) ld8(w + c, wv);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float dxh = gv[j] * (w ? (MOD ? 1.0f + wv[j] : wv[j]) : 1.0f), xh = (xv[j] - mu) * r;
                const float v = r * (dxh - m1 - xh * m2);
                dv[j] = ACC ? dv[j] + v : v;
            }
            st8(d + c, dv);
        }
    } else {
        for (int64_t c = lane; c < C; c += 32) {
            const float dxh = bf(g[c]) * (w ? (MOD ? 1.0f + bf(w[c]) : bf(w[c])) : 1.0f), xh = (bf(x[c]) - mu) * r;
            const float v = r * (dxh - m1 - xh * m2);
            d[c] = tobf(ACC ? bf(d[c]) + v : v);
        }
    }
}

template <int RMS, int MOD, bool ACC>
static void norm_bwd(vf_cuda_ctx *c, void *dinp, const void *dout, const void *inp, const void *w, const float *mean,
                     const float *rstd, int64_t N, int64_t L, int64_t C)
{
    if (!dinp || N <= 0 || C <= 0) return;
    const bool vec = C % 8 == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && (!w || aligned16(w));
    const unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    if (vec)
        k_norm_bwd<RMS, true, MOD, ACC><<<grid, 32 * ROWS_PER_BLOCK, 0, c->stream>>>(
            (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, mean, rstd, N, L, C);
    else
        k_norm_bwd<RMS, false, MOD, ACC><<<grid, 32 * ROWS_PER_BLOCK, 0, c->stream>>>(
            (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, mean, rstd, N, L, C);
    VF_CUDA_NOTE_LAUNCH(c);
}

/* dinp accumulates (ops.h: the residual's skip path already holds its share) */
extern "C" void vf_cuda_layernorm_bwd(vf_backend *be, void *dinp, void *dw, void *db, const void *dout,
                                      const void *inp, const void *w, const float *mean, const float *rstd,
                                      int64_t N, int64_t C)
{
    OpScope s(be);
    norm_bwd<0, 0, true>(s.c, dinp, dout, inp, w, mean, rstd, N, 1, C);
    if (dw || db) vf_cuda_norm_wgrad(s.c, dw, db, dout, inp, mean, rstd, N, C);
}

/* dinp written (ops.h) */
extern "C" void vf_cuda_rmsnorm_bwd(vf_backend *be, void *dinp, void *dw, const void *dout, const void *inp,
                                    const void *w, const float *rstd, int64_t N, int64_t C)
{
    OpScope s(be);
    norm_bwd<1, 0, false>(s.c, dinp, dout, inp, w, NULL, rstd, N, 1, C);
    if (dw) vf_cuda_norm_wgrad(s.c, dw, NULL, dout, inp, NULL, rstd, N, C);
}

extern "C" void vf_cuda_ln_mod_dx(vf_cuda_ctx *c, void *dx, const void *dout, const void *x, const float *mean,
                                  const float *rstd, const void *scale, int64_t B, int64_t L, int64_t C, bool acc)
{
    if (acc) norm_bwd<0, 1, true>(c, dx, dout, x, scale, mean, rstd, B * L, L, C);
    else norm_bwd<0, 1, false>(c, dx, dout, x, scale, mean, rstd, B * L, L, C);
}

/* ------------------------------------------------------------------ channel RMSNorm */

/* (B, C, S): one thread per position (b, s), channels walked in order with stride S, so
 * a warp reads 32 consecutive positions of one channel (coalesced). */
__global__ void k_rmsnorm_ch(bf16 *out, const bf16 *inp, const bf16 *w, int64_t B, int64_t C, int64_t S, float eps)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < B * S; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / S, s = i % S;
        const bf16 *x = inp + b * C * S + s;
        bf16 *o = out + b * C * S + s;
        float ss = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            const float v = bf(x[c * S]);
            ss += v * v;
        }
        const float r = rsqrtf(ss / (float)C + eps);
        for (int64_t c = 0; c < C; c++) o[c * S] = tobf(bf(x[c * S]) * r * (w ? bf(w[c]) : 1.0f));
    }
}

extern "C" void vf_cuda_rmsnorm_ch_fwd(vf_backend *be, void *out, const void *inp, const void *w, int64_t B,
                                       int64_t C, int64_t S, float eps)
{
    if (B * S <= 0 || C <= 0) return;
    OpScope s(be);
    k_rmsnorm_ch<<<grid_for(B * S, 256), 256, 0, s.c->stream>>>((bf16 *)out, (const bf16 *)inp, (const bf16 *)w,
                                                                  B, C, S, eps);
    VF_CUDA_NOTE_LAUNCH(s.c);
}

/* the parameter gradients: column sums (reduce.cuh) */
struct NormWOp { /* s1 = Σ dout·x̂ (dw), s2 = Σ dout (db); x̂ = (x − mean)·rstd, mean NULL for RMSNorm */
    const bf16 *dout, *x;
    const float *mean, *rstd;
    int64_t C;
    __device__ void at(int64_t b, int64_t l, int64_t c, float &s1, float &s2) const
    {
        const int64_t i = l * C + c;
        const float g = bf(dout[i]);
        const float xh = (bf(x[i]) - (mean ? mean[l] : 0.0f)) * rstd[l];
        s1 += g * xh;
        s2 += g;
    }
};

extern "C" void vf_cuda_norm_wgrad(vf_cuda_ctx *c, void *dw, void *db, const void *dout, const void *x,
                                   const float *mean, const float *rstd, int64_t N, int64_t C)
{
    colsum(c, NormWOp{(const bf16 *)dout, (const bf16 *)x, mean, rstd, C}, 1, N, C, (bf16 *)dw, (bf16 *)db, true);
}
