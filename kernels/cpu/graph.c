/* graph.c — the CPU backend's side of the recorded units (ops.h graph_begin/graph_end).
 *
 * The CPU backend runs every op as it is called, so there is nothing to record or replay:
 * a unit's ops always run as they come, once.
 */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

bool vf_cpu_graph_begin(const uint64_t *key, int nkey)
{
    (void)key, (void)nkey;
    return true;
}

bool vf_cpu_graph_end(void) { return false; }
