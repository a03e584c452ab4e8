/* supervise.c — the driver's supervision loop: control messages, signals, reaping,
 * heartbeats, deadlines, the first failure. See supervise.h. */
#include "runtime/driver/supervise.h"
#include "runtime/driver/ctl.h"
#include "runtime/core/obuf.h"
#include "runtime/edge/edge_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* ------------------------------------------------------------------ signals */

static volatile sig_atomic_t g_sigcount, g_firstsig;
static int g_sigpipe[2] = {-1, -1};
static struct sigaction g_old_int, g_old_term, g_old_pipe;

static void on_signal(int sig)
{
    int saved = errno;
    if (!g_firstsig) g_firstsig = sig;
    g_sigcount++;
    if (g_sigpipe[1] >= 0) {
        ssize_t r = write(g_sigpipe[1], "s", 1);
        (void)r;
    }
    errno = saved;
}

int vf_super_signals_install(vf_status *st)
{
    g_sigcount = 0;
    g_firstsig = 0;
    if (g_sigpipe[0] < 0 && pipe2(g_sigpipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "driver: pipe: %s", strerror(errno));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
    /* `vflow run ... | head` must not kill the driver (and with it every worker) on
     * its next progress line: a write to a closed pipe becomes EPIPE instead. */
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, &g_old_pipe);
    return 0;
}

void vf_super_signals_restore(void)
{
    sigaction(SIGINT, &g_old_int, NULL);
    sigaction(SIGTERM, &g_old_term, NULL);
    sigaction(SIGPIPE, &g_old_pipe, NULL);
    for (int i = 0; i < 2; i++) {
        if (g_sigpipe[i] >= 0) close(g_sigpipe[i]);
        g_sigpipe[i] = -1;
    }
}

/* ------------------------------------------------------------------ logging */

static const char *level_name(int level)
{
    static const char *const n[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    return level >= 0 && level <= 3 ? n[level] : "INFO";
}

/* to_tty: also show it on stderr (stage warnings and errors, driver warnings; the
 * driver's own errors end up in the final message instead). */
static void log_line(vf_super *sv, int level, const char *who, const char *text, bool to_tty)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char stamp[40];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    vf_obuf b;
    vf_obuf_init(&b);
    vf_obuf_printf(&b, "%s.%03ldZ %-5s [%s] %s", stamp, ts.tv_nsec / 1000000, level_name(level),
                   who, text);
    if (vf_obuf_ok(&b) && sv->rd->log_fd >= 0) vf_write_line(sv->rd->log_fd, b.s, b.len);
    vf_obuf_fini(&b);
    if (to_tty && level <= VF_LOG_WARN) {
        vf_progress_clear(&sv->prog);
        fprintf(stderr, "vflow: %s [%s] %s\n", level_name(level), who, text);
    }
}

void vf_super_log(vf_super *sv, int level, const char *who, const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    log_line(sv, level, who, text, level == VF_LOG_WARN);
}

/* ------------------------------------------------------------------ setup */

static int env_ms(const char *name, int def)
{
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : def;
}

int vf_super_init(vf_super *sv, vf_graph *g, vf_rundir *rd, void *router, bool tty,
                  vf_status *st)
{
    int rc = 0;
    memset(sv, 0, sizeof *sv);
    sv->g = g;
    sv->rd = rd;
    sv->router = router;
    sv->nw = g->nworkers;
    vf_progress_init(&sv->prog, stdout, tty);
    VF_TRY(vf_monitor_init(&sv->mon, g, rd->metrics_fd, st));
    sv->w = calloc((size_t)(sv->nw ? sv->nw : 1), sizeof *sv->w);
    sv->endpoints = calloc((size_t)(g->nedges ? g->nedges : 1), sizeof *sv->endpoints);
    if (!sv->w || !sv->endpoints) VF_FAIL(st, VF_ENOMEM, "driver: out of memory");
    for (int i = 0; i < sv->nw; i++) {
        vf_wproc *w = &sv->w[i];
        snprintf(w->name, sizeof w->name, "%s", g->workers[i].name);
        char rel[VF_NAME_MAX + 16];
        snprintf(rel, sizeof rel, "workers/%s.log", w->name);
        vf_rundir_file(rd, rel, w->logfile, sizeof w->logfile);
        size_t len = 0;
        for (int s = 0; s < g->nstages; s++) {
            if (g->stages[s].worker != i) continue;
            int n = snprintf(w->stages + len, sizeof w->stages - len, "%s%s", w->nstages ? ", " : "",
                             g->stages[s].name);
            if (n > 0 && (size_t)n < sizeof w->stages - len) len += (size_t)n;
            w->nstages++;
        }
    }
    sv->hb_timeout_ns = (int64_t)env_ms("VFLOW_HEARTBEAT_TIMEOUT_MS", 2000) * 1000000;
    sv->start_timeout_ns = (int64_t)env_ms("VFLOW_START_TIMEOUT_MS", 30000) * 1000000;
    sv->grace_ns = (int64_t)env_ms("VFLOW_GRACE_MS", 2000) * 1000000;
    sv->drain_timeout_ns = (int64_t)env_ms("VFLOW_DRAIN_TIMEOUT_MS", 30000) * 1000000;
    return 0;
fail:
    vf_super_fini(sv);
    return rc;
}

void vf_super_fini(vf_super *sv)
{
    if (sv->endpoints && sv->g)
        for (int e = 0; e < sv->g->nedges; e++) free(sv->endpoints[e]);
    free(sv->endpoints);
    free(sv->w);
    vf_monitor_fini(&sv->mon);
    sv->endpoints = NULL;
    sv->w = NULL;
}

/* ------------------------------------------------------------------ failure */

static void send_all(vf_super *sv, int type)
{
    for (int i = 0; i < sv->nw; i++)
        if (sv->w[i].pid > 0 && !sv->w[i].exited)
            vf_ctl_send(sv->router, sv->w[i].name, type, "", 0, 0);
}

static void begin_abort(vf_super *sv, const char *why)
{
    if (sv->state == VF_SUPER_ABORTING) return;
    vf_super_log(sv, VF_LOG_INFO, "driver", "aborting the run: %s", why);
    sv->state = VF_SUPER_ABORTING;
    sv->abort_deadline = vf_now_ns() + sv->grace_ns;
    send_all(sv, VF_CTL_ABORT);
}

/* The tail of a worker's stdout/stderr file (crash reports land there). */
static void file_tail(const char *path, int lines, vf_obuf *out)
{
    FILE *f = fopen(path, "re");
    if (!f) return;
    char buf[4096];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
    fseek(f, from, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    while (n && buf[n - 1] == '\n') buf[--n] = 0;
    if (!n) return;
    char *start = buf + n;
    int seen = 0;
    while (start > buf && seen < lines) {
        start--;
        if (*start == '\n') seen++;
    }
    if (*start == '\n') start++;
    for (char *line = start; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        vf_obuf_printf(out, "\n    %s", line);
        line = nl ? nl + 1 : NULL;
    }
}

static void add_context(vf_super *sv, int wi, vf_obuf *b)
{
    vf_wproc *w = &sv->w[wi];
    if (w->nring) {
        vf_obuf_printf(b, "\n  last log lines of %s:", w->name);
        for (int i = 0; i < w->nring; i++) vf_obuf_printf(b, "\n    %s", w->ring[i]);
    }
    vf_obuf tail;
    vf_obuf_init(&tail);
    file_tail(w->logfile, 6, &tail);
    if (tail.len) vf_obuf_printf(b, "\n  output of %s (%s):%s", w->name, w->logfile, vf_obuf_str(&tail));
    vf_obuf_fini(&tail);
}

/* Records the run's first failure (message = head + worker context) and aborts. */
static void fail_run(vf_super *sv, int code, int wi, const char *head)
{
    if (!sv->failed) {
        sv->failed = true;
        vf_obuf b;
        vf_obuf_init(&b);
        vf_obuf_puts(&b, head);
        if (wi >= 0) add_context(sv, wi, &b);
        vf_status_set(&sv->fail, code < 0 ? code : VF_EEXTERNAL, __FILE__, __LINE__, "%s",
                      vf_obuf_str(&b));
        vf_obuf_fini(&b);
        vf_super_log(sv, VF_LOG_ERROR, "driver", "%s", head);
    }
    begin_abort(sv, "a worker failed");
}

static void kill_worker(vf_super *sv, int wi, const char *why)
{
    vf_wproc *w = &sv->w[wi];
    if (w->pid <= 0 || w->exited) return;
    if (w->killed) return;
    vf_super_log(sv, VF_LOG_WARN, "driver", "killing worker %s (pid %d): %s", w->name, (int)w->pid, why);
    w->killed = true;
    kill(w->pid, SIGKILL);
}

void vf_super_kill_all(vf_super *sv)
{
    for (int i = 0; i < sv->nw; i++) {
        vf_wproc *w = &sv->w[i];
        if (w->pid <= 0 || w->exited) continue;
        kill(w->pid, SIGKILL);
        waitpid(w->pid, &w->wstatus, 0);
        vf_shm_sweep(w->pid);
        w->exited = true;
    }
}

/* ------------------------------------------------------------------ messages */

static int worker_of(const vf_super *sv, const char *ident)
{
    for (int i = 0; i < sv->nw; i++)
        if (strcmp(sv->w[i].name, ident) == 0) return i;
    return -1;
}

static void ring_add(vf_wproc *w, const char *line)
{
    if (w->nring == VF_WORKER_LOG_RING) {
        memmove(w->ring[0], w->ring[1], sizeof w->ring[0] * (VF_WORKER_LOG_RING - 1));
        w->nring--;
    }
    snprintf(w->ring[w->nring++], sizeof w->ring[0], "%s", line);
}

static void send_go(vf_super *sv)
{
    vf_obuf b;
    vf_obuf_init(&b);
    for (int e = 0; e < sv->g->nedges; e++)
        if (sv->endpoints[e]) vf_obuf_printf(&b, "edge %d %s\n", e, sv->endpoints[e]);
    for (int i = 0; i < sv->nw; i++)
        vf_ctl_send(sv->router, sv->w[i].name, VF_CTL_GO, vf_obuf_str(&b), b.len, 1000);
    vf_obuf_fini(&b);
    vf_super_log(sv, VF_LOG_INFO, "driver", "all %d workers started; go", sv->nw);
}

static void on_hello(vf_super *sv, int wi, const char *payload)
{
    vf_wproc *w = &sv->w[wi];
    for (const char *line = payload; line && *line;) {
        int id;
        char ep[300];
        if (sscanf(line, "edge %d %299s", &id, ep) == 2 && id >= 0 && id < sv->g->nedges) {
            free(sv->endpoints[id]);
            sv->endpoints[id] = strdup(ep);
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    w->hello = true;
    vf_super_log(sv, VF_LOG_DEBUG, "driver", "worker %s (pid %d) is up", w->name, (int)w->pid);
    for (int i = 0; i < sv->nw; i++)
        if (!sv->w[i].hello) return;
    if (sv->state == VF_SUPER_STARTING) {
        sv->state = VF_SUPER_RUNNING;
        send_go(sv);
    } else if (sv->state == VF_SUPER_DRAINING) {
        send_all(sv, VF_CTL_STOP);
    }
}

static void on_log(vf_super *sv, int wi, const char *payload)
{
    int level = VF_LOG_INFO, stage = -1;
    const char *tab = strchr(payload, '\t');
    sscanf(payload, "%d %d", &level, &stage);
    const char *text = tab ? tab + 1 : payload;
    char who[2 * VF_NAME_MAX + 2];
    if (stage >= 0 && stage < sv->g->nstages)
        snprintf(who, sizeof who, "%s/%s", sv->w[wi].name, sv->g->stages[stage].name);
    else
        snprintf(who, sizeof who, "%s", sv->w[wi].name);
    log_line(sv, level, who, text, true);
    char line[256];
    snprintf(line, sizeof line, "%s [%s] %s", level_name(level), who, text);
    ring_add(&sv->w[wi], line);
}

static void on_done(vf_super *sv, int wi, const char *payload)
{
    int stage = -1;
    long long run_ns = 0;
    if (sscanf(payload, "%d %lld", &stage, &run_ns) < 1 || stage < 0 || stage >= sv->g->nstages ||
        sv->g->stages[stage].worker != wi)
        return;
    vf_mon_stage *ms = &sv->mon.stages[stage];
    if (ms->done) return;
    ms->done = true;
    ms->phase = VF_PHASE_DONE;
    ms->run_ns = run_ns;
    sv->w[wi].ndone++;
    vf_super_log(sv, VF_LOG_INFO, "driver", "stage %s done: %lld items in %.2f s", ms->name,
                 (long long)vf_mon_items(ms), run_ns * 1e-9);
}

static void on_fail(vf_super *sv, int wi, const char *payload)
{
    int stage = -1, code = VF_EEXTERNAL;
    sscanf(payload, "%d %d", &stage, &code);
    const char *tab = strchr(payload, '\t');
    const char *msg = tab ? tab + 1 : "(no message)";
    char head[2048];
    if (stage >= 0 && stage < sv->g->nstages && sv->g->stages[stage].worker == wi) {
        sv->mon.stages[stage].phase = VF_PHASE_FAILED;
        snprintf(head, sizeof head, "stage %s (%s, worker %s) failed: %s", sv->g->stages[stage].name,
                 sv->g->stages[stage].kind, sv->w[wi].name, msg);
    } else {
        snprintf(head, sizeof head, "worker %s (stages: %s) failed: %s", sv->w[wi].name,
                 sv->w[wi].stages, msg);
    }
    fail_run(sv, code, wi, head);
}

static void handle(vf_super *sv, const vf_ctl_msg *m)
{
    int wi = worker_of(sv, m->ident);
    if (wi < 0) return; /* not one of ours (a stale worker of an earlier run) */
    sv->w[wi].last_msg_ns = vf_now_ns();
    switch (m->type) {
    case VF_CTL_HELLO: on_hello(sv, wi, m->payload); break;
    case VF_CTL_BEAT: break;
    case VF_CTL_METRICS:
        vf_monitor_sample(&sv->mon, wi, m->payload);
        break;
    case VF_CTL_LOG: on_log(sv, wi, m->payload); break;
    case VF_CTL_ROW: {
        int stage = atoi(m->payload);
        const char *tab = strchr(m->payload, '\t');
        if (tab && stage >= 0 && stage < sv->g->nstages && sv->g->stages[stage].worker == wi)
            vf_monitor_event(&sv->mon, stage, tab + 1);
        break;
    }
    case VF_CTL_DONE: on_done(sv, wi, m->payload); break;
    case VF_CTL_FAIL: on_fail(sv, wi, m->payload); break;
    case VF_CTL_BYE:
        vf_super_log(sv, VF_LOG_DEBUG, "driver", "worker %s says bye (%s)", sv->w[wi].name, m->payload);
        break;
    }
}

/* ------------------------------------------------------------------ reaping */

static void describe_exit(int wstatus, char *buf, size_t n)
{
    if (WIFSIGNALED(wstatus)) {
        int sig = WTERMSIG(wstatus);
        const char *name = sigabbrev_np(sig);
        snprintf(buf, n, "killed by signal %d (SIG%s)%s", sig, name ? name : "?",
                 WCOREDUMP(wstatus) ? ", core dumped" : "");
    } else {
        snprintf(buf, n, "exited with code %d", WEXITSTATUS(wstatus));
    }
}

/* Reaps exited workers. The verdict waits up to VF_EXIT_SETTLE_MS: a worker's last
 * messages (done, failed, final metrics) may still sit in the driver's socket when
 * waitpid already reports the exit, and they make the better message. */
static void reap(vf_super *sv, int64_t now)
{
    for (int i = 0; i < sv->nw; i++) {
        vf_wproc *w = &sv->w[i];
        if (w->pid <= 0 || w->judged) continue;
        if (!w->exited) {
            int status;
            if (waitpid(w->pid, &status, WNOHANG) != w->pid) continue;
            vf_shm_sweep(w->pid); /* its edges' shared-memory names, if it could not */
            w->exited = true;
            w->wstatus = status;
            w->exit_ns = now;
            sv->mon.pids[i] = 0;
            char how[128];
            describe_exit(status, how, sizeof how);
            vf_super_log(sv, VF_LOG_DEBUG, "driver", "worker %s %s", w->name, how);
        }
        int status = w->wstatus;
        bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0 && w->ndone == w->nstages;
        /* killed by us: the reason was logged (and is the failure, if any) already */
        if (clean || w->killed || sv->failed || sv->state == VF_SUPER_ABORTING) {
            w->judged = true;
            continue;
        }
        if (now - w->exit_ns < (int64_t)VF_EXIT_SETTLE_MS * 1000000) continue;
        w->judged = true;
        /* stopped by our drain before it had started its stages */
        if (sv->state == VF_SUPER_DRAINING && WIFEXITED(status) && WEXITSTATUS(status) == 3) continue;
        char how[128], head[1024];
        describe_exit(status, how, sizeof how);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            snprintf(head, sizeof head, "worker %s (stages: %s) exited before its stages finished",
                     w->name, w->stages);
        else
            snprintf(head, sizeof head, "worker %s (stages: %s) %s", w->name, w->stages, how);
        fail_run(sv, VF_EEXTERNAL, i, head);
    }
}

static void check_deadlines(vf_super *sv, int64_t now)
{
    for (int i = 0; i < sv->nw; i++) {
        vf_wproc *w = &sv->w[i];
        if (w->pid <= 0 || w->exited) continue;
        char head[1024];
        if (!w->hello && now - w->spawn_ns > sv->start_timeout_ns) {
            snprintf(head, sizeof head, "worker %s (stages: %s) did not start within %.0f s", w->name,
                     w->stages, sv->start_timeout_ns * 1e-9);
            fail_run(sv, VF_ETIMEOUT, i, head);
            kill_worker(sv, i, "did not start");
        } else if (w->hello && now - w->last_msg_ns > sv->hb_timeout_ns) {
            snprintf(head, sizeof head,
                     "worker %s (stages: %s) sent no heartbeat for %.1f s (hung or stopped)", w->name,
                     w->stages, (now - w->last_msg_ns) * 1e-9);
            fail_run(sv, VF_ETIMEOUT, i, head);
            kill_worker(sv, i, "missed heartbeats");
        }
    }
    if (sv->state == VF_SUPER_DRAINING && now > sv->drain_deadline) {
        vf_super_log(sv, VF_LOG_WARN, "driver", "drain did not finish within %.0f s",
                     sv->drain_timeout_ns * 1e-9);
        begin_abort(sv, "drain timed out");
    }
    if (sv->state == VF_SUPER_ABORTING && now > sv->abort_deadline) {
        for (int i = 0; i < sv->nw; i++) kill_worker(sv, i, "still running after the abort grace period");
        sv->abort_deadline = now + sv->grace_ns; /* SIGKILL cannot be ignored: reaped next turn */
    }
    /* Every stage finished but a worker does not exit: a shutdown bug, not a failure of
     * the run (its data is complete). */
    int done = 0;
    for (int s = 0; s < sv->g->nstages; s++) done += sv->mon.stages[s].done;
    if (done == sv->g->nstages && sv->state != VF_SUPER_ABORTING) {
        if (!sv->all_done_ns) sv->all_done_ns = now;
        if (now - sv->all_done_ns > 2 * sv->grace_ns)
            for (int i = 0; i < sv->nw; i++) kill_worker(sv, i, "did not exit after its stages finished");
    }
}

static void handle_signals(vf_super *sv)
{
    char buf[16];
    while (g_sigpipe[0] >= 0 && read(g_sigpipe[0], buf, sizeof buf) > 0) {
    }
    int count = g_sigcount;
    if (count >= 1 && !sv->interrupted) {
        sv->interrupted = g_firstsig;
        vf_progress_clear(&sv->prog);
        vf_super_log(sv, VF_LOG_WARN, "driver", "%s: draining (sources stop, the rest flushes); again to abort",
                     g_firstsig == SIGTERM ? "SIGTERM" : "SIGINT");
        if (sv->state == VF_SUPER_STARTING || sv->state == VF_SUPER_RUNNING) {
            sv->state = VF_SUPER_DRAINING;
            sv->drain_deadline = vf_now_ns() + sv->drain_timeout_ns;
            send_all(sv, VF_CTL_STOP);
        }
    }
    if (count >= 2) begin_abort(sv, "second signal");
}

/* ------------------------------------------------------------------ loop */

int vf_super_run(vf_super *sv, vf_status *st)
{
    int64_t last_turn = vf_now_ns();
    for (;;) {
        zmq_pollitem_t items[2] = {{sv->router, 0, ZMQ_POLLIN, 0}, {NULL, g_sigpipe[0], ZMQ_POLLIN, 0}};
        zmq_poll(items, g_sigpipe[0] >= 0 ? 2 : 1, VF_SUPER_POLL_MS);
        int64_t now = vf_now_ns();
        /* If the driver itself was not scheduled for a while (suspended, swapped), the
         * workers' silence is ours: restart their heartbeat clocks. */
        if (now - last_turn > sv->hb_timeout_ns / 2)
            for (int i = 0; i < sv->nw; i++) sv->w[i].last_msg_ns = now;
        last_turn = now;
        handle_signals(sv);
        vf_ctl_msg m;
        for (int k = 0; k < 10000 && vf_ctl_recv(sv->router, true, &m) == 1; k++) {
            handle(sv, &m);
            vf_ctl_msg_fini(&m);
        }
        reap(sv, vf_now_ns());
        check_deadlines(sv, vf_now_ns());
        vf_progress_tick(&sv->prog, &sv->mon, false);
        int alive = 0;
        for (int i = 0; i < sv->nw; i++) alive += sv->w[i].pid > 0 && !sv->w[i].judged;
        if (!alive) break;
    }
    /* Messages sent just before the last exit (final metrics, done) */
    vf_ctl_msg m;
    while (vf_ctl_recv(sv->router, true, &m) == 1) {
        handle(sv, &m);
        vf_ctl_msg_fini(&m);
    }
    vf_progress_clear(&sv->prog);
    if (sv->failed) {
        *st = sv->fail;
        return sv->fail.code;
    }
    int done = 0;
    for (int s = 0; s < sv->g->nstages; s++) done += sv->mon.stages[s].done;
    const char *sig = sv->interrupted == SIGTERM ? "SIGTERM" : "SIGINT";
    if (sv->interrupted && sv->state == VF_SUPER_ABORTING)
        return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__,
                             "interrupted by %s: aborted (%d of %d stages finished)", sig, done,
                             sv->g->nstages);
    if (sv->interrupted)
        return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__,
                             "interrupted by %s: drained cleanly (%d of %d stages flushed their streams)",
                             sig, done, sv->g->nstages);
    if (done != sv->g->nstages)
        return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__,
                             "every worker exited but only %d of %d stages finished", done,
                             sv->g->nstages);
    return 0;
}
