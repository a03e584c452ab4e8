/* transport_zmq_internal.h — what the two files of the ZeroMQ transport share: the end,
 * its sending side and the operations table (transport_zmq.c, which describes the wire),
 * and its receiving side (transport_zmq_recv.c). Included only by those two.
 */
#ifndef VF_TRANSPORT_ZMQ_INTERNAL_H
#define VF_TRANSPORT_ZMQ_INTERNAL_H
#include "runtime/edge/transport_zmq.h"

/* Control frames: 8 bytes "VFC" + type + u32 n. */
#define CTL_SIZE 8
#define CTL_CREDIT 'C' /* n credits back (receiver -> sender) */
#define CTL_EOS 'E'    /* end of stream (sender -> receiver) */
#define CTL_ACK 'A'    /* EOS read (receiver -> sender) */
#define CTL_CLOSED 'X' /* the receiver stopped reading (receiver -> sender) */

#define Z vf_zmq_of

/* Sends a control frame. block: wait (stop-aware) for the socket to take it; else
 * return VF_EDGE_EMPTY when it cannot be queued now. */
int vf_zmq_send_ctl(vf_edge_end *e, char type, uint32_t n, bool block, vf_status *st);
/* Reads control frame p[n] into *type and *v; VF_ECORRUPT (naming the edge and the
 * peer) when p is no control frame. */
int vf_zmq_parse_ctl(const vf_edge_end *e, const unsigned char *p, size_t n, char *type, uint32_t *v,
                     vf_status *st);
/* The receiving end's try_recv (vf_transport_ops): an item, its lanes' payloads in
 * place and finished, its credit counted. */
int vf_zmq_try_recv_op(vf_edge_end *e, vf_item **out, int64_t *bytes, vf_status *st);

#endif /* VF_TRANSPORT_ZMQ_INTERNAL_H */
