/* edge_shm.h — the large tensors of an ipc edge through shared memory: one copy on the
 * sending side, none on the receiving side, no trip through the kernel's socket buffers.
 *
 * An ipc edge between two processes of one node still sends every item as a ZeroMQ
 * message (the record, credits, end of stream stay as transport_zmq.c describes them),
 * but the frames of its large tensors (the split record's frames) can go through a
 * segment of shared memory the sending end owns instead:
 *   - the sender makes a POSIX shared-memory object of `slots` slots, each large enough
 *     for the largest item its port declares, mode 0600 (only the run's user), and maps
 *     it; the receiver maps it on the first descriptor that names it and unlinks the
 *     name (the sender unlinks it too when its end goes: whichever comes first), so the
 *     memory lives exactly as long as a process maps it;
 *   - to send an item, the sender claims a free slot (its reference count, kept in the
 *     segment's first page, is 0), copies the item's frames into it and sends, instead
 *     of each frame, a 128-byte descriptor (magic, slot, offset, length, the object's
 *     name); the slot's count is the number of frames in it;
 *   - the receiver's tensors alias the slot; releasing each frame (the last tensor that
 *     aliases it goes) drops the slot's count, and the slot is free again at 0.
 * A slot is held by what the consumer still holds, not by the edge's credits, so all
 * slots can be busy with credits to spare: the item then goes as plain frames through
 * the socket (the path without shared memory), never waiting. An item larger than a
 * slot goes that way too. The receiver tells a descriptor from a data frame by size
 * and magic: data frames are at least VF_EDGE_FRAME_MIN bytes, descriptors 128.
 *
 * Memory: slots = capacity + 1, the items in flight on the edge and the one its consumer
 * works on. They are the bytes the plan already counts — the receiver's pipe (capacity
 * items, which now sit in slots instead of ZeroMQ buffers) and the consumer's declared
 * input item — moved into shared pages, reserved when the first item is sent. A
 * consumer that holds more than it declared runs the edge on plain frames.
 * VFLOW_EDGE_SHM=0 in the environment turns it off (benchmarks compare both).
 *
 * The channel reaches it as a payload lane (lane.h) through lane_shm.c.
 */
#ifndef VF_EDGE_SHM_H
#define VF_EDGE_SHM_H
#include "runtime/core/item.h"
#include "runtime/edge/chan.h"

#include <stdbool.h>
#include <stddef.h>

#define VF_SHM_DESC_SIZE 128

typedef struct vf_shm_tx vf_shm_tx;

/* The sending end's segment for an edge, or *out = NULL when the edge does not use one
 * (not ipc, no declared item size, turned off, or over the size limit). Nothing is
 * created before the first item that fits. */
int vf_shm_tx_new(const vf_edge_desc *d, vf_shm_tx **out, vf_status *st);
/* Places frames[0..n) (the split record's frames, in order) in a free slot and writes
 * one descriptor per frame into desc[k]: *placed = true. *placed = false when no slot
 * is free or they do not fit one (send them as data). */
int vf_shm_tx_place(vf_shm_tx *tx, vf_tensor *const *frames, int n, unsigned char (*desc)[VF_SHM_DESC_SIZE],
                    bool *placed, vf_status *st);
/* Items placed so far, and sent as data for want of a free slot (statistics). */
void vf_shm_tx_counts(const vf_shm_tx *tx, int64_t *placed, int64_t *fallback);
/* Bytes of shared memory the segment holds: its header page and the slot pages reserved
 * so far (0 before the first item that fits, or for NULL). */
int64_t vf_shm_tx_bytes(const vf_shm_tx *tx);
void vf_shm_tx_free(vf_shm_tx *tx); /* NULL is fine; unlinks the name */

/* Removes the names of the segments process `pid` made (/dev/shm/vflow-<pid>-*): the
 * driver calls it for each worker that exited, so a sender killed before its receiver
 * mapped its segment leaves nothing behind. Mappings that exist stay valid. */
void vf_shm_sweep(long pid);

/* Whether a received frame is a descriptor. */
bool vf_shm_is_desc(const void *data, size_t len);

typedef struct vf_shm_rx vf_shm_rx;

/* The receiving end's view of its senders' segments (made on first use). */
/* Resolves a descriptor into the frame its tensor aliases: out->data points into the
 * slot, out->release frees the slot's share when the last tensor over it goes (it may
 * run after vf_shm_rx_free, on any thread). *len is the payload's length. Errors
 * (VF_ECORRUPT: a descriptor that names a slot or range outside its segment, or a
 * segment that cannot be mapped) name the edge. */
int vf_shm_rx_frame(vf_shm_rx **rx, const char *edge, const void *desc, vf_frame *out, vf_status *st);
/* Drops the end's hold on its mappings: each goes when the last tensor over it does. */
void vf_shm_rx_free(vf_shm_rx *rx); /* NULL is fine */

#endif /* VF_EDGE_SHM_H */
