/* worker.c — `vflow __worker`: one OS process hosting some stages of a run.
 *
 * The driver (launch.c) fork+execs this with the run's graph.json and the worker's
 * index. The worker:
 *   1. loads the resolved graph and instantiates the stages placed on it;
 *   2. opens the receiving end of every edge that ends here (zmq ends bind) and says
 *      hello to the driver with the endpoints actually bound (tcp "*" ports);
 *   3. waits for "go" with every zmq endpoint of the run, opens its sending ends and
 *      groups ends into ports;
 *   4. runs each stage on its own thread (its memory account current there): init, run,
 *      then vf_close on all its ports and vf_port_drain on its outputs;
 *   5. meanwhile the main thread is the control thread: heartbeats, metrics, log lines
 *      and event rows queued by stage threads, done/failed per stage, and the driver's
 *      stop (drain: vf_stopping becomes true) and abort (data-plane stop flag);
 *   6. says bye and exits: 0 all stages done, 1 a stage failed, 3 stopped by an abort.
 * Protocol: ctl.h. Nothing here blocks without a timeout: waits poll at most 50 ms.
 */
#include "runtime/driver/launch.h"
#include "runtime/core/alloc.h"
#include "runtime/edge/chan.h"
#include "runtime/driver/ctl.h"
#include "runtime/driver/metrics.h"
#include "runtime/core/obuf.h"
#include "runtime/core/stage.h"
#include "runtime/edge/curve.h"
#include "runtime/edge/transport_zmq.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define POLL_MS 50
#define METRICS_MS 1000
#define GO_TIMEOUT_MS 120000   /* the driver waits for the slowest worker's hello */
#define ABORT_JOIN_MS 3000     /* stage threads that ignore the stop flag longer are left */
#define QUEUE_MAX 4096         /* log lines / rows waiting for the control thread */

typedef struct wstage {
    vf_stage *s;
    const vf_gstage *gs;
    pthread_t th;
    bool started, joined, reported;
    atomic_bool finished;
    int nports;
    vf_port *ports[VF_MAX_PORTS];
} wstage;

typedef struct qmsg {
    struct qmsg *next;
    int type;
    size_t n;
    char payload[];
} qmsg;

typedef struct worker {
    vf_graph *g;
    int self;
    const char *run_dir, *sock_dir, *ctl_ep;
    const char *bind;                  /* tcp receivers bind this address (--bind; loopback) */
    void *zctx, *dealer;
    vf_chan_hub *hub;
    int nst;
    wstage *st;
    vf_edge_end **ends_in, **ends_out; /* per graph edge; owned until attached */
    char **endpoints;                  /* per graph edge: where its receiver bound */
    atomic_bool stopping;              /* drain or abort: vf_stopping() */
    bool aborting;
    bool resume;                       /* --resume among our arguments: vf_resuming() */
    bool resume_auto;                  /* --resume=auto: vf_resume_auto() */
    bool final_metrics_sent;           /* sent after the last stage thread ended */
    vf_ctx_hooks hooks;
    pthread_mutex_t mu;
    qmsg *qhead, *qtail;
    int qlen;
    long dropped;
} worker;

/* ------------------------------------------------------------------ outbound queue */

static void enqueue(worker *w, int type, const char *payload, size_t n, bool must)
{
    qmsg *m = malloc(sizeof *m + n + 1);
    if (!m) return;
    m->next = NULL;
    m->type = type;
    m->n = n;
    memcpy(m->payload, payload, n);
    m->payload[n] = 0;
    pthread_mutex_lock(&w->mu);
    /* Log lines and rows are dropped (and counted) rather than let a chatty stage grow
     * the queue without bound when the driver cannot keep up. */
    if (!must && w->qlen >= QUEUE_MAX) {
        w->dropped++;
        pthread_mutex_unlock(&w->mu);
        free(m);
        return;
    }
    if (w->qtail)
        w->qtail->next = m;
    else
        w->qhead = m;
    w->qtail = m;
    w->qlen++;
    pthread_mutex_unlock(&w->mu);
}

static void hook_log(void *user, vf_stage *s, int level, const char *text)
{
    worker *w = user;
    vf_obuf b;
    vf_obuf_init(&b);
    vf_obuf_printf(&b, "%d %d\t%s", level, s ? s->index : -1, text);
    if (vf_obuf_ok(&b)) enqueue(w, VF_CTL_LOG, b.s, b.len, level == VF_LOG_ERROR);
    vf_obuf_fini(&b);
}

static void hook_row(void *user, vf_stage *s, const char *json)
{
    worker *w = user;
    vf_obuf b;
    vf_obuf_init(&b);
    vf_obuf_printf(&b, "%d\t%s", s->index, json);
    if (vf_obuf_ok(&b)) enqueue(w, VF_CTL_ROW, b.s, b.len, false);
    vf_obuf_fini(&b);
}

/* Sends queued messages; stops at the first that does not fit (HWM) to keep order. */
static void flush_queue(worker *w, int timeout_ms)
{
    for (;;) {
        pthread_mutex_lock(&w->mu);
        qmsg *m = w->qhead;
        pthread_mutex_unlock(&w->mu);
        if (!m) return;
        if (vf_ctl_send(w->dealer, NULL, m->type, m->payload, m->n, timeout_ms) == VF_ETIMEOUT)
            return;
        pthread_mutex_lock(&w->mu);
        w->qhead = m->next;
        if (!w->qhead) w->qtail = NULL;
        w->qlen--;
        pthread_mutex_unlock(&w->mu);
        free(m);
    }
}

static void wlog(worker *w, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void wlog(worker *w, int level, const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (w->dealer)
        hook_log(w, NULL, level, text);
    else
        fprintf(stderr, "vflow worker %d: %s\n", w->self, text);
}

/* ------------------------------------------------------------------ stage threads */

static void *stage_main(void *arg)
{
    wstage *ws = arg;
    vf_stage *s = ws->s;
    vf_status st = {0};
    int rc = 0;
    vf_account_set_current(s->account);
    s->t_start_ns = vf_now_ns();
    atomic_store(&s->phase, VF_PHASE_INIT);
    if (s->ops->init) rc = s->ops->init(s, s->params, &st);
    if (rc >= 0) {
        atomic_store(&s->phase, VF_PHASE_RUN);
        rc = s->ops->run(s, &s->ctx, &st);
    }
    if (rc >= 0) {
        /* End of stream on every output, "nobody reads" on every input, then wait until
         * the receivers in other processes have everything: only then is this stage done
         * (a process that exits earlier would lose what sits in its socket buffers). */
        for (int i = 0; i < ws->nports && rc >= 0; i++) rc = vf_close(ws->ports[i], &st);
        for (int i = 0; i < ws->nports && rc >= 0; i++)
            if (vf_port_direction(ws->ports[i]) == VF_PORT_OUT)
                rc = vf_port_drain(ws->ports[i], -1, &st);
    }
    if (s->ops->fini) s->ops->fini(s);
    s->t_end_ns = vf_now_ns();
    if (rc >= 0) {
        atomic_store(&s->phase, VF_PHASE_DONE);
    } else if (rc == VF_ESTOPPED && vf_runtime_stopping()) {
        atomic_store(&s->phase, VF_PHASE_STOPPED);
    } else {
        if (!st.code) vf_status_set(&st, rc, __FILE__, __LINE__, "%s", vf_strerror(rc));
        s->status = st;
        atomic_store(&s->phase, VF_PHASE_FAILED);
    }
    vf_account_set_current(NULL);
    atomic_store(&ws->finished, true);
    return NULL;
}

/* ------------------------------------------------------------------ messages */

static void send_metrics(worker *w)
{
    vf_obuf b;
    vf_obuf_init(&b);
    int64_t now = vf_now_ns();
    vf_obuf_printf(&b, "t %lld\n", (long long)now);
    for (int i = 0; i < w->nst; i++) {
        wstage *ws = &w->st[i];
        vf_stage *s = ws->s;
        int64_t in = 0, out = 0, bin = 0, bout = 0, blocked = 0, dropped = 0;
        for (int p = 0; p < ws->nports; p++) {
            vf_port_stats ps;
            vf_port_get_stats(ws->ports[p], &ps);
            blocked += ps.blocked_ns;
            if (vf_port_direction(ws->ports[p]) == VF_PORT_IN) {
                in += ps.items;
                bin += ps.bytes;
            } else {
                out += ps.items;
                bout += ps.bytes;
                dropped += ps.dropped;
            }
        }
        int phase = atomic_load(&s->phase);
        int64_t t0 = atomic_load(&s->t_start_ns), t1 = atomic_load(&s->t_end_ns);
        int64_t run_ns = t0 ? (t1 ? t1 : now) - t0 : 0;
        vf_obuf_printf(&b, "s %d %d %lld %lld %lld %lld %lld %lld %lld %lld %lld\n", s->index,
                       phase, (long long)in, (long long)out, (long long)bin, (long long)bout,
                       (long long)blocked, (long long)run_ns,
                       (long long)vf_account_live(s->account),
                       (long long)vf_account_peak(s->account), (long long)dropped);
        for (int p = 0; p < ws->nports; p++) {
            vf_port_stats ps;
            vf_port_get_stats(ws->ports[p], &ps);
            vf_obuf_printf(&b, "p %d %c %s %lld %lld\n", s->index,
                           vf_port_direction(ws->ports[p]) == VF_PORT_IN ? 'i' : 'o',
                           vf_port_name(ws->ports[p]), (long long)ps.inflight, (long long)ps.capacity);
        }
        vf_gauge gs[VF_CTX_MAX_GAUGES];
        int ng = vf_stage_gauges(s, gs, VF_CTX_MAX_GAUGES);
        for (int k = 0; k < ng; k++) {
            /* keys travel as one space-free token */
            for (char *c = gs[k].key; *c; c++)
                if (*c == ' ' || *c == '\t' || *c == '\n') *c = '_';
            vf_obuf_printf(&b, "g %d %s %.17g\n", s->index, gs[k].key, gs[k].value);
        }
    }
    /* The process's own resident set, now and at its peak: the coordinator reads it from
     * /proc for workers on its node, and only from here for those on other nodes. */
    int64_t rss, hwm;
    vf_proc_mem(getpid(), &rss, &hwm);
    vf_obuf_printf(&b, "r %lld %lld\n", (long long)rss, (long long)hwm);
    if (vf_obuf_ok(&b)) vf_ctl_send(w->dealer, NULL, VF_CTL_METRICS, b.s, b.len, 0);
    vf_obuf_fini(&b);
}

static void handle_driver(worker *w, const vf_ctl_msg *m)
{
    if (m->type == VF_CTL_STOP) {
        if (!atomic_load(&w->stopping)) wlog(w, VF_LOG_INFO, "drain requested");
        atomic_store(&w->stopping, true);
    } else if (m->type == VF_CTL_ABORT) {
        atomic_store(&w->stopping, true);
        w->aborting = true;
        vf_runtime_request_stop();
    }
}

/* Reads "edge <id> <endpoint>" lines of a go message into w->endpoints. */
static int parse_go(worker *w, const char *payload, vf_status *st)
{
    int rc = 0;
    const char *line = payload;
    while (line && *line) {
        int id;
        char ep[300];
        if (sscanf(line, "edge %d %299s", &id, ep) == 2 && id >= 0 && id < w->g->nedges) {
            free(w->endpoints[id]);
            w->endpoints[id] = strdup(ep);
            if (!w->endpoints[id]) VF_FAIL(st, VF_ENOMEM, "worker: out of memory");
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    return 0;
fail:
    return rc;
}

/* ------------------------------------------------------------------ setup */

/* Placement resolved AUTO; an explicitly requested ipc/tcp edge keeps its transport
 * even inside one worker (tests exercise the zmq transports that way). */
static vf_transport edge_transport(const worker *w, const vf_gedge *e)
{
    if (e->transport != VF_TR_AUTO) return e->transport;
    bool same = w->g->stages[e->src].worker == w->g->stages[e->dst].worker;
    return same ? VF_TR_INPROC : VF_TR_IPC;
}

static void edge_desc(const worker *w, int id, vf_edge_desc *d)
{
    const vf_gedge *e = &w->g->edges[id];
    const vf_gstage *src = &w->g->stages[e->src], *dst = &w->g->stages[e->dst];
    memset(d, 0, sizeof *d);
    d->id = id;
    d->transport = edge_transport(w, e);
    d->capacity = e->capacity > 0 ? e->capacity : 1;
    d->peer = w->self == src->worker ? dst->worker : src->worker;
    const vf_port_spec *ps = vf_port_find(&src->ports, e->src_port);
    d->max_item_bytes = ps ? vf_port_max_item_bytes(ps) : 0;
    /* four names of < VF_NAME_MAX fit in 160 only as far as the message needs */
    if (snprintf(d->name, sizeof d->name, "%s.%s -> %s.%s", src->name, e->src_port, dst->name,
                 e->dst_port) >= (int)sizeof d->name)
        d->name[sizeof d->name - 1] = 0;
}

static int open_inputs(worker *w, vf_obuf *hello, vf_status *st)
{
    int rc = 0;
    for (int id = 0; id < w->g->nedges; id++) {
        const vf_gedge *e = &w->g->edges[id];
        if (w->g->stages[e->dst].worker != w->self) continue;
        vf_edge_desc d;
        edge_desc(w, id, &d);
        if (d.transport == VF_TR_IPC)
            snprintf(d.addr, sizeof d.addr, "ipc://%s/e%d", w->sock_dir, id);
        else if (d.transport == VF_TR_TCP)
            snprintf(d.addr, sizeof d.addr, "tcp://%s:*", w->bind ? w->bind : "127.0.0.1");
        VF_TRY(vf_edge_open(w->hub, &d, VF_PORT_IN, &w->ends_in[id], st));
        if (d.transport != VF_TR_INPROC)
            vf_obuf_printf(hello, "edge %d %s\n", id, vf_edge_end_endpoint(w->ends_in[id]));
    }
    return 0;
fail:
    return rc;
}

static int open_outputs(worker *w, vf_status *st)
{
    int rc = 0;
    for (int id = 0; id < w->g->nedges; id++) {
        const vf_gedge *e = &w->g->edges[id];
        if (w->g->stages[e->src].worker != w->self) continue;
        vf_edge_desc d;
        edge_desc(w, id, &d);
        if (d.transport != VF_TR_INPROC) {
            if (!w->endpoints[id])
                VF_FAIL(st, VF_EINVAL, "worker: the driver sent no endpoint for edge %s", d.name);
            snprintf(d.addr, sizeof d.addr, "%s", w->endpoints[id]);
        }
        VF_TRY(vf_edge_open(w->hub, &d, VF_PORT_OUT, &w->ends_out[id], st));
    }
    return 0;
fail:
    return rc;
}

/* Groups the ends of each stage into its named ports and attaches them to its context. */
static int build_ports(worker *w, vf_status *st)
{
    int rc = 0;
    for (int i = 0; i < w->nst; i++) {
        wstage *ws = &w->st[i];
        const vf_gstage *gs = ws->gs;
        for (int p = 0; p < gs->ports.n; p++) {
            const vf_port_spec *spec = &gs->ports.p[p];
            vf_port *port = NULL;
            for (int id = 0; id < w->g->nedges; id++) {
                const vf_gedge *e = &w->g->edges[id];
                vf_edge_end **slot = NULL;
                if (spec->dir == VF_PORT_IN && e->dst == ws->s->index &&
                    strcmp(e->dst_port, spec->name) == 0)
                    slot = &w->ends_in[id];
                else if (spec->dir == VF_PORT_OUT && e->src == ws->s->index &&
                         strcmp(e->src_port, spec->name) == 0)
                    slot = &w->ends_out[id];
                if (!slot || !*slot) continue;
                if (!port) {
                    VF_TRY(vf_port_new(spec->name, spec->dir, &port, st));
                    ws->ports[ws->nports++] = port;
                    VF_TRY(vf_stage_attach_port(ws->s, spec->name, spec->dir, port, st));
                }
                vf_edge_end *end = *slot;
                *slot = NULL; /* the port owns it now, also on failure */
                VF_TRY(vf_port_attach(port, end, st));
            }
        }
    }
    return 0;
fail:
    return rc;
}

static int load_graph(worker *w, const char *path, vf_status *st)
{
    int rc = 0;
    char *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) VF_FAIL(st, VF_EIO, "worker: cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = malloc((size_t)n + 1);
    if (!text) VF_FAIL(st, VF_ENOMEM, "worker: out of memory");
    if (fread(text, 1, (size_t)n, f) != (size_t)n) VF_FAIL(st, VF_EIO, "worker: cannot read %s", path);
    text[n] = 0;
    VF_TRY(vf_graph_from_json(text, &w->g, st));
    /* The JSON carries params, placement and transports; ops and port specs are
     * re-derived here by the same validation the driver ran. */
    VF_TRY(vf_graph_validate(w->g, st));
    if (w->self < 0 || w->self >= w->g->nworkers)
        VF_FAIL(st, VF_EINVAL, "worker: index %d out of range (%d workers)", w->self, w->g->nworkers);
fail:
    if (f) fclose(f);
    free(text);
    return rc;
}

static int make_stages(worker *w, vf_status *st)
{
    int rc = 0;
    w->st = calloc((size_t)(w->g->nstages ? w->g->nstages : 1), sizeof *w->st);
    if (!w->st) VF_FAIL(st, VF_ENOMEM, "worker: out of memory");
    for (int i = 0; i < w->g->nstages; i++) {
        const vf_gstage *gs = &w->g->stages[i];
        if (gs->worker != w->self) continue;
        wstage *ws = &w->st[w->nst];
        ws->gs = gs;
        ws->s = vf_stage_new(gs->ops, gs->name, i, gs->params, st);
        if (!ws->s) VF_FAIL(st, st->code ? st->code : VF_ENOMEM, "worker: stage %s", gs->name);
        ws->s->ctx.run_dir = w->run_dir;
        ws->s->ctx.stopping = &w->stopping;
        ws->s->ctx.hooks = &w->hooks;
        ws->s->ctx.resuming = w->resume;
        ws->s->ctx.resume_auto = w->resume_auto;
        w->nst++;
    }
    return 0;
fail:
    return rc;
}

/* ------------------------------------------------------------------ main */

static const char *arg_value(int argc, char **argv, const char *key)
{
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], key) == 0) return argv[i + 1];
    return NULL;
}

static bool arg_flag(int argc, char **argv, const char *key)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], key) == 0) return true;
    return false;
}

/* Waits for the driver's go, heartbeating meanwhile. 1 go, 0 aborted, negative error. */
static int wait_go(worker *w, vf_status *st)
{
    int64_t deadline = vf_now_ns() + (int64_t)GO_TIMEOUT_MS * 1000000, next_beat = 0;
    while (vf_now_ns() < deadline) {
        int64_t now = vf_now_ns();
        if (now >= next_beat) {
            vf_ctl_send(w->dealer, NULL, VF_CTL_BEAT, "", 0, 0);
            next_beat = now + (int64_t)VF_CTL_BEAT_MS * 1000000;
        }
        zmq_pollitem_t it = {w->dealer, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, POLL_MS);
        vf_ctl_msg m;
        int r;
        while ((r = vf_ctl_recv(w->dealer, false, &m)) == 1) {
            int type = m.type;
            if (type == VF_CTL_GO) r = parse_go(w, m.payload, st);
            vf_ctl_msg_fini(&m);
            if (r < 0) return r;
            if (type == VF_CTL_GO) return 1;
            if (type == VF_CTL_ABORT || type == VF_CTL_STOP) return 0;
        }
    }
    return vf_status_set(st, VF_ETIMEOUT, __FILE__, __LINE__,
                         "worker %d: no go from the driver within %d s", w->self, GO_TIMEOUT_MS / 1000);
}

static int control_loop(worker *w)
{
    int64_t next_beat = 0, next_metrics = vf_now_ns() + (int64_t)METRICS_MS * 1000000;
    int64_t abort_deadline = 0;
    int code = 0;
    for (;;) {
        zmq_pollitem_t it = {w->dealer, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, POLL_MS);
        vf_ctl_msg m;
        while (vf_ctl_recv(w->dealer, false, &m) == 1) {
            handle_driver(w, &m);
            vf_ctl_msg_fini(&m);
        }
        int64_t now = vf_now_ns();
        if (w->aborting && !abort_deadline) abort_deadline = now + (int64_t)ABORT_JOIN_MS * 1000000;
        int running = 0, finished_now = 0;
        for (int i = 0; i < w->nst; i++) {
            wstage *ws = &w->st[i];
            if (!atomic_load(&ws->finished)) {
                running++;
                continue;
            }
            if (!ws->joined) {
                pthread_join(ws->th, NULL);
                ws->joined = true;
            }
            if (!ws->reported) finished_now++;
        }
        /* The counters go first, so that the driver's rows are final when it hears
         * "done"; one sample covers every stage that finished in this turn. */
        if (finished_now) {
            send_metrics(w);
            w->final_metrics_sent = running == 0;
        }
        for (int i = 0; i < w->nst; i++) {
            wstage *ws = &w->st[i];
            if (!ws->joined || ws->reported) continue;
            ws->reported = true;
            vf_stage *s = ws->s;
            int phase = atomic_load(&s->phase);
            if (phase == VF_PHASE_DONE) {
                char head[64];
                snprintf(head, sizeof head, "%d %lld", s->index, (long long)(s->t_end_ns - s->t_start_ns));
                enqueue(w, VF_CTL_DONE, head, strlen(head), true);
            } else if (phase == VF_PHASE_FAILED) {
                vf_obuf b;
                vf_obuf_init(&b);
                vf_obuf_printf(&b, "%d %d\t%s", s->index, s->status.code, s->status.msg);
                if (vf_obuf_ok(&b)) enqueue(w, VF_CTL_FAIL, b.s, b.len, true);
                vf_obuf_fini(&b);
                code = 1;
            } else if (code == 0) {
                code = 3;
            }
        }
        flush_queue(w, 0);
        if (now >= next_beat) {
            vf_ctl_send(w->dealer, NULL, VF_CTL_BEAT, "", 0, 0);
            next_beat = now + (int64_t)VF_CTL_BEAT_MS * 1000000;
        }
        if (now >= next_metrics) {
            /* Give freed heap pages back to the OS: glibc keeps freed blocks in per-thread
             * arenas and trims only their top, so without this a worker's RSS (what the
             * metrics report and the OOM killer sees) drifts to the allocator's high-water
             * mark instead of what its stages hold. Once a second it costs little. */
            malloc_trim(0);
            send_metrics(w);
            next_metrics = now + (int64_t)METRICS_MS * 1000000;
        }
        if (!running) break;
        if (abort_deadline && now > abort_deadline) {
            wlog(w, VF_LOG_WARN, "%d stage thread(s) ignored the stop request; exiting without them",
                 running);
            return -1;
        }
    }
    return code;
}

int vf_worker_main(int argc, char **argv)
{
    worker wk, *w = &wk;
    memset(w, 0, sizeof *w);
    vf_status st = {0};
    int rc = 0, exit_code = 2;
    bool threads_left = false;
    pthread_mutex_init(&w->mu, NULL);
    w->hooks = (vf_ctx_hooks){.user = w, .log = hook_log, .row = hook_row};
    const char *graph_path = arg_value(argc, argv, "--graph");
    const char *idx = arg_value(argc, argv, "--worker");
    w->run_dir = arg_value(argc, argv, "--run-dir");
    w->sock_dir = arg_value(argc, argv, "--sock-dir");
    w->ctl_ep = arg_value(argc, argv, "--ctl");
    w->bind = arg_value(argc, argv, "--bind");
    bool ctl_secure = arg_flag(argc, argv, "--ctl-secure");
    w->self = idx ? atoi(idx) : -1;
    w->resume_auto = arg_flag(argc, argv, "--resume=auto");
    w->resume = w->resume_auto || arg_flag(argc, argv, "--resume"); /* the driver passes `vflow run`'s flag */
    if (!graph_path || !idx || !w->run_dir || !w->sock_dir || !w->ctl_ep) {
        fprintf(stderr, "vflow __worker: internal command, started by `vflow run`\n"
                        "usage: vflow __worker --graph FILE --worker N --run-dir DIR "
                        "--sock-dir DIR --ctl ENDPOINT [--bind ADDR] [--ctl-secure] [--resume[=auto]]\n");
        return 2;
    }
    /* Terminal signals go to the driver only (workers run in their own process group);
     * a broken socket must be an error code, not a death. */
    signal(SIGPIPE, SIG_IGN);

    /* The run key (the driver's environment, never a file) stays in this process's memory
     * only: the control socket of a multi-node run and every tcp edge authenticate with it. */
    char key[VF_CURVE_KEY_HEX + 1] = "";
    const char *env_key = getenv("VFLOW_RUN_KEY");
    if (env_key && *env_key) {
        snprintf(key, sizeof key, "%s", env_key);
        explicit_bzero((char *)env_key, strlen(env_key));
        unsetenv("VFLOW_RUN_KEY");
    }
    VF_TRY(load_graph(w, graph_path, &st));
    const char *wname = w->g->workers[w->self].name;
    w->zctx = zmq_ctx_new();
    if (!w->zctx) VF_FAIL(&st, VF_EEXTERNAL, "worker: zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    if (ctl_secure) {
        if (!key[0]) VF_FAIL(&st, VF_EUSAGE, "worker: --ctl-secure without VFLOW_RUN_KEY");
        /* identities of the control plane: workers, then the nodes' drivers (ctl.h) */
        vf_curve cv;
        VF_TRY(vf_curve_init(&cv, key, w->self, w->g->nworkers, "VFLOW_RUN_KEY", &st));
        rc = vf_ctl_dealer_open_curve(w->zctx, w->ctl_ep, wname, &cv, &w->dealer, &st);
        explicit_bzero(&cv, sizeof cv);
        if (rc < 0) goto fail;
    } else {
        VF_TRY(vf_ctl_dealer_open(w->zctx, w->ctl_ep, wname, &w->dealer, &st));
    }
    VF_TRY(make_stages(w, &st));
    size_t ne = (size_t)(w->g->nedges ? w->g->nedges : 1);
    w->ends_in = calloc(ne, sizeof *w->ends_in);
    w->ends_out = calloc(ne, sizeof *w->ends_out);
    w->endpoints = calloc(ne, sizeof *w->endpoints);
    if (!w->ends_in || !w->ends_out || !w->endpoints) VF_FAIL(&st, VF_ENOMEM, "worker: out of memory");
    w->hub = vf_chan_hub_new(&st);
    if (!w->hub) VF_FAIL(&st, st.code ? st.code : VF_EEXTERNAL, "worker: data plane hub");
    /* every tcp edge of this worker authenticates its peers with CURVE */
    if (key[0]) VF_TRY(vf_chan_hub_secure(w->hub, key, w->self, w->g->nworkers, &st));
    explicit_bzero(key, sizeof key);

    vf_obuf hello;
    vf_obuf_init(&hello);
    vf_obuf_printf(&hello, "pid %d\n", (int)getpid());
    rc = open_inputs(w, &hello, &st);
    if (rc >= 0) rc = vf_ctl_send(w->dealer, NULL, VF_CTL_HELLO, vf_obuf_str(&hello), hello.len, 5000);
    vf_obuf_fini(&hello);
    if (rc < 0) {
        if (!st.code) vf_status_set(&st, rc, __FILE__, __LINE__, "worker: cannot reach the driver");
        goto fail;
    }
    rc = wait_go(w, &st);
    if (rc < 0) goto fail;
    if (rc == 0) {
        exit_code = 3;
        goto out;
    }
    VF_TRY(open_outputs(w, &st));
    VF_TRY(build_ports(w, &st));

    for (int i = 0; i < w->nst; i++) {
        wstage *ws = &w->st[i];
        if (pthread_create(&ws->th, NULL, stage_main, ws) != 0)
            VF_FAIL(&st, VF_EEXTERNAL, "worker: cannot start a thread for stage %s", ws->s->name);
        ws->started = true;
        char tn[16];
        snprintf(tn, sizeof tn, "%.15s", ws->s->name); /* the kernel keeps 15 chars */
        pthread_setname_np(ws->th, tn);
    }
    exit_code = control_loop(w);
    if (exit_code < 0) {
        threads_left = true;
        exit_code = 3;
    }
    goto out;

fail:
    /* Setup failed: report it as the failure of this worker's first stage so that the
     * driver's message names a stage, then unwind whatever started. */
    if (w->dealer) {
        vf_obuf b;
        vf_obuf_init(&b);
        vf_obuf_printf(&b, "%d %d\t%s", w->nst ? w->st[0].s->index : -1, st.code, st.msg);
        vf_ctl_send(w->dealer, NULL, VF_CTL_FAIL, vf_obuf_str(&b), b.len, 1000);
        vf_obuf_fini(&b);
    }
    fprintf(stderr, "vflow worker %d: %s\n", w->self, st.msg);
    exit_code = 1;
    vf_runtime_request_stop();
    for (int i = 0; i < w->nst; i++) {
        wstage *ws = &w->st[i];
        if (ws->started && !ws->joined) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += ABORT_JOIN_MS / 1000;
            if (pthread_timedjoin_np(ws->th, NULL, &ts) == 0)
                ws->joined = true;
            else
                threads_left = true;
        }
    }
out:
    if (w->dealer) {
        if (w->dropped) {
            char t[96];
            snprintf(t, sizeof t, "%ld log lines or rows dropped (control queue full)", w->dropped);
            hook_log(w, NULL, VF_LOG_WARN, t);
        }
        if (w->hub && vf_zmq_refused(w->hub) > 0) {
            char t[96];
            snprintf(t, sizeof t, "data plane: refused %lld connection(s) from outside the run",
                     (long long)vf_zmq_refused(w->hub));
            hook_log(w, NULL, VF_LOG_WARN, t);
        }
        if (!w->final_metrics_sent) send_metrics(w);
        flush_queue(w, 1000);
        char c[16];
        snprintf(c, sizeof c, "%d", exit_code);
        vf_ctl_send(w->dealer, NULL, VF_CTL_BYE, c, strlen(c), 1000);
        vf_ctl_close(w->dealer, 2000);
    }
    if (threads_left) {
        /* A stage thread still runs and may use its ports: freeing them under it would
         * be a use-after-free, so leave without cleanup; the driver reaps us. */
        fflush(NULL);
        _exit(exit_code);
    }
    for (int i = 0; i < w->nst; i++) {
        for (int p = 0; p < w->st[i].nports; p++) vf_port_free(w->st[i].ports[p]);
        vf_stage_free(w->st[i].s);
    }
    if (w->g) {
        for (int id = 0; id < w->g->nedges; id++) {
            if (w->ends_in && w->ends_in[id]) vf_edge_end_free(w->ends_in[id]);
            if (w->ends_out && w->ends_out[id]) vf_edge_end_free(w->ends_out[id]);
            if (w->endpoints) free(w->endpoints[id]);
        }
    }
    free(w->ends_in);
    free(w->ends_out);
    free(w->endpoints);
    free(w->st);
    if (w->hub) vf_chan_hub_free(w->hub);
    if (w->zctx) zmq_ctx_term(w->zctx);
    for (qmsg *m = w->qhead, *nx; m; m = nx) {
        nx = m->next;
        free(m);
    }
    vf_graph_free(w->g);
    pthread_mutex_destroy(&w->mu);
    return exit_code;
}
