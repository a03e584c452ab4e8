/* edge_bulk.c — the bulk lane of a tcp edge (edge_bulk.h): the receiver's listener,
 * admission and reads into pooled buffers; the sender's writer thread.
 *
 * Sockets are non-blocking and every wait is a poll of at most VF_STOP_POLL_MS, so the
 * receiver looks at the stop flag and the writer at its quit flag between waits.
 * Encryption is OpenSSL's AES-256-GCM (AES-NI and carry-less multiply: several GB/s on
 * one core, where libsodium's AES-GCM runs at about half that), one EVP context per
 * side, keyed once, a fresh nonce per chunk.
 */
#include "runtime/edge/edge_bulk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define DESC_MAGIC "VFBULKD"
#define SALT 16
#define TAG 16
#define FRAME_ALIGN 64
#define ADMIT_MS 2000          /* a connection must answer the challenge within this */
#define CONNECT_MS 30000       /* the writer's connect gives up after this */
#define UNBOUNDED_ITEM ((uint64_t)1 << 40)
#define HELLO_AAD "vflow-bulk-hello"

typedef struct desc_wire {
    char magic[8];
    uint64_t seq;
    uint32_t frame, nframes;
    uint64_t len;
} desc_wire;
_Static_assert(sizeof(desc_wire) == VF_BULK_DESC_SIZE, "descriptor size");

bool vf_bulk_is_desc(const void *data, size_t len)
{
    return len == VF_BULK_DESC_SIZE && memcmp(data, DESC_MAGIC, 8) == 0;
}

static bool lane_off(void)
{
    const char *env = getenv("VFLOW_EDGE_BULK");
    return env && !strcmp(env, "0");
}

static void derive_key(const vf_curve *curve, const unsigned char salt[SALT], unsigned char key[32])
{
    static const unsigned char zero[32];
    unsigned char msg[12 + SALT];
    memcpy(msg, "vflow-bulk-1", 12);
    memcpy(msg + 12, salt, SALT);
    crypto_generichash(key, 32, msg, sizeof msg, curve ? curve->key : zero, 32);
}

/* The nonce of chunk `ctr` (kind 0) or of the admission reply (kind 1). */
static void nonce(unsigned char n[12], unsigned kind, uint64_t ctr)
{
    memcpy(n, "VFB", 3);
    n[3] = (unsigned char)kind;
    for (int i = 0; i < 8; i++) n[4 + i] = (unsigned char)(ctr >> (8 * i));
}

/* AES-256-GCM of in[len] into out[len] (in == out: in place); enc: encrypt and write
 * tag, else decrypt and check tag (false when it does not authenticate). GCM is a
 * stream mode: nothing is written past out + len. */
static bool gcm(EVP_CIPHER_CTX *x, bool enc, const unsigned char n[12], const void *aad, int aadlen,
                const unsigned char *in, unsigned char *out, size_t len, unsigned char tag[TAG])
{
    int ol = 0;
    unsigned char fin[16];
    if (enc) {
        if (EVP_EncryptInit_ex(x, NULL, NULL, NULL, n) != 1) return false;
        if (aadlen && EVP_EncryptUpdate(x, NULL, &ol, aad, aadlen) != 1) return false;
        if (len && EVP_EncryptUpdate(x, out, &ol, in, (int)len) != 1) return false;
        if (EVP_EncryptFinal_ex(x, fin, &ol) != 1) return false;
        return EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_GET_TAG, TAG, tag) == 1;
    }
    if (EVP_DecryptInit_ex(x, NULL, NULL, NULL, n) != 1) return false;
    if (aadlen && EVP_DecryptUpdate(x, NULL, &ol, aad, aadlen) != 1) return false;
    if (len && EVP_DecryptUpdate(x, out, &ol, in, (int)len) != 1) return false;
    if (EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_TAG, TAG, tag) != 1) return false;
    return EVP_DecryptFinal_ex(x, fin, &ol) == 1;
}

static EVP_CIPHER_CTX *gcm_ctx(bool enc, const unsigned char key[32])
{
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    if (!x) return NULL;
    int ok = enc ? EVP_EncryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, NULL)
                 : EVP_DecryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, NULL);
    if (ok != 1) {
        EVP_CIPHER_CTX_free(x);
        return NULL;
    }
    return x;
}

/* The reply that admits a connection: the tag of (challenge, salt) under the key. */
static bool hello_tag(const unsigned char key[32], const unsigned char salt[SALT], const unsigned char ch[16],
                      unsigned char tag[TAG])
{
    EVP_CIPHER_CTX *x = gcm_ctx(true, key);
    if (!x) return false;
    unsigned char aad[sizeof HELLO_AAD - 1 + SALT + 16], n[12];
    memcpy(aad, HELLO_AAD, sizeof HELLO_AAD - 1);
    memcpy(aad + sizeof HELLO_AAD - 1, salt, SALT);
    memcpy(aad + sizeof HELLO_AAD - 1 + SALT, ch, 16);
    nonce(n, 1, 0);
    bool ok = gcm(x, true, n, aad, (int)sizeof aad, NULL, NULL, 0, tag);
    EVP_CIPHER_CTX_free(x);
    return ok;
}

static void chunk_aad(unsigned char a[20], uint64_t seq, uint32_t frame, uint64_t off)
{
    for (int i = 0; i < 8; i++) a[i] = (unsigned char)(seq >> (8 * i));
    for (int i = 0; i < 4; i++) a[8 + i] = (unsigned char)(frame >> (8 * i));
    for (int i = 0; i < 8; i++) a[12 + i] = (unsigned char)(off >> (8 * i));
}

/* An admitted lane: blocking, each call waiting at most VF_STOP_POLL_MS (so a whole
 * chunk moves in one system call, and the stop / quit flag is looked at between them). */
static void set_sockopts(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {0, VF_STOP_POLL_MS * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

/* "tcp://host:port..." -> host (brackets of an IPv6 address removed). */
static int endpoint_host(const char *ep, char *host, size_t n)
{
    if (strncmp(ep, "tcp://", 6) != 0) return -1;
    const char *h = ep + 6, *end;
    if (*h == '[') {
        h++;
        if (!(end = strchr(h, ']'))) return -1;
    } else if (!(end = strrchr(h, ':'))) {
        return -1;
    }
    if ((size_t)(end - h) >= n) return -1;
    memcpy(host, h, (size_t)(end - h));
    host[end - h] = 0;
    return 0;
}

/* ------------------------------------------------------------------ receiving end */

typedef struct rbuf {
    struct vf_bulk_rx *rx;
    _Atomic int refs; /* frames of the item aliasing it */
    size_t cap;
    unsigned char *data;
    struct rbuf *next;
} rbuf;

struct vf_bulk_rx {
    char name[160];
    int lfd, cfd;            /* listener (-1 once a sender is admitted), the admitted lane */
    unsigned char key[32], salt[SALT];
    bool secure, broken;
    EVP_CIPHER_CTX *gcm;
    uint64_t next_seq, ctr;
    uint64_t max_item;       /* bound on an item's lane bytes */
    _Atomic int64_t *refused;
    pthread_mutex_t mu;      /* the pool; buffers come back on any thread */
    int refs;                /* the end + buffers out */
    rbuf *pool;
    int npool, pool_max;
    bool dropped;            /* the end is gone: buffers are freed, not pooled */
};

static void rx_destroy(vf_bulk_rx *rx)
{
    while (rx->pool) {
        rbuf *b = rx->pool;
        rx->pool = b->next;
        free(b->data);
        free(b);
    }
    if (rx->gcm) EVP_CIPHER_CTX_free(rx->gcm);
    pthread_mutex_destroy(&rx->mu);
    explicit_bzero(rx->key, sizeof rx->key);
    free(rx);
}

static void rbuf_release(void *data, void *hint)
{
    (void)data;
    rbuf *b = hint;
    if (atomic_fetch_sub(&b->refs, 1) != 1) return;
    vf_bulk_rx *rx = b->rx;
    bool last;
    pthread_mutex_lock(&rx->mu);
    if (!rx->dropped && rx->npool < rx->pool_max) {
        b->next = rx->pool;
        rx->pool = b;
        rx->npool++;
        b = NULL;
    }
    last = --rx->refs == 0;
    pthread_mutex_unlock(&rx->mu);
    if (b) {
        free(b->data);
        free(b);
    }
    if (last) rx_destroy(rx);
}

/* A buffer of at least `need` bytes: the smallest pooled one that fits, else a new one
 * (pooled buffers too small for it are freed: items of an edge are of a few sizes). */
static rbuf *rbuf_get(vf_bulk_rx *rx, size_t need)
{
    rbuf *b = NULL, *small = NULL;
    pthread_mutex_lock(&rx->mu);
    for (rbuf **p = &rx->pool; *p; p = &(*p)->next)
        if ((*p)->cap >= need && (!b || (*p)->cap < b->cap)) b = *p;
    if (!b && rx->pool) b = small = rx->pool;
    if (b) {
        for (rbuf **p = &rx->pool; *p; p = &(*p)->next)
            if (*p == b) {
                *p = b->next;
                break;
            }
        rx->npool--;
    }
    rx->refs++;
    pthread_mutex_unlock(&rx->mu);
    if (small) {
        free(small->data);
        small->data = NULL;
        b = small;
    }
    if (!b && !(b = calloc(1, sizeof *b))) goto oom;
    if (!b->data) {
        size_t cap = (need + 4095) & ~(size_t)4095;
        if (posix_memalign((void **)&b->data, 4096, cap) != 0) {
            b->data = NULL;
            goto oom;
        }
        b->cap = cap;
    }
    b->rx = rx;
    atomic_store(&b->refs, 0);
    return b;
oom:
    free(b);
    pthread_mutex_lock(&rx->mu);
    rx->refs--; /* never the last: the end holds one */
    pthread_mutex_unlock(&rx->mu);
    return NULL;
}

/* Waits for fd to be ready for `ev` (stop-aware): 0, or VF_ESTOPPED. */
static int rx_wait(vf_bulk_rx *rx, int fd, short ev, int ms, vf_status *st)
{
    if (vf_runtime_stopping())
        return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__, "edge %s: stopped", rx->name);
    struct pollfd p = {fd, ev, 0};
    poll(&p, 1, ms);
    return 0;
}

/* Reads iov (cnt pieces) whole from the lane. */
static int rx_readv(vf_bulk_rx *rx, struct iovec *iov, int cnt, vf_status *st)
{
    while (cnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t r = recvmsg(rx->cfd, &mh, MSG_WAITALL);
        if (r == 0)
            return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__,
                                 "edge %s: the sender closed its bulk connection in the middle of an item", rx->name);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "edge %s: bulk connection: %s", rx->name,
                                     strerror(errno));
            if (vf_runtime_stopping()) /* the socket waited VF_STOP_POLL_MS */
                return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__, "edge %s: stopped", rx->name);
            continue;
        }
        while (cnt > 0 && (size_t)r >= iov->iov_len) {
            r -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + r;
            iov->iov_len -= (size_t)r;
        }
    }
    return 0;
}

/* Admits the first connection that answers the challenge; refuses (and counts) others. */
static int rx_admit(vf_bulk_rx *rx, vf_status *st)
{
    int rc = 0;
    while (rx->cfd < 0) {
        int c = accept4(rx->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
                return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "edge %s: bulk accept: %s", rx->name,
                                     strerror(errno));
            if ((rc = rx_wait(rx, rx->lfd, POLLIN, VF_STOP_POLL_MS, st)) < 0) return rc;
            continue;
        }
        unsigned char ch[16], reply[TAG], want[TAG];
        randombytes_buf(ch, sizeof ch);
        bool ok = send(c, ch, sizeof ch, MSG_NOSIGNAL) == (ssize_t)sizeof ch && hello_tag(rx->key, rx->salt, ch, want);
        size_t got = 0;
        int64_t t_end = vf_now_ns() + (int64_t)ADMIT_MS * 1000000;
        while (ok && got < sizeof reply) {
            ssize_t r = read(c, reply + got, sizeof reply - got);
            if (r > 0) {
                got += (size_t)r;
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR) || vf_now_ns() > t_end) {
                ok = false;
            } else if ((rc = rx_wait(rx, c, POLLIN, VF_STOP_POLL_MS, st)) < 0) {
                close(c);
                return rc;
            }
        }
        if (ok && CRYPTO_memcmp(reply, want, TAG) == 0) {
            set_sockopts(c);
            rx->cfd = c;
            close(rx->lfd); /* one sender per edge: nothing else may connect from now on */
            rx->lfd = -1;
        } else {
            close(c);
            atomic_fetch_add(rx->refused, 1);
        }
    }
    return 0;
}

int vf_bulk_rx_new(const vf_edge_desc *d, char *endpoint, size_t n, const vf_curve *curve,
                   _Atomic int64_t *refused, vf_bulk_rx **out, vf_status *st)
{
    *out = NULL;
    if (lane_off() || d->transport != VF_TR_TCP) return 0;
    if (d->max_item_bytes > 0 && (size_t)d->max_item_bytes < VF_EDGE_FRAME_MIN) return 0; /* never a frame */
    char host[256];
    if (endpoint_host(endpoint, host, sizeof host) != 0)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "edge %s: cannot read the host of %s", d->name,
                             endpoint);
    vf_bulk_rx *rx = calloc(1, sizeof *rx);
    if (!rx) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", d->name);
    int rc = 0;
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    snprintf(rx->name, sizeof rx->name, "%s", d->name);
    rx->lfd = rx->cfd = -1;
    rx->refs = 1;
    rx->refused = refused;
    rx->secure = curve != NULL;
    rx->pool_max = d->capacity + 1;
    rx->max_item = d->max_item_bytes > 0 ? (uint64_t)d->max_item_bytes + VF_EDGE_SIZE_SLACK : UNBOUNDED_ITEM;
    pthread_mutex_init(&rx->mu, NULL);
    randombytes_buf(rx->salt, SALT);
    derive_key(curve, rx->salt, rx->key);
    if (rx->secure && !(rx->gcm = gcm_ctx(false, rx->key)))
        VF_FAIL(st, VF_EEXTERNAL, "edge %s: AES-256-GCM is not available from OpenSSL", d->name);
    int gai = getaddrinfo(host, "0", &hints, &ai);
    if (gai != 0) VF_FAIL(st, VF_EINVAL, "edge %s: bulk lane address %s: %s", d->name, host, gai_strerror(gai));
    rx->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (rx->lfd < 0 || bind(rx->lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(rx->lfd, 8) != 0 ||
        getsockname(rx->lfd, (struct sockaddr *)&sa, &sl) != 0)
        VF_FAIL(st, VF_EEXTERNAL, "edge %s: bulk lane listener on %s: %s", d->name, host, strerror(errno));
    int port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    char hex[2 * SALT + 1];
    sodium_bin2hex(hex, sizeof hex, rx->salt, SALT);
    size_t used = strlen(endpoint);
    if (snprintf(endpoint + used, n - used, "%s%d,%s", VF_BULK_SUFFIX, port, hex) >= (int)(n - used))
        VF_FAIL(st, VF_EINVAL, "edge %s: endpoint %s too long for the bulk lane", d->name, endpoint);
    freeaddrinfo(ai);
    *out = rx;
    return 0;
fail:
    if (ai) freeaddrinfo(ai);
    endpoint[strcspn(endpoint, "|")] = 0;
    if (rx->lfd >= 0) close(rx->lfd);
    rx_destroy(rx);
    return rc;
}

static int read_frame(vf_bulk_rx *rx, unsigned char *dst, uint64_t len, uint64_t seq, uint32_t k, vf_status *st)
{
    if (!rx->secure) {
        struct iovec v = {dst, (size_t)len};
        return rx_readv(rx, &v, 1, st);
    }
    for (uint64_t off = 0; off < len; off += VF_BULK_CHUNK) {
        size_t m = len - off < VF_BULK_CHUNK ? (size_t)(len - off) : VF_BULK_CHUNK;
        unsigned char tag[TAG], n[12], aad[20];
        struct iovec v[2] = {{dst + off, m}, {tag, TAG}};
        int rc = rx_readv(rx, v, 2, st);
        if (rc < 0) return rc;
        nonce(n, 0, rx->ctr++);
        chunk_aad(aad, seq, k, off);
        if (!gcm(rx->gcm, false, n, aad, (int)sizeof aad, dst + off, dst + off, m, tag))
            return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__,
                                 "edge %s: bulk data of item %llu failed authentication (not what the run's "
                                 "sender wrote)", rx->name, (unsigned long long)seq);
    }
    return 0;
}

int vf_bulk_rx_item(vf_bulk_rx *rx, const void *const *desc, int n, vf_frame *out, vf_status *st)
{
    int rc = 0;
    rbuf *b = NULL;
    uint64_t total = 0, seq = 0;
    desc_wire *d = NULL;
    if (rx->broken) VF_FAIL(st, VF_EEXTERNAL, "edge %s: the bulk lane broke on an earlier item", rx->name);
    if (n <= 0 || n > VF_CODEC_MAX_COUNT) VF_FAIL(st, VF_ECORRUPT, "edge %s: %d bulk frames", rx->name, n);
    if (!(d = malloc((size_t)n * sizeof *d))) VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory", rx->name);
    for (int k = 0; k < n; k++) {
        memcpy(&d[k], desc[k], sizeof d[k]);
        if (k == 0) seq = d[0].seq;
        if (d[k].seq != rx->next_seq || d[k].seq != seq || d[k].frame != (uint32_t)k || d[k].nframes != (uint32_t)n ||
            d[k].len == 0 || d[k].len > rx->max_item || total > rx->max_item)
            VF_FAIL(st, VF_ECORRUPT, "edge %s: bulk descriptor %d of item %llu out of sequence or bounds "
                    "(expected item %llu, %d frames)", rx->name, k, (unsigned long long)d[k].seq,
                    (unsigned long long)rx->next_seq, n);
        total += (d[k].len + FRAME_ALIGN - 1) / FRAME_ALIGN * FRAME_ALIGN;
    }
    if (total > rx->max_item + (uint64_t)n * FRAME_ALIGN)
        VF_FAIL(st, VF_ECORRUPT, "edge %s: item %llu's bulk frames (%llu bytes) exceed the port's largest item",
                rx->name, (unsigned long long)seq, (unsigned long long)total);
    if ((rc = rx_admit(rx, st)) < 0) goto fail;
    if (!(b = rbuf_get(rx, (size_t)total)))
        VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory (%llu bytes of bulk frames)", rx->name,
                (unsigned long long)total);
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        if ((rc = read_frame(rx, b->data + off, d[k].len, seq, (uint32_t)k, st)) < 0) goto fail;
        out[k] = (vf_frame){b->data + off, (size_t)d[k].len, rbuf_release, b};
        off += (d[k].len + FRAME_ALIGN - 1) / FRAME_ALIGN * FRAME_ALIGN;
    }
    atomic_store(&b->refs, n);
    rx->next_seq++;
    free(d);
    return 0;
fail:
    free(d);
    if (rc != VF_ESTOPPED) rx->broken = true; /* the stream is out of step with the messages now */
    if (b) {
        atomic_store(&b->refs, 1);
        rbuf_release(NULL, b);
    }
    return rc;
}

int64_t vf_bulk_rx_items(const vf_bulk_rx *rx) { return (int64_t)rx->next_seq; }

void vf_bulk_rx_free(vf_bulk_rx *rx)
{
    if (!rx) return;
    if (rx->lfd >= 0) close(rx->lfd);
    if (rx->cfd >= 0) close(rx->cfd);
    rx->lfd = rx->cfd = -1;
    bool last;
    pthread_mutex_lock(&rx->mu);
    rx->dropped = true;
    last = --rx->refs == 0;
    pthread_mutex_unlock(&rx->mu);
    if (last) rx_destroy(rx);
}

/* ------------------------------------------------------------------ sending end */

typedef struct job {
    vf_enc *enc;
    uint64_t seq;
    struct job *next;
} job;

struct vf_bulk_tx {
    char name[160];
    struct sockaddr_storage sa;
    socklen_t salen;
    unsigned char key[32], salt[SALT];
    bool secure;
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
        while (cnt > 0 && (size_t)r >= iov->iov_len) {
            r -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + r;
            iov->iov_len -= (size_t)r;
        }
    }
    return 0;
}

/* Connects and answers the receiver's challenge. 0, -1 with a message, -2 quit. */
static int tx_connect(vf_bulk_tx *tx, char *why, size_t n)
{
    tx->fd = socket(tx->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (tx->fd < 0) return snprintf(why, n, "socket: %s", strerror(errno)), -1;
    int64_t t_end = vf_now_ns() + (int64_t)CONNECT_MS * 1000000;
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
    set_sockopts(tx->fd);
    unsigned char ch[16], tag[TAG];
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
    if (!hello_tag(tx->key, tx->salt, ch, tag)) return snprintf(why, n, "AES-256-GCM failed"), -1;
    struct iovec v = {tag, TAG};
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
        if (!tx->secure) {
            struct iovec v = {p, len};
            rc = tx_writev(tx, &v, 1);
        }
        for (size_t off = 0; tx->secure && off < len && rc == 0; off += VF_BULK_CHUNK) {
            size_t m = len - off < VF_BULK_CHUNK ? len - off : VF_BULK_CHUNK;
            unsigned char nc[12], aad[20];
            nonce(nc, 0, tx->ctr++);
            chunk_aad(aad, j->seq, (uint32_t)k, off);
            if (!gcm(tx->gcm, true, nc, aad, (int)sizeof aad, p + off, tx->stage, m, tx->stage + m))
                return snprintf(why, n, "AES-256-GCM failed"), -1;
            struct iovec v = {tx->stage, m + TAG};
            rc = tx_writev(tx, &v, 1);
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
    if (lane_off()) return 0;
    int port = 0, used = 0;
    char hex[2 * SALT + 2] = "", host[256];
    unsigned char salt[SALT];
    size_t bin = 0;
    if (sscanf(tail, "%d,%33[0-9a-f]%n", &port, hex, &used) != 2 || tail[used] || port <= 0 || port > 65535 ||
        sodium_hex2bin(salt, SALT, hex, strlen(hex), NULL, &bin, NULL) != 0 || bin != SALT ||
        endpoint_host(addr, host, sizeof host) != 0)
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
    memcpy(tx->salt, salt, SALT);
    derive_key(curve, salt, tx->key);
    tx->secure = curve != NULL;
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
        if (tx->secure && (!(tx->gcm = gcm_ctx(true, tx->key)) || !(tx->stage = malloc(VF_BULK_CHUNK + TAG))))
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
        desc_wire d = {.seq = j->seq, .frame = (uint32_t)k, .nframes = (uint32_t)enc->nframes,
                       .len = vf_tensor_nbytes(enc->frames[k])};
        memcpy(d.magic, DESC_MAGIC, 8);
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
