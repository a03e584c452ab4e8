/* transport_inproc.c — an edge between two stages of one worker: a ring of `capacity`
 * item pointers. The item itself moves (no copy, no encode); a full ring blocks the
 * producer (its credits are the free slots), and vf_recv taking an item frees a slot.
 * The two ends meet in the hub's table under the edge id, in whichever order they open.
 */
#include "runtime/edge/chan_internal.h"
#include "runtime/core/item.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* Hub slot of the table of inproc edges by id. */
#define HUB_SLOT_INPROC 0

typedef struct inproc_edge inproc_edge;
struct inproc_edge {
    int id;
    int capacity;
    int refs;              /* ends open (hub->mu) */
    bool has_send, has_recv;
    pthread_mutex_t mu;
    pthread_cond_t space;  /* producer waits for a free slot; CLOCK_MONOTONIC */
    vf_item **ring;
    int head, count;
    bool eos;              /* producer closed */
    bool rclosed;          /* consumer stopped reading */
    vf_waiter *rw;         /* receiving port's waiter, NULL until attached */
    inproc_edge *next;
};

static int inproc_open(vf_chan_hub *h, vf_edge_end *e, vf_status *st)
{
    int rc = 0;
    pthread_mutex_lock(&h->mu);
    inproc_edge **table = (inproc_edge **)vf_chan_hub_slot(h, HUB_SLOT_INPROC);
    inproc_edge *ip = *table;
    while (ip && ip->id != e->d.id) ip = ip->next;
    if (!ip) {
        ip = calloc(1, sizeof *ip);
        vf_item **ring = calloc((size_t)e->d.capacity, sizeof *ring);
        if (!ip || !ring) {
            free(ip);
            free(ring);
            VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory (inproc ring)", e->d.name);
        }
        ip->id = e->d.id;
        ip->capacity = e->d.capacity;
        ip->ring = ring;
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&ip->mu, NULL);
        pthread_cond_init(&ip->space, &ca);
        pthread_condattr_destroy(&ca);
        ip->next = *table;
        *table = ip;
    } else if (ip->capacity != e->d.capacity) {
        VF_FAIL(st, VF_EINVAL, "edge %s (id %d): the two inproc ends disagree on capacity (%d vs %d)", e->d.name,
                e->d.id, ip->capacity, e->d.capacity);
    }
    bool *taken = e->side == VF_PORT_OUT ? &ip->has_send : &ip->has_recv;
    if (*taken)
        VF_FAIL(st, VF_EINVAL, "edge %s (id %d): the inproc %s end is already open", e->d.name, e->d.id,
                e->side == VF_PORT_OUT ? "sending" : "receiving");
    *taken = true;
    ip->refs++;
    e->impl = ip;
fail:
    pthread_mutex_unlock(&h->mu);
    return rc;
}

static void inproc_set_waiter(vf_edge_end *e, vf_waiter *w)
{
    pthread_mutex_lock(&((inproc_edge *)e->impl)->mu);
    ((inproc_edge *)e->impl)->rw = w;
    pthread_mutex_unlock(&((inproc_edge *)e->impl)->mu);
}

/* Under ip->mu, so the port cannot free the waiter between lookup and signal. */
static void wake_receiver(inproc_edge *ip)
{
    if (ip->rw) vf_waiter_signal(ip->rw);
}

static int inproc_push(vf_edge_end *e, vf_item *it, vf_status *st)
{
    inproc_edge *ip = e->impl;
    int64_t t0 = 0;
    pthread_mutex_lock(&ip->mu);
    while (ip->count == ip->capacity && !ip->rclosed) {
        if (vf_runtime_stopping()) {
            pthread_mutex_unlock(&ip->mu);
            if (t0) atomic_fetch_add(&e->blocked_ns, vf_now_ns() - t0);
            vf_item_free(it);
            return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__, "edge %s: stopped while waiting for credit",
                                 e->d.name);
        }
        if (!t0) t0 = vf_now_ns();
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += VF_STOP_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&ip->space, &ip->mu, &ts);
    }
    if (t0) atomic_fetch_add(&e->blocked_ns, vf_now_ns() - t0);
    if (ip->rclosed) {
        pthread_mutex_unlock(&ip->mu);
        vf_item_free(it);
        return VF_EOS;
    }
    ip->ring[(ip->head + ip->count) % ip->capacity] = it;
    ip->count++;
    wake_receiver(ip);
    pthread_mutex_unlock(&ip->mu);
    return 0;
}

static int inproc_try_recv(vf_edge_end *e, vf_item **out, int64_t *bytes, vf_status *st)
{
    inproc_edge *ip = e->impl;
    int rc = VF_EDGE_EMPTY;
    pthread_mutex_lock(&ip->mu);
    if (ip->count > 0) {
        *out = ip->ring[ip->head];
        *bytes = (int64_t)vf_item_tensor_bytes(*out);
        ip->ring[ip->head] = NULL;
        ip->head = (ip->head + 1) % ip->capacity;
        ip->count--;
        pthread_cond_signal(&ip->space);
        rc = 0;
    } else if (ip->eos) {
        rc = VF_EOS;
    }
    pthread_mutex_unlock(&ip->mu);
    return rc;
}

static void inproc_end_send(vf_edge_end *e)
{
    inproc_edge *ip = e->impl;
    pthread_mutex_lock(&ip->mu);
    ip->eos = true;
    wake_receiver(ip);
    pthread_mutex_unlock(&ip->mu);
}

/* The consumer will not read again: drop what is queued and unblock the producer. */
static void inproc_end_recv(vf_edge_end *e)
{
    inproc_edge *ip = e->impl;
    pthread_mutex_lock(&ip->mu);
    ip->rclosed = true;
    ip->rw = NULL;
    while (ip->count > 0) {
        vf_item_free(ip->ring[ip->head]);
        ip->ring[ip->head] = NULL;
        ip->head = (ip->head + 1) % ip->capacity;
        ip->count--;
    }
    pthread_cond_broadcast(&ip->space);
    pthread_mutex_unlock(&ip->mu);
}

static int64_t inproc_queued(vf_edge_end *e)
{
    pthread_mutex_lock(&((inproc_edge *)e->impl)->mu);
    int64_t n = ((inproc_edge *)e->impl)->count;
    pthread_mutex_unlock(&((inproc_edge *)e->impl)->mu);
    return n;
}

static void inproc_free(vf_edge_end *e)
{
    inproc_edge *ip = e->impl;
    /* An end that goes away must not leave its peer waiting forever. */
    if (e->side == VF_PORT_OUT) inproc_end_send(e);
    else inproc_end_recv(e);
    vf_chan_hub *h = e->hub;
    pthread_mutex_lock(&h->mu);
    bool last = --ip->refs == 0;
    if (last) {
        inproc_edge **pp = (inproc_edge **)vf_chan_hub_slot(h, HUB_SLOT_INPROC);
        while (*pp != ip) pp = &(*pp)->next;
        *pp = ip->next;
    }
    pthread_mutex_unlock(&h->mu);
    e->impl = NULL;
    if (!last) return;
    while (ip->count > 0) {
        vf_item_free(ip->ring[ip->head]);
        ip->head = (ip->head + 1) % ip->capacity;
        ip->count--;
    }
    free(ip->ring);
    pthread_cond_destroy(&ip->space);
    pthread_mutex_destroy(&ip->mu);
    free(ip);
}

/* ------------------------------------------------------------------ the ops (transport.h) */

/* A shallow share of the item for every edge of a fan-out but the last, which takes it. */
static int inproc_send(vf_edge_end *e, vf_send_job *job, int64_t *bytes, vf_status *st)
{
    vf_item *mine = job->it;
    if (job->take) {
        job->it = NULL;
    } else if (!(mine = vf_item_share(job->it, st))) {
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", e->d.name);
    }
    *bytes = (int64_t)vf_item_tensor_bytes(mine);
    return inproc_push(e, mine, st);
}

static int inproc_close_send(vf_edge_end *e, vf_status *st)
{
    inproc_end_send(e);
    return 0;
}

static int inproc_close_recv(vf_edge_end *e, vf_status *st)
{
    inproc_end_recv(e);
    return 0;
}

static void inproc_hub_fini(vf_chan_hub *h)
{
    VF_ASSERT(*vf_chan_hub_slot(h, HUB_SLOT_INPROC) == NULL && "vf_chan_hub_free with inproc edge ends still open");
}

const vf_transport_ops vf_transport_inproc = {
    .name = "inproc",
    .in_process = true,
    .hub_slot = HUB_SLOT_INPROC,
    .hub_fini = inproc_hub_fini,
    .open = inproc_open,
    .free = inproc_free,
    .send = inproc_send,
    .close_send = inproc_close_send,
    .try_recv = inproc_try_recv,
    .close_recv = inproc_close_recv,
    .set_waiter = inproc_set_waiter,
    .inflight = inproc_queued,
};
