/* swap.c — the CPU backend's block-swap copy queue (ops.h "block swap"): a thread that
 * stands for the device's copy stream.
 *
 * The CPU backend's ops run on the caller's thread and are done when they return, so a
 * copy enqueued after them needs no event to wait for the compute; what the queue adds
 * is the overlap: the caller hands a copy to the queue's thread and computes on while it
 * runs, and waits for it (swap_wait) only when it needs the bytes. The same order of
 * copies into the same buffers as with no queue, so the results are bit for bit those of
 * a plain copy. Slot s is done when every copy enqueued for it has run.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_ops.h"

#define SWAPQ_DEPTH 64 /* copies the queue holds before swap_in waits for room */

typedef struct swap_req {
    int slot;
    void *dst;
    const void *src;
    size_t bytes;
} swap_req;

typedef struct vf_cpu_swapq {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;                 /* a request came, one finished, or the end */
    swap_req req[SWAPQ_DEPTH];
    int head, count;
    int slots;
    int64_t *issued, *done;            /* per slot: copies enqueued / finished */
    bool stop;
    int64_t copy_ns, wait_ns;
} vf_cpu_swapq;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void *swapq_main(void *arg)
{
    vf_cpu_swapq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->count && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
        if (!q->count) break;
        swap_req r = q->req[q->head];
        pthread_mutex_unlock(&q->mu);
        int64_t t0 = now_ns();
        if (r.bytes) memcpy(r.dst, r.src, r.bytes);
        int64_t t1 = now_ns();
        pthread_mutex_lock(&q->mu);
        q->copy_ns += t1 - t0;
        q->head = (q->head + 1) % SWAPQ_DEPTH;
        q->count--;
        q->done[r.slot]++;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

void *vf_cpu_swap_new(int slots, vf_status *st)
{
    vf_cpu_swapq *q = calloc(1, sizeof *q);
    if (q) q->issued = calloc((size_t)(slots > 0 ? slots : 1), sizeof *q->issued);
    if (q && q->issued) q->done = calloc((size_t)(slots > 0 ? slots : 1), sizeof *q->done);
    if (!q || !q->done) {
        if (q) free(q->issued);
        free(q);
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "block swap: no memory for a copy queue of %d slots", slots);
        return NULL;
    }
    q->slots = slots;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pthread_create(&q->th, NULL, swapq_main, q) != 0) {
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        free(q->done);
        free(q->issued);
        free(q);
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "block swap: cannot start the copy thread");
        return NULL;
    }
    return q;
}

void vf_cpu_swap_free(void *qv)
{
    vf_cpu_swapq *q = qv;
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->stop = true; /* the thread finishes what is queued first */
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->th, NULL);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q->done);
    free(q->issued);
    free(q);
}

void vf_cpu_swap_in(void *qv, int slot, void *dst, const void *src, size_t bytes)
{
    vf_cpu_swapq *q = qv;
    pthread_mutex_lock(&q->mu);
    while (q->count == SWAPQ_DEPTH) pthread_cond_wait(&q->cv, &q->mu);
    q->req[(q->head + q->count) % SWAPQ_DEPTH] = (swap_req){slot, dst, src, bytes};
    q->count++;
    q->issued[slot]++;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void vf_cpu_swap_wait(void *qv, int slot)
{
    vf_cpu_swapq *q = qv;
    int64_t t0 = now_ns();
    pthread_mutex_lock(&q->mu);
    while (q->done[slot] < q->issued[slot]) pthread_cond_wait(&q->cv, &q->mu);
    q->wait_ns += now_ns() - t0;
    pthread_mutex_unlock(&q->mu);
}

void vf_cpu_swap_stats(void *qv, double *copy_s, double *wait_s)
{
    vf_cpu_swapq *q = qv;
    pthread_mutex_lock(&q->mu);
    *copy_s = q->copy_ns * 1e-9;
    *wait_s = q->wait_ns * 1e-9;
    pthread_mutex_unlock(&q->mu);
}
