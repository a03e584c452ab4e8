/* test_edge_shm.c — large tensors of an ipc edge through shared memory (edge_shm.h).
 *
 * Both ends sit in this process, over a real ipc:// socket. Checked:
 *   - a consumer that holds every item it received (more than the edge's slots) still
 *     gets every payload intact, and each held payload stays intact while the producer
 *     goes on sending: a slot is reused only once its tensors are gone. Some items went
 *     through slots and some, with every slot held, as plain frames (the counts say so);
 *   - a consumer that is done with each item before it takes the next (what a stage
 *     declares) gets every item through a slot (slots = capacity + 1);
 *   - nothing is left in /dev/shm once the ends are gone, even with tensors outliving
 *     the edge (their mapping goes with the last of them);
 *   - VFLOW_EDGE_SHM=0 sends plain frames (no segment), with the same payloads;
 *   - the shared memory the lane says it holds (vf_lane_ops.held) is what its items used,
 *     within the plan's count for the edge: capacity + 1 of its largest items;
 *   - vf_shm_sweep removes the names a (dead) sender left;
 *   - a forged descriptor (a segment that does not exist, a slot or range outside a real
 *     one) is refused with VF_ECORRUPT naming the edge, never read.
 * The payload patterns are computed here, not taken from the codec.
 */
#include "runtime/core/alloc.h"
#include "runtime/edge/chan_internal.h"
#include "runtime/edge/edge_shm.h"
#include "runtime/edge/lane.h"
#include "runtime/edge/transport_zmq.h"
#include "tests/vf_test.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define NITEMS 10
#define ELEMS (256 * 1024) /* f32: 1 MiB per item */
#define CAP 3

static unsigned char pat(int seq, size_t i) { return (unsigned char)(seq * 31 + i * 7 + (i >> 9)); }

static vf_item *mk(int seq)
{
    vf_status st = {0};
    char id[16];
    snprintf(id, sizeof id, "it%d", seq);
    vf_item *it = vf_item_new(id, &st);
    int64_t shape[1] = {ELEMS};
    vf_tensor *t = vf_tensor_new(VF_DTYPE_F32, 1, shape, &st);
    VF_CHECK(t != NULL);
    for (size_t i = 0; i < (size_t)ELEMS * 4; i++) ((unsigned char *)t->data)[i] = pat(seq, i);
    vf_item_put(it, "x", t, &st);
    VF_CHECK_EQ_INT(st.code, 0);
    return it;
}

static bool intact(const vf_item *it, int seq)
{
    const vf_tensor *t = vf_item_get(it, "x");
    if (!t || vf_tensor_nbytes(t) != (size_t)ELEMS * 4) return false;
    const unsigned char *p = t->data;
    for (size_t i = 0; i < (size_t)ELEMS * 4; i++)
        if (p[i] != pat(seq, i)) return false;
    return true;
}

/* Names in /dev/shm that this process's edges made. */
static int leftovers(void)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "vflow-%ld-", (long)getpid());
    int n = 0;
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

typedef struct {
    vf_port *p;
    int rc;
} prod_arg;

static void *producer(void *arg)
{
    prod_arg *a = arg;
    vf_status st = {0};
    for (int i = 0; i < NITEMS && !a->rc; i++) a->rc = vf_send(a->p, mk(i), &st);
    if (!a->rc) a->rc = vf_close(a->p, &st);
    if (!a->rc) a->rc = vf_port_drain(a->p, 10000, &st);
    return NULL;
}

typedef struct edge {
    vf_chan_hub *h;
    vf_port *out, *in;
    vf_edge_end *s;
    char addr[128];
} edge;

static void open_edge(edge *E)
{
    vf_status st = {0};
    vf_edge_end *r = NULL;
    E->h = vf_chan_hub_new(&st);
    VF_CHECK_EQ_INT(vf_port_new("src.out", VF_PORT_OUT, &E->out, &st), 0);
    VF_CHECK_EQ_INT(vf_port_new("dst.in", VF_PORT_IN, &E->in, &st), 0);
    vf_edge_desc d = {0};
    d.id = 7;
    d.transport = VF_TR_IPC;
    snprintf(E->addr, sizeof E->addr, "ipc:///tmp/vf-test-shm-%d.sock", (int)getpid());
    snprintf(d.addr, sizeof d.addr, "%s", E->addr);
    d.capacity = CAP;
    d.max_item_bytes = ELEMS * 4 + 4096;
    snprintf(d.name, sizeof d.name, "src.out -> dst.in");
    VF_CHECK_EQ_INT(vf_edge_open(E->h, &d, VF_PORT_IN, &r, &st), 0);
    snprintf(d.addr, sizeof d.addr, "%s", vf_edge_end_endpoint(r));
    VF_CHECK_EQ_INT(vf_edge_open(E->h, &d, VF_PORT_OUT, &E->s, &st), 0);
    VF_CHECK_MSG(st.code == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(vf_port_attach(E->in, r, &st), 0);
    VF_CHECK_EQ_INT(vf_port_attach(E->out, E->s, &st), 0);
}

static void close_edge(edge *E)
{
    vf_port_free(E->out);
    vf_port_free(E->in);
    vf_chan_hub_free(E->h);
    unlink(E->addr + 6);
}

/* What the sending end's lanes held at the end of the last run (vf_lanes_held). */
static int64_t g_held;

/* Sends NITEMS; the consumer holds at most `hold` items, freeing the oldest before it
 * takes the next. Returns the sender's placed / fallback counts; *kept receives the items still
 * held (to outlive the edge) when not NULL. */
static void run(int hold, int64_t *placed, int64_t *fallback, vf_item **kept)
{
    edge E;
    open_edge(&E);
    prod_arg a = {E.out, 0};
    pthread_t th;
    pthread_create(&th, NULL, producer, &a);
    vf_status st = {0};
    vf_item *held[NITEMS] = {0};
    int n = 0, rc;
    vf_item *it;
    while ((rc = vf_recv(E.in, &it, &st)) == 0) {
        VF_CHECK_MSG(intact(it, n), "item %d arrived damaged", n);
        held[n] = it;
        /* what is still held is intact while later items arrive */
        for (int k = n - hold + 1 > 0 ? n - hold + 1 : 0; k < n; k++)
            VF_CHECK_MSG(intact(held[k], k), "held item %d overwritten", k);
        if (n - hold + 1 >= 0) { /* done with the oldest before taking the next */
            vf_item_free(held[n - hold + 1]);
            held[n - hold + 1] = NULL;
        }
        n++;
    }
    VF_CHECK_MSG(rc == VF_EOS, "rc %d: %s", rc, st.msg);
    VF_CHECK_EQ_INT(n, NITEMS);
    pthread_join(th, NULL);
    VF_CHECK_EQ_INT(a.rc, 0);
    vf_shm_tx_counts(vf_lanes_state(&vf_zmq_of(E.s)->lanes, &vf_lane_shm), placed, fallback);
    g_held = vf_lanes_held(&vf_zmq_of(E.s)->lanes, E.s);
    close_edge(&E);
    for (int i = 0; i < NITEMS; i++) {
        if (!held[i]) continue;
        VF_CHECK_MSG(intact(held[i], i), "held item %d damaged after the edge closed", i);
        if (kept) kept[i] = held[i];
        else vf_item_free(held[i]);
    }
}

VF_TEST(freed_items_all_go_through_slots)
{
    unsetenv("VFLOW_EDGE_SHM");
    int64_t placed = 0, fallback = 0;
    run(1, &placed, &fallback, NULL);
    VF_CHECK_EQ_INT(placed, NITEMS);
    VF_CHECK_EQ_INT(fallback, 0);
    VF_CHECK_EQ_INT(leftovers(), 0);
    /* one slot's pages at least; at most the plan's capacity + 1 declared items, a page
     * of rounding each, and the segment's header page */
    int64_t item = ELEMS * 4 + 4096; /* the port's declared largest item (open_edge) */
    VF_CHECK_MSG(g_held >= (int64_t)ELEMS * 4 && g_held <= 4096 + (CAP + 1) * (item + 4096), "held %lld bytes",
                 (long long)g_held);
}

VF_TEST(held_items_stay_intact_and_the_rest_go_as_frames)
{
    unsetenv("VFLOW_EDGE_SHM");
    int64_t placed = 0, fallback = 0;
    vf_item *kept[NITEMS] = {0};
    run(NITEMS + 1, &placed, &fallback, kept); /* holds all of them */
    VF_CHECK_MSG(placed >= 1 && placed <= CAP + 1, "placed %lld (slots %d)", (long long)placed, CAP + 1);
    VF_CHECK_MSG(fallback >= NITEMS - (CAP + 1), "fallback %lld", (long long)fallback);
    VF_CHECK_EQ_INT(placed + fallback, NITEMS);
    /* the items outlive the edge; their segment goes with the last of them */
    VF_CHECK_EQ_INT(leftovers(), 0);
    for (int i = 0; i < NITEMS; i++) {
        VF_CHECK_MSG(kept[i] && intact(kept[i], i), "kept item %d", i);
        vf_item_free(kept[i]);
    }
}

VF_TEST(turned_off_sends_plain_frames)
{
    setenv("VFLOW_EDGE_SHM", "0", 1);
    int64_t placed = -1, fallback = -1;
    run(1, &placed, &fallback, NULL);
    VF_CHECK_EQ_INT(placed, 0);
    VF_CHECK_EQ_INT(fallback, 0);
    VF_CHECK_EQ_INT(g_held, 0);
    unsetenv("VFLOW_EDGE_SHM");
}

VF_TEST(forged_descriptors_are_refused)
{
    unsetenv("VFLOW_EDGE_SHM");
    vf_status st = {0};
    vf_shm_rx *rx = NULL;
    vf_frame f;
    /* a descriptor as a sender writes it, then altered */
    vf_edge_desc d = {0};
    d.id = 9;
    d.transport = VF_TR_IPC;
    d.capacity = 2;
    d.max_item_bytes = 1 << 20;
    snprintf(d.name, sizeof d.name, "forged");
    vf_shm_tx *tx = NULL;
    VF_CHECK_EQ_INT(vf_shm_tx_new(&d, &tx, &st), 0);
    VF_CHECK(tx != NULL);
    int64_t shape[1] = {1 << 17};
    vf_tensor *t = vf_tensor_new(VF_DTYPE_F32, 1, shape, &st);
    memset(t->data, 5, vf_tensor_nbytes(t));
    unsigned char desc[1][VF_SHM_DESC_SIZE];
    bool placed = false;
    VF_CHECK_EQ_INT(vf_shm_tx_place(tx, &t, 1, desc, &placed, &st), 0);
    VF_CHECK(placed);
    VF_CHECK(vf_shm_is_desc(desc[0], VF_SHM_DESC_SIZE));
    VF_CHECK(!vf_shm_is_desc(desc[0], VF_SHM_DESC_SIZE - 1));

    unsigned char bad[VF_SHM_DESC_SIZE];
    memcpy(bad, desc[0], sizeof bad);
    uint32_t slot = 77; /* the slot field follows the 8-byte magic */
    memcpy(bad + 8, &slot, 4);
    VF_CHECK_EQ_INT(vf_shm_rx_frame(&rx, "e1", bad, &f, &st), VF_ECORRUPT);
    VF_CHECK_MSG(strstr(st.msg, "edge e1") != NULL, "%s", st.msg);

    memcpy(bad, desc[0], sizeof bad);
    uint64_t len = (uint64_t)1 << 40; /* length, after slot, pad and offset */
    memcpy(bad + 24, &len, 8);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_shm_rx_frame(&rx, "e1", bad, &f, &st), VF_ECORRUPT);

    memcpy(bad, desc[0], sizeof bad);
    memcpy(bad + 40, "/vflow-nosuch", 14); /* the name, after the total */
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_shm_rx_frame(&rx, "e1", bad, &f, &st), VF_ECORRUPT);

    /* the genuine one resolves to the bytes that were copied */
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_shm_rx_frame(&rx, "e1", desc[0], &f, &st), 0);
    VF_CHECK_EQ_INT(f.len, vf_tensor_nbytes(t));
    VF_CHECK(memcmp(f.data, t->data, f.len) == 0);
    f.release((void *)f.data, f.hint);
    vf_shm_rx_free(rx);
    vf_tensor_unref(t);
    vf_shm_tx_free(tx);
    VF_CHECK_EQ_INT(leftovers(), 0);
}

VF_TEST(sweep_removes_a_dead_senders_names)
{
    unsetenv("VFLOW_EDGE_SHM");
    vf_status st = {0};
    vf_edge_desc d = {0};
    d.id = 11;
    d.transport = VF_TR_IPC;
    d.capacity = 1;
    d.max_item_bytes = 1 << 20;
    snprintf(d.name, sizeof d.name, "swept");
    vf_shm_tx *tx = NULL;
    VF_CHECK_EQ_INT(vf_shm_tx_new(&d, &tx, &st), 0);
    int64_t shape[1] = {1 << 16};
    vf_tensor *t = vf_tensor_new(VF_DTYPE_F32, 1, shape, &st);
    memset(t->data, 1, vf_tensor_nbytes(t));
    unsigned char desc[1][VF_SHM_DESC_SIZE];
    bool placed = false;
    VF_CHECK_EQ_INT(vf_shm_tx_place(tx, &t, 1, desc, &placed, &st), 0);
    VF_CHECK(placed);
    VF_CHECK_EQ_INT(leftovers(), 1);
    vf_shm_sweep((long)getpid()); /* what the driver does when a worker exits */
    VF_CHECK_EQ_INT(leftovers(), 0);
    vf_tensor_unref(t);
    vf_shm_tx_free(tx); /* its mapping stayed valid; the name is already gone */
}

int main(void) { return vf_test_main(); }
