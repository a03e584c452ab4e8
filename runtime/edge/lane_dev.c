/* lane_dev.c — the device lane (lane.h) and the data plane's side of the device-tensor
 * hook (transport_dev.h): the registration pointer, an item with device tensors carried
 * whole through the hook (a wire item built for each edge, its record sent without
 * frames), the receive-side unwrapping, including the part that works without CUDA
 * ("@host/" tensors become host tensors), and the error naming the edge when a device
 * tensor meets a build without CUDA.
 *
 * Its state on an end is the hook's own for that edge (NULL until the hook's first
 * call), handed to the hook's operations and to its edge_free when the end goes.
 */
#include "runtime/edge/lane.h"
#include "runtime/edge/transport_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/item.h"

static const vf_devxfer_ops *_Atomic g_ops;

void vf_devxfer_register(const vf_devxfer_ops *ops) { g_ops = ops; }
const vf_devxfer_ops *vf_devxfer_get(void) { return g_ops; }

bool vf_item_has_device(const vf_item *it)
{
    for (int i = 0; it && i < vf_item_ntensors(it); i++)
        if (vf_item_tensor_at(it, i, NULL)->device.kind != VF_DEV_CPU) return true;
    return false;
}

bool vf_item_has_wire_device(const vf_item *it)
{
    for (int i = 0; it && i < vf_item_ntensors(it); i++) {
        const char *name = NULL;
        vf_item_tensor_at(it, i, &name);
        if (name && name[0] == '@') return true;
    }
    return false;
}

/* ------------------------------------------------------------------ the lane */

static int dev_open(vf_edge_end *e, const vf_lane_env *env, void **lane, vf_status *st)
{
    *lane = NULL; /* the hook makes its state on its first call */
    return 1;
}

static void dev_close(void *lane, const vf_edge_end *e)
{
    const vf_devxfer_ops *ops = g_ops;
    if (lane && ops && ops->edge_free) ops->edge_free(lane, &e->d);
}

static int no_cuda(const vf_edge_end *e, const vf_item *it, vf_status *st)
{
    const char *name = "?";
    char dev[32] = "?";
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        vf_tensor *t = vf_item_tensor_at(it, i, &name);
        if (t->device.kind != VF_DEV_CPU) {
            vf_device_str(t->device, dev, sizeof dev);
            break;
        }
    }
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                         "edge %s: item '%s' holds tensor '%s' on %s, and this vflow was built without CUDA, so "
                         "it has no transport for device tensors between processes (place both stages in one "
                         "worker, or send host tensors)",
                         e->d.name, vf_item_id(it), name, dev);
}

static int dev_whole(const vf_edge_end *e, const vf_item *it, vf_status *st)
{
    if (!vf_item_has_device(it)) return 0;
    return g_ops ? 1 : no_cuda(e, it, st);
}

/* The hook builds the host-only wire item for this edge; it goes as one ordinary
 * record (its tensors are descriptors or host copies, none left out as a frame). */
static int dev_record(void **lane, const vf_edge_end *e, int inflight, const vf_item *it, vf_enc **out,
                      vf_status *st)
{
    int rc = 0;
    vf_item *wire = NULL;
    const vf_devxfer_ops *ops = g_ops;
    *out = NULL;
    if (!ops) return no_cuda(e, it, st);
    if ((rc = ops->send(lane, &e->d, inflight, it, &wire, st)) >= 0) rc = vf_lane_record_of(e, wire, out, st);
    vf_item_free(wire);
    return rc;
}

static int dev_sent(void **lane, const vf_edge_end *e, vf_status *st)
{
    const vf_devxfer_ops *ops = g_ops;
    return ops && ops->sent ? ops->sent(lane, &e->d, st) : 0;
}

/* Without the hook: "@host/x" -> host tensor "x"; any other wire tensor is an error. */
static int unwrap_host(const vf_edge_end *e, vf_item *it, vf_status *st)
{
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        const char *name = NULL;
        vf_item_tensor_at(it, i, &name);
        if (!name || name[0] != '@') continue;
        if (strncmp(name, VF_DEVX_HOST, strlen(VF_DEVX_HOST)) != 0)
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                                 "edge %s: item '%s' carries device tensor '%s' (CUDA IPC / NCCL), and this "
                                 "vflow was built without CUDA",
                                 e->d.name, vf_item_id(it), name);
        char plain[256];
        snprintf(plain, sizeof plain, "%s", name + strlen(VF_DEVX_HOST));
        vf_tensor *t = vf_item_take(it, name);
        int rc = vf_item_put(it, plain, t, st);
        if (rc < 0) return rc;
        i = -1; /* the tensor order changed: look again from the start */
    }
    return 0;
}

/* Wire tensors become tensors of this side again (no-op for ordinary items), before the
 * credit lets the producer reuse its buffer. */
static int dev_recv_item(void **lane, const vf_edge_end *e, vf_item **it, vf_status *st)
{
    if (!*it || !vf_item_has_wire_device(*it)) return 0;
    const vf_devxfer_ops *ops = g_ops;
    int rc = ops ? ops->recv(lane, &e->d, it, st) : unwrap_host(e, *it, st);
    if (rc < 0) {
        if (st && !strstr(st->msg, e->d.name)) vf_status_prefix(st, "edge %s", e->d.name);
        vf_item_free(*it);
        *it = NULL;
    }
    return rc;
}

const vf_lane_ops vf_lane_dev = {
    .name = "dev",
    .open = dev_open,
    .close = dev_close,
    .whole = dev_whole,
    .record = dev_record,
    .sent = dev_sent,
    .recv_item = dev_recv_item,
};
