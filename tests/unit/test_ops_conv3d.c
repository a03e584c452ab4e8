/* test_ops_conv3d.c — CPU channel-first conv3d: forward against a direct f64 reference
 * (zero padding by bounds checks), dinp/dw/dbias against f64 finite differences, for
 * causal time padding, symmetric and one-sided spatial padding (the VAE downsample's
 * right and bottom pad), strides, a 1×2×2 patch embedding, odd and prime sizes;
 * accumulation; identical bytes on 1/2/3 threads. */
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

typedef struct cv {
    int64_t B, C, T, H, W, OC;
    int KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1;
    int64_t To, Ho, Wo;
    double *x, *w, *b;
} cv;

static void cv_ref(void *vctx, double *out)
{
    cv *c = vctx;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t o = 0; o < c->OC; o++)
            for (int64_t to = 0; to < c->To; to++)
                for (int64_t ho = 0; ho < c->Ho; ho++)
                    for (int64_t wo = 0; wo < c->Wo; wo++) {
                        double s = c->b ? c->b[o] : 0.0;
                        for (int64_t ci = 0; ci < c->C; ci++)
                            for (int kt = 0; kt < c->KT; kt++)
                                for (int kh = 0; kh < c->KH; kh++)
                                    for (int kw = 0; kw < c->KW; kw++) {
                                        int64_t t = to * c->st + kt - c->pt0;
                                        int64_t h = ho * c->sh + kh - c->ph0;
                                        int64_t x = wo * c->sw + kw - c->pw0;
                                        if (t < 0 || t >= c->T || h < 0 || h >= c->H || x < 0 ||
                                            x >= c->W)
                                            continue;
                                        s += c->w[(((o * c->C + ci) * c->KT + kt) * c->KH + kh) *
                                                      c->KW + kw] *
                                             c->x[(((b * c->C + ci) * c->T + t) * c->H + h) * c->W + x];
                                    }
                        out[(((b * c->OC + o) * c->To + to) * c->Ho + ho) * c->Wo + wo] = s;
                    }
}

/* pad: pt0, pt1, ph0, ph1, pw0, pw1 */
static void check_conv6(const char *label, int64_t B, int64_t C, int64_t T, int64_t H, int64_t W,
                        int64_t OC, int KT, int KH, int KW, int st, int sh, int sw, const int pad[6],
                        int bias, int64_t maxfd)
{
    char what[160];
    const int pt0 = pad[0], pt1 = pad[1], ph0 = pad[2], ph1 = pad[3], pw0 = pad[4], pw1 = pad[5];
    cv c = {B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1};
    c.To = (T + pt0 + pt1 - KT) / st + 1;
    c.Ho = (H + ph0 + ph1 - KH) / sh + 1;
    c.Wo = (W + pw0 + pw1 - KW) / sw + 1;
    int64_t nx = B * C * T * H * W, nw = OC * C * KT * KH * KW, no = B * OC * c.To * c.Ho * c.Wo;
    float *x = tl_randf(nx, -1, 1), *w = tl_randf(nw, -1, 1), *b = bias ? tl_randf(OC, -1, 1) : NULL;
    c.x = tl_tod(x, nx), c.w = tl_tod(w, nw), c.b = b ? tl_tod(b, OC) : NULL;
    double *want = tl_zerosd(no);
    cv_ref(&c, want);
    float *out = tl_randf(no, -9, 9);
    vf_cpu_conv3d_fwd(out, x, w, b, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1);
    snprintf(what, sizeof what, "conv3d fwd %s", label);
    CHECK_FWD(what, out, want, no, 1e-5);

    float *r = tl_randf(no, -1, 1);
    double *rd = tl_tod(r, no);
    float *dx = tl_zerosf(nx), *dw = tl_zerosf(nw), *db = tl_zerosf(OC);
    vf_cpu_conv3d_bwd(dx, dw, b ? db : NULL, r, x, w, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw,
                      pt0, pt1, ph0, ph1, pw0, pw1);
    CHECK_GRAD("  dinp", cv_ref, &c, c.x, nx, rd, no, dx, NULL, maxfd);
    CHECK_GRAD("  dw", cv_ref, &c, c.w, nw, rd, no, dw, NULL, maxfd);
    if (b) CHECK_GRAD("  dbias", cv_ref, &c, c.b, OC, rd, no, db, NULL, maxfd);
    float *x0 = tl_preset_like(dx, nx), *w0 = tl_preset_like(dw, nw), *b0 = tl_preset_like(db, OC);
    float *x1 = tl_dupf(x0, nx), *w1 = tl_dupf(w0, nw), *b1 = tl_dupf(b0, OC);
    vf_cpu_conv3d_bwd(x1, w1, b ? b1 : NULL, r, x, w, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw,
                      pt0, pt1, ph0, ph1, pw0, pw1);
    CHECK_GRAD("  accumulate dinp", cv_ref, &c, c.x, nx, rd, no, x1, x0, maxfd);
    CHECK_GRAD("  accumulate dw", cv_ref, &c, c.w, nw, rd, no, w1, w0, maxfd);
    if (b) CHECK_GRAD("  accumulate dbias", cv_ref, &c, c.b, OC, rd, no, b1, b0, maxfd);
    free(x), free(w), free(b), free(c.x), free(c.w), free(c.b), free(want), free(out), free(r);
    free(rd), free(dx), free(dw), free(db), free(x0), free(w0), free(b0), free(x1), free(w1);
    free(b1);
}

/* symmetric spatial padding ph, pw */
static void check_conv(const char *label, int64_t B, int64_t C, int64_t T, int64_t H, int64_t W,
                       int64_t OC, int KT, int KH, int KW, int st, int sh, int sw, int pt0, int pt1,
                       int ph, int pw, int bias, int64_t maxfd)
{
    const int pad[6] = {pt0, pt1, ph, ph, pw, pw};
    check_conv6(label, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pad, bias, maxfd);
}

VF_TEST(conv3d_basic)
{
    check_conv("1x1x1 kernel", 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1000);
    check_conv("1x1x1 kernel C3->5", 2, 3, 2, 3, 4, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1000);
    check_conv("3x3x3 same pad", 1, 2, 3, 5, 4, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1000);
}

VF_TEST(conv3d_causal)
{
    /* causal: pt0 = KT−1, pt1 = 0 — output frame t sees frames ≤ t only */
    check_conv("causal 3x3x3", 2, 3, 5, 4, 5, 2, 3, 3, 3, 1, 1, 1, 2, 0, 1, 1, 1, 1000);
    check_conv("causal kt3 1x1", 1, 2, 7, 3, 3, 3, 3, 1, 1, 1, 1, 1, 2, 0, 0, 0, 0, 1000);
    /* the causal claim itself: perturbing the last frame leaves earlier outputs alone */
    int64_t C = 2, T = 4, H = 3, W = 3, OC = 2;
    float *x = tl_randf(C * T * H * W, -1, 1), *w = tl_randf(OC * C * 27, -1, 1);
    float *o1 = tl_zerosf(OC * T * H * W), *o2 = tl_zerosf(OC * T * H * W);
    vf_cpu_conv3d_fwd(o1, x, w, NULL, 1, C, T, H, W, OC, 3, 3, 3, 1, 1, 1, 2, 0, 1, 1, 1, 1);
    for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < H * W; i++) x[(c * T + T - 1) * H * W + i] += 1.0f;
    vf_cpu_conv3d_fwd(o2, x, w, NULL, 1, C, T, H, W, OC, 3, 3, 3, 1, 1, 1, 2, 0, 1, 1, 1, 1);
    for (int64_t o = 0; o < OC; o++) {
        VF_CHECK(memcmp(o1 + o * T * H * W, o2 + o * T * H * W, sizeof(float) * (T - 1) * H * W) == 0);
        VF_CHECK(memcmp(o1 + (o * T + T - 1) * H * W, o2 + (o * T + T - 1) * H * W,
                        sizeof(float) * H * W) != 0);
    }
    free(x), free(w), free(o1), free(o2);
}

VF_TEST(conv3d_strides_and_patches)
{
    /* VAE downsampling: stride 2 in space and time */
    check_conv("stride 2x2x2 k3 pad1", 1, 2, 5, 7, 6, 3, 3, 3, 3, 2, 2, 2, 2, 0, 1, 1, 1, 1000);
    check_conv("stride 1x2x2 k1x3x3", 2, 3, 3, 7, 7, 2, 1, 3, 3, 1, 2, 2, 0, 0, 0, 0, 1, 1000);
    /* DiT patch embedding: kernel = stride = 1x2x2, no padding */
    check_conv("patch 1x2x2", 2, 4, 3, 4, 6, 5, 1, 2, 2, 1, 2, 2, 0, 0, 0, 0, 1, 1000);
    /* asymmetric time padding on both sides, prime sizes, odd strides */
    check_conv("odd 2x3x2 s3x1x2", 1, 3, 7, 5, 11, 2, 2, 3, 2, 3, 1, 2, 1, 2, 2, 1, 1, 1000);
}

VF_TEST(conv3d_one_sided_padding)
{
    /* Wan's downsample: zero pad right 1, bottom 1, then 3x3 stride 2 (no padded copy) */
    const int down[6] = {0, 0, 0, 1, 0, 1};
    check_conv6("downsample pad (0,1,0,1) s2", 2, 3, 2, 8, 6, 4, 1, 3, 3, 1, 2, 2, down, 1, 1000);
    /* odd sizes: the output covers the padded row only where a window reaches it */
    check_conv6("downsample odd 7x9", 1, 2, 1, 7, 9, 3, 1, 3, 3, 1, 2, 2, down, 1, 1000);
    /* the same result as a conv over an explicitly padded copy */
    const int64_t C = 3, H = 6, W = 4, OC = 2;
    float *x = tl_randf(C * H * W, -1, 1), *w = tl_randf(OC * C * 9, -1, 1), *b = tl_randf(OC, -1, 1);
    float *xp = tl_zerosf(C * (H + 1) * (W + 1));
    for (int64_t c = 0; c < C; c++)
        for (int64_t h = 0; h < H; h++) memcpy(xp + (c * (H + 1) + h) * (W + 1), x + (c * H + h) * W, sizeof(float) * W);
    float *o1 = tl_zerosf(OC * (H / 2) * (W / 2)), *o2 = tl_zerosf(OC * (H / 2) * (W / 2));
    vf_cpu_conv3d_fwd(o1, x, w, b, 1, C, 1, H, W, OC, 1, 3, 3, 1, 2, 2, 0, 0, 0, 1, 0, 1);
    vf_cpu_conv3d_fwd(o2, xp, w, b, 1, C, 1, H + 1, W + 1, OC, 1, 3, 3, 1, 2, 2, 0, 0, 0, 0, 0, 0);
    VF_CHECK(memcmp(o1, o2, sizeof(float) * (size_t)(OC * (H / 2) * (W / 2))) == 0);
    /* before and after on every axis, all different */
    const int mixed[6] = {2, 1, 1, 2, 2, 0};
    check_conv6("pads 2+1 / 1+2 / 2+0", 1, 2, 3, 4, 5, 2, 3, 3, 3, 1, 2, 1, mixed, 1, 1000);
    free(x), free(w), free(b), free(xp), free(o1), free(o2);
}

VF_TEST(conv3d_large_chunked)
{
    /* many output positions and C·K: several im2col chunks (the dw sum crosses them);
     * finite differences on a spread sample */
    check_conv("chunked", 2, 29, 3, 17, 19, 3, 3, 3, 3, 1, 1, 1, 2, 0, 1, 1, 1, 12);
}

typedef struct crun {
    int64_t B, C, T, H, W, OC;
    float *x, *w, *b, *r, *out, *dx, *dw, *db;
    int64_t no, nx, nw;
} crun;

static void c_run(void *vctx)
{
    crun *e = vctx;
    vf_cpu_conv3d_fwd(e->out, e->x, e->w, e->b, e->B, e->C, e->T, e->H, e->W, e->OC, 3, 3, 3, 1,
                      1, 1, 2, 0, 1, 1, 1, 1);
    memset(e->dx, 0, sizeof(float) * e->nx);
    memset(e->dw, 0, sizeof(float) * e->nw);
    memset(e->db, 0, sizeof(float) * e->OC);
    vf_cpu_conv3d_bwd(e->dx, e->dw, e->db, e->r, e->x, e->w, e->B, e->C, e->T, e->H, e->W, e->OC,
                      3, 3, 3, 1, 1, 1, 2, 0, 1, 1, 1, 1);
}

VF_TEST(conv3d_same_bits_any_thread_count)
{
    crun e = {2, 24, 3, 13, 15, 10};
    e.nx = e.B * e.C * e.T * e.H * e.W, e.nw = e.OC * e.C * 27, e.no = e.B * e.OC * e.T * e.H * e.W;
    e.x = tl_randf(e.nx, -1, 1), e.w = tl_randf(e.nw, -1, 1), e.b = tl_randf(e.OC, -1, 1);
    e.r = tl_randf(e.no, -1, 1), e.out = tl_zerosf(e.no), e.dx = tl_zerosf(e.nx);
    e.dw = tl_zerosf(e.nw), e.db = tl_zerosf(e.OC);
    void *bufs[] = {e.out, e.dx, e.dw, e.db};
    size_t bytes[] = {sizeof(float) * e.no, sizeof(float) * e.nx, sizeof(float) * e.nw,
                      sizeof(float) * e.OC};
    VF_CHECK(tl_same_threads("conv3d causal fwd+bwd", c_run, &e, 4, bufs, bytes));
    free(e.x), free(e.w), free(e.b), free(e.r), free(e.out), free(e.dx), free(e.dw), free(e.db);
}

int main(void) { return vf_test_main(); }
