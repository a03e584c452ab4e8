/* lane_inline.c — the inline lane (lane.h): the frames of the record go in the message
 * itself, one part per frame, sent from the tensors' own memory without a copy (the
 * record keeps them referenced until the socket wrote them), and the receiver's tensors
 * alias the parts ZeroMQ received. It serves every ZeroMQ end and takes any frames: the
 * registry asks it last, so it carries what the lanes before it declined. */
#include "runtime/edge/lane.h"

static int inline_open(vf_edge_end *e, const vf_lane_env *env, void **lane, vf_status *st)
{
    *lane = NULL;
    return 1;
}

static int inline_send(void **lane, const vf_edge_end *e, vf_enc *enc, vf_lane_part *parts, unsigned char *scratch,
                       vf_status *st)
{
    for (int k = 0; k < enc->nframes; k++)
        parts[k] = (vf_lane_part){enc->frames[k]->data, vf_tensor_nbytes(enc->frames[k]), true};
    return 0;
}

const vf_lane_ops vf_lane_inline = {
    .name = "inline",
    .open = inline_open,
    .send = inline_send,
};
