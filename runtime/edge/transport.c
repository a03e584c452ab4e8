/* transport.c — the host-transport registry (transport.h): one line per transport. */
#include "runtime/edge/chan_internal.h"
#include "runtime/core/item.h"

#include <stdlib.h>
#include <string.h>

extern const vf_transport_ops vf_transport_inproc; /* transport_inproc.c */
extern const vf_transport_ops vf_transport_zmq;    /* transport_zmq.c: ipc:// and tcp:// */

static const vf_transport_ops *const registry[VF_TR_COUNT] = {
    [VF_TR_INPROC] = &vf_transport_inproc,
    [VF_TR_IPC] = &vf_transport_zmq,
    [VF_TR_TCP] = &vf_transport_zmq,
};

const vf_transport_ops *vf_transport_ops_for(vf_transport t)
{
    return t > VF_TR_AUTO && t < VF_TR_COUNT ? registry[t] : NULL;
}

const char *vf_transport_name(vf_transport t)
{
    switch (t) {
    case VF_TR_AUTO: return "auto";
    case VF_TR_INPROC: return "inproc";
    case VF_TR_IPC: return "ipc";
    case VF_TR_TCP: return "tcp";
    case VF_TR_COUNT: break;
    }
    return "?";
}

int vf_transport_parse(const char *s, vf_transport *out)
{
    for (int t = VF_TR_AUTO; t < VF_TR_COUNT; t++)
        if (strcmp(s, vf_transport_name((vf_transport)t)) == 0) {
            *out = (vf_transport)t;
            return 0;
        }
    return VF_EINVAL;
}

int vf_send_job_record(vf_send_job *job, vf_enc **out, vf_status *st)
{
    if (!job->enc) {
        vf_enc *enc = calloc(1, sizeof *enc);
        if (!enc) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (record)");
        atomic_init(&enc->refs, 1);
        int rc = vf_item_encode_alloc(job->it, &enc->data, &enc->len, st);
        if (rc < 0) {
            free(enc);
            return rc;
        }
        job->enc = enc;
    }
    *out = job->enc;
    return 0;
}
