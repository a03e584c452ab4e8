/* cli.h — the `vflow` commands: one table (cli/main.c) of name, function and usage line.
 *
 * Adding a command is one file with its function (cli/<name>_cli.c) and one row in the
 * table; `vflow help`, the did-you-mean for a mistyped command and the dispatch all read
 * the table. Every command function gets the whole command line (argv[0] "vflow",
 * argv[1] the command) and returns the process exit code: 0 done, 1 the run failed,
 * 2 bad usage, bad topology or bad input.
 */
#ifndef VF_CLI_H
#define VF_CLI_H
#include <stdbool.h>
#include <stdio.h>

typedef struct vf_cli_cmd {
    const char *name;            /* "run" */
    const char *args;            /* shown after the name in `vflow help`: "PIPELINE.lua" */
    const char *usage;           /* what it does; '\n' starts an indented continuation line */
    int (*fn)(int argc, char **argv);
    const char *aliases;         /* other spellings, space-separated ("--help -h"), or NULL */
    bool hidden;                 /* not listed by `vflow help` (the worker entry point) */
} vf_cli_cmd;

/* The table, {0}-terminated (cli/main.c). */
extern const vf_cli_cmd vf_cli_commands[];

/* The usage text: the commands of the table, then the pipeline options. */
void vf_cli_usage(FILE *f);

/* run | check | graph | plan PIPELINE.lua (pipeline_cli.c) */
int vf_cli_pipeline(int argc, char **argv);
/* help [KIND|stages|--params-md] (help_cli.c) */
int vf_cli_help(int argc, char **argv);
/* cache stat|ls|verify PATH (cache_cli.c; takes argv from "cache" on) */
int vf_cache_cli(int argc, char **argv);
/* launch --slurm PIPELINE.lua … (launch_cli.c): an sbatch script for a multi-node run */
int vf_cli_launch(int argc, char **argv);
/* sample CKPT --prompt-embeds F --out x.mp4 … (sample_cli.c) */
int vf_cli_sample(int argc, char **argv);
#endif /* VF_CLI_H */
