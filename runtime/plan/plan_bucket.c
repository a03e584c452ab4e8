/* plan_bucket.c — the plan of each bucket of a bucketed source (plan.h, vf_plan_buckets).
 *
 * A source whose output port lists several geometries ("geometries" of vf_port_spec: a
 * bucketed latent reader) feeds batches of one geometry at a time; the plan of the whole
 * graph sizes every buffer for the largest of them. Each bucket's own peak comes from
 * the script run again with the user's --set pairs plus NAME.only=<bucket> (the source
 * then reads, and declares, that bucket alone), validated, placed, planned and held
 * against the same budgets: no formula of its own, as the fixes (plan_fix.c).
 */
#include "runtime/plan/plan.h"
#include "runtime/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SETS 160

/* The bucket names of a "name:dims;…" geometry list into names (at most max). */
static int geo_names(const char *geo, char names[][VF_NAME_MAX], char dims[][96], int max)
{
    int n = 0;
    for (const char *g = geo; *g && n < max;) {
        const char *colon = strchr(g, ':'), *end = strchr(g, ';');
        if (!colon || (end && end < colon)) break;
        size_t ln = (size_t)(colon - g), ld = end ? (size_t)(end - colon - 1) : strlen(colon + 1);
        snprintf(names[n], VF_NAME_MAX, "%.*s", (int)(ln < VF_NAME_MAX ? ln : VF_NAME_MAX - 1), g);
        snprintf(dims[n], 96, "%.*s", (int)(ld < 95 ? ld : 95), colon + 1);
        n++;
        g = end ? end + 1 : g + strlen(g);
    }
    return n;
}

int vf_plan_buckets(const vf_plan_req *req, const vf_mplan *base, const vf_budget *b, const vf_machine *m,
                    vf_plan_bucket *out, int max, vf_status *st)
{
    const vf_graph *g = base->g;
    int n = 0;
    if (!req->script || req->nsets + 1 > MAX_SETS) return 0;
    for (int s = 0; s < g->nstages && n < max; s++) {
        const vf_gstage *gs = &g->stages[s];
        const vf_port_spec *src = NULL;
        for (int p = 0; p < gs->ports.n && !src; p++)
            if (gs->ports.p[p].dir == VF_PORT_OUT && gs->ports.p[p].geometries[0]) src = &gs->ports.p[p];
        if (!src || !vf_param_has(gs->params, "only")) continue;
        const char *only = vf_param_str(gs->params, "only");
        if (only && only[0]) continue; /* already one bucket: the plan above is its plan */
        static char names[VF_PLAN_MAX_BUCKETS][VF_NAME_MAX], dims[VF_PLAN_MAX_BUCKETS][96];
        int nb = geo_names(src->geometries, names, dims, VF_PLAN_MAX_BUCKETS);
        for (int k = 0; k < nb && n < max; k++) {
            vf_plan_bucket *x = &out[n];
            memset(x, 0, sizeof *x);
            snprintf(x->stage, sizeof x->stage, "%.47s", gs->name);
            snprintf(x->name, sizeof x->name, "%.47s", names[k]);
            snprintf(x->dims, sizeof x->dims, "%.95s", dims[k]);
            const char *sets[MAX_SETS];
            char kv[256];
            for (int i = 0; i < req->nsets; i++) sets[i] = req->sets[i];
            snprintf(kv, sizeof kv, "%.47s.only=%.47s", gs->name, names[k]);
            sets[req->nsets] = kv;
            vf_graph *g2 = NULL;
            vf_mplan p2;
            int rc = vf_plan_load(req->script, sets, req->nsets + 1, &g2, st);
            if (rc == 0) rc = vf_mplan_build(g2, &p2, st);
            if (rc) {
                vf_status_prefix(st, "plan of bucket %s", names[k]);
                if (g2) vf_graph_free(g2);
                return rc;
            }
            vf_mplan_budget(&p2, b, m);
            x->fits = p2.nover == 0;
            for (int i = 0; i < base->ndev; i++) {
                const vf_pdev *d = vf_mplan_dev(&p2, base->dev[i].dev);
                x->total[i] = d ? d->total : 0;
                if (d) memcpy(x->cat[i], d->cat, sizeof x->cat[i]);
                x->acts_flip[i] = x->cat[i][VF_MEM_ACTS];
            }
            /* what recompute flipped would hold: each stage's alternative for its own */
            for (int t = 0; t < g2->nstages; t++) {
                if (p2.acts_alt[t] < 0) continue;
                x->recompute |= vf_param_bool(g2->stages[t].params, "recompute");
                int64_t now = 0;
                int di = -1;
                for (int l = 0; l < p2.n; l++) {
                    if (p2.l[l].stage != t || p2.l[l].cat != VF_MEM_ACTS) continue;
                    now += p2.l[l].bytes;
                    for (int i = 0; i < base->ndev && di < 0; i++)
                        if (base->dev[i].dev.kind == p2.l[l].dev.kind && base->dev[i].dev.index == p2.l[l].dev.index)
                            di = i;
                }
                if (di >= 0) x->acts_flip[di] += p2.acts_alt[t] - now; /* its alternative replaces its own */
            }
            vf_mplan_free(&p2);
            vf_graph_free(g2);
            n++;
        }
    }
    return n;
}

/* ------------------------------------------------------------------ output */

static int64_t edges_of(const int64_t *cat) { return cat[VF_MEM_EDGES]; }

void vf_plan_buckets_print(const vf_mplan *p, const vf_plan_bucket *bk, int n, FILE *f)
{
    if (n == 0) return;
    char dev[32], a[32], b[32], c[32], d[32], e[32];
    fprintf(f, "\nbuckets of '%s', each planned alone (--set %s.only=<bucket>); the run sizes its buffers once "
               "for the largest\n", bk[0].stage, bk[0].stage);
    fprintf(f, "  %-14s %-20s %-8s %12s %12s %15s %12s %12s  %s\n", "bucket", "batch,z,T',h',w'", "device", "peak",
            "activations", bk[0].recompute ? "(recompute off)" : "(recompute on)", "edges", "items", "verdict");
    for (int k = 0; k < n; k++) {
        const vf_plan_bucket *x = &bk[k];
        for (int i = 0; i < p->ndev; i++) {
            vf_device_str(p->dev[i].dev, dev, sizeof dev);
            vf_bytes_str(x->total[i], a, sizeof a);
            vf_bytes_str(x->cat[i][VF_MEM_ACTS], b, sizeof b);
            vf_bytes_str(edges_of(x->cat[i]), c, sizeof c);
            vf_bytes_str(x->cat[i][VF_MEM_ITEMS], d, sizeof d);
            char ver[96] = "";
            if (p->dev[i].budget >= 0) {
                vf_bytes_str(p->dev[i].budget, e, sizeof e);
                bool over = x->total[i] < 0 || x->total[i] > p->dev[i].budget;
                snprintf(ver, sizeof ver, "%s budget %s", over ? "OVER" : "fits", e);
            }
            char alt[32];
            vf_bytes_str(x->acts_flip[i], alt, sizeof alt);
            fprintf(f, "  %-14s %-20s %-8s %12s %12s %15s %12s %12s  %s\n", i ? "" : x->name, i ? "" : x->dims, dev, a,
                    b, alt, c, d, ver);
        }
    }
    for (int i = 0; i < p->ndev; i++) {
        vf_device_str(p->dev[i].dev, dev, sizeof dev);
        vf_bytes_str(p->dev[i].total, a, sizeof a);
        int worst = -1;
        for (int k = 0; k < n; k++)
            if (worst < 0 || bk[k].total[i] > bk[worst].total[i]) worst = k;
        fprintf(f, "  run peak on %s: %s (all buckets; the worst alone: %s)\n", dev, a, bk[worst].name);
    }
}

char *vf_plan_buckets_json(const char *plan_json, const vf_mplan *p, const vf_plan_bucket *bk, int n)
{
    vf_json *root = vf_json_parse(plan_json, NULL);
    if (!root) return NULL;
    vf_json *arr = vf_json_arr();
    for (int k = 0; k < n && arr; k++) {
        const vf_plan_bucket *x = &bk[k];
        vf_json *o = vf_json_obj(), *devs = vf_json_arr();
        vf_json_set(o, "stage", vf_json_str(x->stage));
        vf_json_set(o, "bucket", vf_json_str(x->name));
        vf_json_set(o, "batch_latent", vf_json_str(x->dims));
        vf_json_set(o, "fits", vf_json_bool(x->fits));
        for (int i = 0; i < p->ndev; i++) {
            char dev[32];
            vf_device_str(p->dev[i].dev, dev, sizeof dev);
            vf_json *d = vf_json_obj();
            vf_json_set(d, "device", vf_json_str(dev));
            vf_json_set(d, "peak", vf_json_int(x->total[i]));
            vf_json_set(d, "activations", vf_json_int(x->cat[i][VF_MEM_ACTS]));
            vf_json_set(d, x->recompute ? "activations_recompute_off" : "activations_recompute_on",
                        vf_json_int(x->acts_flip[i]));
            vf_json_set(d, "edges", vf_json_int(edges_of(x->cat[i])));
            vf_json_set(d, "items", vf_json_int(x->cat[i][VF_MEM_ITEMS]));
            vf_json_set(d, "budget", vf_json_int(p->dev[i].budget));
            vf_json_push(devs, d);
        }
        vf_json_set(o, "devices", devs);
        vf_json_push(arr, o);
    }
    vf_json_set(root, "buckets", arr);
    char *text = vf_json_emit(root, false, 2);
    vf_json_free(root);
    return text;
}

int vf_plan_buckets_refusal(const vf_mplan *p, const vf_plan_bucket *bk, int n, vf_status *st)
{
    for (int k = 0; k < n; k++) {
        const vf_plan_bucket *x = &bk[k];
        for (int i = 0; i < p->ndev; i++) {
            const vf_pdev *d = &p->dev[i];
            if (d->budget < 0 || (x->total[i] >= 0 && x->total[i] <= d->budget)) continue;
            char dev[32], n1[32], n2[32];
            vf_device_str(d->dev, dev, sizeof dev);
            vf_bytes_str(x->total[i], n1, sizeof n1);
            vf_bytes_str(d->budget, n2, sizeof n2);
            return vf_status_set(st, VF_EBUDGET, __FILE__, __LINE__,
                                 "%s: bucket %s of '%s' (batch,z,T',h',w' %s) needs %s on %s, over the budget of %s: "
                                 "give it a smaller batch (buckets = {{w=, h=, frames=, batch=}}), more "
                                 "micro_batches, recompute, or fewer frames; or admission = \"shrink\" (see "
                                 "`vflow plan`; --force runs anyway)",
                                 p->g->script, x->name, x->stage, x->dims, n1, dev, n2);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ admission */

/* Whether bucket `name` of stage `stage` fits at batch B (re-planned alone); *need the
 * total of its first device over budget (or of cpu). A plan that fails (e.g. fewer
 * samples than micro-batches) does not fit. */
static bool fits_at(const vf_plan_req *req, const vf_budget *b, const vf_machine *m, const char *stage,
                    const char *name, int B, int64_t *need, char *dev, size_t devn)
{
    const char *sets[MAX_SETS];
    char kv1[256], kv2[256];
    for (int i = 0; i < req->nsets; i++) sets[i] = req->sets[i];
    snprintf(kv1, sizeof kv1, "%s.only=%s", stage, name);
    snprintf(kv2, sizeof kv2, "%s.shrink=[\"%s:%d\"]", stage, name, B);
    sets[req->nsets] = kv1;
    sets[req->nsets + 1] = kv2;
    vf_graph *g = NULL;
    vf_mplan p;
    vf_status st;
    vf_status_clear(&st);
    *need = -1;
    if (vf_plan_load(req->script, sets, req->nsets + 2, &g, &st) != 0 || vf_mplan_build(g, &p, &st) != 0) {
        if (g) vf_graph_free(g);
        return false;
    }
    vf_mplan_budget(&p, b, m);
    bool ok = p.nover == 0;
    for (int i = 0; i < p.ndev; i++)
        if (p.dev[i].over || (i == 0 && *need < 0)) {
            *need = p.dev[i].total;
            vf_device_str(p.dev[i].dev, dev, devn);
            if (p.dev[i].over) break;
        }
    vf_mplan_free(&p);
    vf_graph_free(g);
    return ok;
}

static bool source_shrinks(const vf_graph *g, const char *stage)
{
    int s = vf_graph_find(g, stage);
    if (s < 0) return false;
    const char *a = vf_param_str(g->stages[s].params, "admission");
    return a && !strcmp(a, "shrink") && vf_param_has(g->stages[s].params, "shrink");
}

int vf_plan_admission(const vf_plan_req *req, const vf_mplan *base, const vf_budget *b, const vf_machine *m,
                      const vf_plan_bucket *bk, int nbk, char (*sets)[VF_PLAN_SET_MAX], int max, FILE *report,
                      vf_status *st)
{
    int n = 0;
    (void)st;
    if (!req->script || req->nsets + 2 > MAX_SETS) return 0;
    for (int k = 0; k < nbk; k++) {
        const vf_plan_bucket *x = &bk[k];
        if (x->fits || !source_shrinks(base->g, x->stage)) continue;
        int B = atoi(x->dims), lo = 0, hi = B; /* fits at lo (0 = none yet), not at hi */
        int64_t need = -1, need_lo = -1;
        char dev[32] = "cpu", dev_lo[32] = "cpu";
        for (int c = B / 2; c >= 1 && lo == 0; c /= 2) { /* halving to a batch that fits, then bisecting */
            if (fits_at(req, b, m, x->stage, x->name, c, &need, dev, sizeof dev)) lo = c, need_lo = need;
            else hi = c;
        }
        while (lo > 0 && hi - lo > 1) {
            int mid = lo + (hi - lo) / 2;
            if (fits_at(req, b, m, x->stage, x->name, mid, &need, dev, sizeof dev)) lo = mid, need_lo = need;
            else hi = mid;
        }
        int least = 0; /* left out: the smallest batch that plans at all, and its need */
        if (lo == 0)
            for (int c = 1; c <= B && least == 0; c++) {
                fits_at(req, b, m, x->stage, x->name, c, &need, dev_lo, sizeof dev_lo);
                if (need >= 0) least = c;
            }
        else snprintf(dev_lo, sizeof dev_lo, "%s", dev);
        /* the source's --set pair: one per stage, every shrunk bucket in it */
        int s = 0;
        char prefix[256];
        snprintf(prefix, sizeof prefix, "%s.shrink=[", x->stage);
        while (s < n && strncmp(sets[s], prefix, strlen(prefix)) != 0) s++;
        if (s == n) {
            if (n == max) break;
            snprintf(sets[n++], VF_PLAN_SET_MAX, "%s", prefix);
        } else {
            sets[s][strlen(sets[s]) - 1] = ','; /* reopen the list */
        }
        size_t o = strlen(sets[s]);
        snprintf(sets[s] + o, VF_PLAN_SET_MAX - o, "\"%s:%d\"]", x->name, lo);
        if (report) {
            char a[32], bud[32] = "?";
            int di = 0;
            for (int i = 0; i < base->ndev; i++)
                if (base->dev[i].budget >= 0 && (x->total[i] < 0 || x->total[i] > base->dev[i].budget)) {
                    di = i;
                    break;
                }
            vf_bytes_str(base->dev[di].budget, bud, sizeof bud);
            if (lo > 0) {
                vf_bytes_str(need_lo, a, sizeof a);
                fprintf(report, "admission: bucket %s of '%s': batch %d -> %d, the largest that fits (needs %s on %s, "
                                "budget %s)\n", x->name, x->stage, B, lo, a, dev_lo, bud);
            } else if (least > 0) {
                vf_bytes_str(need, a, sizeof a);
                fprintf(report, "admission: bucket %s of '%s' left out: even a batch of %d needs %s on %s, over the "
                                "budget of %s\n", x->name, x->stage, least, a, dev_lo, bud);
            } else {
                fprintf(report, "admission: bucket %s of '%s' left out: no smaller batch plans\n", x->name, x->stage);
            }
        }
    }
    return n;
}
