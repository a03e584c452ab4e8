/* ctl.h — the control plane between the driver and its workers (docs/run.md).
 *
 * The driver binds one ROUTER socket (ZMQ_ROUTER_MANDATORY, so a message to a worker
 * that is gone fails instead of vanishing); each worker connects one DEALER whose
 * identity is its worker name. A message is ONE frame: a type byte then a text payload
 * (the driver's ROUTER adds/strips the identity frame). Payload formats, one record per
 * line, fields separated by single spaces, free text last after a TAB:
 *
 * worker -> driver
 *   H hello      "pid <pid>\n" then "edge <id> <endpoint>\n" per receiving zmq end it bound
 *   B heartbeat  "" (every VF_CTL_BEAT_MS; the driver fails a worker silent for longer
 *                than its heartbeat timeout)
 *   M metrics    "t <mono_ns>\n", per stage "s <stage> <phase> <in> <out> <bytes_in>
 *                <bytes_out> <blocked_ns> <run_ns> <live> <peak> <dropped>\n", per input
 *                port "p <stage> <i|o> <port> <inflight> <capacity>\n", per gauge
 *                "g <stage> <key> <value>\n" (stage = graph index)
 *   L log        "<level> <stage|-1>\t<text>"
 *   R row        "<stage>\t<json object>"   (vf_metric_row)
 *   D done       "<stage> <run_ns>"          (run returned 0 and its outputs drained)
 *   F failed     "<stage> <code>\t<message>"
 *   Q bye        "<exit code>"               (every stage thread has returned)
 * driver -> worker
 *   G go         "edge <id> <endpoint>\n" for every zmq edge of the run: connect and start
 *   S stop       "" drain: sources stop producing, the rest flushes to end of stream
 *   A abort      "" stop now: every blocking send/recv returns VF_ESTOPPED
 *
 * A multi-node run adds the node agents (every rank but 0; identity "node<k>") on the
 * same ROUTER, bound on tcp at the meeting address:
 * node -> coordinator
 *   J join       "node <k> addr <ip> pid <pid>" (repeated until the part arrives)
 *   B heartbeat  ""
 *   X exited     "<worker> <wait status>"        (one of its workers exited)
 *   F failed     "<code>\t<message>"             (refused the part, or could not start)
 *   I interrupt  "<signal>"                      (the node got SIGINT/SIGTERM: drain the run)
 *   Q bye        "<exit code>"
 * coordinator -> node
 *   P part       "hash <hex>\n<resolved graph JSON>": start the workers placed on node k
 *   B heartbeat  ""
 *   K kill       "<worker>"                      (SIGKILL it)
 *   E end        "<exit code>"                   (the run is over: reap, say bye, exit)
 * Every socket of a multi-node run's control plane is CURVE (curve.h): the ROUTER is the
 * server (identity VF_CURVE_DRIVER), workers are clients with their worker index, node k
 * with index nworkers + k.
 *
 * Sockets are not thread-safe: the driver's supervisor thread owns the ROUTER, a
 * worker's control (main) thread owns its DEALER.
 */
#ifndef VF_CTL_H
#define VF_CTL_H
#include "runtime/vflow.h"

enum {
    VF_CTL_HELLO = 'H',
    VF_CTL_BEAT = 'B',
    VF_CTL_METRICS = 'M',
    VF_CTL_LOG = 'L',
    VF_CTL_ROW = 'R',
    VF_CTL_DONE = 'D',
    VF_CTL_FAIL = 'F',
    VF_CTL_BYE = 'Q',
    VF_CTL_GO = 'G',
    VF_CTL_STOP = 'S',
    VF_CTL_ABORT = 'A',
    VF_CTL_JOIN = 'J',
    VF_CTL_EXITED = 'X',
    VF_CTL_INTR = 'I',
    VF_CTL_PART = 'P',
    VF_CTL_KILL = 'K',
    VF_CTL_END = 'E',
};

typedef struct vf_curve vf_curve; /* runtime/edge/curve.h */

#define VF_CTL_BEAT_MS 200
#define VF_CTL_IDENT_MAX 64
/* Largest control message accepted (ZMQ_MAXMSGSIZE on both sides). */
#define VF_CTL_MAX_MSG (16 << 20)

typedef struct vf_ctl_msg {
    char ident[VF_CTL_IDENT_MAX]; /* sender identity (driver side), "" on a worker */
    int type;                     /* VF_CTL_* */
    char *payload;                /* NUL-terminated, owned (vf_ctl_msg_fini) */
    size_t n;                     /* payload bytes without the NUL */
} vf_ctl_msg;

/* The driver's ROUTER bound at endpoint. zctx is a ZeroMQ context; *out is owned by the
 * caller (vf_ctl_close). */
int vf_ctl_router_open(void *zctx, const char *endpoint, void **out, vf_status *st);
/* A worker's DEALER named identity, connected to endpoint. */
int vf_ctl_dealer_open(void *zctx, const char *endpoint, const char *identity, void **out,
                       vf_status *st);
/* The same with CURVE (c != NULL): the ROUTER a server (its context's ZAP handler must be
 * running), the DEALER a client of the coordinator's identity. A bind on a port in use is
 * VF_EUSAGE. */
int vf_ctl_router_open_curve(void *zctx, const char *endpoint, const vf_curve *c, void **out, vf_status *st);
int vf_ctl_dealer_open_curve(void *zctx, const char *endpoint, const char *identity, const vf_curve *c, void **out,
                             vf_status *st);
/* Closes a socket, giving queued messages up to linger_ms to leave. NULL is fine. */
void vf_ctl_close(void *sock, int linger_ms);

/* Sends one message (ident = NULL from a DEALER). Never blocks longer than
 * timeout_ms (0 = not at all). 0, VF_ETIMEOUT (queue full), VF_ENOTFOUND (ROUTER: no
 * such peer), VF_EEXTERNAL. */
int vf_ctl_send(void *sock, const char *ident, int type, const char *payload, size_t n,
                int timeout_ms);
/* Receives one message if one is waiting (non-blocking): 1 got it, 0 none, negative
 * error. `router`: the socket is the driver's ROUTER (identity frame first). */
int vf_ctl_recv(void *sock, bool router, vf_ctl_msg *m);
void vf_ctl_msg_fini(vf_ctl_msg *m);

#endif /* VF_CTL_H */
