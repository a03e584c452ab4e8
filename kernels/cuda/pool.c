/* pool.c — the per-device memory pool of the CUDA backend (cudaMalloc-based, no managed
 * memory), charged to the accounts of alloc.h. The bookkeeping is pool_core.h; this
 * file binds it to the driver, one pool per device, and maps the calling thread's
 * (host) account to its device twin "<account>@cuda:N", so that `vflow plan`'s declared
 * bytes per stage and device can be compared with what the stage really holds.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/pool_core.h"

typedef struct dev_pool {
    pthread_mutex_t mu;
    bool init;
    int dev;
    vf_pool_core core;
    /* host account -> device account (a stage allocates again and again) */
    struct {
        vf_account *host, *dev;
    } map[64];
    int nmap;
} dev_pool;

static dev_pool g_pools[VF_CUDA_MAX_DEVICES];
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;

static int raw_alloc(void *u, size_t bytes, void **out)
{
    dev_pool *p = u;
    int cur = -1;
    cudaGetDevice(&cur);
    if (cur != p->dev) cudaSetDevice(p->dev);
    cudaError_t e = cudaMalloc(out, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an OOM is not sticky: clear it for the next call */
        return -1;
    }
    return 0;
}

static void raw_free(void *u, void *ptr)
{
    dev_pool *p = u;
    int cur = -1;
    cudaGetDevice(&cur);
    if (cur != p->dev) cudaSetDevice(p->dev);
    cudaFree(ptr); /* synchronises the device: in-flight users of the block finish first */
}

static dev_pool *pool_get(int dev)
{
    if (dev < 0 || dev >= VF_CUDA_MAX_DEVICES) return NULL;
    dev_pool *p = &g_pools[dev];
    pthread_mutex_lock(&g_init_mu);
    if (!p->init) {
        pthread_mutex_init(&p->mu, NULL);
        p->dev = dev;
        p->core.raw_alloc = raw_alloc;
        p->core.raw_free = raw_free;
        p->core.u = p;
        snprintf(p->core.name, sizeof p->core.name, "cuda:%d", dev);
        char name[64];
        snprintf(name, sizeof name, "pool cache@cuda:%d", dev);
        p->core.cache_acct = vf_account_new_dev(name, (vf_device){VF_DEV_CUDA, dev});
        p->init = true;
    }
    pthread_mutex_unlock(&g_init_mu);
    return p;
}

/* The device twin of the calling thread's account (lock held). */
static vf_account *dev_account(dev_pool *p)
{
    vf_account *h = vf_account_current();
    for (int i = 0; i < p->nmap; i++)
        if (p->map[i].host == h) return p->map[i].dev;
    char name[160];
    snprintf(name, sizeof name, "%s@cuda:%d", vf_account_name(h), p->dev);
    vf_account *d = vf_account_new_dev(name, (vf_device){VF_DEV_CUDA, p->dev});
    if (d && p->nmap < (int)(sizeof p->map / sizeof p->map[0])) {
        p->map[p->nmap].host = h;
        p->map[p->nmap].dev = d;
        p->nmap++;
    }
    return d;
}

void *vf_cuda_pool_alloc(int dev, size_t bytes, vf_status *st)
{
    dev_pool *p = pool_get(dev);
    if (!p) {
        vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "cuda:%d: no such device pool", dev);
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    void *r = vf_pool_alloc(&p->core, bytes, dev_account(p), st);
    pthread_mutex_unlock(&p->mu);
    return r;
}

void vf_cuda_pool_free(int dev, void *ptr)
{
    if (!ptr) return;
    dev_pool *p = pool_get(dev);
    VF_ASSERT(p != NULL);
    pthread_mutex_lock(&p->mu);
    int rc = vf_pool_free(&p->core, ptr);
    pthread_mutex_unlock(&p->mu);
    if (rc < 0) {
        fprintf(stderr, "vflow: cuda:%d: free of %p, which is not a live block of the device pool\n", dev, ptr);
        VF_ASSERT(!"double or foreign free of device memory");
    }
}

void vf_cuda_pool_trim(int dev)
{
    dev_pool *p = pool_get(dev);
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    vf_pool_trim(&p->core);
    pthread_mutex_unlock(&p->mu);
}

int vf_cuda_pool_lookup(int dev, const void *ptr, void **base, size_t *size, uint64_t *id,
                        cudaIpcMemHandle_t *handle, int export_it, vf_status *st)
{
    int rc = 0;
    dev_pool *p = pool_get(dev);
    if (!p) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "cuda:%d: no such device pool", dev);
    pthread_mutex_lock(&p->mu);
    int i = vf_pool_find(&p->core, ptr);
    if (i < 0) {
        rc = VF_ENOTFOUND; /* not an error to report: the caller stages a copy instead */
        goto out;
    }
    vf_pool_blk *b = &p->core.b[i];
    if (base) *base = (void *)b->base;
    if (size) *size = b->size;
    if (id) *id = b->id;
    if (export_it) {
        if (!b->has_handle) {
            cudaIpcMemHandle_t h;
            cudaError_t e = cudaIpcGetMemHandle(&h, (void *)b->base);
            if (e != cudaSuccess) {
                rc = vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "cuda:%d: cudaIpcGetMemHandle: %s", dev,
                                   cudaGetErrorString(e));
                goto out;
            }
            memcpy(b->handle, &h, sizeof h);
            b->has_handle = true;
        }
        b->exported = true;
        if (handle) memcpy(handle, b->handle, sizeof *handle);
    }
out:
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int vf_cuda_pool_by_id(int dev, uint64_t id, void **base)
{
    dev_pool *p = pool_get(dev);
    int rc = VF_ENOTFOUND;
    if (!p) return rc;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->core.n; i++)
        if (p->core.b[i].id == id) {
            *base = (void *)p->core.b[i].base;
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

size_t vf_cuda_pool_reserved(int dev)
{
    dev_pool *p = pool_get(dev);
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    size_t r = p->core.reserved;
    pthread_mutex_unlock(&p->mu);
    return r;
}

size_t vf_cuda_pool_cached(int dev)
{
    dev_pool *p = pool_get(dev);
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    size_t r = p->core.cached;
    pthread_mutex_unlock(&p->mu);
    return r;
}
