/* phases.h — where a backend's time goes, per phase of work: attention, GEMM,
 * convolution, norm/elementwise, optimizer, transfers, memsets.
 *
 * vf_phases_new wraps a backend in a second op table that forwards every op to it.
 * While timing is on, each op is bracketed by two marks: CUDA events on the backend's
 * stream for a CUDA backend (the device time of the op, not the launch), the host clock
 * for the CPU backend (whose ops are synchronous). vf_phases_read sums the brackets per
 * phase. Timing off, a wrapped op costs one branch; code that never asks for a wrapper
 * runs the backend's own table untouched, so the timers cost nothing where unused.
 *
 * Hand the wrapper's table (vf_phases_backend) to the model in place of the backend it
 * wraps; it shares that backend's context (stream, pool, scratch), so buffers and
 * results are the same. alloc, free and sync pass through untimed: they enqueue no work
 * of a phase. A time between two ops (the device waiting for the host) belongs to no
 * phase: vf_phases_read's total minus the phases' sum is that idle time.
 *
 * One thread drives a wrapper at a time (the benchmarks are single-threaded). While
 * timing is on, a recorded unit (ops.h graph_begin) runs op by op instead of as a CUDA
 * graph: the events of a recording would be graph nodes, which have no timestamps. Time a
 * step that replays graphs whole, with timing off.
 */
#ifndef VF_PHASES_H
#define VF_PHASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vf_phase {
    VF_PHASE_ATTENTION,   /* attention_fwd, attention_bwd */
    VF_PHASE_GEMM,        /* matmul_fwd, matmul_bwd */
    VF_PHASE_CONV,        /* conv3d_fwd, conv3d_bwd */
    VF_PHASE_ELEMENTWISE, /* norms, modulate, gates, RoPE, activations, layout, embed, loss */
    VF_PHASE_OPTIMIZER,   /* adamw, sumsq */
    VF_PHASE_TRANSFER,    /* upload, download, copy */
    VF_PHASE_MEMSET,      /* memset0 */
    VF_PHASE_N
} vf_phase;

typedef struct vf_phases vf_phases;

/* Per-phase totals since the last read. ms: summed op time; calls: ops timed; total_ms:
 * from the first op's start mark to the last op's end mark. */
typedef struct vf_phase_times {
    double ms[VF_PHASE_N];
    int64_t calls[VF_PHASE_N];
    double total_ms;
} vf_phase_times;

/* A wrapper over be (borrowed: be must outlive it). *out is owned by the caller and freed
 * with vf_phases_free. Timing starts off. VF_ENOMEM on allocation failure. */
int vf_phases_new(vf_backend *be, vf_phases **out, vf_status *st);
/* The wrapping op table (owned by p, valid until vf_phases_free). */
vf_backend *vf_phases_backend(vf_phases *p);
/* Timing on or off from the next op on. A CUDA backend's events are created at the
 * first op timed; a failure there is returned by the next vf_phases_read. */
void vf_phases_enable(vf_phases *p, bool on);
/* Waits for the ops timed so far (a CUDA backend: its stream), fills t and starts a new
 * round. Negative VF_E* with st naming the CUDA call when an event failed. */
int vf_phases_read(vf_phases *p, vf_phase_times *t, vf_status *st);
/* "attention", "gemm", "conv", "elementwise", "optimizer", "transfer", "memset". */
const char *vf_phase_name(vf_phase ph);
/* t as one JSON object: {"attention": ms, ..., "memset": ms, "idle": span less the ops,
 * "span": ms, "calls": {"attention": n, ...}} into buf (n bytes, always terminated when
 * n > 0). Returns the length the whole object needs, as snprintf does. */
size_t vf_phase_times_json(const vf_phase_times *t, char *buf, size_t n);
void vf_phases_free(vf_phases *p);

/* ---- the device marks (kernels/cuda/phases_cuda.c; without CUDA each returns VF_ECUDA
 * or does nothing). A set of CUDA events on be's stream, grown on demand. */
typedef struct vf_cuda_marks vf_cuda_marks;
int vf_cuda_marks_new(vf_backend *be, vf_cuda_marks **out, vf_status *st);
/* Records mark i (0-based; i ≤ the number recorded so far, so the set grows by one at a
 * time) on the stream; 0 or VF_ECUDA with st naming the call. */
int vf_cuda_marks_record(vf_cuda_marks *m, int i, vf_status *st);
/* Waits for mark n-1 and writes ms[i] = the time of mark i after mark 0, for i < n. */
int vf_cuda_marks_times(vf_cuda_marks *m, int n, double *ms, vf_status *st);
void vf_cuda_marks_free(vf_cuda_marks *m);

#ifdef __cplusplus
}
#endif
#endif /* VF_PHASES_H */
