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
 *
 * Without CUDA (no hook registered) an item with a device tensor on a ZeroMQ edge fails
 * with a message naming the edge; "@host/" tensors are still unwrapped, as host tensors.
 *
 * Where the ZeroMQ transport (transport_zmq.c) calls these:
 *   send:     an item with a device tensor goes out with vf_devxfer_send_zmq(e, it, &bytes,
 *             st) instead of the shared record;
 *   try_recv: after vf_zmq_try_recv returned an item: vf_devxfer_recv_fixup(e, out, st)
 *             (before vf_zmq_consumed, so the credit follows the copy);
 *   free:     vf_devxfer_edge_free(e) first.
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

/* Sends `it` (not consumed: the caller frees it) on one sending ZeroMQ edge end through
 * the hook: waits for a credit, builds and encodes the wire item, sends it. Returns as
 * vf_zmq_send (0, VF_EOS when the receiver stopped reading, VF_ESTOPPED, an error whose
 * message names the edge); *bytes = encoded bytes sent. */
int vf_devxfer_send_zmq(vf_edge_end *e, const vf_item *it, int64_t *bytes, vf_status *st);
/* On a receiving end, for an item just taken from ZeroMQ: unwraps wire tensors in place
 * (no-op for ordinary items). On failure *it is freed and set to NULL. */
int vf_devxfer_recv_fixup(vf_edge_end *e, vf_item **it, vf_status *st);
/* Drops the hook state of an edge end (call before freeing the end). */
void vf_devxfer_edge_free(vf_edge_end *e);

#ifdef __cplusplus
}
#endif
#endif /* VF_TRANSPORT_DEV_H */
