/* gemm.c — the CPU backend's matrix-multiply driver (matmul, attention, conv3d use it).
 *
 * C = init + alpha · A·B with f32 inputs and f64 accumulation: a product of two floats
 * is exact in double, the sum over k runs in k order, each output is rounded once. The
 * layout is the classic GotoBLAS/BLIS one: blocks of A (MC×KC) and B (KC×NC) are packed
 * into f64 micro-panels, a register-blocked micro-kernel adds an MR×NR tile over one KC
 * block, and an f64 tile buffer carries the sums across KC blocks. Packing, micro-kernel
 * and write-back live in simd_body.h, built per ISA (all builds give the same bits).
 *
 * Determinism: OpenMP splits output tiles only; every output element is summed by one
 * thread, k ascending, whatever the tile sizes or thread count — so tile sizes may
 * follow the thread count freely.
 */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

void vf_cpu_gemm(const vf_gemm *g, int parallel)
{
    if (g->M <= 0 || g->N <= 0) return;
    const vf_cpu_simd *isa = vf_cpu_simd_get();
    const int mr = isa->mr, nr = isa->nr;
    int nth = parallel ? omp_get_max_threads() : 1;
    double work = (double)g->M * (double)g->N * (double)(g->K > 0 ? g->K : 1);
    if (work < VF_CPU_PAR_MIN * 8.0) nth = 1;

    /* big tiles for cache reuse, smaller ones when there would be too few to feed the
     * threads */
    int64_t mc = 16 * (int64_t)mr, nc = 256 / nr * (int64_t)nr;
    if (nth > 1) {
        while (((g->M + mc - 1) / mc) * ((g->N + nc - 1) / nc) < 4 * nth) {
            if (nc > nr && nc >= mc) nc = (nc / 2 + nr - 1) / nr * nr;
            else if (mc > mr) mc = (mc / 2 + mr - 1) / mr * mr;
            else break;
        }
    }
    if (mc > (g->M + mr - 1) / mr * mr) mc = (g->M + mr - 1) / mr * mr;
    if (nc > (g->N + nr - 1) / nr * nr) nc = (g->N + nr - 1) / nr * nr;
    const int64_t tm = (g->M + mc - 1) / mc, tn = (g->N + nc - 1) / nc;
    const int64_t ntiles = tm * tn;
    const int64_t kc = g->K < VF_GEMM_KC ? (g->K > 0 ? g->K : 1) : VF_GEMM_KC;
    if (nth > ntiles) nth = (int)ntiles;

#pragma omp parallel num_threads(nth) if (nth > 1)
    {
        double *Ap = vf_cpu_scratch((size_t)(mc * kc) * sizeof(double));
        double *Bp = vf_cpu_scratch((size_t)(nc * kc) * sizeof(double));
        double *Cb = vf_cpu_scratch((size_t)(mc * nc) * sizeof(double));
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntiles; t++) {
            int64_t m0 = (t / tn) * mc, n0 = (t % tn) * nc;
            int64_t mcc = g->M - m0 < mc ? g->M - m0 : mc;
            int64_t ncc = g->N - n0 < nc ? g->N - n0 : nc;
            isa->gemm_tile(g, m0, mcc, n0, ncc, Ap, Bp, Cb);
        }
        vf_cpu_scratch_free(Ap);
        vf_cpu_scratch_free(Bp);
        vf_cpu_scratch_free(Cb);
    }
}
