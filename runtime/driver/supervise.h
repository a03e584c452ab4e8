/* supervise.h — the driver's watch over its workers, from spawn to the last exit.
 *
 * One loop on the driver's thread (nothing else touches the ROUTER socket): it polls
 * the control socket and a self-pipe fed by the SIGINT/SIGTERM handler at most every
 * VF_SUPER_POLL_MS, and on each turn
 *   - handles worker messages (ctl.h): hello -> once every worker said hello, "go" with
 *     all endpoints; metrics -> metrics.jsonl + progress; log lines -> run.log; event
 *     rows; stage done / failed;
 *   - reaps exited workers (waitpid WNOHANG) and checks heartbeats (any message counts);
 *   - acts on signals: the first drains (workers get "stop": sources end their streams
 *     and everything downstream flushes), the second aborts;
 *   - enforces deadlines: start-up, heartbeat, drain, and the grace after an abort after
 *     which workers still alive are killed (SIGKILL).
 * The first failure wins: it names the stage(s) and worker, the reason and the last
 * log lines of that worker; every other worker is aborted.
 *
 * Timeouts (ms) can be changed through the environment for tests and slow machines:
 * VFLOW_HEARTBEAT_TIMEOUT_MS (2000), VFLOW_START_TIMEOUT_MS (30000),
 * VFLOW_GRACE_MS (2000), VFLOW_DRAIN_TIMEOUT_MS (30000).
 *
 * In a multi-node run (vf_super_nodes) the loop is the coordinator's: the other nodes'
 * drivers join on the same socket and get their part, start their workers, report their
 * exits and heartbeat both ways; a node silent for longer than the heartbeat timeout (its
 * driver killed, its link cut) fails the run naming the node and its stages, and a node
 * that does not join within the start-up timeout as well.
 */
#ifndef VF_SUPERVISE_H
#define VF_SUPERVISE_H
#include "runtime/graph/graph.h"
#include "runtime/driver/metrics.h"
#include "runtime/driver/progress.h"
#include "runtime/driver/rundir.h"
#include <sys/types.h>

#define VF_SUPER_POLL_MS 50
#define VF_WORKER_LOG_RING 8
#define VF_EXIT_SETTLE_MS 300    /* wait for a dead worker's last messages */
#define VF_CTL_NODE_IDENT 32

typedef struct vf_wproc {
    char name[VF_NAME_MAX];
    char stages[512];            /* "src, pass" for messages */
    char logfile[PATH_MAX];      /* its stdout/stderr */
    pid_t pid;
    int nstages, ndone;
    bool hello, exited;
    bool killed;                 /* we sent SIGKILL (reason already logged) */
    int node;                    /* the node that started it (0: this one, the coordinator) */
    bool remote;                 /* started by another node's driver: no pid here, its exit
                                    arrives as that node's "exited" message */
    bool judged;                 /* its exit has been weighed (see reap) */
    int64_t exit_ns;
    int wstatus;                 /* from waitpid once exited */
    int64_t spawn_ns, last_msg_ns;
    int nring;
    char ring[VF_WORKER_LOG_RING][256]; /* last log lines, oldest first after rotation */
} vf_wproc;

/* Another node of a multi-node run, as the coordinator sees its driver. */
typedef struct vf_nproc {
    char ident[VF_CTL_NODE_IDENT];  /* "node<k>" */
    char addr[64];               /* its cluster address, from its join */
    char stages[512];            /* its stages, for messages */
    bool joined, lost, bye;
    int64_t last_msg_ns, last_beat_sent_ns;
} vf_nproc;

typedef enum vf_super_state {
    VF_SUPER_STARTING = 0,       /* waiting for every hello */
    VF_SUPER_RUNNING,
    VF_SUPER_DRAINING,           /* stop sent (first signal) */
    VF_SUPER_ABORTING,           /* abort sent (failure or second signal) */
} vf_super_state;

typedef struct vf_super {
    vf_graph *g;                 /* borrowed, placed */
    vf_rundir *rd;               /* borrowed */
    vf_monitor mon;
    vf_progress prog;
    void *router;                /* borrowed */
    int nw;
    vf_wproc *w;                 /* owned */
    char **endpoints;            /* per edge, from hellos; owned */
    vf_super_state state;
    bool failed;
    int interrupted;             /* signal number of the first SIGINT/SIGTERM, 0 none */
    vf_status fail;              /* the first failure */
    int64_t drain_deadline, abort_deadline;
    int64_t all_done_ns;         /* when the last stage reported done */
    int64_t hb_timeout_ns, start_timeout_ns, grace_ns, drain_timeout_ns;
    int64_t start_ns;
    /* multi-node: nodes 1..nnodes-1 (index 0 unused: the coordinator itself) */
    int nnodes;
    vf_nproc *nodes;             /* owned */
    const char *part;            /* the message each node gets on joining: borrowed */
    size_t part_len;
} vf_super;

/* Sets up the supervisor of placed graph g (workers not spawned yet). */
int vf_super_init(vf_super *sv, vf_graph *g, vf_rundir *rd, void *router, bool tty,
                  vf_status *st);
void vf_super_fini(vf_super *sv);
/* Makes sv the coordinator of a run over nnodes nodes: workers placed on other nodes are
 * remote, and each node gets `part` (ctl.h's part message, borrowed) when it joins. */
int vf_super_nodes(vf_super *sv, int nnodes, const char *part, size_t part_len, vf_status *st);
/* Tells every node still there that the run ended with exit code `code` and waits up to
 * wait_ms for their byes. */
void vf_super_end_nodes(vf_super *sv, int code, int wait_ms);
/* Installs the SIGINT/SIGTERM handlers and ignores SIGPIPE (until
 * vf_super_signals_restore). */
int vf_super_signals_install(vf_status *st);
void vf_super_signals_restore(void);
/* Runs until every worker has exited. 0 when every stage finished; otherwise the
 * failure (or VF_ESTOPPED for an interrupted run) with st's message. */
int vf_super_run(vf_super *sv, vf_status *st);
/* Writes a driver line into run.log (and to stderr for warnings and errors). */
void vf_super_log(vf_super *sv, int level, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Kills (SIGKILL) and reaps every worker still alive; used on the way out. */
void vf_super_kill_all(vf_super *sv);

#endif /* VF_SUPERVISE_H */
