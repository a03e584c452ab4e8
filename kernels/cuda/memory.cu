/* memory.cu — transfers and layout ops of the CUDA backend: memset, upload/download
 * between host f32 and device storage (bf16, f16, f32, and i32 for token ids, which the
 * models pass as exact small floats), device copies, permute, and the token embedding
 * (gather forward, deterministic scatter-add backward).
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

/* ------------------------------------------------------------------ permute */

struct PermArgs {
    int ndim;
    int64_t oshape[VF_MAX_DIMS];
    int64_t istride[VF_MAX_DIMS]; /* input stride of each OUTPUT axis */
};

/* one thread per output element, written in order; the input is a strided gather */
__global__ void k_permute(bf16 *out, const bf16 *inp, int64_t n, PermArgs a)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, off = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t idx = rem % a.oshape[d];
            rem /= a.oshape[d];
            off += idx * a.istride[d];
        }
        out[i] = inp[off];
    }
}

extern "C" void vf_cuda_permute(vf_backend *be, void *out, const void *inp, int ndim, const int64_t *shape,
                                const int *perm)
{
    OpScope s(be);
    if (ndim < 1 || ndim > VF_MAX_DIMS) {
        vf_cuda_note_msg(s.c, __FILE__, __LINE__, "permute: %d dims (1..%d)", ndim, VF_MAX_DIMS);
        return;
    }
    int64_t istride[VF_MAX_DIMS], n = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        istride[i] = n;
        n *= shape[i];
    }
    if (n == 0) return;
    PermArgs a;
    a.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (perm[i] < 0 || perm[i] >= ndim) {
            vf_cuda_note_msg(s.c, __FILE__, __LINE__, "permute: perm[%d] = %d out of range", i, perm[i]);
            return;
        }
        a.oshape[i] = shape[perm[i]];
        a.istride[i] = istride[perm[i]];
    }
    k_permute<<<grid_for(n, 256), 256, 0, s.c->stream>>>((bf16 *)out, (const bf16 *)inp, n, a);
    VF_CUDA_NOTE_LAUNCH(s.c);
}

/* ------------------------------------------------------------------ embedding */

/* out[n, :] = table[tok[n], :]; one block per row */
__global__ void k_embed_fwd(bf16 *out, const int32_t *tok, const bf16 *table, int64_t C, bool vec)
{
    const int64_t n = blockIdx.x;
    const int32_t t = tok[n];
    const bf16 *src = table + (int64_t)(t < 0 ? 0 : t) * C;
    bf16 *dst = out + n * C;
    if (vec) {
        for (int64_t c = threadIdx.x * 8; c < C; c += blockDim.x * 8)
            *reinterpret_cast<uint4 *>(dst + c) = *reinterpret_cast<const uint4 *>(src + c);
    } else {
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
    }
}

/* Scatter-add without atomics or sorting: the block of position n works only if n is
 * the FIRST position holding its token; it lists (in order) every position with that
 * token, then sums their rows for its share of columns in f32, in position order, and
 * adds the total to the table row once. One owner and one order per table entry:
 * deterministic, and independent of the table size (which the op is not told). The
 * scans are O(N) per block, nothing next to the row sums at caption lengths. */
#define EMB_LIST 2048
__global__ void k_embed_bwd(bf16 *dtable, const bf16 *dout, const int32_t *tok, int64_t N, int64_t C)
{
    __shared__ int dup, cnt;
    __shared__ int32_t list[EMB_LIST];
    const int64_t n = blockIdx.x;
    const int32_t t = tok[n];
    if (threadIdx.x == 0) dup = 0;
    __syncthreads();
    for (int64_t m = threadIdx.x; m < n; m += blockDim.x)
        if (tok[m] == t) dup = 1; /* benign race: every writer writes 1 */
    __syncthreads();
    if (dup || t < 0) return;
    if (threadIdx.x == 0) { /* the positions of token t, in order (one thread: the order is the point) */
        int k = 0;
        for (int64_t m = n; m < N && k <= EMB_LIST; m++)
            if (tok[m] == t) {
                if (k < EMB_LIST) list[k] = (int32_t)m;
                k++;
            }
        cnt = k; /* EMB_LIST + 1: too many to list, scan instead */
    }
    __syncthreads();
    const int k = cnt;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        if (k <= EMB_LIST) {
            for (int i = 0; i < k; i++) acc += __bfloat162float(dout[(int64_t)list[i] * C + c]);
        } else {
            for (int64_t m = n; m < N; m++)
                if (tok[m] == t) acc += __bfloat162float(dout[m * C + c]);
        }
        bf16 *d = dtable + (int64_t)t * C + c;
        *d = __float2bfloat16_rn(__bfloat162float(*d) + acc);
    }
}

/* Tokens must be >= 0 and < the table's rows (ops.h); the kernels cannot check the
 * upper bound (the table size is not passed) and, without a host sync, cannot report a
 * negative token: they clamp it to row 0 (forward) or skip it (backward) rather than
 * touch memory outside the table. */
extern "C" void vf_cuda_embed_fwd(vf_backend *be, void *out, const int32_t *tok, const void *table, int64_t N,
                                  int64_t C)
{
    if (N <= 0 || C <= 0) return;
    OpScope s(be);
    bool vec = C % 8 == 0 && aligned16(out) && aligned16(table);
    k_embed_fwd<<<(unsigned)N, 128, 0, s.c->stream>>>((bf16 *)out, tok, (const bf16 *)table, C, vec);
    VF_CUDA_NOTE_LAUNCH(s.c);
}

extern "C" void vf_cuda_embed_bwd(vf_backend *be, void *dtable, const void *dout, const int32_t *tok, int64_t N,
                                  int64_t C)
{
    if (N <= 0 || C <= 0) return;
    OpScope s(be);
    k_embed_bwd<<<(unsigned)N, 256, 0, s.c->stream>>>((bf16 *)dtable, (const bf16 *)dout, tok, N, C);
    VF_CUDA_NOTE_LAUNCH(s.c);
}
