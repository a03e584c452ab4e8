/* test_cuda_phases.c — the per-phase op timer (kernels/phases.h) over the CUDA backend:
 * CUDA events bracket each op on the backend's stream.
 *
 * vflow-test: labels=gpu timeout=300
 *
 *  - results through the timed wrapper are the backend's own, bit for bit (a GEMM, an
 *    attention forward, a memset, an upload read back);
 *  - each op lands in its phase once; the phases' sum fits in the span from the first
 *    mark to the last, and the span in the host's wall time around the ops and a sync;
 *  - the device time is measured, not the launch: 20 GEMMs of 2·2048³ FLOPs each take
 *    at least their FLOPs over 2 PFLOP/s (twice an H100's dense bf16 peak);
 *  - a second round after a read counts only its own ops.
 * The CPU-backend side (same bits for a DiT step and a VAE, the counts of every phase)
 * is tests/unit/test_phases.c. Exits 77 without CUDA or a device.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/vf_test.h"
#include "tests/gpu/gpu_test_main.h"

#include "kernels/ops.h"
#include "kernels/phases.h"

static vf_backend *G;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static float *randf(int64_t n, uint32_t seed)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
    }
    return p;
}

static void *dev_from(const float *h, int64_t n)
{
    vf_status st = {0};
    void *d = G->alloc(G, (size_t)n * vf_dtype_size(G->act_dtype), &st);
    VF_CHECK_MSG(d != NULL, "%s", st.msg);
    G->upload(G, d, h, n, G->act_dtype);
    return d;
}

static float *host_of(const void *d, int64_t n)
{
    float *h = malloc(sizeof(float) * (size_t)n);
    G->download(G, h, d, n, G->act_dtype);
    return h;
}

VF_TEST(same_bits_and_phases)
{
    vf_status st = {0};
    /* sizes that keep the GPU busy for a while; small ones where the CPU stands in */
    const int cuda = G->device.kind == VF_DEV_CUDA;
    const int64_t N = cuda ? 2048 : 192, C = N, OC = N, L = cuda ? 1024 : 128, H = 4, D = 128;
    float *hx = randf(N * C, 1), *hw = randf(OC * C, 2), *hq = randf(L * H * D, 3);
    void *x = dev_from(hx, N * C), *w = dev_from(hw, OC * C), *q = dev_from(hq, L * H * D);
    void *o1 = dev_from(hx, N * OC), *o2 = dev_from(hx, N * OC);
    void *a1 = dev_from(hq, L * H * D), *a2 = dev_from(hq, L * H * D);
    float *lse = G->alloc(G, sizeof(float) * (size_t)(H * L), &st);
    vf_phases *p = NULL;
    VF_CHECK_MSG(vf_phases_new(G, &p, &st) == 0, "%s", st.msg);
    vf_backend *T = vf_phases_backend(p);

    G->matmul_fwd(G, o1, x, w, NULL, N, C, OC);
    G->attention_fwd(G, a1, lse, q, q, q, 1, L, L, H, D, 0.088f);
    G->memset0(G, o1, 256);
    VF_CHECK(G->sync(G, &st) == 0);

    vf_phases_enable(p, true);
    double t0 = now_ms();
    T->matmul_fwd(T, o2, x, w, NULL, N, C, OC);
    T->attention_fwd(T, a2, lse, q, q, q, 1, L, L, H, D, 0.088f);
    T->memset0(T, o2, 256);
    T->upload(T, x, hx, N * C, G->act_dtype);
    VF_CHECK(T->sync(T, &st) == 0);
    double wall = now_ms() - t0;
    vf_phase_times t;
    VF_CHECK_MSG(vf_phases_read(p, &t, &st) == 0, "%s", st.msg);

    float *r1 = host_of(o1, N * OC), *r2 = host_of(o2, N * OC);
    float *b1 = host_of(a1, L * H * D), *b2 = host_of(a2, L * H * D);
    VF_CHECK(memcmp(r1, r2, sizeof(float) * (size_t)(N * OC)) == 0);
    VF_CHECK(memcmp(b1, b2, sizeof(float) * (size_t)(L * H * D)) == 0);
    VF_CHECK(t.calls[VF_PHASE_GEMM] == 1 && t.calls[VF_PHASE_ATTENTION] == 1);
    VF_CHECK(t.calls[VF_PHASE_MEMSET] == 1 && t.calls[VF_PHASE_TRANSFER] == 1);
    VF_CHECK(t.calls[VF_PHASE_ELEMENTWISE] == 0 && t.calls[VF_PHASE_OPTIMIZER] == 0);
    double sum = 0;
    for (int i = 0; i < VF_PHASE_N; i++) sum += t.ms[i];
    VF_CHECK(t.ms[VF_PHASE_GEMM] > 0 && t.ms[VF_PHASE_ATTENTION] > 0);
    VF_CHECK_MSG(sum <= t.total_ms + 1e-3 && t.total_ms <= wall + 1e-3, "sum %g, span %g, wall %g", sum,
                 t.total_ms, wall);
    printf("  gemm %.3f ms, attention %.3f ms, memset %.3f ms, upload %.3f ms; span %.3f ms, wall %.3f ms\n",
           t.ms[VF_PHASE_GEMM], t.ms[VF_PHASE_ATTENTION], t.ms[VF_PHASE_MEMSET], t.ms[VF_PHASE_TRANSFER],
           t.total_ms, wall);

    /* the device's time, not the launch's: 20 GEMMs enqueue in far less than they run */
    for (int i = 0; i < 20; i++) T->matmul_fwd(T, o2, x, w, NULL, N, C, OC);
    VF_CHECK(vf_phases_read(p, &t, &st) == 0);
    const double floor_ms = 20 * 2.0 * N * C * OC / 2e15 * 1e3;
    VF_CHECK_EQ_INT(t.calls[VF_PHASE_GEMM], 20);
    VF_CHECK_EQ_INT(t.calls[VF_PHASE_ATTENTION], 0);
    if (cuda)
        VF_CHECK_MSG(t.ms[VF_PHASE_GEMM] >= floor_ms, "20 GEMMs in %g ms, below %g ms", t.ms[VF_PHASE_GEMM],
                     floor_ms);
    vf_phases_free(p);
    void *bufs[] = {x, w, q, o1, o2, a1, a2, lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) G->free(G, bufs[i]);
    free(hx), free(hw), free(hq), free(r1), free(r2), free(b1), free(b2);
}

int main(void) { return vf_gpu_test_main(&G, NULL); }
