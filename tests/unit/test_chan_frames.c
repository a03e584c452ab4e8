/* test_chan_frames.c — large tensors on ZeroMQ edges (runtime/edge/transport_zmq.c): an
 * item goes as a split record plus one frame per tensor of VF_EDGE_FRAME_MIN bytes or
 * more, sent from the tensor's own memory and received into the tensor without a copy.
 *
 * Both ends sit in this process. The producer's large tensors wrap buffers whose release
 * scribbles over them before freeing: if the transport let a buffer go before ZeroMQ had
 * written it, the receiver would see the scribble, so every payload is checked against
 * the pattern it was filled with (computed again here, not taken from the codec). Each
 * buffer must be released exactly once, and only after the receiver has all the items.
 * Also: tensor order, dtypes, shapes and metadata survive; the consumer's account holds
 * the frames while it holds the item and nothing after; a fan-out to a ZeroMQ edge and
 * an in-process edge delivers the same bytes to both; a stage that forwards what it
 * received sends the frames it holds on (released by the next socket's I/O thread);
 * ipc and tcp alike.
 */
#include "runtime/core/alloc.h"
#include "runtime/edge/chan_internal.h"
#include "tests/vf_test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define NITEMS 12
#define BIG_ELEMS (300 * 1000) /* f32: 1.2 MB, a frame */

static vf_edge_desc desc(int id, vf_transport tr, const char *addr, int cap)
{
    vf_edge_desc d = {0};
    d.id = id;
    d.transport = tr;
    snprintf(d.addr, sizeof d.addr, "%s", addr ? addr : "");
    d.capacity = cap;
    d.max_item_bytes = 4 << 20;
    snprintf(d.name, sizeof d.name, "src.out -> dst.in #%d", id);
    return d;
}

static void connect_edge(vf_chan_hub *h, vf_edge_desc d, vf_port *out, vf_port *in)
{
    vf_status st = {0};
    vf_edge_end *r = NULL, *s = NULL;
    VF_CHECK_EQ_INT(vf_edge_open(h, &d, VF_PORT_IN, &r, &st), 0);
    if (d.transport != VF_TR_INPROC) snprintf(d.addr, sizeof d.addr, "%s", vf_edge_end_endpoint(r));
    VF_CHECK_EQ_INT(vf_edge_open(h, &d, VF_PORT_OUT, &s, &st), 0);
    VF_CHECK_MSG(st.code == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(vf_port_attach(in, r, &st), 0);
    VF_CHECK_EQ_INT(vf_port_attach(out, s, &st), 0);
}

static vf_port *port(const char *name, vf_port_dir dir)
{
    vf_status st = {0};
    vf_port *p = NULL;
    VF_CHECK_EQ_INT(vf_port_new(name, dir, &p, &st), 0);
    return p;
}

static unsigned char pat(int seq, int k, size_t i) { return (unsigned char)(seq * 29 + k * 7 + i * 13 + (i >> 11)); }

/* Producer buffers: released once each, scribbled over first. */
static _Atomic int g_released;
static void scribble_release(void *data, void *hint)
{
    memset(data, 0xee, (size_t)(uintptr_t)hint);
    free(data);
    atomic_fetch_add(&g_released, 1);
}

static vf_tensor *big(vf_dtype dt, int ndim, const int64_t *shape, int seq, int k)
{
    vf_status st = {0};
    size_t n = vf_dtype_size(dt);
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++) b[i] = pat(seq, k, i);
    vf_tensor *t = vf_tensor_wrap(dt, ndim, shape, (vf_device){VF_DEV_CPU, 0}, b, scribble_release,
                                  (void *)(uintptr_t)n, &st);
    VF_CHECK(t != NULL);
    return t;
}

/* "a" f32 frame, "small" u8 inline, "b" u8 frame of exactly VF_EDGE_FRAME_MIN, "edge"
 * u8 one byte short of a frame (inline), metadata. */
static vf_item *mk(int seq)
{
    vf_status st = {0};
    char id[16];
    snprintf(id, sizeof id, "it%d", seq);
    vf_item *it = vf_item_new(id, &st);
    int64_t sa[2] = {3, BIG_ELEMS / 3}, ss[1] = {100}, sb[1] = {(int64_t)VF_EDGE_FRAME_MIN},
            se[1] = {(int64_t)VF_EDGE_FRAME_MIN - 1};
    vf_item_put(it, "a", big(VF_DTYPE_F32, 2, sa, seq, 0), &st);
    vf_tensor *s = vf_tensor_new(VF_DTYPE_U8, 1, ss, &st);
    for (size_t i = 0; i < 100; i++) ((unsigned char *)s->data)[i] = pat(seq, 1, i);
    vf_item_put(it, "small", s, &st);
    vf_item_put(it, "b", big(VF_DTYPE_U8, 1, sb, seq, 2), &st);
    vf_tensor *e = vf_tensor_new(VF_DTYPE_U8, 1, se, &st);
    for (size_t i = 0; i < VF_EDGE_FRAME_MIN - 1; i++) ((unsigned char *)e->data)[i] = pat(seq, 3, i);
    vf_item_put(it, "edge", e, &st);
    vf_item_set_num(it, "seq", seq, &st);
    vf_item_set_str(it, "tag", "frames", &st);
    VF_CHECK_EQ_INT(st.code, 0);
    return it;
}

static bool filled(const vf_tensor *t, int seq, int k)
{
    const unsigned char *p = t->data;
    for (size_t i = 0; i < vf_tensor_nbytes(t); i++)
        if (p[i] != pat(seq, k, i)) return false;
    return true;
}

/* Everything the producer put in item `seq`, in order. */
static void check_item(const vf_item *it, int seq)
{
    static const char *const names[4] = {"a", "small", "b", "edge"};
    static const vf_dtype dts[4] = {VF_DTYPE_F32, VF_DTYPE_U8, VF_DTYPE_U8, VF_DTYPE_U8};
    static const size_t sizes[4] = {(size_t)BIG_ELEMS * 4, 100, VF_EDGE_FRAME_MIN, VF_EDGE_FRAME_MIN - 1};
    double v = -1;
    VF_CHECK(vf_item_num(it, "seq", &v) == 0 && (int)v == seq);
    VF_CHECK(vf_item_str(it, "tag") && strcmp(vf_item_str(it, "tag"), "frames") == 0);
    VF_CHECK_EQ_INT(vf_item_ntensors(it), 4);
    for (int k = 0; k < 4 && k < vf_item_ntensors(it); k++) {
        const char *name = NULL;
        vf_tensor *t = vf_item_tensor_at(it, k, &name);
        VF_CHECK_STR(name, names[k]);
        VF_CHECK_EQ_INT(t->dtype, dts[k]);
        VF_CHECK_EQ_INT(vf_tensor_nbytes(t), sizes[k]);
        VF_CHECK_MSG(filled(t, seq, k), "item %d tensor %s: payload differs (released before it was sent?)", seq,
                     name);
    }
    VF_CHECK_EQ_INT(vf_item_get(it, "a")->shape[0], 3);
    VF_CHECK_EQ_INT(vf_item_get(it, "a")->shape[1], BIG_ELEMS / 3);
}

typedef struct {
    vf_port *p;
    int rc;
} prod_arg;

static void *producer(void *arg)
{
    prod_arg *a = arg;
    vf_status st = {0};
    for (int i = 0; i < NITEMS; i++) {
        int rc = vf_send(a->p, mk(i), &st); /* drops the producer's references */
        if (rc != 0) {
            a->rc = rc;
            return NULL;
        }
    }
    a->rc = vf_close(a->p, &st);
    if (a->rc == 0) a->rc = vf_port_drain(a->p, 10000, &st);
    return NULL;
}

/* Reads every item of `in`, checking each; returns how many. */
static int consume(vf_port *in, vf_account *acct)
{
    vf_status st = {0};
    vf_item *it = NULL;
    int n = 0, rc;
    while ((rc = vf_recv(in, &it, &st)) == 0) {
        check_item(it, n);
        if (acct) /* the frames are charged to the consumer while it holds the item */
            VF_CHECK_MSG(vf_account_live(acct) >= (int64_t)(BIG_ELEMS * 4 + VF_EDGE_FRAME_MIN),
                         "consumer account %lld", (long long)vf_account_live(acct));
        vf_item_free(it);
        n++;
    }
    VF_CHECK_MSG(rc == VF_EOS, "rc %d: %s", rc, st.msg);
    return n;
}

static void one_edge(vf_transport tr, const char *addr)
{
    vf_status st = {0};
    atomic_store(&g_released, 0);
    vf_chan_hub *h = vf_chan_hub_new(&st);
    vf_port *out = port("src.out", VF_PORT_OUT), *in = port("dst.in", VF_PORT_IN);
    connect_edge(h, desc(1, tr, addr, 3), out, in);
    prod_arg a = {out, 0};
    pthread_t th;
    pthread_create(&th, NULL, producer, &a);
    vf_account *acct = vf_account_new("test_chan_frames_consumer");
    vf_account *prev = vf_account_set_current(acct);
    VF_CHECK_EQ_INT(consume(in, acct), NITEMS);
    VF_CHECK_EQ_INT(vf_account_live(acct), 0);
    vf_account_set_current(prev);
    pthread_join(th, NULL);
    VF_CHECK_EQ_INT(a.rc, 0);
    vf_port_stats ps;
    vf_port_get_stats(out, &ps);
    int64_t sent = ps.bytes;
    vf_port_get_stats(in, &ps);
    VF_CHECK_EQ_INT(ps.bytes, sent); /* both sides count the item's encoded size */
    vf_port_free(out);
    vf_port_free(in);
    vf_chan_hub_free(h);
    /* two large buffers per item, each released once, none before it was read */
    VF_CHECK_EQ_INT(atomic_load(&g_released), 2 * NITEMS);
}

VF_TEST(ipc_large_tensors_arrive_intact)
{
    char addr[128];
    snprintf(addr, sizeof addr, "ipc:///tmp/vf-test-frames-%d.sock", (int)getpid());
    one_edge(VF_TR_IPC, addr);
    unlink(addr + 6);
}

VF_TEST(tcp_large_tensors_arrive_intact) { one_edge(VF_TR_TCP, "tcp://127.0.0.1:*"); }

typedef struct {
    vf_port *in;
    int n;
} cons_arg;

static void *consumer(void *arg)
{
    cons_arg *c = arg;
    c->n = consume(c->in, NULL);
    return NULL;
}

/* One output port, a ZeroMQ edge and an in-process edge: the in-process consumer holds
 * the producer's tensors while ZeroMQ may still be sending them; both get every item. */
VF_TEST(fan_out_to_zmq_and_inproc)
{
    vf_status st = {0};
    atomic_store(&g_released, 0);
    vf_chan_hub *h = vf_chan_hub_new(&st);
    vf_port *out = port("src.out", VF_PORT_OUT), *zin = port("z.in", VF_PORT_IN), *pin = port("p.in", VF_PORT_IN);
    connect_edge(h, desc(2, VF_TR_TCP, "tcp://127.0.0.1:*", 2), out, zin);
    connect_edge(h, desc(3, VF_TR_INPROC, NULL, 2), out, pin);
    cons_arg c = {pin, 0};
    pthread_t tc, tp;
    pthread_create(&tc, NULL, consumer, &c);
    prod_arg a = {out, 0};
    pthread_create(&tp, NULL, producer, &a);
    VF_CHECK_EQ_INT(consume(zin, NULL), NITEMS);
    pthread_join(tp, NULL);
    pthread_join(tc, NULL);
    VF_CHECK_EQ_INT(a.rc, 0);
    VF_CHECK_EQ_INT(c.n, NITEMS);
    vf_port_free(out);
    vf_port_free(zin);
    vf_port_free(pin);
    vf_chan_hub_free(h);
    VF_CHECK_EQ_INT(atomic_load(&g_released), 2 * NITEMS);
}

typedef struct {
    vf_port *in, *out;
    vf_account *acct;
    int n, rc;
} fwd_arg;

static void *forwarder(void *arg)
{
    fwd_arg *f = arg;
    vf_status st = {0};
    vf_account_set_current(f->acct); /* what it receives is charged here */
    vf_item *it = NULL;
    int rc;
    while ((rc = vf_recv(f->in, &it, &st)) == 0) {
        if ((rc = vf_send(f->out, it, &st)) != 0) break; /* the received tensors, as they are */
        f->n++;
    }
    f->rc = rc == VF_EOS ? 0 : rc;
    if (vf_close(f->out, &st) == 0) vf_port_drain(f->out, 10000, &st);
    return NULL;
}

/* producer -> ipc -> forwarder -> tcp -> here: the forwarder's received frames go out
 * from the memory ZeroMQ received them into, and come back when the next socket is
 * done with them (its account returns to zero). */
VF_TEST(forwarded_frames_go_on_without_a_copy)
{
    vf_status st = {0};
    atomic_store(&g_released, 0);
    char addr[128];
    snprintf(addr, sizeof addr, "ipc:///tmp/vf-test-frames-fwd-%d.sock", (int)getpid());
    vf_chan_hub *h = vf_chan_hub_new(&st);
    vf_port *out = port("src.out", VF_PORT_OUT), *fin = port("fwd.in", VF_PORT_IN);
    vf_port *fout = port("fwd.out", VF_PORT_OUT), *in = port("dst.in", VF_PORT_IN);
    connect_edge(h, desc(4, VF_TR_IPC, addr, 2), out, fin);
    connect_edge(h, desc(5, VF_TR_TCP, "tcp://127.0.0.1:*", 2), fout, in);
    fwd_arg f = {fin, fout, vf_account_new("test_chan_frames_forwarder"), 0, 0};
    prod_arg a = {out, 0};
    pthread_t tf, tp;
    pthread_create(&tf, NULL, forwarder, &f);
    pthread_create(&tp, NULL, producer, &a);
    VF_CHECK_EQ_INT(consume(in, NULL), NITEMS);
    pthread_join(tp, NULL);
    pthread_join(tf, NULL);
    VF_CHECK_EQ_INT(a.rc, 0);
    VF_CHECK_EQ_INT(f.rc, 0);
    VF_CHECK_EQ_INT(f.n, NITEMS);
    VF_CHECK(vf_account_peak(f.acct) >= (int64_t)(BIG_ELEMS * 4 + VF_EDGE_FRAME_MIN));
    vf_port_free(out);
    vf_port_free(fin);
    vf_port_free(fout);
    vf_port_free(in);
    vf_chan_hub_free(h);
    unlink(addr + 6);
    VF_CHECK_EQ_INT(vf_account_live(f.acct), 0); /* every forwarded frame came back */
    VF_CHECK_EQ_INT(atomic_load(&g_released), 2 * NITEMS);
}

int main(void) { return vf_test_main(); }
