/* edge_bulk_tx.c — the sending end of a bulk lane (edge_bulk.h): the writer thread that
 * connects, answers the receiver's challenge and writes each queued item's frames
 * (encrypted chunk by chunk on a secured hub), holding a reference of the record until
 * they are written. Every wait is at most VF_STOP_POLL_MS, so it sees its quit flag.
 */
#include "runtime/edge/edge_bulk_internal.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

typedef struct job {
    vf_enc *enc;
    uint64_t seq;
    struct job *next;
} job;

struct vf_bulk_tx {
    char name[160];
    struct sockaddr_storage sa;
    socklen_t salen;
    unsigned char key[32], salt[VF_BULK_SALT];
    vf_bulk_mode mode;
    uint64_t seq;            /* the next item's number (the producer's side) */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;        /* under mu */
    bool quit;               /* under mu */
    int err;                 /* under mu: the writer's error, and its message */
    char msg[400];
    /* the writer's own */
    int fd;
    uint64_t ctr;
    EVP_CIPHER_CTX *gcm;
    unsigned char *stage;
};

static bool tx_quit(vf_bulk_tx *tx)
{
    pthread_mutex_lock(&tx->mu);
    bool q = tx->quit;
    pthread_mutex_unlock(&tx->mu);
    return q;
}

/* Waits for the lane (writer side); false once told to quit. */
static bool tx_wait(vf_bulk_tx *tx, short ev)
{
    if (tx_quit(tx)) return false;
    struct pollfd p = {tx->fd, ev, 0};
    poll(&p, 1, VF_STOP_POLL_MS);
    return true;
}

/* 0, -1 with errno, or -2 told to quit. */
static int tx_writev(vf_bulk_tx *tx, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t r = sendmsg(tx->fd, &mh, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
            if (tx_quit(tx)) return -2; /* the socket waited VF_STOP_POLL_MS */
            continue;
        }
        cnt = vf_bulk_iov_advance(&iov, cnt, (size_t)r);
    }
    return 0;
}

/* Connects and answers the receiver's challenge. 0, -1 with a message, -2 quit. */
static int tx_connect(vf_bulk_tx *tx, char *why, size_t n)
{
    tx->fd = socket(tx->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (tx->fd < 0) return snprintf(why, n, "socket: %s", strerror(errno)), -1;
    int64_t t_end = vf_now_ns() + (int64_t)VF_BULK_CONNECT_MS * 1000000;
    if (connect(tx->fd, (struct sockaddr *)&tx->sa, tx->salen) != 0) {
        if (errno != EINPROGRESS) return snprintf(why, n, "connect: %s", strerror(errno)), -1;
        for (;;) {
            if (!tx_wait(tx, POLLOUT)) return -2;
            int err = 0;
            socklen_t el = sizeof err;
            getsockopt(tx->fd, SOL_SOCKET, SO_ERROR, &err, &el);
            if (err) return snprintf(why, n, "connect: %s", strerror(err)), -1;
            struct pollfd p = {tx->fd, POLLOUT, 0};
            if (poll(&p, 1, 0) == 1 && (p.revents & POLLOUT)) break;
            if (vf_now_ns() > t_end) return snprintf(why, n, "connect: timed out"), -1;
        }
    }
    vf_bulk_sockopts(tx->fd);
    unsigned char ch[16], tag[VF_BULK_TAG];
    size_t got = 0;
    while (got < sizeof ch) {
        ssize_t r = read(tx->fd, ch + got, sizeof ch - got);
        if (r > 0) {
            got += (size_t)r;
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
            return snprintf(why, n, "the receiver closed the connection before admitting it"), -1;
        } else if (!tx_wait(tx, POLLIN)) {
            return -2;
        }
    }
    if (!vf_bulk_hello_tag(tx->key, tx->salt, ch, tag)) return snprintf(why, n, "AES-256-GCM failed"), -1;
    struct iovec v = {tag, VF_BULK_TAG};
    int rc = tx_writev(tx, &v, 1);
    if (rc == -1) snprintf(why, n, "admission: %s", strerror(errno));
    return rc;
}

/* Writes one item's frames. 0, -1 with a message, -2 quit. */
static int tx_item(vf_bulk_tx *tx, const job *j, char *why, size_t n)
{
    for (int k = 0; k < j->enc->nframes; k++) {
        unsigned char *p = j->enc->frames[k]->data;
        size_t len = vf_tensor_nbytes(j->enc->frames[k]);
        int rc = 0;
        if (tx->mode == VF_BULK_PLAIN) {
            struct iovec v = {p, len};
            rc = tx_writev(tx, &v, 1);
        }
        for (size_t off = 0; tx->mode != VF_BULK_PLAIN && off < len && rc == 0; off += VF_BULK_CHUNK) {
            size_t m = len - off < VF_BULK_CHUNK ? len - off : VF_BULK_CHUNK;
            unsigned char nc[12], aad[20], tag[VF_BULK_TAG];
            bool sealed = tx->mode == VF_BULK_SEALED;
            vf_bulk_nonce(nc, 0, tx->ctr++);
            vf_bulk_chunk_aad(aad, j->seq, (uint32_t)k, off);
            /* sealed: the ciphertext and its tag from the stage; authenticated only: the
             * chunk from the tensor's own memory, then its tag */
            if (!vf_bulk_gcm(tx->gcm, true, nc, aad, (int)sizeof aad, p + off, sealed ? tx->stage : NULL, m,
                             sealed ? tx->stage + m : tag))
                return snprintf(why, n, "AES-256-GCM failed"), -1;
            struct iovec v[2] = {{sealed ? tx->stage : p + off, m + (sealed ? VF_BULK_TAG : 0)}, {tag, VF_BULK_TAG}};
            rc = tx_writev(tx, v, sealed ? 1 : 2);
        }
        if (rc == -1) snprintf(why, n, "%s", strerror(errno));
        if (rc < 0) return rc;
    }
    return 0;
}

static void *tx_main(void *arg)
{
    vf_bulk_tx *tx = arg;
    char why[300] = "";
    int rc = 0;
    for (;;) {
        pthread_mutex_lock(&tx->mu);
        while (!tx->quit && !tx->head) pthread_cond_wait(&tx->cv, &tx->mu);
        job *j = tx->quit ? NULL : tx->head;
        pthread_mutex_unlock(&tx->mu);
        if (!j) break;
        if (tx->fd < 0 && (rc = tx_connect(tx, why, sizeof why)) < 0) break;
        if ((rc = tx_item(tx, j, why, sizeof why)) < 0) break;
        pthread_mutex_lock(&tx->mu);
        tx->head = j->next;
        if (!tx->head) tx->tail = NULL;
        pthread_mutex_unlock(&tx->mu);
        vf_enc_unref(NULL, j->enc);
        free(j);
    }
    pthread_mutex_lock(&tx->mu);
    if (rc == -1) {
        tx->err = VF_EEXTERNAL;
        snprintf(tx->msg, sizeof tx->msg, "edge %s: bulk lane to the receiver: %s", tx->name, why);
    }
    job *rest = tx->head;
    tx->head = tx->tail = NULL;
    pthread_mutex_unlock(&tx->mu);
    while (rest) { /* not written: never will be */
        job *nx = rest->next;
        vf_enc_unref(NULL, rest->enc);
        free(rest);
        rest = nx;
    }
    return NULL;
}

int vf_bulk_tx_new(const vf_edge_desc *d, char *addr, const vf_curve *curve, vf_bulk_tx **out, vf_status *st)
{
    *out = NULL;
    char *suffix = strstr(addr, VF_BULK_SUFFIX);
    if (!suffix) return 0;
    char tail[128];
    snprintf(tail, sizeof tail, "%s", suffix + strlen(VF_BULK_SUFFIX));
    *suffix = 0;
    if (vf_bulk_lane_off()) return 0;
    int port = 0, used = 0;
    char hex[2 * VF_BULK_SALT + 2] = "", host[256];
    unsigned char salt[VF_BULK_SALT];
    size_t bin = 0;
    char mode = 0;
    if (sscanf(tail, "%d,%33[0-9a-f],%c%n", &port, hex, &mode, &used) != 3 || tail[used] || port <= 0 ||
        port > 65535 || (curve ? mode != VF_BULK_SEALED && mode != VF_BULK_AUTH : mode != VF_BULK_PLAIN) ||
        sodium_hex2bin(salt, VF_BULK_SALT, hex, strlen(hex), NULL, &bin, NULL) != 0 || bin != VF_BULK_SALT ||
        vf_bulk_endpoint_host(addr, host, sizeof host) != 0)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "edge %s: bad bulk lane \"%s\" in endpoint %s",
                             d->name, tail, addr);
    char ports[8];
    snprintf(ports, sizeof ports, "%d", port);
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(host, ports, &hints, &ai);
    if (gai != 0)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "edge %s: bulk lane address %s: %s", d->name, host,
                             gai_strerror(gai));
    vf_bulk_tx *tx = calloc(1, sizeof *tx);
    if (!tx) {
        freeaddrinfo(ai);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", d->name);
    }
    memcpy(&tx->sa, ai->ai_addr, ai->ai_addrlen);
    tx->salen = ai->ai_addrlen;
    freeaddrinfo(ai);
    snprintf(tx->name, sizeof tx->name, "%s", d->name);
    memcpy(tx->salt, salt, VF_BULK_SALT);
    vf_bulk_key(curve, salt, tx->key);
    tx->mode = (vf_bulk_mode)mode;
    tx->fd = -1;
    pthread_mutex_init(&tx->mu, NULL);
    pthread_cond_init(&tx->cv, NULL);
    *out = tx;
    return 0;
}

int vf_bulk_tx_check(vf_bulk_tx *tx, vf_status *st)
{
    pthread_mutex_lock(&tx->mu);
    int rc = tx->err;
    if (rc) vf_status_set(st, rc, __FILE__, __LINE__, "%s", tx->msg);
    pthread_mutex_unlock(&tx->mu);
    return rc;
}

int vf_bulk_tx_send(vf_bulk_tx *tx, vf_enc *enc, unsigned char (*desc)[VF_BULK_DESC_SIZE], vf_status *st)
{
    int rc = vf_bulk_tx_check(tx, st);
    if (rc < 0) return rc;
    if (!tx->started) {
        if (tx->mode != VF_BULK_PLAIN &&
            (!(tx->gcm = vf_bulk_gcm_ctx(true, tx->key)) || !(tx->stage = malloc(VF_BULK_CHUNK + VF_BULK_TAG))))
            return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: bulk lane: no cipher or stage buffer",
                                 tx->name);
        if (pthread_create(&tx->thread, NULL, tx_main, tx) != 0)
            return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "edge %s: bulk lane: pthread_create failed",
                                 tx->name);
        tx->started = true;
    }
    job *j = malloc(sizeof *j);
    if (!j) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", tx->name);
    j->enc = enc;
    j->seq = tx->seq++;
    j->next = NULL;
    atomic_fetch_add(&enc->refs, 1);
    for (int k = 0; k < enc->nframes; k++) {
        vf_bulk_desc d = {.seq = j->seq, .frame = (uint32_t)k, .nframes = (uint32_t)enc->nframes,
                       .len = vf_tensor_nbytes(enc->frames[k])};
        memcpy(d.magic, VF_BULK_DESC_MAGIC, 8);
        memcpy(desc[k], &d, sizeof d);
    }
    pthread_mutex_lock(&tx->mu);
    if (tx->tail) tx->tail->next = j;
    else tx->head = j;
    tx->tail = j;
    pthread_cond_signal(&tx->cv);
    pthread_mutex_unlock(&tx->mu);
    return 0;
}

void vf_bulk_tx_free(vf_bulk_tx *tx)
{
    if (!tx) return;
    if (tx->started) {
        pthread_mutex_lock(&tx->mu);
        tx->quit = true;
        pthread_cond_signal(&tx->cv);
        pthread_mutex_unlock(&tx->mu);
        pthread_join(tx->thread, NULL);
    }
    if (tx->fd >= 0) close(tx->fd);
    if (tx->gcm) EVP_CIPHER_CTX_free(tx->gcm);
    free(tx->stage);
    pthread_mutex_destroy(&tx->mu);
    pthread_cond_destroy(&tx->cv);
    explicit_bzero(tx->key, sizeof tx->key);
    free(tx);
}
