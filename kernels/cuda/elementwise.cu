/* elementwise.cu — the pointwise ops of the CUDA backend: add, axpy, GELU (tanh) and
 * SiLU forward/backward (RoPE is rope.cu, the fused AdamW step adamw.cu).
 *
 * Each op is one pass over its tensors: 16-byte accesses (8 bf16) when every pointer is
 * 16-byte aligned and n is large, scalar otherwise (same formulas). Gradients
 * accumulate (+=) as ops.h requires; the sum is formed in f32 and rounded to bf16 once.
 */
#include "kernels/cuda/common.cuh"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

/* ------------------------------------------------------------------ a generic map */

/* F has: static const int NP (pointers it touches, for the alignment test),
 * __device__ void one(int64_t i) and __device__ void eight(int64_t i) (elements i..i+7). */
template <class F>
__global__ void k_map(int64_t n, F f, bool vec)
{
    const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, nth = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if (vec) {
        const int64_t n8 = n / 8;
        for (int64_t i = tid; i < n8; i += nth) f.eight(i * 8);
        done = n8 * 8;
    }
    for (int64_t i = done + tid; i < n; i += nth) f.one(i);
}

template <class F>
static void run_map(vf_cuda_ctx *c, int64_t n, F f, bool aligned)
{
    if (n <= 0) return;
    const bool vec = aligned && n >= 64;
    const int64_t work = vec ? (n + 7) / 8 : n;
    k_map<F><<<grid_for(work, 256, (int64_t)c->sm_count * 16), 256, 0, c->stream>>>(n, f, vec);
    VF_CUDA_NOTE_LAUNCH(c);
}

/* ------------------------------------------------------------------ add, axpy */

struct AddF {
    bf16 *out;
    const bf16 *a, *b;
    __device__ void one(int64_t i) { out[i] = tobf(bf(a[i]) + bf(b[i])); }
    __device__ void eight(int64_t i)
    {
        float x[8], y[8];
        ld8(a + i, x);
        ld8(b + i, y);
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] += y[j];
        st8(out + i, x);
    }
};

struct AxpyF {
    bf16 *y;
    const bf16 *x;
    float alpha;
    __device__ void one(int64_t i) { y[i] = tobf(bf(y[i]) + alpha * bf(x[i])); }
    __device__ void eight(int64_t i)
    {
        float u[8], v[8];
        ld8(y + i, u);
        ld8(x + i, v);
#pragma unroll
        for (int j = 0; j < 8; j++) u[j] += alpha * v[j];
        st8(y + i, u);
    }
};

extern "C" void vf_cuda_add(vf_backend *be, void *out, const void *a, const void *b, int64_t n)
{
    OpScope s(be);
    run_map(s.c, n, AddF{(bf16 *)out, (const bf16 *)a, (const bf16 *)b},
            aligned16(out) && aligned16(a) && aligned16(b));
}

extern "C" void vf_cuda_axpy(vf_backend *be, void *y, const void *x, float alpha, int64_t n)
{
    OpScope s(be);
    run_map(s.c, n, AxpyF{(bf16 *)y, (const bf16 *)x, alpha}, aligned16(y) && aligned16(x));
}

/* ------------------------------------------------------------------ GELU, SiLU */

__device__ __forceinline__ float gelu_s(float x) /* σ(2k(x + c x³)): GELU = x·s */
{
    return 1.0f / (1.0f + __expf(-2.0f * GELU_K * (x + GELU_C * x * x * x)));
}
__device__ __forceinline__ float gelu_f(float x) { return x * gelu_s(x); }
__device__ __forceinline__ float gelu_g(float x)
{
    float s = gelu_s(x);
    return s + 2.0f * x * s * (1.0f - s) * (GELU_K * (1.0f + 3.0f * GELU_C * x * x));
}
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + __expf(-x)); }
__device__ __forceinline__ float silu_g(float x)
{
    float s = 1.0f / (1.0f + __expf(-x));
    return s * (1.0f + x * (1.0f - s));
}

/* exact GELU: x·Φ(x); derivative Φ(x) + x·φ(x) */
__device__ __forceinline__ float gelu_erf_f(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_erf_g(float x)
{
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * __expf(-0.5f * x * x);
}

/* GELU: 1 tanh, 2 exact; 0 SiLU */
template <int GELU>
struct ActF {
    bf16 *out;
    const bf16 *inp;
    __device__ static float f(float x) { return GELU == 1 ? gelu_f(x) : GELU == 2 ? gelu_erf_f(x) : silu_f(x); }
    __device__ void one(int64_t i) { out[i] = tobf(f(bf(inp[i]))); }
    __device__ void eight(int64_t i)
    {
        float x[8];
        ld8(inp + i, x);
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] = f(x[j]);
        st8(out + i, x);
    }
};

template <int GELU>
struct ActBwdF {
    bf16 *dinp;
    const bf16 *dout, *inp;
    __device__ static float g(float x) { return GELU == 1 ? gelu_g(x) : GELU == 2 ? gelu_erf_g(x) : silu_g(x); }
    __device__ void one(int64_t i) { dinp[i] = tobf(bf(dinp[i]) + g(bf(inp[i])) * bf(dout[i])); }
    __device__ void eight(int64_t i)
    {
        float d[8], go[8], x[8];
        ld8(dinp + i, d);
        ld8(dout + i, go);
        ld8(inp + i, x);
#pragma unroll
        for (int j = 0; j < 8; j++) d[j] += g(x[j]) * go[j];
        st8(dinp + i, d);
    }
};

extern "C" void vf_cuda_gelu_fwd(vf_backend *be, void *out, const void *inp, int64_t n)
{
    OpScope s(be);
    run_map(s.c, n, ActF<1>{(bf16 *)out, (const bf16 *)inp}, aligned16(out) && aligned16(inp));
}
extern "C" void vf_cuda_gelu_bwd(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n)
{
    OpScope s(be);
    run_map(s.c, n, ActBwdF<1>{(bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp},
            aligned16(dinp) && aligned16(dout) && aligned16(inp));
}
extern "C" void vf_cuda_gelu_erf_fwd(vf_backend *be, void *out, const void *inp, int64_t n)
{
    OpScope s(be);
    run_map(s.c, n, ActF<2>{(bf16 *)out, (const bf16 *)inp}, aligned16(out) && aligned16(inp));
}
extern "C" void vf_cuda_gelu_erf_bwd(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n)
{
    OpScope s(be);
    run_map(s.c, n, ActBwdF<2>{(bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp},
            aligned16(dinp) && aligned16(dout) && aligned16(inp));
}
extern "C" void vf_cuda_silu_fwd(vf_backend *be, void *out, const void *inp, int64_t n)
{
    OpScope s(be);
    run_map(s.c, n, ActF<0>{(bf16 *)out, (const bf16 *)inp}, aligned16(out) && aligned16(inp));
}
extern "C" void vf_cuda_silu_bwd(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n)
{
    OpScope s(be);
    run_map(s.c, n, ActBwdF<0>{(bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp},
            aligned16(dinp) && aligned16(dout) && aligned16(inp));
}
