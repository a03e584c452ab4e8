/* stage.h — the runtime side of a stage instance and its run context.
 *
 * vflow.h shows a stage author opaque `vf_stage` / `vf_ctx` handles; this header is
 * what the worker (worker.c) sees: the instance it builds from a graph stage, the
 * ports it attaches to the context, and the hooks through which the context's
 * logging, gauges and event rows reach the worker's control thread (and from there the
 * driver). Without hooks (unit tests) they go to stderr.
 *
 * Threading: a stage's init/run/fini run on the stage's own thread; vf_log,
 * vf_metric, vf_metric_row may be called from that thread only (the hooks themselves
 * are thread-safe: several stages of one worker call them concurrently); the gauge
 * table is read by the control thread under its mutex.
 */
#ifndef VF_STAGE_H
#define VF_STAGE_H
#include "runtime/vflow.h"
#include <pthread.h>
#include <stdatomic.h>

#ifdef __cplusplus
extern "C" {
#endif

struct vf_account; /* alloc.h: per-stage memory account */

/* Where a context's side outputs go. Each hook receives `user` and the stage; `text`
 * is borrowed for the call. */
typedef struct vf_ctx_hooks {
    void *user;
    void (*log)(void *user, vf_stage *s, int level, const char *text);
    void (*row)(void *user, vf_stage *s, const char *json_object);
} vf_ctx_hooks;

#define VF_CTX_MAX_GAUGES 16

typedef struct vf_gauge {
    char key[32];
    double value;
} vf_gauge;

typedef struct vf_ctx_port {
    char name[VF_NAME_MAX];
    vf_port_dir dir;
    vf_port *port;          /* borrowed; owned by the worker's data plane */
} vf_ctx_port;

struct vf_ctx {
    vf_stage *stage;
    int nports;
    vf_ctx_port ports[VF_MAX_PORTS];
    const char *run_dir;            /* borrowed, absolute */
    const atomic_bool *stopping;    /* drain or abort requested; NULL = never */
    const vf_ctx_hooks *hooks;      /* NULL = stderr */
    bool resuming;                  /* `vflow run … --resume`: vf_resuming() */
    bool resume_auto;               /* `--resume=auto`: vf_resume_auto() */
};

typedef enum vf_stage_phase {
    VF_PHASE_NEW = 0,
    VF_PHASE_INIT,
    VF_PHASE_RUN,
    VF_PHASE_DONE,      /* run returned 0, outputs closed */
    VF_PHASE_FAILED,    /* init or run failed: `status` says why */
    VF_PHASE_STOPPED,   /* unwound because the run was aborted */
} vf_stage_phase;

struct vf_stage {
    char name[VF_NAME_MAX];
    char kind[VF_NAME_MAX];
    int index;                      /* in the graph */
    const vf_stage_ops *ops;
    const vf_params *params;        /* borrowed from the graph */
    void *state;                    /* the stage's own, set by init */
    struct vf_account *account;     /* borrowed: accounts live as long as the process */
    vf_ctx ctx;
    _Atomic int phase;              /* vf_stage_phase */
    vf_status status;               /* the failure, valid once phase == FAILED */
    _Atomic int64_t t_start_ns;     /* monotonic: init start (read by the control thread) */
    _Atomic int64_t t_end_ns;       /* monotonic: end, 0 while running */
    pthread_mutex_t gauge_mu;
    int ngauges;
    vf_gauge gauges[VF_CTX_MAX_GAUGES];
};

/* New stage instance of `ops` named `name` (graph index `index`), with an account of
 * the same name. params are borrowed and must outlive the stage. Caller owns the
 * result (vf_stage_free). */
vf_stage *vf_stage_new(const vf_stage_ops *ops, const char *name, int index,
                       const vf_params *params, vf_status *st);
void vf_stage_free(vf_stage *s); /* NULL is fine; does not call ops->fini */

/* Attaches a connected port (borrowed) under its port name. */
int vf_stage_attach_port(vf_stage *s, const char *name, vf_port_dir dir, vf_port *port,
                         vf_status *st);

/* Copies up to max gauges (under the gauge lock); returns the count. */
int vf_stage_gauges(vf_stage *s, vf_gauge *out, int max);

/* Monotonic clock in nanoseconds (defined with the data plane, chan.c). */
int64_t vf_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* VF_STAGE_H */
