/* edge_bulk_rx.c — the receiving end of a bulk lane (edge_bulk.h): the listener and
 * its admission thread, reads into pooled buffers, decryption.
 *
 * Admission runs on a thread of its own from the moment the end opens until a sender is
 * admitted: it accepts every connection at once, sends each its challenge and waits for
 * the replies of up to MAX_PENDING of them together (VF_BULK_ADMIT_MS each), so a
 * connection that says nothing, or many, cannot keep the run's sender waiting behind
 * them in the listen queue, and refusals are counted as they happen. Reads happen on the
 * consumer's thread when it takes an item; the admitted socket waits at most
 * VF_STOP_POLL_MS per call, so the stop flag is looked at between waits.
 */
#include "runtime/edge/edge_bulk_internal.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

typedef struct rbuf {
    struct vf_bulk_rx *rx;
    _Atomic int refs; /* frames of the item aliasing it */
    size_t cap;
    unsigned char *data;
    struct rbuf *next;
} rbuf;

#define MAX_PENDING 32 /* connections waiting for their reply at once */

struct vf_bulk_rx {
    char name[160];
    int lfd;                 /* the listener: the admission thread's, closed once a sender is in */
    int cfd;                 /* the admitted lane (-1 until then: under mu) */
    pthread_t admitter;
    bool admitting;          /* the admission thread runs */
    bool quit;               /* under mu: the end is going */
    pthread_cond_t cv;       /* under mu: signalled when cfd is set */
    unsigned char key[32], salt[VF_BULK_SALT];
    vf_bulk_mode mode;
    bool broken;
    EVP_CIPHER_CTX *gcm;
    uint64_t next_seq, ctr;
    uint64_t max_item;       /* bound on an item's lane bytes */
    _Atomic int64_t *refused;
    pthread_mutex_t mu;      /* the pool; buffers come back on any thread */
    int refs;                /* the end + buffers out */
    rbuf *pool;
    int npool, pool_max;
    bool dropped;            /* the end is gone: buffers are freed, not pooled */
    _Atomic int64_t bytes;   /* capacity of the buffers allocated and not freed (pooled or lent) */
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
    pthread_cond_destroy(&rx->cv);
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
    } else {
        atomic_fetch_sub(&rx->bytes, (int64_t)b->cap); /* while this buffer still keeps rx */
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
        atomic_fetch_sub(&rx->bytes, (int64_t)small->cap);
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
        atomic_fetch_add(&rx->bytes, (int64_t)cap);
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
        cnt = vf_bulk_iov_advance(&iov, cnt, (size_t)r);
    }
    return 0;
}

typedef struct pending {
    int fd;
    unsigned char want[VF_BULK_TAG], got[VF_BULK_TAG];
    size_t n;
    int64_t t_end;
} pending;

/* The admission thread: accepts every connection, sends it a challenge and admits the
 * first whose reply is the tag; the others are refused (closed and counted) when they
 * answer wrong, close, or stay silent for VF_BULK_ADMIT_MS. */
static void *admit_main(void *arg)
{
    vf_bulk_rx *rx = arg;
    pending p[MAX_PENDING];
    int np = 0, admitted = -1;
    for (;;) {
        pthread_mutex_lock(&rx->mu);
        bool quit = rx->quit;
        pthread_mutex_unlock(&rx->mu);
        if (quit) break;
        struct pollfd pf[1 + MAX_PENDING];
        pf[0] = (struct pollfd){rx->lfd, np < MAX_PENDING ? POLLIN : 0, 0};
        for (int i = 0; i < np; i++) pf[1 + i] = (struct pollfd){p[i].fd, POLLIN, 0};
        poll(pf, (nfds_t)(1 + np), VF_STOP_POLL_MS);
        int64_t now = vf_now_ns();
        int keep = 0;
        for (int i = 0; i < np; i++) {
            bool done = false;
            if (pf[1 + i].revents) {
                ssize_t r = recv(p[i].fd, p[i].got + p[i].n, VF_BULK_TAG - p[i].n, MSG_DONTWAIT);
                if (r > 0) p[i].n += (size_t)r;
                else if (r == 0 || (errno != EAGAIN && errno != EINTR)) done = true;
                if (p[i].n == VF_BULK_TAG) {
                    done = true;
                    if (admitted < 0 && CRYPTO_memcmp(p[i].got, p[i].want, VF_BULK_TAG) == 0) {
                        admitted = p[i].fd;
                        continue;
                    }
                }
            }
            if (done || now > p[i].t_end) {
                close(p[i].fd);
                atomic_fetch_add(rx->refused, 1);
                continue;
            }
            p[keep++] = p[i];
        }
        np = keep;
        if (admitted >= 0) break;
        while (np < MAX_PENDING) {
            int c = accept4(rx->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (c < 0) break;
            pending *q = &p[np];
            unsigned char ch[16];
            randombytes_buf(ch, sizeof ch);
            if (send(c, ch, sizeof ch, MSG_NOSIGNAL) != (ssize_t)sizeof ch ||
                !vf_bulk_hello_tag(rx->key, rx->salt, ch, q->want)) {
                close(c);
                atomic_fetch_add(rx->refused, 1);
                continue;
            }
            q->fd = c;
            q->n = 0;
            q->t_end = now + (int64_t)VF_BULK_ADMIT_MS * 1000000;
            np++;
        }
    }
    /* one sender per edge: nothing else may connect from now on */
    for (int i = 0; i < np; i++) {
        close(p[i].fd);
        atomic_fetch_add(rx->refused, 1);
    }
    close(rx->lfd);
    rx->lfd = -1;
    if (admitted >= 0) {
        vf_bulk_sockopts(admitted);
        pthread_mutex_lock(&rx->mu);
        rx->cfd = admitted;
        pthread_cond_broadcast(&rx->cv);
        pthread_mutex_unlock(&rx->mu);
    }
    return NULL;
}

/* Waits (stop-aware) until a sender is admitted. */
static int rx_admitted(vf_bulk_rx *rx, vf_status *st)
{
    int rc = 0;
    pthread_mutex_lock(&rx->mu);
    while (rx->cfd < 0) {
        if (vf_runtime_stopping()) {
            rc = vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__, "edge %s: stopped", rx->name);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)VF_STOP_POLL_MS * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&rx->cv, &rx->mu, &ts);
    }
    pthread_mutex_unlock(&rx->mu);
    return rc;
}

int vf_bulk_rx_new(const vf_edge_desc *d, char *endpoint, size_t n, const vf_curve *curve,
                   _Atomic int64_t *refused, vf_bulk_rx **out, vf_status *st)
{
    *out = NULL;
    if (vf_bulk_lane_off() || d->transport != VF_TR_TCP) return 0;
    if (d->max_item_bytes > 0 && (size_t)d->max_item_bytes < VF_EDGE_FRAME_MIN) return 0; /* never a frame */
    char host[256];
    if (vf_bulk_endpoint_host(endpoint, host, sizeof host) != 0)
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
    rx->mode = vf_bulk_mode_for(curve);
    rx->pool_max = d->capacity + 1;
    rx->max_item = d->max_item_bytes > 0 ? (uint64_t)d->max_item_bytes + VF_EDGE_SIZE_SLACK : VF_BULK_UNBOUNDED;
    pthread_mutex_init(&rx->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rx->cv, &ca);
    pthread_condattr_destroy(&ca);
    randombytes_buf(rx->salt, VF_BULK_SALT);
    vf_bulk_key(curve, rx->salt, rx->key);
    if (rx->mode != VF_BULK_PLAIN && !(rx->gcm = vf_bulk_gcm_ctx(false, rx->key)))
        VF_FAIL(st, VF_EEXTERNAL, "edge %s: AES-256-GCM is not available from OpenSSL", d->name);
    int gai = getaddrinfo(host, "0", &hints, &ai);
    if (gai != 0) VF_FAIL(st, VF_EINVAL, "edge %s: bulk lane address %s: %s", d->name, host, gai_strerror(gai));
    rx->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (rx->lfd < 0 || bind(rx->lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(rx->lfd, 64) != 0 ||
        getsockname(rx->lfd, (struct sockaddr *)&sa, &sl) != 0)
        VF_FAIL(st, VF_EEXTERNAL, "edge %s: bulk lane listener on %s: %s", d->name, host, strerror(errno));
    int port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    char hex[2 * VF_BULK_SALT + 1];
    sodium_bin2hex(hex, sizeof hex, rx->salt, VF_BULK_SALT);
    size_t used = strlen(endpoint);
    if (snprintf(endpoint + used, n - used, "%s%d,%s,%c", VF_BULK_SUFFIX, port, hex, (char)rx->mode) >=
        (int)(n - used))
        VF_FAIL(st, VF_EINVAL, "edge %s: endpoint %s too long for the bulk lane", d->name, endpoint);
    freeaddrinfo(ai);
    ai = NULL;
    if (pthread_create(&rx->admitter, NULL, admit_main, rx) != 0)
        VF_FAIL(st, VF_EEXTERNAL, "edge %s: bulk lane: pthread_create failed", d->name);
    rx->admitting = true;
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
    if (rx->mode == VF_BULK_PLAIN) {
        struct iovec v = {dst, (size_t)len};
        return rx_readv(rx, &v, 1, st);
    }
    bool sealed = rx->mode == VF_BULK_SEALED;
    for (uint64_t off = 0; off < len; off += VF_BULK_CHUNK) {
        size_t m = len - off < VF_BULK_CHUNK ? (size_t)(len - off) : VF_BULK_CHUNK;
        unsigned char tag[VF_BULK_TAG], n[12], aad[20];
        struct iovec v[2] = {{dst + off, m}, {tag, VF_BULK_TAG}};
        int rc = rx_readv(rx, v, 2, st);
        if (rc < 0) return rc;
        vf_bulk_nonce(n, 0, rx->ctr++);
        vf_bulk_chunk_aad(aad, seq, k, off);
        if (!vf_bulk_gcm(rx->gcm, false, n, aad, (int)sizeof aad, dst + off, sealed ? dst + off : NULL, m, tag))
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
    uint64_t total = 0, seq = rx->next_seq;
    if (rx->broken) VF_FAIL(st, VF_EEXTERNAL, "edge %s: the bulk lane broke on an earlier item", rx->name);
    if (n <= 0 || n > VF_CODEC_MAX_COUNT) VF_FAIL(st, VF_ECORRUPT, "edge %s: %d bulk frames", rx->name, n);
    for (int k = 0; k < n; k++) { /* each frame's length goes to out[k].len once checked */
        vf_bulk_desc d;
        memcpy(&d, desc[k], sizeof d);
        if (d.seq != seq || d.frame != (uint32_t)k || d.nframes != (uint32_t)n || d.len == 0 || d.len > rx->max_item ||
            total > rx->max_item)
            VF_FAIL(st, VF_ECORRUPT, "edge %s: bulk descriptor %d of item %llu out of sequence or bounds "
                    "(expected item %llu, %d frames)", rx->name, k, (unsigned long long)d.seq,
                    (unsigned long long)seq, n);
        out[k] = (vf_frame){NULL, (size_t)d.len, NULL, NULL};
        total += (d.len + VF_BULK_ALIGN - 1) / VF_BULK_ALIGN * VF_BULK_ALIGN;
    }
    if (total > rx->max_item + (uint64_t)n * VF_BULK_ALIGN)
        VF_FAIL(st, VF_ECORRUPT, "edge %s: item %llu's bulk frames (%llu bytes) exceed the port's largest item",
                rx->name, (unsigned long long)seq, (unsigned long long)total);
    if ((rc = rx_admitted(rx, st)) < 0) goto fail;
    if (!(b = rbuf_get(rx, (size_t)total)))
        VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory (%llu bytes of bulk frames)", rx->name,
                (unsigned long long)total);
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        size_t len = out[k].len;
        if ((rc = read_frame(rx, b->data + off, len, seq, (uint32_t)k, st)) < 0) goto fail;
        out[k] = (vf_frame){b->data + off, len, rbuf_release, b};
        off += (len + VF_BULK_ALIGN - 1) / VF_BULK_ALIGN * VF_BULK_ALIGN;
    }
    atomic_store(&b->refs, n);
    rx->next_seq++;
    return 0;
fail:
    for (int k = 0; k < n && k < VF_CODEC_MAX_COUNT; k++) out[k].release = NULL; /* nothing handed out */
    if (rc != VF_ESTOPPED) rx->broken = true; /* the stream is out of step with the messages now */
    if (b) {
        atomic_store(&b->refs, 1);
        rbuf_release(NULL, b);
    }
    return rc;
}

int64_t vf_bulk_rx_items(const vf_bulk_rx *rx) { return (int64_t)rx->next_seq; }

int64_t vf_bulk_rx_bytes(const vf_bulk_rx *rx) { return rx ? atomic_load(&rx->bytes) : 0; }

void vf_bulk_rx_free(vf_bulk_rx *rx)
{
    if (!rx) return;
    if (rx->admitting) { /* it closes the listener as it goes */
        pthread_mutex_lock(&rx->mu);
        rx->quit = true;
        pthread_mutex_unlock(&rx->mu);
        pthread_join(rx->admitter, NULL);
    }
    if (rx->cfd >= 0) close(rx->cfd);
    rx->cfd = -1;
    bool last;
    pthread_mutex_lock(&rx->mu);
    rx->dropped = true;
    last = --rx->refs == 0;
    pthread_mutex_unlock(&rx->mu);
    if (last) rx_destroy(rx);
}
