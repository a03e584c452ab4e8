/* dit_swap.c — block swap of a DiT partition (dit.h vf_dit_part_set_swap): the last K
 * blocks' weights live in host memory and stream into a ring of device buffers just
 * ahead of the block that needs them. With a frozen base in FP8 (dit_fp8.c) what
 * streams is the swapped blocks' FP8 bytes (their linears; the other tensors stay
 * resident), from the base's own host copy.
 *
 * A pass (the forward of a micro-batch, or its backward) uses the swapped blocks in a
 * fixed order, j = 0 … K−1 (forward ascending, backward descending); use j sits in ring
 * buffer j mod R. The pass enqueues the first R copies when it begins; when use j is
 * done its buffer takes the copy of use j + R, which the copy queue starts only after
 * the ops of use j (ops.h swap_in), and use j + 1 waits for its own copy before its ops
 * (swap_wait). So one block computes while the next copies, and a block's weights are
 * the same bytes whichever buffer holds them: the results are those without swap, bit
 * for bit.
 *
 * With gradients (a full fine-tune, vf_dit_part_set_swap_grads) a backward use also
 * brings the block's running gradient in beside its weights (the ring buffer's gradient
 * half), the block's backward accumulates into it as into the resident buffer, and when
 * the use is done its gradient goes back to the host copy on the same queue, after the
 * block's ops and before the buffer's next copy in. The queue runs its copies in order,
 * so the next micro-batch's backward of that block reads what this one wrote: every
 * accumulation sees the value it would see without swap (dW = round(dW_prev + Σ)), the
 * same bits. vf_dit_part_swap_drain waits for the last copies out before the optimizer
 * reads the host copy.
 */
#include "models/dit_internal.h"

void vf_dit_swap_split(const vf_dit_layout *l, int b0, int b1, int K, int64_t *hole, int64_t *hole_n,
                       int64_t *blk_n)
{
    int64_t off, n;
    vf_dit_layout_range(l, b0, b1, &off, &n);
    *blk_n = l->block_start[b0 + 1] - l->block_start[b0];
    *hole = l->block_start[b1 - K] - off;
    *hole_n = l->block_start[b1] - l->block_start[b1 - K];
}

int vf_dit_part_set_swap(vf_dit_part *p, int K, const void *host, vf_status *st)
{
    return vf_dit_part_set_swap_grads(p, K, host, NULL, st);
}

/* One ring buffer of `bytes` into *buf, the failure named. */
static int ring_alloc(vf_dit_part *p, void **buf, size_t bytes, const char *what, vf_status *st)
{
    *buf = p->be->alloc(p->be, bytes, st);
    if (*buf) return 0;
    vf_status_prefix(st, "dit partition [%d, %d): block swap ring buffer of %lld %s", p->pl.b0, p->pl.b1,
                     (long long)p->blk_n, what);
    return st && st->code ? st->code : VF_ENOMEM;
}

int vf_dit_part_set_swap_grads(vf_dit_part *p, int K, const void *host, void *ghost, vf_status *st)
{
    int rc = 0;
    int nb = p->pl.nb;
    if (K <= 0 || K >= nb)
        VF_FAIL(st, VF_EUSAGE, "dit partition [%d, %d): swap_blocks %d must be above 0 and below its %d blocks",
                p->pl.b0, p->pl.b1, K, nb);
    if (p->grads && !ghost)
        VF_FAIL(st, VF_EUSAGE, "dit partition [%d, %d): block swap of a partition with gradients (a full "
                "fine-tune) needs the host copy of the swapped blocks' gradients", p->pl.b0, p->pl.b1);
    if (!p->grads && ghost)
        VF_FAIL(st, VF_EUSAGE, "dit partition [%d, %d): block swap got a gradient host copy, but the partition "
                "has no gradients (a frozen base)", p->pl.b0, p->pl.b1);
    vf_dit_swap_split(p->l, p->pl.b0, p->pl.b1, K, &p->hole, &p->hole_n, &p->blk_n);
    p->swap_bytes = (size_t)p->blk_n * p->pl.as;
    p->swap_gbytes = ghost ? (size_t)p->blk_n * p->pl.gs : 0;
    if (p->fp8) { /* the FP8 base's own host copy of the swapped linears (dit_fp8.c) */
        const vf_dit_fp8 *fb = p->fp8;
        if (!fb->host8 || fb->hole8 != fb->at[dit_tidx_block(p->pl.b1 - K, BT_SQ_W)])
            VF_FAIL(st, VF_EUSAGE, "dit partition [%d, %d): swap_blocks %d needs the FP8 base made for it "
                    "(vf_dit_fp8_new_swap with the same blocks)", p->pl.b0, p->pl.b1, K);
        host = fb->host8;
        p->swap_bytes = (size_t)fb->blk8;
    }
    p->nring = K < DIT_SWAP_RING ? K : DIT_SWAP_RING;
    for (int i = 0; i < p->nring; i++) {
        VF_TRY(ring_alloc(p, &p->ring[i], p->swap_bytes, "weights", st));
        if (ghost) VF_TRY(ring_alloc(p, &p->gring[i], p->swap_gbytes, "gradients", st));
    }
    p->swapq = p->be->swap_new(p->be, p->nring, st);
    if (!p->swapq) {
        rc = st && st->code ? st->code : VF_ENOMEM;
        goto fail;
    }
    p->swap_host = host;
    p->swap_ghost = ghost;
    p->nswap = K;
    p->blk_w = p->blk_g = NULL;
    return 0;
fail:
    return rc;
}

void vf_dit_part_swap_drain(vf_dit_part *p)
{
    for (int i = 0; p && p->swapq && i < p->nring; i++) p->be->swap_wait(p->be, p->swapq, i);
}

/* Frees what vf_dit_part_set_swap made (vf_dit_part_free calls it). */
void dit_swap_free(vf_dit_part *p)
{
    if (p->swapq) p->be->swap_free(p->be, p->swapq);
    for (int i = 0; i < DIT_SWAP_RING; i++) {
        if (p->ring[i]) p->be->free(p->be, p->ring[i]);
        if (p->gring[i]) p->be->free(p->be, p->gring[i]);
    }
    p->swapq = NULL;
    p->nswap = 0;
}

void vf_dit_part_swap_stats(const vf_dit_part *p, double *copy_s, double *wait_s)
{
    *copy_s = *wait_s = 0;
    if (p->swapq) p->be->swap_stats(p->be, p->swapq, copy_s, wait_s);
}

/* The swapped block of use j of the pass in flight. */
static int use_block(const vf_dit_part *p, int j)
{
    int first = p->pl.b1 - p->nswap;
    return p->swap_bwd ? p->pl.b1 - 1 - j : first + j;
}

/* Whether the pass in flight moves gradients: a backward of a partition with them. */
static bool with_grads(const vf_dit_part *p) { return p->swap_bwd && p->swap_gbytes; }

static void issue(vf_dit_part *p)
{
    int j = p->swap_issued++;
    int slot = j % p->nring;
    int64_t k = use_block(p, j) - (p->pl.b1 - p->nswap);
    size_t bytes = p->swap_bytes;
    p->be->swap_in(p->be, p->swapq, slot, p->ring[slot], p->swap_host + (size_t)k * bytes, bytes);
    if (with_grads(p)) /* the block's gradient so far, which its backward adds to */
        p->be->swap_in(p->be, p->swapq, slot, p->gring[slot], p->swap_ghost + (size_t)k * p->swap_gbytes,
                       p->swap_gbytes);
}

void dit_swap_pass(vf_dit_part *p, bool backward)
{
    if (!p->nswap) return;
    p->swap_bwd = backward;
    p->swap_used = p->swap_issued = 0;
    p->blk_w = p->blk_g = NULL;
    while (p->swap_issued < p->nring) issue(p);
}

void dit_swap_enter(vf_dit_part *p, int blk)
{
    if (!p->nswap || blk < p->pl.b1 - p->nswap) return;
    VF_ASSERT(use_block(p, p->swap_used) == blk);
    int slot = p->swap_used % p->nring;
    p->be->swap_wait(p->be, p->swapq, slot);
    p->blk_w = p->ring[slot];
    p->blk_g = with_grads(p) ? p->gring[slot] : NULL;
    p->blk_cur = blk;
}

void dit_swap_leave(vf_dit_part *p, int blk)
{
    if (!p->nswap || blk < p->pl.b1 - p->nswap) return;
    if (with_grads(p)) { /* the block's gradient back to the host, after its backward's ops */
        int slot = p->swap_used % p->nring;
        int64_t k = blk - (p->pl.b1 - p->nswap);
        p->be->swap_in(p->be, p->swapq, slot, p->swap_ghost + (size_t)k * p->swap_gbytes, p->gring[slot],
                       p->swap_gbytes);
    }
    p->swap_used++;
    p->blk_w = p->blk_g = NULL;
    if (p->swap_issued < p->nswap) issue(p);
}
