/* bench_matmul.c — GFLOP/s of the CPU backend's matmul_fwd against a naive triple loop.
 *
 * The peer is measured in the same run on the same data: a plain i-j-k loop with f64
 * accumulation in the same order as ours (so its output must match ours bit for bit,
 * which is checked), no blocking, no packing.
 * The naive loop is timed on a slice of the rows when the full product would take too
 * long; GFLOP/s are per the work actually timed, best of 7 interleaved rounds (the
 * machine may be shared). Every ISA path available on this CPU is measured, and its
 * output is checked bit for bit against the default path.
 *
 *   bench_matmul [threads]     (default: OMP's max threads)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>

#include "kernels/cpu/cpu_ops.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void naive(float *out, const float *inp, const float *w, const float *bias, int64_t N,
                  int64_t C, int64_t OC)
{
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++) {
            double acc = 0.0;
            for (int64_t c = 0; c < C; c++) acc += (double)inp[n * C + c] * w[o * C + c];
            out[n * OC + o] = (float)((bias ? bias[o] : 0.0) + acc);
        }
}

static void fill(float *x, int64_t n, unsigned *s)
{
    for (int64_t i = 0; i < n; i++) {
        *s = *s * 1664525u + 1013904223u;
        x[i] = (float)((*s >> 8) * (1.0 / 16777216.0) - 0.5);
    }
}

/* Best of `rounds` timings, the candidates interleaved round by round, so that a busy
 * machine (other processes on the cores) hurts every candidate alike. */
static void run(const char *label, int64_t N, int64_t C, int64_t OC)
{
    unsigned seed = 12345;
    float *inp = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * OC * C);
    float *bias = malloc(sizeof(float) * OC), *out = malloc(sizeof(float) * N * OC);
    float *ref = malloc(sizeof(float) * N * OC), *first = malloc(sizeof(float) * N * OC);
    fill(inp, N * C, &seed);
    fill(w, OC * C, &seed);
    fill(bias, OC, &seed);
    const double flop = 2.0 * N * C * OC;
    int64_t nn = N; /* naive peer on at most ~0.2 GFLOP of rows */
    while (nn > 1 && 2.0 * nn * C * OC > 2e8) nn /= 2;

    const char *def = vf_cpu_isa();
    const char *isas[] = {"avx512", "avx2", "generic"};
    int ok[3];
    double best[3] = {1e30, 1e30, 1e30}, best_naive = 1e30;
    for (int i = 0; i < 3; i++) ok[i] = vf_cpu_set_isa(isas[i]) == 0;
    vf_cpu_set_isa(def);
    vf_cpu_matmul_fwd(first, inp, w, bias, N, C, OC);
    int same[3] = {1, 1, 1};
    for (int round = 0; round < 7; round++) {
        double t0 = now();
        naive(ref, inp, w, bias, nn, C, OC);
        double t = now() - t0;
        if (t < best_naive) best_naive = t;
        for (int i = 0; i < 3; i++) {
            if (!ok[i]) continue;
            vf_cpu_set_isa(isas[i]);
            int reps = 0;
            t0 = now();
            do {
                vf_cpu_matmul_fwd(out, inp, w, bias, N, C, OC);
                reps++;
                t = now() - t0;
            } while (t < 0.05);
            if (t / reps < best[i]) best[i] = t / reps;
            same[i] &= memcmp(out, first, sizeof(float) * N * OC) == 0;
        }
    }
    vf_cpu_set_isa(def);
    int ok_naive = memcmp(first, ref, sizeof(float) * nn * OC) == 0;
    double gn = 2.0 * nn * C * OC / best_naive / 1e9;
    for (int i = 0; i < 3; i++) {
        if (!ok[i]) continue;
        double g = flop / best[i] / 1e9;
        printf("%-30s %5lldx%5lldx%5lld  %-7s %7.2f GFLOP/s  naive %5.2f GFLOP/s  ratio %5.1fx"
               "  bits==default:%s ==naive:%s\n",
               label, (long long)N, (long long)C, (long long)OC, isas[i], g, gn, g / gn,
               same[i] ? "yes" : "NO", ok_naive ? "yes" : "NO");
    }
    free(inp), free(w), free(bias), free(out), free(ref), free(first);
}

int main(int argc, char **argv)
{
    if (argc > 1) omp_set_num_threads(atoi(argv[1]));
    printf("threads %d, default isa %s\n", omp_get_max_threads(), vf_cpu_isa());
    run("square", 1024, 1024, 1024);
    /* DiT "tiny" preset (dim 64, ffn 256) on 2 clips of 192 tokens */
    run("dit-tiny qkv/out 384x64->64", 384, 64, 64);
    run("dit-tiny mlp up 384x64->256", 384, 64, 256);
    run("dit-tiny mlp down 384x256->64", 384, 256, 64);
    /* a larger DiT block (dim 512, ffn 2048, 1024 tokens) */
    run("dit-512 mlp up 1024x512->2048", 1024, 512, 2048);
    return 0;
}
