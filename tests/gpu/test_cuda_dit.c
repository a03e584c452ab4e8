/* test_cuda_dit.c — the DiT (models/dit) on the CUDA backend against the CPU backend:
 * one training micro-batch (forward, rectified-flow loss, backward) from the same
 * bf16-rounded weights and inputs.
 *
 * vflow-test: labels=gpu timeout=600
 *
 * What the op test cannot see: the ops composed as the model calls them (in-place RoPE
 * and gated residuals, strided weight pointers into the flat vector, the text-token
 * upload through i32, recompute, partition boundaries). Criteria: loss within 2e-2
 * relative; the whole gradient vector within 5e-2 relative (bf16 activations and
 * gradients through every block; a wrong op or index is off by O(1)); on the GPU,
 * 2 partitions and recompute agree with 1 partition to 1e-3 (the kernels are
 * deterministic, so only the partition plumbing could make them differ). Two shapes: the
 * tiny preset (head dim 16, the padded attention path) and a head dim 64 model (the fast
 * path). With VFLOW_CUDA_GRAPHS=1 three steps on one partition (each block's passes run
 * eagerly, then recorded, then replayed as CUDA graphs) give the eager step's gradients
 * bit for bit, with and without recompute. A third case has a time embedding per token
 * (t_tokens, TI2V's first frame at t = 0 and out of the loss). Exits 77 without CUDA or a
 * usable device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/vf_test.h"
#include "tests/gpu/gpu_test_main.h"

#include "kernels/ops.h"
#include "models/dit.h"
#include "runtime/philox.h"
#ifdef VFLOW_HAVE_CUDA
#include "kernels/cuda/graph.h"
#endif

static vf_backend *G;

static float bfr(float x) { return vf_bf16_to_f32(vf_f32_to_bf16(x)); }

typedef struct inputs {
    vf_dit_dims d;
    float *xt, *target, *t;
    int32_t *text, *len;
    int64_t nlat;
    float *ttok; /* (B, L) token times of a t_tokens model (frame 0 at 0), else NULL */
} inputs;

static void inputs_make(inputs *in, const vf_dit_config *c, vf_dit_dims d)
{
    memset(in, 0, sizeof *in);
    in->d = d;
    const int64_t per = (int64_t)c->z * d.T * d.H * d.W;
    in->nlat = per * d.B;
    in->xt = malloc(sizeof(float) * (size_t)in->nlat);
    in->target = malloc(sizeof(float) * (size_t)in->nlat);
    in->t = malloc(sizeof(float) * (size_t)d.B);
    in->text = malloc(sizeof(int32_t) * (size_t)(d.B * c->text_len));
    in->len = malloc(sizeof(int32_t) * (size_t)d.B);
    float *x0 = malloc(sizeof(float) * (size_t)per);
    vf_dit_rf rf = {7, 0.0f, 1.0f};
    for (int i = 0; i < d.B; i++) {
        vf_rng r;
        vf_rng_init(&r, 7, 0, (uint64_t)i, VF_RNG_TEST);
        vf_rng_normal(&r, 0, per, x0);
        in->t[i] = vf_dit_rf_sample(&rf, 1, (uint64_t)i, per, x0, in->xt + per * i, in->target + per * i);
        in->len[i] = (i * 11 + 5) % (c->text_len + 1);
        for (int j = 0; j < c->text_len; j++) in->text[i * c->text_len + j] = 'a' + (i * 7 + j * 3) % 26;
    }
    for (int64_t i = 0; i < in->nlat; i++) in->xt[i] = bfr(in->xt[i]), in->target[i] = bfr(in->target[i]);
    free(x0);
    if (c->t_tokens) { /* TI2V's times: the first frame's tokens at 0, the rest at the sample's t */
        const int64_t L = vf_dit_tokens(c, &d), frame = (int64_t)(d.H / c->patch[1]) * (d.W / c->patch[2]);
        in->ttok = malloc(sizeof(float) * (size_t)(d.B * L));
        for (int64_t r = 0; r < d.B * L; r++) in->ttok[r] = r % L < frame ? 0.0f : in->t[r / L];
    }
}

static void inputs_free(inputs *in)
{
    free(in->xt), free(in->target), free(in->t), free(in->text), free(in->len), free(in->ttok);
}

/* One micro-batch through partitions `bounds` on backend be; params (host f32, bf16
 * values) in, flat gradient (host f32) and loss out. */
static int run(vf_backend *be, const vf_dit_layout *l, const int *bounds, int P, bool recompute, const float *params,
               const inputs *in, float *grads_out, double *loss)
{
    vf_status st = {0};
    const vf_dit_config *c = &l->cfg;
    const size_t as = vf_dtype_size(be->act_dtype), gs = vf_dtype_size(be->grad_dtype);
    int rc = 0;
    void *wp = be->alloc(be, (size_t)l->total * as, &st), *gp = be->alloc(be, (size_t)l->total * gs, &st);
    void *xt = be->alloc(be, (size_t)in->nlat * as, &st), *tg = be->alloc(be, (size_t)in->nlat * as, &st);
    if (!wp || !gp || !xt || !tg) return -1;
    be->upload(be, wp, params, l->total, be->act_dtype);
    be->memset0(be, gp, (size_t)l->total * gs);
    be->upload(be, xt, in->xt, in->nlat, be->act_dtype);
    be->upload(be, tg, in->target, in->nlat, be->act_dtype);
    vf_dit_batch b = {.dims = in->d, .x_t = xt, .t = in->t, .text = in->text, .text_len = in->len, .target = tg,
                       .t_tok = in->ttok, .skip_frames = in->ttok ? 1 : 0};
    vf_dit_part *pp[4] = {0};
    vf_dit_saved *sv[4] = {0};
    vf_dit_xfer fx[4], gx[4];
    memset(fx, 0, sizeof fx), memset(gx, 0, sizeof gx);
    const int64_t L = vf_dit_tokens(c, &in->d), B = in->d.B, D = c->dim, Lt = c->text_len;
    const int64_t R = c->t_tokens ? B * L : B; /* rows of the time embedding */
    for (int i = 0; i < P && rc == 0; i++) {
        int64_t off, n;
        vf_dit_layout_range(l, bounds[i], bounds[i + 1], &off, &n);
        rc = vf_dit_part_new(be, l, bounds[i], bounds[i + 1], &in->d, recompute, (char *)wp + off * as,
                             (char *)gp + off * gs, &pp[i], &st);
        if (rc == 0) rc = vf_dit_saved_new(pp[i], &sv[i], &st);
        fx[i].x = be->alloc(be, (size_t)(B * L * D) * as, &st), fx[i].e = be->alloc(be, (size_t)(R * D) * as, &st);
        fx[i].e0 = be->alloc(be, (size_t)(6 * R * D) * as, &st), fx[i].ctx = be->alloc(be, (size_t)(B * Lt * D) * as, &st);
        gx[i].x = be->alloc(be, (size_t)(B * L * D) * gs, &st), gx[i].e = be->alloc(be, (size_t)(R * D) * gs, &st);
        gx[i].e0 = be->alloc(be, (size_t)(6 * R * D) * gs, &st), gx[i].ctx = be->alloc(be, (size_t)(B * Lt * D) * gs, &st);
    }
    for (int i = 0; i < P && rc == 0; i++) rc = vf_dit_part_forward(pp[i], &b, i ? &fx[i - 1] : NULL, &fx[i], sv[i], &st);
    if (rc == 0) rc = vf_dit_part_loss(pp[P - 1], &b, sv[P - 1], 1.0f, loss, &st);
    for (int i = P - 1; i >= 0 && rc == 0; i--) {
        if (i < P - 1) { /* what partition i+1 hands back */
            be->copy(be, gx[i].x, gx[i + 1].x, (size_t)(B * L * D) * gs);
            be->copy(be, gx[i].e, gx[i + 1].e, (size_t)(R * D) * gs);
            be->copy(be, gx[i].e0, gx[i + 1].e0, (size_t)(6 * R * D) * gs);
            be->copy(be, gx[i].ctx, gx[i + 1].ctx, (size_t)(B * Lt * D) * gs);
        }
        rc = vf_dit_part_backward(pp[i], &b, sv[i], &gx[i], &st);
    }
    if (rc == 0) rc = be->sync(be, &st);
    if (rc == 0) be->download(be, grads_out, gp, l->total, be->grad_dtype);
    if (rc < 0) fprintf(stderr, "dit on %s: %s\n", be->name, st.msg);
    for (int i = 0; i < P; i++) {
        vf_dit_saved_free(sv[i]);
        vf_dit_part_free(pp[i]);
        void *bufs[8] = {fx[i].x, fx[i].e, fx[i].e0, fx[i].ctx, gx[i].x, gx[i].e, gx[i].e0, gx[i].ctx};
        for (int k = 0; k < 8; k++)
            if (bufs[k]) be->free(be, bufs[k]);
    }
    be->free(be, wp), be->free(be, gp), be->free(be, xt), be->free(be, tg);
    return rc;
}

/* nsteps training micro-batches through one partition made once (its buffers, hence the
 * recorded units' keys, stay the same): the gradient of step s (zeroed before each) into
 * grads[s], the losses into loss[s]. */
static int run_steps(vf_backend *be, const vf_dit_layout *l, bool recompute, const float *params, const inputs *in,
                     int nsteps, float **grads, double *loss)
{
    vf_status st = {0};
    const vf_dit_config *c = &l->cfg;
    const size_t as = vf_dtype_size(be->act_dtype), gs = vf_dtype_size(be->grad_dtype);
    const int64_t L = vf_dit_tokens(c, &in->d), B = in->d.B, D = c->dim, Lt = c->text_len;
    const int64_t R = c->t_tokens ? B * L : B; /* rows of the time embedding */
    int rc = -1;
    vf_dit_part *p = NULL;
    vf_dit_saved *sv = NULL;
    vf_dit_xfer gx = {0};
    void *wp = be->alloc(be, (size_t)l->total * as, &st), *gp = be->alloc(be, (size_t)l->total * gs, &st);
    void *xt = be->alloc(be, (size_t)in->nlat * as, &st), *tg = be->alloc(be, (size_t)in->nlat * as, &st);
    gx.x = be->alloc(be, (size_t)(B * L * D) * gs, &st), gx.e = be->alloc(be, (size_t)(R * D) * gs, &st);
    gx.e0 = be->alloc(be, (size_t)(6 * R * D) * gs, &st), gx.ctx = be->alloc(be, (size_t)(B * Lt * D) * gs, &st);
    if (!wp || !gp || !xt || !tg || !gx.x || !gx.e || !gx.e0 || !gx.ctx) goto done;
    be->upload(be, wp, params, l->total, be->act_dtype);
    be->upload(be, xt, in->xt, in->nlat, be->act_dtype);
    be->upload(be, tg, in->target, in->nlat, be->act_dtype);
    vf_dit_batch b = {.dims = in->d, .x_t = xt, .t = in->t, .text = in->text, .text_len = in->len, .target = tg,
                       .t_tok = in->ttok, .skip_frames = in->ttok ? 1 : 0};
    rc = vf_dit_part_new(be, l, 0, c->depth, &in->d, recompute, wp, gp, &p, &st);
    if (rc == 0) rc = vf_dit_saved_new(p, &sv, &st);
    for (int s = 0; s < nsteps && rc == 0; s++) {
        be->memset0(be, gp, (size_t)l->total * gs);
        rc = vf_dit_part_forward(p, &b, NULL, NULL, sv, &st);
        if (rc == 0) rc = vf_dit_part_loss(p, &b, sv, 1.0f, &loss[s], &st);
        if (rc == 0) rc = vf_dit_part_backward(p, &b, sv, &gx, &st);
        if (rc == 0) rc = be->sync(be, &st);
        if (rc == 0) be->download(be, grads[s], gp, l->total, be->grad_dtype);
    }
    if (rc < 0) fprintf(stderr, "dit steps on %s: %s\n", be->name, st.msg);
done:
    vf_dit_saved_free(sv);
    vf_dit_part_free(p);
    void *bufs[8] = {wp, gp, xt, tg, gx.x, gx.e, gx.e0, gx.ctx};
    for (int k = 0; k < 8; k++)
        if (bufs[k]) be->free(be, bufs[k]);
    return rc;
}

static double rel(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void worst_tensors(const vf_dit_layout *l, const float *g, const float *c)
{
    int wi[3] = {-1, -1, -1};
    double wv[3] = {0, 0, 0};
    for (int i = 0; i < l->n; i++) {
        double r = rel(g + l->t[i].offset, c + l->t[i].offset, l->t[i].numel);
        for (int k = 0; k < 3; k++)
            if (r > wv[k] || wi[k] < 0) {
                for (int j = 2; j > k; j--) wv[j] = wv[j - 1], wi[j] = wi[j - 1];
                wv[k] = r, wi[k] = i;
                break;
            }
    }
    for (int k = 0; k < 3; k++)
        if (wi[k] >= 0) fprintf(stderr, "    worst %d: %-40s rel %.3e\n", k + 1, l->t[wi[k]].name, wv[k]);
}

static void model_case(vf_dit_config c, vf_dit_dims d)
{
    vf_status st = {0};
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_config_check(&c, &st) == 0 && vf_dit_layout_new(&c, &l, &st) == 0);
    if (!l) return;
    float *p = malloc(sizeof(float) * (size_t)l->total);
    vf_dit_init(l, 5, 0, l->total, p);
    { /* perturb: at init the head weight is 0 and no gradient would reach the blocks */
        float *n = malloc(sizeof(float) * (size_t)l->total);
        vf_rng r;
        vf_rng_init(&r, 5, 0, 1, VF_RNG_TEST);
        vf_rng_normal(&r, 0, l->total, n);
        for (int64_t i = 0; i < l->total; i++) p[i] = bfr(p[i] + 0.05f * n[i]);
        free(n);
    }
    inputs in;
    inputs_make(&in, &c, d);
    float *gc = calloc((size_t)l->total, 4), *gg = calloc((size_t)l->total, 4), *g2 = calloc((size_t)l->total, 4);
    double lc = 0, lg = 0, l2 = 0;
    const int one[2] = {0, c.depth}, two[3] = {0, c.depth / 2, c.depth};
    VF_CHECK(run(vf_backend_cpu(), l, one, 1, false, p, &in, gc, &lc) == 0);
    VF_CHECK(run(G, l, one, 1, false, p, &in, gg, &lg) == 0);
    double rl = fabs(lg - lc) / fabs(lc), rg = rel(gg, gc, l->total);
    fprintf(stderr, "  dim %d head_dim %d: loss gpu %.6f cpu %.6f (rel %.2e); grads rel %.3e\n", c.dim, c.head_dim, lg,
            lc, rl, rg);
    worst_tensors(l, gg, gc);
    VF_CHECK(isfinite(lg) && rl <= 2e-2);
    VF_CHECK(rg <= 5e-2);
    VF_CHECK(run(G, l, two, 2, false, p, &in, g2, &l2) == 0);
    double r2 = rel(g2, gg, l->total);
    fprintf(stderr, "  gpu 2 partitions vs 1: loss %.6f vs %.6f, grads rel %.3e\n", l2, lg, r2);
    VF_CHECK(fabs(l2 - lg) <= 1e-3 * fabs(lg) && r2 <= 1e-3);
    VF_CHECK(run(G, l, two, 2, true, p, &in, g2, &l2) == 0);
    r2 = rel(g2, gg, l->total);
    fprintf(stderr, "  gpu 2 partitions + recompute vs 1: grads rel %.3e\n", r2);
    VF_CHECK(fabs(l2 - lg) <= 1e-3 * fabs(lg) && r2 <= 1e-3);
    /* recorded units: eager, recorded, replayed, each the eager step's bits */
    for (int rcmp = 0; rcmp < 2; rcmp++) {
        float *gs[3];
        double ls[3];
        for (int k = 0; k < 3; k++) gs[k] = calloc((size_t)l->total, 4);
        VF_CHECK(run(G, l, one, 1, rcmp, p, &in, g2, &l2) == 0); /* graphs off */
        int64_t rec0 = 0, rep0 = 0, rec1 = 0, rep1 = 0;
#ifdef VFLOW_HAVE_CUDA
        if (G->device.kind == VF_DEV_CUDA) vf_cuda_graph_counts(&rec0, &rep0);
#endif
        setenv("VFLOW_CUDA_GRAPHS", "1", 1);
        VF_CHECK(run_steps(G, l, rcmp, p, &in, 3, gs, ls) == 0);
        unsetenv("VFLOW_CUDA_GRAPHS");
#ifdef VFLOW_HAVE_CUDA
        if (G->device.kind == VF_DEV_CUDA) vf_cuda_graph_counts(&rec1, &rep1);
#endif
        fprintf(stderr, "  recompute %d, VFLOW_CUDA_GRAPHS=1: units recorded %lld, replayed %lld; losses %.9g %.9g %.9g"
                " (eager %.9g); grads rel to eager %.3e %.3e %.3e\n", rcmp, (long long)(rec1 - rec0),
                (long long)(rep1 - rep0), ls[0], ls[1], ls[2], l2, rel(gs[0], g2, l->total), rel(gs[1], g2, l->total),
                rel(gs[2], g2, l->total));
        for (int k = 0; k < 3; k++)
            VF_CHECK_MSG(memcmp(gs[k], g2, sizeof(float) * (size_t)l->total) == 0 && ls[k] == l2,
                         "recompute %d, step %d (%s): not the eager step's bits", rcmp, k,
                         k == 0 ? "eager" : k == 1 ? "recorded" : "replayed");
#ifdef VFLOW_HAVE_CUDA
        /* every block's forward and backward (and recompute) recorded once and replayed once */
        if (G->device.kind == VF_DEV_CUDA)
            VF_CHECK_MSG(rec1 - rec0 == (rcmp ? 3 : 2) * c.depth && rep1 - rep0 == rec1 - rec0,
                         "%lld units recorded, %lld replayed, for %d blocks", (long long)(rec1 - rec0),
                         (long long)(rep1 - rep0), c.depth);
#endif
        for (int k = 0; k < 3; k++) free(gs[k]);
    }
    free(p), free(gc), free(gg), free(g2);
    inputs_free(&in);
    vf_dit_layout_free(l);
}

VF_TEST(dit_tiny)
{
    vf_status st = {0};
    vf_dit_config c;
    VF_CHECK(vf_dit_preset("tiny", &c, &st) == 0);
    model_case(c, vf_dit_dims_of(&c, 2, 4, 8, 8));
}

VF_TEST(dit_head64)
{
    vf_status st = {0};
    vf_dit_config c;
    VF_CHECK(vf_dit_preset("tiny", &c, &st) == 0);
    c.dim = 128, c.heads = 2, c.head_dim = 64, c.ffn = 256, c.text_len = 40;
    model_case(c, vf_dit_dims_of(&c, 1, 3, 16, 12));
}

/* The time embedding per token (Wan 2.2 TI2V): e and e0 a row a token, the first frame's
 * tokens at t = 0 and out of the loss. */
VF_TEST(dit_tiny_token_time)
{
    vf_status st = {0};
    vf_dit_config c;
    VF_CHECK(vf_dit_preset("tiny", &c, &st) == 0);
    c.t_tokens = 1;
    model_case(c, vf_dit_dims_of(&c, 2, 4, 8, 8));
}

int main(void) { return vf_gpu_test_main(&G, NULL); }
