/* main.c — the `vflow` command line: the command table and the dispatch (cli.h).
 *
 *   vflow run|check|graph|plan PIPELINE.lua [--set k=v]... [options]   (pipeline_cli.c)
 *   vflow launch --slurm PIPELINE.lua [--set k=v]...                   (launch_cli.c)
 *   vflow cache stat|ls|verify PATH                                    (cache_cli.c)
 *   vflow sample CKPT --prompt-embeds F|--prompt TEXT --out x.mp4 [options]  (sample_cli.c)
 *   vflow version | help [KIND|stages|--params-md]                     (help_cli.c)
 */
#include "cli/cli.h"
#include "runtime/core/params.h"
#include "runtime/driver/launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmd_version(int argc, char **argv)
{
    printf("vflow %s (stage API %d)\n", VF_VERSION_STRING, VF_API_VERSION);
    return 0;
}

static int cmd_cache(int argc, char **argv) { return vf_cache_cli(argc - 1, argv + 1); }
static int cmd_worker(int argc, char **argv) { return vf_worker_main(argc - 1, argv + 1); }

const vf_cli_cmd vf_cli_commands[] = {
    {"run", "PIPELINE.lua", "validate, plan, launch the workers and run to the end", vf_cli_pipeline},
    {"check", "PIPELINE.lua", "validate only (exit 0 = the topology is sound)", vf_cli_pipeline},
    {"graph", "PIPELINE.lua", "print the expanded plain graph as Graphviz DOT (--json: as JSON)", vf_cli_pipeline},
    {"plan", "PIPELINE.lua",
     "every byte the run will hold, per worker and device; verdict\n"
     "against the budgets and, when over, the knobs that make it fit",
     vf_cli_pipeline},
    {"launch", "--slurm PIPELINE.lua", "print an sbatch script running the pipeline on the nodes it\n"
     "names (docs/MULTINODE.md)", vf_cli_launch},
    {"cache", "stat|ls|verify PATH", "inspect an LMDB latent cache", cmd_cache},
    {"sample", "CKPT --prompt-embeds F|--prompt TEXT --out x.mp4",
     "a video from a checkpoint (+ LoRA): flow-matching sampling with\n"
     "guidance, the VAE decoder, H.264/MPEG-4 (vflow sample --help)",
     vf_cli_sample},
    {"version", "", "print the version", cmd_version, "--version"},
    {"help", "[KIND|stages]", "this text, the stage kinds, or the params of one kind", vf_cli_help, "--help -h"},
    {"__worker", "", "one worker process of a run (started by the driver)", cmd_worker, NULL, true},
    {0},
};

static const char *const OPTIONS =
    "options (run, check, graph, plan):\n"
    "  --set KEY=VALUE      reaches the script as vf.args.KEY (numbers converted,\n"
    "                       true/false as booleans); repeatable\n"
    "  --set NAME.PARAM=V   overrides param PARAM of stage NAME after the script ran\n"
    "                       (V is JSON if it parses, else a string)\n"
    "  --json               check/graph/plan: machine-readable output on stdout\n"
    "  --budget SPEC        plan/run: device budgets, e.g. cuda=80GiB,cpu=24GiB (default: what\n"
    "                       the machine has); a plan over a budget fails with exit 2\n"
    "  --run-dir DIR        run: where the run dir goes (default runs/<pipeline name>)\n"
    "  --resume             run: continue from the newest complete checkpoint; none where\n"
    "                       the run looks is an error (exit 2)\n"
    "  --resume=auto        run: the same, but start from step 0 when there is none\n"
    "  --force              run: start even if the plan exceeds a budget\n"
    "  --no-tensorboard     run: write no TensorBoard event file (<run dir>/tb/)\n"
    "  --addr IP            run, multi-node: this node's cluster address (default: VFLOW_ADDR,\n"
    "                       else the meeting address on rank 0, else the address that\n"
    "                       routes to it); --iface NAME takes an interface's address\n"
    "  --nodes N            check/plan: the node count to check placements against\n"
    "                       (default: the launcher's world size, 1 without one)\n"
    "\n"
    "exit codes: 0 done, 1 the run failed, 2 bad usage, bad topology or bad input\n";

void vf_cli_usage(FILE *f)
{
    fputs("usage: vflow COMMAND [ARGS]\n\ncommands:\n", f);
    for (const vf_cli_cmd *c = vf_cli_commands; c->name; c++) {
        if (c->hidden) continue;
        char head[64];
        snprintf(head, sizeof head, "%s%s%s", c->name, c->args[0] ? " " : "", c->args);
        /* the description starts in column 24, or after three spaces when the head is longer */
        fprintf(f, "  %-*s ", strlen(head) > 19 ? (int)strlen(head) + 2 : 20, head);
        for (const char *p = c->usage; *p; p++) {
            fputc(*p, f);
            if (*p == '\n') fprintf(f, "%23s", "");
        }
        fputc('\n', f);
    }
    fputs("\n", f);
    fputs(OPTIONS, f);
}

static bool is_alias(const char *aliases, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = aliases; p && *p;) {
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, word, n) == 0) return true;
        p = e ? e + 1 : p + len;
    }
    return false;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        vf_cli_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* Workers inherit this: idle OpenMP threads that spin starve the stage threads and
     * other workers sharing the cores (8x slower training steps measured on 2 busy
     * cores). libgomp reads it at load time, so it must be in the workers' environment. */
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    const char *names[64];
    int n = 0;
    for (const vf_cli_cmd *c = vf_cli_commands; c->name; c++) {
        if (strcmp(cmd, c->name) == 0 || is_alias(c->aliases, cmd)) return c->fn(argc, argv);
        if (!c->hidden && n < 64) names[n++] = c->name;
    }
    const char *near = vf_did_you_mean(cmd, names, n);
    fprintf(stderr, "vflow: unknown command '%s'", cmd);
    if (near) fprintf(stderr, "; did you mean '%s'?", near);
    fprintf(stderr, "\n(see `vflow help`)\n");
    return 2;
}
