/* shared.c — host memory another process of the node can map (vf_alloc_shared,
 * vflow.h "lending memory") and the table of this process's segments the view lane looks
 * views up in (shared.h).
 *
 * Each allocation is a segment of its own: a memfd (no name in /dev/shm, so neither its
 * size limit nor a sweep after a crash concerns it: the memory goes when the last
 * process that maps or holds it does), its pages reserved with fallocate before it is
 * mapped — a machine without that much memory fails here, with a message, and never
 * faults later in the middle of a step — and mapped shared. The memfd stays open for the
 * segment's life: a consumer opens it through /proc/<pid>/fd/<fd>.
 */
#include "runtime/core/shared.h"
#include "runtime/core/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct seg {
    char *base;
    size_t bytes, map_len;
    int fd;
    uint64_t ino;
    vf_account *acct;
} seg;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static seg *g_seg;
static int g_n, g_cap;

static int seg_add(const seg *s)
{
    if (g_n == g_cap) {
        int cap = g_cap ? 2 * g_cap : 16;
        seg *ns = realloc(g_seg, (size_t)cap * sizeof *ns);
        if (!ns) return VF_ENOMEM;
        g_seg = ns, g_cap = cap;
    }
    g_seg[g_n++] = *s;
    return 0;
}

void *vf_alloc_shared(size_t bytes, vf_status *st)
{
    vf_account *a = vf_account_current();
    size_t len = ((bytes ? bytes : 1) + 4095) & ~(size_t)4095;
    if (vf_account_charge(a, (int64_t)bytes, st) < 0) return NULL;
    int fd = memfd_create(VF_SHARED_MEMFD_NAME, MFD_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0 && ftruncate(fd, (off_t)len) != 0) err = errno;
    /* fallocate returns the error itself, without setting errno */
    if (fd >= 0 && !err) err = posix_fallocate(fd, 0, (off_t)len);
    struct stat sb;
    if (fd >= 0 && !err && fstat(fd, &sb) != 0) err = errno;
    char *p = fd >= 0 && !err ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED && !err) err = errno;
    if (!err) {
        seg s = {p, bytes, len, fd, (uint64_t)sb.st_ino, a};
        pthread_mutex_lock(&g_mu);
        err = seg_add(&s) < 0 ? ENOMEM : 0;
        pthread_mutex_unlock(&g_mu);
        if (!err) return p;
    }
    if (p != MAP_FAILED) munmap(p, len);
    if (fd >= 0) close(fd);
    vf_account_credit(a, (int64_t)bytes);
    vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__,
                  "cannot reserve %zu bytes of shared memory (account '%s'): %s", bytes, vf_account_name(a),
                  strerror(err));
    return NULL;
}

void vf_free_shared(void *p)
{
    if (!p) return;
    seg s = {0};
    bool found = false;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n && !found; i++) {
        if (g_seg[i].base != p) continue;
        s = g_seg[i];
        g_seg[i] = g_seg[--g_n];
        found = true;
    }
    pthread_mutex_unlock(&g_mu);
    VF_ASSERT(found && "vf_free_shared of memory not from vf_alloc_shared, or freed twice");
    munmap(s.base, s.map_len);
    close(s.fd);
    vf_account_credit(s.acct, (int64_t)s.bytes);
}

int vf_shared_find(const void *p, size_t n, vf_seg_ref *ref)
{
    int rc = VF_ENOTFOUND;
    const char *c = p;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++) {
        const seg *s = &g_seg[i];
        if (c < s->base || c > s->base + s->bytes || n > (size_t)(s->base + s->bytes - c)) continue;
        *ref = (vf_seg_ref){(uint32_t)getpid(), s->fd, s->ino, s->map_len, (uint64_t)(c - s->base)};
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int64_t vf_shared_bytes(void)
{
    int64_t n = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++) n += (int64_t)g_seg[i].bytes;
    pthread_mutex_unlock(&g_mu);
    return n;
}
