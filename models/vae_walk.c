/* vae_walk.c — the layers both streaming VAE halves share (vae_walk.h): buffer picks,
 * parameters in table order, causal caches, norm, convs, residual block, attention. */
#include "models/vae_walk.h"

#include <math.h>
#include <string.h>

void vf_vw_measuring(vf_vw_walk *w, const vf_vae_config *c, int64_t B, vf_vw_lstate *ls,
                     vf_conv3d_shape *shapes, int cap)
{
    memset(w, 0, sizeof *w);
    w->c = c;
    w->B = B;
    w->ls_out = ls;
    w->shapes = shapes;
    w->shapes_cap = cap;
}

int vf_vw_pick(vf_vw_walk *w, unsigned busy, int64_t elems)
{
    for (int i = 0; i < VF_VW_NBUF; i++) {
        if (busy & vf_vw_bit(i)) continue;
        if (!w->e) {
            if (elems > w->need[i]) w->need[i] = elems;
        } else {
            VF_ASSERT(elems <= w->e->cap[i]);
        }
        return i;
    }
    VF_ASSERT(!"vae: more live buffers than VF_VW_NBUF");
    return -1;
}

char *vf_vw_bp(vf_vw_walk *w, int b) { return b == VF_VW_IN ? w->e->in : w->e->buf[b]; }

/* Next parameter in table order; the suffix check catches a walk that drifted from
 * build_table (vae.c). */
const void *vf_vw_param(vf_vw_walk *w, const char *suffix)
{
    int i = w->pi++;
    if (!w->e) return NULL;
    const vf_vae_param *p = vf_vae_param_at(w->e->m, i);
    VF_ASSERT(p != NULL);
    size_t ln = strlen(p->name), ls = strlen(suffix);
    VF_ASSERT(ln >= ls && strcmp(p->name + ln - ls, suffix) == 0);
    return (char *)vf_vae_weights(w->e->m) + p->offset * (int64_t)w->e->es;
}

vf_vw_lstate *vf_vw_state(vf_vw_walk *w, int64_t cache_elems)
{
    int i = w->si++;
    if (!w->e) {
        if (w->ls_out) w->ls_out[i].cache_off = w->cache_elems;
        w->cache_elems += cache_elems;
        return NULL;
    }
    VF_ASSERT(i < w->e->nstate);
    return &w->e->ls[i];
}

void vf_vw_copy_frames(vf_vw_walk *w, char *dst, int64_t Td, int64_t td0, const char *src,
                        int64_t Ts, int64_t ts0, int64_t nt, int64_t BC, int64_t hw)
{
    vf_backend *be = w->e->be;
    int64_t es = (int64_t)w->e->es;
    if (nt <= 0) return;
    if (Td == nt && Ts == nt) {
        be->copy(be, dst, src, (size_t)(BC * nt * hw * es));
        return;
    }
    be->copy2d(be, dst + td0 * hw * es, (size_t)(Td * hw * es), src + ts0 * hw * es,
               (size_t)(Ts * hw * es), (size_t)(nt * hw * es), (size_t)BC);
}

void vf_vw_conv(vf_vw_walk *w, int out, int in, const void *wt, const void *bias,
                const vf_conv3d_shape *s)
{
    if (!w->e) {
        const vf_device cuda = {VF_DEV_CUDA, 0};
        int64_t ws = vf_conv3d_workspace_bound(cuda, s);
        if (ws > w->conv_ws) w->conv_ws = ws;
        if (w->shapes && w->nconv < w->shapes_cap) w->shapes[w->nconv] = *s;
        w->nconv++;
        return;
    }
    vf_backend *be = w->e->be;
    be->conv3d_fwd(be, vf_vw_bp(w, out), vf_vw_bp(w, in), wt, bias, s->B, s->C, s->T, s->H, s->W,
                   s->OC, s->KT, s->KH, s->KW, s->st, s->sh, s->sw, s->pt0, s->pt1, s->ph0, s->ph1,
                   s->pw0, s->pw1);
}

/* silu(rmsnorm_ch(x) * gamma) into a new buffer; x stays. */
vf_vw_act vf_vw_norm_silu(vf_vw_walk *w, vf_vw_act x, unsigned busy, int silu)
{
    const void *g = vf_vw_param(w, "gamma");
    int64_t S = x.n * x.H * x.W;
    vf_vw_act a = x;
    a.buf = vf_vw_pick(w, busy | vf_vw_bit(x.buf), w->B * x.C * S);
    if (w->e) {
        vf_backend *be = w->e->be;
        be->rmsnorm_ch_fwd(be, vf_vw_bp(w, a.buf), vf_vw_bp(w, x.buf), g, w->B, x.C, S, w->c->eps);
        if (silu) be->silu_fwd(be, vf_vw_bp(w, a.buf), vf_vw_bp(w, a.buf), w->B * x.C * S);
    }
    return a;
}

/* Causal conv 3x3x3 (spatial padding 1) of a (consumed), with its 2-frame cache. */
vf_vw_act vf_vw_conv3(vf_vw_walk *w, vf_vw_act a, int64_t cout, unsigned busy)
{
    const void *wt = vf_vw_param(w, "weight"), *bias = vf_vw_param(w, "bias");
    int64_t hw = a.H * a.W, L = a.n + 2, BC = w->B * a.C;
    vf_vw_lstate *s = vf_vw_state(w, w->B * a.C * 2 * hw);
    int p = vf_vw_pick(w, busy | vf_vw_bit(a.buf), BC * L * hw);
    int o = vf_vw_pick(w, busy | vf_vw_bit(p), w->B * cout * a.n * hw);
    if (w->e) {
        char *cache = vf_vw_cache(w, s);
        vf_vw_copy_frames(w, vf_vw_bp(w, p), L, 0, cache, 2, 0, 2, BC, hw);
        vf_vw_copy_frames(w, vf_vw_bp(w, p), L, 2, vf_vw_bp(w, a.buf), a.n, 0, a.n, BC, hw);
        vf_vw_copy_frames(w, cache, 2, 0, vf_vw_bp(w, p), L, a.n, 2, BC, hw);
    }
    const vf_conv3d_shape cs = {w->B, a.C, L, a.H, a.W, cout, 3, 3, 3, 1, 1, 1, 0, 0, 1, 1, 1, 1};
    vf_vw_conv(w, o, p, wt, bias, &cs);
    return (vf_vw_act){o, cout, a.n, a.H, a.W};
}

/* Pointwise conv (no time context, no cache); x stays. */
vf_vw_act vf_vw_conv1x1(vf_vw_walk *w, vf_vw_act x, int64_t cout, unsigned busy)
{
    const void *wt = vf_vw_param(w, "weight"), *bias = vf_vw_param(w, "bias");
    int o = vf_vw_pick(w, busy | vf_vw_bit(x.buf), w->B * cout * x.n * x.H * x.W);
    const vf_conv3d_shape cs = {w->B, x.C, x.n, x.H, x.W, cout, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
    vf_vw_conv(w, o, x.buf, wt, bias, &cs);
    return (vf_vw_act){o, cout, x.n, x.H, x.W};
}

vf_vw_act vf_vw_resblock(vf_vw_walk *w, vf_vw_act x, int64_t cout, unsigned busy)
{
    unsigned keep = busy | vf_vw_bit(x.buf);
    vf_vw_act h = vf_vw_conv3(w, vf_vw_norm_silu(w, x, keep, 1), cout, keep);
    h = vf_vw_conv3(w, vf_vw_norm_silu(w, h, keep, 1), cout, keep);
    vf_vw_act s = x;
    if (x.C != cout) s = vf_vw_conv1x1(w, x, cout, busy | vf_vw_bit(h.buf));
    if (w->e) {
        vf_backend *be = w->e->be;
        be->add(be, vf_vw_bp(w, h.buf), vf_vw_bp(w, h.buf), vf_vw_bp(w, s.buf),
                w->B * cout * h.n * h.H * h.W);
    }
    return h;
}

/* Middle block attention: one head over the H·W positions of each frame (Wan's
 * AttentionBlock), residual added. */
vf_vw_act vf_vw_attn(vf_vw_walk *w, vf_vw_act x, unsigned busy)
{
    vf_vw_act a = vf_vw_norm_silu(w, x, busy, 0);
    const void *wqkv = vf_vw_param(w, "weight"), *bqkv = vf_vw_param(w, "bias");
    const void *wp = vf_vw_param(w, "weight"), *bpj = vf_vw_param(w, "bias");
    int64_t C = x.C, L = x.H * x.W, frames = w->B * x.n, tok = frames * L;
    unsigned keep = busy | vf_vw_bit(x.buf);
    int t = vf_vw_pick(w, keep | vf_vw_bit(a.buf), tok * C);
    int q = vf_vw_pick(w, keep | vf_vw_bit(t), tok * C);
    int k = vf_vw_pick(w, keep | vf_vw_bit(t) | vf_vw_bit(q), tok * C);
    int v = vf_vw_pick(w, keep | vf_vw_bit(t) | vf_vw_bit(q) | vf_vw_bit(k), tok * C);
    int pj = vf_vw_pick(w, keep | vf_vw_bit(t), tok * C);
    int o = vf_vw_pick(w, keep | vf_vw_bit(pj), tok * C);
    if (!w->e) {
        if (tok > w->need_lse) w->need_lse = tok;
    } else {
        vf_backend *be = w->e->be;
        int64_t es = (int64_t)w->e->es;
        VF_ASSERT(tok <= w->e->lse_cap);
        int64_t shp[3] = {w->B, C, x.n * L};
        int perm[3] = {0, 2, 1};
        be->permute(be, vf_vw_bp(w, t), vf_vw_bp(w, a.buf), 3, shp, perm); /* (B, n·L, C) */
        /* to_qkv rows: [q (C) | k (C) | v (C)], as Wan's chunk(3, dim=-1) */
        be->matmul_fwd(be, vf_vw_bp(w, q), vf_vw_bp(w, t), wqkv, bqkv, tok, C, C);
        be->matmul_fwd(be, vf_vw_bp(w, k), vf_vw_bp(w, t), (const char *)wqkv + C * C * es,
                       (const char *)bqkv + C * es, tok, C, C);
        be->matmul_fwd(be, vf_vw_bp(w, v), vf_vw_bp(w, t), (const char *)wqkv + 2 * C * C * es,
                       (const char *)bqkv + 2 * C * es, tok, C, C);
        be->attention_fwd(be, vf_vw_bp(w, t), w->e->lse, vf_vw_bp(w, q), vf_vw_bp(w, k),
                          vf_vw_bp(w, v), frames, L, L, 1, C, (float)(1.0 / sqrt((double)C)));
        be->matmul_fwd(be, vf_vw_bp(w, pj), vf_vw_bp(w, t), wp, bpj, tok, C, C);
        int64_t shp2[3] = {w->B, x.n * L, C};
        be->permute(be, vf_vw_bp(w, o), vf_vw_bp(w, pj), 3, shp2, perm); /* back to (B, C, n·L) */
        be->add(be, vf_vw_bp(w, o), vf_vw_bp(w, o), vf_vw_bp(w, x.buf), tok * C);
    }
    return (vf_vw_act){o, C, x.n, x.H, x.W};
}


char *vf_vw_cache(vf_vw_walk *w, const vf_vw_lstate *s)
{
    return (char *)w->e->cache + s->cache_off * (int64_t)w->e->es;
}

int64_t vf_vw_bytes(const vf_vw_walk *m, size_t elem, int64_t in_elems)
{
    int64_t b = (m->cache_elems + in_elems) * (int64_t)elem + (int64_t)sizeof(float) * m->need_lse;
    for (int i = 0; i < VF_VW_NBUF; i++) b += m->need[i] * (int64_t)elem;
    return b;
}

int vf_vw_alloc(vf_vw_ws *ws, const vf_vw_walk *m, int64_t in_elems, vf_status *st)
{
    vf_backend *be = ws->be;
    for (int i = 0; i < VF_VW_NBUF; i++) {
        ws->cap[i] = m->need[i];
        if (m->need[i] && !(ws->buf[i] = be->alloc(be, (size_t)m->need[i] * ws->es, st)))
            return -1;
    }
    ws->nstate = m->si;
    ws->cache_elems = m->cache_elems;
    ws->lse_cap = m->need_lse;
    ws->in_elems = in_elems;
    if (!(ws->cache = be->alloc(be, (size_t)m->cache_elems * ws->es, st)) ||
        !(ws->lse = be->alloc(be, sizeof(float) * (size_t)(m->need_lse ? m->need_lse : 1), st)) ||
        !(ws->in = be->alloc(be, (size_t)in_elems * ws->es, st)))
        return -1;
    ws->bytes = vf_vw_bytes(m, ws->es, in_elems);
    return 0;
}

void vf_vw_free(vf_vw_ws *ws)
{
    vf_backend *be = ws->be;
    if (!be) return;
    for (int i = 0; i < VF_VW_NBUF; i++)
        if (ws->buf[i]) be->free(be, ws->buf[i]);
    if (ws->cache) be->free(be, ws->cache);
    if (ws->lse) be->free(be, ws->lse);
    if (ws->in) be->free(be, ws->in);
}

void vf_vw_reset(vf_vw_ws *ws)
{
    ws->be->memset0(ws->be, ws->cache, (size_t)ws->cache_elems * ws->es);
    for (int i = 0; i < ws->nstate; i++) ws->ls[i].pending = ws->ls[i].started = 0;
}
