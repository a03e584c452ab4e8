/* lane_shm.c — the shared-memory lane (lane.h) of an ipc edge: the frames of an item
 * copied into a free slot of the sending end's segment, a VF_SHM_DESC_SIZE descriptor in
 * the message for each, and the receiver's tensors aliasing the slot (edge_shm.h). With
 * every slot held by the consumer, or an item larger than a slot, the lane declines and
 * the frames go inline.
 *
 * Its state: on a sending end the segment (vf_shm_tx), on a receiving end the senders'
 * segments mapped so far (vf_shm_rx, made on the first descriptor).
 */
#include "runtime/edge/lane.h"
#include "runtime/edge/edge_shm.h"

_Static_assert(VF_SHM_DESC_SIZE <= VF_LANE_DESC_MAX, "a descriptor fits the lane's scratch");

static int shm_open(vf_edge_end *e, const vf_lane_env *env, void **lane, vf_status *st)
{
    *lane = NULL;
    /* a segment is a thing of this node: over tcp a descriptor is a frame of the wrong
     * size, which the decoder refuses */
    if (e->side == VF_PORT_IN) return e->d.transport == VF_TR_IPC;
    int rc = vf_shm_tx_new(&e->d, (vf_shm_tx **)lane, st);
    return rc < 0 ? rc : *lane != NULL;
}

static void shm_close(void *lane, const vf_edge_end *e)
{
    if (e->side == VF_PORT_OUT) vf_shm_tx_free(lane);
    else vf_shm_rx_free(lane);
}

static int shm_send(void **lane, const vf_edge_end *e, vf_enc *enc, vf_lane_part *parts, unsigned char *scratch,
                    vf_status *st)
{
    unsigned char (*desc)[VF_SHM_DESC_SIZE] = (unsigned char (*)[VF_SHM_DESC_SIZE])scratch;
    bool placed = false;
    int rc = vf_shm_tx_place(*lane, enc->frames, enc->nframes, desc, &placed, st);
    if (rc < 0) return rc;
    if (!placed) return VF_LANE_DECLINED;
    for (int k = 0; k < enc->nframes; k++) parts[k] = (vf_lane_part){desc[k], VF_SHM_DESC_SIZE, false};
    return 0;
}

/* Each descriptor stands for the slot's payload from here on. */
static int shm_recv(void **lane, const vf_edge_end *e, vf_frame *parts, int n, vf_status *st)
{
    for (int k = 0; k < n; k++) {
        if (parts[k].release || !vf_shm_is_desc(parts[k].data, parts[k].len)) continue;
        vf_frame f;
        int rc = vf_shm_rx_frame((vf_shm_rx **)lane, e->d.name, parts[k].data, &f, st);
        if (rc < 0) return rc;
        parts[k] = f;
    }
    return 0;
}

static int64_t shm_held(const void *lane, const vf_edge_end *e)
{
    /* the receiver maps the sender's pages: they are counted once, on the sending end */
    return e->side == VF_PORT_OUT ? vf_shm_tx_bytes(lane) : 0;
}

const vf_lane_ops vf_lane_shm = {
    .name = "shm",
    .open = shm_open,
    .close = shm_close,
    .send = shm_send,
    .recv = shm_recv,
    .held = shm_held,
};
