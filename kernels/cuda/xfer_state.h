/* xfer_state.h — the bookkeeping of the device-tensor transports, without CUDA
 * (header-only; xfer_cuda.c uses it, tests/unit/test_cuda_xfer_state.c tests it on a
 * machine without a GPU).
 *
 *  - the descriptor: what a "@ipc/x" / "@nccl/x" wire tensor holds (fixed little-endian
 *    layout, versioned, strictly checked on decode: a corrupt or hostile record must not
 *    make the receiver copy outside the exported block);
 *  - the send ring: per edge, the items sent and not yet credited back, oldest first.
 *    Credits come back in consumption order (one ZeroMQ pipe, FIFO per edge), so when
 *    the edge has `inflight` items outstanding, every older entry has been consumed and
 *    its buffers (and its event slot) may be released: release by credit;
 *  - the import table: per process, one mapping per exported buffer (producer pid,
 *    buffer id), opened on first use and counted by the edges that use it; closed when
 *    the last such edge goes (REFERENCE: opening one handle twice in a process fails).
 */
#ifndef VF_XFER_STATE_H
#define VF_XFER_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/vflow.h"

/* ------------------------------------------------------------------ descriptor */

#define VF_XD_MAGIC "VFDX"
#define VF_XD_VERSION 1
#define VF_XD_BYTES 240
#define VF_XD_HANDLE 64
enum { VF_XD_IPC = 1, VF_XD_NCCL = 2 };
/* flags: the tensor is a view (vflow.h "lending memory"): the receiver aliases the block
 * instead of copying it */
enum { VF_XD_FLAG_VIEW = 1 };

typedef struct vf_xdesc {
    int kind;                 /* VF_XD_IPC / VF_XD_NCCL */
    unsigned flags;           /* VF_XD_FLAG_* */
    vf_dtype dtype;
    int ndim;
    int64_t shape[VF_MAX_DIMS];
    int32_t src_device;       /* producer's CUDA device index */
    uint32_t pid;             /* producer process */
    uint32_t ev_slot;         /* IPC: which of the edge's events orders this item */
    uint64_t buf_id;          /* IPC: producer pool block id (unique in its process) */
    uint64_t offset;          /* IPC: tensor start inside the block */
    uint64_t nbytes;          /* tensor bytes */
    uint64_t alloc_bytes;     /* IPC: block size */
    uint64_t seq;             /* item number on the edge */
    unsigned char mem[VF_XD_HANDLE]; /* cudaIpcMemHandle_t */
    unsigned char ev[VF_XD_HANDLE];  /* cudaIpcEventHandle_t */
} vf_xdesc;

static inline void vf_xd_put(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint64_t vf_xd_get(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline void vf_xdesc_encode(const vf_xdesc *d, unsigned char out[VF_XD_BYTES])
{
    memset(out, 0, VF_XD_BYTES);
    memcpy(out, VF_XD_MAGIC, 4);
    vf_xd_put(out + 4, VF_XD_VERSION, 2);
    out[6] = (unsigned char)d->kind;
    out[7] = (unsigned char)d->dtype;
    out[8] = (unsigned char)d->ndim;
    out[9] = (unsigned char)d->flags;
    vf_xd_put(out + 12, (uint32_t)d->src_device, 4);
    for (int i = 0; i < VF_MAX_DIMS; i++) vf_xd_put(out + 16 + 8 * i, (uint64_t)(i < d->ndim ? d->shape[i] : 0), 8);
    vf_xd_put(out + 64, d->pid, 4);
    vf_xd_put(out + 68, d->ev_slot, 4);
    vf_xd_put(out + 72, d->buf_id, 8);
    vf_xd_put(out + 80, d->offset, 8);
    vf_xd_put(out + 88, d->nbytes, 8);
    vf_xd_put(out + 96, d->alloc_bytes, 8);
    vf_xd_put(out + 104, d->seq, 8);
    memcpy(out + 112, d->mem, VF_XD_HANDLE);
    memcpy(out + 176, d->ev, VF_XD_HANDLE);
}

/* Strict decode of n bytes; `what` names the tensor in messages. */
static inline int vf_xdesc_decode(const unsigned char *p, size_t n, const char *what, vf_xdesc *d, vf_status *st)
{
#define XD_BAD(...) return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, __VA_ARGS__)
    memset(d, 0, sizeof *d);
    if (n != VF_XD_BYTES) XD_BAD("device tensor '%s': descriptor of %zu bytes (expected %d)", what, n, VF_XD_BYTES);
    if (memcmp(p, VF_XD_MAGIC, 4) != 0) XD_BAD("device tensor '%s': bad descriptor magic", what);
    if (vf_xd_get(p + 4, 2) != VF_XD_VERSION)
        return vf_status_set(st, VF_EVERSION, __FILE__, __LINE__,
                             "device tensor '%s': descriptor version %u (this vflow reads %d)", what,
                             (unsigned)vf_xd_get(p + 4, 2), VF_XD_VERSION);
    d->kind = p[6];
    if (d->kind != VF_XD_IPC && d->kind != VF_XD_NCCL) XD_BAD("device tensor '%s': unknown kind %d", what, d->kind);
    if (p[7] >= VF_DTYPE_COUNT) XD_BAD("device tensor '%s': unknown dtype %u", what, p[7]);
    d->dtype = (vf_dtype)p[7];
    d->ndim = p[8];
    d->flags = p[9];
    if (d->flags & ~(unsigned)VF_XD_FLAG_VIEW) XD_BAD("device tensor '%s': unknown flags 0x%x", what, d->flags);
    if ((d->flags & VF_XD_FLAG_VIEW) && d->kind != VF_XD_IPC) XD_BAD("device tensor '%s': a view not by CUDA IPC", what);
    if (d->ndim > VF_MAX_DIMS) XD_BAD("device tensor '%s': %d dims", what, d->ndim);
    d->src_device = (int32_t)vf_xd_get(p + 12, 4);
    if (d->src_device < 0) XD_BAD("device tensor '%s': device %d", what, (int)d->src_device);
    uint64_t nb = vf_dtype_size(d->dtype);
    for (int i = 0; i < VF_MAX_DIMS; i++) {
        uint64_t v = vf_xd_get(p + 16 + 8 * i, 8);
        if (i >= d->ndim) {
            if (v) XD_BAD("device tensor '%s': dim %d beyond ndim is %llu", what, i, (unsigned long long)v);
            continue;
        }
        if (v > (uint64_t)INT64_MAX || __builtin_mul_overflow(nb, v, &nb) || nb > (uint64_t)INT64_MAX / 2)
            XD_BAD("device tensor '%s': shape overflows", what);
        d->shape[i] = (int64_t)v;
    }
    d->pid = (uint32_t)vf_xd_get(p + 64, 4);
    d->ev_slot = (uint32_t)vf_xd_get(p + 68, 4);
    d->buf_id = vf_xd_get(p + 72, 8);
    d->offset = vf_xd_get(p + 80, 8);
    d->nbytes = vf_xd_get(p + 88, 8);
    d->alloc_bytes = vf_xd_get(p + 96, 8);
    d->seq = vf_xd_get(p + 104, 8);
    memcpy(d->mem, p + 112, VF_XD_HANDLE);
    memcpy(d->ev, p + 176, VF_XD_HANDLE);
    if (d->nbytes != nb)
        XD_BAD("device tensor '%s': %llu bytes for a shape of %llu", what, (unsigned long long)d->nbytes,
               (unsigned long long)nb);
    if (d->kind == VF_XD_IPC && (d->offset > d->alloc_bytes || d->nbytes > d->alloc_bytes - d->offset))
        XD_BAD("device tensor '%s': bytes [%llu, +%llu) outside its %llu-byte block", what,
               (unsigned long long)d->offset, (unsigned long long)d->nbytes, (unsigned long long)d->alloc_bytes);
    return 0;
#undef XD_BAD
}

/* ------------------------------------------------------------------ send ring */

#define VF_XRING_MAX_T VF_MAX_PORT_TENSORS

typedef struct vf_xslot {
    vf_tensor *t[VF_XRING_MAX_T]; /* references held until the credit */
    int nt;
    uint64_t seq;
} vf_xslot;

typedef struct vf_xring {
    int cap, head, count;
    uint64_t seq;      /* items pushed so far */
    vf_xslot *s;
} vf_xring;

static inline int vf_xring_init(vf_xring *r, int cap)
{
    memset(r, 0, sizeof *r);
    if (cap < 1) cap = 1;
    r->s = (vf_xslot *)calloc((size_t)cap, sizeof *r->s);
    if (!r->s) return VF_ENOMEM;
    r->cap = cap;
    return 0;
}

/* Index of the slot the next push takes, or -1 when the ring is full. */
static inline int vf_xring_next(const vf_xring *r) { return r->count < r->cap ? (r->head + r->count) % r->cap : -1; }

/* Takes the slot vf_xring_next named (the caller filled it). */
static inline vf_xslot *vf_xring_push(vf_xring *r)
{
    int i = vf_xring_next(r);
    if (i < 0) return NULL;
    r->s[i].seq = r->seq++;
    r->count++;
    return &r->s[i];
}

/* Releases the oldest entries until `inflight` remain (clamped to [0, count]); returns
 * how many were released. Dropping a slot unrefs its tensors. */
static inline int vf_xring_reap(vf_xring *r, int inflight)
{
    int n = 0;
    if (inflight < 0) inflight = 0;
    while (r->count > inflight) {
        vf_xslot *s = &r->s[r->head];
        for (int i = 0; i < s->nt; i++) vf_tensor_unref(s->t[i]);
        s->nt = 0;
        r->head = (r->head + 1) % r->cap;
        r->count--;
        n++;
    }
    return n;
}

static inline void vf_xring_fini(vf_xring *r)
{
    if (r->s) vf_xring_reap(r, 0);
    free(r->s);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------ import table */

typedef struct vf_ximp {
    uint32_t pid;
    uint64_t id;
    void *ptr;   /* the mapping */
    int refs;    /* edges using it */
} vf_ximp;

typedef struct vf_ximp_tab {
    vf_ximp *e;
    int n, cap;
    /* opens a mapping of (desc) into *ptr: 0 or a negative code with st set */
    int (*open)(void *u, const vf_xdesc *d, void **ptr, vf_status *st);
    void (*close)(void *u, void *ptr);
    void *u;
} vf_ximp_tab;

static inline int vf_ximp_find(const vf_ximp_tab *t, uint32_t pid, uint64_t id)
{
    for (int i = 0; i < t->n; i++)
        if (t->e[i].pid == pid && t->e[i].id == id) return i;
    return -1;
}

/* The mapping of d's buffer for an edge that did not use it before: opened when new,
 * else shared (refs + 1). */
static inline int vf_ximp_acquire(vf_ximp_tab *t, const vf_xdesc *d, void **ptr, vf_status *st)
{
    int i = vf_ximp_find(t, d->pid, d->buf_id);
    if (i >= 0) {
        t->e[i].refs++;
        *ptr = t->e[i].ptr;
        return 0;
    }
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 16;
        vf_ximp *ne = (vf_ximp *)realloc(t->e, (size_t)cap * sizeof *ne);
        if (!ne) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (IPC import table)");
        t->e = ne;
        t->cap = cap;
    }
    void *p = NULL;
    int rc = t->open(t->u, d, &p, st);
    if (rc < 0) return rc;
    t->e[t->n++] = (vf_ximp){d->pid, d->buf_id, p, 1};
    *ptr = p;
    return 0;
}

/* An edge is done with (pid, id): closes the mapping when no edge uses it any more. */
static inline void vf_ximp_release(vf_ximp_tab *t, uint32_t pid, uint64_t id)
{
    int i = vf_ximp_find(t, pid, id);
    if (i < 0) return;
    if (--t->e[i].refs > 0) return;
    t->close(t->u, t->e[i].ptr);
    t->e[i] = t->e[--t->n];
}

/* The mapping an edge already holds (no new reference), NULL if none. */
static inline void *vf_ximp_peek(const vf_ximp_tab *t, uint32_t pid, uint64_t id)
{
    int i = vf_ximp_find(t, pid, id);
    return i >= 0 ? t->e[i].ptr : NULL;
}

/* Per-edge list of the (pid, id) keys it holds a reference to. */
typedef struct vf_xkeys {
    struct {
        uint32_t pid;
        uint64_t id;
    } *k;
    int n, cap;
} vf_xkeys;

static inline bool vf_xkeys_has(const vf_xkeys *k, uint32_t pid, uint64_t id)
{
    for (int i = 0; i < k->n; i++)
        if (k->k[i].pid == pid && k->k[i].id == id) return true;
    return false;
}

static inline int vf_xkeys_add(vf_xkeys *k, uint32_t pid, uint64_t id)
{
    if (k->n == k->cap) {
        int cap = k->cap ? k->cap * 2 : 8;
        void *nk = realloc(k->k, (size_t)cap * sizeof *k->k);
        if (!nk) return VF_ENOMEM;
        k->k = (__typeof__(k->k))nk;
        k->cap = cap;
    }
    k->k[k->n].pid = pid;
    k->k[k->n].id = id;
    k->n++;
    return 0;
}

#endif /* VF_XFER_STATE_H */
