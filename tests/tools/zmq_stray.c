/* zmq_stray.c — a process that is not part of a run and tries to talk to one of its tcp
 * sockets (the multi-host and security tests drive it):
 *
 *   zmq_stray ENDPOINT [SERVER_PUBLIC_Z85]
 *   zmq_stray ENDPOINT --run-key HEX LO:HI
 *
 * Three attempts, each for a fraction of a second: a plain ZeroMQ DEALER (no CURVE) that
 * sends a well-formed item record and an end-of-stream frame; a CURVE client with a
 * fresh keypair (and the server's public key when given, else a random one) sending
 * the same; raw bytes that look like the start of a ZMTP greeting, then noise. With
 * --run-key, the CURVE client is tried against the public key of each identity LO..HI of
 * that run (runtime/edge/curve.h: a stray that learnt the servers' public keys, so its
 * handshake reaches the run's ZAP handler, which must refuse its own key). Prints
 * one line per attempt and exits 0: whether the run refused them is for the test to see
 * in the run's outcome. */
#include "runtime/core/item.h"
#include "runtime/edge/curve.h"
#include "runtime/vflow.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

static void dealer(const char *ep, const char *server_pub, bool curve)
{
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (curve) {
        char pub[41], sec[41], fake[41], fsec[41];
        zmq_curve_keypair(pub, sec);
        zmq_curve_keypair(fake, fsec);
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_pub ? server_pub : fake, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    zmq_connect(s, ep);
    vf_status st = {0};
    vf_item *it = vf_item_new("stray", &st);
    int64_t n = 4096;
    vf_tensor *t = vf_tensor_zeros(VF_DTYPE_U8, 1, &n, &st);
    vf_item_put(it, "x", t, &st);
    void *buf = NULL;
    size_t len = 0;
    vf_item_encode_alloc(it, &buf, &len, &st);
    int a = zmq_send(s, buf, len, ZMQ_DONTWAIT);
    int b = zmq_send(s, "VFCE\0\0\0\0", 8, ZMQ_DONTWAIT);
    usleep(400 * 1000);
    printf("zmq_stray: %s dealer queued record %d, eos %d\n", curve ? "CURVE" : "plain", a, b);
    vf_free(buf);
    vf_item_free(it);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

static void raw(const char *ep)
{
    char host[256];
    const char *p = strstr(ep, "://");
    snprintf(host, sizeof host, "%s", p ? p + 3 : ep);
    char *colon = strrchr(host, ':');
    if (!colon) return;
    *colon = 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0) return;
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        unsigned char junk[8192];
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 131 + 7);
        junk[0] = 0xff;
        junk[9] = 0x7f;
        ssize_t w = write(fd, junk, sizeof junk);
        printf("zmq_stray: raw wrote %zd bytes\n", w);
        usleep(200 * 1000);
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: zmq_stray ENDPOINT [SERVER_PUBLIC_Z85]\n");
        return 2;
    }
    dealer(argv[1], NULL, false);
    if (argc > 4 && strcmp(argv[2], "--run-key") == 0) {
        int lo = 0, hi = -1;
        vf_curve c;
        vf_status st = {0};
        if (sscanf(argv[4], "%d:%d", &lo, &hi) != 2 || vf_curve_init(&c, argv[3], lo, hi + 1, "--run-key", &st) < 0) {
            fprintf(stderr, "zmq_stray: bad --run-key / ids: %s\n", st.msg);
            return 2;
        }
        for (int id = lo; id <= hi; id++) {
            char pub[41], sec[41];
            vf_curve_keypair(&c, id, pub, sec);
            dealer(argv[1], pub, true);
        }
    } else {
        dealer(argv[1], argc > 2 ? argv[2] : NULL, true);
    }
    raw(argv[1]);
    return 0;
}
