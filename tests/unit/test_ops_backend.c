/* test_ops_backend.c — the CPU op table: every entry present, dtypes and device, the
 * wrappers forward to the typed kernels (same bits through the table), memory entries,
 * recorded units (run as they come), vf_backend_for, and the "built without CUDA" answer
 * of a build without CUDA. */
#include "kernels/ops.h"
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

VF_TEST(cpu_table_complete)
{
    vf_backend *be = vf_backend_cpu();
    VF_CHECK(be != NULL);
    VF_CHECK_STR(be->name, "cpu");
    VF_CHECK(be->device.kind == VF_DEV_CPU);
    VF_CHECK(be->act_dtype == VF_DTYPE_F32 && be->grad_dtype == VF_DTYPE_F32);
    /* every op of the list (kernels/ops_list.h), by name: present in the CPU table, and
     * the list is the struct's op members in order (consecutive function pointers from
     * `alloc` to the end), so no member can be left out of it */
    int missing = 0;
    for (int i = 0; i < vf_nops; i++) {
        const vf_op_info *op = &vf_ops[i];
        VF_CHECK_MSG(vf_op_fn(be, op) != NULL, "CPU backend: op %s (%s) is NULL", op->name, op->family);
        missing += vf_op_fn(be, op) == NULL;
        VF_CHECK_MSG(op->offset == offsetof(vf_backend, alloc) + (size_t)i * sizeof(void (*)(void)),
                     "op %s: not the struct's member #%d", op->name, i);
        VF_CHECK(vf_op_find(op->name) == op);
    }
    VF_CHECK_EQ_INT(missing, 0);
    VF_CHECK_EQ_INT((int)(offsetof(vf_backend, alloc) + (size_t)vf_nops * sizeof(void (*)(void))),
                    (int)sizeof(vf_backend));
    VF_CHECK(vf_op_find("no_such_op") == NULL);
    fprintf(stderr, "  %d ops\n", vf_nops);
}

/* Recorded units on the CPU: nothing is recorded, every unit's ops run as they come, once
 * (the loop of ops.h's graph_begin comment enqueues them exactly once). */
VF_TEST(cpu_units_run_as_they_come)
{
    vf_backend *be = vf_backend_cpu();
    const uint64_t key[3] = {1, 2, 3};
    float y[4] = {0, 0, 0, 0}, x[4] = {1, 2, 3, 4};
    for (int run = 0; run < 3; run++) {
        int n = 0;
        do {
            if (be->graph_begin(be, key, 3)) {
                be->axpy(be, y, x, 1.0f, 4);
                n++;
            }
        } while (be->graph_end(be));
        VF_CHECK_EQ_INT(n, 1);
    }
    VF_CHECK(y[0] == 3 && y[3] == 12);
}

VF_TEST(backend_for_device)
{
    vf_status st = {0};
    vf_device cpu = {VF_DEV_CPU, 0};
    VF_CHECK(vf_backend_for(cpu, &st) == vf_backend_cpu());
    VF_CHECK(st.code == 0);
#ifndef VFLOW_HAVE_CUDA
    vf_device cuda = {VF_DEV_CUDA, 1};
    VF_CHECK(vf_backend_for(cuda, &st) == NULL);
    VF_CHECK(st.code == VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "built without CUDA") && strstr(st.msg, "cuda:1"), "%s", st.msg);
    vf_status st2 = {0};
    VF_CHECK(vf_backend_cuda(0, &st2) == NULL && st2.code == VF_EUSAGE);
#endif
}

VF_TEST(table_matches_typed_kernels)
{
    vf_backend *be = vf_backend_cpu();
    vf_status st = {0};
    int64_t N = 9, C = 11, OC = 5;
    float *x = be->alloc(be, sizeof(float) * N * C, &st), *w = tl_randf(OC * C, -1, 1);
    float *b = tl_randf(OC, -1, 1), *o1 = tl_zerosf(N * OC), *o2 = tl_zerosf(N * OC);
    VF_CHECK(x != NULL && st.code == 0);
    float *src = tl_randf(N * C, -1, 1);
    be->upload(be, x, src, N * C, VF_DTYPE_F32);
    VF_CHECK(memcmp(x, src, sizeof(float) * N * C) == 0);
    be->matmul_fwd(be, o1, x, w, b, N, C, OC);
    vf_cpu_matmul_fwd(o2, src, w, b, N, C, OC);
    VF_CHECK(memcmp(o1, o2, sizeof(float) * N * OC) == 0);
    be->gelu_fwd(be, o1, o2, N * OC);
    vf_cpu_gelu_fwd(o2, o2, N * OC);
    VF_CHECK(memcmp(o1, o2, sizeof(float) * N * OC) == 0);
    VF_CHECK(be->sumsq(be, o1, N * OC) == vf_cpu_sumsq(o2, N * OC));
    VF_CHECK(be->mse_fwd_bwd(be, NULL, o1, src, N * OC, N * OC, 1.0f) ==
             vf_cpu_mse_fwd_bwd(NULL, o2, src, N * OC, N * OC, 1.0f));
    be->memset0(be, x, sizeof(float) * N * C);
    for (int64_t i = 0; i < N * C; i++) VF_CHECK(x[i] == 0.0f);
    be->copy(be, x, src, sizeof(float) * N * C);
    float *y = tl_zerosf(N * C);
    be->download(be, y, x, N * C, VF_DTYPE_F32);
    VF_CHECK(memcmp(y, src, sizeof(float) * N * C) == 0);
    VF_CHECK(be->sync(be, &st) == 0);
    be->free(be, x);
    free(w), free(b), free(o1), free(o2), free(src), free(y);
}

/* copy2d against element-by-element indexing: frames [1, 3) of each of 5 planes of 4
 * frames into frames [2, 4) of planes of 6 frames; the rest of dst stays. */
VF_TEST(copy2d_strided_block)
{
    vf_backend *be = vf_backend_cpu();
    const int64_t planes = 5, Ts = 4, Td = 6, hw = 7;
    float *src = tl_randf(planes * Ts * hw, -1, 1), *dst = tl_randf(planes * Td * hw, -1, 1);
    float *want = tl_dupf(dst, planes * Td * hw);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t t = 0; t < 2; t++)
            for (int64_t i = 0; i < hw; i++) want[(p * Td + 2 + t) * hw + i] = src[(p * Ts + 1 + t) * hw + i];
    const size_t es = sizeof(float);
    be->copy2d(be, dst + 2 * hw, (size_t)(Td * hw) * es, src + hw, (size_t)(Ts * hw) * es, (size_t)(2 * hw) * es,
               (size_t)planes);
    VF_CHECK(memcmp(dst, want, sizeof(float) * (size_t)(planes * Td * hw)) == 0);
    be->copy2d(be, dst, 8, src, 8, 0, 3); /* nothing to copy */
    be->copy2d(be, dst, 8, src, 8, 4, 0);
    VF_CHECK(memcmp(dst, want, sizeof(float) * (size_t)(planes * Td * hw)) == 0);
    free(src), free(dst), free(want);
}

int main(void) { return vf_test_main(); }
