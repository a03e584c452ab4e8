/* transport_dev.h — device tensors on ZeroMQ edges: the hook between the data plane
 * (which knows nothing of CUDA and is built without it) and the CUDA transports
 * (kernels/cuda/xfer_cuda.c, built only where nvcc is; it registers itself at load).
 *
 * On the wire a device tensor "x" of an item becomes a HOST tensor with a reserved
 * name, so the codec, its fuzzing and LMDB records stay exactly as they are:
 *   "@host/x"  the payload itself, same dtype and shape (host-staged fallback);
 *   "@ipc/x"   a u8 descriptor: CUDA IPC memory handle + event handle of the producer's
 *              pool block (same node);
 *   "@nccl/x"  a u8 descriptor; the payload follows by ncclSend/ncclRecv on a
 *              communicator of the edge's two ends ("@nccl-id" carries its unique id in
 *              the first item, in-band: both ends already share this ZeroMQ link).
 * The receiver turns them back into a tensor named "x": a device tensor on the CUDA
 * device its thread works on (the one it last asked vf_backend_cuda for), or a host
 * tensor (same dtype) on a thread that never did (a CPU stage fed by a GPU stage).
 *
 * Buffer lifetime: the producer keeps every device tensor it sent on an
 * edge referenced until that item's credit comes back; the consumer copies the data
 * into its own pool memory before vf_recv returns (so the credit, sent once vf_recv
 * hands the item over, is the release). A producer buffer is therefore reused only
 * after the consumer released it, and at most `capacity` of them are held per edge.
 * A view (vflow.h "lending memory") is the exception: over CUDA IPC its descriptor says
 * so and the consumer's tensor aliases the producer's block instead of a copy; the
 * stages' protocol, not the credit, says when the producer may touch it again.
 *
 * Without CUDA (no hook registered) an item with a device tensor on a ZeroMQ edge fails
 * with a message naming the edge; "@host/" tensors are still unwrapped, as host tensors.
 *
 * The hook sits behind the device lane (lane_dev.c, one of the ZeroMQ channel's payload
 * lanes, lane.h): the lane claims every item with a device tensor, calls `send` once the
 * edge has a credit and `sent` once the wire item's record is queued, `recv` on every
 * item that arrives with wire tensors (before its credit goes back, so the credit
 * follows the copy), and `edge_free` when the end goes. The hook's per-edge state is
 * the lane's state on that end.
 */
#ifndef VF_TRANSPORT_DEV_H
#define VF_TRANSPORT_DEV_H

#include "runtime/edge/chan.h"
#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VF_DEVX_HOST "@host/"
#define VF_DEVX_IPC "@ipc/"
#define VF_DEVX_NCCL "@nccl/"
#define VF_DEVX_NCCL_ID "@nccl-id"

typedef struct vf_devxfer_ops {
    const char *name; /* "cuda" */
    /* Sender, once per item and ZeroMQ edge, after the edge has a credit: builds the
     * host-only wire item for `it` (caller owns *wire); `it` is not modified. inflight:
     * items sent on this edge whose credit has not come back (the hook may release what
     * it held for the older ones). *state: the edge's hook state, NULL the first time,
     * owned by the hook until edge_free. */
    int (*send)(void **state, const vf_edge_desc *d, int inflight, const vf_item *it, vf_item **wire,
                vf_status *st);
    /* Sender, after the record of the last send went to ZeroMQ (NCCL posts its sends
     * here: the receiver learns of them from the record). */
    int (*sent)(void **state, const vf_edge_desc *d, vf_status *st);
    /* Receiver: replaces the wire tensors of *it (see above). */
    int (*recv)(void **state, const vf_edge_desc *d, vf_item **it, vf_status *st);
    /* Either side, when the edge end goes: releases what the state holds. */
    void (*edge_free)(void *state, const vf_edge_desc *d);
} vf_devxfer_ops;

/* Installs the device transports (ops is static; NULL removes them). */
void vf_devxfer_register(const vf_devxfer_ops *ops);
const vf_devxfer_ops *vf_devxfer_get(void);

/* True when the item holds a tensor whose device is not the CPU. */
bool vf_item_has_device(const vf_item *it);
/* True when the item holds a wire placeholder ("@…" name). */
bool vf_item_has_wire_device(const vf_item *it);

#ifdef __cplusplus
}
#endif
#endif /* VF_TRANSPORT_DEV_H */
