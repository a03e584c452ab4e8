/* tb_log.c — the monitor's rows and samples as TensorBoard scalars, and the images that
 * rows name. What and at which step: tb_log.h. */
#include "runtime/driver/tb_log.h"
#include "formats/tb_events.h"
#include "runtime/plan/plan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct vf_tb_log {
    vf_tb_writer w;
    bool trains;          /* the graph has a training loop: steps are optimizer steps */
    bool resumed, started;
    int64_t step;         /* last optimizer step seen, -1 none */
    int64_t gauge_step;   /* step of the last data/ points, -1 none */
    int nstages;
    int64_t *stage_step;  /* per stage: step of its last mem/ and edge/ points, -1 none */
    int64_t *plan;        /* per stage: the planner's account prediction, -1 unknown */
    char quarantine[4200];
    char run_dir[4096];
    void (*warn)(void *arg, const char *msg);
    void *warn_arg;
    double prev_clips;
    int64_t prev_clips_ns;
    bool have_clips;
};

/* The other event files in the writer's dir: a fresh run removes them (its
 * metrics.jsonl starts over too); a resumed run cuts them at its first step. */
static void predecessors(vf_tb_log *t, bool remove, int64_t step)
{
    char dir[sizeof t->w.path];
    snprintf(dir, sizeof dir, "%s", t->w.path);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[sizeof t->w.path + 300];
        if (!vf_tb_is_event_file(e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (strcmp(path, t->w.path) == 0) continue;
        vf_status st = {0};
        if (remove) unlink(path);
        else vf_tb_truncate_from(path, step, &st); /* the START still tells TensorBoard */
    }
    closedir(d);
}

int vf_tb_log_open(vf_tb_log **out, const vf_graph *g, const char *run_dir, bool resumed, vf_status *st)
{
    int rc = 0;
    vf_mplan p;
    bool have_plan = false;
    vf_tb_log *t = calloc(1, sizeof *t);
    if (!t) VF_FAIL(st, VF_ENOMEM, "tensorboard: out of memory");
    t->w.fd = -1;
    t->resumed = resumed;
    t->step = t->gauge_step = -1;
    t->nstages = g->nstages;
    for (int e = 0; e < g->nedges; e++)
        if (g->edges[e].loop) t->trains = true;
    t->plan = malloc((size_t)(g->nstages ? g->nstages : 1) * sizeof *t->plan);
    t->stage_step = malloc((size_t)(g->nstages ? g->nstages : 1) * sizeof *t->stage_step);
    if (!t->plan || !t->stage_step) VF_FAIL(st, VF_ENOMEM, "tensorboard: out of memory");
    for (int i = 0; i < g->nstages; i++) t->plan[i] = t->stage_step[i] = -1;
    vf_status pst = {0};
    if (vf_mplan_build(g, &p, &pst) == 0) { /* no plan: no mem/<stage>/plan points */
        have_plan = true;
        for (int i = 0; i < g->nstages; i++) t->plan[i] = p.account[i];
    }
    snprintf(t->quarantine, sizeof t->quarantine, "%s/quarantine.jsonl", run_dir);
    snprintf(t->run_dir, sizeof t->run_dir, "%s", run_dir);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tb", run_dir);
    VF_TRY(vf_tb_open(&t->w, dir, st));
    if (!resumed) predecessors(t, true, 0);
    *out = t;
    t = NULL;
fail:
    if (have_plan) vf_mplan_free(&p);
    vf_tb_log_close(t);
    return rc;
}

void vf_tb_log_close(vf_tb_log *t)
{
    if (!t) return;
    vf_tb_close(&t->w);
    free(t->plan);
    free(t->stage_step);
    free(t);
}

void vf_tb_log_set_warn(vf_tb_log *t, void (*warn)(void *arg, const char *msg), void *arg)
{
    if (!t) return;
    t->warn = warn;
    t->warn_arg = arg;
}

static void warn(vf_tb_log *t, const char *fmt, ...)
{
    char msg[5000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (t->warn) t->warn(t->warn_arg, msg);
    else fprintf(stderr, "%s\n", msg);
}

/* The PNG file a row names as one image event: its bytes as they are, the size and
 * colour from its IHDR chunk. A file that is missing, too big or not a PNG is a WARN;
 * the run goes on. */
static void log_image(vf_tb_log *t, const vf_json *row, const char *image)
{
    char path[sizeof t->run_dir + 4200], tag[600];
    unsigned char *data = NULL;
    int64_t step = vf_json_get_int(row, "step", -1);
    if (image[0] == '/') snprintf(path, sizeof path, "%s", image);
    else snprintf(path, sizeof path, "%s/%s", t->run_dir, image);
    const char *rtag = vf_json_get_str(row, "tag", NULL);
    if (rtag && *rtag) {
        snprintf(tag, sizeof tag, "%s", rtag);
    } else { /* "samples/step-6/cat.frame0.png" -> "sample/cat" */
        const char *b = strrchr(image, '/');
        snprintf(tag, sizeof tag, "sample/%s", b ? b + 1 : image);
        char *dot = strchr(tag + 7, '.');
        if (dot && dot != tag + 7) *dot = 0;
    }
    if (step < 0) {
        warn(t, "tensorboard: image %s: the row has no step; not logged", path);
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0) {
        warn(t, "tensorboard: image %s: %s; not logged", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size > VF_TB_IMAGE_MAX) {
        warn(t, "tensorboard: image %s: %lld bytes, over the %d MiB an image may have; not logged", path,
             (long long)sb.st_size, VF_TB_IMAGE_MAX >> 20);
        goto out;
    }
    size_t n = (size_t)sb.st_size, got = 0;
    if (!(data = malloc(n ? n : 1))) {
        warn(t, "tensorboard: image %s: out of memory; not logged", path);
        goto out;
    }
    while (got < n) {
        ssize_t r = read(fd, data + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got != n || vf_tb_png(&t->w, step, tag, data, n) != 0)
        warn(t, "tensorboard: image %s: not a PNG file (%zu bytes); not logged", path, got);
out:
    if (fd >= 0) close(fd);
    free(data);
}

void vf_tb_log_event(vf_tb_log *t, const vf_monitor *m, int stage, const vf_json *row)
{
    (void)m, (void)stage;
    if (!t) return;
    const vf_json *image = vf_json_get(row, "image");
    if (image && image->type == VF_JSON_STR) {
        log_image(t, row, vf_json_get_str(row, "image", ""));
        vf_tb_flush(&t->w, false);
        return;
    }
    if (strcmp(vf_json_get_str(row, "event", ""), "train_step") != 0) return;
    int64_t step = vf_json_get_int(row, "step", -1);
    if (step < 0) return;
    if (t->resumed && !t->started) {
        predecessors(t, false, step);
        vf_tb_start(&t->w, step);
    }
    t->started = true;
    t->step = step;
    static const char *const keys[][2] = {
        {"loss", "train/loss"},       {"lr", "train/lr"},
        {"grad_norm", "train/grad_norm"}, {"step_s", "perf/step_s"},
        {"samples_s", "perf/samples_s"}, {"tokens_s", "perf/tokens_s"},
        {"mfu", "perf/mfu"},          {"samples", "train/samples"}, /* an expert's, routed by t */
    };
    /* a row of one expert of several (Wan 2.2 A14B: "high", "low") logs under
     * train/<expert>/loss, perf/<expert>/step_s, …: two experts trained side by side
     * would otherwise write one curve with two values per step */
    const char *ex = vf_json_get_str(row, "expert", "");
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const vf_json *v = vf_json_get(row, keys[k][0]);
        if (!v || (v->type != VF_JSON_NUM && v->type != VF_JSON_INT)) continue;
        char tag[96];
        const char *slash = strchr(keys[k][1], '/');
        if (ex[0]) snprintf(tag, sizeof tag, "%.*s/%.16s%s", (int)(slash - keys[k][1]), keys[k][1], ex, slash);
        else snprintf(tag, sizeof tag, "%s", keys[k][1]);
        vf_tb_scalar(&t->w, step, tag, vf_json_get_num(row, keys[k][0], 0));
    }
}

static double ratio(int64_t a, int64_t b) { return b > 0 ? (double)a / (double)b : 0; }

static double port_fill(const vf_mon_stage *s, const char *port, bool out)
{
    for (int p = 0; p < s->nports; p++)
        if (s->ports[p].out == out && strcmp(s->ports[p].name, port) == 0)
            return ratio(s->ports[p].inflight, s->ports[p].capacity);
    return 0;
}

static int64_t count_lines(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    int64_t n = 0;
    int c;
    while ((c = getc(f)) != EOF)
        if (c == '\n') n++;
    fclose(f);
    return n;
}

void vf_tb_log_sample(vf_tb_log *t, const vf_monitor *m, const bool *touched)
{
    if (!t) return;
    int64_t now = vf_now_ns();
    int64_t step = t->trains ? t->step : (now - m->t0_ns) / 1000000000;
    if (step < 0) goto out;
    char tag[3 * VF_NAME_MAX + 32];
    /* a stage's points when its own worker reported after the step moved: the values
     * are then this step's, not the previous sample's */
    for (int i = 0; i < m->nstages && i < t->nstages; i++) {
        if ((touched && !touched[i]) || step <= t->stage_step[i]) continue;
        t->stage_step[i] = step;
        const vf_mon_stage *s = &m->stages[i];
        snprintf(tag, sizeof tag, "mem/%s/measured", s->name);
        vf_tb_scalar(&t->w, step, tag, (double)s->peak);
        if (t->plan[i] >= 0) {
            snprintf(tag, sizeof tag, "mem/%s/plan", s->name);
            vf_tb_scalar(&t->w, step, tag, (double)t->plan[i]);
        }
        /* its input edges' fill as metrics.jsonl's "fill": the producer's credits in
         * flight, or the receiver's own view where it is higher */
        for (int e = 0; e < m->nedges; e++) {
            const vf_mon_edge *E = &m->edges[e];
            if (E->dst != i || E->src < 0 || E->src >= m->nstages) continue;
            double f = port_fill(&m->stages[E->src], E->src_port, true);
            double g = port_fill(s, E->dst_port, false);
            snprintf(tag, sizeof tag, "edge/%s-%s/fill", m->stages[E->src].name, s->name);
            vf_tb_scalar(&t->w, step, tag, f > g ? f : g);
        }
    }
    if (step > t->gauge_step) {
        double clips = 0;
        bool any = false;
        for (int i = 0; i < m->nstages; i++)
            for (int k = 0; k < m->stages[i].ngauges; k++)
                if (strcmp(m->stages[i].gauges[k].key, "clips") == 0) {
                    clips += m->stages[i].gauges[k].value;
                    any = true;
                }
        if (any) {
            t->gauge_step = step;
            if (t->have_clips && now > t->prev_clips_ns)
                vf_tb_scalar(&t->w, step, "data/clips_s", (clips - t->prev_clips) / ((now - t->prev_clips_ns) * 1e-9));
            vf_tb_scalar(&t->w, step, "data/quarantined", (double)count_lines(t->quarantine));
            t->have_clips = true;
            t->prev_clips = clips;
            t->prev_clips_ns = now;
        }
    }
out:
    vf_tb_flush(&t->w, false);
}
