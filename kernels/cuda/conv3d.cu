/* conv3d.cu — channel-first 3D convolution on CUDA (the VAE's causal convolutions): the
 * hand kernels, which run what cuDNN's convolution does not take and everything under
 * VFLOW_CONV=hand (conv_path.c chooses), and the bias add of the cuDNN path.
 *
 * Forward: an implicit GEMM on the tensor cores. out (OC x B·P) = w (OC x CK) ·
 * im2col(x) (CK x B·P), CK = C·KT·KH·KW, P = To·Ho·Wo; the im2col matrix is never
 * stored: each block gathers its 64-position x 32-k slice of it from x straight into
 * shared memory (zero where the tap falls in the padding), so any padding before and
 * after an axis (causal time, the downsample's right and bottom) and the chunked
 * encoder's odd shapes cost nothing. Block tile 64 (oc) x 64 (positions) x 32 (k), 4
 * warps of 32 x 32, mma.sync bf16 with f32 accumulation; the next k-slice is fetched
 * into registers while the current one is multiplied. Bias added in the epilogue.
 *
 * Backward (the VAE is frozen in vflow; the op exists for completeness and is tested):
 * straightforward SIMT kernels with one owner per output and a fixed summation order —
 * dbias and dW by block reductions over (b, position), dinp by gathering each input
 * element's taps (as the CPU reference does). Correct and deterministic, not fast.
 */
#include "kernels/cuda/common.cuh"

#define CV_BM 64
#define CV_BN 64
#define CV_BK 32
#define CV_LDS (CV_BK + 8)
#define CV_THREADS 128
#define CV_PER_THREAD (CV_BM * CV_BK / CV_THREADS) /* 16 */

struct ConvGeom {
    int64_t B, C, T, H, W, OC, To, Ho, Wo, P, CK, NP;
    int KT, KH, KW, st, sh, sw, pt0, ph, pw;
};

template <bool WVEC>
__global__ void __launch_bounds__(CV_THREADS)
    k_conv_fwd(bf16 *out, const bf16 *x, const bf16 *w, const bf16 *bias, ConvGeom g)
{
    __shared__ __align__(16) bf16 As[CV_BM * CV_LDS];
    __shared__ __align__(16) bf16 Bs[CV_BN * CV_LDS];
    /* per output position n of the tile: the input offset of its (0,0,0) tap and its
     * window origin (t, h, w); per k of a k-slice (double-buffered: the next slice's is
     * made while the current one is in use): the tap's offset c·THW + kt·HW + kh·W + kw
     * and (kt, kh, kw) packed. A tap reads x[s_base[n] + k_off[k]] when inside the input. */
    __shared__ int64_t s_base[CV_BN];
    __shared__ int s_t[CV_BN], s_h[CV_BN], s_w[CV_BN];
    __shared__ int64_t k_off[2][CV_BK];
    __shared__ int k_tap[2][CV_BK];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wm = warp >> 1, wn = warp & 1;
    const int64_t m0 = (int64_t)blockIdx.y * CV_BM, n0 = (int64_t)blockIdx.x * CV_BN;
    const int64_t HW = g.H * g.W, THW = g.T * HW;
    const int KHW = g.KH * g.KW, KTHW = g.KT * KHW;

    if (tid < CV_BN) {
        const int64_t pos = n0 + tid;
        if (pos < g.NP) {
            const int64_t b = pos / g.P, p = pos % g.P;
            const int64_t to = p / (g.Ho * g.Wo), ho = (p / g.Wo) % g.Ho, wo = p % g.Wo;
            const int t0 = (int)(to * g.st - g.pt0), h0 = (int)(ho * g.sh - g.ph), w0 = (int)(wo * g.sw - g.pw);
            s_base[tid] = b * g.C * THW + ((int64_t)t0 * g.H + h0) * g.W + w0;
            s_t[tid] = t0;
            s_h[tid] = h0;
            s_w[tid] = w0;
        } else {
            s_base[tid] = 0;
            s_t[tid] = INT32_MIN / 2; /* every tap out of range: zeros */
            s_h[tid] = 0;
            s_w[tid] = 0;
        }
    }
    /* the k table of slice k0 into buffer bi (threads 0..BK-1; read after a barrier) */
    auto ktable = [&](int64_t k0, int bi) {
        if (tid < CV_BK) {
            const int64_t kk = k0 + tid;
            if (kk < g.CK) {
                const int c = (int)(kk / KTHW), r = (int)(kk % KTHW);
                const int kt = r / KHW, kh = (r / g.KW) % g.KH, kw = r % g.KW;
                k_off[bi][tid] = (int64_t)c * THW + (int64_t)kt * HW + (int64_t)kh * g.W + kw;
                k_tap[bi][tid] = kt | kh << 10 | kw << 20;
            } else {
                k_off[bi][tid] = 0;
                k_tap[bi][tid] = -1; /* past CK: zero */
            }
        }
    };

    uint4 rav[2];
    bf16 ra[WVEC ? 1 : CV_PER_THREAD], rb[CV_PER_THREAD];
    const bf16 zero = __float2bfloat16_rn(0.0f);
    /* A: element j of this thread is w[m0 + r][k0 + c], r = tid/BK + 4j, c = tid % BK
     * (scalar); vector: 64 rows x 4 chunks of 8, two per thread. B: element j is position
     * n = tid % BN, k = tid/BN + 2j of the slice. */
    const int ar = tid / CV_BK, ac = tid % CV_BK, bn = tid % CV_BN, bk = tid / CV_BN;
    auto fetch = [&](int64_t k0, int bi) {
        if (WVEC) {
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int idx = tid + j * CV_THREADS, r = idx >> 2, c = (idx & 3) * 8;
                uint4 u = make_uint4(0, 0, 0, 0);
                if (m0 + r < g.OC && k0 + c < g.CK) u = *reinterpret_cast<const uint4 *>(w + (m0 + r) * g.CK + k0 + c);
                rav[j] = u;
            }
        } else {
            const bf16 *wp = w + (m0 + ar) * g.CK + k0 + ac;
            const bool kin = k0 + ac < g.CK;
#pragma unroll
            for (int j = 0; j < CV_PER_THREAD; j++)
                ra[j] = (kin && m0 + ar + 4 * j < g.OC) ? wp[(int64_t)(4 * j) * g.CK] : zero;
        }
        const int64_t base = s_base[bn];
        const int t0 = s_t[bn], h0 = s_h[bn], w0 = s_w[bn];
#pragma unroll
        for (int j = 0; j < CV_PER_THREAD; j++) {
            const int kl = bk + 2 * j, tap = k_tap[bi][kl];
            const int t = t0 + (tap & 1023), h = h0 + ((tap >> 10) & 1023), ww = w0 + (tap >> 20);
            bf16 v = zero;
            if (tap >= 0 && t >= 0 && t < g.T && h >= 0 && h < g.H && ww >= 0 && ww < g.W) v = x[base + k_off[bi][kl]];
            rb[j] = v;
        }
    };
    auto stash = [&]() {
        if (WVEC) {
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int idx = tid + j * CV_THREADS, r = idx >> 2, c = (idx & 3) * 8;
                *reinterpret_cast<uint4 *>(&As[r * CV_LDS + c]) = rav[j];
            }
        } else {
#pragma unroll
            for (int j = 0; j < CV_PER_THREAD; j++) As[(ar + 4 * j) * CV_LDS + ac] = ra[j];
        }
#pragma unroll
        for (int j = 0; j < CV_PER_THREAD; j++) Bs[bn * CV_LDS + bk + 2 * j] = rb[j];
    };

    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b][0] = acc[a][b][1] = acc[a][b][2] = acc[a][b][3] = 0.0f;

    const int64_t nk = (g.CK + CV_BK - 1) / CV_BK;
    ktable(0, 0);
    __syncthreads(); /* positions and slice 0's k table */
    fetch(0, 0);
    stash();
    if (nk > 1) ktable(CV_BK, 1);
    __syncthreads();
    for (int64_t kt = 0; kt < nk; kt++) {
        if (kt + 1 < nk) fetch((kt + 1) * CV_BK, (int)((kt + 1) & 1)); /* loads in flight during the products */
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
            warp_mma_nt<CV_BK / 16, 4>(acc[mt], As + (wm * 32 + mt * 16) * CV_LDS, CV_LDS, Bs + wn * 32 * CV_LDS,
                                       CV_LDS);
        __syncthreads();
        if (kt + 1 < nk) stash();
        /* slice kt+2's table goes where slice kt's was: its last reader, fetch(kt), ran in
         * the previous iteration */
        if (kt + 2 < nk) ktable((kt + 2) * CV_BK, (int)(kt & 1));
        __syncthreads();
    }

    const int gq = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t oc = m0 + wm * 32 + mt * 16 + gq + (e >> 1) * 8;
                const int64_t pos = n0 + wn * 32 + nt * 8 + 2 * t4 + (e & 1);
                if (oc >= g.OC || pos >= g.NP) continue;
                const int64_t b = pos / g.P, p = pos % g.P;
                float v = acc[mt][nt][e];
                if (bias) v += bf(bias[oc]);
                out[(b * g.OC + oc) * g.P + p] = tobf(v);
            }
}

/* ------------------------------------------------------------------ backward */

/* fixed-order block sum of 256 threads (8 warps) */
__device__ float block_sum256(float v, float *sh)
{
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x == 0)
        for (int i = 0; i < 8; i++) s += sh[i];
    return s; /* valid in thread 0 */
}

__global__ void k_conv_dbias(bf16 *dbias, const bf16 *dout, ConvGeom g)
{
    __shared__ float sh[8];
    const int64_t oc = blockIdx.x;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < g.B * g.P; i += blockDim.x) {
        const int64_t b = i / g.P, p = i % g.P;
        s += bf(dout[(b * g.OC + oc) * g.P + p]);
    }
    s = block_sum256(s, sh);
    if (threadIdx.x == 0) dbias[oc] = tobf(bf(dbias[oc]) + s);
}

/* dw[oc, ck] += Σ_{b, positions} dout[b, oc, p] · x[tap] ; block per weight */
__global__ void k_conv_dw(bf16 *dw, const bf16 *dout, const bf16 *x, ConvGeom g)
{
    __shared__ float sh[8];
    const int64_t wi = blockIdx.x, oc = wi / g.CK, ck = wi % g.CK;
    const int64_t KHW = (int64_t)g.KH * g.KW, KTHW = g.KT * KHW;
    const int64_t c = ck / KTHW, r = ck % KTHW;
    const int kt = (int)(r / KHW), kh = (int)((r / g.KW) % g.KH), kw = (int)(r % g.KW);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < g.B * g.P; i += blockDim.x) {
        const int64_t b = i / g.P, p = i % g.P;
        const int64_t to = p / (g.Ho * g.Wo), ho = (p / g.Wo) % g.Ho, wo = p % g.Wo;
        const int64_t t = to * g.st - g.pt0 + kt, h = ho * g.sh - g.ph + kh, ww = wo * g.sw - g.pw + kw;
        if (t < 0 || t >= g.T || h < 0 || h >= g.H || ww < 0 || ww >= g.W) continue;
        s += bf(dout[(b * g.OC + oc) * g.P + p]) * bf(x[((b * g.C + c) * g.T + t) * g.H * g.W + h * g.W + ww]);
    }
    s = block_sum256(s, sh);
    if (threadIdx.x == 0) dw[wi] = tobf(bf(dw[wi]) + s);
}

/* dinp[b, c, t, h, x] += Σ_{oc, kt, kh, kw} w · dout at the output that tap feeds */
__global__ void k_conv_dinp(bf16 *dinp, const bf16 *dout, const bf16 *w, ConvGeom g)
{
    const int64_t n = g.B * g.C * g.T * g.H * g.W;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t xw = i % g.W, h = (i / g.W) % g.H, t = (i / (g.W * g.H)) % g.T;
        const int64_t c = (i / (g.W * g.H * g.T)) % g.C, b = i / (g.W * g.H * g.T * g.C);
        float s = 0.0f;
        for (int64_t oc = 0; oc < g.OC; oc++)
            for (int kt = 0; kt < g.KT; kt++) {
                const int64_t tn = t + g.pt0 - kt;
                if (tn < 0 || tn % g.st || tn / g.st >= g.To) continue;
                for (int kh = 0; kh < g.KH; kh++) {
                    const int64_t hn = h + g.ph - kh;
                    if (hn < 0 || hn % g.sh || hn / g.sh >= g.Ho) continue;
                    for (int kw = 0; kw < g.KW; kw++) {
                        const int64_t wn = xw + g.pw - kw;
                        if (wn < 0 || wn % g.sw || wn / g.sw >= g.Wo) continue;
                        const int64_t o = ((b * g.OC + oc) * g.To + tn / g.st) * g.Ho * g.Wo + (hn / g.sh) * g.Wo + wn / g.sw;
                        s += bf(w[(((oc * g.C + c) * g.KT + kt) * g.KH + kh) * g.KW + kw]) * bf(dout[o]);
                    }
                }
            }
        dinp[i] = tobf(bf(dinp[i]) + s);
    }
}

/* out (B, OC, P) += bias[oc]: the cuDNN path's bias (its NCDHW convolution graph has
 * no fused bias; conv_path.c) */
__global__ void k_conv_bias(bf16 *out, const bf16 *bias, int64_t OC, int64_t P, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = tobf(bf(out[i]) + bf(bias[(i / P) % OC]));
}

/* ------------------------------------------------------------------ host side */

extern "C" void vf_cuda_conv_bias(vf_cuda_ctx *c, void *out, const void *bias, int64_t B, int64_t OC, int64_t P)
{
    const int64_t n = B * OC * P;
    if (n <= 0 || !bias) return;
    k_conv_bias<<<grid_for(n, 256), 256, 0, c->stream>>>((bf16 *)out, (const bf16 *)bias, OC, P, n);
    VF_CUDA_NOTE_LAUNCH(c);
}

/* ph, pw of the geometry: the padding above and left (the padding after an axis only
 * sets the output size) */
static bool geom(vf_cuda_ctx *c, ConvGeom *g, int64_t B, int64_t C, int64_t T, int64_t H, int64_t W, int64_t OC,
                 int KT, int KH, int KW, int st, int sh, int sw, int pt0, int pt1, int ph0, int ph1, int pw0, int pw1)
{
    if (C <= 0 || st <= 0 || sh <= 0 || sw <= 0 || KT <= 0 || KH <= 0 || KW <= 0 || pt0 < 0 || pt1 < 0 || ph0 < 0 ||
        ph1 < 0 || pw0 < 0 || pw1 < 0 || T + pt0 + pt1 < KT || H + ph0 + ph1 < KH || W + pw0 + pw1 < KW ||
        T > INT32_MAX / 2 || H > INT32_MAX / 2 || W > INT32_MAX / 2) {
        vf_cuda_note_msg(c, __FILE__, __LINE__,
                         "conv3d: bad geometry (C %lld T %lld H %lld W %lld, kernel %dx%dx%d, stride %d/%d/%d, pad "
                         "%d+%d/%d+%d/%d+%d)",
                         (long long)C, (long long)T, (long long)H, (long long)W, KT, KH, KW, st, sh, sw, pt0, pt1, ph0,
                         ph1, pw0, pw1);
        return false;
    }
    *g = ConvGeom{B, C, T, H, W, OC, (T + pt0 + pt1 - KT) / st + 1, (H + ph0 + ph1 - KH) / sh + 1,
                  (W + pw0 + pw1 - KW) / sw + 1, 0, C * KT * KH * KW, 0, KT, KH, KW, st, sh, sw, pt0, ph0, pw0};
    g->P = g->To * g->Ho * g->Wo;
    g->NP = B * g->P;
    return true;
}

extern "C" void vf_cuda_conv3d_hand_fwd(vf_backend *be, void *out, const void *inp, const void *w,
                                        const void *bias, int64_t B, int64_t C, int64_t T, int64_t H, int64_t W,
                                        int64_t OC, int KT, int KH, int KW, int st, int sh, int sw, int pt0, int pt1,
                                        int ph0, int ph1, int pw0, int pw1)
{
    OpScope s(be);
    ConvGeom g;
    if (!geom(s.c, &g, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1)) return;
    if (g.NP <= 0 || OC <= 0) return;
    if ((g.NP + CV_BN - 1) / CV_BN > INT32_MAX || (OC + CV_BM - 1) / CV_BM > 65535) {
        vf_cuda_note_msg(s.c, __FILE__, __LINE__, "conv3d: %lld output channels x %lld positions is too large",
                         (long long)OC, (long long)g.NP);
        return;
    }
    dim3 grid((unsigned)((g.NP + CV_BN - 1) / CV_BN), (unsigned)((OC + CV_BM - 1) / CV_BM));
    if (g.CK % 8 == 0 && aligned16(w))
        k_conv_fwd<true><<<grid, CV_THREADS, 0, s.c->stream>>>((bf16 *)out, (const bf16 *)inp, (const bf16 *)w,
                                                               (const bf16 *)bias, g);
    else
        k_conv_fwd<false><<<grid, CV_THREADS, 0, s.c->stream>>>((bf16 *)out, (const bf16 *)inp, (const bf16 *)w,
                                                                (const bf16 *)bias, g);
    VF_CUDA_NOTE_LAUNCH(s.c);
}

extern "C" void vf_cuda_conv3d_bwd(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                                   const void *inp, const void *w, int64_t B, int64_t C, int64_t T, int64_t H,
                                   int64_t W, int64_t OC, int KT, int KH, int KW, int st, int sh, int sw, int pt0,
                                   int pt1, int ph0, int ph1, int pw0, int pw1)
{
    OpScope s(be);
    ConvGeom g;
    if (!geom(s.c, &g, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1)) return;
    if (OC <= 0 || B <= 0) return;
    if (dbias) {
        k_conv_dbias<<<(unsigned)OC, 256, 0, s.c->stream>>>((bf16 *)dbias, (const bf16 *)dout, g);
        VF_CUDA_NOTE_LAUNCH(s.c);
    }
    if (dw && g.CK > 0) {
        k_conv_dw<<<(unsigned)(OC * g.CK), 256, 0, s.c->stream>>>((bf16 *)dw, (const bf16 *)dout,
                                                                  (const bf16 *)inp, g);
        VF_CUDA_NOTE_LAUNCH(s.c);
    }
    if (dinp && C > 0) {
        k_conv_dinp<<<grid_for(B * C * T * H * W, 256), 256, 0, s.c->stream>>>((bf16 *)dinp, (const bf16 *)dout,
                                                                                (const bf16 *)w, g);
        VF_CUDA_NOTE_LAUNCH(s.c);
    }
}
