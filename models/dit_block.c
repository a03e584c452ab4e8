/* dit_block.c — one DiT block, forward and backward, as a sequence of backend ops.
 *
 *   m  = modulation (6, dim) + e0[b]              stored chunk-major as eb (6, B, dim) so each
 *                                                 chunk is the contiguous (B, dim) the ops take;
 *                                                 per token (t_tokens) e0 is (6, B·L, dim), m
 *                                                 one broadcast add into the partition's
 *                                                 workspace, formed again by the backward (a
 *                                                 block keeps no (6, B·L, dim) of its own)
 *   x1 = x  + m[2] · o(attn(rope(rms(q(h1'))), rope(rms(k(h1'))), v(h1'))),
 *        h1' = LN(x)·(1+m[1]) + m[0]
 *   x2 = x1 + co(attn(rms(cq(LN3(x1))), rms(ck(ctx)), cv(ctx)))       LN3 with affine
 *        with an image branch co takes attn(q, rms(ck(ctx)), cv(ctx))
 *                                 + attn(q, rms(k_img(ctx_img)), v_img(ctx_img)), q as above
 *        (ctx_img: the image rows of the context, after the text rows)
 *   x3 = x2 + m[5] · ffn2(gelu(ffn1(LN(x2)·(1+m[4]) + m[3])))
 *
 * The ops are the fused ones where a fusion exists: LayerNorm+modulate (h1', and the MLP's
 * input), the q/k/v projections as one batched GEMM (ck/cv likewise), RMSNorm+RoPE, the
 * GELU in the first MLP GEMM's epilogue and its derivative in the second's backward. A
 * linear with a LoRA adapter runs unfused where the adapter's terms must join between the
 * fused op's steps, and so does every linear of a frozen FP8 base (dit_fp8.h), one
 * dequantised weight at a time. On the CPU backend a fused op computes what its unfused sequence
 * computes, bit for bit.
 *
 * Backward: the residual branches pass the gradient through unchanged, so dx3, dx2 and
 * dx1 are the same buffer dx at successive moments: the MLP's gated_add_bwd writes it
 * (its first writer), the LayerNorms' backwards add to it. Every scratch gradient is
 * written by its first op (ops.h), so the block does no memset. Scratch comes from the
 * partition's workspace and, once the MLP's backward has read them, from the block's own
 * dead activations (dit_bwd_place); the op sequence is fixed, which is what makes
 * recompute and partitioning bit-exact.
 *
 * Each pass is one unit of the backend's recording (ops.h graph_begin): on the CUDA
 * backend with VFLOW_CUDA_GRAPHS=1 a block's pass at a geometry seen before replays as a
 * CUDA graph. Its key is everything the ops depend on besides the data in the buffers.
 */
#include "models/dit_internal.h"
#include "models/dit_red.h"

#include <math.h>

#define W(k) dit_w(p, dit_tidx_block(blk, (k)))
#define G(k) dit_g(p, dit_tidx_block(blk, (k)))

/* Stride in elements of es bytes from a to b, buffers the carver laid one after another
 * with one size: the batched projections write and read them as one strided tensor. */
static int64_t stride_of(const void *a, const void *b, const void *c, size_t es)
{
    const ptrdiff_t d = (const char *)b - (const char *)a;
    VF_ASSERT(d > 0 && (const char *)c - (const char *)b == d && d % (ptrdiff_t)es == 0);
    return (int64_t)(d / (ptrdiff_t)es);
}

/* Elements from linear k0's weight to linear k1's in the flat layout, where k0's bias
 * lies as far from its weight as k1's does (the batched projections' weight stride) */
static int64_t wstride_of(const vf_dit_part *p, int blk, int k0, int k1)
{
    const vf_dit_tensor *t = p->l->t;
    const int a = dit_tidx_block(blk, k0), b = dit_tidx_block(blk, k1);
    VF_ASSERT(t[a + 1].offset - t[a].offset == t[b + 1].offset - t[b].offset);
    return t[b].offset - t[a].offset;
}

/* ------------------------------------------------------------------ the recording key */

enum { KEY_MAX = 128, UNIT_FWD = 1, UNIT_FWD_KEPT, UNIT_BWD };

typedef struct unit_key {
    uint64_t w[KEY_MAX];
    int n;
} unit_key;

static void key_put(unit_key *k, uint64_t v)
{
    VF_ASSERT(k->n < KEY_MAX);
    k->w[k->n++] = v;
}
static void key_ptr(unit_key *k, const void *q) { key_put(k, (uint64_t)(uintptr_t)q); }

/* What every pass of block blk depends on: the pass, the block, the geometry, the
 * partition (its uid; its configuration is fixed), its buffers (weights, gradients,
 * adapters, workspace, RoPE tables) and every buffer of s. */
static void key_block(unit_key *k, const vf_dit_part *p, int what, int blk, const vf_dit_dims *d,
                      const dit_blk_saved *s)
{
    key_put(k, (uint64_t)what);
    key_put(k, (uint64_t)blk);
    key_put(k, (uint64_t)d->B);
    key_put(k, (uint64_t)d->L);
    key_put(k, p->uid);
    const void *bufs[] = {p->params, p->grads, p->wmem, p->lora, p->lparams, p->lgrads, p->lmem,
                          p->w.rcos, p->w.rsin, p->fp8, p->blk_w, p->blk_g};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) key_ptr(k, bufs[i]);
    uint64_t sw[sizeof *s / sizeof(uint64_t) + 1] = {0};
    memcpy(sw, s, sizeof *s);
    for (size_t i = 0; i < (sizeof *s + sizeof(uint64_t) - 1) / sizeof(uint64_t); i++) key_put(k, sw[i]);
}

/* ------------------------------------------------------------------ forward */

/* eb = the block's modulation table + e0, chunk-major (6, R, dim): per sample into s->eb,
 * per token (t_tokens) into the workspace's ebt as one broadcast add (x·(1 + 0) + table[k]
 * is x + table[k]). Returns eb. */
static const void *modulation(vf_dit_part *p, int blk, const vf_dit_dims *d, const void *e0,
                              const dit_blk_saved *s)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as;
    const int64_t B = d->B, D = p->pl.c.dim;
    if (p->pl.c.t_tokens) {
        be->modulate_fwd(be, p->w.ebt, e0, W(BT_MOD), p->w.zeros, 6, B * d->L, D);
        return p->w.ebt;
    }
    for (int k = 0; k < 6; k++)
        for (int64_t b = 0; b < B; b++)
            be->add(be, dit_at(s->eb, (k * B + b) * D, as), dit_at(W(BT_MOD), k * D, as),
                    dit_at(e0, (b * 6 + k) * D, as), D);
    return s->eb;
}

static void block_fwd(vf_dit_part *p, int blk, const vf_dit_dims *d, const void *x, void *out,
                      const void *e0, const void *ctx, dit_blk_saved *s, bool att_kept)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    const size_t as = p->pl.as;
    const int64_t B = d->B, L = d->L, N = B * L, Lt = c->text_len, Nt = B * Lt;
    const int64_t Li = c->img_len, Ni = B * Li;
    const int64_t D = c->dim, H = c->heads, Dh = c->head_dim, F = c->ffn;
    const float eps = c->eps, scale = (float)(1.0 / sqrt((double)Dh));
    const float *cs = p->w.rcos, *sn = p->w.rsin;

    int64_t R, per; /* the adaLN's rows: samples, or tokens (t_tokens) */
    dit_time_rows(&p->pl, d, &R, &per);
    const void *eb = modulation(p, blk, d, e0, s);
    const void *shift1 = eb, *scale1 = dit_at(eb, R * D, as), *gate1 = dit_at(eb, 2 * R * D, as),
               *shift2 = dit_at(eb, 3 * R * D, as), *scale2 = dit_at(eb, 4 * R * D, as),
               *gate2 = dit_at(eb, 5 * R * D, as);

    /* self-attention */
    be->ln_modulate_fwd(be, s->m1, s->mean1, s->rstd1, x, shift1, scale1, R, per, D, eps);
    if (p->fp8) { /* one linear at a time, each dequantised in turn */
        dit_lin_fwd(p, blk, BT_SQ_W, s->q, s->m1, N, D, D);
        dit_lin_fwd(p, blk, BT_SK_W, s->k, s->m1, N, D, D);
        dit_lin_fwd(p, blk, BT_SV_W, s->v, s->m1, N, D, D);
    } else {
        be->matmul_batch_fwd(be, s->q, s->m1, W(BT_SQ_W), W(BT_SQ_B), N, D, D, 3,
                             wstride_of(p, blk, BT_SQ_W, BT_SK_W), stride_of(s->q, s->k, s->v, as));
    }
    dit_lora_fwd(p, blk, BT_SQ_W, s->q, s->m1, N, D, D);
    dit_lora_fwd(p, blk, BT_SK_W, s->k, s->m1, N, D, D);
    dit_lora_fwd(p, blk, BT_SV_W, s->v, s->m1, N, D, D);
    be->rmsnorm_rope_fwd(be, s->qr, s->rstdq, s->q, W(BT_SNQ), cs, sn, B, L, H, Dh, eps);
    be->rmsnorm_rope_fwd(be, s->kr, s->rstdk, s->k, W(BT_SNK), cs, sn, B, L, H, Dh, eps);
    if (!att_kept) dit_self_att_fwd(p, s->a, s->lse1, s->qr, s->kr, s->v, B, L, scale);
    dit_lin_fwd(p, blk, BT_SO_W, s->o, s->a, N, D, D);
    dit_lora_fwd(p, blk, BT_SO_W, s->o, s->a, N, D, D);
    be->gated_add_fwd(be, s->x1, x, gate1, s->o, R, per, D);

    /* cross-attention to the caption */
    be->layernorm_fwd(be, s->h3, s->mean3, s->rstd3, s->x1, W(BT_N3_W), W(BT_N3_B), N, D, eps);
    dit_lin_fwd(p, blk, BT_CQ_W, s->cq, s->h3, N, D, D);
    dit_lora_fwd(p, blk, BT_CQ_W, s->cq, s->h3, N, D, D);
    be->rmsnorm_fwd(be, s->cqr, s->rstdcq, s->cq, W(BT_CNQ), N, D, eps);
    if (p->fp8) {
        dit_lin_fwd(p, blk, BT_CK_W, s->ck, ctx, Nt, D, D);
        dit_lin_fwd(p, blk, BT_CV_W, s->cv, ctx, Nt, D, D);
    } else {
        be->matmul_batch_fwd(be, s->ck, ctx, W(BT_CK_W), W(BT_CK_B), Nt, D, D, 2,
                             wstride_of(p, blk, BT_CK_W, BT_CV_W), stride_of(s->ck, s->cv, s->ckr, as));
    }
    dit_lora_fwd(p, blk, BT_CK_W, s->ck, ctx, Nt, D, D);
    dit_lora_fwd(p, blk, BT_CV_W, s->cv, ctx, Nt, D, D);
    be->rmsnorm_fwd(be, s->ckr, s->rstdck, s->ck, W(BT_CNK), Nt, D, eps);
    be->attention_fwd(be, s->ca, s->lse2, s->cqr, s->ckr, s->cv, B, L, Lt, H, Dh, scale);
    const void *co_in = s->ca;
    if (p->pl.img) { /* the image rows: own keys and values, the same queries */
        const void *cimg = dit_at(ctx, Nt * D, as);
        dit_lin_fwd(p, blk, BT_CKI_W, s->cik, cimg, Ni, D, D);
        dit_lora_fwd(p, blk, BT_CKI_W, s->cik, cimg, Ni, D, D);
        be->rmsnorm_fwd(be, s->cikr, s->rstdcik, s->cik, W(BT_CNKI), Ni, D, eps);
        dit_lin_fwd(p, blk, BT_CVI_W, s->civ, cimg, Ni, D, D);
        dit_lora_fwd(p, blk, BT_CVI_W, s->civ, cimg, Ni, D, D);
        be->attention_fwd(be, s->cia, s->lse3, s->cqr, s->cikr, s->civ, B, L, Li, H, Dh, scale);
        be->add(be, s->cs, s->ca, s->cia, N * D);
        co_in = s->cs;
    }
    dit_lin_fwd(p, blk, BT_CO_W, p->w.fx, co_in, N, D, D);
    dit_lora_fwd(p, blk, BT_CO_W, p->w.fx, co_in, N, D, D);
    be->add(be, s->x2, s->x1, p->w.fx, N * D);

    /* MLP */
    be->ln_modulate_fwd(be, s->m2, s->mean2, s->rstd2, s->x2, shift2, scale2, R, per, D, eps);
    if (p->fp8 || dit_lora_on(p, blk, BT_F1_W)) { /* the adapter's term joins before the GELU */
        dit_lin_fwd(p, blk, BT_F1_W, s->f1, s->m2, N, D, F);
        dit_lora_fwd(p, blk, BT_F1_W, s->f1, s->m2, N, D, F);
        be->gelu_fwd(be, s->g, s->f1, N * F);
    } else {
        be->matmul_gelu_fwd(be, s->g, s->f1, s->m2, W(BT_F1_W), W(BT_F1_B), N, D, F);
    }
    dit_lin_fwd(p, blk, BT_F2_W, s->f2, s->g, N, F, D);
    dit_lora_fwd(p, blk, BT_F2_W, s->f2, s->g, N, F, D);
    if (out) be->gated_add_fwd(be, out, s->x2, gate2, s->f2, R, per, D);
}

void dit_block_fwd(vf_dit_part *p, int blk, const vf_dit_dims *d, const void *x, void *out,
                   const void *e0, const void *ctx, dit_blk_saved *s, bool att_kept)
{
    unit_key k = {.n = 0};
    key_block(&k, p, att_kept ? UNIT_FWD_KEPT : UNIT_FWD, blk, d, s);
    key_ptr(&k, x);
    key_ptr(&k, out);
    key_ptr(&k, e0);
    key_ptr(&k, ctx);
    vf_backend *be = p->be;
    do {
        if (be->graph_begin(be, k.w, k.n)) block_fwd(p, blk, d, x, out, e0, ctx, s, att_kept);
    } while (be->graph_end(be));
}

/* ------------------------------------------------------------------ backward */

static void block_bwd(vf_dit_part *p, int blk, const vf_dit_dims *d, const void *dout, void *dx,
                      void *de0, void *dctx, const void *x, const void *e0, const void *ctx,
                      const dit_blk_saved *s)
{
    vf_backend *be = p->be;
    const vf_dit_config *c = &p->pl.c;
    const size_t as = p->pl.as, gs = p->pl.gs;
    const int64_t B = d->B, L = d->L, N = B * L, Lt = c->text_len, Nt = B * Lt;
    const int64_t Li = c->img_len, Ni = B * Li;
    const int64_t D = c->dim, H = c->heads, Dh = c->head_dim, F = c->ffn;
    const float eps = c->eps, scale = (float)(1.0 / sqrt((double)Dh));
    const float *cs = p->w.rcos, *sn = p->w.rsin;
    /* the late scratch in the block's dead activations (dit_bwd_place) */
    dit_bwd_slots bs;
    dit_bwd_place(&p->pl, &bs);
    VF_ASSERT((const char *)s->g - (const char *)s->f1 ==
              (ptrdiff_t)((((size_t)(p->pl.N * F) * as) + 63) & ~(size_t)63)); /* one region */
    void *g[6];
    for (int i = 0; i < 6; i++)
        g[i] = i < 2 || bs.buf[i - 2] < 0 ? p->w.g[i] : (char *)s->f1 + bs.at[i - 2];
    void *gf0 = p->w.gf[0], *gf1 = p->w.gf[1];
    void *gc0 = p->w.gc[0], *gc1 = p->w.gc[1], *gc2 = p->w.gc[2];
    void *deb = p->w.deb;
    const vf_grad_mode WR = VF_GRAD_WRITE, ADD = VF_GRAD_ADD;

    int64_t R, per; /* the adaLN's rows: samples, or tokens (t_tokens) */
    dit_time_rows(&p->pl, d, &R, &per);
    /* per token the modulation is formed again (the per-sample one is in s) */
    const void *eb = p->pl.c.t_tokens ? modulation(p, blk, d, e0, s) : s->eb;
    dit_grains gr; /* the sums over tokens in grains (dit_red.h) */
    dit_grains_of(p, B, L, &gr);
    const void *scale1 = dit_at(eb, R * D, as), *gate1 = dit_at(eb, 2 * R * D, as),
               *scale2 = dit_at(eb, 4 * R * D, as), *gate2 = dit_at(eb, 5 * R * D, as);
    void *dshift1 = deb, *dscale1 = dit_at(deb, R * D, gs), *dgate1 = dit_at(deb, 2 * R * D, gs),
         *dshift2 = dit_at(deb, 3 * R * D, gs), *dscale2 = dit_at(deb, 4 * R * D, gs),
         *dgate2 = dit_at(deb, 5 * R * D, gs);

    /* MLP: x3 = x2 + gate2 · f2; dx = dx3 from here */
    dit_red_gated_add_bwd(p, &gr, dx, dgate2, g[0], dout, gate2, s->f2, R, per, D);
    if (p->fp8 || dit_lora_on(p, blk, BT_F2_W)) { /* the adapter's term joins before the GELU's backward */
        dit_red_lin_bwd(p, &gr, blk, BT_F2_W, gf0, g[0], s->g, F, D, WR);
        dit_red_lora_bwd(p, &gr, blk, BT_F2_W, gf0, g[0], s->g, F, D);
        be->gelu_bwd(be, gf1, gf0, s->f1, N * F); /* in place: gf1 is gf0 */
        dit_red_lin_bwd(p, &gr, blk, BT_F1_W, g[1], gf1, s->m2, D, F, WR);
    } else {
        dit_red_matmul_dgelu_bwd(p, &gr, gf1, G(BT_F1_B), G(BT_F2_W), G(BT_F2_B), g[0], s->g, W(BT_F2_W), s->f1,
                                 F, D);
        dit_red_matmul_bwd(p, &gr, g[1], G(BT_F1_W), NULL, gf1, s->m2, W(BT_F1_W), D, F, WR);
    }
    dit_red_lora_bwd(p, &gr, blk, BT_F1_W, g[1], gf1, s->m2, D, F);
    dit_red_ln_modulate_bwd(p, &gr, dx, dshift2, dscale2, g[1], s->x2, s->mean2, s->rstd2, scale2, R, per, D, eps,
                            ADD);

    /* cross-attention: x2 = x1 + co(ca [+ cia]); dx now holds dx2 = dco */
    const void *co_in = p->pl.img ? s->cs : s->ca;
    dit_red_lin_bwd(p, &gr, blk, BT_CO_W, g[0], dx, co_in, D, D, WR);
    dit_red_lora_bwd(p, &gr, blk, BT_CO_W, g[0], dx, co_in, D, D);
    dit_red_cross_attention_bwd(p, &gr, g[1], gc0, gc2, g[0], s->cqr, s->ckr, s->cv, s->ca, s->lse2, Lt, H, Dh,
                                scale);
    if (p->pl.img) { /* the image attention: its dq joins the text's, its keys' and values'
                        gradients go to the image rows of dctx */
        void *gi0 = p->w.gi[0], *gi1 = p->w.gi[1], *gi2 = p->w.gi[2];
        const void *cimg = dit_at(ctx, Nt * D, as);
        void *dcimg = dit_at(dctx, Nt * D, gs);
        dit_red_cross_attention_bwd(p, &gr, g[4], gi0, gi1, g[0], s->cqr, s->cikr, s->civ, s->cia, s->lse3, Li, H,
                                    Dh, scale);
        be->axpy(be, g[1], g[4], 1.0f, N * D);
        be->rmsnorm_bwd(be, gi2, G(BT_CNKI), gi0, s->cik, W(BT_CNKI), s->rstdcik, Ni, D);
        dit_lin_bwd(p, blk, BT_CKI_W, dcimg, gi2, cimg, Ni, D, D, ADD);
        dit_lora_bwd(p, blk, BT_CKI_W, dcimg, gi2, cimg, Ni, D, D);
        dit_lin_bwd(p, blk, BT_CVI_W, dcimg, gi1, cimg, Ni, D, D, ADD);
        dit_lora_bwd(p, blk, BT_CVI_W, dcimg, gi1, cimg, Ni, D, D);
    }
    dit_red_rmsnorm_bwd(p, &gr, g[2], G(BT_CNQ), g[1], s->cq, W(BT_CNQ), s->rstdcq, D);
    be->rmsnorm_bwd(be, gc1, G(BT_CNK), gc0, s->ck, W(BT_CNK), s->rstdck, Nt, D); /* dck */
    dit_red_lin_bwd(p, &gr, blk, BT_CQ_W, g[3], g[2], s->h3, D, D, WR);
    dit_red_lora_bwd(p, &gr, blk, BT_CQ_W, g[3], g[2], s->h3, D, D);
    if (p->fp8 || dit_lora_on(p, blk, BT_CK_W) || dit_lora_on(p, blk, BT_CV_W)) {
        dit_lin_bwd(p, blk, BT_CK_W, dctx, gc1, ctx, Nt, D, D, ADD);
        dit_lora_bwd(p, blk, BT_CK_W, dctx, gc1, ctx, Nt, D, D);
        dit_lin_bwd(p, blk, BT_CV_W, dctx, gc2, ctx, Nt, D, D, ADD);
        dit_lora_bwd(p, blk, BT_CV_W, dctx, gc2, ctx, Nt, D, D);
    } else { /* dck, dcv in gc1, gc2: one stride */
        be->matmul_batch_bwd(be, dctx, G(BT_CK_W), G(BT_CK_B), gc1, ctx, W(BT_CK_W), Nt, D, D, 2,
                             wstride_of(p, blk, BT_CK_W, BT_CV_W), stride_of(gc0, gc1, gc2, gs), ADD);
    }
    dit_red_layernorm_bwd(p, &gr, dx, G(BT_N3_W), G(BT_N3_B), g[3], s->x1, W(BT_N3_W), s->mean3, s->rstd3, D);

    /* self-attention: x1 = x + gate1 · o; dx holds dx1, which already is the residual's
     * share of dx0, hence no dx argument to gated_add_bwd */
    dit_red_gated_add_bwd(p, &gr, NULL, dgate1, g[0], dx, gate1, s->o, R, per, D);
    dit_red_lin_bwd(p, &gr, blk, BT_SO_W, g[1], g[0], s->a, D, D, WR);
    dit_red_lora_bwd(p, &gr, blk, BT_SO_W, g[1], g[0], s->a, D, D);
    dit_self_att_bwd(p, g[0], g[5], g[4], g[1], s->qr, s->kr, s->v, s->a, s->lse1, B, L, scale);
    /* dq, dk before RMSNorm+RoPE into g[2], g[3], beside dv in g[4]: one stride */
    dit_red_rmsnorm_rope_bwd(p, &gr, g[2], G(BT_SNQ), g[0], s->q, W(BT_SNQ), s->rstdq, cs, sn, H, Dh);
    dit_red_rmsnorm_rope_bwd(p, &gr, g[3], G(BT_SNK), g[5], s->k, W(BT_SNK), s->rstdk, cs, sn, H, Dh);
    if (p->fp8 || dit_lora_on(p, blk, BT_SQ_W) || dit_lora_on(p, blk, BT_SK_W) || dit_lora_on(p, blk, BT_SV_W)) {
        dit_red_lin_bwd(p, &gr, blk, BT_SQ_W, g[1], g[2], s->m1, D, D, WR);
        dit_red_lora_bwd(p, &gr, blk, BT_SQ_W, g[1], g[2], s->m1, D, D);
        dit_red_lin_bwd(p, &gr, blk, BT_SK_W, g[1], g[3], s->m1, D, D, ADD);
        dit_red_lora_bwd(p, &gr, blk, BT_SK_W, g[1], g[3], s->m1, D, D);
        dit_red_lin_bwd(p, &gr, blk, BT_SV_W, g[1], g[4], s->m1, D, D, ADD);
        dit_red_lora_bwd(p, &gr, blk, BT_SV_W, g[1], g[4], s->m1, D, D);
    } else {
        dit_red_matmul_batch_bwd(p, &gr, g[1], G(BT_SQ_W), G(BT_SQ_B), g[2], s->m1, W(BT_SQ_W), D, D, 3,
                                 wstride_of(p, blk, BT_SQ_W, BT_SK_W), stride_of(g[2], g[3], g[4], gs), WR);
    }
    dit_red_ln_modulate_bwd(p, &gr, dx, dshift1, dscale1, g[1], x, s->mean1, s->rstd1, scale1, R, per, D, eps, ADD);

    if (p->pl.c.t_tokens) { /* m[k][r] = table[k] + e0[k][r]: de0 takes deb as laid out, the
                               table the sum of its rows over the tokens */
        be->axpy(be, de0, deb, 1.0f, 6 * R * D);
        if (p->grads) {
            dit_red_rows_sum(p, &gr, p->w.dmod, deb, 6, D);
            be->axpy(be, G(BT_MOD), p->w.dmod, 1.0f, 6 * D);
        }
        return;
    }
    /* modulation: m[k][b] = table[k] + e0[b][k] */
    for (int k = 0; k < 6; k++) {
        for (int64_t b = 0; b < B; b++) {
            const void *src = dit_at(deb, (k * B + b) * D, gs);
            be->axpy(be, dit_at(de0, (b * 6 + k) * D, gs), src, 1.0f, D);
            if (p->grads) be->axpy(be, dit_at(G(BT_MOD), k * D, gs), src, 1.0f, D);
        }
    }
}

void dit_block_bwd(vf_dit_part *p, int blk, const vf_dit_dims *d, const void *dout, void *dx,
                   void *de0, void *dctx, const void *x, const void *e0, const void *ctx,
                   const dit_blk_saved *s)
{
    unit_key k = {.n = 0};
    key_block(&k, p, UNIT_BWD, blk, d, s);
    const void *ptrs[] = {dout, dx, de0, dctx, x, e0, ctx};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) key_ptr(&k, ptrs[i]);
    vf_backend *be = p->be;
    do {
        if (be->graph_begin(be, k.w, k.n)) block_bwd(p, blk, d, dout, dx, de0, dctx, x, e0, ctx, s);
    } while (be->graph_end(be));
}
