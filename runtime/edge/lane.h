/* lane.h — the payload lanes of a ZeroMQ edge: how the large tensors of an item cross,
 * beside the channel (transport_zmq.c) that carries the item's record, the credits and
 * the descriptors.
 *
 * An item crosses a ZeroMQ edge as one message: its record (a split codec record,
 * item.h) and one part per large tensor (a frame of VF_EDGE_FRAME_MIN bytes or more).
 * What stands in such a part is the lane's business: the frame itself (inline), the
 * descriptor of a shared-memory slot the frame was copied into (shm, edge_shm.h), the
 * descriptor of bytes that follow on a TCP connection of their own (bulk, edge_bulk.h).
 * An item with device tensors crosses whole through the device lane, which builds a
 * record of its own for each edge (CUDA IPC / NCCL through the hook, transport_dev.h);
 * an item that lends host memory (views, vflow.h) whole through the view lane, whose
 * record holds a descriptor for each view (edge_view.h).
 *
 * The channel opens every lane of the registry (lane.c) on each of its ends, in the
 * registry's order; a lane that does not serve an end (another transport, turned off)
 * says so when it opens and is left out of that end. Sending, the channel asks the lanes
 * in that order:
 *   - the first whose `whole` claims the item builds its record (`record`) once the edge
 *     has a credit, and hears when the message is queued (`sent`);
 *   - otherwise the frames of the shared record go to the first lane whose `send` takes
 *     them: a lane may decline (VF_LANE_DECLINED: every shared-memory slot is held, the
 *     item does not fit one) and the next one takes them; inline, the last, takes any.
 * Receiving, each lane's `recv` replaces the parts that are its descriptors by the
 * payloads they stand for (receive into: a slot, a pooled buffer of the bulk lane), and
 * once the record is decoded each lane's `recv_item` finishes the item (device tensors
 * copied into this side's memory). Every payload a lane hands over carries its release
 * (vf_frame.release): it runs when the last tensor over it goes, on any thread, possibly
 * after the lane was closed.
 *
 * A lane is one file, runtime/edge/lane_<name>.c, defining a `vf_lane_ops`, and one line
 * in the registry. Its operations get the end (read only: its description and side) and
 * the lane's own state, never the channel's: a lane does not call the channel back
 * (tests/unit/test_layering.py: a lane file includes neither transport_zmq.h nor <zmq.h>
 * and names no vf_zmq_ function).
 */
#ifndef VF_LANE_H
#define VF_LANE_H
#include "runtime/core/item.h"
#include "runtime/edge/chan_internal.h"

#include <stdbool.h>
#include <stddef.h>

/* What a lane's send returns to leave the frames to the next lane. */
#define VF_LANE_DECLINED 3
/* Room for one frame's descriptor in the scratch a lane's send writes into (bytes). */
#define VF_LANE_DESC_MAX 128

/* What stands for one frame of the record in the message: the frame's own memory
 * (shared: sent without a copy, the record kept referenced until the socket wrote it),
 * or a lane's descriptor (copied into the message). data is borrowed: the record's, or
 * the scratch of the send. */
typedef struct vf_lane_part {
    const void *data;
    size_t len;
    bool shared;
} vf_lane_part;

/* What the channel's per-process state gives a lane that opens. */
typedef struct vf_lane_env {
    const vf_curve *curve;    /* the hub's run key, on a tcp end of a secured hub; else NULL */
    _Atomic int64_t *refused; /* the hub's count of connections refused (vf_zmq_refused) */
} vf_lane_env;

typedef struct vf_lane_ops {
    const char *name;
    /* Opens the lane on end e. A receiving end has bound: e->endpoint is its address, to
     * which the lane may append what its sender needs. A sending end is about to connect
     * to e->d.addr, from which the lane cuts what its receiver appended. 1: the lane
     * serves the end, *lane its state (owned by the end until close; NULL: made on first
     * use, or none); 0: it does not (nothing to close); or an error naming the edge. */
    int (*open)(vf_edge_end *e, const vf_lane_env *env, void **lane, vf_status *st);
    /* Frees the lane's state on an end it served (the state may be NULL). NULL: none. */
    void (*close)(void *lane, const vf_edge_end *e);

    /* ---- sending end */
    /* Before the credit: 1 when this lane carries `it` whole, 0 when it leaves the item
     * to the lanes of frames, or an error naming the edge when `it` is of the kind this
     * lane carries and it cannot (st NULL: the question alone). NULL: frames only. */
    int (*whole)(const vf_edge_end *e, const vf_item *it, vf_status *st);
    /* Once the edge has a credit: the record of `it` for this edge, without frames
     * (caller owns *out; (*out)->bytes is what it costs on the edge). inflight: items
     * sent on the edge whose credit has not come back. */
    int (*record)(void **lane, const vf_edge_end *e, int inflight, const vf_item *it, vf_enc **out,
                  vf_status *st);
    /* After the message of `record` was queued. NULL: nothing to do then. */
    int (*sent)(void **lane, const vf_edge_end *e, vf_status *st);
    /* The frames of enc (enc->nframes >= 1), once the edge has a credit: fills parts[k]
     * for every frame k (a descriptor written into scratch, VF_LANE_DESC_MAX bytes per
     * frame, which lives until the message is queued) and returns 0; or returns
     * VF_LANE_DECLINED and leaves them to the next lane; or an error naming the edge. A
     * lane that keeps enc beyond the call takes a reference (enc->refs). */
    int (*send)(void **lane, const vf_edge_end *e, vf_enc *enc, vf_lane_part *parts, unsigned char *scratch,
                vf_status *st);
    /* A fault of the lane's own so far (its writer broke), looked at while the channel
     * waits for the receiver: 0 when none, else an error naming the edge. NULL: none. */
    int (*check)(void *lane, const vf_edge_end *e, vf_status *st);

    /* ---- receiving end */
    /* Receive into: parts[0..n) are the parts after a record, as the message holds them
     * (release NULL) or as a lane before this one replaced them (release set, not to be
     * touched). Replaces those that are this lane's descriptors by the payloads they
     * stand for. On an error (naming the edge) the parts replaced so far are the
     * caller's to release. NULL: the lane's parts are their own payloads. */
    int (*recv)(void **lane, const vf_edge_end *e, vf_frame *parts, int n, vf_status *st);
    /* After the record was decoded: finishes *it in place. On an error *it is freed and
     * set to NULL. NULL: nothing to finish. */
    int (*recv_item)(void **lane, const vf_edge_end *e, vf_item **it, vf_status *st);

    /* ---- either end */
    /* The bytes the lane holds on this end besides the items themselves (shared-memory
     * slots reserved, receive buffers pooled or lent): memory the plan counts in the
     * edge's own line, the items in flight on it and the one its consumer holds
     * (runtime/plan/plan.c). Read on the end's thread, or once the end is idle. NULL:
     * none. */
    int64_t (*held)(const void *lane, const vf_edge_end *e);
} vf_lane_ops;

/* The registry (lane.c), in the order the channel asks the lanes: those that carry
 * items whole first, inline (which takes any frames) last. */
#define VF_LANES_MAX 8
int vf_lane_count(void);
const vf_lane_ops *vf_lane_at(int k); /* k in [0, vf_lane_count()) */

extern const vf_lane_ops vf_lane_view;   /* lane_view.c: items lending host memory, whole (ipc) */
extern const vf_lane_ops vf_lane_dev;    /* lane_dev.c: items with device tensors, whole */
extern const vf_lane_ops vf_lane_shm;    /* lane_shm.c: shared-memory slots (ipc) */
extern const vf_lane_ops vf_lane_bulk;   /* lane_bulk.c: a TCP connection of its own (tcp) */
extern const vf_lane_ops vf_lane_inline; /* lane_inline.c: the frames in the message */

/* ------------------------------------------------------------------ the lanes of an end */

/* The lanes that serve one end, in the registry's order, with their states: the channel
 * keeps one set per end and asks its lanes through the functions below (lane.c). */
typedef struct vf_lanes {
    int n;
    const vf_lane_ops *ops[VF_LANES_MAX];
    void *state[VF_LANES_MAX];
} vf_lanes;

/* Opens every lane of the registry on e (see vf_lane_ops.open); those that serve it join
 * l. On an error the lanes opened so far stay in l, for vf_lanes_close. */
int vf_lanes_open(vf_lanes *l, vf_edge_end *e, const vf_lane_env *env, vf_status *st);
/* Closes every lane of l, in order; l is empty after. */
void vf_lanes_close(vf_lanes *l, const vf_edge_end *e);
/* Sending, before the credit: *k the index in l of the lane that carries `it` whole, -1
 * when the lanes of frames carry it; or the error of a lane that should carry it and
 * cannot (st NULL: the question alone). */
int vf_lanes_whole(const vf_lanes *l, const vf_edge_end *e, const vf_item *it, int *k, vf_status *st);
/* The frames of enc to the first lane that takes them (vf_lane_ops.send). */
int vf_lanes_send(vf_lanes *l, const vf_edge_end *e, vf_enc *enc, vf_lane_part *parts, unsigned char *scratch,
                  vf_status *st);
/* The first fault of a lane of l (vf_lane_ops.check), 0 when none. */
int vf_lanes_check(const vf_lanes *l, const vf_edge_end *e, vf_status *st);
/* Each lane in turn replaces the parts that are its descriptors (vf_lane_ops.recv; a
 * lane replaces only parts whose release is NULL). Also on an error, every part whose
 * release is set is a payload the caller releases. */
int vf_lanes_recv(vf_lanes *l, const vf_edge_end *e, vf_frame *parts, int n, vf_status *st);
/* Each lane in turn finishes a decoded item (vf_lane_ops.recv_item); on an error *it is
 * freed and set to NULL. */
int vf_lanes_recv_item(vf_lanes *l, const vf_edge_end *e, vf_item **it, vf_status *st);
/* The state of lane `ops` in l (borrowed; NULL when it does not serve the end or has no
 * state yet). */
void *vf_lanes_state(const vf_lanes *l, const vf_lane_ops *ops);
/* The bytes the lanes of l hold (vf_lane_ops.held, summed). */
int64_t vf_lanes_held(const vf_lanes *l, const vf_edge_end *e);

/* For a lane that carries items whole: the ordinary record (no frames) of `wire`, the
 * item it built for the edge, as its `record` returns it (caller owns *out). */
int vf_lane_record_of(const vf_edge_end *e, const vf_item *wire, vf_enc **out, vf_status *st);

#endif /* VF_LANE_H */
