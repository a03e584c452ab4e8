/* pool_core.h — the bookkeeping of the device memory pool, without CUDA (header-only).
 *
 * pool.c instantiates it with cudaMalloc/cudaFree; tests/unit/test_cuda_xfer_state.c
 * drives the same code with malloc/free on a machine without a GPU. Not thread-safe:
 * the caller holds its lock.
 *
 * Blocks come from the driver one by one (each is its own allocation: an exported block
 * then maps exactly, with no offset games) and are sized in classes: multiples of 512
 * bytes below 1 MiB, of 2 MiB above (the driver's own granularity for big blocks). A
 * freed block stays cached under its class and serves the next request of the same
 * class; model buffers are allocated once and pooled items recur with the same sizes,
 * so exact classes reuse well without splitting blocks.
 *
 * Accounting: a live block is charged to the account of the stage that allocated it;
 * a cached block to the pool's cache account, so the device bytes a process holds are
 * always the sum over its accounts. An allocation that would take an account over its
 * limit fails before the driver is asked. When the driver has no memory left, the
 * cached blocks that were never exported go back to it and the request is retried
 * once. Exported blocks (CUDA IPC) are never given back: another process may still have
 * them mapped (REFERENCE: freeing exported memory before the importer closed it is
 * undefined).
 */
#ifndef VF_POOL_CORE_H
#define VF_POOL_CORE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/alloc.h"
#include "runtime/vflow.h"

#define VF_POOL_SMALL_LIMIT ((size_t)1 << 20)
#define VF_POOL_SMALL_ROUND ((size_t)512)
#define VF_POOL_BIG_ROUND ((size_t)2 << 20)
#define VF_POOL_HANDLE_BYTES 64

typedef struct vf_pool_blk {
    uintptr_t base;
    size_t size;               /* class size (what the driver gave) */
    vf_account *acct;          /* live: charged account (NULL in tests); cached: unused */
    uint64_t id;               /* process-unique, never reused */
    bool live;
    bool exported;             /* an IPC handle was handed out: never freed */
    bool has_handle;
    unsigned char handle[VF_POOL_HANDLE_BYTES];
} vf_pool_blk;

typedef struct vf_pool_core {
    /* the driver: 0 and *out on success */
    int (*raw_alloc)(void *u, size_t bytes, void **out);
    void (*raw_free)(void *u, void *p);
    void *u;
    vf_account *cache_acct;    /* charged with cached bytes (NULL: none) */
    char name[16];             /* "cuda:N" for messages */
    vf_pool_blk *b;            /* sorted by base */
    int n, cap;
    size_t reserved, cached;
    uint64_t next_id;
} vf_pool_core;

static inline size_t vf_pool_class(size_t bytes)
{
    if (bytes == 0) bytes = 1;
    if (bytes < VF_POOL_SMALL_LIMIT) return (bytes + VF_POOL_SMALL_ROUND - 1) / VF_POOL_SMALL_ROUND * VF_POOL_SMALL_ROUND;
    return (bytes + VF_POOL_BIG_ROUND - 1) / VF_POOL_BIG_ROUND * VF_POOL_BIG_ROUND;
}

/* index of the first block with base >= p */
static inline int vf_pool_lower(const vf_pool_core *pc, uintptr_t p)
{
    int lo = 0, hi = pc->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (pc->b[mid].base < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Block whose [base, base+size) holds p, or -1. */
static inline int vf_pool_find(const vf_pool_core *pc, const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int i = vf_pool_lower(pc, a + 1) - 1; /* last block with base <= a */
    if (i >= 0 && a < pc->b[i].base + pc->b[i].size) return i;
    return -1;
}

static inline int vf_pool_insert(vf_pool_core *pc, uintptr_t base, size_t size, vf_status *st)
{
    if (pc->n == pc->cap) {
        int cap = pc->cap ? pc->cap * 2 : 64;
        vf_pool_blk *nb = (vf_pool_blk *)realloc(pc->b, (size_t)cap * sizeof *nb);
        if (!nb) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s pool: out of host memory", pc->name);
        pc->b = nb;
        pc->cap = cap;
    }
    int i = vf_pool_lower(pc, base);
    memmove(pc->b + i + 1, pc->b + i, (size_t)(pc->n - i) * sizeof *pc->b);
    memset(&pc->b[i], 0, sizeof pc->b[i]);
    pc->b[i].base = base;
    pc->b[i].size = size;
    pc->b[i].id = ++pc->next_id;
    pc->n++;
    return i;
}

/* Gives every cached, never-exported block back to the driver. */
static inline void vf_pool_trim(vf_pool_core *pc)
{
    int o = 0;
    for (int i = 0; i < pc->n; i++) {
        vf_pool_blk *b = &pc->b[i];
        if (!b->live && !b->exported) {
            pc->raw_free(pc->u, (void *)b->base);
            pc->reserved -= b->size;
            pc->cached -= b->size;
            if (pc->cache_acct) vf_account_credit(pc->cache_acct, (int64_t)b->size);
            continue;
        }
        pc->b[o++] = *b;
    }
    pc->n = o;
}

static inline void *vf_pool_alloc(vf_pool_core *pc, size_t bytes, vf_account *acct, vf_status *st)
{
    const size_t sz = vf_pool_class(bytes);
    if (acct && vf_account_charge(acct, (int64_t)sz, st) < 0) {
        vf_status_prefix(st, "%s: allocating %zu bytes of device memory", pc->name, bytes);
        return NULL;
    }
    for (int i = 0; i < pc->n; i++) {
        vf_pool_blk *b = &pc->b[i];
        if (b->live || b->size != sz) continue;
        b->live = true;
        b->acct = acct;
        pc->cached -= sz;
        if (pc->cache_acct) vf_account_credit(pc->cache_acct, (int64_t)sz);
        return (void *)b->base;
    }
    void *p = NULL;
    if (pc->raw_alloc(pc->u, sz, &p) != 0) {
        vf_pool_trim(pc); /* the cache may hold what the driver lacks */
        if (pc->raw_alloc(pc->u, sz, &p) != 0) {
            if (acct) vf_account_credit(acct, (int64_t)sz);
            vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__,
                          "%s: out of device memory allocating %zu bytes for account \"%s\" (this process "
                          "holds %zu bytes of the device, %zu of them cached)",
                          pc->name, sz, acct ? vf_account_name(acct) : "-", pc->reserved, pc->cached);
            return NULL;
        }
    }
    int i = vf_pool_insert(pc, (uintptr_t)p, sz, st);
    if (i < 0) {
        pc->raw_free(pc->u, p);
        if (acct) vf_account_credit(acct, (int64_t)sz);
        return NULL;
    }
    pc->b[i].live = true;
    pc->b[i].acct = acct;
    pc->reserved += sz;
    return p;
}

/* 0, or VF_EINVAL when p is not a live block of this pool (a double or foreign free). */
static inline int vf_pool_free(vf_pool_core *pc, void *p)
{
    int i = vf_pool_lower(pc, (uintptr_t)p);
    if (i >= pc->n || pc->b[i].base != (uintptr_t)p || !pc->b[i].live) return VF_EINVAL;
    vf_pool_blk *b = &pc->b[i];
    if (b->acct) vf_account_credit(b->acct, (int64_t)b->size);
    b->acct = NULL;
    b->live = false;
    pc->cached += b->size;
    /* the cache account has no limit: charging it cannot fail */
    if (pc->cache_acct) vf_account_charge(pc->cache_acct, (int64_t)b->size, NULL);
    return 0;
}

static inline void vf_pool_fini(vf_pool_core *pc)
{
    for (int i = 0; i < pc->n; i++) pc->raw_free(pc->u, (void *)pc->b[i].base);
    free(pc->b);
    pc->b = NULL;
    pc->n = pc->cap = 0;
    pc->reserved = pc->cached = 0;
}

#endif /* VF_POOL_CORE_H */
