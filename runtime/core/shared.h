/* shared.h — runtime-internal side of lent memory (vflow.h "lending memory"): which
 * segment of this process a host view lies in (the sending side of the view lane,
 * runtime/edge/lane_view.c, describes it by that), and the view tensors the receiving
 * side makes over a mapping of another process's segment.
 *
 * A segment is a memfd of the lending process (vf_alloc_shared): another process of the
 * node opens it as /proc/<pid>/fd/<fd> and checks that what it opened is that segment
 * (its inode, a memfd named "vflow-lend", at least as large as the view needs).
 */
#ifndef VF_SHARED_H
#define VF_SHARED_H

#include "runtime/vflow.h"

#include <stdint.h>

/* The memfd's name (the receiver checks /proc/<pid>/fd/<fd> links to "/memfd:" this). */
#define VF_SHARED_MEMFD_NAME "vflow-lend"

/* Where a run of bytes of a segment of this process lies. */
typedef struct vf_seg_ref {
    uint32_t pid;  /* the lending process */
    int32_t fd;    /* the segment's memfd in it */
    uint64_t ino;  /* the memfd's inode: what the receiver checks it opened */
    uint64_t size; /* bytes of the segment */
    uint64_t off;  /* the run's offset in it */
} vf_seg_ref;

/* Whether [p, p + n) lies inside one segment of this process: 0 and *ref filled, or
 * VF_ENOTFOUND (memory of vf_alloc, of a device, or straddling two segments). */
int vf_shared_find(const void *p, size_t n, vf_seg_ref *ref);

/* Bytes of segments this process holds (for tests and the plan's checks). */
int64_t vf_shared_bytes(void);

/* A view tensor (vf_tensor_is_view) over memory the runtime mapped for it: release(data,
 * hint) runs once its last reference goes (dropping the mapping's share). Caller owns
 * the reference; on failure release is not called. */
vf_tensor *vf_tensor_view_wrap(vf_dtype dt, int ndim, const int64_t *shape, vf_device dev, void *data,
                               vf_release_fn release, void *hint, vf_status *st);

#endif /* VF_SHARED_H */
