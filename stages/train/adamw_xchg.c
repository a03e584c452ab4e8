/* adamw_xchg.c — an optimizer shard's side of the exchange with the DiT partitions
 * (stage kind `adamw`; the partitions' side is dit_xchg.c).
 *
 * The partitions lend their weights and gradients (views, vflow.h "lending memory"): for
 * each partition q of each replica r, the item of the step holds "g", a view of the
 * gradients of the piece [off_q, off_q + n_q) of this shard's slice the partition owns,
 * and "w", a view of its weights there. The shard keeps those items — and so the views —
 * until it replies (vf_adamw_xchg_reply): by then it has dropped every view and its
 * device work on them has ended, and the partitions touch their buffers again only after
 * that reply.
 *   - replicas (D > 1): each piece's gradients are summed into replica 0's view, in
 *     replica order (the axpy of replica r after replica r − 1, as one buffer would);
 *   - norm pass: the sum of squares of every norm block of the slice, read in place when
 *     the block lies in one piece on this shard's device, else gathered into a chunk
 *     buffer (a block across a partition boundary, a piece on another device);
 *   - update pass: the AdamW op over each piece in chunks, reading the gradients in place
 *     and writing the new weights straight into replica 0's weights view, then copied
 *     into the other replicas' views.
 * A view on another device (a GPU partition of a GPU shard elsewhere, or of a host
 * shard) is read and written through bounded chunk buffers of `cap` elements: one copy
 * each way, never a whole piece; a host shard that keeps the partitions' bf16 (offload,
 * param dtype) copies their bytes as they are, an f32 one converts. A view that reached
 * the shard as a copy (across nodes) is read as it is, and the weights of such a piece go
 * back as data in the reply: the one case where the exchange holds whole pieces, counted
 * by the plan on those edges.
 * A partition that swaps blocks in a full fine-tune lends a piece as up to two views of
 * each kind: "g" / "w" of the elements resident on its device and "gh" / "wh" of those
 * of its swapped blocks, which live in its host memory (dit_xchg.c). seg_of maps a piece
 * element to the view that holds it; every pass walks a piece in runs that stay inside
 * one view, reads and writes those in place or through the chunk buffers as it would a
 * piece of one view, and the order of the values is the piece's: the same bits.
 * Elementwise ops over the same values in the same order: the weights are bitwise those
 * of one buffer per slice, for any P, S and D.
 */
#include "stages/train/adamw_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool same_dev(vf_device a, vf_device b)
{
    return a.kind == b.kind && (a.kind == VF_DEV_CPU || a.index == b.index);
}

int vf_adamw_xchg_init(vf_adamw_xchg *x, const vf_adamw_geo *g, vf_backend *be, const vf_adamw_chunks *c,
                       vf_status *st)
{
    memset(x, 0, sizeof *x);
    x->g = g;
    x->be = be;
    x->act = be->act_dtype, x->grad = be->grad_dtype;
    x->as = vf_dtype_size(x->act), x->gs = vf_dtype_size(x->grad);
    x->cap = c->cap;
    x->mem = be;
    if (c->pin.kind != VF_DEV_CPU) { /* a host shard of GPU partitions: page-locked chunks */
        x->mem = vf_backend_for(c->pin, st);
        if (!x->mem) return st && st->code ? st->code : VF_EINVAL;
        x->pinned = true;
    }
    x->got = calloc((size_t)(g->P * g->D), sizeof *x->got);
    x->summed = calloc((size_t)g->P, sizeof *x->summed);
    x->wdata = calloc((size_t)g->P, sizeof *x->wdata);
    if (!x->got || !x->summed || !x->wdata)
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "adamw: out of memory (exchange)");
    const char *d = getenv("VFLOW_TEST_XCHG_DELAY_MS");
    x->delay_ms = d ? atoi(d) : 0;
    return 0;
}

static void drop_items(vf_adamw_xchg *x)
{
    for (int i = 0; x->got && i < x->g->P * x->g->D; i++) {
        vf_item_free(x->got[i]);
        x->got[i] = NULL;
    }
    for (int q = 0; x->wdata && q < x->g->P; q++) {
        vf_tensor_unref(x->wdata[q]);
        x->wdata[q] = NULL;
    }
}

void vf_adamw_xchg_fini(vf_adamw_xchg *x)
{
    if (!x->g) return;
    drop_items(x);
    free(x->got);
    free(x->summed);
    free(x->wdata);
    void *bufs[3] = {x->G, x->R, x->W};
    for (int i = 0; i < 3; i++)
        if (bufs[i] && x->pinned) x->mem->free_pinned(x->mem, bufs[i]);
        else if (bufs[i]) x->be->free(x->be, bufs[i]);
    vf_bufpool_unref(x->wpool);
    memset(x, 0, sizeof *x);
}

/* ------------------------------------------------------------------ pieces */

static vf_item *item_of(const vf_adamw_xchg *x, int q, int r) { return x->got[q * x->g->D + r]; }

static void piece(const vf_adamw_xchg *x, int q, int64_t *off, int64_t *n)
{
    vf_train_overlap(x->g->lo, x->g->hi, x->g->plo[q], x->g->phi[q], off, n);
}

/* The backend of a device the shard reads or writes through (kept to sync before the
 * reply). */
static vf_backend *backend_of(vf_adamw_xchg *x, vf_device d, vf_status *st)
{
    if (same_dev(d, x->be->device)) return x->be;
    vf_backend *b = vf_backend_for(d, st);
    if (!b) return NULL;
    for (int i = 0; i < x->nother; i++)
        if (x->other[i] == b) return b;
    if (x->nother < VF_ADAMW_XCHG_OTHERS) x->other[x->nother++] = b;
    return b;
}

/* Whether the shard reads t in place: its bytes on this shard's device, in dtype dt. */
static bool direct(const vf_adamw_xchg *x, const vf_tensor *t, vf_dtype dt)
{
    return t && same_dev(t->device, x->be->device) && t->dtype == dt;
}

static int ensure(vf_adamw_xchg *x, void **buf, size_t es, vf_status *st)
{
    if (*buf) return 0;
    size_t bytes = es * (size_t)x->cap;
    *buf = x->pinned ? x->mem->alloc_pinned(x->mem, bytes, st) : x->be->alloc(x->be, bytes, st);
    return *buf ? 0 : vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "adamw: no memory for a chunk of %lld elements",
                                    (long long)x->cap);
}

/* A copy between a page-locked chunk and the device is asynchronous (a pageable one is
 * not: the driver stages it): the shard reads a chunk the device wrote, or refills one the
 * device reads, only once that copy has ended. */
static int pinned_done(vf_adamw_xchg *x, vf_backend *bt, vf_status *st)
{
    return x->pinned ? bt->sync(bt, st) : 0;
}

/* n elements at element `off` of t into dst (this shard's memory, dtype dt): one copy,
 * converting where the two backends store differently (a host shard of a GPU partition). */
static int xin(vf_adamw_xchg *x, void *dst, vf_dtype dt, const vf_tensor *t, int64_t off, int64_t n, vf_status *st)
{
    vf_backend *be = x->be;
    size_t es = vf_dtype_size(t->dtype);
    const char *src = (const char *)t->data + (size_t)off * es;
    bool host_t = t->device.kind == VF_DEV_CPU, host_be = be->device.kind == VF_DEV_CPU;
    if (host_be && !host_t) { /* device -> host: as it is (a bf16 host shard), or to f32 */
        vf_backend *bt = backend_of(x, t->device, st);
        if (!bt) return st && st->code ? st->code : VF_EINVAL;
        if (dt == t->dtype) bt->copy(bt, dst, src, (size_t)n * es);
        else if (dt == VF_DTYPE_F32) bt->download(bt, dst, src, n, t->dtype);
        else goto bad;
        int rc = pinned_done(x, bt, st);
        if (rc) return rc;
    } else if (t->dtype == dt) { /* one kind of memory, or host -> device (a partition's swapped blocks) */
        be->copy(be, dst, src, (size_t)n * es);
    } else if (host_be && dt == VF_DTYPE_F32) { /* host bf16 (a GPU partition's swapped blocks), f32 shard */
        be->download(be, dst, src, n, t->dtype);
    } else if (!host_be && host_t && t->dtype == VF_DTYPE_F32) { /* host f32 -> device */
        be->upload(be, dst, (const float *)src, n, dt);
    } else {
        goto bad;
    }
    x->moved += (int64_t)((size_t)n * es);
    return 0;
bad:
    return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "adamw: a lent %s tensor on %s cannot be read as %s here",
                         vf_dtype_name(t->dtype), t->device.kind == VF_DEV_CPU ? "the host" : "a GPU", vf_dtype_name(dt));
}

/* n elements of src (this shard's memory, dtype dt) into t at element `off`. */
static int xout(vf_adamw_xchg *x, vf_tensor *t, int64_t off, const void *src, vf_dtype dt, int64_t n, vf_status *st)
{
    vf_backend *be = x->be;
    size_t es = vf_dtype_size(t->dtype);
    char *dst = (char *)t->data + (size_t)off * es;
    bool host_t = t->device.kind == VF_DEV_CPU, host_be = be->device.kind == VF_DEV_CPU;
    if (host_be && !host_t) { /* host -> device: as it is (a bf16 host shard), or from f32 */
        vf_backend *bt = backend_of(x, t->device, st);
        if (!bt) return st && st->code ? st->code : VF_EINVAL;
        if (dt == t->dtype) bt->copy(bt, dst, src, (size_t)n * es);
        else if (dt == VF_DTYPE_F32) bt->upload(bt, dst, src, n, t->dtype);
        else goto bad;
        int rc = pinned_done(x, bt, st);
        if (rc) return rc;
    } else if (t->dtype == dt) { /* one kind of memory, or device -> host (a partition's swapped blocks) */
        be->copy(be, dst, src, (size_t)n * es);
    } else if (host_be && dt == VF_DTYPE_F32) { /* an f32 host shard into a GPU partition's swapped blocks */
        be->upload(be, dst, src, n, t->dtype);
    } else if (!host_be && host_t && t->dtype == VF_DTYPE_F32) { /* device -> host f32 */
        be->download(be, (float *)dst, src, n, dt);
    } else {
        goto bad;
    }
    x->moved += (int64_t)((size_t)n * es);
    return 0;
bad:
    return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "adamw: %s weights cannot be written into a lent %s tensor",
                         vf_dtype_name(dt), vf_dtype_name(t->dtype));
}

/* ------------------------------------------------------------------ receive */

static double num_or(const vf_item *it, const char *k, double def)
{
    double v;
    return vf_item_num(it, k, &v) == 0 ? v : def;
}

/* ------------------------------------------------------------------ views of a piece */

/* Where element e of a piece of n elements lies: in view t (NULL: the item has no view of
 * that kind, the weights not lent) at its element `at`, and `run` elements from e on lie
 * there in a row. */
typedef struct seg {
    vf_tensor *t;
    int64_t at, run;
} seg;

/* The gradients' (grad) or weights' view of item it holding piece element e: "g" / "w",
 * or "gh" / "wh" for the piece elements [hole, hole + its numel) of a partition's swapped
 * blocks. */
static seg seg_of(const vf_item *it, bool grad, int64_t e, int64_t n)
{
    vf_tensor *r = vf_item_get(it, grad ? "g" : "w"), *h = vf_item_get(it, grad ? "gh" : "wh");
    if (!h) return (seg){r, e, n - e};
    int64_t a = (int64_t)num_or(it, "hole", 0), hn = vf_tensor_numel(h);
    if (e < a) return (seg){r, e, a - e};
    if (e < a + hn) return (seg){h, e - a, a + hn - e};
    return (seg){r, e - hn, n - e};
}

/* Whether item it lends n elements of a kind as its views: their sizes add up to n and
 * the swapped blocks' part lies inside the piece. */
static bool lent_whole(const vf_item *it, bool grad, int64_t n)
{
    vf_tensor *r = vf_item_get(it, grad ? "g" : "w"), *h = vf_item_get(it, grad ? "gh" : "wh");
    int64_t a = (int64_t)num_or(it, "hole", 0), hn = h ? vf_tensor_numel(h) : 0;
    return (r ? vf_tensor_numel(r) : 0) + hn == n && (!h || (a >= 0 && a + hn <= n));
}

/* Whether the weights of piece q go back as data: a replica's item has no weights view
 * it can write into for part of it (not lent, or crossed as a copy); the data then holds
 * the whole piece, which the partition copies in whole. */
static bool piece_copied(const vf_adamw_xchg *x, int q)
{
    for (int r = 0; r < x->g->D; r++) {
        const vf_item *it = x->got[q * x->g->D + r];
        vf_tensor *w = vf_item_get(it, "w"), *wh = vf_item_get(it, "wh");
        if ((!w && !wh) || (w && !vf_tensor_is_view(w)) || (wh && !vf_tensor_is_view(wh))) return true;
    }
    return false;
}

int vf_adamw_xchg_recv(vf_adamw_xchg *x, vf_stage *s, vf_ctx *ctx, int64_t step, vf_status *st)
{
    const vf_adamw_geo *g = x->g;
    int need = g->P * g->D, have = 0;
    vf_port *in = vf_in(ctx, "grads");
    drop_items(x);
    x->moved = 0;
    while (have < need) {
        vf_item *it = NULL;
        int rc = vf_recv(in, &it, st);
        if (rc == VF_EOS) {
            if (have == 0) return VF_EOS;
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "adamw %s: %s of step %lld ended after %d of %d partitions", vf_stage_name(s),
                                 step < 0 ? "the weights lent" : "gradients", (long long)step, have, need);
        }
        if (rc) return rc;
        double ds = num_or(it, "step", -2), dq = num_or(it, "part", -1), dr = num_or(it, "replica", -1);
        int q = (int)dq, r = (int)dr;
        if ((int64_t)ds != step || q < 0 || q >= g->P || r < 0 || r >= g->D || item_of(x, q, r)) {
            vf_item_free(it);
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "adamw %s: unexpected item (step %g, part %g, replica %g) while collecting step %lld",
                                 vf_stage_name(s), ds, dq, dr, (long long)step);
        }
        x->got[q * g->D + r] = it;
        have++;
        int64_t off, n;
        piece(x, q, &off, &n);
        bool with_w = vf_item_get(it, "w") || vf_item_get(it, "wh");
        int64_t ioff = (int64_t)num_or(it, "off", -1), in_n = (int64_t)num_or(it, "n", -1);
        bool bad = ioff != off && n > 0;
        bad = bad || in_n != n || (n > 0 && step >= 0 && !lent_whole(it, true, n));
        bad = bad || (n > 0 && with_w && !lent_whole(it, false, n)) || (n > 0 && step < 0 && !with_w);
        if (bad)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "adamw %s: partition %d (replica %d) lent elements [%lld, +%lld), expected [%lld, +%lld)",
                                 vf_stage_name(s), q, r, (long long)ioff, (long long)in_n, (long long)off, (long long)n);
    }
    return 0;
}

/* ------------------------------------------------------------------ replicas, norm */

/* Adds piece elements [at, at + n) of one replica's gradient (item it, a piece of pn
 * elements) into dst (this shard's memory): in place where the shard reads a view
 * directly, else through R, a chunk at a time. */
static int add_replica(vf_adamw_xchg *x, void *dst, const vf_item *it, int64_t pn, int64_t at, int64_t n,
                       vf_status *st)
{
    int rc = 0;
    for (int64_t c = 0; c < n;) {
        seg s = seg_of(it, true, at + c, pn);
        int64_t l = n - c < s.run ? n - c : s.run;
        char *d = (char *)dst + (size_t)c * x->gs;
        if (direct(x, s.t, x->grad)) {
            x->be->axpy(x->be, d, (const char *)s.t->data + (size_t)s.at * x->gs, 1.0f, l);
        } else {
            VF_TRY(ensure(x, &x->R, x->gs, st));
            for (int64_t k = 0; k < l; k += x->cap) {
                int64_t m = l - k < x->cap ? l - k : x->cap;
                VF_TRY(xin(x, x->R, x->grad, s.t, s.at + k, m, st));
                x->be->axpy(x->be, d + (size_t)k * x->gs, x->R, 1.0f, m);
            }
        }
        c += l;
    }
fail:
    return rc;
}

/* Whether the shard reads every gradient view of item it (a piece of n) in place. */
static bool all_direct(const vf_adamw_xchg *x, const vf_item *it, int64_t n)
{
    for (int64_t e = 0; e < n;) {
        seg s = seg_of(it, true, e, n);
        if (!direct(x, s.t, x->grad)) return false;
        e += s.run;
    }
    return n > 0;
}

int vf_adamw_xchg_sum(vf_adamw_xchg *x, vf_status *st)
{
    const vf_adamw_geo *g = x->g;
    int rc = 0;
    for (int q = 0; q < g->P; q++) {
        int64_t off, n;
        piece(x, q, &off, &n);
        const vf_item *it0 = item_of(x, q, 0);
        x->summed[q] = g->D == 1;
        if (g->D == 1 || !all_direct(x, it0, n)) continue; /* summed chunk by chunk where read */
        for (int64_t e = 0; e < n;) { /* into replica 0's views, each in place */
            seg s = seg_of(it0, true, e, n);
            for (int r = 1; r < g->D; r++)
                VF_TRY(add_replica(x, (char *)s.t->data + (size_t)s.at * x->gs, item_of(x, q, r), n, e, s.run, st));
            e += s.run;
        }
        x->summed[q] = true;
    }
fail:
    return rc;
}

/* The gradient (replicas summed) of [a, a + len) of the slice: in place when it lies in
 * one piece read in place, else gathered into G (len <= cap). */
static int gather(vf_adamw_xchg *x, int64_t a, int64_t len, const void **out, vf_status *st)
{
    const vf_adamw_geo *g = x->g;
    int rc = 0;
    for (int q = 0; q < g->P; q++) {
        int64_t off, n;
        piece(x, q, &off, &n);
        if (a < off || a + len > off + n || !x->summed[q]) continue;
        seg s = seg_of(item_of(x, q, 0), true, a - off, n);
        if (!direct(x, s.t, x->grad) || len > s.run) break;
        *out = (const char *)s.t->data + (size_t)s.at * x->gs;
        return 0;
    }
    VF_TRY(ensure(x, &x->G, x->gs, st));
    for (int64_t pos = a; pos < a + len;) {
        int q = 0;
        int64_t off = 0, n = 0;
        for (; q < g->P; q++) {
            piece(x, q, &off, &n);
            if (pos >= off && pos < off + n) break;
        }
        if (q == g->P) VF_FAIL(st, VF_EINVAL, "adamw: element %lld of the slice is in no partition's piece", (long long)pos);
        int64_t l = (a + len < off + n ? a + len : off + n) - pos;
        seg s = seg_of(item_of(x, q, 0), true, pos - off, n);
        l = l < s.run ? l : s.run;
        char *dst = (char *)x->G + (size_t)(pos - a) * x->gs;
        VF_TRY(xin(x, dst, x->grad, s.t, s.at, l, st));
        for (int r = 1; r < g->D && !x->summed[q]; r++)
            VF_TRY(add_replica(x, dst, item_of(x, q, r), n, pos - off, l, st));
        pos += l;
    }
    *out = x->G;
fail:
    return rc;
}

int vf_adamw_xchg_sumsq(vf_adamw_xchg *x, double *partials, vf_status *st)
{
    const vf_adamw_geo *g = x->g;
    int rc = 0;
    for (int64_t j = g->b0; j < g->b1; j++) {
        int64_t a = j * g->block, b = a + g->block < g->total ? a + g->block : g->total;
        const void *p = NULL;
        VF_TRY(gather(x, a, b - a, &p, st));
        partials[j] = x->be->sumsq(x->be, p, b - a);
    }
fail:
    return rc;
}

/* ------------------------------------------------------------------ weights out */

/* The buffer of piece q's weights going back as data (made on first use). */
static int reply_buf(vf_adamw_xchg *x, int q, int64_t n, vf_status *st)
{
    if (x->wdata[q]) return 0;
    if (!x->wpool && !(x->wpool = vf_bufpool_new(x->be, x->as * (size_t)vf_adamw_weight_piece_most(x->g), 1, st)))
        return st && st->code ? st->code : VF_ENOMEM;
    x->wdata[q] = vf_bufpool_tensor(x->wpool, x->act, 1, &n, st);
    return x->wdata[q] ? 0 : st && st->code ? st->code : VF_ENOMEM;
}

/* Where the weights of piece q go besides replica 0's view: the other replicas' views,
 * or the reply's data for a replica that got no view it can write into. */
static int spread(vf_adamw_xchg *x, int q, int64_t c, const void *src, int64_t l, bool src_is_view0, vf_status *st)
{
    const vf_adamw_geo *g = x->g;
    int rc = 0;
    int64_t off, n;
    piece(x, q, &off, &n);
    for (int r = 0; r < g->D; r++) { /* [c, c + l) lies in one view of each (the caller's runs) */
        seg s = seg_of(item_of(x, q, r), false, c, n);
        if ((r == 0 && src_is_view0) || !s.t || !vf_tensor_is_view(s.t)) continue;
        VF_TRY(xout(x, s.t, s.at, src, x->act, l, st));
    }
    if (piece_copied(x, q)) { /* the views crossed as copies (across nodes): the reply brings them */
        VF_TRY(reply_buf(x, q, n, st));
        x->be->copy(x->be, (char *)x->wdata[q]->data + (size_t)c * x->as, src, (size_t)l * x->as);
        x->moved += l * (int64_t)x->as;
    }
fail:
    return rc;
}

int vf_adamw_xchg_update(vf_adamw_xchg *x, float *master, float *m, float *v, const vf_adamw_hyper *hp, vf_status *st)
{
    const vf_adamw_geo *g = x->g;
    vf_backend *be = x->be;
    int rc = 0;
    if (x->delay_ms > 0) { /* tests: the views stay lent this much longer */
        struct timespec ts = {x->delay_ms / 1000, (long)(x->delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int q = 0; q < g->P; q++) {
        int64_t off, n;
        piece(x, q, &off, &n);
        const vf_item *it0 = n > 0 ? item_of(x, q, 0) : NULL;
        /* in place: a view at once; through the chunk buffers: a chunk at a time */
        for (int64_t c = 0; c < n;) {
            seg w0 = seg_of(it0, false, c, n), g0 = seg_of(it0, true, c, n);
            bool in_place = w0.t && vf_tensor_is_view(w0.t) && direct(x, w0.t, x->act);
            int64_t l = w0.run < g0.run ? w0.run : g0.run;
            const void *gp = NULL;
            if (!in_place || !x->summed[q] || !direct(x, g0.t, x->grad)) l = l < x->cap ? l : x->cap;
            VF_TRY(gather(x, off + c, l, &gp, st));
            size_t at = (size_t)(off + c - g->lo);
            void *wp;
            if (in_place) {
                wp = (char *)w0.t->data + (size_t)w0.at * x->as;
            } else {
                VF_TRY(ensure(x, &x->W, x->as, st));
                wp = x->W;
            }
            be->adamw(be, master + at, m + at, v + at, gp, wp, l, hp->lr, hp->beta1, hp->beta2, hp->eps, hp->wd,
                      hp->scale, hp->step);
            VF_TRY(spread(x, q, c, wp, l, in_place, st));
            c += l;
        }
    }
fail:
    return rc;
}

int vf_adamw_xchg_put(vf_adamw_xchg *x, const float *host, int64_t a, int64_t cnt, vf_status *st)
{
    const vf_adamw_geo *g = x->g;
    int rc = 0;
    int64_t lo = g->lo + a, hi = lo + cnt;
    for (int q = 0; q < g->P; q++) {
        int64_t off, n;
        piece(x, q, &off, &n);
        /* the part of piece q in [lo, hi): element c of the piece, l of them */
        int64_t b0 = off > lo ? off : lo, b1 = off + n < hi ? off + n : hi;
        if (b1 <= b0) continue;
        int64_t c = b0 - off, l = b1 - b0;
        const float *src = host + (b0 - lo);
        for (int r = 0; r < g->D; r++) {
            for (int64_t e = c; e < c + l;) { /* each view's run of [c, c + l) */
                seg s = seg_of(item_of(x, q, r), false, e, n);
                int64_t m = c + l - e < s.run ? c + l - e : s.run;
                if (s.t && vf_tensor_is_view(s.t)) {
                    vf_backend *bt = s.t->device.kind == VF_DEV_CPU ? vf_backend_cpu() : backend_of(x, s.t->device, st);
                    if (!bt) return st && st->code ? st->code : VF_EINVAL;
                    bt->upload(bt, (char *)s.t->data + (size_t)s.at * vf_dtype_size(s.t->dtype), src + (e - c), m,
                               s.t->dtype);
                }
                e += m;
            }
        }
        if (piece_copied(x, q)) {
            if ((rc = reply_buf(x, q, n, st)) < 0) return rc;
            x->be->upload(x->be, (char *)x->wdata[q]->data + (size_t)c * x->as, src, l, x->act);
        }
    }
    return rc;
}

/* ------------------------------------------------------------------ reply */

int vf_adamw_xchg_release(vf_adamw_xchg *x, vf_status *st)
{
    int rc = x->be->sync(x->be, st);
    for (int i = 0; rc == 0 && i < x->nother; i++) rc = x->other[i]->sync(x->other[i], st);
    for (int i = 0; x->got && i < x->g->P * x->g->D; i++) {
        vf_item_free(x->got[i]);
        x->got[i] = NULL;
    }
    return rc;
}

int vf_adamw_xchg_reply(vf_adamw_xchg *x, vf_ctx *ctx, int64_t step, vf_status *st)
{
    const vf_adamw_geo *g = x->g;
    int rc = vf_adamw_xchg_release(x, st);
    if (rc < 0) return rc;
    for (int q = 0; q < g->P; q++) {
        char name[VF_NAME_MAX], id[64];
        int64_t off, n;
        piece(x, q, &off, &n);
        snprintf(name, sizeof name, "weights_p%d", q);
        snprintf(id, sizeof id, "w%lld.s%d.p%d", (long long)step, g->k, q);
        vf_port *out = vf_out(ctx, name);
        vf_tensor *w = x->wdata[q];
        x->wdata[q] = NULL;
        if (!out) {
            vf_tensor_unref(w);
            continue;
        }
        vf_item *it = vf_item_new(id, st);
        if (!it) {
            vf_tensor_unref(w);
            return VF_ENOMEM;
        }
        if (w && (rc = vf_item_put(it, "w", w, st)) < 0) {
            vf_item_free(it);
            return rc;
        }
        static const char *const keys[] = {"step", "shard", "off", "n", "kept"};
        double vals[] = {(double)step, g->k, (double)off, (double)n, 1};
        for (int i = 0; i < (x->kept ? 5 : 4) && rc == 0; i++) rc = vf_item_set_num(it, keys[i], vals[i], st);
        if (rc < 0) {
            vf_item_free(it);
            return rc;
        }
        rc = vf_send(out, it, st);
        if (rc == VF_EOS) { /* that partition has finished */
            rc = 0;
            continue;
        }
        if (rc < 0) return rc;
    }
    return 0;
}
