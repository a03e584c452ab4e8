/* vae_enc.c — the streaming causal VAE encoder: chunk by chunk, with per-layer caches.
 *
 * One walker drives the network in two modes. Measuring (no encoder): it runs the
 * structure with the worst frame count each level can see for a chunk and records how
 * large each work buffer, the causal caches and the attention statistics must be; that
 * gives both vf_vae_mem (the stage's memory hook) and the allocation of vf_vae_enc_new,
 * so declared and allocated bytes cannot drift apart. Running: the same walk calls the
 * backend ops on a chunk's frames; buffer choice is a pure function of the structure
 * (pick: lowest free index), so a buffer is never used above its measured size
 * (VF_ASSERTed).
 *
 * Activations are channel-first (B, C, n, H, W): n is the number of frames of this chunk
 * at that depth (it shrinks at temporal downsamples, and may reach 0, in which case the
 * chunk produces no latent frame and the deeper layers are not run). Every causal conv
 * gets its input as [cache (2 frames) | n frames] and keeps the last two for the next
 * chunk; the temporal downsample keeps its 1-2 pending frames. See vae.h for the maths.
 */
#include "models/vae.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define NBUF 6
#define IN_BUF NBUF /* index of the input buffer; pick never returns it */

typedef struct lstate {
    int64_t cache_off; /* elements into the cache block */
    int pending;       /* temporal downsample: frames waiting in its cache */
    int started;       /* temporal downsample: frame 0 went through */
} lstate;

struct vf_vae_enc {
    vf_vae *m;
    vf_backend *be;
    const vf_vae_config *cfg;
    size_t es;
    int max_batch, chunk, H, W;
    void *buf[NBUF];
    int64_t cap[NBUF];     /* elements */
    float *lse;            /* attention log-sum-exp, device f32 */
    int64_t lse_cap;
    void *cache;           /* every causal cache, one block */
    int64_t cache_elems;
    int nstate;
    lstate *ls;
    void *in;              /* (batch, 3, n, H, W) of the next chunk */
    float *stage;          /* host (3, chunk, H, W) staging for u8 conversion */
    uint8_t *in_set;       /* per clip: input given for the next chunk */
    int in_n;
    int64_t bytes;
    /* the current micro-batch */
    int active, batch;
    int64_t T, Tlat, t_fed, t_out;
};

typedef struct act {
    int buf;
    int64_t C, n, H, W;
} act;

typedef struct walk {
    vf_vae_enc *e;              /* NULL while measuring */
    const vf_vae_config *c;
    int64_t B;
    int pi, si;                 /* next parameter / layer state */
    /* measuring */
    int64_t need[NBUF], need_lse, cache_elems;
    lstate *ls_out;             /* when set, cache offsets are recorded here */
} walk;

static unsigned bit(int b) { return 1u << b; }

static int pick(walk *w, unsigned busy, int64_t elems)
{
    for (int i = 0; i < NBUF; i++) {
        if (busy & bit(i)) continue;
        if (!w->e) {
            if (elems > w->need[i]) w->need[i] = elems;
        } else {
            VF_ASSERT(elems <= w->e->cap[i]);
        }
        return i;
    }
    VF_ASSERT(!"vae: more live buffers than NBUF");
    return -1;
}

static char *bp(walk *w, int b) { return b == IN_BUF ? w->e->in : w->e->buf[b]; }

/* Next parameter in table order; the suffix check catches a walk that drifted from
 * build_table (vae.c). */
static const void *param(walk *w, const char *suffix)
{
    int i = w->pi++;
    if (!w->e) return NULL;
    const vf_vae_param *p = vf_vae_param_at(w->e->m, i);
    VF_ASSERT(p != NULL);
    size_t ln = strlen(p->name), ls = strlen(suffix);
    VF_ASSERT(ln >= ls && strcmp(p->name + ln - ls, suffix) == 0);
    return (char *)vf_vae_weights(w->e->m) + p->offset * (int64_t)w->e->es;
}

static lstate *state(walk *w, int64_t cache_elems)
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

/* dst[b, c, td0 + t] = src[b, c, ts0 + t] for t < nt; frames of hw elements, Td / Ts
 * frames per (b, c) plane. */
static void copy_frames(walk *w, char *dst, int64_t Td, int64_t td0, const char *src,
                        int64_t Ts, int64_t ts0, int64_t nt, int64_t BC, int64_t hw)
{
    vf_backend *be = w->e->be;
    int64_t es = (int64_t)w->e->es;
    if (nt <= 0) return;
    if (Td == nt && Ts == nt) {
        be->copy(be, dst, src, (size_t)(BC * nt * hw * es));
        return;
    }
    for (int64_t i = 0; i < BC; i++)
        be->copy(be, dst + ((i * Td + td0) * hw) * es, src + ((i * Ts + ts0) * hw) * es,
                 (size_t)(nt * hw * es));
}

/* silu(rmsnorm_ch(x) * gamma) into a new buffer; x stays. */
static act norm_silu(walk *w, act x, unsigned busy, int silu)
{
    const void *g = param(w, "gamma");
    int64_t S = x.n * x.H * x.W;
    act a = x;
    a.buf = pick(w, busy | bit(x.buf), w->B * x.C * S);
    if (w->e) {
        vf_backend *be = w->e->be;
        be->rmsnorm_ch_fwd(be, bp(w, a.buf), bp(w, x.buf), g, w->B, x.C, S, w->c->eps);
        if (silu) be->silu_fwd(be, bp(w, a.buf), bp(w, a.buf), w->B * x.C * S);
    }
    return a;
}

/* Causal conv 3x3x3 (spatial padding 1) of a (consumed), with its 2-frame cache. */
static act conv3(walk *w, act a, int64_t cout, unsigned busy)
{
    const void *wt = param(w, "weight"), *bias = param(w, "bias");
    int64_t hw = a.H * a.W, L = a.n + 2, BC = w->B * a.C;
    lstate *s = state(w, w->B * a.C * 2 * hw);
    int p = pick(w, busy | bit(a.buf), BC * L * hw);
    int o = pick(w, busy | bit(p), w->B * cout * a.n * hw);
    if (w->e) {
        vf_backend *be = w->e->be;
        char *cache = (char *)w->e->cache + s->cache_off * (int64_t)w->e->es;
        copy_frames(w, bp(w, p), L, 0, cache, 2, 0, 2, BC, hw);
        copy_frames(w, bp(w, p), L, 2, bp(w, a.buf), a.n, 0, a.n, BC, hw);
        copy_frames(w, cache, 2, 0, bp(w, p), L, a.n, 2, BC, hw);
        be->conv3d_fwd(be, bp(w, o), bp(w, p), wt, bias, w->B, a.C, L, a.H, a.W, cout, 3, 3, 3,
                       1, 1, 1, 0, 0, 1, 1);
    }
    return (act){o, cout, a.n, a.H, a.W};
}

/* Pointwise conv (no time context, no cache); x stays. */
static act conv1x1(walk *w, act x, int64_t cout, unsigned busy)
{
    const void *wt = param(w, "weight"), *bias = param(w, "bias");
    int o = pick(w, busy | bit(x.buf), w->B * cout * x.n * x.H * x.W);
    if (w->e)
        w->e->be->conv3d_fwd(w->e->be, bp(w, o), bp(w, x.buf), wt, bias, w->B, x.C, x.n, x.H,
                             x.W, cout, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
    return (act){o, cout, x.n, x.H, x.W};
}

static act resblock(walk *w, act x, int64_t cout, unsigned busy)
{
    unsigned keep = busy | bit(x.buf);
    act h = conv3(w, norm_silu(w, x, keep, 1), cout, keep);
    h = conv3(w, norm_silu(w, h, keep, 1), cout, keep);
    act s = x;
    if (x.C != cout) s = conv1x1(w, x, cout, busy | bit(h.buf));
    if (w->e) {
        vf_backend *be = w->e->be;
        be->add(be, bp(w, h.buf), bp(w, h.buf), bp(w, s.buf), w->B * cout * h.n * h.H * h.W);
    }
    return h;
}

/* Wan's downsample2d: ZeroPad2d((0, 1, 0, 1)) then conv 3x3 stride 2, per frame. */
static act down2d(walk *w, act x, unsigned busy)
{
    const void *wt = param(w, "weight"), *bias = param(w, "bias");
    int64_t Hp = x.H + 1, Wp = x.W + 1, planes = w->B * x.C * x.n;
    int p = pick(w, busy | bit(x.buf), planes * Hp * Wp);
    int o = pick(w, busy | bit(p), w->B * x.C * x.n * (x.H / 2) * (x.W / 2));
    if (w->e) {
        vf_backend *be = w->e->be;
        int64_t es = (int64_t)w->e->es;
        char *P = bp(w, p), *X = bp(w, x.buf);
        be->memset0(be, P, (size_t)(planes * Hp * Wp * es));
        for (int64_t i = 0; i < planes; i++)
            for (int64_t r = 0; r < x.H; r++)
                be->copy(be, P + (i * Hp * Wp + r * Wp) * es, X + (i * x.H * x.W + r * x.W) * es,
                         (size_t)(x.W * es));
        be->conv3d_fwd(be, bp(w, o), P, wt, bias, w->B, x.C, x.n, Hp, Wp, x.C, 1, 3, 3, 1, 2, 2,
                       0, 0, 0, 0);
    }
    return (act){o, x.C, x.n, x.H / 2, x.W / 2};
}

/* Temporal downsample: y_0 = x_0, y_j = conv(x_{2j-2}, x_{2j-1}, x_{2j}) (kernel 3x1x1,
 * stride 2). State: whether x_0 went through, and the 1-2 frames from x_{2j} on that the
 * next output needs. The result is always in buffer `o` so later picks do not depend
 * on the data. */
static act tdown(walk *w, act x, unsigned busy)
{
    const void *wt = param(w, "weight"), *bias = param(w, "bias");
    int64_t hw = x.H * x.W, BC = w->B * x.C;
    lstate *s = state(w, BC * 2 * hw);
    int64_t L, outs, nout;
    int first = 0, pend = 0;
    if (!w->e) {
        L = x.n + 2;
        outs = nout = (x.n + 1) / 2; /* the most any chunk of n frames can give */
    } else {
        first = !s->started;
        pend = first ? 0 : s->pending;
        L = pend + x.n;
        outs = L >= 3 ? (L - 3) / 2 + 1 : 0;
        nout = outs + first;
    }
    int p = pick(w, busy | bit(x.buf), BC * L * hw);
    int r = pick(w, busy | bit(x.buf) | bit(p), BC * outs * hw);
    int o = pick(w, busy | bit(p) | bit(r), BC * nout * hw);
    if (w->e) {
        vf_backend *be = w->e->be;
        char *cache = (char *)w->e->cache + s->cache_off * (int64_t)w->e->es;
        char *P = bp(w, p);
        copy_frames(w, P, L, 0, cache, 2, 0, pend, BC, hw);
        copy_frames(w, P, L, pend, bp(w, x.buf), x.n, 0, x.n, BC, hw);
        if (outs > 0)
            be->conv3d_fwd(be, bp(w, first ? r : o), P, wt, bias, w->B, x.C, L, x.H, x.W, x.C, 3,
                           1, 1, 2, 1, 1, 0, 0, 0, 0);
        if (first) {
            copy_frames(w, bp(w, o), nout, 0, P, L, 0, 1, BC, hw);
            copy_frames(w, bp(w, o), nout, 1, bp(w, r), outs, 0, outs, BC, hw);
        }
        int64_t newp = L - 2 * outs;
        VF_ASSERT(newp >= 1 && newp <= 2);
        copy_frames(w, cache, 2, 0, P, L, 2 * outs, newp, BC, hw);
        s->pending = (int)newp;
        s->started = 1;
    }
    return (act){o, x.C, nout, x.H, x.W};
}

/* Middle block attention: one head over the H·W positions of each frame (Wan's
 * AttentionBlock), residual added. */
static act attn(walk *w, act x, unsigned busy)
{
    act a = norm_silu(w, x, busy, 0);
    const void *wqkv = param(w, "weight"), *bqkv = param(w, "bias");
    const void *wp = param(w, "weight"), *bpj = param(w, "bias");
    int64_t C = x.C, L = x.H * x.W, frames = w->B * x.n, tok = frames * L;
    unsigned keep = busy | bit(x.buf);
    int t = pick(w, keep | bit(a.buf), tok * C);
    int q = pick(w, keep | bit(t), tok * C);
    int k = pick(w, keep | bit(t) | bit(q), tok * C);
    int v = pick(w, keep | bit(t) | bit(q) | bit(k), tok * C);
    int pj = pick(w, keep | bit(t), tok * C);
    int o = pick(w, keep | bit(pj), tok * C);
    if (!w->e) {
        if (tok > w->need_lse) w->need_lse = tok;
    } else {
        vf_backend *be = w->e->be;
        int64_t es = (int64_t)w->e->es;
        VF_ASSERT(tok <= w->e->lse_cap);
        int64_t shp[3] = {w->B, C, x.n * L};
        int perm[3] = {0, 2, 1};
        be->permute(be, bp(w, t), bp(w, a.buf), 3, shp, perm); /* (B, n·L, C) */
        /* to_qkv rows: [q (C) | k (C) | v (C)], as Wan's chunk(3, dim=-1) */
        be->matmul_fwd(be, bp(w, q), bp(w, t), wqkv, bqkv, tok, C, C);
        be->matmul_fwd(be, bp(w, k), bp(w, t), (const char *)wqkv + C * C * es,
                       (const char *)bqkv + C * es, tok, C, C);
        be->matmul_fwd(be, bp(w, v), bp(w, t), (const char *)wqkv + 2 * C * C * es,
                       (const char *)bqkv + 2 * C * es, tok, C, C);
        be->attention_fwd(be, bp(w, t), w->e->lse, bp(w, q), bp(w, k), bp(w, v), frames, L, L,
                          1, C, (float)(1.0 / sqrt((double)C)));
        be->matmul_fwd(be, bp(w, pj), bp(w, t), wp, bpj, tok, C, C);
        int64_t shp2[3] = {w->B, x.n * L, C};
        be->permute(be, bp(w, o), bp(w, pj), 3, shp2, perm); /* back to (B, C, n·L) */
        be->add(be, bp(w, o), bp(w, o), bp(w, x.buf), tok * C);
    }
    return (act){o, C, x.n, x.H, x.W};
}

/* The whole encoder on one chunk of n input frames; returns the (B, 2z, m, h, w)
 * activation with m >= 0 new latent frames. */
static act forward(walk *w, int64_t n, int64_t H, int64_t W)
{
    const vf_vae_config *c = w->c;
    act x = {IN_BUF, 3, n, H, W};
    x = conv3(w, x, c->dim, 0);
    for (int i = 0; i < c->nlevels; i++) {
        int64_t cout = (int64_t)c->dim * c->dim_mult[i];
        for (int r = 0; r < c->num_res_blocks; r++) x = resblock(w, x, cout, 0);
        if (i != c->nlevels - 1) {
            x = down2d(w, x, 0);
            if (c->temporal_downsample[i]) {
                x = tdown(w, x, 0);
                if (x.n == 0) return x; /* nothing reaches deeper layers this chunk */
            }
        }
    }
    x = resblock(w, x, x.C, 0);
    x = attn(w, x, 0);
    x = resblock(w, x, x.C, 0);
    x = conv3(w, norm_silu(w, x, 0, 1), 2 * (int64_t)c->z_dim, 0);
    return conv1x1(w, x, 2 * (int64_t)c->z_dim, 0);
}

static int check_geometry(const vf_vae_config *c, int max_batch, int chunk, int H, int W,
                          vf_status *st)
{
    int rc = 0, sf = vf_vae_space_factor(c);
    if (max_batch < 1) VF_FAIL(st, VF_EINVAL, "vae: micro_batch %d < 1", max_batch);
    if (chunk < 1) VF_FAIL(st, VF_EINVAL, "vae: chunk %d < 1", chunk);
    if (H < sf || W < sf || H % sf || W % sf)
        VF_FAIL(st, VF_EINVAL, "vae: frame size %dx%d (HxW) is not a positive multiple of %d",
                H, W, sf);
fail:
    return rc;
}

/* Measures everything for (B, chunk, H, W); records cache offsets into ls when given. */
static void measure(const vf_vae_config *c, int B, int chunk, int H, int W, walk *w,
                    lstate *ls)
{
    memset(w, 0, sizeof *w);
    w->c = c;
    w->B = B;
    w->ls_out = ls;
    (void)forward(w, chunk, H, W);
}

int vf_vae_mem(const vf_vae_config *c, size_t elem, int max_batch, int chunk, int H, int W,
               vf_vae_mem_info *out, vf_status *st)
{
    int rc = 0;
    memset(out, 0, sizeof *out);
    VF_TRY(vf_vae_config_check(c, st));
    VF_TRY(check_geometry(c, max_batch, chunk, H, W, st));
    walk w;
    measure(c, max_batch, chunk, H, W, &w, NULL);
    int64_t max_tensor;
    out->weights = vf_vae_count_params(c, &max_tensor) * (int64_t)elem;
    out->caches = w.cache_elems * (int64_t)elem;
    int64_t ws = (int64_t)max_batch * 3 * chunk * H * W * (int64_t)elem /* input */
                 + (int64_t)sizeof(float) * w.need_lse;
    for (int i = 0; i < NBUF; i++) ws += w.need[i] * (int64_t)elem;
    int64_t conv = (int64_t)sizeof(float) * 3 * chunk * H * W;
    int64_t load = (int64_t)sizeof(float) * max_tensor;
    /* + bookkeeping: parameter table (name, shape, init bound), layer states, per-clip
     * flags and the two structs (bounded by 1 KiB) */
    out->host = (conv > load ? conv : load) +
                w.pi * (int64_t)(sizeof(vf_vae_param) + sizeof(double)) +
                w.si * (int64_t)sizeof(lstate) + max_batch + (int64_t)sizeof(vf_vae_enc) + 1024;
    out->workspace = ws;
fail:
    return rc;
}

int vf_vae_enc_new(vf_vae *m, int max_batch, int chunk, int H, int W, vf_vae_enc **out,
                   vf_status *st)
{
    int rc = 0;
    vf_vae_enc *e = NULL;
    const vf_vae_config *c = vf_vae_cfg(m);
    *out = NULL;
    VF_TRY(check_geometry(c, max_batch, chunk, H, W, st));
    if (!(e = vf_calloc(sizeof *e, st))) VF_FAIL(st, VF_ENOMEM, "vae: out of memory");
    e->m = m;
    e->be = vf_vae_backend(m);
    e->cfg = c;
    e->es = vf_dtype_size(e->be->act_dtype);
    e->max_batch = max_batch, e->chunk = chunk, e->H = H, e->W = W;
    walk w;
    measure(c, max_batch, chunk, H, W, &w, NULL);
    e->nstate = w.si;
    if (!(e->ls = vf_calloc(sizeof *e->ls * (size_t)(e->nstate ? e->nstate : 1), st)) ||
        !(e->in_set = vf_calloc((size_t)max_batch, st)))
        VF_FAIL(st, VF_ENOMEM, "vae: out of memory");
    measure(c, max_batch, chunk, H, W, &w, e->ls);
    vf_backend *be = e->be;
    for (int i = 0; i < NBUF; i++) {
        e->cap[i] = w.need[i];
        if (!w.need[i]) continue;
        if (!(e->buf[i] = be->alloc(be, (size_t)w.need[i] * e->es, st))) goto nomem;
        e->bytes += w.need[i] * (int64_t)e->es;
    }
    e->cache_elems = w.cache_elems;
    e->lse_cap = w.need_lse;
    int64_t in_elems = (int64_t)max_batch * 3 * chunk * H * W;
    if (!(e->cache = be->alloc(be, (size_t)w.cache_elems * e->es, st)) ||
        !(e->lse = be->alloc(be, sizeof(float) * (size_t)(w.need_lse ? w.need_lse : 1), st)) ||
        !(e->in = be->alloc(be, (size_t)in_elems * e->es, st)) ||
        !(e->stage = vf_alloc(sizeof(float) * 3 * (size_t)chunk * (size_t)H * (size_t)W, st)))
        goto nomem;
    e->bytes += w.cache_elems * (int64_t)e->es + (int64_t)sizeof(float) * w.need_lse +
                in_elems * (int64_t)e->es + (int64_t)sizeof(float) * 3 * chunk * H * W;
    *out = e;
    return 0;
nomem:
    rc = st && st->code ? st->code : VF_ENOMEM;
    if (st && !st->code) vf_status_set(st, rc, __FILE__, __LINE__, "vae: out of memory");
    vf_status_prefix(st, "vae encoder workspace (micro_batch %d, chunk %d, %dx%d)", max_batch,
                     chunk, H, W);
fail:
    vf_vae_enc_free(e);
    return rc;
}

void vf_vae_enc_free(vf_vae_enc *e)
{
    if (!e) return;
    vf_backend *be = e->be;
    for (int i = 0; i < NBUF; i++)
        if (e->buf[i]) be->free(be, e->buf[i]);
    if (e->cache) be->free(be, e->cache);
    if (e->lse) be->free(be, e->lse);
    if (e->in) be->free(be, e->in);
    vf_free(e->stage);
    vf_free(e->in_set);
    vf_free(e->ls);
    vf_free(e);
}

int64_t vf_vae_enc_bytes(const vf_vae_enc *e) { return e->bytes; }

int vf_vae_encode_begin(vf_vae_enc *e, int batch, int64_t T, vf_status *st)
{
    int rc = 0;
    int tf = vf_vae_time_factor(e->cfg);
    e->active = 0;
    if (batch < 1 || batch > e->max_batch)
        VF_FAIL(st, VF_EINVAL, "vae: batch of %d clips, the encoder was sized for 1..%d", batch,
                e->max_batch);
    if ((e->Tlat = vf_vae_latent_frames(e->cfg, T)) < 0)
        VF_FAIL(st, VF_EINVAL,
                "vae: clip of %" PRId64 " frames: the causal VAE encodes 1 + %d·k frames "
                "(1, %d, %d, %d, …)",
                T, tf, 1 + tf, 1 + 2 * tf, 1 + 3 * tf);
    e->batch = batch;
    e->T = T;
    e->t_fed = e->t_out = 0;
    e->in_n = 0;
    memset(e->in_set, 0, (size_t)e->max_batch);
    e->be->memset0(e->be, e->cache, (size_t)e->cache_elems * e->es);
    for (int i = 0; i < e->nstate; i++) e->ls[i].pending = e->ls[i].started = 0;
    e->active = 1;
fail:
    return rc;
}

static int check_input(vf_vae_enc *e, int b, int64_t t0, int n, vf_status *st)
{
    int rc = 0;
    if (!e->active) VF_FAIL(st, VF_EINVAL, "vae: input given outside begin/end");
    if (b < 0 || b >= e->batch)
        VF_FAIL(st, VF_EINVAL, "vae: clip %d outside the batch of %d", b, e->batch);
    if (n < 1 || n > e->chunk)
        VF_FAIL(st, VF_EINVAL, "vae: %d frames per chunk, the encoder takes 1..%d", n, e->chunk);
    if (t0 != e->t_fed || t0 + n > e->T)
        VF_FAIL(st, VF_EINVAL,
                "vae: frames [%" PRId64 ", %" PRId64 ") given, expected the next frames from %" PRId64
                " of %" PRId64,
                t0, t0 + n, e->t_fed, e->T);
    if (e->in_n && e->in_n != n)
        VF_FAIL(st, VF_EINVAL, "vae: clips of one chunk must give the same frame count (%d vs %d)",
                n, e->in_n);
    e->in_n = n;
    e->in_set[b] = 1;
fail:
    return rc;
}

int vf_vae_input_f32(vf_vae_enc *e, int b, const float *clip, int64_t t0, int n, vf_status *st)
{
    int rc = 0;
    VF_TRY(check_input(e, b, t0, n, st));
    int64_t hw = (int64_t)e->H * e->W;
    for (int c = 0; c < 3; c++)
        e->be->upload(e->be, (char *)e->in + ((int64_t)(b * 3 + c) * n) * hw * (int64_t)e->es,
                      clip + ((int64_t)c * e->T + t0) * hw, n * hw, e->be->act_dtype);
fail:
    return rc;
}

int vf_vae_input_u8(vf_vae_enc *e, int b, const uint8_t *clip, int64_t t0, int n, vf_status *st)
{
    int rc = 0;
    VF_TRY(check_input(e, b, t0, n, st));
    int64_t hw = (int64_t)e->H * e->W;
    /* (n, H, W, 3) interleaved RGB -> (3, n, H, W) planes in [-1, 1] */
    for (int64_t t = 0; t < n; t++) {
        const uint8_t *src = clip + (t0 + t) * hw * 3;
        for (int64_t i = 0; i < hw; i++)
            for (int c = 0; c < 3; c++)
                e->stage[((int64_t)c * n + t) * hw + i] = (float)src[i * 3 + c] / 127.5f - 1.0f;
    }
    e->be->upload(e->be, (char *)e->in + (int64_t)b * 3 * n * hw * (int64_t)e->es, e->stage,
                  3 * n * hw, e->be->act_dtype);
fail:
    return rc;
}

int vf_vae_encode_chunk(vf_vae_enc *e, int n, float *mean, float *logvar, vf_status *st)
{
    int rc = 0;
    if (!e->active) VF_FAIL(st, VF_EINVAL, "vae: encode_chunk outside begin/end");
    if (n != e->in_n)
        VF_FAIL(st, VF_EINVAL, "vae: encode_chunk of %d frames, inputs were given for %d", n,
                e->in_n);
    for (int b = 0; b < e->batch; b++)
        if (!e->in_set[b]) VF_FAIL(st, VF_EINVAL, "vae: no input for clip %d of this chunk", b);
    walk w;
    memset(&w, 0, sizeof w);
    w.e = e;
    w.c = e->cfg;
    w.B = e->batch;
    act y = forward(&w, n, e->H, e->W);
    e->t_fed += n;
    e->in_n = 0;
    memset(e->in_set, 0, (size_t)e->max_batch);
    if (y.n > 0) {
        VF_ASSERT(e->t_out + y.n <= e->Tlat);
        int64_t z = e->cfg->z_dim, hw = y.H * y.W, es = (int64_t)e->es;
        const char *Y = w.e->buf[y.buf];
        for (int64_t b = 0; b < e->batch; b++)
            for (int64_t c = 0; c < z; c++) {
                e->be->download(e->be, mean + ((b * z + c) * e->Tlat + e->t_out) * hw,
                                Y + ((b * 2 * z + c) * y.n) * hw * es, y.n * hw, e->be->act_dtype);
                if (logvar)
                    e->be->download(e->be, logvar + ((b * z + c) * e->Tlat + e->t_out) * hw,
                                    Y + ((b * 2 * z + z + c) * y.n) * hw * es, y.n * hw,
                                    e->be->act_dtype);
            }
        e->t_out += y.n;
    }
    return (int)e->t_out;
fail:
    return rc;
}

int vf_vae_encode_end(vf_vae_enc *e, vf_status *st)
{
    int rc = 0;
    if (!e->active) VF_FAIL(st, VF_EINVAL, "vae: encode_end without begin");
    e->active = 0;
    if (e->t_fed != e->T)
        VF_FAIL(st, VF_EINVAL, "vae: clip ended after %" PRId64 " of %" PRId64 " frames", e->t_fed,
                e->T);
    VF_ASSERT(e->t_out == e->Tlat);
    return (int)e->t_out;
fail:
    return rc;
}

int vf_vae_encode_f32(vf_vae_enc *e, int batch, int64_t T, const float *x, float *mean,
                      float *logvar, vf_status *st)
{
    int rc = 0;
    int64_t clip = 3 * T * (int64_t)e->H * e->W;
    VF_TRY(vf_vae_encode_begin(e, batch, T, st));
    for (int64_t t0 = 0; t0 < T; t0 += e->chunk) {
        int n = (int)(T - t0 < e->chunk ? T - t0 : e->chunk);
        for (int b = 0; b < batch; b++) VF_TRY(vf_vae_input_f32(e, b, x + b * clip, t0, n, st));
        VF_TRY(vf_vae_encode_chunk(e, n, mean, logvar, st));
    }
    VF_TRY(vf_vae_encode_end(e, st));
fail:
    if (rc < 0) e->active = 0;
    return rc;
}
