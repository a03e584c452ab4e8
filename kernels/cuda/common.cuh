/* common.cuh — device-side helpers shared by the CUDA kernel files: bf16 <-> f32,
 * 16-byte vector access, warp reductions, the tensor-core (mma.sync m16n8k16 bf16)
 * and ldmatrix wrappers, cp.async, and the op bracket.
 *
 * Storage is bf16 everywhere (activations, weights, gradients); arithmetic is f32, sums
 * of many terms f32 with a fixed order (or f64 where the CPU reference promises f64:
 * loss and gradient norms). A kernel takes the 16-byte path only when every pointer it
 * touches is 16-byte aligned and the row length is a multiple of 8 elements; otherwise
 * it runs the scalar path: models hand out pointers at arbitrary element offsets of a
 * flat parameter vector, so misalignment is normal, not an error.
 */
#ifndef VF_CUDA_COMMON_CUH
#define VF_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/cuda_internal.h"

typedef __nv_bfloat16 bf16;

#define VF_LOG2E 1.4426950408889634f
#define VF_LN2 0.6931471805599453f

/* ---- host side */

/* RAII op bracket: device current, enqueue lock held for the op's launches. */
struct OpScope {
    vf_cuda_ctx *c;
    explicit OpScope(vf_backend *be) : c(vf_cuda_ctx_of(be)) { vf_cuda_op_begin(c); }
    ~OpScope() { vf_cuda_op_end(c); }
};

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }
static inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535LL * 32)
{
    int64_t g = (n + threads - 1) / threads;
    if (g < 1) g = 1;
    return (unsigned)(g < cap ? g : cap);
}

/* ---- conversions */

__device__ __forceinline__ float bf(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 tobf(float x) { return __float2bfloat16_rn(x); }

/* 8 bf16 <-> 8 floats through one 16-byte access */
__device__ __forceinline__ void ld8(const bf16 *p, float f[8])
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}
__device__ __forceinline__ void st8(bf16 *p, const float f[8])
{
    uint4 u;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    *reinterpret_cast<uint4 *>(p) = u;
}

/* ---- warp reductions (xor butterfly: every lane gets the same, fixed-order result) */

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- tensor cores: mma.sync.m16n8k16 bf16 -> f32 (PTX ISA "Matrix fragments for
 * mma.m16n8k16"). Lane l, g = l/4, t = l%4:
 *   A (16x16, row): a[0] = (g, 2t..2t+1)  a[1] = (g+8, 2t..)  a[2] = (g, 8+2t..)  a[3] = (g+8, 8+2t..)
 *   B (16x8, col):  b[0] = (k 2t..2t+1, n g)  b[1] = (k 8+2t.., n g)
 *   C (16x8):       c[0..1] = (g, 2t..2t+1)  c[2..3] = (g+8, 2t..2t+1)
 * So the C fragments of two adjacent n8 tiles are exactly an A fragment of k16: a score
 * tile feeds the next product from registers (FlashAttention-2's trick). */

__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* four 8x8 b16 matrices; lane l gives the row address of matrix l/8 */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* acc (16 x NT*8) += A (16 x KS*16, row-major in smem, lda) · Bᵀ, B (NT*8 x KS*16) row-major
 * in smem (ldb): both operands k-contiguous (Q·Kᵀ, dO·Vᵀ, K·Qᵀ, W·colᵀ). NT even. */
template <int KS, int NT>
__device__ __forceinline__ void warp_mma_nt(float (*acc)[4], const bf16 *As, int lda, const bf16 *Bs,
                                            int ldb)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t a[4];
        ldsm_x4(a, As + (lane & 15) * lda + ks * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            const int mi = lane >> 3;
            uint32_t b[4];
            ldsm_x4(b, Bs + (np * 16 + (lane & 7) + (mi >> 1) * 8) * ldb + ks * 16 + (mi & 1) * 8);
            mma16816(acc[2 * np], a, b[0], b[1]);
            mma16816(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

/* acc (16 x NT*8) += A (16 x KS*16, in registers as A fragments) · B, B (KS*16 x NT*8)
 * row-major in smem (ldb, n-contiguous): P·V, Pᵀ·dO, dSᵀ·Q, dS·K. NT even. */
template <int KS, int NT>
__device__ __forceinline__ void warp_mma_rn(float (*acc)[4], const uint32_t (*a)[4], const bf16 *Bs,
                                            int ldb)
{
    const int lane = threadIdx.x & 31;
    const int mi = lane >> 3;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_x4_t(b, Bs + (ks * 16 + (lane & 7) + (mi & 1) * 8) * ldb + np * 16 + (mi >> 1) * 8);
            mma16816(acc[2 * np], a[ks], b[0], b[1]);
            mma16816(acc[2 * np + 1], a[ks], b[2], b[3]);
        }
    }
}

/* C fragments of a 16 x KS*16 f32 tile -> A fragments (bf16) */
template <int KS>
__device__ __forceinline__ void acc_to_a(uint32_t (*a)[4], const float (*c)[4])
{
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        a[ks][0] = pack_bf16(c[2 * ks][0], c[2 * ks][1]);
        a[ks][1] = pack_bf16(c[2 * ks][2], c[2 * ks][3]);
        a[ks][2] = pack_bf16(c[2 * ks + 1][0], c[2 * ks + 1][1]);
        a[ks][3] = pack_bf16(c[2 * ks + 1][2], c[2 * ks + 1][3]);
    }
}

/* ---- cp.async (16 bytes, L2 only; src_bytes 0 writes zeros) */

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

#endif /* VF_CUDA_COMMON_CUH */
