/* a2a_shm.c — the all-to-all of N processes of one node over shared memory (vflow.h
 * "all-to-all among ranks"), what the ranks of a sequence-parallel partition exchange
 * around self-attention on the CPU backend.
 *
 * The ranks meet in one POSIX shared-memory object named from the caller's key. Rank 0
 * makes it (dropping a name a dead run left) and writes its header last; the others
 * open it once the header is there and the process that made it is alive, and the last
 * to attach unlinks the name, so the memory lives exactly as long as a rank maps it.
 * Layout: a header page (sizes, each rank's pid, arrival sequence and chunk size), then
 * two banks of N × N slots, slot (i, j) holding what rank i sends rank j. Call k of a
 * rank writes its outgoing chunks into bank k mod 2, publishes its sequence k + 1 and
 * waits until every rank has; then it copies its incoming column out. Two banks suffice:
 * a rank writes bank k mod 2 again only in call k + 2, after every rank arrived in call
 * k + 1 and so had read call k's column. The bytes are copied, never combined, so the
 * result is the same bits whatever the ranks' timing.
 *
 * Waiting sleeps on a futex of the shared header (each arrival wakes the sleepers) and
 * wakes every 50 ms to look for a reason to stop: a rank that closed or whose process
 * is gone, the caller's cancel test, or the deadline. None of them hangs a rank.
 */
#include "runtime/vflow.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define A2A_MAGIC "VFA2A\0\0\1"
#define HDR_BYTES 4096
#define SLOT_ALIGN 64
#define WAKE_NS 50000000L

typedef struct a2a_hdr {
    char magic[8];
    uint32_t nranks, creator;       /* creator: the pid of rank 0 */
    uint64_t slot_bytes, total;
    _Atomic uint32_t attached;      /* ranks that mapped the object */
    _Atomic uint32_t arrivals;      /* the futex word: bumped by each arrival and each close */
    _Atomic uint64_t seq[VF_A2A_MAX_RANKS];   /* calls each rank has entered */
    uint64_t chunk[2][VF_A2A_MAX_RANKS];      /* per bank: each rank's chunk of that call */
    _Atomic uint32_t pid[VF_A2A_MAX_RANKS];
    _Atomic uint32_t gone[VF_A2A_MAX_RANKS];  /* the rank closed its end */
} a2a_hdr;
_Static_assert(sizeof(a2a_hdr) <= HDR_BYTES, "the header fits its page");

struct vf_a2a {
    char name[96];                  /* the shared-memory object's */
    char key[160];                  /* the group's, for messages */
    a2a_hdr *h;
    size_t total;
    int n, rank;
    uint64_t calls;
    vf_a2a_opts o;
};

/* FNV-1a of the key: object names are short, keys (a run dir and a group) are not. */
static uint64_t fnv(const char *s)
{
    uint64_t x = 1469598103934665603ull;
    for (; *s; s++) x = (x ^ (unsigned char)*s) * 1099511628211ull;
    return x;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Whether process pid is gone (a zombie counts as gone: it runs nothing any more). */
static bool pid_gone(uint32_t pid)
{
    if (pid == 0) return false;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return true;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    return rp && (rp[2] == 'Z' || rp[2] == 'X');
}

static void futex_wait(_Atomic uint32_t *w, uint32_t seen, long ns)
{
    struct timespec ts = {0, ns};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static unsigned char *slot(const vf_a2a *a, int bank, int from, int to)
{
    size_t k = ((size_t)bank * (size_t)a->n + (size_t)from) * (size_t)a->n + (size_t)to;
    return (unsigned char *)a->h + HDR_BYTES + k * a->h->slot_bytes;
}

/* Rank 0: a fresh object (a stale one of the same name, left by a run that died before
 * every rank attached, is dropped first). */
static int create(vf_a2a *a, size_t slot_bytes, vf_status *st)
{
    struct statvfs sv;
    if (statvfs("/dev/shm", &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize < a->total)
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__,
                             "all-to-all \"%s\": %zu bytes of shared memory wanted, /dev/shm has %llu free", a->key,
                             a->total, (unsigned long long)sv.f_bavail * sv.f_frsize);
    shm_unlink(a->name);
    int fd = shm_open(a->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "all-to-all \"%s\": cannot create /dev/shm%s: %s",
                             a->key, a->name, strerror(errno));
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)a->total) == 0 && posix_fallocate(fd, 0, (off_t)a->total) == 0)
        p = mmap(NULL, a->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(a->name);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "all-to-all \"%s\": cannot reserve %zu bytes: %s",
                             a->key, a->total, strerror(err));
    }
    a2a_hdr *h = p;
    h->nranks = (uint32_t)a->n, h->creator = (uint32_t)getpid();
    h->slot_bytes = slot_bytes, h->total = a->total;
    atomic_store(&h->attached, 0);
    atomic_thread_fence(memory_order_release);
    memcpy(h->magic, A2A_MAGIC, 8);
    a->h = h;
    return 0;
}

/* Ranks above 0: maps rank 0's object once it is complete. 1 while it is not there yet,
 * or is the stale object of a run whose rank 0 died; VF_EINVAL when a live rank 0 made it
 * for other sizes. */
static int attach(vf_a2a *a, vf_status *st)
{
    int fd = shm_open(a->name, O_RDWR, 0);
    if (fd < 0) return 1;
    struct stat sb;
    a2a_hdr *h = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && sb.st_size >= HDR_BYTES)
        h = mmap(NULL, HDR_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        close(fd);
        return 1;
    }
    bool made = !memcmp(h->magic, A2A_MAGIC, 8);
    atomic_thread_fence(memory_order_acquire);
    bool live = made && !pid_gone(h->creator);
    uint32_t n = h->nranks;
    uint64_t total = h->total;
    munmap(h, HDR_BYTES);
    if (!live) {
        close(fd);
        return 1;
    }
    if (n != (uint32_t)a->n || total != a->total || (uint64_t)sb.st_size != total) {
        close(fd);
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "all-to-all \"%s\": rank 0 opened it for %u ranks (%llu bytes), rank %d for %d ranks "
                             "(%zu bytes): the ranks disagree on the group or the chunk size", a->key, n,
                             (unsigned long long)total, a->rank, a->n, a->total);
    }
    void *p = mmap(NULL, a->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "all-to-all \"%s\": rank %d cannot map %zu bytes: %s",
                             a->key, a->rank, a->total, strerror(errno));
    a->h = p;
    return 0;
}

int vf_a2a_open(const char *key, int nranks, int rank, size_t chunk_max, const vf_a2a_opts *o, vf_a2a **out,
                vf_status *st)
{
    int rc = 0;
    *out = NULL;
    if (!key || !key[0] || nranks < 1 || nranks > VF_A2A_MAX_RANKS || rank < 0 || rank >= nranks)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "all-to-all \"%s\": rank %d of %d ranks (1..%d ranks, a non-empty key)", key ? key : "",
                             rank, nranks, VF_A2A_MAX_RANKS);
    size_t slot_bytes = (chunk_max + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    if (slot_bytes == 0) slot_bytes = SLOT_ALIGN;
    size_t nslots = 2 * (size_t)nranks * (size_t)nranks;
    if (slot_bytes > (SIZE_MAX - HDR_BYTES) / nslots)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "all-to-all \"%s\": chunks of %zu bytes overflow",
                             key, chunk_max);
    vf_a2a *a = calloc(1, sizeof *a);
    if (!a) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "all-to-all \"%s\": out of memory", key);
    snprintf(a->name, sizeof a->name, "/vflow-a2a-%u-%016llx", (unsigned)getuid(), (unsigned long long)fnv(key));
    snprintf(a->key, sizeof a->key, "%s", key);
    a->n = nranks, a->rank = rank;
    a->total = HDR_BYTES + nslots * slot_bytes;
    if (o) a->o = *o;
    if (a->o.timeout_ms <= 0) a->o.timeout_ms = 600000;
    int64_t deadline = now_ns() + (int64_t)a->o.timeout_ms * 1000000;
    if (rank == 0) {
        VF_TRY(create(a, slot_bytes, st));
    } else {
        for (;;) {
            rc = attach(a, st);
            if (rc <= 0) break;
            if (a->o.cancel && a->o.cancel(a->o.user))
                VF_FAIL(st, VF_ESTOPPED, "all-to-all \"%s\": rank %d stopped waiting for rank 0", a->key, rank);
            if (now_ns() > deadline)
                VF_FAIL(st, VF_ETIMEOUT, "all-to-all \"%s\": rank %d waited %d ms for rank 0 to make it", a->key,
                        rank, a->o.timeout_ms);
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        VF_TRY(rc);
    }
    atomic_store(&a->h->pid[rank], (uint32_t)getpid());
    atomic_store(&a->h->gone[rank], 0);
    atomic_store(&a->h->seq[rank], 0);
    if (atomic_fetch_add(&a->h->attached, 1) + 1 == (uint32_t)nranks) shm_unlink(a->name);
    *out = a;
    return 0;
fail:
    free(a);
    return rc;
}

/* Why rank `who` will not arrive, or 0 while it still may. */
static int peer_failed(vf_a2a *a, int who, vf_status *st)
{
    a2a_hdr *h = a->h;
    uint32_t pid = atomic_load(&h->pid[who]);
    if (atomic_load(&h->gone[who]))
        return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__,
                             "all-to-all \"%s\": rank %d closed its end before call %llu", a->key, who,
                             (unsigned long long)a->calls + 1);
    if (pid_gone(pid))
        return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__,
                             "all-to-all \"%s\": rank %d (pid %u) is gone before call %llu", a->key, who, pid,
                             (unsigned long long)a->calls + 1);
    return 0;
}

/* Until every rank has entered call `target` (its seq reached it). */
static int wait_all(vf_a2a *a, uint64_t target, vf_status *st)
{
    a2a_hdr *h = a->h;
    int64_t deadline = now_ns() + (int64_t)a->o.timeout_ms * 1000000;
    for (int spins = 0;; spins++) {
        uint32_t seen = atomic_load_explicit(&h->arrivals, memory_order_acquire);
        int late = -1;
        for (int i = 0; i < a->n && late < 0; i++)
            if (atomic_load_explicit(&h->seq[i], memory_order_acquire) < target) late = i;
        if (late < 0) return 0;
        if (spins < 64) continue; /* a rank a few instructions behind */
        int rc = peer_failed(a, late, st);
        /* The rank may have arrived, finished the call and closed (or exited) between the
         * read of its seq above and the look at its liveness: its seq, stored before its
         * close, says so, and then it is not late. */
        if (rc && atomic_load_explicit(&h->seq[late], memory_order_acquire) >= target) {
            if (st) memset(st, 0, sizeof *st);
            continue;
        }
        if (rc) return rc;
        if (a->o.cancel && a->o.cancel(a->o.user))
            return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__,
                                 "all-to-all \"%s\": rank %d stopped waiting for rank %d", a->key, a->rank, late);
        if (now_ns() > deadline)
            return vf_status_set(st, VF_ETIMEOUT, __FILE__, __LINE__,
                                 "all-to-all \"%s\": rank %d waited %d ms for rank %d in call %llu", a->key, a->rank,
                                 a->o.timeout_ms, late, (unsigned long long)target);
        futex_wait(&h->arrivals, seen, WAKE_NS);
    }
}

int vf_a2a_run(vf_a2a *a, const void *send, void *recv, size_t chunk, vf_status *st)
{
    if (!a || (!send && chunk) || (!recv && chunk))
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "all-to-all: NULL %s", a ? "buffer" : "handle");
    a2a_hdr *h = a->h;
    if (chunk > h->slot_bytes)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "all-to-all \"%s\": rank %d sends chunks of %zu bytes, opened for %llu at most", a->key,
                             a->rank, chunk, (unsigned long long)h->slot_bytes);
    int bank = (int)(a->calls & 1), me = a->rank;
    const unsigned char *s = send;
    unsigned char *r = recv;
    for (int j = 0; j < a->n; j++)
        if (j != me) memcpy(slot(a, bank, me, j), s + (size_t)j * chunk, chunk);
    h->chunk[bank][me] = chunk;
    atomic_store_explicit(&h->seq[me], a->calls + 1, memory_order_release);
    atomic_fetch_add_explicit(&h->arrivals, 1, memory_order_release);
    futex_wake_all(&h->arrivals);
    int rc = wait_all(a, a->calls + 1, st);
    if (rc) return rc;
    a->calls++;
    for (int i = 0; i < a->n; i++)
        if (h->chunk[bank][i] != chunk)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "all-to-all \"%s\": call %llu: rank %d sends chunks of %llu bytes, rank %d of %zu",
                                 a->key, (unsigned long long)a->calls, i, (unsigned long long)h->chunk[bank][i],
                                 me, chunk);
    if (chunk) memmove(r + (size_t)me * chunk, s + (size_t)me * chunk, chunk);
    for (int i = 0; i < a->n; i++)
        if (i != me) memcpy(r + (size_t)i * chunk, slot(a, bank, i, me), chunk);
    return 0;
}

void vf_a2a_close(vf_a2a *a)
{
    if (!a) return;
    if (a->h) {
        atomic_store(&a->h->gone[a->rank], 1);
        atomic_fetch_add(&a->h->arrivals, 1);
        futex_wake_all(&a->h->arrivals);
        /* rank 0 made the name: it goes with rank 0 when a rank never attached */
        if (a->rank == 0) shm_unlink(a->name);
        munmap(a->h, a->total);
    }
    free(a);
}
