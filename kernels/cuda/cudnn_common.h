/* cudnn_common.h — what the CUDA backend's two cuDNN users share, in C: loading libcudnn and
 * freeing a device's cuDNN state (cudnn_common.cpp). The attention (cudnn_att.h) and the
 * convolution (cudnn_conv.h) include it. Needs no CUDA header.
 *
 * libcudnn.so.9 is dlopen'ed once per process when the first CUDA backend is made (like
 * cuBLASLt, it is not linked: a process that runs neither attention nor convolutions on
 * the GPU pays nothing). Per device the backend holds one cuDNN handle bound to its stream,
 * the graphs built so far (each shape once: building one runs cuDNN's heuristics and plan
 * setup) and one workspace per user, all made on the first call cuDNN takes.
 */
#ifndef VF_CUDNN_COMMON_H
#define VF_CUDNN_COMMON_H

#include <stddef.h>

#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

struct vf_cuda_ctx;

/* Opens libcudnn.so.9 once per process for the frontend (its NV_CUDNN_FRONTEND_USE_
 * DYNAMIC_LOADING resolves every cuDNN call through that handle). 0, or VF_ECUDA naming
 * the library and the loader's reason. Thread-safe. */
int vf_cudnn_load(vf_status *st);
/* cudnnGetVersion() of the loaded library; 0 before vf_cudnn_load succeeded. */
size_t vf_cudnn_loaded_version(void);
/* Frees c's cuDNN handle, graphs and workspaces (none made is fine). */
void vf_cudnn_free(struct vf_cuda_ctx *c);

#ifdef __cplusplus
}
#endif
#endif /* VF_CUDNN_COMMON_H */
