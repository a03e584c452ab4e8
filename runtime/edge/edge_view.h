/* edge_view.h — host views across an ipc edge (vflow.h "lending memory"): the descriptor
 * that stands for a view in the record, and the receiving process's mappings of the
 * lenders' segments.
 *
 * A host view of a segment (vf_alloc_shared, runtime/core/shared.h) crosses as a u8
 * tensor "@view/<name>" of VF_VIEW_DESC_BYTES: magic "VFVW", version, dtype, ndim,
 * shape, the lender's pid, the segment's memfd there and its inode, the segment's size,
 * the view's offset and bytes (little-endian). The receiver opens the memfd through
 * /proc/<pid>/fd/<fd>, checks it is that segment (a memfd named "vflow-lend" of that
 * inode, as large as the descriptor says, which holds the view), maps it once for the
 * process and makes the view a tensor over the mapping. Decoding is strict: a corrupt
 * or crafted descriptor never maps memory outside the segment it names.
 *
 * A mapping lives while an edge end that saw it is open (so a segment is mapped once,
 * not once per item) or a tensor over it is alive, whichever is longer.
 *
 * The channel reaches this through the view lane (lane_view.c).
 */
#ifndef VF_EDGE_VIEW_H
#define VF_EDGE_VIEW_H

#include "runtime/core/shared.h"
#include "runtime/vflow.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VF_VIEW_DESC_BYTES 96
/* What any view costs in a record at most: this descriptor, or the device lane's CUDA IPC
 * descriptor (240 bytes), with its name. The plan counts a view port's tensor as this
 * on edges that share memory. */
#define VF_VIEW_WIRE_BYTES 256
#define VF_VIEW_PREFIX "@view/"

typedef struct vf_view_desc {
    vf_dtype dtype;
    int ndim;
    int64_t shape[VF_MAX_DIMS];
    vf_seg_ref seg;  /* pid, fd, ino, size, off */
    uint64_t nbytes; /* the view's bytes: dtype size x shape */
} vf_view_desc;

void vf_view_desc_encode(const vf_view_desc *d, unsigned char out[VF_VIEW_DESC_BYTES]);
/* Strict decode of n bytes; `what` names the tensor in messages (VF_ECORRUPT,
 * VF_EVERSION). */
int vf_view_desc_decode(const unsigned char *p, size_t n, const char *what, vf_view_desc *d, vf_status *st);

/* The segments one receiving end has mapped (its hold on them). */
typedef struct vf_view_rx vf_view_rx;

/* The tensor a descriptor stands for: a view over the lender's segment, mapped on the
 * first descriptor that names it. *rx is the end's hold (made on first use). Errors name
 * `edge`. Caller owns *out. */
int vf_view_rx_tensor(vf_view_rx **rx, const char *edge, const vf_view_desc *d, vf_tensor **out, vf_status *st);
/* Drops the end's hold on its mappings: each goes when the last tensor over it does. */
void vf_view_rx_free(vf_view_rx *rx); /* NULL is fine */

/* Segments of other processes this process has mapped now (for tests). */
int vf_view_mapped(void);

#endif /* VF_EDGE_VIEW_H */
