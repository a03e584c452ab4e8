/* graph.h — what the CUDA backend's recorded units (graph.c) tell a test or a benchmark.
 * Needs no CUDA header. */
#ifndef VF_CUDA_GRAPH_H
#define VF_CUDA_GRAPH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Units recorded as CUDA graphs and recordings replayed so far in this process (either
 * pointer may be NULL). */
void vf_cuda_graph_counts(int64_t *recorded, int64_t *replayed);

#ifdef __cplusplus
}
#endif
#endif /* VF_CUDA_GRAPH_H */
