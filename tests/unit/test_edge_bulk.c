/* test_edge_bulk.c — the bulk lane of tcp edges (runtime/edge/edge_bulk.h), over real
 * loopback sockets.
 *
 * Checked:
 *   - items with two large tensors (neither a whole number of chunks) and a small one go
 *     through the lane intact, on an unsecured and on a secured hub, while the consumer
 *     holds three items at a time (held payloads stay intact as later ones arrive in
 *     reused buffers); every item went through the lane; what the lane still holds once
 *     the consumer let every item go (vf_lane_ops.held) is its pool of buffers, within the
 *     plan's count for the edge (capacity + 1 items);
 *   - the endpoint names the lane's mode: plain on an unsecured hub, sealed on a secured
 *     one, authenticated only with VFLOW_EDGE_BULK=auth (items intact, an altered chunk
 *     refused); a secured sender refuses a lane that would send in clear;
 *   - VFLOW_EDGE_BULK=0: no lane in the endpoint, frames through ZeroMQ, items intact;
 *   - the wire format, written here from the header's description alone (key derivation,
 *     admission reply, chunking, nonces, associated data), is read back as the item the
 *     test encoded: this sender shares no lane code with the runtime;
 *   - a chunk altered on the wire fails authentication (VF_ECORRUPT, naming the edge);
 *   - a sender that stops in the middle of an item is an error naming the edge, not a
 *     hang;
 *   - connections that send garbage, a wrong admission reply, or nothing are refused
 *     and counted, and the run's own sender, connecting behind them, is served without
 *     waiting for the silent ones to time out; the lane's port stops listening.
 */
#include "runtime/core/item.h"
#include "runtime/edge/curve.h"
#include "runtime/edge/edge_bulk.h"
#include "runtime/edge/transport_zmq.h"
#include "tests/vf_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static const char *KEY = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
#define A_LEN (300 * 1024 + 7)     /* bytes */
#define B_LEN (262144 + 3)         /* floats: 1 MiB + 12 bytes */
#define CHUNK (256 * 1024)

static vf_item *mk(int seq)
{
    vf_status st = {0};
    char id[32];
    snprintf(id, sizeof id, "item-%d", seq);
    vf_item *it = vf_item_new(id, &st);
    int64_t na = A_LEN, nb = B_LEN, ns = 100;
    vf_tensor *a = vf_tensor_new(VF_DTYPE_U8, 1, &na, &st), *b = vf_tensor_new(VF_DTYPE_F32, 1, &nb, &st),
              *s = vf_tensor_new(VF_DTYPE_U8, 1, &ns, &st);
    for (int64_t i = 0; i < na; i++) ((unsigned char *)a->data)[i] = (unsigned char)(seq * 31 + i * 7);
    for (int64_t i = 0; i < nb; i++) ((float *)b->data)[i] = (float)(seq * 1000003 + i);
    for (int64_t i = 0; i < ns; i++) ((unsigned char *)s->data)[i] = (unsigned char)(seq + i);
    vf_item_put(it, "a", a, &st);
    vf_item_put(it, "b", b, &st);
    vf_item_put(it, "s", s, &st);
    vf_item_set_num(it, "seq", seq, &st);
    return it;
}

static bool intact(const vf_item *it, int seq)
{
    double v = -1;
    vf_item_num(it, "seq", &v);
    vf_tensor *a = vf_item_get(it, "a"), *b = vf_item_get(it, "b"), *s = vf_item_get(it, "s");
    if ((int)v != seq || !a || !b || !s || a->shape[0] != A_LEN || b->shape[0] != B_LEN || s->shape[0] != 100)
        return false;
    for (int64_t i = 0; i < A_LEN; i++)
        if (((unsigned char *)a->data)[i] != (unsigned char)(seq * 31 + i * 7)) return false;
    for (int64_t i = 0; i < B_LEN; i++)
        if (((float *)b->data)[i] != (float)(seq * 1000003 + i)) return false;
    for (int64_t i = 0; i < 100; i++)
        if (((unsigned char *)s->data)[i] != (unsigned char)(seq + i)) return false;
    return true;
}

static int hand_run(int n, int mode, int *got, char *msg, size_t msgn);
enum { HONEST, TAMPER, CUT };

static vf_edge_desc desc(const char *addr)
{
    vf_edge_desc d = {0};
    d.id = 1;
    d.transport = VF_TR_TCP;
    d.capacity = 2;
    d.max_item_bytes = 8 << 20;
    d.peer = 1; /* the receiver is worker 1 */
    snprintf(d.addr, sizeof d.addr, "%s", addr);
    snprintf(d.name, sizeof d.name, "a.out -> b.in");
    return d;
}

/* The receiving side: worker 1 of 2 (secured or not), one tcp input on loopback. */
typedef struct {
    vf_chan_hub *h;
    vf_port *in;
    vf_edge_end *e;
    char endpoint[256];
} rx;

static void rx_open(rx *r, bool secure)
{
    vf_status st = {0};
    r->h = vf_chan_hub_new(&st);
    if (secure) VF_CHECK_EQ_INT(vf_chan_hub_secure(r->h, KEY, 1, 2, &st), 0);
    vf_edge_desc d = desc("tcp://127.0.0.1:*");
    VF_CHECK_EQ_INT(vf_edge_open(r->h, &d, VF_PORT_IN, &r->e, &st), 0);
    snprintf(r->endpoint, sizeof r->endpoint, "%s", vf_edge_end_endpoint(r->e));
    VF_CHECK_EQ_INT(vf_port_new("b.in", VF_PORT_IN, &r->in, &st), 0);
    VF_CHECK_EQ_INT(vf_port_attach(r->in, r->e, &st), 0);
}

static void rx_close(rx *r)
{
    vf_port_free(r->in);
    vf_chan_hub_free(r->h);
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

/* The run's sender (worker 0) sends n items; the receiver holds up to three at a time,
 * checking each when it arrives and again when it lets it go. */
static void run_sender(rx *r, bool secure, int n)
{
    vf_status st = {0};
    vf_chan_hub *h = vf_chan_hub_new(&st);
    if (secure) VF_CHECK_EQ_INT(vf_chan_hub_secure(h, KEY, 0, 2, &st), 0);
    vf_edge_desc d = desc(r->endpoint);
    vf_edge_end *e = NULL;
    VF_CHECK_EQ_INT(vf_edge_open(h, &d, VF_PORT_OUT, &e, &st), 0);
    sender_arg a = {.n = n};
    VF_CHECK_EQ_INT(vf_port_new("a.out", VF_PORT_OUT, &a.out, &st), 0);
    VF_CHECK_EQ_INT(vf_port_attach(a.out, e, &st), 0);
    pthread_t th;
    pthread_create(&th, NULL, sender, &a);
    vf_item *held[3] = {0};
    int heldseq[3] = {0}, got = 0;
    for (;;) {
        vf_item *it = NULL;
        int rc = vf_recv_timeout(r->in, 5000, &it, &st);
        if (rc != 0) {
            VF_CHECK_MSG(rc == VF_EOS, "recv: %d %s", rc, st.msg);
            break;
        }
        VF_CHECK_MSG(intact(it, got), "item %d intact on arrival", got);
        int slot = got % 3;
        if (held[slot]) {
            VF_CHECK_MSG(intact(held[slot], heldseq[slot]), "item %d intact while held", heldseq[slot]);
            vf_item_free(held[slot]);
        }
        held[slot] = it;
        heldseq[slot] = got++;
    }
    for (int k = 0; k < 3; k++) {
        if (held[k]) VF_CHECK(intact(held[k], heldseq[k]));
        vf_item_free(held[k]);
    }
    pthread_join(th, NULL);
    VF_CHECK_EQ_INT(a.rc, 0);
    VF_CHECK_EQ_INT(got, n);
    vf_port_free(a.out);
    vf_chan_hub_free(h);
}

static void roundtrip(bool secure)
{
    rx r;
    rx_open(&r, secure);
    VF_CHECK_MSG(strstr(r.endpoint, VF_BULK_SUFFIX) != NULL, "endpoint %s names a lane", r.endpoint);
    run_sender(&r, secure, 24);
    VF_CHECK_EQ_INT((int)vf_bulk_rx_items(vf_lanes_state(&vf_zmq_of(r.e)->lanes, &vf_lane_bulk)), 24);
    /* every item let go: what the lane holds is its pool, at most the items the plan
     * counts for the edge (capacity in flight, one with the consumer), each of an item's
     * lane bytes (its frames 64-byte aligned) rounded to a page */
    int64_t item = ((A_LEN + 63) / 64 * 64 + (B_LEN * 4 + 63) / 64 * 64 + 4095) / 4096 * 4096;
    int64_t held = vf_lanes_held(&vf_zmq_of(r.e)->lanes, r.e);
    VF_CHECK_MSG(held >= item && held <= (desc("").capacity + 1) * item, "held %lld bytes, items of %lld",
                 (long long)held, (long long)item);
    VF_CHECK_EQ_INT((int)vf_zmq_refused(r.h), 0);
    rx_close(&r);
}

VF_TEST(lane_unsecured) { roundtrip(false); }
VF_TEST(lane_secured) { roundtrip(true); }

VF_TEST(lane_modes_in_endpoint)
{
    rx r;
    rx_open(&r, false);
    VF_CHECK_MSG(strlen(r.endpoint) > 2 && !strcmp(r.endpoint + strlen(r.endpoint) - 2, ",p"), "%s", r.endpoint);
    rx_close(&r);
    rx_open(&r, true);
    VF_CHECK_MSG(!strcmp(r.endpoint + strlen(r.endpoint) - 2, ",e"), "%s", r.endpoint);
    /* a secured sender never takes a lane that would send in clear */
    char plain[256];
    snprintf(plain, sizeof plain, "%.*sp", (int)strlen(r.endpoint) - 1, r.endpoint);
    vf_status st = {0};
    vf_chan_hub *h = vf_chan_hub_new(&st);
    VF_CHECK_EQ_INT(vf_chan_hub_secure(h, KEY, 0, 2, &st), 0);
    vf_edge_desc d = desc(plain);
    vf_edge_end *e = NULL;
    int rc = vf_edge_open(h, &d, VF_PORT_OUT, &e, &st);
    VF_CHECK_MSG(rc == VF_EINVAL && strstr(st.msg, "bad bulk lane"), "rc %d: %s", rc, st.msg);
    vf_chan_hub_free(h);
    rx_close(&r);
}

VF_TEST(lane_authenticated_only)
{
    setenv("VFLOW_EDGE_BULK", "auth", 1);
    rx r;
    rx_open(&r, true);
    VF_CHECK_MSG(!strcmp(r.endpoint + strlen(r.endpoint) - 2, ",a"), "%s", r.endpoint);
    run_sender(&r, true, 8);
    VF_CHECK_EQ_INT((int)vf_bulk_rx_items(vf_lanes_state(&vf_zmq_of(r.e)->lanes, &vf_lane_bulk)), 8);
    rx_close(&r);
    int got;
    char msg[2048];
    int rc = hand_run(3, HONEST, &got, msg, sizeof msg);
    VF_CHECK_MSG(rc == VF_EOS && got == 3, "authenticated-only, written independently: rc %d, %d items: %s", rc, got,
                 msg);
    rc = hand_run(3, TAMPER, &got, msg, sizeof msg);
    VF_CHECK_MSG(rc == VF_ECORRUPT && got == 1 && strstr(msg, "failed authentication"),
                 "authenticated-only, altered chunk: rc %d, %d items: %s", rc, got, msg);
    unsetenv("VFLOW_EDGE_BULK");
}

VF_TEST(lane_off)
{
    setenv("VFLOW_EDGE_BULK", "0", 1);
    rx r;
    rx_open(&r, true);
    VF_CHECK_MSG(strstr(r.endpoint, VF_BULK_SUFFIX) == NULL, "endpoint %s names no lane", r.endpoint);
    run_sender(&r, true, 6);
    VF_CHECK(vf_lanes_state(&vf_zmq_of(r.e)->lanes, &vf_lane_bulk) == NULL);
    VF_CHECK_EQ_INT(vf_lanes_held(&vf_zmq_of(r.e)->lanes, r.e), 0);
    rx_close(&r);
    unsetenv("VFLOW_EDGE_BULK");
}

/* ------------------------------------------------------------------ a sender written
 * from the header's description: ZeroMQ for the record and descriptors, its own lane */

typedef struct {
    char zep[256];
    int port;
    char mode; /* 'p' plain, 'e' sealed, 'a' authenticated only */
    unsigned char salt[16], key[32];
} lane_addr;

static void parse_lane(const char *endpoint, lane_addr *l)
{
    const char *p = strstr(endpoint, "|bulk=");
    VF_CHECK(p != NULL);
    snprintf(l->zep, sizeof l->zep, "%.*s", (int)(p - endpoint), endpoint);
    char hex[33] = {0};
    VF_CHECK_EQ_INT(sscanf(p + 6, "%d,%32[0-9a-f],%c", &l->port, hex, &l->mode), 3);
    for (int i = 0; i < 16; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        l->salt[i] = (unsigned char)v;
    }
    unsigned char runkey[32], msg[28];
    for (int i = 0; i < 32; i++) {
        unsigned v;
        sscanf(KEY + 2 * i, "%2x", &v);
        runkey[i] = (unsigned char)v;
    }
    memcpy(msg, "vflow-bulk-1", 12);
    memcpy(msg + 12, l->salt, 16);
    crypto_generichash(l->key, 32, msg, sizeof msg, runkey, 32);
}

/* AES-256-GCM: ct = E(pt), tag; ct NULL: pt is authenticated only (GMAC, more AAD). */
static void seal(const unsigned char key[32], const unsigned char iv[12], const unsigned char *aad, int aadlen,
                 const unsigned char *pt, unsigned char *ct, int len, unsigned char tag[16])
{
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    int ol;
    unsigned char fin[16];
    EVP_EncryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, iv);
    EVP_EncryptUpdate(x, NULL, &ol, aad, aadlen);
    if (len) EVP_EncryptUpdate(x, ct, &ol, pt, len);
    EVP_EncryptFinal_ex(x, fin, &ol);
    EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_GET_TAG, 16, tag);
    EVP_CIPHER_CTX_free(x);
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void write_all(int fd, const void *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
}

static int lane_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    VF_CHECK_EQ_INT(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Sends items 0..n-1 as worker 0 of the run: the record and one descriptor per large
 * frame through a CURVE DEALER, the frames through the lane. */
static void hand_sender(const char *endpoint, int n, int mode)
{
    lane_addr l;
    parse_lane(endpoint, &l);
    vf_status st = {0};
    vf_curve c;
    VF_CHECK_EQ_INT(vf_curve_init(&c, KEY, 0, 2, "test", &st), 0);
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    VF_CHECK_EQ_INT(vf_curve_client(&c, s, 1, &st), 0);
    VF_CHECK_EQ_INT(zmq_connect(s, l.zep), 0);
    int fd = -1;
    uint64_t ctr = 0;
    for (int i = 0; i < n; i++) {
        vf_item *it = mk(i);
        vf_enc *enc = NULL;
        VF_CHECK_EQ_INT(vf_enc_new(it, &enc, &st), 0);
        VF_CHECK_EQ_INT(enc->nframes, 2);
        zmq_send(s, enc->data, enc->len, ZMQ_SNDMORE);
        for (int k = 0; k < enc->nframes; k++) {
            unsigned char d[32] = {0};
            memcpy(d, "VFBULKD", 8);
            put_le(d + 8, (uint64_t)i, 8);
            put_le(d + 16, (uint64_t)k, 4);
            put_le(d + 20, (uint64_t)enc->nframes, 4);
            put_le(d + 24, vf_tensor_nbytes(enc->frames[k]), 8);
            zmq_send(s, d, sizeof d, k + 1 < enc->nframes ? ZMQ_SNDMORE : 0);
        }
        if (fd < 0) { /* admission: the tag of (challenge, salt) */
            fd = lane_connect(l.port);
            unsigned char ch[16], aad[16 + 16 + 16], iv[12] = {'V', 'F', 'B', 1}, tag[16];
            VF_CHECK_EQ_INT((int)recv(fd, ch, 16, MSG_WAITALL), 16);
            memcpy(aad, "vflow-bulk-hello", 16);
            memcpy(aad + 16, l.salt, 16);
            memcpy(aad + 32, ch, 16);
            seal(l.key, iv, aad, sizeof aad, NULL, NULL, 0, tag);
            write_all(fd, tag, 16);
        }
        for (int k = 0; k < enc->nframes; k++) {
            const unsigned char *p = enc->frames[k]->data;
            size_t len = vf_tensor_nbytes(enc->frames[k]);
            for (size_t off = 0; off < len; off += CHUNK) {
                size_t m = len - off < CHUNK ? len - off : CHUNK;
                unsigned char iv[12] = {'V', 'F', 'B', 0}, aad[20], tag[16];
                unsigned char *ct = malloc(m);
                put_le(iv + 4, ctr++, 8);
                put_le(aad, (uint64_t)i, 8);
                put_le(aad + 8, (uint64_t)k, 4);
                put_le(aad + 12, off, 8);
                if (l.mode == 'a') { /* the chunk as it is, and its GMAC */
                    memcpy(ct, p + off, m);
                    seal(l.key, iv, aad, sizeof aad, p + off, NULL, (int)m, tag);
                } else {
                    seal(l.key, iv, aad, sizeof aad, p + off, ct, (int)m, tag);
                }
                if (mode == TAMPER && i == 1 && k == 1 && off == CHUNK) ct[1000] ^= 0x20;
                if (mode == CUT && i == 1 && k == 1) {
                    write_all(fd, ct, m / 2); /* then the sender is gone */
                    free(ct);
                    goto gone;
                }
                write_all(fd, ct, m);
                write_all(fd, tag, 16);
                free(ct);
            }
        }
        vf_enc_unref(NULL, enc);
        vf_item_free(it);
        continue;
    gone:
        vf_enc_unref(NULL, enc);
        vf_item_free(it);
        close(fd);
        fd = -1;
        break;
    }
    if (mode != CUT) zmq_send(s, "VFCE\0\0\0\0", 8, 0);
    usleep(300 * 1000);
    if (fd >= 0) close(fd);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

typedef struct {
    const char *endpoint;
    int n, mode;
} hand_arg;

static void *hand_thread(void *p)
{
    hand_arg *a = p;
    hand_sender(a->endpoint, a->n, a->mode);
    return NULL;
}

/* Runs the hand-written sender against a secured receiver: items read, the final rc
 * and its message. */
static int hand_run(int n, int mode, int *got, char *msg, size_t msgn)
{
    rx r;
    rx_open(&r, true);
    hand_arg a = {r.endpoint, n, mode};
    pthread_t th;
    pthread_create(&th, NULL, hand_thread, &a);
    vf_status st = {0};
    int rc;
    *got = 0;
    for (;;) {
        vf_item *it = NULL;
        rc = vf_recv_timeout(r.in, 10000, &it, &st);
        if (rc != 0) break;
        VF_CHECK_MSG(intact(it, *got), "item %d as the hand-written sender encoded it", *got);
        vf_item_free(it);
        (*got)++;
    }
    snprintf(msg, msgn, "%s", st.msg);
    pthread_join(th, NULL);
    rx_close(&r);
    return rc;
}

VF_TEST(wire_format_written_independently)
{
    int got;
    char msg[2048];
    int rc = hand_run(3, HONEST, &got, msg, sizeof msg);
    VF_CHECK_MSG(rc == VF_EOS, "rc %d: %s", rc, msg);
    VF_CHECK_EQ_INT(got, 3);
}

VF_TEST(altered_chunk_fails_authentication)
{
    int got;
    char msg[2048];
    int rc = hand_run(3, TAMPER, &got, msg, sizeof msg);
    VF_CHECK_MSG(rc == VF_ECORRUPT, "rc %d: %s", rc, msg);
    VF_CHECK_EQ_INT(got, 1);
    VF_CHECK_MSG(strstr(msg, "a.out -> b.in") && strstr(msg, "failed authentication"), "message: %s", msg);
}

VF_TEST(sender_gone_mid_item_is_an_error)
{
    int got;
    char msg[2048];
    int rc = hand_run(3, CUT, &got, msg, sizeof msg);
    VF_CHECK_MSG(rc == VF_EEXTERNAL, "rc %d: %s", rc, msg);
    VF_CHECK_EQ_INT(got, 1);
    VF_CHECK_MSG(strstr(msg, "a.out -> b.in") && strstr(msg, "middle of an item"), "message: %s", msg);
}

/* ------------------------------------------------------------------ strangers */

typedef struct {
    int port;
    bool reply; /* answer the challenge with 16 random bytes; else stay silent */
    _Atomic bool connected;
} stranger_arg;

static void *stranger(void *p)
{
    stranger_arg *a = p;
    int fd = lane_connect(a->port);
    a->connected = true;
    unsigned char ch[16], junk[16];
    if (recv(fd, ch, 16, MSG_WAITALL) == 16 && a->reply) {
        randombytes_buf(junk, sizeof junk);
        write_all(fd, junk, sizeof junk);
    }
    char c;
    while (recv(fd, &c, 1, 0) > 0) { /* until the receiver closes it */
    }
    close(fd);
    return NULL;
}

VF_TEST(strangers_refused_sender_served)
{
    rx r;
    rx_open(&r, true);
    lane_addr l;
    parse_lane(r.endpoint, &l);
    /* raw bytes, then gone */
    int fd = lane_connect(l.port);
    write_all(fd, "\xff\0\0\0\0\0\0\0\0\x7fGARBAGE-GARBAGE-GARBAGE", 33);
    close(fd);
    stranger_arg wrong = {l.port, true, false}, silent[5];
    pthread_t t1, t2[5];
    pthread_create(&t1, NULL, stranger, &wrong);
    while (!wrong.connected) usleep(1000);
    for (int k = 0; k < 5; k++) {
        silent[k] = (stranger_arg){l.port, false, false};
        pthread_create(&t2[k], NULL, stranger, &silent[k]);
        while (!silent[k].connected) usleep(1000);
    }
    /* The sender connects behind five connections that say nothing, each of which may
     * take VF_BULK_ADMIT_MS (2 s) to give up on: they are waited for side by side, so
     * it is served well within one such wait. */
    struct timespec t0, t9;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_sender(&r, true, 4);
    clock_gettime(CLOCK_MONOTONIC, &t9);
    double dt = (double)(t9.tv_sec - t0.tv_sec) + (double)(t9.tv_nsec - t0.tv_nsec) * 1e-9;
    VF_CHECK_MSG(dt < 1.9, "the sender was served after %.2f s", dt);
    pthread_join(t1, NULL);
    for (int k = 0; k < 5; k++) pthread_join(t2[k], NULL);
    VF_CHECK_EQ_INT((int)vf_zmq_refused(r.h), 7);
    VF_CHECK_EQ_INT((int)vf_bulk_rx_items(vf_lanes_state(&vf_zmq_of(r.e)->lanes, &vf_lane_bulk)), 4);
    /* the listener is closed once the sender is in: nothing else can connect */
    int s2 = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)l.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    VF_CHECK_MSG(connect(s2, (struct sockaddr *)&a, sizeof a) != 0, "the lane's port no longer listens");
    close(s2);
    rx_close(&r);
}

int main(void) { return vf_test_main(); }
