/* stop.c — the process-wide stop flag (stop.h). */
#include "runtime/core/stop.h"

#include <stdatomic.h>

static atomic_int g_stop;

void vf_runtime_request_stop(void) { atomic_store(&g_stop, 1); }
bool vf_runtime_stopping(void) { return atomic_load_explicit(&g_stop, memory_order_relaxed) != 0; }
void vf_runtime_clear_stop(void) { atomic_store(&g_stop, 0); }
