/* stage.c — the stage registry, the stage instance, and the context API of vflow.h
 * (ports by name, stop flag, run dir, logging, gauges, event rows, quarantine, the
 * map-stage helper).
 *
 * The registry is a static table filled from constructors (VF_REGISTER_STAGE) before
 * main runs, so it needs no lock: after startup it is only read. The context's side
 * outputs go through hooks the worker installs (stage.h); the quarantine list is the
 * exception: every writer appends its own line to the file with O_APPEND, so a line
 * survives the writer's process dying right after.
 */
#include "runtime/core/stage.h"
#include "runtime/core/alloc.h"
#include "runtime/core/obuf.h"
#include "runtime/core/params.h"
#include "runtime/core/stop.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ registry */

#define MAX_KINDS 256
static const vf_stage_ops *g_kinds[MAX_KINDS];
static int g_nkinds;

void vf_stage_register(const vf_stage_ops *ops)
{
    VF_ASSERT(ops && ops->kind && ops->kind[0]);
    /* A second registration of a kind is a link-time mistake (two files claiming one
     * kind): say so loudly rather than silently keeping either. */
    for (int i = 0; i < g_nkinds; i++) {
        if (strcmp(g_kinds[i]->kind, ops->kind) == 0) {
            fprintf(stderr, "vflow: stage kind \"%s\" registered twice\n", ops->kind);
            VF_ASSERT(!"duplicate stage kind");
        }
    }
    VF_ASSERT(g_nkinds < MAX_KINDS);
    g_kinds[g_nkinds++] = ops;
}

const vf_stage_ops *vf_stage_lookup(const char *kind)
{
    if (!kind) return NULL;
    for (int i = 0; i < g_nkinds; i++)
        if (strcmp(g_kinds[i]->kind, kind) == 0) return g_kinds[i];
    return NULL;
}

static int cmp_kind(const void *a, const void *b)
{
    const vf_stage_ops *x = *(const vf_stage_ops *const *)a;
    const vf_stage_ops *y = *(const vf_stage_ops *const *)b;
    return strcmp(x->kind, y->kind);
}

int vf_stage_kinds(const vf_stage_ops **out, int max)
{
    const vf_stage_ops *sorted[MAX_KINDS];
    memcpy(sorted, g_kinds, sizeof(sorted[0]) * (size_t)g_nkinds);
    qsort(sorted, (size_t)g_nkinds, sizeof sorted[0], cmp_kind);
    int n = g_nkinds < max ? g_nkinds : max;
    if (out) memcpy(out, sorted, sizeof(sorted[0]) * (size_t)(n > 0 ? n : 0));
    return g_nkinds;
}

/* ------------------------------------------------------------------ instance */

vf_stage *vf_stage_new(const vf_stage_ops *ops, const char *name, int index,
                       const vf_params *params, vf_status *st)
{
    int rc = 0;
    vf_stage *s = calloc(1, sizeof *s);
    if (!s) VF_FAIL(st, VF_ENOMEM, "stage %s: out of memory", name);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->kind, sizeof s->kind, "%s", ops->kind);
    s->index = index;
    s->ops = ops;
    s->params = params;
    s->ctx.stage = s;
    pthread_mutex_init(&s->gauge_mu, NULL);
    /* Accounts live until the process exits (alloc.h), so the stage only borrows it. */
    s->account = vf_account_new(name);
    if (!s->account) VF_FAIL(st, VF_ENOMEM, "stage %s: out of memory for its account", name);
    return s;
fail:
    (void)rc;
    vf_stage_free(s);
    return NULL;
}

void vf_stage_free(vf_stage *s)
{
    if (!s) return;
    pthread_mutex_destroy(&s->gauge_mu);
    free(s);
}

int vf_stage_attach_port(vf_stage *s, const char *name, vf_port_dir dir, vf_port *port,
                         vf_status *st)
{
    if (s->ctx.nports >= VF_MAX_PORTS)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "stage %s: more than %d ports", s->name, VF_MAX_PORTS);
    vf_ctx_port *p = &s->ctx.ports[s->ctx.nports++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->dir = dir;
    p->port = port;
    return 0;
}

int vf_stage_gauges(vf_stage *s, vf_gauge *out, int max)
{
    pthread_mutex_lock(&s->gauge_mu);
    int n = s->ngauges < max ? s->ngauges : max;
    memcpy(out, s->gauges, sizeof(out[0]) * (size_t)n);
    pthread_mutex_unlock(&s->gauge_mu);
    return n;
}

void *vf_stage_state(const vf_stage *s) { return s->state; }
void vf_stage_set_state(vf_stage *s, void *state) { s->state = state; }
const char *vf_stage_name(const vf_stage *s) { return s->name; }
const vf_params *vf_stage_params(const vf_stage *s) { return s->params; }

/* ------------------------------------------------------------------ context */

static vf_port *find_port(vf_ctx *ctx, const char *name, vf_port_dir dir)
{
    for (int i = 0; i < ctx->nports; i++)
        if (ctx->ports[i].dir == dir && strcmp(ctx->ports[i].name, name) == 0)
            return ctx->ports[i].port;
    return NULL;
}

vf_port *vf_in(vf_ctx *ctx, const char *name) { return find_port(ctx, name, VF_PORT_IN); }
vf_port *vf_out(vf_ctx *ctx, const char *name) { return find_port(ctx, name, VF_PORT_OUT); }

bool vf_stopping(const vf_ctx *ctx)
{
    return ctx->stopping && atomic_load_explicit(ctx->stopping, memory_order_relaxed);
}

bool vf_aborting(const vf_ctx *ctx) { return vf_runtime_stopping(); }

/* `vflow run … --resume` reaches a stage only one way: the driver starts each worker with
 * "--resume" (launch.c), the worker sets it on every stage's context (worker.c). Nothing
 * else (environment, the parent's command line) is consulted: a stage outside a run
 * (unit tests) resumes only when its context says so. */
bool vf_resuming(const vf_ctx *ctx) { return ctx && ctx->resuming; }
bool vf_resume_auto(const vf_ctx *ctx) { return ctx && ctx->resuming && ctx->resume_auto; }

const char *vf_run_dir(const vf_ctx *ctx) { return ctx->run_dir ? ctx->run_dir : "."; }
vf_stage *vf_ctx_stage(vf_ctx *ctx) { return ctx->stage; }

static const char *level_name(int level)
{
    static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    return (level >= 0 && level <= 3) ? names[level] : "INFO";
}

void vf_log(vf_ctx *ctx, int level, const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (ctx->hooks && ctx->hooks->log)
        ctx->hooks->log(ctx->hooks->user, ctx->stage, level, text);
    else
        fprintf(stderr, "%s [%s] %s\n", level_name(level), ctx->stage->name, text);
}

void vf_metric(vf_ctx *ctx, const char *key, double value)
{
    vf_stage *s = ctx->stage;
    pthread_mutex_lock(&s->gauge_mu);
    int i = 0;
    while (i < s->ngauges && strcmp(s->gauges[i].key, key) != 0) i++;
    if (i == s->ngauges && s->ngauges < VF_CTX_MAX_GAUGES) {
        snprintf(s->gauges[i].key, sizeof s->gauges[i].key, "%s", key);
        s->ngauges++;
    }
    /* Past the table's end a new gauge is dropped: gauges are a display aid, and a
     * stage inventing unbounded keys would otherwise grow every metrics row. */
    if (i < s->ngauges) s->gauges[i].value = value;
    pthread_mutex_unlock(&s->gauge_mu);
}

void vf_metric_row(vf_ctx *ctx, const char *json_object)
{
    if (ctx->hooks && ctx->hooks->row)
        ctx->hooks->row(ctx->hooks->user, ctx->stage, json_object);
    else
        fprintf(stderr, "ROW [%s] %s\n", ctx->stage->name, json_object);
}

void vf_summary(vf_ctx *ctx, const char *key, const char *fmt, ...)
{
    char line[VF_SUMMARY_LINE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    vf_obuf b;
    vf_obuf_init(&b);
    vf_obuf_puts(&b, "{\"event\":\"summary\",\"key\":");
    vf_obuf_json_str(&b, key ? key : "");
    vf_obuf_puts(&b, ",\"line\":");
    vf_obuf_json_str(&b, line);
    vf_obuf_puts(&b, "}");
    if (vf_obuf_ok(&b)) vf_metric_row(ctx, vf_obuf_str(&b));
    vf_obuf_fini(&b);
}

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void vf_quarantine(vf_ctx *ctx, const char *path, const char *reason)
{
    vf_obuf b;
    vf_obuf_init(&b);
    vf_obuf_puts(&b, "{\"path\":");
    vf_obuf_json_str(&b, path ? path : "");
    vf_obuf_puts(&b, ",\"reason\":");
    vf_obuf_json_str(&b, reason ? reason : "");
    vf_obuf_puts(&b, ",\"stage\":");
    vf_obuf_json_str(&b, ctx->stage->name);
    vf_obuf_printf(&b, ",\"t\":%.3f}", wall_time());
    char file[4096];
    snprintf(file, sizeof file, "%s/quarantine.jsonl", vf_run_dir(ctx));
    int rc = vf_obuf_ok(&b) ? vf_append_line(file, vf_obuf_str(&b)) : -12;
    if (rc < 0)
        vf_log(ctx, VF_LOG_ERROR, "cannot append to %s (%s); quarantined: %s (%s)", file,
               strerror(-rc), path ? path : "", reason ? reason : "");
    else
        vf_log(ctx, VF_LOG_WARN, "quarantined %s: %s", path ? path : "", reason ? reason : "");
    vf_obuf_fini(&b);
}

int vf_run_map(vf_stage *s, vf_ctx *ctx, const char *in, vf_map_fn fn, vf_status *st)
{
    vf_port *p = vf_in(ctx, in);
    if (!p)
        return vf_status_set(st, VF_ENOTFOUND, __FILE__, __LINE__,
                             "stage %s: input port \"%s\" is not connected", s->name, in);
    for (;;) {
        vf_item *it = NULL;
        int rc = vf_recv(p, &it, st);
        if (rc == VF_EOS) return 0;
        if (rc < 0) return rc;
        rc = fn(s, ctx, it, st);
        if (rc < 0) return rc;
    }
}

/* ------------------------------------------------------------------ params of another kind */

vf_params *vf_params_parse_for(const char *kind, const char *json, const char *what, vf_status *st)
{
    const vf_stage_ops *ops = vf_stage_lookup(kind);
    if (!ops) {
        vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: no stage kind '%s'", what, kind);
        return NULL;
    }
    vf_params *p = vf_params_from_json(json, st);
    if (!p) return NULL;
    if (vf_params_validate(p, ops->params, kind, what, st) != 0) {
        vf_params_free(p);
        return NULL;
    }
    return p;
}
