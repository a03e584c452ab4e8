/* dit_part.c — a pipeline partition of the DiT: allocation, and the order in which
 * forward, loss and backward run the embeddings, blocks and head (dit_embed.c,
 * dit_block.c). See dit.h for the contract a pipeline stage relies on.
 *
 * Why P partitions give bitwise the same gradients as one: every partition runs exactly
 * the ops the whole model would run, on the same values, in the same order; the only
 * sums that cross a boundary (the gradients of e, e0 and ctx, to which every block
 * contributes) are continued in place in the buffer received from the next partition
 * rather than formed separately and added, so the order of additions is that of a single
 * partition. Recompute reruns a block's forward from its saved input with the same ops,
 * so its internals, and hence the gradients, are bit-identical; with VF_DIT_RECOMPUTE the
 * self-attention's output and log-sum-exp are kept from the forward (dit_att_kept)
 * rather than recomputed.
 */
#include "models/dit_internal.h"
#include "models/dit_red.h"
#include "models/dit_sp.h"

#include <stdio.h>

static size_t bytes_a(const vf_dit_part *p, int64_t n) { return (size_t)n * p->pl.as; }
static size_t bytes_g(const vf_dit_part *p, int64_t n) { return (size_t)n * p->pl.gs; }

int vf_dit_part_new(vf_backend *be, const vf_dit_layout *l, int b0, int b1,
                    const vf_dit_dims *max, int recompute, void *params, void *grads,
                    vf_dit_part **out, vf_status *st)
{
    return vf_dit_part_new_sp(be, l, b0, b1, max, 1, recompute, params, grads, out, st);
}

int vf_dit_part_new_sp(vf_backend *be, const vf_dit_layout *l, int b0, int b1, const vf_dit_dims *max, int sp,
                       int recompute, void *params, void *grads, vf_dit_part **out, vf_status *st)
{
    int rc = 0;
    vf_dit_part *p = NULL;
    const vf_dit_config *c = &l->cfg;
    *out = NULL;
    if (b0 < 0 || b1 <= b0 || b1 > c->depth)
        VF_FAIL(st, VF_EINVAL, "dit partition: blocks [%d, %d) not inside [0, %d)", b0, b1,
                c->depth);
    if (max->B < 1 || max->T < 1 || max->H < 1 || max->W < 1 || max->T % c->patch[0] ||
        max->H % c->patch[1] || max->W % c->patch[2])
        VF_FAIL(st, VF_EINVAL,
                "dit partition: max geometry B=%d T=%d H=%d W=%d must be positive and divisible "
                "by the patch (%d,%d,%d)", max->B, max->T, max->H, max->W, c->patch[0],
                c->patch[1], c->patch[2]);
    p = vf_calloc(sizeof *p, st);
    if (!p) VF_FAIL(st, VF_ENOMEM, "dit partition: out of memory");
    p->be = be;
    static uint64_t uids;
    p->uid = __atomic_add_fetch(&uids, 1, __ATOMIC_RELAXED);
    p->l = l;
    dit_plan_init(&p->pl, c, b0, b1, max, recompute, vf_dtype_size(be->act_dtype),
                  vf_dtype_size(be->grad_dtype));
    dit_plan_sp(&p->pl, sp, max);
    vf_dit_layout_range(l, b0, b1, &p->off0, &p->nparams);
    p->params = params;
    p->grads = grads;
    p->rope_grid[0] = -1;

    dit_carver cv = {0};
    dit_carve_work(&cv, &p->pl, &p->w);
    p->wbytes = cv.off;
    p->wmem = be->alloc(be, p->wbytes, st);
    if (!p->wmem) {
        vf_status_prefix(st, "dit partition [%d, %d): workspace of %zu bytes", b0, b1, p->wbytes);
        rc = st && st->code ? st->code : VF_ENOMEM;
        goto fail;
    }
    cv = (dit_carver){p->wmem, 0};
    dit_carve_work(&cv, &p->pl, &p->w);
    cv = (dit_carver){0};
    dit_carve_ends(&cv, &p->pl, &p->w);
    if ((p->ebytes = cv.off) > 0) { /* a first partition's rank patchifies whole clips, apart */
        if (!(p->emem = be->alloc(be, p->ebytes, st))) {
            vf_status_prefix(st, "dit partition [%d, %d): the whole clips' patchify, %zu bytes", b0, b1,
                             p->ebytes);
            rc = st && st->code ? st->code : VF_ENOMEM;
            goto fail;
        }
        cv = (dit_carver){p->emem, 0};
        dit_carve_ends(&cv, &p->pl, &p->w);
    }
    if (p->w.zeros) be->memset0(be, p->w.zeros, 6 * (size_t)c->dim * p->pl.as);
    if (be->device.kind == VF_DEV_CPU) { /* the sums over tokens' grains (dit_red.h) */
        int64_t nb = dit_red_scratch_bytes(&p->pl);
        if (!(p->redw = be->alloc(be, (size_t)nb, st))) {
            vf_status_prefix(st, "dit partition [%d, %d): grain scratch of %lld bytes", b0, b1, (long long)nb);
            rc = st && st->code ? st->code : VF_ENOMEM;
            goto fail;
        }
    }

    /* per token the sinusoid's rows and, after them, each token's time */
    int64_t hn = p->pl.R * (c->freq_dim + (c->t_tokens ? 1 : 0));
    if (p->pl.Nt > hn) hn = p->pl.Nt;
    if (p->pl.L * c->head_dim > hn) hn = p->pl.L * c->head_dim; /* cos and sin tables */
    if (c->text_emb && p->pl.first && p->pl.Nt * c->text_dim > hn)
        hn = p->pl.Nt * c->text_dim; /* zero-padded text embeddings */
    p->host_n = hn;
    p->host = vf_alloc(sizeof(float) * (size_t)hn, st);
    if (!p->host) VF_FAIL(st, VF_ENOMEM, "dit partition: out of host memory");
    *out = p;
    return 0;
fail:
    vf_dit_part_free(p);
    return rc;
}

void vf_dit_part_free(vf_dit_part *p)
{
    if (!p) return;
    dit_swap_free(p);
    dit_offload_free(p);
    if (p->wmem) p->be->free(p->be, p->wmem);
    if (p->emem) p->be->free(p->be, p->emem);
    if (p->lmem) p->be->free(p->be, p->lmem);
    if (p->redw) p->be->free(p->be, p->redw);
    dit_sp_free(p);
    vf_free(p->host);
    vf_free(p);
}

bool vf_dit_part_is_first(const vf_dit_part *p) { return p->pl.first; }
bool vf_dit_part_is_last(const vf_dit_part *p) { return p->pl.last; }

void vf_dit_part_set_buffers(vf_dit_part *p, void *params, void *grads)
{
    p->params = params;
    p->grads = grads;
}

int vf_dit_saved_new(vf_dit_part *p, vf_dit_saved **out, vf_status *st)
{
    int rc = 0;
    vf_dit_saved *s = vf_calloc(sizeof *s, st);
    *out = NULL;
    if (!s) VF_FAIL(st, VF_ENOMEM, "dit saved activations: out of memory");
    s->p = p;
    s->xs = vf_calloc(sizeof *s->xs * (size_t)(p->pl.nb + 1), st);
    if (!s->xs) VF_FAIL(st, VF_ENOMEM, "dit saved activations: out of memory");
    if (p->pl.att_kept && !(s->att = vf_calloc(sizeof *s->att * (size_t)p->pl.nb, st)))
        VF_FAIL(st, VF_ENOMEM, "dit saved activations: out of memory");
    if (!p->pl.recompute && !(s->blk = vf_calloc(sizeof *s->blk * (size_t)p->pl.nb, st)))
        VF_FAIL(st, VF_ENOMEM, "dit saved activations: out of memory");
    dit_carver cv = {0};
    dit_carve_saved(&cv, &p->pl, s);
    s->bytes = cv.off;
    s->mem = p->be->alloc(p->be, s->bytes, st);
    if (!s->mem) {
        vf_status_prefix(st, "dit partition [%d, %d): saved activations of %zu bytes",
                         p->pl.b0, p->pl.b1, s->bytes);
        rc = st && st->code ? st->code : VF_ENOMEM;
        goto fail;
    }
    cv = (dit_carver){s->mem, 0};
    dit_carve_saved(&cv, &p->pl, s);
    VF_TRY(dit_offload_saved_new(p, s, st));
    *out = s;
    return 0;
fail:
    vf_dit_saved_free(s);
    return rc;
}

void vf_dit_saved_free(vf_dit_saved *s)
{
    if (!s) return;
    if (s->mem) s->p->be->free(s->p->be, s->mem);
    dit_offload_saved_free(s->p, s);
    vf_free(s->xs);
    vf_free(s->blk);
    vf_free(s->att);
    vf_free(s);
}

size_t vf_dit_saved_bytes(const vf_dit_saved *s) { return s->bytes; }
size_t vf_dit_part_workspace_bytes(const vf_dit_part *p) { return p->wbytes; }
size_t vf_dit_part_ends_bytes(const vf_dit_part *p) { return p->ebytes; }

const void *vf_dit_saved_pred(const vf_dit_saved *sv)
{
    /* a sequence-parallel rank predicts its tokens only: no whole latent */
    return sv->p->pl.last && sv->state >= 1 && !sv->p->sp ? sv->hd.pred : NULL;
}

/* With recompute: block i's activations in the partition's one-block area, its
 * self-attention result in the saved store where it is kept from the forward for the
 * backward (att_kept), else in that area too. */
static dit_blk_saved *recompute_area(vf_dit_part *p, vf_dit_saved *sv, int i, dit_blk_saved *s)
{
    *s = p->w.rc;
    if (p->pl.att_kept && !p->pl.offload) { /* else dit_offload_*_enter points them */
        s->a = sv->att[i].a;
        s->lse1 = sv->att[i].lse;
    }
    return s;
}

static int check_dims(const vf_dit_part *p, const vf_dit_dims *d, vf_status *st)
{
    const vf_dit_config *c = &p->pl.c;
    if (d->B < 1 || d->T < 1 || d->H < 1 || d->W < 1 || d->T % c->patch[0] ||
        d->H % c->patch[1] || d->W % c->patch[2])
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit: batch geometry B=%d T=%d H=%d W=%d must be positive and "
                             "divisible by the patch (%d,%d,%d)", d->B, d->T, d->H, d->W,
                             c->patch[0], c->patch[1], c->patch[2]);
    /* a sequence-parallel rank holds Lr of a sample's tokens */
    int64_t want = p->sp ? p->sp->Lr : vf_dit_tokens(c, d);
    if (d->L != want || (p->sp && p->sp->L != vf_dit_tokens(c, d)))
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit: batch geometry T=%d H=%d W=%d makes %lld tokens a sample%s, its dims say %lld "
                             "(make them with vf_dit_dims_of)", d->T, d->H, d->W, (long long)vf_dit_tokens(c, d),
                             p->sp ? " (of which a rank holds its share)" : "", (long long)d->L);
    if (d->B > p->pl.B || d->L > p->pl.L || d->B * d->L > p->pl.N)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit partition [%d, %d): batch of %d x %lld tokens exceeds the "
                             "geometry it was sized for (%lld x %lld, %lld tokens in all)", p->pl.b0, p->pl.b1,
                             d->B, (long long)d->L, (long long)p->pl.B, (long long)p->pl.L, (long long)p->pl.N);
    return 0;
}

int vf_dit_part_forward(vf_dit_part *p, const vf_dit_batch *b, const vf_dit_xfer *in,
                        vf_dit_xfer *out, vf_dit_saved *sv, vf_status *st)
{
    int rc = 0;
    vf_backend *be = p->be;
    const dit_plan *pl = &p->pl;
    const vf_dit_dims *d = &b->dims;
    VF_TRY(check_dims(p, d, st));
    if (sv->p != p) VF_FAIL(st, VF_EINVAL, "dit forward: saved store belongs to another partition");
    int64_t L = d->L, N = d->B * L, Nc = (int64_t)d->B * vf_dit_ctx_len(&pl->c);
    int64_t D = pl->c.dim, R, per;
    dit_time_rows(pl, d, &R, &per);
    if (pl->c.t_tokens && p->sp)
        VF_FAIL(st, VF_EUSAGE, "dit partition [%d, %d): a time embedding per token (time = "
                "\"token\") does not run with sequence parallelism", pl->b0, pl->b1);
    if (!pl->first && (!in || !in->x || !in->e || !in->e0 || !in->ctx))
        VF_FAIL(st, VF_EINVAL, "dit partition [%d, %d): forward needs x, e, e0, ctx from the "
                "previous partition", pl->b0, pl->b1);
    if (!pl->last && (!out || !out->x))
        VF_FAIL(st, VF_EINVAL, "dit partition [%d, %d): forward needs an output x buffer",
                pl->b0, pl->b1);
    if (pl->first && !pl->last && (!out->e || !out->e0 || !out->ctx))
        VF_FAIL(st, VF_EINVAL, "dit partition 0: forward needs output e, e0, ctx buffers");
    sv->dims = *d;
    sv->state = 0;

    if (pl->first) {
        VF_TRY(dit_embed_fwd(p, b, sv, st));
    } else {
        be->copy(be, sv->xs[0], in->x, bytes_a(p, N * D));
        be->copy(be, sv->e, in->e, bytes_a(p, R * D));
        be->copy(be, sv->e0, in->e0, bytes_a(p, 6 * R * D));
        be->copy(be, sv->ctx, in->ctx, bytes_a(p, Nc * D));
    }
    dit_rope_prepare(p, d);
    dit_swap_pass(p, false);
    for (int i = 0; i < pl->nb; i++) {
        dit_blk_saved rs, *s = pl->recompute ? recompute_area(p, sv, i, &rs) : &sv->blk[i];
        void *y = (i + 1 < pl->nb || pl->last) ? sv->xs[i + 1] : out->x;
        const void *x = sv->xs[i];
        if (pl->offload) dit_offload_fwd_enter(p, sv, i, N, &x, &y, s);
        dit_swap_enter(p, pl->b0 + i);
        dit_block_fwd(p, pl->b0 + i, d, x, y, sv->e0, sv->ctx, s, false);
        dit_swap_leave(p, pl->b0 + i);
        if (pl->offload) dit_offload_fwd_leave(p, sv, i);
    }
    VF_TRY(dit_sp_error(p, st));
    if (pl->last) {
        dit_head_fwd(p, d, sv);
    } else {
        const vf_dit_xfer *src = pl->first ? NULL : in;
        if (out->e && (!src || out->e != src->e)) be->copy(be, out->e, sv->e, bytes_a(p, R * D));
        if (out->e0 && (!src || out->e0 != src->e0))
            be->copy(be, out->e0, sv->e0, bytes_a(p, 6 * R * D));
        if (out->ctx && (!src || out->ctx != src->ctx))
            be->copy(be, out->ctx, sv->ctx, bytes_a(p, Nc * D));
    }
    sv->state = 1;
    return 0;
fail:
    return rc;
}

int vf_dit_part_loss(vf_dit_part *p, const vf_dit_batch *b, vf_dit_saved *sv,
                     float grad_scale, double *loss, vf_status *st)
{
    int rc = 0;
    vf_backend *be = p->be;
    if (!p->pl.last) VF_FAIL(st, VF_EINVAL, "dit loss: only the last partition computes it");
    if (sv->state != 1) VF_FAIL(st, VF_EINVAL, "dit loss: no forward result in this saved store");
    if (!b->target) VF_FAIL(st, VF_EINVAL, "dit loss: batch has no target");
    const vf_dit_dims *d = &sv->dims;
    if (memcmp(d, &b->dims, sizeof *d) != 0)
        VF_FAIL(st, VF_EINVAL, "dit loss: batch geometry differs from the forward's");
    const vf_dit_config *c = &p->pl.c;
    int64_t zP = c->z * p->pl.P, n = d->B * d->L * zP;
    if (b->skip_frames < 0 || b->skip_frames % c->patch[0] || b->skip_frames >= d->T)
        VF_FAIL(st, VF_EINVAL, "dit loss: skip_frames = %d: a multiple of the time patch %d below the %d "
                "latent frames", b->skip_frames, c->patch[0], d->T);
    if (p->sp && b->skip_frames)
        VF_FAIL(st, VF_EUSAGE, "dit loss: skip_frames = %d on a sequence-parallel rank (not supported)",
                b->skip_frames);
    /* the targets in the head's order: a sequence-parallel rank's come as its rows */
    if (p->sp) dit_sp_loss_targets(p, d, sv, b->target);
    else dit_patchify(p, d, c->z, sv->hd.target_tok, b->target, true);
    be->memset0(be, sv->hd.dpred_tok, bytes_g(p, n));
    if (p->sp) { /* a sequence-parallel rank: its tokens' share of the mean over the whole
                    sequences, each token's gradient as the whole mean's (its pads add 0) */
        int64_t whole = d->B * p->sp->L * zP;
        *loss = be->mse_fwd_bwd(be, sv->hd.dpred_tok, sv->hd.pred_tok, sv->hd.target_tok, n, whole, grad_scale);
    } else if (b->skip_frames == 0) {
        *loss = be->mse_fwd_bwd(be, sv->hd.dpred_tok, sv->hd.pred_tok, sv->hd.target_tok, n, n, grad_scale);
    } else { /* per sample, its tokens after the skipped frames' (token order (t', h', w')) */
        int64_t skip = (int64_t)(b->skip_frames / c->patch[0]) * (d->H / c->patch[1]) * (d->W / c->patch[2]);
        int64_t ni = (d->L - skip) * zP;
        *loss = 0;
        for (int64_t i = 0; i < d->B; i++) {
            int64_t at = (i * d->L + skip) * zP;
            *loss += be->mse_fwd_bwd(be, dit_at(sv->hd.dpred_tok, at, p->pl.gs), dit_at(sv->hd.pred_tok, at, p->pl.as),
                                     dit_at(sv->hd.target_tok, at, p->pl.as), ni, ni, grad_scale / (float)d->B);
        }
        *loss /= (double)d->B;
    }
    sv->state = 2;
    return 0;
fail:
    return rc;
}

int vf_dit_part_backward(vf_dit_part *p, const vf_dit_batch *b, vf_dit_saved *sv,
                         vf_dit_xfer *dx, vf_status *st)
{
    int rc = 0;
    vf_backend *be = p->be;
    const dit_plan *pl = &p->pl;
    (void)b;
    if (sv->p != p) VF_FAIL(st, VF_EINVAL, "dit backward: saved store belongs to another partition");
    if (sv->state != (pl->last ? 2 : 1))
        VF_FAIL(st, VF_EINVAL, "dit partition [%d, %d): backward without %s", pl->b0, pl->b1,
                pl->last ? "forward and loss" : "forward");
    const vf_dit_dims *d = &sv->dims;
    int64_t L = d->L, N = d->B * L, Nc = (int64_t)d->B * vf_dit_ctx_len(&pl->c);
    int64_t D = pl->c.dim, R, per;
    dit_time_rows(pl, d, &R, &per);
    vf_dit_xfer *g = dx;
    if (!g) {
        if (!(pl->first && pl->last))
            VF_FAIL(st, VF_EINVAL, "dit partition [%d, %d): backward needs boundary gradient "
                    "buffers", pl->b0, pl->b1);
        g = &p->w.dint;
    }
    if (!g->x || !g->e || !g->e0 || !g->ctx)
        VF_FAIL(st, VF_EINVAL, "dit partition [%d, %d): backward needs dx, de, de0, dctx buffers",
                pl->b0, pl->b1);
    dit_swap_pass(p, true); /* the first copies run while the head's backward computes */
    if (pl->offload) dit_offload_bwd_pass(p, sv, N);
    if (pl->last) { /* the sums every block adds to; the head writes dx */
        be->memset0(be, g->e, bytes_g(p, R * D));
        be->memset0(be, g->e0, bytes_g(p, 6 * R * D));
        be->memset0(be, g->ctx, bytes_g(p, Nc * D));
        dit_head_bwd(p, d, sv, g->x, g->e);
    }
    dit_rope_prepare(p, d);
    void *cur = g->x;
    for (int i = pl->nb - 1; i >= 0; i--) {
        void *nxt = cur == g->x ? p->w.gx : g->x;
        dit_blk_saved rs, *s;
        const void *x = sv->xs[i];
        dit_swap_enter(p, pl->b0 + i);
        if (pl->recompute) { /* all but a self-attention whose result the forward kept */
            s = recompute_area(p, sv, i, &rs);
            if (pl->offload) dit_offload_bwd_enter(p, sv, i, &x, s);
            dit_block_fwd(p, pl->b0 + i, d, x, NULL, sv->e0, sv->ctx, s, pl->att_kept);
        } else {
            s = &sv->blk[i];
        }
        dit_block_bwd(p, pl->b0 + i, d, cur, nxt, g->e0, g->ctx, x, sv->e0, sv->ctx, s);
        dit_swap_leave(p, pl->b0 + i);
        if (pl->offload) dit_offload_bwd_leave(p, sv);
        cur = nxt;
    }
    VF_TRY(dit_sp_error(p, st));
    if (pl->first && p->grads) /* a frozen base (LoRA) needs no embedding gradients */
        dit_embed_bwd(p, d, sv, cur, g->e, g->e0, g->ctx);
    else if (cur != g->x)
        be->copy(be, g->x, cur, bytes_g(p, N * D));
    sv->state = 0;
    return 0;
fail:
    return rc;
}
