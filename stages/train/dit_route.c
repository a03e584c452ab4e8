/* dit_route.c — routing by the drawn timestep (stage kind `dit`, param `route`): the two
 * experts of Wan 2.2 A14B trained in one run, each sample going to the expert whose side
 * of the boundary its t falls on (high: t >= boundary, low: t < boundary).
 *
 * A sample's t is the run's whole distribution drawn for (seed, step, j·D + r) (models/
 * dit.h vf_dit_rf_t, range [0, 1]), a pure function of the sample's position in the
 * step's combined batch: every partition and replica of either expert computes the
 * routing of every position without hearing from anyone. The first partition keeps the
 * samples of its replica's batch routed to its expert, in order, and cuts those into the
 * M micro-batches (dit_step.c), so no micro-batch straddles the boundary; the loss is the
 * mean over the expert's routed samples of the step, summed over the D replicas, whose
 * count k_total comes from the same draw (every replica's batch of a step has the batch
 * size of this one: the readers deal one bucket to all replicas at a step, the same
 * assumption the unrouted gradient scale B_m / (Bg·D) makes).
 */
#include "stages/train/dit_stage.h"

#include <stdlib.h>
#include <string.h>

int vf_dit_route_param(const vf_params *prm, const vf_dit_rf *rf, int *route, double *boundary, vf_status *st)
{
    const char *r = vf_param_str(prm, "route");
    *boundary = vf_param_num(prm, "boundary");
    if (!r[0]) *route = VF_DIT_ROUTE_NONE;
    else if (!strcmp(r, "high")) *route = VF_DIT_ROUTE_HIGH;
    else if (!strcmp(r, "low")) *route = VF_DIT_ROUTE_LOW;
    else
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "dit: route \"%s\" is not high, low or \"\"", r);
    if (*route && !(*boundary > 0 && *boundary < 1))
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "dit: route %s needs a boundary in (0, 1), got %g", r,
                             *boundary);
    /* a routed sample is on its side by its draw over the whole range: a range would
     * move it to where it was not drawn */
    double hi = rf->t_max > 0 ? rf->t_max : 1.0;
    if (*route && (rf->t_min != 0.0 || hi != 1.0))
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit: route %s draws t over [0, 1]; t_min %g .. t_max %g would remap it (leave them)", r,
                             rf->t_min, hi);
    return 0;
}

int vf_dit_route_pick(const vf_dit_rf *rf, int route, double boundary, int64_t step, int Bg, int D, int r, int *keep)
{
    int k = 0;
    for (int j = 0; j < Bg; j++) {
        double t = vf_dit_rf_t(rf, (uint64_t)step, (uint64_t)j * (uint64_t)D + (uint64_t)r);
        bool high = t >= boundary;
        if (high != (route == VF_DIT_ROUTE_HIGH)) continue;
        if (keep) keep[k] = j;
        k++;
    }
    return k;
}

/* An item of the rows keep[0 .. k) of every host tensor of `batch` whose first dimension
 * is Bg (latents, text, embeddings, conditioning), the other tensors shared and the
 * metadata copied. Caller owns it. */
static int gather(const vf_item *batch, int Bg, const int *keep, int k, vf_item **out, vf_status *st)
{
    int rc = 0;
    vf_item *it = vf_item_new(vf_item_id(batch), st);
    if (!it) return st && st->code ? st->code : VF_ENOMEM;
    for (int i = 0; i < vf_item_ntensors(batch); i++) {
        const char *name;
        vf_tensor *t = vf_item_tensor_at(batch, i, &name), *g;
        if (t->ndim >= 1 && t->shape[0] == Bg && t->device.kind == VF_DEV_CPU) {
            int64_t shp[VF_MAX_DIMS];
            memcpy(shp, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            shp[0] = k;
            size_t row = vf_tensor_nbytes(t) / (size_t)Bg;
            if (!(g = vf_tensor_new(t->dtype, t->ndim, shp, st)))
                VF_FAIL(st, st && st->code ? st->code : VF_ENOMEM, "dit: no memory for the routed batch's \"%s\"", name);
            for (int j = 0; j < k; j++)
                memcpy((char *)g->data + row * (size_t)j, (const char *)t->data + row * (size_t)keep[j], row);
        } else {
            g = vf_tensor_ref(t);
        }
        VF_TRY(vf_item_put(it, name, g, st));
    }
    for (int i = 0; i < vf_item_nmeta(batch); i++) {
        const char *key, *str;
        double num;
        bool is_num;
        vf_item_meta_at(batch, i, &key, &str, &num, &is_num);
        VF_TRY(is_num ? vf_item_set_num(it, key, num, st) : vf_item_set_str(it, key, str, st));
    }
    *out = it;
    return 0;
fail:
    vf_item_free(it);
    return rc;
}

int vf_dit_route_step(dit_part_state *h, vf_item **batch, int64_t step, int Bg, vf_status *st)
{
    if (Bg > h->route_cap) {
        int *j = realloc(h->route_j, sizeof *j * (size_t)Bg);
        if (!j) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "dit: out of memory");
        h->route_j = j, h->route_cap = Bg;
    }
    h->routed = vf_dit_route_pick(&h->rf, h->route, h->boundary, step, Bg, h->D, h->r, h->route_j);
    h->routed_total = 0;
    for (int r = 0; r < h->D; r++)
        h->routed_total += r == h->r ? h->routed
                                     : vf_dit_route_pick(&h->rf, h->route, h->boundary, step, Bg, h->D, r, NULL);
    if (h->routed == 0) return 0; /* every micro-batch empty: nothing of the batch is read */
    vf_item *g = NULL;
    int rc = gather(*batch, Bg, h->route_j, h->routed, &g, st);
    if (rc) return rc;
    vf_item_free(*batch);
    *batch = g;
    return 0;
}
