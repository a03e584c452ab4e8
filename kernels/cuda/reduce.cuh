/* reduce.cuh — the deterministic reductions several CUDA op families share (header-only
 * templates, included by modulate.cu, matmul.cu, norm.cu, rope.cu, embed_loss.cu,
 * adamw.cu): column sums over rows with their broadcast forward partner, one warp's row
 * statistics, and f64 block sums.
 *
 * Deterministic without atomics: a column sum over the L rows of (B, L, C) runs in two
 * launches. The first cuts the rows into `nch` fixed chunks (a function of the shape
 * and the device's SM count only); a block sums 32 columns of one chunk with 8 row
 * lanes, each lane walking its rows in order, and folds the 8 lanes in lane order into
 * one f32 partial per (chunk, column) in the scratch area. The second adds the chunks'
 * partials in chunk order and writes the result, or adds it, once into the bf16
 * gradient. The same elements, visited once, also produce the elementwise gradients
 * (dx, dy), so a backward is one pass over its inputs.
 *
 * mse / sumsq return f64 like the CPU: 256 fixed blocks (the CPU's split of [0, n)),
 * each reduced by a fixed tree in f64, the 256 partials added on the host in order.
 */
#ifndef VF_CUDA_REDUCE_CUH
#define VF_CUDA_REDUCE_CUH
#include "kernels/cuda/common.cuh"

/* ------------------------------------------------------------------ column sums */

#define CS_COLS 32
#define CS_LANES 8

/* Op: __device__ void at(int64_t b, int64_t l, int64_t c, float &s1, float &s2)
 * accumulates the contributions of element (b, l, c) (and may write elementwise
 * gradients); NS = number of sums used (1 or 2). */
template <class Op>
__global__ void k_colsum_part(Op op, int64_t L, int64_t C, int nch, float *part)
{
    __shared__ float sh[2][CS_LANES][CS_COLS];
    const int64_t c = (int64_t)blockIdx.x * CS_COLS + threadIdx.x;
    const int64_t b = blockIdx.z;
    const int ch = blockIdx.y;
    const int64_t l0 = L * ch / nch, l1 = L * (ch + 1) / nch;
    float s1 = 0.0f, s2 = 0.0f;
    if (c < C)
        for (int64_t l = l0 + threadIdx.y; l < l1; l += CS_LANES) op.at(b, l, c, s1, s2);
    sh[0][threadIdx.y][threadIdx.x] = s1;
    sh[1][threadIdx.y][threadIdx.x] = s2;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float a1 = 0.0f, a2 = 0.0f;
#pragma unroll
        for (int y = 0; y < CS_LANES; y++) {
            a1 += sh[0][y][threadIdx.x];
            a2 += sh[1][y][threadIdx.x];
        }
        float *p = part + (((int64_t)b * nch + ch) * C + c) * 2;
        p[0] = a1;
        p[1] = a2;
    }
}

/* out1/out2 (B, C) bf16 (either NULL) = or += (acc) the chunk sums, in chunk order (a
 * template only so that every file including this header may leave it unused) */
template <int UNUSED = 0>
__global__ void k_colsum_fin(const float *part, int64_t B, int64_t C, int nch, bf16 *out1, bf16 *out2, bool acc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < B * C; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / C, c = i % C;
        float a1 = 0.0f, a2 = 0.0f;
        for (int ch = 0; ch < nch; ch++) {
            const float *p = part + (((int64_t)b * nch + ch) * C + c) * 2;
            a1 += p[0];
            a2 += p[1];
        }
        if (out1) out1[i] = tobf(acc ? bf(out1[i]) + a1 : a1);
        if (out2) out2[i] = tobf(acc ? bf(out2[i]) + a2 : a2);
    }
}

/* Runs both launches (caller holds the op bracket). acc: add the sums to out1/out2
 * (parameter gradients) or write them (ops.h). */
template <class Op>
static inline void colsum(vf_cuda_ctx *c, Op op, int64_t B, int64_t L, int64_t C, bf16 *out1, bf16 *out2, bool acc)
{
    if (B <= 0 || C <= 0) return;
    const int64_t cblk = (C + CS_COLS - 1) / CS_COLS;
    int64_t nch = ((int64_t)c->sm_count * 4 + cblk * B - 1) / (cblk * B); /* ~4 blocks per SM */
    const int64_t maxch = (L + CS_LANES * 4 - 1) / (CS_LANES * 4);       /* >= 32 rows per chunk */
    if (nch > maxch) nch = maxch;
    const int64_t room = (int64_t)(vf_cuda_partials_bytes(c) / (2 * sizeof(float) * (size_t)(B * C)));
    if (nch > room) nch = room;
    if (nch > 65535) nch = 65535;
    if (nch < 1) {
        vf_cuda_note_msg(c, __FILE__, __LINE__,
                         "column sum of (%lld, %lld, %lld): the partial sums need more than the %zu bytes of "
                         "scratch (raise VFLOW_CUDA_SCRATCH_MB)",
                         (long long)B, (long long)L, (long long)C, vf_cuda_partials_bytes(c));
        return;
    }
    if (B > 65535) {
        vf_cuda_note_msg(c, __FILE__, __LINE__, "column sum: batch %lld over 65535", (long long)B);
        return;
    }
    float *part = vf_cuda_partials(c);
    dim3 grid((unsigned)cblk, (unsigned)nch, (unsigned)B), block(CS_COLS, CS_LANES);
    k_colsum_part<Op><<<grid, block, 0, c->stream>>>(op, L, C, (int)nch, part);
    VF_CUDA_NOTE_LAUNCH(c);
    if (out1 || out2) {
        k_colsum_fin<0><<<grid_for(B * C, 256), 256, 0, c->stream>>>(part, B, C, (int)nch, out1, out2, acc);
        VF_CUDA_NOTE_LAUNCH(c);
    }
}

/* ------------------------------------------------------------------ row statistics */

/* One warp's statistics of a row of C (norm.cu, and the fused ops that hold a norm):
 * mean (LayerNorm; 0 for RMSNorm) and rstd = 1/sqrt(var + eps), f32 warp sums (xor
 * butterflies: a fixed order), the variance two-pass and mean-shifted as in the CPU
 * reference. VEC: 16-byte loads (C % 8 == 0 and x aligned). Every lane gets both. */
template <int RMS, bool VEC>
__device__ __forceinline__ void warp_row_stats(const bf16 *x, int64_t C, float eps, float &mu, float &r)
{
    const int lane = threadIdx.x & 31;
    mu = 0.0f;
    if (!RMS) {
        float s = 0.0f;
        if (VEC) {
            for (int64_t c = lane * 8; c < C; c += 256) {
                float v[8];
                ld8(x + c, v);
#pragma unroll
                for (int j = 0; j < 8; j++) s += v[j];
            }
        } else {
            for (int64_t c = lane; c < C; c += 32) s += bf(x[c]);
        }
        mu = warp_sum(s) / (float)C;
    }
    float ss = 0.0f;
    if (VEC) {
        for (int64_t c = lane * 8; c < C; c += 256) {
            float v[8];
            ld8(x + c, v);
#pragma unroll
            for (int j = 0; j < 8; j++) ss += (v[j] - mu) * (v[j] - mu);
        }
    } else {
        for (int64_t c = lane; c < C; c += 32) ss += (bf(x[c]) - mu) * (bf(x[c]) - mu);
    }
    r = rsqrtf(warp_sum(ss) / (float)C + eps);
}

/* ------------------------------------------------------------------ broadcast forwards */

/* out (B, L, C) = x·(1 + scale[b]) + shift[b] (scale/shift may be NULL = 0);
 * GATED: out = x + gate[b]·y (gate in `scale`). out may alias x. */
template <int GATED>
__global__ void k_bcast(bf16 *out, const bf16 *x, const bf16 *shift, const bf16 *scale, const bf16 *y, int64_t L,
                        int64_t C, int64_t n, bool vec)
{
    const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, nth = (int64_t)gridDim.x * blockDim.x;
    if (vec) { /* C % 8 == 0: an 8-chunk never crosses a row */
        for (int64_t i = tid * 8; i < n; i += nth * 8) {
            const int64_t c = i % C, b = i / (L * C);
            float xv[8], s[8], t[8];
            ld8(x + i, xv);
            if (GATED) {
                ld8(scale + b * C + c, s);
                ld8(y + i, t);
#pragma unroll
                for (int j = 0; j < 8; j++) xv[j] += s[j] * t[j];
            } else {
                if (scale) {
                    ld8(scale + b * C + c, s);
#pragma unroll
                    for (int j = 0; j < 8; j++) xv[j] *= 1.0f + s[j];
                }
                if (shift) {
                    ld8(shift + b * C + c, t);
#pragma unroll
                    for (int j = 0; j < 8; j++) xv[j] += t[j];
                }
            }
            st8(out + i, xv);
        }
        return;
    }
    for (int64_t i = tid; i < n; i += nth) {
        const int64_t c = i % C, b = i / (L * C);
        float v = bf(x[i]);
        if (GATED) {
            v += bf(scale[b * C + c]) * bf(y[i]);
        } else {
            if (scale) v *= 1.0f + bf(scale[b * C + c]);
            if (shift) v += bf(shift[b * C + c]);
        }
        out[i] = tobf(v);
    }
}

static inline bool al16(const void *p) { return !p || aligned16(p); }

static inline void bcast(vf_cuda_ctx *c, int gated, bf16 *out, const bf16 *x, const bf16 *shift, const bf16 *scale,
                  const bf16 *y, int64_t B, int64_t L, int64_t C)
{
    const int64_t n = B * L * C;
    if (n <= 0) return;
    const bool vec = C % 8 == 0 && al16(out) && al16(x) && al16(shift) && al16(scale) && al16(y);
    const unsigned g = grid_for(vec ? n / 8 : n, 256, (int64_t)c->sm_count * 16);
    if (gated) k_bcast<1><<<g, 256, 0, c->stream>>>(out, x, NULL, scale, y, L, C, n, vec);
    else k_bcast<0><<<g, 256, 0, c->stream>>>(out, x, shift, scale, NULL, L, C, n, vec);
    VF_CUDA_NOTE_LAUNCH(c);
}

/* ------------------------------------------------------------------ f64 block sums (mse, sumsq) */

#define RED_THREADS 256

/* block k of VF_CUDA_RED_BLOCKS sums [n·k/256, n·(k+1)/256): threads stride, then a
 * fixed f64 tree. MSE: also dpred += gs·(pred − target). */
template <int MSE>
__global__ void k_red(double *part, bf16 *dpred, const bf16 *pred, const bf16 *target, int64_t n, double gs)
{
    __shared__ double sh[RED_THREADS];
    const int k = blockIdx.x;
    const int64_t lo = n * k / VF_CUDA_RED_BLOCKS, hi = n * (k + 1) / VF_CUDA_RED_BLOCKS;
    double s = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += RED_THREADS) {
        double d = (double)bf(pred[i]);
        if (MSE) {
            d -= (double)bf(target[i]);
            if (dpred) dpred[i] = tobf((float)((double)bf(dpred[i]) + gs * d));
        }
        s += d * d;
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = RED_THREADS / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[k] = sh[0];
}

static inline double red_finish(vf_cuda_ctx *c, double *part)
{
    double *h = (double *)c->host;
    if (VF_CUDA_NOTE(c, cudaMemcpyAsync(h, part, VF_CUDA_RED_BLOCKS * sizeof(double), cudaMemcpyDeviceToHost,
                                        c->stream)) ||
        VF_CUDA_NOTE(c, cudaStreamSynchronize(c->stream)))
        return NAN;
    double s = 0.0;
    for (int k = 0; k < VF_CUDA_RED_BLOCKS; k++) s += h[k];
    return s;
}

#endif /* VF_CUDA_REDUCE_CUH */
