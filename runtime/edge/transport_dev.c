/* transport_dev.c — the data plane's side of the device-tensor hook (transport_dev.h):
 * the registration pointer, the per-edge hook state (kept here in a small table keyed
 * by edge end, so the edge struct needs no field for it), the send path of one ZeroMQ
 * edge for items with device tensors, and the receive-side unwrapping, including the
 * part that works without CUDA ("@host/" tensors become host tensors) and the error
 * naming the edge when a device tensor meets a build without CUDA.
 */
#include "runtime/edge/transport_dev.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/edge/transport_zmq.h"
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

/* ------------------------------------------------------------------ per-edge state */

/* Each edge's slot is its own allocation, so a state pointer stays valid while other
 * edges come and go (stage threads send their first device items concurrently). */
typedef struct slot {
    const vf_edge_end *e;
    void *state;
} slot;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static slot **g_slots;
static int g_n, g_cap;

static void **state_of(const vf_edge_end *e, bool create)
{
    void **r = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n && !r; i++)
        if (g_slots[i]->e == e) r = &g_slots[i]->state;
    if (!r && create) {
        if (g_n == g_cap) {
            int cap = g_cap ? g_cap * 2 : 16;
            slot **ns = realloc(g_slots, (size_t)cap * sizeof *ns);
            if (ns) {
                g_slots = ns;
                g_cap = cap;
            }
        }
        slot *s = g_n < g_cap ? calloc(1, sizeof *s) : NULL;
        if (s) {
            s->e = e;
            g_slots[g_n++] = s;
            r = &s->state;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return r;
}

void vf_devxfer_edge_free(vf_edge_end *e)
{
    slot *s = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++)
        if (g_slots[i]->e == e) {
            s = g_slots[i];
            g_slots[i] = g_slots[--g_n];
            break;
        }
    pthread_mutex_unlock(&g_mu);
    if (!s) return;
    const vf_devxfer_ops *ops = g_ops;
    if (s->state && ops && ops->edge_free) ops->edge_free(s->state, &e->d);
    free(s);
}

/* ------------------------------------------------------------------ send */

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

int vf_devxfer_send_zmq(vf_edge_end *e, const vf_item *it, int64_t *bytes, vf_status *st)
{
    int rc = 0;
    vf_item *wire = NULL;
    vf_enc *enc = NULL;
    const vf_devxfer_ops *ops = g_ops;
    if (bytes) *bytes = 0;
    if (!ops) return no_cuda(e, it, st);
    VF_TRY(vf_zmq_wait_credit(e, st));
    if (e->closed) return VF_EOS; /* the receiver stopped reading: drop, as vf_zmq_send does */
    void **state = state_of(e, true);
    if (!state) VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory (device transport state)", e->d.name);
    if ((rc = ops->send(state, &e->d, e->d.capacity - vf_zmq_of(e)->credits, it, &wire, st)) < 0) goto fail;
    if (!(enc = calloc(1, sizeof *enc))) VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory", e->d.name);
    atomic_init(&enc->refs, 1);
    if ((rc = vf_item_encode_alloc(wire, &enc->data, &enc->len, st)) < 0) {
        free(enc);
        enc = NULL;
        goto fail;
    }
    if (bytes) *bytes = (int64_t)enc->len;
    atomic_fetch_add(&enc->refs, 1);
    if ((rc = vf_zmq_send(e, enc, st)) != 0) goto fail;
    if (ops->sent) VF_TRY(ops->sent(state, &e->d, st));
fail:
    if (enc) vf_enc_unref(NULL, enc);
    vf_item_free(wire);
    if (rc < 0 && st && st->msg[0] && !strstr(st->msg, e->d.name)) vf_status_prefix(st, "edge %s", e->d.name);
    return rc;
}

/* ------------------------------------------------------------------ receive */

/* Without the hook: "@host/x" -> host tensor "x"; any other wire tensor is an error. */
static int unwrap_host(vf_edge_end *e, vf_item *it, vf_status *st)
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

int vf_devxfer_recv_fixup(vf_edge_end *e, vf_item **it, vf_status *st)
{
    if (!*it || !vf_item_has_wire_device(*it)) return 0;
    const vf_devxfer_ops *ops = g_ops;
    int rc;
    if (ops) {
        void **state = state_of(e, true);
        rc = state ? ops->recv(state, &e->d, it, st)
                   : vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (device transport state)");
    } else {
        rc = unwrap_host(e, *it, st);
    }
    if (rc < 0) {
        if (st && !strstr(st->msg, e->d.name)) vf_status_prefix(st, "edge %s", e->d.name);
        vf_item_free(*it);
        *it = NULL;
    }
    return rc;
}
