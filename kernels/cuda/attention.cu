/* attention.cu — flash-style attention on CUDA (non-causal), forward and backward: the
 * hand kernels, which run what cuDNN's fused SDPA does not take and everything under
 * VFLOW_ATTN=hand (attention_path.c chooses).
 *
 * q (B, Lq, H, D), k/v (B, Lk, H, D), out (B, Lq, H, D), lse (B, H, Lq) f32 — the
 * scores are never stored. FlashAttention-2's structure on mma.sync (bf16 tensor cores,
 * f32 accumulation), written for the two head sizes the presets use:
 *
 *  - template DP ∈ {64, 128}: the head dim padded in shared memory. D == DP with 16-byte
 *    aligned rows is the fast path (cp.async tile loads); any D ≤ DP works, the extra
 *    columns being zero-filled (they add nothing to q·k and their outputs are not
 *    stored), with scalar loads when rows are not 16-byte aligned. So DP = 64 serves the
 *    tiny test models (D = 16) and DP = 128 DiT-XL's 72; D > 128 (the VAE's single
 *    384-wide head) takes the generic SIMT kernels at the end of this file.
 *  - forward: a block = 4 warps = 64 queries (16 per warp) of one (b, h); K/V tiles of
 *    64 keys double-buffered in shared memory (cp.async: the next tile loads while this
 *    one is multiplied); S = Q·Kᵀ in registers, online softmax in the exp2 domain, the
 *    probabilities re-packed in registers as the A operand of O += P·V. Keys past Lk
 *    are masked to −inf, so any Lk (cross-attention's short text) works.
 *  - backward, two kernels and no atomics (deterministic, and each gradient row has one
 *    owner that stores it once into its bf16 buffer: ops.h's attention_bwd writes): dK/dV
 *    per key tile, looping over all query tiles (Sᵀ = K·Qᵀ, Pᵀ = exp(Sᵀ − lse),
 *    dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ∘(dPᵀ − Δ), dK += dSᵀ·Q, in registers); and dQ
 *    per query tile, looping over key tiles (recomputing S and dP, dQ += dS·K). Δᵢ = Σ_d dOᵢ·Oᵢ comes from a first small kernel
 *    (in the scratch area, over chunks of (b, h) when it is short). Recomputing S and
 *    dP in the dQ pass costs two of the seven products; FA2 trades them for f32 atomics
 *    into a dQ accumulator, which gives up determinism and needs an Lq·H·D f32 buffer.
 *
 * All smem rows are padded by 8 elements (16 bytes) so that ldmatrix's eight 16-byte
 * rows fall in different banks.
 */
#include <math.h>

#include "kernels/cuda/common.cuh"

#define ATT_BM 64 /* queries per block (fwd, dq) */
#define ATT_BN 64 /* keys per tile (fwd, dq) / per block (dkdv) */
#define ATT_THREADS 128

template <int DP>
struct AttT {
    static const int LDS = DP + 8;
    static const int KS = DP / 16; /* k-steps over the head dim */
    static const int NTD = DP / 8; /* n8 tiles over the head dim */
};

/* Loads rows [r0, r0 + rows) of a (L, rs)-strided bf16 matrix into smem (rows x LDS),
 * columns [0, DP): columns >= D and rows >= L are zero. vec: D % 8 == 0 and 16-byte
 * aligned rows (cp.async, completes at the next cp_async_wait_all); else plain loads
 * (visible after the next __syncthreads). */
template <int DP, int ROWS>
__device__ __forceinline__ void load_tile(bf16 *sm, const bf16 *g, int64_t r0, int64_t L, int64_t rs, int D,
                                          bool vec)
{
    const int LDS = AttT<DP>::LDS;
    if (vec) {
        const int CH = DP / 8;
        for (int idx = threadIdx.x; idx < ROWS * CH; idx += ATT_THREADS) {
            const int r = idx / CH, col = (idx % CH) * 8;
            const bool ok = r0 + r < L && col < D;
            const bf16 *src = ok ? g + (r0 + r) * rs + col : g;
            cp_async16(sm + r * LDS + col, src, ok ? 16 : 0);
        }
    } else {
        for (int idx = threadIdx.x; idx < ROWS * DP; idx += ATT_THREADS) {
            const int r = idx / DP, col = idx % DP;
            bf16 v = __float2bfloat16_rn(0.0f);
            if (r0 + r < L && col < D) v = g[(r0 + r) * rs + col];
            sm[r * LDS + col] = v;
        }
    }
}

/* Stores a warp's 16 x DP f32 tile acc, times mul, to rows
 * [r0, r0 + 16) of a bf16 matrix (row stride rs), skipping rows >= L and cols >= D. */
template <int DP>
__device__ __forceinline__ void store_tile(bf16 *g, const float (*acc)[4], int64_t r0, int64_t L, int64_t rs, int D,
                                           float mul0, float mul1)
{
    const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < AttT<DP>::NTD; nt++) {
        const int col = nt * 8 + 2 * t;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int64_t row = r0 + gq + hf * 8;
            if (row >= L) continue;
            const float mul = hf ? mul1 : mul0;
            bf16 *p = g + row * rs + col;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                if (col + e >= D) continue;
                p[e] = __float2bfloat16_rn(acc[nt][hf * 2 + e] * mul);
            }
        }
    }
}

/* ------------------------------------------------------------------ forward */

template <int DP>
__global__ void __launch_bounds__(ATT_THREADS) k_attn_fwd(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                                          const bf16 *v, int Lq, int Lk, int H, int D,
                                                          float sl2, bool vec)
{
    typedef AttT<DP> T;
    extern __shared__ __align__(16) unsigned char smraw[];
    bf16 *Qs = (bf16 *)smraw;
    bf16 *Ks = Qs + ATT_BM * T::LDS;  /* [2][BN][LDS] */
    bf16 *Vs = Ks + 2 * ATT_BN * T::LDS;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
    const int64_t h = blockIdx.y, b = blockIdx.z, q0 = (int64_t)blockIdx.x * ATT_BM;
    const int64_t rs = (int64_t)H * D;
    const bf16 *qb = q + (b * Lq * H + h) * D, *kb = k + (b * Lk * H + h) * D, *vb = v + (b * Lk * H + h) * D;

    load_tile<DP, ATT_BM>(Qs, qb, q0, Lq, rs, D, vec);
    load_tile<DP, ATT_BN>(Ks, kb, 0, Lk, rs, D, vec);
    load_tile<DP, ATT_BN>(Vs, vb, 0, Lk, rs, D, vec);
    cp_async_commit();

    float o[T::NTD][4];
#pragma unroll
    for (int i = 0; i < T::NTD; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows g and g+8, log2 domain */
    const int nkt = (Lk + ATT_BN - 1) / ATT_BN;
    for (int j = 0; j < nkt; j++) {
        const int cur = j & 1;
        cp_async_wait_all();
        __syncthreads(); /* tile j visible; every warp is done with tile j-1's buffers */
        if (j + 1 < nkt) {
            load_tile<DP, ATT_BN>(Ks + (cur ^ 1) * ATT_BN * T::LDS, kb, (int64_t)(j + 1) * ATT_BN, Lk, rs, D, vec);
            load_tile<DP, ATT_BN>(Vs + (cur ^ 1) * ATT_BN * T::LDS, vb, (int64_t)(j + 1) * ATT_BN, Lk, rs, D, vec);
        }
        cp_async_commit();
        float s[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        warp_mma_nt<T::KS, 8>(s, Qs + w * 16 * T::LDS, T::LDS, Ks + cur * ATT_BN * T::LDS, T::LDS);
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = j * ATT_BN + nt * 8 + 2 * t + (e & 1);
                const float x = key < Lk ? s[nt][e] * sl2 : -INFINITY;
                s[nt][e] = x;
                if (e < 2) mx0 = fmaxf(mx0, x);
                else mx1 = fmaxf(mx1, x);
            }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1); /* finite: key j·BN < Lk */
        const float a0 = exp2f(m0 - n0), a1 = exp2f(m1 - n1);
        float r0 = 0.0f, r1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            s[nt][0] = exp2f(s[nt][0] - n0);
            s[nt][1] = exp2f(s[nt][1] - n0);
            s[nt][2] = exp2f(s[nt][2] - n1);
            s[nt][3] = exp2f(s[nt][3] - n1);
            r0 += s[nt][0] + s[nt][1];
            r1 += s[nt][2] + s[nt][3];
        }
        l0 = l0 * a0 + r0; /* per-thread partial row sums; the quad is summed at the end */
        l1 = l1 * a1 + r1;
        m0 = n0;
        m1 = n1;
#pragma unroll
        for (int i = 0; i < T::NTD; i++) {
            o[i][0] *= a0;
            o[i][1] *= a0;
            o[i][2] *= a1;
            o[i][3] *= a1;
        }
        uint32_t pa[4][4];
        acc_to_a<4>(pa, s);
        warp_mma_rn<4, T::NTD>(o, pa, Vs + cur * ATT_BN * T::LDS, T::LDS);
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const int64_t rq = q0 + w * 16;
    store_tile<DP>(out + (b * Lq * H + h) * D, o, rq, Lq, rs, D, 1.0f / l0, 1.0f / l1);
    if (lse && t == 0) {
        const int gq = lane >> 2;
        float *lb = lse + (b * H + h) * (int64_t)Lq;
        if (rq + gq < Lq) lb[rq + gq] = (m0 + log2f(l0)) * VF_LN2;
        if (rq + gq + 8 < Lq) lb[rq + gq + 8] = (m1 + log2f(l1)) * VF_LN2;
    }
}

/* ------------------------------------------------------------------ backward: Δ */

/* Dv[(bh − bh0)·Lq + i] = Σ_d dout·out for (b, h) = bh in [bh0, bh0 + nbh); warp per row */
__global__ void k_attn_delta(float *Dv, const bf16 *dout, const bf16 *out, int64_t Lq, int64_t H, int64_t D,
                             int64_t bh0, int64_t nbh)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= nbh * Lq) return;
    const int64_t bh = bh0 + row / Lq, i = row % Lq, b = bh / H, h = bh % H;
    const int64_t off = ((b * Lq + i) * H + h) * D;
    float s = 0.0f;
    for (int64_t d = lane; d < D; d += 32) s += __bfloat162float(dout[off + d]) * __bfloat162float(out[off + d]);
    s = warp_sum(s);
    if (lane == 0) Dv[row] = s;
}

/* ------------------------------------------------------------------ backward: dK, dV */

template <int DP, int BQ>
__global__ void __launch_bounds__(ATT_THREADS)
    k_attn_dkdv(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dout,
                const float *lse, const float *Dv, int Lq, int Lk, int H, int D, float scale, float sl2, bool vec,
                int64_t bh0)
{
    typedef AttT<DP> T;
    extern __shared__ __align__(16) unsigned char smraw[];
    bf16 *Ks = (bf16 *)smraw;
    bf16 *Vs = Ks + ATT_BN * T::LDS;
    bf16 *Qs = Vs + ATT_BN * T::LDS; /* [2][BQ][LDS] */
    bf16 *Gs = Qs + 2 * BQ * T::LDS; /* dO, [2][BQ][LDS] */
    float *Ls = (float *)(Gs + 2 * BQ * T::LDS); /* lse·log2e, [2][BQ] */
    float *Ds = Ls + 2 * BQ;                     /* Δ, [2][BQ] */
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
    const int64_t bhr = blockIdx.y, bh = bh0 + bhr, b = bh / H, h = bh % H;
    const int64_t k0 = (int64_t)blockIdx.x * ATT_BN, rs = (int64_t)H * D;
    const bf16 *qb = q + (b * Lq * H + h) * D, *gb = dout + (b * Lq * H + h) * D;
    const bf16 *kb = k + (b * Lk * H + h) * D, *vb = v + (b * Lk * H + h) * D;
    const float *lb = lse + bh * (int64_t)Lq, *db = Dv + bhr * (int64_t)Lq;

    load_tile<DP, ATT_BN>(Ks, kb, k0, Lk, rs, D, vec);
    load_tile<DP, ATT_BN>(Vs, vb, k0, Lk, rs, D, vec);
    load_tile<DP, BQ>(Qs, qb, 0, Lq, rs, D, vec);
    load_tile<DP, BQ>(Gs, gb, 0, Lq, rs, D, vec);
    for (int i = threadIdx.x; i < BQ; i += ATT_THREADS) {
        Ls[i] = i < Lq ? lb[i] * VF_LOG2E : INFINITY; /* rows past Lq: P = 0 */
        Ds[i] = i < Lq ? db[i] : 0.0f;
    }
    cp_async_commit();

    float ak[T::NTD][4], av[T::NTD][4];
#pragma unroll
    for (int i = 0; i < T::NTD; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) ak[i][e] = av[i][e] = 0.0f;
    const int nqt = (Lq + BQ - 1) / BQ;
    for (int it = 0; it < nqt; it++) {
        const int cur = it & 1;
        cp_async_wait_all();
        __syncthreads();
        if (it + 1 < nqt) {
            const int64_t n0 = (int64_t)(it + 1) * BQ;
            load_tile<DP, BQ>(Qs + (cur ^ 1) * BQ * T::LDS, qb, n0, Lq, rs, D, vec);
            load_tile<DP, BQ>(Gs + (cur ^ 1) * BQ * T::LDS, gb, n0, Lq, rs, D, vec);
            for (int i = threadIdx.x; i < BQ; i += ATT_THREADS) {
                Ls[(cur ^ 1) * BQ + i] = n0 + i < Lq ? lb[n0 + i] * VF_LOG2E : INFINITY;
                Ds[(cur ^ 1) * BQ + i] = n0 + i < Lq ? db[n0 + i] : 0.0f;
            }
        }
        cp_async_commit();
        const bf16 *Qc = Qs + cur * BQ * T::LDS, *Gc = Gs + cur * BQ * T::LDS;
        const float *Lc = Ls + cur * BQ, *Dc = Ds + cur * BQ;
        /* Pᵀ (16 keys x BQ queries) */
        float p[BQ / 8][4];
#pragma unroll
        for (int i = 0; i < BQ / 8; i++) p[i][0] = p[i][1] = p[i][2] = p[i][3] = 0.0f;
        warp_mma_nt<T::KS, BQ / 8>(p, Ks + w * 16 * T::LDS, T::LDS, Qc, T::LDS);
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) p[nt][e] = exp2f(p[nt][e] * sl2 - Lc[nt * 8 + 2 * t + (e & 1)]);
        if (dv) { /* dV += Pᵀ·dO */
            uint32_t pa[BQ / 16][4];
            acc_to_a<BQ / 16>(pa, p);
            warp_mma_rn<BQ / 16, T::NTD>(av, pa, Gc, T::LDS);
        }
        if (dk) { /* dPᵀ = V·dOᵀ ; dSᵀ = Pᵀ∘(dPᵀ − Δ) ; dK += dSᵀ·Q */
            float dp[BQ / 8][4];
#pragma unroll
            for (int i = 0; i < BQ / 8; i++) dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.0f;
            warp_mma_nt<T::KS, BQ / 8>(dp, Vs + w * 16 * T::LDS, T::LDS, Gc, T::LDS);
#pragma unroll
            for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) dp[nt][e] = p[nt][e] * (dp[nt][e] - Dc[nt * 8 + 2 * t + (e & 1)]);
            uint32_t sa[BQ / 16][4];
            acc_to_a<BQ / 16>(sa, dp);
            warp_mma_rn<BQ / 16, T::NTD>(ak, sa, Qc, T::LDS);
        }
    }
    const int64_t rk = k0 + w * 16;
    if (dk) store_tile<DP>(dk + (b * Lk * H + h) * D, ak, rk, Lk, rs, D, scale, scale);
    if (dv) store_tile<DP>(dv + (b * Lk * H + h) * D, av, rk, Lk, rs, D, 1.0f, 1.0f);
}

/* ------------------------------------------------------------------ backward: dQ */

template <int DP>
__global__ void __launch_bounds__(ATT_THREADS)
    k_attn_dq(bf16 *dq, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dout, const float *lse,
              const float *Dv, int Lq, int Lk, int H, int D, float scale, float sl2, bool vec, int64_t bh0)
{
    typedef AttT<DP> T;
    extern __shared__ __align__(16) unsigned char smraw[];
    bf16 *Qs = (bf16 *)smraw;
    bf16 *Gs = Qs + ATT_BM * T::LDS;
    bf16 *Ks = Gs + ATT_BM * T::LDS; /* [2][BN][LDS] */
    bf16 *Vs = Ks + 2 * ATT_BN * T::LDS;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
    const int64_t bhr = blockIdx.y, bh = bh0 + bhr, b = bh / H, h = bh % H;
    const int64_t q0 = (int64_t)blockIdx.x * ATT_BM, rs = (int64_t)H * D;
    const bf16 *qb = q + (b * Lq * H + h) * D, *gb = dout + (b * Lq * H + h) * D;
    const bf16 *kb = k + (b * Lk * H + h) * D, *vb = v + (b * Lk * H + h) * D;

    load_tile<DP, ATT_BM>(Qs, qb, q0, Lq, rs, D, vec);
    load_tile<DP, ATT_BM>(Gs, gb, q0, Lq, rs, D, vec);
    load_tile<DP, ATT_BN>(Ks, kb, 0, Lk, rs, D, vec);
    load_tile<DP, ATT_BN>(Vs, vb, 0, Lk, rs, D, vec);
    cp_async_commit();

    const int64_t r0 = q0 + w * 16 + gq, r1 = r0 + 8;
    const float *lb = lse + bh * (int64_t)Lq, *db = Dv + bhr * (int64_t)Lq;
    const float L0 = r0 < Lq ? lb[r0] * VF_LOG2E : INFINITY, L1 = r1 < Lq ? lb[r1] * VF_LOG2E : INFINITY;
    const float D0 = r0 < Lq ? db[r0] : 0.0f, D1 = r1 < Lq ? db[r1] : 0.0f;

    float aq[T::NTD][4];
#pragma unroll
    for (int i = 0; i < T::NTD; i++) aq[i][0] = aq[i][1] = aq[i][2] = aq[i][3] = 0.0f;
    const int nkt = (Lk + ATT_BN - 1) / ATT_BN;
    for (int j = 0; j < nkt; j++) {
        const int cur = j & 1;
        cp_async_wait_all();
        __syncthreads();
        if (j + 1 < nkt) {
            load_tile<DP, ATT_BN>(Ks + (cur ^ 1) * ATT_BN * T::LDS, kb, (int64_t)(j + 1) * ATT_BN, Lk, rs, D, vec);
            load_tile<DP, ATT_BN>(Vs + (cur ^ 1) * ATT_BN * T::LDS, vb, (int64_t)(j + 1) * ATT_BN, Lk, rs, D, vec);
        }
        cp_async_commit();
        const bf16 *Kc = Ks + cur * ATT_BN * T::LDS, *Vc = Vs + cur * ATT_BN * T::LDS;
        float p[8][4], dp[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) p[i][e] = dp[i][e] = 0.0f;
        warp_mma_nt<T::KS, 8>(p, Qs + w * 16 * T::LDS, T::LDS, Kc, T::LDS);
        warp_mma_nt<T::KS, 8>(dp, Gs + w * 16 * T::LDS, T::LDS, Vc, T::LDS);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = j * ATT_BN + nt * 8 + 2 * t + (e & 1);
                const float pe = key < Lk ? exp2f(p[nt][e] * sl2 - (e < 2 ? L0 : L1)) : 0.0f;
                dp[nt][e] = pe * (dp[nt][e] - (e < 2 ? D0 : D1));
            }
        uint32_t sa[4][4];
        acc_to_a<4>(sa, dp);
        warp_mma_rn<4, T::NTD>(aq, sa, Kc, T::LDS);
    }
    store_tile<DP>(dq + (b * Lq * H + h) * D, aq, q0 + w * 16, Lq, rs, D, scale, scale);
}

/* ------------------------------------------------------------------ generic (D > 128) */

#define GEN_MAXD 512 /* per-lane registers: GEN_MAXD / 32 */

/* warp per query row: online softmax over keys, scores by warp dot products (f32) */
__global__ void k_attn_fwd_gen(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int64_t B,
                               int64_t Lq, int64_t Lk, int64_t H, int64_t D, float scale)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); /* (b, h, i) */
    if (row >= B * H * Lq) return;
    const int64_t i = row % Lq, bh = row / Lq, h = bh % H, b = bh / H;
    const bf16 *qr = q + ((b * Lq + i) * H + h) * D;
    float qv[GEN_MAXD / 32], o[GEN_MAXD / 32];
#pragma unroll
    for (int r = 0; r < GEN_MAXD / 32; r++) {
        const int64_t d = lane + 32 * r;
        qv[r] = d < D ? __bfloat162float(qr[d]) : 0.0f;
        o[r] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j < Lk; j++) {
        const bf16 *kr = k + ((b * Lk + j) * H + h) * D, *vr = v + ((b * Lk + j) * H + h) * D;
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < GEN_MAXD / 32; r++) {
            const int64_t d = lane + 32 * r;
            if (d < D) s += qv[r] * __bfloat162float(kr[d]);
        }
        s = warp_sum(s) * scale;
        const float mn = fmaxf(m, s), a = __expf(m - mn), p = __expf(s - mn);
        l = l * a + p;
#pragma unroll
        for (int r = 0; r < GEN_MAXD / 32; r++) {
            const int64_t d = lane + 32 * r;
            o[r] = o[r] * a + (d < D ? p * __bfloat162float(vr[d]) : 0.0f);
        }
        m = mn;
    }
    bf16 *orow = out + ((b * Lq + i) * H + h) * D;
#pragma unroll
    for (int r = 0; r < GEN_MAXD / 32; r++) {
        const int64_t d = lane + 32 * r;
        if (d < D) orow[d] = __float2bfloat16_rn(Lk > 0 ? o[r] / l : 0.0f);
    }
    if (lse && lane == 0) lse[bh * Lq + i] = Lk > 0 ? m + logf(l) : -INFINITY;
}

/* dq: warp per query; dk/dv: warp per key (QUERY = 0). Δ from k_attn_delta (chunk
 * relative: Dv[(bh − bh0)·Lq + i]). */
template <int QUERY>
__global__ void k_attn_bwd_gen(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v,
                               const bf16 *dout, const float *lse, const float *Dv, int64_t Lq, int64_t Lk, int64_t H,
                               int64_t D, float scale, int64_t bh0, int64_t nbh)
{
    const int lane = threadIdx.x & 31;
    const int64_t L = QUERY ? Lq : Lk;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= nbh * L) return;
    const int64_t bhr = row / L, bh = bh0 + bhr, x = row % L, h = bh % H, b = bh / H;
    const int64_t L2 = QUERY ? Lk : Lq;
    /* own rows: QUERY: q, dout of query x; else: k, v of key x */
    const bf16 *a0 = (QUERY ? q + ((b * Lq + x) * H + h) * D : k + ((b * Lk + x) * H + h) * D);
    const bf16 *a1 = (QUERY ? dout + ((b * Lq + x) * H + h) * D : v + ((b * Lk + x) * H + h) * D);
    float av0[GEN_MAXD / 32], av1[GEN_MAXD / 32], acc0[GEN_MAXD / 32], acc1[GEN_MAXD / 32];
#pragma unroll
    for (int r = 0; r < GEN_MAXD / 32; r++) {
        const int64_t d = lane + 32 * r;
        av0[r] = d < D ? __bfloat162float(a0[d]) : 0.0f;
        av1[r] = d < D ? __bfloat162float(a1[d]) : 0.0f;
        acc0[r] = acc1[r] = 0.0f;
    }
    for (int64_t y = 0; y < L2; y++) {
        /* the other side: QUERY: key y (k, v); else query y (q, dout) */
        const bf16 *o0 = QUERY ? k + ((b * Lk + y) * H + h) * D : q + ((b * Lq + y) * H + h) * D;
        const bf16 *o1 = QUERY ? v + ((b * Lk + y) * H + h) * D : dout + ((b * Lq + y) * H + h) * D;
        float s = 0.0f, dpv = 0.0f;
#pragma unroll
        for (int r = 0; r < GEN_MAXD / 32; r++) {
            const int64_t d = lane + 32 * r;
            if (d < D) {
                s += av0[r] * __bfloat162float(o0[d]);
                dpv += av1[r] * __bfloat162float(o1[d]);
            }
        }
        s = warp_sum(s);
        dpv = warp_sum(dpv);
        const int64_t qi = QUERY ? x : y;
        const float p = __expf(s * scale - lse[bh * Lq + qi]);
        const float ds = p * (dpv - Dv[bhr * Lq + qi]);
#pragma unroll
        for (int r = 0; r < GEN_MAXD / 32; r++) {
            const int64_t d = lane + 32 * r;
            if (d >= D) continue;
            if (QUERY) {
                acc0[r] += ds * __bfloat162float(o0[d]); /* dq += dS·k */
            } else {
                acc0[r] += ds * __bfloat162float(o0[d]); /* dk += dSᵀ·q */
                acc1[r] += p * __bfloat162float(o1[d]);  /* dv += Pᵀ·dO */
            }
        }
    }
#pragma unroll
    for (int r = 0; r < GEN_MAXD / 32; r++) {
        const int64_t d = lane + 32 * r;
        if (d >= D) continue;
        if (QUERY) {
            dq[((b * Lq + x) * H + h) * D + d] = __float2bfloat16_rn(scale * acc0[r]);
        } else {
            if (dk) dk[((b * Lk + x) * H + h) * D + d] = __float2bfloat16_rn(scale * acc0[r]);
            if (dv) dv[((b * Lk + x) * H + h) * D + d] = __float2bfloat16_rn(acc1[r]);
        }
    }
}

/* ------------------------------------------------------------------ host side */

static size_t smem_fwd(int DP) { return (size_t)(ATT_BM + 4 * ATT_BN) * (DP + 8) * 2; }
static size_t smem_dq(int DP) { return (size_t)(2 * ATT_BM + 4 * ATT_BN) * (DP + 8) * 2; }
static size_t smem_dkdv(int DP, int BQ) { return (size_t)(2 * ATT_BN + 4 * BQ) * (DP + 8) * 2 + 4 * BQ * sizeof(float); }
#define BQ64 64  /* dkdv query tile, DP = 64 */
#define BQ128 32 /* dkdv query tile, DP = 128 (register budget: dK and dV take 128) */

extern "C" int vf_cuda_attention_init(vf_cuda_ctx *c, vf_status *st)
{
    int rc = 0;
    if (smem_dq(128) > c->smem_optin)
        VF_FAIL(st, VF_ECUDA, "%s: attention kernels need %zu bytes of shared memory per block, the device offers %zu",
                c->devname, smem_dq(128), c->smem_optin);
    VF_CUDA_TRY(st, cudaFuncSetAttribute(k_attn_fwd<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_fwd(64)));
    VF_CUDA_TRY(st, cudaFuncSetAttribute(k_attn_fwd<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_fwd(128)));
    VF_CUDA_TRY(st, cudaFuncSetAttribute(k_attn_dq<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq(64)));
    VF_CUDA_TRY(st, cudaFuncSetAttribute(k_attn_dq<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq(128)));
    VF_CUDA_TRY(st, cudaFuncSetAttribute(k_attn_dkdv<64, BQ64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem_dkdv(64, BQ64)));
    VF_CUDA_TRY(st, cudaFuncSetAttribute(k_attn_dkdv<128, BQ128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem_dkdv(128, BQ128)));
fail:
    return rc;
}

static bool args_ok(vf_cuda_ctx *c, int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D)
{
    if (D > GEN_MAXD || Lq > INT32_MAX || Lk > INT32_MAX || H > 65535 || B > 65535 || B * H > 65535) {
        vf_cuda_note_msg(c, __FILE__, __LINE__,
                         "attention: B=%lld Lq=%lld Lk=%lld H=%lld D=%lld outside what the kernels take (D <= %d, "
                         "B·H <= 65535)",
                         (long long)B, (long long)Lq, (long long)Lk, (long long)H, (long long)D, GEN_MAXD);
        return false;
    }
    return true;
}

static bool rows_vec(int64_t D, int64_t H, const void *a, const void *b, const void *c2, const void *d)
{
    return D % 8 == 0 && (H * D) % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(c2) && (!d || aligned16(d));
}

extern "C" void vf_cuda_attention_hand_fwd(vf_backend *be, void *out, float *lse, const void *q, const void *k,
                                           const void *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D,
                                           float scale)
{
    if (B <= 0 || Lq <= 0 || H <= 0 || D <= 0) return;
    OpScope s(be);
    if (!args_ok(s.c, B, Lq, Lk, H, D)) return;
    if (Lk == 0 || D > 128) {
        const int64_t rows = B * H * Lq;
        k_attn_fwd_gen<<<(unsigned)((rows + 3) / 4), 128, 0, s.c->stream>>>(
            (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, B, Lq, Lk, H, D, scale);
        VF_CUDA_NOTE_LAUNCH(s.c);
        return;
    }
    const bool vec = rows_vec(D, H, q, k, v, NULL);
    const float sl2 = scale * VF_LOG2E;
    dim3 grid((unsigned)((Lq + ATT_BM - 1) / ATT_BM), (unsigned)H, (unsigned)B);
    if (D <= 64)
        k_attn_fwd<64><<<grid, ATT_THREADS, smem_fwd(64), s.c->stream>>>(
            (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (int)Lq, (int)Lk, (int)H, (int)D,
            sl2, vec);
    else
        k_attn_fwd<128><<<grid, ATT_THREADS, smem_fwd(128), s.c->stream>>>(
            (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (int)Lq, (int)Lk, (int)H, (int)D,
            sl2, vec);
    VF_CUDA_NOTE_LAUNCH(s.c);
}

extern "C" void vf_cuda_attention_hand_bwd(vf_backend *be, void *dq, void *dk, void *dv, const void *dout,
                                           const void *q, const void *k, const void *v, const void *out,
                                           const float *lse, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                                           int64_t D, float scale)
{
    if (B <= 0 || H <= 0 || D <= 0 || (!dq && !dk && !dv)) return;
    OpScope s(be);
    if (Lq <= 0 || Lk <= 0) { /* no scores: the gradients are zero (written, ops.h) */
        if (dq && Lq > 0) VF_CUDA_NOTE(s.c, cudaMemsetAsync(dq, 0, (size_t)(B * Lq * H * D) * 2, s.c->stream));
        if (dk && Lk > 0) VF_CUDA_NOTE(s.c, cudaMemsetAsync(dk, 0, (size_t)(B * Lk * H * D) * 2, s.c->stream));
        if (dv && Lk > 0) VF_CUDA_NOTE(s.c, cudaMemsetAsync(dv, 0, (size_t)(B * Lk * H * D) * 2, s.c->stream));
        return;
    }
    if (!args_ok(s.c, B, Lq, Lk, H, D)) return;
    float *Dv = vf_cuda_partials(s.c);
    const int64_t cap = (int64_t)(vf_cuda_partials_bytes(s.c) / sizeof(float));
    int64_t chunk = cap / Lq; /* (b, h) pairs whose Δ fits in the scratch */
    if (chunk < 1) {
        vf_cuda_note_msg(s.c, __FILE__, __LINE__,
                         "attention backward: Lq = %lld needs more than the %zu bytes of scratch (raise "
                         "VFLOW_CUDA_SCRATCH_MB)",
                         (long long)Lq, vf_cuda_partials_bytes(s.c));
        return;
    }
    const bool vec = rows_vec(D, H, q, k, v, dout) && (!dq || aligned16(dq)) && (!dk || aligned16(dk)) &&
                     (!dv || aligned16(dv));
    const float sl2 = scale * VF_LOG2E;
    const int64_t nbh_all = B * H;
    for (int64_t bh0 = 0; bh0 < nbh_all; bh0 += chunk) {
        const int64_t nbh = nbh_all - bh0 < chunk ? nbh_all - bh0 : chunk;
        k_attn_delta<<<(unsigned)((nbh * Lq + 7) / 8), 256, 0, s.c->stream>>>(Dv, (const bf16 *)dout,
                                                                               (const bf16 *)out, Lq, H, D, bh0, nbh);
        if (VF_CUDA_NOTE_LAUNCH(s.c)) return;
        if (D > 128) {
            if (dq)
                k_attn_bwd_gen<1><<<(unsigned)((nbh * Lq + 3) / 4), 128, 0, s.c->stream>>>(
                    (bf16 *)dq, NULL, NULL, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)dout,
                    lse, Dv, Lq, Lk, H, D, scale, bh0, nbh);
            if (dk || dv)
                k_attn_bwd_gen<0><<<(unsigned)((nbh * Lk + 3) / 4), 128, 0, s.c->stream>>>(
                    NULL, (bf16 *)dk, (bf16 *)dv, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,
                    (const bf16 *)dout, lse, Dv, Lq, Lk, H, D, scale, bh0, nbh);
            if (VF_CUDA_NOTE_LAUNCH(s.c)) return;
            continue;
        }
        dim3 gq((unsigned)((Lq + ATT_BM - 1) / ATT_BM), (unsigned)nbh), gk((unsigned)((Lk + ATT_BN - 1) / ATT_BN),
                                                                           (unsigned)nbh);
        if (D <= 64) {
            if (dq)
                k_attn_dq<64><<<gq, ATT_THREADS, smem_dq(64), s.c->stream>>>(
                    (bf16 *)dq, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)dout, lse, Dv,
                    (int)Lq, (int)Lk, (int)H, (int)D, scale, sl2, vec, bh0);
            if (dk || dv)
                k_attn_dkdv<64, BQ64><<<gk, ATT_THREADS, smem_dkdv(64, BQ64), s.c->stream>>>(
                    (bf16 *)dk, (bf16 *)dv, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)dout,
                    lse, Dv, (int)Lq, (int)Lk, (int)H, (int)D, scale, sl2, vec, bh0);
        } else {
            if (dq)
                k_attn_dq<128><<<gq, ATT_THREADS, smem_dq(128), s.c->stream>>>(
                    (bf16 *)dq, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)dout, lse, Dv,
                    (int)Lq, (int)Lk, (int)H, (int)D, scale, sl2, vec, bh0);
            if (dk || dv)
                k_attn_dkdv<128, BQ128><<<gk, ATT_THREADS, smem_dkdv(128, BQ128), s.c->stream>>>(
                    (bf16 *)dk, (bf16 *)dv, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)dout,
                    lse, Dv, (int)Lq, (int)Lk, (int)H, (int)D, scale, sl2, vec, bh0);
        }
        if (VF_CUDA_NOTE_LAUNCH(s.c)) return;
    }
}
