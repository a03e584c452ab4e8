/* alloc.c — vf_alloc / vf_calloc / vf_free and per-stage memory accounts (alloc.h).
 *
 * A block is [64-byte header | user bytes], 64-byte aligned (cache lines, AVX-512 loads).
 * The header records the size and the account charged, so vf_free credits the right
 * account from any thread, and a magic word catches double frees and foreign pointers
 * (a bug: VF_ASSERT). Counters are C11 atomics; the account list is append-only under a
 * mutex, so iteration never sees a freed account.
 *
 * Big blocks (>= VF_ALLOC_BIG: tensors, encoded records) do not go through malloc: a
 * streaming stage allocates and frees same-sized big blocks over and over, from
 * different threads (a record is freed by a ZeroMQ I/O thread), and glibc's heap then
 * fragments and keeps freed pages resident, so RSS drifts far above what is live. They
 * are mmap'd (2 MiB aligned, MADV_HUGEPAGE: one fault per 2 MiB instead of 512) and, when
 * freed, parked in a small cache of at most vf_alloc_cache_limit() bytes for the next
 * allocation of about the same size (faulting fresh pages in costs more than the copy
 * they are for). So a process holds at most live bytes + the cache limit in big blocks.
 */
#include "runtime/core/alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct vf_account {
    char name[VF_NAME_MAX + 16];
    vf_device device;
    _Atomic int64_t live, peak, limit, allocs;
    struct vf_account *next;
};

#define HDR_SIZE 64
#define HDR_MAGIC 0x7666616c6c6f6321ull /* "vfalloc!" */
#define HDR_FREED 0x7666667265656421ull /* "vffreed!" */

typedef struct hdr {
    uint64_t magic;
    size_t size;
    vf_account *acct;
    size_t map_len; /* big blocks: length of the mapping that starts at the header; 0 = malloc */
    char pad[HDR_SIZE - 8 - 2 * sizeof(size_t) - sizeof(void *)];
} hdr;
_Static_assert(sizeof(hdr) == HDR_SIZE, "allocation header must keep 64-byte alignment");

static vf_account g_runtime = {.name = "runtime"};
static vf_account *g_tail = &g_runtime;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local vf_account *t_current;

static vf_account *account_new(const char *name, vf_device dev)
{
    pthread_mutex_lock(&g_lock);
    for (vf_account *a = &g_runtime; a; a = a->next) {
        if (strcmp(a->name, name) == 0 && a->device.kind == dev.kind && a->device.index == dev.index) {
            pthread_mutex_unlock(&g_lock);
            return a;
        }
    }
    vf_account *a = calloc(1, sizeof *a);
    if (a) {
        snprintf(a->name, sizeof a->name, "%s", name);
        a->device = dev;
        g_tail->next = a;
        g_tail = a;
    }
    pthread_mutex_unlock(&g_lock);
    return a;
}

vf_account *vf_account_new(const char *name)
{
    return account_new(name, (vf_device){VF_DEV_CPU, 0});
}

vf_account *vf_account_new_dev(const char *name, vf_device dev) { return account_new(name, dev); }
vf_account *vf_account_runtime(void) { return &g_runtime; }

vf_account *vf_account_set_current(vf_account *a)
{
    vf_account *prev = vf_account_current();
    t_current = a;
    return prev;
}

vf_account *vf_account_current(void) { return t_current ? t_current : &g_runtime; }
void vf_account_set_limit(vf_account *a, int64_t bytes) { atomic_store(&a->limit, bytes > 0 ? bytes : 0); }
const char *vf_account_name(const vf_account *a) { return a->name; }
vf_device vf_account_device(const vf_account *a) { return a->device; }
int64_t vf_account_live(const vf_account *a) { return atomic_load(&((vf_account *)a)->live); }
int64_t vf_account_peak(const vf_account *a) { return atomic_load(&((vf_account *)a)->peak); }
int64_t vf_account_limit(const vf_account *a) { return atomic_load(&((vf_account *)a)->limit); }
int64_t vf_account_allocs(const vf_account *a) { return atomic_load(&((vf_account *)a)->allocs); }
void vf_account_reset_peak(vf_account *a) { atomic_store(&a->peak, atomic_load(&a->live)); }

static void fmt_bytes(char *buf, size_t n, int64_t b)
{
    if (b >= (1ll << 30)) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= (1ll << 20)) snprintf(buf, n, "%.2f MiB", b / 1048576.0);
    else if (b >= (1ll << 10)) snprintf(buf, n, "%.1f KiB", b / 1024.0);
    else snprintf(buf, n, "%lld B", (long long)b);
}

int vf_account_charge(vf_account *a, int64_t bytes, vf_status *st)
{
    int64_t limit = atomic_load(&a->limit), now;
    if (limit > 0) {
        /* CAS so that concurrent charges can never take live over the limit. */
        int64_t cur = atomic_load(&a->live);
        do {
            if (cur + bytes > limit) {
                char l[32], r[32], m[32];
                fmt_bytes(l, sizeof l, cur);
                fmt_bytes(r, sizeof r, bytes);
                fmt_bytes(m, sizeof m, limit);
                return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__,
                                     "memory account '%s' over its limit: %s live + %s requested > %s",
                                     a->name, l, r, m);
            }
        } while (!atomic_compare_exchange_weak(&a->live, &cur, cur + bytes));
        now = cur + bytes;
    } else {
        now = atomic_fetch_add(&a->live, bytes) + bytes;
    }
    int64_t pk = atomic_load(&a->peak);
    while (now > pk && !atomic_compare_exchange_weak(&a->peak, &pk, now)) {
    }
    atomic_fetch_add(&a->allocs, 1);
    return 0;
}

void vf_account_credit(vf_account *a, int64_t bytes) { atomic_fetch_sub(&a->live, bytes); }

void vf_account_each(void (*fn)(vf_account *a, void *user), void *user)
{
    /* Snapshot the list head/tail under the lock; entries are never removed, so walking
     * outside the lock is safe and fn may itself allocate or create accounts. */
    pthread_mutex_lock(&g_lock);
    vf_account *last = g_tail;
    pthread_mutex_unlock(&g_lock);
    for (vf_account *a = &g_runtime;; a = a->next) {
        fn(a, user);
        if (a == last) break;
    }
}

/* ------------------------------------------------------------------ big blocks */

#define HUGE_2M ((size_t)2 << 20)
#define CACHE_SLOTS 16

static struct {
    pthread_mutex_t mu;
    size_t bytes, limit;
    int n;
    struct {
        void *base;
        size_t len;
    } slot[CACHE_SLOTS];
} g_cache = {PTHREAD_MUTEX_INITIALIZER, 0, VF_ALLOC_CACHE_DEFAULT, 0, {{0}}};

void vf_alloc_set_cache_limit(size_t bytes)
{
    pthread_mutex_lock(&g_cache.mu);
    g_cache.limit = bytes;
    /* Trim down to the new limit now, largest first is not needed: any order frees. */
    while (g_cache.n > 0 && g_cache.bytes > g_cache.limit) {
        g_cache.n--;
        munmap(g_cache.slot[g_cache.n].base, g_cache.slot[g_cache.n].len);
        g_cache.bytes -= g_cache.slot[g_cache.n].len;
    }
    pthread_mutex_unlock(&g_cache.mu);
}

size_t vf_alloc_cache_limit(void)
{
    pthread_mutex_lock(&g_cache.mu);
    size_t l = g_cache.limit;
    pthread_mutex_unlock(&g_cache.mu);
    return l;
}

size_t vf_alloc_cached_bytes(void)
{
    pthread_mutex_lock(&g_cache.mu);
    size_t b = g_cache.bytes;
    pthread_mutex_unlock(&g_cache.mu);
    return b;
}

/* A parked block of len..len*5/4 bytes (best fit), or NULL. */
static void *cache_take(size_t len, size_t *got)
{
    pthread_mutex_lock(&g_cache.mu);
    int best = -1;
    for (int i = 0; i < g_cache.n; i++) {
        size_t l = g_cache.slot[i].len;
        if (l >= len && l - len <= len / 4 && (best < 0 || l < g_cache.slot[best].len)) best = i;
    }
    void *p = NULL;
    if (best >= 0) {
        p = g_cache.slot[best].base;
        *got = g_cache.slot[best].len;
        g_cache.bytes -= *got;
        g_cache.slot[best] = g_cache.slot[--g_cache.n];
    }
    pthread_mutex_unlock(&g_cache.mu);
    return p;
}

static void cache_put(void *base, size_t len)
{
    pthread_mutex_lock(&g_cache.mu);
    if (len <= g_cache.limit) {
        /* Make room: the oldest parked blocks go first. */
        while (g_cache.n > 0 && (g_cache.n == CACHE_SLOTS || g_cache.bytes + len > g_cache.limit)) {
            munmap(g_cache.slot[0].base, g_cache.slot[0].len);
            g_cache.bytes -= g_cache.slot[0].len;
            memmove(&g_cache.slot[0], &g_cache.slot[1], (size_t)(g_cache.n - 1) * sizeof g_cache.slot[0]);
            g_cache.n--;
        }
        g_cache.slot[g_cache.n].base = base;
        g_cache.slot[g_cache.n].len = len;
        g_cache.n++;
        g_cache.bytes += len;
        base = NULL;
    }
    pthread_mutex_unlock(&g_cache.mu);
    if (base) munmap(base, len);
}

/* A mapping of at least len bytes starting 2 MiB aligned; *zeroed if fresh. */
static void *big_map(size_t len, size_t *map_len, bool *zeroed)
{
    void *p = cache_take(len, map_len);
    if (p) {
        *zeroed = false;
        return p;
    }
    size_t over = len + HUGE_2M;
    char *raw = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *al = (char *)(((uintptr_t)raw + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
    if (al > raw) munmap(raw, (size_t)(al - raw));
    size_t tail = (size_t)(raw + over - (al + len));
    if (tail) munmap(al + len, tail);
#ifdef MADV_HUGEPAGE
    madvise(al, len, MADV_HUGEPAGE); /* advice only: fine if THP is off */
#endif
    *map_len = len;
    *zeroed = true;
    return al;
}

/* ------------------------------------------------------------------ vf_alloc */

static void *alloc_impl(size_t bytes, bool zero, vf_status *st)
{
    vf_account *a = vf_account_current();
    if (bytes > (size_t)INT64_MAX - 2 * HUGE_2M) {
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "allocation of %zu bytes is impossible (account '%s')",
                      bytes, a->name);
        return NULL;
    }
    if (vf_account_charge(a, (int64_t)bytes, st) < 0) return NULL;
    void *raw = NULL;
    size_t map_len = 0;
    bool zeroed = false;
    if (bytes >= VF_ALLOC_BIG) {
        raw = big_map((HDR_SIZE + bytes + 4095) & ~(size_t)4095, &map_len, &zeroed);
    } else if (posix_memalign(&raw, 64, HDR_SIZE + ((bytes + 63) & ~(size_t)63)) != 0) {
        raw = NULL;
    }
    if (!raw) {
        vf_account_credit(a, (int64_t)bytes);
        char b[32];
        fmt_bytes(b, sizeof b, (int64_t)bytes);
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory allocating %s (account '%s')", b,
                      a->name);
        return NULL;
    }
    hdr *h = raw;
    h->magic = HDR_MAGIC;
    h->size = bytes;
    h->acct = a;
    h->map_len = map_len;
    void *p = (char *)raw + HDR_SIZE;
    if (zero && !zeroed) memset(p, 0, bytes);
    return p;
}

void *vf_alloc(size_t bytes, vf_status *st) { return alloc_impl(bytes, false, st); }
void *vf_calloc(size_t bytes, vf_status *st) { return alloc_impl(bytes, true, st); }

static hdr *header_of(const void *p)
{
    hdr *h = (hdr *)((char *)p - HDR_SIZE);
    VF_ASSERT(h->magic == HDR_MAGIC && "vf_free of a block not from vf_alloc, or freed twice");
    return h;
}

void vf_free(void *p)
{
    if (!p) return;
    hdr *h = header_of(p);
    vf_account_credit(h->acct, (int64_t)h->size);
    h->magic = HDR_FREED;
    if (h->map_len) cache_put(h, h->map_len);
    else free(h);
}

size_t vf_alloc_size(const void *p) { return header_of(p)->size; }
vf_account *vf_alloc_account(const void *p) { return header_of(p)->acct; }
