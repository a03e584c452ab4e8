/* transport_inproc.c — an edge between two stages of one worker: a ring of `capacity`
 * item pointers. The item itself moves (no copy, no encode); a full ring blocks the
 * producer (its credits are the free slots), and vf_recv taking an item frees a slot.
 * The two ends meet in the hub's table under the edge id, in whichever order they open.
 */
#include "runtime/edge/chan_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

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

int vf_inproc_open(vf_chan_hub *h, vf_edge_end *e, vf_status *st)
{
    int rc = 0;
    pthread_mutex_lock(&h->mu);
    inproc_edge *ip = h->inproc;
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
        ip->next = h->inproc;
        h->inproc = ip;
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
    e->ip = ip;
fail:
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void vf_inproc_set_waiter(vf_edge_end *e, vf_waiter *w)
{
    pthread_mutex_lock(&e->ip->mu);
    e->ip->rw = w;
    pthread_mutex_unlock(&e->ip->mu);
}

/* Under ip->mu, so the port cannot free the waiter between lookup and signal. */
static void wake_receiver(inproc_edge *ip)
{
    if (ip->rw) vf_waiter_signal(ip->rw);
}

int vf_inproc_send(vf_edge_end *e, vf_item *it, vf_status *st)
{
    inproc_edge *ip = e->ip;
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

int vf_inproc_try_recv(vf_edge_end *e, vf_item **out)
{
    inproc_edge *ip = e->ip;
    int rc = VF_EDGE_EMPTY;
    pthread_mutex_lock(&ip->mu);
    if (ip->count > 0) {
        *out = ip->ring[ip->head];
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

void vf_inproc_close_send(vf_edge_end *e)
{
    inproc_edge *ip = e->ip;
    pthread_mutex_lock(&ip->mu);
    ip->eos = true;
    wake_receiver(ip);
    pthread_mutex_unlock(&ip->mu);
}

/* The consumer will not read again: drop what is queued and unblock the producer. */
void vf_inproc_close_recv(vf_edge_end *e)
{
    inproc_edge *ip = e->ip;
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

int64_t vf_inproc_queued(vf_edge_end *e)
{
    pthread_mutex_lock(&e->ip->mu);
    int64_t n = e->ip->count;
    pthread_mutex_unlock(&e->ip->mu);
    return n;
}

void vf_inproc_free(vf_edge_end *e)
{
    inproc_edge *ip = e->ip;
    /* An end that goes away must not leave its peer waiting forever. */
    if (e->side == VF_PORT_OUT) vf_inproc_close_send(e);
    else vf_inproc_close_recv(e);
    vf_chan_hub *h = e->hub;
    pthread_mutex_lock(&h->mu);
    bool last = --ip->refs == 0;
    if (last) {
        inproc_edge **pp = &h->inproc;
        while (*pp != ip) pp = &(*pp)->next;
        *pp = ip->next;
    }
    pthread_mutex_unlock(&h->mu);
    e->ip = NULL;
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
