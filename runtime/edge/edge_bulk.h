/* edge_bulk.h — the large tensors of a tcp edge through a bulk lane: one plain TCP
 * connection per edge beside its ZeroMQ socket, encrypted with AES-256-GCM on a secured
 * hub, read by the receiver straight into reused buffers.
 *
 * Why a lane of its own: ZeroMQ mallocs a fresh buffer for every large frame it
 * receives, so a 64 MiB tensor costs the receiver 16 k page faults, and CURVE encrypts
 * with XSalsa20-Poly1305 on one core; together they hold a secured tcp edge to about a
 * tenth of a plain TCP stream. The lane keeps ZeroMQ (and CURVE) for everything it was
 * doing — the record, credits, end of stream, acks, peer monitoring — and moves only the
 * payload of the split record's frames:
 *   - the receiving end listens on a second port of the address its ZeroMQ socket bound
 *     and appends "|bulk=<port>,<salt>,<mode>" to the endpoint it reports (the salt: 16
 *     random bytes, hex; the mode: p, e or a, below); the sending end strips that suffix
 *     before connecting ZeroMQ, and a secured sender refuses a plain lane;
 *   - the lane's key is BLAKE2b-256 keyed by the run key over "vflow-bulk-1" || salt (a
 *     fresh key per edge and run, so nonces — a counter per connection — never repeat
 *     under one key); an unsecured hub keys it with 32 zero bytes, which authenticates
 *     the connection but is no secret;
 *   - the sender's writer thread connects on its first large item; the receiver's
 *     admission thread answers every connection at once with 16 random bytes and admits
 *     one only if its reply is the GCM tag of (that challenge, the salt) under the key:
 *     a process without the run key cannot pass, a recorded reply cannot be replayed,
 *     and connections that say nothing are waited for side by side, not in turn. The
 *     first admitted connection closes the listener; refused ones are counted in the
 *     hub's refusals (vf_zmq_refused);
 *   - for an item with large tensors the sender sends, in place of each frame, a
 *     VF_BULK_DESC_SIZE descriptor (item sequence number, frame index, length) through
 *     ZeroMQ and queues the frames to its writer thread, which holds a reference of the
 *     record (and so of the tensors) until it has written them: a send never blocks on
 *     the lane, as a ZeroMQ send does not;
 *   - on the wire each frame is cut in chunks of VF_BULK_CHUNK bytes; on a secured hub
 *     (mode e) each chunk is AES-256-GCM ciphertext and its 16-byte tag, nonce = chunk
 *     counter, associated data = (item, frame, offset), so a chunk altered, dropped,
 *     reordered or moved to another item fails authentication; with VFLOW_EDGE_BULK=auth
 *     on the receiver's node (mode a) the chunk goes as it is, from the tensor's memory,
 *     followed by the tag of the same GCM over no plaintext with the chunk as associated
 *     data (GMAC: the same checks, no confidentiality); an unsecured hub (mode p) sends
 *     the bytes as they are;
 *   - the receiver, on a message whose frames are descriptors, reads them from the lane
 *     in order into one buffer for the item (frames 64-byte aligned), decrypts each chunk
 *     in place while it is still in cache, and the item's tensors alias the buffer. A
 *     buffer whose last tensor goes returns to a pool of at most capacity + 1 (the items
 *     the plan counts for the receiver's pipe and its consumer), so a steady stream
 *     reuses pages already faulted in.
 * The receiver reads an item's lane bytes when it takes the item (they are at most the
 * transfer of one item behind its ZeroMQ message), waiting stop-aware; a sender that
 * goes mid-item is an error naming the edge, never a hang. VFLOW_EDGE_BULK=0 in the
 * environment turns the lane off (frames go through ZeroMQ, benchmarks compare both).
 *
 * The channel reaches it as a payload lane (lane.h) through lane_bulk.c.
 */
#ifndef VF_EDGE_BULK_H
#define VF_EDGE_BULK_H
#include "runtime/core/item.h"
#include "runtime/edge/chan_internal.h"

#include <stdbool.h>
#include <stddef.h>

#define VF_BULK_DESC_SIZE 32
#define VF_BULK_CHUNK ((size_t)256 * 1024)
/* The endpoint suffix: "|bulk=" port "," 32 hex digits. */
#define VF_BULK_SUFFIX "|bulk="

typedef struct vf_bulk_rx vf_bulk_rx;
typedef struct vf_bulk_tx vf_bulk_tx;

/* Receiving end: listens beside the ZeroMQ endpoint the end bound (tcp://host:port) and
 * appends the lane's suffix to endpoint (size n). *out = NULL (endpoint unchanged) when
 * the lane is off. curve: the hub's, or NULL on an unsecured hub. refused: counter of
 * the hub the refusals add to. */
int vf_bulk_rx_new(const vf_edge_desc *d, char *endpoint, size_t n, const vf_curve *curve,
                   _Atomic int64_t *refused, vf_bulk_rx **out, vf_status *st);
/* Reads the payloads of one item whose n frames are descriptors desc[0..n) (message
 * parts, in order): out[k] is frame k (data, len, release). Waits for the bytes
 * (stop-aware). Errors name the edge: VF_ECORRUPT for a descriptor out of sequence or
 * bounds, or bytes that fail authentication; VF_EEXTERNAL for a lane that broke. */
int vf_bulk_rx_item(vf_bulk_rx *rx, const void *const *desc, int n, vf_frame *out, vf_status *st);
/* Items read through the lane so far. */
int64_t vf_bulk_rx_items(const vf_bulk_rx *rx);
/* Bytes of the receive buffers the lane holds, pooled or lent to tensors (0 for NULL). */
int64_t vf_bulk_rx_bytes(const vf_bulk_rx *rx);
/* Drops the end's hold: each pooled buffer goes when its last tensor does. NULL is fine. */
void vf_bulk_rx_free(vf_bulk_rx *rx);

/* Sending end: *out = NULL when addr names no lane (or the lane is off). addr is the
 * receiver's endpoint; the suffix is cut off it in place either way. */
int vf_bulk_tx_new(const vf_edge_desc *d, char *addr, const vf_curve *curve, vf_bulk_tx **out, vf_status *st);
/* Queues enc's frames (takes one reference of enc, dropped once written or dropped) and
 * writes their descriptors into desc[0..enc->nframes). An error of the writer so far is
 * returned instead (naming the edge). */
int vf_bulk_tx_send(vf_bulk_tx *tx, vf_enc *enc, unsigned char (*desc)[VF_BULK_DESC_SIZE], vf_status *st);
/* The writer's error, if it has one (0 otherwise). */
int vf_bulk_tx_check(vf_bulk_tx *tx, vf_status *st);
/* Stops the writer (dropping what it has not written) and frees. NULL is fine. */
void vf_bulk_tx_free(vf_bulk_tx *tx);

/* Whether a received part is a lane descriptor. */
bool vf_bulk_is_desc(const void *data, size_t len);

#endif /* VF_EDGE_BULK_H */
