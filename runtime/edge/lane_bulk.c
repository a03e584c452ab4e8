/* lane_bulk.c — the bulk lane (lane.h) of a tcp edge: the frames of an item written on a
 * TCP connection of the edge's own by the sending end's writer thread (sealed with
 * AES-256-GCM on a secured hub), a VF_BULK_DESC_SIZE descriptor in the message for each,
 * and the receiver reading them, when it takes the item, into a pooled buffer its
 * tensors alias (edge_bulk.h). It takes every item it is offered.
 *
 * Its state: on a sending end the writer (vf_bulk_tx); on a receiving end the listener
 * and reader (vf_bulk_rx), NULL when the lane is off, in which case descriptors that
 * arrive anyway are refused.
 */
#include "runtime/edge/lane.h"
#include "runtime/edge/edge_bulk.h"

#include <stdlib.h>

_Static_assert(VF_BULK_DESC_SIZE <= VF_LANE_DESC_MAX, "a descriptor fits the lane's scratch");

static int bulk_open(vf_edge_end *e, const vf_lane_env *env, void **lane, vf_status *st)
{
    *lane = NULL;
    if (e->d.transport != VF_TR_TCP) return 0;
    if (e->side == VF_PORT_IN) {
        int rc = vf_bulk_rx_new(&e->d, e->endpoint, sizeof e->endpoint, env->curve, env->refused,
                                (vf_bulk_rx **)lane, st);
        return rc < 0 ? rc : 1;
    }
    int rc = vf_bulk_tx_new(&e->d, e->d.addr, env->curve, (vf_bulk_tx **)lane, st);
    return rc < 0 ? rc : *lane != NULL;
}

static void bulk_close(void *lane, const vf_edge_end *e)
{
    if (e->side == VF_PORT_OUT) vf_bulk_tx_free(lane);
    else vf_bulk_rx_free(lane);
}

static int bulk_send(void **lane, const vf_edge_end *e, vf_enc *enc, vf_lane_part *parts, unsigned char *scratch,
                     vf_status *st)
{
    unsigned char (*desc)[VF_BULK_DESC_SIZE] = (unsigned char (*)[VF_BULK_DESC_SIZE])scratch;
    int rc = vf_bulk_tx_send(*lane, enc, desc, st);
    if (rc < 0) return rc;
    for (int k = 0; k < enc->nframes; k++) parts[k] = (vf_lane_part){desc[k], VF_BULK_DESC_SIZE, false};
    return 0;
}

static int bulk_check(void *lane, const vf_edge_end *e, vf_status *st)
{
    return e->side == VF_PORT_OUT ? vf_bulk_tx_check(lane, st) : 0;
}

/* The descriptors of an item (all of its frames or none): the lane's bytes for it, read
 * now. */
static int bulk_recv(void **lane, const vf_edge_end *e, vf_frame *parts, int n, vf_status *st)
{
    if (n <= 0 || parts[0].release || !vf_bulk_is_desc(parts[0].data, parts[0].len)) return 0;
    int rc = 0;
    const void **d = malloc((size_t)n * sizeof *d);
    vf_frame *pl = malloc((size_t)n * sizeof *pl);
    if (!d || !pl) VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory", e->d.name);
    if (!*lane) VF_FAIL(st, VF_ECORRUPT, "edge %s: bulk descriptors on an edge without a bulk lane", e->d.name);
    for (int k = 0; k < n; k++) {
        if (parts[k].release || !vf_bulk_is_desc(parts[k].data, parts[k].len))
            VF_FAIL(st, VF_ECORRUPT, "edge %s: frame %d of an item sent through the bulk lane is not a descriptor",
                    e->d.name, k);
        d[k] = parts[k].data;
    }
    VF_TRY(vf_bulk_rx_item(*lane, d, n, pl, st));
    for (int k = 0; k < n; k++) parts[k] = pl[k];
fail:
    free(d);
    free(pl);
    return rc;
}

static int64_t bulk_held(const void *lane, const vf_edge_end *e)
{
    /* the writer holds references of records, the items' own memory */
    return e->side == VF_PORT_IN ? vf_bulk_rx_bytes(lane) : 0;
}

const vf_lane_ops vf_lane_bulk = {
    .name = "bulk",
    .open = bulk_open,
    .close = bulk_close,
    .send = bulk_send,
    .check = bulk_check,
    .recv = bulk_recv,
    .held = bulk_held,
};
