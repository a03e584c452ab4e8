/* collective.c — the CPU backend's all-to-all (ops.h "all-to-all among the ranks of a
 * group"): host memory is what the ranks' shared-memory group (vflow.h vf_a2a) already
 * moves, so the device group is that group itself and a run is one of its exchanges.
 */
#include "kernels/cpu/cpu_ops.h"

void *vf_cpu_a2a_open(vf_a2a *boot, int n, int rank, size_t chunk_max, vf_status *st)
{
    (void)chunk_max;
    if (!boot && n > 1)
        vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "all-to-all: rank %d of %d ranks without a host group", rank,
                      n);
    return boot;
}

int vf_cpu_a2a_run(void *g, const void *send, void *recv, size_t chunk, vf_status *st)
{
    return vf_a2a_run(g, send, recv, chunk, st);
}
