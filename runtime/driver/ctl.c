/* ctl.c — control-plane sockets and message framing. Protocol: ctl.h. */
#include "runtime/driver/ctl.h"
#include "runtime/edge/curve.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define ZCHECK(st, expr, what)                                                          \
    do {                                                                                \
        if ((expr) != 0)                                                                \
            VF_FAIL(st, VF_EEXTERNAL, "control plane: %s: %s", what, zmq_strerror(zmq_errno())); \
    } while (0)

static int set_common(void *s, vf_status *st)
{
    int rc = 0;
    int zero = 0;
    int64_t maxmsg = VF_CTL_MAX_MSG;
    ZCHECK(st, zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero), "ZMQ_LINGER");
    ZCHECK(st, zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg), "ZMQ_MAXMSGSIZE");
    return 0;
fail:
    return rc;
}

int vf_ctl_router_open(void *zctx, const char *endpoint, void **out, vf_status *st)
{
    return vf_ctl_router_open_curve(zctx, endpoint, NULL, out, st);
}

int vf_ctl_router_open_curve(void *zctx, const char *endpoint, const vf_curve *c, void **out, vf_status *st)
{
    int rc = 0;
    void *s = zmq_socket(zctx, ZMQ_ROUTER);
    if (!s) VF_FAIL(st, VF_EEXTERNAL, "control plane: zmq_socket: %s", zmq_strerror(zmq_errno()));
    VF_TRY(set_common(s, st));
    int one = 1;
    ZCHECK(st, zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one), "ZMQ_ROUTER_MANDATORY");
    if (c) VF_TRY(vf_curve_server(c, s, st));
    if (zmq_bind(s, endpoint) != 0) {
        int e = zmq_errno();
        /* another run (or program) on the meeting port is the user's to resolve */
        VF_FAIL(st, e == EADDRINUSE || e == EADDRNOTAVAIL ? VF_EUSAGE : VF_EEXTERNAL, "control plane: bind %s: %s%s",
                endpoint, zmq_strerror(e),
                e == EADDRINUSE ? " (another run on this port? give each run its own MASTER_PORT)"
                : e == EADDRNOTAVAIL ? " (not an address of this host: check --addr / MASTER_ADDR)"
                                     : "");
    }
    *out = s;
    return 0;
fail:
    if (s) zmq_close(s);
    return rc;
}

int vf_ctl_dealer_open(void *zctx, const char *endpoint, const char *identity, void **out,
                       vf_status *st)
{
    return vf_ctl_dealer_open_curve(zctx, endpoint, identity, NULL, out, st);
}

int vf_ctl_dealer_open_curve(void *zctx, const char *endpoint, const char *identity, const vf_curve *c, void **out,
                             vf_status *st)
{
    int rc = 0;
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    if (!s) VF_FAIL(st, VF_EEXTERNAL, "control plane: zmq_socket: %s", zmq_strerror(zmq_errno()));
    VF_TRY(set_common(s, st));
    ZCHECK(st, zmq_setsockopt(s, ZMQ_ROUTING_ID, identity, strlen(identity)), "ZMQ_ROUTING_ID");
    if (c) VF_TRY(vf_curve_client(c, s, VF_CURVE_DRIVER, st));
    if (zmq_connect(s, endpoint) != 0)
        VF_FAIL(st, VF_EEXTERNAL, "control plane: connect %s: %s", endpoint,
                zmq_strerror(zmq_errno()));
    *out = s;
    return 0;
fail:
    if (s) zmq_close(s);
    return rc;
}

void vf_ctl_close(void *sock, int linger_ms)
{
    if (!sock) return;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    zmq_close(sock);
}

int vf_ctl_send(void *sock, const char *ident, int type, const char *payload, size_t n,
                int timeout_ms)
{
    int flags = timeout_ms > 0 ? 0 : ZMQ_DONTWAIT;
    if (timeout_ms > 0) zmq_setsockopt(sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    if (ident && zmq_send(sock, ident, strlen(ident), flags | ZMQ_SNDMORE) < 0) goto err;
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, n + 1) != 0) return VF_ENOMEM;
    char *d = zmq_msg_data(&m);
    d[0] = (char)type;
    if (n) memcpy(d + 1, payload, n);
    if (zmq_msg_send(&m, sock, flags) < 0) {
        zmq_msg_close(&m);
        goto err;
    }
    return 0;
err:
    if (zmq_errno() == EHOSTUNREACH) return VF_ENOTFOUND;
    if (zmq_errno() == EAGAIN) return VF_ETIMEOUT;
    return VF_EEXTERNAL;
}

void vf_ctl_msg_fini(vf_ctl_msg *m)
{
    free(m->payload);
    memset(m, 0, sizeof *m);
}

/* Reads and discards what is left of a multipart message (a malformed peer). */
static void skip_rest(void *sock)
{
    int more = 1;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
    }
}

static bool has_more(void *sock)
{
    int more = 0;
    size_t sz = sizeof more;
    return zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more;
}

int vf_ctl_recv(void *sock, bool router, vf_ctl_msg *m)
{
    memset(m, 0, sizeof *m);
    zmq_msg_t part;
    for (;;) {
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            if (zmq_errno() == EAGAIN) return 0;
            if (zmq_errno() == EINTR) continue;
            return VF_EEXTERNAL;
        }
        break;
    }
    if (router) {
        size_t n = zmq_msg_size(&part);
        if (n >= sizeof m->ident) n = sizeof m->ident - 1;
        memcpy(m->ident, zmq_msg_data(&part), n);
        m->ident[n] = 0;
        zmq_msg_close(&part);
        if (!has_more(sock)) return 0; /* identity alone: nothing to act on */
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            return 0;
        }
    }
    skip_rest(sock);
    size_t n = zmq_msg_size(&part);
    if (n < 1) {
        zmq_msg_close(&part);
        return 0;
    }
    const char *d = zmq_msg_data(&part);
    m->type = (unsigned char)d[0];
    m->n = n - 1;
    m->payload = malloc(n);
    if (!m->payload) {
        zmq_msg_close(&part);
        return VF_ENOMEM;
    }
    memcpy(m->payload, d + 1, n - 1);
    m->payload[n - 1] = 0;
    zmq_msg_close(&part);
    return 1;
}
