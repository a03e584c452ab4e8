/* transport_zmq.h — the ZeroMQ transport's own API (transport_zmq*.c): the state of one
 * end and the single-end operations behind `vf_transport_zmq`, for tests that drive one
 * end directly. Ports go through vf_transport_ops (transport.h) instead; the payload
 * lanes (lane.h) never come here.
 */
#ifndef VF_TRANSPORT_ZMQ_H
#define VF_TRANSPORT_ZMQ_H
#include "runtime/edge/chan_internal.h"
#include "runtime/edge/lane.h"

/* How long a disconnected receiver may take to reconnect before it counts as gone (ms). */
#define VF_PEER_GONE_MS 1000
/* Hub slot of the ZeroMQ context (shared by ipc and tcp ends of one process). */
#define VF_HUB_SLOT_ZMQ 1

typedef struct vf_zmq_end {
    void *sock;
    int credits;          /* send: credits available */
    int pending_credits;  /* recv: consumed items not yet credited back */
    int credit_batch;     /* recv: credit back in batches of this many */
    bool acked;           /* send: receiver read our EOS */
    bool sent_final;      /* recv: sent an ack / closed message that must still go out */
    void *mon;            /* send: PAIR socket reading the socket's connect/disconnect events */
    bool peer_down;       /* send: the receiver disconnected and has not reconnected since */
    int64_t down_ns;      /* send: when it disconnected (monotonic) */
    bool curve;           /* the socket authenticates with CURVE (a secured hub's tcp end) */
    int handshakes_ok;    /* send: handshakes that succeeded */
    int handshakes_failed; /* send: failures in a row since the last success */
    int handshake_failed; /* send: the latest ZMQ_EVENT_HANDSHAKE_FAILED_* */
    unsigned handshake_status; /* its value (the ZAP status code for an auth failure) */
    vf_lanes lanes;       /* the payload lanes serving this end (lane.h) */
} vf_zmq_end;

static inline vf_zmq_end *vf_zmq_of(const vf_edge_end *e) { return (vf_zmq_end *)e->impl; }

extern const vf_transport_ops vf_transport_zmq;

/* Non-blocking receive of one item: 0 (*out: caller owns it, its lanes' payloads in
 * place, not yet finished by vf_zmq_recv_item), VF_EOS, VF_EDGE_EMPTY, or an error. */
int vf_zmq_try_recv(vf_edge_end *e, vf_item **out, vf_status *st);
/* recv: each lane finishes an item vf_zmq_try_recv returned (device tensors into this
 * side's memory). On an error *it is freed and set to NULL. */
int vf_zmq_recv_item(vf_edge_end *e, vf_item **it, vf_status *st);
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
/* Handshakes the hub's ZAP handler refused so far (0 on an unsecured hub), and
 * connections its bulk lanes refused. */
int64_t vf_zmq_refused(vf_chan_hub *h);
#endif /* VF_TRANSPORT_ZMQ_H */
