/* memory.cu — transfers of the CUDA backend: memset, upload/download between host f32 and
 * device storage (bf16, f16, f32, and i32 for token ids, which the models pass as exact
 * small floats), device copies (flat and strided). (permute is layout.cu, the embedding embed_loss.cu.)
 *
 * upload/download go through an 8 MiB staging slice of the scratch area, chunk by chunk:
 * host f32 -> staging (cudaMemcpyAsync from pageable memory returns once the source is
 * copied out, so the caller may reuse it at once) -> convert kernel -> destination; the
 * other way round for download, which returns only when the host buffer is filled.
 */
#include <stdio.h>

#include "kernels/cuda/common.cuh"

/* ------------------------------------------------------------------ memset, copy */

extern "C" void vf_cuda_memset0(vf_backend *be, void *p, size_t bytes)
{
    if (!bytes) return;
    OpScope s(be);
    VF_CUDA_NOTE(s.c, cudaMemsetAsync(p, 0, bytes, s.c->stream));
}

extern "C" void vf_cuda_copy(vf_backend *be, void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src) return;
    OpScope s(be);
    /* cudaMemcpyDefault: either side may be host memory (unified addressing) */
    VF_CUDA_NOTE(s.c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s.c->stream));
}

extern "C" void vf_cuda_copy2d(vf_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                               size_t width, size_t rows)
{
    if (!width || !rows) return;
    OpScope s(be);
    VF_CUDA_NOTE(s.c, cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault, s.c->stream));
}

/* ------------------------------------------------------------------ upload / download */

__global__ void k_f32_to(void *dst, const float *src, int64_t n, int dt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float x = src[i];
        if (dt == VF_DTYPE_BF16) ((bf16 *)dst)[i] = __float2bfloat16_rn(x);
        else if (dt == VF_DTYPE_F16) ((__half *)dst)[i] = __float2half_rn(x);
        else if (dt == VF_DTYPE_I32) ((int32_t *)dst)[i] = (int32_t)rintf(x);
        else if (dt == VF_DTYPE_U8) ((uint8_t *)dst)[i] = (uint8_t)rintf(x);
    }
}

__global__ void k_to_f32(float *dst, const void *src, int64_t n, int dt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float x = 0.0f;
        if (dt == VF_DTYPE_BF16) x = __bfloat162float(((const bf16 *)src)[i]);
        else if (dt == VF_DTYPE_F16) x = __half2float(((const __half *)src)[i]);
        else if (dt == VF_DTYPE_I32) x = (float)((const int32_t *)src)[i];
        else if (dt == VF_DTYPE_U8) x = (float)((const uint8_t *)src)[i];
        dst[i] = x;
    }
}

static bool dtype_ok(vf_cuda_ctx *c, vf_dtype dt, const char *op)
{
    if (dt == VF_DTYPE_F32 || dt == VF_DTYPE_BF16 || dt == VF_DTYPE_F16 || dt == VF_DTYPE_I32 || dt == VF_DTYPE_U8)
        return true;
    vf_cuda_note_msg(c, __FILE__, __LINE__, "%s: unsupported dtype %d", op, (int)dt);
    return false;
}

extern "C" void vf_cuda_upload(vf_backend *be, void *dst, const float *src, int64_t n, vf_dtype dt)
{
    if (n <= 0) return;
    OpScope s(be);
    if (!dtype_ok(s.c, dt, "upload")) return;
    if (dt == VF_DTYPE_F32) {
        VF_CUDA_NOTE(s.c, cudaMemcpyAsync(dst, src, (size_t)n * 4, cudaMemcpyHostToDevice, s.c->stream));
        return;
    }
    const int64_t chunk = (int64_t)(VF_CUDA_STAGE_BYTES / sizeof(float));
    float *stage = (float *)vf_cuda_stage(s.c);
    const size_t es = vf_dtype_size(dt);
    for (int64_t o = 0; o < n; o += chunk) {
        int64_t m = n - o < chunk ? n - o : chunk;
        if (VF_CUDA_NOTE(s.c, cudaMemcpyAsync(stage, src + o, (size_t)m * 4, cudaMemcpyHostToDevice, s.c->stream)))
            return;
        k_f32_to<<<grid_for(m, 256, 4096), 256, 0, s.c->stream>>>((char *)dst + o * es, stage, m, (int)dt);
        VF_CUDA_NOTE_LAUNCH(s.c);
    }
}

extern "C" void vf_cuda_download(vf_backend *be, float *dst, const void *src, int64_t n, vf_dtype dt)
{
    if (n <= 0) return;
    OpScope s(be);
    if (!dtype_ok(s.c, dt, "download")) return;
    if (dt == VF_DTYPE_F32) {
        VF_CUDA_NOTE(s.c, cudaMemcpyAsync(dst, src, (size_t)n * 4, cudaMemcpyDeviceToHost, s.c->stream));
        VF_CUDA_NOTE(s.c, cudaStreamSynchronize(s.c->stream));
        return;
    }
    const int64_t chunk = (int64_t)(VF_CUDA_STAGE_BYTES / sizeof(float));
    float *stage = (float *)vf_cuda_stage(s.c);
    const size_t es = vf_dtype_size(dt);
    for (int64_t o = 0; o < n; o += chunk) {
        int64_t m = n - o < chunk ? n - o : chunk;
        k_to_f32<<<grid_for(m, 256, 4096), 256, 0, s.c->stream>>>(stage, (const char *)src + o * es, m, (int)dt);
        VF_CUDA_NOTE_LAUNCH(s.c);
        if (VF_CUDA_NOTE(s.c, cudaMemcpyAsync(dst + o, stage, (size_t)m * 4, cudaMemcpyDeviceToHost, s.c->stream)))
            return;
        /* the next chunk reuses the staging buffer: it is stream-ordered after this copy */
    }
    VF_CUDA_NOTE(s.c, cudaStreamSynchronize(s.c->stream));
}
