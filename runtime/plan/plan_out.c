/* plan_out.c — how a memory plan is shown (plan.h): text for people, JSON for machines,
 * and the one-line refusal `vflow run` and `vflow plan` share.
 *
 * Text: one block per worker (its stages' declarations, the edge buffers it holds, its
 * process overhead), the node's shared lines, a table per device (total, budget,
 * verdict) and by category, activations with `recompute` flipped, the verdict, and the
 * fixes when something is over. JSON: the same numbers (docs/PLANNING.md lists keys).
 */
#include "runtime/plan/plan.h"
#include "runtime/json.h"

#include <stdlib.h>
#include <string.h>

/* "26.1G", "512M", "4.2K", "0": table cells */
static void short_bytes(int64_t b, char *buf, size_t n)
{
    if (b < 0) {
        snprintf(buf, n, "unbounded");
        return;
    }
    static const char u[] = "BKMGTP";
    double v = (double)b;
    int k = 0;
    while (v >= 1024 && k < 5) v /= 1024, k++;
    if (k == 0) snprintf(buf, n, "%lld", (long long)b);
    else snprintf(buf, n, v < 10 ? "%.2f%c" : v < 100 ? "%.1f%c" : "%.0f%c", v, u[k]);
}

static const char *worker_name(const vf_graph *g, int w)
{
    return w >= 0 && w < g->nworkers ? g->workers[w].name : "-";
}

static void print_line(FILE *f, const vf_pline *x)
{
    char dev[32], b[32];
    vf_device_str(x->dev, dev, sizeof dev);
    vf_bytes_str(x->bytes, b, sizeof b);
    fprintf(f, "    %-7s %-11s %-72s %12s\n", dev, vf_mem_cat_name(x->cat), x->what, b);
}

static void print_worker(FILE *f, const vf_mplan *p, int w)
{
    const vf_graph *g = p->g;
    char dev[32], b[32];
    if (w >= 0) {
        vf_device_str(g->workers[w].device, dev, sizeof dev);
        if (vf_graph_nodes(g) > 1)
            fprintf(f, "worker %s (%s, node %d)\n", g->workers[w].name, dev, g->workers[w].node);
        else
            fprintf(f, "worker %s (%s)\n", g->workers[w].name, dev);
    } else {
        fprintf(f, "driver and node\n");
    }
    for (int i = 0; i < g->nstages; i++) {
        if (w < 0 || g->stages[i].worker != w) continue;
        /* what its accounts should peak at: the host one (metrics.jsonl "peak") and the
         * device twins of the CUDA pools */
        char acc[256];
        int off = 0;
        vf_bytes_str(p->account[i], b, sizeof b);
        off += snprintf(acc + off, sizeof acc - (size_t)off, "cpu %s", b);
        for (int d = 0; d < p->ndev; d++) {
            if (p->dev[d].dev.kind != VF_DEV_CUDA) continue;
            int64_t t = 0;
            bool any = false;
            for (int k = 0; k < p->n; k++)
                if (p->l[k].account == i && p->l[k].dev.kind == VF_DEV_CUDA && p->l[k].dev.index == p->dev[d].dev.index)
                    t = (t < 0 || p->l[k].bytes < 0) ? -1 : t + p->l[k].bytes, any = true;
            if (!any || (size_t)off >= sizeof acc) continue;
            vf_device_str(p->dev[d].dev, dev, sizeof dev);
            vf_bytes_str(t, b, sizeof b);
            off += snprintf(acc + off, sizeof acc - (size_t)off, ", %s %s", dev, b);
        }
        fprintf(f, "  stage %s (%s); accounts should peak at %s\n", g->stages[i].name, g->stages[i].kind, acc);
        bool any = false;
        for (int k = 0; k < p->n; k++)
            if (p->l[k].stage == i) print_line(f, &p->l[k]), any = true;
        if (!any) fprintf(f, "    (declares nothing)\n");
        if (p->acts_alt[i] >= 0) {
            int64_t now = 0;
            for (int k = 0; k < p->n; k++)
                if (p->l[k].stage == i && p->l[k].cat == VF_MEM_ACTS) now += p->l[k].bytes;
            char a[32];
            bool rc = vf_param_bool(g->stages[i].params, "recompute");
            vf_bytes_str(now, b, sizeof b);
            vf_bytes_str(p->acts_alt[i], a, sizeof a);
            fprintf(f, "    activations: %s with recompute %s, %s with recompute %s\n", b, rc ? "on" : "off", a,
                    rc ? "off" : "on");
        }
    }
    bool head = false;
    for (int k = 0; k < p->n; k++) {
        if (p->l[k].stage >= 0 || p->l[k].worker != w) continue;
        if (!head) fprintf(f, "  %s\n", w >= 0 ? "edges and process" : "shared");
        head = true;
        print_line(f, &p->l[k]);
    }
}

/* ------------------------------------------------------------------ state per parameter */

/* Where the training state of one device lives: bytes per (holder, category), the
 * holder a stage's name or "exchange" for the edges between partitions and shards, and
 * the parameters the holder keeps state of there (a stage's vf_mem_plan_params; the
 * exchange: the most of any stage on the device). A partition and a shard on one GPU
 * hold state of different parameter ranges, so bytes per parameter add up holder by
 * holder: bf16 weights and gradients of the partition's range (2 + 2) and f32 master and
 * moments of the shard's slice (12) are 16 however the two ranges differ in size. */
#define STATE_PARTS 32
typedef struct state_part {
    const char *holder;
    vf_mem_cat cat;
    int64_t bytes, params;
} state_part;

static int64_t stage_params(const vf_gstage *s, vf_device d)
{
    for (int k = 0; k < s->mem.np; k++)
        if (s->mem.params[k].device.kind == d.kind && (d.kind == VF_DEV_CPU || s->mem.params[k].device.index == d.index))
            return s->mem.params[k].n;
    return 0;
}

static int state_parts(const vf_mplan *p, const vf_pdev *d, state_part *out)
{
    int n = 0;
    for (int k = 0; k < p->n; k++) {
        const vf_pline *x = &p->l[k];
        if (x->dev.kind != d->dev.kind || (x->dev.kind == VF_DEV_CUDA && x->dev.index != d->dev.index) ||
            !vf_pline_is_state(p, x))
            continue;
        const vf_gstage *gs = x->stage >= 0 ? &p->g->stages[x->stage] : NULL;
        const char *who = gs ? gs->name : "exchange";
        vf_mem_cat cat = gs ? x->cat : VF_MEM_EDGES;
        int i = 0;
        while (i < n && !(out[i].cat == cat && strcmp(out[i].holder, who) == 0)) i++;
        if (i == n) {
            if (n == STATE_PARTS) continue;
            int64_t np = gs ? stage_params(gs, d->dev) : 0;
            out[n++] = (state_part){who, cat, 0, np > 0 ? np : d->params};
        }
        out[i].bytes = out[i].bytes < 0 || x->bytes < 0 ? -1 : out[i].bytes + x->bytes;
    }
    return n;
}

/* Bytes per parameter of one holder's share, and of the device (the shares summed). */
static double part_bpp(const state_part *s) { return s->params > 0 ? (double)s->bytes / (double)s->params : 0; }

static double device_bpp(const state_part *parts, int n)
{
    double b = 0;
    for (int k = 0; k < n; k++) b += part_bpp(&parts[k]);
    return b;
}

static const char *part_cat(const state_part *s)
{
    return s->cat == VF_MEM_EDGES ? "in flight" : vf_mem_cat_name(s->cat);
}

/* Each device that holds training state: its bytes per parameter, and where they live. */
static void print_state(const vf_mplan *p, FILE *f)
{
    bool head = false;
    for (int i = 0; i < p->ndev; i++) {
        const vf_pdev *d = &p->dev[i];
        if (d->params <= 0) continue;
        if (!head)
            fprintf(f, "\nstate per parameter (weights, gradients, optimizer state and what is in flight between "
                       "them; each holder's bytes over the parameters it holds state of)\n");
        head = true;
        char dev[32], a[32];
        vf_device_str(d->dev, dev, sizeof dev);
        vf_bytes_str(d->state, a, sizeof a);
        state_part parts[STATE_PARTS];
        int n = state_parts(p, d, parts);
        fprintf(f, "  %-8s %s of state: %.2f bytes per parameter\n", dev, a, device_bpp(parts, n));
        for (int k = 0; k < n; k++) {
            char b[32];
            vf_bytes_str(parts[k].bytes, b, sizeof b);
            fprintf(f, "  %-8s   %-12s %-10s %10s for %.3f G parameters: %5.2f B/param\n", "", parts[k].holder,
                    part_cat(&parts[k]), b, (double)parts[k].params * 1e-9, part_bpp(&parts[k]));
        }
    }
}

static void verdict_line(const vf_mplan *p, char *buf, size_t n)
{
    int off = 0;
    if (p->nover == 0) {
        bool any = false;
        for (int i = 0; i < p->ndev; i++) any = any || p->dev[i].budget >= 0;
        snprintf(buf, n, any ? "fits" : "no budget to check against");
        return;
    }
    off += snprintf(buf + off, n - (size_t)off, "does not fit:");
    for (int i = 0; i < p->ndev && (size_t)off < n; i++) {
        const vf_pdev *d = &p->dev[i];
        if (!d->over) continue;
        char dev[32], a[32], b[32];
        vf_device_str(d->dev, dev, sizeof dev);
        vf_bytes_str(d->total, a, sizeof a);
        vf_bytes_str(d->budget, b, sizeof b);
        off += snprintf(buf + off, n - (size_t)off, " %s needs %s of %s (%s);", dev, a, b, d->budget_src);
    }
    if (off > 0 && buf[off - 1] == ';') buf[off - 1] = 0;
}

static void print_text(const vf_mplan *p, const vf_plan_fix *fix, int nfix, FILE *f)
{
    const vf_graph *g = p->g;
    char dev[32], a[32], b[32];
    fprintf(f, "plan for pipeline '%s' (%s): %d stage%s, %d edge%s, %d worker%s", g->name, g->script,
            g->nstages, g->nstages == 1 ? "" : "s", g->nedges, g->nedges == 1 ? "" : "s", g->nworkers,
            g->nworkers == 1 ? "" : "s");
    if (p->node >= 0) fprintf(f, "; node %d of %d, what it holds", p->node, vf_graph_nodes(g));
    fprintf(f, "\n\n");
    for (int w = 0; w < g->nworkers; w++)
        if (p->node < 0 || g->workers[w].node == p->node) print_worker(f, p, w), fputc('\n', f);
    print_worker(f, p, -1);

    fprintf(f, "\ntotal per device\n");
    for (int i = 0; i < p->ndev; i++) {
        const vf_pdev *d = &p->dev[i];
        vf_device_str(d->dev, dev, sizeof dev);
        vf_bytes_str(d->total, a, sizeof a);
        char bud[96] = "no budget", ver[64] = "";
        if (d->budget >= 0) {
            vf_bytes_str(d->budget, b, sizeof b);
            snprintf(bud, sizeof bud, "budget %s (%s)", b, d->budget_src);
            if (d->over) {
                vf_bytes_str(d->total < 0 ? -1 : d->total - d->budget, b, sizeof b);
                snprintf(ver, sizeof ver, "OVER by %s", b);
            } else {
                snprintf(ver, sizeof ver, "fits (%.1f%%)", d->budget ? 100.0 * (double)d->total / (double)d->budget : 0);
            }
        }
        fprintf(f, "  %-8s %12s   %-36s %s%s\n", dev, a, bud, ver, d->present ? "" : "  [not on this machine]");
    }
    if (vf_graph_nodes(g) > 1 && p->node < 0) {
        /* what each node holds: its workers' lines, and a driver and the shared code each */
        fprintf(f, "\ntotal per node and device\n");
        for (int node = 0; node < vf_graph_nodes(g); node++)
            for (int i = 0; i < p->ndev; i++) {
                int64_t t = 0;
                bool any = false;
                for (int k = 0; k < p->n; k++) {
                    const vf_pline *x = &p->l[k];
                    if (x->dev.kind != p->dev[i].dev.kind || x->dev.index != p->dev[i].dev.index) continue;
                    if (x->worker >= 0 && g->workers[x->worker].node != node) continue;
                    t = (t < 0 || x->bytes < 0) ? -1 : t + x->bytes;
                    any = any || x->worker >= 0;
                }
                if (!any) continue;
                vf_device_str(p->dev[i].dev, dev, sizeof dev);
                vf_bytes_str(t, a, sizeof a);
                fprintf(f, "  node %-3d %-8s %12s\n", node, dev, a);
            }
    }
    fprintf(f, "\nby category\n  %-8s", "device");
    for (int c = 0; c < VF_MEM_CAT_COUNT; c++) fprintf(f, " %10s", vf_mem_cat_name((vf_mem_cat)c));
    fputc('\n', f);
    for (int i = 0; i < p->ndev; i++) {
        vf_device_str(p->dev[i].dev, dev, sizeof dev);
        fprintf(f, "  %-8s", dev);
        for (int c = 0; c < VF_MEM_CAT_COUNT; c++) {
            short_bytes(p->dev[i].cat[c], a, sizeof a);
            fprintf(f, " %10s", a);
        }
        fputc('\n', f);
    }
    print_state(p, f);
    char v[1024];
    verdict_line(p, v, sizeof v);
    fprintf(f, "\nverdict: %s\n", v);
    if (nfix > 0) {
        fprintf(f, "\nfixes (each re-planned from the script with the change; totals of the devices over budget):\n");
        for (int k = 0; k < nfix; k++) {
            const vf_plan_fix *x = &fix[k];
            fprintf(f, "  %-14s %-4s %s\n", x->knob, x->fits ? "fits" : "no", x->change);
            fprintf(f, "  %-14s      ", "");
            for (int i = 0; i < p->ndev; i++) {
                if (!p->dev[i].over || x->total[i] < 0) continue;
                vf_device_str(p->dev[i].dev, dev, sizeof dev);
                vf_bytes_str(x->total[i], a, sizeof a);
                fprintf(f, "%s %s  ", dev, a);
            }
            if (x->note[0]) fprintf(f, "(%s)", x->note);
            fputc('\n', f);
        }
    } else if (p->nover > 0) {
        fprintf(f, "\nno knob found that makes it fit (recompute, micro_batches, stages, shards/offload, chunk, "
                   "capacity were tried where the script exposes them)\n");
    }
}

/* ------------------------------------------------------------------ JSON */

static vf_json *devstr(vf_device d)
{
    char dev[32];
    vf_device_str(d, dev, sizeof dev);
    return vf_json_str(dev);
}

static vf_json *line_json(const vf_mplan *p, const vf_pline *x)
{
    vf_json *o = vf_json_obj();
    vf_json_set(o, "what", vf_json_str(x->what));
    vf_json_set(o, "category", vf_json_str(vf_mem_cat_name(x->cat)));
    vf_json_set(o, "device", devstr(x->dev));
    vf_json_set(o, "bytes", vf_json_int(x->bytes));
    vf_json_set(o, "worker", vf_json_str(x->worker >= 0 ? worker_name(p->g, x->worker) : "driver"));
    if (x->stage >= 0) vf_json_set(o, "stage", vf_json_str(p->g->stages[x->stage].name));
    if (x->account >= 0) vf_json_set(o, "account", vf_json_str(p->g->stages[x->account].name));
    return o;
}

static vf_json *build_json(const vf_mplan *p, const vf_plan_fix *fix, int nfix)
{
    const vf_graph *g = p->g;
    vf_json *root = vf_json_obj(), *stages = vf_json_arr(), *edges = vf_json_arr(), *totals = vf_json_obj();
    vf_json *lines = vf_json_arr(), *devs = vf_json_arr(), *fixes = vf_json_arr(), *workers = vf_json_arr();
    vf_json_set(root, "pipeline", vf_json_str(g->name));
    vf_json_set(root, "script", vf_json_str(g->script));
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        vf_json *o = vf_json_obj(), *mem = vf_json_arr();
        vf_json_set(o, "name", vf_json_str(s->name));
        vf_json_set(o, "kind", vf_json_str(s->kind));
        vf_json_set(o, "worker", vf_json_str(worker_name(g, s->worker)));
        vf_json_set(o, "device", devstr(s->device));
        for (int m = 0; m < s->mem.n; m++) {
            vf_json *mo = vf_json_obj();
            char what[VF_MEM_WHAT_MAX + 16];
            snprintf(what, sizeof what, "%s%s", s->mem.e[m].what,
                     s->mem.e[m].holder == VF_MEM_LIBRARY ? " (library)" : "");
            vf_json_set(mo, "what", vf_json_str(what));
            vf_json_set(mo, "category", vf_json_str(vf_mem_cat_name(s->mem.e[m].cat)));
            vf_json_set(mo, "device", devstr(s->mem.e[m].device));
            vf_json_set(mo, "bytes", vf_json_int(s->mem.e[m].bytes));
            vf_json_push(mem, mo);
        }
        vf_json_set(o, "mem", mem);
        vf_json_set(o, "account", vf_json_int(p->account[i]));
        if (p->acts_alt[i] >= 0) {
            bool rc = vf_param_bool(s->params, "recompute");
            int64_t now = 0;
            for (int k = 0; k < p->n; k++)
                if (p->l[k].stage == i && p->l[k].cat == VF_MEM_ACTS) now += p->l[k].bytes;
            vf_json *a = vf_json_obj();
            vf_json_set(a, "recompute_on", vf_json_int(rc ? now : p->acts_alt[i]));
            vf_json_set(a, "recompute_off", vf_json_int(rc ? p->acts_alt[i] : now));
            vf_json_set(o, "activations", a);
        }
        vf_json_push(stages, o);
    }
    for (int e = 0; e < g->nedges; e++) {
        const vf_gedge *ge = &g->edges[e];
        const vf_port_spec *sp = vf_graph_edge_src_spec(g, e);
        vf_json *o = vf_json_obj();
        char name[2 * VF_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s.%s", g->stages[ge->src].name, ge->src_port);
        vf_json_set(o, "src", vf_json_str(name));
        snprintf(name, sizeof name, "%s.%s", g->stages[ge->dst].name, ge->dst_port);
        vf_json_set(o, "dst", vf_json_str(name));
        vf_json_set(o, "transport", vf_json_str(vf_transport_name(ge->transport)));
        vf_json_set(o, "capacity", vf_json_int(ge->capacity));
        vf_json_set(o, "item_bytes", vf_json_int(vf_graph_edge_item_bytes(g, e)));
        vf_json_set(o, "bytes", vf_json_int(vf_graph_edge_bytes(g, e)));
        vf_json_set(o, "device", devstr(sp ? sp->device : (vf_device){VF_DEV_CPU, 0}));
        int64_t held = 0;
        for (int k = 0; k < p->n; k++)
            if (p->l[k].edge == e && p->l[k].stage < 0 && strncmp(p->l[k].what, "held while sent", 15) == 0)
                held = p->l[k].bytes;
        vf_json_set(o, "sending_bytes", vf_json_int(held));
        vf_json_push(edges, o);
    }
    for (int w = 0; w < g->nworkers; w++) {
        vf_json *o = vf_json_obj(), *tot = vf_json_obj();
        vf_json_set(o, "name", vf_json_str(g->workers[w].name));
        vf_json_set(o, "device", devstr(g->workers[w].device));
        for (int i = 0; i < p->ndev; i++) {
            int64_t t = 0;
            bool any = false;
            for (int k = 0; k < p->n; k++) {
                const vf_pline *x = &p->l[k];
                if (x->worker != w || x->dev.kind != p->dev[i].dev.kind ||
                    (x->dev.kind == VF_DEV_CUDA && x->dev.index != p->dev[i].dev.index))
                    continue;
                any = true;
                t = (t < 0 || x->bytes < 0) ? -1 : t + x->bytes;
            }
            char dev[32];
            vf_device_str(p->dev[i].dev, dev, sizeof dev);
            if (any) vf_json_set(tot, dev, vf_json_int(t));
        }
        vf_json_set(o, "totals", tot);
        vf_json_push(workers, o);
    }
    for (int k = 0; k < p->n; k++) vf_json_push(lines, line_json(p, &p->l[k]));
    for (int i = 0; i < p->ndev; i++) {
        const vf_pdev *d = &p->dev[i];
        char dev[32];
        vf_device_str(d->dev, dev, sizeof dev);
        vf_json_set(totals, dev, vf_json_int(d->total));
        vf_json *o = vf_json_obj(), *cat = vf_json_obj();
        vf_json_set(o, "device", vf_json_str(dev));
        vf_json_set(o, "total", vf_json_int(d->total));
        vf_json_set(o, "budget", d->budget >= 0 ? vf_json_int(d->budget) : vf_json_null());
        vf_json_set(o, "budget_source", vf_json_str(d->budget_src));
        vf_json_set(o, "present", vf_json_bool(d->present));
        vf_json_set(o, "over", vf_json_bool(d->over));
        for (int c = 0; c < VF_MEM_CAT_COUNT; c++) vf_json_set(cat, vf_mem_cat_name((vf_mem_cat)c), vf_json_int(d->cat[c]));
        vf_json_set(o, "categories", cat);
        if (d->params > 0) {
            vf_json *sto = vf_json_obj(), *where = vf_json_arr();
            state_part parts[STATE_PARTS];
            int n = state_parts(p, d, parts);
            for (int k = 0; k < n; k++) {
                vf_json *w = vf_json_obj();
                vf_json_set(w, "holder", vf_json_str(parts[k].holder));
                vf_json_set(w, "category", vf_json_str(part_cat(&parts[k])));
                vf_json_set(w, "bytes", vf_json_int(parts[k].bytes));
                vf_json_set(w, "params", vf_json_int(parts[k].params));
                vf_json_push(where, w);
            }
            vf_json_set(sto, "bytes", vf_json_int(d->state));
            vf_json_set(sto, "params", vf_json_int(d->params));
            vf_json_set(sto, "bytes_per_param", vf_json_num(device_bpp(parts, n)));
            vf_json_set(sto, "where", where);
            vf_json_set(o, "state", sto);
        }
        vf_json_push(devs, o);
    }
    for (int k = 0; k < nfix; k++) {
        vf_json *o = vf_json_obj(), *tot = vf_json_obj();
        vf_json_set(o, "knob", vf_json_str(fix[k].knob));
        vf_json_set(o, "change", vf_json_str(fix[k].change));
        vf_json_set(o, "note", vf_json_str(fix[k].note));
        vf_json_set(o, "fits", vf_json_bool(fix[k].fits));
        for (int i = 0; i < p->ndev; i++) {
            char dev[32];
            vf_device_str(p->dev[i].dev, dev, sizeof dev);
            vf_json_set(tot, dev, vf_json_int(fix[k].total[i]));
        }
        vf_json_set(o, "totals", tot);
        vf_json_push(fixes, o);
    }
    char v[1024];
    verdict_line(p, v, sizeof v);
    vf_json_set(root, "stages", stages);
    vf_json_set(root, "edges", edges);
    vf_json_set(root, "workers", workers);
    vf_json_set(root, "lines", lines);
    vf_json_set(root, "devices", devs);
    vf_json_set(root, "totals", totals);
    vf_json_set(root, "fits", vf_json_bool(p->nover == 0));
    vf_json_set(root, "verdict", vf_json_str(v));
    vf_json_set(root, "fixes", fixes);
    return root;
}

char *vf_mplan_json(const vf_mplan *p, const vf_plan_fix *fix, int nfix)
{
    vf_json *root = build_json(p, fix, nfix);
    char *text = vf_json_emit(root, false, 2);
    vf_json_free(root);
    return text;
}

int vf_mplan_print(const vf_mplan *p, const vf_plan_fix *fix, int nfix, FILE *f, bool json, vf_status *st)
{
    if (json) {
        char *text = vf_mplan_json(p, fix, nfix);
        if (!text) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "plan: out of memory");
        fprintf(f, "%s\n", text);
        free(text);
    } else {
        print_text(p, fix, nfix, f);
    }
    return ferror(f) ? vf_status_set(st, VF_EIO, __FILE__, __LINE__, "plan: write error") : 0;
}

int vf_mplan_refusal(const vf_mplan *p, vf_status *st)
{
    for (int i = 0; i < p->ndev; i++) {
        const vf_pdev *d = &p->dev[i];
        if (!d->over) continue;
        char dev[32], n1[32], n2[32];
        vf_device_str(d->dev, dev, sizeof dev);
        vf_bytes_str(d->total, n1, sizeof n1);
        vf_bytes_str(d->budget, n2, sizeof n2);
        char on[32] = "";
        if (p->node >= 0) snprintf(on, sizeof on, " of node %d", p->node);
        return vf_status_set(st, VF_EBUDGET, __FILE__, __LINE__,
                             "%s: the plan needs %s on %s%s, over the budget of %s (see `vflow plan`; "
                             "--force runs anyway)",
                             p->g->script, n1, dev, on, n2);
    }
    return 0;
}
