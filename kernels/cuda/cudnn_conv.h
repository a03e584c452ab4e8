/* cudnn_conv.h — the CUDA backend's conv3d_fwd through cuDNN's convolution: the C face of
 * cudnn_conv.cpp (C++ over the header-only cudnn-frontend) and of conv_path.c, which
 * chooses per call between it and the hand kernel (conv3d.cu) and records which ran.
 * Needs no CUDA header: tools, benches and tests include it.
 *
 * Which path runs: cuDNN wherever it takes the call, the hand kernel where it does not (a
 * shape cuDNN has no plan for within the workspace the memory plan counts, a libcudnn
 * that does not load), and everywhere with VFLOW_CONV=hand. It fails loudly: a libcudnn
 * that does not load logs once that the hand kernel runs (VFLOW_CONV=cudnn makes it an
 * error instead), a shape cuDNN refuses is logged once with cuDNN's reason, and
 * vf_cuda_conv_path says what ran. The VAE is frozen in training, so only the forward
 * goes to cuDNN; conv3d_bwd is the hand kernels'.
 *
 * The cuDNN path keeps ops.h's contract: inp (B, C, T, H, W), w (OC, C, KT, KH, KW) and
 * out in NCDHW bf16, handed to cuDNN as they are (the layout diffusers' VAE runs in), f32
 * accumulation, zero padding before and after each axis as cuDNN's pre- and
 * post-padding (causal time and the downsample's right and bottom pad need no padded
 * copy). The bias is added inside the graph where cuDNN fuses it, else by a kernel after
 * it. Only engines cuDNN marks deterministic are taken (the same bits every run), and only
 * those within vf_conv3d_workspace_bound. Graphs are built once per shape and operand
 * alignment and kept per device, beside the attention's (cudnn_internal.h).
 */
#ifndef VF_CUDNN_CONV_H
#define VF_CUDNN_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cudnn_common.h"
#include "kernels/ops.h"
#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

struct vf_cuda_ctx;

/* ------------------------------------------------------------------ conv_path.c
 * (every CUDA build) */

/* What the conv3d_fwd calls of this process ran so far: "cudnn", "hand" or "cudnn+hand"
 * (some shapes fell back). Before any ran: the path the next one takes where cuDNN takes
 * its shape. A static string. */
const char *vf_cuda_conv_path(void);
/* conv3d_fwd calls run so far per path. Either pointer may be NULL. */
void vf_cuda_conv_counts(int64_t *cudnn, int64_t *hand);
/* Chooses the path of the calls that follow, process-wide: "cudnn" (cuDNN wherever it
 * takes the call) or "hand". 0; VF_EUSAGE for another name; VF_ECUDA when cuDNN is asked
 * for and cannot be had (st says why). */
int vf_cuda_conv_use(const char *path, vf_status *st);
/* Device bytes of cuDNN convolution workspace be holds now (0 without cuDNN). be is a
 * CUDA backend. */
size_t vf_cuda_conv_workspace(vf_backend *be);

/* ------------------------------------------------------------------ cudnn_conv.cpp
 * (builds with VFLOW_HAVE_CUDNN) */

/* conv3d_fwd of shape s through cuDNN on c's stream; the caller holds c's op bracket.
 * Pointers are device memory borrowed for the call (bias may be NULL). 0: enqueued.
 * VF_ENOTFOUND: cuDNN does not take this call (nothing enqueued, logged once per shape
 * and reason): the caller runs the hand kernel. VF_ECUDA: cuDNN failed; the error is noted
 * in c (sync returns it). */
int vf_cudnn_conv_fwd(struct vf_cuda_ctx *c, void *out, const void *inp, const void *w,
                      const void *bias, const vf_conv3d_shape *s);
/* Bytes of convolution workspace c holds now. */
size_t vf_cudnn_conv_workspace(struct vf_cuda_ctx *c);

/* Without a device: builds the graph the backend would build for s (with the bias fused
 * when `bias`) and runs cuDNN's validate() as for a device of compute capability
 * sm_version (90: Hopper) with sm_count SMs. Loads libcudnn first. 0 when it validates;
 * VF_ENOTFOUND with cuDNN's reason when refused; VF_ECUDA when libcudnn cannot be loaded. */
int vf_cudnn_conv_check(const vf_conv3d_shape *s, int bias, int sm_version, int sm_count,
                        vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VF_CUDNN_CONV_H */
