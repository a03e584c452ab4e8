/* lane_view.c — the view lane (lane.h) of an ipc edge: an item that lends host memory
 * (views of vf_alloc_shared segments, vflow.h "lending memory") crosses whole as one
 * ordinary record in which each such view is a descriptor (edge_view.h) and every other
 * tensor is inline; the receiver's view tensors alias the lender's segment, mapped once
 * per process. No byte of a view is copied. It claims an item only when the item has
 * such a view and no device tensor (device views go through the device lane, CUDA IPC);
 * a host view that lies in no segment crosses inline, as a copy (vf_tensor_is_view is
 * false on the other side).
 *
 * Its state: on a receiving end the segments mapped so far (vf_view_rx); none on a
 * sending end. VFLOW_EDGE_VIEW=0 in the environment turns it off: views then cross as
 * copies, the way they do across nodes (tests compare both).
 */
#include "runtime/edge/lane.h"
#include "runtime/edge/edge_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool turned_off(void)
{
    const char *env = getenv("VFLOW_EDGE_VIEW");
    return env && strcmp(env, "0") == 0;
}

static int view_open(vf_edge_end *e, const vf_lane_env *env, void **lane, vf_status *st)
{
    (void)env, (void)st;
    *lane = NULL;
    /* a segment is a thing of this node; the receiving end maps on the first descriptor */
    return e->d.transport == VF_TR_IPC && !(e->side == VF_PORT_OUT && turned_off());
}

static void view_close(void *lane, const vf_edge_end *e)
{
    if (e->side == VF_PORT_IN) vf_view_rx_free(lane);
}

/* The view's place in a segment of this process, for a host view; false otherwise. */
static bool lendable(const vf_tensor *t, vf_seg_ref *ref)
{
    return t->device.kind == VF_DEV_CPU && vf_tensor_is_view(t) && vf_shared_find(t->data, vf_tensor_nbytes(t), ref) == 0;
}

static int view_whole(const vf_edge_end *e, const vf_item *it, vf_status *st)
{
    (void)e, (void)st;
    bool any = false;
    vf_seg_ref ref;
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        const vf_tensor *t = vf_item_tensor_at(it, i, NULL);
        if (t->device.kind != VF_DEV_CPU) return 0; /* the device lane's */
        any = any || lendable(t, &ref);
    }
    return any;
}

static int view_record(void **lane, const vf_edge_end *e, int inflight, const vf_item *it, vf_enc **out,
                       vf_status *st)
{
    (void)lane, (void)inflight;
    int rc = 0;
    *out = NULL;
    /* the same id, metadata and tensors (by reference; inline ones are copied into the
     * record), each lendable view replaced by its descriptor */
    vf_item *w = vf_item_share(it, st);
    if (!w) return st && st->code ? st->code : VF_ENOMEM;
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        const char *name = NULL;
        vf_tensor *t = vf_item_tensor_at(it, i, &name);
        vf_seg_ref ref;
        if (!lendable(t, &ref)) continue;
        vf_view_desc d = {.dtype = t->dtype, .ndim = t->ndim, .seg = ref, .nbytes = vf_tensor_nbytes(t)};
        memcpy(d.shape, t->shape, sizeof d.shape);
        char nm[256];
        snprintf(nm, sizeof nm, "%s%s", VF_VIEW_PREFIX, name);
        int64_t nb = VF_VIEW_DESC_BYTES;
        vf_tensor *dt = vf_tensor_new(VF_DTYPE_U8, 1, &nb, st);
        if (!dt) VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory", e->d.name);
        vf_view_desc_encode(&d, dt->data);
        vf_tensor_unref(vf_item_take(w, name));
        VF_TRY(vf_item_put(w, nm, dt, st));
    }
    rc = vf_lane_record_of(e, w, out, st);
fail:
    vf_item_free(w);
    return rc;
}

/* Each descriptor becomes the view it stands for, before the credit goes back. */
static int view_recv_item(void **lane, const vf_edge_end *e, vf_item **it, vf_status *st)
{
    const size_t np = strlen(VF_VIEW_PREFIX);
    for (int i = 0; *it && i < vf_item_ntensors(*it); i++) {
        const char *name = NULL;
        vf_tensor *wt = vf_item_tensor_at(*it, i, &name);
        if (!name || strncmp(name, VF_VIEW_PREFIX, np) != 0) continue;
        char plain[256];
        snprintf(plain, sizeof plain, "%s", name + np);
        vf_view_desc d;
        vf_tensor *v = NULL;
        int rc = wt->dtype != VF_DTYPE_U8
                     ? vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "edge %s: view '%s' is not u8", e->d.name, plain)
                     : vf_view_desc_decode(wt->data, vf_tensor_nbytes(wt), plain, &d, st);
        if (rc == 0) rc = vf_view_rx_tensor((vf_view_rx **)lane, e->d.name, &d, &v, st);
        if (rc == 0) {
            vf_tensor_unref(vf_item_take(*it, name));
            rc = vf_item_put(*it, plain, v, st);
        }
        if (rc < 0) {
            if (st && !strstr(st->msg, e->d.name)) vf_status_prefix(st, "edge %s", e->d.name);
            vf_item_free(*it);
            *it = NULL;
            return rc;
        }
        i = -1; /* the order changed: look again from the start */
    }
    return 0;
}

const vf_lane_ops vf_lane_view = {
    .name = "view",
    .open = view_open,
    .close = view_close,
    .whole = view_whole,
    .record = view_record,
    .recv_item = view_recv_item,
};
