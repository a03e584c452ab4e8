/* test_chan_curve.c — tcp edges of secured hubs (runtime/edge/curve.c, transport_zmq.c):
 * items flow between two processes' worth of hubs that share the run key; a stranger who
 * knows the receiver's public key but not the run key, a plain (unauthenticated) ZeroMQ
 * peer, a peer of another run and raw bytes on the port are all refused, the receiver
 * gets none of their data and keeps serving the run's own sender; keypairs follow the
 * run key and the identity. */
#include "runtime/edge/curve.h"
#include "runtime/core/item.h"
#include "runtime/edge/transport_zmq.h"
#include "tests/vf_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

static const char *KEY = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
static const char *OTHER = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

static vf_item *mk(int seq)
{
    vf_status st = {0};
    char id[32];
    snprintf(id, sizeof id, "item-%d", seq);
    vf_item *it = vf_item_new(id, &st);
    int64_t n = 1000;
    vf_tensor *t = vf_tensor_new(VF_DTYPE_U8, 1, &n, &st);
    for (int i = 0; i < n; i++) ((unsigned char *)t->data)[i] = (unsigned char)(seq * 7 + i);
    vf_item_put(it, "x", t, &st);
    vf_item_set_num(it, "seq", seq, &st);
    return it;
}

static vf_edge_desc desc(const char *addr)
{
    vf_edge_desc d = {0};
    d.id = 1;
    d.transport = VF_TR_TCP;
    d.capacity = 4;
    d.peer = 1; /* the receiver is worker 1 */
    snprintf(d.addr, sizeof d.addr, "%s", addr);
    snprintf(d.name, sizeof d.name, "a.out -> b.in");
    return d;
}

typedef struct {
    vf_port *out;
    int n, rc;
} sender_arg;

static void *sender(void *arg)
{
    sender_arg *a = arg;
    vf_status st = {0};
    for (int i = 0; i < a->n && a->rc == 0; i++) a->rc = vf_send(a->out, mk(i), &st);
    if (a->rc == 0) a->rc = vf_close(a->out, &st);
    if (a->rc == 0) a->rc = vf_port_drain(a->out, 10000, &st);
    if (a->rc) fprintf(stderr, "  sender: %s\n", st.msg);
    return NULL;
}

/* The receiving side: hub secured as worker 1 of 2, one tcp input on loopback. */
typedef struct {
    vf_chan_hub *h;
    vf_port *in;
    char endpoint[256];
} rx;

static void rx_open(rx *r)
{
    vf_status st = {0};
    r->h = vf_chan_hub_new(&st);
    VF_CHECK_EQ_INT(vf_chan_hub_secure(r->h, KEY, 1, 2, &st), 0);
    vf_edge_desc d = desc("tcp://127.0.0.1:*");
    vf_edge_end *e = NULL;
    VF_CHECK_EQ_INT(vf_edge_open(r->h, &d, VF_PORT_IN, &e, &st), 0);
    snprintf(r->endpoint, sizeof r->endpoint, "%s", vf_edge_end_endpoint(e));
    VF_CHECK_EQ_INT(vf_port_new("b.in", VF_PORT_IN, &r->in, &st), 0);
    VF_CHECK_EQ_INT(vf_port_attach(r->in, e, &st), 0);
}

/* A sender (worker 0 of a run with this key) sends n items to r; the receiver checks
 * what arrives. A sender the receiver refuses fails with a message saying so. */
static void run_sender(rx *r, const char *key, int n, int expect_items)
{
    vf_status st = {0};
    vf_chan_hub *h = vf_chan_hub_new(&st);
    VF_CHECK_EQ_INT(vf_chan_hub_secure(h, key, 0, 2, &st), 0);
    vf_edge_desc d = desc(r->endpoint);
    vf_edge_end *e = NULL;
    VF_CHECK_EQ_INT(vf_edge_open(h, &d, VF_PORT_OUT, &e, &st), 0);
    sender_arg a = {.n = n};
    VF_CHECK_EQ_INT(vf_port_new("a.out", VF_PORT_OUT, &a.out, &st), 0);
    VF_CHECK_EQ_INT(vf_port_attach(a.out, e, &st), 0);
    pthread_t th;
    pthread_create(&th, NULL, sender, &a);
    int got = 0;
    for (;;) {
        vf_item *it = NULL;
        int rc = vf_recv_timeout(r->in, 1500, &it, &st);
        if (rc != 0) {
            VF_CHECK_MSG(rc == VF_EOS || rc == VF_ETIMEOUT, "recv: %d %s", rc, st.msg);
            break;
        }
        double seq = -1;
        vf_item_num(it, "seq", &seq);
        VF_CHECK_EQ_INT((int)seq, got);
        vf_tensor *t = vf_item_get(it, "x");
        bool ok = t && t->shape[0] == 1000;
        for (int i = 0; ok && i < 1000; i++) ok = ((unsigned char *)t->data)[i] == (unsigned char)(got * 7 + i);
        VF_CHECK(ok);
        vf_item_free(it);
        got++;
    }
    VF_CHECK_EQ_INT(got, expect_items);
    pthread_join(th, NULL);
    if (expect_items == 0) VF_CHECK_MSG(a.rc == VF_EEXTERNAL, "refused sender ended with %d", a.rc);
    else VF_CHECK_EQ_INT(a.rc, 0);
    vf_port_free(a.out);
    vf_chan_hub_free(h);
}

VF_TEST(run_peers_talk)
{
    rx r;
    rx_open(&r);
    run_sender(&r, KEY, 20, 20);
    VF_CHECK_EQ_INT((int)vf_zmq_refused(r.h), 0);
    vf_port_free(r.in);
    vf_chan_hub_free(r.h);
}

/* A ZeroMQ DEALER that is not a peer of the run tries to send a record. */
static void stranger(const char *endpoint, const char *server_pub, bool curve)
{
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (curve) {
        char pub[41], sec[41];
        zmq_curve_keypair(pub, sec);
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    char zep[256]; /* the ZeroMQ endpoint, without the bulk lane's suffix */
    snprintf(zep, sizeof zep, "%.*s", (int)strcspn(endpoint, "|"), endpoint);
    zmq_connect(s, zep);
    /* a well-formed record of an item, and an end-of-stream control frame */
    vf_status st = {0};
    vf_item *it = mk(999);
    void *buf = NULL;
    size_t len = 0;
    vf_item_encode_alloc(it, &buf, &len, &st);
    zmq_send(s, buf, len, ZMQ_DONTWAIT);
    zmq_send(s, "VFCE\0\0\0\0", 8, ZMQ_DONTWAIT);
    vf_free(buf);
    vf_item_free(it);
    usleep(300 * 1000);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

static void raw_garbage(const char *endpoint)
{
    int port = atoi(strrchr(endpoint, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        unsigned char junk[4096];
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 131 + 7);
        junk[0] = 0xff; /* a ZMTP greeting's signature byte, then noise */
        ssize_t w = write(fd, junk, sizeof junk);
        (void)w;
        usleep(100 * 1000);
    }
    close(fd);
}

VF_TEST(strangers_refused_run_unaffected)
{
    rx r;
    rx_open(&r);
    vf_curve c;
    vf_status st = {0};
    char pub[41], sec[41];
    VF_CHECK_EQ_INT(vf_curve_init(&c, KEY, 1, 2, "test", &st), 0);
    vf_curve_keypair(&c, 1, pub, sec);
    stranger(r.endpoint, pub, true);   /* knows the receiver's public key, not the run key */
    stranger(r.endpoint, pub, false);  /* no CURVE at all */
    raw_garbage(r.endpoint);
    vf_item *it = NULL;
    VF_CHECK_EQ_INT(vf_recv_timeout(r.in, 300, &it, &st), VF_ETIMEOUT);
    VF_CHECK(it == NULL);
    VF_CHECK_MSG(vf_zmq_refused(r.h) >= 1, "refused %lld", (long long)vf_zmq_refused(r.h));
    run_sender(&r, OTHER, 6, 0);       /* a peer of another run: told, not hung */
    run_sender(&r, KEY, 10, 10);       /* the run's own sender is still served, from item 0 */
    vf_port_free(r.in);
    vf_chan_hub_free(r.h);
}

VF_TEST(keys_follow_run_key_and_identity)
{
    vf_curve a, b;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_curve_init(&a, KEY, 0, 3, "t", &st), 0);
    VF_CHECK_EQ_INT(vf_curve_init(&b, OTHER, 0, 3, "t", &st), 0);
    char p0[41], s0[41], p1[41], s1[41], q0[41], t0[41], chk[41];
    vf_curve_keypair(&a, 0, p0, s0);
    vf_curve_keypair(&a, 1, p1, s1);
    vf_curve_keypair(&b, 0, q0, t0);
    VF_CHECK(strcmp(p0, p1) != 0 && strcmp(p0, q0) != 0);
    /* the public key is the secret key's (libzmq derives it independently) */
    VF_CHECK_EQ_INT(zmq_curve_public(chk, s0), 0);
    VF_CHECK_STR(chk, p0);
    char hex[VF_CURVE_KEY_HEX + 1], hex2[VF_CURVE_KEY_HEX + 1];
    VF_CHECK_EQ_INT(vf_curve_new_key(hex, &st), 0);
    VF_CHECK_EQ_INT(vf_curve_new_key(hex2, &st), 0);
    VF_CHECK(strlen(hex) == VF_CURVE_KEY_HEX && strcmp(hex, hex2) != 0);
    VF_CHECK_EQ_INT(vf_curve_init(&a, "abc", 0, 1, "VFLOW_RUN_KEY", &st), VF_EUSAGE);
    VF_CHECK(strstr(st.msg, "VFLOW_RUN_KEY") != NULL);
    char bad[VF_CURVE_KEY_HEX + 1];
    memset(bad, 'g', VF_CURVE_KEY_HEX);
    bad[VF_CURVE_KEY_HEX] = 0;
    VF_CHECK_EQ_INT(vf_curve_init(&a, bad, 0, 1, "k", &st), VF_EUSAGE);
    VF_CHECK_EQ_INT(vf_curve_init(&a, KEY, 5, 2, "k", &st), VF_EUSAGE);
}

int main(void) { return vf_test_main(); }
