/* test_edge_view.c — lending host memory across an ipc edge (vflow.h "lending memory",
 * runtime/edge/edge_view.h, lane_view.c).
 *
 * Both ends sit in this process over a real ipc:// socket, and one check crosses a
 * process boundary (a child maps what the parent lends). Checked:
 *   - a view of a vf_alloc_shared segment arrives as a view (vf_tensor_is_view) over the
 *     same bytes: what the consumer writes, the lender reads, and what the lender writes
 *     after sending, the consumer reads; the item's record is a few hundred bytes, not
 *     the view's megabytes (the port counts what crossed); a tensor that is no view in
 *     the same item arrives as a copy; the segment is mapped once for many items, and
 *     unmapped once the end is closed and the last view is gone;
 *   - with VFLOW_EDGE_VIEW=0 the same item crosses as a copy: not a view, writes stay
 *     with the consumer, the record carries the bytes;
 *   - a child process maps the parent's segment from the descriptor alone and writes into
 *     it (the parent reads the child's bytes);
 *   - forged descriptors are refused: a range outside the segment or an overflowing shape
 *     (VF_ECORRUPT), an unknown version (VF_EVERSION), another file behind the fd or
 *     another inode (VF_ECORRUPT naming the edge), never mapped;
 *   - vf_alloc_shared charges the calling thread's account and vf_free_shared credits it.
 */
#include "runtime/core/alloc.h"
#include "runtime/core/shared.h"
#include "runtime/edge/chan_internal.h"
#include "runtime/edge/edge_view.h"
#include "tests/vf_test.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define ELEMS (256 * 1024) /* f32: 1 MiB lent per item */
#define NITEMS 4

typedef struct edge {
    vf_chan_hub *h;
    vf_port *out, *in;
    char addr[128];
} edge;

static void open_edge(edge *E)
{
    vf_status st = {0};
    vf_edge_end *r = NULL, *s = NULL;
    E->h = vf_chan_hub_new(&st);
    VF_CHECK_EQ_INT(vf_port_new("src.out", VF_PORT_OUT, &E->out, &st), 0);
    VF_CHECK_EQ_INT(vf_port_new("dst.in", VF_PORT_IN, &E->in, &st), 0);
    vf_edge_desc d = {0};
    d.id = 11;
    d.transport = VF_TR_IPC;
    snprintf(E->addr, sizeof E->addr, "ipc:///tmp/vf-test-view-%d.sock", (int)getpid());
    snprintf(d.addr, sizeof d.addr, "%s", E->addr);
    d.capacity = 2;
    d.max_item_bytes = ELEMS * 4 + 8192; /* the port's bound counts the view's bytes */
    snprintf(d.name, sizeof d.name, "src.out -> dst.in");
    VF_CHECK_EQ_INT(vf_edge_open(E->h, &d, VF_PORT_IN, &r, &st), 0);
    snprintf(d.addr, sizeof d.addr, "%s", vf_edge_end_endpoint(r));
    VF_CHECK_EQ_INT(vf_edge_open(E->h, &d, VF_PORT_OUT, &s, &st), 0);
    VF_CHECK_MSG(st.code == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(vf_port_attach(E->in, r, &st), 0);
    VF_CHECK_EQ_INT(vf_port_attach(E->out, s, &st), 0);
}

static void close_edge(edge *E)
{
    vf_port_free(E->out);
    vf_port_free(E->in);
    vf_chan_hub_free(E->h);
    unlink(E->addr + 6);
}

/* An item lending [off, off + ELEMS) of seg (f32), with a small ordinary tensor too. */
static vf_item *lend_item(float *seg, int64_t off, int seq)
{
    vf_status st = {0};
    vf_item *it = vf_item_new("lend", &st);
    int64_t n = ELEMS, three = 3;
    vf_tensor *v = vf_tensor_view(VF_DTYPE_F32, 1, &n, (vf_device){VF_DEV_CPU, 0}, seg + off, &st);
    vf_tensor *small = vf_tensor_new(VF_DTYPE_F32, 1, &three, &st);
    VF_CHECK(v && small);
    for (int i = 0; i < 3; i++) ((float *)small->data)[i] = (float)(seq + i);
    VF_CHECK_EQ_INT(vf_item_put(it, "w", v, &st), 0);
    VF_CHECK_EQ_INT(vf_item_put(it, "small", small, &st), 0);
    VF_CHECK_EQ_INT(vf_item_set_num(it, "seq", seq, &st), 0);
    return it;
}

/* Sends NITEMS items lending the same range and checks what arrives; views: whether the
 * edge lends (else copies). Returns the bytes the receiving port counted. */
static int64_t exchange(bool views)
{
    vf_status st = {0};
    float *seg = vf_alloc_shared(sizeof(float) * (ELEMS + 64), &st);
    VF_CHECK_MSG(seg != NULL, "%s", st.msg);
    if (!seg) return -1;
    for (int64_t i = 0; i < ELEMS + 64; i++) seg[i] = (float)i;
    edge E;
    open_edge(&E);
    vf_item *kept = NULL;
    for (int k = 0; k < NITEMS; k++) {
        VF_CHECK_EQ_INT(vf_send(E.out, lend_item(seg, 64, k), &st), 0);
        vf_item *it = NULL;
        VF_CHECK_EQ_INT(vf_recv(E.in, &it, &st), 0);
        if (!it) break;
        vf_tensor *w = vf_item_get(it, "w"), *small = vf_item_get(it, "small");
        VF_CHECK(w && small && vf_tensor_numel(w) == ELEMS && ((float *)small->data)[1] == (float)(k + 1));
        VF_CHECK_MSG(vf_tensor_is_view(w) == views, "item %d: is_view %d", k, vf_tensor_is_view(w));
        VF_CHECK(!vf_tensor_is_view(small));
        float *p = w->data;
        VF_CHECK(p[0] == (float)(64 + k) || k > 0); /* the first item sees the initial bytes */
        VF_CHECK(p[ELEMS - 1] == (float)(64 + ELEMS - 1));
        p[0] = (float)(1000 + k); /* the consumer writes */
        VF_CHECK_MSG((seg[64] == (float)(1000 + k)) == views, "item %d: the consumer's write %s the lender", k,
                     views ? "does not reach" : "reaches");
        seg[64] = (float)(64 + k + 1); /* the lender writes after sending */
        VF_CHECK_MSG((p[0] == (float)(64 + k + 1)) == views, "item %d: the lender's write %s the consumer", k,
                     views ? "does not reach" : "reaches");
        if (views) VF_CHECK_MSG(vf_view_mapped() == 1, "item %d: %d segments mapped", k, vf_view_mapped());
        if (k == NITEMS - 1) kept = it;
        else vf_item_free(it);
    }
    VF_CHECK_EQ_INT(vf_close(E.out, &st), 0);
    vf_item *eos = NULL; /* the receiver reads the end of stream: the sender's drain ends */
    VF_CHECK_EQ_INT(vf_recv(E.in, &eos, &st), VF_EOS);
    vf_port_stats ps;
    vf_port_get_stats(E.in, &ps);
    close_edge(&E);
    /* the held view outlives the edge; its mapping goes with it */
    if (kept) VF_CHECK(((float *)vf_item_get(kept, "w")->data)[ELEMS - 1] == (float)(64 + ELEMS - 1));
    vf_item_free(kept);
    VF_CHECK_MSG(vf_view_mapped() == 0, "%d segments still mapped", vf_view_mapped());
    vf_free_shared(seg);
    return ps.bytes;
}

VF_TEST(views_alias_the_lenders_bytes)
{
    unsetenv("VFLOW_EDGE_VIEW");
    int64_t bytes = exchange(true);
    /* records of descriptors and small tensors: nothing of the 4 MiB lent crossed */
    VF_CHECK_MSG(bytes > 0 && bytes < NITEMS * 2048, "%lld bytes crossed for %d items", (long long)bytes, NITEMS);
}

VF_TEST(turned_off_views_cross_as_copies)
{
    setenv("VFLOW_EDGE_VIEW", "0", 1);
    int64_t bytes = exchange(false);
    unsetenv("VFLOW_EDGE_VIEW");
    VF_CHECK_MSG(bytes >= (int64_t)NITEMS * ELEMS * 4, "%lld bytes crossed for %d copies", (long long)bytes, NITEMS);
}

/* The descriptor of [off, off + n) of seg as the lane writes it. */
static void describe(float *seg, int64_t off, int64_t n, vf_view_desc *d)
{
    memset(d, 0, sizeof *d);
    d->dtype = VF_DTYPE_F32;
    d->ndim = 1;
    d->shape[0] = n;
    d->nbytes = (uint64_t)n * 4;
    VF_CHECK_EQ_INT(vf_shared_find(seg + off, (size_t)n * 4, &d->seg), 0);
}

VF_TEST(another_process_maps_the_segment)
{
    vf_status st = {0};
    float *seg = vf_alloc_shared(1 << 20, &st);
    VF_CHECK(seg != NULL);
    if (!seg) return;
    seg[10] = 1.0f;
    vf_view_desc d;
    describe(seg, 8, 1024, &d);
    unsigned char wire[VF_VIEW_DESC_BYTES];
    vf_view_desc_encode(&d, wire);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* the child knows the descriptor's bytes and nothing else */
        vf_view_desc c;
        vf_status cs = {0};
        vf_view_rx *rx = NULL;
        vf_tensor *t = NULL;
        int ok = vf_view_desc_decode(wire, sizeof wire, "w", &c, &cs) == 0 && vf_view_rx_tensor(&rx, "e", &c, &t, &cs) == 0;
        if (ok) {
            float *p = t->data;
            ok = p[2] == 1.0f;
            p[3] = 42.0f;
        }
        vf_tensor_unref(t);
        vf_view_rx_free(rx);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    VF_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child could not map and read the view");
    VF_CHECK_MSG(seg[11] == 42.0f, "the child's write did not reach the lender: %g", seg[11]);
    vf_free_shared(seg);
}

VF_TEST(forged_descriptors_are_refused)
{
    vf_status st = {0};
    float *seg = vf_alloc_shared(1 << 16, &st);
    VF_CHECK(seg != NULL);
    if (!seg) return;
    vf_view_desc d, got;
    describe(seg, 0, 1024, &d);
    unsigned char wire[VF_VIEW_DESC_BYTES], bad[VF_VIEW_DESC_BYTES];
    vf_view_desc_encode(&d, wire);
    VF_CHECK_EQ_INT(vf_view_desc_decode(wire, sizeof wire, "w", &got, &st), 0);
    VF_CHECK(got.seg.fd == d.seg.fd && got.seg.ino == d.seg.ino && got.shape[0] == 1024);
    VF_CHECK_EQ_INT(vf_view_desc_decode(wire, sizeof wire - 1, "w", &got, &st), VF_ECORRUPT);

    memcpy(bad, wire, sizeof bad);
    uint64_t off = d.seg.size - 16; /* the offset field: the range runs past the segment */
    memcpy(bad + 80, &off, 8);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_view_desc_decode(bad, sizeof bad, "w", &got, &st), VF_ECORRUPT);
    VF_CHECK_MSG(strstr(st.msg, "outside") != NULL, "%s", st.msg);

    memcpy(bad, wire, sizeof bad);
    int64_t huge = INT64_MAX / 2; /* dim 0: a shape that overflows */
    memcpy(bad + 8, &huge, 8);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_view_desc_decode(bad, sizeof bad, "w", &got, &st), VF_ECORRUPT);

    memcpy(bad, wire, sizeof bad);
    bad[4] = 9; /* version */
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_view_desc_decode(bad, sizeof bad, "w", &got, &st), VF_EVERSION);

    /* decodable, but the fd is another file, or the inode another segment: not mapped */
    vf_view_rx *rx = NULL;
    vf_tensor *t = NULL;
    char path[] = "/tmp/vf-test-view-XXXXXX";
    int fd = mkstemp(path);
    VF_CHECK(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
    vf_view_desc other = d;
    other.seg.fd = fd;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_view_rx_tensor(&rx, "e9", &other, &t, &st), VF_ECORRUPT);
    VF_CHECK_MSG(strstr(st.msg, "edge e9") && strstr(st.msg, "not the segment"), "%s", st.msg);
    other = d;
    other.seg.ino ^= 1;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_view_rx_tensor(&rx, "e9", &other, &t, &st), VF_ECORRUPT);
    VF_CHECK(t == NULL && vf_view_mapped() == 0);
    close(fd);
    unlink(path);
    /* the genuine one maps */
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_view_rx_tensor(&rx, "e9", &d, &t, &st), 0);
    VF_CHECK(t && vf_tensor_is_view(t) && vf_view_mapped() == 1);
    vf_tensor_unref(t);
    vf_view_rx_free(rx);
    VF_CHECK_EQ_INT(vf_view_mapped(), 0);
    vf_free_shared(seg);
}

VF_TEST(shared_memory_is_accounted)
{
    vf_account *a = vf_account_new("test_view_acct"), *prev = vf_account_set_current(a);
    vf_status st = {0};
    int64_t before = vf_account_live(a);
    void *p = vf_alloc_shared(3 << 20, &st);
    VF_CHECK(p != NULL);
    VF_CHECK_EQ_INT(vf_account_live(a) - before, 3 << 20);
    VF_CHECK_EQ_INT(vf_shared_bytes(), 3 << 20);
    vf_free_shared(p);
    VF_CHECK_EQ_INT(vf_account_live(a), before);
    VF_CHECK_EQ_INT(vf_shared_bytes(), 0);
    vf_account_set_current(prev);
}

int main(void) { return vf_test_main(); }
