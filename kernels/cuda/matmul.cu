/* matmul.cu — the dense layer's device helpers beside the cuBLASLt GEMMs (matmul.c): bias
 * rows added when the epilogue cannot fuse them, and the deterministic bias gradient
 * (a column sum, reduce.cuh). */
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

