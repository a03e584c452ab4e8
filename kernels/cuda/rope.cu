/* rope.cu — rotary position embedding on the CUDA backend, forward and backward, alone and
 * after an RMSNorm of the whole row as one op (the DiT's q and k). The backwards write
 * their input gradient (ops.h). */
#include "kernels/cuda/reduce.cuh"

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
            y[D - 1] = x[D - 1];
            continue;
        }
        const float c = cs[l * P + i], s = sn[l * P + i];
        const float x0 = bf(x[2 * i]), x1 = bf(x[2 * i + 1]);
        if (BWD) { /* dinp = R(−θ)·dout */
            y[2 * i] = tobf(x0 * c + x1 * s);
            y[2 * i + 1] = tobf(x1 * c - x0 * s);
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

/* ------------------------------------------------------------------ RMSNorm + RoPE
 * One warp per row of C = H·D (8 rows a block), the statistics by reduce.cuh's warp sums.
 * VEC (C % 8 == 0, D even, 16-byte aligned rows): a lane takes 8 elements at a time,
 * four whole pairs (a pair never straddles a head: D is even); otherwise a lane takes one
 * pair (or a head's unpaired last element) at a time. */

#define RR_ROWS 8

/* the rotation R(sign·θ) of pair (a, b) by angle (c, s) */
__device__ __forceinline__ void rot(float &a, float &b, float c, float s, float sign)
{
    const float a0 = a, b0 = b;
    a = a0 * c - sign * b0 * s;
    b = sign * a0 * s + b0 * c;
}

template <bool VEC>
__global__ void k_rms_rope_fwd(bf16 *out, float *rstd, const bf16 *inp, const bf16 *w, const float *cs,
                               const float *sn, int64_t N, int64_t L, int64_t H, int64_t D, float eps)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * RR_ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const int64_t C = H * D, P = D / 2, Q = (D + 1) / 2;
    const bf16 *x = inp + row * C;
    bf16 *o = out + row * C;
    const float *cr = cs + (row % L) * P, *sr = sn + (row % L) * P;
    float mu, r;
    warp_row_stats<1, VEC>(x, C, eps, mu, r);
    if (VEC) {
        for (int64_t c = lane * 8; c < C; c += 256) {
            float v[8], g[8];
            ld8(x + c, v);
            if (w) ld8(w + c, g);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int64_t j = c + 2 * k, i = (j % D) / 2;
                float a = v[2 * k] * r * (w ? g[2 * k] : 1.0f), b = v[2 * k + 1] * r * (w ? g[2 * k + 1] : 1.0f);
                rot(a, b, cr[i], sr[i], 1.0f);
                v[2 * k] = a, v[2 * k + 1] = b;
            }
            st8(o + c, v);
        }
    } else {
        for (int64_t p = lane; p < H * Q; p += 32) {
            const int64_t h = p / Q, i = p % Q, j = h * D + 2 * i;
            float a = bf(x[j]) * r * (w ? bf(w[j]) : 1.0f);
            if (i == P) { /* odd D: the head's last element, unrotated */
                o[j] = tobf(a);
                continue;
            }
            float b = bf(x[j + 1]) * r * (w ? bf(w[j + 1]) : 1.0f);
            rot(a, b, cr[i], sr[i], 1.0f);
            o[j] = tobf(a), o[j + 1] = tobf(b);
        }
    }
    if (lane == 0 && rstd) rstd[row] = r;
}

/* dinp = rstd·(u·w − x̂·mean(u·w·x̂)), u = R(−θ)·dout, x̂ = x·rstd: two passes over the row,
 * u formed in each */
template <bool VEC>
__global__ void k_rms_rope_bwd(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *w, const float *rstd,
                               const float *cs, const float *sn, int64_t N, int64_t L, int64_t H, int64_t D)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * RR_ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const int64_t C = H * D, P = D / 2, Q = (D + 1) / 2;
    const bf16 *x = inp + row * C, *gr = dout + row * C;
    bf16 *d = dinp + row * C;
    const float *cr = cs + (row % L) * P, *sr = sn + (row % L) * P;
    const float r = rstd[row];
    float m2 = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        if (VEC) {
            for (int64_t c = lane * 8; c < C; c += 256) {
                float u[8], xv[8], g[8];
                ld8(gr + c, u);
                ld8(x + c, xv);
                if (w) ld8(w + c, g);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int64_t i = ((c + 2 * k) % D) / 2;
                    rot(u[2 * k], u[2 * k + 1], cr[i], sr[i], -1.0f);
                }
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const float dxh = u[j] * (w ? g[j] : 1.0f), xh = xv[j] * r;
                    if (pass == 0) m2 += dxh * xh;
                    else u[j] = r * (dxh - xh * m2);
                }
                if (pass == 1) st8(d + c, u);
            }
        } else {
            for (int64_t p = lane; p < H * Q; p += 32) {
                const int64_t h = p / Q, i = p % Q, j = h * D + 2 * i, n = i == P ? 1 : 2;
                float u[2] = {bf(gr[j]), n == 2 ? bf(gr[j + 1]) : 0.0f};
                if (n == 2) rot(u[0], u[1], cr[i], sr[i], -1.0f);
                for (int k = 0; k < n; k++) {
                    const float dxh = u[k] * (w ? bf(w[j + k]) : 1.0f), xh = bf(x[j + k]) * r;
                    if (pass == 0) m2 += dxh * xh;
                    else d[j + k] = tobf(r * (dxh - xh * m2));
                }
            }
        }
        if (pass == 0) m2 = warp_sum(m2) / (float)C;
    }
}

/* dw (C) += Σ_rows u·x̂ (the gain's gradient), u formed per element from its pair */
struct RopeWOp {
    const bf16 *dout, *x;
    const float *rstd, *cs, *sn;
    int64_t L, D, C;
    __device__ void at(int64_t b, int64_t row, int64_t c, float &s1, float &s2) const
    {
        const int64_t j = c % D, i = j / 2, P = D / 2, l = row % L;
        const bf16 *g = dout + row * C;
        float u = bf(g[c]);
        if (i < P) {
            const float co = cs[l * P + i], si = sn[l * P + i];
            u = (j & 1) ? bf(g[c]) * co - bf(g[c - 1]) * si : bf(g[c]) * co + bf(g[c + 1]) * si;
        }
        s1 += u * (bf(x[row * C + c]) * rstd[row]);
    }
};

static bool rr_vec(int64_t H, int64_t D, const void *a, const void *b, const void *c)
{
    return (H * D) % 8 == 0 && D % 2 == 0 && aligned16(a) && aligned16(b) && (!c || aligned16(c));
}

extern "C" void vf_cuda_rmsnorm_rope_fwd(vf_backend *be, void *out, float *rstd, const void *inp, const void *w,
                                         const float *cos, const float *sin, int64_t B, int64_t L, int64_t H,
                                         int64_t D, float eps)
{
    const int64_t N = B * L;
    if (N <= 0 || H * D <= 0) return;
    OpScope s(be);
    const unsigned grid = (unsigned)((N + RR_ROWS - 1) / RR_ROWS);
    if (rr_vec(H, D, out, inp, w))
        k_rms_rope_fwd<true><<<grid, 32 * RR_ROWS, 0, s.c->stream>>>((bf16 *)out, rstd, (const bf16 *)inp,
                                                                     (const bf16 *)w, cos, sin, N, L, H, D, eps);
    else
        k_rms_rope_fwd<false><<<grid, 32 * RR_ROWS, 0, s.c->stream>>>((bf16 *)out, rstd, (const bf16 *)inp,
                                                                      (const bf16 *)w, cos, sin, N, L, H, D, eps);
    VF_CUDA_NOTE_LAUNCH(s.c);
}

extern "C" void vf_cuda_rmsnorm_rope_bwd(vf_backend *be, void *dinp, void *dw, const void *dout, const void *inp,
                                         const void *w, const float *rstd, const float *cos, const float *sin,
                                         int64_t B, int64_t L, int64_t H, int64_t D)
{
    const int64_t N = B * L, C = H * D;
    if (N <= 0 || C <= 0) return;
    OpScope s(be);
    const unsigned grid = (unsigned)((N + RR_ROWS - 1) / RR_ROWS);
    if (dinp) {
        if (rr_vec(H, D, dinp, dout, w) && aligned16(inp))
            k_rms_rope_bwd<true><<<grid, 32 * RR_ROWS, 0, s.c->stream>>>(
                (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, rstd, cos, sin, N, L, H, D);
        else
            k_rms_rope_bwd<false><<<grid, 32 * RR_ROWS, 0, s.c->stream>>>(
                (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w, rstd, cos, sin, N, L, H, D);
        VF_CUDA_NOTE_LAUNCH(s.c);
    }
    if (dw)
        colsum(s.c, RopeWOp{(const bf16 *)dout, (const bf16 *)inp, rstd, cos, sin, L, D, C}, 1, N, C, (bf16 *)dw, NULL,
               true);
}
