/* embed_loss.c — token embedding lookup (and its scatter-add backward) and the MSE loss
 * on the CPU.
 *
 * embed_bwd must add several dout rows into one table row when a token repeats; done
 * naively across threads that is a race and a thread-dependent order. Instead the
 * positions are stably sorted by token, each distinct token's rows are summed in token
 * (position) order in f64 by one thread, and the table row is rounded once.
 *
 * The MSE sum is split into 256 fixed blocks (a function of n only) whose f64 partial
 * sums are added in block order: the same bits on any thread count.
 */
#include <string.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

void vf_cpu_embed_fwd(float *out, const int32_t *tok, const float *table, int64_t N, int64_t C)
{
#pragma omp parallel for schedule(static) if (N * C > 16 * VF_CPU_PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        VF_ASSERT(tok[n] >= 0);
        memcpy(out + n * C, table + (int64_t)tok[n] * C, (size_t)C * sizeof(float));
    }
}

/* Stable bottom-up merge sort of idx[0..n) by tok[idx]; tmp has room for n. */
static void sort_by_token(int64_t *idx, int64_t *tmp, const int32_t *tok, int64_t n)
{
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) tmp[o++] = tok[idx[j]] < tok[idx[i]] ? idx[j++] : idx[i++];
            while (i < mid) tmp[o++] = idx[i++];
            while (j < hi) tmp[o++] = idx[j++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof(int64_t));
    }
}

void vf_cpu_embed_bwd(float *dtable, const float *dout, const int32_t *tok, int64_t N, int64_t C)
{
    if (N <= 0 || C <= 0) return;
    int64_t *idx = vf_cpu_scratch((size_t)N * sizeof(int64_t));
    int64_t *run = vf_cpu_scratch((size_t)(N + 1) * sizeof(int64_t));
    for (int64_t n = 0; n < N; n++) {
        VF_ASSERT(tok[n] >= 0);
        idx[n] = n;
    }
    sort_by_token(idx, run, tok, N); /* run doubles as the merge buffer */
    int64_t nrun = 0;
    for (int64_t i = 0; i < N; i++)
        if (i == 0 || tok[idx[i]] != tok[idx[i - 1]]) run[nrun++] = i;
    run[nrun] = N;
#pragma omp parallel if (N * C > VF_CPU_PAR_MIN && nrun > 1)
    {
        double *acc = vf_cpu_scratch((size_t)C * sizeof(double));
#pragma omp for schedule(dynamic, 4)
        for (int64_t r = 0; r < nrun; r++) {
            float *row = dtable + (int64_t)tok[idx[run[r]]] * C;
            for (int64_t c = 0; c < C; c++) acc[c] = row[c];
            for (int64_t i = run[r]; i < run[r + 1]; i++) {
                const float *g = dout + idx[i] * C;
                for (int64_t c = 0; c < C; c++) acc[c] += g[c];
            }
            for (int64_t c = 0; c < C; c++) row[c] = (float)acc[c];
        }
        vf_cpu_scratch_free(acc);
    }
    vf_cpu_scratch_free(run);
    vf_cpu_scratch_free(idx);
}

#define NBLK 256

double vf_cpu_mse_fwd_bwd(float *dpred, const float *pred, const float *target, int64_t n, int64_t count,
                          float grad_scale)
{
    if (n <= 0 || count <= 0) return 0.0;
    double part[NBLK];
    const double gs = 2.0 * (double)grad_scale / (double)count;
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
    for (int k = 0; k < NBLK; k++) {
        int64_t lo = n * k / NBLK, hi = n * (k + 1) / NBLK;
        double s = 0.0;
        for (int64_t i = lo; i < hi; i++) {
            double d = (double)pred[i] - (double)target[i];
            s += d * d;
            if (dpred) dpred[i] = (float)((double)dpred[i] + gs * d);
        }
        part[k] = s;
    }
    double s = 0.0;
    for (int k = 0; k < NBLK; k++) s += part[k];
    return s / (double)count;
}
