/* test_dit_ti2v.c — the DiT's time embedding per token (t_tokens, Wan 2.2 TI2V) on the CPU
 * backend.
 *
 *  - whole-model central differences on every tensor the time reaches (time_embedding,
 *    time_projection, the blocks' and the head's modulation tables) and on others, with
 *    the first frame's tokens at t = 0 and every other token at a time of its own;
 *  - the per-token path with every token at its sample's t against the per-sample path
 *    (t_tokens = 0) on the same weights: an independent computation of the same numbers,
 *    to rounding, prediction and every gradient;
 *  - partitions and recompute bitwise equal to one partition;
 *  - a token's time reaches the prediction; explicit times equal to the sample's are
 *    bitwise the batch without times;
 *  - the loss leaves the first frame out (skip_frames): its target does not move the loss or
 *    the gradients, a later frame's does, and the loss is the mean over the later frames of
 *    (prediction − target)², summed here from the prediction;
 *  - the memory figures are the allocations, and what crosses a boundary grows by the tokens;
 *  - the preset wan2.2-ti2v-5b has it, its config text says so, other values are refused.
 * Parity with diffusers' WanTransformer3DModel fed timesteps (B, L) is
 * tests/reference/test_wan_ti2v_diffusers.py.
 */
#include "tests/vf_test.h"
#include "tests/unit/dit_testlib.h"

#include "models/dit.h"

/* Wan 2.2 TI2V in small: text embeddings, a time embedding per token. */
static vf_dit_config ti2v_cfg(void)
{
    vf_dit_config c = small_cfg();
    c.depth = 2;
    c.text_emb = 1;
    c.t_tokens = 1;
    return c;
}

/* Per-token times of m's batch into tt (B·L): the first latent frame's tokens at 0 (the
 * image of TI2V), every later token at a time of its own around its sample's t. */
static void token_times(const vf_dit_config *c, mb *m, float *tt)
{
    const vf_dit_dims *d = &m->b.dims;
    const int64_t L = d->L, frame = (int64_t)(d->H / c->patch[1]) * (d->W / c->patch[2]);
    for (int64_t i = 0; i < d->B; i++)
        for (int64_t l = 0; l < L; l++)
            tt[i * L + l] = l < frame ? 0.0f : m->t[i] * (0.5f + 0.125f * (float)(l % 5));
    m->b.t_tok = tt;
}

static int64_t largest(const vf_dit_layout *l, const float *g, const char *name)
{
    const vf_dit_tensor *t = &l->t[vf_dit_layout_find(l, name)];
    int64_t best = t->offset;
    for (int64_t i = t->offset; i < t->offset + t->numel; i++)
        if (fabs(g[i]) > fabs(g[best])) best = i;
    return best;
}

VF_TEST(ti2v_gradient_matches_finite_differences)
{
    vf_status st = {0};
    vf_dit_config c = ti2v_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 41);
    mb m;
    mb_make(&m, &c, vf_dit_dims_of(&c, 2, 3, 4, 4), 9, 0);
    float *tt = malloc(sizeof(float) * (size_t)(m.b.dims.B * m.b.dims.L));
    token_times(&c, &m, tt);
    m.b.skip_frames = 1; /* the image's frame out of the loss, as TI2V trains */
    float *g = calloc((size_t)l->total, 4);
    double loss;
    int one[2] = {0, 2};
    run_parts(l, one, 1, false, params, g, &m, 1, 1.0f, &loss);
    const char *names[] = {"time_embedding.0.weight", "time_embedding.0.bias", "time_embedding.2.weight",
                           "time_embedding.2.bias", "time_projection.1.weight", "time_projection.1.bias",
                           "blocks.0.modulation", "blocks.1.modulation", "head.modulation",
                           "patch_embedding.weight", "blocks.0.self_attn.q.weight", "blocks.1.ffn.2.weight",
                           "head.head.weight", "text_embedding.0.weight"};
    int ok = 1;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        int64_t best = largest(l, g, names[k]);
        if (!(fd_rel_error(l, params, &m, best, g[best], names[k]) < 1e-3) || g[best] == 0.0f) ok = 0;
    }
    VF_CHECK(ok);
    free(g), free(params), free(tt);
    mb_free(&m);
    vf_dit_layout_free(l);
}

/* Largest |a − b| over max|b|. */
static double rel_max(const float *a, const float *b, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return d / fmax(s, 1e-30);
}

VF_TEST(ti2v_tokens_at_their_samples_time_are_the_per_sample_model)
{
    vf_status st = {0};
    vf_dit_config ct = ti2v_cfg(), cs = ct;
    cs.t_tokens = 0;
    vf_dit_layout *lt = NULL, *ls = NULL;
    VF_CHECK(vf_dit_layout_new(&ct, &lt, &st) == 0 && vf_dit_layout_new(&cs, &ls, &st) == 0);
    VF_CHECK_EQ_INT(lt->total, ls->total); /* the same tensors: only the time's rows differ */
    float *params = random_params(lt, 42);
    mb m[2];
    mb_make(&m[0], &ct, vf_dit_dims_of(&ct, 2, 2, 4, 6), 5, 0);
    mb_make(&m[1], &ct, vf_dit_dims_of(&ct, 1, 3, 4, 4), 5, 10);
    float *gt = calloc((size_t)lt->total, 4), *gs = calloc((size_t)lt->total, 4);
    double losst[2], losss[2];
    int one[2] = {0, 2};
    run_parts(lt, one, 1, false, params, gt, m, 2, 0.5f, losst);
    run_parts(ls, one, 1, false, params, gs, m, 2, 0.5f, losss);
    for (int k = 0; k < 2; k++)
        VF_CHECK_MSG(fabs(losst[k] - losss[k]) <= 1e-6 * losss[k], "loss %d: %.9g vs %.9g", k, losst[k],
                     losss[k]);
    for (int i = 0; i < lt->n; i++) {
        const vf_dit_tensor *t = &lt->t[i];
        if (!t->numel) continue;
        double e = rel_max(gt + t->offset, gs + t->offset, t->numel);
        VF_CHECK_MSG(e < 2e-5, "gradient of %s: relative error %.3g", t->name, e);
    }
    free(gt), free(gs), free(params);
    mb_free(&m[0]), mb_free(&m[1]);
    vf_dit_layout_free(lt), vf_dit_layout_free(ls);
}

VF_TEST(ti2v_partitions_and_recompute_are_bitwise_equal)
{
    vf_status st = {0};
    vf_dit_config c = ti2v_cfg();
    c.depth = 3;
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 43);
    mb mbs[2];
    mb_make(&mbs[0], &c, vf_dit_dims_of(&c, 2, 2, 4, 6), 3, 0);
    mb_make(&mbs[1], &c, vf_dit_dims_of(&c, 1, 1, 4, 4), 3, 10);
    float *tt = malloc(sizeof(float) * 2 * 2 * 6), *tt1 = malloc(sizeof(float) * 4);
    token_times(&c, &mbs[0], tt);
    token_times(&c, &mbs[1], tt1);
    float *ref = calloc((size_t)l->total, 4);
    double ref_loss[2];
    const int splits[3][4] = {{0, 3}, {0, 1, 3}, {0, 1, 2, 3}};
    run_parts(l, splits[0], 1, false, params, ref, mbs, 2, 0.5f, ref_loss);
    check_splits_bitwise(l, params, mbs, splits, 3, ref, ref_loss);
    free(ref), free(params), free(tt), free(tt1);
    mb_free(&mbs[0]), mb_free(&mbs[1]);
    vf_dit_layout_free(l);
}

VF_TEST(ti2v_token_times_reach_the_prediction)
{
    vf_status st = {0};
    vf_dit_config c = ti2v_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 44);
    mb m;
    vf_dit_dims d = vf_dit_dims_of(&c, 2, 2, 4, 4);
    mb_make(&m, &c, d, 6, 0);
    size_t n = (size_t)d.B * c.z * d.T * d.H * d.W;
    float *p0 = malloc(n * 4), *p1 = malloc(n * 4), *p2 = malloc(n * 4);
    float *tt = malloc(sizeof(float) * (size_t)(d.B * d.L));
    VF_CHECK_MSG(predict(l, params, &m.b, p0, n, &st) == 0, "%s", st.msg);
    for (int64_t r = 0; r < d.B * d.L; r++) tt[r] = m.t[r / d.L]; /* the sample's t, spelt out */
    m.b.t_tok = tt;
    VF_CHECK(predict(l, params, &m.b, p1, n, &st) == 0);
    VF_CHECK(memcmp(p0, p1, n * 4) == 0);
    token_times(&c, &m, tt);
    VF_CHECK(predict(l, params, &m.b, p2, n, &st) == 0);
    VF_CHECK_MSG(rel_max(p2, p0, (int64_t)n) > 1e-3, "token times move the prediction by %.3g",
                 rel_max(p2, p0, (int64_t)n));
    free(p0), free(p1), free(p2), free(tt), free(params);
    mb_free(&m);
    vf_dit_layout_free(l);
}

VF_TEST(ti2v_memory_figures_are_the_allocations)
{
    vf_status st = {0};
    vf_dit_config c = ti2v_cfg();
    c.depth = 4;
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    vf_backend *be = vf_backend_cpu();
    vf_dit_dims d = vf_dit_dims_of(&c, 2, 2, 4, 6);
    float *params = calloc((size_t)l->total, 4), *grads = calloc((size_t)l->total, 4);
    int bounds[3][2] = {{0, 1}, {1, 3}, {0, 4}};
    vf_dit_mem per_sample;
    vf_dit_config cs = c;
    cs.t_tokens = 0;
    vf_dit_part_memory(&cs, 0, 4, &d, 0, 4, 4, &per_sample);
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 3; k++) {
            vf_dit_part *p = NULL;
            vf_dit_saved *s = NULL;
            int64_t off, n;
            vf_dit_layout_range(l, bounds[k][0], bounds[k][1], &off, &n);
            VF_CHECK(vf_dit_part_new(be, l, bounds[k][0], bounds[k][1], &d, r, params + off, grads + off, &p,
                                     &st) == 0);
            VF_CHECK(vf_dit_saved_new(p, &s, &st) == 0);
            vf_dit_mem m;
            vf_dit_part_memory(&c, bounds[k][0], bounds[k][1], &d, r, 4, 4, &m);
            VF_CHECK_EQ_INT(m.saved, vf_dit_saved_bytes(s));
            VF_CHECK_EQ_INT(m.workspace, vf_dit_part_workspace_bytes(p));
            vf_dit_saved_free(s);
            vf_dit_part_free(p);
        }
    }
    /* what crosses a boundary: e (B·L, dim) and e0 (6, B·L, dim) instead of a row a sample */
    vf_dit_mem m;
    vf_dit_part_memory(&c, 0, 4, &d, 0, 4, 4, &m);
    VF_CHECK_EQ_INT(m.xfer - per_sample.xfer, 7 * (2 * 12 - 2) * 32 * 4);
    free(params), free(grads);
    vf_dit_layout_free(l);
}

VF_TEST(ti2v_time_field)
{
    vf_status st = {0};
    vf_dit_config c;
    VF_CHECK(vf_dit_preset("wan2.2-ti2v-5b", &c, &st) == 0);
    VF_CHECK_EQ_INT(c.t_tokens, 1);
    char s[512];
    vf_dit_config_str(&c, s, sizeof s);
    VF_CHECK_MSG(strstr(s, " time=token") != NULL, "%s", s);
    VF_CHECK(vf_dit_preset("wan-1.3b", &c, &st) == 0);
    VF_CHECK_EQ_INT(c.t_tokens, 0);
    vf_dit_config_str(&c, s, sizeof s);
    VF_CHECK_MSG(strstr(s, "time=") == NULL, "%s", s);
    c.t_tokens = 2;
    VF_CHECK(vf_dit_config_check(&c, &st) == VF_EINVAL && strstr(st.msg, "t_tokens"));
}

/* Loss and gradients of one partition over m, into *loss and g (zeroed here). */
static void loss_grads(const vf_dit_layout *l, float *params, mb *m, double *loss, float *g)
{
    int one[2] = {0, l->cfg.depth};
    memset(g, 0, sizeof(float) * (size_t)l->total);
    run_parts(l, one, 1, false, params, g, m, 1, 1.0f, loss);
}

VF_TEST(ti2v_loss_leaves_the_first_frame_out)
{
    vf_status st = {0};
    vf_dit_config c = ti2v_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 45);
    vf_dit_dims d = vf_dit_dims_of(&c, 2, 3, 4, 4);
    mb m;
    mb_make(&m, &c, d, 8, 0);
    float *tt = malloc(sizeof(float) * (size_t)(d.B * d.L));
    token_times(&c, &m, tt);
    m.b.skip_frames = 1;
    const int64_t plane = (int64_t)d.H * d.W, per = (int64_t)c.z * d.T * plane;
    size_t n = (size_t)(d.B * per);
    float *g0 = malloc(sizeof(float) * (size_t)l->total), *g1 = malloc(sizeof(float) * (size_t)l->total);
    float *pred = malloc(n * 4);
    double l0, l1;
    loss_grads(l, params, &m, &l0, g0);
    /* the independent sum over frames 1.. of every sample and channel */
    VF_CHECK(predict(l, params, &m.b, pred, n, &st) == 0);
    double s = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < d.B; i++)
        for (int64_t ch = 0; ch < c.z; ch++)
            for (int64_t k = plane; k < d.T * plane; k++, cnt++) {
                int64_t at = i * per + ch * d.T * plane + k;
                double e = (double)pred[at] - m.target[at];
                s += e * e;
            }
    VF_CHECK_MSG(fabs(l0 - s / (double)cnt) <= 1e-9 * l0, "loss %.12g, by hand %.12g", l0, s / (double)cnt);
    /* frame 0's target: nothing moves */
    for (int64_t i = 0; i < d.B; i++)
        for (int64_t ch = 0; ch < c.z; ch++)
            for (int64_t k = 0; k < plane; k++) m.target[i * per + ch * d.T * plane + k] += 1.0f;
    loss_grads(l, params, &m, &l1, g1);
    VF_CHECK(l1 == l0 && memcmp(g0, g1, sizeof(float) * (size_t)l->total) == 0);
    /* frame 1's: the loss and the gradients move */
    for (int64_t ch = 0; ch < c.z; ch++) m.target[ch * d.T * plane + plane] += 1.0f;
    loss_grads(l, params, &m, &l1, g1);
    VF_CHECK(l1 != l0 && memcmp(g0, g1, sizeof(float) * (size_t)l->total) != 0);
    /* a skip that is not below the frames is refused naming the field */
    m.b.skip_frames = 3;
    vf_backend *be = vf_backend_cpu();
    vf_dit_part *p = NULL;
    vf_dit_saved *sv = NULL;
    double lx;
    VF_CHECK(vf_dit_part_new(be, l, 0, 2, &d, 0, params, g1, &p, &st) == 0 && vf_dit_saved_new(p, &sv, &st) == 0);
    VF_CHECK(vf_dit_part_forward(p, &m.b, NULL, NULL, sv, &st) == 0);
    VF_CHECK(vf_dit_part_loss(p, &m.b, sv, 1.0f, &lx, &st) == VF_EINVAL && strstr(st.msg, "skip_frames"));
    vf_dit_saved_free(sv);
    vf_dit_part_free(p);
    free(g0), free(g1), free(pred), free(tt), free(params);
    mb_free(&m);
    vf_dit_layout_free(l);
}

int main(void) { return vf_test_main(); }
