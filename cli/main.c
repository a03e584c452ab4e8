/* main.c — the `vflow` command line.
 *
 *   vflow run|check|graph|plan PIPELINE.lua [--set k=v]... [options]
 *   vflow cache stat|ls|verify PATH        (cache_cli.c)
 *   vflow version | help [KIND|stages|--params-md]
 *
 * run/check/graph/plan share one front half: run the script in the sandbox, apply
 * `--set NAME.PARAM=V` overrides, validate, place. Any failure there is a usage or
 * topology error: one line "vflow: FILE:LINE: message" on stderr, exit 2, and nothing
 * launched (no run dir, no worker). Exit codes: 0 done, 1 run failed, 2 bad usage.
 */
#include "cli/cache_cli.h"
#include "runtime/graph/graph.h"
#include "runtime/driver/launch.h"
#include "runtime/graph/lua_host.h"
#include "runtime/core/params.h"
#include "runtime/plan/plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const USAGE =
    "usage: vflow COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  run PIPELINE.lua     validate, plan, launch the workers and run to the end\n"
    "  check PIPELINE.lua   validate only (exit 0 = the topology is sound)\n"
    "  graph PIPELINE.lua   print the expanded plain graph as Graphviz DOT (--json: as JSON)\n"
    "  plan PIPELINE.lua    every byte the run will hold, per worker and device; verdict\n"
    "                       against the budgets and, when over, the knobs that make it fit\n"
    "  cache stat|ls|verify PATH   inspect an LMDB latent cache\n"
    "  version              print the version\n"
    "  help [KIND|stages]   this text, the stage kinds, or the params of one kind\n"
    "\n"
    "options (run, check, graph, plan):\n"
    "  --set KEY=VALUE      reaches the script as vf.args.KEY (numbers converted,\n"
    "                       true/false as booleans); repeatable\n"
    "  --set NAME.PARAM=V   overrides param PARAM of stage NAME after the script ran\n"
    "                       (V is JSON if it parses, else a string)\n"
    "  --json               check/graph/plan: machine-readable output on stdout\n"
    "  --budget SPEC        plan/run: device budgets, e.g. cuda=80GiB,cpu=24GiB (default: what\n"
    "                       the machine has); a plan over a budget fails with exit 2\n"
    "  --run-dir DIR        run: where the run dir goes (default runs/<pipeline name>)\n"
    "  --resume             run: continue from the newest complete checkpoint\n"
    "  --force              run: start even if the plan exceeds a budget\n"
    "\n"
    "exit codes: 0 done, 1 the run failed, 2 bad usage, bad topology or bad input\n";

typedef struct cli {
    const char *cmd;
    const char *script;
    const char **sets;
    int nsets;
    const char *run_dir, *budget;
    bool resume, force, json;
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
static int parse_args(int argc, char **argv, cli *c)
{
    static const char *const opts[] = {"--set", "--json", "--budget", "--run-dir", "--resume", "--force"};
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
        bool takes = strcmp(name, "--set") == 0 || strcmp(name, "--budget") == 0 || strcmp(name, "--run-dir") == 0;
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
        } else if (strcmp(name, "--json") == 0 && !val) {
            c->json = true;
        } else if (strcmp(name, "--resume") == 0 && !val) {
            c->resume = true;
        } else if (strcmp(name, "--force") == 0 && !val) {
            c->force = true;
        } else {
            const char *near = vf_did_you_mean(name, opts, (int)(sizeof opts / sizeof opts[0]));
            fprintf(stderr, "vflow: unknown option '%s'", a);
            if (near) fprintf(stderr, "; did you mean '%s'?", near);
            fprintf(stderr, "\n(see `vflow help`)\n");
            return 2;
        }
    }
    if (!c->script) {
        fprintf(stderr, "vflow: %s: which pipeline? e.g. vflow %s pipelines/quickstart.lua\n", c->cmd, c->cmd);
        return 2;
    }
    return 0;
}

/* Script -> overrides -> validated, placed graph. */
static int load_graph(const cli *c, vf_graph **out, vf_status *st)
{
    int rc = 0;
    vf_graph *g = NULL;
    bool *used = calloc((size_t)c->nsets + 1, sizeof *used);
    if (!used) VF_FAIL(st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_lua_load_ex(c->script, c->sets, c->nsets, &g, used, st));
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
            fprintf(stderr, "vflow: warning: --set %s: the script does not read vf.args.%s\n", kv, key);
        }
    }
    VF_TRY(vf_graph_validate(g, st));
    VF_TRY(vf_graph_place(g, st));
    *out = g;
    g = NULL;
fail:
    vf_graph_free(g);
    free(used);
    return rc;
}

static int cmd_pipeline(int argc, char **argv)
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
    rc = load_graph(&c, &g, &st);
    if (rc < 0) goto done;
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
        vf_plan_req req = {c.script, c.sets, c.nsets, c.budget, false};
        rc = vf_plan_gate(g, &req, c.force, stdout, &st);
        if (rc < 0) goto done;
        fflush(stdout);
        vf_run_opts opts = {
            .run_dir = c.run_dir,
            .resume = c.resume,
            .force = c.force,
            .progress_tty = isatty(STDOUT_FILENO) == 1,
            .budget = c.budget,
        };
        rc = vf_driver_run(g, &opts, &st);
        /* the plan's per-stage prediction next to the measured account peaks */
        vf_status pst = {0};
        if (rc != VF_EUSAGE && vf_plan_vs_measured(g, c.run_dir, stdout, &pst) == 0) fflush(stdout);
    }
done:
    vf_graph_free(g);
    free(c.sets);
    if (rc < 0) return die(rc, st.msg[0] ? st.msg : vf_strerror(rc));
    return 0;
}

/* ------------------------------------------------------------------ help */

static void default_text(const vf_param_spec *p, char *buf, size_t n)
{
    if (!p->def) snprintf(buf, n, "required");
    else if (strcmp(p->def, "null") == 0) snprintf(buf, n, "-");
    else snprintf(buf, n, "%s", p->def);
}

static void num_text(double v, char *buf, size_t n)
{
    if (v == (double)(int64_t)v && v > -1e15 && v < 1e15) snprintf(buf, n, "%lld", (long long)v);
    else snprintf(buf, n, "%g", v);
}

static void range_text(const vf_param_spec *p, char *buf, size_t n)
{
    char lo[32], hi[32];
    buf[0] = 0;
    if (p->choices) {
        snprintf(buf, n, "%s", p->choices);
    } else if (p->min <= p->max) {
        num_text(p->min, lo, sizeof lo);
        num_text(p->max, hi, sizeof hi);
        snprintf(buf, n, "%s .. %s", lo, hi);
    }
}

/* Markdown table cell: '|' would end the cell. */
static void md_cell(const char *s)
{
    for (; *s; s++) {
        if (*s == '|') fputc('\\', stdout);
        fputc(*s, stdout);
    }
}

static void params_md(const vf_param_spec *spec, const char *prefix)
{
    char def[256], range[256];
    for (const vf_param_spec *p = spec; p && p->name; p++) {
        default_text(p, def, sizeof def);
        range_text(p, range, sizeof range);
        bool code = p->def && strcmp(p->def, "null") != 0;
        printf("| `%s%s` | %s | %s", prefix, p->name, vf_param_type_name(p->type), code ? "`" : "");
        md_cell(def);
        printf("%s | ", code ? "`" : "");
        md_cell(range);
        printf(" | ");
        md_cell(p->doc ? p->doc : "");
        printf(" |\n");
        if (p->type == VF_P_TABLE && p->fields) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s%s.", prefix, p->name);
            params_md(p->fields, sub);
        }
    }
}

static void params_text(const vf_param_spec *spec, int indent)
{
    char def[256], range[256];
    for (const vf_param_spec *p = spec; p && p->name; p++) {
        default_text(p, def, sizeof def);
        range_text(p, range, sizeof range);
        printf("%*s%-18s %-15s %-14s %-14s %s\n", indent, "", p->name, vf_param_type_name(p->type), def, range,
               p->doc ? p->doc : "");
        if (p->type == VF_P_TABLE && p->fields) params_text(p->fields, indent + 2);
    }
}

static int cmd_help(int argc, char **argv)
{
    const vf_stage_ops *kinds[256];
    int n = vf_stage_kinds(kinds, 256);
    if (n > 256) n = 256;
    if (argc < 3) {
        fputs(USAGE, stdout);
        return 0;
    }
    const char *topic = argv[2];
    if (strcmp(topic, "--params-md") == 0) {
        /* The README's generated table (scripts/gen_params_table). */
        for (int i = 0; i < n; i++) {
            printf("#### `%s`\n\n%s\n\n", kinds[i]->kind, kinds[i]->doc ? kinds[i]->doc : "");
            if (!kinds[i]->params || !kinds[i]->params[0].name) {
                printf("No params.\n\n");
                continue;
            }
            printf("| param | type | default | range / choices | meaning |\n|---|---|---|---|---|\n");
            params_md(kinds[i]->params, "");
            printf("\n");
        }
        return 0;
    }
    if (strcmp(topic, "stages") == 0) {
        for (int i = 0; i < n; i++) printf("%-18s %s\n", kinds[i]->kind, kinds[i]->doc ? kinds[i]->doc : "");
        return 0;
    }
    const vf_stage_ops *ops = vf_stage_lookup(topic);
    if (!ops) {
        const char *names[256];
        for (int i = 0; i < n; i++) names[i] = kinds[i]->kind;
        const char *near = vf_did_you_mean(topic, names, n);
        fprintf(stderr, "vflow: help: no stage kind '%s'", topic);
        if (near) fprintf(stderr, "; did you mean '%s'?", near);
        fprintf(stderr, " (`vflow help stages` lists them)\n");
        return 2;
    }
    printf("%s — %s\n\n", ops->kind, ops->doc ? ops->doc : "");
    printf("%-18s %-15s %-14s %-14s %s\n", "param", "type", "default", "range", "meaning");
    params_text(ops->params, 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* Workers inherit this: idle OpenMP threads that spin starve the stage threads and
     * other workers sharing the cores (8x slower training steps measured on 2 busy
     * cores). libgomp reads it at load time, so it must be in the workers' environment. */
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    if (strcmp(cmd, "__worker") == 0) return vf_worker_main(argc - 1, argv + 1);
    if (strcmp(cmd, "cache") == 0) return vf_cache_cli(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("vflow %s (stage API %d)\n", VF_VERSION_STRING, VF_API_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return cmd_help(argc, argv);
    if (strcmp(cmd, "run") == 0 || strcmp(cmd, "check") == 0 || strcmp(cmd, "graph") == 0 ||
        strcmp(cmd, "plan") == 0)
        return cmd_pipeline(argc, argv);
    static const char *const cmds[] = {"run", "check", "graph", "plan", "cache", "version", "help"};
    const char *near = vf_did_you_mean(cmd, cmds, 7);
    fprintf(stderr, "vflow: unknown command '%s'", cmd);
    if (near) fprintf(stderr, "; did you mean '%s'?", near);
    fprintf(stderr, "\n(see `vflow help`)\n");
    return 2;
}
