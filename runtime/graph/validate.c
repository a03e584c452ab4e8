/* validate.c — vf_graph_validate: everything that can be wrong with a topology, found
 * before anything is launched, each reported once with the file:line of the Lua call.
 *
 * Order of checks (each step assumes the previous ones passed):
 *   1. stage kinds (did-you-mean) and params against each kind's schema;
 *   2. the ports each stage declares on its own, to resolve default ports ("the only
 *      output") and check that connected ports exist and point the right way;
 *   3. fan-in only into `multi` inputs;
 *   4. no cycle except through edges marked loop (the cycle's stages are named);
 *   5. port specs in topological order: each stage's `ports` hook sees the specs that
 *      arrive at its inputs (propagation), and every edge is checked for dtype and shape
 *      compatibility, unifying symbolic dims ("B", "T") per edge;
 *   6. required ports connected; 7. the `memory` hook of each stage.
 */
#include "runtime/graph/graph.h"
#include "runtime/core/params.h"
#include "runtime/edge/edge_view.h"

#include <stdlib.h>
#include <string.h>

/* "file:line: stage 'x' (kind)" */
static void stage_ctx(const vf_gstage *s, char *buf, size_t n)
{
    snprintf(buf, n, "%s: stage '%s' (%s)", s->where, s->name, s->kind);
}

static int check_kinds_and_params(vf_graph *g, vf_status *st)
{
    int rc = 0;
    for (int i = 0; i < g->nstages; i++) {
        vf_gstage *s = &g->stages[i];
        s->ops = vf_stage_lookup(s->kind);
        if (!s->ops) {
            const vf_stage_ops *kinds[256];
            const char *names[256];
            int n = vf_stage_kinds(kinds, 256);
            if (n > 256) n = 256;
            for (int k = 0; k < n; k++) names[k] = kinds[k]->kind;
            const char *near = vf_did_you_mean(s->kind, names, n);
            if (near)
                VF_FAIL(st, VF_EUSAGE, "%s: stage '%s': unknown stage kind '%s'; did you mean '%s'?",
                        s->where, s->name, s->kind, near);
            char list[1024] = "";
            for (int k = 0; k < n; k++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", k ? ", " : "", names[k]);
            }
            VF_FAIL(st, VF_EUSAGE, "%s: stage '%s': unknown stage kind '%s' (known: %s)", s->where,
                    s->name, s->kind, list);
        }
        if (s->ops->api_version != VF_API_VERSION)
            VF_FAIL(st, VF_EUSAGE, "%s: stage '%s': kind '%s' was built for stage API %d, this is %d",
                    s->where, s->name, s->kind, s->ops->api_version, VF_API_VERSION);
        VF_TRY(vf_params_validate_kind(s->params, s->ops->params, s->name, s->kind, s->where, st));
        const vf_param_spec *dev = vf_param_spec_find(s->ops->params, "device");
        s->device = (vf_device){VF_DEV_CPU, 0};
        if (dev && dev->type == VF_P_DEVICE) s->device = vf_param_device(s->params, "device");
    }
fail:
    return rc;
}

static int call_ports(vf_gstage *s, const vf_port_specs *up, vf_status *st)
{
    int rc = 0;
    memset(&s->ports, 0, sizeof s->ports);
    if (!s->ops->ports) return 0;
    vf_status hs = {0};
    rc = s->ops->ports(s->params, up, &s->ports, &hs);
    if (rc < 0) {
        char ctx[512];
        stage_ctx(s, ctx, sizeof ctx);
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: %s", ctx,
                             hs.msg[0] ? hs.msg : vf_strerror(rc));
    }
    return 0;
}

static void port_list(const vf_port_specs *ps, vf_port_dir dir, char *buf, size_t n, const char **names,
                      int *count)
{
    buf[0] = 0;
    *count = 0;
    for (int i = 0; i < ps->n; i++) {
        if (ps->p[i].dir != dir) continue;
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", *count ? ", " : "", ps->p[i].name);
        names[(*count)++] = ps->p[i].name;
    }
}

/* Fills a default port name ("" = the only port of that direction) and checks that
 * the named port exists with the right direction. */
static int resolve_port(const vf_graph *g, const vf_gedge *e, const vf_gstage *s, char *port,
                        vf_port_dir dir, vf_status *st)
{
    const char *dname = dir == VF_PORT_OUT ? "output" : "input";
    const char *names[VF_MAX_PORTS];
    char list[VF_MAX_PORTS * (VF_NAME_MAX + 2)];
    int n;
    port_list(&s->ports, dir, list, sizeof list, names, &n);
    if (!*port) {
        if (n == 1) {
            snprintf(port, VF_NAME_MAX, "%s", names[0]);
            return 0;
        }
        if (n == 0)
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                                 "%s: connect: stage '%s' (%s) has no %s port", e->where, s->name,
                                 s->kind, dname);
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "%s: connect: stage '%s' (%s) has several %s ports (%s); name one, "
                             "e.g. %s:port(\"%s\")",
                             e->where, s->name, s->kind, dname, list, s->name, names[0]);
    }
    const vf_port_spec *p = vf_port_find(&s->ports, port);
    if (p && p->dir == dir) return 0;
    if (p)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "%s: connect: port '%s' of stage '%s' (%s) is an %s, not an %s", e->where,
                             port, s->name, s->kind, dir == VF_PORT_OUT ? "input" : "output", dname);
    const char *near = vf_did_you_mean(port, names, n);
    if (near)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "%s: connect: stage '%s' (%s) has no %s port '%s'; did you mean '%s'?",
                             e->where, s->name, s->kind, dname, port, near);
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                         "%s: connect: stage '%s' (%s) has no %s port '%s' (%s ports: %s)", e->where,
                         s->name, s->kind, dname, port, dname, n ? list : "none");
    (void)g;
}

static int check_edges(vf_graph *g, vf_status *st)
{
    int rc = 0;
    for (int i = 0; i < g->nedges; i++) {
        vf_gedge *e = &g->edges[i];
        VF_TRY(resolve_port(g, e, &g->stages[e->src], e->src_port, VF_PORT_OUT, st));
        VF_TRY(resolve_port(g, e, &g->stages[e->dst], e->dst_port, VF_PORT_IN, st));
    }
    /* Fan-in only into inputs that merge. */
    for (int i = 0; i < g->nedges; i++) {
        const vf_gedge *e = &g->edges[i];
        const vf_gstage *d = &g->stages[e->dst];
        const vf_port_spec *p = vf_port_find(&d->ports, e->dst_port);
        if (p->multi) continue;
        for (int k = 0; k < i; k++) {
            const vf_gedge *f = &g->edges[k];
            if (f->dst == e->dst && strcmp(f->dst_port, e->dst_port) == 0)
                VF_FAIL(st, VF_EUSAGE,
                        "%s: connect: input '%s' of stage '%s' (%s) already has an edge (from '%s.%s' "
                        "at %s) and takes only one",
                        e->where, e->dst_port, d->name, d->kind, g->stages[f->src].name, f->src_port,
                        f->where);
        }
    }
fail:
    return rc;
}

/* ------------------------------------------------------------------ cycles */

typedef struct dfs {
    const vf_graph *g;
    char *color;  /* 0 new, 1 on stack, 2 done */
    int *via;     /* edge by which a stage was entered */
    int found;    /* edge closing the first cycle found, -1 none */
} dfs;

static void visit(dfs *d, int s)
{
    d->color[s] = 1;
    for (int i = 0; i < d->g->nedges && d->found < 0; i++) {
        const vf_gedge *e = &d->g->edges[i];
        if (e->src != s || e->loop) continue;
        if (d->color[e->dst] == 1) {
            d->found = i;
            return;
        }
        if (d->color[e->dst] == 0) {
            d->via[e->dst] = i;
            visit(d, e->dst);
        }
    }
    if (d->found < 0) d->color[s] = 2;
}

static int report_cycle(const vf_graph *g, const int *via, int closing, vf_status *st)
{
    const vf_gedge *c = &g->edges[closing];
    /* Walk back from the closing edge's source to its destination along `via`. */
    int path[1024], n = 0;
    for (int s = c->src; n < 1024; s = g->edges[via[s]].src) {
        path[n++] = s;
        if (s == c->dst) break;
    }
    char text[1024] = "";
    for (int i = n - 1; i >= 0; i--) {
        size_t l = strlen(text);
        snprintf(text + l, sizeof text - l, "%s -> ", g->stages[path[i]].name);
    }
    size_t l = strlen(text);
    snprintf(text + l, sizeof text - l, "%s", g->stages[c->dst].name);
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                         "%s: unintended cycle %s (mark the back edge of a training loop with "
                         "{loop = true})",
                         c->where, text);
}

int vf_graph_topo_order(const vf_graph *g, int *order, vf_status *st)
{
    int rc = 0, n = g->nstages;
    char *color = calloc((size_t)n + 1, 1);
    int *via = calloc((size_t)n + 1, sizeof *via), *indeg = calloc((size_t)n + 1, sizeof *indeg);
    if (!color || !via || !indeg) VF_FAIL(st, VF_ENOMEM, "out of memory");
    dfs d = {g, color, via, -1};
    for (int s = 0; s < n && d.found < 0; s++)
        if (!color[s]) visit(&d, s);
    if (d.found >= 0) {
        rc = report_cycle(g, via, d.found, st);
        goto fail;
    }
    /* Kahn, lowest index first, so the order (and which error shows first) is stable. */
    for (int i = 0; i < g->nedges; i++)
        if (!g->edges[i].loop) indeg[g->edges[i].dst]++;
    memset(color, 0, (size_t)n);
    for (int k = 0; k < n; k++) {
        int s = -1;
        for (int i = 0; i < n && s < 0; i++)
            if (!color[i] && indeg[i] == 0) s = i;
        VF_ASSERT(s >= 0); /* acyclic by the DFS above */
        color[s] = 1;
        order[k] = s;
        for (int i = 0; i < g->nedges; i++)
            if (!g->edges[i].loop && g->edges[i].src == s) indeg[g->edges[i].dst]--;
    }
fail:
    free(color);
    free(via);
    free(indeg);
    return rc;
}

/* ------------------------------------------------------------------ port specs */

static void shape_str(const vf_tensor_spec *t, char *buf, size_t n)
{
    size_t l = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < t->ndim && l < n; d++) {
        if (t->sym[d][0])
            l += (size_t)snprintf(buf + l, n - l, "%s%s<=%lld", d ? "," : "", t->sym[d], (long long)t->dims[d]);
        else
            l += (size_t)snprintf(buf + l, n - l, "%s%lld", d ? "," : "", (long long)t->dims[d]);
    }
    if (l < n) snprintf(buf + l, n - l, ")");
}

/* A symbol of the destination bound to what the source sends for it. */
typedef struct binding {
    char sym[8];
    int64_t value;    /* fixed size sent, or the source's bound */
    char src_sym[8];  /* the source's symbol when it sends a variable size */
    char tensor[VF_NAME_MAX];
    int dim;
} binding;

static int edge_err(const vf_graph *g, const vf_gedge *e, vf_status *st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int edge_err(const vf_graph *g, const vf_gedge *e, vf_status *st, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: connect '%s.%s' -> '%s.%s': %s", e->where,
                         g->stages[e->src].name, e->src_port, g->stages[e->dst].name, e->dst_port, what);
}

static int check_compat(const vf_graph *g, const vf_gedge *e, vf_status *st)
{
    const vf_port_spec *S = vf_port_find(&g->stages[e->src].ports, e->src_port);
    const vf_port_spec *D = vf_port_find(&g->stages[e->dst].ports, e->dst_port);
    if (!S || !D) return edge_err(g, e, st, "port vanished after propagation");
    binding b[VF_MAX_PORT_TENSORS * VF_MAX_DIMS];
    int nb = 0;
    for (int i = 0; i < D->ntensors; i++) {
        const vf_tensor_spec *td = &D->t[i], *ts = NULL;
        for (int k = 0; k < S->ntensors && !ts; k++)
            if (strcmp(S->t[k].name, td->name) == 0) ts = &S->t[k];
        if (!ts) {
            if (td->optional) continue;
            char list[VF_MAX_PORT_TENSORS * (VF_NAME_MAX + 2)] = "";
            for (int k = 0; k < S->ntensors; k++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", k ? ", " : "", S->t[k].name);
            }
            return edge_err(g, e, st, "'%s' expects tensor '%s', which '%s' does not send (it sends: %s)",
                            g->stages[e->dst].name, td->name, g->stages[e->src].name,
                            S->ntensors ? list : "none");
        }
        if (ts->optional && !td->optional)
            return edge_err(g, e, st, "tensor '%s' may be missing from what '%s' sends, but '%s' requires it",
                            td->name, g->stages[e->src].name, g->stages[e->dst].name);
        if (ts->dtype != td->dtype)
            return edge_err(g, e, st, "tensor '%s' dtype mismatch: sends %s, expects %s", td->name,
                            vf_dtype_name(ts->dtype), vf_dtype_name(td->dtype));
        char ss[160], ds[160];
        shape_str(ts, ss, sizeof ss);
        shape_str(td, ds, sizeof ds);
        if (ts->ndim != td->ndim)
            return edge_err(g, e, st, "tensor '%s' shape mismatch: sends %s, expects %s (%d vs %d dims)",
                            td->name, ss, ds, ts->ndim, td->ndim);
        for (int d = 0; d < td->ndim; d++) {
            bool svar = ts->sym[d][0] != 0, dvar = td->sym[d][0] != 0;
            int64_t sv = ts->dims[d], dv = td->dims[d];
            if (!dvar) {
                if (svar)
                    return edge_err(g, e, st,
                                    "tensor '%s' shape mismatch: sends %s, expects %s (dim %d varies up "
                                    "to %lld, expected exactly %lld)",
                                    td->name, ss, ds, d, (long long)sv, (long long)dv);
                if (sv != dv)
                    return edge_err(g, e, st, "tensor '%s' shape mismatch: sends %s, expects %s (dim %d: "
                                    "%lld vs %lld)",
                                    td->name, ss, ds, d, (long long)sv, (long long)dv);
                continue;
            }
            if (dv > 0 && sv > dv)
                return edge_err(g, e, st,
                                "tensor '%s' shape mismatch: sends %s, expects %s (dim %d: %s%lld exceeds "
                                "%s<=%lld)",
                                td->name, ss, ds, d, svar ? "up to " : "", (long long)sv, td->sym[d],
                                (long long)dv);
            /* Unify: every occurrence of a destination symbol must see the same thing. */
            binding *bb = NULL;
            for (int k = 0; k < nb && !bb; k++)
                if (strcmp(b[k].sym, td->sym[d]) == 0) bb = &b[k];
            if (!bb) {
                bb = &b[nb++];
                snprintf(bb->sym, sizeof bb->sym, "%s", td->sym[d]);
                bb->value = sv;
                snprintf(bb->src_sym, sizeof bb->src_sym, "%s", svar ? ts->sym[d] : "");
                snprintf(bb->tensor, sizeof bb->tensor, "%s", td->name);
                bb->dim = d;
                continue;
            }
            bool same = svar ? strcmp(bb->src_sym, ts->sym[d]) == 0 : (!bb->src_sym[0] && bb->value == sv);
            if (!same) {
                char was[40], now[40];
                if (bb->src_sym[0]) snprintf(was, sizeof was, "%s", bb->src_sym);
                else snprintf(was, sizeof was, "%lld", (long long)bb->value);
                if (svar) snprintf(now, sizeof now, "%s", ts->sym[d]);
                else snprintf(now, sizeof now, "%lld", (long long)sv);
                return edge_err(g, e, st, "symbol %s is %s (tensor '%s' dim %d) but %s (tensor '%s' dim %d)",
                                bb->sym, was, bb->tensor, bb->dim, now, td->name, d);
            }
        }
    }
    return 0;
}

/* Re-derives each stage's ports from what arrives at its inputs, in topological order,
 * and checks every edge on the way. */
static int propagate(vf_graph *g, const int *order, vf_status *st)
{
    int rc = 0;
    vf_port_specs *up = malloc(sizeof *up);
    if (!up) VF_FAIL(st, VF_ENOMEM, "out of memory");
    for (int k = 0; k < g->nstages; k++) {
        int si = order[k];
        vf_gstage *s = &g->stages[si];
        memset(up, 0, sizeof *up);
        for (int i = 0; i < g->nedges; i++) {
            const vf_gedge *e = &g->edges[i];
            if (e->dst != si || e->loop || vf_port_find(up, e->dst_port)) continue;
            const vf_port_spec *src = vf_port_find(&g->stages[e->src].ports, e->src_port);
            if (!src || up->n >= VF_MAX_PORTS) continue;
            up->p[up->n] = *src;
            snprintf(up->p[up->n].name, sizeof up->p[up->n].name, "%s", e->dst_port);
            up->p[up->n].dir = VF_PORT_IN;
            up->n++;
        }
        VF_TRY(call_ports(s, up, st));
        for (int i = 0; i < g->nedges; i++) {
            const vf_gedge *e = &g->edges[i];
            if (e->dst != si || e->loop) continue;
            const vf_port_spec *p = vf_port_find(&s->ports, e->dst_port);
            if (!p || p->dir != VF_PORT_IN)
                VF_FAIL(st, VF_EUSAGE, "%s: stage '%s' (%s) dropped its input port '%s' once its inputs "
                        "were known",
                        s->where, s->name, s->kind, e->dst_port);
            VF_TRY(check_compat(g, e, st));
        }
    }
    for (int i = 0; i < g->nedges; i++)
        if (g->edges[i].loop) VF_TRY(check_compat(g, &g->edges[i], st));
fail:
    free(up);
    return rc;
}

static int check_required(const vf_graph *g, vf_status *st)
{
    int rc = 0;
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        for (int p = 0; p < s->ports.n; p++) {
            const vf_port_spec *ps = &s->ports.p[p];
            if (!ps->required) continue;
            bool connected = false;
            for (int k = 0; k < g->nedges && !connected; k++) {
                const vf_gedge *e = &g->edges[k];
                connected = ps->dir == VF_PORT_IN
                                ? e->dst == i && strcmp(e->dst_port, ps->name) == 0
                                : e->src == i && strcmp(e->src_port, ps->name) == 0;
            }
            if (!connected)
                VF_FAIL(st, VF_EUSAGE, "%s: stage '%s' (%s): required %s '%s' is not connected", s->where,
                        s->name, s->kind, ps->dir == VF_PORT_IN ? "input" : "output", ps->name);
        }
    }
fail:
    return rc;
}

static int call_memory(vf_graph *g, vf_status *st)
{
    for (int i = 0; i < g->nstages; i++) {
        vf_gstage *s = &g->stages[i];
        memset(&s->mem, 0, sizeof s->mem);
        if (!s->ops->memory) continue;
        vf_status hs = {0};
        int rc = s->ops->memory(s->params, &s->ports, &s->mem, &hs);
        if (rc < 0) {
            char ctx[512];
            stage_ctx(s, ctx, sizeof ctx);
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: memory: %s", ctx,
                                 hs.msg[0] ? hs.msg : vf_strerror(rc));
        }
    }
    return 0;
}

int vf_graph_validate(vf_graph *g, vf_status *st)
{
    int rc = 0;
    int *order = NULL;
    vf_port_specs *none = NULL;
    if (g->nstages == 0)
        VF_FAIL(st, VF_EUSAGE, "%s: pipeline '%s' has no stages", g->script[0] ? g->script : "graph",
                g->name);
    VF_TRY(check_kinds_and_params(g, st));
    /* First pass with nothing known upstream: learn port names and directions. */
    if (!(none = calloc(1, sizeof *none))) VF_FAIL(st, VF_ENOMEM, "out of memory");
    for (int i = 0; i < g->nstages; i++) VF_TRY(call_ports(&g->stages[i], none, st));
    VF_TRY(check_edges(g, st));
    if (!(order = malloc(sizeof *order * (size_t)g->nstages))) VF_FAIL(st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_graph_topo_order(g, order, st));
    VF_TRY(propagate(g, order, st));
    VF_TRY(check_required(g, st));
    VF_TRY(call_memory(g, st));
fail:
    free(order);
    free(none);
    return rc;
}

const vf_port_spec *vf_graph_edge_src_spec(const vf_graph *g, int e)
{
    if (e < 0 || e >= g->nedges) return NULL;
    return vf_port_find(&g->stages[g->edges[e].src].ports, g->edges[e].src_port);
}

int64_t vf_graph_edge_item_bytes(const vf_graph *g, int e)
{
    const vf_port_spec *p = vf_graph_edge_src_spec(g, e);
    if (!p) return 0;
    if (g->edges[e].transport == VF_TR_TCP) return vf_port_max_item_bytes(p);
    vf_port_spec q = *p;
    static const int64_t desc = VF_VIEW_WIRE_BYTES;
    for (int i = 0; i < q.ntensors; i++)
        if (q.t[i].view) q.t[i].dtype = VF_DTYPE_U8, q.t[i].ndim = 1, q.t[i].dims[0] = desc;
    return vf_port_max_item_bytes(&q);
}

int64_t vf_graph_edge_bytes(const vf_graph *g, int e)
{
    int64_t item = vf_graph_edge_item_bytes(g, e);
    return item < 0 ? -1 : (int64_t)g->edges[e].capacity * item;
}
