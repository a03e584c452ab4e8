/* chan_internal.h — what chan.c, port.c and the transports (transport.h) share. Not for
 * stages or the launcher (they use chan.h).
 *
 * An edge end is one side of one edge in this process. The port (port.c) owns its ends
 * and implements fan-in/fan-out, end of stream and waiting; each transport implements,
 * through end->ops, the non-blocking receive and the credit-limited send of a single
 * end, with its own state in end->impl.
 */
#ifndef VF_CHAN_INTERNAL_H
#define VF_CHAN_INTERNAL_H

#include "runtime/edge/chan.h"
#include "runtime/edge/curve.h"
#include "runtime/edge/transport.h"

#include <pthread.h>
#include <stdatomic.h>

/* Wakes a receiving port when an in-process producer pushes or ends. With socket ends
 * on the port, the consumer sleeps in zmq_poll, so the wakeup also goes through efd. */
struct vf_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    uint64_t seq;
    int efd; /* eventfd, -1 when the port has no socket end */
};

/* Tensors of at least this many bytes leave the record as frames of their own (a split
 * record, item.h), sent from the tensor's memory: below it, copying into the record
 * costs less than a frame. */
#define VF_EDGE_FRAME_MIN ((size_t)64 * 1024)

/* A record shared by the ends of one fan-out that send records: the split record and
 * the tensors whose memory its frames are, kept referenced until the socket has written
 * them. Freed by the last reference (every message part holds one; the ZeroMQ I/O
 * thread's free callback drops it). */
struct vf_enc {
    _Atomic int refs;
    void *data;         /* the record, vf_alloc'd */
    size_t len;
    int nframes;
    vf_tensor **frames; /* [nframes] references (NULL: none), in the record's order */
    size_t bytes;       /* the item's encoded size (vf_item_encoded_size): what it costs on the edge */
};
void vf_enc_unref(void *data, void *hint); /* zmq_free_fn signature */
/* The record of `it` split at VF_EDGE_FRAME_MIN, with its frames referenced; refs = 1.
 * Caller owns *out (vf_enc_unref). */
int vf_enc_new(const vf_item *it, vf_enc **out, vf_status *st);

struct vf_edge_end {
    vf_edge_desc d;
    vf_port_dir side;
    vf_chan_hub *hub;
    const vf_transport_ops *ops;
    void *impl;                 /* the transport's state of this end */
    char endpoint[256];
    _Atomic int64_t blocked_ns; /* waits inside the transport (credit, connection) */
    _Atomic int64_t inflight;   /* see vf_port_stats.inflight */
    bool ended;                 /* recv: EOS seen; send: EOS sent */
    bool closed;                /* recv: told the sender we stopped reading; send: receiver said so */
};

/* Per-process state slots of the transports (transport.h, hub_slot). */
#define VF_HUB_SLOTS 4
struct vf_chan_hub {
    pthread_mutex_t mu;         /* guards the slots; transports may take it for their state */
    void *slot[VF_HUB_SLOTS];
    bool secure;                /* tcp sockets authenticate with CURVE (vf_chan_hub_secure) */
    vf_curve curve;
};
/* The hub's slot k (under h->mu). */
static inline void **vf_chan_hub_slot(vf_chan_hub *h, int k) { return &h->slot[k]; }

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

#endif /* VF_CHAN_INTERNAL_H */
