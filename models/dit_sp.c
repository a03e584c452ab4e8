/* dit_sp.c — Ulysses self-attention over the ranks of a sequence-parallel partition
 * (dit_sp.h): permute to the all-to-all's chunks, exchange, permute into place.
 *
 * Tokens to heads: local (B, Lr, H, Dh), seen as (B, Lr, N, Hg, Dh), is permuted to
 * (N, B, Lr, Hg, Dh) so chunk j holds what rank j attends with (heads group j of our
 * tokens); after the exchange chunk i holds rank i's tokens of our heads group, and
 * (N, B, Lr, Hg, Dh) permuted to (B, N, Lr, Hg, Dh) is the whole sequence in order.
 * Heads to tokens is the inverse. Attention runs one sample at a time, so the keys of a
 * sample are the first L rows of its N·Lr: the pads are never attended to.
 */
#include "models/dit_sp.h"
#include "models/dit_internal.h"

#include <stdbool.h>
#include <string.h>

int vf_dit_sp_init(vf_dit_sp *sp, vf_a2a *a2a, int n, int rank, int64_t L, int64_t H, vf_status *st)
{
    memset(sp, 0, sizeof *sp);
    if (n >= 1 && H % n != 0)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "sequence parallelism: the model's %lld heads are not divisible by sp = %d", (long long)H,
                             n);
    if (n < 1 || rank < 0 || rank >= n || L < 1 || (n > 1 && !a2a))
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "sequence parallelism: rank %d of sp = %d over %lld tokens%s", rank, n, (long long)L,
                             n > 1 && !a2a ? " without an all-to-all group" : "");
    sp->a2a = a2a, sp->n = n, sp->rank = rank, sp->L = L;
    sp->Lr = (L + n - 1) / n;
    return 0;
}

void vf_dit_sp_range(const vf_dit_sp *sp, int64_t *lo, int64_t *count)
{
    int64_t a = (int64_t)sp->rank * sp->Lr, b = a + sp->Lr;
    if (a > sp->L) a = sp->L;
    if (b > sp->L) b = sp->L;
    *lo = a, *count = b - a;
}

int64_t vf_dit_sp_elems(const vf_dit_sp *sp, int64_t B, int64_t H, int64_t Dh) { return B * sp->Lr * H * Dh; }

/* One trade of layouts: permute src into the all-to-all's chunks (N, B, Lr, Hg, Dh) in
 * work, exchange in place, permute into dst. Tokens to heads: local (B, Lr, H, Dh) seen as
 * (B, Lr, N, Hg, Dh) in, the heads layout (B, N·Lr, Hg, Dh) out; heads to tokens the
 * inverse. work is neither src nor dst; dst may be src. */
static int trade(vf_backend *be, const vf_dit_sp *sp, bool heads, void *dst, const void *src, void *work, int64_t B,
                 int64_t H, int64_t Dh, vf_status *st)
{
    int64_t N = sp->n, Hg = H / N;
    const int64_t local[5] = {B, sp->Lr, N, Hg, Dh}, whole[5] = {B, N, sp->Lr, Hg, Dh};
    const int64_t chunks[5] = {N, B, sp->Lr, Hg, Dh};
    static const int local_to_chunks[5] = {2, 0, 1, 3, 4}, swap01[5] = {1, 0, 2, 3, 4};
    static const int chunks_to_local[5] = {1, 2, 0, 3, 4};
    be->permute(be, work, src, 5, heads ? local : whole, heads ? local_to_chunks : swap01);
    if (N > 1) {
        size_t chunk = (size_t)(B * sp->Lr * Hg * Dh) * vf_dtype_size(be->act_dtype);
        int rc = sp->grp ? be->a2a_run(be, sp->grp, work, work, chunk, st) : vf_a2a_run(sp->a2a, work, work, chunk, st);
        if (rc) return rc;
    }
    be->permute(be, dst, work, 5, chunks, heads ? swap01 : chunks_to_local);
    return 0;
}

static int to_heads(vf_backend *be, const vf_dit_sp *sp, void *dst, const void *src, void *work, int64_t B,
                    int64_t H, int64_t Dh, vf_status *st)
{
    return trade(be, sp, true, dst, src, work, B, H, Dh, st);
}

static int to_tokens(vf_backend *be, const vf_dit_sp *sp, void *dst, const void *src, void *work, int64_t B,
                     int64_t H, int64_t Dh, vf_status *st)
{
    return trade(be, sp, false, dst, src, work, B, H, Dh, st);
}

/* Without a device group the exchange reads and writes the buffers as host memory. */
static int check_backend(const vf_backend *be, const vf_dit_sp *sp, vf_status *st)
{
    if (be->device.kind == VF_DEV_CPU || sp->grp || sp->n == 1) return 0;
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                         "sequence parallelism: %s buffers need the backend's device group (vf_dit_part_set_sp)",
                         be->name);
}

int vf_dit_sp_attention_fwd(vf_backend *be, const vf_dit_sp *sp, void *out, float *lse, const void *q,
                            const void *k, const void *v, int64_t B, int64_t H, int64_t Dh, float scale,
                            void *const work[VF_DIT_SP_WORK_FWD], vf_status *st)
{
    int rc = check_backend(be, sp, st);
    const void *src[3] = {q, k, v};
    for (int i = 0; i < 3 && !rc; i++) rc = to_heads(be, sp, work[i], src[i], work[3], B, H, Dh, st);
    if (rc) return rc;
    int64_t Lq = (int64_t)sp->n * sp->Lr, Hg = H / sp->n;
    size_t as = vf_dtype_size(be->act_dtype);
    for (int64_t b = 0; b < B; b++) {
        size_t off = (size_t)(b * Lq * Hg * Dh) * as;
        be->attention_fwd(be, (char *)work[3] + off, lse + b * Hg * Lq, (const char *)work[0] + off,
                          (const char *)work[1] + off, (const char *)work[2] + off, 1, Lq, sp->L, Hg, Dh, scale);
    }
    return to_tokens(be, sp, out, work[3], work[0], B, H, Dh, st);
}

int vf_dit_sp_attention_bwd(vf_backend *be, const vf_dit_sp *sp, void *dq, void *dk, void *dv, const void *dout,
                            const void *q, const void *k, const void *v, const void *out, const float *lse,
                            int64_t B, int64_t H, int64_t Dh, float scale, void *const work[VF_DIT_SP_WORK_BWD],
                            vf_status *st)
{
    int rc = check_backend(be, sp, st);
    /* q, k, v, out, dout in the heads layout, dq (not written yet) the scratch */
    const void *src[5] = {q, k, v, out, dout};
    for (int i = 0; i < 5 && !rc; i++) rc = to_heads(be, sp, work[i], src[i], dq, B, H, Dh, st);
    if (rc) return rc;
    int64_t Lq = (int64_t)sp->n * sp->Lr, Hg = H / sp->n, row = Hg * Dh;
    size_t as = vf_dtype_size(be->act_dtype);
    for (int64_t b = 0; b < B; b++) {
        size_t off = (size_t)(b * Lq * row) * as, tail = (size_t)(sp->L * row) * as;
        size_t pad = (size_t)((Lq - sp->L) * row) * as;
        /* a pad's query reaches the real keys' gradients only through its dout */
        if (pad) be->memset0(be, (char *)work[4] + off + tail, pad);
        /* the heads-layout gradients go where the local ones will be: traded in place below */
        be->attention_bwd(be, (char *)dq + off, (char *)dk + off, (char *)dv + off, (const char *)work[4] + off,
                          (const char *)work[0] + off, (const char *)work[1] + off, (const char *)work[2] + off,
                          (const char *)work[3] + off, lse + b * Hg * Lq, 1, Lq, sp->L, Hg, Dh, scale);
        if (pad) {
            be->memset0(be, (char *)dk + off + tail, pad);
            be->memset0(be, (char *)dv + off + tail, pad);
        }
    }
    void *const grads[3] = {dq, dk, dv};
    for (int i = 0; i < 3 && !rc; i++) rc = to_tokens(be, sp, grads[i], grads[i], work[0], B, H, Dh, st);
    return rc;
}

/* ------------------------------------------------------------------ in a partition */

vf_dit_dims vf_dit_sp_rank_max(const vf_dit_dims *max, int n)
{
    vf_dit_dims r = *max;
    if (n < 2) return r;
    int64_t B = max->B, Lr = (max->L + n - 1) / n;
    int64_t N = max->N > 0 ? (max->N + B * (n - 1)) / n : 0; /* B_i·⌈L_i/n⌉ <= (B_i·L_i + B_i·(n−1))/n */
    r.L = Lr;
    r.N = N > 0 && N < B * Lr ? N : 0;
    return r;
}

/* Elements of a local tensor of sp = n over L tokens: B·⌈L/n⌉·heads·head_dim. */
static int64_t local_elems(int n, int64_t L, int64_t B, const vf_dit_config *c)
{
    return B * ((L + n - 1) / n) * c->heads * c->head_dim;
}

size_t vf_dit_sp_chunk_bytes(int n, int64_t L, int64_t B, const vf_dit_config *c, size_t as)
{
    return (size_t)(local_elems(n, L, B, c) / n) * as;
}

int64_t vf_dit_sp_scratch_bytes(int n, int64_t L, int64_t B, const vf_dit_config *c, size_t as)
{
    return VF_DIT_SP_WORK_BWD * local_elems(n, L, B, c) * (int64_t)as;
}

void vf_dit_sp_group_bytes(vf_device dev, int n, int64_t L, int64_t B, const vf_dit_config *c, size_t as,
                           int64_t *host, int64_t *device)
{
    int64_t chunk = n > 1 ? (int64_t)vf_dit_sp_chunk_bytes(n, L, B, c, as) : 0;
    chunk = (chunk + 63) / 64 * 64; /* the host group's slots are 64-byte aligned */
    *host = dev.kind == VF_DEV_CPU ? 2 * n * chunk : 0;
    *device = dev.kind == VF_DEV_CPU ? 0 : n * chunk;
}

int vf_dit_part_set_sp(vf_dit_part *p, const vf_dit_sp *sp, vf_status *st)
{
    const dit_plan *pl = &p->pl;
    if (sp->Lr > pl->L)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit partition [%d, %d): made for %lld tokens a sample, a rank of sp = %d holds %lld",
                             pl->b0, pl->b1, (long long)pl->L, sp->n, (long long)sp->Lr);
    /* the embedding patchifies whole clips in w.whole, which vf_dit_part_new_sp
     * allocates; the head predicts the rank's rows only (no latent-shaped prediction) */
    if ((pl->first || pl->last) && sp->n > 1 && (pl->sp != sp->n || sp->L > pl->Lw))
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit partition [%d, %d): the embeddings or the head of a rank of sp = %d over %lld "
                             "tokens need a partition made for it (vf_dit_part_new_sp with sp = %d over at least "
                             "as many; this one: sp = %d, %lld tokens)", pl->b0, pl->b1, sp->n, (long long)sp->L,
                             sp->n, pl->sp, (long long)pl->Lw);
    dit_sp_free(p);
    size_t bytes = (size_t)(vf_dit_sp_scratch_bytes(sp->n, sp->L, pl->B, &pl->c, pl->as) / VF_DIT_SP_WORK_BWD);
    for (int i = 0; i < VF_DIT_SP_WORK_BWD; i++) {
        p->spw[i] = p->be->alloc(p->be, bytes, st);
        if (!p->spw[i]) {
            dit_sp_free(p);
            return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__,
                                 "dit partition [%d, %d): no memory for the all-to-all's scratch (%zu bytes)", pl->b0,
                                 pl->b1, bytes);
        }
    }
    if (p->be->device.kind != VF_DEV_CPU && sp->n > 1) {
        size_t chunk = vf_dit_sp_chunk_bytes(sp->n, sp->L, pl->B, &pl->c, pl->as);
        if (!(p->spg = p->be->a2a_open(p->be, sp->a2a, sp->n, sp->rank, chunk, st))) {
            dit_sp_free(p);
            return st && st->code ? st->code : VF_ENOMEM;
        }
    }
    p->spw_bytes = (int64_t)bytes;
    p->sp = sp;
    p->rope_grid[0] = -1;
    return 0;
}

void dit_sp_free(vf_dit_part *p)
{
    for (int i = 0; i < VF_DIT_SP_WORK_BWD; i++) {
        if (p->spw[i]) p->be->free(p->be, p->spw[i]);
        p->spw[i] = NULL;
    }
    if (p->spg) p->be->a2a_close(p->be, p->spg);
    p->spg = NULL;
    p->sp = NULL;
}

static void keep_error(vf_dit_part *p, int rc)
{
    if (rc && !p->sp_rc) p->sp_rc = rc;
}

/* The caller's geometry (which it may change between passes) with p's device group. */
static vf_dit_sp with_group(const vf_dit_part *p)
{
    vf_dit_sp s = *p->sp;
    s.grp = p->spg;
    return s;
}

void dit_self_att_fwd(vf_dit_part *p, void *out, float *lse, const void *q, const void *k, const void *v,
                      int64_t B, int64_t L, float scale)
{
    const vf_dit_config *c = &p->pl.c;
    if (!p->sp) {
        p->be->attention_fwd(p->be, out, lse, q, k, v, B, L, L, c->heads, c->head_dim, scale);
        return;
    }
    vf_status st = {0};
    vf_dit_sp s = with_group(p);
    if (!p->sp_rc)
        keep_error(p, vf_dit_sp_attention_fwd(p->be, &s, out, lse, q, k, v, B, c->heads, c->head_dim, scale,
                                              p->spw, &st));
    if (p->sp_rc && !p->sp_st.code) p->sp_st = st;
}

void dit_self_att_bwd(vf_dit_part *p, void *dq, void *dk, void *dv, const void *dout, const void *q,
                      const void *k, const void *v, const void *out, const float *lse, int64_t B, int64_t L,
                      float scale)
{
    const vf_dit_config *c = &p->pl.c;
    if (!p->sp) {
        p->be->attention_bwd(p->be, dq, dk, dv, dout, q, k, v, out, lse, B, L, L, c->heads, c->head_dim, scale);
        return;
    }
    vf_status st = {0};
    vf_dit_sp s = with_group(p);
    if (!p->sp_rc)
        keep_error(p, vf_dit_sp_attention_bwd(p->be, &s, dq, dk, dv, dout, q, k, v, out, lse, B, c->heads,
                                              c->head_dim, scale, p->spw, &st));
    if (p->sp_rc && !p->sp_st.code) p->sp_st = st;
}

int dit_sp_error(vf_dit_part *p, vf_status *st)
{
    int rc = p->sp_rc;
    if (rc && st && !st->code) *st = p->sp_st;
    p->sp_rc = 0;
    memset(&p->sp_st, 0, sizeof p->sp_st);
    return rc;
}

int dit_sp_rope(vf_dit_part *p, const int g[3])
{
    const vf_dit_sp *sp = p->sp;
    if (!sp) return 0;
    const vf_dit_config *c = &p->pl.c;
    int64_t half = c->head_dim / 2, lo, cnt;
    vf_dit_sp_range(sp, &lo, &cnt);
    float *all = vf_alloc(sizeof(float) * (size_t)(2 * sp->L + 2 * sp->Lr) * (size_t)half, NULL);
    if (!all) { /* no tables: a pass then fails on its geometry, never on stale rows */
        p->rope_grid[0] = -1;
        keep_error(p, vf_status_set(&p->sp_st, VF_ENOMEM, __FILE__, __LINE__, "dit: no memory for the RoPE tables"));
        return 1;
    }
    float *hc = all, *hs = all + sp->L * half, *lc = hs + sp->L * half, *ls = lc + sp->Lr * half;
    vf_dit_rope_tables(c, g[0], g[1], g[2], hc, hs);
    /* this rank's rows of the sequence's tables; a pad turns by angle 0 */
    for (int64_t i = 0; i < sp->Lr * half; i++) lc[i] = 1.0f, ls[i] = 0.0f;
    memcpy(lc, hc + lo * half, sizeof(float) * (size_t)(cnt * half));
    memcpy(ls, hs + lo * half, sizeof(float) * (size_t)(cnt * half));
    p->be->upload(p->be, p->w.rcos, lc, sp->Lr * half, VF_DTYPE_F32);
    p->be->upload(p->be, p->w.rsin, ls, sp->Lr * half, VF_DTYPE_F32);
    memcpy(p->rope_grid, g, sizeof p->rope_grid);
    vf_free(all);
    return 1;
}

/* ------------------------------------------------------------------ the ends
 *
 * The first partition patchifies every sample's whole clip on every rank and keeps its
 * own tokens' patches: the patch embedding is per token (a conv3d whose stride is its
 * kernel), so each rank embeds its tokens only, pad tokens' patches zero. A pad's
 * embedding (the patch bias) reaches no real token (dit_sp.h: the keys are cut to the real
 * ones), and its gradient there is zero: the loss gives a pad none, every op of a block
 * but the self-attention is per token, and that one's backward takes a pad's dout as zero
 * and gives its dk, dv as zero. So each rank's patch-embedding gradients are its tokens'
 * share and the ranks' sum is the whole. The time and text embeddings are per sample, the same
 * on every rank. The last partition runs the head on its tokens and the loss on their
 * targets, which arrive cut to its rows (vf_dit_sp_target_rows), normalised by the whole
 * sequence's count, so the ranks' losses and gradients add up to one rank's. */

void vf_dit_sp_target_rows(const vf_dit_config *c, const vf_dit_sp *sp, const vf_dit_dims *d, const float *src,
                           float *dst)
{
    const int pt = c->patch[0], ph = c->patch[1], pw = c->patch[2], z = c->z;
    const int64_t Hp = d->H / ph, Wp = d->W / pw, HW = (int64_t)d->H * d->W, zP = (int64_t)z * pt * ph * pw;
    int64_t lo, cnt;
    vf_dit_sp_range(sp, &lo, &cnt);
    memset(dst, 0, sizeof(float) * (size_t)(d->B * sp->Lr * zP));
    for (int64_t b = 0; b < d->B; b++) {
        const float *lat = src + b * z * d->T * HW;
        for (int64_t i = 0; i < cnt; i++) {
            int64_t l = lo + i, t0 = l / (Hp * Wp) * pt, h0 = l / Wp % Hp * ph, w0 = l % Wp * pw;
            float *o = dst + (b * sp->Lr + i) * zP; /* (pt, ph, pw, z): the head's order */
            for (int a = 0; a < pt; a++)
                for (int y = 0; y < ph; y++)
                    for (int x = 0; x < pw; x++)
                        for (int k = 0; k < z; k++)
                            *o++ = lat[(int64_t)k * d->T * HW + (t0 + a) * HW + (h0 + y) * d->W + w0 + x];
        }
    }
}

int64_t vf_dit_sp_target_values(const vf_dit_config *c, const vf_dit_dims *max, int n)
{
    vf_dit_dims r = vf_dit_sp_rank_max(max, n);
    int64_t ntok = r.N ? r.N : (int64_t)r.B * r.L;
    return ntok * c->z * c->patch[0] * c->patch[1] * c->patch[2];
}

/* This rank's rows of B whole sequences of `w` values a row: src (B, L, w) -> dst
 * (B, Lr, w), pad rows zero. Buffers owned by the caller, distinct. */
static void take_rows(vf_dit_part *p, void *dst, const void *src, int64_t B, int64_t w, size_t es)
{
    const vf_dit_sp *sp = p->sp;
    int64_t lo, cnt;
    vf_dit_sp_range(sp, &lo, &cnt);
    size_t row = (size_t)w * es;
    for (int64_t b = 0; b < B; b++) {
        char *d = (char *)dst + (size_t)(b * sp->Lr) * row;
        if (cnt) p->be->copy(p->be, d, (const char *)src + (size_t)(b * sp->L + lo) * row, (size_t)cnt * row);
        if (sp->Lr > cnt) p->be->memset0(p->be, d + (size_t)cnt * row, (size_t)(sp->Lr - cnt) * row);
    }
}

int dit_sp_patches(vf_dit_part *p, const vf_dit_batch *b, void *patches, vf_status *st)
{
    /* the whole clips' patches in w.whole (their inputs concatenated in w.xin) */
    int rc = dit_embed_patchify(p, b, p->w.xin, p->w.whole, st);
    if (rc) return rc;
    take_rows(p, patches, p->w.whole, b->dims.B, (int64_t)p->pl.in_dim * p->pl.P, p->pl.as);
    return 0;
}

void dit_sp_loss_targets(vf_dit_part *p, const vf_dit_dims *d, vf_dit_saved *sv, const void *target)
{
    const vf_dit_sp *sp = p->sp;
    int64_t zP = (int64_t)p->pl.c.z * p->pl.P, lo, cnt;
    dit_head_saved *h = &sv->hd;
    size_t row = (size_t)zP * p->pl.as;
    p->be->copy(p->be, h->target_tok, target, (size_t)(d->B * sp->Lr) * row);
    /* a pad's target is its prediction: no loss, no gradient */
    vf_dit_sp_range(sp, &lo, &cnt);
    for (int64_t b = 0; b < d->B && sp->Lr > cnt; b++)
        p->be->copy(p->be, (char *)h->target_tok + (size_t)(b * sp->Lr + cnt) * row,
                    (const char *)h->pred_tok + (size_t)(b * sp->Lr + cnt) * row, (size_t)(sp->Lr - cnt) * row);
}
