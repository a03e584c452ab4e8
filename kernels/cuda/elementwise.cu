/* elementwise.cu — the pointwise ops of the CUDA backend: add, axpy, GELU (tanh) and
 * SiLU forward/backward, RoPE forward/backward, and the fused AdamW step.
 *
 * Each op is one pass over its tensors: 16-byte accesses (8 bf16) when every pointer is
 * 16-byte aligned and n is large, scalar otherwise (same formulas). Gradients
 * accumulate (+=) as ops.h requires; the sum is formed in f32 and rounded to bf16 once.
 * AdamW reads the bf16 gradient and the f32 master / moments, and writes the f32 state
 * and the bf16 compute copy of the weights in the same pass; its per-element arithmetic
 * is f64, term for term the CPU reference's (torch.optim.AdamW), so GPU and CPU
 * optimizer shards agree to the last f32 bit up to the rounding of the bf16 gradient.
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

template <int GELU>
struct ActF {
    bf16 *out;
    const bf16 *inp;
    __device__ static float f(float x) { return GELU ? gelu_f(x) : silu_f(x); }
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
    __device__ static float g(float x) { return GELU ? gelu_g(x) : silu_g(x); }
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
            if (BWD) y[D - 1] = tobf(bf(y[D - 1]) + bf(x[D - 1]));
            else y[D - 1] = x[D - 1];
            continue;
        }
        const float c = cs[l * P + i], s = sn[l * P + i];
        const float x0 = bf(x[2 * i]), x1 = bf(x[2 * i + 1]);
        if (BWD) { /* dinp += R(−θ)·dout */
            y[2 * i] = tobf(bf(y[2 * i]) + (x0 * c + x1 * s));
            y[2 * i + 1] = tobf(bf(y[2 * i + 1]) + (x1 * c - x0 * s));
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

/* ------------------------------------------------------------------ AdamW */

struct AdamArgs {
    double b1, b2, gsc, step, sbc2, decay, eps;
};

__global__ void k_adamw(float *master, float *m, float *v, const bf16 *grad, bf16 *wout, int64_t n, AdamArgs a)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double g = (double)bf(grad[i]) * a.gsc;
        double mi = a.b1 * (double)m[i] + (1.0 - a.b1) * g;
        double vi = a.b2 * (double)v[i] + (1.0 - a.b2) * g * g;
        float mf = (float)mi, vf = (float)vi;
        double p = (double)master[i] * a.decay;
        p -= a.step * (double)mf / (sqrt((double)vf) / a.sbc2 + a.eps);
        m[i] = mf;
        v[i] = vf;
        master[i] = (float)p;
        if (wout) wout[i] = tobf((float)p);
    }
}

extern "C" void vf_cuda_adamw(vf_backend *be, float *master, float *m, float *v, const void *grad,
                              void *weights_out, int64_t n, float lr, float beta1, float beta2, float eps,
                              float weight_decay, float grad_scale, int64_t t)
{
    if (n <= 0) return;
    OpScope s(be);
    if (t < 1) {
        vf_cuda_note_msg(s.c, __FILE__, __LINE__, "adamw: step t = %lld (must be >= 1)", (long long)t);
        return;
    }
    AdamArgs a;
    a.b1 = beta1;
    a.b2 = beta2;
    a.gsc = grad_scale;
    const double bc1 = 1.0 - pow((double)beta1, (double)t), bc2 = 1.0 - pow((double)beta2, (double)t);
    a.step = (double)lr / bc1;
    a.sbc2 = sqrt(bc2);
    a.decay = 1.0 - (double)lr * (double)weight_decay;
    a.eps = eps;
    k_adamw<<<grid_for(n, 256, (int64_t)s.c->sm_count * 16), 256, 0, s.c->stream>>>(
        master, m, v, (const bf16 *)grad, (bf16 *)weights_out, n, a);
    VF_CUDA_NOTE_LAUNCH(s.c);
}
