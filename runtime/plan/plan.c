/* plan.c — the memory plan of a validated, placed graph (plan.h): every stage's
 * declarations, every edge's buffers where they live, each process's overhead; totals
 * per device and the per-stage account predictions metrics.jsonl is compared with.
 * Output is plan_out.c, budgets plan_budget.c, fixes plan_fix.c.
 */
#include "runtime/plan/plan.h"
#include "runtime/core/alloc.h"
#include "runtime/core/params.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ categories */

const char *vf_mem_cat_name(vf_mem_cat c)
{
    static const char *const names[VF_MEM_CAT_COUNT] = {
        "weights", "gradients", "optimizer", "activations", "workspace", "vae",
        "decode",  "items",     "edges",     "checkpoint",  "runtime",   "other",
    };
    return c >= 0 && c < VF_MEM_CAT_COUNT ? names[c] : "?";
}

/* ------------------------------------------------------------------ building */

static bool same_dev(vf_device a, vf_device b)
{
    return a.kind == b.kind && (a.kind == VF_DEV_CPU || a.index == b.index);
}

static int add_line(vf_mplan *p, int stage, int edge, int worker, vf_device dev, vf_mem_cat cat,
                    int64_t bytes, int account, vf_status *st, const char *fmt, ...)
    __attribute__((format(printf, 10, 11)));

static int add_line(vf_mplan *p, int stage, int edge, int worker, vf_device dev, vf_mem_cat cat,
                    int64_t bytes, int account, vf_status *st, const char *fmt, ...)
{
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        vf_pline *l = realloc(p->l, (size_t)cap * sizeof *l);
        if (!l) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "plan: out of memory");
        p->l = l;
        p->cap = cap;
    }
    vf_pline *x = &p->l[p->n++];
    memset(x, 0, sizeof *x);
    x->stage = stage, x->edge = edge, x->worker = worker, x->dev = dev, x->cat = cat;
    x->bytes = bytes, x->account = account;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->what, sizeof x->what, fmt, ap);
    va_end(ap);
    return 0;
}

/* The stage whose allocations an item sent by stage s is made of: s itself, unless s
 * only forwards what one in-process input brought (declares nothing, one input edge,
 * in-process), like passthrough: then that edge's origin. */
static int origin(const vf_graph *g, int s, int depth)
{
    if (depth > g->nstages) return s;
    if (g->stages[s].mem.n > 0) return s;
    int in = -1, nin = 0;
    for (int e = 0; e < g->nedges; e++)
        if (g->edges[e].dst == s) in = e, nin++;
    bool outs = false;
    for (int e = 0; e < g->nedges; e++) outs = outs || g->edges[e].src == s;
    if (nin != 1 || !outs || g->edges[in].transport != VF_TR_INPROC) return s;
    return origin(g, g->edges[in].src, depth + 1);
}

/* For a stage's "input …" entries: the account that pays for its received items — the
 * producer's when every input edge is in-process from one origin; its own otherwise
 * (ZeroMQ receives are charged to the receiver). */
static int input_account(const vf_graph *g, int s)
{
    int who = -1;
    for (int e = 0; e < g->nedges; e++) {
        const vf_gedge *ge = &g->edges[e];
        if (ge->dst != s) continue;
        if (ge->transport != VF_TR_INPROC) return s;
        int o = origin(g, ge->src, 0);
        if (who >= 0 && who != o) return s;
        who = o;
    }
    return who >= 0 ? who : s;
}

static void edge_name(const vf_graph *g, int e, char *buf, size_t n)
{
    const vf_gedge *ge = &g->edges[e];
    snprintf(buf, n, "%s.%s -> %s.%s", g->stages[ge->src].name, ge->src_port, g->stages[ge->dst].name,
             ge->dst_port);
}

static int64_t mul_sat(int64_t a, int64_t b)
{
    if (a < 0 || b < 0) return -1;
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

static int add_edges(vf_mplan *p, vf_status *st)
{
    const vf_graph *g = p->g;
    int rc = 0;
    char name[2 * VF_NAME_MAX * 2 + 16], b[32];
    for (int e = 0; e < g->nedges; e++) {
        const vf_gedge *ge = &g->edges[e];
        const vf_port_spec *sp = vf_graph_edge_src_spec(g, e);
        vf_device dev = sp ? sp->device : (vf_device){VF_DEV_CPU, 0};
        int64_t item = vf_graph_edge_item_bytes(g, e);
        int64_t bytes = mul_sat(ge->capacity, item);
        int ws = g->stages[ge->src].worker, wd = g->stages[ge->dst].worker;
        edge_name(g, e, name, sizeof name);
        vf_bytes_str(item, b, sizeof b);
        const char *tr = vf_transport_name(ge->transport);
        if (ge->transport == VF_TR_INPROC) {
            /* items move by pointer: the producer's allocations sit in the ring */
            VF_TRY(add_line(p, -1, e, ws, dev, VF_MEM_EDGES, bytes, origin(g, ge->src, 0), st,
                            "edge %s (%s, %d x %s)", name, tr, ge->capacity, b));
        } else if (dev.kind == VF_DEV_CUDA) {
            /* CUDA IPC: the producer keeps every buffer it sent until its credit returns */
            VF_TRY(add_line(p, -1, e, ws, dev, VF_MEM_EDGES, bytes, ge->src, st,
                            "edge %s (%s + CUDA IPC, %d x %s, sender's buffers)", name, tr, ge->capacity, b));
        } else {
            /* host records: the credited items sit in the receiver's ZeroMQ pipe (no
             * account holds them); the sender holds the one being transmitted: its large
             * tensors until ZeroMQ has written them (they are sent from their own memory)
             * and its record, and may build the next item meanwhile */
            VF_TRY(add_line(p, -1, e, wd, dev, VF_MEM_EDGES, bytes, -1, st,
                            "edge %s (%s, %d x %s, receiver's pipe)", name, tr, ge->capacity, b));
            /* one record per port is shared by all its ZeroMQ edges */
            bool first = true;
            for (int k = 0; k < e && first; k++)
                first = !(g->edges[k].src == ge->src && strcmp(g->edges[k].src_port, ge->src_port) == 0 &&
                          g->edges[k].transport != VF_TR_INPROC);
            if (first)
                VF_TRY(add_line(p, -1, e, ws, dev, VF_MEM_EDGES, item, ge->src, st, "held while sent: %s.%s (%s)",
                                g->stages[ge->src].name, ge->src_port, b));
        }
    }
fail:
    return rc;
}

static int add_runtime(vf_mplan *p, vf_status *st)
{
    const vf_graph *g = p->g;
    int rc = 0;
    const vf_device cpu = {VF_DEV_CPU, 0};
    int nl = p->n; /* lines so far: what the workers hold */
    for (int w = 0; w < g->nworkers; w++) {
        int64_t churn = 0;
        bool cuda[VF_PLAN_MAX_DEVS] = {0};
        for (int i = 0; i < nl; i++) {
            const vf_pline *x = &p->l[i];
            if (x->worker != w) continue;
            /* big blocks freed while running: items, records, staging (state is
             * allocated once and freed at the end: pools, no per-item malloc) */
            bool transient = x->cat == VF_MEM_ITEMS || x->cat == VF_MEM_EDGES || x->cat == VF_MEM_CKPT ||
                             x->cat == VF_MEM_DECODE;
            if (x->dev.kind == VF_DEV_CPU && transient && x->bytes >= (int64_t)VF_ALLOC_BIG) churn += x->bytes;
            if (x->dev.kind == VF_DEV_CUDA && x->dev.index >= 0 && x->dev.index < VF_PLAN_MAX_DEVS)
                cuda[x->dev.index] = true;
        }
        for (int i = 0; i < g->nstages; i++)
            if (g->stages[i].worker == w && g->stages[i].device.kind == VF_DEV_CUDA &&
                g->stages[i].device.index < VF_PLAN_MAX_DEVS)
                cuda[g->stages[i].device.index] = true;
        VF_TRY(add_line(p, -1, -1, w, cpu, VF_MEM_RUNTIME, VF_PLAN_PROC_PRIVATE, -1, st,
                        "process %s (private baseline)", g->workers[w].name));
        /* Freed big blocks parked for reuse (alloc.h): at most the cache limit, and at
         * most what the worker frees while running. */
        int64_t lim = (int64_t)VF_ALLOC_CACHE_DEFAULT;
        int64_t cache = churn < lim ? churn : lim;
        if (cache > 0)
            VF_TRY(add_line(p, -1, -1, w, cpu, VF_MEM_RUNTIME, cache, -1, st, "vf_alloc big-block cache"));
        for (int d = 0; d < VF_PLAN_MAX_DEVS; d++) {
            if (!cuda[d]) continue;
            vf_device dev = {VF_DEV_CUDA, d};
            VF_TRY(add_line(p, -1, -1, w, dev, VF_MEM_RUNTIME, VF_PLAN_CUDA_CONTEXT, -1, st, "CUDA context"));
            VF_TRY(add_line(p, -1, -1, w, dev, VF_MEM_WORKSPACE, VF_PLAN_CUDA_BACKEND, -1, st,
                            "CUDA backend (cuBLASLt workspace, scratch)"));
        }
    }
    VF_TRY(add_line(p, -1, -1, -1, cpu, VF_MEM_RUNTIME, VF_PLAN_PROC_PRIVATE, -1, st, "driver process (private)"));
    VF_TRY(add_line(p, -1, -1, -1, cpu, VF_MEM_RUNTIME, VF_PLAN_SHARED_CODE, -1, st,
                    "code and libraries (shared by all processes)"));
fail:
    return rc;
}

/* Activations of stage i with its `recompute` param flipped: the hook asked again. */
static int64_t acts_flipped(const vf_gstage *s)
{
    if (!s->ops || !s->ops->memory || !s->ops->params || !vf_param_spec_find(s->ops->params, "recompute"))
        return -1;
    vf_status st = {0};
    vf_params *q = vf_params_clone(s->params, &st);
    if (!q) return -1;
    int64_t acts = -1;
    if (vf_params_set_json(q, "recompute", vf_param_bool(s->params, "recompute") ? "false" : "true", &st) == 0) {
        vf_mem_plan m;
        memset(&m, 0, sizeof m);
        if (s->ops->memory(q, &s->ports, &m, &st) == 0) {
            acts = 0;
            for (int k = 0; k < m.n; k++)
                if (m.e[k].cat == VF_MEM_ACTS) acts += m.e[k].bytes;
        }
    }
    vf_params_free(q);
    return acts;
}

bool vf_pline_is_state(const vf_mplan *p, const vf_pline *x)
{
    if (x->stage >= 0) return x->cat == VF_MEM_WEIGHTS || x->cat == VF_MEM_GRADS || x->cat == VF_MEM_OPTIM;
    const vf_port_spec *sp = x->edge >= 0 ? vf_graph_edge_src_spec(p->g, x->edge) : NULL;
    for (int i = 0; sp && i < sp->ntensors; i++)
        if (sp->t[i].view) return true;
    return false;
}

static vf_pdev *dev_slot(vf_mplan *p, vf_device d)
{
    for (int i = 0; i < p->ndev; i++)
        if (same_dev(p->dev[i].dev, d)) return &p->dev[i];
    if (p->ndev == VF_PLAN_MAX_DEVS) return NULL;
    vf_pdev *x = &p->dev[p->ndev++];
    memset(x, 0, sizeof *x);
    x->dev = d.kind == VF_DEV_CPU ? (vf_device){VF_DEV_CPU, 0} : d;
    x->budget = -1;
    x->budget_src = "";
    x->present = true;
    return x;
}

static int cmp_dev(const void *a, const void *b)
{
    const vf_pdev *x = a, *y = b;
    if (x->dev.kind != y->dev.kind) return x->dev.kind == VF_DEV_CPU ? -1 : 1;
    return (x->dev.index > y->dev.index) - (x->dev.index < y->dev.index);
}

static int build(const vf_graph *g, int node, vf_mplan *p, vf_status *st)
{
    int rc = 0;
    memset(p, 0, sizeof *p);
    p->g = g;
    p->node = node;
    size_t ns = (size_t)(g->nstages ? g->nstages : 1);
    p->account = calloc(ns, sizeof *p->account);
    p->acts_alt = calloc(ns, sizeof *p->acts_alt);
    if (!p->account || !p->acts_alt) VF_FAIL(st, VF_ENOMEM, "plan: out of memory");
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        int in_acct = input_account(g, i);
        for (int m = 0; m < s->mem.n; m++) {
            const vf_mem_entry *e = &s->mem.e[m];
            /* who allocates the bytes decides the account they are predicted in */
            int acct = e->holder == VF_MEM_LIBRARY ? -1 : e->holder == VF_MEM_INPUT ? in_acct : i;
            VF_TRY(add_line(p, i, -1, s->worker, e->device, e->cat, e->bytes, acct, st, "%s%s", e->what,
                            e->holder == VF_MEM_LIBRARY ? " (library)" : ""));
        }
        p->acts_alt[i] = acts_flipped(s);
    }
    VF_TRY(add_edges(p, st));
    VF_TRY(add_runtime(p, st));
    if (node >= 0) { /* another node's workers are that node's to hold */
        int k = 0;
        for (int i = 0; i < p->n; i++)
            if (p->l[i].worker < 0 || g->workers[p->l[i].worker].node == node) p->l[k++] = p->l[i];
        p->n = k;
    }
    /* devices: cpu always, then every device a line or a stage names */
    dev_slot(p, (vf_device){VF_DEV_CPU, 0});
    for (int i = 0; i < g->nstages; i++)
        if (node < 0 || g->stages[i].node == node) dev_slot(p, g->stages[i].device);
    for (int i = 0; i < p->n; i++) {
        vf_pdev *d = dev_slot(p, p->l[i].dev);
        if (!d) VF_FAIL(st, VF_EUSAGE, "%s: the plan touches more than %d devices", g->script, VF_PLAN_MAX_DEVS);
        int64_t b = p->l[i].bytes;
        if (d->total >= 0) d->total = b < 0 ? -1 : d->total + b;
        if (b > 0) d->cat[p->l[i].cat] += b;
        int a = p->l[i].account;
        if (a >= 0 && p->l[i].dev.kind == VF_DEV_CPU && p->account[a] >= 0)
            p->account[a] = b < 0 ? -1 : p->account[a] + b;
        if (vf_pline_is_state(p, &p->l[i]) && d->state >= 0) d->state = b < 0 ? -1 : d->state + b;
    }
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        if (node >= 0 && s->node != node) continue;
        for (int k = 0; k < s->mem.np; k++) {
            vf_pdev *d = dev_slot(p, s->mem.params[k].device);
            if (d && s->mem.params[k].n > d->params) d->params = s->mem.params[k].n;
        }
    }
    qsort(p->dev, (size_t)p->ndev, sizeof p->dev[0], cmp_dev);
    return 0;
fail:
    vf_mplan_free(p);
    return rc;
}

int vf_mplan_build(const vf_graph *g, vf_mplan *p, vf_status *st) { return build(g, -1, p, st); }

int vf_mplan_build_node(const vf_graph *g, int node, vf_mplan *p, vf_status *st) { return build(g, node, p, st); }

void vf_mplan_free(vf_mplan *p)
{
    if (!p) return;
    free(p->l);
    free(p->account);
    free(p->acts_alt);
    memset(p, 0, sizeof *p);
}

const vf_pdev *vf_mplan_dev(const vf_mplan *p, vf_device d)
{
    for (int i = 0; i < p->ndev; i++)
        if (same_dev(p->dev[i].dev, d)) return &p->dev[i];
    return NULL;
}

void vf_mplan_budget(vf_mplan *p, const vf_budget *b, const vf_machine *m)
{
    p->nover = 0;
    for (int i = 0; i < p->ndev; i++) {
        vf_pdev *d = &p->dev[i];
        d->budget = b ? vf_budget_for(b, d->dev) : -1;
        d->budget_src = d->budget >= 0 ? "--budget" : "";
        d->present = true;
        if (m && d->dev.kind == VF_DEV_CUDA) d->present = d->dev.index < m->ncuda;
        if (d->budget < 0 && m) {
            if (d->dev.kind == VF_DEV_CPU && m->mem_total > 0) {
                d->budget = m->mem_total;
                d->budget_src = m->mem_limited ? "cgroup" : "MemTotal";
            } else if (d->dev.kind == VF_DEV_CUDA && d->present && m->cuda_free[d->dev.index] > 0) {
                /* measured with the probe's own context open: the context the worker
                 * will open is planned separately, so give that much back */
                d->budget = m->cuda_free[d->dev.index] + VF_PLAN_CUDA_CONTEXT;
                d->budget_src = "cuMemGetInfo";
            }
        }
        d->over = d->budget >= 0 && (d->total < 0 || d->total > d->budget);
        if (d->over) p->nover++;
    }
}

int64_t vf_plan_device_total(const vf_graph *g, vf_device dev)
{
    vf_mplan p;
    vf_status st = {0};
    if (vf_mplan_build(g, &p, &st) < 0) return -1;
    const vf_pdev *d = vf_mplan_dev(&p, dev);
    int64_t t = d ? d->total : 0;
    vf_mplan_free(&p);
    return t;
}
