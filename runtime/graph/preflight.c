/* preflight.c — before `vflow run` starts anything: what each stage of this node reads
 * when it starts is there (vf_stage_ops.preflight). */
#include "runtime/graph/graph.h"

int vf_graph_preflight(const vf_graph *g, int node, vf_status *st)
{
    for (int i = 0; i < g->nstages; i++) {
        const vf_gstage *s = &g->stages[i];
        if (!s->ops || !s->ops->preflight || s->node != node) continue;
        int rc = s->ops->preflight(s->params, st);
        if (rc) {
            vf_status_prefix(st, "%s: stage '%s' (%s)", s->where, s->name, s->ops->kind);
            return rc;
        }
    }
    return 0;
}
