/* dit_offload.c — activation offload of a recomputing DiT partition (dit.h
 * vf_dit_part_set_offload): what a block keeps for its backward (its input, and where
 * the forward's self-attention result is kept, that too) goes to pinned host memory
 * after the block's forward and comes back ahead of its backward, through a ring of
 * DIT_OFFLOAD_RING device records on a copy queue of its own (ops.h "block swap").
 *
 * Record i is block i's: its input x_i (i ≥ 1; x_0, the partition's input, stays in the
 * saved store, as does the head's input) and its dit_att_kept. Forward: block i reads
 * record i's slot (i mod R) and writes its output into record i + 1's; once it is done,
 * record i is copied out, while block i + 1 computes on the next two slots. Before a
 * block writes a slot it waits for that slot's last copy out (swap_wait). Backward: use
 * j = nb − 1 − i brings record i into slot j mod R; the pass enqueues the first R when it
 * begins and, as each block's backward is done, the copy of use j + R into its slot
 * (swap_in starts after the ops enqueued before it, so after the block that read the
 * slot). Copies are exact and the ops the same, so the results are those without
 * offload bit for bit. One copy queue keeps its copies in order, so a record's copy back
 * never overtakes its copy out.
 */
#include "models/dit_internal.h"

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Bytes of one record's input, and of its kept attention result (0 where not kept), at
 * the plan's largest geometry. */
static size_t rec_x(const dit_plan *pl) { return al64((size_t)(pl->N * pl->c.dim) * pl->as); }
static size_t rec_att(const dit_plan *pl)
{
    if (!pl->att_kept) return 0;
    dit_carver cv = {0};
    dit_att_kept k;
    dit_carve_att_kept(&cv, pl, &k);
    return cv.off;
}

static size_t host_bytes(const dit_plan *pl)
{
    return (size_t)(pl->nb - 1) * rec_x(pl) + (size_t)pl->nb * rec_att(pl);
}

/* Host places of record i: its input (NULL for block 0) and its attention result. */
static char *host_x(const vf_dit_part *p, const vf_dit_saved *sv, int i)
{
    return i > 0 ? sv->host + (size_t)(i - 1) * rec_x(&p->pl) : NULL;
}
static char *host_att(const vf_dit_part *p, const vf_dit_saved *sv, int i)
{
    return sv->host + (size_t)(p->pl.nb - 1) * rec_x(&p->pl) + (size_t)i * rec_att(&p->pl);
}

void vf_dit_offload_memory(const vf_dit_config *c, int b0, int b1, const vf_dit_dims *max, int sp,
                           int recompute, size_t act_size, size_t grad_size, vf_dit_offload_mem *out)
{
    dit_plan pl;
    dit_plan_init(&pl, c, b0, b1, max, recompute, act_size, grad_size);
    dit_plan_sp(&pl, sp, max);
    pl.offload = true;
    dit_carver cv = {0};
    vf_dit_saved s;
    memset(&s, 0, sizeof s);
    dit_carve_saved(&cv, &pl, &s);
    out->saved = (int64_t)cv.off;
    out->host = (int64_t)host_bytes(&pl);
    out->ring = (int64_t)(DIT_OFFLOAD_RING * (rec_x(&pl) + rec_att(&pl)));
}

int vf_dit_part_set_offload(vf_dit_part *p, vf_status *st)
{
    int rc = 0;
    if (!p->pl.recompute)
        VF_FAIL(st, VF_EUSAGE, "dit partition [%d, %d): activation offload needs recompute (it moves the "
                "block inputs recompute keeps)", p->pl.b0, p->pl.b1);
    if (p->offq) return 0;
    const size_t rx = rec_x(&p->pl), ra = rec_att(&p->pl);
    p->omem = p->be->alloc(p->be, DIT_OFFLOAD_RING * (rx + ra), st);
    if (!p->omem) {
        vf_status_prefix(st, "dit partition [%d, %d): activation offload ring of %d records", p->pl.b0,
                         p->pl.b1, DIT_OFFLOAD_RING);
        rc = st && st->code ? st->code : VF_ENOMEM;
        goto fail;
    }
    dit_carver cv = {p->omem, 0};
    for (int r = 0; r < DIT_OFFLOAD_RING; r++) {
        p->oring[r] = dit_carve(&cv, rx);
        if (p->pl.att_kept) dit_carve_att_kept(&cv, &p->pl, &p->oatt[r]);
    }
    p->offq = p->be->swap_new(p->be, DIT_OFFLOAD_RING, st);
    if (!p->offq) {
        rc = st && st->code ? st->code : VF_ENOMEM;
        goto fail;
    }
    p->pl.offload = true;
    return 0;
fail:
    dit_offload_free(p);
    return rc;
}

void dit_offload_free(vf_dit_part *p)
{
    if (p->offq) p->be->swap_free(p->be, p->offq);
    if (p->omem) p->be->free(p->be, p->omem);
    p->offq = NULL;
    p->omem = NULL;
}

int dit_offload_saved_new(vf_dit_part *p, vf_dit_saved *sv, vf_status *st)
{
    if (!p->pl.offload) return 0;
    size_t n = host_bytes(&p->pl);
    if (!n) return 0;
    sv->host = p->be->alloc_pinned(p->be, n, st);
    if (!sv->host) {
        vf_status_prefix(st, "dit partition [%d, %d): activation offload host store of %zu bytes", p->pl.b0,
                         p->pl.b1, n);
        return st && st->code ? st->code : VF_ENOMEM;
    }
    return 0;
}

void dit_offload_saved_free(vf_dit_part *p, vf_dit_saved *sv)
{
    if (sv->host) p->be->free_pinned(p->be, sv->host);
    sv->host = NULL;
}

/* Enqueues the copies of record i between host and slot r (out: device to host). */
static void copy_rec(vf_dit_part *p, vf_dit_saved *sv, int i, int r, bool out)
{
    vf_backend *be = p->be;
    const int64_t n = p->off_n, D = p->pl.c.dim;
    const size_t xb = (size_t)(n * D) * p->pl.as;
    char *hx = host_x(p, sv, i);
    if (hx) be->swap_in(be, p->offq, r, out ? hx : p->oring[r], out ? p->oring[r] : hx, xb);
    if (!p->pl.att_kept) return;
    char *ha = host_att(p, sv, i);
    dit_carver cv = {ha, 0};
    dit_att_kept h;
    dit_carve_att_kept(&cv, &p->pl, &h);
    const size_t lb = (size_t)(p->pl.c.heads * n) * sizeof(float);
    const dit_att_kept *d = &p->oatt[r];
    be->swap_in(be, p->offq, r, out ? h.a : d->a, out ? d->a : h.a, xb);
    be->swap_in(be, p->offq, r, out ? (void *)h.lse : (void *)d->lse, out ? (void *)d->lse : (void *)h.lse, lb);
}

void dit_offload_fwd_enter(vf_dit_part *p, const vf_dit_saved *sv, int i, int64_t n, const void **x,
                           void **y, dit_blk_saved *s)
{
    const int R = DIT_OFFLOAD_RING, a = i % R, b = (i + 1) % R;
    p->off_n = n;
    /* the slots this block writes: their last copies out must be done */
    p->be->swap_wait(p->be, p->offq, a);
    p->be->swap_wait(p->be, p->offq, b);
    *x = i == 0 ? sv->xs[0] : p->oring[a];
    if (i + 1 < p->pl.nb) *y = p->oring[b];
    if (p->pl.att_kept) {
        s->a = p->oatt[a].a;
        s->lse1 = p->oatt[a].lse;
    }
}

void dit_offload_fwd_leave(vf_dit_part *p, vf_dit_saved *sv, int i)
{
    copy_rec(p, sv, i, i % DIT_OFFLOAD_RING, true);
}

/* Enqueues use j of the backward pass: record nb − 1 − j into slot j mod R. */
static void bwd_issue(vf_dit_part *p, vf_dit_saved *sv)
{
    const int j = p->off_issued++;
    copy_rec(p, sv, p->pl.nb - 1 - j, j % DIT_OFFLOAD_RING, false);
}

void dit_offload_bwd_pass(vf_dit_part *p, vf_dit_saved *sv, int64_t n)
{
    p->off_n = n;
    p->off_issued = 0;
    while (p->off_issued < DIT_OFFLOAD_RING && p->off_issued < p->pl.nb) bwd_issue(p, sv);
}

void dit_offload_bwd_enter(vf_dit_part *p, const vf_dit_saved *sv, int i, const void **x, dit_blk_saved *s)
{
    const int r = (p->pl.nb - 1 - i) % DIT_OFFLOAD_RING;
    p->be->swap_wait(p->be, p->offq, r);
    *x = i == 0 ? sv->xs[0] : p->oring[r];
    if (p->pl.att_kept) {
        s->a = p->oatt[r].a;
        s->lse1 = p->oatt[r].lse;
    }
}

void dit_offload_bwd_leave(vf_dit_part *p, vf_dit_saved *sv)
{
    if (p->off_issued < p->pl.nb) bwd_issue(p, sv);
}
