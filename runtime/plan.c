/* plan.c — `vflow plan` output and the --budget check (see plan.h). Replaceable as a
 * whole by the memory planner: nothing else depends on how it lays out its report. */
#include "plan.h"
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void vf_bytes_str(int64_t bytes, char *buf, size_t n)
{
    if (bytes < 0) {
        snprintf(buf, n, "unbounded");
        return;
    }
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (fabs(v) >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, n, "%lld B", (long long)bytes);
    else snprintf(buf, n, "%.2f %s", v, unit[u]);
}

static int parse_size(const char *s, int64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0)) return VF_EINVAL;
    static const struct { const char *suffix; double mul; } units[] = {
        {"", 1},          {"B", 1},          {"K", 1024.0},       {"KiB", 1024.0},
        {"KB", 1e3},      {"M", 1048576.0},  {"MiB", 1048576.0},  {"MB", 1e6},
        {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9},
        {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].suffix) == 0) {
            double b = v * units[i].mul;
            if (b > 9.0e18) return VF_EINVAL;
            *out = (int64_t)b;
            return 0;
        }
    return VF_EINVAL;
}

int vf_budget_parse(const char *spec, vf_budget *out, vf_status *st)
{
    int rc = 0;
    char buf[512];
    memset(out, 0, sizeof *out);
    if (strlen(spec) >= sizeof buf) VF_FAIL(st, VF_EUSAGE, "--budget: spec too long");
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) VF_FAIL(st, VF_EUSAGE, "--budget %s: expected DEVICE=SIZE, got '%s'", spec, tok);
        *eq = 0;
        if (out->n == VF_BUDGET_MAX) VF_FAIL(st, VF_EUSAGE, "--budget %s: too many entries", spec);
        vf_status dst = {0};
        if (strcmp(tok, "cuda") == 0) {
            out->e[out->n].any_cuda = true;
            out->e[out->n].dev = (vf_device){VF_DEV_CUDA, 0};
        } else if (vf_device_parse(tok, &out->e[out->n].dev, &dst) < 0) {
            VF_FAIL(st, VF_EUSAGE, "--budget %s: unknown device '%s' (cpu, cuda or cuda:N)", spec, tok);
        }
        if (parse_size(eq + 1, &out->e[out->n].bytes) < 0)
            VF_FAIL(st, VF_EUSAGE, "--budget %s: bad size '%s' (e.g. 24GiB, 800MB, 1.5G)", spec, eq + 1);
        out->n++;
    }
    if (out->n == 0) VF_FAIL(st, VF_EUSAGE, "--budget: empty spec");
fail:
    return rc;
}

static bool same_dev(vf_device a, vf_device b)
{
    return a.kind == b.kind && (a.kind == VF_DEV_CPU || a.index == b.index);
}

static vf_device edge_device(const vf_graph *g, int e)
{
    const vf_port_spec *p = vf_graph_edge_src_spec(g, e);
    return p ? p->device : (vf_device){VF_DEV_CPU, 0};
}

int64_t vf_plan_device_total(const vf_graph *g, vf_device dev)
{
    int64_t total = 0;
    for (int i = 0; i < g->nstages; i++) total += vf_mem_plan_total(&g->stages[i].mem, dev);
    for (int e = 0; e < g->nedges; e++) {
        int64_t b = vf_graph_edge_bytes(g, e);
        if (b < 0) return -1; /* unbounded */
        if (same_dev(edge_device(g, e), dev)) total += b;
    }
    return total;
}

/* Every device the graph touches, cpu first. */
static int devices(const vf_graph *g, vf_device *out, int max)
{
    int n = 0;
    out[n++] = (vf_device){VF_DEV_CPU, 0};
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        vf_device cands[VF_MAX_MEM_ENTRIES + 1];
        int nc = 0;
        cands[nc++] = s->device;
        for (int m = 0; m < s->mem.n; m++) cands[nc++] = s->mem.e[m].device;
        for (int c = 0; c < nc; c++) {
            bool seen = false;
            for (int k = 0; k < n && !seen; k++) seen = same_dev(out[k], cands[c]);
            if (!seen && n < max) out[n++] = cands[c];
        }
    }
    return n;
}

static const char *worker_name(const vf_graph *g, const vf_gstage *s)
{
    return s->worker >= 0 && s->worker < g->nworkers ? g->workers[s->worker].name : "-";
}

static int print_json(const vf_graph *g, FILE *f, vf_status *st)
{
    char dev[32];
    vf_json *root = vf_json_obj(), *stages = vf_json_arr(), *edges = vf_json_arr(), *totals = vf_json_obj();
    vf_json_set(root, "pipeline", vf_json_str(g->name));
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        vf_json *o = vf_json_obj(), *mem = vf_json_arr();
        vf_json_set(o, "name", vf_json_str(s->name));
        vf_json_set(o, "kind", vf_json_str(s->kind));
        vf_json_set(o, "worker", vf_json_str(worker_name(g, s)));
        vf_device_str(s->device, dev, sizeof dev);
        vf_json_set(o, "device", vf_json_str(dev));
        for (int m = 0; m < s->mem.n; m++) {
            vf_json *mo = vf_json_obj();
            vf_json_set(mo, "what", vf_json_str(s->mem.e[m].what));
            vf_device_str(s->mem.e[m].device, dev, sizeof dev);
            vf_json_set(mo, "device", vf_json_str(dev));
            vf_json_set(mo, "bytes", vf_json_int(s->mem.e[m].bytes));
            vf_json_push(mem, mo);
        }
        vf_json_set(o, "mem", mem);
        vf_json_push(stages, o);
    }
    for (int e = 0; e < g->nedges; e++) {
        const vf_gedge *ge = &g->edges[e];
        const vf_port_spec *p = vf_graph_edge_src_spec(g, e);
        vf_json *o = vf_json_obj();
        char name[2 * VF_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s.%s", g->stages[ge->src].name, ge->src_port);
        vf_json_set(o, "src", vf_json_str(name));
        snprintf(name, sizeof name, "%s.%s", g->stages[ge->dst].name, ge->dst_port);
        vf_json_set(o, "dst", vf_json_str(name));
        vf_json_set(o, "transport", vf_json_str(vf_transport_name(ge->transport)));
        vf_json_set(o, "capacity", vf_json_int(ge->capacity));
        vf_json_set(o, "item_bytes", vf_json_int(p ? vf_port_max_item_bytes(p) : 0));
        vf_json_set(o, "bytes", vf_json_int(vf_graph_edge_bytes(g, e)));
        vf_device_str(edge_device(g, e), dev, sizeof dev);
        vf_json_set(o, "device", vf_json_str(dev));
        vf_json_push(edges, o);
    }
    vf_device devs[64];
    int nd = devices(g, devs, 64);
    for (int d = 0; d < nd; d++) {
        vf_device_str(devs[d], dev, sizeof dev);
        vf_json_set(totals, dev, vf_json_int(vf_plan_device_total(g, devs[d])));
    }
    vf_json_set(root, "stages", stages);
    vf_json_set(root, "edges", edges);
    vf_json_set(root, "totals", totals);
    char *text = vf_json_emit(root, false, 2);
    vf_json_free(root);
    if (!text) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    fprintf(f, "%s\n", text);
    free(text);
    return 0;
}

int vf_plan_print(const vf_graph *g, FILE *f, bool json, vf_status *st)
{
    if (json) return print_json(g, f, st);
    char dev[32], b1[32], b2[32];
    fprintf(f, "plan for pipeline '%s': %d stages, %d edges, %d workers\n\n", g->name, g->nstages, g->nedges,
            g->nworkers);
    fprintf(f, "%-20s %-16s %-16s %-8s %-24s %12s\n", "stage", "kind", "worker", "device", "holds", "bytes");
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        vf_device_str(s->device, dev, sizeof dev);
        if (s->mem.n == 0)
            fprintf(f, "%-20s %-16s %-16s %-8s %-24s %12s\n", s->name, s->kind, worker_name(g, s), dev, "-", "0 B");
        for (int m = 0; m < s->mem.n; m++) {
            vf_device_str(s->mem.e[m].device, dev, sizeof dev);
            vf_bytes_str(s->mem.e[m].bytes, b1, sizeof b1);
            fprintf(f, "%-20s %-16s %-16s %-8s %-24s %12s\n", m ? "" : s->name, m ? "" : s->kind,
                    m ? "" : worker_name(g, s), dev, s->mem.e[m].what, b1);
        }
    }
    if (g->nedges) {
        fprintf(f, "\n%-40s %-9s %8s %12s %12s\n", "edge", "transport", "capacity", "item max", "buffer");
        for (int e = 0; e < g->nedges; e++) {
            const vf_gedge *ge = &g->edges[e];
            const vf_port_spec *p = vf_graph_edge_src_spec(g, e);
            char name[2 * VF_NAME_MAX * 2 + 16];
            snprintf(name, sizeof name, "%s.%s -> %s.%s", g->stages[ge->src].name, ge->src_port,
                     g->stages[ge->dst].name, ge->dst_port);
            vf_bytes_str(p ? vf_port_max_item_bytes(p) : 0, b1, sizeof b1);
            vf_bytes_str(vf_graph_edge_bytes(g, e), b2, sizeof b2);
            fprintf(f, "%-40s %-9s %8d %12s %12s\n", name, vf_transport_name(ge->transport), ge->capacity, b1, b2);
        }
    }
    fprintf(f, "\ntotal per device\n");
    vf_device devs[64];
    int nd = devices(g, devs, 64);
    for (int d = 0; d < nd; d++) {
        vf_device_str(devs[d], dev, sizeof dev);
        vf_bytes_str(vf_plan_device_total(g, devs[d]), b1, sizeof b1);
        fprintf(f, "  %-8s %12s\n", dev, b1);
    }
    return ferror(f) ? vf_status_set(st, VF_EIO, __FILE__, __LINE__, "write error") : 0;
}

int vf_plan_check(const vf_graph *g, const char *budget, vf_status *st)
{
    vf_budget b;
    if (!budget) return 0;
    int rc = vf_budget_parse(budget, &b, st);
    if (rc < 0) return rc;
    vf_device devs[64];
    int nd = devices(g, devs, 64);
    for (int d = 0; d < nd; d++) {
        int64_t limit = -1;
        for (int k = 0; k < b.n; k++) {
            if (!b.e[k].any_cuda && same_dev(b.e[k].dev, devs[d])) limit = b.e[k].bytes;
            if (b.e[k].any_cuda && devs[d].kind == VF_DEV_CUDA && limit < 0) limit = b.e[k].bytes;
        }
        /* A specific entry beats the generic "cuda" one whatever their order. */
        for (int k = 0; k < b.n; k++)
            if (!b.e[k].any_cuda && same_dev(b.e[k].dev, devs[d])) limit = b.e[k].bytes;
        int64_t need = vf_plan_device_total(g, devs[d]);
        if (limit >= 0 && (need > limit || need < 0)) {
            char dev[32], n1[32], n2[32];
            vf_device_str(devs[d], dev, sizeof dev);
            vf_bytes_str(need, n1, sizeof n1);
            vf_bytes_str(limit, n2, sizeof n2);
            return vf_status_set(st, VF_EBUDGET, __FILE__, __LINE__,
                                 "%s: the plan needs %s on %s, over the budget of %s (see `vflow plan`; "
                                 "--force runs anyway)",
                                 g->script, n1, dev, n2);
        }
    }
    return 0;
}
