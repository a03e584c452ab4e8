/* bench_edges.c — edge throughput against memcpy measured in the same run.
 *
 *   64 MiB tensors over ipc:// and tcp:// (loopback) between two processes: GB/s and
 *   the ratio to single-threaded memcpy bandwidth of the same buffer size. On ipc the
 *   tensor is copied once into a shared-memory slot the receiver's tensor aliases
 *   (runtime/edge/edge_shm.h), so one memcpy is the ceiling; the first use of each slot
 *   also faults its pages in, which longer runs (more items) amortise. The same ipc edge
 *   without shared memory (VFLOW_EDGE_SHM=0), and tcp, send the tensor from its own
 *   memory and the receiver's tensor is the buffer ZeroMQ read it into: the kernel's two
 *   copies and the page faults of ZeroMQ's fresh receive buffer; a tcp edge sends its
 *   large tensors through its bulk lane (runtime/edge/edge_bulk.h) into buffers the
 *   receiver reuses, and is also measured without it (VFLOW_EDGE_BULK=0);
 *   the same over a bare ZeroMQ socket pair (zero-copy send, receive and drop, no edge),
 *   the socket's own ceiling on this machine: the edge's ratio to it is its overhead;
 *   4 KiB items: items/s over inproc (two threads), ipc and tcp.
 * Time runs from the first send to the receiver's acknowledgement of the end of stream
 * (every item consumed). The producer sends one tensor shared by every item, so the
 * numbers are the edge's cost, not the cost of filling buffers.
 * Each figure is the best of `reps` runs (the machine is shared).
 * Usage: bench_edges [big_items=8] [small_items=50000] [reps=3]
 *
 * Between two hosts: `bench_edges --netns RECV_NS RECV_ADDR [big_items] [reps]`, run inside
 * the sending host's network namespace (bench_edges_netns.sh makes two, joined by a veth
 * pair): every receiver enters RECV_NS and binds RECV_ADDR. It measures a plain TCP
 * socket stream (write / read of 64 MiB buffers, nothing else), the bare ZeroMQ tcp pair,
 * the tcp edge, and the tcp edge secured as a multi-node run uses it (CURVE on the ZeroMQ
 * socket, AES-256-GCM on the bulk lane: every byte between nodes authenticated and
 * encrypted; and with VFLOW_EDGE_BULK=auth, the lane authenticated but not encrypted),
 * each also without the bulk lane, and prints each edge's ratio to the stream.
 */
#include "runtime/core/alloc.h"
#include "runtime/edge/chan.h"
#include "runtime/core/item.h"
#include "runtime/edge/curve.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <zmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    fprintf(stderr, "bench_edges: %s: %s\n", what, st ? st->msg : "");
    exit(1);
}

static double memcpy_gbs(size_t n)
{
    unsigned char *a = malloc(n), *b = malloc(n);
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        memcpy(b, a, n);
        double t = now_s() - t0;
        if (n / t > best) best = n / t;
        a[r] = b[n - 1 - r]; /* keep the copies observable */
    }
    free(a);
    free(b);
    return best / 1e9;
}

/* --netns: the receivers' network namespace (NULL: this one), and the run key of the
 * CURVE variant (NULL: plain) */
static const char *g_recv_ns;
static const char *g_key;

static void enter_recv_ns(void)
{
    if (!g_recv_ns) return;
    char path[256];
    snprintf(path, sizeof path, "/var/run/netns/%s", g_recv_ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "bench_edges: cannot enter network namespace %s\n", g_recv_ns);
        _exit(1);
    }
    close(fd);
}

static vf_edge_desc desc(vf_transport tr, const char *addr, int cap, int64_t max_bytes)
{
    vf_edge_desc d = {0};
    d.id = 1;
    d.transport = tr;
    snprintf(d.addr, sizeof d.addr, "%s", addr);
    d.capacity = cap;
    d.max_item_bytes = max_bytes;
    snprintf(d.name, sizeof d.name, "bench.out -> bench.in");
    return d;
}

static void consume_all(vf_port *in)
{
    vf_status st = {0};
    vf_item *it;
    int rc;
    while ((rc = vf_recv(in, &it, &st)) == 0) vf_item_free(it);
    if (rc != VF_EOS) die("recv", &st);
}

static vf_tensor *shared_tensor(int64_t bytes)
{
    vf_status st = {0};
    int64_t shape[1] = {bytes};
    vf_tensor *t = vf_tensor_new(VF_DTYPE_U8, 1, shape, &st);
    if (!t) die("tensor", &st);
    memset(t->data, 0x5a, (size_t)bytes);
    return t;
}

static void produce(vf_port *out, vf_tensor *t, long n)
{
    vf_status st = {0};
    for (long i = 0; i < n; i++) {
        vf_item *it = vf_item_new("b", &st);
        vf_item_put(it, "x", vf_tensor_ref(t), &st);
        if (vf_send(out, it, &st) != 0) die("send", &st);
    }
    if (vf_close(out, &st) != 0 || vf_port_drain(out, -1, &st) != 0) die("close/drain", &st);
}

/* Seconds to move n items of `bytes` over a ZeroMQ edge to a forked consumer. */
static double zmq_run(vf_transport tr, const char *addr, int64_t bytes, long n, int cap)
{
    int fd[2];
    if (pipe(fd)) die("pipe", NULL);
    pid_t pid = fork();
    if (pid == 0) {
        enter_recv_ns();
        vf_status st = {0};
        vf_chan_hub *h = vf_chan_hub_new(&st);
        if (g_key && vf_chan_hub_secure(h, g_key, 0, 2, &st) != 0) die("secure", &st);
        vf_edge_desc d = desc(tr, addr, cap, bytes + 4096);
        d.peer = 1;
        vf_edge_end *e;
        vf_port *in;
        if (vf_edge_open(h, &d, VF_PORT_IN, &e, &st) != 0) die("bind", &st);
        char ep[256] = {0};
        snprintf(ep, sizeof ep, "%s", vf_edge_end_endpoint(e));
        if (write(fd[1], ep, sizeof ep) != (ssize_t)sizeof ep) _exit(1);
        vf_port_new("bench.in", VF_PORT_IN, &in, &st);
        vf_port_attach(in, e, &st);
        consume_all(in);
        vf_port_free(in);
        vf_chan_hub_free(h);
        _exit(0);
    }
    char ep[256];
    if (read(fd[0], ep, sizeof ep) != (ssize_t)sizeof ep) die("endpoint", NULL);
    close(fd[0]);
    close(fd[1]);
    vf_status st = {0};
    vf_chan_hub *h = vf_chan_hub_new(&st);
    if (g_key && vf_chan_hub_secure(h, g_key, 1, 2, &st) != 0) die("secure", &st);
    vf_edge_desc d = desc(tr, ep, cap, bytes + 4096);
    d.peer = 0;
    vf_edge_end *e;
    vf_port *out;
    if (vf_edge_open(h, &d, VF_PORT_OUT, &e, &st) != 0) die("connect", &st);
    vf_port_new("bench.out", VF_PORT_OUT, &out, &st);
    vf_port_attach(out, e, &st);
    vf_tensor *t = shared_tensor(bytes);
    /* one warm-up item so connection setup is not timed */
    vf_item *w = vf_item_new("warm", &st);
    vf_item_put(w, "x", vf_tensor_ref(t), &st);
    if (vf_send(out, w, &st) != 0) die("send", &st);
    double t0 = now_s();
    produce(out, t, n);
    double dt = now_s() - t0;
    vf_tensor_unref(t);
    vf_port_free(out);
    vf_chan_hub_free(h);
    waitpid(pid, NULL, 0);
    return dt;
}

/* Seconds to move n messages of `bytes` over a bare PUSH/PULL pair to a forked reader:
 * zero-copy sends of one buffer, each message received and dropped. */
static double raw_run(const char *addr, int64_t bytes, long n)
{
    int fd[2];
    if (pipe(fd)) die("pipe", NULL);
    pid_t pid = fork();
    if (pid == 0) {
        enter_recv_ns();
        void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_PULL);
        char ep[256] = {0};
        size_t len = sizeof ep;
        if (zmq_bind(s, addr) != 0 || zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &len) != 0) _exit(1);
        if (write(fd[1], ep, sizeof ep) != (ssize_t)sizeof ep) _exit(1);
        for (long i = 0; i <= n; i++) { /* the warm-up message, then n */
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, s, 0) < 0) _exit(1);
            zmq_msg_close(&m);
        }
        zmq_close(s);
        zmq_ctx_term(ctx);
        _exit(0);
    }
    char ep[256];
    if (read(fd[0], ep, sizeof ep) != (ssize_t)sizeof ep) die("endpoint", NULL);
    close(fd[0]);
    close(fd[1]);
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_PUSH);
    if (zmq_connect(s, ep) != 0) die("raw connect", NULL);
    unsigned char *b = malloc((size_t)bytes);
    memset(b, 0x5a, (size_t)bytes);
    double t0 = 0;
    for (long i = 0; i <= n; i++) {
        zmq_msg_t m;
        zmq_msg_init_data(&m, b, (size_t)bytes, NULL, NULL);
        if (zmq_msg_send(&m, s, 0) < 0) die("raw send", NULL);
        if (i == 0) t0 = now_s(); /* queued; connection setup is in the warm-up */
    }
    int status = 0;
    waitpid(pid, &status, 0); /* the reader exits once it has read every message */
    double dt = now_s() - t0;
    zmq_close(s);
    zmq_ctx_term(ctx);
    free(b);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("raw reader", NULL);
    return dt;
}

/* Seconds to stream n buffers of `bytes` over one plain TCP connection to a forked
 * reader at addr (an IPv4 address): the kernel's socket path and nothing else. */
static double stream_run(const char *addr, int64_t bytes, long n)
{
    int fd[2];
    if (pipe(fd)) die("pipe", NULL);
    pid_t pid = fork();
    if (pid == 0) {
        enter_recv_ns();
        int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        struct sockaddr_in sa = {.sin_family = AF_INET};
        inet_pton(AF_INET, addr, &sa.sin_addr);
        socklen_t len = sizeof sa;
        setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1) ||
            getsockname(ls, (struct sockaddr *)&sa, &len))
            _exit(1);
        int port = ntohs(sa.sin_port);
        if (write(fd[1], &port, sizeof port) != (ssize_t)sizeof port) _exit(1);
        int c = accept(ls, NULL, NULL);
        size_t cap = 1 << 20;
        char *buf = malloc(cap);
        int64_t want = (n + 1) * bytes, got = 0; /* the warm-up buffer, then n */
        while (got < want) {
            ssize_t r = read(c, buf, cap);
            if (r <= 0) _exit(1);
            got += r;
        }
        if (write(c, "k", 1) != 1) _exit(1);
        free(buf);
        _exit(0);
    }
    int port = 0;
    if (read(fd[0], &port, sizeof port) != (ssize_t)sizeof port) die("port", NULL);
    close(fd[0]);
    close(fd[1]);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &sa.sin_addr);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa)) die("stream connect", NULL);
    unsigned char *b = malloc((size_t)bytes);
    memset(b, 0x5a, (size_t)bytes);
    double t0 = 0;
    for (long i = 0; i <= n; i++) {
        for (int64_t off = 0; off < bytes;) {
            ssize_t w = write(s, b + off, (size_t)(bytes - off));
            if (w <= 0) die("stream write", NULL);
            off += w;
        }
        if (i == 0) t0 = now_s();
    }
    char k;
    if (read(s, &k, 1) != 1) die("stream ack", NULL); /* the reader has every byte */
    double dt = now_s() - t0;
    close(s);
    free(b);
    waitpid(pid, NULL, 0);
    return dt;
}

typedef struct {
    vf_port *in;
} cons_arg;

static void *cons_thread(void *arg)
{
    consume_all(((cons_arg *)arg)->in);
    return NULL;
}

static double inproc_run(int64_t bytes, long n, int cap)
{
    vf_status st = {0};
    vf_chan_hub *h = vf_chan_hub_new(&st);
    vf_edge_desc d = desc(VF_TR_INPROC, "", cap, bytes + 4096);
    vf_edge_end *r, *s;
    vf_port *in, *out;
    vf_edge_open(h, &d, VF_PORT_IN, &r, &st);
    vf_edge_open(h, &d, VF_PORT_OUT, &s, &st);
    vf_port_new("bench.in", VF_PORT_IN, &in, &st);
    vf_port_new("bench.out", VF_PORT_OUT, &out, &st);
    vf_port_attach(in, r, &st);
    vf_port_attach(out, s, &st);
    vf_tensor *t = shared_tensor(bytes);
    cons_arg a = {in};
    pthread_t th;
    pthread_create(&th, NULL, cons_thread, &a);
    double t0 = now_s();
    produce(out, t, n);
    pthread_join(th, NULL);
    double dt = now_s() - t0;
    vf_tensor_unref(t);
    vf_port_free(out);
    vf_port_free(in);
    vf_chan_hub_free(h);
    return dt;
}

/* Best of `reps` runs: the machine is shared, the best run is the least disturbed. */
#define BEST(expr)                                                                            \
    ({                                                                                        \
        double b_ = 1e30;                                                                     \
        for (int r_ = 0; r_ < reps; r_++) {                                                   \
            double t_ = (expr);                                                               \
            if (t_ < b_) b_ = t_;                                                             \
        }                                                                                     \
        b_;                                                                                   \
    })

/* Two hosts: the edges against a plain TCP stream between them (see the top). */
static int netns_main(int argc, char **argv)
{
    g_recv_ns = argv[2];
    const char *addr = argv[3];
    long n = argc > 4 ? atol(argv[4]) : 8;
    int reps = argc > 5 ? atoi(argv[5]) : 3;
    const int64_t big = 64ll << 20;
    char ep[128];
    snprintf(ep, sizeof ep, "tcp://%s:*", addr);
    printf("bench_edges --netns: %ld x 64 MiB to %s in namespace %s, best of %d\n", n, addr, g_recv_ns, reps);
    double g_str = n * (double)big / BEST(stream_run(addr, big, n)) / 1e9;
    printf("plain TCP stream 64 MiB: %.2f GB/s\n", g_str);
    double g_raw = n * (double)big / BEST(raw_run(ep, big, n)) / 1e9;
    printf("bare ZeroMQ tcp 64 MiB: %.2f GB/s (%.2f x the stream)\n", g_raw, g_raw / g_str);
    double g_tcp = n * (double)big / BEST(zmq_run(VF_TR_TCP, ep, big, n, 2)) / 1e9;
    printf("tcp edge 64 MiB tensors: %.2f GB/s (%.2f x the stream)\n", g_tcp, g_tcp / g_str);
    setenv("VFLOW_EDGE_BULK", "0", 1); /* the same edge with its frames through ZeroMQ */
    double g_tcp0 = n * (double)big / BEST(zmq_run(VF_TR_TCP, ep, big, n, 2)) / 1e9;
    unsetenv("VFLOW_EDGE_BULK");
    printf("tcp edge 64 MiB tensors, no bulk lane: %.2f GB/s (%.2f x the stream)\n", g_tcp0, g_tcp0 / g_str);
    char key[VF_CURVE_KEY_HEX + 1];
    vf_status st = {0};
    if (vf_curve_new_key(key, &st) != 0) die("key", &st);
    g_key = key;
    double g_cur = n * (double)big / BEST(zmq_run(VF_TR_TCP, ep, big, n, 2)) / 1e9;
    printf("tcp edge secured (a multi-node run's: CURVE, AES-256-GCM bulk lane) 64 MiB tensors: %.2f GB/s "
           "(%.2f x the stream)\n", g_cur, g_cur / g_str);
    setenv("VFLOW_EDGE_BULK", "auth", 1); /* the receiver offers an authenticated-only lane */
    double g_auth = n * (double)big / BEST(zmq_run(VF_TR_TCP, ep, big, n, 2)) / 1e9;
    printf("tcp edge secured, lane authenticated only (VFLOW_EDGE_BULK=auth) 64 MiB tensors: %.2f GB/s "
           "(%.2f x the stream)\n", g_auth, g_auth / g_str);
    setenv("VFLOW_EDGE_BULK", "0", 1);
    double g_cur0 = n * (double)big / BEST(zmq_run(VF_TR_TCP, ep, big, n, 2)) / 1e9;
    unsetenv("VFLOW_EDGE_BULK");
    printf("tcp edge secured, no bulk lane (frames through CURVE) 64 MiB tensors: %.2f GB/s (%.2f x the stream)\n",
           g_cur0, g_cur0 / g_str);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 3 && strcmp(argv[1], "--netns") == 0) return netns_main(argc, argv);
    long nbig = argc > 1 ? atol(argv[1]) : 8, nsmall = argc > 2 ? atol(argv[2]) : 50000;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    const int64_t big = 64ll << 20, small = 4096;
    char ipc[128];
    snprintf(ipc, sizeof ipc, "ipc:///tmp/vf-bench-edges-%d.sock", (int)getpid());
    printf("bench_edges: %ld x 64 MiB, %ld x 4 KiB, best of %d; capacity 2 (64 MiB), 64 (4 KiB)\n", nbig, nsmall,
           reps);
    double mc = memcpy_gbs((size_t)big);
    printf("memcpy 64 MiB: %.2f GB/s\n", mc);
    {
        unsigned char *b = malloc((size_t)big);
        memset(b, 3, (size_t)big);
        double best = 1e30;
        uint32_t c = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            c ^= vf_crc32c(0, b, (size_t)big);
            double dt = now_s() - t0;
            if (dt < best) best = dt;
        }
        printf("crc32c 64 MiB: %.2f GB/s (%.2f x memcpy)%s\n", big / best / 1e9, big / best / 1e9 / mc,
               c == 1 ? " " : "");
        free(b);
    }
    double t_ipc = BEST(zmq_run(VF_TR_IPC, ipc, big, nbig, 2));
    double g_ipc = nbig * (double)big / t_ipc / 1e9;
    printf("ipc 64 MiB tensors: %.2f GB/s (%.2f x memcpy)\n", g_ipc, g_ipc / mc);
    setenv("VFLOW_EDGE_SHM", "0", 1); /* the same edge with its frames through the socket */
    double t_ipc0 = BEST(zmq_run(VF_TR_IPC, ipc, big, nbig, 2));
    unsetenv("VFLOW_EDGE_SHM");
    double g_ipc0 = nbig * (double)big / t_ipc0 / 1e9;
    printf("ipc 64 MiB tensors, no shared memory: %.2f GB/s (%.2f x memcpy)\n", g_ipc0, g_ipc0 / mc);
    double t_tcp = BEST(zmq_run(VF_TR_TCP, "tcp://127.0.0.1:*", big, nbig, 2));
    double g_tcp = nbig * (double)big / t_tcp / 1e9;
    printf("tcp 64 MiB tensors: %.2f GB/s (%.2f x memcpy)\n", g_tcp, g_tcp / mc);
    setenv("VFLOW_EDGE_BULK", "0", 1);
    double g_tcp0 = nbig * (double)big / BEST(zmq_run(VF_TR_TCP, "tcp://127.0.0.1:*", big, nbig, 2)) / 1e9;
    unsetenv("VFLOW_EDGE_BULK");
    printf("tcp 64 MiB tensors, no bulk lane: %.2f GB/s (%.2f x memcpy)\n", g_tcp0, g_tcp0 / mc);
    double r_ipc = nbig * (double)big / BEST(raw_run(ipc, big, nbig)) / 1e9;
    printf("bare ZeroMQ ipc 64 MiB: %.2f GB/s (%.2f x memcpy; the edge %.2f x of it)\n", r_ipc, r_ipc / mc,
           g_ipc / r_ipc);
    double r_tcp = nbig * (double)big / BEST(raw_run("tcp://127.0.0.1:*", big, nbig)) / 1e9;
    printf("bare ZeroMQ tcp 64 MiB: %.2f GB/s (%.2f x memcpy; the edge without its bulk lane %.2f x of it)\n", r_tcp,
           r_tcp / mc, g_tcp0 / r_tcp);
    double s_in = BEST(inproc_run(small, nsmall, 64));
    printf("inproc 4 KiB items: %.0f items/s\n", nsmall / s_in);
    double s_ipc = BEST(zmq_run(VF_TR_IPC, ipc, small, nsmall, 64));
    printf("ipc 4 KiB items: %.0f items/s (%.2f GB/s)\n", nsmall / s_ipc, nsmall * (double)small / s_ipc / 1e9);
    double s_tcp = BEST(zmq_run(VF_TR_TCP, "tcp://127.0.0.1:*", small, nsmall, 64));
    printf("tcp 4 KiB items: %.0f items/s (%.2f GB/s)\n", nsmall / s_tcp, nsmall * (double)small / s_tcp / 1e9);
    unlink(ipc + 6);
    return 0;
}
