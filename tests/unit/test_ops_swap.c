/* test_ops_swap.c — the CPU backend's block-swap copy queue (ops.h "block swap"): blocks
 * streamed through a ring of two buffers by the queue's thread, each read right after
 * its swap_wait, sum to the host sum of the blocks (every copy landed whole, before its
 * use, and none overwrote a buffer before its previous use was done); many slots and
 * more copies than the queue holds; the stats count the copies' time. */
#include "kernels/ops.h"
#include "tests/unit/ops_testlib.h"

static void ring_sum(int K, int64_t n)
{
    vf_backend *be = vf_backend_cpu();
    vf_status st = {0};
    float *host = be->alloc_pinned(be, sizeof(float) * (size_t)(K * n), &st);
    void *q = be->swap_new(be, 2, &st);
    VF_CHECK_MSG(host && q, "swap setup: %s", st.msg);
    if (!host || !q) return;
    float *want = tl_zerosf(n), *sum = tl_zerosf(n), *ring[2] = {tl_zerosf(n), tl_zerosf(n)};
    for (int64_t i = 0; i < K * n; i++) host[i] = (float)((i * 7) % 61) - 30.0f;
    for (int k = 0; k < K; k++)
        for (int64_t i = 0; i < n; i++) want[i] += host[k * n + i];
    for (int k = 0; k < 2 && k < K; k++) be->swap_in(be, q, k, ring[k], host + k * n, sizeof(float) * (size_t)n);
    for (int k = 0; k < K; k++) {
        be->swap_wait(be, q, k % 2);
        for (int64_t i = 0; i < n; i++) sum[i] += ring[k % 2][i];
        if (k + 2 < K) be->swap_in(be, q, k % 2, ring[k % 2], host + (k + 2) * n, sizeof(float) * (size_t)n);
    }
    VF_CHECK_MSG(memcmp(sum, want, sizeof(float) * (size_t)n) == 0, "ring of 2, %d blocks of %lld", K, (long long)n);
    double cs = -1, ws = -1;
    be->swap_stats(be, q, &cs, &ws);
    VF_CHECK(cs > 0 && ws >= 0);
    be->swap_free(be, q);
    be->free_pinned(be, host);
    free(want), free(sum), free(ring[0]), free(ring[1]);
}

VF_TEST(ring_of_two)
{
    ring_sum(1, 1000);
    ring_sum(7, 1 << 16);
}

/* 200 copies over 5 slots (more than the queue holds at once): each slot's wait covers
 * every copy enqueued for it */
VF_TEST(many_slots)
{
    vf_backend *be = vf_backend_cpu();
    vf_status st = {0};
    void *q = be->swap_new(be, 5, &st);
    VF_CHECK_MSG(q != NULL, "swap_new: %s", st.msg);
    if (!q) return;
    enum { N = 200, E = 512 };
    float *src = tl_randf((int64_t)N * E, -1, 1), *dst = tl_zerosf((int64_t)N * E);
    for (int k = 0; k < N; k++) be->swap_in(be, q, k % 5, dst + k * E, src + k * E, sizeof(float) * E);
    for (int s = 0; s < 5; s++) be->swap_wait(be, q, s);
    VF_CHECK(memcmp(src, dst, sizeof(float) * N * E) == 0);
    be->swap_free(be, q);
    free(src), free(dst);
}

int main(void) { return vf_test_main(); }
