/* dit_swap.c — the `dit` stage's side of block swap (models/dit.h vf_dit_part_set_swap):
 * the `swap_blocks` param checked against the partition, the plan's lines for it, where
 * each frozen base tensor lands when the partition loads it (the resident buffer or the
 * host copy of the swapped blocks), and in a full fine-tune the host copies of the
 * swapped blocks' weights and gradients, which the partition lends to the optimizer
 * shards beside its resident buffers (dit_xchg.c, adamw_xchg.c).
 */
#include "stages/train/dit_stage.h"

#include <stdio.h>
#include <string.h>

int vf_dit_swap_param(const vf_params *prm, int p, int b0, int b1, int *K, bool *is_auto, vf_status *st)
{
    /* the schema takes one word besides integers: "auto" */
    *is_auto = vf_param_str(prm, "swap_blocks") != NULL;
    *K = *is_auto ? 0 : (int)vf_param_int(prm, "swap_blocks");
    return vf_dit_swap_check(*K, p, b0, b1, st);
}

int vf_dit_swap_check(int K, int p, int b0, int b1, vf_status *st)
{
    if (K == 0) return 0;
    if (K >= b1 - b0)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit partition %d: swap_blocks %d is not below the partition's %d blocks "
                             "[%d, %d) (at most %d)", p, K, b1 - b0, b0, b1, b1 - b0 - 1);
    return 0;
}

void vf_dit_swap_plan(vf_mem_plan *out, vf_device dev, const vf_dit_layout *l, int b0, int b1, int K,
                      size_t as, size_t gs)
{
    if (K == 0) return;
    int64_t hole, hole_n, blk_n;
    vf_dit_swap_split(l, b0, b1, K, &hole, &hole_n, &blk_n);
    int nring = K < 2 ? K : 2;
    if (!gs) {
        vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "block swap ring (base weights of the blocks in flight)",
                        (int64_t)as * blk_n * nring);
        vf_mem_plan_add_pinned(out, VF_MEM_WEIGHTS, "block swap: swapped blocks' base weights (pinned host)",
                               (int64_t)as * hole_n);
        return;
    }
    int64_t ring_n = blk_n * nring; /* each ring buffer a block's weights and its gradient */
    vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "block swap ring (weights of the blocks in flight)",
                    (int64_t)as * ring_n);
    vf_mem_plan_add(out, dev, VF_MEM_GRADS, "block swap ring (gradients of the blocks in flight)",
                    (int64_t)gs * ring_n);
    vf_mem_plan_add_pinned(out, VF_MEM_WEIGHTS, "block swap: swapped blocks' weights (pinned host, lent)",
                           (int64_t)as * hole_n);
    vf_mem_plan_add_pinned(out, VF_MEM_GRADS, "block swap: swapped blocks' gradients (pinned host, lent)",
                           (int64_t)gs * hole_n);
}

/* The CPU backend's host memory that other processes map (the shards' views of it cross
 * without a copy); a GPU's page-locked memory, which its copy queue reads and writes at
 * full speed (a view of it crosses to a shard in another process as a copy, and the
 * shard's reply brings the weights back as data). */
static void *host_alloc(dit_part_state *h, size_t bytes, vf_status *st)
{
    return h->swap_shared ? h->be->alloc_shared(h->be, bytes, st) : h->be->alloc_pinned(h->be, bytes, st);
}

int vf_dit_swap_host_alloc(vf_stage *s, dit_part_state *h, vf_status *st)
{
    h->swap_shared = h->be->device.kind == VF_DEV_CPU;
    size_t n = (size_t)h->swap_hole_n;
    if (!(h->swap_host = host_alloc(h, h->as * n, st)) || !(h->swap_ghost = host_alloc(h, h->gs * n, st)))
        return vf_status_set(st, st && st->code ? st->code : VF_ENOMEM, __FILE__, __LINE__,
                             "%s: no host memory for the %lld weights and gradients of %d swapped blocks",
                             vf_stage_name(s), (long long)n, h->swap);
    return 0;
}

void vf_dit_swap_host_free(dit_part_state *h)
{
    void *bufs[2] = {h->swap_host, h->swap_ghost};
    for (int i = 0; i < 2 && h->be; i++)
        if (bufs[i] && h->swap_shared) h->be->free_shared(h->be, bufs[i]);
        else if (bufs[i]) h->be->free_pinned(h->be, bufs[i]);
    h->swap_host = h->swap_ghost = NULL;
}

int64_t vf_dit_swap_lent_n(const dit_part_state *h)
{
    return h->lora ? h->n : h->n - h->swap_hole_n;
}

void vf_dit_swap_zero_grads(dit_part_state *h)
{
    h->be->memset0(h->be, h->grads, h->gs * (size_t)vf_dit_swap_lent_n(h));
    /* host memory: no copy is in flight (the last step's were drained before the shards
     * read them, dit_xchg.c) */
    if (h->swap_ghost) memset(h->swap_ghost, 0, h->gs * (size_t)h->swap_hole_n);
}

void vf_dit_swap_piece(const dit_part_state *h, int64_t off, int64_t n, int64_t *rp, int64_t *ha, int64_t *hn,
                       int64_t *hp)
{
    int64_t rel = off - h->off;
    *ha = *hn = *hp = 0;
    *rp = rel;
    if (!h->swap_ghost) return;
    int64_t h0 = h->swap_hole, h1 = h0 + h->swap_hole_n;
    int64_t a = rel > h0 ? rel : h0, b = rel + n < h1 ? rel + n : h1;
    if (b > a) *ha = a - rel, *hn = b - a, *hp = a - h0;
    /* the hole's elements before the piece are not in params */
    *rp = rel - (rel < h0 ? 0 : rel < h1 ? rel - h0 : h1 - h0);
}

int64_t vf_dit_swap_resident(const dit_part_state *h)
{
    return h->bn - h->swap_hole_n;
}

void *vf_dit_swap_dst(const dit_part_state *h, int64_t rel, bool *host)
{
    *host = h->swap_hole_n && rel >= h->swap_hole && rel < h->swap_hole + h->swap_hole_n;
    if (*host) return (char *)h->swap_host + (size_t)(rel - h->swap_hole) * h->as;
    if (rel >= h->swap_hole + h->swap_hole_n) rel -= h->swap_hole_n;
    return (char *)h->base + (size_t)rel * h->as;
}

void vf_dit_swap_metrics(vf_ctx *ctx, const dit_part_state *h, int64_t step)
{
    if (!h->swap || !h->part) return;
    double copy_s, wait_s;
    vf_dit_part_swap_stats(h->part, &copy_s, &wait_s);
    /* the share of the copies' time the compute did not wait for (1: all hidden); the
     * backend's totals since the partition began */
    double hidden = copy_s > 0 ? 1.0 - (wait_s < copy_s ? wait_s : copy_s) / copy_s : 1.0;
    char row[256];
    snprintf(row, sizeof row, "{\"event\":\"swap\",\"step\":%lld,\"partition\":%d,\"replica\":%d,\"blocks\":%d,"
             "\"copy_s\":%.6f,\"wait_s\":%.6f,\"hidden\":%.4f}", (long long)step, h->p, h->r, h->swap, copy_s,
             wait_s, hidden);
    vf_metric_row(ctx, row);
}
