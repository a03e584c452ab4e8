/* test_alloc.c — vf_alloc and the per-stage memory accounts (runtime/core/alloc.c): live and
 * peak bytes, frees from another thread credit the owner, limits refuse with a message
 * naming the account, and concurrent charges never take an account over its limit. */
#include "runtime/core/alloc.h"
#include "tests/vf_test.h"

#include <pthread.h>
#include <stdint.h>

VF_TEST(alignment_and_zeroing)
{
    vf_status st = {0};
    for (size_t n = 0; n < 300; n += 7) {
        unsigned char *p = vf_alloc(n, &st);
        VF_CHECK(p && ((uintptr_t)p % 64) == 0);
        VF_CHECK_EQ_INT(vf_alloc_size(p), n);
        memset(p, 0xab, n);
        vf_free(p);
        unsigned char *z = vf_calloc(n, &st);
        bool zero = true;
        for (size_t i = 0; i < n; i++) zero = zero && z[i] == 0;
        VF_CHECK(zero);
        vf_free(z);
    }
    vf_free(NULL);
}

VF_TEST(live_and_peak)
{
    vf_status st = {0};
    vf_account *a = vf_account_new("alloc_a");
    VF_CHECK(vf_account_new("alloc_a") == a); /* same name: same account */
    VF_CHECK_STR(vf_account_name(a), "alloc_a");
    vf_account *prev = vf_account_set_current(a);
    VF_CHECK(prev == vf_account_runtime());
    VF_CHECK(vf_account_current() == a);
    int64_t rt0 = vf_account_live(vf_account_runtime());
    void *p1 = vf_alloc(1000, &st), *p2 = vf_alloc(3000, &st);
    VF_CHECK(vf_alloc_account(p1) == a);
    VF_CHECK_EQ_INT(vf_account_live(a), 4000);
    vf_free(p1);
    VF_CHECK_EQ_INT(vf_account_live(a), 3000);
    VF_CHECK_EQ_INT(vf_account_peak(a), 4000);
    vf_account_reset_peak(a);
    VF_CHECK_EQ_INT(vf_account_peak(a), 3000);
    vf_free(p2);
    VF_CHECK_EQ_INT(vf_account_live(a), 0);
    VF_CHECK_EQ_INT(vf_account_live(vf_account_runtime()), rt0); /* nothing leaked onto runtime */
    VF_CHECK(vf_account_set_current(NULL) == a);
    VF_CHECK(vf_account_current() == vf_account_runtime());
}

typedef struct {
    vf_account *acct;
    void *block;
} thr_arg;

static void *alloc_on_thread(void *arg)
{
    thr_arg *t = arg;
    vf_status st = {0};
    vf_account_set_current(t->acct);
    t->block = vf_alloc(12345, &st);
    return NULL;
}

VF_TEST(cross_thread_free_credits_owner)
{
    thr_arg t = {vf_account_new("alloc_b"), NULL};
    pthread_t th;
    pthread_create(&th, NULL, alloc_on_thread, &t);
    pthread_join(th, NULL);
    VF_CHECK_EQ_INT(vf_account_live(t.acct), 12345);
    vf_account *mine = vf_account_new("alloc_main");
    vf_account_set_current(mine);
    vf_free(t.block); /* freed on this thread, charged to alloc_b */
    VF_CHECK_EQ_INT(vf_account_live(t.acct), 0);
    VF_CHECK_EQ_INT(vf_account_live(mine), 0);
    VF_CHECK_EQ_INT(vf_account_peak(t.acct), 12345);
    vf_account_set_current(NULL);
}

VF_TEST(limit_refuses_with_account_name)
{
    vf_status st = {0};
    vf_account *a = vf_account_new("vae_encode");
    vf_account_set_limit(a, 10000);
    VF_CHECK_EQ_INT(vf_account_limit(a), 10000);
    vf_account_set_current(a);
    void *p = vf_alloc(8000, &st);
    VF_CHECK(p != NULL);
    void *q = vf_alloc(4000, &st);
    VF_CHECK(q == NULL);
    VF_CHECK_EQ_INT(st.code, VF_ENOMEM);
    VF_CHECK_MSG(strstr(st.msg, "'vae_encode'") && strstr(st.msg, "limit"), "%s", st.msg);
    VF_CHECK_EQ_INT(vf_account_live(a), 8000);
    vf_status_clear(&st);
    int64_t shape[1] = {4000};
    VF_CHECK(vf_tensor_new(VF_DTYPE_U8, 1, shape, &st) == NULL && st.code == VF_ENOMEM);
    vf_free(p);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_account_charge(a, 10000, &st), 0); /* device-pool style booking */
    VF_CHECK_EQ_INT(vf_account_charge(a, 1, &st), VF_ENOMEM);
    vf_account_credit(a, 10000);
    VF_CHECK_EQ_INT(vf_account_live(a), 0);
    vf_account_set_limit(a, 0);
    vf_account_set_current(NULL);
}

static vf_account *g_shared;
static void *hammer(void *arg)
{
    (void)arg;
    vf_status st = {0};
    vf_account_set_current(g_shared);
    void *held[8] = {0};
    for (int i = 0; i < 20000; i++) {
        int k = i % 8;
        if (held[k]) {
            vf_free(held[k]);
            held[k] = NULL;
        } else {
            held[k] = vf_alloc(1000 + (size_t)(i % 5) * 100, &st); /* may be refused */
        }
    }
    for (int k = 0; k < 8; k++) vf_free(held[k]);
    return NULL;
}

VF_TEST(concurrent_charges_respect_limit)
{
    g_shared = vf_account_new("alloc_shared");
    vf_account_set_limit(g_shared, 20000);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, hammer, NULL);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    VF_CHECK_EQ_INT(vf_account_live(g_shared), 0);
    VF_CHECK(vf_account_peak(g_shared) <= 20000);
    VF_CHECK(vf_account_peak(g_shared) > 5000); /* one thread alone holds ~9 KB at times */
    VF_CHECK(vf_account_allocs(g_shared) > 1000);
}

typedef struct {
    int n;
    bool runtime_first, saw_b;
} each_ctx;
static void visit(vf_account *a, void *user)
{
    each_ctx *c = user;
    if (c->n++ == 0) c->runtime_first = a == vf_account_runtime();
    if (strcmp(vf_account_name(a), "alloc_b") == 0) c->saw_b = true;
}

VF_TEST(each_and_devices)
{
    each_ctx c = {0};
    vf_account_each(visit, &c);
    VF_CHECK(c.runtime_first && c.saw_b && c.n >= 5);
    vf_account *g = vf_account_new_dev("dit0@cuda:1", (vf_device){VF_DEV_CUDA, 1});
    VF_CHECK(vf_account_device(g).kind == VF_DEV_CUDA && vf_account_device(g).index == 1);
    VF_CHECK(vf_account_device(vf_account_runtime()).kind == VF_DEV_CPU);
}

VF_TEST(big_blocks_are_cached_and_bounded)
{
    vf_status st = {0};
    vf_account *a = vf_account_new("alloc_big");
    vf_account_set_current(a);
    size_t limit0 = vf_alloc_cache_limit();
    vf_alloc_set_cache_limit(16 << 20);
    size_t n = (3 << 20) + 123;
    unsigned char *p = vf_calloc(n, &st);
    VF_CHECK(p && ((uintptr_t)p % 64) == 0);
    VF_CHECK(p[0] == 0 && p[n - 1] == 0);
    VF_CHECK_EQ_INT(vf_account_live(a), n);
    memset(p, 0x5a, n);
    vf_free(p);
    VF_CHECK_EQ_INT(vf_account_live(a), 0);
    VF_CHECK(vf_alloc_cached_bytes() >= n);
    /* about the same size again: the parked block comes back, zeroed for calloc */
    unsigned char *q = vf_calloc(n - 1000, &st);
    VF_CHECK(q == p);
    bool zero = true;
    for (size_t i = 0; i < n - 1000; i += 4093) zero = zero && q[i] == 0;
    VF_CHECK(zero && q[n - 1001] == 0);
    VF_CHECK_EQ_INT(vf_alloc_cached_bytes(), 0);
    /* much smaller: not served by the big parked block */
    unsigned char *r = vf_alloc(1 << 20, &st);
    VF_CHECK(r && r != q);
    vf_free(q);
    vf_free(r);
    /* the cache never holds more than its limit */
    void *blocks[8];
    for (int i = 0; i < 8; i++) blocks[i] = vf_alloc(4 << 20, &st);
    for (int i = 0; i < 8; i++) vf_free(blocks[i]);
    VF_CHECK(vf_alloc_cached_bytes() <= (16 << 20));
    vf_alloc_set_cache_limit(0);
    VF_CHECK_EQ_INT(vf_alloc_cached_bytes(), 0);
    vf_alloc_set_cache_limit(limit0);
    vf_account_set_current(NULL);
}

int main(void) { return vf_test_main(); }
