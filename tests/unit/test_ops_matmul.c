/* test_ops_matmul.c — CPU matmul (and the gemm engine under it) against an f64
 * reference: forward, backward by finite differences, dinp written or accumulated by its
 * mode, odd and block-crossing sizes, bit equality across gemm ISA paths and thread
 * counts; the fused forms (GELU after the forward, its derivative in the backward, nb
 * layers over one input) against f64 references of their composite functions and bit
 * for bit against their unfused sequences; the frozen-FP8-weight forms bit for bit against
 * the plain ones on the dequantised weight. */
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
    /* dinp written: poisoned with NaN before, so an element left alone fails */
    float *dx = tl_zerosf(N * C), *dw = tl_zerosf(OC * C), *db = tl_zerosf(OC);
    for (int64_t i = 0; i < N * C; i++) dx[i] = NAN;
    vf_cpu_matmul_bwd(dx, dw, b ? db : NULL, r, x, w, N, C, OC, 0);
    snprintf(what, sizeof what, "dinp %lldx%lldx%lld", (long long)N, (long long)C, (long long)OC);
    CHECK_GRAD(what, mm_ref, &c, c.x, N * C, rd, N * OC, dx, NULL, maxfd);
    snprintf(what, sizeof what, "dw %lldx%lldx%lld", (long long)N, (long long)C, (long long)OC);
    CHECK_GRAD(what, mm_ref, &c, c.w, OC * C, rd, N * OC, dw, NULL, maxfd);
    if (b) {
        snprintf(what, sizeof what, "dbias %lldx%lldx%lld", (long long)N, (long long)C,
                 (long long)OC);
        CHECK_GRAD(what, mm_ref, &c, c.b, OC, rd, N * OC, db, NULL, maxfd);
    }
    /* accumulation: preset gradients, backward adds (dinp in its ADD mode) */
    float *dx0 = tl_preset_like(dx, N * C), *dw0 = tl_preset_like(dw, OC * C);
    float *db0 = tl_preset_like(db, OC);
    float *dx1 = tl_dupf(dx0, N * C), *dw1 = tl_dupf(dw0, OC * C), *db1 = tl_dupf(db0, OC);
    vf_cpu_matmul_bwd(dx1, dw1, b ? db1 : NULL, r, x, w, N, C, OC, 1);
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
    vf_cpu_matmul_bwd(NULL, NULL, db, dout, NULL, NULL, 2, 0, 3, 0);
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
    vf_cpu_matmul_bwd(m->dx, m->dw, m->db, m->r, m->x, m->w, m->N, m->C, m->OC, 1);
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

/* ---- GELU fused on either side: a layer whose input is gelu(pre + bp), so that finite
 * differences in pre give dpre and in bp the previous layer's bias gradient */

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

typedef struct mg {
    int64_t N, C, OC;
    double *pre, *bp, *w, *b;
} mg;

static void mg_ref(void *vctx, double *out)
{
    mg *c = vctx;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->OC; o++) {
            double s = c->b[o];
            for (int64_t k = 0; k < c->C; k++)
                s += gelu_ref(c->pre[n * c->C + k] + c->bp[k]) * c->w[o * c->C + k];
            out[n * c->OC + o] = s;
        }
}

static void check_gelu_fused(int64_t N, int64_t C, int64_t OC)
{
    char what[128];
    /* forward: pre = x·w1ᵀ + b1, out = gelu(pre), against the f64 reference and bit for
     * bit against matmul_fwd then gelu_fwd */
    float *x = tl_randf(N * OC, -1, 1), *w1 = tl_randf(C * OC, -1, 1), *b1 = tl_randf(C, -1, 1);
    mm c1 = {N, OC, C, tl_tod(x, N * OC), tl_tod(w1, C * OC), tl_tod(b1, C)};
    double *want = tl_zerosd(N * C);
    mm_ref(&c1, want);
    for (int64_t i = 0; i < N * C; i++) want[i] = gelu_ref(want[i]);
    float *pre = tl_randf(N * C, -9, 9), *g = tl_randf(N * C, -9, 9);
    float *pre2 = tl_zerosf(N * C), *g2 = tl_zerosf(N * C);
    vf_cpu_matmul_gelu_fwd(g, pre, x, w1, b1, N, OC, C);
    snprintf(what, sizeof what, "matmul_gelu_fwd %lldx%lldx%lld", (long long)N, (long long)OC, (long long)C);
    CHECK_FWD(what, g, want, N * C, 1e-5);
    vf_cpu_matmul_fwd(pre2, x, w1, b1, N, OC, C);
    vf_cpu_gelu_fwd(g2, pre2, N * C);
    VF_CHECK(memcmp(pre, pre2, sizeof(float) * N * C) == 0 && memcmp(g, g2, sizeof(float) * N * C) == 0);

    /* backward of out2 = g·w2ᵀ + b2 through the GELU */
    float *w = tl_randf(OC * C, -1, 1), *b = tl_randf(OC, -1, 1), *r = tl_randf(N * OC, -1, 1);
    double *bp = tl_zerosd(C);
    mg c = {N, C, OC, tl_tod(pre, N * C), bp, tl_tod(w, OC * C), tl_tod(b, OC)};
    double *rd = tl_tod(r, N * OC);
    float *dpre = tl_zerosf(N * C), *dbp = tl_randf(C, -1, 1), *dw = tl_randf(OC * C, -1, 1);
    float *db = tl_randf(OC, -1, 1);
    float *dbp0 = tl_dupf(dbp, C), *dw0 = tl_dupf(dw, OC * C), *db0 = tl_dupf(db, OC);
    for (int64_t i = 0; i < N * C; i++) dpre[i] = NAN; /* written */
    vf_cpu_matmul_dgelu_bwd(dpre, dbp, dw, db, r, g, w, pre, N, C, OC);
    snprintf(what, sizeof what, "matmul_dgelu_bwd dpre %lldx%lldx%lld", (long long)N, (long long)C, (long long)OC);
    CHECK_GRAD(what, mg_ref, &c, c.pre, N * C, rd, N * OC, dpre, NULL, 300);
    CHECK_GRAD("  dbias_pre (accumulated)", mg_ref, &c, c.bp, C, rd, N * OC, dbp, dbp0, 300);
    CHECK_GRAD("  dw (accumulated)", mg_ref, &c, c.w, OC * C, rd, N * OC, dw, dw0, 300);
    CHECK_GRAD("  dbias (accumulated)", mg_ref, &c, c.b, OC, rd, N * OC, db, db0, 300);
    /* the unfused sequence: matmul_bwd (no first bias), gelu_bwd, the first layer's bias
     * gradient as matmul_bwd forms it */
    float *t = tl_zerosf(N * C), *d2 = tl_zerosf(N * C), *dbp2 = tl_dupf(dbp0, C);
    float *dw2 = tl_dupf(dw0, OC * C), *db2 = tl_dupf(db0, OC);
    vf_cpu_matmul_bwd(t, dw2, db2, r, g, w, N, C, OC, 0);
    vf_cpu_gelu_bwd(d2, t, pre, N * C);
    vf_cpu_matmul_bwd(NULL, NULL, dbp2, d2, NULL, NULL, N, 0, C, 0);
    VF_CHECK_MSG(memcmp(dpre, d2, sizeof(float) * N * C) == 0 && memcmp(dbp, dbp2, sizeof(float) * C) == 0 &&
                     memcmp(dw, dw2, sizeof(float) * OC * C) == 0 && memcmp(db, db2, sizeof(float) * OC) == 0,
                 "matmul_dgelu_bwd %lldx%lldx%lld differs from its unfused sequence", (long long)N,
                 (long long)C, (long long)OC);
    free(x), free(w1), free(b1), free(c1.x), free(c1.w), free(c1.b), free(want), free(pre), free(g);
    free(pre2), free(g2), free(w), free(b), free(r), free(bp), free(c.pre), free(c.w), free(c.b);
    free(rd), free(dpre), free(dbp), free(dw), free(db), free(dbp0), free(dw0), free(db0), free(t);
    free(d2), free(dbp2), free(dw2), free(db2);
}

VF_TEST(matmul_gelu_fused)
{
    check_gelu_fused(1, 1, 1);
    check_gelu_fused(7, 13, 5);
    check_gelu_fused(37, 70, 67); /* columns over the bias gradient's 64-column chunks */
}

/* ---- nb layers over one input in one call: weights and biases laid out as in a flat
 * parameter vector (w_i, then b_i, then a gap), outputs at a stride past N·OC */

typedef struct mb {
    int64_t N, C, OC, nb, ws, os;
    double *x, *wf; /* wf: the flat vector, nb · ws elements */
} mb;

static void mb_ref(void *vctx, double *out)
{
    mb *c = vctx;
    for (int64_t i = 0; i < c->nb; i++) {
        const double *w = c->wf + i * c->ws, *b = w + c->OC * c->C;
        for (int64_t n = 0; n < c->N; n++)
            for (int64_t o = 0; o < c->OC; o++) {
                double s = b[o];
                for (int64_t k = 0; k < c->C; k++) s += c->x[n * c->C + k] * w[o * c->C + k];
                out[i * c->N * c->OC + n * c->OC + o] = s;
            }
    }
}

static void check_batch(int64_t N, int64_t C, int64_t OC, int nb)
{
    char what[128];
    const int64_t ws = OC * C + OC + 3, os = N * OC + 5, nw = nb * ws, no = nb * os;
    float *x = tl_randf(N * C, -1, 1), *wf = tl_randf(nw, -1, 1);
    mb c = {N, C, OC, nb, ws, os, tl_tod(x, N * C), tl_tod(wf, nw)};
    double *want = tl_zerosd(nb * N * OC);
    mb_ref(&c, want);
    float *out = tl_randf(no, -9, 9), *got = tl_zerosf(nb * N * OC);
    vf_cpu_matmul_batch_fwd(out, x, wf, wf + OC * C, N, C, OC, nb, ws, os);
    for (int i = 0; i < nb; i++) memcpy(got + i * N * OC, out + i * os, sizeof(float) * N * OC);
    snprintf(what, sizeof what, "matmul_batch_fwd %dx %lldx%lldx%lld", nb, (long long)N, (long long)C, (long long)OC);
    CHECK_FWD(what, got, want, nb * N * OC, 1e-5);

    /* backward: the projection r laid out at the output stride */
    float *r = tl_randf(no, -1, 1), *rc = tl_zerosf(nb * N * OC);
    for (int i = 0; i < nb; i++) memcpy(rc + i * N * OC, r + i * os, sizeof(float) * N * OC);
    double *rd = tl_tod(rc, nb * N * OC);
    float *dx = tl_zerosf(N * C), *dwf = tl_randf(nw, -1, 1), *dwf0 = tl_dupf(dwf, nw);
    for (int64_t i = 0; i < N * C; i++) dx[i] = NAN; /* written */
    vf_cpu_matmul_batch_bwd(dx, dwf, dwf + OC * C, r, x, wf, N, C, OC, nb, ws, os, 0);
    snprintf(what, sizeof what, "matmul_batch_bwd dinp %dx %lldx%lldx%lld", nb, (long long)N, (long long)C,
             (long long)OC);
    CHECK_GRAD(what, mb_ref, &c, c.x, N * C, rd, nb * N * OC, dx, NULL, 300);
    /* (the gaps between tensors: no gradient, so they must stay as they were) */
    CHECK_GRAD("  dw, dbias (accumulated)", mb_ref, &c, c.wf, nw, rd, nb * N * OC, dwf, dwf0, 400);
    float *dxa0 = tl_preset_like(dx, N * C), *dxa = tl_dupf(dxa0, N * C);
    vf_cpu_matmul_batch_bwd(dxa, NULL, NULL, r, x, wf, N, C, OC, nb, ws, os, 1);
    CHECK_GRAD("  dinp accumulated", mb_ref, &c, c.x, N * C, rd, nb * N * OC, dxa, dxa0, 300);
    /* bit for bit the layers one by one, dinp written by the first and added by the rest */
    float *dx2 = tl_zerosf(N * C), *dw2 = tl_dupf(dwf0, nw), *out2 = tl_zerosf(no);
    memcpy(out2, out, sizeof(float) * no);
    for (int i = 0; i < nb; i++) {
        vf_cpu_matmul_fwd(out2 + i * os, x, wf + i * ws, wf + i * ws + OC * C, N, C, OC);
        vf_cpu_matmul_bwd(dx2, dw2 + i * ws, dw2 + i * ws + OC * C, r + i * os, x, wf + i * ws, N, C, OC, i > 0);
    }
    VF_CHECK(memcmp(out, out2, sizeof(float) * no) == 0);
    VF_CHECK(memcmp(dx, dx2, sizeof(float) * N * C) == 0 && memcmp(dwf, dw2, sizeof(float) * nw) == 0);
    free(x), free(wf), free(c.x), free(c.wf), free(want), free(out), free(got), free(r), free(rc), free(rd);
    free(dx), free(dwf), free(dwf0), free(dxa0), free(dxa), free(dx2), free(dw2), free(out2);
}

VF_TEST(matmul_batch)
{
    check_batch(1, 1, 1, 1);
    check_batch(5, 7, 3, 3);
    check_batch(19, 33, 70, 2);
}

/* ---- a frozen FP8 weight: the op's bits are those of the plain op on the dequantised
 * weight (forward, dinp written and added), and the weight it stands for is within FP8's
 * rounding of the f32 one it was quantised from. */
static void check_fp8(int64_t N, int64_t C, int64_t OC, int with_bias)
{
    float *x = tl_randf(N * C, -1, 1), *w = tl_randf(OC * C, -0.3, 0.3), *r = tl_randf(N * OC, -1, 1);
    float *b = with_bias ? tl_randf(OC, -1, 1) : NULL;
    uint8_t *w8 = malloc((size_t)(OC * C));
    const float sc = vf_fp8_scale(w, OC * C);
    vf_fp8_quantise(w, OC * C, sc, w8);
    float *wd = tl_zerosf(OC * C), *wbuf = tl_randf(OC * C, -9, 9);
    for (int64_t i = 0; i < OC * C; i++) {
        wd[i] = vf_e4m3_to_f32(w8[i]) * sc;
        /* 3 mantissa bits: within half a step (2⁻⁴ relative) of w, or of the subnormal
         * step sc·2⁻⁹ near zero */
        VF_CHECK(fabsf(wd[i] - w[i]) <= fmaxf(fabsf(w[i]) / 16.0f, sc * 0.001953125f / 2.0f));
    }
    float *o1 = tl_randf(N * OC, -9, 9), *o2 = tl_randf(N * OC, -9, 9);
    vf_cpu_matmul_fwd(o1, x, wd, b, N, C, OC);
    vf_cpu_matmul_fp8_fwd(o2, x, w8, sc, b, wbuf, N, C, OC);
    VF_CHECK_MSG(memcmp(o1, o2, sizeof(float) * N * OC) == 0, "fp8 fwd %lldx%lldx%lld", (long long)N,
                 (long long)C, (long long)OC);
    for (int acc = 0; acc < 2; acc++) {
        float *d1 = tl_randf(N * C, -1, 1), *d2 = tl_dupf(d1, N * C);
        vf_cpu_matmul_bwd(d1, NULL, NULL, r, x, wd, N, C, OC, acc);
        vf_cpu_matmul_fp8_bwd(d2, r, w8, sc, wbuf, N, C, OC, acc);
        VF_CHECK_MSG(memcmp(d1, d2, sizeof(float) * N * C) == 0, "fp8 dinp %s %lldx%lldx%lld",
                     acc ? "added" : "written", (long long)N, (long long)C, (long long)OC);
        free(d1), free(d2);
    }
    free(x), free(w), free(r), free(b), free(w8), free(wd), free(wbuf), free(o1), free(o2);
}

VF_TEST(matmul_fp8)
{
    check_fp8(1, 1, 1, 0);
    check_fp8(7, 33, 5, 1);
    check_fp8(64, 96, 130, 1);
}

int main(void) { return vf_test_main(); }
