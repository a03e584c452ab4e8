/* metrics.c — the driver's per-stage counters, rates and metrics.jsonl rows; the end of
 * run summary. Formats: metrics.h. */
#include "runtime/driver/metrics.h"
#include "runtime/driver/tb_log.h"
#include "runtime/json.h"
#include "runtime/core/obuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *vf_mon_phase_name(int phase)
{
    switch (phase) {
    case VF_PHASE_NEW: return "new";
    case VF_PHASE_INIT: return "init";
    case VF_PHASE_RUN: return "run";
    case VF_PHASE_DONE: return "done";
    case VF_PHASE_FAILED: return "failed";
    case VF_PHASE_STOPPED: return "stopped";
    }
    return "?";
}

int vf_monitor_init(vf_monitor *m, const vf_graph *g, int metrics_fd, vf_status *st)
{
    int rc = 0;
    memset(m, 0, sizeof *m);
    m->metrics_fd = metrics_fd;
    m->t0_ns = vf_now_ns();
    m->nstages = g->nstages;
    m->nworkers = g->nworkers;
    m->stages = calloc((size_t)(g->nstages ? g->nstages : 1), sizeof *m->stages);
    m->worker_names = calloc((size_t)(g->nworkers ? g->nworkers : 1), sizeof *m->worker_names);
    m->pids = calloc((size_t)(g->nworkers ? g->nworkers : 1), sizeof *m->pids);
    m->rss = calloc((size_t)(g->nworkers ? g->nworkers : 1), sizeof *m->rss);
    m->rss_peak = calloc((size_t)(g->nworkers ? g->nworkers : 1), sizeof *m->rss_peak);
    m->edges = calloc((size_t)(g->nedges ? g->nedges : 1), sizeof *m->edges);
    if (!m->stages || !m->worker_names || !m->pids || !m->rss || !m->rss_peak || !m->edges)
        VF_FAIL(st, VF_ENOMEM, "metrics: out of memory");
    m->nedges = g->nedges;
    for (int e = 0; e < g->nedges; e++) {
        m->edges[e].src = g->edges[e].src;
        m->edges[e].dst = g->edges[e].dst;
        snprintf(m->edges[e].src_port, VF_NAME_MAX, "%s", g->edges[e].src_port);
        snprintf(m->edges[e].dst_port, VF_NAME_MAX, "%s", g->edges[e].dst_port);
    }
    for (int w = 0; w < g->nworkers; w++)
        snprintf(m->worker_names[w], VF_NAME_MAX, "%s", g->workers[w].name);
    for (int i = 0; i < g->nstages; i++) {
        vf_mon_stage *s = &m->stages[i];
        snprintf(s->name, sizeof s->name, "%s", g->stages[i].name);
        snprintf(s->kind, sizeof s->kind, "%s", g->stages[i].kind);
        s->worker = g->stages[i].worker;
        s->source = true;
        for (int e = 0; e < g->nedges; e++)
            if (g->edges[e].dst == i) s->source = false;
    }
    return 0;
fail:
    vf_monitor_fini(m);
    return rc;
}

void vf_monitor_fini(vf_monitor *m)
{
    free(m->stages);
    free(m->worker_names);
    free(m->pids);
    free(m->rss);
    free(m->rss_peak);
    free(m->edges);
    vf_tb_log_close(m->tb);
    memset(m, 0, sizeof *m);
}

double vf_monitor_elapsed(const vf_monitor *m) { return (vf_now_ns() - m->t0_ns) * 1e-9; }

int64_t vf_mon_items(const vf_mon_stage *s) { return s->source ? s->out : s->in; }
static int64_t mon_bytes(const vf_mon_stage *s) { return s->source ? s->bytes_out : s->bytes_in; }

int vf_proc_mem(pid_t pid, int64_t *rss, int64_t *peak)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    *rss = *peak = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f) && (*rss < 0 || *peak < 0)) {
        if (strncmp(line, "VmRSS:", 6) == 0) *rss = strtoll(line + 6, NULL, 10) * 1024;
        else if (strncmp(line, "VmHWM:", 6) == 0) *peak = strtoll(line + 6, NULL, 10) * 1024;
    }
    fclose(f);
    return *rss < 0 ? -1 : 0;
}

void vf_fmt_bytes(double b, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f B", b);
    else
        snprintf(buf, n, "%.1f %s", b, unit[u]);
}

void vf_fmt_count(double v, char *buf, size_t n)
{
    if (v < 1000)
        snprintf(buf, n, v < 10 && v != (int)v ? "%.1f" : "%.0f", v);
    else if (v < 1e6)
        snprintf(buf, n, "%.1fk", v / 1e3);
    else if (v < 1e9)
        snprintf(buf, n, "%.1fM", v / 1e6);
    else
        snprintf(buf, n, "%.1fG", v / 1e9);
}

/* ------------------------------------------------------------------ rows */

static double ratio(int64_t a, int64_t b) { return b > 0 ? (double)a / (double)b : 0; }

/* Fill of input port `in` of stage i: the fullest of its producers' output ports (exact:
 * they count credits not yet returned), or the receiver's own view if that is higher
 * (in-process queues, credits it has not returned yet). */
static double input_fill(const vf_monitor *m, int i, const vf_mon_port *in)
{
    double f = ratio(in->inflight, in->capacity);
    for (int e = 0; e < m->nedges; e++) {
        const vf_mon_edge *E = &m->edges[e];
        if (E->dst != i || strcmp(E->dst_port, in->name) != 0) continue;
        const vf_mon_stage *src = &m->stages[E->src];
        for (int p = 0; p < src->nports; p++)
            if (src->ports[p].out && strcmp(src->ports[p].name, E->src_port) == 0) {
                double g = ratio(src->ports[p].inflight, src->ports[p].capacity);
                if (g > f) f = g;
            }
    }
    return f;
}

static void row_stage(vf_monitor *m, vf_obuf *b, int i, const char *type)
{
    vf_mon_stage *s = &m->stages[i];
    vf_obuf_printf(b, "{\"t\":%.3f,\"type\":\"%s\",\"stage\":", vf_monitor_elapsed(m), type);
    vf_obuf_json_str(b, s->name);
    vf_obuf_puts(b, ",\"kind\":");
    vf_obuf_json_str(b, s->kind);
    vf_obuf_puts(b, ",\"worker\":");
    vf_obuf_json_str(b, s->worker >= 0 && s->worker < m->nworkers ? m->worker_names[s->worker] : "");
    vf_obuf_printf(b,
                   ",\"phase\":\"%s\",\"items\":%lld,\"items_in\":%lld,\"items_out\":%lld,"
                   "\"bytes\":%lld,\"items_s\":",
                   vf_mon_phase_name(s->phase), (long long)vf_mon_items(s), (long long)s->in,
                   (long long)s->out, (long long)mon_bytes(s));
    vf_obuf_json_num(b, s->items_s);
    vf_obuf_puts(b, ",\"bytes_s\":");
    vf_obuf_json_num(b, s->bytes_s);
    vf_obuf_puts(b, ",\"busy\":");
    vf_obuf_json_num(b, s->have_rate ? s->busy : 0);
    vf_obuf_puts(b, ",\"fill\":{");
    int nin = 0;
    for (int p = 0; p < s->nports; p++) {
        if (s->ports[p].out) continue;
        if (nin++) vf_obuf_puts(b, ",");
        vf_obuf_json_str(b, s->ports[p].name);
        vf_obuf_puts(b, ":");
        vf_obuf_json_num(b, input_fill(m, i, &s->ports[p]));
    }
    int64_t rss = (s->worker >= 0 && s->worker < m->nworkers) ? m->rss[s->worker] : -1;
    vf_obuf_printf(b, "},\"rss\":%lld,\"live\":%lld,\"peak\":%lld,\"dropped\":%lld,\"gauges\":{",
                   (long long)rss, (long long)s->live, (long long)s->peak, (long long)s->dropped);
    for (int k = 0; k < s->ngauges; k++) {
        if (k) vf_obuf_puts(b, ",");
        vf_obuf_json_str(b, s->gauges[k].key);
        vf_obuf_puts(b, ":");
        vf_obuf_json_num(b, s->gauges[k].value);
    }
    vf_obuf_puts(b, "}");
    if (strcmp(type, "final") == 0)
        vf_obuf_printf(b, ",\"time_s\":%.3f,\"rss_peak\":%lld", s->run_ns * 1e-9,
                       (long long)(s->worker >= 0 && s->worker < m->nworkers ? m->rss_peak[s->worker] : -1));
    vf_obuf_puts(b, "}");
}

static void emit(vf_monitor *m, vf_obuf *b)
{
    if (m->metrics_fd >= 0 && vf_obuf_ok(b))
        vf_write_line(m->metrics_fd, vf_obuf_str(b), strlen(vf_obuf_str(b)));
}

static vf_mon_stage *stage_at(vf_monitor *m, int worker, long idx)
{
    if (idx < 0 || idx >= m->nstages) return NULL;
    vf_mon_stage *s = &m->stages[idx];
    return s->worker == worker ? s : NULL; /* a worker reports only its own stages */
}

void vf_monitor_sample(vf_monitor *m, int worker, const char *payload)
{
    if (worker < 0 || worker >= m->nworkers) return;
    int64_t t_ns = 0;
    bool touched[m->nstages > 0 ? m->nstages : 1];
    memset(touched, 0, sizeof touched);
    const char *line = payload;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        char buf[512];
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, line, len);
        buf[len] = 0;
        line = nl ? nl + 1 : NULL;
        long idx;
        char key[64];
        if (buf[0] == 't') {
            long long t;
            if (sscanf(buf, "t %lld", &t) == 1) t_ns = t;
        } else if (buf[0] == 's') {
            long long v[10];
            int phase;
            if (sscanf(buf, "s %ld %d %lld %lld %lld %lld %lld %lld %lld %lld %lld", &idx, &phase,
                       &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) != 11)
                continue;
            vf_mon_stage *s = stage_at(m, worker, idx);
            if (!s) continue;
            if (!touched[idx]) {
                s->nports = 0;
                s->ngauges = 0;
                touched[idx] = true;
            }
            s->phase = phase;
            s->in = v[0], s->out = v[1], s->bytes_in = v[2], s->bytes_out = v[3];
            s->blocked_ns = v[4], s->run_ns = v[5], s->live = v[6], s->peak = v[7];
            s->dropped = v[8];
        } else if (buf[0] == 'p') {
            long long inflight, cap;
            char dir;
            if (sscanf(buf, "p %ld %c %63s %lld %lld", &idx, &dir, key, &inflight, &cap) != 5) continue;
            vf_mon_stage *s = stage_at(m, worker, idx);
            if (!s || !touched[idx] || s->nports >= VF_MAX_PORTS) continue;
            vf_mon_port *p = &s->ports[s->nports++];
            snprintf(p->name, sizeof p->name, "%.47s", key);
            p->out = dir == 'o';
            p->inflight = inflight;
            p->capacity = cap;
        } else if (buf[0] == 'r') {
            long long now, hwm;
            /* a worker of another node: its own report is all there is */
            if (m->pids[worker] <= 0 && sscanf(buf, "r %lld %lld", &now, &hwm) == 2 && now >= 0) {
                m->rss[worker] = now;
                if (hwm > m->rss_peak[worker]) m->rss_peak[worker] = hwm;
            }
        } else if (buf[0] == 'g') {
            double v;
            if (sscanf(buf, "g %ld %31s %lf", &idx, key, &v) != 3) continue;
            vf_mon_stage *s = stage_at(m, worker, idx);
            if (!s || !touched[idx] || s->ngauges >= VF_CTX_MAX_GAUGES) continue;
            snprintf(s->gauges[s->ngauges].key, sizeof s->gauges[0].key, "%.31s", key);
            s->gauges[s->ngauges++].value = v;
        }
    }
    if (m->pids[worker] > 0) {
        int64_t rss, hwm;
        if (vf_proc_mem(m->pids[worker], &rss, &hwm) == 0) m->rss[worker] = rss;
        if (rss > m->rss_peak[worker]) m->rss_peak[worker] = rss;
    }
    vf_obuf b;
    vf_obuf_init(&b);
    for (int i = 0; i < m->nstages; i++) {
        if (!touched[i]) continue;
        vf_mon_stage *s = &m->stages[i];
        int64_t items = vf_mon_items(s), bytes = mon_bytes(s);
        if (s->have_prev && t_ns > s->prev_t_ns) {
            double dt = (t_ns - s->prev_t_ns) * 1e-9;
            s->items_s = (items - s->prev_items) / dt;
            s->bytes_s = (bytes - s->prev_bytes) / dt;
            double blocked = (s->blocked_ns - s->prev_blocked) * 1e-9;
            s->busy = s->phase == VF_PHASE_RUN ? 1.0 - blocked / dt : 0;
            if (s->busy < 0) s->busy = 0;
            if (s->busy > 1) s->busy = 1;
            s->have_rate = true;
        }
        if (t_ns > s->prev_t_ns) {
            s->have_prev = true;
            s->prev_t_ns = t_ns;
            s->prev_items = items;
            s->prev_bytes = bytes;
            s->prev_blocked = s->blocked_ns;
        }
        vf_obuf_reset(&b);
        row_stage(m, &b, i, "stage");
        emit(m, &b);
    }
    vf_obuf_fini(&b);
    vf_tb_log_sample(m->tb, m, touched);
}

/* The newest summary line of (stage, key) replaces the older one in place. */
static void keep_line(vf_monitor *m, int stage, const char *key, const char *line)
{
    int i = 0;
    while (i < m->nlines && !(m->lines[i].stage == stage && strcmp(m->lines[i].key, key) == 0)) i++;
    if (i == m->nlines) {
        if (m->nlines == VF_MON_SUMMARY) return;
        m->nlines++;
        m->lines[i].stage = stage;
        snprintf(m->lines[i].key, sizeof m->lines[i].key, "%s", key);
    }
    snprintf(m->lines[i].line, sizeof m->lines[i].line, "%s", line);
}

void vf_monitor_event(vf_monitor *m, int stage, const char *json_object)
{
    if (stage < 0 || stage >= m->nstages) return;
    vf_obuf b;
    vf_obuf_init(&b);
    vf_obuf_puts(&b, "{\"stage\":");
    vf_obuf_json_str(&b, m->stages[stage].name);
    vf_obuf_printf(&b, ",\"t\":%.3f", vf_monitor_elapsed(m));
    vf_status st = {0};
    vf_json *j = vf_json_parse(json_object, &st);
    const char *ev = j && j->type == VF_JSON_OBJ ? vf_json_get_str(j, "event", "") : "";
    size_t evl = strlen(ev);
    if (evl > 7 && strcmp(ev + evl - 7, "_failed") == 0) {
        if (m->nfailures < VF_MON_FAILURES) {
            char step[32] = "";
            if (vf_json_get(j, "step")) snprintf(step, sizeof step, " of step %lld", (long long)vf_json_get_int(j, "step", 0));
            snprintf(m->failures[m->nfailures], sizeof m->failures[0], "%s: %.*s%s: %s", m->stages[stage].name,
                     (int)(evl - 7), ev, step, vf_json_get_str(j, "error", "(no message)"));
        }
        m->nfailures++;
    }
    if (strcmp(ev, "summary") == 0) keep_line(m, stage, vf_json_get_str(j, "key", ""), vf_json_get_str(j, "line", ""));
    if (j && j->type == VF_JSON_OBJ) {
        const char *p = strchr(json_object, '{') + 1;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (*p != '}') vf_obuf_puts(&b, ",");
        vf_obuf_puts(&b, p);
        vf_tb_log_event(m->tb, m, stage, j);
    } else {
        vf_obuf_puts(&b, ",\"bad_row\":");
        vf_obuf_json_str(&b, json_object);
        vf_obuf_puts(&b, "}");
    }
    vf_json_free(j);
    /* A row is one line: a stage's pretty-printed object must not split it. */
    if (b.s)
        for (char *c = b.s; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';
    emit(m, &b);
    vf_obuf_fini(&b);
}

void vf_monitor_final(vf_monitor *m, const char *status, const char *message)
{
    vf_obuf b;
    vf_obuf_init(&b);
    for (int i = 0; i < m->nstages; i++) {
        /* final rates are whole-run averages */
        vf_mon_stage *s = &m->stages[i];
        if (s->run_ns > 0) {
            double t = s->run_ns * 1e-9;
            s->items_s = vf_mon_items(s) / t;
            s->bytes_s = mon_bytes(s) / t;
            s->busy = 1.0 - s->blocked_ns * 1e-9 / t;
            if (s->busy < 0) s->busy = 0;
            s->have_rate = true;
        }
        vf_obuf_reset(&b);
        row_stage(m, &b, i, "final");
        emit(m, &b);
    }
    vf_obuf_reset(&b);
    double el = vf_monitor_elapsed(m);
    vf_obuf_printf(&b, "{\"t\":%.3f,\"type\":\"run\",\"status\":\"%s\",\"elapsed_s\":%.3f,\"message\":",
                   el, status, el);
    vf_obuf_json_str(&b, message ? message : "");
    vf_obuf_puts(&b, "}");
    emit(m, &b);
    vf_obuf_fini(&b);
    /* the final peaks, and the event file complete once the run is over */
    vf_tb_log_sample(m->tb, m, NULL);
    vf_tb_log_close(m->tb);
    m->tb = NULL;
}

void vf_monitor_summary(const vf_monitor *m, FILE *out, const char *title)
{
    fprintf(out, "%s\n", title);
    fprintf(out, "  %-20s %-12s %-8s %10s %9s %10s %11s %11s %11s\n", "stage", "kind", "worker",
            "items", "time", "items/s", "data", "peak mem", "worker rss");
    for (int i = 0; i < m->nstages; i++) {
        const vf_mon_stage *s = &m->stages[i];
        char rate[32], data[32], peak[32], rss[32];
        double t = s->run_ns * 1e-9;
        vf_fmt_count(t > 0 ? vf_mon_items(s) / t : 0, rate, sizeof rate);
        vf_fmt_bytes((double)mon_bytes(s), data, sizeof data);
        vf_fmt_bytes((double)s->peak, peak, sizeof peak);
        int64_t r = (s->worker >= 0 && s->worker < m->nworkers) ? m->rss_peak[s->worker] : 0;
        vf_fmt_bytes((double)r, rss, sizeof rss);
        fprintf(out, "  %-20s %-12s %-8s %10lld %8.2fs %10s %11s %11s %11s\n", s->name, s->kind,
                s->worker >= 0 && s->worker < m->nworkers ? m->worker_names[s->worker] : "-",
                (long long)vf_mon_items(s), t, rate, data, peak, rss);
    }
    for (int i = 0; i < m->nlines; i++) fprintf(out, "  %s\n", m->lines[i].line);
    if (!m->nfailures) return;
    fprintf(out, "  failed (%d):\n", m->nfailures);
    for (int i = 0; i < m->nfailures && i < VF_MON_FAILURES; i++) fprintf(out, "    %s\n", m->failures[i]);
    if (m->nfailures > VF_MON_FAILURES) fprintf(out, "    ... and %d more (metrics.jsonl)\n", m->nfailures - VF_MON_FAILURES);
}
