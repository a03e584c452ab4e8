/* test_ops_norm.c — CPU LayerNorm, RMSNorm and channel RMSNorm: forward (and the saved
 * statistics) against f64 references, backward against f64 finite differences with and
 * without affine parameters, accumulation (RMSNorm writes its dinp: ops.h), odd sizes,
 * identical bytes on 1/2/3 threads. */
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

typedef struct nm {
    int64_t N, C, S; /* rows × C (row norms) or (N=B, C, S) channel-first */
    double *x, *w, *b;
    double eps;
    int kind; /* 0 layernorm, 1 rmsnorm, 2 rmsnorm_ch */
} nm;

static void nm_ref(void *vctx, double *out)
{
    nm *c = vctx;
    if (c->kind == 2) {
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t s = 0; s < c->S; s++) {
                double ss = 0;
                for (int64_t k = 0; k < c->C; k++) {
                    double v = c->x[(b * c->C + k) * c->S + s];
                    ss += v * v;
                }
                double r = 1.0 / sqrt(ss / c->C + c->eps);
                for (int64_t k = 0; k < c->C; k++) {
                    int64_t i = (b * c->C + k) * c->S + s;
                    out[i] = c->x[i] * r * (c->w ? c->w[k] : 1.0);
                }
            }
        return;
    }
    for (int64_t n = 0; n < c->N; n++) {
        const double *x = c->x + n * c->C;
        double mu = 0, var = 0;
        if (c->kind == 0) {
            for (int64_t k = 0; k < c->C; k++) mu += x[k];
            mu /= c->C;
        }
        for (int64_t k = 0; k < c->C; k++) var += (x[k] - mu) * (x[k] - mu);
        var /= c->C;
        for (int64_t k = 0; k < c->C; k++) {
            double y = (x[k] - mu) / sqrt(var + c->eps);
            if (c->w) y *= c->w[k];
            if (c->b) y += c->b[k];
            out[n * c->C + k] = y;
        }
    }
}

static void run_fwd(const nm *c, float *out, float *mean, float *rstd, const float *x,
                    const float *w, const float *b)
{
    if (c->kind == 0) vf_cpu_layernorm_fwd(out, mean, rstd, x, w, b, c->N, c->C, (float)c->eps);
    else if (c->kind == 1) vf_cpu_rmsnorm_fwd(out, rstd, x, w, c->N, c->C, (float)c->eps);
    else vf_cpu_rmsnorm_ch_fwd(out, x, w, c->N, c->C, c->S, (float)c->eps);
}

static void run_bwd(const nm *c, float *dx, float *dw, float *db, const float *r, const float *x,
                    const float *w, const float *mean, const float *rstd)
{
    if (c->kind == 0) vf_cpu_layernorm_bwd(dx, dw, db, r, x, w, mean, rstd, c->N, c->C);
    else if (c->kind == 1) vf_cpu_rmsnorm_bwd(dx, dw, r, x, w, rstd, c->N, c->C);
    else vf_cpu_rmsnorm_ch_bwd(dx, dw, r, x, w, c->N, c->C, c->S, (float)c->eps);
}

static void check_norm(int kind, int64_t N, int64_t C, int64_t S, int affine, double shift)
{
    static const char *names[] = {"layernorm", "rmsnorm", "rmsnorm_ch"};
    char what[128];
    int64_t n = N * C * (kind == 2 ? S : 1);
    /* an offset makes the mean matter (catastrophic cancellation if done naively) */
    float *x = tl_randf(n, shift - 1.5, shift + 1.5);
    float *w = affine ? tl_randf(C, 0.5, 1.5) : NULL;
    float *b = affine && kind == 0 ? tl_randf(C, -0.5, 0.5) : NULL;
    nm c = {N, C, S, tl_tod(x, n), w ? tl_tod(w, C) : NULL, b ? tl_tod(b, C) : NULL, 1e-5, kind};
    double *want = tl_zerosd(n);
    nm_ref(&c, want);
    float *out = tl_zerosf(n), *mean = tl_zerosf(N), *rstd = tl_zerosf(N);
    run_fwd(&c, out, mean, rstd, x, w, b);
    snprintf(what, sizeof what, "%s fwd N=%lld C=%lld S=%lld%s", names[kind], (long long)N,
             (long long)C, (long long)S, affine ? " affine" : "");
    CHECK_FWD(what, out, want, n, 1e-5);
    if (kind < 2) { /* saved statistics */
        double *wm = tl_zerosd(N), *wr = tl_zerosd(N);
        for (int64_t i = 0; i < N; i++) {
            double mu = 0, var = 0;
            if (kind == 0) {
                for (int64_t k = 0; k < C; k++) mu += c.x[i * C + k];
                mu /= C;
            }
            for (int64_t k = 0; k < C; k++) var += (c.x[i * C + k] - mu) * (c.x[i * C + k] - mu);
            wm[i] = mu;
            wr[i] = 1.0 / sqrt(var / C + c.eps);
        }
        if (kind == 0) CHECK_FWD("  saved mean", mean, wm, N, 1e-5);
        CHECK_FWD("  saved rstd", rstd, wr, N, 1e-5);
        free(wm), free(wr);
    }

    float *r = tl_randf(n, -1, 1);
    double *rd = tl_tod(r, n);
    float *dx = tl_zerosf(n), *dw = tl_zerosf(C), *db = tl_zerosf(C);
    if (kind == 1) /* written: an element left alone stays NaN and fails */
        for (int64_t i = 0; i < n; i++) dx[i] = NAN;
    run_bwd(&c, dx, w ? dw : NULL, b ? db : NULL, r, x, w, mean, rstd);
    snprintf(what, sizeof what, "%s dinp", names[kind]);
    CHECK_GRAD(what, nm_ref, &c, c.x, n, rd, n, dx, NULL, 300);
    if (w) {
        snprintf(what, sizeof what, "%s dw", names[kind]);
        CHECK_GRAD(what, nm_ref, &c, c.w, C, rd, n, dw, NULL, 300);
    }
    if (b) CHECK_GRAD("layernorm db", nm_ref, &c, c.b, C, rd, n, db, NULL, 300);
    float *dx0 = tl_preset_like(dx, n), *dw0 = tl_preset_like(dw, C), *db0 = tl_preset_like(db, C);
    float *dx1 = tl_dupf(dx0, n), *dw1 = tl_dupf(dw0, C), *db1 = tl_dupf(db0, C);
    run_bwd(&c, dx1, w ? dw1 : NULL, b ? db1 : NULL, r, x, w, mean, rstd);
    if (kind == 1)
        CHECK_GRAD("  dinp written over preset values", nm_ref, &c, c.x, n, rd, n, dx1, NULL, 300);
    else
        CHECK_GRAD("  accumulate dinp", nm_ref, &c, c.x, n, rd, n, dx1, dx0, 300);
    if (w) CHECK_GRAD("  accumulate dw", nm_ref, &c, c.w, C, rd, n, dw1, dw0, 300);
    if (b) CHECK_GRAD("  accumulate db", nm_ref, &c, c.b, C, rd, n, db1, db0, 300);
    /* only parameter gradients requested: dinp absent, dw identical */
    if (w) {
        float *dw2 = tl_zerosf(C);
        run_bwd(&c, NULL, dw2, NULL, r, x, w, mean, rstd);
        VF_CHECK(memcmp(dw2, dw, sizeof(float) * C) == 0);
        free(dw2);
    }
    free(x), free(w), free(b), free(c.x), free(c.w), free(c.b), free(want), free(out), free(mean);
    free(rstd), free(r), free(rd), free(dx), free(dw), free(db), free(dx0), free(dw0), free(db0);
    free(dx1), free(dw1), free(db1);
}

VF_TEST(layernorm)
{
    check_norm(0, 1, 1, 1, 1, 0);
    check_norm(0, 3, 7, 1, 0, 0);
    check_norm(0, 5, 67, 1, 1, 3.0);
    check_norm(0, 9, 131, 1, 1, -20.0); /* C crosses the 64-column chunks */
}

VF_TEST(rmsnorm)
{
    check_norm(1, 1, 1, 1, 1, 0);
    check_norm(1, 3, 7, 1, 0, 0);
    check_norm(1, 5, 67, 1, 1, 1.0);
    check_norm(1, 9, 131, 1, 1, 0);
}

VF_TEST(rmsnorm_channels)
{
    check_norm(2, 1, 1, 1, 1, 0);
    check_norm(2, 2, 5, 7, 0, 0);
    check_norm(2, 2, 13, 37, 1, 0.5);
    check_norm(2, 1, 3, 300, 1, 0); /* S crosses the 256-position chunks */
}

/* zero rows stay finite (eps keeps rstd bounded) */
VF_TEST(norm_zero_input)
{
    float x[8] = {0}, out[8], rstd[2], mean[2];
    vf_cpu_layernorm_fwd(out, mean, rstd, x, NULL, NULL, 2, 4, 1e-5f);
    for (int i = 0; i < 8; i++) VF_CHECK(out[i] == 0.0f);
    vf_cpu_rmsnorm_fwd(out, rstd, x, NULL, 2, 4, 1e-5f);
    for (int i = 0; i < 8; i++) VF_CHECK(out[i] == 0.0f);
    vf_cpu_rmsnorm_ch_fwd(out, x, NULL, 1, 4, 2, 1e-12f);
    for (int i = 0; i < 8; i++) VF_CHECK(out[i] == 0.0f);
}

typedef struct nrun {
    int64_t N, C, B, CC, S;
    float *x, *w, *b, *r, *o1, *o2, *o3, *m, *s1, *s2, *dx, *dw, *db, *dx3, *dw3;
} nrun;

static void n_run(void *vctx)
{
    nrun *e = vctx;
    vf_cpu_layernorm_fwd(e->o1, e->m, e->s1, e->x, e->w, e->b, e->N, e->C, 1e-6f);
    vf_cpu_rmsnorm_fwd(e->o2, e->s2, e->x, e->w, e->N, e->C, 1e-6f);
    vf_cpu_rmsnorm_ch_fwd(e->o3, e->x, e->w, e->B, e->CC, e->S, 1e-6f);
    memset(e->dx, 0, sizeof(float) * e->N * e->C);
    memset(e->dw, 0, sizeof(float) * e->C);
    memset(e->db, 0, sizeof(float) * e->C);
    memset(e->dx3, 0, sizeof(float) * e->N * e->C);
    memset(e->dw3, 0, sizeof(float) * e->C);
    vf_cpu_rmsnorm_bwd(e->dx, e->dw, e->r, e->x, e->w, e->s2, e->N, e->C); /* writes dx */
    vf_cpu_layernorm_bwd(e->dx, e->dw, e->db, e->r, e->x, e->w, e->m, e->s1, e->N, e->C);
    vf_cpu_rmsnorm_ch_bwd(e->dx3, e->dw3, e->r, e->x, e->w, e->B, e->CC, e->S, 1e-6f);
}

VF_TEST(norm_same_bits_any_thread_count)
{
    nrun e = {.N = 401, .C = 384, .B = 3, .CC = 384, .S = 133};
    int64_t n = e.N * e.C;
    e.x = tl_randf(n, -2, 2), e.w = tl_randf(e.C, 0.5, 1.5), e.b = tl_randf(e.C, -1, 1);
    e.r = tl_randf(n, -1, 1), e.o1 = tl_zerosf(n), e.o2 = tl_zerosf(n), e.o3 = tl_zerosf(n);
    e.m = tl_zerosf(e.N), e.s1 = tl_zerosf(e.N), e.s2 = tl_zerosf(e.N), e.dx = tl_zerosf(n);
    e.dw = tl_zerosf(e.C), e.db = tl_zerosf(e.C), e.dx3 = tl_zerosf(n), e.dw3 = tl_zerosf(e.C);
    void *bufs[] = {e.o1, e.o2, e.o3, e.dx, e.dw, e.db, e.dx3, e.dw3};
    size_t nb = sizeof(float) * n, cb = sizeof(float) * e.C;
    size_t bytes[] = {nb, nb, nb, nb, cb, cb, nb, cb};
    VF_CHECK(tl_same_threads("layernorm/rmsnorm/rmsnorm_ch fwd+bwd", n_run, &e, 8, bufs, bytes));
    free(e.x), free(e.w), free(e.b), free(e.r), free(e.o1), free(e.o2), free(e.o3), free(e.m);
    free(e.s1), free(e.s2), free(e.dx), free(e.dw), free(e.db), free(e.dx3), free(e.dw3);
}

int main(void) { return vf_test_main(); }
