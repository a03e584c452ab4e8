/* alloc.h — memory accounts behind vf_alloc (vflow.h).
 *
 * Every vf_alloc'd block is charged to an ACCOUNT: the calling thread's current one
 * (the stage running on it; the global "runtime" account otherwise). An account keeps
 * live and peak bytes (atomics: a block freed on any thread credits the account that
 * paid for it) and an optional limit: an allocation that would take it over fails with
 * VF_ENOMEM naming the account. Metrics walk all accounts with vf_account_each to report
 * the measured peak per stage next to what the stage declared (docs/PLANNING.md).
 *
 * Device pools (the CUDA backend) reuse the type: an account has a device, and
 * vf_account_charge / vf_account_credit book bytes allocated elsewhere.
 *
 * Accounts live until the process exits (blocks may outlive the stage that made them),
 * so pointers to them never dangle.
 */
#ifndef VF_ALLOC_H
#define VF_ALLOC_H

#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vf_account vf_account;

/* The account named `name` (copied) on the host: created on first use, the existing one
 * afterwards (a restarted stage keeps its account). Never freed. NULL only when out of
 * memory. */
vf_account *vf_account_new(const char *name);
/* Same for a device pool account (name should say the device, e.g. "dit0@cuda:0"). */
vf_account *vf_account_new_dev(const char *name, vf_device dev);
/* The global "runtime" account (the default current account). */
vf_account *vf_account_runtime(void);

/* Makes a the calling thread's current account (NULL = runtime); returns the previous. */
vf_account *vf_account_set_current(vf_account *a);
vf_account *vf_account_current(void);

/* Limit in bytes (0 = none). Allocations that would exceed it fail; existing ones stay. */
void vf_account_set_limit(vf_account *a, int64_t bytes);

const char *vf_account_name(const vf_account *a);
vf_device vf_account_device(const vf_account *a);
int64_t vf_account_live(const vf_account *a);
int64_t vf_account_peak(const vf_account *a);
int64_t vf_account_limit(const vf_account *a);
int64_t vf_account_allocs(const vf_account *a); /* number of successful charges */
/* Restarts peak tracking from the current live bytes (e.g. per training phase). */
void vf_account_reset_peak(vf_account *a);

/* Books `bytes` on a (for memory allocated outside vf_alloc: device pools). 0, or
 * VF_ENOMEM with st naming the account and its limit. */
int vf_account_charge(vf_account *a, int64_t bytes, vf_status *st);
void vf_account_credit(vf_account *a, int64_t bytes);

/* Calls fn for every account, in creation order (the runtime account first). */
void vf_account_each(void (*fn)(vf_account *a, void *user), void *user);

/* Big blocks (>= VF_ALLOC_BIG bytes) are mapped directly and, once freed, parked for
 * reuse in a per-process cache of at most vf_alloc_cache_limit() bytes (default
 * VF_ALLOC_CACHE_DEFAULT): resident memory that no account holds, to add to a worker's
 * plan. 0 disables the cache (every big free unmaps). */
#define VF_ALLOC_BIG ((size_t)1 << 20)
#define VF_ALLOC_CACHE_DEFAULT ((size_t)256 << 20)
void vf_alloc_set_cache_limit(size_t bytes);
size_t vf_alloc_cache_limit(void);
size_t vf_alloc_cached_bytes(void);

/* Size a vf_alloc'd block was asked for, and the account it is charged to. */
size_t vf_alloc_size(const void *p);
vf_account *vf_alloc_account(const void *p);

#ifdef __cplusplus
}
#endif
#endif /* VF_ALLOC_H */
