/* dit_embed.c — the ends of the DiT: patch/time/text/image embeddings (first partition),
 * the adaLN head (last partition), patchify/unpatchify and the RoPE tables.
 *
 * Token order is (t', h', w') row-major. A patch vector fed to patch_embedding is ordered
 * (z, pt, ph, pw) — Wan's Conv3d kernel flattened — and the head emits (pt, ph, pw, z) —
 * Wan's unpatchify einsum 'fhwpqrc->cfphqwr'. Both reorderings are two permutes (the op
 * takes ≤ 6 dims): (B·z·T', pt, H', ph, W', pw) <-> (B, z, L, P), then (B, z, L, P) <->
 * (B, L, ·).
 *
 * The time embedding has R rows: one a sample, or one a token (t_tokens, Wan 2.2 TI2V). Per
 * token, e0's six chunks are six GEMMs of time_projection's row blocks, written one after
 * another (6, R, dim), so every block's modulation is one broadcast add of its table and
 * its gradient a column sum, each one op however many tokens there are.
 */
#include "models/dit_internal.h"
#include "models/dit_red.h"

#define WE(k) dit_w(p, (k))
#define GE(k) dit_g(p, (k))
#define WH(k) dit_w(p, dit_tidx_head(p->pl.c.depth, (k)))
#define GH(k) dit_g(p, dit_tidx_head(p->pl.c.depth, (k)))

void dit_patchify(vf_dit_part *p, const vf_dit_dims *d, int ch, void *out, const void *lat,
                  bool head_order)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    int64_t Tp = d->T / c->patch[0], Hp = d->H / c->patch[1], Wp = d->W / c->patch[2];
    int64_t L = Tp * Hp * Wp, P = p->pl.P;
    int64_t s6[6] = {(int64_t)d->B * ch * Tp, c->patch[0], Hp, c->patch[1], Wp, c->patch[2]};
    static const int perm6[6] = {0, 2, 4, 1, 3, 5};
    be->permute(be, p->w.tmp, lat, 6, s6, perm6);             /* (B, z, L, P) */
    int64_t s4[4] = {d->B, ch, L, P};
    static const int perm_embed[4] = {0, 2, 1, 3};             /* (B, L, z, P) */
    static const int perm_head[4] = {0, 2, 3, 1};              /* (B, L, P, z) */
    be->permute(be, out, p->w.tmp, 4, s4, head_order ? perm_head : perm_embed);
}

/* (B, L, P, z) head output -> (B, z, T, H, W). */
static void unpatchify(vf_dit_part *p, const vf_dit_dims *d, void *out, const void *tok)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    int64_t Tp = d->T / c->patch[0], Hp = d->H / c->patch[1], Wp = d->W / c->patch[2];
    int64_t L = Tp * Hp * Wp, P = p->pl.P;
    int64_t s4[4] = {d->B, L, P, c->z};
    static const int perm4[4] = {0, 3, 1, 2};                  /* (B, z, L, P) */
    be->permute(be, p->w.tmp, tok, 4, s4, perm4);
    int64_t s6[6] = {(int64_t)d->B * c->z * Tp, Hp, Wp, c->patch[0], c->patch[1], c->patch[2]};
    static const int perm6[6] = {0, 3, 1, 4, 2, 5};            /* (B·z·T', pt, H', ph, W', pw) */
    be->permute(be, out, p->w.tmp, 6, s6, perm6);
}

void dit_rope_prepare(vf_dit_part *p, const vf_dit_dims *d)
{
    const vf_dit_config *c = &p->pl.c;
    int g[3] = {d->T / c->patch[0], d->H / c->patch[1], d->W / c->patch[2]};
    if (g[0] == p->rope_grid[0] && g[1] == p->rope_grid[1] && g[2] == p->rope_grid[2]) return;
    if (dit_sp_rope(p, g)) return;
    int64_t n = (int64_t)g[0] * g[1] * g[2] * (c->head_dim / 2);
    float *hc = p->host, *hs = p->host + n;
    vf_dit_rope_tables(c, g[0], g[1], g[2], hc, hs);
    p->be->upload(p->be, p->w.rcos, hc, n, VF_DTYPE_F32);
    p->be->upload(p->be, p->w.rsin, hs, n, VF_DTYPE_F32);
    memcpy(p->rope_grid, g, sizeof g);
}

int vf_dit_caption_tokens(const char *text, int text_len, int32_t *tok)
{
    int n = 0;
    for (; text && text[n] && n < text_len; n++) tok[n] = (unsigned char)text[n];
    return n;
}

/* Token ids onto the device: pads past each sample's length. On a host backend the
 * buffer is host memory; elsewhere the ids travel as exact small floats through upload. */
static int upload_tokens(vf_dit_part *p, const vf_dit_batch *b, int32_t *dst, vf_status *st)
{
    const int64_t B = b->dims.B, Lt = p->pl.c.text_len;
    const bool host = p->be->device.kind == VF_DEV_CPU;
    for (int64_t i = 0; i < B; i++) {
        int64_t len = b->text_len ? b->text_len[i] : Lt;
        if (len < 0)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "dit: text_len[%lld] = %lld is negative", (long long)i,
                                 (long long)len);
        for (int64_t j = 0; j < Lt; j++) {
            int32_t t = j < len ? b->text[i * Lt + j] : VF_DIT_PAD_TOKEN;
            if (t < 0 || t >= VF_DIT_VOCAB)
                return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                     "dit: text token [%lld, %lld] = %d outside [0, %d)",
                                     (long long)i, (long long)j, t, VF_DIT_VOCAB);
            if (host)
                dst[i * Lt + j] = t;
            else
                p->host[i * Lt + j] = (float)t;
        }
    }
    if (!host) p->be->upload(p->be, dst, p->host, B * Lt, VF_DTYPE_I32);
    return 0;
}

/* Text embeddings onto the device: row j of sample i is b->text_emb's for j < text_len[i]
 * and zero after it (Wan's pipeline zero-pads the umT5 states to text_len rows). */
static int upload_text_emb(vf_dit_part *p, const vf_dit_batch *b, void *dst, vf_status *st)
{
    const int64_t B = b->dims.B, Lt = p->pl.c.text_len, Dt = p->pl.c.text_dim;
    if (!b->text_emb)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit: the model takes text embeddings (text = embeddings) and the "
                             "batch has no text_emb (B, %lld, %lld)", (long long)Lt,
                             (long long)Dt);
    for (int64_t i = 0; i < B; i++) {
        int64_t len = b->text_len ? b->text_len[i] : Lt;
        if (len < 0 || len > Lt)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "dit: text_len[%lld] = %lld outside [0, %lld]", (long long)i,
                                 (long long)len, (long long)Lt);
        float *o = p->host + i * Lt * Dt;
        memcpy(o, b->text_emb + i * Lt * Dt, sizeof(float) * (size_t)(len * Dt));
        memset(o + len * Dt, 0, sizeof(float) * (size_t)((Lt - len) * Dt));
    }
    p->be->upload(p->be, dst, p->host, B * Lt * Dt, p->be->act_dtype);
    return 0;
}

/* x_t with cond's channels after it, sample by sample: (B, in_dim, T, H, W) into dst. */
static int concat_cond(vf_dit_part *p, const vf_dit_batch *b, void *dst, vf_status *st)
{
    vf_backend *be = p->be;
    const vf_dit_dims *d = &b->dims;
    const int64_t V = (int64_t)d->T * d->H * d->W, z = p->pl.c.z, in = p->pl.in_dim, ci = in - z;
    const size_t as = p->pl.as;
    if (!b->cond)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit: the model takes %lld input channels (in_dim): the batch needs cond "
                             "(B, %lld, T, H, W), the conditioning channels after x_t's %lld",
                             (long long)in, (long long)ci, (long long)z);
    for (int64_t i = 0; i < d->B; i++) {
        be->copy(be, dit_at(dst, i * in * V, as), dit_at(b->x_t, i * z * V, as), (size_t)(z * V) * as);
        be->copy(be, dit_at(dst, (i * in + z) * V, as), dit_at(b->cond, i * ci * V, as),
                 (size_t)(ci * V) * as);
    }
    return 0;
}

/* img_emb (Wan's MLPProj): LayerNorm-Linear-GELU(erf)-Linear-LayerNorm, the LayerNorms
 * torch's default eps 1e-5 with affine, into the image rows of sv->ctx. */
#define IMG_LN_EPS 1e-5f

static int img_emb_fwd(vf_dit_part *p, const vf_dit_batch *b, vf_dit_saved *sv, vf_status *st)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    dit_emb_saved *em = &sv->em;
    const int64_t B = b->dims.B, Ni = B * c->img_len, Nt = B * c->text_len, D = c->dim,
                  Di = c->img_dim;
    if (!b->img)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit: the model has an image branch (img_dim %d): the batch needs img "
                             "(B, %d, %d), the image features", c->img_dim, c->img_len, c->img_dim);
    be->upload(be, em->ii, b->img, Ni * Di, be->act_dtype);
    be->layernorm_fwd(be, em->in0, em->imean0, em->irstd0, em->ii, WE(ET_IMG0_W), WE(ET_IMG0_B), Ni,
                      Di, IMG_LN_EPS);
    be->matmul_fwd(be, em->i1, em->in0, WE(ET_IMG1_W), WE(ET_IMG1_B), Ni, Di, Di);
    be->gelu_erf_fwd(be, em->i1g, em->i1, Ni * Di);
    be->matmul_fwd(be, em->i3, em->i1g, WE(ET_IMG3_W), WE(ET_IMG3_B), Ni, Di, D);
    be->layernorm_fwd(be, dit_at(sv->ctx, Nt * D, p->pl.as), em->imean4, em->irstd4, em->i3,
                      WE(ET_IMG4_W), WE(ET_IMG4_B), Ni, D, IMG_LN_EPS);
    return 0;
}

/* Backward of img_emb from dctx_img (Ni, dim): its weights' gradients (the features need
 * none). */
static void img_emb_bwd(vf_dit_part *p, const vf_dit_dims *d, vf_dit_saved *sv, const void *dctx_img)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    dit_emb_saved *em = &sv->em;
    dit_work *w = &p->w;
    const size_t gs = p->pl.gs;
    const int64_t Ni = (int64_t)d->B * c->img_len, D = c->dim, Di = c->img_dim;
    be->memset0(be, w->di3, (size_t)(Ni * D) * gs); /* layernorm_bwd adds */
    be->layernorm_bwd(be, w->di3, GE(ET_IMG4_W), GE(ET_IMG4_B), dctx_img, em->i3, WE(ET_IMG4_W),
                      em->imean4, em->irstd4, Ni, D);
    be->matmul_bwd(be, w->dia, GE(ET_IMG3_W), GE(ET_IMG3_B), w->di3, em->i1g, WE(ET_IMG3_W), Ni, Di, D,
                   VF_GRAD_WRITE);
    be->gelu_erf_bwd(be, w->dib, w->dia, em->i1, Ni * Di);
    be->matmul_bwd(be, w->dia, GE(ET_IMG1_W), GE(ET_IMG1_B), w->dib, em->in0, WE(ET_IMG1_W), Ni, Di, Di,
                   VF_GRAD_WRITE);
    be->layernorm_bwd(be, NULL, GE(ET_IMG0_W), GE(ET_IMG0_B), w->dia, em->ii, WE(ET_IMG0_W), em->imean0,
                      em->irstd0, Ni, Di);
}

/* The time embedding per token: row r = i·L + l is token l of sample i, at b->t_tok's
 * time, or its sample's t where the batch gives none. */
static void time_tok_fwd(vf_dit_part *p, const vf_dit_batch *b, vf_dit_saved *sv)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    dit_emb_saved *em = &sv->em;
    const size_t as = p->pl.as;
    const int64_t L = b->dims.L, R = b->dims.B * L, D = c->dim;
    float *tt = p->host + R * c->freq_dim; /* dit_part.c sizes host for both */
    for (int64_t r = 0; r < R; r++) tt[r] = b->t_tok ? b->t_tok[r] : b->t[r / L];
    vf_dit_timestep_features(c, tt, (int)R, p->host);
    be->upload(be, em->sinus, p->host, R * c->freq_dim, be->act_dtype);
    be->matmul_fwd(be, em->te1, em->sinus, WE(ET_TIME1_W), WE(ET_TIME1_B), R, c->freq_dim, D);
    be->silu_fwd(be, em->te1s, em->te1, R * D);
    be->matmul_fwd(be, sv->e, em->te1s, WE(ET_TIME2_W), WE(ET_TIME2_B), R, D, D);
    be->silu_fwd(be, em->se, sv->e, R * D);
    for (int k = 0; k < 6; k++)
        be->matmul_fwd(be, dit_at(sv->e0, k * R * D, as), em->se, dit_at(WE(ET_PROJ_W), k * D * D, as),
                       dit_at(WE(ET_PROJ_B), k * D, as), R, D, D);
}

int dit_embed_patchify(vf_dit_part *p, const vf_dit_batch *b, void *xin, void *patches, vf_status *st)
{
    int rc = 0;
    if (xin) {
        VF_TRY(concat_cond(p, b, xin, st));
        dit_patchify(p, &b->dims, p->pl.in_dim, patches, xin, false);
    } else {
        dit_patchify(p, &b->dims, p->pl.c.z, patches, b->x_t, false);
    }
fail:
    return rc;
}

int dit_embed_fwd(vf_dit_part *p, const vf_dit_batch *b, vf_dit_saved *sv, vf_status *st)
{
    int rc = 0;
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    const vf_dit_dims *d = &b->dims;
    dit_emb_saved *em = &sv->em;
    const int64_t B = d->B, L = d->L, N = B * L, Nt = B * c->text_len;
    const int64_t D = c->dim, iP = p->pl.in_dim * p->pl.P;
    if (!b->x_t || !b->t || (!c->text_emb && !b->text))
        VF_FAIL(st, VF_EINVAL, "dit partition 0: batch needs x_t, t and text");

    /* a sequence-parallel rank embeds its tokens' patches only (L is its Lr) */
    VF_TRY(p->sp ? dit_sp_patches(p, b, em->patches, st) : dit_embed_patchify(p, b, em->xin, em->patches, st));
    be->matmul_fwd(be, sv->xs[0], em->patches, WE(ET_PATCH_W), WE(ET_PATCH_B), N, iP, D);

    if (c->t_tokens) {
        time_tok_fwd(p, b, sv);
    } else {
        vf_dit_timestep_features(c, b->t, (int)B, p->host);
        be->upload(be, em->sinus, p->host, B * c->freq_dim, be->act_dtype);
        be->matmul_fwd(be, em->te1, em->sinus, WE(ET_TIME1_W), WE(ET_TIME1_B), B, c->freq_dim, D);
        be->silu_fwd(be, em->te1s, em->te1, B * D);
        be->matmul_fwd(be, sv->e, em->te1s, WE(ET_TIME2_W), WE(ET_TIME2_B), B, D, D);
        be->silu_fwd(be, em->se, sv->e, B * D);
        be->matmul_fwd(be, sv->e0, em->se, WE(ET_PROJ_W), WE(ET_PROJ_B), B, D, 6 * D);
    }

    if (c->text_emb) {
        VF_TRY(upload_text_emb(p, b, em->temb, st));
    } else {
        VF_TRY(upload_tokens(p, b, em->tok, st));
        be->embed_fwd(be, em->temb, em->tok, WE(ET_TOK), Nt, c->text_dim);
    }
    be->matmul_gelu_fwd(be, em->t1g, em->t1, em->temb, WE(ET_TXT1_W), WE(ET_TXT1_B), Nt,
                        c->text_dim, D);
    be->matmul_fwd(be, sv->ctx, em->t1g, WE(ET_TXT2_W), WE(ET_TXT2_B), Nt, D, D);
    if (p->pl.img) VF_TRY(img_emb_fwd(p, b, sv, st));
    return 0;
fail:
    return rc;
}

void dit_embed_bwd(vf_dit_part *p, const vf_dit_dims *d, vf_dit_saved *sv, void *dx, void *de,
                   void *de0, void *dctx)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    dit_emb_saved *em = &sv->em;
    dit_work *w = &p->w;
    const int64_t B = d->B, L = d->L, N = B * L, Nt = B * c->text_len;
    const int64_t D = c->dim, iP = p->pl.in_dim * p->pl.P;

    /* patches: no gradient for the input latent. A sequence-parallel rank's pad tokens add
     * nothing: their patches are zero and their dx is (dit_sp.c, the ends) */
    dit_grains gr; /* the sums over tokens in grains (dit_red.h) */
    dit_grains_of(p, B, L, &gr);
    dit_red_matmul_bwd(p, &gr, NULL, GE(ET_PATCH_W), GE(ET_PATCH_B), dx, em->patches, WE(ET_PATCH_W), iP, D,
                       VF_GRAD_WRITE);

    /* image features: ctx's rows after the text's */
    if (p->pl.img) img_emb_bwd(p, d, sv, dit_at(dctx, Nt * D, p->pl.gs));

    /* time: e0 = proj(silu(e)), e = mlp(sinus); de already holds the head's share. R rows:
     * B, or B·L per token, whose e0 is six row blocks of proj (6, R, dim) */
    const int64_t R = c->t_tokens ? N : B;
    if (c->t_tokens) {
        const size_t as = p->pl.as, gs = p->pl.gs;
        for (int k = 0; k < 6; k++)
            dit_red_matmul_bwd(p, &gr, w->dse, p->grads ? dit_at(GE(ET_PROJ_W), k * D * D, gs) : NULL,
                               p->grads ? dit_at(GE(ET_PROJ_B), k * D, gs) : NULL, dit_at(de0, k * R * D, gs),
                               em->se, dit_at(WE(ET_PROJ_W), k * D * D, as), D, D,
                               k ? VF_GRAD_ADD : VF_GRAD_WRITE);
    } else {
        be->matmul_bwd(be, w->dse, GE(ET_PROJ_W), GE(ET_PROJ_B), de0, em->se, WE(ET_PROJ_W), B, D,
                       6 * D, VF_GRAD_WRITE);
    }
    be->silu_bwd(be, de, w->dse, sv->e, R * D, VF_GRAD_ADD);
    /* a time row a token sums over the tokens; rows of samples over no tokens */
    dit_grains tr = gr;
    if (!c->t_tokens) dit_grains_off(B, 1, &tr);
    dit_red_matmul_bwd(p, &tr, w->dte1s, GE(ET_TIME2_W), GE(ET_TIME2_B), de, em->te1s, WE(ET_TIME2_W), D, D,
                       VF_GRAD_WRITE);
    be->silu_bwd(be, w->dte1, w->dte1s, em->te1, R * D, VF_GRAD_WRITE);
    dit_red_matmul_bwd(p, &tr, NULL, GE(ET_TIME1_W), GE(ET_TIME1_B), w->dte1, em->sinus, WE(ET_TIME1_W),
                       c->freq_dim, D, VF_GRAD_WRITE);

    /* text: ctx = mlp(table[tok]), or mlp(text_emb) whose input needs no gradient; the
     * GELU's backward runs in the second linear's (its first's bias gradient with it) */
    be->matmul_dgelu_bwd(be, w->dt1, GE(ET_TXT1_B), GE(ET_TXT2_W), GE(ET_TXT2_B), dctx, em->t1g,
                         WE(ET_TXT2_W), em->t1, Nt, D, D);
    if (c->text_emb) {
        be->matmul_bwd(be, NULL, GE(ET_TXT1_W), NULL, w->dt1, em->temb, WE(ET_TXT1_W), Nt,
                       c->text_dim, D, VF_GRAD_WRITE);
        return;
    }
    be->matmul_bwd(be, w->dtemb, GE(ET_TXT1_W), NULL, w->dt1, em->temb, WE(ET_TXT1_W), Nt,
                   c->text_dim, D, VF_GRAD_WRITE);
    be->embed_bwd(be, GE(ET_TOK), w->dtemb, em->tok, Nt, c->text_dim);
}

void dit_head_fwd(vf_dit_part *p, const vf_dit_dims *d, vf_dit_saved *sv)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    dit_head_saved *h = &sv->hd;
    const size_t as = p->pl.as;
    const int64_t B = d->B, L = d->L, N = B * L, D = c->dim, zP = c->z * p->pl.P;
    const void *x = sv->xs[p->pl.nb];

    int64_t R, per;
    dit_time_rows(&p->pl, d, &R, &per);
    if (c->t_tokens) /* each token's row of e, plus the table's row k: one broadcast add */
        for (int k = 0; k < 2; k++)
            be->modulate_fwd(be, dit_at(h->eh, k * R * D, as), sv->e, dit_at(WH(HT_MOD), k * D, as),
                             p->w.zeros, 1, R, D);
    else
        for (int k = 0; k < 2; k++)
            for (int64_t b = 0; b < B; b++)
                be->add(be, dit_at(h->eh, (k * B + b) * D, as), dit_at(WH(HT_MOD), k * D, as),
                        dit_at(sv->e, b * D, as), D);
    be->ln_modulate_fwd(be, h->hm, h->mean, h->rstd, x, h->eh, dit_at(h->eh, R * D, as), R, per, D,
                        c->eps);
    be->matmul_fwd(be, h->pred_tok, h->hm, WH(HT_W), WH(HT_B), N, D, zP);
    if (h->pred) /* a rank of sequence parallelism predicts its tokens only: no latent */
        unpatchify(p, d, h->pred, h->pred_tok);
}

/* dx (N, dim) is written: the head is the first writer of the last block's gradient */
void dit_head_bwd(vf_dit_part *p, const vf_dit_dims *d, vf_dit_saved *sv, void *dx, void *de)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    dit_head_saved *h = &sv->hd;
    dit_work *w = &p->w;
    const size_t as = p->pl.as, gs = p->pl.gs;
    const int64_t B = d->B, L = d->L, D = c->dim, zP = c->z * p->pl.P;

    int64_t R, per;
    dit_time_rows(&p->pl, d, &R, &per);
    dit_grains gr; /* the sums over tokens in grains (dit_red.h) */
    dit_grains_of(p, B, L, &gr);
    dit_red_matmul_bwd(p, &gr, w->dhm, GH(HT_W), GH(HT_B), h->dpred_tok, h->hm, WH(HT_W), D, zP, VF_GRAD_WRITE);
    dit_red_ln_modulate_bwd(p, &gr, dx, w->deh, dit_at(w->deh, R * D, gs), w->dhm, sv->xs[p->pl.nb], h->mean, h->rstd,
                            dit_at(h->eh, R * D, as), R, per, D, c->eps, VF_GRAD_WRITE);
    if (c->t_tokens) { /* de per token; the table's gradient sums its rows over the tokens */
        for (int k = 0; k < 2; k++) be->axpy(be, de, dit_at(w->deh, k * R * D, gs), 1.0f, R * D);
        if (p->grads) {
            dit_red_rows_sum(p, &gr, w->dmod, w->deh, 2, D);
            be->axpy(be, GH(HT_MOD), w->dmod, 1.0f, 2 * D);
        }
        return;
    }
    for (int k = 0; k < 2; k++) {
        for (int64_t b = 0; b < B; b++) {
            const void *src = dit_at(w->deh, (k * B + b) * D, gs);
            be->axpy(be, dit_at(de, b * D, gs), src, 1.0f, D);
            if (p->grads) be->axpy(be, dit_at(GH(HT_MOD), k * D, gs), src, 1.0f, D);
        }
    }
}
