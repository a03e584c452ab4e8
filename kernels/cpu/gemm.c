/* gemm.c — the CPU backend's matrix-multiply engine (matmul, attention, conv3d use it).
 *
 * C = init + alpha · A·B with f32 inputs and f64 accumulation: a product of two floats
 * is exact in double, the sum over k runs in k order, each output is rounded once. The
 * layout is the classic GotoBLAS/BLIS one: blocks of A (MC×KC) and B (KC×NC) are packed
 * into f64 micro-panels, a register-blocked micro-kernel adds an MR×NR tile over one KC
 * block, and an f64 tile buffer carries the sums across KC blocks.
 *
 * Determinism: OpenMP splits output tiles only; every output element is summed by one
 * thread, k ascending, whatever the tile sizes or thread count. The micro-kernels for
 * AVX-512, AVX2 and the baseline are the same C (GCC vector extensions) instantiated at
 * different widths; without contraction (cpu_internal.h) each lane performs the same
 * double mul and add in the same order, so every ISA path yields the same bits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <omp.h>

#include "cpu_internal.h"
#include "cpu_ops.h"

typedef void (*kern_fn)(int64_t kc, const double *A, const double *B, double *C);

/* Micro-kernel: C (MR×NR, row-major) += Σ_k A[k*MR + i] · B[k*NR + j], k ascending.
 * VT is a vector of VW doubles; the NR columns are NR/VW vectors. */
#define VF_GEMM_KERNEL(NAME, VT, VW, MR, NR, TGT)                                    \
    TGT static void NAME(int64_t kc, const double *A, const double *B, double *C)    \
    {                                                                                \
        VT c[MR][NR / VW];                                                           \
        for (int i = 0; i < MR; i++)                                                 \
            for (int j = 0; j < NR / VW; j++) memcpy(&c[i][j], C + i * NR + j * VW, sizeof(VT)); \
        for (int64_t k = 0; k < kc; k++) {                                           \
            VT b[NR / VW];                                                           \
            for (int j = 0; j < NR / VW; j++) memcpy(&b[j], B + k * NR + j * VW, sizeof(VT)); \
            for (int i = 0; i < MR; i++) {                                           \
                double a = A[k * MR + i];                                            \
                for (int j = 0; j < NR / VW; j++) c[i][j] += a * b[j];               \
            }                                                                        \
        }                                                                            \
        for (int i = 0; i < MR; i++)                                                 \
            for (int j = 0; j < NR / VW; j++) memcpy(C + i * NR + j * VW, &c[i][j], sizeof(VT)); \
    }

typedef double v2d __attribute__((vector_size(16)));
VF_GEMM_KERNEL(kern_generic, v2d, 2, 4, 4, )
#if defined(__x86_64__)
typedef double v4d __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));
VF_GEMM_KERNEL(kern_avx2, v4d, 4, 6, 8, __attribute__((target("avx2"))))
VF_GEMM_KERNEL(kern_avx512, v8d, 8, 8, 16, __attribute__((target("avx512f"))))
#endif

typedef struct isa_desc {
    const char *name;
    int mr, nr;
    kern_fn kern;
} isa_desc;

static const isa_desc isa_table[] = {
#if defined(__x86_64__)
    {"avx512", 8, 16, kern_avx512},
    {"avx2", 6, 8, kern_avx2},
#endif
    {"generic", 4, 4, kern_generic},
};
#define N_ISA ((int)(sizeof isa_table / sizeof isa_table[0]))

static int isa_supported(const isa_desc *d)
{
#if defined(__x86_64__)
    if (strcmp(d->name, "avx512") == 0) return __builtin_cpu_supports("avx512f");
    if (strcmp(d->name, "avx2") == 0) return __builtin_cpu_supports("avx2");
#endif
    return 1;
}

static const isa_desc *cur_isa;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_init(void)
{
    const char *want = getenv("VFLOW_CPU_ISA");
    for (int i = 0; i < N_ISA; i++) {
        if (!isa_supported(&isa_table[i])) continue;
        if (want && *want && strcmp(want, isa_table[i].name) != 0) continue;
        cur_isa = &isa_table[i];
        return;
    }
    if (want && *want)
        fprintf(stderr, "vflow: VFLOW_CPU_ISA=%s is unknown or unsupported here; using %s\n",
                want, isa_table[N_ISA - 1].name);
    cur_isa = &isa_table[N_ISA - 1];
}

static const isa_desc *isa_get(void)
{
    pthread_once(&isa_once, isa_init);
    return cur_isa;
}

int vf_cpu_gemm_set_isa(const char *name)
{
    pthread_once(&isa_once, isa_init);
    for (int i = 0; i < N_ISA; i++) {
        if (strcmp(name, isa_table[i].name) == 0) {
            if (!isa_supported(&isa_table[i])) return VF_EINVAL;
            cur_isa = &isa_table[i];
            return 0;
        }
    }
    return VF_EINVAL;
}

const char *vf_cpu_gemm_isa(void) { return isa_get()->name; }

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

/* ---- packing: f32 strided → f64 micro-panels, zero-padded to MR / NR. */

/* mc rows from m0, kc from k0, into panels of mr rows: Ap[p][k][i]. */
static void pack_a(double *Ap, const vf_gemm *g, int64_t m0, int64_t mc, int64_t k0, int64_t kc,
                   int mr)
{
    for (int64_t p0 = 0; p0 < mc; p0 += mr) {
        double *dst = Ap + p0 * kc;
        int rows = (int)(mc - p0 < mr ? mc - p0 : mr);
        for (int i = 0; i < mr; i++) {
            if (i >= rows) {
                for (int64_t k = 0; k < kc; k++) dst[k * mr + i] = 0.0;
                continue;
            }
            const float *src = g->A + (m0 + p0 + i) * g->sam + k0 * g->sak;
            for (int64_t k = 0; k < kc; k++) dst[k * mr + i] = src[k * g->sak];
        }
    }
}

/* kc rows from k0, nc columns from n0, into panels of nr columns: Bp[p][k][j]. */
static void pack_b(double *Bp, const vf_gemm *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                   int nr)
{
    for (int64_t p0 = 0; p0 < nc; p0 += nr) {
        double *dst = Bp + p0 * kc;
        int cols = (int)(nc - p0 < nr ? nc - p0 : nr);
        if (g->sbn == 1) {
            for (int64_t k = 0; k < kc; k++) {
                const float *src = g->B + (k0 + k) * g->sbk + n0 + p0;
                for (int j = 0; j < cols; j++) dst[k * nr + j] = src[j];
                for (int j = cols; j < nr; j++) dst[k * nr + j] = 0.0;
            }
        } else {
            for (int j = 0; j < nr; j++) {
                if (j >= cols) {
                    for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = 0.0;
                    continue;
                }
                const float *src = g->B + k0 * g->sbk + (n0 + p0 + j) * g->sbn;
                for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = src[k * g->sbk];
            }
        }
    }
}

#ifndef KC
#define KC 256
#endif

/* One output tile [m0, m0+mc) × [n0, n0+nc): all K, then write back. */
static void gemm_tile(const vf_gemm *g, const isa_desc *isa, int64_t m0, int64_t mc, int64_t n0,
                      int64_t nc, double *Ap, double *Bp, double *Cb)
{
    const int mr = isa->mr, nr = isa->nr;
    const int64_t mp = (mc + mr - 1) / mr, np = (nc + nr - 1) / nr;
    memset(Cb, 0, (size_t)(mp * np * mr * nr) * sizeof(double));
    for (int64_t k0 = 0; k0 < g->K; k0 += KC) {
        int64_t kc = g->K - k0 < KC ? g->K - k0 : KC;
        pack_b(Bp, g, k0, kc, n0, nc, nr);
        pack_a(Ap, g, m0, mc, k0, kc, mr);
        for (int64_t jp = 0; jp < np; jp++)
            for (int64_t ip = 0; ip < mp; ip++)
                isa->kern(kc, Ap + ip * mr * kc, Bp + jp * nr * kc,
                          Cb + (jp * mp + ip) * mr * nr);
    }
    /* Cb holds micro-tiles (jp, ip), each MR×NR row-major. */
    for (int64_t jp = 0; jp < np; jp++) {
        int64_t j0 = jp * nr, nj = nc - j0 < nr ? nc - j0 : nr;
        for (int64_t ip = 0; ip < mp; ip++) {
            int64_t i0 = ip * mr, ni = mc - i0 < mr ? mc - i0 : mr;
            const double *cb = Cb + (jp * mp + ip) * mr * nr;
            for (int64_t ii = 0; ii < ni; ii++) {
                int64_t m = m0 + i0 + ii, n = n0 + j0;
                const double *src = cb + ii * nr;
                if (g->C64) {
                    double *c = g->C64 + m * g->ldc + n;
                    for (int64_t jj = 0; jj < nj; jj++)
                        c[jj] = g->accumulate ? c[jj] + g->alpha * src[jj] : g->alpha * src[jj];
                } else if (g->accumulate) {
                    float *c = g->C + m * g->ldc + n;
                    for (int64_t jj = 0; jj < nj; jj++)
                        c[jj] = (float)((double)c[jj] + g->alpha * src[jj]);
                } else {
                    float *c = g->C + m * g->ldc + n;
                    double bm = g->bias_m ? (double)g->bias_m[m] : 0.0;
                    for (int64_t jj = 0; jj < nj; jj++) {
                        double init = 0.0;
                        if (g->bias_n) init += g->bias_n[n + jj];
                        init += bm;
                        c[jj] = (float)(init + g->alpha * src[jj]);
                    }
                }
            }
        }
    }
}

void vf_cpu_gemm(const vf_gemm *g, int parallel)
{
    if (g->M <= 0 || g->N <= 0) return;
    const isa_desc *isa = isa_get();
    const int mr = isa->mr, nr = isa->nr;
    int nth = parallel ? omp_get_max_threads() : 1;
    double work = (double)g->M * (double)g->N * (double)(g->K > 0 ? g->K : 1);
    if (work < VF_CPU_PAR_MIN * 4.0) nth = 1;

    /* Tile sizes only change speed (each element's sum order is fixed): take big tiles
     * for cache reuse, smaller ones when there would be too few to feed the threads. */
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
    const int64_t kc = g->K < KC ? (g->K > 0 ? g->K : 1) : KC;
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
            gemm_tile(g, isa, m0, mcc, n0, ncc, Ap, Bp, Cb);
        }
        vf_cpu_scratch_free(Ap);
        vf_cpu_scratch_free(Bp);
        vf_cpu_scratch_free(Cb);
    }
}
