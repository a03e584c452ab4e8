/* cpu_internal.h — shared plumbing of the CPU backend's kernel files (not public).
 *
 * Include it AFTER the system headers: it switches floating-point contraction off for
 * the rest of the translation unit. The CPU backend promises the same bits for the same
 * inputs on every thread count and every x86 ISA path (kernels/cpu/gemm.c dispatches
 * AVX-512 / AVX2 / baseline micro-kernels); that holds only if every a*b+c is two IEEE
 * operations. C11 mode already defaults to -ffp-contract=off, but a gnu11 build or a
 * target("avx512f") function (which implies FMA in GCC 12) would contract silently,
 * so the pragma makes it a property of the source, not of the build flags.
 *
 * Parallelism rule for every kernel: OpenMP splits only independent outputs (rows,
 * columns, tiles, heads); each output is reduced by one thread in a fixed order, so the
 * result does not depend on how many threads run or how work is scheduled.
 */
#ifndef VF_CPU_INTERNAL_H
#define VF_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../runtime/vflow.h"

#pragma GCC optimize("fp-contract=off")

/* Below this many scalar operations a kernel runs on the calling thread: an OpenMP
 * fork costs a few microseconds. Thresholds never change results, only speed. */
#define VF_CPU_PAR_MIN 32768

/* Scratch for one kernel call on one thread (packed panels, score blocks). Kernels
 * cannot report errors (the op table returns void), so running out of memory for a
 * few megabytes of scratch is treated as fatal: it aborts with a message. Freed with
 * vf_cpu_scratch_free. */
void *vf_cpu_scratch(size_t bytes);
void vf_cpu_scratch_free(void *p);

/* ---- the GEMM engine (gemm.c): C = init + alpha · A·B with f64 accumulation.
 *
 * A(m,k) = A[m*sam + k*sak], B(k,n) = B[k*sbk + n*sbn]: any strides, so transposes
 * and strided head views need no copies. The products of two floats are exact in
 * double, the sum over k runs in k order in double, and each output is rounded once.
 * Output goes to f32 C (ldc) or, when C64 is set, to f64 C64 (ldc).
 *   init = accumulate ? C_old : bias_n[n] + bias_m[m] (each NULL = 0)
 */
typedef struct vf_gemm {
    int64_t M, N, K;
    const float *A;
    int64_t sam, sak;
    const float *B;
    int64_t sbk, sbn;
    float *C;
    double *C64;
    int64_t ldc;
    int accumulate;
    const float *bias_n;
    const float *bias_m;
    double alpha;
} vf_gemm;

/* Runs g; parallel = 0 keeps it on the calling thread (callers already inside an
 * OpenMP region), 1 splits output tiles across threads. */
void vf_cpu_gemm(const vf_gemm *g, int parallel);

#endif
