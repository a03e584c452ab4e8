/* test_cuda_xfer.c — device tensors between two processes on one node, through the
 * device-tensor hook (runtime/edge/transport_dev.h) over a real ZeroMQ ipc:// edge: CUDA IPC,
 * host staging, and NCCL (only with two GPUs: NCCL refuses two ranks on one device).
 *
 * vflow-test: labels=gpu timeout=300
 *
 * A sender process sends N items, each with a fresh device tensor "x" (a pattern that
 * names the item) and a host tensor "id"; the receiver checks every element of what
 * arrives (on its device, as bf16) and returns credits like a port does. The receiver
 * sleeps now and then, so the sender runs ahead into its credit limit: if the sender
 * released (and its pool reused and overwrote) a buffer before the receiver had copied
 * it, the pattern check fails. The sender also checks that the hook never holds more
 * than `capacity` of its tensors, and that all are released once the EOS is acked.
 *
 * `gpu_test_cuda_xfer bench [MiB…]` instead measures the handoff (send, receiver's copy,
 * credit back; the sender's buffer filled by a device memset, not checked) per size
 * against a device-to-device copy in one process, for
 * bench/bench_cuda.sh. Exits 77 without CUDA or a device (probed in a child: the
 * parent never touches CUDA, so the forks below start clean).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/vf_test.h"

#include "kernels/ops.h"
#include "runtime/edge/transport_zmq.h"
#include "runtime/edge/transport_dev.h"
#ifdef VFLOW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define NITEMS 24
#define CAP 3

static char g_addr[128];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float pattern(int item, int64_t j) { return (float)((item * 37 + j * 11) % 509) - 254.0f; }

/* ------------------------------------------------------------------ processes */

static int g_released, g_live;
static vf_backend *g_be;
static void rel_cb(void *data, void *hint)
{
    (void)hint;
    g_be->free(g_be, data);
    g_released++;
    g_live--;
}

/* sender: NITEMS items of n bf16 elements; returns 0 on success */
static int sender(const char *mode, int dev, int64_t n, int items, double *secs)
{
    vf_status st = {0};
    setenv("VFLOW_DEVXFER", mode, 1);
    if (!(g_be = vf_backend_cuda(dev, &st))) return fprintf(stderr, "sender: %s\n", st.msg), 1;
    vf_chan_hub *h = vf_chan_hub_new(&st);
    vf_edge_desc d = {.id = 1, .transport = VF_TR_IPC, .capacity = CAP, .max_item_bytes = 0};
    snprintf(d.addr, sizeof d.addr, "%s", g_addr);
    snprintf(d.name, sizeof d.name, "sender.x -> receiver.x (%s)", mode);
    vf_edge_end *e = NULL;
    if (vf_edge_open(h, &d, VF_PORT_OUT, &e, &st)) return fprintf(stderr, "sender: %s\n", st.msg), 1;
    float *hbuf = malloc(sizeof(float) * (size_t)n);
    int rc = 0;
    double t0 = 0;
    for (int i = 0; i < items && rc == 0; i++) {
        if (i == 1) t0 = now_s(); /* the first item pays the connection and the mappings */
        void *p = g_be->alloc(g_be, (size_t)n * 2, &st);
        if (!p) return fprintf(stderr, "sender: %s\n", st.msg), 1;
        if (secs) { /* timed: no host work in the loop (the pattern and its upload run at ~1 GB/s) */
            g_be->memset0(g_be, p, (size_t)n * 2);
        } else {
            for (int64_t j = 0; j < n; j++) hbuf[j] = pattern(i, j);
            g_be->upload(g_be, p, hbuf, n, VF_DTYPE_BF16);
        }
        vf_tensor *t = vf_tensor_wrap(VF_DTYPE_BF16, 1, &n, (vf_device){VF_DEV_CUDA, dev}, p, rel_cb, NULL, &st);
        g_live++;
        int64_t one = 1;
        vf_tensor *idt = vf_tensor_new(VF_DTYPE_I32, 1, &one, &st);
        *(int32_t *)idt->data = i;
        vf_item *it = vf_item_new("item", &st);
        vf_item_put(it, "x", t, &st);
        vf_item_put(it, "id", idt, &st);
        int64_t bytes = 0;
        vf_send_job job = {.it = it}; /* one end's send, as its port makes it */
        rc = e->ops->send(e, &job, &bytes, &st);
        vf_item_free(it); /* our reference goes: the hook's keeps the buffer until the credit */
        if (rc) fprintf(stderr, "sender: item %d: %s\n", i, st.msg);
        if (g_live > CAP) {
            fprintf(stderr, "sender: %d tensors held after item %d (capacity %d)\n", g_live, i, CAP);
            rc = 1;
        }
    }
    if (rc == 0 && vf_zmq_close_send(e, &st) < 0) rc = 1;
    while (rc == 0 && !vf_zmq_of(e)->acked && !e->closed) { /* wait for the receiver to read the EOS */
        if (vf_zmq_poll_control(e, &st) < 0) rc = 1;
        usleep(1000);
    }
    if (secs && items > 1) *secs = (now_s() - t0) / (items - 1);
    vf_edge_end_free(e); /* the ack returned every credit: the device lane's ring releases the rest */
    if (rc == 0 && (g_live != 0 || g_released != items)) {
        fprintf(stderr, "sender: %d tensors still held, %d released of %d\n", g_live, g_released, items);
        rc = 1;
    }
    vf_chan_hub_free(h);
    free(hbuf);
    return rc;
}

static int receiver(int dev, int64_t n, int items, int check, int slow)
{
    vf_status st = {0};
    vf_backend *be = vf_backend_cuda(dev, &st); /* the thread's device: arrivals land here */
    if (!be) return fprintf(stderr, "receiver: %s\n", st.msg), 1;
    vf_chan_hub *h = vf_chan_hub_new(&st);
    vf_edge_desc d = {.id = 1, .transport = VF_TR_IPC, .capacity = CAP};
    snprintf(d.addr, sizeof d.addr, "%s", g_addr);
    snprintf(d.name, sizeof d.name, "sender.x -> receiver.x");
    vf_edge_end *e = NULL;
    if (vf_edge_open(h, &d, VF_PORT_IN, &e, &st)) return fprintf(stderr, "receiver: %s\n", st.msg), 1;
    float *hbuf = malloc(sizeof(float) * (size_t)n);
    int got = 0, rc = 0;
    for (;;) {
        vf_item *it = NULL;
        int r = vf_zmq_try_recv(e, &it, &st);
        if (r == VF_EOS) break;
        if (r == VF_EDGE_EMPTY) {
            vf_zmq_flush_credits(e, &st);
            usleep(200);
            continue;
        }
        if (r < 0) {
            fprintf(stderr, "receiver: %s\n", st.msg);
            rc = 1;
            break;
        }
        if (slow && got % 4 == 1) usleep(20000); /* let the sender run into its credit limit */
        if (vf_zmq_recv_item(e, &it, &st) < 0) {
            fprintf(stderr, "receiver: %s\n", st.msg);
            rc = 1;
            break;
        }
        vf_tensor *x = vf_item_get(it, "x"), *idt = vf_item_get(it, "id");
        if (!x || !idt || x->device.kind != VF_DEV_CUDA || x->device.index != dev || x->dtype != VF_DTYPE_BF16 ||
            x->shape[0] != n) {
            fprintf(stderr, "receiver: item %d arrived malformed\n", got);
            rc = 1;
        } else if (check) {
            int id = *(int32_t *)idt->data;
            be->download(be, hbuf, x->data, n, VF_DTYPE_BF16);
            int64_t bad = 0;
            for (int64_t j = 0; j < n; j++) bad += hbuf[j] != pattern(id, j);
            if (bad || id != got) {
                fprintf(stderr, "receiver: item %d (id %d): %lld wrong elements\n", got, id, (long long)bad);
                rc = 1;
            }
        }
        vf_item_free(it);
        vf_zmq_consumed(e, &st);
        got++;
    }
    if (got != items) {
        fprintf(stderr, "receiver: got %d items of %d\n", got, items);
        rc = 1;
    }
    vf_edge_end_free(e);
    vf_chan_hub_free(h);
    free(hbuf);
    return rc;
}

/* forks receiver and sender; 0 when both succeed */
static int pair_run(const char *mode, int sdev, int rdev, int64_t n, int items, int slow, double *secs)
{
    static int seq;
    snprintf(g_addr, sizeof g_addr, "ipc:///tmp/vf-xfer-%d-%d.sock", (int)getpid(), seq++);
    int fds[2];
    if (pipe(fds)) return 1;
    pid_t r = fork();
    if (r == 0) _exit(receiver(rdev, n, items, !secs, slow));
    pid_t s = fork();
    if (s == 0) {
        double t = 0;
        int rc = sender(mode, sdev, n, items, secs ? &t : NULL);
        if (write(fds[1], &t, sizeof t) != sizeof t) rc = 1;
        _exit(rc);
    }
    close(fds[1]);
    double t = 0;
    if (read(fds[0], &t, sizeof t) != sizeof t) t = 0;
    close(fds[0]);
    int ws = 0, wr = 0;
    waitpid(s, &ws, 0);
    waitpid(r, &wr, 0);
    if (secs) *secs = t;
    return !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && WIFEXITED(wr) && WEXITSTATUS(wr) == 0);
}

static int g_ndev;

VF_TEST(ipc_one_gpu)
{
    VF_CHECK_EQ_INT(pair_run("ipc", 0, 0, 100003, NITEMS, 1, NULL), 0);
    VF_CHECK_EQ_INT(pair_run("ipc", 0, 0, 4 << 20, 8, 0, NULL), 0);
}

VF_TEST(host_staged)
{
    VF_CHECK_EQ_INT(pair_run("host", 0, 0, 70001, NITEMS, 1, NULL), 0);
}

VF_TEST(two_gpus)
{
    if (g_ndev < 2) {
        fprintf(stderr, "  (one GPU: IPC across devices and NCCL not tested)\n");
        return;
    }
    VF_CHECK_EQ_INT(pair_run("ipc", 0, 1, 100003, NITEMS, 1, NULL), 0);
#ifdef VFLOW_HAVE_NCCL
    VF_CHECK_EQ_INT(pair_run("nccl", 0, 1, 100003, NITEMS, 1, NULL), 0);
#endif
}

/* ------------------------------------------------------------------ bench */

#ifdef VFLOW_HAVE_CUDA
static int bench(int argc, char **argv)
{
    int sizes[16] = {1, 16, 64, 256}, ns = 4;
    if (argc > 2) {
        ns = 0;
        for (int i = 2; i < argc && ns < 16; i++) sizes[ns++] = atoi(argv[i]);
    }
    printf("%-10s %14s %14s %8s\n", "MiB", "ipc GB/s", "d2d copy GB/s", "ratio");
    for (int i = 0; i < ns; i++) {
        int64_t n = (int64_t)sizes[i] << 19; /* bf16 elements of sizes[i] MiB */
        double t = 0;
        if (pair_run("ipc", 0, 0, n, 40, 0, &t)) return 1;
        double copy = 0;
        int fds[2]; /* the copy runs in a child too: the parent stays CUDA-free */
        if (pipe(fds)) return 1;
        pid_t c = fork();
        if (c == 0) {
            void *a = NULL, *b = NULL;
            cudaEvent_t e0, e1;
            cudaMalloc(&a, (size_t)n * 2), cudaMalloc(&b, (size_t)n * 2);
            cudaMemset(a, 1, (size_t)n * 2);
            cudaEventCreate(&e0), cudaEventCreate(&e1);
            for (int w = 0; w < 3; w++) cudaMemcpy(b, a, (size_t)n * 2, cudaMemcpyDeviceToDevice);
            cudaEventRecord(e0, 0);
            for (int w = 0; w < 20; w++) cudaMemcpyAsync(b, a, (size_t)n * 2, cudaMemcpyDeviceToDevice, 0);
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            double s = ms / 1000.0 / 20;
            if (write(fds[1], &s, sizeof s) != sizeof s) _exit(1);
            _exit(0);
        }
        close(fds[1]);
        if (read(fds[0], &copy, sizeof copy) != sizeof copy) copy = 0;
        close(fds[0]);
        waitpid(c, NULL, 0);
        double bytes = (double)n * 2;
        printf("%-10d %14.1f %14.1f %8.2f\n", sizes[i], bytes / t / 1e9, bytes / copy / 1e9, copy / t);
        /* and as JSON, each size as it is measured (bench/bench_cuda.sh keeps these lines) */
        printf("{\"bench\":\"ipc\",\"mib\":%d,\"ipc_gb_s\":%.3f,\"copy_gb_s\":%.3f,\"ratio\":%.4f}\n", sizes[i],
               bytes / t / 1e9, bytes / copy / 1e9, copy / t);
        fflush(stdout);
    }
    return 0;
}
#endif

int main(int argc, char **argv)
{
#ifndef VFLOW_HAVE_CUDA
    (void)argc, (void)argv;
    printf("skip: vflow was built without CUDA\n");
    return 77;
#else
    int fds[2];
    if (pipe(fds)) return 1;
    pid_t p = fork();
    if (p == 0) { /* probe in a child */
        vf_status st = {0};
        int n = 0;
        if (!vf_backend_cuda(0, &st)) printf("skip: %s\n", st.msg), n = -1;
        else cudaGetDeviceCount(&n);
        fflush(stdout);
        if (write(fds[1], &n, sizeof n) != sizeof n) _exit(1);
        _exit(0);
    }
    close(fds[1]);
    if (read(fds[0], &g_ndev, sizeof g_ndev) != sizeof g_ndev) g_ndev = -1;
    close(fds[0]);
    waitpid(p, NULL, 0);
    if (g_ndev < 1) return 77;
    if (argc > 1 && strcmp(argv[1], "bench") == 0) return bench(argc, argv);
    return vf_test_main();
#endif
}
