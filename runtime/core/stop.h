/* stop.h — the process-wide stop flag of the data plane.
 *
 * Set by the worker when the run is aborted (the supervisor says so, a signal, a failed
 * peer); every blocking wait of the data plane (runtime/edge/) looks at it at least every
 * VF_STOP_POLL_MS and returns VF_ESTOPPED. Stages see it as vf_aborting(ctx) (vflow.h),
 * as opposed to vf_stopping(ctx), the drain request that lets work in hand finish.
 */
#ifndef VF_STOP_H
#define VF_STOP_H
#include <stdbool.h>

/* Async-signal-safe (a single atomic store), so a signal handler may call it. */
void vf_runtime_request_stop(void);
bool vf_runtime_stopping(void);
/* Clears the flag (tests; a worker that restarts its stages). */
void vf_runtime_clear_stop(void);

#endif /* VF_STOP_H */
