/* test_ops_elementwise.c — CPU add, axpy, GELU (tanh and exact), SiLU, modulate and gated_add:
 * forward against f64 references, backward against f64 finite differences (into zeroed
 * and into preset gradients), in-place use, and identical bytes on 1/2/3 threads. */
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
    un_bwd_fn bwd;
} unops[3] = {
    {"gelu", gelu_ref, vf_cpu_gelu_fwd, vf_cpu_gelu_bwd},
    {"silu", silu_ref, vf_cpu_silu_fwd, vf_cpu_silu_bwd},
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
    unops[which].bwd(dx, r, x, n);
    snprintf(what, sizeof what, "%s bwd", nm);
    CHECK_GRAD(what, un_ref, &c, c.x, n, rd, n, dx, NULL, 400);
    float *g0 = tl_preset_like(dx, n), *g1 = tl_dupf(g0, n);
    unops[which].bwd(g1, r, x, n);
    snprintf(what, sizeof what, "%s bwd accumulate", nm);
    CHECK_GRAD(what, un_ref, &c, c.x, n, rd, n, g1, g0, 400);
    free(x), free(c.x), free(want), free(out), free(y), free(r), free(rd), free(dx), free(g0);
    free(g1);
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
    float *dx = tl_zerosf(n), *d1 = tl_zerosf(B * C), *d2 = tl_zerosf(n2);
    for (int acc = 0; acc < 2; acc++) {
        float *g0x = acc ? tl_preset_like(dx, n) : NULL, *g01 = acc ? tl_preset_like(d1, B * C) : NULL;
        float *g02 = acc ? tl_preset_like(d2, n2) : NULL;
        float *ex = acc ? tl_dupf(g0x, n) : dx, *e1 = acc ? tl_dupf(g01, B * C) : d1;
        float *e2 = acc ? tl_dupf(g02, n2) : d2;
        if (gated) vf_cpu_gated_add_bwd(ex, e1, e2, r, p1, p2, B, L, C);
        else vf_cpu_modulate_bwd(ex, e1, e2, r, x, p2, B, L, C);
        snprintf(what, sizeof what, "%s%s dx", nm, acc ? " accumulate" : "");
        CHECK_GRAD(what, md_ref, &c, c.x, n, rd, n, ex, g0x, 300);
        snprintf(what, sizeof what, "%s%s %s", nm, acc ? " accumulate" : "", gated ? "dgate" : "dshift");
        CHECK_GRAD(what, md_ref, &c, c.p1, B * C, rd, n, e1, g01, 300);
        snprintf(what, sizeof what, "%s%s %s", nm, acc ? " accumulate" : "", gated ? "dy" : "dscale");
        CHECK_GRAD(what, md_ref, &c, c.p2, n2, rd, n, e2, g02, 300);
        if (acc) free(g0x), free(g01), free(g02), free(ex), free(e1), free(e2);
    }
    /* NULL gradients are skipped, the others unchanged */
    float *only = tl_zerosf(B * C);
    if (gated) vf_cpu_gated_add_bwd(NULL, only, NULL, r, p1, p2, B, L, C);
    else vf_cpu_modulate_bwd(NULL, only, NULL, r, x, p2, B, L, C);
    VF_CHECK(memcmp(only, d1, sizeof(float) * B * C) == 0);
    free(x), free(p1), free(p2), free(c.x), free(c.p1), free(c.p2), free(want), free(out);
    free(xi), free(r), free(rd), free(dx), free(d1), free(d2), free(only);
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

/* ---- identical bytes on any thread count */

typedef struct ewrun {
    int64_t B, L, C, n;
    float *x, *y, *p1, *p2, *r, *o1, *o2, *o3, *o4, *d1, *d2, *d3;
} ewrun;

static void ew_run(void *vctx)
{
    ewrun *e = vctx;
    vf_cpu_gelu_fwd(e->o1, e->x, e->n);
    vf_cpu_silu_fwd(e->o2, e->x, e->n);
    memset(e->o3, 0, sizeof(float) * e->n);
    vf_cpu_gelu_bwd(e->o3, e->r, e->x, e->n);
    vf_cpu_silu_bwd(e->o3, e->r, e->x, e->n);
    vf_cpu_axpy(e->o3, e->x, 0.3f, e->n);
    vf_cpu_add(e->o4, e->x, e->y, e->n);
    vf_cpu_modulate_fwd(e->o4, e->o4, e->p1, e->p2, e->B, e->L, e->C);
    vf_cpu_gated_add_fwd(e->o4, e->o4, e->p1, e->y, e->B, e->L, e->C);
    memset(e->d1, 0, sizeof(float) * e->n);
    memset(e->d2, 0, sizeof(float) * e->B * e->C);
    memset(e->d3, 0, sizeof(float) * e->B * e->C);
    vf_cpu_modulate_bwd(e->d1, e->d2, e->d3, e->r, e->x, e->p2, e->B, e->L, e->C);
    vf_cpu_gated_add_bwd(e->d1, e->d2, e->o3, e->r, e->p1, e->y, e->B, e->L, e->C);
}

VF_TEST(elementwise_same_bits_any_thread_count)
{
    ewrun e = {.B = 3, .L = 301, .C = 200};
    e.n = e.B * e.L * e.C;
    e.x = tl_randf(e.n, -4, 4), e.y = tl_randf(e.n, -1, 1), e.r = tl_randf(e.n, -1, 1);
    e.p1 = tl_randf(e.B * e.C, -1, 1), e.p2 = tl_randf(e.B * e.C, -1, 1);
    e.o1 = tl_zerosf(e.n), e.o2 = tl_zerosf(e.n), e.o3 = tl_zerosf(e.n), e.o4 = tl_zerosf(e.n);
    e.d1 = tl_zerosf(e.n), e.d2 = tl_zerosf(e.B * e.C), e.d3 = tl_zerosf(e.B * e.C);
    void *bufs[] = {e.o1, e.o2, e.o3, e.o4, e.d1, e.d2, e.d3};
    size_t nb = sizeof(float) * e.n, pb = sizeof(float) * e.B * e.C;
    size_t bytes[] = {nb, nb, nb, nb, nb, pb, pb};
    VF_CHECK(tl_same_threads("gelu/silu/add/axpy/modulate/gated_add", ew_run, &e, 7, bufs, bytes));
    free(e.x), free(e.y), free(e.r), free(e.p1), free(e.p2), free(e.o1), free(e.o2), free(e.o3);
    free(e.o4), free(e.d1), free(e.d2), free(e.d3);
}

int main(void) { return vf_test_main(); }
