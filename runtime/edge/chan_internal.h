/* chan_internal.h — what chan.c, port.c and the transport_*.c files share. Not for
 * stages or the launcher (they use chan.h).
 *
 * An edge end is one side of one edge in this process. The port (port.c) owns its ends
 * and implements fan-in/fan-out, end of stream and waiting; each transport implements
 * the non-blocking receive and the credit-limited send of a single end.
 */
#ifndef VF_CHAN_INTERNAL_H
#define VF_CHAN_INTERNAL_H

#include "runtime/edge/chan.h"

#include <pthread.h>
#include <stdatomic.h>

/* Result of a non-blocking receive when nothing is there yet (0 = got, VF_EOS = ended). */
#define VF_EDGE_EMPTY 2

/* Wakes a receiving port when an inproc producer pushes or ends. With ZeroMQ edges on
 * the port, the consumer sleeps in zmq_poll, so the wakeup also goes through efd. */
typedef struct vf_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    uint64_t seq;
    int efd; /* eventfd, -1 when the port has no ZeroMQ edge */
} vf_waiter;

typedef struct inproc_edge inproc_edge;

/* An encoded record shared by the ZeroMQ edges of one fan-out (freed by the last
 * ZeroMQ I/O-thread callback). */
typedef struct vf_enc {
    _Atomic int refs;
    void *data; /* vf_alloc'd */
    size_t len;
} vf_enc;
void vf_enc_unref(void *data, void *hint); /* zmq_free_fn signature */

struct vf_edge_end {
    vf_edge_desc d;
    vf_port_dir side;
    vf_chan_hub *hub;
    char endpoint[256];
    _Atomic int64_t blocked_ns; /* waits inside the transport (credit, connection) */
    _Atomic int64_t inflight;   /* see vf_port_stats.inflight */
    bool ended;                 /* recv: EOS seen; send: EOS sent */
    bool closed;                /* recv: told the sender we stopped reading; send: receiver said so */

    /* inproc */
    inproc_edge *ip;

    /* ZeroMQ */
    void *sock;
    int credits;          /* send: credits available */
    int pending_credits;  /* recv: consumed items not yet credited back */
    int credit_batch;     /* recv: credit back in batches of this many */
    bool acked;           /* send: receiver read our EOS */
    bool sent_final;      /* recv: sent an ack / closed message that must still go out */
    void *mon;            /* send: PAIR socket reading the socket's connect/disconnect events */
    bool peer_down;       /* send: the receiver disconnected and has not reconnected since */
    int64_t down_ns;      /* send: when it disconnected (monotonic) */
};

struct vf_chan_hub {
    pthread_mutex_t mu;
    void *zctx;           /* ZeroMQ context, created on first ZeroMQ edge */
    inproc_edge *inproc;  /* list of inproc edges by id */
};

/* time */
int64_t vf_now_ns(void);

/* waiter */
int vf_waiter_init(vf_waiter *w, bool with_fd, vf_status *st);
void vf_waiter_fini(vf_waiter *w);
void vf_waiter_signal(vf_waiter *w);
uint64_t vf_waiter_seq(vf_waiter *w);
/* Waits until seq changes, at most ms (condvar path). */
void vf_waiter_wait(vf_waiter *w, uint64_t seen, int ms);
void vf_waiter_clear_fd(vf_waiter *w);

/* inproc transport */
int vf_inproc_open(vf_chan_hub *h, vf_edge_end *e, vf_status *st);
void vf_inproc_set_waiter(vf_edge_end *e, vf_waiter *w);
/* Takes it. 0 sent; VF_EOS receiver closed (item dropped); VF_ESTOPPED. */
int vf_inproc_send(vf_edge_end *e, vf_item *it, vf_status *st);
int vf_inproc_try_recv(vf_edge_end *e, vf_item **out);
void vf_inproc_close_send(vf_edge_end *e);
void vf_inproc_close_recv(vf_edge_end *e);
int64_t vf_inproc_queued(vf_edge_end *e);
void vf_inproc_free(vf_edge_end *e);

/* ZeroMQ transport */
int vf_zmq_open(vf_chan_hub *h, vf_edge_end *e, vf_status *st);
/* send: waits (stop-aware) until the edge has a credit or its receiver closed. */
int vf_zmq_wait_credit(vf_edge_end *e, vf_status *st);
/* Sends the shared record (takes one reference of enc). 0, VF_EOS receiver closed,
 * VF_ESTOPPED, or an error. */
int vf_zmq_send(vf_edge_end *e, vf_enc *enc, vf_status *st);
int vf_zmq_try_recv(vf_edge_end *e, vf_item **out, vf_status *st);
/* recv: the stage took an item: count a credit, send the batch when full. */
int vf_zmq_consumed(vf_edge_end *e, vf_status *st);
/* recv: send every pending credit (before the consumer blocks). */
int vf_zmq_flush_credits(vf_edge_end *e, vf_status *st);
int vf_zmq_close_send(vf_edge_end *e, vf_status *st);
int vf_zmq_close_recv(vf_edge_end *e, vf_status *st);
/* send: reads credits / acks / closed notices without blocking. */
int vf_zmq_poll_control(vf_edge_end *e, vf_status *st);
/* send, after its EOS: true once the receiver is gone — disconnected and not back
 * within VF_PEER_GONE_MS — so that its ack / closed notice will never come. */
bool vf_zmq_peer_gone(vf_edge_end *e);
/* How long a disconnected receiver may take to reconnect before it counts as gone (ms). */
#define VF_PEER_GONE_MS 1000
void vf_zmq_free(vf_edge_end *e);

#endif /* VF_CHAN_INTERNAL_H */
