/* dit_sp_rank.c — a `dit` partition run as one rank of sequence parallelism (params sp,
 * sp_rank; models/dit_sp.h): the all-to-all group of the partition's ranks, each
 * micro-batch's geometry cut to the rank's tokens, and the step's loss summed over the
 * ranks.
 *
 * The N ranks of a partition get the same batches (one reader fans out to the first
 * partition's ranks; rank k of partition q talks to rank k of q ± 1), the same weights
 * from the shards, and hold a contiguous 1/N of every sample's tokens. Their group meets
 * in shared memory under a key made of the run dir, the partition and the replica, so two
 * runs or two partitions never share one.
 */
#include "stages/train/dit_stage.h"
#include "models/dit_sp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool aborting(void *user) { return vf_aborting(user); }

int vf_dit_sp_rank_check(const vf_dit_config *c, int sp, int sp_rank, vf_status *st)
{
    if (c->heads % sp)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit: sp = %d does not divide the model's %d heads (each rank attends with heads/sp)",
                             sp, c->heads);
    if (sp_rank >= sp)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "dit: sp_rank %d is not below sp = %d", sp_rank, sp);
    return 0;
}

int vf_dit_sp_rank_device(int sp, vf_device dev, vf_status *st)
{
    if (sp > 1 && dev.kind != VF_DEV_CPU) {
        char name[32];
        vf_device_str(dev, name, sizeof name);
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit: sp = %d runs on the CPU backend (its all-to-all is over shared memory), not on %s",
                             sp, name);
    }
    return 0;
}

int vf_dit_sp_rank_open(dit_part_state *h, const vf_dit_dims *max, vf_status *st)
{
    int rc = 0;
    if (h->sp < 2) return 0;
    char key[4200];
    snprintf(key, sizeof key, "%s|dit sp p%d r%d n%d", h->run_dir, h->p, h->r, h->sp);
    vf_a2a_opts o = {.cancel = aborting, .user = h->ctx};
    size_t chunk = vf_dit_sp_chunk_bytes(h->sp, max->L, max->B, &h->cfg, h->as);
    if (chunk < sizeof(double)) chunk = sizeof(double); /* the loss's exchange */
    VF_TRY(vf_a2a_open(key, h->sp, h->sp_rank, chunk, &o, &h->a2a, st));
    h->spg = calloc(1, sizeof *h->spg);
    if (!h->spg) VF_FAIL(st, VF_ENOMEM, "dit: out of memory");
    /* the scratch is sized for the longest sequence; each step sets its own (dims) */
    VF_TRY(vf_dit_sp_init(h->spg, h->a2a, h->sp, h->sp_rank, max->L, h->cfg.heads, st));
    VF_TRY(vf_dit_part_set_sp(h->part, h->spg, st));
    if (h->first) { /* the rank's targets go on as its rows (models/dit_sp.h) */
        int64_t n = vf_dit_sp_target_values(&h->cfg, max, h->sp);
        if (!(h->h_trows = vf_alloc(sizeof(float) * (size_t)n, st)))
            VF_FAIL(st, VF_ENOMEM, "dit: no memory for the rank's %lld target values", (long long)n);
    }
fail:
    return rc;
}

void vf_dit_sp_rank_close(dit_part_state *h)
{
    vf_a2a_close(h->a2a);
    h->a2a = NULL;
    free(h->spg);
    h->spg = NULL;
    vf_free(h->h_trows);
    h->h_trows = NULL;
}

const float *vf_dit_sp_rank_target(dit_part_state *h, const vf_dit_dims *d, int64_t *n)
{
    if (h->sp < 2 || !h->spg) {
        *n = (int64_t)d->B * h->per;
        return h->h_target;
    }
    vf_dit_sp_target_rows(&h->cfg, h->spg, d, h->h_target, h->h_trows);
    *n = (int64_t)d->B * h->spg->Lr * h->cfg.z * h->cfg.patch[0] * h->cfg.patch[1] * h->cfg.patch[2];
    return h->h_trows;
}

void vf_dit_sp_rank_dims(dit_part_state *h, vf_dit_dims *d)
{
    if (h->sp < 2 || !h->spg) return;
    if (h->spg->L != d->L) /* another bucket: its sequence, cut the same way */
        vf_dit_sp_init(h->spg, h->a2a, h->sp, h->sp_rank, d->L, h->cfg.heads, NULL);
    d->L = h->spg->Lr;
    d->N = 0;
}

int vf_dit_sp_rank_loss(dit_part_state *h, double *loss, vf_status *st)
{
    int rc = 0;
    if (h->sp < 2 || !h->a2a) return 0;
    double *buf = calloc((size_t)h->sp, sizeof *buf);
    if (!buf) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "dit: out of memory");
    for (int i = 0; i < h->sp; i++) buf[i] = *loss;
    VF_TRY(vf_a2a_run(h->a2a, buf, buf, sizeof(double), st));
    /* rank order on every rank: the same sum everywhere */
    double s = 0;
    for (int i = 0; i < h->sp; i++) s += buf[i];
    *loss = s;
fail:
    free(buf);
    return rc;
}
