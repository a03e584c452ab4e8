/* dit_step.c — one training step of one DiT pipeline partition (stage kind `dit`).
 *
 * The first partition cuts the replica's global batch (one latent_reader item of Bg
 * samples) into M micro-batches of ⌊Bg·(m+1)/M⌋ − ⌊Bg·m/M⌋ samples and builds each
 * sample's rectified-flow pair from Philox keyed by (seed, step, j·D + r), j the sample's
 * position in replica r's batch: the readers deal the epoch's order to the D replicas
 * round-robin (latent_reader.h), so j·D + r is the sample's position in the step's
 * combined batch, and D replicas of batch b train on the same samples with the same
 * noise and timesteps as one replica of batch D·b; they never depend on P or M. The
 * target travels forward with the activations to the last partition, which computes the
 * loss with grad_scale = B_m / (Bg · D), so the gradients accumulated over the M
 * micro-batches and summed over the D replicas are those of the global mean loss.
 *
 * Order (dit_train.h vf_train_1f1b): min(P−p−1, M) warmup forwards, then one forward /
 * one backward, then the remaining backwards; micro-batch m uses saved store m mod nsv,
 * free again by then because at most nsv micro-batches are in flight. Activations go
 * forward, their gradients come back and are updated IN PLACE (dit.h: the conditioning
 * gradients are continued, not re-summed) and forwarded: a middle partition passes the
 * received gradient item on, and forwards the received e, e0, ctx and target tensors by
 * reference, so only x is new at each boundary.
 */
#include "stages/train/dit_stage.h"
#include "formats/lr_cursor.h"
#include "models/dit_sp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const vf_dit_xf_names[XF_N] = {"x", "e", "e0", "ctx", "target"};

/* ------------------------------------------------------------------ setup */

static void xf_shapes(const dit_part_state *h, const vf_dit_dims *d, int64_t shp[XF_N][5], int nd[XF_N])
{
    const vf_dit_config *c = &h->cfg;
    int64_t B = d->B, L = d->L, D = c->dim;
    nd[XF_X] = 3, shp[XF_X][0] = B, shp[XF_X][1] = L, shp[XF_X][2] = D;
    if (c->t_tokens) { /* a time row a token (models/dit.h vf_dit_xfer) */
        nd[XF_E] = 3, shp[XF_E][0] = B, shp[XF_E][1] = L, shp[XF_E][2] = D;
        nd[XF_E0] = 4, shp[XF_E0][0] = 6, shp[XF_E0][1] = B, shp[XF_E0][2] = L, shp[XF_E0][3] = D;
    } else {
        nd[XF_E] = 2, shp[XF_E][0] = B, shp[XF_E][1] = D;
        nd[XF_E0] = 3, shp[XF_E0][0] = B, shp[XF_E0][1] = 6, shp[XF_E0][2] = D;
    }
    nd[XF_CTX] = 3, shp[XF_CTX][0] = B, shp[XF_CTX][1] = vf_dit_ctx_len(c), shp[XF_CTX][2] = D;
    nd[XF_TARGET] = 5, shp[XF_TARGET][0] = B, shp[XF_TARGET][1] = c->z, shp[XF_TARGET][2] = d->T;
    shp[XF_TARGET][3] = d->H, shp[XF_TARGET][4] = d->W;
    if (h->sp > 1) { /* a rank's rows of the targets (models/dit_sp.h vf_dit_sp_target_rows) */
        nd[XF_TARGET] = 3, shp[XF_TARGET][1] = L;
        shp[XF_TARGET][2] = (int64_t)c->z * c->patch[0] * c->patch[1] * c->patch[2];
    }
}

static size_t numel(const int64_t *s, int n)
{
    size_t k = 1;
    for (int i = 0; i < n; i++) k *= (size_t)s[i];
    return k;
}

int vf_dit_stage_setup(dit_part_state *h, const vf_dit_dims *max, vf_status *st)
{
    int rc = 0;
    vf_backend *be = h->be;
    h->max = *max;
    /* with LoRA the partition runs on the frozen base and trains the adapters only */
    /* a rank of sequence parallelism holds its tokens; the first partition's patchify
     * whole clips (dit.h) */
    VF_TRY(vf_dit_part_new_sp(be, h->l, h->splits[h->p], h->splits[h->p + 1], max, h->sp, h->recompute,
                              h->lora ? h->base : h->params, h->lora ? NULL : h->grads, &h->part, st));
    if (h->lora) VF_TRY(vf_dit_part_set_lora(h->part, h->lora, h->params, h->grads, st));
    if (h->fp8) VF_TRY(vf_dit_part_set_fp8(h->part, h->fp8, st));
    if (h->swap) VF_TRY(vf_dit_part_set_swap_grads(h->part, h->swap, h->swap_host, h->swap_ghost, st));
    if (h->offload) VF_TRY(vf_dit_part_set_offload(h->part, st));
    VF_TRY(vf_dit_sp_rank_open(h, max, st));
    h->ops = calloc((size_t)(2 * h->M), sizeof *h->ops);
    if (!h->ops) VF_FAIL(st, VF_ENOMEM, "dit: out of memory");
    h->nsv = vf_train_1f1b(h->P, h->p, h->M, h->ops);
    h->sv = calloc((size_t)h->nsv, sizeof *h->sv);
    if (!h->sv) VF_FAIL(st, VF_ENOMEM, "dit: out of memory");
    for (int i = 0; i < h->nsv; i++) VF_TRY(vf_dit_saved_new(h->part, &h->sv[i], st));

    int64_t shp[XF_N][5];
    int nd[XF_N];
    xf_shapes(h, max, shp, nd);
    size_t elems[XF_N];
    for (int i = 0; i < XF_N; i++) elems[i] = numel(shp[i], nd[i]);
    /* over several buckets the B·L tokens of x and target are bounded by N; x and the
     * target hold the rank's tokens */
    int64_t ntok = max->N ? max->N : (int64_t)max->B * max->L;
    vf_dit_dims rk = vf_dit_sp_rank_max(max, h->sp);
    int64_t nx = rk.N ? rk.N : (int64_t)rk.B * rk.L;
    int64_t zP = (int64_t)h->cfg.z * h->cfg.patch[0] * h->cfg.patch[1] * h->cfg.patch[2];
    elems[XF_X] = (size_t)(nx * h->cfg.dim);
    elems[XF_TARGET] = (size_t)vf_dit_sp_target_values(&h->cfg, max, h->sp);
    if (h->cfg.t_tokens) elems[XF_E] = (size_t)(ntok * h->cfg.dim), elems[XF_E0] = 6 * elems[XF_E];
    if (!h->last) {
        /* a middle partition forwards the received e, e0, ctx, target: it makes only x */
        int nx = h->first ? XF_N : XF_X + 1;
        for (int i = 0; i < nx; i++) {
            h->act_pool[i] = vf_bufpool_new(be, h->as * elems[i], h->M + 1, st);
            if (!h->act_pool[i]) VF_FAIL(st, VF_ENOMEM, "dit: out of memory");
        }
    }
    if (h->last && !h->first) {
        for (int i = 0; i <= XF_CTX; i++) {
            h->gout_pool[i] = vf_bufpool_new(be, h->gs * elems[i], h->M + 1, st);
            if (!h->gout_pool[i]) VF_FAIL(st, VF_ENOMEM, "dit: out of memory");
        }
    }
    if (h->first) {
        h->cap = ntok * zP;
        size_t nb = (size_t)max->B;
        h->h_xt = vf_alloc(sizeof(float) * (size_t)h->cap, st);
        h->h_target = h->h_xt ? vf_alloc(sizeof(float) * (size_t)h->cap, st) : NULL;
        h->h_t = h->h_target ? vf_alloc(sizeof(float) * nb, st) : NULL;
        h->h_text = h->h_t ? vf_alloc(sizeof(int32_t) * nb * (size_t)h->cfg.text_len, st) : NULL;
        h->h_len = h->h_text ? vf_alloc(sizeof(int32_t) * nb, st) : NULL;
        if (h->h_len && h->cfg.text_emb) {
            h->h_emb = vf_alloc(sizeof(float) * nb * (size_t)h->cfg.text_len * (size_t)h->cfg.text_dim, st);
            if (!h->h_emb) VF_FAIL(st, VF_ENOMEM, "dit: no memory for the micro-batch's text embeddings");
        }
        h->d_xt = h->h_len ? be->alloc(be, h->as * (size_t)h->cap, st) : NULL;
        if (h->d_xt && h->last) h->d_target = be->alloc(be, h->as * elems[XF_TARGET], st);
        if (!h->d_xt || (h->last && !h->d_target))
            VF_FAIL(st, VF_ENOMEM, "dit: no memory for the micro-batch staging");
        VF_TRY(vf_dit_cond_setup(h, st));
    }
    h->ready = true;
fail:
    return rc;
}

void vf_dit_stage_teardown(dit_part_state *h)
{
    vf_backend *be = h->be;
    if (h->sv)
        for (int i = 0; i < h->nsv; i++) vf_dit_saved_free(h->sv[i]);
    free(h->sv);
    h->sv = NULL;
    free(h->ops);
    h->ops = NULL;
    vf_dit_part_free(h->part);
    h->part = NULL;
    vf_dit_sp_rank_close(h);
    for (int i = 0; i < XF_N; i++) vf_bufpool_unref(h->act_pool[i]), h->act_pool[i] = NULL;
    for (int i = 0; i <= XF_CTX; i++) vf_bufpool_unref(h->gout_pool[i]), h->gout_pool[i] = NULL;
    vf_free(h->h_xt), vf_free(h->h_target), vf_free(h->h_t), vf_free(h->h_text), vf_free(h->h_len);
    vf_free(h->h_emb);
    vf_dit_cond_teardown(h);
    h->h_xt = h->h_target = h->h_t = h->h_emb = NULL, h->h_text = h->h_len = NULL;
    if (be && h->d_xt) be->free(be, h->d_xt);
    if (be && h->d_target) be->free(be, h->d_target);
    h->d_xt = h->d_target = NULL;
    h->ready = false;
}

/* ------------------------------------------------------------------ helpers */

static double meta(const vf_item *it, const char *k)
{
    double v;
    return vf_item_num(it, k, &v) == 0 ? v : -1;
}

static int set_nums(vf_item *it, vf_status *st, int n, const char *const *keys, const double *vals)
{
    for (int i = 0; i < n; i++) {
        int rc = vf_item_set_num(it, keys[i], vals[i], st);
        if (rc) return rc;
    }
    return 0;
}

/* New item with tensors i in [0, n) from pools[i], shaped for dims d. */
static vf_item *pooled_item(const dit_part_state *h, const char *id, vf_bufpool *const *pools, int n,
                            vf_dtype dt, const vf_dit_dims *d, vf_status *st)
{
    int64_t shp[XF_N][5];
    int nd[XF_N];
    xf_shapes(h, d, shp, nd);
    vf_item *it = vf_item_new(id, st);
    if (!it) return NULL;
    for (int i = 0; i < n; i++) {
        if (!pools[i]) continue;
        vf_tensor *t = vf_bufpool_tensor(pools[i], dt, nd[i], shp[i], st);
        if (!t || vf_item_put(it, vf_dit_xf_names[i], t, st)) {
            vf_item_free(it);
            return NULL;
        }
    }
    return it;
}

static void xfer_of(const vf_item *it, vf_dit_xfer *x)
{
    vf_tensor *t;
    x->x = (t = vf_item_get(it, "x")) ? t->data : NULL;
    x->e = (t = vf_item_get(it, "e")) ? t->data : NULL;
    x->e0 = (t = vf_item_get(it, "e0")) ? t->data : NULL;
    x->ctx = (t = vf_item_get(it, "ctx")) ? t->data : NULL;
}

/* ------------------------------------------------------------------ first partition */

/* The replica's global batch of this step: the next reader item, after skipping (once,
 * on resume) every batch at or before the checkpoint's cursor. */
static int recv_batch(vf_stage *s, vf_ctx *ctx, dit_part_state *h, vf_item **out, vf_status *st)
{
    vf_port *in = vf_in(ctx, "batch");
    int skipped = 0;
    for (;;) {
        vf_item *it = NULL;
        int rc = vf_recv(in, &it, st);
        if (rc) {
            if (rc == VF_EOS && h->skip_to[0])
                return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                     "%s: the data ended before the checkpoint's cursor %s (another cache?)",
                                     vf_stage_name(s), h->skip_to);
            return rc;
        }
        const char *cur = vf_item_str(it, "cursor");
        if (h->skip_to[0]) {
            int cmp = 0;
            if (cur && !vf_lr_cursor_same_stream(cur, h->skip_to)) {
                rc = vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                   "%s: the checkpoint's data cursor %s is of another stream than this "
                                   "reader's (%s): another cache, seed or shard layout", vf_stage_name(s),
                                   h->skip_to, cur);
                vf_item_free(it);
                return rc;
            }
            if (!cur || vf_lr_cursor_cmp(cur, h->skip_to, &cmp) < 0) {
                rc = vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                   "%s: batch cursor \"%s\" cannot be compared with the checkpoint's \"%s\"",
                                   vf_stage_name(s), cur ? cur : "", h->skip_to);
                vf_item_free(it);
                return rc;
            }
            if (cmp <= 0) {
                bool exact = cmp == 0;
                vf_item_free(it);
                skipped++;
                if (exact) {
                    vf_log(ctx, VF_LOG_INFO, "resumed the data at cursor %s (%d batches replayed)",
                           h->skip_to, skipped);
                    h->skip_to[0] = 0;
                }
                continue;
            }
            if (skipped == 0) {
                /* the reader already starts past the cursor (its own cursor param) */
                vf_log(ctx, VF_LOG_WARN, "first batch %s is past the checkpoint's cursor %s: the reader "
                       "was positioned by its own cursor param", cur, h->skip_to);
                h->skip_to[0] = 0;
            } else {
                vf_item_free(it);
                return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                     "%s: the reader's batches step over the checkpoint's cursor %s (batch size "
                                     "changed?)", vf_stage_name(s), h->skip_to);
            }
        }
        *out = it;
        return 0;
    }
}

/* Checks the batch item and returns its geometry (Bg, T, H, W). */
static int batch_dims(vf_stage *s, const dit_part_state *h, const vf_item *it, vf_dit_dims *d,
                      vf_status *st)
{
    vf_tensor *lat = vf_item_get(it, "latent"), *tx = vf_item_get(it, "text"), *tl = vf_item_get(it, "text_len");
    if (!lat || lat->ndim != 5 || lat->dtype != VF_DTYPE_F32 || lat->device.kind != VF_DEV_CPU)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "%s: batch \"%s\" has no host f32 \"latent\" (B, z, T, H, W)", vf_stage_name(s),
                             vf_item_id(it));
    if (lat->shape[1] != h->cfg.z)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: latents have %lld channels, the model's z is %d", vf_stage_name(s),
                             (long long)lat->shape[1], h->cfg.z);
    int rc = vf_dit_cond_check(vf_stage_name(s), h, it, st);
    if (rc) return rc;
    if (!tx || tx->ndim != 2 || tx->dtype != VF_DTYPE_I32 || tx->shape[0] != lat->shape[0] || !tl ||
        tl->dtype != VF_DTYPE_I32 || vf_tensor_numel(tl) != lat->shape[0])
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "%s: batch \"%s\" needs i32 \"text\" (B, Ltxt) and \"text_len\" (B)",
                             vf_stage_name(s), vf_item_id(it));
    if (h->cfg.text_emb) {
        vf_tensor *te = vf_item_get(it, "text_emb");
        if (!te || te->ndim != 3 || te->dtype != VF_DTYPE_F32 || te->device.kind != VF_DEV_CPU ||
            te->shape[0] != lat->shape[0])
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                 "%s: batch \"%s\" has no host f32 \"text_emb\" (B, L, %d): the model "
                                 "takes text embeddings (text = embeddings); the reader needs text_dim = %d",
                                 vf_stage_name(s), vf_item_id(it), h->cfg.text_dim, h->cfg.text_dim);
        if (te->shape[2] != h->cfg.text_dim || te->shape[1] > h->cfg.text_len)
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                 "%s: tensor \"text_emb\" is (%lld, %lld, %lld); the model takes at most "
                                 "%d rows of width %d", vf_stage_name(s), (long long)te->shape[0],
                                 (long long)te->shape[1], (long long)te->shape[2], h->cfg.text_len,
                                 h->cfg.text_dim);
    }
    *d = vf_dit_dims_of(&h->cfg, (int)lat->shape[0], (int)lat->shape[2], (int)lat->shape[3], (int)lat->shape[4]);
    if (d->B < h->M)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: a batch of %d samples cannot be cut into %d micro-batches (drop_last "
                             "keeps batches whole)", vf_stage_name(s), d->B, h->M);
    return 0;
}

/* Position in the step's combined batch of sample j of the batch (dit_route.c: a routed
 * batch's sample j is the replica batch's route_j[j]). */
static uint64_t position(const dit_part_state *h, int j)
{
    return (uint64_t)(h->route ? h->route_j[j] : j) * (uint64_t)h->D + (uint64_t)h->r;
}

/* Host pairs and tokens of micro-batch [first, first + nb) into the staging buffers. */
static void make_pairs(dit_part_state *h, const vf_item *batch, int64_t step, int first, int nb)
{
    vf_tensor *lat = vf_item_get(batch, "latent"), *tx = vf_item_get(batch, "text"),
              *tl = vf_item_get(batch, "text_len");
    int64_t TLr = tx->shape[1], TL = h->cfg.text_len;
    const float *x0 = lat->data;
    const int32_t *text = tx->data, *len = tl->data;
    for (int i = 0; i < nb; i++) {
        int j = first + i;
        h->h_t[i] = vf_dit_rf_sample(&h->rf, (uint64_t)step, position(h, j), h->per, x0 + (int64_t)j * h->per,
                                     h->h_xt + (int64_t)i * h->per, h->h_target + (int64_t)i * h->per);
        for (int64_t k = 0; k < TL; k++) h->h_text[i * TL + k] = k < TLr ? text[(int64_t)j * TLr + k] : 0;
        int32_t L = len[j] < 0 ? 0 : len[j];
        h->h_len[i] = L < TL ? L : (int32_t)TL;
    }
    vf_tensor *te = h->cfg.text_emb ? vf_item_get(batch, "text_emb") : NULL;
    if (te) { /* rows past each length are zeroed by the model (vf_dit_batch.text_emb) */
        int64_t Lr = te->shape[1], Dt = h->cfg.text_dim, rows = Lr < TL ? Lr : TL;
        const float *src = te->data;
        for (int i = 0; i < nb; i++) {
            float *o = h->h_emb + (int64_t)i * TL * Dt;
            memcpy(o, src + (int64_t)(first + i) * Lr * Dt, sizeof(float) * (size_t)(rows * Dt));
            memset(o + rows * Dt, 0, sizeof(float) * (size_t)((TL - rows) * Dt));
            if (h->h_len[i] > rows) h->h_len[i] = (int32_t)rows;
        }
    }
}

/* The timesteps micro-batch m (samples [first, first + nb) of the batch) drew, one metrics
 * row {"event":"timesteps", "step", "replica", "mb", "timesteps": [...], "positions": [...]},
 * each sample's position in the step's combined batch with it: which side of an expert
 * boundary each micro-batch trained on, and which samples each expert took, are read off the
 * run's metrics.jsonl (tests/integration/test_train_wan22*.py). */
static void log_timesteps(vf_ctx *ctx, const dit_part_state *h, int64_t step, int m, int first, int nb)
{
    size_t n = 112 + 40 * (size_t)nb, len;
    char *row = malloc(n);
    if (!row) return; /* a row lost to a full memory is no reason to stop training */
    len = (size_t)snprintf(row, n, "{\"event\":\"timesteps\",\"step\":%lld,\"replica\":%d,\"mb\":%d,\"timesteps\":[",
                           (long long)step, h->r, m);
    for (int i = 0; i < nb && len < n; i++) len += (size_t)snprintf(row + len, n - len, "%s%.9g", i ? "," : "", h->h_t[i]);
    if (len < n) len += (size_t)snprintf(row + len, n - len, "],\"positions\":[");
    for (int i = 0; i < nb && len < n; i++)
        len += (size_t)snprintf(row + len, n - len, "%s%llu", i ? "," : "", (unsigned long long)position(h, first + i));
    if (len < n) snprintf(row + len, n - len, "]}");
    vf_metric_row(ctx, row);
    free(row);
}

/* ------------------------------------------------------------------ buckets */

int vf_dit_bucket_max(const char *who, const vf_dit_config *c, int M, const char *geo, vf_dit_dims *max,
                      vf_dit_dims *each, int *neach, vf_status *st)
{
    vf_dit_dims d[VF_DIT_MAX_BUCKETS];
    int n = 0;
    for (const char *g = geo; *g && n < VF_DIT_MAX_BUCKETS;) {
        char name[64];
        long long B, z, T, H, W;
        int used = -1;
        if (sscanf(g, "%63[^:]:%lld,%lld,%lld,%lld,%lld%n", name, &B, &z, &T, &H, &W, &used) != 6 || used < 0 ||
            B < 1 || T < 1 || H < 1 || W < 1)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "%s: bucket geometries \"%s\" are not name:B,z,T,H,W;…", who, geo);
        if (z != c->z)
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                 "%s: bucket %s has latents of %lld channels, the model's z is %d", who, name, z, c->z);
        if (T % c->patch[0] || H % c->patch[1] || W % c->patch[2])
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                 "%s: bucket %s: latent T=%lld H=%lld W=%lld is not divisible by the patch "
                                 "(%d,%d,%d): its width and height must be multiples of 8·patch",
                                 who, name, T, H, W, c->patch[0], c->patch[1], c->patch[2]);
        if (B < M)
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                 "%s: bucket %s: batches of %lld samples cannot be cut into %d micro-batches", who,
                                 name, B, M);
        d[n++] = vf_dit_dims_of(c, (int)((B + M - 1) / M), (int)T, (int)H, (int)W);
        g += used;
        if (*g == ';') g++;
    }
    if (n == 0) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: no bucket geometry", who);
    *max = vf_dit_dims_max(d, n);
    if (each) {
        memcpy(each, d, sizeof d[0] * (size_t)n);
        *neach = n;
    }
    return 0;
}

/* ------------------------------------------------------------------ the step */

typedef struct mb_info {
    vf_dit_dims d;           /* B 0: an empty micro-batch (routing), passed on, computing nothing */
    int Bg;
    int skip; /* latent frames the loss leaves out (vf_dit_batch.skip_frames) */
    int64_t ktot;            /* routing: the expert's samples of the step over the replicas */
} mb_info;

int vf_dit_stage_step(vf_stage *s, vf_ctx *ctx, dit_part_state *h, int64_t step, dit_step_out *o,
                      vf_status *st)
{
    int rc = 0;
    vf_backend *be = h->be;
    vf_item *batch = NULL, *it = NULL, *out = NULL;
    mb_info *mi = NULL;
    const char *name = vf_stage_name(s);
    vf_dit_dims bd = {0};
    int64_t kb = 0; /* the samples of the step's micro-batches */
    memset(o, 0, sizeof *o);

    if (h->first) {
        rc = recv_batch(s, ctx, h, &batch, st);
        if (rc) return rc;
        VF_TRY(batch_dims(s, h, batch, &bd, st));
        const char *cur = vf_item_str(batch, "cursor");
        snprintf(o->cursor, sizeof o->cursor, "%s", cur ? cur : "");
        vf_dit_dims mx = vf_dit_dims_of(&h->cfg, (bd.B + h->M - 1) / h->M, bd.T, bd.H, bd.W);
        const char *geo = vf_item_str(batch, "geometries");
        if (geo) VF_TRY(vf_dit_bucket_max(name, &h->cfg, h->M, geo, &mx, NULL, NULL, st));
        if (!h->ready) {
            h->bucketed = geo != NULL;
            VF_TRY(vf_dit_stage_setup(h, &mx, st));
        }
        if (h->bucketed ? !geo || memcmp(&mx, &h->max, sizeof mx) != 0
                        : mx.B > h->max.B || mx.T != h->max.T || mx.H != h->max.H || mx.W != h->max.W)
            VF_FAIL(st, VF_EBADINPUT, "%s: batch geometry B=%d T=%d H=%d W=%d differs from the first "
                    "batch's (one latent shape per run, or the same buckets throughout)", name, bd.B, bd.T, bd.H,
                    bd.W);
        h->per = (int64_t)h->cfg.z * bd.T * bd.H * bd.W;
        if ((int64_t)((bd.B + h->M - 1) / h->M) * h->per > h->cap)
            VF_FAIL(st, VF_EBADINPUT, "%s: a micro-batch of %d x %lld latent values exceeds the geometry the "
                    "partition was sized for (%lld)", name, (bd.B + h->M - 1) / h->M, (long long)h->per,
                    (long long)h->cap);
        if (h->route) VF_TRY(vf_dit_route_step(h, &batch, step, bd.B, st));
        if (h->sp_rank == 0) { /* a replica's batch counts once, not once per rank */
            int kr = h->route ? h->routed : bd.B; /* what this expert trains of it */
            o->samples = kr;
            o->tokens = (int64_t)kr * bd.L;
            o->flops = kr * vf_dit_train_flops(&h->cfg, bd.L, h->cfg.text_len, h->recompute);
        }
    }
    mi = calloc((size_t)h->M, sizeof *mi);
    if (!mi) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", name);
    vf_dit_swap_zero_grads(h);

    int nops = 2 * h->M;
    for (int k = 0; k < nops; k++) {
        if (k > 0 && !h->ready) VF_FAIL(st, VF_EINVAL, "%s: schedule broken (not set up)", name);
        vf_1f1b_op op = h->ready ? h->ops[k] : (vf_1f1b_op){true, 0};
        int m = op.mb;
        char id[64];
        snprintf(id, sizeof id, "s%lld.m%d", (long long)step, m);
        int64_t t0;
        if (op.fwd) {
            vf_dit_batch b = {0};
            vf_dit_xfer in = {0}, xo = {0};
            vf_dit_saved *sv = NULL;
            if (h->first) {
                int f0, nb;
                vf_train_mb_range(h->route ? h->routed : bd.B, h->M, m, &f0, &nb);
                mi[m] = (mb_info){vf_dit_dims_of(&h->cfg, nb, bd.T, bd.H, bd.W), bd.B, 0,
                                  h->route ? h->routed_total : 0};
                vf_dit_sp_rank_dims(h, &mi[m].d);
                t0 = vf_train_now_ns();
                if (nb == 0) { /* an empty micro-batch (routing): an item of its numbers only */
                    if (!h->last && !(out = vf_item_new(id, st)))
                        VF_FAIL(st, st->code ? st->code : VF_ENOMEM, "%s: out of memory", name);
                } else {
                    make_pairs(h, batch, step, f0, nb);
                    if (h->sp_rank == 0) log_timesteps(ctx, h, step, m, f0, nb);
                    mi[m].skip = vf_dit_cond_first_frame(h, batch, f0, nb);
                    be->upload(be, h->d_xt, h->h_xt, (int64_t)nb * h->per, h->act);
                    b = (vf_dit_batch){mi[m].d, h->d_xt, h->h_t, h->h_text, h->h_len, NULL, h->h_emb};
                    b.t_tok = mi[m].skip ? h->h_ttok : NULL, b.skip_frames = mi[m].skip;
                    int64_t ncond = vf_dit_cond_fill(h, batch, f0, nb);
                    if (h->d_cond) be->upload(be, h->d_cond, h->h_cond, ncond, h->act);
                    b.cond = h->d_cond, b.img = h->h_img;
                    int64_t ntg;
                    const float *tg = vf_dit_sp_rank_target(h, &mi[m].d, &ntg);
                    if (h->last) {
                        be->upload(be, h->d_target, tg, ntg, h->act);
                        b.target = h->d_target;
                    } else {
                        out = pooled_item(h, id, h->act_pool, XF_N, h->act, &mi[m].d, st);
                        if (!out) VF_FAIL(st, st->code ? st->code : VF_ENOMEM, "%s: no activation buffers", name);
                        be->upload(be, vf_item_get(out, "target")->data, tg, ntg, h->act);
                        xfer_of(out, &xo);
                    }
                }
            } else {
                rc = vf_recv(vf_in(ctx, "act_in"), &it, st);
                if (rc == VF_EOS && k == 0) {
                    rc = VF_EOS;
                    goto fail;
                }
                if (rc == VF_EOS)
                    VF_FAIL(st, VF_EINVAL, "%s: activations ended in the middle of step %lld", name, (long long)step);
                VF_TRY(rc);
                if ((int64_t)meta(it, "step") != step || (int)meta(it, "mb") != m)
                    VF_FAIL(st, VF_EINVAL, "%s: got activations of step %g micro-batch %g, expected %lld/%d",
                            name, meta(it, "step"), meta(it, "mb"), (long long)step, m);
                mi[m] = (mb_info){vf_dit_dims_of(&h->cfg, (int)meta(it, "B"), (int)meta(it, "T"), (int)meta(it, "H"),
                                                 (int)meta(it, "W")),
                                  (int)meta(it, "Bg"), meta(it, "skip") > 0 ? (int)meta(it, "skip") : 0,
                                  meta(it, "ktot") > 0 ? (int64_t)meta(it, "ktot") : 0};
                if (!h->ready) {
                    vf_dit_dims mx = vf_dit_dims_of(&h->cfg, (int)meta(it, "Bmax"), (int)meta(it, "Tmax"),
                                                    (int)meta(it, "Hmax"), (int)meta(it, "Wmax"));
                    mx.N = (int64_t)meta(it, "Nmax");
                    VF_TRY(vf_dit_stage_setup(h, &mx, st));
                    op = h->ops[k];
                }
                vf_dit_sp_rank_dims(h, &mi[m].d);
                xfer_of(it, &in);
                b.dims = mi[m].d;
                b.skip_frames = mi[m].skip;
                vf_tensor *tg = vf_item_get(it, "target");
                if (mi[m].d.B == 0) { /* an empty micro-batch: its item is passed on, nothing computed */
                    if (!h->last && !(out = vf_item_new(id, st)))
                        VF_FAIL(st, st->code ? st->code : VF_ENOMEM, "%s: out of memory", name);
                } else if (!tg) {
                    VF_FAIL(st, VF_EINVAL, "%s: activations without \"target\"", name);
                } else if (h->last) {
                    b.target = tg->data;
                } else {
                    /* x is new; e, e0, ctx and target are passed on as received */
                    vf_bufpool *px[XF_N] = {h->act_pool[XF_X]};
                    out = pooled_item(h, id, px, 1, h->act, &mi[m].d, st);
                    if (!out) VF_FAIL(st, st->code ? st->code : VF_ENOMEM, "%s: no activation buffers", name);
                    for (int i = XF_E; i < XF_N; i++) {
                        vf_tensor *t = vf_item_get(it, vf_dit_xf_names[i]);
                        if (!t) VF_FAIL(st, VF_EINVAL, "%s: activations without \"%s\"", name, vf_dit_xf_names[i]);
                        VF_TRY(vf_item_put(out, vf_dit_xf_names[i], vf_tensor_ref(t), st));
                    }
                    xfer_of(out, &xo);
                }
                t0 = vf_train_now_ns();
            }
            sv = h->sv[m % h->nsv];
            kb += mi[m].d.B;
            if (mi[m].d.B > 0)
                VF_TRY(vf_dit_part_forward(h->part, &b, h->first ? NULL : &in, h->last ? NULL : &xo, sv, st));
            if (h->last && mi[m].d.B > 0) {
                /* the gradients of the mean over the step's samples (routing: the expert's) */
                double loss;
                double den = mi[m].ktot > 0 ? (double)mi[m].ktot : (double)mi[m].Bg * (double)h->D;
                float scale = (float)((double)mi[m].d.B / den);
                VF_TRY(vf_dit_part_loss(h->part, &b, sv, scale, &loss, st));
                o->loss += h->route ? loss * (double)mi[m].d.B : loss * (double)mi[m].d.B / (double)mi[m].Bg;
            }
            o->busy_ns += vf_train_now_ns() - t0;
            vf_item_free(it);
            it = NULL;
            if (!h->last) {
                static const char *const keys[] = {"step", "mb",   "B",    "Bg",   "Bmax", "T",   "H",
                                                   "W",    "Tmax", "Hmax", "Wmax", "Nmax", "skip", "ktot"};
                double vals[] = {(double)step, m,         mi[m].d.B, mi[m].Bg, h->max.B, mi[m].d.T, mi[m].d.H,
                                 mi[m].d.W,    h->max.T,  h->max.H,  h->max.W, (double)h->max.N, mi[m].skip,
                                 (double)mi[m].ktot};
                VF_TRY(set_nums(out, st, 14, keys, vals));
                rc = vf_send(vf_out(ctx, "act_out"), out, st);
                out = NULL;
                VF_TRY(rc);
            }
        } else {
            vf_dit_xfer d = {0};
            vf_dit_batch b = {mi[m].d};
            bool empty = mi[m].d.B == 0; /* its gradient item carries no tensors */
            if (h->last && !h->first) {
                out = empty ? vf_item_new(id, st) : pooled_item(h, id, h->gout_pool, XF_CTX + 1, h->grad, &mi[m].d, st);
                if (!out) VF_FAIL(st, st->code ? st->code : VF_ENOMEM, "%s: no gradient buffers", name);
                xfer_of(out, &d);
            } else if (!h->last) {
                rc = vf_recv(vf_in(ctx, "grad_in"), &it, st);
                if (rc == VF_EOS)
                    VF_FAIL(st, VF_EINVAL, "%s: gradients ended in the middle of step %lld", name, (long long)step);
                VF_TRY(rc);
                if ((int64_t)meta(it, "step") != step || (int)meta(it, "mb") != m)
                    VF_FAIL(st, VF_EINVAL, "%s: got gradients of step %g micro-batch %g, expected %lld/%d", name,
                            meta(it, "step"), meta(it, "mb"), (long long)step, m);
                xfer_of(it, &d);
                if (!h->first) { /* updated in place and passed on */
                    out = it;
                    it = NULL;
                }
            }
            t0 = vf_train_now_ns();
            if (!empty)
                VF_TRY(vf_dit_part_backward(h->part, &b, h->sv[m % h->nsv], (h->first && h->last) ? NULL : &d, st));
            o->busy_ns += vf_train_now_ns() - t0;
            vf_item_free(it);
            it = NULL;
            if (!h->first) {
                VF_TRY(set_nums(out, st, 2, (const char *const[]){"step", "mb"}, (double[]){(double)step, m}));
                rc = vf_send(vf_out(ctx, "grad_out"), out, st);
                out = NULL;
                VF_TRY(rc);
            }
        }
    }
    if (h->route) { /* the mean over this replica's routed samples; the shards weigh it by their count */
        if (h->last && kb > 0) o->loss /= (double)kb;
        o->routed = h->sp_rank == 0 ? (int)kb : 0;
    }
    if (h->last) VF_TRY(vf_dit_sp_rank_loss(h, &o->loss, st));
fail:
    vf_item_free(it);
    vf_item_free(out);
    vf_item_free(batch);
    free(mi);
    return rc;
}
