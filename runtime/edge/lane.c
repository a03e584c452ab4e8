/* lane.c — the registry of payload lanes (lane.h), one line per lane in the order the
 * channel asks them, and the lanes of one end: opened from the registry, asked in turn. */
#include "runtime/edge/lane.h"

#include <stdlib.h>

static const vf_lane_ops *const registry[] = {
    &vf_lane_view,   /* host views of shared segments: the item whole, descriptors in its record */
    &vf_lane_dev,    /* device tensors: the item whole, a record of its own per edge */
    &vf_lane_shm,    /* ipc: frames copied into a free shared-memory slot */
    &vf_lane_bulk,   /* tcp: frames on the edge's bulk connection */
    &vf_lane_inline, /* any edge: the frames themselves, in the message */
};
_Static_assert(sizeof registry / sizeof *registry <= VF_LANES_MAX, "VF_LANES_MAX");

int vf_lane_count(void) { return (int)(sizeof registry / sizeof *registry); }

const vf_lane_ops *vf_lane_at(int k) { return k >= 0 && k < vf_lane_count() ? registry[k] : NULL; }

/* ------------------------------------------------------------------ the lanes of an end */

int vf_lanes_open(vf_lanes *l, vf_edge_end *e, const vf_lane_env *env, vf_status *st)
{
    for (int k = 0; k < vf_lane_count(); k++) {
        void *state = NULL;
        int rc = registry[k]->open(e, env, &state, st);
        if (rc < 0) return rc;
        if (rc == 0) continue;
        l->ops[l->n] = registry[k];
        l->state[l->n++] = state;
    }
    return 0;
}

void vf_lanes_close(vf_lanes *l, const vf_edge_end *e)
{
    for (int i = 0; i < l->n; i++)
        if (l->ops[i]->close) l->ops[i]->close(l->state[i], e);
    l->n = 0;
}

int vf_lanes_whole(const vf_lanes *l, const vf_edge_end *e, const vf_item *it, int *k, vf_status *st)
{
    *k = -1;
    for (int i = 0; i < l->n; i++) {
        int rc = l->ops[i]->whole ? l->ops[i]->whole(e, it, st) : 0;
        if (rc < 0) return rc;
        if (rc > 0) {
            *k = i;
            break;
        }
    }
    return 0;
}

int vf_lanes_send(vf_lanes *l, const vf_edge_end *e, vf_enc *enc, vf_lane_part *parts, unsigned char *scratch,
                  vf_status *st)
{
    for (int i = 0; i < l->n; i++) {
        if (!l->ops[i]->send) continue;
        int rc = l->ops[i]->send(&l->state[i], e, enc, parts, scratch, st);
        if (rc != VF_LANE_DECLINED) return rc;
    }
    /* the registry ends with the inline lane, which takes any frames */
    return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "edge %s: no lane took the item's frames", e->d.name);
}

int vf_lanes_check(const vf_lanes *l, const vf_edge_end *e, vf_status *st)
{
    for (int i = 0; i < l->n; i++) {
        int rc = l->ops[i]->check ? l->ops[i]->check(l->state[i], e, st) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

int vf_lanes_recv(vf_lanes *l, const vf_edge_end *e, vf_frame *parts, int n, vf_status *st)
{
    for (int i = 0; i < l->n; i++) {
        int rc = l->ops[i]->recv ? l->ops[i]->recv(&l->state[i], e, parts, n, st) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

int vf_lanes_recv_item(vf_lanes *l, const vf_edge_end *e, vf_item **it, vf_status *st)
{
    for (int i = 0; i < l->n; i++) {
        int rc = l->ops[i]->recv_item ? l->ops[i]->recv_item(&l->state[i], e, it, st) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

void *vf_lanes_state(const vf_lanes *l, const vf_lane_ops *ops)
{
    for (int i = 0; i < l->n; i++)
        if (l->ops[i] == ops) return l->state[i];
    return NULL;
}

int64_t vf_lanes_held(const vf_lanes *l, const vf_edge_end *e)
{
    int64_t n = 0;
    for (int i = 0; i < l->n; i++)
        if (l->ops[i]->held) n += l->ops[i]->held(l->state[i], e);
    return n;
}

int vf_lane_record_of(const vf_edge_end *e, const vf_item *wire, vf_enc **out, vf_status *st)
{
    int rc = 0;
    vf_enc *enc = calloc(1, sizeof *enc);
    *out = NULL;
    if (!enc) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", e->d.name);
    atomic_init(&enc->refs, 1);
    if ((rc = vf_item_encode_alloc(wire, &enc->data, &enc->len, st)) < 0) {
        free(enc);
        return rc;
    }
    enc->bytes = enc->len;
    *out = enc;
    return 0;
}
