/* test_cuda_xfer_state.c — the host-side logic of the CUDA backend's memory pool and
 * device-tensor transports, on a machine without a GPU: pool_core.h (size classes,
 * reuse, accounts, limits, trim on driver OOM, exported blocks kept), xfer_state.h (the
 * IPC/NCCL descriptor codec and its strictness, the send ring's release by credit, the
 * import table's open-once refcounting) and the device lane, runtime/edge/lane_dev.c
 * (host-staged tensors unwrapped without CUDA, the error naming the edge when a device
 * tensor meets a build without a device transport).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/vf_test.h"

#include "kernels/cuda/pool_core.h"
#include "kernels/cuda/xfer_state.h"
#include "runtime/core/alloc.h"
#include "runtime/edge/chan_internal.h"
#include "runtime/edge/lane.h"
#include "runtime/edge/transport_dev.h"

/* ------------------------------------------------------------------ a fake driver */

typedef struct drv {
    int allocs, frees;
    size_t live, cap; /* cap: bytes the "device" has */
} drv;

#define HDR 256 /* the fake driver keeps each block's size in front of it */

static int drv_alloc(void *u, size_t bytes, void **out)
{
    drv *d = u;
    if (d->live + bytes > d->cap) return -1;
    unsigned char *p = aligned_alloc(HDR, bytes + HDR);
    if (!p) return -1;
    memcpy(p, &bytes, sizeof bytes);
    *out = p + HDR;
    d->allocs++;
    d->live += bytes;
    return 0;
}

static void drv_free(void *u, void *p)
{
    drv *d = u;
    size_t bytes;
    memcpy(&bytes, (unsigned char *)p - HDR, sizeof bytes);
    d->frees++;
    d->live -= bytes;
    free((unsigned char *)p - HDR);
}

static vf_pool_core pool_new(drv *d, vf_account *cache)
{
    vf_pool_core pc;
    memset(&pc, 0, sizeof pc);
    pc.raw_alloc = drv_alloc;
    pc.raw_free = drv_free;
    pc.u = d;
    pc.cache_acct = cache;
    snprintf(pc.name, sizeof pc.name, "cuda:9");
    return pc;
}

VF_TEST(pool_classes)
{
    VF_CHECK_EQ_INT(vf_pool_class(0), 512);
    VF_CHECK_EQ_INT(vf_pool_class(1), 512);
    VF_CHECK_EQ_INT(vf_pool_class(512), 512);
    VF_CHECK_EQ_INT(vf_pool_class(513), 1024);
    VF_CHECK_EQ_INT(vf_pool_class((1 << 20) - 1), 1 << 20);
    VF_CHECK_EQ_INT(vf_pool_class(1 << 20), 2 << 20);
    VF_CHECK_EQ_INT(vf_pool_class((2 << 20) + 1), 4 << 20);
}

VF_TEST(pool_reuse_and_accounts)
{
    drv d = {.cap = (size_t)64 << 20};
    vf_account *a = vf_account_new_dev("stage A@cuda:9", (vf_device){VF_DEV_CUDA, 9});
    vf_account *b = vf_account_new_dev("stage B@cuda:9", (vf_device){VF_DEV_CUDA, 9});
    vf_account *cache = vf_account_new_dev("pool cache@cuda:9", (vf_device){VF_DEV_CUDA, 9});
    int64_t a0 = vf_account_live(a), b0 = vf_account_live(b), c0 = vf_account_live(cache);
    vf_pool_core pc = pool_new(&d, cache);
    vf_status st = {0};
    void *p = vf_pool_alloc(&pc, 1000, a, &st);
    VF_CHECK(p != NULL);
    VF_CHECK_EQ_INT(vf_account_live(a) - a0, 1024);
    VF_CHECK_EQ_INT(pc.reserved, 1024);
    void *q = vf_pool_alloc(&pc, 3 << 20, a, &st);
    VF_CHECK(q != NULL);
    VF_CHECK_EQ_INT(vf_account_live(a) - a0, 1024 + (4 << 20));
    /* interior pointers find their block */
    VF_CHECK_EQ_INT(vf_pool_find(&pc, (char *)q + 12345), vf_pool_find(&pc, q));
    VF_CHECK(vf_pool_find(&pc, (char *)p + 1024) != vf_pool_find(&pc, p) || pc.b[vf_pool_find(&pc, p)].size > 1024);
    VF_CHECK_EQ_INT(vf_pool_free(&pc, p), 0);
    VF_CHECK_EQ_INT(vf_account_live(a) - a0, 4 << 20);
    VF_CHECK_EQ_INT(vf_account_live(cache) - c0, 1024);
    VF_CHECK_EQ_INT(vf_pool_free(&pc, p), VF_EINVAL); /* double free */
    /* same class, other stage: the cached block comes back, charged to B */
    void *r = vf_pool_alloc(&pc, 700, b, &st);
    VF_CHECK(r == p);
    VF_CHECK_EQ_INT(d.allocs, 2);
    VF_CHECK_EQ_INT(vf_account_live(b) - b0, 1024);
    VF_CHECK_EQ_INT(vf_account_live(cache) - c0, 0);
    /* another class misses the cache */
    void *s2 = vf_pool_alloc(&pc, 2000, b, &st);
    VF_CHECK(s2 != NULL && s2 != p);
    VF_CHECK_EQ_INT(d.allocs, 3);
    vf_pool_free(&pc, r);
    vf_pool_free(&pc, s2);
    vf_pool_free(&pc, q);
    VF_CHECK_EQ_INT(vf_account_live(a), a0);
    VF_CHECK_EQ_INT(vf_account_live(b), b0);
    VF_CHECK_EQ_INT(pc.cached, pc.reserved);
    vf_pool_trim(&pc);
    VF_CHECK_EQ_INT(pc.reserved, 0);
    VF_CHECK_EQ_INT(pc.n, 0);
    VF_CHECK_EQ_INT(vf_account_live(cache), c0);
    vf_pool_fini(&pc);
}

VF_TEST(pool_limit_and_oom)
{
    drv d = {.cap = (size_t)8 << 20};
    vf_account *a = vf_account_new_dev("limited@cuda:9", (vf_device){VF_DEV_CUDA, 9});
    vf_account_set_limit(a, (int64_t)vf_account_live(a) + (6 << 20));
    vf_pool_core pc = pool_new(&d, NULL);
    vf_status st = {0};
    void *p = vf_pool_alloc(&pc, 4 << 20, a, &st);
    VF_CHECK(p != NULL);
    /* over the account's limit: refused before the driver is asked, message names it */
    int before = d.allocs;
    VF_CHECK(vf_pool_alloc(&pc, 4 << 20, a, &st) == NULL);
    VF_CHECK_EQ_INT(st.code, VF_ENOMEM);
    VF_CHECK(strstr(st.msg, "limited@cuda:9") != NULL);
    VF_CHECK_EQ_INT(d.allocs, before);
    vf_account_set_limit(a, 0);
    /* the "device" is full: cached blocks go back to the driver and the request retries */
    vf_status_clear(&st);
    void *x = vf_pool_alloc(&pc, 2 << 20, a, &st);
    VF_CHECK(x != NULL);
    vf_pool_free(&pc, x); /* 2 MiB cached; 6 of 8 MiB used */
    void *y = vf_pool_alloc(&pc, 4 << 20, a, &st); /* needs the cached 2 MiB back */
    VF_CHECK(y != NULL);
    VF_CHECK_EQ_INT(pc.cached, 0);
    /* exported blocks survive trims */
    vf_pool_free(&pc, y);
    pc.b[vf_pool_find(&pc, p)].exported = true;
    vf_pool_free(&pc, p);
    vf_pool_trim(&pc);
    VF_CHECK_EQ_INT(pc.n, 1);
    VF_CHECK(pc.b[0].base == (uintptr_t)p && pc.b[0].exported);
    /* and a real OOM says how much the process holds */
    vf_status_clear(&st);
    VF_CHECK(vf_pool_alloc(&pc, 6 << 20, a, &st) == NULL);
    VF_CHECK(strstr(st.msg, "out of device memory") != NULL);
    vf_pool_fini(&pc);
}

/* ------------------------------------------------------------------ descriptor */

static vf_xdesc sample_desc(void)
{
    vf_xdesc d = {0};
    d.kind = VF_XD_IPC;
    d.dtype = VF_DTYPE_BF16;
    d.ndim = 3;
    d.shape[0] = 2, d.shape[1] = 3, d.shape[2] = 5;
    d.src_device = 1;
    d.pid = 4242;
    d.ev_slot = 3;
    d.buf_id = 77;
    d.offset = 512;
    d.nbytes = 2 * 3 * 5 * 2;
    d.alloc_bytes = 1024;
    d.seq = 9;
    for (int i = 0; i < VF_XD_HANDLE; i++) d.mem[i] = (unsigned char)(i * 7 + 1), d.ev[i] = (unsigned char)(255 - i);
    return d;
}

VF_TEST(desc_roundtrip_and_strict)
{
    unsigned char buf[VF_XD_BYTES];
    vf_xdesc d = sample_desc(), e;
    vf_status st = {0};
    vf_xdesc_encode(&d, buf);
    VF_CHECK_EQ_INT(vf_xdesc_decode(buf, sizeof buf, "x", &e, &st), 0);
    VF_CHECK(memcmp(&d, &e, sizeof d) == 0);
    VF_CHECK(vf_xdesc_decode(buf, sizeof buf - 1, "x", &e, &st) == VF_ECORRUPT);
    struct {
        int off;
        unsigned char val;
        int code;
    } bad[] = {
        {0, 'X', VF_ECORRUPT},         /* magic */
        {4, 2, VF_EVERSION},           /* version */
        {6, 3, VF_ECORRUPT},           /* kind */
        {7, VF_DTYPE_COUNT, VF_ECORRUPT},
        {8, 7, VF_ECORRUPT},           /* ndim */
        {15, 0x80, VF_ECORRUPT},       /* negative device */
        {16 + 8 * 4, 1, VF_ECORRUPT},  /* a dim past ndim */
        {88, 61, VF_ECORRUPT},         /* nbytes != shape */
        {81, 4, VF_ECORRUPT},          /* offset 1024: the bytes run past the block */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char b2[VF_XD_BYTES];
        memcpy(b2, buf, sizeof b2);
        b2[bad[i].off] = bad[i].val;
        vf_status_clear(&st);
        int rc = vf_xdesc_decode(b2, sizeof b2, "x", &e, &st);
        VF_CHECK_MSG(rc == bad[i].code, "case %zu: rc %d", i, rc);
        VF_CHECK(strstr(st.msg, "'x'") != NULL);
    }
    /* any single-byte change decodes to something self-consistent or is refused */
    for (int off = 0; off < VF_XD_BYTES; off++)
        for (int v = 0; v < 256; v += 51) {
            unsigned char b2[VF_XD_BYTES];
            memcpy(b2, buf, sizeof b2);
            b2[off] ^= (unsigned char)(v | 1);
            vf_status_clear(&st);
            if (vf_xdesc_decode(b2, sizeof b2, "x", &e, &st) == 0) {
                uint64_t n = vf_dtype_size(e.dtype);
                for (int k = 0; k < e.ndim; k++) n *= (uint64_t)e.shape[k];
                VF_CHECK(n == e.nbytes);
                VF_CHECK(e.kind != VF_XD_IPC || e.offset + e.nbytes <= e.alloc_bytes);
            }
        }
}

/* ------------------------------------------------------------------ send ring */

static int g_released;
static void count_release(void *data, void *hint)
{
    (void)data, (void)hint;
    g_released++;
}

static vf_tensor *counted(void)
{
    static float dummy[4];
    int64_t n = 4;
    return vf_tensor_wrap(VF_DTYPE_F32, 1, &n, (vf_device){VF_DEV_CPU, 0}, dummy, count_release, NULL, NULL);
}

VF_TEST(ring_release_by_credit)
{
    vf_xring r;
    VF_CHECK_EQ_INT(vf_xring_init(&r, 3), 0);
    g_released = 0;
    /* three items in flight: the ring is full */
    for (int i = 0; i < 3; i++) {
        int slot = vf_xring_next(&r);
        VF_CHECK_EQ_INT(slot, i);
        r.s[slot].t[0] = counted();
        r.s[slot].t[1] = counted();
        r.s[slot].nt = 2;
        VF_CHECK(vf_xring_push(&r) != NULL);
    }
    VF_CHECK_EQ_INT(vf_xring_next(&r), -1);
    VF_CHECK(vf_xring_push(&r) == NULL);
    /* nothing credited yet */
    VF_CHECK_EQ_INT(vf_xring_reap(&r, 3), 0);
    VF_CHECK_EQ_INT(g_released, 0);
    /* one credit back: the OLDEST item's two buffers are released, its slot reused */
    VF_CHECK_EQ_INT(vf_xring_reap(&r, 2), 1);
    VF_CHECK_EQ_INT(g_released, 2);
    VF_CHECK_EQ_INT(vf_xring_next(&r), 0);
    int slot = vf_xring_next(&r);
    r.s[slot].t[0] = counted();
    r.s[slot].nt = 1;
    vf_xslot *s = vf_xring_push(&r);
    VF_CHECK(s && s->seq == 3);
    /* the receiver read EOS (ack): everything goes */
    VF_CHECK_EQ_INT(vf_xring_reap(&r, 0), 3);
    VF_CHECK_EQ_INT(g_released, 2 + 4 + 1);
    VF_CHECK_EQ_INT(r.count, 0);
    /* a negative or too-large inflight is clamped */
    VF_CHECK_EQ_INT(vf_xring_reap(&r, -5), 0);
    slot = vf_xring_next(&r);
    r.s[slot].t[0] = counted();
    r.s[slot].nt = 1;
    vf_xring_push(&r);
    VF_CHECK_EQ_INT(vf_xring_reap(&r, 10), 0);
    vf_xring_fini(&r); /* edge teardown releases what is left */
    VF_CHECK_EQ_INT(g_released, 8);
}

/* ------------------------------------------------------------------ import table */

static int g_opens, g_closes;
static int imp_open(void *u, const vf_xdesc *d, void **ptr, vf_status *st)
{
    (void)u;
    if (d->buf_id == 666) return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "cannot open");
    g_opens++;
    *ptr = (void *)(uintptr_t)(0x1000 * d->buf_id + d->pid);
    return 0;
}
static void imp_close(void *u, void *ptr)
{
    (void)u, (void)ptr;
    g_closes++;
}

VF_TEST(import_open_once)
{
    vf_ximp_tab t = {.open = imp_open, .close = imp_close};
    vf_status st = {0};
    vf_xdesc d = sample_desc();
    void *p1 = NULL, *p2 = NULL, *p3 = NULL;
    g_opens = g_closes = 0;
    VF_CHECK_EQ_INT(vf_ximp_acquire(&t, &d, &p1, &st), 0); /* edge 1 */
    VF_CHECK_EQ_INT(vf_ximp_acquire(&t, &d, &p2, &st), 0); /* edge 2, same buffer */
    VF_CHECK_EQ_INT(g_opens, 1);
    VF_CHECK(p1 == p2 && vf_ximp_peek(&t, d.pid, d.buf_id) == p1);
    vf_xdesc d2 = d;
    d2.pid = 4243; /* same id, other producer: another buffer */
    VF_CHECK_EQ_INT(vf_ximp_acquire(&t, &d2, &p3, &st), 0);
    VF_CHECK_EQ_INT(g_opens, 2);
    VF_CHECK(p3 != p1);
    vf_ximp_release(&t, d.pid, d.buf_id);
    VF_CHECK_EQ_INT(g_closes, 0);
    vf_ximp_release(&t, d.pid, d.buf_id);
    VF_CHECK_EQ_INT(g_closes, 1);
    VF_CHECK(vf_ximp_peek(&t, d.pid, d.buf_id) == NULL);
    vf_ximp_release(&t, d.pid, d.buf_id); /* unknown: ignored */
    VF_CHECK_EQ_INT(g_closes, 1);
    d2.buf_id = 666;
    VF_CHECK_EQ_INT(vf_ximp_acquire(&t, &d2, &p3, &st), VF_ECUDA);
    VF_CHECK_EQ_INT(t.n, 1);
    vf_ximp_release(&t, 4243, 77);
    VF_CHECK_EQ_INT(g_closes, 2);
    free(t.e);

    vf_xkeys k = {0};
    VF_CHECK(!vf_xkeys_has(&k, 1, 2));
    for (int i = 0; i < 20; i++) VF_CHECK_EQ_INT(vf_xkeys_add(&k, 1, (uint64_t)i), 0);
    VF_CHECK(vf_xkeys_has(&k, 1, 19) && !vf_xkeys_has(&k, 2, 19));
    free(k.k);
}

/* ------------------------------------------------------------------ the device lane */

static vf_edge_end fake_edge(const char *name)
{
    vf_edge_end e;
    memset(&e, 0, sizeof e);
    snprintf(e.d.name, sizeof e.d.name, "%s", name);
    e.d.capacity = 2;
    e.d.transport = VF_TR_IPC;
    return e;
}

VF_TEST(devx_host_unwrap)
{
    vf_status st = {0};
    vf_edge_end e = fake_edge("a.out -> b.in");
    vf_item *it = vf_item_new("i0", &st);
    int64_t n = 3;
    vf_tensor *h = vf_tensor_new(VF_DTYPE_BF16, 1, &n, &st);
    memset(h->data, 0x3f, 6);
    vf_tensor *plain = vf_tensor_new(VF_DTYPE_F32, 1, &n, &st);
    vf_item_put(it, VF_DEVX_HOST "x", h, &st);
    vf_item_put(it, "y", plain, &st);
    VF_CHECK(vf_item_has_wire_device(it));
    VF_CHECK(!vf_item_has_device(it));
    /* this test thread never asked for a CUDA backend: with or without CUDA built, a
     * host-staged tensor arrives as a host tensor under its own name */
    void *lane = NULL;
    VF_CHECK_EQ_INT(vf_lane_dev.recv_item(&lane, &e, &it, &st), 0);
    VF_CHECK(it != NULL);
    vf_tensor *x = it ? vf_item_get(it, "x") : NULL;
    VF_CHECK(x && x->dtype == VF_DTYPE_BF16 && x->device.kind == VF_DEV_CPU && x->shape[0] == 3);
    VF_CHECK(x && memcmp(x->data, "\x3f\x3f\x3f\x3f\x3f\x3f", 6) == 0);
    VF_CHECK(it && vf_item_get(it, "y") == plain && !vf_item_has_wire_device(it));
    vf_item_free(it);
    vf_lane_dev.close(lane, &e);
}

VF_TEST(devx_errors_name_the_edge)
{
    vf_status st = {0};
    vf_edge_end e = fake_edge("dit0.act -> dit1.act");
    const vf_devxfer_ops *saved = vf_devxfer_get();
    vf_devxfer_register(NULL); /* as in a build without CUDA */
    vf_item *it = vf_item_new("mb3", &st);
    int64_t n = 4;
    static uint16_t fake[4];
    vf_tensor *t = vf_tensor_wrap(VF_DTYPE_BF16, 1, &n, (vf_device){VF_DEV_CUDA, 1}, fake, NULL, NULL, &st);
    vf_item_put(it, "x", t, &st);
    VF_CHECK(vf_item_has_device(it));
    /* through the channel's send, as a port sends it: a sending ipc end with a credit */
    vf_chan_hub *h = vf_chan_hub_new(&st);
    vf_edge_end *out = NULL;
    snprintf(e.d.addr, sizeof e.d.addr, "ipc:///tmp/vf-devx-%d.sock", (int)getpid());
    VF_CHECK_EQ_INT(vf_edge_open(h, &e.d, VF_PORT_OUT, &out, &st), 0);
    vf_send_job job = {.it = it};
    int64_t bytes = -1;
    int rc = out->ops->send(out, &job, &bytes, &st);
    VF_CHECK(rc < 0);
    VF_CHECK(strstr(st.msg, "dit0.act -> dit1.act") != NULL);
    VF_CHECK(strstr(st.msg, "'x'") != NULL && strstr(st.msg, "cuda:1") != NULL);
    VF_CHECK_EQ_INT(bytes, 0);
    vf_item_free(it);
    vf_edge_end_free(out);
    vf_chan_hub_free(h);
    /* a descriptor tensor reaching a build without CUDA */
    vf_status_clear(&st);
    it = vf_item_new("mb4", &st);
    int64_t nd = VF_XD_BYTES;
    vf_item_put(it, VF_DEVX_IPC "x", vf_tensor_zeros(VF_DTYPE_U8, 1, &nd, &st), &st);
    void *lane = NULL;
    rc = vf_lane_dev.recv_item(&lane, &e, &it, &st);
    VF_CHECK(rc < 0 && it == NULL);
    VF_CHECK(strstr(st.msg, "dit0.act -> dit1.act") != NULL);
    vf_devxfer_register(saved);
    vf_lane_dev.close(lane, &e);
}

int main(void) { return vf_test_main(); }
