/* plan_fix.c — what would make an over-budget run fit (plan.h, vf_plan_fixes).
 *
 * No formula of its own: every candidate is the script run again with the user's --set
 * pairs plus the knob's (a script knob vf.args.K when the script reads K, otherwise
 * NAME.PARAM overrides of every stage that has the param), validated, placed, planned and
 * held against the same budgets. The knobs are the ones the graph's stage kinds declare
 * (vf_stage_ops.knobs: which param, which way, how far; e.g. the DiT's recompute,
 * micro_batches and partitions, the optimizer's shards and offload, the VAE's chunk and
 * micro-batch), in their rank order, each tried alone from the smallest change up; then
 * the planner's own graph knob, capacity 1 on every edge that is on no cycle (the
 * training loop's edges are left alone: 1F1B needs them); then the best change of each
 * knob together ("combined"). This file names no stage knob itself.
 */
#include "runtime/plan/plan.h"
#include "runtime/graph/lua_host.h"
#include "runtime/core/params.h"
#include "runtime/json.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SETS 160

/* ------------------------------------------------------------------ loading */

typedef struct load_opts {
    int cap_limit;       /* > 0: capacity of every edge on no cycle at most this */
} load_opts;

/* An edge is on a cycle when its source is reachable from its destination. */
static bool on_cycle(const vf_graph *g, int e, int *stack, bool *seen)
{
    memset(seen, 0, (size_t)g->nstages * sizeof *seen);
    int top = 0, target = g->edges[e].src;
    stack[top++] = g->edges[e].dst;
    seen[g->edges[e].dst] = true;
    while (top) {
        int s = stack[--top];
        if (s == target) return true;
        for (int k = 0; k < g->nedges; k++)
            if (g->edges[k].src == s && !seen[g->edges[k].dst]) {
                seen[g->edges[k].dst] = true;
                stack[top++] = g->edges[k].dst;
            }
    }
    return false;
}

static int cap_edges(vf_graph *g, int limit, vf_status *st)
{
    int *stack = malloc(sizeof *stack * (size_t)(g->nstages + 1));
    bool *seen = malloc(sizeof *seen * (size_t)(g->nstages + 1));
    if (!stack || !seen) {
        free(stack);
        free(seen);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "plan: out of memory");
    }
    for (int e = 0; e < g->nedges; e++)
        if (g->edges[e].capacity > limit && !g->edges[e].loop && !on_cycle(g, e, stack, seen))
            g->edges[e].capacity = limit;
    free(stack);
    free(seen);
    return 0;
}

static int load_ex(const char *script, const char *const *sets, int nsets, const load_opts *o, vf_graph **out,
                   bool *used, vf_status *st)
{
    int rc = 0;
    vf_graph *g = NULL;
    bool *u = used ? used : calloc((size_t)nsets + 1, sizeof *u);
    if (!u) VF_FAIL(st, VF_ENOMEM, "plan: out of memory");
    VF_TRY(vf_lua_load_ex(script, sets, nsets, &g, u, NULL, st));
    for (int i = 0; i < nsets; i++) {
        const char *kv = sets[i], *eq = strchr(kv, '=');
        if (!eq) continue;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
        char *dot = strchr(key, '.');
        if (!dot) continue;
        *dot = 0;
        bool stage = vf_graph_find(g, key) >= 0;
        *dot = '.';
        /* as the CLI: NAME.PARAM is an override when NAME is a stage or the script did
         * not read the key itself */
        if (stage || !u[i]) VF_TRY(vf_graph_override(g, key, eq + 1, st));
    }
    if (o && o->cap_limit > 0) VF_TRY(cap_edges(g, o->cap_limit, st));
    VF_TRY(vf_graph_validate(g, st));
    VF_TRY(vf_graph_place(g, st));
    *out = g;
    g = NULL;
fail:
    vf_graph_free(g);
    if (u != used) free(u);
    return rc;
}

int vf_plan_load(const char *script, const char *const *sets, int nsets, vf_graph **out, vf_status *st)
{
    return load_ex(script, sets, nsets, NULL, out, NULL, st);
}

/* ------------------------------------------------------------------ candidates */

typedef struct search {
    const vf_plan_req *req;
    const vf_mplan *base;
    const vf_budget *b;
    const vf_machine *m;
} search;

/* A candidate: extra --set pairs (owned strings) and load options. */
typedef struct cand {
    char *sets[MAX_SETS];
    int n;
    load_opts o;
} cand;

static void cand_free(cand *c)
{
    for (int i = 0; i < c->n; i++) free(c->sets[i]);
    c->n = 0;
}

static int cand_add(cand *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cand_add(cand *c, const char *fmt, ...)
{
    if (c->n == MAX_SETS) return VF_ENOMEM;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* a later pair of the same key replaces an earlier one */
    const char *eq = strchr(buf, '=');
    size_t kl = eq ? (size_t)(eq - buf) : strlen(buf);
    for (int i = 0; i < c->n; i++)
        if (strncmp(c->sets[i], buf, kl) == 0 && c->sets[i][kl] == '=') {
            free(c->sets[i]);
            c->sets[i] = strdup(buf);
            return c->sets[i] ? 0 : VF_ENOMEM;
        }
    c->sets[c->n] = strdup(buf);
    return c->sets[c->n++] ? 0 : VF_ENOMEM;
}

static void cand_copy(cand *dst, const cand *src)
{
    for (int i = 0; i < src->n; i++) cand_add(dst, "%s", src->sets[i]);
    if (src->o.cap_limit > 0) dst->o.cap_limit = src->o.cap_limit;
}

/* Plans a candidate: the user's pairs, then the candidate's. 0 and fix filled, or < 0
 * when the script or validation refused it (st says why). used[k] for the candidate's
 * own pairs when non-NULL. */
static int try_cand(const search *s, const cand *c, vf_plan_fix *fix, bool *used, vf_status *st)
{
    int n = s->req->nsets + c->n, rc = 0;
    const char **all = calloc((size_t)n + 1, sizeof *all);
    bool *u = calloc((size_t)n + 1, sizeof *u);
    vf_graph *g = NULL;
    vf_mplan p;
    memset(&p, 0, sizeof p);
    if (!all || !u) VF_FAIL(st, VF_ENOMEM, "plan: out of memory");
    for (int i = 0; i < s->req->nsets; i++) all[i] = s->req->sets[i];
    for (int i = 0; i < c->n; i++) all[s->req->nsets + i] = c->sets[i];
    VF_TRY(load_ex(s->req->script, all, n, &c->o, &g, u, st));
    /* a node's plan is held against that node's budgets: the candidate's plan of the same
     * node (the whole graph when the candidate has no such node) */
    int node = s->base->node;
    VF_TRY(node >= 0 && node < vf_graph_nodes(g) ? vf_mplan_build_node(g, node, &p, st) : vf_mplan_build(g, &p, st));
    vf_mplan_budget(&p, s->b, s->m);
    fix->fits = p.nover == 0;
    for (int i = 0; i < s->base->ndev; i++) {
        const vf_pdev *d = vf_mplan_dev(&p, s->base->dev[i].dev);
        fix->total[i] = d ? d->total : 0;
    }
    if (used)
        for (int i = 0; i < c->n; i++) used[i] = u[s->req->nsets + i];
fail:
    vf_mplan_free(&p);
    vf_graph_free(g);
    free(all);
    free(u);
    return rc;
}

/* How far over budget the worst device is: max over devices of total / budget. */
static double worst(const search *s, const vf_plan_fix *f)
{
    double w = 0;
    for (int i = 0; i < s->base->ndev; i++) {
        int64_t b = s->base->dev[i].budget;
        if (b <= 0) continue;
        double r = f->total[i] < 0 ? 1e30 : (double)f->total[i] / (double)b;
        if (r > w) w = r;
    }
    return w;
}

static void describe(const cand *c, char *buf, size_t n)
{
    int off = 0;
    buf[0] = 0;
    for (int i = 0; i < c->n && (size_t)off < n; i++)
        off += snprintf(buf + off, n - (size_t)off, "%s--set %s", i ? " " : "", c->sets[i]);
    if (c->o.cap_limit > 0 && (size_t)off < n)
        snprintf(buf + off, n - (size_t)off, "%scapacity = %d on the edges outside the training loop "
                 "(p:connect(..., {capacity = %d}))", off ? "; " : "", c->o.cap_limit, c->o.cap_limit);
}

/* Does the script read vf.args.key? Run it once with the value and look. */
static bool reads_arg(const search *s, const char *key, const char *value)
{
    cand c = {0};
    vf_plan_fix f;
    bool used = false;
    vf_status st = {0};
    cand_add(&c, "%s=%s", key, value);
    int rc = try_cand(s, &c, &f, &used, &st);
    cand_free(&c);
    /* a refused value still proves the script read the key */
    return used || (rc < 0 && strstr(st.msg, key) != NULL);
}

/* The knob as a vf.args pair if the script reads it, else overrides of each stage. */
static void knob_pairs(const search *s, cand *c, bool via_arg, const char *arg, const int *idx, int n,
                       const char *param, const char *value)
{
    if (via_arg) {
        cand_add(c, "%s=%s", arg, value);
        return;
    }
    for (int i = 0; i < n; i++) cand_add(c, "%s.%s=%s", s->base->g->stages[idx[i]].name, param, value);
}

/* Tries candidates in order, keeps the first that fits or else the best one. */
typedef struct knob_result {
    bool found;
    vf_plan_fix fix;
    cand c;
    double worst;
    char knob[32];
    char refused[512];   /* the first candidate's error when the script or validation refused it */
    char refused_change[512];
} knob_result;

static void consider(const search *s, knob_result *r, cand *c, const char *knob, const char *note)
{
    vf_plan_fix f;
    memset(&f, 0, sizeof f);
    vf_status st = {0};
    snprintf(r->knob, sizeof r->knob, "%s", knob);
    if (try_cand(s, c, &f, NULL, &st) < 0) {
        if (!r->refused[0]) {
            snprintf(r->refused, sizeof r->refused, "%.500s", st.msg[0] ? st.msg : vf_strerror(st.code));
            describe(c, r->refused_change, sizeof r->refused_change);
        }
        cand_free(c);
        return;
    }
    double w = worst(s, &f);
    bool better = !r->found || (f.fits && !r->fix.fits) || (!r->fix.fits && w < r->worst);
    if (!better || (r->found && r->fix.fits)) {
        cand_free(c);
        return;
    }
    cand_free(&r->c);
    r->c = *c;
    memset(c, 0, sizeof *c);
    r->found = true;
    r->worst = w;
    r->fix = f;
    snprintf(r->fix.knob, sizeof r->fix.knob, "%s", knob);
    describe(&r->c, r->fix.change, sizeof r->fix.change);
    snprintf(r->fix.note, sizeof r->fix.note, "%s", note ? note : "");
}


/* ------------------------------------------------------------------ declared knobs */

#define MAX_KNOBS 32

/* One knob name of the graph: its spec (from the first kind declaring it) and the
 * stages it moves. */
typedef struct knob_group {
    const vf_knob_spec *k;
    int idx[256], n;
} knob_group;

static bool param_is(const vf_params *p, const char *key, const char *json)
{
    const vf_json *t = vf_params_ctree(p);
    const vf_json *v = t ? vf_json_get(t, key) : NULL;
    if (!v) return false;
    char *have = vf_json_emit(v, true, 0);
    bool same = have && strcmp(have, json) == 0;
    free(have);
    return same;
}

/* The stages whose kind declares knob k, in graph order (a SET only where the param
 * is not the value already). */
static int knob_stages(const vf_graph *g, const vf_knob_spec *k, int *idx, int max)
{
    int n = 0;
    for (int i = 0; i < g->nstages && n < max; i++) {
        const vf_gstage *gs = &g->stages[i];
        if (!gs->ops || !gs->ops->knobs) continue;
        for (const vf_knob_spec *d = gs->ops->knobs; d->name; d++) {
            if (strcmp(d->name, k->name) != 0) continue;
            if (d->param && !(vf_param_spec_find(gs->ops->params, d->param) && vf_param_has(gs->params, d->param)))
                break;
            if (d->move == VF_KNOB_SET && d->param && param_is(gs->params, d->param, d->value)) break;
            idx[n++] = i;
            break;
        }
    }
    return n;
}

/* The graph's knobs by rank (ties: the order the kinds are met), one per name. */
static int knob_groups(const vf_graph *g, knob_group *out, int max)
{
    int n = 0;
    for (int i = 0; i < g->nstages; i++) {
        const vf_stage_ops *ops = g->stages[i].ops;
        if (!ops || !ops->knobs) continue;
        for (const vf_knob_spec *d = ops->knobs; d->name; d++) {
            bool seen = false;
            for (int j = 0; j < n && !seen; j++) seen = strcmp(out[j].k->name, d->name) == 0;
            if (seen || n == max) continue;
            out[n].k = d;
            out[n].n = knob_stages(g, d, out[n].idx, 256);
            n++;
        }
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j].k->rank < out[j - 1].k->rank; j--) {
            knob_group t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

static int64_t knob_now(const vf_graph *g, const knob_group *kg)
{
    const vf_params *p = g->stages[kg->idx[0]].params;
    return kg->k->current ? kg->k->current(p) : vf_param_int(p, kg->k->param);
}

/* Tries one declared knob: its candidates from the smallest change up, until one fits. */
static void turn_knob(const search *s, const knob_group *kg, knob_result *r)
{
    const vf_knob_spec *k = kg->k;
    if (kg->n == 0) return;
    bool set = k->move == VF_KNOB_SET;
    bool arg = k->arg && reads_arg(s, k->arg, set ? k->value : "1");
    if (k->arg_only && !arg) return;
    if (set) {
        cand c = {0};
        knob_pairs(s, &c, arg, k->arg, kg->idx, kg->n, k->param, k->value);
        consider(s, r, &c, k->name, k->note);
        return;
    }
    const int64_t now = knob_now(s->base->g, kg);
    for (int64_t v = k->move == VF_KNOB_HALVE ? now / 2 : k->move == VF_KNOB_DOUBLE ? 2 * now : now + 1;
         !(r->found && r->fix.fits); v = k->move == VF_KNOB_HALVE ? v / 2 : k->move == VF_KNOB_DOUBLE ? v * 2 : v + 1) {
        if (k->move == VF_KNOB_HALVE ? v < k->min : (v > k->max || (k->max_factor > 0 && v > k->max_factor * now)))
            break;
        cand c = {0};
        char val[32];
        snprintf(val, sizeof val, "%lld", (long long)v);
        knob_pairs(s, &c, arg, k->arg, kg->idx, kg->n, k->param, val);
        consider(s, r, &c, k->name, k->note);
    }
}

int vf_plan_fixes(const vf_plan_req *req, const vf_mplan *base, const vf_budget *b, const vf_machine *m,
                  vf_plan_fix *out, int max)
{
    search s = {req, base, b, m};
    const vf_graph *g = base->g;
    int nfix = 0;
    knob_group *groups = calloc(MAX_KNOBS, sizeof *groups);
    knob_result *res = calloc(MAX_KNOBS + 1, sizeof *res);
    if (!groups || !res) {
        free(groups);
        free(res);
        return 0;
    }
    char note[160];
    int nk = knob_groups(g, groups, MAX_KNOBS);
    for (int k = 0; k < nk; k++) turn_knob(&s, &groups[k], &res[k]);
    /* the planner's own knob: edge capacity */
    {
        bool any = false;
        for (int e = 0; e < g->nedges; e++) any = any || g->edges[e].capacity > 1;
        if (any) {
            cand c = {0};
            c.o.cap_limit = 1;
            consider(&s, &res[nk], &c, "capacity", NULL);
        }
    }
    const int NR = nk + 1;

    /* keep the knobs that helped, best first */
    int order[MAX_KNOBS + 1], no = 0;
    double base_w = 0;
    for (int i = 0; i < base->ndev; i++)
        if (base->dev[i].budget > 0) {
            double r = base->dev[i].total < 0 ? 1e30 : (double)base->dev[i].total / (double)base->dev[i].budget;
            if (r > base_w) base_w = r;
        }
    for (int k = 0; k < NR; k++)
        if (res[k].found && (res[k].fix.fits || res[k].worst < base_w)) order[no++] = k;
    for (int i = 1; i < no; i++)
        for (int j = i; j > 0 && res[order[j]].worst < res[order[j - 1]].worst; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < no && nfix < max; i++) {
        knob_result *r = &res[order[i]];
        if (!r->fix.fits && !r->fix.note[0]) snprintf(r->fix.note, sizeof r->fix.note, "not enough alone");
        out[nfix++] = r->fix;
    }
    /* knobs the pipeline refused outright: say why, so nobody wonders (e.g. a stage that
     * cannot run on the host next to GPU partitions) */
    int nplain = nfix;
    for (int k = 0; k < NR && nfix < max; k++) {
        knob_result *r = &res[k];
        if (r->found || !r->refused[0]) continue;
        vf_plan_fix *x = &out[nfix++];
        memset(x, 0, sizeof *x);
        snprintf(x->knob, sizeof x->knob, "%s", r->knob);
        snprintf(x->change, sizeof x->change, "%s", r->refused_change);
        const char *msg = r->refused;
        snprintf(x->note, sizeof x->note, "refused: %s", msg);
        for (int i = 0; i < VF_PLAN_MAX_DEVS; i++) x->total[i] = -1;
    }
    /* together: add the knobs' changes one by one, best first, until it fits */
    bool any_fits = false;
    for (int i = 0; i < nplain; i++) any_fits = any_fits || out[i].fits;
    if (!any_fits && no > 1 && nfix < max) {
        cand all = {0};
        knob_result comb;
        memset(&comb, 0, sizeof comb);
        char knobs[160] = "";
        for (int i = 0; i < no; i++) {
            cand_copy(&all, &res[order[i]].c);
            size_t kl = strlen(knobs);
            snprintf(knobs + kl, sizeof knobs - kl, "%s%s", i ? "+" : "", res[order[i]].fix.knob);
            cand c = {0};
            cand_copy(&c, &all);
            snprintf(note, sizeof note, "%s", knobs);
            cand_free(&comb.c); /* each try starts afresh: the last one tried is reported */
            memset(&comb, 0, sizeof comb);
            consider(&s, &comb, &c, "combined", note);
            if (comb.found && comb.fix.fits) break;
        }
        if (comb.found) out[nfix++] = comb.fix;
        cand_free(&comb.c);
        cand_free(&all);
    }
    for (int k = 0; k < NR; k++) cand_free(&res[k].c);
    free(groups);
    free(res);
    return nfix;
}
