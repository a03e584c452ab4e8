/* transport.h — host transports of the data plane: the operations an edge end goes
 * through, and the registry that maps a vf_transport to them.
 *
 * The port (port.c) knows nothing of how an item crosses an edge: it asks each of its
 * ends, through end->ops, to wait for credit, send, try a receive, hand back credits,
 * close and drain. A transport is one file that defines a `vf_transport_ops` and one
 * line in the registry (transport.c); its own state hangs off the end (end->impl) and the
 * hub (vf_chan_hub_slot). Device tensors are not a transport of their own: the ZeroMQ
 * transport carries them through its device lane (lane.h) and the hook (transport_dev.h).
 *
 * How the port drives a send to every edge of an output port (fan-out):
 *   1. wait_credit on every end that has it (credit first: an encoded record exists
 *      only once an edge can take it, so a producer holds at most `capacity` records
 *      per edge);
 *   2. send on the ends that are not in_process: they do not block once they have
 *      credit, and the record (vf_send_job_record: encoded once, shared; its large
 *      tensors referenced, not copied) is on its way before an in-process edge can make
 *      the producer wait;
 *   3. send on the in_process ends: each takes a shallow share of the item, the last
 *      one the item itself (job->take): their consumers hold the very tensors the
 *      ZeroMQ ends may still be sending (fan-out shares tensors, vflow.h).
 * A receiving port polls its ends round robin with try_recv and sleeps in zmq_poll on
 * the ends' sockets (socket) plus an eventfd the in-process producers ring through the
 * waiter (set_waiter), at most VF_STOP_POLL_MS at a time, to look at the stop flag.
 */
#ifndef VF_TRANSPORT_H
#define VF_TRANSPORT_H
#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vf_transport {
    VF_TR_AUTO = 0,  /* chosen by placement */
    VF_TR_INPROC,    /* same worker: pointer handoff */
    VF_TR_IPC,       /* ZeroMQ ipc:// (same node) */
    VF_TR_TCP,       /* ZeroMQ tcp:// */
    VF_TR_COUNT
} vf_transport;

/* "auto" | "inproc" | "ipc" | "tcp". parse: 0 or VF_EINVAL. */
const char *vf_transport_name(vf_transport t);
int vf_transport_parse(const char *s, vf_transport *out);

typedef struct vf_chan_hub vf_chan_hub;
typedef struct vf_edge_end vf_edge_end;
typedef struct vf_waiter vf_waiter;
typedef struct vf_enc vf_enc;

/* One vf_send to the ends of one port: the item, and its encoded record built on first
 * need and shared by every end that sends records. */
typedef struct vf_send_job {
    vf_item *it;      /* the caller's item; an in_process end with `take` sets it to NULL */
    bool take;        /* this end is the port's last in-process end: it takes it itself */
    vf_enc *enc;      /* the shared record, NULL until vf_send_job_record */
} vf_send_job;

/* The job's record (the item as a split codec record, its large tensors referenced:
 * vf_enc_new), made on the first call. Borrowed: an end that keeps it takes a reference
 * (enc->refs). */
int vf_send_job_record(vf_send_job *job, vf_enc **out, vf_status *st);

/* Result of a non-blocking receive when nothing is there yet (0 = got, VF_EOS = ended). */
#define VF_EDGE_EMPTY 2

typedef struct vf_transport_ops {
    const char *name;
    /* Items move by pointer inside this process (no encode): served last in a fan-out. */
    bool in_process;
    /* Slot of per-process state in the hub (vf_chan_hub_slot), shared by the transports
     * that name the same slot (ipc and tcp share one ZeroMQ context); hub_fini frees it. */
    int hub_slot;
    void (*hub_fini)(vf_chan_hub *h);

    /* Opens end e (its desc, side and hub are set); sets e->impl and, for an end others
     * connect to, e->endpoint. Errors name the edge. */
    int (*open)(vf_chan_hub *h, vf_edge_end *e, vf_status *st);
    /* Closes and frees the transport's part of e (not e itself). */
    void (*free)(vf_edge_end *e);

    /* ---- sending end */
    /* Blocks (stop-aware) until the end can take `it` or its receiver closed. NULL: the
     * send itself waits. */
    int (*wait_credit)(vf_edge_end *e, const vf_item *it, vf_status *st);
    /* Sends job->it. 0 sent (*bytes: what it cost on the edge), VF_EOS the receiver
     * stopped reading (dropped), VF_ESTOPPED, or an error naming the edge. */
    int (*send)(vf_edge_end *e, vf_send_job *job, int64_t *bytes, vf_status *st);
    /* End of stream (vf_close). */
    int (*close_send)(vf_edge_end *e, vf_status *st);
    /* After close_send: reads the receiver's answers; 1 while its end of stream is still
     * unread (then *wait_sock is the socket to sleep on), 0 once read, closed or gone.
     * NULL: nothing to wait for (the consumer lives in this process). */
    int (*drain)(vf_edge_end *e, void **wait_sock, vf_status *st);

    /* ---- receiving end */
    /* Non-blocking: 0 (*out: caller owns it; *bytes: what it cost on the edge), VF_EOS,
     * VF_EDGE_EMPTY, or an error naming the edge. Taking an item is consuming it: the
     * end owes its producer the credit from here on. */
    int (*try_recv)(vf_edge_end *e, vf_item **out, int64_t *bytes, vf_status *st);
    /* Hands back every credit owed before the consumer sleeps. NULL: none kept. */
    int (*flush)(vf_edge_end *e, vf_status *st);
    /* The consumer stopped reading (vf_close on an input port). */
    int (*close_recv)(vf_edge_end *e, vf_status *st);
    /* The receiving port's waiter, rung when an item or the end arrives (NULL: detach).
     * NULL op: the end wakes the consumer through its socket instead. */
    void (*set_waiter)(vf_edge_end *e, vf_waiter *w);

    /* ---- either end */
    /* The ZeroMQ socket a sleeping port polls for this end, NULL: none. */
    void *(*socket)(vf_edge_end *e);
    /* Items in flight (vf_port_stats.inflight). */
    int64_t (*inflight)(vf_edge_end *e);
} vf_transport_ops;

/* The operations of transport t; NULL for VF_TR_AUTO or an unknown value. */
const vf_transport_ops *vf_transport_ops_for(vf_transport t);

#ifdef __cplusplus
}
#endif
#endif /* VF_TRANSPORT_H */
