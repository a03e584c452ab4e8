/* attention_path.c — which implementation runs the CUDA backend's attention ops: cuDNN's
 * fused SDPA (cudnn_att.cpp) wherever it takes the call, the hand kernels (attention.cu)
 * otherwise, and the process-wide record of what ran (cudnn_att.h says the rules).
 *
 * The choice is per process (lib_path.c): VFLOW_ATTN unset or "cudnn" takes cuDNN where it
 * can (set explicitly, a libcudnn that does not load is an error rather than a fallback),
 * "hand" never touches libcudnn. Whatever was chosen, a call cuDNN refuses runs on the hand
 * kernels and is counted there, so a benchmark's vf_cuda_attn_path names a fallback
 * instead of hiding it. A forward cuDNN refuses with heads wider than the hand kernels'
 * tiles (the VAE's 384) runs as cuBLASLt GEMMs around a softmax (attention_gemm.cu,
 * counted as "gemm") unless "hand" was asked for.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_att.h"

static vf_cuda_path g_path = {.env = "VFLOW_ATTN", .what = "attention"};
static const int64_t hand_tile_d = 128; /* the widest head the hand kernels' tiles take (attention.cu) */

/* VFLOW_ATTN_WORKSPACE_MB, then the path (lib_path.c): 0, VF_EUSAGE or VF_ECUDA */
static int setup(vf_status *st)
{
    if (vf_attention_workspace_limit() < 0)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "VFLOW_ATTN_WORKSPACE_MB=%s: expected a positive number of MiB",
                             getenv("VFLOW_ATTN_WORKSPACE_MB"));
    return vf_cuda_path_setup(&g_path, st);
}

int vf_cuda_attn_init(vf_cuda_ctx *c, vf_status *st)
{
    (void)c; /* the cuDNN state of c is made on its first attention (cudnn_att.cpp) */
    return setup(st);
}

int vf_cuda_attn_use(const char *path, vf_status *st)
{
    int rc = setup(st);
    return rc ? rc : vf_cuda_path_use(&g_path, path, st);
}

const char *vf_cuda_attn_path(void) { return vf_cuda_path_name(&g_path); }

int64_t vf_cuda_attn_gemm_calls(void) { return vf_cuda_path_calls(&g_path, VF_PATH_GEMM); }

void vf_cuda_attn_counts(int64_t *cudnn, int64_t *hand)
{
    if (cudnn) *cudnn = vf_cuda_path_calls(&g_path, VF_PATH_CUDNN);
    if (hand) *hand = vf_cuda_path_calls(&g_path, VF_PATH_HAND);
}

int vf_cuda_cudnn_version(void)
{
#ifdef VFLOW_HAVE_CUDNN
    return (int)vf_cudnn_loaded_version();
#else
    return 0;
#endif
}

size_t vf_cuda_attn_workspace(vf_backend *be)
{
#ifdef VFLOW_HAVE_CUDNN
    return vf_cuda_path_bytes(be, vf_cudnn_att_workspace);
#else
    (void)be;
    return 0;
#endif
}

/* ------------------------------------------------------------------ the table's entries */

void vf_cuda_attention_fwd(vf_backend *be, void *out, float *lse, const void *q, const void *k,
                           const void *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D,
                           float scale)
{
    if (B <= 0 || Lq <= 0 || H <= 0 || D <= 0) return;
#ifdef VFLOW_HAVE_CUDNN
    if (Lk > 0 && vf_cuda_path_lib(&g_path)) {
        vf_cuda_ctx *c = vf_cuda_ctx_of(be);
        vf_cuda_op_begin(c);
        int rc = vf_cudnn_att_fwd(c, out, lse, q, k, v, B, Lq, Lk, H, D, scale);
        vf_cuda_op_end(c);
        if (rc == 0) vf_cuda_path_count(&g_path, VF_PATH_CUDNN);
        if (rc != VF_ENOTFOUND) return;
    }
#endif
    /* wider than the hand kernels' tiles: cuBLASLt's GEMMs around a softmax, unless the
     * hand kernels are asked for */
    if (Lk > 0 && D > hand_tile_d && !vf_cuda_path_hand(&g_path)) {
        vf_cuda_ctx *c = vf_cuda_ctx_of(be);
        vf_cuda_op_begin(c);
        int rc = vf_cuda_attention_gemm_fwd(c, out, lse, q, k, v, B, Lq, Lk, H, D, scale);
        vf_cuda_op_end(c);
        if (rc == 0) vf_cuda_path_count(&g_path, VF_PATH_GEMM);
        if (rc != VF_ENOTFOUND) return;
    }
    if (Lk > 0) vf_cuda_path_count(&g_path, VF_PATH_HAND); /* no keys is no attention: zeros, on either path */
    vf_cuda_attention_hand_fwd(be, out, lse, q, k, v, B, Lq, Lk, H, D, scale);
}

void vf_cuda_attention_bwd(vf_backend *be, void *dq, void *dk, void *dv, const void *dout,
                           const void *q, const void *k, const void *v, const void *out,
                           const float *lse, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                           int64_t D, float scale)
{
    if (B <= 0 || H <= 0 || D <= 0 || (!dq && !dk && !dv)) return;
    const bool work = Lq > 0 && Lk > 0;
#ifdef VFLOW_HAVE_CUDNN
    if (work && vf_cuda_path_lib(&g_path)) {
        vf_cuda_ctx *c = vf_cuda_ctx_of(be);
        vf_cuda_op_begin(c);
        int rc = vf_cudnn_att_bwd(c, dq, dk, dv, dout, q, k, v, out, lse, B, Lq, Lk, H, D, scale);
        vf_cuda_op_end(c);
        if (rc == 0) vf_cuda_path_count(&g_path, VF_PATH_CUDNN);
        if (rc != VF_ENOTFOUND) return;
    }
#endif
    if (work) vf_cuda_path_count(&g_path, VF_PATH_HAND);
    vf_cuda_attention_hand_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, B, Lq, Lk, H, D, scale);
}
