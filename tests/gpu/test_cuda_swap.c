/* test_cuda_swap.c — block swap (models/dit.h vf_dit_part_set_swap) on the GPU: a LoRA
 * partition whose last K blocks' base streams from pinned host memory through the ring on
 * the copy stream gives the adapter gradients and losses of the same partition with its
 * whole base on the device, bit for bit (the kernels are deterministic and the bytes a
 * block reads are the same; a copy that lands late, or a ring buffer overwritten while a
 * block still reads it, changes them). Two micro-batches a step, so each ring buffer is
 * refilled across passes; K ∈ {1, 2, 3} of 4 blocks; with and without recompute.
 * Activation offload (vf_dit_part_set_offload) likewise: with recompute (keeping the
 * self-attention's result or not), block inputs copied device to host on the copy stream
 * after each block's forward and back before its backward, alone and with K = 2 swapped,
 * give the same bits. With the base in FP8 (vf_dit_fp8_new_swap) the swapped blocks' FP8
 * bytes stream from the base's host copy: the same bits as the FP8 base resident.
 * A full fine-tune (no LoRA, vf_dit_part_set_swap_grads): the swapped blocks' gradients
 * come into the ring with their weights in each backward and go back to pinned host
 * memory after it, so the second micro-batch adds to what the first left on the host:
 * every weight gradient the same bits as with the whole partition resident, K ∈ {1, 2, 3},
 * with and without recompute.
 *
 * vflow-test: labels=gpu timeout=300
 *
 * VFLOW_GPU_TEST_ON_CPU=1 runs it on the CPU backend (the copy queue's thread), a check
 * of the test itself on a machine without a GPU. Exits 77 without CUDA or a device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/vf_test.h"
#include "tests/gpu/gpu_test_main.h"

#include "kernels/ops.h"
#include "models/dit.h"
#include "models/dit_fp8.h"
#include "models/dit_lora.h"
#include "runtime/philox.h"

static vf_backend *G;

static float *normal(int64_t n, uint64_t seed, float sd)
{
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    vf_rng r;
    vf_rng_init(&r, seed, 0, 0, VF_RNG_TEST);
    vf_rng_normal(&r, 0, n, p);
    for (int64_t i = 0; i < n; i++) p[i] = vf_bf16_to_f32(vf_f32_to_bf16(p[i] * sd));
    return p;
}

typedef struct setup {
    vf_dit_config c;
    vf_dit_layout *l;
    vf_dit_lora *lo;
    vf_dit_dims d;
    float *w, *lw;                    /* host f32: the base, the adapters */
    float *xt[2], *tg[2], t[2][2];
    int32_t text[2][2 * 8], len[2][2];
} setup;

/* Two micro-batches of 2 through a partition of all blocks, K swapped (0: none),
 * recompute a vf_dit_recompute, activations offloaded or not, the base in FP8 or not:
 * the adapters' accumulated gradient (host f32) into g, the losses into loss. full: no
 * adapters, every weight trained: the weights' gradient (layout order, l->total) into g. */
static int run(setup *s, int K, int recompute, bool offload, bool fp8, bool full, float *g, double *loss)
{
    vf_status st = {0};
    vf_backend *be = G;
    const size_t as = vf_dtype_size(be->act_dtype), gs = vf_dtype_size(be->grad_dtype);
    const int64_t total = s->l->total, lt = s->lo->l->total, nlat = 2 * (int64_t)s->c.z * s->d.T * s->d.H * s->d.W;
    int64_t hole = 0, hole_n = 0, blk_n = 0;
    if (K) vf_dit_swap_split(s->l, 0, s->c.depth, K, &hole, &hole_n, &blk_n);
    void *wp = be->alloc(be, (size_t)(total - hole_n) * as, &st), *host = NULL, *ghost = NULL;
    /* full: lg holds the weights' gradients, packed around the hole as wp */
    const int64_t gn = full ? total - hole_n : lt;
    void *lp = be->alloc(be, (size_t)lt * as, &st), *lg = be->alloc(be, (size_t)gn * gs, &st);
    void *xt = be->alloc(be, (size_t)nlat * as, &st), *tg = be->alloc(be, (size_t)nlat * as, &st);
    vf_dit_part *p = NULL;
    vf_dit_saved *sv = NULL;
    vf_dit_fp8 *fb = NULL;
    int rc = -1;
    if (!wp || !lp || !lg || !xt || !tg) goto done;
    if (fp8) { /* the FP8 base, quantised at load from the same f32 weights */
        float *tmp = malloc(sizeof(float) * (size_t)total);
        rc = tmp ? vf_dit_fp8_new_swap(be, s->l, 0, total, s->c.depth, K, &fb, &st) : -1;
        for (int i = 0; i < s->l->n && rc == 0; i++) {
            const vf_dit_tensor *t = &s->l->t[i];
            if (!t->numel) continue;
            memcpy(tmp + t->offset, s->w + t->offset, sizeof(float) * (size_t)t->numel);
            rc = vf_dit_fp8_put(fb, i, tmp + t->offset, &st);
        }
        free(tmp);
        if (rc) goto done;
    }
    /* the resident base packed around the hole; the hole's blocks on the host */
    be->upload(be, wp, s->w, hole ? hole : total, be->act_dtype);
    if (K) {
        if (!(host = be->alloc_pinned(be, (size_t)hole_n * as, &st))) goto done;
        if (full && !(ghost = be->alloc_pinned(be, (size_t)hole_n * gs, &st))) goto done;
        if (ghost) memset(ghost, 0, (size_t)hole_n * gs);
        vf_backend_cpu()->upload(vf_backend_cpu(), host, s->w + hole, hole_n, be->act_dtype);
        if (total > hole + hole_n)
            be->upload(be, (char *)wp + (size_t)hole * as, s->w + hole + hole_n, total - hole - hole_n, be->act_dtype);
    }
    be->upload(be, lp, s->lw, lt, be->act_dtype);
    be->memset0(be, lg, (size_t)gn * gs);
    rc = vf_dit_part_new(be, s->l, 0, s->c.depth, &s->d, recompute, wp, full ? lg : NULL, &p, &st);
    if (rc == 0 && !full) rc = vf_dit_part_set_lora(p, s->lo, lp, lg, &st);
    if (rc == 0 && fb) rc = vf_dit_part_set_fp8(p, fb, &st);
    if (rc == 0 && K) rc = vf_dit_part_set_swap_grads(p, K, host, ghost, &st);
    if (rc == 0 && offload) rc = vf_dit_part_set_offload(p, &st);
    if (rc == 0) rc = vf_dit_saved_new(p, &sv, &st);
    for (int m = 0; m < 2 && rc == 0; m++) {
        be->upload(be, xt, s->xt[m], nlat, be->act_dtype);
        be->upload(be, tg, s->tg[m], nlat, be->act_dtype);
        vf_dit_batch b = {.dims = s->d, .x_t = xt, .t = s->t[m], .text = s->text[m], .text_len = s->len[m], .target = tg};
        rc = vf_dit_part_forward(p, &b, NULL, NULL, sv, &st);
        if (rc == 0) rc = vf_dit_part_loss(p, &b, sv, 0.5f, &loss[m], &st);
        if (rc == 0) rc = vf_dit_part_backward(p, &b, sv, NULL, &st);
        if (rc == 0) rc = be->sync(be, &st);
    }
    if (rc == 0 && full) { /* the gradients ever sent back are on the host once the copies end */
        vf_dit_part_swap_drain(p);
        rc = be->sync(be, &st);
    }
    if (rc == 0 && hole_n && full) {
        be->download(be, g, lg, hole, be->grad_dtype);
        vf_backend_cpu()->download(vf_backend_cpu(), g + hole, ghost, hole_n, be->grad_dtype);
        be->download(be, g + hole + hole_n, (char *)lg + (size_t)hole * gs, total - hole - hole_n, be->grad_dtype);
    } else if (rc == 0) {
        be->download(be, g, lg, gn, be->grad_dtype);
    }
done:
    if (rc) fprintf(stderr, "swap K=%d offload=%d on %s: %s\n", K, offload, be->name, st.msg);
    vf_dit_saved_free(sv);
    vf_dit_part_free(p);
    vf_dit_fp8_free(fb);
    if (host) be->free_pinned(be, host);
    if (ghost) be->free_pinned(be, ghost);
    void *bufs[] = {wp, lp, lg, xt, tg};
    for (int i = 0; i < 5; i++)
        if (bufs[i]) be->free(be, bufs[i]);
    return rc;
}

VF_TEST(swap_equals_resident)
{
    setup s;
    memset(&s, 0, sizeof s);
    vf_status st = {0};
    VF_ASSERT(vf_dit_preset("tiny", &s.c, NULL) == 0);
    s.c.depth = 4, s.c.text_len = 8;
    VF_CHECK(vf_dit_layout_new(&s.c, &s.l, &st) == 0);
    vf_dit_lora_cfg lc = {.rank = 4, .alpha = 4, .ntargets = 1};
    snprintf(lc.targets[0], VF_DIT_NAME_MAX, "*");
    VF_CHECK_MSG(vf_dit_lora_new(s.l, &lc, &s.lo, &st) == 0, "%s", st.msg);
    if (!s.l || !s.lo) return;
    s.d = vf_dit_dims_of(&s.c, 2, 1, 8, 8);
    s.w = normal(s.l->total, 11, 0.05f);
    s.lw = normal(s.lo->l->total, 12, 0.05f); /* B off zero: every adapter carries signal */
    int64_t nlat = 2 * (int64_t)s.c.z * s.d.T * s.d.H * s.d.W;
    for (int m = 0; m < 2; m++) {
        s.xt[m] = normal(nlat, 20 + m, 1.0f), s.tg[m] = normal(nlat, 30 + m, 1.0f);
        for (int i = 0; i < 2; i++) {
            s.t[m][i] = 0.25f + 0.5f * i - 0.1f * m;
            s.len[m][i] = 3 + 4 * i;
            for (int j = 0; j < 8; j++) s.text[m][i * 8 + j] = 'a' + (m * 5 + i * 7 + j) % 26;
        }
    }
    const int64_t lt = s.lo->l->total;
    float *ref = calloc((size_t)lt, 4), *got = calloc((size_t)lt, 4);
    for (int rec = 0; rec <= VF_DIT_RECOMPUTE_ALL; rec++) {
        double l0[2], l1[2];
        VF_CHECK(run(&s, 0, rec, false, false, false, ref, l0) == 0);
        /* K swapped blocks (1 … 3), then with recompute activation offload (K 0 and 2) */
        for (int k = 1; k <= 5; k++) {
            const bool off = k > 3;
            const int K = off ? 2 * (k - 4) : k;
            if ((off && !rec) || (!off && rec == VF_DIT_RECOMPUTE_ALL)) continue;
            memset(got, 0, 4 * (size_t)lt);
            VF_CHECK(run(&s, K, rec, off, false, false, got, l1) == 0);
            int64_t diff = 0;
            for (int64_t i = 0; i < lt; i++) diff += memcmp(&got[i], &ref[i], 4) != 0;
            fprintf(stderr, "  K=%d recompute=%d offload=%d: losses %.9g %.9g (resident %.9g %.9g), %lld of %lld "
                    "adapter gradients differ\n", K, rec, off, l1[0], l1[1], l0[0], l0[1], (long long)diff,
                    (long long)lt);
            VF_CHECK(diff == 0 && l1[0] == l0[0] && l1[1] == l0[1]);
        }
    }
    /* the FP8 base: K = 3 swapped, and K = 2 with recompute and offload, against it resident */
    double l0[2], l1[2];
    VF_CHECK(run(&s, 0, 0, false, true, false, ref, l0) == 0);
    for (int k = 0; k < 2; k++) {
        memset(got, 0, 4 * (size_t)lt);
        VF_CHECK(run(&s, 3 - k, k, k == 1, true, false, got, l1) == 0);
        int64_t diff = 0;
        for (int64_t i = 0; i < lt; i++) diff += memcmp(&got[i], &ref[i], 4) != 0;
        fprintf(stderr, "  FP8 base K=%d recompute=%d offload=%d: losses %.9g %.9g (resident %.9g %.9g), %lld of %lld "
                "adapter gradients differ\n", 3 - k, k, k, l1[0], l1[1], l0[0], l0[1], (long long)diff, (long long)lt);
        VF_CHECK(diff == 0 && l1[0] == l0[0] && l1[1] == l0[1]);
    }
    /* a full fine-tune: every weight's gradient, K swapped against none */
    const int64_t tot = s.l->total;
    float *fref = calloc((size_t)tot, 4), *fgot = calloc((size_t)tot, 4);
    for (int rec = 0; rec <= 1; rec++) {
        VF_CHECK(run(&s, 0, rec, false, false, true, fref, l0) == 0);
        for (int K = 1; K <= 3; K++) {
            memset(fgot, 0, 4 * (size_t)tot);
            VF_CHECK(run(&s, K, rec, false, false, true, fgot, l1) == 0);
            int64_t diff = 0, nz = 0;
            for (int64_t i = 0; i < tot; i++) diff += memcmp(&fgot[i], &fref[i], 4) != 0, nz += fref[i] != 0;
            fprintf(stderr, "  full fine-tune K=%d recompute=%d: losses %.9g %.9g (resident %.9g %.9g), %lld of %lld "
                    "weight gradients differ (%lld nonzero)\n", K, rec, l1[0], l1[1], l0[0], l0[1], (long long)diff,
                    (long long)tot, (long long)nz);
            VF_CHECK(diff == 0 && nz > tot / 2 && l1[0] == l0[0] && l1[1] == l0[1]);
        }
    }
    free(fref), free(fgot);
    free(ref), free(got), free(s.w), free(s.lw);
    for (int m = 0; m < 2; m++) free(s.xt[m]), free(s.tg[m]);
    vf_dit_lora_free(s.lo);
    vf_dit_layout_free(s.l);
}

int main(void) { return vf_gpu_test_main(&G, NULL); }
