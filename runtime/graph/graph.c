/* graph.c — the plain graph model: stages and edges as the Lua DSL produced them, the
 * --set name.param=v overrides, its JSON form (run dir, workers) and Graphviz DOT.
 *
 * Validation (validate.c) and placement (place.c) work on this model; neither keeps
 * state of its own, so a worker that rebuilds the graph from JSON and validates it
 * again gets the same port specs the driver saw.
 */
#include "runtime/graph/graph.h"
#include "runtime/json.h"
#include "runtime/core/params.h"

#include <stdlib.h>
#include <string.h>

vf_graph *vf_graph_new(const char *name)
{
    vf_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    snprintf(g->name, sizeof g->name, "%s", name ? name : "pipeline");
    return g;
}

void vf_graph_free(vf_graph *g)
{
    if (!g) return;
    for (int i = 0; i < g->nstages; i++) {
        vf_params_free(g->stages[i].params);
        vf_json_free(g->stages[i].links);
    }
    free(g->stages);
    free(g->edges);
    free(g->workers);
    free(g);
}

/* Stage names appear in messages, metrics, file names and `--set name.param=v`: no
 * dots (the override separator), no blanks or quotes, bounded length. */
static const char *bad_name(const char *name)
{
    if (!*name) return "it is empty";
    if (strlen(name) >= VF_NAME_MAX) return "it is too long (47 characters at most)";
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        if (*c == '.') return "it contains '.', which separates stage and param in --set name.param=v";
        if (*c <= ' ' || *c == '"' || *c == '\'' || *c == '\\' || *c == '/' || *c == 0x7f)
            return "use letters, digits and _ - [ ] :";
    }
    return NULL;
}

int vf_graph_add_stage(vf_graph *g, const char *name, const char *kind, vf_params *params,
                       const char *where, vf_status *st)
{
    int rc = 0;
    const char *why;
    if (!where) where = "";
    if ((why = bad_name(name)))
        VF_FAIL(st, VF_EUSAGE, "%s: bad stage name '%s': %s", where, name, why);
    if (!kind || !*kind || strlen(kind) >= VF_NAME_MAX)
        VF_FAIL(st, VF_EUSAGE, "%s: stage '%s': bad stage kind '%s'", where, name, kind ? kind : "");
    int dup = vf_graph_find(g, name);
    if (dup >= 0)
        VF_FAIL(st, VF_EUSAGE, "%s: duplicate stage name '%s' (first defined at %s)", where, name,
                g->stages[dup].where);
    if (!params && !(params = vf_params_new())) VF_FAIL(st, VF_ENOMEM, "out of memory");
    if (g->nstages == g->cap_stages) {
        int cap = g->cap_stages ? g->cap_stages * 2 : 8;
        vf_gstage *s = realloc(g->stages, (size_t)cap * sizeof *s);
        if (!s) VF_FAIL(st, VF_ENOMEM, "out of memory");
        g->stages = s;
        g->cap_stages = cap;
    }
    vf_gstage *s = &g->stages[g->nstages];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->kind, sizeof s->kind, "%s", kind);
    snprintf(s->where, sizeof s->where, "%s", where);
    s->params = params;
    s->worker = -1;
    s->device.kind = VF_DEV_CPU;
    return g->nstages++;
fail:
    vf_params_free(params);
    return rc;
}

int vf_graph_add_edge(vf_graph *g, int src, const char *src_port, int dst, const char *dst_port,
                      int capacity, bool loop, const char *where, vf_status *st)
{
    int rc = 0;
    if (!where) where = "";
    if (src < 0 || src >= g->nstages || dst < 0 || dst >= g->nstages)
        VF_FAIL(st, VF_EUSAGE, "%s: connect: no such stage", where);
    if (capacity < 1)
        VF_FAIL(st, VF_EUSAGE, "%s: connect '%s' -> '%s': capacity must be at least 1, got %d", where,
                g->stages[src].name, g->stages[dst].name, capacity);
    if ((src_port && strlen(src_port) >= VF_NAME_MAX) || (dst_port && strlen(dst_port) >= VF_NAME_MAX))
        VF_FAIL(st, VF_EUSAGE, "%s: connect: port name too long", where);
    if (g->nedges == g->cap_edges) {
        int cap = g->cap_edges ? g->cap_edges * 2 : 8;
        vf_gedge *e = realloc(g->edges, (size_t)cap * sizeof *e);
        if (!e) VF_FAIL(st, VF_ENOMEM, "out of memory");
        g->edges = e;
        g->cap_edges = cap;
    }
    vf_gedge *e = &g->edges[g->nedges];
    memset(e, 0, sizeof *e);
    e->src = src;
    e->dst = dst;
    snprintf(e->src_port, sizeof e->src_port, "%s", src_port ? src_port : "");
    snprintf(e->dst_port, sizeof e->dst_port, "%s", dst_port ? dst_port : "");
    e->capacity = capacity;
    e->loop = loop;
    e->transport = VF_TR_AUTO;
    snprintf(e->where, sizeof e->where, "%s", where);
    return g->nedges++;
fail:
    return rc;
}

int vf_graph_find(const vf_graph *g, const char *name)
{
    for (int i = 0; i < g->nstages; i++)
        if (strcmp(g->stages[i].name, name) == 0) return i;
    return -1;
}

/* ------------------------------------------------------------------ overrides */

/* Whether `key`'s top level is a param of stage s's kind (kinds unknown here pass:
 * validation reports them); else VF_EUSAGE with a did-you-mean. `who` names the stage
 * or the group in the message. */
static int override_key_ok(const vf_gstage *s, const char *who, const char *stage_param,
                           const char *value, const char *key, vf_status *st)
{
    int rc = 0;
    const vf_stage_ops *ops = vf_stage_lookup(s->kind);
    if (!ops) return 0;
    char top[VF_NAME_MAX * 2];
    snprintf(top, sizeof top, "%s", key);
    char *d2 = strchr(top, '.');
    if (d2) *d2 = 0;
    if (vf_param_spec_find(ops->params, top)) return 0;
    const char *names[128];
    int n = 0;
    for (const vf_param_spec *p = ops->params; p && p->name && n < 128; p++) names[n++] = p->name;
    const char *near = vf_did_you_mean(top, names, n);
    if (near)
        VF_FAIL(st, VF_EUSAGE, "--set %s=%s: %s (%s) has no param '%s'; did you mean '%s'?", stage_param,
                value, who, s->kind, top, near);
    VF_FAIL(st, VF_EUSAGE, "--set %s=%s: %s (%s) has no param '%s'", stage_param, value, who, s->kind, top);
fail:
    return rc;
}

/* Sets every param linked to `tie` (each stage's own name for it, plus `rest`: the
 * override key past its top level) to the JSON text `value`. */
static int set_tied(vf_graph *g, const char *tie, const char *rest, const char *stage_param, const char *value,
                    vf_status *st)
{
    int rc = 0;
    char tie_copy[VF_NAME_MAX * 2];
    snprintf(tie_copy, sizeof tie_copy, "%s", tie); /* `tie` lives in a links object we do not change */
    for (int k = 0; k < g->nstages; k++) {
        vf_gstage *s = &g->stages[k];
        for (int j = 0; j < vf_json_len(s->links); j++) {
            const vf_json *v = s->links->items[j];
            if (v->type != VF_JSON_STR || strcmp(v->s, tie_copy) != 0) continue;
            char key[VF_NAME_MAX * 4];
            snprintf(key, sizeof key, "%s%s", vf_json_key_at(s->links, j), rest);
            rc = vf_params_set_json(s->params, key, value, st);
            if (rc < 0) {
                vf_status_prefix(st, "--set %s=%s (its copy %s.%s)", stage_param, value, s->name, key);
                goto fail;
            }
        }
    }
fail:
    return rc;
}

int vf_graph_override(vf_graph *g, const char *stage_param, const char *value, vf_status *st)
{
    int rc = 0;
    char name[VF_NAME_MAX], who[2 * VF_NAME_MAX + 32];
    const char *dot = strchr(stage_param, '.');
    if (!dot || dot == stage_param || !dot[1] || (size_t)(dot - stage_param) >= sizeof name)
        VF_FAIL(st, VF_EUSAGE, "--set %s=%s: expected NAME.PARAM=VALUE", stage_param, value);
    memcpy(name, stage_param, (size_t)(dot - stage_param));
    name[dot - stage_param] = 0;
    const char *key = dot + 1;
    /* The stage NAME, else every stage of group NAME (an expansion such as decode's
     * workers = N): one override reaches all the instances the user wrote as one. */
    int i = vf_graph_find(g, name), nmembers = 0;
    if (i < 0)
        for (int k = 0; k < g->nstages; k++) nmembers += strcmp(g->stages[k].group, name) == 0;
    if (i < 0 && !nmembers) {
        /* A typo: suggest among stage names and group names alike. */
        const char *names[256];
        int n = 0;
        for (int k = 0; k < g->nstages && n < 256; k++) {
            names[n++] = g->stages[k].name;
            if (g->stages[k].group[0] && n < 256) names[n++] = g->stages[k].group;
        }
        const char *near = vf_did_you_mean(name, names, n);
        if (near)
            VF_FAIL(st, VF_EUSAGE, "--set %s=%s: no stage named '%s'; did you mean '%s'?", stage_param,
                    value, name, near);
        VF_FAIL(st, VF_EUSAGE, "--set %s=%s: no stage named '%s'", stage_param, value, name);
    }
    /* The top-level key must be in the schema when the kind is known; a typo here would
     * otherwise be reported against the Lua line, which the user did not write. Every
     * member is checked before any is changed. */
    for (int k = 0; k < g->nstages; k++) {
        const vf_gstage *s = &g->stages[k];
        if (i >= 0 ? k != i : strcmp(s->group, name) != 0) continue;
        if (i >= 0) snprintf(who, sizeof who, "stage '%s'", s->name);
        else snprintf(who, sizeof who, "stage '%s' of group '%s'", s->name, name);
        VF_TRY(override_key_ok(s, who, stage_param, value, key, st));
    }
    /* A param an expansion copied: refused where the copy has one place to be set,
     * else the override goes to every stage tied to the same value (below). */
    char top[VF_NAME_MAX * 2];
    snprintf(top, sizeof top, "%s", key);
    char *d2 = strchr(top, '.');
    if (d2) *d2 = 0;
    const char *ties[16];
    int nties = 0;
    for (int k = 0; k < g->nstages; k++) {
        const vf_gstage *s = &g->stages[k];
        if (i >= 0 ? k != i : strcmp(s->group, name) != 0) continue;
        const char *link = s->links ? vf_json_get_str(s->links, top, NULL) : NULL;
        if (!link) continue;
        if (link[0] != '=')
            VF_FAIL(st, VF_EUSAGE, "--set %s=%s: param '%s' of stage '%s' %s", stage_param, value, top, s->name,
                    link);
        bool seen = false;
        for (int t = 0; t < nties; t++) seen = seen || strcmp(ties[t], link) == 0;
        if (!seen && nties < 16) ties[nties++] = link;
    }
    for (int k = 0; k < g->nstages; k++) {
        vf_gstage *s = &g->stages[k];
        if (i >= 0 ? k != i : strcmp(s->group, name) != 0) continue;
        if (s->links && vf_json_get_str(s->links, top, NULL)) continue; /* a tie: below */
        rc = vf_params_set_json(s->params, key, value, st);
        if (rc < 0) {
            if (i < 0) vf_status_prefix(st, "--set %s=%s (stage '%s' of group '%s')", stage_param, value, s->name, name);
            else vf_status_prefix(st, "--set %s=%s", stage_param, value);
            goto fail;
        }
    }
    for (int t = 0; t < nties; t++) VF_TRY(set_tied(g, ties[t], key + strlen(top), stage_param, value, st));
fail:
    return rc;
}

/* ------------------------------------------------------------------ JSON */

static vf_json *device_json(vf_device d)
{
    char buf[32];
    vf_device_str(d, buf, sizeof buf);
    return vf_json_str(buf);
}

static vf_json *port_json(const vf_port_spec *p)
{
    vf_json *o = vf_json_obj();
    vf_json_set(o, "name", vf_json_str(p->name));
    vf_json_set(o, "dir", vf_json_str(p->dir == VF_PORT_IN ? "in" : "out"));
    vf_json_set(o, "required", vf_json_bool(p->required));
    vf_json_set(o, "multi", vf_json_bool(p->multi));
    vf_json_set(o, "device", device_json(p->device));
    vf_json_set(o, "meta_bytes", vf_json_int(p->meta_bytes));
    vf_json *ts = vf_json_arr();
    for (int i = 0; i < p->ntensors; i++) {
        const vf_tensor_spec *t = &p->t[i];
        vf_json *to = vf_json_obj(), *shape = vf_json_arr(), *sym = vf_json_arr();
        for (int d = 0; d < t->ndim; d++) {
            vf_json_push(shape, vf_json_int(t->dims[d]));
            vf_json_push(sym, vf_json_str(t->sym[d]));
        }
        vf_json_set(to, "name", vf_json_str(t->name));
        vf_json_set(to, "dtype", vf_json_str(vf_dtype_name(t->dtype)));
        vf_json_set(to, "shape", shape);
        vf_json_set(to, "sym", sym);
        vf_json_set(to, "optional", vf_json_bool(t->optional));
        vf_json_push(ts, to);
    }
    vf_json_set(o, "tensors", ts);
    return o;
}

char *vf_graph_to_json(const vf_graph *g)
{
    vf_json *root = vf_json_obj(), *stages = vf_json_arr(), *edges = vf_json_arr(),
            *workers = vf_json_arr();
    char *out = NULL;
    if (!root || !stages || !edges || !workers) goto done;
    vf_json_set(root, "name", vf_json_str(g->name));
    vf_json_set(root, "script", vf_json_str(g->script));
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        vf_json *o = vf_json_obj();
        vf_json_set(o, "name", vf_json_str(s->name));
        vf_json_set(o, "kind", vf_json_str(s->kind));
        vf_json_set(o, "where", vf_json_str(s->where));
        vf_json_set(o, "device", device_json(s->device));
        vf_json_set(o, "worker_hint", vf_json_str(s->worker_hint));
        vf_json_set(o, "worker", vf_json_int(s->worker));
        if (s->node) vf_json_set(o, "node", vf_json_int(s->node));
        if (s->group[0]) vf_json_set(o, "group", vf_json_str(s->group));
        vf_json_set(o, "params", vf_json_clone(vf_params_ctree(s->params)));
        /* Informational (the run dir's reader): workers re-derive both by validating. */
        if (s->ops) {
            vf_json *ports = vf_json_arr(), *mem = vf_json_arr();
            for (int p = 0; p < s->ports.n; p++) vf_json_push(ports, port_json(&s->ports.p[p]));
            for (int m = 0; m < s->mem.n; m++) {
                vf_json *mo = vf_json_obj();
                vf_json_set(mo, "what", vf_json_str(s->mem.e[m].what));
                vf_json_set(mo, "device", device_json(s->mem.e[m].device));
                vf_json_set(mo, "bytes", vf_json_int(s->mem.e[m].bytes));
                vf_json_push(mem, mo);
            }
            vf_json_set(o, "ports", ports);
            vf_json_set(o, "mem", mem);
        }
        vf_json_push(stages, o);
    }
    for (int i = 0; i < g->nedges; i++) {
        const vf_gedge *e = &g->edges[i];
        vf_json *o = vf_json_obj();
        vf_json_set(o, "src", vf_json_str(g->stages[e->src].name));
        vf_json_set(o, "src_port", vf_json_str(e->src_port));
        vf_json_set(o, "dst", vf_json_str(g->stages[e->dst].name));
        vf_json_set(o, "dst_port", vf_json_str(e->dst_port));
        vf_json_set(o, "capacity", vf_json_int(e->capacity));
        vf_json_set(o, "loop", vf_json_bool(e->loop));
        vf_json_set(o, "transport", vf_json_str(vf_transport_name(e->transport)));
        vf_json_set(o, "where", vf_json_str(e->where));
        vf_json_push(edges, o);
    }
    for (int i = 0; i < g->nworkers; i++) {
        const vf_gworker *w = &g->workers[i];
        vf_json *o = vf_json_obj();
        vf_json_set(o, "name", vf_json_str(w->name));
        vf_json_set(o, "device", device_json(w->device));
        vf_json_set(o, "host", vf_json_str(w->host));
        vf_json_set(o, "node", vf_json_int(w->node));
        vf_json_push(workers, o);
    }
    vf_json_set(root, "stages", stages);
    vf_json_set(root, "edges", edges);
    vf_json_set(root, "workers", workers);
    stages = edges = workers = NULL;
    out = vf_json_emit(root, false, 2);
done:
    vf_json_free(root);
    vf_json_free(stages);
    vf_json_free(edges);
    vf_json_free(workers);
    return out;
}

static const char *need_str(const vf_json *o, const char *key, const char *what, vf_status *st)
{
    const char *s = vf_json_get_str(o, key, NULL);
    if (!s) vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "graph JSON: %s lacks string '%s'", what, key);
    return s;
}

int vf_graph_from_json(const char *text, vf_graph **out, vf_status *st)
{
    int rc = 0;
    vf_graph *g = NULL;
    vf_json *root = vf_json_parse(text, st);
    *out = NULL;
    if (!root) {
        vf_status_prefix(st, "graph JSON");
        return VF_ECORRUPT;
    }
    const char *name = need_str(root, "name", "graph", st);
    if (!name) VF_FAIL(st, VF_ECORRUPT, "graph JSON: no name");
    if (!(g = vf_graph_new(name))) VF_FAIL(st, VF_ENOMEM, "out of memory");
    snprintf(g->script, sizeof g->script, "%s", vf_json_get_str(root, "script", ""));
    vf_json *stages = vf_json_get(root, "stages"), *edges = vf_json_get(root, "edges"),
            *workers = vf_json_get(root, "workers");
    if (!stages || stages->type != VF_JSON_ARR || !edges || edges->type != VF_JSON_ARR)
        VF_FAIL(st, VF_ECORRUPT, "graph JSON: 'stages' and 'edges' must be lists");
    for (int i = 0; i < stages->len; i++) {
        vf_json *o = stages->items[i];
        const char *sn = need_str(o, "name", "stage", st), *kind = need_str(o, "kind", "stage", st);
        vf_json *pj = vf_json_get(o, "params");
        if (!sn || !kind) VF_FAIL(st, VF_ECORRUPT, "graph JSON: bad stage %d", i);
        if (!pj || pj->type != VF_JSON_OBJ)
            VF_FAIL(st, VF_ECORRUPT, "graph JSON: stage '%s' has no params object", sn);
        vf_params *p = vf_params_adopt(vf_json_clone(pj));
        if (!p) VF_FAIL(st, VF_ENOMEM, "out of memory");
        VF_TRY(vf_graph_add_stage(g, sn, kind, p, vf_json_get_str(o, "where", ""), st));
        vf_gstage *s = &g->stages[g->nstages - 1];
        snprintf(s->worker_hint, sizeof s->worker_hint, "%s", vf_json_get_str(o, "worker_hint", ""));
        s->worker = (int)vf_json_get_int(o, "worker", -1);
        s->node = (int)vf_json_get_int(o, "node", 0);
        if (s->node < 0) VF_FAIL(st, VF_ECORRUPT, "graph JSON: stage '%s': bad node", sn);
        snprintf(s->group, sizeof s->group, "%s", vf_json_get_str(o, "group", ""));
        if (vf_device_parse(vf_json_get_str(o, "device", "cpu"), &s->device, st) < 0)
            VF_FAIL(st, VF_ECORRUPT, "graph JSON: stage '%s': bad device", sn);
    }
    for (int i = 0; i < edges->len; i++) {
        vf_json *o = edges->items[i];
        const char *src = need_str(o, "src", "edge", st), *dst = need_str(o, "dst", "edge", st);
        if (!src || !dst) VF_FAIL(st, VF_ECORRUPT, "graph JSON: bad edge %d", i);
        int a = vf_graph_find(g, src), b = vf_graph_find(g, dst);
        if (a < 0 || b < 0) VF_FAIL(st, VF_ECORRUPT, "graph JSON: edge %d names an unknown stage", i);
        VF_TRY(vf_graph_add_edge(g, a, vf_json_get_str(o, "src_port", ""), b,
                                 vf_json_get_str(o, "dst_port", ""), (int)vf_json_get_int(o, "capacity", 2),
                                 vf_json_get_bool(o, "loop", false), vf_json_get_str(o, "where", ""), st));
        if (vf_transport_parse(vf_json_get_str(o, "transport", "auto"), &g->edges[g->nedges - 1].transport) < 0)
            VF_FAIL(st, VF_ECORRUPT, "graph JSON: edge %d: bad transport", i);
    }
    int nw = vf_json_len(workers);
    if (nw) {
        if (!(g->workers = calloc((size_t)nw, sizeof *g->workers))) VF_FAIL(st, VF_ENOMEM, "out of memory");
        for (int i = 0; i < nw; i++) {
            vf_json *o = workers->items[i];
            vf_gworker *w = &g->workers[i];
            snprintf(w->name, sizeof w->name, "%s", vf_json_get_str(o, "name", ""));
            snprintf(w->host, sizeof w->host, "%s", vf_json_get_str(o, "host", ""));
            w->node = (int)vf_json_get_int(o, "node", 0);
            if (vf_device_parse(vf_json_get_str(o, "device", "cpu"), &w->device, st) < 0)
                VF_FAIL(st, VF_ECORRUPT, "graph JSON: worker %d: bad device", i);
        }
        g->nworkers = nw;
    }
    for (int i = 0; i < g->nstages; i++)
        if (g->stages[i].worker >= g->nworkers)
            VF_FAIL(st, VF_ECORRUPT, "graph JSON: stage '%s' is placed on worker %d of %d",
                    g->stages[i].name, g->stages[i].worker, g->nworkers);
    vf_json_free(root);
    *out = g;
    return 0;
fail:
    if (rc >= 0) rc = VF_ECORRUPT;
    vf_json_free(root);
    vf_graph_free(g);
    return rc;
}

/* ------------------------------------------------------------------ DOT */

static void dot_id(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void dot_stage(FILE *f, const vf_gstage *s, const char *indent)
{
    char dev[32];
    vf_device_str(s->device, dev, sizeof dev);
    fprintf(f, "%s", indent);
    dot_id(f, s->name);
    fprintf(f, " [label=\"%s\\n%s%s%s\"];\n", s->name, s->kind, s->device.kind == VF_DEV_CPU ? "" : "\\n",
            s->device.kind == VF_DEV_CPU ? "" : dev);
}

int vf_graph_dot(const vf_graph *g, FILE *f)
{
    fprintf(f, "digraph ");
    dot_id(f, g->name);
    fprintf(f, " {\n  rankdir=LR;\n  node [shape=box, style=rounded];\n");
    if (g->nworkers > 0) {
        for (int w = 0; w < g->nworkers; w++) {
            fprintf(f, "  subgraph \"cluster_%d\" {\n    label=", w);
            if (vf_graph_nodes(g) > 1) {
                char label[VF_NAME_MAX + 32];
                snprintf(label, sizeof label, "node %d: %s", g->workers[w].node, g->workers[w].name);
                dot_id(f, label);
            } else {
                dot_id(f, g->workers[w].name);
            }
            fprintf(f, ";\n");
            for (int i = 0; i < g->nstages; i++)
                if (g->stages[i].worker == w) dot_stage(f, &g->stages[i], "    ");
            fprintf(f, "  }\n");
        }
        for (int i = 0; i < g->nstages; i++)
            if (g->stages[i].worker < 0 || g->stages[i].worker >= g->nworkers)
                dot_stage(f, &g->stages[i], "  ");
    } else {
        for (int i = 0; i < g->nstages; i++) dot_stage(f, &g->stages[i], "  ");
    }
    for (int i = 0; i < g->nedges; i++) {
        const vf_gedge *e = &g->edges[i];
        fprintf(f, "  ");
        dot_id(f, g->stages[e->src].name);
        fprintf(f, " -> ");
        dot_id(f, g->stages[e->dst].name);
        fprintf(f, " [label=\"%s -> %s\\ncap %d", e->src_port, e->dst_port, e->capacity);
        if (e->transport != VF_TR_AUTO && e->transport != VF_TR_INPROC)
            fprintf(f, ", %s", vf_transport_name(e->transport));
        fprintf(f, "\"%s];\n", e->loop ? ", style=dashed, constraint=false" : "");
    }
    fprintf(f, "}\n");
    return ferror(f) ? VF_EIO : 0;
}

/* ------------------------------------------------------------------ nodes */

int vf_graph_nodes(const vf_graph *g)
{
    int n = 1;
    for (int i = 0; i < g->nstages; i++)
        if (g->stages[i].node + 1 > n) n = g->stages[i].node + 1;
    return n;
}

int vf_graph_check_nodes(const vf_graph *g, int nnodes, vf_status *st)
{
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        if (s->node >= nnodes)
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                                 "%s: stage '%s' (%s) is placed on node %d, but the run has %d node%s "
                                 "(the launcher's world size, or --nodes)",
                                 s->where, s->name, s->kind, s->node, nnodes, nnodes == 1 ? "" : "s");
    }
    return 0;
}
