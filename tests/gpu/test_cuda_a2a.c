/* test_cuda_a2a.c — the all-to-all of sequence parallelism (kernels/ops.h a2a_open /
 * a2a_run) among the GPUs of one machine: n ranks, a process and a device each (n = the
 * devices, at most 8), join a host group (vflow.h vf_a2a), open the device group over it
 * (NCCL) and exchange chunks of device memory: out of place, in place (NCCL's staging),
 * twice in a row, and with a smaller chunk. Every rank checks that chunk i of what it
 * received is exactly what rank i sent it.
 *
 * vflow-test: labels=gpu timeout=180
 *
 * `test_cuda_a2a bench [mib=256] [iters=20]` times one in-place a2a_run of `mib` MiB per
 * rank (what Ulysses attention calls) against a plain NCCL all-to-all of the same bytes
 * (one group of ncclSend/ncclRecv into another buffer, on a communicator of its own), in
 * the same run, and prints both and the ratio (rank 0).
 *
 * Exits 77 without CUDA or with fewer than 2 devices. VFLOW_GPU_TEST_ON_CPU=1 runs 3
 * ranks on the CPU backend (whose device group is the host group): a check of the test
 * itself on a machine without a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ops.h"
#ifdef VFLOW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef VFLOW_HAVE_NCCL
#include <nccl.h>
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* what rank `from` sends rank `to` at element i: small integers, exact in bf16 */
static float val(int from, int to, int64_t i) { return (float)(from * 7 + to * 3 + (int)(i % 13)) - 20.0f; }

static int fail(int rank, const char *what, const vf_status *st)
{
    fprintf(stderr, "rank %d: %s%s%s\n", rank, what, st && st->msg[0] ? ": " : "", st ? st->msg : "");
    return 1;
}

/* One exchange of chunks of m elements, send and recv as given; 0 when rank received
 * exactly what each rank sent it. */
static int exchange(vf_backend *be, void *g, int n, int rank, int64_t m, void *send, void *recv, const char *what)
{
    vf_status st = {0};
    size_t es = vf_dtype_size(be->act_dtype);
    float *h = malloc(sizeof(float) * (size_t)(n * m));
    for (int j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) h[j * m + i] = val(rank, j, i);
    be->upload(be, send, h, n * m, be->act_dtype);
    int bad = be->a2a_run(be, g, send, recv, (size_t)m * es, &st) ? fail(rank, what, &st) : 0;
    if (!bad) {
        be->download(be, h, recv, n * m, be->act_dtype);
        if (be->sync(be, &st)) bad = fail(rank, what, &st);
        for (int i = 0; i < n && !bad; i++)
            for (int64_t k = 0; k < m && !bad; k++)
                if (h[i * m + k] != val(i, rank, k)) {
                    fprintf(stderr, "rank %d: %s: chunk %d element %lld is %g, rank %d sent %g\n", rank, what, i,
                            (long long)k, h[i * m + k], i, val(i, rank, k));
                    bad = 1;
                }
    }
    free(h);
    return bad;
}

#ifdef VFLOW_HAVE_NCCL
/* The peer: grouped ncclSend/ncclRecv of the same chunks into another buffer, on a
 * blocking communicator of its own whose id crosses over the host group. Seconds per call. */
static double nccl_plain(vf_a2a *boot, int n, int rank, int dev, size_t chunk, int iters)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0) ncclGetUniqueId(&id);
    unsigned char *ids = calloc((size_t)n, sizeof id);
    for (int j = 0; rank == 0 && j < n; j++) memcpy(ids + j * sizeof id, &id, sizeof id);
    vf_status st = {0};
    if (vf_a2a_run(boot, ids, ids, sizeof id, &st)) return -1;
    memcpy(&id, ids, sizeof id);
    free(ids);
    ncclComm_t comm;
    cudaSetDevice(dev);
    if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return -1;
    cudaStream_t s;
    cudaStreamCreate(&s);
    char *a = NULL, *b = NULL;
    cudaMalloc((void **)&a, chunk * n);
    cudaMalloc((void **)&b, chunk * n);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        for (int it = 0; it < (rep ? iters : 1); it++) {
            ncclGroupStart();
            for (int j = 0; j < n; j++) {
                ncclSend(a + j * chunk, chunk, ncclUint8, j, comm, s);
                ncclRecv(b + j * chunk, chunk, ncclUint8, j, comm, s);
            }
            ncclGroupEnd();
        }
        cudaStreamSynchronize(s);
        double t = (now_s() - t0) / (rep ? iters : 1);
        if (rep && t < best) best = t;
    }
    cudaFree(a), cudaFree(b);
    cudaStreamDestroy(s);
    ncclCommDestroy(comm);
    return best;
}
#endif

static int rank_main(const char *key, int n, int rank, bool on_cpu, bool bench, double mib, int iters)
{
    vf_status st = {0};
    vf_backend *be = on_cpu ? vf_backend_cpu() : vf_backend_cuda(rank, &st);
    if (!be) return fail(rank, "backend", &st);
    size_t es = vf_dtype_size(be->act_dtype);
    int64_t m = bench ? (int64_t)(mib * 1048576.0 / (double)es) / n : 12345;
    size_t chunk = (size_t)m * es;
    vf_a2a *boot = NULL;
    if (vf_a2a_open(key, n, rank, on_cpu ? chunk : 4096, NULL, &boot, &st)) return fail(rank, "host group", &st);
    void *g = be->a2a_open(be, boot, n, rank, chunk, &st);
    if (!g) {
        vf_a2a_close(boot);
        return fail(rank, "a2a_open", &st);
    }
    void *x = be->alloc(be, chunk * (size_t)n, &st), *y = x ? be->alloc(be, chunk * (size_t)n, &st) : NULL;
    int bad = !y ? fail(rank, "alloc", &st) : 0;
    if (!bad && !bench) {
        bad |= exchange(be, g, n, rank, m, x, y, "out of place");
        bad |= exchange(be, g, n, rank, m, x, x, "in place");
        bad |= exchange(be, g, n, rank, m, y, y, "in place again");
        bad |= exchange(be, g, n, rank, m / 3, x, y, "a smaller chunk");
    } else if (!bad) {
        double best = 1e30;
        for (int rep = 0; rep < 3 && !bad; rep++) {
            double t0 = now_s();
            for (int it = 0; it < (rep ? iters : 1) && !bad; it++)
                if (be->a2a_run(be, g, x, x, chunk, &st)) bad = fail(rank, "a2a_run", &st);
            if (!bad && be->sync(be, &st)) bad = fail(rank, "sync", &st);
            double t = (now_s() - t0) / (rep ? iters : 1);
            if (rep && t < best) best = t;
        }
        double peer = -1;
#ifdef VFLOW_HAVE_NCCL
        if (!on_cpu) peer = nccl_plain(boot, n, rank, rank, chunk, iters);
#endif
        if (!bad && rank == 0) {
            printf("a2a %d ranks, %.0f MiB per rank: vflow %.3f ms (%.1f GB/s sent per rank)", n, mib, best * 1e3,
                   (double)chunk * (n - 1) / best / 1e9);
            if (peer > 0) printf(", plain NCCL %.3f ms, ratio vflow/NCCL %.2fx", peer * 1e3, best / peer);
            printf("\n");
        }
    }
    if (x) be->free(be, x);
    if (y) be->free(be, y);
    be->a2a_close(be, g);
    vf_a2a_close(boot);
    return bad;
}

int main(int argc, char **argv)
{
    bool bench = argc > 1 && strcmp(argv[1], "bench") == 0;
    double mib = bench && argc > 2 ? atof(argv[2]) : 256;
    int iters = bench && argc > 3 ? atoi(argv[3]) : 20;
    const char *cpu = getenv("VFLOW_GPU_TEST_ON_CPU");
    bool on_cpu = cpu && atoi(cpu);
    int n = 3;
    if (!on_cpu) {
#ifndef VFLOW_HAVE_CUDA
        printf("skip: vflow was built without CUDA\n");
        return 77;
#else
        /* counted in a child: CUDA initialised in this process would not survive the fork
         * of the ranks */
        int count = 0, ws = 0;
        pid_t probe = fork();
        if (probe == 0) _exit(cudaGetDeviceCount(&count) == cudaSuccess ? (count > 100 ? 100 : count) : 0);
        if (probe > 0 && waitpid(probe, &ws, 0) == probe && WIFEXITED(ws)) count = WEXITSTATUS(ws);
        if (count < 2) {
            printf("skip: %d CUDA device(s); the all-to-all needs 2 or more\n", count);
            return 77;
        }
        n = count > 8 ? 8 : count;
#endif
    }
    char key[96];
    snprintf(key, sizeof key, "vf-test-cuda-a2a-%d", (int)getpid());
    fflush(stdout);
    pid_t pids[8];
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = rank_main(key, n, r, on_cpu, bench, mib, iters);
            fflush(stdout);
            _exit(rc);
        }
    }
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int ws = 0;
        waitpid(pids[r], &ws, 0);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) bad = 1;
    }
    printf("%s: %d ranks%s\n", bad ? "FAIL" : "ok", n, on_cpu ? " (CPU backend)" : "");
    return bad;
}
