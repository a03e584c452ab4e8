/* test_dit_lora.c — LoRA adapters on the DiT (models/dit_lora.c) on the CPU backend.
 *
 *  - targets: globs over "self_attn.q"-style names pick the right linears, in flat block
 *    order, with the user-facing names and (rank, in) / (out, rank) shapes; a pattern that
 *    matches nothing is VF_EUSAGE naming it;
 *  - init: B zero, A within peft's kaiming bound, a range alone == the slice of the whole;
 *    with B = 0 the adapted loss equals the base loss bitwise;
 *  - the adapters' gradients against central differences (4-point, f64 arithmetic on the
 *    f32 model) on the largest-gradient element of A and B of several linears, with B
 *    perturbed off zero so both paths carry signal;
 *  - P = 2 partitions and recompute give bitwise the adapter gradients of one partition.
 */
#include "tests/vf_test.h"

#include "models/dit.h"
#include "models/dit_lora.h"
#include "runtime/philox.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static vf_dit_config small_cfg(void)
{
    vf_dit_config c;
    VF_ASSERT(vf_dit_preset("tiny", &c, NULL) == 0);
    c.dim = 32, c.depth = 2, c.heads = 2, c.head_dim = 16, c.ffn = 64, c.z = 4;
    c.text_dim = 16, c.text_len = 8, c.freq_dim = 16;
    return c;
}

static vf_dit_lora_cfg lcfg(int rank, double alpha, const char *t0, const char *t1, const char *t2)
{
    vf_dit_lora_cfg c = {.rank = rank, .alpha = alpha};
    const char *ts[3] = {t0, t1, t2};
    for (int i = 0; i < 3; i++)
        if (ts[i]) snprintf(c.targets[c.ntargets++], VF_DIT_NAME_MAX, "%s", ts[i]);
    return c;
}

static float *perturbed(int64_t n, uint64_t seed, float sd)
{
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    vf_rng r;
    vf_rng_init(&r, seed, 0, 0, VF_RNG_TEST);
    vf_rng_normal(&r, 0, n, p);
    for (int64_t i = 0; i < n; i++) p[i] *= sd;
    return p;
}

typedef struct mb {
    vf_dit_batch b;
    float *xt, *t, *target;
    int32_t *text, *len;
} mb;

static void mb_make(mb *m, const vf_dit_config *c, vf_dit_dims d, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    size_t per = (size_t)c->z * d.T * d.H * d.W, n = per * (size_t)d.B;
    m->xt = malloc(n * 4), m->target = malloc(n * 4), m->t = malloc((size_t)d.B * 4);
    m->text = malloc((size_t)d.B * c->text_len * 4), m->len = malloc((size_t)d.B * 4);
    float *x0 = malloc(per * 4);
    vf_dit_rf rf = {seed, 0.0f, 1.0f};
    for (int i = 0; i < d.B; i++) {
        vf_rng r;
        vf_rng_init(&r, seed, 0, (uint64_t)i, VF_RNG_TEST);
        vf_rng_normal(&r, 0, (int64_t)per, x0);
        m->t[i] = vf_dit_rf_sample(&rf, 3, (uint64_t)i, (int64_t)per, x0, m->xt + per * i, m->target + per * i);
        m->len[i] = (i * 3 + 2) % (c->text_len + 1);
        for (int j = 0; j < c->text_len; j++) m->text[i * c->text_len + j] = 'a' + (i * 7 + j) % 26;
    }
    free(x0);
    m->b.dims = d;
    m->b.x_t = m->xt, m->b.t = m->t, m->b.text = m->text, m->b.text_len = m->len;
    m->b.target = m->target;
}

static void mb_free(mb *m) { free(m->xt), free(m->t), free(m->target), free(m->text), free(m->len); }

static void xfer_alloc(vf_dit_xfer *x, const vf_dit_config *c, const vf_dit_dims *d)
{
    int64_t L = vf_dit_tokens(c, d);
    x->x = calloc((size_t)(d->B * L * c->dim), 4);
    x->e = calloc((size_t)(d->B * c->dim), 4);
    x->e0 = calloc((size_t)(6 * d->B * c->dim), 4);
    x->ctx = calloc((size_t)(d->B * c->text_len * c->dim), 4);
}

static void xfer_free(vf_dit_xfer *x) { free(x->x), free(x->e), free(x->e0), free(x->ctx); }

/* One micro-batch through partitions bounds[0..P] with adapters lo (NULL: the plain
 * model with base gradients into bgrads); adapter gradients accumulate into lgrads. */
static double run(const vf_dit_layout *l, const vf_dit_lora *lo, const int *bounds, int P, bool recompute,
                  float *params, float *bgrads, float *lparams, float *lgrads, mb *m)
{
    vf_status st = {0};
    const vf_dit_config *c = &l->cfg;
    vf_backend *be = vf_backend_cpu();
    vf_dit_part *pp[4];
    vf_dit_saved *sv[4];
    vf_dit_xfer fx[4], gx[4];
    double loss = 0;
    for (int i = 0; i < P; i++) {
        int64_t off, n, loff = 0, ln;
        vf_dit_layout_range(l, bounds[i], bounds[i + 1], &off, &n);
        if (lo) vf_dit_layout_range(lo->l, bounds[i], bounds[i + 1], &loff, &ln);
        int rc = vf_dit_part_new(be, l, bounds[i], bounds[i + 1], &m->b.dims, recompute, params + off,
                                 lo ? NULL : bgrads + off, &pp[i], &st);
        VF_CHECK_MSG(rc == 0, "%s", st.msg);
        if (lo) VF_CHECK(vf_dit_part_set_lora(pp[i], lo, lparams + loff, lgrads + loff, &st) == 0);
        VF_CHECK(vf_dit_saved_new(pp[i], &sv[i], &st) == 0);
        xfer_alloc(&fx[i], c, &m->b.dims);
        xfer_alloc(&gx[i], c, &m->b.dims);
    }
    for (int i = 0; i < P; i++)
        VF_CHECK(vf_dit_part_forward(pp[i], &m->b, i ? &fx[i - 1] : NULL, &fx[i], sv[i], &st) == 0);
    VF_CHECK(vf_dit_part_loss(pp[P - 1], &m->b, sv[P - 1], 1.0f, &loss, &st) == 0);
    int64_t L = vf_dit_tokens(c, &m->b.dims);
    for (int i = P - 1; i >= 0; i--) {
        if (i < P - 1) {
            memcpy(gx[i].x, gx[i + 1].x, (size_t)(m->b.dims.B * L * c->dim) * 4);
            memcpy(gx[i].e, gx[i + 1].e, (size_t)(m->b.dims.B * c->dim) * 4);
            memcpy(gx[i].e0, gx[i + 1].e0, (size_t)(6 * m->b.dims.B * c->dim) * 4);
            memcpy(gx[i].ctx, gx[i + 1].ctx, (size_t)(m->b.dims.B * c->text_len * c->dim) * 4);
        }
        VF_CHECK_MSG(vf_dit_part_backward(pp[i], &m->b, sv[i], &gx[i], &st) == 0, "%s", st.msg);
    }
    for (int i = 0; i < P; i++) {
        vf_dit_saved_free(sv[i]);
        xfer_free(&fx[i]);
        xfer_free(&gx[i]);
        vf_dit_part_free(pp[i]);
    }
    return loss;
}

VF_TEST(targets_pick_linears_by_pattern)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    vf_dit_lora_cfg lc = lcfg(4, 8, "self_attn.q", "cross_attn.*", "ffn.*");
    vf_dit_lora *lo = NULL;
    VF_CHECK_MSG(vf_dit_lora_new(l, &lc, &lo, &st) == 0, "%s", st.msg);
    /* 7 linears per block (q, 4 cross, 2 ffn), A and B each */
    VF_CHECK_EQ_INT(lo->l->n, 2 * 7 * c.depth);
    VF_CHECK(!strcmp(lo->l->t[0].name, "diffusion_model.blocks.0.self_attn.q.lora_A.weight"));
    VF_CHECK(!strcmp(lo->l->t[1].name, "diffusion_model.blocks.0.self_attn.q.lora_B.weight"));
    VF_CHECK(!strcmp(lo->l->t[13].name, "diffusion_model.blocks.0.ffn.2.lora_B.weight"));
    VF_CHECK(!strcmp(lo->l->t[14].name, "diffusion_model.blocks.1.self_attn.q.lora_A.weight"));
    char mod[64];
    vf_dit_lora_module(lo, 12, mod, sizeof mod);
    VF_CHECK(!strcmp(mod, "blocks.0.ffn.2"));
    /* ffn.0 (ffn, dim): A (rank, dim), B (ffn, rank); ffn.2 (dim, ffn): A (rank, ffn) */
    const vf_dit_tensor *a0 = &lo->l->t[10], *b0 = &lo->l->t[11], *a2 = &lo->l->t[12];
    VF_CHECK(a0->shape[0] == 4 && a0->shape[1] == c.dim && b0->shape[0] == c.ffn && b0->shape[1] == 4);
    VF_CHECK(a2->shape[1] == c.ffn);
    int64_t off = 0;
    for (int i = 0; i < lo->l->n; i++) {
        VF_CHECK_EQ_INT(lo->l->t[i].offset, off);
        off += lo->l->t[i].numel;
    }
    VF_CHECK_EQ_INT(lo->l->total, off);
    int64_t o1, n1;
    vf_dit_layout_range(lo->l, 1, 2, &o1, &n1);
    VF_CHECK_EQ_INT(o1, lo->l->t[14].offset);
    VF_CHECK_EQ_INT(o1 + n1, off);
    VF_CHECK(lo->a_of[vf_dit_layout_find(l, "blocks.1.cross_attn.v.weight")] == 20);
    VF_CHECK(lo->a_of[vf_dit_layout_find(l, "blocks.1.self_attn.k.weight")] == -1);
    vf_dit_lora_free(lo);

    lc = lcfg(4, 4, "self_attn.*", "cross_attn.qq", NULL);
    VF_CHECK(vf_dit_lora_new(l, &lc, &lo, &st) == VF_EUSAGE);
    VF_CHECK(strstr(st.msg, "\"cross_attn.qq\"") != NULL);
    VF_CHECK(lo == NULL);
    vf_dit_layout_free(l);
}

VF_TEST(config_json)
{
    vf_status st = {0};
    vf_dit_lora_cfg c;
    VF_CHECK(vf_dit_lora_cfg_parse("", &c, &st) == 0 && c.rank == 0);
    VF_CHECK(vf_dit_lora_cfg_parse("{\"alpha\":16,\"rank\":8,\"targets\":[\"ffn.*\",\"self_attn.q\"]}", &c, &st) == 0);
    VF_CHECK(c.rank == 8 && c.alpha == 16 && c.ntargets == 2 && !strcmp(c.targets[1], "self_attn.q"));
    VF_CHECK(vf_dit_lora_cfg_parse("{\"rank\":0,\"targets\":[\"ffn.*\"]}", &c, &st) == VF_EUSAGE);
    VF_CHECK(vf_dit_lora_cfg_parse("{\"rank\":4,\"targets\":[]}", &c, &st) == VF_EUSAGE);
    vf_status_clear(&st);
    VF_CHECK(vf_dit_lora_cfg_parse("{\"rank\":4,\"targets\":[\"ffn.*\"],\"dropout\":0.1}", &c, &st) == VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "dropout") != NULL, "%s", st.msg);
}

VF_TEST(init_starts_at_the_base_model)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    vf_dit_lora_cfg lc = lcfg(4, 4, "*", NULL, NULL);
    vf_dit_lora *lo = NULL;
    VF_CHECK(vf_dit_lora_new(l, &lc, &lo, &st) == 0);
    int64_t T = lo->l->total;
    float *all = malloc(4 * (size_t)T), *part = malloc(4 * (size_t)T);
    vf_dit_lora_init(lo, 7, 0, T, all);
    for (int i = 0; i < lo->l->n; i++) {
        const vf_dit_tensor *t = &lo->l->t[i];
        double bound = 1.0 / sqrt((double)t->shape[1]), mx = 0;
        for (int64_t j = 0; j < t->numel; j++) mx = fmax(mx, fabs(all[t->offset + j]));
        if (i % 2) VF_CHECK(mx == 0);
        else VF_CHECK(mx > 0.5 * bound && mx <= bound);
    }
    int64_t cut = T / 3 + 5;
    vf_dit_lora_init(lo, 7, 0, cut, part);
    vf_dit_lora_init(lo, 7, cut, T - cut, part + cut);
    VF_CHECK(memcmp(all, part, 4 * (size_t)T) == 0);

    /* B = 0: the adapted model's loss is the base model's, bit for bit */
    float *params = perturbed(l->total, 3, 0.2f), *bg = calloc((size_t)l->total, 4), *lg = calloc((size_t)T, 4);
    mb m;
    mb_make(&m, &c, vf_dit_dims_of(&c, 2, 2, 4, 4), 5);
    int one[2] = {0, c.depth};
    double base = run(l, NULL, one, 1, false, params, bg, NULL, NULL, &m);
    double adapted = run(l, lo, one, 1, false, params, NULL, all, lg, &m);
    VF_CHECK_MSG(base == adapted, "%.17g vs %.17g", base, adapted);
    /* B = 0 gives A no gradient, B one */
    double ga = 0, gb = 0;
    for (int i = 0; i < lo->l->n; i++)
        for (int64_t j = 0; j < lo->l->t[i].numel; j++)
            *(i % 2 ? &gb : &ga) += fabs(lg[lo->l->t[i].offset + j]);
    VF_CHECK(ga == 0 && gb > 0);
    free(all), free(part), free(params), free(bg), free(lg);
    mb_free(&m);
    vf_dit_lora_free(lo);
    vf_dit_layout_free(l);
}

VF_TEST(adapter_gradients_match_finite_differences)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    vf_dit_lora_cfg lc = lcfg(3, 6, "self_attn.*", "cross_attn.*", "ffn.*");
    vf_dit_lora *lo = NULL;
    VF_CHECK(vf_dit_lora_new(l, &lc, &lo, &st) == 0);
    int64_t T = lo->l->total;
    float *params = perturbed(l->total, 11, 0.2f), *lp = malloc(4 * (size_t)T), *g = calloc((size_t)T, 4);
    vf_dit_lora_init(lo, 9, 0, T, lp);
    float *nb = perturbed(T, 12, 0.1f);
    for (int64_t i = 0; i < T; i++) lp[i] += nb[i]; /* B off zero */
    free(nb);
    mb m;
    mb_make(&m, &c, vf_dit_dims_of(&c, 2, 2, 4, 4), 5);
    int one[2] = {0, c.depth};
    run(l, lo, one, 1, false, params, NULL, lp, g, &m);
    const char *names[] = {"blocks.0.self_attn.q.lora_A.weight", "blocks.0.self_attn.o.lora_B.weight",
                           "blocks.0.cross_attn.k.lora_A.weight", "blocks.1.cross_attn.v.lora_B.weight",
                           "blocks.1.ffn.0.lora_A.weight",       "blocks.1.ffn.2.lora_B.weight",
                           "blocks.1.self_attn.v.lora_A.weight", "blocks.0.cross_attn.q.lora_B.weight"};
    float *scratch = calloc((size_t)T, 4);
    int ok = 1;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char full[96];
        snprintf(full, sizeof full, VF_LORA_PREFIX "%s", names[k]);
        int ti = vf_dit_layout_find(lo->l, full);
        VF_CHECK_MSG(ti >= 0, "%s", full);
        const vf_dit_tensor *t = &lo->l->t[ti];
        int64_t best = t->offset;
        for (int64_t i = t->offset; i < t->offset + t->numel; i++)
            if (fabs(g[i]) > fabs(g[best])) best = i;
        float w0 = lp[best];
        double h = 3e-2 * fmax(1.0, fabs(w0)), f[4];
        const double off[4] = {-2, -1, 1, 2};
        for (int j = 0; j < 4; j++) {
            lp[best] = (float)(w0 + off[j] * h);
            f[j] = run(l, lo, one, 1, false, params, NULL, lp, scratch, &m);
        }
        lp[best] = w0;
        double hh = ((double)(float)(w0 + h) - (double)(float)(w0 - h)) / 2;
        double fd = (8 * (f[2] - f[1]) - (f[3] - f[0])) / (12 * hh);
        /* relative, with a floor: the f32 loss's rounding is ~1e-6 absolute in fd */
        double err = fabs(fd - g[best]) / fmax(fabs(g[best]), 1e-2);
        fprintf(stderr, "  %-38s grad %+.6e  fd %+.6e  rel %.2e\n", names[k], g[best], fd, err);
        if (!(err < 1e-3)) ok = 0;
    }
    VF_CHECK(ok);

    /* two partitions, and recompute, give the same adapter gradients bit for bit */
    int two[3] = {0, 1, c.depth};
    float *g2 = calloc((size_t)T, 4), *g3 = calloc((size_t)T, 4);
    double l1 = run(l, lo, one, 1, false, params, NULL, lp, scratch, &m);
    memset(scratch, 0, 4 * (size_t)T);
    run(l, lo, one, 1, false, params, NULL, lp, scratch, &m);
    double l2 = run(l, lo, two, 2, false, params, NULL, lp, g2, &m);
    double l3 = run(l, lo, two, 2, true, params, NULL, lp, g3, &m);
    VF_CHECK(l1 == l2 && l1 == l3);
    VF_CHECK(memcmp(scratch, g2, 4 * (size_t)T) == 0);
    VF_CHECK(memcmp(scratch, g3, 4 * (size_t)T) == 0);
    free(g2), free(g3), free(scratch), free(params), free(lp), free(g);
    mb_free(&m);
    vf_dit_lora_free(lo);
    vf_dit_layout_free(l);
}

int main(void) { return vf_test_main(); }
