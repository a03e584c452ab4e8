/* simd.c — builds the CPU backend's hot loops (simd_body.h) for AVX-512, AVX2 and the
 * baseline ISA, and picks one at first use.
 *
 * All builds compute every output with the same sequence of double operations (see
 * simd_body.h), so the choice changes speed, never bits; tests switch between them with
 * vf_cpu_set_isa and compare bytes. The choice is the best this CPU supports, or the
 * environment variable VFLOW_CPU_ISA (avx512 | avx2 | generic).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

/* baseline (SSE2 on x86-64, NEON on arm64): 2-lane vectors, 4×4 micro-tile */
typedef double vf_v2d __attribute__((vector_size(16)));
#define VF_SFX _generic
#define VF_SIMD_NAME "generic"
#define VF_VT vf_v2d
#define VF_VW 2
#define VF_MR 4
#define VF_NR 4
#include "kernels/cpu/simd_body.h"
#undef VF_SFX
#undef VF_SIMD_NAME
#undef VF_VT
#undef VF_VW
#undef VF_MR
#undef VF_NR

#if defined(__x86_64__)
typedef double vf_v4d __attribute__((vector_size(32)));
typedef double vf_v8d __attribute__((vector_size(64)));

#pragma GCC push_options
#pragma GCC target("avx2")
#define VF_SFX _avx2
#define VF_SIMD_NAME "avx2"
#define VF_VT vf_v4d
#define VF_VW 4
#define VF_MR 6
#define VF_NR 8
#include "kernels/cpu/simd_body.h"
#undef VF_SFX
#undef VF_SIMD_NAME
#undef VF_VT
#undef VF_VW
#undef VF_MR
#undef VF_NR
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f")
#define VF_SFX _avx512
#define VF_SIMD_NAME "avx512"
#define VF_VT vf_v8d
#define VF_VW 8
#define VF_MR 8
#define VF_NR 16
#include "kernels/cpu/simd_body.h"
#undef VF_SFX
#undef VF_SIMD_NAME
#undef VF_VT
#undef VF_VW
#undef VF_MR
#undef VF_NR
#pragma GCC pop_options
#endif

static const vf_cpu_simd *const isa_table[] = {
#if defined(__x86_64__)
    &table_avx512,
    &table_avx2,
#endif
    &table_generic,
};
#define N_ISA ((int)(sizeof isa_table / sizeof isa_table[0]))

static int isa_supported(const vf_cpu_simd *d)
{
#if defined(__x86_64__)
    if (d == &table_avx512) return __builtin_cpu_supports("avx512f");
    if (d == &table_avx2) return __builtin_cpu_supports("avx2");
#endif
    return 1;
}

static const vf_cpu_simd *cur_isa;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_init(void)
{
    const char *want = getenv("VFLOW_CPU_ISA");
    for (int i = 0; i < N_ISA; i++) {
        if (!isa_supported(isa_table[i])) continue;
        if (want && *want && strcmp(want, isa_table[i]->name) != 0) continue;
        cur_isa = isa_table[i];
        return;
    }
    if (want && *want)
        fprintf(stderr, "vflow: VFLOW_CPU_ISA=%s is unknown or unsupported here; using %s\n",
                want, isa_table[N_ISA - 1]->name);
    cur_isa = isa_table[N_ISA - 1];
}

const vf_cpu_simd *vf_cpu_simd_get(void)
{
    pthread_once(&isa_once, isa_init);
    return cur_isa;
}

int vf_cpu_set_isa(const char *name)
{
    pthread_once(&isa_once, isa_init);
    for (int i = 0; i < N_ISA; i++) {
        if (strcmp(name, isa_table[i]->name) == 0) {
            if (!isa_supported(isa_table[i])) return VF_EINVAL;
            cur_isa = isa_table[i];
            return 0;
        }
    }
    return VF_EINVAL;
}

const char *vf_cpu_isa(void) { return vf_cpu_simd_get()->name; }

void *vf_cpu_scratch(size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n == 0) n = 64;
    void *p = aligned_alloc(64, n);
    if (!p) {
        fprintf(stderr, "vflow: cpu kernel scratch of %zu bytes: out of memory\n", bytes);
        VF_ASSERT(p != NULL);
    }
    return p;
}

void vf_cpu_scratch_free(void *p) { free(p); }
