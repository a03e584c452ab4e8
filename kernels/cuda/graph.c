/* graph.c — the CUDA backend's recorded units (ops.h graph_begin / graph_end) as CUDA
 * graphs, per device, keyed by the caller's words.
 *
 * Off by default: only with VFLOW_CUDA_GRAPHS=1 (read at every unit) is anything
 * recorded; otherwise every unit's ops run as they come. On, a key's first unit runs
 * eagerly: every plan an op builds lazily (cuBLASLt's heuristics, cuDNN's graphs, the
 * attention workspace) then exists, because a recording must neither allocate nor wait
 * for the device. The second is captured from the stream (cudaStreamBeginCapture in
 * thread-local mode) into a graph, which is instantiated and launched; from the third on
 * the instantiated graph is launched and the caller enqueues nothing.
 *
 * While a capture is in progress the backend's enqueue lock is held throughout (the lock
 * is recursive, so the unit's own ops take it as usual): another thread's ops on this
 * device wait rather than join the recording. A capture that fails (a call the capture
 * refuses, an error an op notes during it) is dropped, the key is never recorded again,
 * the errors its ops noted are forgotten (they ran nowhere), and graph_end asks the
 * caller for the ops once more, which then run eagerly.
 *
 * A recording bakes in every device address its ops touched: the caller's (hence the key)
 * and the backend's own buffers. Of the latter only the cuDNN attention workspace is ever
 * replaced (grown for a larger shape, the old one freed), so every recording is dropped
 * when its size changes. Ops of a unit read no host state that changes between its runs
 * (ops.h); a recorded unit keeps the choices its ops made when it was recorded (the
 * attention path among them).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_att.h"
#include "kernels/cuda/graph.h"

#define GRAPH_UNITS 1024 /* kept per device: a DiT's depth × passes × geometries */

typedef struct unit {
    uint64_t *key;
    int nkey;
    int seen;              /* units begun with this key */
    bool never;            /* a recording failed: always eager */
    cudaGraphExec_t exec;  /* the recording, once made */
} unit;

typedef struct vf_cuda_graphs {
    unit u[GRAPH_UNITS];
    int n;                 /* slots used */
    int next;              /* the slot a new key replaces when all are used (oldest first) */
    size_t ws;             /* cuDNN workspace bytes the recordings were made with */
} vf_cuda_graphs;

/* The unit this thread is in (units do not nest; several threads may be in units of one
 * device at once, eagerly) */
static __thread struct {
    enum { IDLE, EAGER, CAPTURE } state;
    vf_cuda_ctx *c;
    unit *u;
    int err0; /* c->err before the capture */
} t_unit;

static int64_t g_recorded, g_replayed;

void vf_cuda_graph_counts(int64_t *recorded, int64_t *replayed)
{
    if (recorded) *recorded = __atomic_load_n(&g_recorded, __ATOMIC_RELAXED);
    if (replayed) *replayed = __atomic_load_n(&g_replayed, __ATOMIC_RELAXED);
}

static bool enabled(void)
{
    const char *e = getenv("VFLOW_CUDA_GRAPHS");
    return e && atoi(e) > 0;
}

static void unit_clear(unit *u)
{
    if (u->exec) cudaGraphExecDestroy(u->exec); /* an in-flight launch finishes first */
    free(u->key);
    memset(u, 0, sizeof *u);
}

static void drop_all(vf_cuda_graphs *g)
{
    for (int i = 0; i < g->n; i++) unit_clear(&g->u[i]);
    g->n = g->next = 0;
}

void vf_cuda_graphs_free(vf_cuda_ctx *c)
{
    if (!c->graphs) return;
    drop_all(c->graphs);
    free(c->graphs);
    c->graphs = NULL;
}

/* The unit of key, made (in a free slot or the oldest one's) when new; NULL when out of
 * host memory. */
static unit *unit_of(vf_cuda_graphs *g, const uint64_t *key, int nkey)
{
    for (int i = 0; i < g->n; i++)
        if (g->u[i].nkey == nkey && memcmp(g->u[i].key, key, sizeof *key * (size_t)nkey) == 0) return &g->u[i];
    uint64_t *k = malloc(sizeof *key * (size_t)nkey);
    if (!k) return NULL;
    memcpy(k, key, sizeof *key * (size_t)nkey);
    unit *u;
    if (g->n < GRAPH_UNITS) {
        u = &g->u[g->n++];
    } else {
        u = &g->u[g->next];
        g->next = (g->next + 1) % GRAPH_UNITS;
        unit_clear(u);
    }
    u->key = k;
    u->nkey = nkey;
    return u;
}

static size_t attn_workspace(vf_cuda_ctx *c)
{
#ifdef VFLOW_HAVE_CUDNN
    return vf_cudnn_att_workspace(c);
#else
    (void)c;
    return 0;
#endif
}

bool vf_cuda_graph_begin(vf_backend *be, const uint64_t *key, int nkey)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    t_unit.state = EAGER;
    if (!enabled() || nkey <= 0) return true;
    vf_cuda_op_begin(c);
    if (!c->graphs && !(c->graphs = calloc(1, sizeof *c->graphs))) goto eager;
    vf_cuda_graphs *g = c->graphs;
    const size_t ws = attn_workspace(c);
    if (ws != g->ws) { /* the recordings' workspace is gone */
        drop_all(g);
        g->ws = ws;
    }
    unit *u = unit_of(g, key, nkey);
    if (!u) goto eager;
    u->seen++;
    if (u->exec) {
        VF_CUDA_NOTE(c, cudaGraphLaunch(u->exec, c->stream));
        __atomic_add_fetch(&g_replayed, 1, __ATOMIC_RELAXED);
        vf_cuda_op_end(c);
        t_unit.state = IDLE;
        return false;
    }
    if (u->never || u->seen < 2) goto eager;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        u->never = true;
        goto eager;
    }
    t_unit.state = CAPTURE, t_unit.c = c, t_unit.u = u, t_unit.err0 = c->err;
    return true; /* the lock stays held until graph_end */
eager:
    vf_cuda_op_end(c);
    return true;
}

bool vf_cuda_graph_end(vf_backend *be)
{
    (void)be;
    if (t_unit.state != CAPTURE) {
        t_unit.state = IDLE;
        return false;
    }
    vf_cuda_ctx *c = t_unit.c;
    unit *u = t_unit.u;
    t_unit.state = IDLE;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    bool ok = cudaStreamEndCapture(c->stream, &graph) == cudaSuccess && graph && c->err == t_unit.err0;
    if (ok) ok = cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (graph) cudaGraphDestroy(graph);
    if (ok && cudaGraphLaunch(exec, c->stream) != cudaSuccess) {
        cudaGraphExecDestroy(exec);
        ok = false;
    }
    if (!ok) { /* its ops ran nowhere: forget what they noted, and ask for them again */
        cudaGetLastError();
        if (!t_unit.err0) c->err = 0;
        u->never = true;
        vf_cuda_op_end(c);
        return true;
    }
    u->exec = exec;
    __atomic_add_fetch(&g_recorded, 1, __ATOMIC_RELAXED);
    vf_cuda_op_end(c);
    return false;
}
