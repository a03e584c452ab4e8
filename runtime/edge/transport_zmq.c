/* transport_zmq.c — an edge between two processes over ZeroMQ (ipc:// on one node,
 * tcp:// across nodes).
 *
 * One DEALER socket per end: the receiver binds, the sender connects. Data goes one
 * way, an item as one message: a split codec record (item.h) — the item with every
 * tensor of VF_EDGE_FRAME_MIN bytes or more left out — then one frame per such tensor,
 * all sent without a copy (zmq_msg_init_data over the record, shared by every ZeroMQ
 * edge of a fan-out, and over the tensors' own memory, which the record keeps
 * referenced until ZeroMQ's I/O thread has written it and drops the reference). An item
 * without large tensors is a single ordinary record. The receiver decodes the record
 * as a view over its message and lets each large tensor alias its frame, so no payload
 * is copied on either side beyond what the kernel does; each message is released when
 * the last tensor aliasing it goes. ZeroMQ delivers the parts of a message together or
 * not at all. MAXMSGSIZE bounds each part. Control frames go both ways:
 *   8 bytes "VFC" + type + u32 n:  'C' n credits back (receiver -> sender),
 *   'E' end of stream (sender -> receiver), 'A' EOS read (receiver -> sender),
 *   'X' the receiver stopped reading (receiver -> sender).
 * Credits, not HWMs, bound the edge (HWMs are approximate: they ignore kernel buffers
 * and count per pipe); HWMs are still set from the capacity, never left at 1000, and
 * MAXMSGSIZE from the largest item the port allows, so a broken peer cannot make us
 * allocate without bound. Every wait is a zmq_poll of at most VF_STOP_POLL_MS.
 *
 * A sender's socket is monitored (zmq_socket_monitor: connected / disconnected): after
 * its EOS, the drain waits for the receiver's ack or closed notice, but a receiver that
 * exited without that frame reaching us (its last frame lost with the connection) would
 * make it wait forever. A receiver disconnected for VF_PEER_GONE_MS without coming back
 * is gone: it cannot consume anything more, so ending the wait loses nothing it could
 * still have read (a tcp blip that reconnects within the grace keeps the wait going).
 *
 * What goes in a message where a large tensor's frame was is the business of the
 * payload lanes (lane.h), asked in the registry's order (lane.c): on an ipc edge the
 * frames go through a shared-memory slot of the sending end when one is free (one copy
 * into the slot, a 128-byte descriptor in the message, the receiver's tensors alias the
 * slot); on a tcp edge through the edge's bulk lane (a descriptor in the message, the
 * bytes on a TCP connection of their own, read into buffers the receiver reuses);
 * otherwise, or with every slot held by the consumer, the frames themselves go through
 * the socket as above. An item with device tensors goes whole through the device lane,
 * as a record of its own for this edge.
 *
 * On a secured hub (vf_chan_hub_secure) every tcp socket uses CURVE (curve.h): the
 * receiving end is the server, the sending end a client of the receiver's identity
 * (desc.peer), and a connection from anyone who is not a peer of the run is refused in
 * the handshake, before a byte of it reaches the edge.
 *
 * This file: the end (open, free, the per-process state), control frames, the sending
 * side and the operations table; the receiving side is transport_zmq_recv.c.
 */
#include "runtime/edge/transport_zmq_internal.h"
#include "runtime/edge/curve.h"
#include "runtime/core/alloc.h"
#include "runtime/core/item.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* Messages beyond the credited items: EOS or ack/closed, credit frames, margin. */
#define HWM_EXTRA 4
/* Bounded linger for the receiver's last control frame (ack / closed). */
#define FINAL_LINGER_MS 1000

#define ZFAIL(e, what)                                                                                      \
    VF_FAIL(st, VF_EEXTERNAL, "edge %s: %s(%s): %s", (e)->d.name, what, (e)->d.addr, zmq_strerror(zmq_errno()))

/* The transport's per-process state: the ZeroMQ context (made on the first ZeroMQ end,
 * after fork) and, on a secured hub, the ZAP handler that authenticates the peers of its
 * tcp servers (started before the first server binds). Under h->mu. */
typedef struct zmq_hub {
    void *ctx;
    vf_zap *zap;
    _Atomic int64_t lane_refused; /* connections the payload lanes refused (vf_lane_env.refused) */
} zmq_hub;

static int hub_state(vf_chan_hub *h, bool need_zap, vf_status *st)
{
    zmq_hub **zh = (zmq_hub **)vf_chan_hub_slot(h, VF_HUB_SLOT_ZMQ);
    if (!*zh) {
        zmq_hub *n = calloc(1, sizeof *n);
        if (!n) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (ZeroMQ hub)");
        if (!(n->ctx = zmq_ctx_new())) {
            free(n);
            return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        }
        *zh = n;
    }
    if (need_zap && !(*zh)->zap) return vf_zap_start((*zh)->ctx, &h->curve, &(*zh)->zap, st);
    return 0;
}

static int setopt_int(vf_edge_end *e, int opt, int v, const char *name, vf_status *st)
{
    if (zmq_setsockopt(Z(e)->sock, opt, &v, sizeof v) != 0)
        return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "edge %s: zmq_setsockopt(%s=%d): %s", e->d.name,
                             name, v, zmq_strerror(zmq_errno()));
    return 0;
}

static int zmq_open(vf_chan_hub *h, vf_edge_end *e, vf_status *st)
{
    int rc = 0;
    const char *addr = e->d.addr;
    const char *scheme = e->d.transport == VF_TR_IPC ? "ipc://" : "tcp://";
    if (strncmp(addr, scheme, 6) != 0)
        VF_FAIL(st, VF_EINVAL, "edge %s: address \"%s\" does not start with %s", e->d.name, addr, scheme);
    if (e->d.transport == VF_TR_IPC && strlen(addr + 6) > 107)
        VF_FAIL(st, VF_EINVAL, "edge %s: ipc path \"%s\" is %zu bytes, over the 107 a Unix socket allows "
                "(use a shorter run dir)", e->d.name, addr + 6, strlen(addr + 6));
    if (!(e->impl = calloc(1, sizeof(vf_zmq_end))))
        VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory (ZeroMQ end)", e->d.name);
    bool curve = e->d.transport == VF_TR_TCP && h->secure;
    pthread_mutex_lock(&h->mu);
    rc = hub_state(h, curve && e->side == VF_PORT_IN, st);
    zmq_hub *zh = *vf_chan_hub_slot(h, VF_HUB_SLOT_ZMQ);
    void *ctx = zh ? zh->ctx : NULL;
    pthread_mutex_unlock(&h->mu);
    vf_lane_env env = {curve ? &h->curve : NULL, zh ? &zh->lane_refused : NULL};
    if (rc < 0) {
        vf_status_prefix(st, "edge %s", e->d.name);
        goto fail;
    }
    if (!(Z(e)->sock = zmq_socket(ctx, ZMQ_DEALER))) ZFAIL(e, "zmq_socket");
    int hwm = e->d.capacity + HWM_EXTRA;
    VF_TRY(setopt_int(e, ZMQ_LINGER, 0, "ZMQ_LINGER", st));
    VF_TRY(setopt_int(e, ZMQ_SNDHWM, hwm, "ZMQ_SNDHWM", st));
    VF_TRY(setopt_int(e, ZMQ_RCVHWM, hwm, "ZMQ_RCVHWM", st));
    /* every tcp socket of a secured hub: CURVE, and only the run's own peers */
    if (curve && e->side == VF_PORT_IN) VF_TRY(vf_curve_server(&h->curve, Z(e)->sock, st));
    if (curve && e->side == VF_PORT_OUT) VF_TRY(vf_curve_client(&h->curve, Z(e)->sock, e->d.peer, st));
    Z(e)->curve = curve;
    if (e->side == VF_PORT_IN) {
        int64_t maxmsg = e->d.max_item_bytes > 0 ? e->d.max_item_bytes + VF_EDGE_SIZE_SLACK : -1;
        if (zmq_setsockopt(Z(e)->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0) ZFAIL(e, "ZMQ_MAXMSGSIZE");
        if (zmq_bind(Z(e)->sock, addr) != 0) ZFAIL(e, "zmq_bind");
        size_t n = sizeof e->endpoint;
        if (zmq_getsockopt(Z(e)->sock, ZMQ_LAST_ENDPOINT, e->endpoint, &n) != 0) ZFAIL(e, "ZMQ_LAST_ENDPOINT");
        Z(e)->credit_batch = e->d.capacity / 4 > 1 ? e->d.capacity / 4 : 1;
        VF_TRY(vf_lanes_open(&Z(e)->lanes, e, &env, st));
    } else {
        /* Only control frames come back; the limit also applies to the ZMTP handshake's
         * own commands (READY carries the socket metadata), hence not just CTL_SIZE. */
        int64_t maxmsg = 4096;
        if (zmq_setsockopt(Z(e)->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) != 0) ZFAIL(e, "ZMQ_MAXMSGSIZE");
        /* ZMQ_IMMEDIATE stays off on purpose: with it, a connecting socket's pipe is torn
         * down, unread frames and all, the moment the peer disconnects, so a receiver's
         * last credits and its EOS ack (sent just before it closes) could vanish and the
         * sender would wait forever. Without it, frames already received stay readable.
         * What it would bound — data queued toward a receiver not connected yet — the
         * credits already bound to `capacity` records. */
        VF_TRY(setopt_int(e, ZMQ_IMMEDIATE, 0, "ZMQ_IMMEDIATE", st));
        char mon_ep[64];
        snprintf(mon_ep, sizeof mon_ep, "inproc://vf-mon-%p", (void *)e);
        int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
        if (zmq_socket_monitor(Z(e)->sock, mon_ep, events) != 0)
            ZFAIL(e, "zmq_socket_monitor");
        if (!(Z(e)->mon = zmq_socket(ctx, ZMQ_PAIR))) ZFAIL(e, "zmq_socket(monitor)");
        int zero = 0;
        zmq_setsockopt(Z(e)->mon, ZMQ_LINGER, &zero, sizeof zero);
        if (zmq_connect(Z(e)->mon, mon_ep) != 0) ZFAIL(e, "zmq_connect(monitor)");
        VF_TRY(vf_lanes_open(&Z(e)->lanes, e, &env, st)); /* a lane may cut its part off addr */
        if (zmq_connect(Z(e)->sock, addr) != 0) ZFAIL(e, "zmq_connect");
        Z(e)->credits = e->d.capacity;
    }
    return 0;
fail:
    if (Z(e)) {
        vf_lanes_close(&Z(e)->lanes, e);
        if (Z(e)->mon) zmq_close(Z(e)->mon);
        if (Z(e)->sock) zmq_close(Z(e)->sock);
        free(e->impl);
        e->impl = NULL;
    }
    return rc;
}

/* Reads the monitor's pending events: each is a 6-byte frame (u16 event, u32 value)
 * followed by the peer's address. */
static void poll_monitor(vf_edge_end *e)
{
    if (!Z(e)->mon) return;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, Z(e)->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            if (zmq_errno() == EINTR) continue;
            return;
        }
        uint16_t ev = 0;
        uint32_t val = 0;
        if (zmq_msg_size(&m) >= 6) memcpy(&val, (char *)zmq_msg_data(&m) + 2, sizeof val);
        if (zmq_msg_size(&m) >= 2) memcpy(&ev, zmq_msg_data(&m), sizeof ev);
        while (zmq_msg_more(&m)) { /* the address frame */
            zmq_msg_close(&m);
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, Z(e)->mon, 0) < 0) break;
        }
        zmq_msg_close(&m);
        if (ev == ZMQ_EVENT_DISCONNECTED) {
            if (!Z(e)->peer_down) Z(e)->down_ns = vf_now_ns();
            Z(e)->peer_down = true;
        } else if (ev == ZMQ_EVENT_CONNECTED) {
            Z(e)->peer_down = false;
        } else if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            Z(e)->handshakes_ok++;
            Z(e)->handshakes_failed = 0;
        } else if (ev & (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                         ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)) {
            Z(e)->handshakes_failed++;
            Z(e)->handshake_failed = ev;
            Z(e)->handshake_status = val;
        }
    }
}

bool vf_zmq_peer_gone(vf_edge_end *e)
{
    poll_monitor(e);
    return Z(e)->peer_down && vf_now_ns() - Z(e)->down_ns >= (int64_t)VF_PEER_GONE_MS * 1000000;
}

int vf_zmq_send_ctl(vf_edge_end *e, char type, uint32_t n, bool block, vf_status *st)
{
    unsigned char f[CTL_SIZE] = {'V', 'F', 'C', (unsigned char)type, (unsigned char)n, (unsigned char)(n >> 8),
                                 (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
    int64_t t0 = 0;
    for (;;) {
        if (zmq_send(Z(e)->sock, f, sizeof f, ZMQ_DONTWAIT) == CTL_SIZE) break;
        int err = zmq_errno();
        if (err == EINTR) continue;
        if (err != EAGAIN)
            return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "edge %s: zmq_send(control '%c'): %s",
                                 e->d.name, type, zmq_strerror(err));
        if (!block) return VF_EDGE_EMPTY;
        if (vf_runtime_stopping())
            return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__, "edge %s: stopped", e->d.name);
        if (!t0) t0 = vf_now_ns();
        zmq_pollitem_t pi = {Z(e)->sock, 0, ZMQ_POLLOUT, 0};
        zmq_poll(&pi, 1, VF_STOP_POLL_MS);
    }
    if (t0) atomic_fetch_add(&e->blocked_ns, vf_now_ns() - t0);
    return 0;
}

int vf_zmq_parse_ctl(const vf_edge_end *e, const unsigned char *p, size_t n, char *type, uint32_t *v, vf_status *st)
{
    if (n != CTL_SIZE || p[0] != 'V' || p[1] != 'F' || p[2] != 'C')
        return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__,
                             "edge %s: unexpected %zu-byte frame from %s (not a control frame)", e->d.name, n,
                             e->side == VF_PORT_OUT ? "the receiver" : "the sender");
    *type = (char)p[3];
    *v = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    return 0;
}

int vf_zmq_poll_control(vf_edge_end *e, vf_status *st)
{
    for (;;) {
        unsigned char f[CTL_SIZE + 1];
        int n = zmq_recv(Z(e)->sock, f, sizeof f, ZMQ_DONTWAIT);
        if (n < 0) {
            int err = zmq_errno();
            if (err == EAGAIN) return 0;
            if (err == EINTR) continue;
            return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "edge %s: zmq_recv(control): %s", e->d.name,
                                 zmq_strerror(err));
        }
        char type;
        uint32_t v;
        int rc = vf_zmq_parse_ctl(e, f, (size_t)n, &type, &v, st);
        if (rc < 0) return rc;
        if (type == CTL_CREDIT) {
            if (v > (uint32_t)(e->d.capacity - Z(e)->credits))
                return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__,
                                     "edge %s: receiver returned %u credits, only %d items are in flight", e->d.name,
                                     v, e->d.capacity - Z(e)->credits);
            Z(e)->credits += (int)v;
        } else if (type == CTL_ACK) {
            Z(e)->acked = true;
            Z(e)->credits = e->d.capacity;
        } else if (type == CTL_CLOSED) {
            e->closed = true;
        } else {
            return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "edge %s: unknown control frame '%c'",
                                 e->d.name, type);
        }
        atomic_store(&e->inflight, e->d.capacity - Z(e)->credits);
    }
}

/* A CURVE receiver that refuses our handshake will never read what we queue: say so
 * instead of waiting for credit or an end-of-stream ack that cannot come. Refused means
 * an explicit ZAP denial, or HANDSHAKE_REFUSALS failures in a row before any handshake
 * succeeded (a receiver that cannot decrypt our hello just drops the connection); a
 * handshake cut short by a receiver that is exiting after a good one is not a refusal. */
#define HANDSHAKE_REFUSALS 3
static int check_handshake(vf_edge_end *e, vf_status *st)
{
    poll_monitor(e);
    if (!Z(e)->curve || !Z(e)->handshake_failed) return 0;
    bool denied = Z(e)->handshake_failed == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    if (!denied && (Z(e)->handshakes_ok > 0 || Z(e)->handshakes_failed < HANDSHAKE_REFUSALS)) return 0;
    if (Z(e)->handshake_failed == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__,
                             "edge %s: the receiver at %s refused our CURVE handshake (status %u): this process is "
                             "not a peer of its run (a different run key?)",
                             e->d.name, e->d.addr, Z(e)->handshake_status);
    return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__,
                         "edge %s: the handshake with the receiver at %s failed (%s): not a peer of this run, or "
                         "not a vflow edge", e->d.name, e->d.addr,
                         Z(e)->handshake_failed == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error"
                                                                                      : "no detail");
}

/* send: waits (stop-aware) until the edge has a credit or its receiver closed. */
static int wait_credit(vf_edge_end *e, vf_status *st)
{
    int rc = 0;
    int64_t t0 = 0;
    VF_TRY(vf_zmq_poll_control(e, st));
    while (Z(e)->credits == 0 && !e->closed) {
        if (vf_runtime_stopping()) VF_FAIL(st, VF_ESTOPPED, "edge %s: stopped while waiting for credit", e->d.name);
        VF_TRY(check_handshake(e, st));
        VF_TRY(vf_lanes_check(&Z(e)->lanes, e, st));
        if (!t0) t0 = vf_now_ns();
        zmq_pollitem_t pi = {Z(e)->sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&pi, 1, VF_STOP_POLL_MS);
        VF_TRY(vf_zmq_poll_control(e, st));
    }
fail:
    if (t0) atomic_fetch_add(&e->blocked_ns, vf_now_ns() - t0);
    return rc;
}

/* Queues one part of an item's message over data[len] (memory enc keeps alive), with a
 * reference of enc that the part's free callback drops. first: the message's first
 * part, the only one that can find the pipe full (the HWM counts whole messages). */
static int send_part(vf_edge_end *e, vf_enc *enc, void *data, size_t len, bool first, bool more, int64_t *t0,
                     vf_status *st)
{
    int rc = 0;
    zmq_msg_t m;
    if (!enc) { /* a small part (a lane's descriptor): copied into the message */
        if (zmq_msg_init_size(&m, len) != 0) ZFAIL(e, "zmq_msg_init_size");
        memcpy(zmq_msg_data(&m), data, len);
    } else {
        atomic_fetch_add(&enc->refs, 1);
        if (zmq_msg_init_data(&m, data, len, vf_enc_unref, enc) != 0) {
            vf_enc_unref(NULL, enc);
            ZFAIL(e, "zmq_msg_init_data");
        }
    }
    for (;;) { /* sending or closing m drops its reference */
        if (zmq_msg_send(&m, Z(e)->sock, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)) >= 0) break;
        int err = zmq_errno();
        if (err == EINTR) continue;
        if (err != EAGAIN) {
            zmq_msg_close(&m);
            VF_FAIL(st, VF_EEXTERNAL, "edge %s: zmq_msg_send(%s): %s", e->d.name, e->d.addr, zmq_strerror(err));
        }
        /* The pipe is full (the HWM leaves room for every credited record, so only a
         * reconnecting peer gets here): wait for it. A message begun is finished: its
         * other parts never wait on the HWM. */
        if (first && vf_runtime_stopping()) {
            zmq_msg_close(&m);
            VF_FAIL(st, VF_ESTOPPED, "edge %s: stopped while waiting for the receiver", e->d.name);
        }
        if (!*t0) *t0 = vf_now_ns();
        zmq_pollitem_t pi = {Z(e)->sock, 0, ZMQ_POLLOUT, 0};
        zmq_poll(&pi, 1, VF_STOP_POLL_MS);
    }
fail:
    return rc;
}

/* Sends a record and its frames as one message (takes one reference of enc). 0, VF_EOS
 * receiver closed, VF_ESTOPPED, or an error. */
static int send_record(vf_edge_end *e, vf_enc *enc, vf_status *st)
{
    int rc = 0, n = enc->nframes;
    int64_t t0 = 0;
    vf_lane_part *parts = NULL;
    VF_TRY(wait_credit(e, st));
    if (e->closed) {
        rc = VF_EOS;
        goto fail;
    }
    if (n > 0) {
        /* the parts, then the lanes' room for a descriptor per frame */
        if (!(parts = malloc((size_t)n * (sizeof *parts + VF_LANE_DESC_MAX))))
            VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory", e->d.name);
        VF_TRY(vf_lanes_send(&Z(e)->lanes, e, enc, parts, (unsigned char *)(parts + n), st));
    }
    VF_TRY(send_part(e, enc, enc->data, enc->len, true, n > 0, &t0, st));
    for (int k = 0; k < n; k++)
        VF_TRY(send_part(e, parts[k].shared ? enc : NULL, (void *)parts[k].data, parts[k].len, false, k + 1 < n, &t0,
                         st));
    Z(e)->credits--;
    atomic_store(&e->inflight, e->d.capacity - Z(e)->credits);
fail:
    if (t0) atomic_fetch_add(&e->blocked_ns, vf_now_ns() - t0);
    free(parts);
    vf_enc_unref(NULL, enc); /* the caller's reference: each part queued holds its own (and a lane that keeps it one) */
    return rc;
}

int vf_zmq_close_send(vf_edge_end *e, vf_status *st)
{
    if (e->ended) return 0;
    int rc = vf_zmq_poll_control(e, st);
    if (rc < 0) return rc;
    if (e->closed) {
        e->ended = true; /* nobody reads: no EOS needed */
        return 0;
    }
    rc = vf_zmq_send_ctl(e, CTL_EOS, 0, true, st);
    if (rc == 0) e->ended = true;
    return rc;
}

static void zmq_end_free(vf_edge_end *e)
{
    if (!Z(e)) return;
    vf_lanes_close(&Z(e)->lanes, e); /* the lanes first (the device hook's state among them), then the socket */
    /* LINGER 0 once nothing is owed to the peer (the sender after its EOS was acked);
     * a short bounded linger lets the receiver's final ack / closed frame leave. */
    int linger = e->side == VF_PORT_IN && Z(e)->sent_final ? FINAL_LINGER_MS : 0;
    zmq_setsockopt(Z(e)->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (Z(e)->mon) {
        zmq_socket_monitor(Z(e)->sock, NULL, 0);
        zmq_close(Z(e)->mon);
    }
    zmq_close(Z(e)->sock);
    free(e->impl);
    e->impl = NULL;
}

/* ------------------------------------------------------------------ the ops (transport.h) */

/* Sends `it` whole through lane k: its record for this edge, built once the edge has a
 * credit. 0, VF_EOS receiver closed, VF_ESTOPPED, or an error naming the edge. */
static int send_whole(vf_edge_end *e, int k, const vf_item *it, int64_t *bytes, vf_status *st)
{
    int rc = 0;
    vf_enc *enc = NULL;
    vf_lanes *l = &Z(e)->lanes;
    VF_TRY(wait_credit(e, st));
    if (e->closed) return VF_EOS; /* the receiver stopped reading: dropped */
    VF_TRY(l->ops[k]->record(&l->state[k], e, e->d.capacity - Z(e)->credits, it, &enc, st));
    *bytes = (int64_t)enc->bytes;
    atomic_fetch_add(&enc->refs, 1);
    if ((rc = send_record(e, enc, st)) != 0) goto fail;
    if (l->ops[k]->sent) VF_TRY(l->ops[k]->sent(&l->state[k], e, st));
fail:
    if (enc) vf_enc_unref(NULL, enc);
    if (rc < 0 && st && st->msg[0] && !strstr(st->msg, e->d.name)) vf_status_prefix(st, "edge %s", e->d.name);
    return rc;
}

static int zmq_wait_credit_op(vf_edge_end *e, const vf_item *it, vf_status *st)
{
    /* an item a lane carries whole waits for its credit in the send, which also says
     * why a lane that should carry it cannot */
    int k;
    if (vf_lanes_whole(&Z(e)->lanes, e, it, &k, NULL) < 0 || k >= 0) return 0;
    return wait_credit(e, st);
}

static int zmq_send_op(vf_edge_end *e, vf_send_job *job, int64_t *bytes, vf_status *st)
{
    int k, rc;
    *bytes = 0;
    if ((rc = vf_lanes_whole(&Z(e)->lanes, e, job->it, &k, st)) < 0) return rc;
    if (k >= 0) return send_whole(e, k, job->it, bytes, st);
    /* the lanes of frames share one record among the ends of the port */
    vf_enc *enc;
    if ((rc = vf_send_job_record(job, &enc, st)) < 0) return rc;
    atomic_fetch_add(&enc->refs, 1);
    *bytes = (int64_t)enc->bytes;
    return send_record(e, enc, st);
}

static int zmq_drain_op(vf_edge_end *e, void **wait_sock, vf_status *st)
{
    int rc = vf_zmq_poll_control(e, st);
    if (rc < 0) return rc;
    if (!e->ended || Z(e)->acked || e->closed) return 0; /* only an EOS sent is awaited */
    if ((rc = check_handshake(e, st)) < 0) return rc;
    if ((rc = vf_lanes_check(&Z(e)->lanes, e, st)) < 0) return rc;
    /* Everything it sent before it went was read (poll_control above): stop waiting for
     * a receiver that is gone, its ack / closed frame was lost. */
    if (vf_zmq_peer_gone(e)) {
        e->closed = true;
        return 0;
    }
    *wait_sock = Z(e)->sock;
    return 1;
}

int64_t vf_zmq_refused(vf_chan_hub *h)
{
    pthread_mutex_lock(&h->mu);
    zmq_hub *zh = *vf_chan_hub_slot(h, VF_HUB_SLOT_ZMQ);
    int64_t n = zh ? vf_zap_refused(zh->zap) + atomic_load(&zh->lane_refused) : 0;
    pthread_mutex_unlock(&h->mu);
    return n;
}

static void *zmq_socket_op(vf_edge_end *e) { return Z(e) ? Z(e)->sock : NULL; }
static int64_t zmq_inflight_op(vf_edge_end *e) { return atomic_load(&e->inflight); }

static void zmq_hub_fini(vf_chan_hub *h)
{
    zmq_hub **zh = (zmq_hub **)vf_chan_hub_slot(h, VF_HUB_SLOT_ZMQ);
    if (!*zh) return;
    vf_zap_stop((*zh)->zap);
    /* Every socket was closed with a finite linger, so this returns in bounded time. */
    zmq_ctx_term((*zh)->ctx);
    free(*zh);
    *zh = NULL;
}

const vf_transport_ops vf_transport_zmq = {
    .name = "zmq",
    .in_process = false,
    .hub_slot = VF_HUB_SLOT_ZMQ,
    .hub_fini = zmq_hub_fini,
    .open = zmq_open,
    .free = zmq_end_free,
    .wait_credit = zmq_wait_credit_op,
    .send = zmq_send_op,
    .close_send = vf_zmq_close_send,
    .drain = zmq_drain_op,
    .try_recv = vf_zmq_try_recv_op,
    .flush = vf_zmq_flush_credits,
    .close_recv = vf_zmq_close_recv,
    .socket = zmq_socket_op,
    .inflight = zmq_inflight_op,
};
