/* swap.c — the CUDA backend's block swap (ops.h "block swap"): page-locked host memory
 * and a copy queue, a stream of its own beside the backend's one compute stream.
 *
 * swap_in records an event on the compute stream and makes the copy stream wait for it,
 * so the copy starts once the ops enqueued before it are done (the previous user of the
 * ring buffer it overwrites), then records the slot's event after the copy. swap_wait
 * makes the compute stream wait for that event: the host never blocks, and a copy runs
 * while the compute stream works on the ops between swap_in and swap_wait. Both enqueue
 * under the backend's lock, so neither lands inside another thread's recorded unit.
 * A copy out (a full fine-tune's swapped block's gradient back to the host after its
 * backward, models/dit_swap.c) is the same call the other way: it starts after the
 * block's ops, and the copy stream runs in order, so the slot's next copy in overwrites
 * the ring buffer only after that copy out has ended.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

typedef struct cu_swapq {
    vf_cuda_ctx *c;
    cudaStream_t cs;        /* the copy stream */
    cudaEvent_t ready;      /* the compute stream's progress, for the copy to wait on */
    cudaEvent_t *done;      /* per slot: its latest copy */
    int slots;
} cu_swapq;

void *vf_cuda_swap_new(vf_backend *be, int slots, vf_status *st)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    int rc = 0;
    cu_swapq *q = calloc(1, sizeof *q);
    if (!q || !(q->done = calloc((size_t)(slots > 0 ? slots : 1), sizeof *q->done)))
        VF_FAIL(st, VF_ENOMEM, "%s: no memory for a copy queue of %d slots", c->devname, slots);
    q->c = c;
    VF_CUDA_TRY(st, cudaSetDevice(c->device));
    VF_CUDA_TRY(st, cudaStreamCreateWithFlags(&q->cs, cudaStreamNonBlocking));
    VF_CUDA_TRY(st, cudaEventCreateWithFlags(&q->ready, cudaEventDisableTiming));
    for (; q->slots < slots; q->slots++)
        VF_CUDA_TRY(st, cudaEventCreateWithFlags(&q->done[q->slots], cudaEventDisableTiming));
    return q;
fail:
    (void)rc;
    vf_status_prefix(st, "%s: block swap", c->devname);
    vf_cuda_swap_free(be, q);
    return NULL;
}

void vf_cuda_swap_free(vf_backend *be, void *qv)
{
    (void)be;
    cu_swapq *q = qv;
    if (!q) return;
    if (q->cs) cudaStreamSynchronize(q->cs);
    for (int i = 0; i < q->slots; i++) cudaEventDestroy(q->done[i]);
    if (q->ready) cudaEventDestroy(q->ready);
    if (q->cs) cudaStreamDestroy(q->cs);
    free(q->done);
    free(q);
}

void vf_cuda_swap_in(vf_backend *be, void *qv, int slot, void *dst, const void *src, size_t bytes)
{
    cu_swapq *q = qv;
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    vf_cuda_op_begin(c);
    VF_CUDA_NOTE(c, cudaEventRecord(q->ready, c->stream));
    VF_CUDA_NOTE(c, cudaStreamWaitEvent(q->cs, q->ready, 0));
    if (bytes) VF_CUDA_NOTE(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, q->cs));
    VF_CUDA_NOTE(c, cudaEventRecord(q->done[slot], q->cs));
    vf_cuda_op_end(c);
}

void vf_cuda_swap_wait(vf_backend *be, void *qv, int slot)
{
    cu_swapq *q = qv;
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    vf_cuda_op_begin(c);
    VF_CUDA_NOTE(c, cudaStreamWaitEvent(c->stream, q->done[slot], 0));
    vf_cuda_op_end(c);
}

void vf_cuda_swap_stats(vf_backend *be, void *qv, double *copy_s, double *wait_s)
{
    (void)be, (void)qv;
    *copy_s = 0, *wait_s = 0; /* the waits happen on the device; bench_cuda.sh times steps */
}
