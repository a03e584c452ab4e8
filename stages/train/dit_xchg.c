/* dit_xchg.c — a DiT partition's side of the exchange with the optimizer shards (stage
 * kind `dit`; the shards' side is adamw_xchg.c; docs/ITEMS.md "training loop").
 *
 * The partition holds the weights and gradients of its range once, in memory the shards
 * can reach (be->alloc_shared), and lends them instead of sending copies: to each shard k
 * whose slice overlaps its range it sends views (vflow.h "lending memory") of the
 * overlap — "w" of the weights, "g" of the gradients — and the shard reads the gradients
 * in place and writes the new weights in place. The shard's reply ("weights", one per
 * shard and step) says it is done: it has dropped the views and its device work on them
 * has ended, so the partition may touch both buffers again. The partition starts a step
 * only once every shard replied for the previous one — the same wait as for the weights
 * themselves — so it never zeroes, accumulates into or reads as weights a buffer a shard
 * still holds.
 *   - start: a "lend" item per shard with the weights' view only (step -1); the shard
 *     writes the initial weights (the seeded init, the `weights` file or the checkpoint's)
 *     and replies with the step the run starts at;
 *   - step s: the slice item with both views and the step's metadata; the reply of step
 *     s carries the weights of step s in place.
 * Where the views reach the shard as copies (across nodes), the shard's reply brings the
 * weights as data ("w"), copied into the weights here; from then on that shard gets no
 * "w" view (it would only cross as bytes for nothing).
 * With block swap in a full fine-tune the swapped blocks' weights and gradients live in
 * host memory (swap_host, swap_ghost) and params / grads hold the rest of the range
 * packed. A piece that overlaps the swapped blocks is lent as two views of each kind:
 * "w" / "g" of its resident elements (contiguous in the packed buffers) and "wh" / "gh"
 * of those in the host copies, which begin at piece element "hole". The shards update
 * the host copy in place like the resident part, and the next step's forward streams
 * the swapped blocks in from it: no other copy of those weights exists to go stale.
 * Before the views go out, the gradients' last copies back to the host have landed
 * (vf_dit_part_swap_drain, then the sync).
 */
#include "stages/train/dit_stage.h"

#include <stdio.h>
#include <string.h>

/* A view of n elements at element `at` of buf (element size es) as `key` of it. */
static int put_view(vf_item *it, const char *key, vf_dtype dt, size_t es, vf_device dev, void *buf, int64_t at,
                    int64_t n, vf_status *st)
{
    vf_tensor *t = vf_tensor_view(dt, 1, &n, dev, (char *)buf + (size_t)at * es, st);
    if (!t) return st && st->code ? st->code : VF_ENOMEM;
    return vf_item_put(it, key, t, st);
}

/* Views of [off, off + n) of the weights (with_w) and gradients (with_g) into it: the
 * resident elements as "w" / "g", the swapped blocks' ones as "wh" / "gh" from piece
 * element "hole" on (dit_swap.c vf_dit_swap_piece). */
static int put_views(dit_part_state *h, vf_item *it, int64_t off, int64_t n, bool with_w, bool with_g,
                     vf_status *st)
{
    int rc = 0;
    vf_device dev = h->be->device, cpu = {VF_DEV_CPU, 0};
    int64_t rp, ha, hn, hp;
    vf_dit_swap_piece(h, off, n, &rp, &ha, &hn, &hp);
    if (with_w && n > hn) VF_TRY(put_view(it, "w", h->act, h->as, dev, h->params, rp, n - hn, st));
    if (with_g && n > hn) VF_TRY(put_view(it, "g", h->grad, h->gs, dev, h->grads, rp, n - hn, st));
    if (hn == 0) return 0;
    if (with_w) VF_TRY(put_view(it, "wh", h->act, h->as, cpu, h->swap_host, hp, hn, st));
    if (with_g) VF_TRY(put_view(it, "gh", h->grad, h->gs, cpu, h->swap_ghost, hp, hn, st));
    if (with_w || with_g) VF_TRY(vf_item_set_num(it, "hole", (double)ha, st));
fail:
    return rc;
}

/* The weights of [off, off + n) that came back as data (w, the piece whole) into the
 * resident buffer and the swapped blocks' host copy. */
static int weights_in(dit_part_state *h, const vf_tensor *w, int64_t off, int64_t n, vf_status *st)
{
    int64_t rp, ha, hn, hp;
    vf_dit_swap_piece(h, off, n, &rp, &ha, &hn, &hp);
    int rc = vf_train_tensor_in(h->be, (char *)h->params + (size_t)rp * h->as, h->act, w, 0, hn ? ha : n,
                                "dit weights", st);
    if (rc || hn == 0) return rc;
    rc = vf_train_tensor_in(vf_backend_cpu(), (char *)h->swap_host + (size_t)hp * h->as, h->act, w, ha, hn,
                            "dit weights (swapped blocks)", st);
    if (rc || ha + hn == n) return rc;
    return vf_train_tensor_in(h->be, (char *)h->params + (size_t)(rp + ha) * h->as, h->act, w, ha + hn,
                              n - ha - hn, "dit weights", st);
}

/* Lends every shard its overlap: the weights alone before the first step (o NULL, step
 * -1), the weights and the step's gradients after a step, with its metadata. The work
 * of the step on the buffers ends first: a shard in this process on another device, or
 * one that copies them out, waits for nothing else. */
static int lend(vf_ctx *ctx, dit_part_state *h, int64_t step, const dit_step_out *o, int64_t t0, int64_t t1,
                vf_status *st)
{
    vf_dit_part_swap_drain(h->part); /* the swapped blocks' gradients are on the host */
    int rc0 = h->be->sync(h->be, st);
    if (rc0 < 0) return rc0;
    for (int k = 0; k < h->S; k++) {
        int rc = 0;
        char name[VF_NAME_MAX], id[64];
        int64_t off, n;
        vf_train_overlap(h->off, h->off + h->n, h->slo[k], h->shi[k], &off, &n);
        snprintf(name, sizeof name, "grad_s%d", k);
        snprintf(id, sizeof id, "g%lld.p%d.r%d", (long long)step, h->p, VF_DIT_LANE(h));
        vf_item *it = vf_item_new(id, st);
        if (!it) return VF_ENOMEM;
        if (n > 0) rc = put_views(h, it, off, n, h->lend_w[k], o != NULL, st);
        const char *keys[] = {"step",    "part",    "replica", "off",  "n",     "t0_ns",     "t1_ns",
                              "busy_ns", "samples", "tokens",  "loss", "flops", "peak_flops"};
        double vals[] = {(double)step, h->p, VF_DIT_LANE(h), (double)off, (double)n, (double)t0, (double)t1,
                         o ? (double)o->busy_ns : 0, o ? o->samples : 0, o ? (double)o->tokens : 0,
                         o ? o->loss : 0, o ? o->flops : 0, h->peak};
        for (int i = 0; i < (o ? 13 : 5) && !rc; i++) rc = vf_item_set_num(it, keys[i], vals[i], st);
        if (!rc && o && h->peak > 0) rc = vf_item_set_str(it, "peak_dev", h->peak_dev, st);
        if (!rc && o && h->first) rc = vf_item_set_str(it, "cursor", o->cursor, st);
        if (!rc && o && h->route) rc = vf_item_set_num(it, "routed", o->routed, st);
        if (rc) {
            vf_item_free(it);
            return rc;
        }
        rc = vf_send(vf_out(ctx, name), it, st);
        if (rc < 0) return rc;
    }
    return 0;
}

int vf_dit_xchg_lend(vf_stage *s, vf_ctx *ctx, dit_part_state *h, vf_status *st)
{
    (void)s;
    for (int k = 0; k < h->S; k++) h->lend_w[k] = true;
    return lend(ctx, h, -1, NULL, 0, 0, st);
}

/* A reply of a step the shard took no update in (routing, no sample of its expert): the
 * weights here are still the ones it wrote, so it sends none. */
static bool kept(const vf_item *it)
{
    double v;
    return vf_item_num(it, "kept", &v) == 0 && v > 0;
}

int vf_dit_xchg_recv(vf_stage *s, vf_ctx *ctx, dit_part_state *h, int64_t *step, vf_status *st)
{
    int64_t covered = 0;
    bool seen[VF_TRAIN_MAX_SHARDS] = {0};
    for (int got = 0; got < h->S; got++) {
        vf_item *it = NULL;
        int rc = vf_recv(vf_in(ctx, "weights"), &it, st);
        if (rc == VF_EOS && got == 0) return VF_EOS;
        if (rc == VF_EOS)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: weights ended after %d of %d shards",
                                 vf_stage_name(s), got, h->S);
        if (rc) return rc;
        double ws, off, n, k;
        if (vf_item_num(it, "step", &ws) || vf_item_num(it, "off", &off) || vf_item_num(it, "n", &n) ||
            vf_item_num(it, "shard", &k)) {
            vf_item_free(it);
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: weights item without step/shard/off/n",
                                 vf_stage_name(s));
        }
        if (*step < 0) *step = (int64_t)ws;
        int64_t lo, cnt;
        int ki = (int)k;
        bool known = ki >= 0 && ki < h->S && !seen[ki];
        if (known) vf_train_overlap(h->off, h->off + h->n, h->slo[ki], h->shi[ki], &lo, &cnt);
        if ((int64_t)ws != *step || !known || (int64_t)off != (cnt > 0 ? lo : (int64_t)off) || (int64_t)n != cnt) {
            vf_item_free(it);
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "%s: weights of shard %g for step %g elements [%g, +%g) do not fit step %lld range "
                                 "[%lld, +%lld)",
                                 vf_stage_name(s), k, ws, off, n, (long long)*step, (long long)h->off, (long long)h->n);
        }
        seen[ki] = true;
        vf_tensor *w = vf_item_get(it, "w");
        if (n > 0 && w) { /* the views crossed as copies: the weights come as data */
            rc = weights_in(h, w, (int64_t)off, (int64_t)n, st);
            h->lend_w[ki] = false;
            if (rc) {
                vf_item_free(it);
                return rc;
            }
        } else if (n > 0 && !h->lend_w[ki] && !kept(it)) {
            vf_item_free(it);
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "%s: shard %d replied for step %g without the weights it was not lent", vf_stage_name(s),
                                 ki, ws);
        }
        covered += (int64_t)n;
        vf_item_free(it);
    }
    if (covered != h->n)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: the shards replied for %lld of %lld weights",
                             vf_stage_name(s), (long long)covered, (long long)h->n);
    return 0;
}

int vf_dit_xchg_send(vf_stage *s, vf_ctx *ctx, dit_part_state *h, int64_t step, const dit_step_out *o, int64_t t0,
                     int64_t t1, vf_status *st)
{
    (void)s;
    return lend(ctx, h, step, o, t0, t1, st);
}
