/* dit_testlib.h — what the DiT's unit tests (test_dit.c, test_dit_i2v.c) share on the CPU
 * backend: a small config, perturbed parameters, micro-batches made from Philox keys
 * (with text embeddings, conditioning channels and image features when the config takes
 * them), and a runner that takes micro-batches through any split into partitions.
 * Static functions: each test file is its own executable.
 */
#ifndef VF_DIT_TESTLIB_H
#define VF_DIT_TESTLIB_H

#include "tests/vf_test.h"

#include "models/dit.h"
#include "runtime/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline vf_dit_config small_cfg(void)
{
    vf_dit_config c;
    VF_ASSERT(vf_dit_preset("tiny", &c, NULL) == 0);
    c.dim = 32, c.depth = 4, c.heads = 2, c.head_dim = 16, c.ffn = 64, c.z = 4;
    c.text_dim = 16, c.text_len = 8, c.freq_dim = 16;
    return c;
}

/* Init, then perturb every tensor so no gradient is trivially zero (the real init
 * zeroes the head, which would stop all block gradients). */
static inline float *random_params(const vf_dit_layout *l, uint64_t seed)
{
    float *p = malloc(sizeof(float) * (size_t)l->total);
    vf_dit_init(l, seed, 0, l->total, p);
    float *n = malloc(sizeof(float) * (size_t)l->total);
    vf_rng r;
    vf_rng_init(&r, seed, 0, 0, VF_RNG_TEST);
    vf_rng_normal(&r, 0, l->total, n);
    for (int64_t i = 0; i < l->total; i++) p[i] += 0.1f * n[i];
    free(n);
    return p;
}

typedef struct mb {
    vf_dit_batch b;
    float *xt, *t, *target;
    int32_t *text, *len;
    float *temb, *cond, *img; /* text embeddings, conditioning channels, image features
                                 (NULL when the config takes none) */
} mb;

static inline void mb_make(mb *m, const vf_dit_config *c, vf_dit_dims d, uint64_t seed, int first_id)
{
    memset(m, 0, sizeof *m);
    size_t per = (size_t)c->z * d.T * d.H * d.W, n = per * (size_t)d.B;
    m->xt = malloc(n * 4), m->target = malloc(n * 4), m->t = malloc((size_t)d.B * 4);
    m->text = malloc((size_t)d.B * c->text_len * 4), m->len = malloc((size_t)d.B * 4);
    float *x0 = malloc(per * 4);
    vf_dit_rf rf = {seed, 0.0f, 1.0f};
    for (int i = 0; i < d.B; i++) {
        vf_rng r;
        vf_rng_init(&r, seed, 0, (uint64_t)(first_id + i), VF_RNG_TEST);
        vf_rng_normal(&r, 0, (int64_t)per, x0);
        m->t[i] = vf_dit_rf_sample(&rf, 3, (uint64_t)(first_id + i), (int64_t)per, x0,
                                   m->xt + per * i, m->target + per * i);
        m->len[i] = (first_id + i) % (c->text_len + 1);
        for (int j = 0; j < c->text_len; j++) m->text[i * c->text_len + j] = 'a' + ((first_id + i) * 7 + j) % 26;
    }
    free(x0);
    m->b.dims = d;
    m->b.x_t = m->xt, m->b.t = m->t, m->b.text = m->text, m->b.text_len = m->len;
    m->b.target = m->target;
    /* the inputs of text embeddings and image-to-video: Philox normals of their own keys */
    vf_rng r;
    int64_t ne = (int64_t)d.B * c->text_len * c->text_dim;
    int64_t nc = (int64_t)(vf_dit_in_dim(c) - c->z) * d.T * d.H * d.W * d.B;
    int64_t ni = (int64_t)d.B * c->img_len * c->img_dim;
    if (c->text_emb) {
        m->temb = malloc(sizeof(float) * (size_t)ne);
        vf_rng_init(&r, seed, 1, (uint64_t)first_id, VF_RNG_TEST);
        vf_rng_normal(&r, 0, ne, m->temb);
        m->b.text_emb = m->temb;
    }
    if (nc > 0) {
        m->cond = malloc(sizeof(float) * (size_t)nc);
        vf_rng_init(&r, seed, 2, (uint64_t)first_id, VF_RNG_TEST);
        vf_rng_normal(&r, 0, nc, m->cond);
        m->b.cond = m->cond;
    }
    if (c->img_dim > 0) {
        m->img = malloc(sizeof(float) * (size_t)ni);
        vf_rng_init(&r, seed, 3, (uint64_t)first_id, VF_RNG_TEST);
        vf_rng_normal(&r, 0, ni, m->img);
        m->b.img = m->img;
    }
}

static inline void mb_free(mb *m)
{
    free(m->xt), free(m->t), free(m->target), free(m->text), free(m->len);
    free(m->temb), free(m->cond), free(m->img);
}

/* Rows of the time embedding: a sample's, or a token's (t_tokens). */
static inline int64_t time_rows(const vf_dit_config *c, const vf_dit_dims *d)
{
    return c->t_tokens ? d->B * vf_dit_tokens(c, d) : d->B;
}

static inline void xfer_alloc(vf_dit_xfer *x, const vf_dit_config *c, const vf_dit_dims *d)
{
    int64_t L = vf_dit_tokens(c, d), R = time_rows(c, d);
    x->x = calloc((size_t)(d->B * L * c->dim), 4);
    x->e = calloc((size_t)(R * c->dim), 4);
    x->e0 = calloc((size_t)(6 * R * c->dim), 4);
    x->ctx = calloc((size_t)(d->B * vf_dit_ctx_len(c) * c->dim), 4);
}

static inline void xfer_copy(vf_dit_xfer *dst, const vf_dit_xfer *src, const vf_dit_config *c,
                      const vf_dit_dims *d)
{
    int64_t L = vf_dit_tokens(c, d), R = time_rows(c, d);
    memcpy(dst->x, src->x, (size_t)(d->B * L * c->dim) * 4);
    memcpy(dst->e, src->e, (size_t)(R * c->dim) * 4);
    memcpy(dst->e0, src->e0, (size_t)(6 * R * c->dim) * 4);
    memcpy(dst->ctx, src->ctx, (size_t)(d->B * vf_dit_ctx_len(c) * c->dim) * 4);
}

static inline void xfer_free(vf_dit_xfer *x)
{
    free(x->x), free(x->e), free(x->e0), free(x->ctx);
}

/* Runs micro-batches mbs[0..M) through the partitions given by block boundaries
 * bounds[0..P] (bounds[0] = 0, bounds[P] = depth): all forwards first, then all
 * backwards, so M saved stores per partition are in flight at once (as in 1F1B) and
 * micro-batches may differ in geometry. grads (zeroed by the caller) accumulate; losses[m]
 * receives each loss. */
static inline void run_parts(const vf_dit_layout *l, const int *bounds, int P, int recompute,
                      float *params, float *grads, mb *mbs, int M, float grad_scale,
                      double *losses)
{
    vf_status st = {0};
    const vf_dit_config *c = &l->cfg;
    vf_backend *be = vf_backend_cpu();
    vf_dit_dims max = mbs[0].b.dims;
    for (int m = 1; m < M; m++) {
        if (mbs[m].b.dims.B > max.B) max.B = mbs[m].b.dims.B;
        if (mbs[m].b.dims.T > max.T) max.T = mbs[m].b.dims.T;
        if (mbs[m].b.dims.H > max.H) max.H = mbs[m].b.dims.H;
        if (mbs[m].b.dims.W > max.W) max.W = mbs[m].b.dims.W;
    }
    vf_dit_part *pp[8];
    vf_dit_saved *sv[8][4];
    vf_dit_xfer fx[8][4], gx[8][4];
    for (int i = 0; i < P; i++) {
        int64_t off, n;
        vf_dit_layout_range(l, bounds[i], bounds[i + 1], &off, &n);
        int rc = vf_dit_part_new(be, l, bounds[i], bounds[i + 1], &max, recompute, params + off,
                                 grads + off, &pp[i], &st);
        VF_CHECK_MSG(rc == 0, "%s", st.msg);
        for (int m = 0; m < M; m++) {
            VF_CHECK(vf_dit_saved_new(pp[i], &sv[i][m], &st) == 0);
            xfer_alloc(&fx[i][m], c, &max);
            xfer_alloc(&gx[i][m], c, &max);
        }
    }
    for (int m = 0; m < M; m++) {
        for (int i = 0; i < P; i++) {
            int rc = vf_dit_part_forward(pp[i], &mbs[m].b, i ? &fx[i - 1][m] : NULL, &fx[i][m],
                                         sv[i][m], &st);
            VF_CHECK_MSG(rc == 0, "%s", st.msg);
        }
        int rc = vf_dit_part_loss(pp[P - 1], &mbs[m].b, sv[P - 1][m], grad_scale, &losses[m], &st);
        VF_CHECK_MSG(rc == 0, "%s", st.msg);
    }
    for (int m = 0; m < M; m++) {
        for (int i = P - 1; i >= 0; i--) {
            if (i < P - 1) xfer_copy(&gx[i][m], &gx[i + 1][m], c, &mbs[m].b.dims);
            int rc = vf_dit_part_backward(pp[i], &mbs[m].b, sv[i][m], &gx[i][m], &st);
            VF_CHECK_MSG(rc == 0, "%s", st.msg);
        }
    }
    for (int i = 0; i < P; i++) {
        for (int m = 0; m < M; m++) {
            vf_dit_saved_free(sv[i][m]);
            xfer_free(&fx[i][m]);
            xfer_free(&gx[i][m]);
        }
        vf_dit_part_free(pp[i]);
    }
}

/* The prediction of one forward (one partition) into out. */
static inline int predict(const vf_dit_layout *l, float *params, const vf_dit_batch *b, float *out,
                          size_t n, vf_status *st)
{
    vf_backend *be = vf_backend_cpu();
    vf_dit_part *p = NULL;
    vf_dit_saved *sv = NULL;
    int rc = vf_dit_part_new(be, l, 0, l->cfg.depth, &b->dims, false, params, NULL, &p, st);
    if (rc == 0) rc = vf_dit_saved_new(p, &sv, st);
    if (rc == 0) rc = vf_dit_part_forward(p, b, NULL, NULL, sv, st);
    if (rc == 0) memcpy(out, vf_dit_saved_pred(sv), n * sizeof(float));
    vf_dit_saved_free(sv);
    vf_dit_part_free(p);
    return rc;
}

static inline double loss_at(const vf_dit_layout *l, float *params, mb *m)
{
    float *g = calloc((size_t)l->total, 4);
    double loss;
    int one[2] = {0, l->cfg.depth};
    run_parts(l, one, 1, false, params, g, m, 1, 1.0f, &loss);
    free(g);
    return loss;
}

/* The 4-point central difference of the loss along element i of params (step 3e-2·max(1,
 * |w|), f64 arithmetic on the f32 model, the step actually taken in f32), against the
 * analytic gradient g; prints both and returns the relative error (over max(|g|, 1e-3)). */
static inline double fd_rel_error(const vf_dit_layout *l, float *params, mb *m, int64_t i, float g,
                                  const char *name)
{
    float w0 = params[i];
    double h = 3e-2 * fmax(1.0, fabs(w0)), f[4];
    const double off[4] = {-2, -1, 1, 2};
    for (int j = 0; j < 4; j++) {
        params[i] = (float)(w0 + off[j] * h);
        f[j] = loss_at(l, params, m);
    }
    params[i] = w0;
    double hh = ((double)(float)(w0 + h) - (double)(float)(w0 - h)) / 2;
    double fd = (8 * (f[2] - f[1]) - (f[3] - f[0])) / (12 * hh);
    double err = fabs(fd - g) / fmax(fabs(g), 1e-3);
    fprintf(stderr, "  %-38s grad %+.6e  fd %+.6e  rel %.2e\n", name, g, fd, err);
    return err;
}

/* The two micro-batches mbs[0..2) (grad_scale 1/2) through each split splits[s] (s + 1
 * partitions: bounds 0 .. depth), with and without recompute: loss and every gradient
 * element bitwise equal to ref / ref_loss (one partition without recompute, splits[0]). */
static inline void check_splits_bitwise(const vf_dit_layout *l, float *params, mb *mbs, const int (*splits)[4],
                                        int nsplit, const float *ref, const double *ref_loss)
{
    for (int s = 0; s < nsplit; s++) {
        for (int r = 0; r < 3; r++) { /* vf_dit_recompute: none, keeping the attention, all */
            if (s == 0 && r == 0) continue;
            float *g = calloc((size_t)l->total, 4);
            double loss[2];
            run_parts(l, splits[s], s + 1, r, params, g, mbs, 2, 0.5f, loss);
            VF_CHECK_MSG(memcmp(loss, ref_loss, sizeof loss) == 0, "P=%d recompute=%d loss %.17g vs %.17g",
                         s + 1, r, loss[0], ref_loss[0]);
            int64_t diff = 0, first = -1;
            for (int64_t i = 0; i < l->total; i++)
                if (memcmp(&g[i], &ref[i], 4) != 0) diff++, first = first < 0 ? i : first;
            VF_CHECK_MSG(diff == 0, "P=%d recompute=%d: %lld gradient elements differ (first %lld)",
                         s + 1, r, (long long)diff, (long long)first);
            free(g);
        }
    }
}

#endif /* VF_DIT_TESTLIB_H */
