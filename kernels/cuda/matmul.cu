/* matmul.cu — the dense layer's device helpers beside the cuBLASLt GEMMs (matmul.c): bias
 * rows added when the epilogue cannot fuse them, the deterministic bias gradient
 * (a column sum, reduce.cuh), and the dequantisation of a frozen FP8 weight. */
#include "kernels/cuda/reduce.cuh"

extern "C" void vf_cuda_add_bias_rows(vf_cuda_ctx *c, void *out, const void *bias, int64_t N, int64_t OC)
{
    bcast(c, 0, (bf16 *)out, (const bf16 *)out, (const bf16 *)bias, NULL, NULL, 1, N, OC);
}


struct BiasOp {
    const bf16 *dout;
    int64_t C;
    __device__ void at(int64_t b, int64_t l, int64_t c, float &s1, float &s2) const { s1 += bf(dout[l * C + c]); }
};

extern "C" void vf_cuda_bias_grad(vf_cuda_ctx *c, void *dbias, const void *dout, int64_t N, int64_t OC)
{
    colsum(c, BiasOp{(const bf16 *)dout, OC}, 1, N, OC, (bf16 *)dbias, NULL, true);
}

__global__ void k_add_f32(bf16 *d, const float *s, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        d[i] = tobf(bf(d[i]) + s[i]);
}

extern "C" void vf_cuda_add_f32_to_bf16(vf_cuda_ctx *c, void *dbias, const float *src, int64_t n)
{
    if (n <= 0) return;
    k_add_f32<<<grid_for(n, 256), 256, 0, c->stream>>>((bf16 *)dbias, src, n);
    VF_CUDA_NOTE_LAUNCH(c);
}


/* FP8 E4M3 (e4m3fn) to float, as vf_e4m3_to_f32: bias 7, subnormals m·2⁻⁹, 0x7f NaN. */
__device__ __forceinline__ float e4m3_val(uint8_t x)
{
    const int e = (x >> 3) & 15, m = x & 7;
    float v = e ? ldexpf(1.0f + (float)m * 0.125f, e - 7) : (float)m * 0.001953125f;
    if (e == 15 && m == 7) v = __int_as_float(0x7fc00000);
    return (x & 0x80) ? -v : v;
}

__global__ void k_fp8_dequant(bf16 *d, const uint8_t *w8, float scale, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        d[i] = tobf(e4m3_val(w8[i]) * scale);
}

extern "C" void vf_cuda_fp8_dequant(vf_cuda_ctx *c, void *dst, const uint8_t *w8, float scale, int64_t n)
{
    if (n <= 0) return;
    k_fp8_dequant<<<grid_for(n, 256), 256, 0, c->stream>>>((bf16 *)dst, w8, scale, n);
    VF_CUDA_NOTE_LAUNCH(c);
}
