/* edge_view.c — host views across an ipc edge (edge_view.h): the descriptor codec and the
 * process's table of mapped segments, each counted by the ends that saw it and the tensors
 * over it. */
#include "runtime/edge/edge_view.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define VIEW_MAGIC "VFVW"
#define VIEW_VERSION 1

static void put(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void vf_view_desc_encode(const vf_view_desc *d, unsigned char out[VF_VIEW_DESC_BYTES])
{
    memset(out, 0, VF_VIEW_DESC_BYTES);
    memcpy(out, VIEW_MAGIC, 4);
    put(out + 4, VIEW_VERSION, 2);
    out[6] = (unsigned char)d->dtype;
    out[7] = (unsigned char)d->ndim;
    for (int i = 0; i < VF_MAX_DIMS; i++) put(out + 8 + 8 * i, (uint64_t)(i < d->ndim ? d->shape[i] : 0), 8);
    put(out + 56, d->seg.pid, 4);
    put(out + 60, (uint32_t)d->seg.fd, 4);
    put(out + 64, d->seg.ino, 8);
    put(out + 72, d->seg.size, 8);
    put(out + 80, d->seg.off, 8);
    put(out + 88, d->nbytes, 8);
}

int vf_view_desc_decode(const unsigned char *p, size_t n, const char *what, vf_view_desc *d, vf_status *st)
{
#define BAD(...) return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, __VA_ARGS__)
    memset(d, 0, sizeof *d);
    if (n != VF_VIEW_DESC_BYTES) BAD("view '%s': descriptor of %zu bytes (expected %d)", what, n, VF_VIEW_DESC_BYTES);
    if (memcmp(p, VIEW_MAGIC, 4) != 0) BAD("view '%s': bad descriptor magic", what);
    if (get(p + 4, 2) != VIEW_VERSION)
        return vf_status_set(st, VF_EVERSION, __FILE__, __LINE__, "view '%s': descriptor version %u (this vflow reads %d)",
                             what, (unsigned)get(p + 4, 2), VIEW_VERSION);
    if (p[6] >= VF_DTYPE_COUNT) BAD("view '%s': unknown dtype %u", what, p[6]);
    d->dtype = (vf_dtype)p[6];
    d->ndim = p[7];
    if (d->ndim > VF_MAX_DIMS) BAD("view '%s': %d dims", what, d->ndim);
    uint64_t nb = vf_dtype_size(d->dtype);
    for (int i = 0; i < VF_MAX_DIMS; i++) {
        uint64_t v = get(p + 8 + 8 * i, 8);
        if (i >= d->ndim) {
            if (v) BAD("view '%s': dim %d beyond ndim is %llu", what, i, (unsigned long long)v);
            continue;
        }
        if (v > (uint64_t)INT64_MAX || __builtin_mul_overflow(nb, v, &nb) || nb > (uint64_t)INT64_MAX / 2)
            BAD("view '%s': shape overflows", what);
        d->shape[i] = (int64_t)v;
    }
    d->seg.pid = (uint32_t)get(p + 56, 4);
    d->seg.fd = (int32_t)get(p + 60, 4);
    d->seg.ino = get(p + 64, 8);
    d->seg.size = get(p + 72, 8);
    d->seg.off = get(p + 80, 8);
    d->nbytes = get(p + 88, 8);
    if (d->seg.pid == 0 || d->seg.fd < 0) BAD("view '%s': no segment (pid %u, fd %d)", what, d->seg.pid, d->seg.fd);
    if (d->nbytes != nb)
        BAD("view '%s': %llu bytes for a shape of %llu", what, (unsigned long long)d->nbytes, (unsigned long long)nb);
    if (d->seg.off > d->seg.size || d->nbytes > d->seg.size - d->seg.off)
        BAD("view '%s': bytes [%llu, +%llu) outside its %llu-byte segment", what, (unsigned long long)d->seg.off,
            (unsigned long long)d->nbytes, (unsigned long long)d->seg.size);
    return 0;
#undef BAD
}

/* ------------------------------------------------------------------ mappings */

typedef struct vmap {
    uint32_t pid;
    int32_t fd;
    uint64_t ino;
    char *base;
    size_t size;
    int refs; /* ends that hold it + tensors over it */
} vmap;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static vmap **g_map;
static int g_n, g_cap;

struct vf_view_rx {
    vmap **held; /* the mappings this end saw, one reference each */
    int n, cap;
};

static vmap *find(uint32_t pid, int32_t fd, uint64_t ino)
{
    for (int i = 0; i < g_n; i++)
        if (g_map[i]->pid == pid && g_map[i]->fd == fd && g_map[i]->ino == ino) return g_map[i];
    return NULL;
}

/* Drops one reference (g_mu held); unmaps at the last. */
static void drop(vmap *m)
{
    if (--m->refs > 0) return;
    for (int i = 0; i < g_n; i++)
        if (g_map[i] == m) {
            g_map[i] = g_map[--g_n];
            break;
        }
    munmap(m->base, m->size);
    free(m);
}

/* Opens and maps the segment d names (g_mu held): checked to be a vflow memfd of that
 * inode, at least as large as d says. */
static int map_new(const char *edge, const vf_view_desc *d, vmap **out, vf_status *st)
{
    char path[64], link[128];
    snprintf(path, sizeof path, "/proc/%u/fd/%d", d->seg.pid, d->seg.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "edge %s: cannot open the lender's segment %s: %s",
                             edge, path, strerror(errno));
    int rc = 0;
    struct stat sb;
    ssize_t ln = readlink(path, link, sizeof link - 1);
    link[ln > 0 ? ln : 0] = 0;
    static const char want[] = "/memfd:" VF_SHARED_MEMFD_NAME;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_ino != d->seg.ino || strncmp(link, want, sizeof want - 1) != 0 ||
        (uint64_t)sb.st_size < d->seg.size) {
        rc = vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__,
                           "edge %s: %s is not the segment the view names (%s, inode %llu, %lld bytes; expected "
                           "inode %llu, %llu bytes)",
                           edge, path, link, (unsigned long long)sb.st_ino, (long long)sb.st_size,
                           (unsigned long long)d->seg.ino, (unsigned long long)d->seg.size);
        close(fd);
        return rc;
    }
    void *p = mmap(NULL, (size_t)d->seg.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd); /* the mapping keeps the segment */
    vmap *m = p != MAP_FAILED ? calloc(1, sizeof *m) : NULL;
    if (m && g_n == g_cap) {
        int cap = g_cap ? 2 * g_cap : 8;
        vmap **nm = realloc(g_map, (size_t)cap * sizeof *nm);
        if (nm) g_map = nm, g_cap = cap;
        else free(m), m = NULL;
    }
    if (!m) {
        if (p != MAP_FAILED) munmap(p, (size_t)d->seg.size);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: cannot map the lender's segment %s: %s",
                             edge, path, p == MAP_FAILED ? strerror(err) : "out of memory");
    }
    *m = (vmap){d->seg.pid, d->seg.fd, d->seg.ino, p, (size_t)d->seg.size, 0};
    g_map[g_n++] = m;
    *out = m;
    return 0;
}

static void tensor_release(void *data, void *hint)
{
    (void)data;
    pthread_mutex_lock(&g_mu);
    drop(hint);
    pthread_mutex_unlock(&g_mu);
}

int vf_view_rx_tensor(vf_view_rx **rxp, const char *edge, const vf_view_desc *d, vf_tensor **out, vf_status *st)
{
    int rc = 0;
    *out = NULL;
    if (!*rxp && !(*rxp = calloc(1, sizeof **rxp)))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", edge);
    vf_view_rx *rx = *rxp;
    pthread_mutex_lock(&g_mu);
    vmap *m = find(d->seg.pid, d->seg.fd, d->seg.ino);
    if (m && m->size < d->seg.size)
        rc = vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "edge %s: view beyond the %zu bytes of its segment",
                           edge, m->size);
    if (!rc && !m) rc = map_new(edge, d, &m, st);
    bool held = false;
    for (int i = 0; !rc && i < rx->n && !held; i++) held = rx->held[i] == m;
    if (!rc && !held) {
        if (rx->n == rx->cap) {
            int cap = rx->cap ? 2 * rx->cap : 4;
            vmap **nh = realloc(rx->held, (size_t)cap * sizeof *nh);
            if (nh) rx->held = nh, rx->cap = cap;
        }
        if (rx->n < rx->cap) {
            rx->held[rx->n++] = m;
            m->refs++;
        } else {
            rc = vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", edge);
            if (m->refs == 0) { /* mapped just now for this view: unmap again */
                m->refs = 1;
                drop(m);
            }
        }
    }
    if (!rc) m->refs++; /* the tensor's */
    pthread_mutex_unlock(&g_mu);
    if (rc) return rc;
    vf_tensor *t = vf_tensor_view_wrap(d->dtype, d->ndim, d->shape, (vf_device){VF_DEV_CPU, 0}, m->base + d->seg.off,
                                       tensor_release, m, st);
    if (!t) {
        tensor_release(NULL, m);
        return st && st->code ? st->code : VF_ENOMEM;
    }
    *out = t;
    return 0;
}

void vf_view_rx_free(vf_view_rx *rx)
{
    if (!rx) return;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < rx->n; i++) drop(rx->held[i]);
    pthread_mutex_unlock(&g_mu);
    free(rx->held);
    free(rx);
}

int vf_view_mapped(void)
{
    pthread_mutex_lock(&g_mu);
    int n = g_n;
    pthread_mutex_unlock(&g_mu);
    return n;
}
