/* plan_auto.c — stage params set to "auto" (vf_knob_spec.auto_value: the DiT's
 * swap_blocks), resolved before `vflow plan` prints a plan and before `vflow run` starts
 * anything (plan.h, vf_plan_auto).
 *
 * The search is the fixes' (plan_fix.c): every candidate is the script run again with the
 * user's --set pairs plus one NAME.PARAM=V pair per "auto" stage, validated, placed,
 * planned and held against the budgets `vflow run` holds the run against (--budget, else
 * what the machine has). Every "auto" stage starts at its knob's `min` and steps up while
 * it does not fit, so each ends at the smallest value that fits:
 *   - a stage whose `auto_budget` param names a size holds its own device memory (its
 *     memory entries on its device, the pinned host copies left out) within that size.
 *     On the CPU backend host and device memory are one, so this bounded region is what
 *     stands for a GPU's memory there;
 *   - any other holds its device's plan total within that device's budget: the gate's
 *     check, so what it resolves to passes the gate.
 * One stage steps at a time, of those that do not fit the one with the smallest value, so
 * stages sharing an over-budget device share the blocks to swap.
 * A value the stage refuses (more blocks than the partition has) or past the knob's `max`
 * ends the search: one line naming the stage, what it needs at the largest value it takes
 * and the budget (VF_EBUDGET, exit 2). A bucketed run sizes its buffers once for its
 * largest bucket shapes, which is what the plan holds, so the value covers every bucket.
 */
#include "runtime/plan/plan.h"
#include "runtime/core/params.h"

#include <stdlib.h>
#include <string.h>

#define AUTO_MAX 256

typedef struct auto_stage {
    char name[VF_NAME_MAX];
    const vf_knob_spec *k;
    vf_device dev;
    int64_t value;           /* the candidate */
    int64_t own;             /* the auto_budget param's size, -1: its device's budget */
    int64_t need, limit;     /* the last plan: bytes, and what they are held against (-1: none) */
    const char *limit_src;
    bool fits;
} auto_stage;

/* The knob of stage s that takes "auto" and is "auto" there, or NULL. */
static const vf_knob_spec *auto_knob(const vf_gstage *s)
{
    if (!s->ops || !s->ops->knobs) return NULL;
    for (const vf_knob_spec *k = s->ops->knobs; k->name; k++) {
        if (!k->auto_value || !k->param || !vf_param_has(s->params, k->param)) continue;
        const char *w = vf_param_str(s->params, k->param);
        if (w && strcmp(w, "auto") == 0) return k;
    }
    return NULL;
}

/* Bytes stage s declares on its own device, but the pinned host copies. */
static int64_t own_device_bytes(const vf_gstage *s)
{
    int64_t n = 0;
    for (int i = 0; i < s->mem.n; i++) {
        const vf_mem_entry *e = &s->mem.e[i];
        if (e->holder == VF_MEM_PINNED || e->device.kind != s->device.kind || e->device.index != s->device.index)
            continue;
        if (e->bytes < 0) return -1;
        n += e->bytes;
    }
    return n;
}

/* Plans the candidate (the user's pairs and one pair per stage) and fills each stage's
 * need, limit and fits. < 0 when the script or a stage refused the candidate. */
static int evaluate(const vf_plan_req *req, auto_stage *a, int n, const vf_budget *b, const vf_machine *m,
                    vf_status *st)
{
    int rc = 0, nsets = req->nsets + n;
    char (*own)[96] = calloc((size_t)n, sizeof *own);
    const char **sets = calloc((size_t)nsets + 1, sizeof *sets);
    vf_graph *g = NULL;
    vf_mplan p;
    memset(&p, 0, sizeof p);
    int planned_node = -2;
    if (!own || !sets) VF_FAIL(st, VF_ENOMEM, "plan: out of memory");
    for (int i = 0; i < req->nsets; i++) sets[i] = req->sets[i];
    for (int i = 0; i < n; i++) {
        snprintf(own[i], sizeof own[i], "%s.%s=%lld", a[i].name, a[i].k->param, (long long)a[i].value);
        sets[req->nsets + i] = own[i];
    }
    VF_TRY(vf_plan_load(req->script, sets, nsets, &g, st));
    bool nodes = vf_graph_nodes(g) > 1;
    for (int i = 0; i < n; i++) {
        int si = vf_graph_find(g, a[i].name);
        if (si < 0) VF_FAIL(st, VF_EINVAL, "%s: stage '%s' is gone from the plan of %s=%lld", req->script, a[i].name,
                            a[i].k->param, (long long)a[i].value);
        const vf_gstage *s = &g->stages[si];
        if (a[i].own >= 0) {
            a[i].need = own_device_bytes(s);
            a[i].limit = a[i].own;
            a[i].limit_src = a[i].k->auto_budget;
        } else {
            /* a node's stages are held against that node's budgets: its own plan */
            int node = nodes ? s->node : -1;
            if (node != planned_node) {
                vf_mplan_free(&p);
                VF_TRY(node >= 0 ? vf_mplan_build_node(g, node, &p, st) : vf_mplan_build(g, &p, st));
                vf_mplan_budget(&p, b, m);
                planned_node = node;
            }
            const vf_pdev *d = vf_mplan_dev(&p, s->device);
            a[i].need = d ? d->total : 0;
            a[i].limit = d ? d->budget : -1;
            a[i].limit_src = d ? d->budget_src : "";
        }
        a[i].fits = a[i].limit < 0 || (a[i].need >= 0 && a[i].need <= a[i].limit);
    }
fail:
    vf_mplan_free(&p);
    vf_graph_free(g);
    free(sets);
    free(own);
    return rc;
}

/* One step: of the stages that do not fit, the one with the smallest value (the first of
 * them) moves up by one, so a refused value names its stage. Each stage's fit depends
 * only on its own value or on those of the stages sharing its device, so the values
 * reached are each stage's smallest either way. Returns 1 when one moved, 0 when all
 * fit; *top the index of the stage that had to move past its knob's max (-1: none). */
static int step(auto_stage *a, int n, int *top)
{
    int pick = -1;
    *top = -1;
    for (int i = 0; i < n; i++)
        if (!a[i].fits && (pick < 0 || a[i].value < a[pick].value)) pick = i;
    if (pick < 0) return 0;
    if (a[pick].k->max > 0 && a[pick].value >= a[pick].k->max) {
        *top = pick;
        return 0;
    }
    a[pick].value++;
    return 1;
}

static void report_line(FILE *out, const auto_stage *x)
{
    char dev[32], need[32], lim[32];
    vf_device_str(x->dev, dev, sizeof dev);
    vf_bytes_str(x->need, need, sizeof need);
    vf_bytes_str(x->limit, lim, sizeof lim);
    if (x->own >= 0)
        fprintf(out, "%s \"auto\": stage '%s' (%s) takes %s = %lld: its device memory %s within %s %s\n",
                x->k->param, x->name, dev, x->k->param, (long long)x->value, need, x->limit_src, lim);
    else if (x->limit >= 0)
        fprintf(out, "%s \"auto\": stage '%s' (%s) takes %s = %lld: %s plans %s within its budget %s (%s)\n",
                x->k->param, x->name, dev, x->k->param, (long long)x->value, dev, need, lim, x->limit_src);
    else
        fprintf(out, "%s \"auto\": stage '%s' (%s) takes %s = %lld: %s has no known budget\n", x->k->param, x->name,
                dev, x->k->param, (long long)x->value, dev);
}

/* The refusal of stage x: at its largest value it still needs more than its budget. */
static int refuse(const vf_plan_req *req, const auto_stage *x, vf_status *st)
{
    char dev[32], need[32], lim[32];
    vf_device_str(x->dev, dev, sizeof dev);
    vf_bytes_str(x->need, need, sizeof need);
    vf_bytes_str(x->limit, lim, sizeof lim);
    if (x->own >= 0)
        return vf_status_set(st, VF_EBUDGET, __FILE__, __LINE__,
                             "%s: stage '%s' (%s): %s \"auto\": no value fits: at %s = %lld, the most it takes, "
                             "its device memory is %s, over its %s of %s",
                             req->script, x->name, dev, x->k->param, x->k->param, (long long)x->value, need,
                             x->limit_src, lim);
    return vf_status_set(st, VF_EBUDGET, __FILE__, __LINE__,
                         "%s: stage '%s' (%s): %s \"auto\": no value fits: at %s = %lld, the most it takes, the "
                         "plan needs %s on %s, over the budget of %s (%s)",
                         req->script, x->name, dev, x->k->param, x->k->param, (long long)x->value, need, dev, lim,
                         x->limit_src);
}

int vf_plan_auto(const vf_graph *g, const vf_plan_req *req, char (*sets)[VF_PLAN_SET_MAX], int max, FILE *report,
                 vf_status *st)
{
    int rc = 0, n = 0;
    auto_stage *a = calloc(AUTO_MAX, sizeof *a);
    int64_t *prev = calloc(AUTO_MAX, sizeof *prev); /* the values the last plan had */
    if (!a || !prev) VF_FAIL(st, VF_ENOMEM, "plan: out of memory");
    bool cuda = false;
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        cuda = cuda || s->device.kind == VF_DEV_CUDA;
        const vf_knob_spec *k = auto_knob(s);
        if (!k) continue;
        if (n == AUTO_MAX || n == max)
            VF_FAIL(st, VF_EUSAGE, "%s: more than %d stages with a param \"auto\"", req->script, n);
        auto_stage *x = &a[n++];
        snprintf(x->name, sizeof x->name, "%s", s->name);
        x->k = k;
        x->dev = s->device;
        x->value = k->min;
        x->own = -1;
        const char *own = k->auto_budget && vf_param_has(s->params, k->auto_budget)
                              ? vf_param_str(s->params, k->auto_budget) : NULL;
        if (own && own[0] && vf_size_parse(own, &x->own) < 0)
            VF_FAIL(st, VF_EUSAGE, "%s: stage '%s' (%s): param '%s': bad size \"%s\" (e.g. 12GiB, 800MB, 1.5G)",
                    s->where, s->name, s->kind, k->auto_budget, own);
    }
    if (n == 0) goto fail;
    vf_budget b, *bp = NULL;
    if (req->budget) {
        VF_TRY(vf_budget_parse(req->budget, &b, st));
        bp = &b;
    }
    vf_machine m;
    vf_machine_probe(&m, cuda);
    for (int i = 0; i < n; i++) prev[i] = a[i].value;
    for (;;) {
        vf_status est = {0};
        if (evaluate(req, a, n, bp, &m, &est) < 0) {
            /* the value a step moved to was refused: the one before is the most it takes,
             * and the stage's need and limit are still that value's */
            int i = 0;
            while (i < n && a[i].value == prev[i]) i++;
            if (i == n) {
                *st = est;
                rc = est.code ? est.code : VF_EINVAL;
            } else {
                a[i].value = prev[i];
                rc = refuse(req, &a[i], st);
            }
            goto fail;
        }
        for (int i = 0; i < n; i++) prev[i] = a[i].value;
        int top;
        if (step(a, n, &top) == 0) {
            if (top >= 0) {
                rc = refuse(req, &a[top], st);
                goto fail;
            }
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        snprintf(sets[i], VF_PLAN_SET_MAX, "%s.%s=%lld", a[i].name, a[i].k->param, (long long)a[i].value);
        if (report) report_line(report, &a[i]);
    }
    if (report) fflush(report);
    rc = n;
fail:
    free(prev);
    free(a);
    return rc;
}
