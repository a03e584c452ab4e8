/* launch_cli.c — `vflow launch --slurm PIPELINE.lua [--set k=v]... [run options]`: prints
 * an sbatch script that runs the pipeline across the nodes its topology names, one vflow
 * process per node (docs/MULTINODE.md). The script is resolved here (with the --set
 * values) to count the nodes and the GPUs per node; every argument but --slurm is passed
 * on to `vflow run` unchanged, so every rank resolves the same graph.
 */
#include "cli/cli.h"
#include "runtime/graph/graph.h"
#include "runtime/graph/lua_host.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One shell word, single-quoted unless it is plainly safe. */
static void shell_word(FILE *f, const char *s)
{
    bool plain = *s != 0;
    for (const char *c = s; *c && plain; c++)
        plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                strchr("-_./=:,+@%", *c);
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *c = s; *c; c++)
        if (*c == '\'') fputs("'\\''", f);
        else fputc(*c, f);
    fputc('\'', f);
}

int vf_cli_launch(int argc, char **argv)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    snprintf(exe + (n > 0 ? n : 0), sizeof exe - (size_t)(n > 0 ? n : 0), "%s", n > 0 ? "" : "vflow");
    const char *script = NULL;
    bool slurm = false, run_dir = false;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int nsets = 0, rc = 0;
    vf_graph *g = NULL;
    vf_status st = {0};
    if (!sets) return 1;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--slurm") == 0) slurm = true;
        else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) sets[nsets++] = argv[++i];
        else if (strncmp(argv[i], "--set=", 6) == 0) sets[nsets++] = argv[i] + 6;
        else if (strcmp(argv[i], "--run-dir") == 0 || strncmp(argv[i], "--run-dir=", 10) == 0) run_dir = true;
        else if (argv[i][0] != '-' && !script) script = argv[i];
    }
    if (!slurm || !script) {
        fprintf(stderr, "usage: vflow launch --slurm PIPELINE.lua [--set k=v]... [run options]\n"
                        "  prints an sbatch script running the pipeline on the nodes it names\n");
        free(sets);
        return 2;
    }
    /* the script as `vflow run` resolves it: --set NAME.PARAM overrides need no nodes */
    if (vf_lua_load_ex(script, sets, nsets, &g, NULL, NULL, &st) < 0) {
        fprintf(stderr, "vflow: %s\n", st.msg);
        free(sets);
        return 2;
    }
    int nodes = vf_graph_nodes(g), gpus = 0;
    for (int i = 0; i < g->nstages; i++)
        if (g->stages[i].device.kind == VF_DEV_CUDA && g->stages[i].device.index + 1 > gpus)
            gpus = g->stages[i].device.index + 1;
    char abs[PATH_MAX];
    const char *path = realpath(script, abs) ? abs : script;
    printf("#!/bin/bash\n");
    printf("# pipeline '%s' (%s) on %d node%s, one vflow process each (vflow launch --slurm;\n"
           "# docs/MULTINODE.md). Submit with sbatch; extra sbatch options on its command line.\n",
           g->name, path, nodes, nodes == 1 ? "" : "s");
    printf("#SBATCH --job-name=%.40s\n#SBATCH --nodes=%d\n#SBATCH --ntasks-per-node=1\n", g->name, nodes);
    if (gpus) printf("#SBATCH --gpus-per-node=%d\n", gpus);
    printf("set -euo pipefail\n");
    printf("# the run key: a fresh secret in the environment srun hands every task, never a file\n");
    printf("export VFLOW_RUN_KEY=${VFLOW_RUN_KEY:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')}\n");
    printf("srun --ntasks-per-node=1 ");
    shell_word(stdout, exe);
    printf(" run ");
    shell_word(stdout, path);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--slurm") == 0 || argv[i] == script) continue;
        putchar(' ');
        shell_word(stdout, argv[i]);
    }
    /* every rank needs the same run dir on a shared file system */
    if (!run_dir) printf(" --run-dir \"runs/%s-$SLURM_JOB_ID\"", g->name);
    putchar('\n');
    rc = fflush(stdout) == 0 ? 0 : 1;
    vf_graph_free(g);
    free(sets);
    return rc;
}
