/* test_ops_elementwise.c — CPU add, axpy, GELU (tanh and exact), SiLU, modulate,
 * LayerNorm+modulate and gated_add: forward against f64 references, backward against f64
 * finite differences (gradients written over NaN-poisoned buffers, or added to preset ones
 * where the op's mode says so), the fused LayerNorm+modulate bit for bit against layernorm
 * then modulate, in-place use, and identical bytes on 1/2/3 threads. */
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

/* ---- unary activations */

typedef struct un {
    int64_t n;
    double *x;
    int which; /* 0 gelu (tanh), 1 silu, 2 gelu (exact) */
} un;

static double gelu_ref(double x)
{
    /* torch.nn.GELU(approximate="tanh") */
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double silu_ref(double x) { return x / (1.0 + exp(-x)); }
/* torch.nn.GELU(): x·Φ(x), Φ the standard normal CDF, written with erfc so the far
 * negative tail keeps its digits */
static double gelu_erf_ref(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }

typedef void (*un_fwd_fn)(float *, const float *, int64_t);
typedef void (*un_bwd_fn)(float *, const float *, const float *, int64_t);
static const struct {
    const char *name;
    double (*ref)(double);
    un_fwd_fn fwd;
    un_bwd_fn bwd; /* SiLU's takes a mode: called by name */
} unops[3] = {
    {"gelu", gelu_ref, vf_cpu_gelu_fwd, vf_cpu_gelu_bwd},
    {"silu", silu_ref, vf_cpu_silu_fwd, NULL},
    {"gelu_erf", gelu_erf_ref, vf_cpu_gelu_erf_fwd, vf_cpu_gelu_erf_bwd},
};

static void un_ref(void *vctx, double *out)
{
    un *c = vctx;
    for (int64_t i = 0; i < c->n; i++) out[i] = unops[c->which].ref(c->x[i]);
}

static void check_unary(int which, int64_t n)
{
    const char *nm = unops[which].name;
    char what[96];
    float *x = tl_randf(n, -6, 6);
    x[0] = 0.0f;
    if (n > 1) x[1] = -30.0f; /* far tail: exp must not overflow to NaN */
    un c = {n, tl_tod(x, n), which};
    double *want = tl_zerosd(n);
    un_ref(&c, want);
    float *out = tl_zerosf(n);
    unops[which].fwd(out, x, n);
    snprintf(what, sizeof what, "%s fwd n=%lld", nm, (long long)n);
    CHECK_FWD(what, out, want, n, 1e-5);
    /* in place */
    float *y = tl_dupf(x, n);
    unops[which].fwd(y, y, n);
    VF_CHECK(memcmp(y, out, sizeof(float) * n) == 0);

    float *r = tl_randf(n, -1, 1);
    double *rd = tl_tod(r, n);
    float *dx = tl_zerosf(n);
    for (int64_t i = 0; i < n; i++) dx[i] = NAN; /* written: an element left alone fails */
    if (which == 1) vf_cpu_silu_bwd(dx, r, x, n, 0);
    else unops[which].bwd(dx, r, x, n);
    snprintf(what, sizeof what, "%s bwd", nm);
    CHECK_GRAD(what, un_ref, &c, c.x, n, rd, n, dx, NULL, 400);
    float *ri = tl_dupf(r, n); /* in place (dinp == dout) */
    if (which == 1) vf_cpu_silu_bwd(ri, ri, x, n, 0);
    else unops[which].bwd(ri, ri, x, n);
    VF_CHECK(memcmp(ri, dx, sizeof(float) * n) == 0);
    if (which == 1) { /* SiLU's ADD mode */
        float *g0 = tl_preset_like(dx, n), *g1 = tl_dupf(g0, n);
        vf_cpu_silu_bwd(g1, r, x, n, 1);
        CHECK_GRAD("silu bwd accumulate", un_ref, &c, c.x, n, rd, n, g1, g0, 400);
        free(g0), free(g1);
    }
    free(x), free(c.x), free(want), free(out), free(y), free(r), free(rd), free(dx), free(ri);
}

VF_TEST(gelu_tanh)
{
    check_unary(0, 1);
    check_unary(0, 1013);
}

VF_TEST(silu)
{
    check_unary(1, 1);
    check_unary(1, 1013);
}

VF_TEST(gelu_erf)
{
    check_unary(2, 1);
    check_unary(2, 1013);
}

/* The two GELUs differ by ~4e-4 at |x| = 2.5: a model needing one cannot pass with the
 * other (the reference tests at 1e-5 would tell). */
VF_TEST(gelu_erf_is_not_tanh)
{
    float x = 2.5f, a, b;
    vf_cpu_gelu_fwd(&a, &x, 1);
    vf_cpu_gelu_erf_fwd(&b, &x, 1);
    VF_CHECK(fabs((double)a - (double)b) > 3e-4);
}

VF_TEST(add_axpy)
{
    int64_t n = 997;
    float *a = tl_randf(n, -3, 3), *b = tl_randf(n, -3, 3), *out = tl_zerosf(n);
    double *want = tl_zerosd(n);
    for (int64_t i = 0; i < n; i++) want[i] = (double)a[i] + (double)b[i];
    vf_cpu_add(out, a, b, n);
    CHECK_FWD("add", out, want, n, 1e-6);
    float *a2 = tl_dupf(a, n);
    vf_cpu_add(a2, a2, b, n); /* out aliases a */
    VF_CHECK(memcmp(a2, out, sizeof(float) * n) == 0);
    /* axpy: y += alpha·x; its gradient w.r.t. x is alpha, w.r.t. y is 1 (linear; the
     * forward check with two different alphas covers it) */
    for (float alpha = -1.75f; alpha < 2; alpha += 3.5f) {
        float *y = tl_dupf(a, n);
        vf_cpu_axpy(y, b, alpha, n);
        for (int64_t i = 0; i < n; i++) want[i] = (double)a[i] + (double)alpha * (double)b[i];
        CHECK_FWD("axpy", y, want, n, 1e-6);
        free(y);
    }
    free(a), free(b), free(out), free(want), free(a2);
}

/* ---- modulate / gated_add (B, L, C) with per-sample (B, C) parameters */

typedef struct md {
    int64_t B, L, C;
    double *x, *p1, *p2; /* modulate: shift, scale; gated: gate, y */
    int gated;
} md;

static void md_ref(void *vctx, double *out)
{
    md *c = vctx;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t l = 0; l < c->L; l++)
            for (int64_t k = 0; k < c->C; k++) {
                int64_t i = (b * c->L + l) * c->C + k, j = b * c->C + k;
                out[i] = c->gated ? c->x[i] + c->p1[j] * c->p2[i]
                                  : c->x[i] * (1.0 + c->p2[j]) + c->p1[j];
            }
}

static void check_md(int gated, int64_t B, int64_t L, int64_t C)
{
    char what[96];
    const char *nm = gated ? "gated_add" : "modulate";
    int64_t n = B * L * C;
    float *x = tl_randf(n, -2, 2), *p1 = tl_randf(B * C, -1, 1);
    float *p2 = tl_randf(gated ? n : B * C, -1, 1);
    md c = {B, L, C, tl_tod(x, n), tl_tod(p1, B * C), tl_tod(p2, gated ? n : B * C), gated};
    double *want = tl_zerosd(n);
    md_ref(&c, want);
    float *out = tl_zerosf(n);
    if (gated) vf_cpu_gated_add_fwd(out, x, p1, p2, B, L, C);
    else vf_cpu_modulate_fwd(out, x, p1, p2, B, L, C);
    snprintf(what, sizeof what, "%s fwd %lldx%lldx%lld", nm, (long long)B, (long long)L,
             (long long)C);
    CHECK_FWD(what, out, want, n, 1e-5);
    float *xi = tl_dupf(x, n); /* out aliases x */
    if (gated) vf_cpu_gated_add_fwd(xi, xi, p1, p2, B, L, C);
    else vf_cpu_modulate_fwd(xi, xi, p1, p2, B, L, C);
    VF_CHECK(memcmp(xi, out, sizeof(float) * n) == 0);

    float *r = tl_randf(n, -1, 1);
    double *rd = tl_tod(r, n);
    int64_t n2 = gated ? n : B * C;
    /* all three written: poisoned with NaN, then again over preset values */
    for (int rep = 0; rep < 2; rep++) {
        float *dx = rep ? tl_randf(n, -1, 1) : tl_zerosf(n), *d1 = rep ? tl_randf(B * C, -1, 1) : tl_zerosf(B * C);
        float *d2 = rep ? tl_randf(n2, -1, 1) : tl_zerosf(n2);
        if (!rep) {
            for (int64_t i = 0; i < n; i++) dx[i] = NAN;
            for (int64_t i = 0; i < B * C; i++) d1[i] = NAN;
            for (int64_t i = 0; i < n2; i++) d2[i] = NAN;
        }
        if (gated) vf_cpu_gated_add_bwd(dx, d1, d2, r, p1, p2, B, L, C);
        else vf_cpu_modulate_bwd(dx, d1, d2, r, x, p2, B, L, C);
        snprintf(what, sizeof what, "%s%s dx", nm, rep ? " over preset" : "");
        CHECK_GRAD(what, md_ref, &c, c.x, n, rd, n, dx, NULL, 300);
        snprintf(what, sizeof what, "%s%s %s", nm, rep ? " over preset" : "", gated ? "dgate" : "dshift");
        CHECK_GRAD(what, md_ref, &c, c.p1, B * C, rd, n, d1, NULL, 300);
        snprintf(what, sizeof what, "%s%s %s", nm, rep ? " over preset" : "", gated ? "dy" : "dscale");
        CHECK_GRAD(what, md_ref, &c, c.p2, n2, rd, n, d2, NULL, 300);
        /* NULL gradients are skipped, the others the same */
        float *only = tl_zerosf(B * C);
        if (gated) vf_cpu_gated_add_bwd(NULL, only, NULL, r, p1, p2, B, L, C);
        else vf_cpu_modulate_bwd(NULL, only, NULL, r, x, p2, B, L, C);
        VF_CHECK(memcmp(only, d1, sizeof(float) * B * C) == 0);
        free(dx), free(d1), free(d2), free(only);
    }
    free(x), free(p1), free(p2), free(c.x), free(c.p1), free(c.p2), free(want), free(out);
    free(xi), free(r), free(rd);
}

VF_TEST(modulate)
{
    check_md(0, 1, 1, 1);
    check_md(0, 2, 5, 7);
    check_md(0, 3, 11, 131); /* C crosses the 64-channel chunks */
}

VF_TEST(gated_add)
{
    check_md(1, 1, 1, 1);
    check_md(1, 2, 5, 7);
    check_md(1, 3, 11, 131);
}

/* ---- LayerNorm (no affine) then modulate, as one op */

typedef struct lm {
    int64_t B, L, C;
    double *x, *shift, *scale;
    double eps;
} lm;

static void lm_ref(void *vctx, double *out)
{
    lm *c = vctx;
    for (int64_t row = 0; row < c->B * c->L; row++) {
        const double *x = c->x + row * c->C;
        const int64_t b = row / c->L;
        double mu = 0, var = 0;
        for (int64_t k = 0; k < c->C; k++) mu += x[k];
        mu /= c->C;
        for (int64_t k = 0; k < c->C; k++) var += (x[k] - mu) * (x[k] - mu);
        const double r = 1.0 / sqrt(var / c->C + c->eps);
        for (int64_t k = 0; k < c->C; k++)
            out[row * c->C + k] = (x[k] - mu) * r * (1.0 + c->scale[b * c->C + k]) + c->shift[b * c->C + k];
    }
}

static void check_ln_modulate(int64_t B, int64_t L, int64_t C, double off)
{
    char what[128];
    const int64_t n = B * L * C, N = B * L;
    const float eps = 1e-6f;
    float *x = tl_randf(n, off - 2, off + 2), *sh = tl_randf(B * C, -1, 1), *sc = tl_randf(B * C, -1, 1);
    lm c = {B, L, C, tl_tod(x, n), tl_tod(sh, B * C), tl_tod(sc, B * C), eps};
    double *want = tl_zerosd(n);
    lm_ref(&c, want);
    float *out = tl_randf(n, -9, 9), *mean = tl_zerosf(N), *rstd = tl_zerosf(N);
    vf_cpu_ln_modulate_fwd(out, mean, rstd, x, sh, sc, B, L, C, eps);
    snprintf(what, sizeof what, "ln_modulate fwd %lldx%lldx%lld", (long long)B, (long long)L, (long long)C);
    CHECK_FWD(what, out, want, n, 1e-5);
    /* bit for bit: layernorm_fwd then modulate_fwd */
    float *h = tl_zerosf(n), *o2 = tl_zerosf(n), *m2 = tl_zerosf(N), *r2 = tl_zerosf(N);
    vf_cpu_layernorm_fwd(h, m2, r2, x, NULL, NULL, N, C, eps);
    vf_cpu_modulate_fwd(o2, h, sh, sc, B, L, C);
    VF_CHECK(memcmp(out, o2, sizeof(float) * n) == 0 && memcmp(mean, m2, sizeof(float) * N) == 0 &&
             memcmp(rstd, r2, sizeof(float) * N) == 0);

    float *r = tl_randf(n, -1, 1);
    double *rd = tl_tod(r, n);
    float *dx = tl_zerosf(n), *dsh = tl_randf(B * C, -1, 1), *dsc = tl_randf(B * C, -1, 1);
    for (int64_t i = 0; i < n; i++) dx[i] = NAN;
    for (int64_t i = 0; i < B * C; i++) dsh[i] = dsc[i] = NAN;
    vf_cpu_ln_modulate_bwd(dx, dsh, dsc, r, x, mean, rstd, sc, B, L, C, eps, 0);
    CHECK_GRAD("  ln_modulate dx (written)", lm_ref, &c, c.x, n, rd, n, dx, NULL, 300);
    CHECK_GRAD("  ln_modulate dshift (written)", lm_ref, &c, c.shift, B * C, rd, n, dsh, NULL, 300);
    CHECK_GRAD("  ln_modulate dscale (written)", lm_ref, &c, c.scale, B * C, rd, n, dsc, NULL, 300);
    float *dx0 = tl_preset_like(dx, n), *dx1 = tl_dupf(dx0, n);
    vf_cpu_ln_modulate_bwd(dx1, NULL, NULL, r, x, mean, rstd, sc, B, L, C, eps, 1);
    CHECK_GRAD("  ln_modulate dx (added)", lm_ref, &c, c.x, n, rd, n, dx1, dx0, 300);
    /* bit for bit: modulate_bwd then layernorm_bwd (adding into the preset dx) */
    float *g = tl_zerosf(n), *dsh2 = tl_zerosf(B * C), *dsc2 = tl_zerosf(B * C), *dx2 = tl_dupf(dx0, n);
    vf_cpu_modulate_bwd(g, dsh2, dsc2, r, h, sc, B, L, C);
    vf_cpu_layernorm_bwd(dx2, NULL, NULL, g, x, NULL, mean, rstd, N, C);
    VF_CHECK_MSG(memcmp(dx1, dx2, sizeof(float) * n) == 0 && memcmp(dsh, dsh2, sizeof(float) * B * C) == 0 &&
                     memcmp(dsc, dsc2, sizeof(float) * B * C) == 0,
                 "ln_modulate_bwd %lldx%lldx%lld differs from modulate_bwd + layernorm_bwd", (long long)B,
                 (long long)L, (long long)C);
    free(x), free(sh), free(sc), free(c.x), free(c.shift), free(c.scale), free(want), free(out), free(mean);
    free(rstd), free(h), free(o2), free(m2), free(r2), free(r), free(rd), free(dx), free(dsh), free(dsc);
    free(dx0), free(dx1), free(g), free(dsh2), free(dsc2), free(dx2);
}

VF_TEST(ln_modulate)
{
    check_ln_modulate(1, 1, 1, 0);
    check_ln_modulate(2, 5, 7, 0);
    check_ln_modulate(3, 11, 131, 3); /* C over the 64-channel chunks; a mean that matters */
}

/* ---- identical bytes on any thread count */

typedef struct ewrun {
    int64_t B, L, C, n;
    float *x, *y, *p1, *p2, *r, *o1, *o2, *o3, *o4, *o5, *d1, *d2, *d3, *m, *s, *t1, *t2, *t3;
} ewrun;

static void ew_run(void *vctx)
{
    ewrun *e = vctx;
    vf_cpu_gelu_fwd(e->o1, e->x, e->n);
    vf_cpu_silu_fwd(e->o2, e->x, e->n);
    vf_cpu_gelu_bwd(e->o3, e->r, e->x, e->n);
    vf_cpu_silu_bwd(e->o3, e->r, e->x, e->n, 1);
    vf_cpu_axpy(e->o3, e->x, 0.3f, e->n);
    vf_cpu_add(e->o4, e->x, e->y, e->n);
    vf_cpu_modulate_fwd(e->o4, e->o4, e->p1, e->p2, e->B, e->L, e->C);
    vf_cpu_gated_add_fwd(e->o4, e->o4, e->p1, e->y, e->B, e->L, e->C);
    vf_cpu_ln_modulate_fwd(e->o5, e->m, e->s, e->x, e->p1, e->p2, e->B, e->L, e->C, 1e-6f);
    /* the backwards write: each into scratch t*, summed into d* (which all are compared) */
    const int64_t pc = e->B * e->C;
    vf_cpu_modulate_bwd(e->d1, e->d2, e->d3, e->r, e->x, e->p2, e->B, e->L, e->C);
    vf_cpu_gated_add_bwd(NULL, e->t2, e->t1, e->r, e->p1, e->y, e->B, e->L, e->C);
    vf_cpu_axpy(e->d1, e->t1, 1.0f, e->n);
    vf_cpu_axpy(e->d2, e->t2, 1.0f, pc);
    vf_cpu_ln_modulate_bwd(e->d1, e->t2, e->t3, e->r, e->x, e->m, e->s, e->p2, e->B, e->L, e->C, 1e-6f, 1);
    vf_cpu_axpy(e->d2, e->t2, 1.0f, pc);
    vf_cpu_axpy(e->d3, e->t3, 1.0f, pc);
}

VF_TEST(elementwise_same_bits_any_thread_count)
{
    ewrun e = {.B = 3, .L = 301, .C = 200};
    e.n = e.B * e.L * e.C;
    e.x = tl_randf(e.n, -4, 4), e.y = tl_randf(e.n, -1, 1), e.r = tl_randf(e.n, -1, 1);
    e.p1 = tl_randf(e.B * e.C, -1, 1), e.p2 = tl_randf(e.B * e.C, -1, 1);
    e.o1 = tl_zerosf(e.n), e.o2 = tl_zerosf(e.n), e.o3 = tl_zerosf(e.n), e.o4 = tl_zerosf(e.n);
    e.d1 = tl_zerosf(e.n), e.d2 = tl_zerosf(e.B * e.C), e.d3 = tl_zerosf(e.B * e.C);
    e.m = tl_zerosf(e.B * e.L), e.s = tl_zerosf(e.B * e.L), e.o5 = tl_zerosf(e.n);
    e.t1 = tl_zerosf(e.n), e.t2 = tl_zerosf(e.B * e.C), e.t3 = tl_zerosf(e.B * e.C);
    void *bufs[] = {e.o1, e.o2, e.o3, e.o4, e.o5, e.d1, e.d2, e.d3};
    size_t nb = sizeof(float) * e.n, pb = sizeof(float) * e.B * e.C;
    size_t bytes[] = {nb, nb, nb, nb, nb, nb, pb, pb};
    VF_CHECK(tl_same_threads("gelu/silu/add/axpy/modulate/ln_modulate/gated_add", ew_run, &e, 8, bufs,
                             bytes));
    free(e.x), free(e.y), free(e.r), free(e.p1), free(e.p2), free(e.o1), free(e.o2), free(e.o3);
    free(e.o4), free(e.o5), free(e.d1), free(e.d2), free(e.d3), free(e.m), free(e.s), free(e.t1);
    free(e.t2), free(e.t3);
}

int main(void) { return vf_test_main(); }
