/* dit_swap.c — the `dit` stage's side of block swap (models/dit.h vf_dit_part_set_swap):
 * the `swap_blocks` param checked against the partition, the plan's lines for it, and
 * where each frozen base tensor lands when the partition loads it (the resident buffer
 * or the host copy of the swapped blocks).
 */
#include "stages/train/dit_stage.h"

#include <stdio.h>
#include <string.h>

int vf_dit_swap_param(const vf_params *prm, bool lora, int p, int b0, int b1, int *K, bool *is_auto,
                      vf_status *st)
{
    /* the schema takes one word besides integers: "auto" */
    *is_auto = vf_param_str(prm, "swap_blocks") != NULL;
    *K = *is_auto ? 0 : (int)vf_param_int(prm, "swap_blocks");
    if (*is_auto && !lora)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit partition %d: swap_blocks \"auto\" needs LoRA (a frozen base): block swap streams "
                             "weights host to device only", p);
    return vf_dit_swap_check(*K, lora, p, b0, b1, st);
}

int vf_dit_swap_check(int K, bool lora, int p, int b0, int b1, vf_status *st)
{
    if (K == 0) return 0;
    if (!lora)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit partition %d: swap_blocks %d needs LoRA (a frozen base): block swap streams "
                             "weights host to device only, and a full fine-tune lends its weights to the "
                             "optimizer shards in device memory", p, K);
    if (K >= b1 - b0)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit partition %d: swap_blocks %d is not below the partition's %d blocks "
                             "[%d, %d) (at most %d)", p, K, b1 - b0, b0, b1, b1 - b0 - 1);
    return 0;
}

void vf_dit_swap_plan(vf_mem_plan *out, vf_device dev, const vf_dit_layout *l, int b0, int b1, int K,
                      size_t as)
{
    if (K == 0) return;
    int64_t hole, hole_n, blk_n;
    vf_dit_swap_split(l, b0, b1, K, &hole, &hole_n, &blk_n);
    int nring = K < 2 ? K : 2;
    vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "block swap ring (base weights of the blocks in flight)",
                    (int64_t)as * blk_n * nring);
    vf_mem_plan_add_pinned(out, VF_MEM_WEIGHTS, "block swap: swapped blocks' base weights (pinned host)",
                           (int64_t)as * hole_n);
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
