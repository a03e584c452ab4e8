/* test_ops_rope.c — CPU rotary embedding on (B, L, H, D): forward against an f64
 * reference (complex multiply of interleaved pairs), backward against f64 finite
 * differences, accumulation, in place, odd D, identical bytes on 1/2/3 threads. */
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
    vf_cpu_rope_bwd(dx, r, cs, sn, B, L, H, D);
    CHECK_GRAD("rope bwd", rp_ref, &c, c.x, n, rd, n, dx, NULL, 400);
    float *g0 = tl_preset_like(dx, n), *g1 = tl_dupf(g0, n);
    vf_cpu_rope_bwd(g1, r, cs, sn, B, L, H, D);
    CHECK_GRAD("rope bwd accumulate", rp_ref, &c, c.x, n, rd, n, g1, g0, 400);
    free(x), free(cs), free(sn), free(c.x), free(want), free(out), free(xi), free(r), free(rd);
    free(dx), free(g0), free(g1);
}

VF_TEST(rope)
{
    check_rope(1, 1, 1, 2);
    check_rope(1, 1, 1, 1); /* no pair at all: identity */
    check_rope(2, 5, 3, 8);
    check_rope(2, 7, 2, 5); /* odd D */
    check_rope(1, 13, 4, 64);
}

typedef struct rrun {
    int64_t B, L, H, D;
    float *x, *cs, *sn, *r, *out, *dx;
} rrun;

static void r_run(void *vctx)
{
    rrun *e = vctx;
    int64_t n = e->B * e->L * e->H * e->D;
    vf_cpu_rope_fwd(e->out, e->x, e->cs, e->sn, e->B, e->L, e->H, e->D);
    memset(e->dx, 0, sizeof(float) * n);
    vf_cpu_rope_bwd(e->dx, e->r, e->cs, e->sn, e->B, e->L, e->H, e->D);
}

VF_TEST(rope_same_bits_any_thread_count)
{
    rrun e = {2, 257, 4, 64};
    int64_t n = e.B * e.L * e.H * e.D, P = e.D / 2;
    e.x = tl_randf(n, -2, 2), e.r = tl_randf(n, -1, 1), e.out = tl_zerosf(n), e.dx = tl_zerosf(n);
    e.cs = tl_zerosf(e.L * P), e.sn = tl_zerosf(e.L * P);
    make_angles(e.cs, e.sn, e.L, P);
    void *bufs[] = {e.out, e.dx};
    size_t bytes[] = {sizeof(float) * n, sizeof(float) * n};
    VF_CHECK(tl_same_threads("rope fwd+bwd", r_run, &e, 2, bufs, bytes));
    free(e.x), free(e.r), free(e.out), free(e.dx), free(e.cs), free(e.sn);
}

int main(void) { return vf_test_main(); }
