/* port.c — run-time ports: what vf_send / vf_recv / vf_close act on.
 *
 * A port groups the ends of the edges attached to one stage port and drives them
 * through their transports' operations (transport.h), never looking inside an end.
 * Output: every item goes to each edge (in-process edges get a shallow share, the others
 * one record encoded once for all of them). Input: edges are polled round robin from
 * the one after the last that delivered (fair fan-in), and the port ends when every
 * edge has. A port with socket ends sleeps in zmq_poll over the sockets plus an eventfd
 * the in-process producers ring; otherwise on a condition variable. Either way at most
 * VF_STOP_POLL_MS at a time, to look at the stop flag.
 */
#include "runtime/edge/chan_internal.h"
#include "runtime/core/item.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct vf_port {
    char name[VF_NAME_MAX * 2];
    vf_port_dir dir;
    int n, cap;
    vf_edge_end **e;
    int nsock;        /* ends with a socket to poll */
    int rr;           /* input: edge to look at first */
    bool closed;
    bool has_waiter;
    vf_waiter w;      /* input ports */
    zmq_pollitem_t *pi;
    _Atomic int64_t items, bytes, blocked_ns, dropped;
    _Atomic int nedges, nended;
};

int vf_port_new(const char *name, vf_port_dir dir, vf_port **out, vf_status *st)
{
    vf_port *p = calloc(1, sizeof *p);
    if (!p) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (port)");
    snprintf(p->name, sizeof p->name, "%s", name ? name : "");
    p->dir = dir;
    *out = p;
    return 0;
}

const char *vf_port_name(const vf_port *p) { return p->name; }
vf_port_dir vf_port_direction(const vf_port *p) { return p->dir; }
int vf_port_edges(const vf_port *p) { return p ? p->n : 0; }

/* The waiter needs an eventfd once an end with a socket joins an input port. */
static int ensure_waiter(vf_port *p, bool need_fd, vf_status *st)
{
    if (p->has_waiter && (!need_fd || p->w.efd >= 0)) return 0;
    vf_waiter nw;
    int rc = vf_waiter_init(&nw, need_fd, st);
    if (rc < 0) return rc;
    if (p->has_waiter) {
        /* Re-point the inproc producers to the new waiter before retiring the old one. */
        for (int i = 0; i < p->n; i++)
            if (p->e[i]->ops->set_waiter) p->e[i]->ops->set_waiter(p->e[i], NULL);
        vf_waiter_fini(&p->w);
    }
    p->w = nw;
    p->has_waiter = true;
    for (int i = 0; i < p->n; i++)
        if (p->e[i]->ops->set_waiter) p->e[i]->ops->set_waiter(p->e[i], &p->w);
    return 0;
}

static bool has_socket(vf_edge_end *e) { return e->ops->socket && e->ops->socket(e); }

int vf_port_attach(vf_port *p, vf_edge_end *e, vf_status *st)
{
    int rc = 0;
    if (e->side != p->dir)
        VF_FAIL(st, VF_EINVAL, "port %s: edge %s is the %s end, the port is an %s", p->name, e->d.name,
                e->side == VF_PORT_IN ? "receiving" : "sending", p->dir == VF_PORT_IN ? "input" : "output");
    if (p->closed) VF_FAIL(st, VF_EINVAL, "port %s: attach after close", p->name);
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 4;
        vf_edge_end **ne = realloc(p->e, (size_t)cap * sizeof *ne);
        zmq_pollitem_t *npi = realloc(p->pi, (size_t)(cap + 1) * sizeof *npi);
        if (ne) p->e = ne;
        if (npi) p->pi = npi;
        if (!ne || !npi) VF_FAIL(st, VF_ENOMEM, "out of memory (port %s)", p->name);
        p->cap = cap;
    }
    p->e[p->n++] = e;
    atomic_store(&p->nedges, p->n);
    bool sock = has_socket(e);
    if (sock) p->nsock++;
    if (p->dir == VF_PORT_IN) {
        rc = ensure_waiter(p, p->nsock > 0, st);
        if (rc < 0) {
            p->n--;
            if (sock) p->nsock--;
            atomic_store(&p->nedges, p->n);
            goto fail;
        }
        if (e->ops->set_waiter) e->ops->set_waiter(e, &p->w);
    }
    return 0;
fail:
    vf_edge_end_free(e);
    return rc;
}

/* ------------------------------------------------------------------ send */

static int check_size(vf_port *p, vf_edge_end *e, size_t enc_len, const vf_item *it, vf_status *st)
{
    if (e->d.max_item_bytes > 0 && enc_len > (size_t)e->d.max_item_bytes + VF_EDGE_SIZE_SLACK)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "port %s: item '%s' encodes to %zu bytes, more than the %lld its port spec allows "
                             "(edge %s; a stage must declare its largest item)",
                             p->name, vf_item_id(it), enc_len, (long long)e->d.max_item_bytes, e->d.name);
    return 0;
}

/* Books one edge's send result: counts, drops, and errors get the port's name. */
static int count_send(vf_port *p, int r, int64_t bytes, int *open_edges, vf_status *st)
{
    if (r < 0) {
        vf_status_prefix(st, "port %s", p->name);
        return r;
    }
    if (r == VF_EOS) {
        atomic_fetch_add(&p->dropped, 1);
        return 0;
    }
    atomic_fetch_add(&p->items, 1);
    atomic_fetch_add(&p->bytes, bytes);
    (*open_edges)++;
    return 0;
}

int vf_send(vf_port *p, vf_item *it, vf_status *st)
{
    int rc = 0;
    vf_send_job job = {.it = it};
    if (!p || !it) {
        vf_item_free(it);
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "vf_send: NULL %s", p ? "item" : "port");
    }
    if (p->dir != VF_PORT_OUT) VF_FAIL(st, VF_EINVAL, "vf_send on input port %s", p->name);
    if (p->closed) VF_FAIL(st, VF_EINVAL, "vf_send on port %s after vf_close", p->name);
    if (vf_runtime_stopping()) VF_FAIL(st, VF_ESTOPPED, "port %s: the run is stopping", p->name);

    size_t enc_len = vf_item_encoded_size(it);
    for (int i = 0; i < p->n; i++) VF_TRY(check_size(p, p->e[i], enc_len, it, st));
    /* Credit first, send after (transport.h): a record exists only once an edge can
     * take it, so a producer holds at most `capacity` records per edge, never one more. */
    for (int i = 0; i < p->n; i++) {
        vf_edge_end *e = p->e[i];
        if (e->ops->wait_credit && (rc = e->ops->wait_credit(e, it, st)) < 0) {
            vf_status_prefix(st, "port %s", p->name);
            goto fail;
        }
    }
    int last_local = -1, open_edges = 0;
    for (int i = 0; i < p->n; i++)
        if (p->e[i]->ops->in_process) last_local = i;
    /* Ends that cross processes first: they have credit now, so this does not block, and
     * the record is on its way before an in-process edge makes us wait. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < p->n; i++) {
            vf_edge_end *e = p->e[i];
            if (e->ops->in_process != (pass == 1)) continue;
            job.take = i == last_local;
            int64_t bytes = 0;
            int r = e->ops->send(e, &job, &bytes, st);
            VF_TRY(count_send(p, r, bytes, &open_edges, st));
        }
        if (job.enc) vf_enc_unref(NULL, job.enc); /* the ends hold their own references */
        job.enc = NULL;
    }
    if (p->n > 0 && open_edges == 0) rc = VF_EOS; /* every receiver has stopped reading */
fail:
    if (job.enc) vf_enc_unref(NULL, job.enc);
    vf_item_free(job.it);
    return rc;
}

/* ------------------------------------------------------------------ receive */

static int recv_impl(vf_port *p, int timeout_ms, vf_item **out, vf_status *st)
{
    if (!p || !out) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "vf_recv: NULL argument");
    if (p->dir != VF_PORT_IN) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "vf_recv on output port %s", p->name);
    if (p->closed || p->n == 0) return VF_EOS;
    int64_t t_start = vf_now_ns(), t_block = 0;
    int64_t deadline = timeout_ms >= 0 ? t_start + (int64_t)timeout_ms * 1000000 : INT64_MAX;
    int rc;
    for (;;) {
        if (vf_runtime_stopping()) {
            rc = vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__, "port %s: the run is stopping", p->name);
            break;
        }
        uint64_t seq = vf_waiter_seq(&p->w);
        vf_waiter_clear_fd(&p->w); /* before looking, so a push after the look stays visible */
        int live = 0;
        rc = VF_EDGE_EMPTY;
        for (int k = 0; k < p->n && rc == VF_EDGE_EMPTY; k++) {
            int i = (p->rr + k) % p->n;
            vf_edge_end *e = p->e[i];
            if (e->ended) continue;
            int64_t bytes = 0;
            int r = e->ops->try_recv(e, out, &bytes, st);
            if (r == VF_EOS) {
                e->ended = true;
                atomic_fetch_add(&p->nended, 1);
                continue;
            }
            live++;
            if (r == VF_EDGE_EMPTY) continue;
            if (r < 0) {
                vf_status_prefix(st, "port %s", p->name);
                rc = r;
                break;
            }
            /* Got one: the stage consumes it now, so the producer gets its credit (the
             * transport counted it in try_recv). */
            p->rr = (i + 1) % p->n;
            atomic_fetch_add(&p->items, 1);
            atomic_fetch_add(&p->bytes, bytes);
            rc = 0;
        }
        if (rc != VF_EDGE_EMPTY) break;
        if (live == 0) { /* every edge has delivered its end of stream */
            rc = VF_EOS;
            break;
        }
        /* About to sleep: hand back every credit first, or a producer waiting for them
         * and this consumer waiting for data would wait on each other. */
        for (int i = 0; i < p->n; i++) {
            vf_edge_end *e = p->e[i];
            if (e->ops->flush && (rc = e->ops->flush(e, st)) < 0) goto out;
        }
        int64_t now = vf_now_ns();
        if (now >= deadline) {
            rc = VF_ETIMEOUT;
            break;
        }
        int ms = VF_STOP_POLL_MS;
        if (deadline - now < (int64_t)ms * 1000000) ms = (int)((deadline - now + 999999) / 1000000);
        if (!t_block) t_block = now;
        if (p->nsock) {
            int np = 0;
            for (int i = 0; i < p->n; i++) {
                vf_edge_end *e = p->e[i];
                void *sock = e->ops->socket ? e->ops->socket(e) : NULL;
                if (!sock || e->ended) continue;
                p->pi[np++] = (zmq_pollitem_t){sock, 0, ZMQ_POLLIN, 0};
            }
            p->pi[np++] = (zmq_pollitem_t){NULL, p->w.efd, ZMQ_POLLIN, 0};
            zmq_poll(p->pi, np, ms);
        } else {
            vf_waiter_wait(&p->w, seq, ms);
        }
    }
out:
    if (t_block) atomic_fetch_add(&p->blocked_ns, vf_now_ns() - t_block);
    return rc;
}

int vf_recv(vf_port *in, vf_item **out, vf_status *st) { return recv_impl(in, -1, out, st); }

int vf_recv_timeout(vf_port *in, int timeout_ms, vf_item **out, vf_status *st)
{
    return recv_impl(in, timeout_ms < 0 ? 0 : timeout_ms, out, st);
}

/* ------------------------------------------------------------------ close, drain, free */

int vf_close(vf_port *p, vf_status *st)
{
    if (!p) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "vf_close: NULL port");
    if (p->closed) return 0;
    int rc = 0;
    for (int i = 0; i < p->n; i++) {
        vf_edge_end *e = p->e[i];
        int r = 0;
        if (p->dir == VF_PORT_OUT) {
            r = e->ops->close_send(e, st);
            e->ended = true;
        } else if (!e->ended) {
            r = e->ops->close_recv(e, st);
        }
        if (r < 0 && rc == 0) {
            rc = r;
            vf_status_prefix(st, "port %s", p->name);
        }
    }
    if (p->dir == VF_PORT_OUT) atomic_store(&p->nended, p->n);
    p->closed = true;
    return rc;
}

int vf_port_drain(vf_port *p, int timeout_ms, vf_status *st)
{
    if (!p || p->dir != VF_PORT_OUT) return 0;
    int64_t deadline = timeout_ms >= 0 ? vf_now_ns() + (int64_t)timeout_ms * 1000000 : INT64_MAX;
    for (;;) {
        int np = 0;
        for (int i = 0; i < p->n; i++) {
            vf_edge_end *e = p->e[i];
            if (!e->ops->drain) continue;
            void *sock = NULL;
            int rc = e->ops->drain(e, &sock, st);
            if (rc < 0) return rc;
            if (rc == 1) p->pi[np++] = (zmq_pollitem_t){sock, 0, ZMQ_POLLIN, 0};
        }
        if (np == 0) return 0;
        if (vf_runtime_stopping())
            return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__, "port %s: stopped while draining", p->name);
        int64_t now = vf_now_ns();
        if (now >= deadline)
            return vf_status_set(st, VF_ETIMEOUT, __FILE__, __LINE__,
                                 "port %s: %d receiver(s) did not read the end of stream in %d ms", p->name, np,
                                 timeout_ms);
        int ms = VF_STOP_POLL_MS;
        if (deadline - now < (int64_t)ms * 1000000) ms = (int)((deadline - now + 999999) / 1000000);
        zmq_poll(p->pi, np, ms);
    }
}

void vf_port_free(vf_port *p)
{
    if (!p) return;
    vf_status st = {0};
    bool was_closed = p->closed;
    vf_close(p, &st);
    /* An output that ended normally waits for its receivers in other processes, so no
     * data is lost when this process exits; an aborted one (never closed by the stage)
     * does not. */
    if (was_closed && p->dir == VF_PORT_OUT) vf_port_drain(p, -1, &st);
    for (int i = 0; i < p->n; i++) {
        vf_edge_end *e = p->e[i];
        if (e->ops->set_waiter && p->dir == VF_PORT_IN) e->ops->set_waiter(e, NULL);
        vf_edge_end_free(e);
    }
    if (p->has_waiter) vf_waiter_fini(&p->w);
    free(p->e);
    free(p->pi);
    free(p);
}

void vf_port_get_stats(const vf_port *cp, vf_port_stats *out)
{
    vf_port *p = (vf_port *)cp;
    memset(out, 0, sizeof *out);
    out->edges = atomic_load(&p->nedges);
    out->edges_ended = atomic_load(&p->nended);
    out->items = atomic_load(&p->items);
    out->bytes = atomic_load(&p->bytes);
    out->blocked_ns = atomic_load(&p->blocked_ns);
    out->dropped = atomic_load(&p->dropped);
    /* The edge array is only resized by attach, before the stage runs. */
    for (int i = 0; i < out->edges; i++) {
        vf_edge_end *e = p->e[i];
        out->capacity += e->d.capacity;
        out->blocked_ns += atomic_load(&e->blocked_ns);
        out->inflight += e->ops->inflight(e);
    }
}
