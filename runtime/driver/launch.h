/* launch.h — the driver side of `vflow run` and the worker process entry point.
 * Implemented in launch.c / worker.c / supervise.c. */
#ifndef VF_LAUNCH_H
#define VF_LAUNCH_H
#include "runtime/graph/graph.h"

typedef struct vf_run_opts {
    const char *run_dir;     /* NULL: runs/<graph name> */
    bool resume;             /* --resume: continue from the newest complete checkpoint */
    bool resume_auto;        /* --resume=auto: ... or start from step 0 when there is none */
    bool force;              /* --force: run even if the plan exceeds a budget */
    bool progress_tty;       /* live progress display (stdout is a TTY) */
    const char *budget;      /* --budget "cuda=80GiB,cpu=24GiB" or NULL */
    bool no_tensorboard;     /* --no-tensorboard: no <run dir>/tb/ event file */
} vf_run_opts;

/* Validated graph -> run dir, placement, workers spawned and supervised until the end
 * of stream or failure. 0 when every stage finished; negative with st naming the
 * failed stage and its reason otherwise. */
int vf_driver_run(vf_graph *g, const vf_run_opts *opts, vf_status *st);

/* `vflow __worker ...` (hidden subcommand the driver spawns). Returns the exit code. */
int vf_worker_main(int argc, char **argv);
#endif
