/* launch.h — the driver side of `vflow run` and the worker process entry point.
 * Implemented in launch.c / worker.c / supervise.c. */
#ifndef VF_LAUNCH_H
#define VF_LAUNCH_H
#include "runtime/graph/graph.h"
#include <sys/types.h>

typedef struct vf_run_opts {
    const char *run_dir;     /* NULL: runs/<graph name> */
    bool resume;             /* --resume: continue from the newest complete checkpoint */
    bool resume_auto;        /* --resume=auto: ... or start from step 0 when there is none */
    bool force;              /* --force: run even if the plan exceeds a budget */
    bool progress_tty;       /* live progress display (stdout is a TTY) */
    const char *budget;      /* --budget "cuda=80GiB,cpu=24GiB" or NULL */
    bool no_tensorboard;     /* --no-tensorboard: no <run dir>/tb/ event file */
    /* A multi-node run (docs/MULTINODE.md): world > 1 nodes, this one is `rank`; rank 0
     * coordinates. addr is this node's cluster address (cluster.h), master_ip:master_port
     * the meeting place (rank 0's control socket). */
    int rank, world;
    const char *addr;
    const char *master_ip;
    int master_port;
    /* rank > 0: this node cannot take part (its checks failed, refusal = that status): it
     * meets the coordinator only to say so, so that the run fails at once naming it */
    const vf_status *refusal;
} vf_run_opts;

/* How the driver starts one worker (launch.c, also a node's driver, node.c). */
typedef struct vf_spawn_args {
    const char *graph_path, *run_dir, *sock_dir, *ctl_ep;
    const char *bind;        /* tcp receivers bind here (NULL: loopback) */
    bool secure;             /* the control socket is CURVE (a multi-node run) */
    const char *resume;      /* "--resume", "--resume=auto" or NULL */
} vf_spawn_args;
/* fork + exec of `vflow __worker` for worker wi, stdout/stderr to logfile. */
int vf_spawn_worker(int wi, const vf_spawn_args *a, const char *logfile, pid_t *pid, vf_status *st);

/* Rank > 0 of a multi-node run: meets the coordinator, checks the graph it sends against
 * g (this node's own resolution of the script), starts and watches the workers placed on
 * this node until the coordinator ends the run. 0 when the run succeeded. */
int vf_node_run(vf_graph *g, const vf_run_opts *opts, vf_status *st);

/* Validated graph -> run dir, placement, workers spawned and supervised until the end
 * of stream or failure. 0 when every stage finished; negative with st naming the
 * failed stage and its reason otherwise. */
int vf_driver_run(vf_graph *g, const vf_run_opts *opts, vf_status *st);

/* `vflow __worker ...` (hidden subcommand the driver spawns). Returns the exit code. */
int vf_worker_main(int argc, char **argv);
#endif
