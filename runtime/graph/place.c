/* place.c — vf_graph_place: which worker process hosts each stage, and which transport
 * each edge uses (docs/run.md).
 *
 * Rules, in order of precedence:
 *   1. stages with the same `worker` hint share a worker (the user said so);
 *   2. a stage whose kind has VF_STAGE_OWN_WORKER gets a worker of its own (crash
 *      isolation for libav decoders, the single LMDB writer);
 *   3. one worker per CUDA device for stages on that device;
 *   4. everything else shares one CPU worker.
 * Workers are numbered in order of their first stage, so the layout is stable for a
 * given script. Edges: the same worker → inproc; otherwise ipc on this node; an edge
 * that asked for a transport ("tcp", "ipc") keeps it, which is how tests exercise tcp
 * on loopback. A stage's `node` (the launcher rank whose driver starts it) is part of its
 * group: a worker never spans nodes, and an edge between nodes is tcp (on the nodes'
 * cluster addresses, chosen at launch). Placing again recomputes everything (idempotent).
 */
#include "runtime/graph/graph.h"

#include <stdlib.h>
#include <string.h>

/* The group a stage falls into: a key identifying its worker and the worker's label. */
static void group_of(const vf_gstage *s, char *key, size_t kn, char *label, size_t ln)
{
    char dev[32];
    vf_device_str(s->device, dev, sizeof dev);
    /* workers never span nodes: every key starts with the node */
    int np = snprintf(key, kn, "n%d:", s->node);
    if (np < 0 || (size_t)np >= kn) np = 0;
    key += np;
    kn -= (size_t)np;
    if (s->worker_hint[0]) {
        snprintf(key, kn, "hint:%s", s->worker_hint);
        snprintf(label, ln, "%s", s->worker_hint);
    } else if (s->ops && (s->ops->flags & VF_STAGE_OWN_WORKER)) {
        snprintf(key, kn, "own:%s", s->name);
        snprintf(label, ln, "%s", s->name);
    } else if (s->device.kind == VF_DEV_CUDA) {
        snprintf(key, kn, "dev:%s", dev);
        if (s->node)
            snprintf(label, ln, "n%d-cuda%d", s->node, s->device.index);
        else
            snprintf(label, ln, "cuda%d", s->device.index);
    } else {
        snprintf(key, kn, "cpu");
        if (s->node)
            snprintf(label, ln, "n%d-cpu", s->node);
        else
            snprintf(label, ln, "cpu");
    }
}

int vf_graph_place(vf_graph *g, vf_status *st)
{
    int rc = 0;
    char (*keys)[VF_NAME_MAX + 24] = NULL;
    free(g->workers);
    g->workers = NULL;
    g->nworkers = 0;
    if (g->nstages == 0) return 0;
    keys = calloc((size_t)g->nstages, sizeof *keys);
    g->workers = calloc((size_t)g->nstages, sizeof *g->workers);
    if (!keys || !g->workers) VF_FAIL(st, VF_ENOMEM, "out of memory");
    for (int i = 0; i < g->nstages; i++) {
        vf_gstage *s = &g->stages[i];
        char key[VF_NAME_MAX + 24], label[VF_NAME_MAX];
        group_of(s, key, sizeof key, label, sizeof label);
        int w = -1;
        for (int k = 0; k < g->nworkers && w < 0; k++)
            if (strcmp(keys[k], key) == 0) w = k;
        if (w < 0) {
            w = g->nworkers++;
            snprintf(keys[w], sizeof keys[w], "%s", key);
            vf_gworker *gw = &g->workers[w];
            char name[VF_NAME_MAX + 16];
            snprintf(name, sizeof name, "w%d-%s", w, label);
            name[sizeof gw->name - 1] = 0; /* long hints are cut; the index keeps names unique */
            memcpy(gw->name, name, sizeof gw->name);
            gw->device = s->device;
            gw->host[0] = 0;
            gw->node = s->node;
        }
        vf_gworker *gw = &g->workers[w];
        /* A worker drives at most one GPU (one CUDA context, one stream set). */
        if (s->device.kind == VF_DEV_CUDA) {
            if (gw->device.kind == VF_DEV_CUDA && gw->device.index != s->device.index) {
                const vf_gstage *o = NULL;
                for (int k = 0; k < i && !o; k++)
                    if (g->stages[k].worker == w && g->stages[k].device.kind == VF_DEV_CUDA) o = &g->stages[k];
                VF_FAIL(st, VF_EUSAGE,
                        "%s: stage '%s' (%s): worker '%s' already drives cuda:%d (stage '%s'); one worker "
                        "uses one GPU",
                        s->where, s->name, s->kind, s->worker_hint, gw->device.index, o ? o->name : "?");
            }
            gw->device = s->device;
        }
        s->worker = w;
    }
    for (int i = 0; i < g->nedges; i++) {
        vf_gedge *e = &g->edges[i];
        bool same = g->stages[e->src].worker == g->stages[e->dst].worker;
        if (e->transport == VF_TR_INPROC && !same)
            VF_FAIL(st, VF_EUSAGE,
                    "%s: connect '%s' -> '%s': transport \"inproc\" needs both stages in one worker, but "
                    "they run in '%s' and '%s'",
                    e->where, g->stages[e->src].name, g->stages[e->dst].name,
                    g->workers[g->stages[e->src].worker].name, g->workers[g->stages[e->dst].worker].name);
        bool cross = g->stages[e->src].node != g->stages[e->dst].node;
        if (cross && (e->transport == VF_TR_IPC || e->transport == VF_TR_INPROC))
            VF_FAIL(st, VF_EUSAGE,
                    "%s: connect '%s' -> '%s': transport \"%s\" cannot cross nodes (node %d -> node %d); "
                    "leave it unset (tcp)",
                    e->where, g->stages[e->src].name, g->stages[e->dst].name, vf_transport_name(e->transport),
                    g->stages[e->src].node, g->stages[e->dst].node);
        if (e->transport == VF_TR_AUTO) e->transport = cross ? VF_TR_TCP : same ? VF_TR_INPROC : VF_TR_IPC;
    }
    free(keys);
    return 0;
fail:
    free(keys);
    free(g->workers);
    g->workers = NULL;
    g->nworkers = 0;
    return rc;
}
