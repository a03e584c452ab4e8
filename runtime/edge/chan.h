/* chan.h — edges and run-time ports: how a worker wires its stages to each other.
 *
 * The data plane below vf_send / vf_recv (vflow.h). A graph edge becomes, in each
 * process that hosts one of its stages, an "edge end": the sending end in the producer's
 * process, the receiving end in the consumer's. Ends are grouped into named run-time
 * ports (vf_port); a stage only ever sees the port.
 *
 * Every edge is bounded by CREDITS: an edge of capacity C starts with C credits on the
 * sending side; a send spends one, and the receiver gives it back once vf_recv has handed
 * the item to its stage. A producer with no credit blocks. So at most C items are in
 * flight on an edge and its memory is C × the largest item its port allows, known
 * before launch. Transports:
 *   VF_TR_INPROC  same process: a ring of C item pointers; the item moves, no copy.
 *   VF_TR_IPC     ZeroMQ ipc:// (same node), VF_TR_TCP ZeroMQ tcp://: the item goes as
 *                 one message, a split codec record (item.h) plus one frame per large
 *                 tensor sent from the tensor's own memory (referenced until ZeroMQ has
 *                 written it); the receiver's tensors alias the frames. No copy beyond
 *                 the kernel's on either side.
 *                 One DEALER socket per end carries data one way and credits/acks back;
 *                 HWMs are set from the capacity, MAXMSGSIZE from max_item_bytes.
 *                 vf_send returns once the message is queued (its credit spent); the
 *                 record and the tensors' references go when ZeroMQ has written them.
 * End of stream travels on every edge (vf_close); a port at its end returns VF_EOS
 * from vf_recv once every one of its edges has ended. vf_close on an INPUT port tells
 * its producers that nobody will read any more: their sends are dropped and vf_send
 * returns VF_EOS once every edge of the output port is closed by its receiver.
 *
 * Stop: vf_runtime_request_stop() sets a process-wide flag; every blocking wait in
 * this module wakes at least every 100 ms, sees it and returns VF_ESTOPPED, so a dead
 * peer never hangs a worker (the supervisor sets the flag).
 *
 * How a worker uses it (one hub per process, created AFTER fork):
 *   hub = vf_chan_hub_new();
 *   for each edge whose consumer lives here:  vf_edge_open(hub, &d, VF_PORT_IN, &end)
 *        (zmq: binds d.addr; publish vf_edge_end_endpoint(end) — for "tcp://host:*"
 *         it is the port actually bound — to the producer's worker)
 *   for each edge whose producer lives here:  vf_edge_open(hub, &d, VF_PORT_OUT, &end)
 *        (zmq: connects to the receiver's endpoint; inproc: meets the receiving end
 *         opened in this hub under the same d.id, in either order)
 *   group ends: vf_port_new(name, dir) + vf_port_attach(port, end) for each edge
 *   stage thread: vf_recv / vf_send ...; when run returns: vf_close on every port,
 *                 then vf_port_drain on every output port (waits for the receivers)
 *   after join: vf_port_free on every port, then vf_chan_hub_free.
 *
 * Threads: ZeroMQ sockets are not thread-safe, so a port (and its ends) is used by one
 * thread at a time: create it on the worker's main thread and hand it to the stage
 * thread through pthread_create, back through pthread_join (both full barriers).
 * vf_port_get_stats may be called from any thread at any time (atomic counters).
 */
#ifndef VF_CHAN_H
#define VF_CHAN_H

#include "runtime/edge/transport.h"
#include "runtime/core/stop.h"
#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The stop flag (vf_runtime_request_stop / vf_runtime_stopping): runtime/core/stop.h.
 * Every blocking wait of the data plane returns VF_ESTOPPED once it is set. */

/* ------------------------------------------------------------------ edges */

/* What a worker needs to know to build one end of an edge. Plain data, copied by
 * vf_edge_open. */
typedef struct vf_edge_desc {
    int id;                  /* unique in the run (the graph's edge index); inproc ends meet by it */
    vf_transport transport;  /* VF_TR_INPROC, VF_TR_IPC or VF_TR_TCP (AUTO is refused) */
    char addr[256];          /* ZeroMQ endpoint. Receiving end binds it: "ipc:///<run dir>/e3.sock",
                                "tcp://127.0.0.1:*" (any free port). Sending end connects to the
                                receiver's vf_edge_end_endpoint. Unused for inproc. */
    int capacity;            /* items in flight, >= 1 */
    int64_t max_item_bytes;  /* vf_port_max_item_bytes of the producing port; <= 0: unbounded.
                                Sets ZMQ_MAXMSGSIZE; a larger item fails vf_send with VF_EINVAL. */
    char name[160];          /* "decode.frames -> vae_encode.frames", used in every message */
    int peer;                /* identity (worker index) of the process at the other end: a
                                sending tcp end of a secured hub authenticates its receiver by it */
} vf_edge_desc;

/* Slack allowed over max_item_bytes for the codec's own headers (bytes). */
#define VF_EDGE_SIZE_SLACK (64 * 1024)
/* Longest wait between two looks at the stop flag (ms). */
#define VF_STOP_POLL_MS 100

/* Per-process state: the ZeroMQ context (created lazily, after fork) and the table
 * through which the two ends of an inproc edge meet. */
typedef struct vf_chan_hub vf_chan_hub;
typedef struct vf_edge_end vf_edge_end;

/* New hub; caller owns it. Create it in the process that uses it (never across fork). */
vf_chan_hub *vf_chan_hub_new(vf_status *st);
/* From now on every tcp end of this hub uses CURVE with keys derived from the run key
 * (64 hex digits) and the identities of the run (curve.h): self is this process's,
 * npeers the number of workers. Call before the first tcp end opens. 0 or VF_EUSAGE. */
int vf_chan_hub_secure(vf_chan_hub *h, const char *run_key_hex, int self, int npeers, vf_status *st);
/* Frees the hub: call after every port/end made from it was freed. Terminates the
 * ZeroMQ context (bounded: every socket was closed with a finite linger). */
void vf_chan_hub_free(vf_chan_hub *h);

/* Opens the sending (side = VF_PORT_OUT) or receiving (VF_PORT_IN) end of edge d in
 * this process. Receiving zmq ends bind, sending zmq ends connect (connect may come
 * first; the sender then waits for the receiver, with the stop flag checked). Caller
 * owns *out until it is attached to a port. Errors: VF_EINVAL (bad desc, both ends of
 * an inproc edge opened twice), VF_EEXTERNAL (ZeroMQ: bind/connect failure, message
 * with the address and the edge name). */
int vf_edge_open(vf_chan_hub *h, const vf_edge_desc *d, vf_port_dir side, vf_edge_end **out,
                 vf_status *st);
/* The endpoint to give the other side: for a receiving zmq end the address actually
 * bound (ZMQ_LAST_ENDPOINT, e.g. "tcp://127.0.0.1:43817"), else d->addr. Borrowed,
 * valid while the end lives. */
const char *vf_edge_end_endpoint(const vf_edge_end *e);
const vf_edge_desc *vf_edge_end_desc(const vf_edge_end *e); /* borrowed */
/* Frees an end that was never attached to a port (closes it without draining). */
void vf_edge_end_free(vf_edge_end *e);

/* ------------------------------------------------------------------ run-time ports */

/* New empty port `name` (copied) of direction dir; caller owns *out. */
int vf_port_new(const char *name, vf_port_dir dir, vf_port **out, vf_status *st);
/* Adds an edge end to the port; its side must match the port's direction. The port
 * takes ownership of e, also on failure. An input port with several edges merges them
 * fairly (round robin); an output port sends every item to each of its edges. */
int vf_port_attach(vf_port *p, vf_edge_end *e, vf_status *st);
const char *vf_port_name(const vf_port *p);
vf_port_dir vf_port_direction(const vf_port *p);

/* After vf_close on an output port: waits until every zmq receiver has read the end of
 * stream (so all data left this process and was consumed) or closed its input, or is
 * gone (disconnected and not back within VF_PEER_GONE_MS: its last frame was lost).
 * timeout_ms < 0 waits until then or until the stop flag. 0, VF_ETIMEOUT, VF_ESTOPPED.
 * Inproc edges need no draining (the consumer lives in this process). Call it on the
 * stage's thread (it reads the sockets). */
int vf_port_drain(vf_port *out, int timeout_ms, vf_status *st);
/* Frees the port and its ends. An output the stage had closed is drained first (as
 * vf_port_drain with no timeout: until its receivers read the EOS, or the stop flag),
 * so no data is lost when the process exits; a port never closed (a failed stage) is
 * closed now without draining. Releases items still queued; closes sockets with
 * ZMQ_LINGER 0, except a receiver whose last ack / "closed" frame may still be on its
 * way (1 s linger, bounded). NULL is fine. */
void vf_port_free(vf_port *p);

/* Counters for metrics; readable from any thread while the stage runs. */
typedef struct vf_port_stats {
    int edges;
    int edges_ended;        /* input: edges whose EOS arrived; output: edges closed */
    int64_t items;          /* sent (output port) or received (input port), counted once per edge */
    int64_t bytes;          /* encoded bytes on zmq edges, tensor bytes on inproc edges (views: none) */
    int64_t inflight;       /* items sent and not yet consumed (exact on the output side;
                               the input side sees its inproc queues + credits not yet returned) */
    int64_t capacity;       /* sum of the edges' capacities: fill = inflight / capacity */
    int64_t blocked_ns;     /* time spent waiting: for credit in vf_send, for data in vf_recv */
    int64_t dropped;        /* items dropped because the receiver had closed its input */
} vf_port_stats;
void vf_port_get_stats(const vf_port *p, vf_port_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* VF_CHAN_H */
