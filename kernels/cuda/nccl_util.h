/* nccl_util.h — what the CUDA backend's NCCL users share (xfer_cuda.c: the edges' device
 * transport across nodes; collective.c: the ranks' all-to-all). Included only where
 * VFLOW_HAVE_NCCL is defined. */
#ifndef VF_CUDA_NCCL_UTIL_H
#define VF_CUDA_NCCL_UTIL_H

#include <nccl.h>

#include "runtime/vflow.h"

/* Communicators are non-blocking (a dead peer can hang a blocking collective): every NCCL
 * call that may wait is followed by this poll of the communicator's state until its
 * work is enqueued (r: what the call returned). It gives up when the run stops (the
 * supervisor sets the flag once a peer died), aborting the communicator: VF_ESTOPPED;
 * an NCCL error is VF_ECUDA naming `what`. */
int vf_cuda_nccl_wait(ncclComm_t comm, ncclResult_t r, const char *what, vf_status *st);

#endif /* VF_CUDA_NCCL_UTIL_H */
