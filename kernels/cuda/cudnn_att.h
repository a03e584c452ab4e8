/* cudnn_att.h — the CUDA backend's attention through cuDNN's fused SDPA (flash attention,
 * forward and backward): the C face of cudnn_att.cpp (C++ over the header-only
 * cudnn-frontend) and of attention_path.c, which chooses per call between it and the hand
 * kernels (attention.cu) and records which ran. Needs no CUDA header: benches and tests
 * include it.
 *
 * Which path runs: cuDNN wherever it takes the call, the hand kernels where it does not
 * (a head dim that is no multiple of 8 or above 256, no keys, a pointer off 16 bytes, a
 * backward that wants only some gradients, a shape cuDNN has no plan for), and everywhere
 * with VFLOW_ATTN=hand. libcudnn.so.9 is dlopen'ed once per process when the first CUDA
 * backend is made (like cuBLASLt, it is not linked: a process that never runs attention
 * pays nothing). It fails loudly: a libcudnn that does not load logs once that the hand
 * kernels run (VFLOW_ATTN=cudnn makes it an error instead), a shape cuDNN refuses is
 * logged once with cuDNN's reason, and vf_cuda_attn_path says what ran.
 *
 * The cuDNN path keeps ops.h's contract: q, k, v, out, dout in BSHD (B, L, H, D) bf16,
 * handed to cuDNN as strided (B, H, L, D) tensors (no transposes); lse (B, H, Lq) f32 is
 * cuDNN's Stats output as it is (ln Σ exp of the scaled scores: ops.h's convention); the
 * backward writes dq, dk, dv and is cuDNN's deterministic algorithm (the same bits every
 * run). Graphs are built once per shape (buckets bring several) and kept per device.
 */
#ifndef VF_CUDNN_ATT_H
#define VF_CUDNN_ATT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cudnn_common.h"
#include "kernels/ops.h"
#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

struct vf_cuda_ctx;

/* ------------------------------------------------------------------ attention_path.c
 * (every CUDA build) */

/* What the attention ops of this process ran so far: "cudnn" (all of them through cuDNN),
 * "hand" (all on the hand kernels), "gemm" (cuBLASLt GEMMs around a softmax: forwards
 * with heads wider than the hand kernels' tiles that cuDNN refuses), joined by '+' where
 * shapes took different paths ("cudnn+hand": some fell back). Before any op ran: the path
 * the next one takes where cuDNN takes its shape. A static string. */
const char *vf_cuda_attn_path(void);
/* Attention forwards run as cuBLASLt GEMMs so far (attention_gemm.cu). */
int64_t vf_cuda_attn_gemm_calls(void);
/* Attention ops (forward and backward each count one) run so far per path. Either
 * pointer may be NULL. */
void vf_cuda_attn_counts(int64_t *cudnn, int64_t *hand);
/* Chooses the path of the ops that follow, process-wide: "cudnn" (cuDNN wherever it takes
 * the call) or "hand". 0; VF_EUSAGE for another name; VF_ECUDA when cuDNN is asked for and
 * cannot be had (st says why). */
int vf_cuda_attn_use(const char *path, vf_status *st);
/* The loaded libcudnn's version (91900 for 9.19.0); 0 when none is loaded. */
int vf_cuda_cudnn_version(void);
/* Device bytes of cuDNN workspace be holds now (the largest any of its graphs asked for;
 * 0 without cuDNN). be is a CUDA backend. */
size_t vf_cuda_attn_workspace(vf_backend *be);

/* ------------------------------------------------------------------ cudnn_att.cpp
 * (builds with VFLOW_HAVE_CUDNN; loading libcudnn: cudnn_common.h) */

/* Attention through cuDNN on c's stream; the caller holds c's op bracket. Pointers are
 * device memory borrowed for the call. 0: enqueued. VF_ENOTFOUND: cuDNN does not take
 * this call (nothing enqueued, logged once per shape and reason): the caller runs the hand
 * kernel. VF_ECUDA: cuDNN failed; the error is noted in c (sync returns it). */
int vf_cudnn_att_fwd(struct vf_cuda_ctx *c, void *out, float *lse, const void *q,
                     const void *k, const void *v, int64_t B, int64_t Lq, int64_t Lk,
                     int64_t H, int64_t D, float scale);
int vf_cudnn_att_bwd(struct vf_cuda_ctx *c, void *dq, void *dk, void *dv, const void *dout,
                     const void *q, const void *k, const void *v, const void *out,
                     const float *lse, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                     int64_t D, float scale);
/* Bytes of attention workspace c holds now. */
size_t vf_cudnn_att_workspace(struct vf_cuda_ctx *c);

/* Without a device: builds the forward (with Stats) and deterministic backward graphs the
 * backend would build for this shape and runs cuDNN's validate() as for a device of
 * compute capability sm_version (90: Hopper) with sm_count SMs. Loads libcudnn first.
 * 0 when both validate; VF_ENOTFOUND with cuDNN's reason when a graph is refused;
 * VF_ECUDA when libcudnn cannot be loaded. */
int vf_cudnn_att_check(int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D,
                       int sm_version, int sm_count, vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VF_CUDNN_ATT_H */
