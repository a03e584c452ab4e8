/* transport_zmq_recv.c — the receiving end of a ZeroMQ edge (transport_zmq.c describes
 * the wire): one item's message read without blocking, its payload lanes' descriptors
 * turned into the payloads they stand for (lane.h), the record decoded as a view whose
 * tensors alias the parts, the message charged to the consumer's account; the credits
 * counted and sent back in batches; the end of stream acknowledged; the consumer's
 * "closed" notice.
 */
#include "runtime/edge/transport_zmq_internal.h"
#include "runtime/core/alloc.h"
#include "runtime/core/item.h"

#include <errno.h>
#include <stdlib.h>
#include <zmq.h>

/* A received message part kept alive by the item's tensors. */
typedef struct rmsg {
    zmq_msg_t msg;
    vf_account *acct;
    size_t size;     /* what the part holds: its own size, or a descriptor's payload */
    vf_frame payload; /* a shared-memory or bulk-lane descriptor's payload (release NULL: none) */
} rmsg;

static void rmsg_release(void *data, void *hint)
{
    (void)data;
    rmsg *r = hint;
    if (r->payload.release) r->payload.release((void *)r->payload.data, r->payload.hint);
    zmq_msg_close(&r->msg);
    if (r->acct) vf_account_credit(r->acct, (int64_t)r->size);
    free(r);
}

/* Receives one part (non-blocking) into a new rmsg; VF_EDGE_EMPTY when none is there. */
static int recv_part(vf_edge_end *e, rmsg **out, vf_status *st)
{
    rmsg *r = malloc(sizeof *r);
    if (!r) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", e->d.name);
    zmq_msg_init(&r->msg);
    for (;;) {
        if (zmq_msg_recv(&r->msg, Z(e)->sock, ZMQ_DONTWAIT) >= 0) break;
        int err = zmq_errno();
        if (err == EINTR) continue;
        zmq_msg_close(&r->msg);
        free(r);
        if (err == EAGAIN) return VF_EDGE_EMPTY;
        return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "edge %s: zmq_msg_recv(%s): %s", e->d.name,
                             e->endpoint, zmq_strerror(err));
    }
    r->acct = NULL;
    r->size = zmq_msg_size(&r->msg);
    r->payload = (vf_frame){0};
    *out = r;
    return 0;
}

/* The frames after a record: every part left of the message, read even past what a
 * record may name so the next message starts where it should. */
static int recv_frames(vf_edge_end *e, rmsg ***frames, int *n, vf_status *st)
{
    int rc = 0, cap = 0, got = 0, extra = 0;
    rmsg **f = NULL;
    bool more = true;
    while (more) {
        rmsg *r = NULL;
        rc = recv_part(e, &r, st);
        if (rc == VF_EDGE_EMPTY) /* ZeroMQ delivers a message whole: never */
            VF_FAIL(st, VF_ECORRUPT, "edge %s: message ended after %d frame(s), before its last", e->d.name, got);
        if (rc < 0) goto fail;
        more = zmq_msg_more(&r->msg);
        if (got == VF_CODEC_MAX_COUNT) { /* refused below, once the message is read */
            rmsg_release(NULL, r);
            extra++;
            continue;
        }
        if (got == cap) {
            int nc = cap ? 2 * cap : 4;
            rmsg **g = realloc(f, (size_t)nc * sizeof *g);
            if (!g) {
                rmsg_release(NULL, r);
                VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory", e->d.name);
            }
            f = g;
            cap = nc;
        }
        f[got++] = r;
    }
    if (extra)
        VF_FAIL(st, VF_ECORRUPT, "edge %s: a message of more than %d frames (an item has at most %d tensors)",
                e->d.name, VF_CODEC_MAX_COUNT, VF_CODEC_MAX_COUNT);
    *frames = f;
    *n = got;
    return 0;
fail:
    while (got > 0) rmsg_release(NULL, f[--got]);
    free(f);
    *frames = NULL;
    *n = 0;
    return rc;
}

int vf_zmq_try_recv(vf_edge_end *e, vf_item **out, vf_status *st)
{
    int rc = 0, nf = 0;
    rmsg *r = NULL, **fr = NULL;
    vf_frame *frames = NULL;
    vf_account *acct = vf_account_current();
    int64_t charged = 0;
    if ((rc = recv_part(e, &r, st)) != 0) return rc;
    const unsigned char *p = zmq_msg_data(&r->msg);
    size_t n = r->size;
    if (zmq_msg_more(&r->msg)) {
        VF_TRY(recv_frames(e, &fr, &nf, st));
    } else if (n == CTL_SIZE && p[0] == 'V' && p[1] == 'F' && p[2] == 'C') {
        char type;
        uint32_t v;
        VF_TRY(vf_zmq_parse_ctl(e, p, n, &type, &v, st));
        if (type != CTL_EOS) VF_FAIL(st, VF_ECORRUPT, "edge %s: unexpected control frame '%c' from the sender",
                                     e->d.name, type);
        rmsg_release(NULL, r);
        e->ended = true;
        /* Everything before the EOS was read: tell the sender it may close. */
        rc = vf_zmq_send_ctl(e, CTL_ACK, 0, true, st);
        Z(e)->sent_final = true;
        return rc < 0 ? rc : VF_EOS;
    }
    if (nf > 0 && !(frames = calloc((size_t)nf, sizeof *frames)))
        VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory", e->d.name);
    for (int k = 0; k < nf; k++) frames[k] = (vf_frame){zmq_msg_data(&fr[k]->msg), fr[k]->size, NULL, NULL};
    /* the lanes' descriptors become their payloads: a part replaced stands for its
     * payload from here on (fr[k]->payload, released with the part) */
    rc = vf_lanes_recv(&Z(e)->lanes, e, frames, nf, st);
    for (int k = 0; k < nf; k++)
        if (frames[k].release) {
            fr[k]->payload = frames[k];
            fr[k]->size = frames[k].len;
        }
    if (rc < 0) goto fail;
    /* The message is now memory this stage holds: charge it to the consumer's account. */
    int64_t total = (int64_t)n;
    for (int k = 0; k < nf; k++) total += (int64_t)fr[k]->size;
    rc = vf_account_charge(acct, total, st);
    if (rc < 0) {
        vf_status_prefix(st, "edge %s", e->d.name);
        goto fail;
    }
    charged = total;
    r->acct = acct;
    for (int k = 0; k < nf; k++) {
        fr[k]->acct = acct;
        frames[k] = (vf_frame){frames[k].data, fr[k]->size, rmsg_release, fr[k]};
    }
    rc = vf_item_decode_split(p, n, rmsg_release, r, frames, nf, out, st);
    if (rc < 0) {
        vf_status_prefix(st, "edge %s", e->d.name);
        goto fail;
    }
    free(frames);
    free(fr); /* each part is its tensors' now */
    return 0;
fail:
    /* nothing of the message was handed out: release every part, uncharged */
    if (charged) vf_account_credit(acct, charged);
    r->acct = NULL;
    rmsg_release(NULL, r);
    for (int k = 0; k < nf; k++) {
        fr[k]->acct = NULL;
        rmsg_release(NULL, fr[k]);
    }
    free(frames);
    free(fr);
    return rc;
}

int vf_zmq_flush_credits(vf_edge_end *e, vf_status *st)
{
    if (Z(e)->pending_credits == 0 || e->ended || e->closed) return 0;
    /* Non-blocking: if the frame cannot be queued now, the next flush retries. The HWM
     * leaves room for it, so this only happens while the sender reconnects. */
    int rc = vf_zmq_send_ctl(e, CTL_CREDIT, (uint32_t)Z(e)->pending_credits, false, st);
    if (rc < 0) return rc;
    if (rc == 0) Z(e)->pending_credits = 0;
    atomic_store(&e->inflight, Z(e)->pending_credits);
    return 0;
}

int vf_zmq_consumed(vf_edge_end *e, vf_status *st)
{
    Z(e)->pending_credits++;
    atomic_store(&e->inflight, Z(e)->pending_credits);
    if (Z(e)->pending_credits >= Z(e)->credit_batch) return vf_zmq_flush_credits(e, st);
    return 0;
}

int vf_zmq_close_recv(vf_edge_end *e, vf_status *st)
{
    if (e->ended || e->closed) return 0;
    e->closed = true;
    /* If the sender never connected there is nobody to tell: do not wait for one. */
    int rc = vf_zmq_send_ctl(e, CTL_CLOSED, 0, false, st);
    if (rc == 0) Z(e)->sent_final = true;
    return rc < 0 ? rc : 0;
}

int vf_zmq_recv_item(vf_edge_end *e, vf_item **it, vf_status *st)
{
    return vf_lanes_recv_item(&Z(e)->lanes, e, it, st);
}

int vf_zmq_try_recv_op(vf_edge_end *e, vf_item **out, int64_t *bytes, vf_status *st)
{
    int rc = vf_zmq_try_recv(e, out, st);
    if (rc != 0) return rc;
    *bytes = (int64_t)vf_item_encoded_size(*out);
    /* Device tensors are copied into this side's memory before the credit (sent just
     * below) lets the producer reuse its buffer. */
    VF_TRY(vf_zmq_recv_item(e, out, st));
    rc = vf_zmq_consumed(e, st);
    if (rc < 0) {
        vf_item_free(*out);
        *out = NULL;
    }
fail:
    return rc;
}
