/* plan_fix.c — what would make an over-budget run fit (plan.h, vf_plan_fixes).
 *
 * No formula of its own: every candidate is the script run again with the user's --set
 * pairs plus the knob's (a script knob vf.args.K when the script reads K, otherwise
 * NAME.PARAM overrides of every stage that has the param), validated, placed, planned and
 * held against the same budgets. Knobs, each tried alone from the smallest change up:
 *   recompute      keep only block inputs (stages with a `recompute` param)
 *   micro_batches  more, smaller micro-batches (vf.args.micro_batches: edges follow M)
 *   stages         more pipeline partitions (vf.args.stages)
 *   shards         more optimizer shards (vf.args.shards)
 *   offload        optimizer shards on the host (adamw stages' device = "cpu")
 *   chunk          fewer frames per VAE chunk; micro_batch: fewer clips per VAE forward
 *   capacity       capacity 1 on every edge that is on no cycle (the training loop's
 *                  edges are left alone: 1F1B needs them)
 * then the best change of each knob together ("combined").
 */
#include "runtime/plan/plan.h"
#include "runtime/graph/lua_host.h"
#include "runtime/core/params.h"

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
    VF_TRY(vf_lua_load_ex(script, sets, nsets, &g, u, st));
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
    VF_TRY(vf_mplan_build(g, &p, st));
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

/* Stages having param key (with value check), names into idx. */
static int stages_with(const vf_graph *g, const char *key, int *idx, int max)
{
    int n = 0;
    for (int i = 0; i < g->nstages && n < max; i++)
        if (g->stages[i].ops && vf_param_spec_find(g->stages[i].ops->params, key) && vf_param_has(g->stages[i].params, key))
            idx[n++] = i;
    return n;
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

static int64_t param_int(const vf_graph *g, int i, const char *key) { return vf_param_int(g->stages[i].params, key); }

int vf_plan_fixes(const vf_plan_req *req, const vf_mplan *base, const vf_budget *b, const vf_machine *m,
                  vf_plan_fix *out, int max)
{
    search s = {req, base, b, m};
    const vf_graph *g = base->g;
    int idx[256], n, nfix = 0;
    knob_result res[8];
    memset(res, 0, sizeof res);
    char note[160];

    /* recompute */
    n = stages_with(g, "recompute", idx, 256);
    {
        int off[256], no = 0;
        for (int i = 0; i < n; i++)
            if (!vf_param_bool(g->stages[idx[i]].params, "recompute")) off[no++] = idx[i];
        if (no > 0) {
            cand c = {0};
            knob_pairs(&s, &c, reads_arg(&s, "recompute", "true"), "recompute", off, no, "recompute", "true");
            consider(&s, &res[0], &c, "recompute", NULL);
        }
    }
    /* micro_batches: the edges of 1F1B follow M, so only the script can change it */
    n = stages_with(g, "micro_batches", idx, 256);
    if (n > 0) {
        int64_t M = param_int(g, idx[0], "micro_batches");
        if (reads_arg(&s, "micro_batches", "1")) {
            for (int64_t v = 2 * M; v <= 64 * M && v <= 4096 && !(res[1].found && res[1].fix.fits); v *= 2) {
                cand c = {0};
                cand_add(&c, "micro_batches=%lld", (long long)v);
                consider(&s, &res[1], &c, "micro_batches", NULL);
            }
        }
    }
    /* stages (partitions) */
    n = stages_with(g, "splits", idx, 256);
    if (n > 0 && reads_arg(&s, "stages", "1")) {
        int P = vf_param_len(g->stages[idx[0]].params, "splits") - 1;
        if (P < 1) P = 1;
        for (int v = P + 1; v <= 4 * P && v <= 24 && !(res[2].found && res[2].fix.fits); v++) {
            cand c = {0};
            cand_add(&c, "stages=%d", v);
            consider(&s, &res[2], &c, "stages", NULL);
        }
    }
    /* optimizer shards and their offload */
    n = stages_with(g, "shards", idx, 256);
    int nopt = 0, opt[256];
    for (int i = 0; i < n; i++)
        if (vf_param_has(g->stages[idx[i]].params, "shard")) opt[nopt++] = idx[i];
    if (nopt > 0) {
        int S = (int)param_int(g, opt[0], "shards");
        if (reads_arg(&s, "shards", "1"))
            for (int v = 2 * S; v <= 24 && !(res[3].found && res[3].fix.fits); v *= 2) {
                cand c = {0};
                cand_add(&c, "shards=%d", v);
                consider(&s, &res[3], &c, "shards", NULL);
            }
        int gpu[256], ng = 0;
        for (int i = 0; i < nopt; i++)
            if (g->stages[opt[i]].device.kind == VF_DEV_CUDA) gpu[ng++] = opt[i];
        if (ng > 0) {
            cand c = {0};
            knob_pairs(&s, &c, false, NULL, gpu, ng, "device", "\"cpu\"");
            consider(&s, &res[4], &c, "offload", "optimizer shards on the host");
        }
    }
    /* VAE chunk and micro-batch */
    n = stages_with(g, "chunk", idx, 256);
    if (n > 0) {
        int64_t ch = param_int(g, idx[0], "chunk");
        bool arg = reads_arg(&s, "chunk", "1");
        for (int64_t v = ch / 2; v >= 1 && !(res[5].found && res[5].fix.fits); v /= 2) {
            cand c = {0};
            char val[32];
            snprintf(val, sizeof val, "%lld", (long long)v);
            knob_pairs(&s, &c, arg, "chunk", idx, n, "chunk", val);
            consider(&s, &res[5], &c, "chunk", NULL);
        }
        int mb[256], nm = 0;
        for (int i = 0; i < n; i++)
            if (vf_param_has(g->stages[idx[i]].params, "micro_batch")) mb[nm++] = idx[i];
        if (nm > 0) {
            int64_t v0 = param_int(g, mb[0], "micro_batch");
            bool a2 = reads_arg(&s, "micro_batch", "1");
            for (int64_t v = v0 / 2; v >= 1 && !(res[6].found && res[6].fix.fits); v /= 2) {
                cand c = {0};
                char val[32];
                snprintf(val, sizeof val, "%lld", (long long)v);
                knob_pairs(&s, &c, a2, "micro_batch", mb, nm, "micro_batch", val);
                consider(&s, &res[6], &c, "micro_batch", NULL);
            }
        }
    }
    /* edge capacity */
    {
        bool any = false;
        for (int e = 0; e < g->nedges; e++) any = any || g->edges[e].capacity > 1;
        if (any) {
            cand c = {0};
            c.o.cap_limit = 1;
            consider(&s, &res[7], &c, "capacity", NULL);
        }
    }

    /* keep the knobs that helped, best first */
    int order[8], no = 0;
    double base_w = 0;
    for (int i = 0; i < base->ndev; i++)
        if (base->dev[i].budget > 0) {
            double r = base->dev[i].total < 0 ? 1e30 : (double)base->dev[i].total / (double)base->dev[i].budget;
            if (r > base_w) base_w = r;
        }
    for (int k = 0; k < 8; k++)
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
    for (int k = 0; k < 8 && nfix < max; k++) {
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
    for (int k = 0; k < 8; k++) cand_free(&res[k].c);
    return nfix;
}
