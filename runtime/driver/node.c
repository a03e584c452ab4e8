/* node.c — the driver of a node other than rank 0 in a multi-node run (vf_node_run).
 *
 * It meets the coordinator at the meeting address (a DEALER named "node<k>", CURVE with
 * the run key), sends its join until the part arrives (bounded: a wrong address is a
 * clear error, not a hang), checks the graph's hash against its own resolution of the
 * script and --set values (a mismatch is refused: exit 2 on both sides), then starts
 * the workers placed on this node and watches them: their exits go to the coordinator,
 * which supervises the run as a whole (the workers' control sockets reach it directly).
 * Heartbeats run both ways; a coordinator silent for longer than the heartbeat timeout
 * (its node died or the link is down) makes this driver kill its workers and exit 1, so
 * that a lost node never leaves processes behind. SIGINT/SIGTERM here asks the
 * coordinator to drain the run; a second one kills this node's workers.
 *
 * Files: worker logs in <run dir>/workers/ (the run dir every rank is given; the
 * coordinator quotes their tails in its failure message when the run dir is shared),
 * the graph and the ipc sockets of this node's workers in a private /tmp/vflow-XXXXXX.
 */
#include "runtime/driver/launch.h"
#include "runtime/driver/cluster.h"
#include "runtime/driver/ctl.h"
#include "runtime/driver/rundir.h"
#include "runtime/core/stage.h"
#include "runtime/edge/curve.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define NODE_POLL_MS 50
#define JOIN_EVERY_MS 500
#define KEY_REREAD_MS 2000

typedef struct lworker {
    int wi;
    pid_t pid;
    bool exited;
} lworker;

typedef struct node {
    vf_graph *g;
    const vf_run_opts *o;
    int k;
    char run_dir[PATH_MAX];
    char tmp[64];
    bool tmp_made;
    char ctl_ep[128];
    char key[VF_CURVE_KEY_HEX + 1];
    bool key_from_file;
    void *zctx, *dealer;
    int nl;
    lworker *lw;
    int64_t hb_timeout_ns, join_timeout_ns;
} node;

static volatile sig_atomic_t g_node_sig, g_node_nsig;
static void on_node_signal(int sig)
{
    g_node_sig = sig;
    g_node_nsig++;
}

static int env_ms(const char *name, int def)
{
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : def;
}

static void nlog(const node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void nlog(const node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "vflow: node %d: ", n->k);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The run key: the launcher's VFLOW_RUN_KEY, else the coordinator's key file. */
static int get_key(node *n, int64_t deadline, vf_status *st)
{
    const char *env = getenv("VFLOW_RUN_KEY");
    if (env && *env) {
        snprintf(n->key, sizeof n->key, "%s", env);
        return 0;
    }
    n->key_from_file = true;
    for (;;) {
        int r = vf_runkey_read(n->run_dir, n->key, st);
        if (r < 0) return r;
        if (r == 1) {
            setenv("VFLOW_RUN_KEY", n->key, 1); /* this node's workers inherit it */
            return 0;
        }
        if (vf_now_ns() > deadline)
            return vf_status_set(st, VF_ETIMEOUT, __FILE__, __LINE__,
                                 "node %d: no coordinator answered at %s: no run key within %.0f s (neither "
                                 "VFLOW_RUN_KEY nor %s/run.key, which rank 0 writes in the run dir every rank "
                                 "must share); is rank 0 running, with the same --run-dir?",
                                 n->k, n->ctl_ep, n->join_timeout_ns * 1e-9, n->run_dir);
        usleep(100 * 1000);
    }
}

static int open_dealer(node *n, vf_status *st)
{
    int rc = 0;
    vf_curve cv;
    char ident[32];
    snprintf(ident, sizeof ident, "node%d", n->k);
    vf_ctl_close(n->dealer, 0);
    n->dealer = NULL;
    VF_TRY(vf_curve_init(&cv, n->key, n->g->nworkers + n->k, n->g->nworkers + n->o->world, "the run key", st));
    rc = vf_ctl_dealer_open_curve(n->zctx, n->ctl_ep, ident, &cv, &n->dealer, st);
fail:
    explicit_bzero(&cv, sizeof cv);
    return rc;
}

/* Joins until the part arrives. 0 with *part (owned), or an error. */
static int meet(node *n, char **part, vf_status *st)
{
    int rc = 0;
    int64_t start = vf_now_ns(), deadline = start + n->join_timeout_ns, next_join = 0, next_key = 0;
    char join[160];
    snprintf(join, sizeof join, "node %d addr %s pid %d", n->k, n->o->addr, (int)getpid());
    VF_TRY(get_key(n, deadline, st));
    VF_TRY(open_dealer(n, st));
    next_key = start + (int64_t)KEY_REREAD_MS * 1000000;
    while (vf_now_ns() < deadline) {
        int64_t now = vf_now_ns();
        if (g_node_nsig) VF_FAIL(st, VF_ESTOPPED, "node %d: interrupted before the run started", n->k);
        if (now >= next_join) {
            vf_ctl_send(n->dealer, NULL, VF_CTL_JOIN, join, strlen(join), 0);
            next_join = now + (int64_t)JOIN_EVERY_MS * 1000000;
        }
        if (n->key_from_file && now >= next_key) {
            /* a key file from an earlier run fails the handshake: read it again */
            char k2[VF_CURVE_KEY_HEX + 1];
            vf_status kst = {0};
            if (vf_runkey_read(n->run_dir, k2, &kst) == 1 && strcmp(k2, n->key) != 0) {
                snprintf(n->key, sizeof n->key, "%s", k2);
                setenv("VFLOW_RUN_KEY", n->key, 1);
                VF_TRY(open_dealer(n, st));
            }
            explicit_bzero(k2, sizeof k2);
            next_key = now + (int64_t)KEY_REREAD_MS * 1000000;
        }
        zmq_pollitem_t it = {n->dealer, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, NODE_POLL_MS);
        vf_ctl_msg m;
        while (vf_ctl_recv(n->dealer, false, &m) == 1) {
            if (m.type == VF_CTL_PART) {
                *part = m.payload;
                m.payload = NULL;
                vf_ctl_msg_fini(&m);
                return 0;
            }
            int type = m.type;
            vf_ctl_msg_fini(&m);
            if (type == VF_CTL_END) VF_FAIL(st, VF_EEXTERNAL, "node %d: the coordinator ended the run", n->k);
        }
    }
    VF_FAIL(st, VF_ETIMEOUT,
            "node %d: no coordinator answered at %s within %.0f s: is MASTER_ADDR/MASTER_PORT (or the launcher's "
            "node list) right, is rank 0 running, and does every rank have the same run key?",
            n->k, n->ctl_ep, n->join_timeout_ns * 1e-9);
fail:
    return rc;
}

static void send_fail(node *n, int code, const char *msg)
{
    char buf[2200];
    snprintf(buf, sizeof buf, "%d\t%.2100s", code, msg);
    vf_ctl_send(n->dealer, NULL, VF_CTL_FAIL, buf, strlen(buf), 1000);
}

static int start_workers(node *n, const char *json, vf_status *st)
{
    int rc = 0;
    char graph_path[PATH_MAX];
    snprintf(graph_path, sizeof graph_path, "%s/graph.json", n->tmp);
    int fd = open(graph_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) VF_FAIL(st, VF_EIO, "node %d: %s: %s", n->k, graph_path, strerror(errno));
    size_t len = strlen(json);
    bool ok = write(fd, json, len) == (ssize_t)len;
    close(fd);
    if (!ok) VF_FAIL(st, VF_EIO, "node %d: cannot write %s", n->k, graph_path);
    char logs[PATH_MAX + 16];
    snprintf(logs, sizeof logs, "%s/workers", n->run_dir);
    if (vf_mkdir_p(logs) < 0) VF_FAIL(st, VF_EIO, "node %d: cannot create %s", n->k, logs);
    n->lw = calloc((size_t)(n->g->nworkers ? n->g->nworkers : 1), sizeof *n->lw);
    if (!n->lw) VF_FAIL(st, VF_ENOMEM, "out of memory");
    const char *resume = !n->o->resume ? NULL : n->o->resume_auto ? "--resume=auto" : "--resume";
    vf_spawn_args sa = {.graph_path = graph_path, .run_dir = n->run_dir, .sock_dir = n->tmp, .ctl_ep = n->ctl_ep,
                        .bind = n->o->addr, .secure = true, .resume = resume};
    for (int i = 0; i < n->g->nworkers; i++) {
        if (n->g->workers[i].node != n->k) continue;
        char logfile[PATH_MAX + VF_NAME_MAX + 32];
        snprintf(logfile, sizeof logfile, "%s/%s.log", logs, n->g->workers[i].name);
        lworker *l = &n->lw[n->nl];
        l->wi = i;
        VF_TRY(vf_spawn_worker(i, &sa, logfile, &l->pid, st));
        n->nl++;
        fprintf(stderr, "vflow: node %d: started worker %s (pid %d)\n", n->k, n->g->workers[i].name, (int)l->pid);
    }
fail:
    return rc;
}

static void kill_local(node *n, int wi)
{
    for (int i = 0; i < n->nl; i++)
        if ((wi < 0 || n->lw[i].wi == wi) && !n->lw[i].exited) kill(n->lw[i].pid, SIGKILL);
}

/* Reaps exited workers and reports them. Returns how many are still running. */
static int reap_local(node *n)
{
    int alive = 0;
    for (int i = 0; i < n->nl; i++) {
        lworker *l = &n->lw[i];
        if (l->exited) continue;
        int status;
        if (waitpid(l->pid, &status, WNOHANG) == l->pid) {
            l->exited = true;
            char buf[48];
            snprintf(buf, sizeof buf, "%d %d", l->wi, status);
            vf_ctl_send(n->dealer, NULL, VF_CTL_EXITED, buf, strlen(buf), 1000);
        } else {
            alive++;
        }
    }
    return alive;
}

/* Watches the workers until the coordinator's end. Returns the exit code. */
static int watch(node *n)
{
    int64_t last_heard = vf_now_ns(), next_beat = 0, end_at = 0;
    int code = -1, seen_sigs = 0;
    for (;;) {
        zmq_pollitem_t it = {n->dealer, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, NODE_POLL_MS);
        int64_t now = vf_now_ns();
        if (g_node_nsig != seen_sigs) {
            seen_sigs = g_node_nsig;
            if (seen_sigs == 1) {
                char s[16];
                snprintf(s, sizeof s, "%d", (int)g_node_sig);
                vf_ctl_send(n->dealer, NULL, VF_CTL_INTR, s, strlen(s), 0);
                nlog(n, "signal %d: asking the coordinator to drain the run", (int)g_node_sig);
            } else {
                kill_local(n, -1);
            }
        }
        vf_ctl_msg m;
        while (vf_ctl_recv(n->dealer, false, &m) == 1) {
            last_heard = now;
            if (m.type == VF_CTL_KILL) kill_local(n, atoi(m.payload));
            else if (m.type == VF_CTL_END && code < 0) {
                code = atoi(m.payload);
                end_at = now;
            }
            vf_ctl_msg_fini(&m);
        }
        int alive = reap_local(n);
        if (now >= next_beat) {
            vf_ctl_send(n->dealer, NULL, VF_CTL_BEAT, "", 0, 0);
            next_beat = now + (int64_t)VF_CTL_BEAT_MS * 1000000;
        }
        if (code >= 0) {
            if (!alive) return code;
            if (now - end_at > 2 * n->hb_timeout_ns) kill_local(n, -1); /* the run is over: no stragglers */
            continue;
        }
        if (now - last_heard > n->hb_timeout_ns) {
            nlog(n, "lost the coordinator at %s: nothing heard for %.1f s; stopping this node's workers", n->ctl_ep,
                 (now - last_heard) * 1e-9);
            kill_local(n, -1);
            while (reap_local(n)) usleep(20 * 1000);
            return 1;
        }
    }
}

int vf_node_run(vf_graph *g, const vf_run_opts *o, vf_status *st)
{
    int rc = 0;
    node nd, *n = &nd;
    char *part = NULL;
    struct sigaction sa, old_int, old_term;
    memset(n, 0, sizeof *n);
    n->g = g;
    n->o = o;
    n->k = o->rank;
    n->hb_timeout_ns = (int64_t)env_ms("VFLOW_HEARTBEAT_TIMEOUT_MS", 2000) * 1000000;
    n->join_timeout_ns = (int64_t)env_ms("VFLOW_JOIN_TIMEOUT_MS", 60000) * 1000000;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_node_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    signal(SIGPIPE, SIG_IGN);
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s", o->run_dir ? o->run_dir : "");
    if (!rel[0]) snprintf(rel, sizeof rel, "runs/%s", g->name);
    if (vf_mkdir_p(rel) < 0 || !realpath(rel, n->run_dir))
        VF_FAIL(st, VF_EBADINPUT, "node %d: run dir %s: %s", n->k, rel, strerror(errno));
    snprintf(n->ctl_ep, sizeof n->ctl_ep, "tcp://%s:%d", o->master_ip, o->master_port);
    snprintf(n->tmp, sizeof n->tmp, "/tmp/vflow-XXXXXX");
    if (!mkdtemp(n->tmp)) VF_FAIL(st, VF_EIO, "node %d: mkdtemp: %s", n->k, strerror(errno));
    n->tmp_made = true;
    if (!(n->zctx = zmq_ctx_new())) VF_FAIL(st, VF_EEXTERNAL, "node %d: zmq_ctx_new", n->k);
    fprintf(stderr, "vflow: node %d of %d (%s): meeting the coordinator at %s\n", n->k, o->world, o->addr, n->ctl_ep);
    VF_TRY(meet(n, &part, st));
    if (o->refusal) {
        send_fail(n, o->refusal->code, o->refusal->msg);
        *st = *o->refusal;
        rc = st->code;
        goto fail;
    }

    char mine[VF_GRAPH_HASH_HEX + 1], theirs[VF_GRAPH_HASH_HEX + 1] = "";
    VF_TRY(vf_graph_hash(g, mine, st));
    const char *nl = strchr(part, '\n');
    if (sscanf(part, "hash %64s", theirs) != 1 || !nl)
        VF_FAIL(st, VF_EEXTERNAL, "node %d: the coordinator's part is malformed", n->k);
    if (strcmp(mine, theirs) != 0) {
        char msg[1400];
        snprintf(msg, sizeof msg,
                 "refused the graph: rank 0 resolved graph %.16s, this node resolved %.16s from %s and its --set "
                 "values; every rank must run the same script (by the same path) with the same --set values and "
                 "the same vflow",
                 theirs, mine, g->script);
        send_fail(n, VF_EUSAGE, msg);
        VF_FAIL(st, VF_EUSAGE, "node %d: %s", n->k, msg);
    }
    rc = start_workers(n, nl + 1, st);
    if (rc < 0) {
        send_fail(n, rc, st->msg);
        goto fail;
    }
    int code = watch(n);
    if (code != 0)
        rc = vf_status_set(st, code == 2 ? VF_EUSAGE : VF_EEXTERNAL, __FILE__, __LINE__,
                           "node %d: the run failed (rank 0's run.log says why)", n->k);
    else
        fprintf(stderr, "vflow: node %d: run done\n", n->k);
fail:
    if (n->dealer) {
        char c[16];
        snprintf(c, sizeof c, "%d", vf_exit_code(rc));
        vf_ctl_send(n->dealer, NULL, VF_CTL_BYE, c, strlen(c), 500);
        vf_ctl_close(n->dealer, 500);
    }
    if (n->lw) {
        kill_local(n, -1);
        for (int i = 0; i < n->nl; i++)
            if (!n->lw[i].exited) waitpid(n->lw[i].pid, NULL, 0);
    }
    if (n->zctx) zmq_ctx_term(n->zctx);
    if (n->tmp_made) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/graph.json", n->tmp);
        unlink(p);
        /* the workers' ipc sockets */
        for (int id = 0; id < g->nedges; id++) {
            snprintf(p, sizeof p, "%s/e%d", n->tmp, id);
            unlink(p);
        }
        rmdir(n->tmp);
    }
    explicit_bzero(n->key, sizeof n->key);
    free(part);
    free(n->lw);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}
