/* collective.c — the CUDA backend's all-to-all (ops.h "all-to-all among the ranks of a
 * group"): the ranks of a sequence-parallel partition, one process and one device each,
 * trade chunks of device memory.
 *
 * With NCCL: a communicator of the n devices, made non-blocking (a rank that dies must
 * not hang the others: nccl_util.h), whose unique id rank 0 draws and sends the others in
 * one exchange over the ranks' host group. A run is one group of n ncclSend and n
 * ncclRecv on the compute stream, so the ops before it are done when it reads and the
 * ops after it see its bytes, and the host never waits for the device. NCCL's send and
 * receive buffers of one group must not overlap, so an in-place exchange lands in a
 * staging buffer of the group (n·chunk_max bytes of device memory) and is copied back on
 * the same stream. Built without NCCL, the bytes cross through the host group: the
 * stream is drained into pinned memory, exchanged, and uploaded.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#ifdef VFLOW_HAVE_NCCL
#include "kernels/cuda/nccl_util.h"
#endif

typedef struct cu_a2a {
    vf_cuda_ctx *c;
    vf_a2a *boot;        /* the ranks' host group (not owned) */
    int n, rank;
    size_t chunk_max;
    void *stage;         /* NCCL: device, n·chunk_max (in-place runs); else pinned host */
#ifdef VFLOW_HAVE_NCCL
    ncclComm_t comm;
    bool comm_ok;
#endif
} cu_a2a;

void vf_cuda_a2a_close(vf_backend *be, void *gv)
{
    cu_a2a *g = gv;
    if (!g) return;
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
#ifdef VFLOW_HAVE_NCCL
    if (g->comm_ok) {
        cudaStreamSynchronize(c->stream);
        vf_status st = {0};
        if (vf_cuda_nccl_wait(g->comm, ncclCommFinalize(g->comm), "ncclCommFinalize", &st) == 0)
            ncclCommDestroy(g->comm);
        else if (st.code != VF_ESTOPPED)
            ncclCommAbort(g->comm);
    }
    if (g->stage) vf_cuda_pool_free(c->device, g->stage);
#else
    if (g->stage) cudaFreeHost(g->stage);
#endif
    free(g);
}

#ifdef VFLOW_HAVE_NCCL
/* Rank 0's unique id to every rank over the host group: each rank sends n chunks of one
 * id (rank 0's are the id, the others' zeros) and keeps the chunk from rank 0. */
static int share_id(cu_a2a *g, ncclUniqueId *id, vf_status *st)
{
    size_t k = sizeof *id;
    unsigned char *buf = calloc((size_t)g->n, k);
    if (!buf) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "all-to-all: no memory for the NCCL id");
    for (int j = 0; g->rank == 0 && j < g->n; j++) memcpy(buf + (size_t)j * k, id, k);
    int rc = vf_a2a_run(g->boot, buf, buf, k, st);
    if (!rc) memcpy(id, buf, k);
    free(buf);
    return rc;
}
#endif

void *vf_cuda_a2a_open(vf_backend *be, vf_a2a *boot, int n, int rank, size_t chunk_max, vf_status *st)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    int rc = 0;
    cu_a2a *g = calloc(1, sizeof *g);
    if (!g) VF_FAIL(st, VF_ENOMEM, "%s: all-to-all: out of memory", c->devname);
    if (!boot || n < 1 || rank < 0 || rank >= n)
        VF_FAIL(st, VF_EINVAL, "%s: all-to-all: rank %d of %d ranks%s", c->devname, rank, n,
                boot ? "" : " without a host group");
    g->c = c, g->boot = boot, g->n = n, g->rank = rank, g->chunk_max = chunk_max;
    VF_CUDA_TRY(st, cudaSetDevice(c->device));
#ifdef VFLOW_HAVE_NCCL
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) VF_FAIL(st, VF_ECUDA, "%s: ncclGetUniqueId: %s", c->devname, ncclGetErrorString(r));
    }
    VF_TRY(share_id(g, &id, st));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&g->comm, n, id, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress)
        VF_FAIL(st, VF_ECUDA, "%s: ncclCommInitRank (rank %d of %d): %s", c->devname, rank, n, ncclGetErrorString(r));
    rc = vf_cuda_nccl_wait(g->comm, r, "all-to-all: ncclCommInitRank", st);
    if (rc) {
        if (rc != VF_ESTOPPED) ncclCommAbort(g->comm);
        goto fail;
    }
    g->comm_ok = true;
    if (!(g->stage = vf_cuda_pool_alloc(c->device, (size_t)n * (chunk_max ? chunk_max : 1), st))) {
        rc = st && st->code ? st->code : VF_ENOMEM;
        goto fail;
    }
#else
    VF_CUDA_TRY(st, cudaHostAlloc(&g->stage, (size_t)n * (chunk_max ? chunk_max : 1), cudaHostAllocPortable));
#endif
    return g;
fail:
    (void)rc;
    vf_status_prefix(st, "%s: all-to-all", c->devname);
    vf_cuda_a2a_close(be, g);
    return NULL;
}

int vf_cuda_a2a_run(vf_backend *be, void *gv, const void *send, void *recv, size_t chunk, vf_status *st)
{
    cu_a2a *g = gv;
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    int rc = 0;
    size_t total = (size_t)g->n * chunk;
    if (chunk > g->chunk_max)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: all-to-all: a chunk of %zu bytes, the group "
                             "takes up to %zu", c->devname, chunk, g->chunk_max);
#ifdef VFLOW_HAVE_NCCL
    /* NCCL's buffers of one group must not overlap: an in-place run lands in stage */
    char *dst = send == recv ? g->stage : recv;
    vf_cuda_op_begin(c);
    ncclResult_t r = ncclGroupStart();
    for (int j = 0; j < g->n && r == ncclSuccess; j++) {
        r = ncclSend((const char *)send + (size_t)j * chunk, chunk, ncclUint8, j, g->comm, c->stream);
        if (r == ncclSuccess) r = ncclRecv(dst + (size_t)j * chunk, chunk, ncclUint8, j, g->comm, c->stream);
    }
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess) r = e;
    /* the group's work is on the stream before anything after it is enqueued */
    rc = vf_cuda_nccl_wait(g->comm, r, "all-to-all (ncclSend/ncclRecv)", st);
    if (!rc && dst != recv && total) VF_CUDA_NOTE(c, cudaMemcpyAsync(recv, dst, total, cudaMemcpyDeviceToDevice, c->stream));
    vf_cuda_op_end(c);
#else
    vf_cuda_op_begin(c);
    cudaError_t ce = cudaMemcpyAsync(g->stage, send, total, cudaMemcpyDeviceToHost, c->stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(c->stream);
    vf_cuda_op_end(c);
    if (ce != cudaSuccess)
        return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "%s: all-to-all: device to host: %s", c->devname,
                             cudaGetErrorString(ce));
    rc = vf_a2a_run(g->boot, g->stage, g->stage, chunk, st);
    if (!rc) {
        vf_cuda_op_begin(c);
        VF_CUDA_NOTE(c, cudaMemcpyAsync(recv, g->stage, total, cudaMemcpyHostToDevice, c->stream));
        /* the stage is reused by the next run: its upload must be done by then */
        VF_CUDA_NOTE(c, cudaStreamSynchronize(c->stream));
        vf_cuda_op_end(c);
    }
#endif
    return rc;
}
