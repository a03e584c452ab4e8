/* xfer_cuda.c — the device-tensor transports between processes (transport_dev.h):
 * CUDA IPC on one node, NCCL send/recv across nodes, host staging as the fallback.
 *
 * Which one an edge uses: VFLOW_DEVXFER=ipc|nccl|host forces it; otherwise an ipc://
 * edge (same node) uses CUDA IPC, a tcp:// edge NCCL when vflow was built with it, else
 * host staging.
 *
 * CUDA IPC. The producer exports the pool block that holds the tensor (pool.c makes the
 * handle once per block and never frees an exported block), records one of the edge's
 * interprocess events on its stream after the work that wrote the tensor, and sends
 * both handles in a descriptor; it keeps the tensor referenced in the edge's send ring
 * until the item's credit returns (release by credit; xfer_state.h). The consumer maps
 * the block once per process (import table, refcounted by the edges using it), opens
 * each event slot once per edge, makes its stream wait for the event, copies the bytes
 * into its own pool memory and waits for that copy before vf_recv returns — so the
 * credit that follows means "released". A tensor that is not pool memory is first
 * copied into a pool block on the producer (then exported). Both ends in one process
 * (tests): the block is used directly, no mapping.
 * A view (vflow.h "lending memory") of pool memory is not copied: its descriptor says so
 * (VF_XD_FLAG_VIEW), and the consumer's tensor aliases the mapped block, after making its
 * stream wait for the producer's event (a thread without a device waits on the host); the
 * tensor holds a reference on the mapping, so the block stays mapped while it lives. When
 * the consumer may release it is the stages' protocol, not the credit's.
 *
 * NCCL. A communicator of 2 ranks per edge (sender rank 0): the sender draws the unique
 * id and puts it in the first item ("@nccl-id") — in-band on the edge's own ZeroMQ link,
 * which already connects exactly these two processes, rather than through the driver's
 * control plane — joins once that record is sent, and then posts one ncclSend per
 * device tensor on its stream after every record; the receiver joins when it sees the
 * id and posts the matching ncclRecv into pool memory on its stream (NCCL matches sends
 * and receives in order). Communicators are non-blocking and polled with the stop flag,
 * so a dead peer stops the run instead of hanging it. The sender's tensors stay
 * referenced until the credit, like IPC.
 *
 * Host staging. The producer copies each device tensor to a host tensor of the same
 * dtype ("@host/x"), which the codec inlines; the consumer uploads it to its device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/edge/chan.h"
#include "runtime/edge/transport_dev.h"
#include "runtime/core/shared.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/xfer_state.h"
#ifdef VFLOW_HAVE_NCCL
#include "kernels/cuda/nccl_util.h"
#endif

typedef struct rev { /* an imported event slot */
    cudaEvent_t ev;
    unsigned char h[VF_XD_HANDLE];
    bool ok;
} rev;

typedef struct xedge {
    int kind;            /* send: VF_XD_IPC, VF_XD_NCCL or 0 (host staging) */
    int dev;             /* send: device of its events / communicator; -1 until known */
    vf_xring ring;       /* send: items not yet credited back */
    cudaEvent_t *ev;     /* send (IPC): one interprocess event per ring slot */
    unsigned char (*evh)[VF_XD_HANDLE];
    vf_xkeys keys;       /* recv (IPC): imported buffers this edge holds */
    rev *rev;            /* recv (IPC): imported events by slot */
    int nrev;
    bool comm_ready;
#ifdef VFLOW_HAVE_NCCL
    ncclComm_t comm;
    ncclUniqueId id;
#endif
    vf_tensor *pending[VF_MAX_PORT_TENSORS]; /* send (NCCL): to post after the record */
    int npending;
} xedge;

/* ------------------------------------------------------------------ helpers */

static vf_cuda_ctx *ctx_for(int dev, vf_status *st)
{
    vf_backend *be = vf_backend_cuda(dev, st);
    return be ? vf_cuda_ctx_of(be) : NULL;
}

static void pool_release(void *data, void *hint) { vf_cuda_pool_free((int)(intptr_t)hint, data); }

static vf_tensor *device_tensor(int dev, const vf_tensor *like, void **ptr, vf_status *st)
{
    size_t nb = vf_tensor_nbytes(like);
    void *p = vf_cuda_pool_alloc(dev, nb ? nb : 1, st);
    if (!p) return NULL;
    vf_tensor *t = vf_tensor_wrap(like->dtype, like->ndim, like->shape, (vf_device){VF_DEV_CUDA, dev}, p,
                                  pool_release, (void *)(intptr_t)dev, st);
    if (!t) vf_cuda_pool_free(dev, p);
    else *ptr = p;
    return t;
}

static int put_desc(vf_item *w, const char *prefix, const char *name, const vf_xdesc *d, vf_status *st)
{
    char nm[256];
    snprintf(nm, sizeof nm, "%s%s", prefix, name);
    int64_t n = VF_XD_BYTES;
    vf_tensor *t = vf_tensor_new(VF_DTYPE_U8, 1, &n, st);
    if (!t) return VF_ENOMEM;
    vf_xdesc_encode(d, (unsigned char *)t->data);
    return vf_item_put(w, nm, t, st);
}

static int pick_kind(const vf_edge_desc *d)
{
    const char *f = getenv("VFLOW_DEVXFER");
    if (f && strcmp(f, "ipc") == 0) return VF_XD_IPC;
    if (f && strcmp(f, "host") == 0) return 0;
#ifdef VFLOW_HAVE_NCCL
    if (f && strcmp(f, "nccl") == 0) return VF_XD_NCCL;
#endif
    if (d->transport == VF_TR_IPC) return VF_XD_IPC;
#ifdef VFLOW_HAVE_NCCL
    return VF_XD_NCCL;
#else
    return 0;
#endif
}

static xedge *xedge_get(void **state, vf_status *st)
{
    if (*state) return *state;
    xedge *x = calloc(1, sizeof *x);
    if (!x) {
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (device transport)");
        return NULL;
    }
    x->dev = -1;
    *state = x;
    return x;
}

#ifdef VFLOW_HAVE_NCCL
static int nccl_join(xedge *x, int rank, vf_status *st)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&x->comm, 2, x->id, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress)
        return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "ncclCommInitRank (rank %d): %s", rank,
                             ncclGetErrorString(r));
    int rc = vf_cuda_nccl_wait(x->comm, r, rank ? "ncclCommInitRank (receiver)" : "ncclCommInitRank (sender)", st);
    if (rc < 0) {
        if (rc != VF_ESTOPPED) ncclCommAbort(x->comm);
        return rc;
    }
    x->comm_ready = true;
    return 0;
}
#endif

/* ------------------------------------------------------------------ import table */

static int imp_open(void *u, const vf_xdesc *d, void **ptr, vf_status *st)
{
    (void)u;
    int rc = 0;
    if (d->pid == (uint32_t)getpid()) { /* both ends in this process: the block itself */
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "internal: own block %llu reached imp_open",
                             (unsigned long long)d->buf_id);
    }
    cudaIpcMemHandle_t h;
    memcpy(&h, d->mem, sizeof h);
    VF_CUDA_TRY(st, cudaSetDevice(d->src_device));
    VF_CUDA_TRY(st, cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess));
fail:
    return rc;
}

static void imp_close(void *u, void *ptr)
{
    (void)u;
    cudaIpcCloseMemHandle(ptr);
}

static pthread_mutex_t g_imp_mu = PTHREAD_MUTEX_INITIALIZER;
static vf_ximp_tab g_imp = {.open = imp_open, .close = imp_close};

/* device address of d's bytes in this process */
static int ipc_source(xedge *x, const vf_xdesc *d, const char **src, vf_status *st)
{
    int rc = 0;
    void *base = NULL;
    if (d->pid == (uint32_t)getpid()) {
        rc = vf_cuda_pool_by_id(d->src_device, d->buf_id, &base);
        if (rc < 0)
            return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "local block %llu of cuda:%d is gone",
                                 (unsigned long long)d->buf_id, (int)d->src_device);
        *src = (const char *)base + d->offset;
        return 0;
    }
    pthread_mutex_lock(&g_imp_mu);
    if (vf_xkeys_has(&x->keys, d->pid, d->buf_id)) {
        base = vf_ximp_peek(&g_imp, d->pid, d->buf_id);
    } else if ((rc = vf_ximp_acquire(&g_imp, d, &base, st)) == 0) {
        if (vf_xkeys_add(&x->keys, d->pid, d->buf_id) < 0) {
            vf_ximp_release(&g_imp, d->pid, d->buf_id);
            rc = vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (IPC keys)");
        }
    }
    pthread_mutex_unlock(&g_imp_mu);
    if (rc == 0) *src = (const char *)base + d->offset;
    return rc;
}

/* the edge's imported event for d's slot (opened once per slot and handle) */
static int ipc_event(xedge *x, const vf_xdesc *d, cudaEvent_t *ev, vf_status *st)
{
    int rc = 0;
    if (d->ev_slot >= 1u << 20) return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "event slot %u", d->ev_slot);
    if ((int)d->ev_slot >= x->nrev) {
        int n = (int)d->ev_slot + 1;
        rev *nr = realloc(x->rev, (size_t)n * sizeof *nr);
        if (!nr) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (IPC events)");
        memset(nr + x->nrev, 0, (size_t)(n - x->nrev) * sizeof *nr);
        x->rev = nr;
        x->nrev = n;
    }
    rev *r = &x->rev[d->ev_slot];
    if (!r->ok || memcmp(r->h, d->ev, VF_XD_HANDLE) != 0) {
        if (r->ok) cudaEventDestroy(r->ev);
        r->ok = false;
        cudaIpcEventHandle_t h;
        memcpy(&h, d->ev, sizeof h);
        VF_CUDA_TRY(st, cudaSetDevice(d->src_device));
        VF_CUDA_TRY(st, cudaIpcOpenEventHandle(&r->ev, h));
        memcpy(r->h, d->ev, VF_XD_HANDLE);
        r->ok = true;
    }
    *ev = r->ev;
fail:
    return rc;
}

/* ------------------------------------------------------------------ send */

/* device bytes -> host tensor of the same dtype and shape (host staging) */
static int stage_to_host(const vf_tensor *t, vf_tensor **out, vf_status *st)
{
    int rc = 0;
    vf_tensor *h = NULL;
    vf_cuda_ctx *c = ctx_for(t->device.index, st);
    if (!c) return st ? st->code : VF_ECUDA;
    if (!(h = vf_tensor_new(t->dtype, t->ndim, t->shape, st))) return VF_ENOMEM;
    vf_cuda_op_begin(c);
    cudaError_t e = cudaMemcpyAsync(h->data, t->data, vf_tensor_nbytes(t), cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    vf_cuda_op_end(c);
    if (e != cudaSuccess)
        VF_FAIL(st, VF_ECUDA, "copying a %zu-byte tensor from cuda:%d to the host: %s", vf_tensor_nbytes(t),
                t->device.index, cudaGetErrorString(e));
    *out = h;
    return 0;
fail:
    vf_tensor_unref(h);
    return rc;
}

/* IPC: the exportable tensor for t (t itself when it is pool memory, else a pool copy),
 * and its descriptor fields. */
static int ipc_export(vf_cuda_ctx *c, vf_tensor *t, vf_tensor **held, vf_xdesc *d, vf_status *st)
{
    int rc = 0;
    void *base = NULL;
    size_t size = 0;
    uint64_t id = 0;
    cudaIpcMemHandle_t h;
    vf_tensor *src = vf_tensor_ref(t);
    rc = vf_cuda_pool_lookup(c->device, src->data, &base, &size, &id, &h, 1, st);
    if (rc == VF_ENOTFOUND) { /* not pool memory: copy into a pool block and export that */
        void *p = NULL;
        vf_tensor *cp = device_tensor(c->device, t, &p, st);
        if (!cp) {
            rc = VF_ENOMEM;
            goto fail;
        }
        vf_cuda_op_begin(c);
        cudaError_t e = cudaMemcpyAsync(p, t->data, vf_tensor_nbytes(t), cudaMemcpyDeviceToDevice, c->stream);
        vf_cuda_op_end(c);
        vf_tensor_unref(src);
        src = cp;
        if (e != cudaSuccess) VF_FAIL(st, VF_ECUDA, "staging copy for CUDA IPC: %s", cudaGetErrorString(e));
        rc = vf_cuda_pool_lookup(c->device, src->data, &base, &size, &id, &h, 1, st);
    }
    if (rc < 0) goto fail;
    d->kind = VF_XD_IPC;
    d->buf_id = id;
    d->offset = (uint64_t)((const char *)src->data - (const char *)base);
    d->alloc_bytes = size;
    memcpy(d->mem, &h, sizeof h);
    *held = src;
    return 0;
fail:
    vf_tensor_unref(src);
    return rc;
}

static int ipc_slot_event(xedge *x, vf_cuda_ctx *c, int slot, vf_xdesc *d, vf_status *st)
{
    int rc = 0;
    if (!x->ev) {
        x->ev = calloc((size_t)x->ring.cap, sizeof *x->ev);
        x->evh = calloc((size_t)x->ring.cap, sizeof *x->evh);
        if (!x->ev || !x->evh) VF_FAIL(st, VF_ENOMEM, "out of memory (IPC events)");
    }
    vf_cuda_op_begin(c);
    cudaError_t e = cudaSuccess;
    if (!x->ev[slot]) {
        e = cudaEventCreateWithFlags(&x->ev[slot], cudaEventDisableTiming | cudaEventInterprocess);
        if (e == cudaSuccess) {
            cudaIpcEventHandle_t h;
            e = cudaIpcGetEventHandle(&h, x->ev[slot]);
            memcpy(x->evh[slot], &h, sizeof h);
        }
    }
    /* after everything this process enqueued so far, which includes the tensor's writers */
    if (e == cudaSuccess) e = cudaEventRecord(x->ev[slot], c->stream);
    vf_cuda_op_end(c);
    if (e != cudaSuccess) VF_FAIL(st, VF_ECUDA, "CUDA IPC event: %s", cudaGetErrorString(e));
    memcpy(d->ev, x->evh[slot], VF_XD_HANDLE);
    d->ev_slot = (uint32_t)slot;
fail:
    return rc;
}

static int xsend(void **state, const vf_edge_desc *ed, int inflight, const vf_item *it, vf_item **wire,
                 vf_status *st)
{
    int rc = 0;
    vf_item *w = NULL;
    vf_xslot *sl = NULL;
    xedge *x = xedge_get(state, st);
    if (!x) return VF_ENOMEM;
    if (!x->ring.s) {
        if (vf_xring_init(&x->ring, ed->capacity) < 0) VF_FAIL(st, VF_ENOMEM, "out of memory (send ring)");
        x->kind = pick_kind(ed);
    }
    vf_xring_reap(&x->ring, inflight); /* credited items: their buffers are released */
    if (!(w = vf_item_new(vf_item_id(it), st))) return VF_ENOMEM;
    for (int i = 0; i < vf_item_nmeta(it); i++) {
        const char *k, *s;
        double num;
        bool isnum;
        vf_item_meta_at(it, i, &k, &s, &num, &isnum);
        VF_TRY(isnum ? vf_item_set_num(w, k, num, st) : vf_item_set_str(w, k, s, st));
    }
    int dev = -1;
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        vf_tensor *t = vf_item_tensor_at(it, i, NULL);
        if (t->device.kind == VF_DEV_CPU) continue;
        if (dev < 0) dev = t->device.index;
        else if (t->device.index != dev)
            VF_FAIL(st, VF_EINVAL, "item '%s': device tensors on cuda:%d and cuda:%d in one item", vf_item_id(it), dev,
                    t->device.index);
    }
    vf_cuda_ctx *c = dev >= 0 ? ctx_for(dev, st) : NULL;
    if (dev >= 0 && !c) {
        rc = st ? st->code : VF_ECUDA;
        goto fail;
    }
    if (x->kind && x->dev >= 0 && dev >= 0 && dev != x->dev)
        VF_FAIL(st, VF_EINVAL, "device tensors moved from cuda:%d to cuda:%d on one edge", x->dev, dev);
    if (dev >= 0 && x->dev < 0) x->dev = dev;
    const int slot = vf_xring_next(&x->ring);
    sl = slot >= 0 ? &x->ring.s[slot] : NULL;
    if (x->kind && !sl) VF_FAIL(st, VF_EINVAL, "send ring full with %d items in flight (credit accounting)", inflight);
    if (sl) sl->nt = 0;
    x->npending = 0;
    vf_xdesc descs[VF_XRING_MAX_T];
    const char *dnames[VF_XRING_MAX_T];
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        const char *name = NULL;
        vf_tensor *t = vf_item_tensor_at(it, i, &name);
        if (t->device.kind == VF_DEV_CPU) {
            VF_TRY(vf_item_put(w, name, vf_tensor_ref(t), st));
            continue;
        }
        if (x->kind == 0) { /* host staging */
            vf_tensor *h = NULL;
            char nm[256];
            VF_TRY(stage_to_host(t, &h, st));
            snprintf(nm, sizeof nm, "%s%s", VF_DEVX_HOST, name);
            VF_TRY(vf_item_put(w, nm, h, st));
            continue;
        }
        if (sl->nt == VF_XRING_MAX_T)
            VF_FAIL(st, VF_EINVAL, "item '%s': more than %d device tensors", vf_item_id(it), VF_XRING_MAX_T);
        vf_xdesc *d = &descs[sl->nt];
        memset(d, 0, sizeof *d);
        d->dtype = t->dtype;
        d->ndim = t->ndim;
        memcpy(d->shape, t->shape, sizeof d->shape);
        d->src_device = dev;
        d->pid = (uint32_t)getpid();
        d->nbytes = vf_tensor_nbytes(t);
        d->seq = x->ring.seq;
        dnames[sl->nt] = name;
        vf_tensor *held = NULL;
        if (x->kind == VF_XD_IPC) {
            VF_TRY(ipc_export(c, t, &held, d, st));
            /* a view of pool memory is lent as it is; anything else went through a copy */
            if (vf_tensor_is_view(t) && held->data == t->data) d->flags |= VF_XD_FLAG_VIEW;
        } else {
            d->kind = VF_XD_NCCL;
            held = vf_tensor_ref(t);
            x->pending[x->npending++] = held;
        }
        sl->t[sl->nt++] = held;
    }
    if (sl && sl->nt) {
        vf_xdesc ev = {0};
        /* one event per item, recorded after the tensors' writers and any staging copy */
        if (x->kind == VF_XD_IPC) VF_TRY(ipc_slot_event(x, c, slot, &ev, st));
        for (int i = 0; i < sl->nt; i++) {
            if (x->kind == VF_XD_IPC) {
                memcpy(descs[i].ev, ev.ev, VF_XD_HANDLE);
                descs[i].ev_slot = ev.ev_slot;
            }
            VF_TRY(put_desc(w, x->kind == VF_XD_IPC ? VF_DEVX_IPC : VF_DEVX_NCCL, dnames[i], &descs[i], st));
        }
    }
#ifdef VFLOW_HAVE_NCCL
    if (x->kind == VF_XD_NCCL && !x->comm_ready && x->npending) {
        ncclResult_t r = ncclGetUniqueId(&x->id);
        if (r != ncclSuccess) VF_FAIL(st, VF_ECUDA, "ncclGetUniqueId: %s", ncclGetErrorString(r));
        int64_t n = sizeof x->id;
        vf_tensor *t = vf_tensor_new(VF_DTYPE_U8, 1, &n, st);
        if (!t) VF_FAIL(st, VF_ENOMEM, "out of memory");
        memcpy(t->data, &x->id, sizeof x->id);
        VF_TRY(vf_item_put(w, VF_DEVX_NCCL_ID, t, st));
    }
#endif
    if (sl && sl->nt) vf_xring_push(&x->ring);
    *wire = w;
    return 0;
fail:
    if (sl) { /* not pushed: drop what this item took */
        for (int i = 0; i < sl->nt; i++) vf_tensor_unref(sl->t[i]);
        sl->nt = 0;
    }
    x->npending = 0;
    vf_item_free(w);
    return rc;
}

static int xsent(void **state, const vf_edge_desc *ed, vf_status *st)
{
    (void)ed;
    xedge *x = *state;
    if (!x || x->kind != VF_XD_NCCL || !x->npending) return 0;
#ifdef VFLOW_HAVE_NCCL
    int rc = 0;
    vf_cuda_ctx *c = ctx_for(x->dev, st);
    if (!c) return st ? st->code : VF_ECUDA;
    ncclResult_t r = ncclSuccess;
    if (!x->comm_ready) { /* joins the receiver, which joins when it reads the id we just sent */
        VF_CUDA_TRY(st, cudaSetDevice(x->dev));
        VF_TRY(nccl_join(x, 0, st));
    }
    vf_cuda_op_begin(c);
    r = ncclGroupStart();
    for (int i = 0; i < x->npending && r == ncclSuccess; i++)
        r = ncclSend(x->pending[i]->data, vf_tensor_nbytes(x->pending[i]), ncclUint8, 1, x->comm, c->stream);
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess) r = e;
    vf_cuda_op_end(c);
    x->npending = 0;
    VF_TRY(vf_cuda_nccl_wait(x->comm, r, "ncclSend", st));
fail:
    return rc;
#else
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "NCCL transport: vflow was built without NCCL");
#endif
}

/* ------------------------------------------------------------------ receive */

/* A view's hold on the mapping of its block: one import-table reference, dropped when the
 * tensor goes (on any thread), so the mapping outlives the edge that brought it. */
typedef struct view_hold {
    uint32_t pid;
    uint64_t id;
} view_hold;

static void view_release(void *data, void *hint)
{
    (void)data;
    view_hold *v = hint;
    if (!v) return;
    pthread_mutex_lock(&g_imp_mu);
    vf_ximp_release(&g_imp, v->pid, v->id);
    pthread_mutex_unlock(&g_imp_mu);
    free(v);
}

/* The view d describes, over src (the producer's block, mapped or local): a tensor that
 * aliases it once the receiver's work is ordered after the producer's (the event: the
 * receiving thread's stream waits for it, a thread without a device waits on the host). */
static int ipc_view(vf_cuda_ctx *c, const vf_xdesc *d, const char *src, cudaEvent_t ev, vf_tensor **out,
                    vf_status *st)
{
    int rc = 0;
    view_hold *v = NULL;
    if (ev) {
        cudaError_t e;
        if (c) {
            vf_cuda_op_begin(c);
            e = cudaStreamWaitEvent(c->stream, ev, 0);
            vf_cuda_op_end(c);
        } else {
            e = cudaEventSynchronize(ev);
        }
        if (e != cudaSuccess) VF_FAIL(st, VF_ECUDA, "CUDA IPC view: waiting for the producer: %s", cudaGetErrorString(e));
    }
    if (d->pid != (uint32_t)getpid()) { /* a mapping: the tensor holds a reference on it */
        if (!(v = malloc(sizeof *v))) VF_FAIL(st, VF_ENOMEM, "out of memory (CUDA IPC view)");
        *v = (view_hold){d->pid, d->buf_id};
        void *base = NULL;
        pthread_mutex_lock(&g_imp_mu);
        rc = vf_ximp_acquire(&g_imp, d, &base, st);
        pthread_mutex_unlock(&g_imp_mu);
        if (rc < 0) goto fail;
    }
    *out = vf_tensor_view_wrap(d->dtype, d->ndim, d->shape, (vf_device){VF_DEV_CUDA, d->src_device}, (void *)src,
                               view_release, v, st);
    if (!*out) {
        view_release(NULL, v);
        return st && st->code ? st->code : VF_ENOMEM;
    }
    return 0;
fail:
    free(v);
    return rc;
}

static int xrecv(void **state, const vf_edge_desc *ed, vf_item **itp, vf_status *st)
{
    (void)ed;
    int rc = 0;
    bool copied = false, nccl_group = false;
    vf_item *it = *itp;
    xedge *x = xedge_get(state, st);
    if (!x) return VF_ENOMEM;
    const int rdev = vf_cuda_thread_device();
    vf_cuda_ctx *c = rdev >= 0 ? ctx_for(rdev, st) : NULL;
    if (rdev >= 0 && !c) return st ? st->code : VF_ECUDA;

    vf_tensor *idt = vf_item_take(it, VF_DEVX_NCCL_ID);
    if (idt) {
#ifdef VFLOW_HAVE_NCCL
        if (!x->comm_ready) {
            if (rdev < 0 || vf_tensor_nbytes(idt) != sizeof x->id) {
                vf_tensor_unref(idt);
                VF_FAIL(st, VF_EUSAGE, "NCCL edge: the receiving stage has no CUDA device (or a bad id)");
            }
            memcpy(&x->id, idt->data, sizeof x->id);
            if ((rc = nccl_join(x, 1, st)) < 0) {
                vf_tensor_unref(idt);
                goto fail;
            }
        }
#endif
        vf_tensor_unref(idt);
    }

    for (int i = 0; i < vf_item_ntensors(it); i++) {
        const char *name = NULL;
        vf_tensor *wt = vf_item_tensor_at(it, i, &name);
        if (!name || name[0] != '@') continue;
        char plain[256];
        vf_tensor *nt = NULL;
        void *dst = NULL;
        if (strncmp(name, VF_DEVX_HOST, strlen(VF_DEVX_HOST)) == 0) {
            snprintf(plain, sizeof plain, "%s", name + strlen(VF_DEVX_HOST));
            if (rdev < 0) {
                nt = vf_tensor_ref(wt);
            } else {
                if (!(nt = device_tensor(rdev, wt, &dst, st))) {
                    rc = VF_ENOMEM;
                    goto fail;
                }
                vf_cuda_op_begin(c);
                cudaError_t e = cudaMemcpyAsync(dst, wt->data, vf_tensor_nbytes(wt), cudaMemcpyHostToDevice, c->stream);
                vf_cuda_op_end(c);
                if (e != cudaSuccess) {
                    vf_tensor_unref(nt);
                    VF_FAIL(st, VF_ECUDA, "upload of '%s': %s", plain, cudaGetErrorString(e));
                }
            }
        } else {
            const bool ipc = strncmp(name, VF_DEVX_IPC, strlen(VF_DEVX_IPC)) == 0;
            const bool nccl = strncmp(name, VF_DEVX_NCCL, strlen(VF_DEVX_NCCL)) == 0;
            if (!ipc && !nccl) VF_FAIL(st, VF_ECORRUPT, "unknown wire tensor '%s'", name);
            snprintf(plain, sizeof plain, "%s", name + strlen(ipc ? VF_DEVX_IPC : VF_DEVX_NCCL));
            vf_xdesc d;
            if (wt->dtype != VF_DTYPE_U8) VF_FAIL(st, VF_ECORRUPT, "wire tensor '%s' is not u8", name);
            VF_TRY(vf_xdesc_decode(wt->data, vf_tensor_nbytes(wt), plain, &d, st));
            vf_tensor like = {.dtype = d.dtype, .ndim = d.ndim};
            memcpy(like.shape, d.shape, sizeof like.shape);
            if (ipc) {
                const char *src = NULL;
                cudaEvent_t ev = NULL;
                const bool local = d.pid == (uint32_t)getpid();
                VF_TRY(ipc_source(x, &d, &src, st));
                if (!local) VF_TRY(ipc_event(x, &d, &ev, st));
                if (d.flags & VF_XD_FLAG_VIEW) {
                    VF_TRY(ipc_view(c, &d, src, ev, &nt, st));
                } else if (rdev >= 0) {
                    if (!(nt = device_tensor(rdev, &like, &dst, st))) {
                        rc = VF_ENOMEM;
                        goto fail;
                    }
                    vf_cuda_op_begin(c);
                    cudaError_t e = ev ? cudaStreamWaitEvent(c->stream, ev, 0) : cudaSuccess;
                    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, d.nbytes, cudaMemcpyDefault, c->stream);
                    vf_cuda_op_end(c);
                    if (e != cudaSuccess) {
                        vf_tensor_unref(nt);
                        VF_FAIL(st, VF_ECUDA, "CUDA IPC copy of '%s': %s", plain, cudaGetErrorString(e));
                    }
                    copied = true;
                } else { /* a CPU consumer: straight to a host tensor */
                    if (!(nt = vf_tensor_new(d.dtype, d.ndim, d.shape, st))) {
                        rc = VF_ENOMEM;
                        goto fail;
                    }
                    cudaError_t e = ev ? cudaEventSynchronize(ev) : cudaDeviceSynchronize();
                    if (e == cudaSuccess) e = cudaMemcpy(nt->data, src, d.nbytes, cudaMemcpyDeviceToHost);
                    if (e != cudaSuccess) {
                        vf_tensor_unref(nt);
                        VF_FAIL(st, VF_ECUDA, "CUDA IPC copy of '%s' to the host: %s", plain, cudaGetErrorString(e));
                    }
                }
            } else {
#ifdef VFLOW_HAVE_NCCL
                if (rdev < 0 || !x->comm_ready)
                    VF_FAIL(st, VF_EUSAGE, "NCCL tensor '%s' for a stage without a CUDA device (or before the id)",
                            plain);
                if (!(nt = device_tensor(rdev, &like, &dst, st))) {
                    rc = VF_ENOMEM;
                    goto fail;
                }
                vf_cuda_op_begin(c);
                if (!nccl_group) ncclGroupStart();
                nccl_group = true;
                ncclResult_t r = ncclRecv(dst, d.nbytes, ncclUint8, 0, x->comm, c->stream);
                vf_cuda_op_end(c);
                if (r != ncclSuccess && r != ncclInProgress) {
                    vf_tensor_unref(nt);
                    VF_FAIL(st, VF_ECUDA, "ncclRecv of '%s': %s", plain, ncclGetErrorString(r));
                }
#else
                VF_FAIL(st, VF_EUSAGE, "NCCL tensor '%s': vflow was built without NCCL", plain);
#endif
            }
        }
        vf_tensor_unref(vf_item_take(it, name));
        VF_TRY(vf_item_put(it, plain, nt, st));
        i = -1; /* the order changed: scan again */
    }
#ifdef VFLOW_HAVE_NCCL
    if (nccl_group) {
        vf_cuda_op_begin(c);
        ncclResult_t r = ncclGroupEnd();
        vf_cuda_op_end(c);
        nccl_group = false;
        VF_TRY(vf_cuda_nccl_wait(x->comm, r, "ncclRecv", st));
    }
#endif
    if (copied) { /* the producer may reuse its buffers once we credit: finish the copies */
        vf_cuda_op_begin(c);
        cudaError_t e = cudaStreamSynchronize(c->stream);
        vf_cuda_op_end(c);
        if (e != cudaSuccess) VF_FAIL(st, VF_ECUDA, "CUDA IPC copy: %s", cudaGetErrorString(e));
    }
    return 0;
fail:
#ifdef VFLOW_HAVE_NCCL
    if (nccl_group) ncclGroupEnd();
#endif
    return rc;
}

/* ------------------------------------------------------------------ teardown */

static void xfree(void *state, const vf_edge_desc *ed)
{
    xedge *x = state;
    if (!x) return;
    const int cap = x->ring.cap;
    vf_xring_fini(&x->ring);
    if (x->ev)
        for (int i = 0; i < cap; i++)
            if (x->ev[i]) cudaEventDestroy(x->ev[i]);
    free(x->ev);
    free(x->evh);
    for (int i = 0; i < x->nrev; i++)
        if (x->rev[i].ok) cudaEventDestroy(x->rev[i].ev);
    free(x->rev);
    pthread_mutex_lock(&g_imp_mu);
    for (int i = 0; i < x->keys.n; i++) vf_ximp_release(&g_imp, x->keys.k[i].pid, x->keys.k[i].id);
    pthread_mutex_unlock(&g_imp_mu);
    free(x->keys.k);
#ifdef VFLOW_HAVE_NCCL
    if (x->comm_ready) ncclCommDestroy(x->comm);
#endif
    (void)ed;
    free(x);
}

static const vf_devxfer_ops g_ops = {
    .name = "cuda",
    .send = xsend,
    .sent = xsent,
    .recv = xrecv,
    .edge_free = xfree,
};

void vf_cuda_xfer_register(void) { vf_devxfer_register(&g_ops); }
