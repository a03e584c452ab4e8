/* test_ops_rope.c — CPU rotary embedding on (B, L, H, D): forward against an f64
 * reference (complex multiply of interleaved pairs), backward against f64 finite
 * differences (written over whatever the buffer held), in place, odd D, identical bytes
 * on 1/2/3 threads; RMSNorm+RoPE as one op against the f64 reference of the composite,
 * by finite differences, and bit for bit against rmsnorm then rope. */
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

typedef struct rp {
    int64_t B, L, H, D;
    double *x;
    const float *cos, *sin;
} rp;

/* (x0 + i·x1)·e^{iθ} per pair; odd D: last element unchanged */
static void rp_ref(void *vctx, double *out)
{
    rp *c = vctx;
    int64_t P = c->D / 2;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t l = 0; l < c->L; l++)
            for (int64_t h = 0; h < c->H; h++) {
                int64_t o = ((b * c->L + l) * c->H + h) * c->D;
                for (int64_t i = 0; i < P; i++) {
                    double re = c->x[o + 2 * i], im = c->x[o + 2 * i + 1];
                    double cr = c->cos[l * P + i], ci = c->sin[l * P + i];
                    out[o + 2 * i] = re * cr - im * ci;
                    out[o + 2 * i + 1] = re * ci + im * cr;
                }
                if (c->D & 1) out[o + c->D - 1] = c->x[o + c->D - 1];
            }
}

/* angles as a 3D RoPE would make them: position-dependent frequencies */
static void make_angles(float *cs, float *sn, int64_t L, int64_t P)
{
    for (int64_t l = 0; l < L; l++)
        for (int64_t i = 0; i < P; i++) {
            double th = (double)l * pow(10000.0, -(double)i / (double)(P > 0 ? P : 1)) + 0.1 * i;
            cs[l * P + i] = (float)cos(th);
            sn[l * P + i] = (float)sin(th);
        }
}

static void check_rope(int64_t B, int64_t L, int64_t H, int64_t D)
{
    char what[96];
    int64_t n = B * L * H * D, P = D / 2;
    float *x = tl_randf(n, -2, 2), *cs = tl_zerosf(L * P), *sn = tl_zerosf(L * P);
    make_angles(cs, sn, L, P);
    rp c = {B, L, H, D, tl_tod(x, n), cs, sn};
    double *want = tl_zerosd(n);
    rp_ref(&c, want);
    float *out = tl_zerosf(n);
    vf_cpu_rope_fwd(out, x, cs, sn, B, L, H, D);
    snprintf(what, sizeof what, "rope fwd %lldx%lldx%lldx%lld", (long long)B, (long long)L,
             (long long)H, (long long)D);
    CHECK_FWD(what, out, want, n, 1e-5);
    float *xi = tl_dupf(x, n);
    vf_cpu_rope_fwd(xi, xi, cs, sn, B, L, H, D);
    VF_CHECK(memcmp(xi, out, sizeof(float) * n) == 0);

    float *r = tl_randf(n, -1, 1);
    double *rd = tl_tod(r, n);
    float *dx = tl_zerosf(n);
    for (int64_t i = 0; i < n; i++) dx[i] = NAN; /* written: an element left alone fails */
    vf_cpu_rope_bwd(dx, r, cs, sn, B, L, H, D);
    CHECK_GRAD("rope bwd", rp_ref, &c, c.x, n, rd, n, dx, NULL, 400);
    float *ri = tl_dupf(r, n); /* in place */
    vf_cpu_rope_bwd(ri, ri, cs, sn, B, L, H, D);
    VF_CHECK(memcmp(ri, dx, sizeof(float) * n) == 0);
    free(x), free(cs), free(sn), free(c.x), free(want), free(out), free(xi), free(r), free(rd);
    free(dx), free(ri);
}

VF_TEST(rope)
{
    check_rope(1, 1, 1, 2);
    check_rope(1, 1, 1, 1); /* no pair at all: identity */
    check_rope(2, 5, 3, 8);
    check_rope(2, 7, 2, 5); /* odd D */
    check_rope(1, 13, 4, 64);
}

/* ---- RMSNorm over the row (C = H·D) with gain w, then RoPE */

typedef struct nr {
    int64_t B, L, H, D;
    double *x, *w; /* w may be NULL */
    const float *cos, *sin;
    double eps;
} nr;

static void nr_ref(void *vctx, double *out)
{
    nr *c = vctx;
    const int64_t C = c->H * c->D, n = c->B * c->L * C;
    double *y = tl_zerosd(n);
    for (int64_t row = 0; row < c->B * c->L; row++) {
        double ss = 0;
        for (int64_t k = 0; k < C; k++) ss += c->x[row * C + k] * c->x[row * C + k];
        const double r = 1.0 / sqrt(ss / C + c->eps);
        for (int64_t k = 0; k < C; k++) y[row * C + k] = c->x[row * C + k] * r * (c->w ? c->w[k] : 1.0);
    }
    rp rc = {c->B, c->L, c->H, c->D, y, c->cos, c->sin};
    rp_ref(&rc, out);
    free(y);
}

static void check_rmsnorm_rope(int64_t B, int64_t L, int64_t H, int64_t D, int affine)
{
    char what[128];
    const int64_t C = H * D, N = B * L, n = N * C, P = D / 2;
    float *x = tl_randf(n, -2, 2), *w = affine ? tl_randf(C, 0.5, 1.5) : NULL;
    float *cs = tl_zerosf(L * P + 1), *sn = tl_zerosf(L * P + 1);
    make_angles(cs, sn, L, P);
    nr c = {B, L, H, D, tl_tod(x, n), w ? tl_tod(w, C) : NULL, cs, sn, 1e-6};
    double *want = tl_zerosd(n);
    nr_ref(&c, want);
    float *out = tl_randf(n, -9, 9), *rstd = tl_zerosf(N);
    vf_cpu_rmsnorm_rope_fwd(out, rstd, x, w, cs, sn, B, L, H, D, 1e-6f);
    snprintf(what, sizeof what, "rmsnorm_rope fwd %lldx%lldx%lldx%lld%s", (long long)B, (long long)L,
             (long long)H, (long long)D, affine ? " gain" : "");
    CHECK_FWD(what, out, want, n, 1e-5);
    /* bit for bit: rmsnorm_fwd then rope_fwd */
    float *o2 = tl_zerosf(n), *rstd2 = tl_zerosf(N);
    vf_cpu_rmsnorm_fwd(o2, rstd2, x, w, N, C, 1e-6f);
    vf_cpu_rope_fwd(o2, o2, cs, sn, B, L, H, D);
    VF_CHECK(memcmp(out, o2, sizeof(float) * n) == 0 && memcmp(rstd, rstd2, sizeof(float) * N) == 0);

    float *r = tl_randf(n, -1, 1);
    double *rd = tl_tod(r, n);
    float *dx = tl_zerosf(n), *dw = tl_randf(C, -1, 1), *dw0 = tl_dupf(dw, C);
    for (int64_t i = 0; i < n; i++) dx[i] = NAN; /* written */
    vf_cpu_rmsnorm_rope_bwd(dx, w ? dw : NULL, r, x, w, rstd, cs, sn, B, L, H, D);
    snprintf(what, sizeof what, "rmsnorm_rope dinp%s", affine ? " gain" : "");
    CHECK_GRAD(what, nr_ref, &c, c.x, n, rd, n, dx, NULL, 300);
    if (w) CHECK_GRAD("  dw (accumulated)", nr_ref, &c, c.w, C, rd, n, dw, dw0, 300);
    /* bit for bit: rope_bwd then rmsnorm_bwd */
    float *t = tl_zerosf(n), *dx2 = tl_zerosf(n), *dw2 = tl_dupf(dw0, C);
    vf_cpu_rope_bwd(t, r, cs, sn, B, L, H, D);
    vf_cpu_rmsnorm_bwd(dx2, w ? dw2 : NULL, t, x, w, rstd, N, C);
    VF_CHECK(memcmp(dx, dx2, sizeof(float) * n) == 0 && memcmp(dw, dw2, sizeof(float) * C) == 0);
    free(x), free(w), free(cs), free(sn), free(c.x), free(c.w), free(want), free(out), free(rstd), free(o2);
    free(rstd2), free(r), free(rd), free(dx), free(dw), free(dw0), free(t), free(dx2), free(dw2);
}

VF_TEST(rmsnorm_rope)
{
    check_rmsnorm_rope(1, 1, 1, 2, 1);
    check_rmsnorm_rope(2, 5, 3, 8, 1);
    check_rmsnorm_rope(2, 5, 3, 8, 0);
    check_rmsnorm_rope(2, 7, 2, 5, 1);  /* odd D: the last element of a head passes the rotation */
    check_rmsnorm_rope(1, 3, 5, 24, 1); /* C = 120: over one 64-column chunk of the gain gradient */
}

typedef struct rrun {
    int64_t B, L, H, D;
    float *x, *cs, *sn, *r, *out, *dx, *w, *out2, *rstd, *dx2, *dw;
} rrun;

static void r_run(void *vctx)
{
    rrun *e = vctx;
    int64_t n = e->B * e->L * e->H * e->D;
    vf_cpu_rope_fwd(e->out, e->x, e->cs, e->sn, e->B, e->L, e->H, e->D);
    vf_cpu_rope_bwd(e->dx, e->r, e->cs, e->sn, e->B, e->L, e->H, e->D);
    vf_cpu_rmsnorm_rope_fwd(e->out2, e->rstd, e->x, e->w, e->cs, e->sn, e->B, e->L, e->H, e->D, 1e-6f);
    memset(e->dw, 0, sizeof(float) * e->H * e->D);
    vf_cpu_rmsnorm_rope_bwd(e->dx2, e->dw, e->r, e->x, e->w, e->rstd, e->cs, e->sn, e->B, e->L, e->H, e->D);
    (void)n;
}

VF_TEST(rope_same_bits_any_thread_count)
{
    rrun e = {2, 257, 4, 64};
    int64_t n = e.B * e.L * e.H * e.D, P = e.D / 2;
    e.x = tl_randf(n, -2, 2), e.r = tl_randf(n, -1, 1), e.out = tl_zerosf(n), e.dx = tl_zerosf(n);
    e.cs = tl_zerosf(e.L * P), e.sn = tl_zerosf(e.L * P);
    e.w = tl_randf(e.H * e.D, 0.5, 1.5), e.out2 = tl_zerosf(n), e.rstd = tl_zerosf(e.B * e.L);
    e.dx2 = tl_zerosf(n), e.dw = tl_zerosf(e.H * e.D);
    make_angles(e.cs, e.sn, e.L, P);
    void *bufs[] = {e.out, e.dx, e.out2, e.rstd, e.dx2, e.dw};
    size_t bytes[] = {sizeof(float) * n, sizeof(float) * n, sizeof(float) * n,
                      sizeof(float) * e.B * e.L, sizeof(float) * n, sizeof(float) * e.H * e.D};
    VF_CHECK(tl_same_threads("rope, rmsnorm_rope fwd+bwd", r_run, &e, 6, bufs, bytes));
    free(e.x), free(e.r), free(e.out), free(e.dx), free(e.cs), free(e.sn), free(e.w), free(e.out2);
    free(e.rstd), free(e.dx2), free(e.dw);
}

int main(void) { return vf_test_main(); }
