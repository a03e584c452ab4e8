/* test_chan_peer_gone.c — a ZeroMQ sender's drain after vf_close must not wait forever
 * for a receiver process that is gone (runtime/edge/port.c vf_port_drain, transport_zmq.c):
 * the receiver (a forked child speaking the edge's wire format on a raw DEALER) reads
 * every item and the EOS, then exits without its final ack reaching the sender (the
 * lost last frame seen at exit with P=4 training). Before the fix the drain waited until
 * the stop flag; now it ends about VF_PEER_GONE_MS after the disconnect. A receiver that
 * is merely slow (connected, reading late) is still waited for and gets every item.
 * (Before the fix vf_port_free, draining without a bound, never returned here.)
 * vflow-test: timeout=60 */
#include "runtime/core/alloc.h"
#include "runtime/edge/chan.h"
#include "tests/vf_test.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define NITEMS 20

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The child: binds addr, tells the parent through fd, reads data frames (crediting
 * each back) up to the EOS, then acks it only when `ack`; sleeps delay_ms before reading.
 * Exit code 0 when it read exactly NITEMS items before the EOS. */
static void receiver(const char *addr, int fd, bool ack, int delay_ms)
{
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 1000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(s, addr) != 0) _exit(10);
    if (write(fd, "r", 1) != 1) _exit(11);
    if (delay_ms) usleep((useconds_t)delay_ms * 1000);
    int items = 0;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) _exit(12);
        const unsigned char *p = zmq_msg_data(&m);
        bool eos = zmq_msg_size(&m) == 8 && memcmp(p, "VFCE", 4) == 0;
        zmq_msg_close(&m);
        if (eos) break;
        items++;
        unsigned char c[8] = {'V', 'F', 'C', 'C', 1, 0, 0, 0};
        zmq_send(s, c, sizeof c, 0);
    }
    if (ack) {
        unsigned char a[8] = {'V', 'F', 'C', 'A', 0, 0, 0, 0};
        zmq_send(s, a, sizeof a, 0);
    } else {
        linger = 0; /* the ack never leaves: as if lost with the connection */
        zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
    _exit(items == NITEMS ? 0 : 13);
}

static vf_item *mk(int seq)
{
    vf_status st = {0};
    char id[32];
    snprintf(id, sizeof id, "i%d", seq);
    vf_item *it = vf_item_new(id, &st);
    int64_t shape[1] = {4096};
    vf_tensor *t = vf_tensor_new(VF_DTYPE_U8, 1, shape, &st);
    memset(t->data, seq, 4096);
    vf_item_put(it, "x", t, &st);
    return it;
}

/* Sends NITEMS to a forked receiver, closes, drains with a 10 s bound. Returns the
 * drain's result; *ms the time from the first send to the drain's end; *child the receiver's exit code. */
static int send_and_drain(bool ack, int delay_ms, int64_t *ms, int *child)
{
    char addr[128];
    snprintf(addr, sizeof addr, "ipc:///tmp/vf-peer-gone-%d-%d.sock", (int)getpid(), (int)ack);
    int pfd[2];
    VF_CHECK(pipe(pfd) == 0);
    pid_t pid = fork();
    VF_CHECK(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        receiver(addr, pfd[1], ack, delay_ms);
    }
    close(pfd[1]);
    char c;
    VF_CHECK(read(pfd[0], &c, 1) == 1);
    close(pfd[0]);

    vf_status st = {0};
    vf_chan_hub *h = vf_chan_hub_new(&st);
    vf_edge_desc d = {0};
    d.id = 1;
    d.transport = VF_TR_IPC;
    snprintf(d.addr, sizeof d.addr, "%s", addr);
    d.capacity = 4;
    snprintf(d.name, sizeof d.name, "src.out -> dst.in");
    vf_edge_end *e = NULL;
    VF_CHECK_EQ_INT(vf_edge_open(h, &d, VF_PORT_OUT, &e, &st), 0);
    vf_port *out = NULL;
    VF_CHECK_EQ_INT(vf_port_new("out", VF_PORT_OUT, &out, &st), 0);
    VF_CHECK_EQ_INT(vf_port_attach(out, e, &st), 0);
    int64_t t0 = now_ms();
    for (int i = 0; i < NITEMS; i++) VF_CHECK_EQ_INT(vf_send(out, mk(i), &st), 0);
    VF_CHECK_EQ_INT(vf_close(out, &st), 0);
    int rc = vf_port_drain(out, 10000, &st);
    *ms = now_ms() - t0;
    int ws = 0;
    if (rc == VF_ETIMEOUT) kill(pid, SIGKILL);
    waitpid(pid, &ws, 0);
    *child = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    vf_port_free(out);
    vf_chan_hub_free(h);
    unlink(addr + 6);
    return rc;
}

VF_TEST(drain_ends_when_receiver_exited_without_final_ack)
{
    int64_t ms;
    int child;
    int rc = send_and_drain(false, 0, &ms, &child);
    VF_CHECK_MSG(rc == 0, "drain returned %d after %lld ms: it waits for an ack from a receiver that is gone", rc,
                 (long long)ms);
    VF_CHECK_EQ_INT(child, 0); /* it had read every item before the EOS */
    VF_CHECK_MSG(ms < 5000, "drain took %lld ms", (long long)ms);
}

VF_TEST(drain_waits_for_a_slow_receiver_and_loses_nothing)
{
    int64_t ms;
    int child;
    int rc = send_and_drain(true, 2500, &ms, &child);
    VF_CHECK_EQ_INT(rc, 0);
    VF_CHECK_EQ_INT(child, 0); /* all NITEMS read, although reading began 2.5 s late */
    VF_CHECK_MSG(ms >= 1500, "sent and drained in %lld ms, before the slow receiver read the EOS", (long long)ms);
}

int main(void) { return vf_test_main(); }
