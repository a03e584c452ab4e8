/* transport.c — the host-transport registry (transport.h): one line per transport. */
#include "runtime/edge/chan_internal.h"
#include "runtime/core/alloc.h"
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

void vf_enc_unref(void *data, void *hint)
{
    (void)data;
    vf_enc *enc = hint;
    if (atomic_fetch_sub_explicit(&enc->refs, 1, memory_order_acq_rel) != 1) return;
    /* on the ZeroMQ I/O thread, usually: tensor references and vf_free are thread-safe */
    for (int k = 0; k < enc->nframes; k++) vf_tensor_unref(enc->frames ? enc->frames[k] : NULL);
    free(enc->frames);
    vf_free(enc->data);
    free(enc);
}

int vf_enc_new(const vf_item *it, vf_enc **out, vf_status *st)
{
    int rc = 0;
    vf_enc *enc = calloc(1, sizeof *enc);
    if (!enc) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (record)");
    atomic_init(&enc->refs, 1);
    enc->bytes = vf_item_encoded_size(it);
    VF_TRY(vf_item_encode_split(it, VF_EDGE_FRAME_MIN, &enc->data, &enc->len, &enc->nframes, st));
    if (enc->nframes && !(enc->frames = calloc((size_t)enc->nframes, sizeof *enc->frames)))
        VF_FAIL(st, VF_ENOMEM, "out of memory (record frames)");
    /* the frames, in the record's order: its tensors of VF_EDGE_FRAME_MIN bytes or more */
    for (int i = 0, k = 0; i < vf_item_ntensors(it); i++) {
        vf_tensor *t = vf_item_tensor_at(it, i, NULL);
        if (vf_tensor_nbytes(t) >= VF_EDGE_FRAME_MIN) enc->frames[k++] = vf_tensor_ref(t);
    }
    *out = enc;
    return 0;
fail:
    vf_enc_unref(NULL, enc);
    return rc;
}

int vf_send_job_record(vf_send_job *job, vf_enc **out, vf_status *st)
{
    if (!job->enc) {
        int rc = vf_enc_new(job->it, &job->enc, st);
        if (rc < 0) return rc;
    }
    *out = job->enc;
    return 0;
}
