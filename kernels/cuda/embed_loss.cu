/* embed_loss.cu — the token embedding (gather forward, deterministic scatter-add
 * backward) and the MSE loss (f64 block sums, reduce.cuh) on the CUDA backend. */
#include "kernels/cuda/reduce.cuh"

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

/* ------------------------------------------------------------------ MSE loss */

extern "C" double vf_cuda_mse_fwd_bwd(vf_backend *be, void *dpred, const void *pred, const void *target, int64_t n,
                                      int64_t count, float grad_scale)
{
    if (n <= 0 || count <= 0) return 0.0;
    OpScope s(be);
    double *part = (double *)vf_cuda_partials(s.c);
    k_red<1><<<VF_CUDA_RED_BLOCKS, RED_THREADS, 0, s.c->stream>>>(part, (bf16 *)dpred, (const bf16 *)pred,
                                                                    (const bf16 *)target, n,
                                                                    2.0 * (double)grad_scale / (double)count);
    VF_CUDA_NOTE_LAUNCH(s.c);
    return red_finish(s.c, part) / (double)count;
}
