/* launch.c — `vflow run` after validation: run dir, placement, control socket, one OS
 * process per worker, supervision, final metrics and summary.
 *
 * Workers are started with fork + exec of /proc/self/exe `__worker ...` (worker.c):
 * never fork alone, because ZeroMQ contexts, LMDB environments and CUDA contexts must
 * not cross a fork. Between fork and exec the child only makes async-signal-safe calls:
 * its own process group (a terminal's Ctrl-C reaches the driver only, which drains the
 * run in order), PR_SET_PDEATHSIG (a driver killed with -9 takes its workers along),
 * stdout/stderr to <run dir>/workers/<name>.log, every other descriptor close-on-exec.
 *
 * One run per directory: the run dir's lock (taken by vf_rundir_open) and, for each
 * directory a stage writes (vf_stage_ops.lock_dir: the checkpoint dir, inside the run
 * dir or not), the same lock there, all held until the run ends (runlock.h).
 *
 * `vflow run … --resume[=auto]` reaches every worker as the same flag in its arguments
 * (the stages read it through vf_resuming() and vf_resume_auto()).
 *
 * VFLOW_TRACE_SPAWN=FILE appends "pid=<pid> worker=<name> stages=<a,b>" per spawned
 * worker: tests use it to prove that a bad topology launched nothing.
 */
#include "runtime/driver/launch.h"
#include "runtime/driver/tb_log.h"
#include "runtime/driver/ctl.h"
#include "runtime/driver/supervise.h"
#include "runtime/driver/cluster.h"
#include "runtime/edge/curve.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The event file's WARN lines (an image it could not log) in run.log, from the driver. */
static void tb_warn(void *arg, const char *msg) { vf_super_log(arg, VF_LOG_WARN, "driver", "%s", msg); }

static void trace_spawn(const vf_super *sv, int wi)
{
    const char *path = getenv("VFLOW_TRACE_SPAWN");
    if (!path || !path[0]) return;
    char line[1024], stages[512];
    snprintf(stages, sizeof stages, "%s", sv->w[wi].stages);
    for (char *c = stages; *c; c++) /* "a, b" -> "a,b": one token per field */
        if (*c == ' ') memmove(c, c + 1, strlen(c));
    snprintf(line, sizeof line, "pid=%d worker=%s stages=%s\n", (int)sv->w[wi].pid, sv->w[wi].name,
             stages);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t r = write(fd, line, strlen(line));
    (void)r;
    close(fd);
}

/* The child half of fork: async-signal-safe calls only, then exec. */
static void child_exec(char *const argv[], int logfd, int nullfd, pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* the driver died before prctl took effect */
    dup2(nullfd, 0);
    dup2(logfd, 1);
    dup2(logfd, 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    /* The driver's ZeroMQ and file descriptors must not leak into the worker. */
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
        for (int fd = 3; fd < 4096; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
    execv("/proc/self/exe", argv);
    _exit(127);
}

#define MAX_DIR_LOCKS 16

/* Locks each directory a stage writes (created when missing), once. One inside the run
 * dir is locked too: another run may name it as its own checkpoint dir. */
static int lock_stage_dirs(const vf_graph *g, const vf_rundir *rd, vf_runlock *locks, int *nlocks,
                           vf_status *st)
{
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        if (!s->ops || !s->ops->lock_dir) continue;
        char dir[PATH_MAX], real[PATH_MAX], what[VF_NAME_MAX + 32];
        dir[0] = 0;
        s->ops->lock_dir(s->params, rd->path, dir, sizeof dir);
        if (!dir[0]) continue;
        snprintf(what, sizeof what, "the dir of stage %s", s->name);
        int e = vf_mkdir_p(dir);
        if (e == -ENOTDIR)
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: %s is not a directory", what, dir);
        if (e < 0)
            return vf_status_set(st, e == -EROFS || e == -EACCES || e == -EPERM ? VF_EBADINPUT : VF_EIO, __FILE__,
                                 __LINE__, "%s: cannot create %s: %s", what, dir, strerror(-e));
        if (!realpath(dir, real)) return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s: %s", what, dir, strerror(errno));
        bool seen = false;
        for (int k = 0; k < *nlocks; k++) {
            char held[PATH_MAX];
            snprintf(held, sizeof held, "%s", locks[k].path);
            char *slash = strrchr(held, '/');
            if (slash) *slash = 0;
            if (strcmp(held, real) == 0) seen = true;
        }
        if (seen) continue;
        if (*nlocks == MAX_DIR_LOCKS)
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: more than %d directories to lock", what,
                                 MAX_DIR_LOCKS);
        int rc = vf_runlock_take(&locks[*nlocks], real, what, st);
        if (rc) return rc;
        (*nlocks)++;
    }
    return 0;
}

int vf_spawn_worker(int wi, const vf_spawn_args *a, const char *logfile, pid_t *pid_out, vf_status *st)
{
    int rc = 0, logfd = -1, nullfd = -1;
    char idx[16];
    snprintf(idx, sizeof idx, "%d", wi);
    char *argv[20];
    int n = 0;
    argv[n++] = "vflow";
    argv[n++] = "__worker";
    argv[n++] = "--graph";
    argv[n++] = (char *)a->graph_path;
    argv[n++] = "--worker";
    argv[n++] = idx;
    argv[n++] = "--run-dir";
    argv[n++] = (char *)a->run_dir;
    argv[n++] = "--sock-dir";
    argv[n++] = (char *)a->sock_dir;
    argv[n++] = "--ctl";
    argv[n++] = (char *)a->ctl_ep;
    if (a->bind) {
        argv[n++] = "--bind";
        argv[n++] = (char *)a->bind;
    }
    if (a->secure) argv[n++] = "--ctl-secure";
    if (a->resume) argv[n++] = (char *)a->resume;
    argv[n] = NULL;
    logfd = open(logfile, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0) VF_FAIL(st, VF_EIO, "driver: cannot open %s: %s", logfile, strerror(errno));
    nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nullfd < 0) VF_FAIL(st, VF_EIO, "driver: /dev/null: %s", strerror(errno));
    fflush(NULL); /* nothing buffered may be written twice */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) VF_FAIL(st, VF_EIO, "driver: fork: %s", strerror(errno));
    if (pid == 0) child_exec(argv, logfd, nullfd, parent);
    *pid_out = pid;
fail:
    if (logfd >= 0) close(logfd);
    if (nullfd >= 0) close(nullfd);
    return rc;
}

static int spawn_worker(vf_super *sv, int wi, const vf_spawn_args *a, vf_status *st)
{
    int rc = 0;
    vf_wproc *w = &sv->w[wi];
    pid_t pid = 0;
    VF_TRY(vf_spawn_worker(wi, a, w->logfile, &pid, st));
    w->pid = pid;
    w->spawn_ns = w->last_msg_ns = vf_now_ns();
    sv->mon.pids[wi] = pid;
    trace_spawn(sv, wi);
    vf_super_log(sv, VF_LOG_INFO, "driver", "started worker %s (pid %d): %s", w->name, (int)pid,
                 w->stages);
fail:
    return rc;
}

int vf_driver_run(vf_graph *g, const vf_run_opts *opts, vf_status *st)
{
    int rc = 0;
    vf_rundir rd;
    vf_super sv;
    void *zctx = NULL, *router = NULL;
    char *json = NULL, *part = NULL;
    vf_zap *zap = NULL;
    vf_curve ctl_curve;
    bool multi = opts && opts->world > 1, key_file = false;
    if (multi && opts->rank > 0) return vf_node_run(g, opts, st);
    bool super_ok = false, signals = false;
    vf_runlock locks[MAX_DIR_LOCKS];
    int nlocks = 0;
    memset(&rd, 0, sizeof rd);
    rd.log_fd = rd.metrics_fd = -1;
    memset(&sv, 0, sizeof sv);

    if (g->nworkers <= 0) VF_TRY(vf_graph_place(g, st));
    if (g->nstages == 0) VF_FAIL(st, VF_EUSAGE, "%s: the pipeline has no stages", g->script);
    /* The run key the workers derive their CURVE keys from (runtime/edge/curve.h): given
     * (a multi-node launch hands every node the same one) or made now. It reaches the
     * workers through the environment they inherit, readable by this user only. */
    const char *given = getenv("VFLOW_RUN_KEY");
    bool made_key = !given || !*given;
    if (made_key) {
        char key[VF_CURVE_KEY_HEX + 1];
        VF_TRY(vf_curve_new_key(key, st));
        setenv("VFLOW_RUN_KEY", key, 1);
        explicit_bzero(key, sizeof key);
    } else {
        vf_curve probe;
        VF_TRY(vf_curve_init(&probe, given, VF_CURVE_DRIVER, g->nworkers, "VFLOW_RUN_KEY", st));
        explicit_bzero(&probe, sizeof probe);
    }
    VF_TRY(vf_rundir_open(&rd, opts ? opts->run_dir : NULL, g->name, opts && opts->resume, st));
    if (multi) {
        /* the other nodes' drivers (identities nworkers + k) and every worker are the
         * control plane's peers */
        VF_TRY(vf_curve_init(&ctl_curve, getenv("VFLOW_RUN_KEY"), VF_CURVE_DRIVER, g->nworkers + opts->world,
                             "VFLOW_RUN_KEY", st));
        if (made_key) { /* no key from the launcher: the other ranks read it here (cluster.h) */
            VF_TRY(vf_runkey_write(rd.path, getenv("VFLOW_RUN_KEY"), st));
            key_file = true;
        }
    }
    VF_TRY(lock_stage_dirs(g, &rd, locks, &nlocks, st));
    json = vf_graph_to_json(g);
    if (!json) VF_FAIL(st, VF_ENOMEM, "driver: cannot serialise the graph");
    VF_TRY(vf_rundir_write(&rd, "graph.json", json, st));
    char graph_path[PATH_MAX + 16];
    vf_rundir_file(&rd, "graph.json", graph_path, sizeof graph_path);

    zctx = zmq_ctx_new();
    if (!zctx) VF_FAIL(st, VF_EEXTERNAL, "driver: zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    char ctl_ep[VF_SUN_PATH_MAX + 16];
    if (multi) {
        /* the meeting place: rank 0's control socket on the meeting address (what the other
         * ranks connect to), CURVE with the run's peers only (the ZAP handler runs before
         * the socket binds); data edges bind on opts->addr */
        snprintf(ctl_ep, sizeof ctl_ep, "tcp://%s:%d", opts->master_ip, opts->master_port);
        VF_TRY(vf_zap_start(zctx, &ctl_curve, &zap, st));
        VF_TRY(vf_ctl_router_open_curve(zctx, ctl_ep, &ctl_curve, &router, st));
    } else {
        snprintf(ctl_ep, sizeof ctl_ep, "ipc://%s/ctl", rd.sock_dir);
        VF_TRY(vf_ctl_router_open(zctx, ctl_ep, &router, st));
    }
    VF_TRY(vf_super_init(&sv, g, &rd, router, opts && opts->progress_tty, st));
    super_ok = true;
    if (multi) {
        char hash[VF_GRAPH_HASH_HEX + 1];
        VF_TRY(vf_graph_hash(g, hash, st));
        size_t n = strlen(json) + VF_GRAPH_HASH_HEX + 16;
        if (!(part = malloc(n))) VF_FAIL(st, VF_ENOMEM, "driver: out of memory");
        snprintf(part, n, "hash %s\n%s", hash, json);
        VF_TRY(vf_super_nodes(&sv, opts->world, part, strlen(part), st));
        vf_super_log(&sv, VF_LOG_INFO, "driver", "coordinating %d nodes at %s (graph %.16s)", opts->world, ctl_ep,
                     hash);
    }
    vf_super_log(&sv, VF_LOG_INFO, "driver", "run %s (%s): %d stages, %d edges, %d workers; run dir %s",
                 g->name, g->script, g->nstages, g->nedges, g->nworkers, rd.path);
    if (rd.lock.stale[0])
        vf_super_log(&sv, VF_LOG_WARN, "driver",
                     "took over the lock of %s left by a run that ended without releasing it (%s)", rd.path,
                     rd.lock.stale);
    for (int i = 0; i < nlocks; i++) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", locks[i].path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        if (locks[i].stale[0])
            vf_super_log(&sv, VF_LOG_WARN, "driver",
                         "took over the lock of %s left by a run that ended without releasing it (%s)", dir,
                         locks[i].stale);
        else
            vf_super_log(&sv, VF_LOG_INFO, "driver", "holding the lock of %s for this run", dir);
    }
    if (rd.sock_tmp)
        vf_super_log(&sv, VF_LOG_INFO, "driver", "run dir path too long for ipc sockets; using %s",
                     rd.sock_dir);
    if (!(opts && opts->no_tensorboard) && !g->no_tensorboard) {
        /* the event file is a view of metrics.jsonl: a run goes on without it */
        vf_status tst = {0};
        if (vf_tb_log_open(&sv.mon.tb, g, rd.path, opts && opts->resume, &tst) < 0)
            vf_super_log(&sv, VF_LOG_WARN, "driver", "no TensorBoard event file: %s", tst.msg);
        vf_tb_log_set_warn(sv.mon.tb, tb_warn, &sv);
    }
    VF_TRY(vf_super_signals_install(st));
    signals = true;
    const char *resume = !opts || !opts->resume ? NULL : opts->resume_auto ? "--resume=auto" : "--resume";
    vf_spawn_args sa = {.graph_path = graph_path, .run_dir = rd.path, .sock_dir = rd.sock_dir, .ctl_ep = ctl_ep,
                        .bind = multi ? opts->addr : NULL, .secure = multi, .resume = resume};
    for (int i = 0; i < g->nworkers; i++)
        if (g->workers[i].node == 0) VF_TRY(spawn_worker(&sv, i, &sa, st));

    rc = vf_super_run(&sv, st);
    vf_super_end_nodes(&sv, vf_exit_code(rc), 3000);
    if (zap && vf_zap_refused(zap) > 0)
        vf_super_log(&sv, VF_LOG_WARN, "driver", "control plane: refused %lld handshake(s) from outside the run",
                     (long long)vf_zap_refused(zap));
    const char *status = rc == 0 ? "done" : rc == VF_ESTOPPED ? "interrupted" : "failed";
    vf_monitor_final(&sv.mon, status, rc == 0 ? "" : st->msg);
    vf_super_log(&sv, rc == 0 ? VF_LOG_INFO : VF_LOG_ERROR, "driver", "run %s after %.2f s%s%s", status,
                 vf_monitor_elapsed(&sv.mon), rc == 0 ? "" : ": ", rc == 0 ? "" : st->msg);
    char title[PATH_MAX + 256];
    snprintf(title, sizeof title, "vflow: run %s %s in %.2f s (run dir %s)", g->name, status,
             vf_monitor_elapsed(&sv.mon), rd.path);
    vf_monitor_summary(&sv.mon, stdout, title);
    fflush(stdout);
    goto out;
fail:
    if (super_ok) {
        vf_super_log(&sv, VF_LOG_ERROR, "driver", "%s", st->msg);
        vf_monitor_final(&sv.mon, "failed", st->msg);
        vf_super_end_nodes(&sv, vf_exit_code(rc), 1000);
    }
out:
    if (super_ok) {
        vf_super_kill_all(&sv);
        vf_super_fini(&sv);
    }
    if (signals) vf_super_signals_restore();
    vf_ctl_close(router, 0);
    if (zap) vf_zap_stop(zap);
    if (zctx) zmq_ctx_term(zctx);
    if (key_file) {
        char kp[PATH_MAX + 16];
        vf_rundir_file(&rd, "run.key", kp, sizeof kp);
        unlink(kp);
    }
    explicit_bzero(&ctl_curve, sizeof ctl_curve);
    free(part);
    for (int i = 0; i < nlocks; i++) vf_runlock_release(&locks[i]);
    vf_rundir_close(&rd);
    free(json);
    return rc;
}
