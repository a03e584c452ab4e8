/* graph.h — the plain graph: what the Lua DSL produces, what the driver validates,
 * plans, places and serialises for its workers.
 *
 * The Lua side (lua/vflow.lua) expands all sugar (pipeline_parallel, train, workers)
 * into stages and edges; the C side only sees this. Each stage and edge remembers the
 * `file:line` of the Lua call that made it, so every validation error can point there.
 */
#ifndef VF_GRAPH_H
#define VF_GRAPH_H

#include "runtime/edge/transport.h" /* vf_transport: what placement chooses per edge */
#include "runtime/vflow.h"
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vf_json vf_json; /* runtime/json.h */


typedef struct vf_gstage {
    char name[VF_NAME_MAX];      /* unique in the graph */
    char kind[VF_NAME_MAX];
    const vf_stage_ops *ops;     /* resolved by validation */
    vf_params *params;           /* owned; defaults filled by validation */
    char where[256];             /* "pipelines/x.lua:12" of the Lua call */
    vf_device device;            /* from params.device when the kind has one, else cpu */
    char worker_hint[VF_NAME_MAX]; /* p:stage(kind, {..., worker = "w"}) pins stages together */
    int node;                    /* p:stage(kind, {..., node = k}): the node (launcher rank) it runs on */
    int worker;                  /* placement: worker index, set by vf_graph_place */
    vf_port_specs ports;         /* resolved by validation */
    vf_mem_plan mem;             /* from the memory hook, filled by validation */
    /* The name a Lua expansion gave the stages it made ("decode" for
     * decode_0..decode_{N-1} of workers = N); "" for a plain stage. `--set NAME.PARAM`
     * with NAME a group and no stage applies to every member. */
    char group[VF_NAME_MAX];
    /* Params a Lua expansion copied into this stage from one value of the script (owned,
     * NULL when none): param -> "=TIE" where every stage's param linked to the same TIE
     * holds that value (an override of one reaches them all), or a sentence saying
     * where the value is set (an override here is refused: it would leave the copies
     * behind). Not part of the graph's JSON: workers never see overrides. */
    vf_json *links;
} vf_gstage;

typedef struct vf_gedge {
    int src, dst;                /* stage indices */
    char src_port[VF_NAME_MAX];
    char dst_port[VF_NAME_MAX];
    int capacity;                /* items in flight, >= 1 */
    bool loop;                   /* a declared back edge of the training loop */
    vf_transport transport;      /* requested (AUTO) then resolved by placement */
    char where[256];
} vf_gedge;

typedef struct vf_gworker {
    char name[VF_NAME_MAX];      /* "w0-cpu", "w1-decode_0", … */
    vf_device device;
    char host[64];               /* "" = this node */
    int node;                    /* the node that starts it: its stages' node */
} vf_gworker;

typedef struct vf_graph {
    char name[VF_NAME_MAX];
    int nstages, cap_stages;
    vf_gstage *stages;
    int nedges, cap_edges;
    vf_gedge *edges;
    int nworkers;
    vf_gworker *workers;         /* set by vf_graph_place */
    char script[1024];           /* the Lua file it came from */
    bool no_tensorboard;         /* vf.pipeline(name, {tensorboard = false}) */
} vf_graph;

vf_graph *vf_graph_new(const char *name);
void vf_graph_free(vf_graph *g);
/* Adds a stage; params ownership passes to the graph (also on failure). Returns the
 * stage index or a negative code (duplicate name). */
int vf_graph_add_stage(vf_graph *g, const char *name, const char *kind, vf_params *params,
                       const char *where, vf_status *st);
int vf_graph_add_edge(vf_graph *g, int src, const char *src_port, int dst, const char *dst_port,
                      int capacity, bool loop, const char *where, vf_status *st);
int vf_graph_find(const vf_graph *g, const char *name); /* index or -1 */

/* Validation: stage kinds (with did-you-mean), params against schemas (unknown key,
 * type, range, required, choices, devices), ports (existence, direction, dtype/shape
 * compatibility with symbol unification and propagation in topological order),
 * required ports connected, no cycle except through loop edges. Errors are VF_EUSAGE
 * with "file:line: message". Fills stage->ops, ports, mem. */
int vf_graph_validate(vf_graph *g, vf_status *st);

/* Placement (docs/run.md): one worker per CUDA device, one per VF_STAGE_OWN_WORKER
 * stage, the rest in one CPU worker; resolves edge transports. */
int vf_graph_place(vf_graph *g, vf_status *st);

/* Nodes the graph places stages on: 1 + the highest stage node. */
int vf_graph_nodes(const vf_graph *g);
/* A topology naming more nodes than the run has (nnodes from the launcher or --nodes)
 * is VF_EUSAGE naming the first stage placed beyond it, with its file:line. */
int vf_graph_check_nodes(const vf_graph *g, int nnodes, vf_status *st);
/* The preflight of every stage placed on node `node` (vf_stage_ops.preflight): the first
 * failure, prefixed with the stage's Lua line and name. */
int vf_graph_preflight(const vf_graph *g, int node, vf_status *st);

/* Resolved graph as JSON (for the run dir and for workers) and back. */
char *vf_graph_to_json(const vf_graph *g);                     /* caller frees */
int vf_graph_from_json(const char *text, vf_graph **out, vf_status *st);
/* Graphviz DOT of the plain graph. */
int vf_graph_dot(const vf_graph *g, FILE *out);

/* Parameter overrides from `--set name.param=value` (value parsed as JSON if it
 * parses, else a string). Applied before validation. When no stage has that name but
 * stages of that group do (vf_gstage.group), every member gets the override. */
int vf_graph_override(vf_graph *g, const char *stage_param, const char *value, vf_status *st);

/* ---- topological order, edge sizes ---- */


/* Stage indices in topological order over the non-loop edges (ties by index), as
 * validation propagates port specs. order has room for g->nstages. 0, or VF_EUSAGE
 * with the cycle in st. */
int vf_graph_topo_order(const vf_graph *g, int *order, vf_status *st);

/* The output spec feeding edge e (after validation), NULL if unknown. Borrowed. */
const vf_port_spec *vf_graph_edge_src_spec(const vf_graph *g, int e);
/* The largest item edge e carries: what its source port allows, where a view tensor
 * (vf_tensor_spec.view) counts as its descriptor unless the edge crosses nodes (tcp: the
 * bytes then cross, vflow.h "lending memory"); -1 when the port leaves a dim unbounded. */
int64_t vf_graph_edge_item_bytes(const vf_graph *g, int e);
/* Bytes an edge can hold: capacity x vf_graph_edge_item_bytes; -1 when unbounded. */
int64_t vf_graph_edge_bytes(const vf_graph *g, int e);

#ifdef __cplusplus
}
#endif
#endif /* VF_GRAPH_H */
