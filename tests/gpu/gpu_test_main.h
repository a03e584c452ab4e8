/* gpu_test_main.h — the main of the tests/gpu C tests: the CUDA backend on device 0 as the
 * backend under test, or exit 77 (skip) when vflow was built without CUDA or no device is
 * usable. VFLOW_GPU_TEST_ON_CPU=1 puts the CPU backend in its place (every comparison
 * against the CPU must then pass exactly, the host clock takes the events' place): a check
 * of the test itself on a machine without a GPU, which CI runs (test_gpu_harness.sh).
 */
#ifndef VF_TESTS_GPU_GPU_TEST_MAIN_H
#define VF_TESTS_GPU_GPU_TEST_MAIN_H

#include <stdio.h>
#include <stdlib.h>

#include "kernels/ops.h"
#include "tests/vf_test.h"

/* Sets *gpu (the backend under test) and, when cpu is not NULL, *cpu (the reference),
 * then runs the file's VF_TESTs. */
static inline int vf_gpu_test_main(vf_backend **gpu, vf_backend **cpu)
{
    if (cpu) *cpu = vf_backend_cpu();
    const char *on_cpu = getenv("VFLOW_GPU_TEST_ON_CPU");
    if (on_cpu && atoi(on_cpu)) {
        *gpu = vf_backend_cpu();
        return vf_test_main();
    }
#ifndef VFLOW_HAVE_CUDA
    printf("skip: vflow was built without CUDA\n");
    return 77;
#else
    vf_status st = {0};
    *gpu = vf_backend_cuda(0, &st);
    if (!*gpu) {
        printf("skip: %s\n", st.msg[0] ? st.msg : "no CUDA device");
        return 77;
    }
    return vf_test_main();
#endif
}

#endif
