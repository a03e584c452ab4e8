/* bench_sp.c — the CPU all-to-all of sequence parallelism (vflow.h "all-to-all among
 * ranks", runtime/edge/a2a_shm.c) against memcpy of the same bytes, in the same run.
 *
 * N forked ranks each send `mib` MiB per call (N chunks of mib/N MiB, one of which stays
 * with the rank) and receive as much; a call is a copy into the shared slots, the barrier,
 * and a copy out, plus the rank's own chunk across: (2N−1)/N of the buffer copied by
 * each of the N ranks at once, its floor on an idle machine with N cores. Printed per N: the
 * time of one call (best of `reps` timed loops of `calls` calls, after one warm-up call
 * that faults the pages in), the GB/s of the bytes each rank sends, memcpy's time for one
 * rank's buffer (single-threaded, best of as many), and the ratio all-to-all / memcpy.
 * Usage: bench_sp [mib=32] [calls=10] [reps=3] [max_ranks=4]
 */
#include "runtime/vflow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const vf_status *st)
{
    fprintf(stderr, "bench_sp: %s: %s\n", what, st ? st->msg : "");
    exit(1);
}

/* One rank: `reps` timed loops of `calls` calls; rank 0 writes the best per-call time. */
static void rank_main(const char *key, int n, int rank, size_t bytes, int calls, int reps, double *best)
{
    vf_status st = {0};
    vf_a2a *a = NULL;
    size_t chunk = bytes / (size_t)n;
    unsigned char *s = malloc(chunk * (size_t)n), *r = malloc(chunk * (size_t)n);
    if (!s || !r) die("out of memory", NULL);
    memset(s, rank + 1, chunk * (size_t)n);
    memset(r, 0, chunk * (size_t)n);
    if (vf_a2a_open(key, n, rank, chunk, NULL, &a, &st)) die("open", &st);
    if (vf_a2a_run(a, s, r, chunk, &st)) die("warm-up", &st);
    double b = 1e30;
    for (int k = 0; k < reps; k++) {
        double t0 = now_s();
        for (int c = 0; c < calls; c++)
            if (vf_a2a_run(a, s, r, chunk, &st)) die("run", &st);
        double t = (now_s() - t0) / calls;
        b = t < b ? t : b;
    }
    if (rank == 0) *best = b;
    vf_a2a_close(a);
    free(s), free(r);
}

static double memcpy_time(size_t bytes, int calls, int reps)
{
    unsigned char *s = malloc(bytes), *d = malloc(bytes);
    if (!s || !d) die("out of memory", NULL);
    memset(s, 1, bytes), memset(d, 0, bytes);
    double b = 1e30;
    for (int k = 0; k < reps; k++) {
        double t0 = now_s();
        for (int c = 0; c < calls; c++) {
            memcpy(d, s, bytes);
            __asm__ volatile("" : : "r"(d) : "memory");
        }
        double t = (now_s() - t0) / calls;
        b = t < b ? t : b;
    }
    free(s), free(d);
    return b;
}

int main(int argc, char **argv)
{
    int mib = argc > 1 ? atoi(argv[1]) : 32, calls = argc > 2 ? atoi(argv[2]) : 10;
    int reps = argc > 3 ? atoi(argv[3]) : 3, maxn = argc > 4 ? atoi(argv[4]) : 4;
    if (mib < 1 || calls < 1 || reps < 1 || maxn < 2 || maxn > 16) {
        fprintf(stderr, "usage: bench_sp [mib>=1] [calls>=1] [reps>=1] [max_ranks 2..16]\n");
        return 2;
    }
    size_t bytes = (size_t)mib << 20;
    double *shared = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) die("mmap", NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("bench_sp: %d MiB sent per rank and call, %d calls x best of %d, %ld cores online\n", mib, calls, reps,
           cores);
    printf("%6s %12s %10s %14s %8s\n", "ranks", "a2a_ms", "GB/s", "memcpy_ms", "ratio");
    for (int n = 2; n <= maxn; n++) {
        char key[96];
        snprintf(key, sizeof key, "bench_sp/%ld/%d", (long)getpid(), n);
        pid_t kids[16];
        fflush(NULL);
        for (int r = 1; r < n; r++) {
            kids[r] = fork();
            if (kids[r] == 0) {
                rank_main(key, n, r, bytes, calls, reps, NULL);
                _exit(0);
            }
        }
        rank_main(key, n, 0, bytes, calls, reps, shared);
        int failed = 0;
        for (int r = 1; r < n; r++) {
            int ws = 0;
            waitpid(kids[r], &ws, 0);
            failed += !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
        }
        if (failed) die("a rank failed", NULL);
        double ta = *shared, tm = memcpy_time(bytes / (size_t)n * (size_t)n, calls, reps);
        printf("%6d %12.3f %10.2f %14.3f %8.2f\n", n, ta * 1e3, (double)bytes / ta * 1e-9, tm * 1e3, ta / tm);
    }
    return 0;
}
