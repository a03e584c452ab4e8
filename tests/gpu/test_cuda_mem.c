/* test_cuda_mem.c — the CUDA backend's memory, copy, block-swap and all-to-all
 * ops against the CPU backend and their accounts.
 *
 * vflow-test: labels=gpu timeout=600
 *
 * The inputs, the comparison and the stand-in mode are tests/gpu/cuda_ops_harness.h's.
 */
#include "tests/gpu/cuda_ops_harness.h"

VF_TEST(memory_ops)
{
    const int64_t n = 5000;
    float *x = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(i % 251) - 125.0f; /* exact in every dtype */
    const vf_dtype dts[] = {VF_DTYPE_F32, VF_DTYPE_BF16, VF_DTYPE_F16, VF_DTYPE_I32};
    for (int d = 0; d < (G->device.kind == VF_DEV_CPU ? 3 : 4); d++) { /* i32: device only */
        dbuf b = dnew(x, n, dts[d], 0);
        float *y = dget(b);
        VF_CHECK_MSG(memcmp(x, y, sizeof(float) * n) == 0, "upload/download round trip of %s", vf_dtype_name(dts[d]));
        dfree(b);
        free(y);
    }
    dbuf a = dbf(x, n, 0), b = dbf(NULL, n, 1);
    const size_t es = vf_dtype_size(G->act_dtype);
    G->copy(G, b.p, a.p, (size_t)n * es);
    cmpd("copy", b, x, 0);
    /* copy2d: 50 blocks of 60 elements at a pitch of 100, into a pitch of 90 after 30 */
    float *want = malloc(sizeof(float) * n);
    memcpy(want, x, sizeof(float) * n);
    for (int64_t r = 0; r < 50; r++)
        for (int64_t i = 0; i < 60; i++) want[30 + r * 90 + i] = x[r * 100 + i];
    G->copy2d(G, (char *)b.p + 30 * es, 90 * es, a.p, 100 * es, 60 * es, 50);
    cmpd("copy2d", b, want, 0);
    free(want);
    G->memset0(G, b.p, (size_t)n * es);
    float *z = calloc((size_t)n, sizeof(float));
    cmpd("memset0", b, z, 0);
    dfree(a), dfree(b);
    /* shareable memory holds what is uploaded into it, as alloc's does */
    vf_status sst = {0};
    void *sh = G->alloc_shared(G, (size_t)n * 4, &sst);
    VF_CHECK_MSG(sh != NULL, "alloc_shared: %s", sst.msg);
    if (sh) {
        float *back = calloc((size_t)n, sizeof(float));
        G->upload(G, sh, x, n, VF_DTYPE_F32);
        G->download(G, back, sh, n, VF_DTYPE_F32);
        VF_CHECK_MSG(memcmp(x, back, sizeof(float) * n) == 0, "alloc_shared: upload/download round trip");
        G->free_shared(G, sh);
        free(back);
    }
    /* pinned host memory: the device copies into and out of it (one DMA each way), and it
     * is charged to the calling account until freed */
    vf_account *acct = vf_account_current();
    int64_t live0 = vf_account_live(acct);
    float *pin = G->alloc_pinned(G, (size_t)n * 4, &sst);
    VF_CHECK_MSG(pin != NULL, "alloc_pinned: %s", sst.msg);
    if (pin) {
        VF_CHECK(vf_account_live(acct) - live0 >= (int64_t)n * 4);
        void *d = G->alloc(G, (size_t)n * 4, &sst);
        memcpy(pin, x, sizeof(float) * n);
        G->copy(G, d, pin, (size_t)n * 4);
        memset(pin, 0, sizeof(float) * n);
        G->copy(G, pin, d, (size_t)n * 4);
        VF_CHECK_EQ_INT(G->sync(G, &sst), 0);
        VF_CHECK_MSG(memcmp(x, pin, sizeof(float) * n) == 0, "alloc_pinned: device round trip");
        G->free(G, d);
        G->free_pinned(G, pin);
        VF_CHECK_EQ_INT(vf_account_live(acct), live0);
    }
    free(x), free(z);
    /* sticky errors come back through sync with file:line */
    vf_status st = {0};
    VF_CHECK_EQ_INT(G->sync(G, &st), 0);
}

/* Block swap: host blocks streamed through a ring of two device buffers on the copy
 * queue, each added into a device sum right after it lands (what a partition's swapped
 * blocks do): the sum equals the host sum, so every copy arrived whole and before its use,
 * and no copy overwrote a buffer its previous use still read. */
VF_TEST(swap_ops)
{
    const int64_t n = 4096;
    const int K = 5;
    const size_t es = vf_dtype_size(G->act_dtype);
    vf_status st = {0};
    char *host = G->alloc_pinned(G, (size_t)(K * n) * es, &st);
    VF_CHECK_MSG(host != NULL, "alloc_pinned: %s", st.msg);
    void *q = host ? G->swap_new(G, 2, &st) : NULL;
    VF_CHECK_MSG(q != NULL, "swap_new: %s", st.msg);
    if (!host || !q) return;
    float *x = malloc(sizeof(float) * n), *want = calloc((size_t)n, sizeof(float));
    for (int k = 0; k < K; k++) {
        for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 7 + k * 13) % 61) - 30.0f; /* sums exact in bf16 */
        vf_backend_cpu()->upload(vf_backend_cpu(), host + (size_t)(k * n) * es, x, n, G->act_dtype);
        for (int64_t i = 0; i < n; i++) want[i] += x[i];
    }
    dbuf ring[2] = {dbf(NULL, n, 1), dbf(NULL, n, 2)}, sum = dbf(NULL, n, 3);
    G->memset0(G, sum.p, (size_t)n * es);
    G->swap_in(G, q, 0, ring[0].p, host, (size_t)n * es);
    G->swap_in(G, q, 1, ring[1].p, host + (size_t)n * es, (size_t)n * es);
    for (int k = 0; k < K; k++) {
        G->swap_wait(G, q, k % 2);
        G->add(G, sum.p, sum.p, ring[k % 2].p, n);
        if (k + 2 < K) G->swap_in(G, q, k % 2, ring[k % 2].p, host + (size_t)((k + 2) * n) * es, (size_t)n * es);
    }
    cmpd("swap_in ring of 2, 5 blocks", sum, want, 0);
    double cs, ws;
    G->swap_stats(G, q, &cs, &ws);
    VF_CHECK(cs >= 0 && ws >= 0);
    G->swap_free(G, q);
    G->free_pinned(G, host);
    dfree(ring[0]), dfree(ring[1]), dfree(sum);
    free(x), free(want);
    VF_CHECK_EQ_INT(G->sync(G, &st), 0);
}

/* The all-to-all of one rank (the most one device shows): its group joins through a host
 * group of one, and both an out-of-place and an in-place run (NCCL's staging) give back
 * exactly what was sent; a chunk twice the size the group was opened for is refused. The exchange among
 * several devices is tests/gpu/test_cuda_a2a.c's. */
VF_TEST(collective)
{
    const int64_t n = 3000; /* not a multiple of anything */
    const size_t bytes = (size_t)n * vf_dtype_size(G->act_dtype);
    vf_status st = {0};
    char key[64];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now); /* a key no other run of this test holds */
    snprintf(key, sizeof key, "vf-test-cuda-ops-%lld-%ld", (long long)now.tv_sec, now.tv_nsec);
    vf_a2a *boot = NULL;
    VF_CHECK_EQ_INT(vf_a2a_open(key, 1, 0, bytes, NULL, &boot, &st), 0); /* the CPU group is boot */
    void *g = boot ? G->a2a_open(G, boot, 1, 0, bytes, &st) : NULL;
    VF_CHECK_MSG(g != NULL, "a2a_open: %s", st.msg);
    if (!g) {
        vf_a2a_close(boot);
        return;
    }
    float *x = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 11) % 97) - 48.0f;
    dbuf a = dbf(x, n, 1), b = dbf(NULL, n, 2);
    VF_CHECK_EQ_INT(G->a2a_run(G, g, a.p, b.p, bytes, &st), 0);
    cmpd("a2a_run out of place, 1 rank", b, x, 0);
    VF_CHECK_EQ_INT(G->a2a_run(G, g, a.p, a.p, bytes, &st), 0);
    cmpd("a2a_run in place, 1 rank", a, x, 0);
    VF_CHECK(G->a2a_run(G, g, a.p, b.p, 2 * bytes, &st) != 0);
    G->a2a_close(G, g);
    vf_a2a_close(boot);
    dfree(a), dfree(b);
    free(x);
    VF_CHECK_EQ_INT(G->sync(G, &st), 0);
}

/* the comparisons test_cuda_ops.c's every_op_compared counts on */
VF_TEST(listed_cases_exist) { VF_CUDA_OP_CASES_MEM(VF_CASE_FN) }

int main(void) { return vf_cuda_ops_main(); }
