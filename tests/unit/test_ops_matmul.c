/* test_ops_matmul.c — CPU matmul (and the gemm engine under it) against an f64
 * reference: forward, backward by finite differences, accumulation, odd and
 * block-crossing sizes, bit equality across gemm ISA paths and thread counts. */
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

typedef struct mm {
    int64_t N, C, OC;
    double *x, *w, *b; /* b may be NULL */
} mm;

/* out (N, OC) = x·wᵀ + b, plain loops in f64 */
static void mm_ref(void *vctx, double *out)
{
    mm *c = vctx;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->OC; o++) {
            double s = c->b ? c->b[o] : 0.0;
            for (int64_t k = 0; k < c->C; k++) s += c->x[n * c->C + k] * c->w[o * c->C + k];
            out[n * c->OC + o] = s;
        }
}

static void check_shape(int64_t N, int64_t C, int64_t OC, int with_bias, int64_t maxfd)
{
    char what[128];
    float *x = tl_randf(N * C, -1, 1), *w = tl_randf(OC * C, -1, 1);
    float *b = with_bias ? tl_randf(OC, -1, 1) : NULL;
    mm c = {N, C, OC, tl_tod(x, N * C), tl_tod(w, OC * C), b ? tl_tod(b, OC) : NULL};
    double *want = tl_zerosd(N * OC);
    mm_ref(&c, want);
    float *out = tl_randf(N * OC, -9, 9); /* garbage: forward must overwrite */
    vf_cpu_matmul_fwd(out, x, w, b, N, C, OC);
    snprintf(what, sizeof what, "fwd %lldx%lldx%lld%s", (long long)N, (long long)C, (long long)OC,
             b ? " +bias" : "");
    CHECK_FWD(what, out, want, N * OC, 1e-5);

    /* backward: dout = r, the projection */
    float *r = tl_randf(N * OC, -1, 1);
    double *rd = tl_tod(r, N * OC);
    float *dx = tl_zerosf(N * C), *dw = tl_zerosf(OC * C), *db = tl_zerosf(OC);
    vf_cpu_matmul_bwd(dx, dw, b ? db : NULL, r, x, w, N, C, OC);
    snprintf(what, sizeof what, "dinp %lldx%lldx%lld", (long long)N, (long long)C, (long long)OC);
    CHECK_GRAD(what, mm_ref, &c, c.x, N * C, rd, N * OC, dx, NULL, maxfd);
    snprintf(what, sizeof what, "dw %lldx%lldx%lld", (long long)N, (long long)C, (long long)OC);
    CHECK_GRAD(what, mm_ref, &c, c.w, OC * C, rd, N * OC, dw, NULL, maxfd);
    if (b) {
        snprintf(what, sizeof what, "dbias %lldx%lldx%lld", (long long)N, (long long)C,
                 (long long)OC);
        CHECK_GRAD(what, mm_ref, &c, c.b, OC, rd, N * OC, db, NULL, maxfd);
    }
    /* accumulation: preset gradients, backward adds */
    float *dx0 = tl_preset_like(dx, N * C), *dw0 = tl_preset_like(dw, OC * C);
    float *db0 = tl_preset_like(db, OC);
    float *dx1 = tl_dupf(dx0, N * C), *dw1 = tl_dupf(dw0, OC * C), *db1 = tl_dupf(db0, OC);
    vf_cpu_matmul_bwd(dx1, dw1, b ? db1 : NULL, r, x, w, N, C, OC);
    CHECK_GRAD("  accumulate dinp", mm_ref, &c, c.x, N * C, rd, N * OC, dx1, dx0, maxfd);
    CHECK_GRAD("  accumulate dw", mm_ref, &c, c.w, OC * C, rd, N * OC, dw1, dw0, maxfd);
    if (b) CHECK_GRAD("  accumulate dbias", mm_ref, &c, c.b, OC, rd, N * OC, db1, db0, maxfd);

    free(x), free(w), free(b), free(c.x), free(c.w), free(c.b), free(want), free(out);
    free(r), free(rd), free(dx), free(dw), free(db), free(dx0), free(dw0), free(db0);
    free(dx1), free(dw1), free(db1);
}

VF_TEST(matmul_small_and_odd)
{
    check_shape(1, 1, 1, 1, 1000);
    check_shape(1, 7, 3, 0, 1000);
    check_shape(5, 7, 3, 1, 1000);
    check_shape(13, 1, 11, 1, 1000);
    check_shape(17, 19, 23, 1, 1000);
}

/* sizes that cross every block: KC = 256 (C, and N for dw), MC/NC tiles and micro-tiles
 * (8x16, 6x8, 4x4) leave ragged edges; finite differences on a spread sample */
VF_TEST(matmul_block_crossing)
{
    check_shape(131, 263, 37, 1, 48);
    check_shape(301, 29, 19, 1, 48);
    check_shape(3, 520, 271, 1, 48);
}

VF_TEST(matmul_empty_k)
{
    /* C = 0: out = bias; backward leaves dinp empty and dw untouched */
    float b[3] = {1.5f, -2.f, 0.25f}, out[6] = {9, 9, 9, 9, 9, 9};
    vf_cpu_matmul_fwd(out, NULL, NULL, b, 2, 0, 3);
    for (int i = 0; i < 6; i++) VF_CHECK(out[i] == b[i % 3]);
    float db[3] = {0, 0, 0}, dout[6] = {1, 2, 3, 4, 5, 6};
    vf_cpu_matmul_bwd(NULL, NULL, db, dout, NULL, NULL, 2, 0, 3);
    VF_CHECK(db[0] == 5 && db[1] == 7 && db[2] == 9);
}

/* ---- bit equality: gemm ISA paths and thread counts */

typedef struct mmrun {
    int64_t N, C, OC;
    float *x, *w, *b, *r, *out, *dx, *dw, *db;
} mmrun;

static void mm_run(void *vctx)
{
    mmrun *m = vctx;
    vf_cpu_matmul_fwd(m->out, m->x, m->w, m->b, m->N, m->C, m->OC);
    for (int64_t i = 0; i < m->N * m->C; i++) m->dx[i] = 0.5f;
    for (int64_t i = 0; i < m->OC * m->C; i++) m->dw[i] = -0.25f;
    for (int64_t i = 0; i < m->OC; i++) m->db[i] = 1.0f;
    vf_cpu_matmul_bwd(m->dx, m->dw, m->db, m->r, m->x, m->w, m->N, m->C, m->OC);
}

static mmrun mm_make(int64_t N, int64_t C, int64_t OC)
{
    mmrun m = {N, C, OC, tl_randf(N * C, -1, 1), tl_randf(OC * C, -1, 1), tl_randf(OC, -1, 1),
               tl_randf(N * OC, -1, 1), tl_zerosf(N * OC), tl_zerosf(N * C), tl_zerosf(OC * C),
               tl_zerosf(OC)};
    return m;
}
static void mm_free(mmrun *m)
{
    free(m->x), free(m->w), free(m->b), free(m->r), free(m->out), free(m->dx), free(m->dw);
    free(m->db);
}

VF_TEST(matmul_same_bits_any_thread_count)
{
    mmrun m = mm_make(203, 300, 157);
    void *bufs[] = {m.out, m.dx, m.dw, m.db};
    size_t bytes[] = {sizeof(float) * 203 * 157, sizeof(float) * 203 * 300,
                      sizeof(float) * 157 * 300, sizeof(float) * 157};
    VF_CHECK(tl_same_threads("matmul fwd+bwd 203x300x157", mm_run, &m, 4, bufs, bytes));
    mm_free(&m);
}

VF_TEST(matmul_same_bits_every_isa)
{
    const char *def = vf_cpu_isa();
    fprintf(stderr, "  default gemm ISA: %s\n", def);
    mmrun m = mm_make(77, 301, 45);
    mm_run(&m);
    float *out = tl_dupf(m.out, 77 * 45), *dx = tl_dupf(m.dx, 77 * 301);
    float *dw = tl_dupf(m.dw, 45 * 301);
    const char *isas[] = {"avx512", "avx2", "generic"};
    int tried = 0;
    for (int i = 0; i < 3; i++) {
        if (vf_cpu_set_isa(isas[i]) != 0) continue;
        tried++;
        mm_run(&m);
        int same = !memcmp(out, m.out, sizeof(float) * 77 * 45) &&
                   !memcmp(dx, m.dx, sizeof(float) * 77 * 301) &&
                   !memcmp(dw, m.dw, sizeof(float) * 45 * 301);
        VF_CHECK_MSG(same, "isa %s differs from %s", isas[i], def);
        fprintf(stderr, "  isa %-8s %s\n", isas[i], same ? "same bits" : "DIFFERENT");
    }
    VF_CHECK(tried >= 1);
    VF_CHECK(vf_cpu_set_isa("no-such-isa") == VF_EINVAL);
    VF_CHECK(vf_cpu_set_isa(def) == 0);
    free(out), free(dx), free(dw);
    mm_free(&m);
}

int main(void) { return vf_test_main(); }
