/* edge_shm.c — large tensors of an ipc edge through a shared-memory segment of slots
 * (edge_shm.h).
 *
 * Segment layout: a header page (magic, slot count, slot size, then one atomic u32
 * reference count per slot), then the slots. Both processes map it read-write: the
 * receiver drops counts, the sender claims slots whose count is 0 and writes into them.
 * A slot's pages are reserved (posix_fallocate) before the first copy that needs them,
 * as far as that item reaches, so the segment takes what its items use rather than
 * capacity x the declared largest item, and a full /dev/shm is an error there (the item
 * goes as plain frames) and never a SIGBUS while copying.
 */
#include "runtime/edge/edge_shm.h"
#include "runtime/edge/chan_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define SHM_MAGIC "VFSHMSEG"
#define DESC_MAGIC "VFSHMDSC"
#define HDR_BYTES ((size_t)4096)
#define MAX_SLOTS 64  /* the header page holds their counts */
#define ALIGN 64      /* each frame's offset in its slot */
#define NAME_MAX_LEN 48
/* Segments above this share of /dev/shm's free space are not made. */
#define SHM_FREE_SHARE 4

typedef struct seg_hdr {
    char magic[8];
    uint32_t nslots;
    uint32_t pad;
    uint64_t slot_bytes;
    uint64_t total;
    uint8_t reserved[32];
    _Atomic uint32_t refs[MAX_SLOTS]; /* at offset 64 */
} seg_hdr;

typedef struct desc_wire {
    char magic[8];
    uint32_t slot, pad;
    uint64_t off, len, total;
    char name[NAME_MAX_LEN];
    uint8_t reserved[VF_SHM_DESC_SIZE - 8 - 8 - 24 - NAME_MAX_LEN];
} desc_wire;
_Static_assert(sizeof(desc_wire) == VF_SHM_DESC_SIZE, "descriptor size");
_Static_assert(sizeof(seg_hdr) <= HDR_BYTES, "header page");

struct vf_shm_tx {
    char name[NAME_MAX_LEN];
    uint32_t nslots, next;
    size_t slot_bytes, total;
    seg_hdr *base; /* NULL until the first item that fits */
    int fd;        /* the object, for reserving slot pages; -1 before it exists */
    size_t reserved[MAX_SLOTS]; /* bytes of each slot reserved so far */
    bool failed;   /* creation failed once: plain frames from now on */
    int64_t placed, fallback;
};

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

int vf_shm_tx_new(const vf_edge_desc *d, vf_shm_tx **out, vf_status *st)
{
    *out = NULL;
    const char *env = getenv("VFLOW_EDGE_SHM");
    if (env && !strcmp(env, "0")) return 0;
    if (d->transport != VF_TR_IPC || d->max_item_bytes <= 0) return 0;
    /* items too small to leave the record as frames never need a slot */
    if ((size_t)d->max_item_bytes < VF_EDGE_FRAME_MIN) return 0;
    vf_shm_tx *tx = calloc(1, sizeof *tx);
    if (!tx) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", d->name);
    static _Atomic uint32_t counter;
    snprintf(tx->name, sizeof tx->name, "/vflow-%ld-e%d-%u", (long)getpid(), d->id,
             (unsigned)atomic_fetch_add(&counter, 1));
    /* the items in flight, plus the one the consumer works on */
    tx->nslots = (uint32_t)(d->capacity + 1 < MAX_SLOTS ? d->capacity + 1 : MAX_SLOTS);
    tx->slot_bytes = round_up((size_t)d->max_item_bytes + (size_t)ALIGN * VF_CODEC_MAX_COUNT, 4096);
    tx->total = HDR_BYTES + tx->slot_bytes * tx->nslots;
    tx->fd = -1;
    *out = tx;
    return 0;
}

/* Makes and maps the segment; false when it cannot be had (then never again). */
static bool tx_create(vf_shm_tx *tx)
{
    struct statvfs sv;
    if (statvfs("/dev/shm", &sv) != 0 || (uint64_t)sv.f_bavail * sv.f_frsize / SHM_FREE_SHARE < tx->total)
        return false;
    int fd = shm_open(tx->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return false;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)tx->total) == 0 && posix_fallocate(fd, 0, (off_t)HDR_BYTES) == 0)
        p = mmap(NULL, tx->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        shm_unlink(tx->name);
        return false;
    }
    tx->fd = fd;
    seg_hdr *h = p;
    memcpy(h->magic, SHM_MAGIC, 8);
    h->nslots = tx->nslots;
    h->slot_bytes = tx->slot_bytes;
    h->total = tx->total;
    for (uint32_t k = 0; k < tx->nslots; k++) atomic_init(&h->refs[k], 0);
    tx->base = h;
    return true;
}

int vf_shm_tx_place(vf_shm_tx *tx, vf_tensor *const *frames, int n, unsigned char (*desc)[VF_SHM_DESC_SIZE],
                    bool *placed, vf_status *st)
{
    (void)st;
    *placed = false;
    size_t need = 0;
    for (int k = 0; k < n; k++) need = round_up(need, ALIGN) + vf_tensor_nbytes(frames[k]);
    if (n <= 0 || need > tx->slot_bytes || tx->failed) goto plain;
    if (!tx->base && !tx_create(tx)) {
        tx->failed = true;
        goto plain;
    }
    uint32_t slot = UINT32_MAX;
    for (uint32_t i = 0; i < tx->nslots; i++) {
        uint32_t k = (tx->next + i) % tx->nslots;
        uint32_t zero = 0;
        /* only the receiver drops counts and only this end raises them: a 0 stays 0 */
        if (atomic_compare_exchange_strong_explicit(&tx->base->refs[k], &zero, (uint32_t)n, memory_order_acquire,
                                                    memory_order_relaxed)) {
            slot = k;
            break;
        }
    }
    if (slot == UINT32_MAX) goto plain;
    if (need > tx->reserved[slot]) {
        size_t want = round_up(need, 4096);
        if (posix_fallocate(tx->fd, (off_t)(HDR_BYTES + (size_t)slot * tx->slot_bytes), (off_t)want) != 0) {
            atomic_store_explicit(&tx->base->refs[slot], 0, memory_order_relaxed); /* unclaimed */
            goto plain;
        }
        tx->reserved[slot] = want;
    }
    tx->next = (slot + 1) % tx->nslots;
    unsigned char *dst = (unsigned char *)tx->base + HDR_BYTES + (size_t)slot * tx->slot_bytes;
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        off = round_up(off, ALIGN);
        size_t len = vf_tensor_nbytes(frames[k]);
        memcpy(dst + off, frames[k]->data, len);
        desc_wire w;
        memset(&w, 0, sizeof w);
        memcpy(w.magic, DESC_MAGIC, 8);
        w.slot = slot;
        w.off = off;
        w.len = len;
        w.total = tx->total;
        snprintf(w.name, sizeof w.name, "%s", tx->name);
        memcpy(desc[k], &w, sizeof w);
        off += len;
    }
    /* the copies are visible to the receiver before it can see a descriptor: the
       socket's own synchronisation orders them, and this fence says so */
    atomic_thread_fence(memory_order_release);
    tx->placed++;
    *placed = true;
    return 0;
plain:
    tx->fallback++;
    return 0;
}

void vf_shm_tx_counts(const vf_shm_tx *tx, int64_t *placed, int64_t *fallback)
{
    *placed = tx ? tx->placed : 0;
    *fallback = tx ? tx->fallback : 0;
}

int64_t vf_shm_tx_bytes(const vf_shm_tx *tx)
{
    if (!tx || !tx->base) return 0;
    size_t n = HDR_BYTES;
    for (uint32_t k = 0; k < tx->nslots; k++) n += tx->reserved[k];
    return (int64_t)n;
}

void vf_shm_tx_free(vf_shm_tx *tx)
{
    if (!tx) return;
    if (tx->base) {
        munmap(tx->base, tx->total);
        close(tx->fd);
        shm_unlink(tx->name); /* ENOENT once the receiver unlinked it: fine */
    }
    free(tx);
}

void vf_shm_sweep(long pid)
{
    char prefix[64], name[320];
    snprintf(prefix, sizeof prefix, "vflow-%ld-", pid);
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        snprintf(name, sizeof name, "/%s", e->d_name);
        shm_unlink(name);
    }
    closedir(d);
}

bool vf_shm_is_desc(const void *data, size_t len)
{
    return len == VF_SHM_DESC_SIZE && memcmp(data, DESC_MAGIC, 8) == 0;
}

/* ------------------------------------------------------------------ receiving side */

typedef struct shm_map {
    char name[NAME_MAX_LEN];
    seg_hdr *base;
    size_t total;
    _Atomic int refs; /* the end's, plus one per live frame */
} shm_map;

#define RX_MAPS 8 /* senders per receiving end: one (a ZeroMQ end has one peer) */

struct vf_shm_rx {
    shm_map *maps[RX_MAPS];
    int n;
};

typedef struct shm_frame {
    shm_map *m;
    uint32_t slot;
} shm_frame;

static void map_unref(shm_map *m)
{
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
    munmap(m->base, m->total);
    free(m);
}

static void frame_release(void *data, void *hint)
{
    (void)data;
    shm_frame *f = hint;
    atomic_fetch_sub_explicit(&f->m->base->refs[f->slot], 1, memory_order_release);
    map_unref(f->m);
    free(f);
}

static int map_open(const char *edge, const desc_wire *w, shm_map **out, vf_status *st)
{
    int fd = shm_open(w->name, O_RDWR, 0);
    if (fd < 0)
        return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "edge %s: shared memory %s: %s", edge, w->name,
                             strerror(errno));
    shm_unlink(w->name); /* mapped from here on: the name is not needed any more */
    struct stat sb;
    void *p = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == w->total && w->total > HDR_BYTES)
        p = mmap(NULL, (size_t)w->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "edge %s: shared memory %s: cannot map %llu bytes",
                             edge, w->name, (unsigned long long)w->total);
    seg_hdr *h = p;
    if (memcmp(h->magic, SHM_MAGIC, 8) != 0 || h->nslots == 0 || h->nslots > MAX_SLOTS || h->total != w->total ||
        h->slot_bytes == 0 || HDR_BYTES + h->slot_bytes * h->nslots > h->total) {
        munmap(p, (size_t)w->total);
        return vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "edge %s: shared memory %s: not an edge segment",
                             edge, w->name);
    }
    shm_map *m = calloc(1, sizeof *m);
    if (!m) {
        munmap(p, (size_t)w->total);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", edge);
    }
    memcpy(m->name, w->name, sizeof m->name);
    m->base = h;
    m->total = (size_t)w->total;
    atomic_init(&m->refs, 1);
    *out = m;
    return 0;
}

int vf_shm_rx_frame(vf_shm_rx **rxp, const char *edge, const void *desc, vf_frame *out, vf_status *st)
{
    int rc = 0;
    desc_wire w;
    memcpy(&w, desc, sizeof w);
    w.name[NAME_MAX_LEN - 1] = 0;
    if (!*rxp && !(*rxp = calloc(1, sizeof **rxp)))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "edge %s: out of memory", edge);
    vf_shm_rx *rx = *rxp;
    shm_map *m = NULL;
    for (int i = 0; i < rx->n && !m; i++)
        if (!strcmp(rx->maps[i]->name, w.name)) m = rx->maps[i];
    if (!m) {
        if (rx->n == RX_MAPS)
            VF_FAIL(st, VF_ECORRUPT, "edge %s: shared memory from more than %d segments", edge, RX_MAPS);
        VF_TRY(map_open(edge, &w, &m, st));
        rx->maps[rx->n++] = m;
    }
    seg_hdr *h = m->base;
    if (w.slot >= h->nslots || w.off > h->slot_bytes || w.len > h->slot_bytes - w.off)
        VF_FAIL(st, VF_ECORRUPT, "edge %s: shared memory descriptor outside its segment (slot %u, %llu+%llu)", edge,
                w.slot, (unsigned long long)w.off, (unsigned long long)w.len);
    shm_frame *f = malloc(sizeof *f);
    if (!f) VF_FAIL(st, VF_ENOMEM, "edge %s: out of memory", edge);
    f->m = m;
    f->slot = w.slot;
    atomic_fetch_add(&m->refs, 1);
    atomic_thread_fence(memory_order_acquire);
    *out = (vf_frame){(unsigned char *)h + HDR_BYTES + (size_t)w.slot * h->slot_bytes + w.off, (size_t)w.len,
                      frame_release, f};
fail:
    return rc;
}

void vf_shm_rx_free(vf_shm_rx *rx)
{
    if (!rx) return;
    for (int i = 0; i < rx->n; i++) map_unref(rx->maps[i]);
    free(rx);
}
