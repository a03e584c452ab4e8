/* memory.c — the CPU backend's memory functions: host memory from vf_alloc (accounted
 * to the calling stage) and conversions between host f32 and a storage dtype.
 *
 * The CPU backend stores activations and gradients as F32, so upload/download are
 * copies there; BF16 and F16 are converted with the runtime's round-to-nearest-even
 * helpers (used when the CPU side stages bf16 weights for another backend or a file).
 */
#include <string.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

void *vf_cpu_alloc(size_t bytes, vf_status *st) { return vf_alloc(bytes, st); }

void vf_cpu_free(void *p) { vf_free(p); }

void vf_cpu_upload(void *dst, const float *src, int64_t n, vf_dtype dst_dtype)
{
    switch (dst_dtype) {
    case VF_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case VF_DTYPE_BF16: {
        uint16_t *d = dst;
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) d[i] = vf_f32_to_bf16(src[i]);
        break;
    }
    case VF_DTYPE_F16: {
        uint16_t *d = dst;
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) d[i] = vf_f32_to_f16(src[i]);
        break;
    }
    default:
        /* a model bug: only float storage dtypes are transferred through the backend */
        VF_ASSERT(dst_dtype == VF_DTYPE_F32 || dst_dtype == VF_DTYPE_BF16 ||
                  dst_dtype == VF_DTYPE_F16);
    }
}

void vf_cpu_download(float *dst, const void *src, int64_t n, vf_dtype src_dtype)
{
    switch (src_dtype) {
    case VF_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case VF_DTYPE_BF16: {
        const uint16_t *s = src;
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) dst[i] = vf_bf16_to_f32(s[i]);
        break;
    }
    case VF_DTYPE_F16: {
        const uint16_t *s = src;
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) dst[i] = vf_f16_to_f32(s[i]);
        break;
    }
    default:
        VF_ASSERT(src_dtype == VF_DTYPE_F32 || src_dtype == VF_DTYPE_BF16 ||
                  src_dtype == VF_DTYPE_F16);
    }
}
