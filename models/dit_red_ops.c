/* dit_red_ops.c — the backward ops that sum over tokens, run grain by grain with their
 * running sums passed from rank to rank (dit_red.h). Each takes the op's arguments for
 * all g->B·g->L rows; the per-token outputs come out as the one call's (each row is
 * computed alone), the sums in the grains' order. Without grains, the one call. The dense
 * layers' input gradients run as one call over all rows before the grains (a call a
 * grain would pack the weight again each time), and only their weight and bias gradients
 * a grain at a time.
 */
#include "models/dit_red.h"

#include <string.h>

#define AT(ptr, elems, size) ((ptr) ? (void *)((char *)(ptr) + (size_t)(elems) * (size)) : NULL)
#define CAT(ptr, elems, size) ((ptr) ? (const void *)((const char *)(ptr) + (size_t)(elems) * (size)) : NULL)

int64_t dit_red_scratch_bytes(const dit_plan *pl)
{
    const vf_dit_config *c = &pl->c;
    int64_t Lk = c->text_len > c->img_len ? c->text_len : c->img_len;
    return (int64_t)pl->gs * (2 * c->dim + 2 * Lk * c->dim) + 4 * (int64_t)c->heads * pl->L;
}

/* Each grain call k of g in order, as gr (the ops that need scratch use p->redw, which
 * vf_dit_part_new allocates on the CPU backend) */
#define EACH_GRAIN(g, gr) \
    for (int k_ = 0, n_ = dit_grains_count(g); k_ < n_; k_++) \
        for (dit_grain gr = dit_grain_at(g, k_), *once_ = &gr; once_; once_ = NULL)

void dit_red_matmul_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, int64_t C, int64_t OC, vf_grad_mode mode)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as, gs = p->pl.gs;
    if (!g->on) {
        be->matmul_bwd(be, dinp, dw, dbias, dout, inp, w, g->B * g->L, C, OC, mode);
        return;
    }
    if (dinp) be->matmul_bwd(be, dinp, NULL, NULL, dout, NULL, w, g->B * g->L, C, OC, mode);
    if (!dw && !dbias) return;
    dit_acc a[2] = {{dw, OC * C}, {dbias, OC}};
    dit_red_enter(p, g, a, 2, true);
    EACH_GRAIN(g, gr) {
        be->matmul_bwd(be, NULL, dw, dbias, CAT(dout, gr.row * OC, gs), CAT(inp, gr.row * C, as), w, gr.rows, C, OC,
                       mode);
    }
    dit_red_leave(p, g, a, 2, true);
}

void dit_red_matmul_dgelu_bwd(vf_dit_part *p, const dit_grains *g, void *dpre, void *dbias_pre, void *dw,
                              void *dbias, const void *dout, const void *inp, const void *w, const void *pre,
                              int64_t C, int64_t OC)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as, gs = p->pl.gs;
    if (!g->on) {
        be->matmul_dgelu_bwd(be, dpre, dbias_pre, dw, dbias, dout, inp, w, pre, g->B * g->L, C, OC);
        return;
    }
    /* dpre over all rows, then its sums (dbias_pre = Σ dpre: a bias gradient) and the
     * dense layer's a grain at a time */
    be->matmul_dgelu_bwd(be, dpre, NULL, NULL, NULL, dout, inp, w, pre, g->B * g->L, C, OC);
    dit_acc a[3] = {{dbias_pre, C}, {dw, OC * C}, {dbias, OC}};
    dit_red_enter(p, g, a, 3, true);
    EACH_GRAIN(g, gr) {
        if (dbias_pre)
            be->matmul_bwd(be, NULL, NULL, dbias_pre, CAT(dpre, gr.row * C, gs), NULL, NULL, gr.rows, 0, C,
                           VF_GRAD_WRITE);
        be->matmul_bwd(be, NULL, dw, dbias, CAT(dout, gr.row * OC, gs), CAT(inp, gr.row * C, as), w, gr.rows, C, OC,
                       VF_GRAD_WRITE);
    }
    dit_red_leave(p, g, a, 3, true);
}

void dit_red_matmul_batch_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, void *dbias,
                              const void *dout, const void *inp, const void *w, int64_t C, int64_t OC, int nb,
                              int64_t wstride, int64_t ostride, vf_grad_mode mode)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as, gs = p->pl.gs;
    if (!g->on) {
        be->matmul_batch_bwd(be, dinp, dw, dbias, dout, inp, w, g->B * g->L, C, OC, nb, wstride, ostride, mode);
        return;
    }
    /* the nb weights with their biases (each bias right after its weight, wstride apart) */
    dit_acc a[8];
    int na = 0;
    for (int i = 0; i < nb && na + 2 <= 8; i++) {
        a[na++] = (dit_acc){AT(dw, i * wstride, gs), OC * C};
        a[na++] = (dit_acc){AT(dbias, i * wstride, gs), OC};
    }
    if (dinp) be->matmul_batch_bwd(be, dinp, NULL, NULL, dout, NULL, w, g->B * g->L, C, OC, nb, wstride, ostride, mode);
    if (!dw && !dbias) return;
    dit_red_enter(p, g, a, na, true);
    EACH_GRAIN(g, gr) {
        be->matmul_batch_bwd(be, NULL, dw, dbias, CAT(dout, gr.row * OC, gs), CAT(inp, gr.row * C, as), w, gr.rows,
                             C, OC, nb,
                             wstride, ostride, mode);
    }
    dit_red_leave(p, g, a, na, true);
}

void dit_red_lin_bwd(vf_dit_part *p, const dit_grains *g, int blk, int k, void *dinp, const void *dout,
                     const void *in, int64_t C, int64_t OC, vf_grad_mode mode)
{
    const int i = dit_tidx_block(blk, k);
    if (!g->on || p->fp8 || (!dit_g(p, i) && !dit_g(p, i + 1))) { /* nothing sums over tokens */
        dit_lin_bwd(p, blk, k, dinp, dout, in, g->B * g->L, C, OC, mode);
        return;
    }
    dit_red_matmul_bwd(p, g, dinp, dit_g(p, i), dit_g(p, i + 1), dout, in, dit_w(p, i), C, OC, mode);
}

void dit_red_lora_bwd(vf_dit_part *p, const dit_grains *g, int blk, int k, void *dx, const void *dy, const void *x,
                      int64_t in, int64_t out)
{
    const size_t as = p->pl.as, gs = p->pl.gs;
    if (!dit_lora_on(p, blk, k)) return;
    if (!g->on) {
        dit_lora_bwd(p, blk, k, dx, dy, x, g->B * g->L, in, out);
        return;
    }
    dit_acc a[2];
    dit_lora_grads(p, blk, k, &a[0].p, &a[0].n, &a[1].p, &a[1].n);
    dit_red_enter(p, g, a, 2, true);
    EACH_GRAIN(g, gr) {
        dit_lora_bwd(p, blk, k, AT(dx, gr.row * in, gs), CAT(dy, gr.row * out, gs), CAT(x, gr.row * in, as), gr.rows,
                     in, out);
    }
    dit_red_leave(p, g, a, 2, true);
}

void dit_red_layernorm_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, void *db, const void *dout,
                           const void *inp, const void *w, const float *mean, const float *rstd, int64_t C)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as, gs = p->pl.gs;
    if (!g->on) {
        be->layernorm_bwd(be, dinp, dw, db, dout, inp, w, mean, rstd, g->B * g->L, C);
        return;
    }
    dit_acc a[2] = {{dw, C}, {db, C}};
    dit_red_enter(p, g, a, 2, true);
    EACH_GRAIN(g, gr) {
        be->layernorm_bwd(be, AT(dinp, gr.row * C, gs), dw, db, CAT(dout, gr.row * C, gs), CAT(inp, gr.row * C, as), w,
                          mean + gr.row, rstd + gr.row, gr.rows, C);
    }
    dit_red_leave(p, g, a, 2, true);
}

void dit_red_rmsnorm_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, const void *dout,
                         const void *inp, const void *w, const float *rstd, int64_t C)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as, gs = p->pl.gs;
    if (!g->on) {
        be->rmsnorm_bwd(be, dinp, dw, dout, inp, w, rstd, g->B * g->L, C);
        return;
    }
    dit_acc a[1] = {{dw, C}};
    dit_red_enter(p, g, a, 1, true);
    EACH_GRAIN(g, gr) {
        be->rmsnorm_bwd(be, AT(dinp, gr.row * C, gs), dw, CAT(dout, gr.row * C, gs), CAT(inp, gr.row * C, as), w,
                        rstd + gr.row, gr.rows, C);
    }
    dit_red_leave(p, g, a, 1, true);
}

void dit_red_rmsnorm_rope_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, const void *dout,
                              const void *inp, const void *w, const float *rstd, const float *cs, const float *sn,
                              int64_t H, int64_t D)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as, gs = p->pl.gs;
    if (!g->on) {
        be->rmsnorm_rope_bwd(be, dinp, dw, dout, inp, w, rstd, cs, sn, g->B, g->L, H, D);
        return;
    }
    const int64_t C = H * D, half = D / 2;
    dit_acc a[1] = {{dw, C}};
    dit_red_enter(p, g, a, 1, true);
    EACH_GRAIN(g, gr) {
        be->rmsnorm_rope_bwd(be, AT(dinp, gr.row * C, gs), dw, CAT(dout, gr.row * C, gs), CAT(inp, gr.row * C, as), w,
                             rstd + gr.row, cs + gr.tok * half, sn + gr.tok * half, 1, gr.rows, H, D);
    }
    dit_red_leave(p, g, a, 1, true);
}

void dit_red_ln_modulate_bwd(vf_dit_part *p, const dit_grains *g, void *dx, void *dshift, void *dscale,
                             const void *dout, const void *x, const float *mean, const float *rstd, const void *scale,
                             int64_t R, int64_t per, int64_t C, float eps, vf_grad_mode mode)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as, gs = p->pl.gs;
    char *tmp = g->on && !p->pl.c.t_tokens ? p->redw : NULL;
    if (!tmp) { /* one call; or a time row a token: its sums are the token's own */
        be->ln_modulate_bwd(be, dx, dshift, dscale, dout, x, mean, rstd, scale, R, per, C, eps, mode);
        return;
    }
    dit_acc a[2] = {{dshift, R * C}, {dscale, R * C}};
    dit_red_enter(p, g, a, 2, false);
    void *ts = tmp, *tc = tmp + C * gs;
    EACH_GRAIN(g, gr) {
        be->ln_modulate_bwd(be, AT(dx, gr.row * C, gs), dshift ? ts : NULL, dscale ? tc : NULL,
                            CAT(dout, gr.row * C, gs), CAT(x, gr.row * C, as), mean + gr.row, rstd + gr.row,
                            CAT(scale, gr.b * C, as), 1, gr.rows, C, eps, mode);
        if (dshift) be->axpy(be, AT(dshift, gr.b * C, gs), ts, 1.0f, C);
        if (dscale) be->axpy(be, AT(dscale, gr.b * C, gs), tc, 1.0f, C);
    }
    dit_red_leave(p, g, a, 2, false);
}

void dit_red_gated_add_bwd(vf_dit_part *p, const dit_grains *g, void *dx, void *dgate, void *dy, const void *dout,
                           const void *gate, const void *y, int64_t R, int64_t per, int64_t C)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as, gs = p->pl.gs;
    char *tmp = g->on && !p->pl.c.t_tokens ? p->redw : NULL;
    if (!tmp) {
        be->gated_add_bwd(be, dx, dgate, dy, dout, gate, y, R, per, C);
        return;
    }
    dit_acc a[1] = {{dgate, R * C}};
    dit_red_enter(p, g, a, 1, false);
    EACH_GRAIN(g, gr) {
        be->gated_add_bwd(be, AT(dx, gr.row * C, gs), dgate ? tmp : NULL, AT(dy, gr.row * C, gs),
                          CAT(dout, gr.row * C, gs), CAT(gate, gr.b * C, as), CAT(y, gr.row * C, as), 1, gr.rows, C);
        if (dgate) be->axpy(be, AT(dgate, gr.b * C, gs), tmp, 1.0f, C);
    }
    dit_red_leave(p, g, a, 1, false);
}

void dit_red_cross_attention_bwd(vf_dit_part *p, const dit_grains *g, void *dq, void *dk, void *dv,
                                 const void *dout, const void *q, const void *k, const void *v, const void *out,
                                 const float *lse, int64_t Lk, int64_t H, int64_t Dh, float scale)
{
    vf_backend *be = p->be;
    const size_t as = p->pl.as, gs = p->pl.gs;
    const int64_t B = g->B, Lq = g->L, C = H * Dh;
    char *tmp = g->on ? p->redw : NULL;
    if (!tmp) {
        be->attention_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, B, Lq, Lk, H, Dh, scale);
        return;
    }
    dit_acc a[2] = {{dk, B * Lk * C}, {dv, B * Lk * C}};
    dit_red_enter(p, g, a, 2, false);
    char *tk = tmp + 2 * C * gs, *tv = tk + Lk * C * gs;
    float *tl = (float *)(tv + Lk * C * gs);
    EACH_GRAIN(g, gr) {
        const int64_t lo = gr.row - gr.b * Lq;
        for (int64_t h = 0; h < H; h++)
            memcpy(tl + h * gr.rows, lse + (gr.b * H + h) * Lq + lo, sizeof(float) * (size_t)gr.rows);
        be->attention_bwd(be, AT(dq, gr.row * C, gs), dk ? tk : NULL, dv ? tv : NULL, CAT(dout, gr.row * C, gs),
                          CAT(q, gr.row * C, as), CAT(k, gr.b * Lk * C, as), CAT(v, gr.b * Lk * C, as),
                          CAT(out, gr.row * C, as), tl, 1, gr.rows, Lk, H, Dh, scale);
        if (dk) be->axpy(be, AT(dk, gr.b * Lk * C, gs), tk, 1.0f, Lk * C);
        if (dv) be->axpy(be, AT(dv, gr.b * Lk * C, gs), tv, 1.0f, Lk * C);
    }
    dit_red_leave(p, g, a, 2, false);
}

void dit_red_rows_sum(vf_dit_part *p, const dit_grains *g, void *sum, const void *rowsv, int nk, int64_t C)
{
    vf_backend *be = p->be;
    const size_t gs = p->pl.gs;
    const int64_t R = g->B * g->L;
    char *tmp = g->on ? p->redw : NULL;
    if (!tmp) {
        be->modulate_bwd(be, NULL, sum, NULL, rowsv, rowsv, p->w.zeros, nk, R, C);
        return;
    }
    dit_acc a[1] = {{sum, nk * C}};
    dit_red_enter(p, g, a, 1, false);
    EACH_GRAIN(g, gr) {
        for (int k = 0; k < nk; k++) {
            const void *src = CAT(rowsv, (k * R + gr.row) * C, gs);
            be->modulate_bwd(be, NULL, tmp, NULL, src, src, p->w.zeros, 1, gr.rows, C);
            be->axpy(be, AT(sum, k * C, gs), tmp, 1.0f, C);
        }
    }
    dit_red_leave(p, g, a, 1, false);
}
