/* attention_gemm.cu — attention forward as two cuBLASLt GEMMs around a softmax, for head
 * dims the fused kernels do not take well: cuDNN's SDPA stops at 256 on Hopper and the
 * hand kernels' tiles at 128 (above it they run a generic per-row kernel). The VAE's
 * mid-block attention (one head, 384 wide, over a frame's positions) is the user.
 *
 * Per (b, h) and per block of query rows that fits the backend's scratch partials:
 *   S (rows x Lk, f32) = scale · Q_rows · Kᵀ       cuBLASLt, f32 output
 *   P (rows x Lk, bf16) = softmax(S), lse = max + ln Σ exp(S − max)   (k_softmax_rows)
 *   O_rows (rows x D)   = P · V                     cuBLASLt, bf16 output
 * S and P live in the scratch partials (the memory plan counts the scratch as the
 * backend's own), so the path needs no workspace of its own; the row block shrinks to
 * fit. The sums are f32 with a fixed order (one block per row, a fixed tree), so the
 * same call gives the same bits. P is rounded to bf16 before the second GEMM, as the
 * fused kernels round it before their P·V.
 *
 * Row-major to cuBLASLt's column-major as in matmul.c: S (rows, Lk) = Q·Kᵀ is
 * Sᶜ (Lk x rows) = Kᶜᵀ · Qᶜ; O (rows, D) = P·V is Oᶜ (D x rows) = Vᶜ · Pᶜ. Rows of
 * q/k/v/out of one head are H·D elements apart (BSHD).
 */
#include <math.h>

#include "kernels/cuda/common.cuh"

#define SM_THREADS 256

/* one block per row of S (n columns, row stride ld): P row (bf16, stride ld_p), lse */
__global__ void k_softmax_rows(bf16 *P, int64_t ld_p, float *lse, const float *S, int64_t ld, int64_t n)
{
    __shared__ float red[SM_THREADS / 32];
    const float *s = S + blockIdx.x * ld;
    bf16 *p = P + blockIdx.x * ld_p;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = SM_THREADS / 32;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += SM_THREADS) m = fmaxf(m, s[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int i = 1; i < nw; i++) m = fmaxf(m, red[i]);
    __syncthreads();
    float sum = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += SM_THREADS) sum += __expf(s[j] - m);
    sum = warp_sum(sum);
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    sum = 0.f;
    for (int i = 0; i < nw; i++) sum += red[i];
    const float inv = 1.f / sum;
    for (int64_t j = threadIdx.x; j < n; j += SM_THREADS) p[j] = tobf(__expf(s[j] - m) * inv);
    if (lse && threadIdx.x == 0) lse[blockIdx.x] = m + logf(sum);
}

extern "C" int vf_cuda_attention_gemm_fwd(vf_cuda_ctx *c, void *out, float *lse, const void *q, const void *k,
                                          const void *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D,
                                          float scale)
{
    /* S f32 and P bf16 of one row block side by side in the partials */
    const int64_t per_row = Lk * (4 + 2), cap = (int64_t)vf_cuda_partials_bytes(c) / per_row;
    if (B <= 0 || Lq <= 0 || Lk <= 0 || cap < 1) return VF_ENOTFOUND;
    int64_t rows = cap < Lq ? cap : Lq;
    if (rows > 65535) rows = 65535; /* one block per row */
    float *S = vf_cuda_partials(c);
    bf16 *P = (bf16 *)(S + rows * Lk);
    const int64_t ld = H * D; /* one head's rows in BSHD */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const bf16 *qh = (const bf16 *)q + (b * Lq * H + h) * D;
            const bf16 *kh = (const bf16 *)k + (b * Lk * H + h) * D;
            const bf16 *vh = (const bf16 *)v + (b * Lk * H + h) * D;
            bf16 *oh = (bf16 *)out + (b * Lq * H + h) * D;
            for (int64_t r0 = 0; r0 < Lq; r0 += rows) {
                const int64_t n = Lq - r0 < rows ? Lq - r0 : rows;
                int rc = vf_cuda_lt_gemm(c, 1, 0, Lk, n, D, scale, kh, ld, qh + r0 * ld, ld, S, Lk, 1);
                if (rc) return rc;
                k_softmax_rows<<<(unsigned)n, SM_THREADS, 0, c->stream>>>(P, Lk, lse ? lse + (b * H + h) * Lq + r0 : NULL,
                                                                         S, Lk, Lk);
                VF_CUDA_NOTE_LAUNCH(c);
                rc = vf_cuda_lt_gemm(c, 0, 0, D, n, Lk, 1.0f, vh, ld, P, Lk, oh + r0 * ld, ld, 0);
                if (rc) return rc;
            }
        }
    return 0;
}
