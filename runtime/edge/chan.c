/* chan.c — the hub (per-process state of the transports), edge ends, and the waiter a
 * receiving port sleeps on. The ports that group ends live in port.c, the transports
 * behind their operation tables (transport.h) in transport_*.c.
 */
#include "runtime/edge/chan_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

int64_t vf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------------ waiter */

int vf_waiter_init(vf_waiter *w, bool with_fd, vf_status *st)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    w->seq = 0;
    w->efd = -1;
    if (with_fd) {
        w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (w->efd < 0) {
            int err = errno;
            pthread_cond_destroy(&w->cv);
            pthread_mutex_destroy(&w->mu);
            return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "eventfd: %s", strerror(err));
        }
    }
    return 0;
}

void vf_waiter_fini(vf_waiter *w)
{
    if (w->efd >= 0) close(w->efd);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

void vf_waiter_signal(vf_waiter *w)
{
    pthread_mutex_lock(&w->mu);
    w->seq++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->efd >= 0) {
        uint64_t one = 1;
        ssize_t n = write(w->efd, &one, sizeof one);
        (void)n; /* EAGAIN only when the counter is saturated: it is already readable */
    }
}

uint64_t vf_waiter_seq(vf_waiter *w)
{
    pthread_mutex_lock(&w->mu);
    uint64_t s = w->seq;
    pthread_mutex_unlock(&w->mu);
    return s;
}

void vf_waiter_wait(vf_waiter *w, uint64_t seen, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&w->mu);
    while (w->seq == seen) {
        if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&w->mu);
}

void vf_waiter_clear_fd(vf_waiter *w)
{
    if (w->efd < 0) return;
    uint64_t v;
    ssize_t n = read(w->efd, &v, sizeof v);
    (void)n; /* EAGAIN: nothing pending */
}

/* ------------------------------------------------------------------ hub */

vf_chan_hub *vf_chan_hub_new(vf_status *st)
{
    vf_chan_hub *h = calloc(1, sizeof *h);
    if (!h) {
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (channel hub)");
        return NULL;
    }
    pthread_mutex_init(&h->mu, NULL);
    return h;
}

int vf_chan_hub_secure(vf_chan_hub *h, const char *run_key_hex, int self, int npeers, vf_status *st)
{
    int rc = vf_curve_init(&h->curve, run_key_hex, self, npeers, "run key", st);
    if (rc == 0) h->secure = true;
    return rc;
}

void vf_chan_hub_free(vf_chan_hub *h)
{
    if (!h) return;
    /* Each transport's per-process state, once per slot (ipc and tcp share one). */
    bool done[VF_HUB_SLOTS] = {0};
    for (int t = VF_TR_AUTO + 1; t < VF_TR_COUNT; t++) {
        const vf_transport_ops *ops = vf_transport_ops_for((vf_transport)t);
        if (!ops || done[ops->hub_slot]) continue;
        done[ops->hub_slot] = true;
        if (ops->hub_fini) ops->hub_fini(h);
    }
    explicit_bzero(&h->curve, sizeof h->curve);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* ------------------------------------------------------------------ edge ends */

int vf_edge_open(vf_chan_hub *h, const vf_edge_desc *d, vf_port_dir side, vf_edge_end **out, vf_status *st)
{
    int rc = 0;
    vf_edge_end *e = NULL;
    if (!h || !d || !out) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "vf_edge_open: NULL argument");
    const char *nm = d->name[0] ? d->name : "(unnamed edge)";
    if (d->capacity < 1) VF_FAIL(st, VF_EINVAL, "edge %s: capacity %d (must be >= 1)", nm, d->capacity);
    if (d->capacity > 1 << 20) VF_FAIL(st, VF_EINVAL, "edge %s: capacity %d is absurd (at most 1048576)", nm, d->capacity);
    if (side != VF_PORT_IN && side != VF_PORT_OUT) VF_FAIL(st, VF_EINVAL, "edge %s: bad side %d", nm, (int)side);
    if (!(e = calloc(1, sizeof *e))) VF_FAIL(st, VF_ENOMEM, "out of memory (edge end)");
    e->d = *d;
    e->d.name[sizeof e->d.name - 1] = '\0';
    e->d.addr[sizeof e->d.addr - 1] = '\0';
    if (!e->d.name[0]) snprintf(e->d.name, sizeof e->d.name, "edge %d", d->id);
    e->side = side;
    e->hub = h;
    snprintf(e->endpoint, sizeof e->endpoint, "%s", e->d.addr);
    if (!(e->ops = vf_transport_ops_for(d->transport)))
        VF_FAIL(st, VF_EINVAL, "edge %s: transport %d is not resolved (inproc, ipc or tcp expected)", nm,
                (int)d->transport);
    VF_TRY(e->ops->open(h, e, st));
    *out = e;
    return 0;
fail:
    free(e);
    return rc;
}

const char *vf_edge_end_endpoint(const vf_edge_end *e) { return e->endpoint; }
const vf_edge_desc *vf_edge_end_desc(const vf_edge_end *e) { return &e->d; }

void vf_edge_end_free(vf_edge_end *e)
{
    if (!e) return;
    if (e->ops) e->ops->free(e);
    free(e);
}
