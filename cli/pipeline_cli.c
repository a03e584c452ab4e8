/* pipeline_cli.c — `vflow run|check|graph|plan PIPELINE.lua [--set k=v]... [options]`.
 *
 * The four share one front half: run the script in the sandbox, apply
 * `--set NAME.PARAM=V` overrides, validate, place. Any failure there is a usage or
 * topology error: one line "vflow: FILE:LINE: message" on stderr, exit 2, and nothing
 * launched (no run dir, no worker). Exit codes: 0 done, 1 run failed, 2 bad usage.
 */
#include "cli/cli.h"
#include "cli/plan_cli.h"
#include "runtime/core/params.h"
#include "runtime/driver/cluster.h"
#include "runtime/driver/launch.h"
#include "runtime/driver/rank.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/lua_host.h"
#include "runtime/plan/plan.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct cli {
    const char *cmd;
    const char *script;
    const char **sets;
    int nsets;
    const char *run_dir, *budget;
    const char *addr, *iface;  /* run: this node's cluster address (multi-node) */
    int nodes;                 /* --nodes N: the node count check/plan/graph assume; 0 = the launcher's */
    bool resume, resume_auto, force, json, no_tb;
} cli;

static int die(int code, const char *msg)
{
    fprintf(stderr, "vflow: %s\n", msg);
    return vf_exit_code(code);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "vflow: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see `vflow help`)\n");
    return 2;
}

/* Parses the options of run/check/graph/plan. Returns 0 or an exit code. */
/* A shipped script to name in an example, by a path that exists from here: the working
 * directory's pipelines/ (a checkout), else the copy `make install` put beside the binary
 * (<prefix>/share/vflow/pipelines), else the checkout the binary was built in. */
static void example_script(const char *name, char *out, size_t n)
{
    char exe[PATH_MAX] = "", cand[PATH_MAX + 64];
    snprintf(out, n, "pipelines/%s", name);
    if (access(out, R_OK) == 0) return;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    *slash = 0; /* the binary's directory: <prefix>/bin, or <checkout>/build */
    static const char *const rel[] = {"../share/vflow/pipelines", "../pipelines"};
    for (int i = 0; i < 2; i++) {
        snprintf(cand, sizeof cand, "%s/%s/%s", exe, rel[i], name);
        char real[PATH_MAX];
        if (realpath(cand, real)) {
            snprintf(out, n, "%s", real);
            return;
        }
    }
}

static int parse_args(int argc, char **argv, cli *c)
{
    static const char *const opts[] = {"--set",   "--json",           "--budget", "--run-dir", "--resume",
                                       "--force", "--no-tensorboard", "--addr",   "--iface",   "--nodes"};
    c->sets = calloc((size_t)argc, sizeof *c->sets);
    if (!c->sets) return die(VF_ENOMEM, "out of memory");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        char name[64];
        if (a[0] != '-' || strcmp(a, "-") == 0) {
            if (c->script) return usage_error("%s: one pipeline script at a time", a);
            c->script = a;
            continue;
        }
        snprintf(name, sizeof name, "%s", a);
        char *eq = strchr(name, '=');
        if (eq) {
            *eq = 0;
            val = a + (eq - name) + 1;
        }
        bool takes = strcmp(name, "--set") == 0 || strcmp(name, "--budget") == 0 || strcmp(name, "--run-dir") == 0 ||
                     strcmp(name, "--addr") == 0 || strcmp(name, "--iface") == 0 || strcmp(name, "--nodes") == 0;
        if (takes && !val) {
            if (i + 1 >= argc) return usage_error("%s needs a value", name);
            val = argv[++i];
        }
        if (strcmp(name, "--set") == 0) {
            const char *e = strchr(val, '=');
            if (!e || e == val) return usage_error("--set %s: expected KEY=VALUE", val);
            c->sets[c->nsets++] = val;
        } else if (strcmp(name, "--budget") == 0) {
            c->budget = val;
        } else if (strcmp(name, "--run-dir") == 0) {
            c->run_dir = val;
        } else if (strcmp(name, "--addr") == 0) {
            c->addr = val;
        } else if (strcmp(name, "--iface") == 0) {
            c->iface = val;
        } else if (strcmp(name, "--nodes") == 0) {
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 1 || v > 4096) return usage_error("--nodes %s: expected a node count in 1..4096", val);
            c->nodes = (int)v;
        } else if (strcmp(name, "--json") == 0 && !val) {
            c->json = true;
        } else if (strcmp(name, "--resume") == 0 && (!val || strcmp(val, "auto") == 0)) {
            c->resume = true;
            c->resume_auto = val != NULL;
        } else if (strcmp(name, "--force") == 0 && !val) {
            c->force = true;
        } else if (strcmp(name, "--no-tensorboard") == 0 && !val) {
            c->no_tb = true;
        } else {
            const char *near = vf_did_you_mean(name, opts, (int)(sizeof opts / sizeof opts[0]));
            fprintf(stderr, "vflow: unknown option '%s'", a);
            if (near) fprintf(stderr, "; did you mean '%s'?", near);
            fprintf(stderr, "\n(see `vflow help`)\n");
            return 2;
        }
    }
    if (!c->script) {
        char ex[PATH_MAX + 64];
        example_script("train_dit.lua", ex, sizeof ex);
        fprintf(stderr, "vflow: %s: which pipeline? e.g. vflow %s %s\n", c->cmd, c->cmd, ex);
        return 2;
    }
    return 0;
}

/* Script -> overrides -> validated, placed graph. */
static int load_graph(const cli *c, int nnodes, vf_graph **out, vf_status *st)
{
    int rc = 0;
    vf_graph *g = NULL;
    bool *used = calloc((size_t)c->nsets + 1, sizeof *used);
    char **near = calloc((size_t)c->nsets + 1, sizeof *near);
    if (!used || !near) VF_FAIL(st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_lua_load_ex(c->script, c->sets, c->nsets, &g, used, near, st));
    for (int i = 0; i < c->nsets; i++) {
        const char *kv = c->sets[i], *eq = strchr(kv, '=');
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
        char *dot = strchr(key, '.');
        if (dot) {
            *dot = 0;
            bool stage = vf_graph_find(g, key) >= 0;
            *dot = '.';
            /* NAME.PARAM: an override when NAME is a stage, or when the script did not
             * read the key itself (then it is a typo of a stage name: say so). */
            if (stage || !used[i]) VF_TRY(vf_graph_override(g, key, eq + 1, st));
        } else if (!used[i]) {
            /* a knob the script never reads is a typo or a knob of another script: the run
             * would silently go on without it */
            VF_FAIL(st, VF_EUSAGE, "--set %s: %s does not read vf.args.%s%s%s%s", kv, c->script, key,
                    near[i] ? "; did you mean '" : " (its knobs are listed at its top)", near[i] ? near[i] : "",
                    near[i] ? "'?" : "");
        }
    }
    VF_TRY(vf_graph_validate(g, st));
    VF_TRY(vf_graph_place(g, st));
    /* graph shows any topology; the others need the nodes it names */
    if (strcmp(c->cmd, "graph") != 0) VF_TRY(vf_graph_check_nodes(g, nnodes, st));
    *out = g;
    g = NULL;
fail:
    vf_graph_free(g);
    for (int i = 0; near && i < c->nsets; i++) free(near[i]);
    free(near);
    free(used);
    return rc;
}

/* Params "auto" (vf_plan_auto): their values appended to c->sets (which keep pointing
 * into a buffer this function owns for the life of the process) and *g loaded again. */
static int resolve_auto(cli *c, int nnodes, vf_graph **g, vf_status *st)
{
    enum { MAX_AUTO = 64 };
    static char vals[MAX_AUTO][VF_PLAN_SET_MAX];
    vf_plan_req req = {c->script, c->sets, c->nsets, c->budget, c->json};
    int n = vf_plan_auto(*g, &req, vals, MAX_AUTO, c->json ? stderr : stdout, st);
    if (n <= 0) return n;
    const char **more = realloc(c->sets, sizeof *more * (size_t)(c->nsets + n + 1));
    if (!more) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    c->sets = more;
    for (int i = 0; i < n; i++) c->sets[c->nsets++] = vals[i];
    vf_graph_free(*g);
    *g = NULL;
    return load_graph(c, nnodes, g, st);
}

/* This node's cluster address and the meeting address's IP (cluster.h). */
static int cluster_addrs(const cli *c, const vf_rank_info *r, char *addr, char *master, vf_status *st)
{
    int rc = 0;
    if (!r->master_addr[0])
        VF_FAIL(st, VF_EUSAGE,
                "a run of %d ranks (%s) needs a meeting address: set MASTER_ADDR (or VFLOW_MASTER_ADDR) to rank 0's "
                "host",
                r->world, r->source);
    VF_TRY(vf_net_resolve(r->master_addr, "the meeting address", master, st));
    const char *env = getenv("VFLOW_ADDR");
    bool given = c->addr || c->iface || (env && *env);
    if (c->addr)
        VF_TRY(vf_net_resolve(c->addr, "--addr", addr, st));
    else if (c->iface)
        VF_TRY(vf_net_iface_addr(c->iface, addr, st));
    else if (env && *env)
        VF_TRY(vf_net_resolve(env, "VFLOW_ADDR", addr, st));
    else if (r->rank == 0)
        snprintf(addr, VF_ADDR_MAX, "%s", master);
    else
        VF_TRY(vf_net_route_addr(master, addr, st));
    if (r->rank == 0 && strncmp(master, "127.", 4) == 0) {
        /* a host name that this host's /etc/hosts maps to loopback (Debian's 127.0.1.1):
         * the other ranks cannot reach that; the cluster address is where to meet */
        if (!given)
            VF_FAIL(st, VF_EUSAGE,
                    "the meeting address %s is %s, a loopback address, on rank 0: the other ranks cannot reach it; "
                    "give rank 0's cluster address (--addr, --iface or VFLOW_ADDR) or set MASTER_ADDR to it",
                    r->master_addr, master);
        snprintf(master, VF_ADDR_MAX, "%s", addr);
    }
fail:
    return rc;
}

int vf_cli_pipeline(int argc, char **argv)
{
    cli c = {.cmd = argv[1]};
    vf_status st = {0};
    vf_graph *g = NULL;
    int rc = parse_args(argc, argv, &c);
    if (rc) {
        free(c.sets);
        return rc;
    }
    vf_budget budget;
    if (c.budget && (rc = vf_budget_parse(c.budget, &budget, &st)) < 0) goto done; /* before any work */
    /* who this process is, when a launcher started it once per node (rank.h) */
    vf_rank_info rank;
    rc = vf_rank_from_env(NULL, &rank, &st);
    if (rc < 0) goto done;
    int nnodes = c.nodes ? c.nodes : rank.world;
    rc = load_graph(&c, nnodes, &g, &st);
    if (rc < 0) goto done;
    if (strcmp(c.cmd, "plan") == 0 || strcmp(c.cmd, "run") == 0) {
        /* params "auto" (swap_blocks) resolved against the budgets, and the script loaded
         * again with their values */
        rc = resolve_auto(&c, nnodes, &g, &st);
        if (rc < 0) goto done;
        /* admission = "shrink": the buckets that do not fit get smaller batches (or none),
         * and the script is loaded again with those --set pairs */
        static char extra[4][VF_PLAN_SET_MAX];
        vf_plan_req req = {c.script, c.sets, c.nsets, c.budget, false};
        int n = vf_plan_admit(g, &req, extra, 4, c.json ? stderr : stdout, &st);
        if (n < 0) {
            rc = n;
            goto done;
        }
        if (n > 0) {
            const char **more = realloc(c.sets, sizeof *more * (size_t)(c.nsets + n + 1));
            if (!more) {
                rc = vf_status_set(&st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
                goto done;
            }
            c.sets = more;
            for (int i = 0; i < n; i++) c.sets[c.nsets++] = extra[i];
            vf_graph_free(g);
            g = NULL;
            rc = load_graph(&c, nnodes, &g, &st);
            if (rc < 0) goto done;
        }
    }
    if (strcmp(c.cmd, "check") == 0) {
        if (c.json) {
            char *j = vf_graph_to_json(g);
            if (!j) {
                rc = vf_status_set(&st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
                goto done;
            }
            printf("%s\n", j);
            free(j);
        } else {
            printf("%s: ok: pipeline '%s', %d stage%s, %d edge%s, %d worker%s\n", c.script, g->name, g->nstages,
                   g->nstages == 1 ? "" : "s", g->nedges, g->nedges == 1 ? "" : "s", g->nworkers,
                   g->nworkers == 1 ? "" : "s");
        }
    } else if (strcmp(c.cmd, "graph") == 0) {
        if (c.json) {
            char *j = vf_graph_to_json(g);
            if (!j) {
                rc = vf_status_set(&st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
                goto done;
            }
            printf("%s\n", j);
            free(j);
        } else {
            rc = vf_graph_dot(g, stdout);
            if (rc < 0) vf_status_set(&st, rc, __FILE__, __LINE__, "writing the graph failed");
        }
    } else if (strcmp(c.cmd, "plan") == 0) {
        /* the memory planner (plan.h): verdict against the budgets, fixes when over */
        vf_plan_req req = {c.script, c.sets, c.nsets, c.budget, c.json};
        rc = vf_plan_command(g, &req, stdout, &st);
    } else { /* run */
        /* plan first: refuse (exit 2) a run over a budget or on absent devices */
        vf_plan_req req = {c.script, c.sets, c.nsets, c.budget, false, rank.world > 1 ? rank.rank : 0};
        char addr[VF_ADDR_MAX] = "", master[VF_ADDR_MAX] = "";
        if (rank.world > 1) {
            rc = cluster_addrs(&c, &rank, addr, master, &st);
            if (rc < 0) goto done;
        }
        /* the plan is rank 0's to show: the others check the same graph quietly */
        FILE *report = rank.rank == 0 ? stdout : fopen("/dev/null", "we");
        /* what the stages of this node read when they start is there (a manifest, a
         * cache): else nothing is created or started */
        rc = vf_graph_preflight(g, rank.world > 1 ? rank.rank : 0, &st);
        if (rc == 0) rc = vf_plan_gate(g, &req, c.force, report ? report : stdout, &st);
        if (report && report != stdout) fclose(report);
        vf_status refusal = st;
        if (rc < 0 && rank.world > 1 && rank.rank > 0) {
            /* say so to the coordinator too: the run fails at once, naming this node */
            vf_status_clear(&st);
        } else if (rc < 0) {
            goto done;
        }
        fflush(stdout);
        vf_run_opts opts = {
            .run_dir = c.run_dir,
            .resume = c.resume,
            .resume_auto = c.resume_auto,
            .force = c.force,
            .progress_tty = isatty(STDOUT_FILENO) == 1,
            .budget = c.budget,
            .no_tensorboard = c.no_tb,
            .rank = rank.rank,
            .world = rank.world,
            .addr = addr,
            .master_ip = master,
            .master_port = rank.master_port,
            .refusal = rc < 0 ? &refusal : NULL,
        };
        rc = vf_driver_run(g, &opts, &st);
        /* the plan's per-stage prediction next to the measured account peaks */
        vf_status pst = {0};
        if (rank.rank == 0 && vf_exit_code(rc) != 2 && vf_plan_vs_measured(g, c.run_dir, stdout, &pst) == 0) fflush(stdout);
    }
done:
    vf_graph_free(g);
    free(c.sets);
    if (rc < 0) return die(rc, st.msg[0] ? st.msg : vf_strerror(rc));
    return 0;
}
