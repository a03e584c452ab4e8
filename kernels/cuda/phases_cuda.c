/* phases_cuda.c — the device marks of the per-phase op timer (kernels/phases.h): CUDA
 * events recorded on the backend's one stream, so a mark's timestamp is when the device
 * reaches it (after every op enqueued before it), not when the host enqueued it.
 *
 * The events are created as marks are first needed and kept for later rounds: a DiT
 * step records two marks per op, thousands per step, and creating them anew each round
 * would cost more host time than recording them.
 */
#include <stdlib.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/phases.h"

struct vf_cuda_marks {
    vf_cuda_ctx *c;   /* borrowed: the backend's context */
    cudaEvent_t *ev;  /* (cap), the first n created */
    int n, cap;
};

int vf_cuda_marks_new(vf_backend *be, vf_cuda_marks **out, vf_status *st)
{
    int rc = 0;
    *out = NULL;
    if (be->device.kind != VF_DEV_CUDA)
        VF_FAIL(st, VF_EINVAL, "phase timer: backend %s is no CUDA backend", be->name);
    vf_cuda_marks *m = calloc(1, sizeof *m);
    if (!m) VF_FAIL(st, VF_ENOMEM, "phase timer: out of memory");
    m->c = vf_cuda_ctx_of(be);
    *out = m;
fail:
    return rc;
}

int vf_cuda_marks_record(vf_cuda_marks *m, int i, vf_status *st)
{
    int rc = 0;
    vf_cuda_op_begin(m->c); /* the device current on this thread; no op between our launches */
    if (i < 0 || i > m->n) VF_FAIL(st, VF_EINVAL, "phase timer: mark %d recorded before mark %d", i, m->n);
    if (i == m->n) {
        if (m->n == m->cap) {
            int cap = m->cap ? 2 * m->cap : 2048;
            cudaEvent_t *ev = realloc(m->ev, sizeof *ev * (size_t)cap);
            if (!ev) VF_FAIL(st, VF_ENOMEM, "phase timer: out of memory (%d events)", cap);
            m->ev = ev;
            m->cap = cap;
        }
        VF_CUDA_TRY(st, cudaEventCreate(&m->ev[m->n]));
        m->n++;
    }
    VF_CUDA_TRY(st, cudaEventRecord(m->ev[i], m->c->stream));
fail:
    vf_cuda_op_end(m->c);
    if (rc) vf_status_prefix(st, "%s", m->c->devname);
    return rc;
}

int vf_cuda_marks_times(vf_cuda_marks *m, int n, double *ms, vf_status *st)
{
    int rc = 0;
    if (n < 1 || n > m->n) VF_FAIL(st, VF_EINVAL, "phase timer: %d marks asked for, %d recorded", n, m->n);
    VF_CUDA_TRY(st, cudaSetDevice(m->c->device));
    VF_CUDA_TRY(st, cudaEventSynchronize(m->ev[n - 1]));
    ms[0] = 0;
    for (int i = 1; i < n; i++) {
        float f = 0;
        VF_CUDA_TRY(st, cudaEventElapsedTime(&f, m->ev[0], m->ev[i]));
        ms[i] = f;
    }
fail:
    if (rc) vf_status_prefix(st, "%s", m->c->devname);
    return rc;
}

void vf_cuda_marks_free(vf_cuda_marks *m)
{
    if (!m) return;
    cudaSetDevice(m->c->device);
    for (int i = 0; i < m->n; i++) cudaEventDestroy(m->ev[i]);
    free(m->ev);
    free(m);
}
