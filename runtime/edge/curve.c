/* curve.c — run keys, per-identity CURVE keypairs and the ZAP handler (curve.h). */
#include "runtime/edge/curve.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <zmq.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_POLL_MS 100

int vf_curve_new_key(char *hex, vf_status *st)
{
    unsigned char k[32];
    size_t got = 0;
    while (got < sizeof k) {
        ssize_t n = getrandom(k + got, sizeof k - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "getrandom: %s", strerror(errno));
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof k; i++) snprintf(hex + 2 * i, 3, "%02x", k[i]);
    sodium_memzero(k, sizeof k);
    return 0;
}

int vf_curve_init(vf_curve *c, const char *hex, int self, int npeers, const char *what, vf_status *st)
{
    memset(c, 0, sizeof *c);
    if (!hex || strlen(hex) != VF_CURVE_KEY_HEX)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: a run key is %d hex digits", what,
                             VF_CURVE_KEY_HEX);
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1 || !strchr("0123456789abcdefABCDEF", hex[2 * i]) ||
            !strchr("0123456789abcdefABCDEF", hex[2 * i + 1]))
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: not a hex run key", what);
        c->key[i] = (unsigned char)v;
    }
    if (npeers < 0 || self < VF_CURVE_DRIVER || self >= npeers)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: identity %d outside the run's %d", what, self,
                             npeers);
    c->self = self;
    c->npeers = npeers;
    return 0;
}

static void raw_keypair(const vf_curve *c, int id, unsigned char pk[32], unsigned char sk[32])
{
    char msg[48];
    int n = snprintf(msg, sizeof msg, "vflow-curve-1/%d", id);
    crypto_generichash(sk, 32, (const unsigned char *)msg, (size_t)n, c->key, sizeof c->key);
    crypto_scalarmult_base(pk, sk);
}

void vf_curve_keypair(const vf_curve *c, int id, char pub[41], char sec[41])
{
    unsigned char pk[32], sk[32];
    raw_keypair(c, id, pk, sk);
    zmq_z85_encode(pub, pk, 32);
    zmq_z85_encode(sec, sk, 32);
    sodium_memzero(sk, sizeof sk);
}

static int setopt(void *sock, int opt, const void *v, size_t n, const char *name, vf_status *st)
{
    if (zmq_setsockopt(sock, opt, v, n) != 0)
        return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "zmq_setsockopt(%s): %s", name,
                             zmq_strerror(zmq_errno()));
    return 0;
}

int vf_curve_server(const vf_curve *c, void *sock, vf_status *st)
{
    int rc = 0, one = 1;
    char pub[41], sec[41];
    vf_curve_keypair(c, c->self, pub, sec);
    VF_TRY(setopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one, "ZMQ_CURVE_SERVER", st));
    VF_TRY(setopt(sock, ZMQ_CURVE_SECRETKEY, sec, 40, "ZMQ_CURVE_SECRETKEY", st));
    VF_TRY(setopt(sock, ZMQ_ZAP_DOMAIN, VF_CURVE_ZAP_DOMAIN, strlen(VF_CURVE_ZAP_DOMAIN), "ZMQ_ZAP_DOMAIN", st));
fail:
    sodium_memzero(sec, sizeof sec);
    return rc;
}

int vf_curve_client(const vf_curve *c, void *sock, int server_id, vf_status *st)
{
    int rc = 0;
    char pub[41], sec[41], spub[41], ssec[41];
    vf_curve_keypair(c, c->self, pub, sec);
    vf_curve_keypair(c, server_id, spub, ssec);
    sodium_memzero(ssec, sizeof ssec);
    VF_TRY(setopt(sock, ZMQ_CURVE_SERVERKEY, spub, 40, "ZMQ_CURVE_SERVERKEY", st));
    VF_TRY(setopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 40, "ZMQ_CURVE_PUBLICKEY", st));
    VF_TRY(setopt(sock, ZMQ_CURVE_SECRETKEY, sec, 40, "ZMQ_CURVE_SECRETKEY", st));
fail:
    sodium_memzero(sec, sizeof sec);
    return rc;
}

/* ------------------------------------------------------------------ ZAP handler */

struct vf_zap {
    void *sock;
    pthread_t th;
    atomic_int stop;
    _Atomic int64_t refused;
    int nallowed;
    unsigned char (*allowed)[32];
};

static bool is_allowed(const vf_zap *z, const unsigned char *k)
{
    for (int i = 0; i < z->nallowed; i++)
        if (sodium_memcmp(z->allowed[i], k, 32) == 0) return true;
    return false;
}

/* One request (RFC 27): version, request id, domain, address, routing id, mechanism,
 * credentials; answered 200 for a run identity's key, 400 otherwise. */
static void serve_one(vf_zap *z)
{
    zmq_msg_t f[8];
    int n = 0;
    bool more = true;
    while (more && n < 8) {
        zmq_msg_init(&f[n]);
        if (zmq_msg_recv(&f[n], z->sock, 0) < 0) {
            zmq_msg_close(&f[n]);
            break;
        }
        more = zmq_msg_more(&f[n]);
        n++;
    }
    while (more) { /* more frames than the protocol has: read them away */
        zmq_msg_t x;
        zmq_msg_init(&x);
        if (zmq_msg_recv(&x, z->sock, 0) < 0) more = false;
        else more = zmq_msg_more(&x);
        zmq_msg_close(&x);
    }
    bool ok = n == 7 && zmq_msg_size(&f[0]) == 3 && memcmp(zmq_msg_data(&f[0]), "1.0", 3) == 0 &&
              zmq_msg_size(&f[2]) == strlen(VF_CURVE_ZAP_DOMAIN) &&
              memcmp(zmq_msg_data(&f[2]), VF_CURVE_ZAP_DOMAIN, strlen(VF_CURVE_ZAP_DOMAIN)) == 0 &&
              zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
              zmq_msg_size(&f[6]) == 32 && is_allowed(z, zmq_msg_data(&f[6]));
    if (!ok) atomic_fetch_add(&z->refused, 1);
    if (n >= 2) {
        const char *code = ok ? "200" : "400", *text = ok ? "OK" : "not a peer of this run";
        zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
        zmq_send(z->sock, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
        zmq_send(z->sock, code, 3, ZMQ_SNDMORE);
        zmq_send(z->sock, text, strlen(text), ZMQ_SNDMORE);
        zmq_send(z->sock, "", 0, ZMQ_SNDMORE);
        zmq_send(z->sock, "", 0, 0);
    }
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg)
{
    vf_zap *z = arg;
    while (!atomic_load(&z->stop)) {
        zmq_pollitem_t pi = {z->sock, 0, ZMQ_POLLIN, 0};
        int r = zmq_poll(&pi, 1, ZAP_POLL_MS);
        if (r < 0 && zmq_errno() == ETERM) break;
        if (r > 0 && (pi.revents & ZMQ_POLLIN)) serve_one(z);
    }
    return NULL;
}

int vf_zap_start(void *zctx, const vf_curve *c, vf_zap **out, vf_status *st)
{
    int rc = 0, zero = 0;
    vf_zap *z = calloc(1, sizeof *z);
    if (!z) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory (ZAP handler)");
    z->nallowed = c->npeers + 1;
    if (!(z->allowed = calloc((size_t)z->nallowed, sizeof *z->allowed)))
        VF_FAIL(st, VF_ENOMEM, "out of memory (ZAP allow-list)");
    for (int id = VF_CURVE_DRIVER; id < c->npeers; id++) {
        unsigned char sk[32];
        raw_keypair(c, id, z->allowed[id - VF_CURVE_DRIVER], sk);
        sodium_memzero(sk, sizeof sk);
    }
    if (!(z->sock = zmq_socket(zctx, ZMQ_REP)))
        VF_FAIL(st, VF_EEXTERNAL, "ZAP handler: zmq_socket: %s", zmq_strerror(zmq_errno()));
    zmq_setsockopt(z->sock, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(z->sock, ZAP_ENDPOINT) != 0)
        VF_FAIL(st, VF_EEXTERNAL, "ZAP handler: zmq_bind(%s): %s", ZAP_ENDPOINT, zmq_strerror(zmq_errno()));
    if ((rc = pthread_create(&z->th, NULL, zap_main, z)) != 0)
        VF_FAIL(st, VF_EEXTERNAL, "ZAP handler: pthread_create: %s", strerror(rc));
    *out = z;
    return 0;
fail:
    if (z->sock) zmq_close(z->sock);
    free(z->allowed);
    free(z);
    return rc;
}

int64_t vf_zap_refused(const vf_zap *z) { return z ? atomic_load(&((vf_zap *)z)->refused) : 0; }

void vf_zap_stop(vf_zap *z)
{
    if (!z) return;
    atomic_store(&z->stop, 1);
    pthread_join(z->th, NULL);
    zmq_close(z->sock);
    free(z->allowed);
    free(z);
}
