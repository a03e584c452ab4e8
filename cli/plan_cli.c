/* plan_cli.c — the planner as the CLI uses it (plan_cli.h): `vflow plan`, the gate in front
 * of `vflow run`, and plan vs measured once a run is over.
 */
#include "cli/plan_cli.h"
#include "runtime/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool touches_cuda(const vf_mplan *p)
{
    for (int i = 0; i < p->ndev; i++)
        if (p->dev[i].dev.kind == VF_DEV_CUDA) return true;
    return false;
}

/* Plan + budgets (+ fixes when over). *nfix fixes in fix[]. */
static int plan_all(const vf_graph *g, int node, const vf_plan_req *req, vf_mplan *p, vf_machine *m,
                    vf_plan_fix *fix, int *nfix, vf_status *st)
{
    int rc = 0;
    vf_budget b, *bp = NULL;
    *nfix = 0;
    if (req->budget) {
        VF_TRY(vf_budget_parse(req->budget, &b, st));
        bp = &b;
    }
    VF_TRY(node < 0 ? vf_mplan_build(g, p, st) : vf_mplan_build_node(g, node, p, st));
    vf_machine_probe(m, touches_cuda(p));
    vf_mplan_budget(p, bp, m);
    if (p->nover > 0 && req->script) *nfix = vf_plan_fixes(req, p, bp, m, fix, VF_PLAN_MAX_FIXES);
fail:
    return rc;
}

/* Each bucket of a bucketed source planned alone (none without one). */
static int plan_buckets(const vf_plan_req *req, const vf_mplan *p, const vf_machine *m, vf_plan_bucket *bk,
                        int *n, vf_status *st)
{
    vf_budget b, *bp = NULL;
    *n = 0;
    if (req->budget) {
        int rc = vf_budget_parse(req->budget, &b, st);
        if (rc < 0) return rc;
        bp = &b;
    }
    int k = vf_plan_buckets(req, p, bp, m, bk, VF_PLAN_MAX_BUCKETS, st);
    if (k < 0) return k;
    *n = k;
    return 0;
}

int vf_plan_admit(const vf_graph *g, const vf_plan_req *req, char (*sets)[VF_PLAN_SET_MAX], int max, FILE *report,
                  vf_status *st)
{
    vf_mplan p;
    vf_machine m;
    vf_budget b, *bp = NULL;
    int n = 0, nbk = 0, rc = 0;
    bool shrinks = false;
    for (int i = 0; i < g->nstages; i++) {
        const char *a = vf_param_has(g->stages[i].params, "admission") ? vf_param_str(g->stages[i].params, "admission") : NULL;
        shrinks |= a && !strcmp(a, "shrink");
    }
    if (!shrinks) return 0;
    if (req->budget) {
        rc = vf_budget_parse(req->budget, &b, st);
        if (rc < 0) return rc;
        bp = &b;
    }
    rc = vf_mplan_build(g, &p, st);
    if (rc < 0) return rc;
    vf_machine_probe(&m, touches_cuda(&p));
    vf_mplan_budget(&p, bp, &m);
    vf_plan_bucket *bk = calloc(VF_PLAN_MAX_BUCKETS, sizeof *bk);
    if (!bk) rc = vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "plan: out of memory");
    if (rc == 0 && p.nover > 0) {
        nbk = vf_plan_buckets(req, &p, bp, &m, bk, VF_PLAN_MAX_BUCKETS, st);
        if (nbk < 0) rc = nbk;
    }
    if (rc == 0 && nbk > 0) n = vf_plan_admission(req, &p, bp, &m, bk, nbk, sets, max, report, st);
    if (n < 0) rc = n;
    free(bk);
    vf_mplan_free(&p);
    return rc < 0 ? rc : n;
}

int vf_plan_command(const vf_graph *g, const vf_plan_req *req, FILE *out, vf_status *st)
{
    vf_mplan p;
    vf_machine m;
    vf_plan_fix fix[VF_PLAN_MAX_FIXES];
    int nfix = 0, nbk = 0, first = 0;
    /* a run over several nodes: one plan per node, each against its machine's budgets
     * (the same budgets for every node: this machine's, or --budget); JSON stays one graph */
    int nodes = req->json ? 1 : vf_graph_nodes(g);
    for (int k = 0; k < nodes && nodes > 1; k++) {
        int rc = plan_all(g, k, req, &p, &m, fix, &nfix, st);
        if (rc < 0) return rc;
        if (k) fprintf(out, "\n");
        rc = vf_mplan_print(&p, fix, nfix, out, req->json, st);
        fflush(out);
        vf_status nst = {0};
        if (rc == 0 && vf_mplan_refusal(&p, &nst) < 0 && !first) {
            *st = nst;
            first = nst.code;
        }
        vf_mplan_free(&p);
        if (rc < 0) return rc;
    }
    if (nodes > 1) return first;
    /* one node: the whole graph, and each bucket of a bucketed source planned alone */
    int rc = plan_all(g, -1, req, &p, &m, fix, &nfix, st);
    if (rc < 0) return rc;
    vf_plan_bucket *bk = calloc(VF_PLAN_MAX_BUCKETS, sizeof *bk);
    if (!bk) rc = vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "plan: out of memory");
    if (rc == 0) rc = plan_buckets(req, &p, &m, bk, &nbk, st);
    if (rc == 0 && req->json && nbk > 0) {
        char *plain = vf_mplan_json(&p, fix, nfix), *text = plain ? vf_plan_buckets_json(plain, &p, bk, nbk) : NULL;
        if (!text) rc = vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "plan: out of memory");
        else fprintf(out, "%s\n", text);
        free(plain);
        free(text);
    } else if (rc == 0) {
        rc = vf_mplan_print(&p, fix, nfix, out, req->json, st);
        if (rc == 0 && !req->json) vf_plan_buckets_print(&p, bk, nbk, out);
    }
    fflush(out);
    if (rc == 0) rc = vf_plan_buckets_refusal(&p, bk, nbk, st);
    if (rc == 0) rc = vf_mplan_refusal(&p, st);
    free(bk);
    vf_mplan_free(&p);
    return rc;
}

int vf_plan_gate(const vf_graph *g, const vf_plan_req *req, bool force, FILE *report, vf_status *st)
{
    vf_mplan p;
    vf_machine m;
    vf_plan_fix fix[VF_PLAN_MAX_FIXES];
    int nfix = 0, rc = 0;
    vf_budget b, *bp = NULL;
    if (req->budget) {
        rc = vf_budget_parse(req->budget, &b, st);
        if (rc < 0) return rc;
        bp = &b;
    }
    /* a node checks what it holds itself (vf_plan_req.node): another node's GPUs are not its budget */
    rc = vf_graph_nodes(g) > 1 ? vf_mplan_build_node(g, req->node, &p, st) : vf_mplan_build(g, &p, st);
    if (rc < 0) return rc;
    vf_machine_probe(&m, touches_cuda(&p));
    /* Devices first: `plan` plans for GPUs this machine lacks, `run` cannot use them. */
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        if (s->node != req->node) continue; /* another node's devices are that node's to check */
        if (s->device.kind == VF_DEV_CUDA && s->device.index >= m.ncuda) {
            char on[32] = "";
            if (vf_graph_nodes(g) > 1) snprintf(on, sizeof on, " (node %d)", req->node);
            rc = vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                               "%s: stage '%s' (%s) runs on cuda:%d, but this machine%s has %d CUDA device%s "
                               "(`vflow plan` plans for absent devices; `vflow run` needs them)",
                               s->where, s->name, s->kind, s->device.index, on, m.ncuda, m.ncuda == 1 ? "" : "s");
            goto out;
        }
    }
    vf_mplan_budget(&p, bp, &m);
    if (p.nover > 0) {
        /* a bucketed source: name the bucket that does not fit */
        vf_plan_bucket *bk = calloc(VF_PLAN_MAX_BUCKETS, sizeof *bk);
        int nbk = 0;
        if (bk && vf_plan_buckets(req, &p, bp, &m, bk, VF_PLAN_MAX_BUCKETS, st) > 0) {
            nbk = 1;
            for (; nbk < VF_PLAN_MAX_BUCKETS && bk[nbk].name[0]; nbk++) {}
        }
        vf_status bst;
        vf_status_clear(&bst);
        if (bk && nbk && vf_plan_buckets_refusal(&p, bk, nbk, &bst)) {
            if (report && !force) {
                nfix = vf_plan_fixes(req, &p, bp, &m, fix, VF_PLAN_MAX_FIXES);
                vf_mplan_print(&p, fix, nfix, report, false, st);
                vf_plan_buckets_print(&p, bk, nbk, report);
                fflush(report);
            }
            free(bk);
            *st = bst;
            rc = bst.code;
            if (force) {
                fprintf(stderr, "vflow: warning (--force): %s\n", st->msg);
                vf_status_clear(st);
                rc = 0;
            }
            goto out;
        }
        free(bk);
        vf_status_clear(st);
        if (!force) {
            nfix = vf_plan_fixes(req, &p, bp, &m, fix, VF_PLAN_MAX_FIXES);
            if (report) {
                vf_mplan_print(&p, fix, nfix, report, false, st);
                fflush(report);
            }
        }
        rc = vf_mplan_refusal(&p, st);
        if (force) {
            fprintf(stderr, "vflow: warning (--force): %s\n", st->msg);
            vf_status_clear(st);
            rc = 0;
        }
    }
out:
    vf_mplan_free(&p);
    return rc;
}

/* ------------------------------------------------------------------ after the run */

static int write_file(const char *path, const char *text)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return VF_EIO;
    fputs(text, f);
    fputc('\n', f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        remove(tmp);
        return VF_EIO;
    }
    return 0;
}

/* "  (plan: the max_pixels bound)" when the largest line of stage i's host account is a
 * bound a param sets ("… (max_pixels bound)", vf_mem_plan_add), not what the data need:
 * a low ratio there is the bound's headroom. "" otherwise. */
static void bound_note(const vf_mplan *p, int i, char *out, size_t n)
{
    int best = -1;
    out[0] = 0;
    for (int k = 0; k < p->n; k++)
        if (p->l[k].account == i && p->l[k].dev.kind == VF_DEV_CPU && (best < 0 || p->l[k].bytes > p->l[best].bytes))
            best = k;
    if (best < 0) return;
    const char *w = p->l[best].what, *open = strrchr(w, '(');
    size_t len = strlen(w);
    if (!open || len < 8 || strcmp(w + len - 7, " bound)") != 0) return;
    snprintf(out, n, "  (plan: the %.*s bound)", (int)(w + len - 7 - open - 1), open + 1);
}

int vf_plan_vs_measured(const vf_graph *g, const char *run_dir, FILE *out, vf_status *st)
{
    int rc = 0;
    char dir[4096], path[4200];
    if (run_dir) snprintf(dir, sizeof dir, "%s", run_dir);
    else snprintf(dir, sizeof dir, "runs/%s", g->name[0] ? g->name : "run");
    vf_mplan p;
    FILE *f = NULL;
    int64_t *peak = calloc((size_t)(g->nstages ? g->nstages : 1), sizeof *peak);
    int64_t *rss = calloc((size_t)(g->nworkers ? g->nworkers : 1), sizeof *rss);
    if (!peak || !rss) {
        free(peak);
        free(rss);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "plan: out of memory");
    }
    for (int i = 0; i < g->nstages; i++) peak[i] = -1;
    for (int w = 0; w < g->nworkers; w++) rss[w] = -1;
    rc = vf_mplan_build(g, &p, st);
    if (rc < 0) {
        free(peak);
        free(rss);
        return rc;
    }
    char *json = vf_mplan_json(&p, NULL, 0);
    snprintf(path, sizeof path, "%s/plan.json", dir);
    if (json) write_file(path, json); /* a record for later; the run's outcome does not hang on it */
    free(json);

    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    f = fopen(path, "r");
    if (!f) VF_FAIL(st, VF_EIO, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (!strstr(line, "\"final\"")) continue;
        vf_status js = {0};
        vf_json *r = vf_json_parse_n(line, (size_t)len, &js);
        if (!r) continue;
        const char *type = vf_json_get_str(r, "type", "");
        int i = vf_graph_find(g, vf_json_get_str(r, "stage", ""));
        if (strcmp(type, "final") == 0 && i >= 0) {
            peak[i] = vf_json_get_int(r, "peak", -1);
            int w = g->stages[i].worker;
            int64_t rp = vf_json_get_int(r, "rss_peak", -1);
            if (w >= 0 && w < g->nworkers && rp > rss[w]) rss[w] = rp;
        }
        vf_json_free(r);
    }
    free(line);
    fprintf(out, "plan vs measured (per-stage host accounts, %s):\n", path);
    fprintf(out, "  %-22s %-14s %14s %14s %8s\n", "stage", "kind", "plan", "measured", "ratio");
    for (int i = 0; i < g->nstages; i++) {
        char a[32], b[32], r[16] = "-", note[96] = "";
        vf_bytes_str(p.account[i], a, sizeof a);
        if (peak[i] >= 0) vf_bytes_str(peak[i], b, sizeof b);
        else snprintf(b, sizeof b, "-");
        if (peak[i] >= 0 && p.account[i] > 0) snprintf(r, sizeof r, "%.2f", (double)peak[i] / (double)p.account[i]);
        bound_note(&p, i, note, sizeof note);
        fprintf(out, "  %-22s %-14s %14s %14s %8s%s\n", g->stages[i].name, g->stages[i].kind, a, b, r, note);
    }
    /* worker processes: their resident peak against their lines (+ the shared code, which
     * every process's RSS counts) */
    int64_t shared = 0;
    for (int k = 0; k < p.n; k++)
        if (p.l[k].worker < 0 && p.l[k].cat == VF_MEM_RUNTIME && strstr(p.l[k].what, "shared")) shared += p.l[k].bytes;
    fprintf(out, "  %-22s %-14s %14s %14s %8s\n", "worker", "", "plan (+code)", "rss peak", "ratio");
    for (int w = 0; w < g->nworkers; w++) {
        int64_t t = shared;
        for (int k = 0; k < p.n; k++)
            if (p.l[k].worker == w && p.l[k].dev.kind == VF_DEV_CPU) t = (t < 0 || p.l[k].bytes < 0) ? -1 : t + p.l[k].bytes;
        char a[32], b[32], r[16] = "-";
        vf_bytes_str(t, a, sizeof a);
        if (rss[w] > 0) vf_bytes_str(rss[w], b, sizeof b);
        else snprintf(b, sizeof b, "-");
        if (rss[w] > 0 && t > 0) snprintf(r, sizeof r, "%.2f", (double)rss[w] / (double)t);
        fprintf(out, "  %-22s %-14s %14s %14s %8s\n", g->workers[w].name, "", a, b, r);
    }
fail:
    if (f) fclose(f);
    vf_mplan_free(&p);
    free(peak);
    free(rss);
    return rc;
}
