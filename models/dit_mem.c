/* dit_mem.c — how a DiT partition's memory is laid out, and what it costs.
 *
 * One carving routine per buffer set (a block's saved activations, a micro-batch's saved
 * store, the partition's workspace). Run with a NULL base it only counts bytes: that is
 * vf_dit_part_memory / vf_dit_block_act_bytes, the numbers `vflow plan` adds up; run with
 * an allocation it hands out the buffers. Same code, so the plan is the allocation.
 * Every buffer is 64-byte aligned.
 */
#include "models/dit_internal.h"
#include "models/dit_red.h"
#include "models/dit_sp.h"

void dit_plan_init(dit_plan *pl, const vf_dit_config *c, int b0, int b1,
                   const vf_dit_dims *max, int recompute, size_t as, size_t gs)
{
    memset(pl, 0, sizeof *pl);
    pl->c = *c;
    pl->b0 = b0;
    pl->b1 = b1;
    pl->nb = b1 - b0;
    pl->first = b0 == 0;
    pl->last = b1 == c->depth;
    pl->recompute = recompute;
    pl->att_kept = recompute == VF_DIT_RECOMPUTE;
    pl->B = max->B;
    pl->L = max->L;
    pl->N = max->N > 0 && max->N < pl->B * pl->L ? max->N : pl->B * pl->L;
    pl->Nt = pl->B * c->text_len;
    pl->img = c->img_dim > 0;
    pl->Ni = pl->img ? pl->B * c->img_len : 0;
    pl->Nc = pl->Nt + pl->Ni;
    pl->R = c->t_tokens ? pl->N : pl->B;
    pl->in_dim = vf_dit_in_dim(c);
    pl->P = (int64_t)c->patch[0] * c->patch[1] * c->patch[2];
    pl->as = as;
    pl->gs = gs;
    pl->sp = 1;
    pl->Lw = pl->L;
    pl->Nw = pl->N;
}

void dit_plan_sp(dit_plan *pl, int n, const vf_dit_dims *max)
{
    if (n < 2) return;
    vf_dit_dims r = vf_dit_sp_rank_max(max, n);
    pl->sp = n;
    pl->L = r.L;
    pl->N = r.N > 0 ? r.N : pl->B * r.L;
    pl->R = pl->c.t_tokens ? pl->N : pl->B;
}

int64_t vf_dit_tokens(const vf_dit_config *c, const vf_dit_dims *d)
{
    return (int64_t)(d->T / c->patch[0]) * (d->H / c->patch[1]) * (d->W / c->patch[2]);
}

vf_dit_dims vf_dit_dims_of(const vf_dit_config *c, int B, int T, int H, int W)
{
    vf_dit_dims d = {B, T, H, W, 0, 0};
    d.L = vf_dit_tokens(c, &d);
    return d;
}

vf_dit_dims vf_dit_dims_max(const vf_dit_dims *d, int n)
{
    vf_dit_dims m = {0};
    int64_t L = -1, N = 0;
    for (int i = 0; i < n; i++) {
        int64_t l = d[i].L;
        if (d[i].B > m.B) m.B = d[i].B;
        if (l > L) L = l, m.T = d[i].T, m.H = d[i].H, m.W = d[i].W;
        if (d[i].B * l > N) N = d[i].B * l;
    }
    m.L = L > 0 ? L : 0;
    m.N = N < (int64_t)m.B * L ? N : 0;
    return m;
}

#define A(n) dit_carve(cv, (size_t)(n) * pl->as)
#define G(n) dit_carve(cv, (size_t)(n) * pl->gs)
#define F(n) (float *)dit_carve(cv, (size_t)(n) * sizeof(float))

void dit_carve_blk_saved(dit_carver *cv, const dit_plan *pl, dit_blk_saved *s, bool with_att)
{
    int64_t N = pl->N, Nt = pl->Nt, D = pl->c.dim, F = pl->c.ffn;
    int64_t lse = pl->c.heads * pl->N;
    s->eb = pl->c.t_tokens ? NULL : A(6 * pl->B * D);
    /* q, k, v in a row (one stride), as ck, cv: the batched projections write them */
    void **nd[] = {&s->m1, &s->q, &s->k, &s->v, &s->qr, &s->kr, &s->o, &s->x1, &s->h3,
                   &s->cq, &s->cqr, &s->ca, &s->x2, &s->m2, &s->f2};
    for (size_t i = 0; i < sizeof nd / sizeof nd[0]; i++) *nd[i] = A(N * D);
    s->ck = A(Nt * D);
    s->cv = A(Nt * D);
    s->ckr = A(Nt * D);
    s->f1 = A(N * F);
    s->g = A(N * F);
    float **nf[] = {&s->mean1, &s->rstd1, &s->rstdq, &s->rstdk, &s->mean3,
                    &s->rstd3, &s->rstdcq, &s->mean2, &s->rstd2};
    for (size_t i = 0; i < sizeof nf / sizeof nf[0]; i++) *nf[i] = F(N);
    s->rstdck = F(Nt);
    s->lse2 = F(lse);
    s->a = with_att ? A(N * D) : NULL;
    s->lse1 = with_att ? F(lse) : NULL;
    if (pl->img) {
        s->cik = A(pl->Ni * D);
        s->cikr = A(pl->Ni * D);
        s->civ = A(pl->Ni * D);
        s->rstdcik = F(pl->Ni);
        s->cia = A(N * D);
        s->cs = A(N * D);
        s->lse3 = F(lse);
    } else {
        s->cik = s->cikr = s->civ = s->cia = s->cs = NULL;
        s->rstdcik = s->lse3 = NULL;
    }
}

void dit_carve_att_kept(dit_carver *cv, const dit_plan *pl, dit_att_kept *k)
{
    k->a = A(pl->N * pl->c.dim);
    k->lse = F(pl->c.heads * pl->N);
}

void dit_carve_saved(dit_carver *cv, const dit_plan *pl, vf_dit_saved *s)
{
    int64_t N = pl->N, Nt = pl->Nt, R = pl->R, D = pl->c.dim, zP = pl->c.z * pl->P;
    int64_t iP = (int64_t)pl->in_dim * pl->P, Ni = pl->Ni, Di = pl->c.img_dim;
    /* xs/blk pointer arrays are host memory owned by vf_dit_saved (dit_part.c). The
     * output of the last block is kept only where the head needs it; elsewhere it is
     * written straight into the caller's xfer buffer. */
    for (int i = 0; i < pl->nb + (pl->last ? 1 : 0); i++) {
        /* activation offload: the inputs of blocks 1 … nb−1 live in host memory */
        void *x = pl->offload && i > 0 && i < pl->nb ? NULL : A(N * D);
        if (s->xs) s->xs[i] = x;
    }
    s->e = A(R * D);
    s->e0 = A(6 * R * D);
    s->ctx = A(pl->Nc * D);
    for (int i = 0; i < pl->nb; i++) {
        if (pl->att_kept && pl->offload) { /* in host memory (dit_offload.c) */
            if (s->att) s->att[i] = (dit_att_kept){NULL, NULL};
        } else if (pl->att_kept) {
            dit_att_kept tmp, *k = s->att ? &s->att[i] : &tmp;
            dit_carve_att_kept(cv, pl, k);
        } else if (!pl->recompute) {
            dit_blk_saved tmp, *b = s->blk ? &s->blk[i] : &tmp;
            dit_carve_blk_saved(cv, pl, b, true);
        }
    }
    if (pl->first) {
        /* a sequence-parallel rank's patches are its tokens'; its inputs' concatenation
         * is staged in the ends (dit_carve_ends) */
        dit_emb_saved *e = &s->em;
        e->patches = A(N * iP);
        e->tok = pl->c.text_emb ? NULL : (int32_t *)dit_carve(cv, (size_t)Nt * sizeof(int32_t));
        e->sinus = A(R * pl->c.freq_dim);
        e->te1 = A(R * D);
        e->te1s = A(R * D);
        e->se = A(R * D);
        e->temb = A(Nt * pl->c.text_dim);
        e->t1 = A(Nt * D);
        e->t1g = A(Nt * D);
        e->xin = pl->in_dim > pl->c.z && pl->sp < 2 ? A(N * iP) : NULL;
        e->ii = e->in0 = e->i1 = e->i1g = e->i3 = NULL;
        e->imean0 = e->irstd0 = e->imean4 = e->irstd4 = NULL;
        if (pl->img) {
            e->ii = A(Ni * Di);
            e->in0 = A(Ni * Di);
            e->i1 = A(Ni * Di);
            e->i1g = A(Ni * Di);
            e->i3 = A(Ni * D);
            e->imean0 = F(Ni);
            e->irstd0 = F(Ni);
            e->imean4 = F(Ni);
            e->irstd4 = F(Ni);
        }
    }
    if (pl->last) {
        dit_head_saved *h = &s->hd;
        h->hm = A(N * D);
        h->mean = F(N);
        h->rstd = F(N);
        h->eh = A(2 * R * D);
        h->pred_tok = A(N * zP);
        h->pred = pl->sp > 1 ? NULL : A(N * zP);
        h->target_tok = A(N * zP);
        h->dpred_tok = G(N * zP);
    }
}

void dit_bwd_place(const dit_plan *pl, dit_bwd_slots *o)
{
    const size_t slot = ((size_t)(pl->N * pl->c.dim) * pl->gs + 63) & ~(size_t)63;
    const size_t one = (size_t)(pl->N * pl->c.ffn) * pl->as; /* the saved f1 and g each */
    const size_t room = ((one + 63) & ~(size_t)63) + one;   /* both, carved in a row */
    memset(o, 0, sizeof *o);
    /* g[2..4] one after another from f1's start (the batched q/k/v backward reads them
     * with one stride), g[5] after them; each where it fits */
    size_t end = 0;
    for (int i = 0; i < 3; i++) {
        o->buf[i] = 3 * slot <= room ? 0 : -1;
        o->at[i] = (size_t)i * slot;
    }
    if (o->buf[0] == 0) end = 3 * slot;
    o->buf[3] = end + slot <= room ? 0 : -1;
    o->at[3] = end;
}

void dit_carve_work(dit_carver *cv, const dit_plan *pl, dit_work *w)
{
    int64_t N = pl->N, Nt = pl->Nt, R = pl->R, D = pl->c.dim, zP = pl->c.z * pl->P;
    int64_t iP = (int64_t)pl->in_dim * pl->P, Ni = pl->Ni, Di = pl->c.img_dim;
    dit_bwd_slots bs;
    dit_bwd_place(pl, &bs);
    w->g[0] = G(N * D);
    w->fx = pl->as <= pl->gs ? w->g[0] : A(N * D);
    if (pl->sp < 2) w->tmp = pl->first ? A(N * (iP > zP ? iP : zP)) : pl->last ? A(N * zP) : NULL;
    w->gx = G(N * D);
    for (int i = 1; i < 6; i++) w->g[i] = i < 2 || bs.buf[i - 2] < 0 ? G(N * D) : NULL;
    w->gf[0] = G(N * pl->c.ffn);
    w->gf[1] = w->gf[0]; /* dit_work: never two live at once */
    for (int i = 0; i < 3; i++) w->gc[i] = G(Nt * D);
    for (int i = 0; i < 3; i++) w->gi[i] = pl->img ? G(Ni * D) : NULL;
    w->deb = G(6 * R * D);
    w->ebt = pl->c.t_tokens ? A(6 * R * D) : NULL;
    w->zeros = pl->c.t_tokens ? A(6 * D) : NULL;
    w->dmod = pl->c.t_tokens ? G(6 * D) : NULL;
    if (pl->first) {
        w->dse = G(R * D);
        w->dte1s = G(R * D);
        w->dte1 = G(R * D);
        w->dt1 = G(Nt * D);
        w->dtemb = pl->c.text_emb ? NULL : G(Nt * pl->c.text_dim); /* byte-table gradient */
        w->di3 = pl->img ? G(Ni * D) : NULL;
        w->dia = pl->img ? G(Ni * Di) : NULL;
        w->dib = pl->img ? G(Ni * Di) : NULL;
    }
    if (pl->last) {
        w->dhm = G(N * D);
        w->deh = G(2 * R * D);
    }
    if (pl->first && pl->last) {
        w->dint.x = G(N * D);
        w->dint.e = G(R * D);
        w->dint.e0 = G(6 * R * D);
        w->dint.ctx = G(pl->Nc * D);
    }
    w->rcos = F(pl->L * pl->c.head_dim / 2);
    w->rsin = F(pl->L * pl->c.head_dim / 2);
    if (pl->recompute) dit_carve_blk_saved(cv, pl, &w->rc, !pl->att_kept);
}

void dit_carve_ends(dit_carver *cv, const dit_plan *pl, dit_work *w)
{
    /* the last partition's targets arrive as the rank's rows: only the patchify is whole */
    if (pl->sp < 2 || !pl->first) return;
    int64_t Nw = pl->Nw, iP = (int64_t)pl->in_dim * pl->P;
    w->tmp = A(Nw * iP);
    w->whole = A(Nw * iP);
    w->xin = pl->in_dim > pl->c.z ? A(Nw * iP) : NULL;
}

#undef A
#undef G
#undef F

void vf_dit_part_memory(const vf_dit_config *c, int b0, int b1, const vf_dit_dims *max,
                        int recompute, size_t act_size, size_t grad_size, vf_dit_mem *out)
{
    vf_dit_part_memory_sp(c, b0, b1, max, 1, recompute, act_size, grad_size, out);
}

void vf_dit_part_memory_sp(const vf_dit_config *c, int b0, int b1, const vf_dit_dims *max, int sp,
                           int recompute, size_t act_size, size_t grad_size, vf_dit_mem *out)
{
    dit_plan pl;
    dit_plan_init(&pl, c, b0, b1, max, recompute, act_size, grad_size);
    dit_plan_sp(&pl, sp, max);
    memset(out, 0, sizeof *out);

    /* the partition's parameter range, without building the layout */
    int64_t total = vf_dit_param_count(c);
    vf_dit_config one = *c;
    one.depth = 1;
    int64_t per_block = vf_dit_param_count(&one);
    one.depth = 2;
    per_block = vf_dit_param_count(&one) - per_block;
    int64_t head = (int64_t)c->dim * 2 + ((int64_t)c->dim + 1) * c->z * pl.P;
    int64_t embed = total - head - per_block * c->depth;
    int64_t n = per_block * pl.nb + (pl.first ? embed : 0) + (pl.last ? head : 0);
    out->params = n * (int64_t)act_size;
    out->grads = n * (int64_t)grad_size;

    dit_carver cv = {0};
    vf_dit_saved s;
    memset(&s, 0, sizeof s);
    dit_carve_saved(&cv, &pl, &s);
    out->saved = (int64_t)cv.off;
    out->saved_block = vf_dit_block_act_bytes(c, pl.B, pl.L, recompute, act_size);

    cv.off = 0;
    dit_work w;
    dit_carve_work(&cv, &pl, &w);
    out->workspace = (int64_t)cv.off;
    cv.off = 0;
    dit_carve_ends(&cv, &pl, &w);
    out->ends = (int64_t)cv.off;
    out->grains = dit_red_scratch_bytes(&pl);

    cv.off = 0;
    dit_carve(&cv, (size_t)(pl.N * c->dim) * act_size);
    dit_carve(&cv, (size_t)(pl.R * c->dim) * act_size);
    dit_carve(&cv, (size_t)(6 * pl.R * c->dim) * act_size);
    dit_carve(&cv, (size_t)(pl.Nc * c->dim) * act_size);
    out->xfer = (int64_t)cv.off;
}

int64_t vf_dit_block_act_bytes(const vf_dit_config *c, int64_t B, int64_t L, int recompute,
                               size_t act_size)
{
    vf_dit_dims d = vf_dit_dims_of(c, (int)B, c->patch[0], c->patch[1], c->patch[2]);
    dit_plan pl;
    dit_plan_init(&pl, c, 0, 1, &d, recompute, act_size, act_size);
    pl.L = L;
    pl.N = B * L;
    dit_carver cv = {0};
    dit_carve(&cv, (size_t)(pl.N * c->dim) * act_size); /* its input, in vf_dit_saved.xs */
    if (pl.att_kept) {
        dit_att_kept k;
        dit_carve_att_kept(&cv, &pl, &k);
    } else if (!pl.recompute) {
        dit_blk_saved s;
        dit_carve_blk_saved(&cv, &pl, &s, true);
    }
    return (int64_t)cv.off;
}

int64_t vf_dit_attn_workspace(const vf_dit_config *c, const vf_dit_dims *d, vf_device dev)
{
    const int64_t L = vf_dit_tokens(c, d);
    const int64_t self = vf_attention_workspace_bound(dev, d->B, L, L, c->heads, c->head_dim);
    const int64_t cross = vf_attention_workspace_bound(dev, d->B, L, c->text_len, c->heads, c->head_dim);
    const int64_t img = c->img_dim > 0 ? vf_attention_workspace_bound(dev, d->B, L, c->img_len, c->heads, c->head_dim) : 0;
    const int64_t m = self > cross ? self : cross;
    return m > img ? m : img;
}
