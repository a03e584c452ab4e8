/* test_cuda_conv.c — conv3d on the CUDA backend against the CPU backend, on
 * cuDNN's convolution and on the hand kernel.
 *
 * vflow-test: labels=gpu timeout=600
 *
 * The inputs, the comparison and the stand-in mode are tests/gpu/cuda_ops_harness.h's.
 */
#include "tests/gpu/cuda_ops_harness.h"

/* The convolution paths this run compares: cuDNN's (where the build has it and libcudnn
 * loads; otherwise said loudly, and a failure under VFLOW_CONV=cudnn) and the hand
 * kernel. conv_path_set(-1) goes back to cuDNN where it can be had. */
static int conv_cudnn_ok = -1;
static int conv_npaths(void)
{
#ifdef VFLOW_HAVE_CUDA
    if (conv_cudnn_ok < 0) {
        vf_status st = {0};
        conv_cudnn_ok = G->device.kind == VF_DEV_CUDA && vf_cuda_conv_use("cudnn", &st) == 0;
        const char *e = getenv("VFLOW_CONV");
        if (G->device.kind == VF_DEV_CUDA && !conv_cudnn_ok) {
            fprintf(stderr, "  cuDNN convolution NOT TESTED here: %s\n", st.msg);
            VF_CHECK_MSG(!(e && strcmp(e, "cudnn") == 0), "VFLOW_CONV=cudnn, and cuDNN cannot be had: %s", st.msg);
        }
    }
    return conv_cudnn_ok ? 2 : 1;
#else
    return 1;
#endif
}
static const char *conv_path_name = "cpu";
static void conv_path_set(int i)
{
#ifdef VFLOW_HAVE_CUDA
    if (G->device.kind != VF_DEV_CUDA) return;
    const char *p = conv_npaths() == 2 && i != 1 ? "cudnn" : "hand";
    vf_status st = {0};
    VF_CHECK_MSG(vf_cuda_conv_use(p, &st) == 0, "%s", st.msg);
    conv_path_name = p;
#else
    (void)i;
#endif
}
/* the path the last conv3d_fwd took: "cudnn", "hand" (cuDNN refused the shape, or the
 * hand kernel was asked for) or "cpu" */
static const char *conv_path_now(void)
{
#ifdef VFLOW_HAVE_CUDA
    static int64_t last[2];
    int64_t n[2];
    if (G->device.kind != VF_DEV_CUDA) return "cpu";
    vf_cuda_conv_counts(&n[0], &n[1]);
    const char *p = n[0] > last[0] ? "cudnn" : strcmp(conv_path_name, "cudnn") == 0 ? "hand, cuDNN refused it" : "hand";
    last[0] = n[0], last[1] = n[1];
    return p;
#else
    return "cpu";
#endif
}

/* spatial padding ph0 before and ph1 after both H and W */
static void conv_case(int64_t B, int64_t Cc, int64_t T, int64_t H, int64_t W, int64_t OC, int K, int st, int sh,
                      int pt0, int ph0, int ph1)
{
    char nm[128];
    const int KT = K, KH = K, KW = K, sw = sh, pt1 = 0, pw0 = ph0, pw1 = ph1;
    const int64_t To = (T + pt0 + pt1 - KT) / st + 1, Ho = (H + ph0 + ph1 - KH) / sh + 1,
                  Wo = (W + pw0 + pw1 - KW) / sw + 1;
    const int64_t ni = B * Cc * T * H * W, nw = OC * Cc * KT * KH * KW, no = B * OC * To * Ho * Wo;
    float *x = rnd(ni, -1, 1), *w = rnd(nw, -0.3, 0.3), *b = rnd(OC, -1, 1), *o = nanv(no);
    dbuf dx = dbf(x, ni, 0), dw = dbf(w, nw, 0), db = dbf(b, OC, 0), dout = dbf(NULL, no, 0);
    C->conv3d_fwd(C, o, x, w, b, B, Cc, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1);
    G->conv3d_fwd(G, dout.p, dx.p, dw.p, db.p, B, Cc, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0,
                  pw1);
    snprintf(nm, sizeof nm, "conv3d_fwd C%lld OC%lld %lldx%lldx%lld k%d s%d/%d pad %d/%d+%d (%s)", (long long)Cc,
             (long long)OC, (long long)T, (long long)H, (long long)W, K, st, sh, pt0, ph0, ph1, conv_path_now());
    cmpd(nm, dout, o, BF);
    float *g = rnd(no, -1, 1), *gx = rnd(ni, -1, 1), *gw = rnd(nw, -1, 1), *gb = rnd(OC, -1, 1);
    dbuf dg = dbf(g, no, 0), dgx = dbf(gx, ni, 0), dgw = dbf(gw, nw, 0), dgb = dbf(gb, OC, 0);
    C->conv3d_bwd(C, gx, gw, gb, g, x, w, B, Cc, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1);
    G->conv3d_bwd(G, dgx.p, dgw.p, dgb.p, dg.p, dx.p, dw.p, B, Cc, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0,
                  ph1, pw0, pw1);
    cmpd("  conv3d_bwd dinp", dgx, gx, BF);
    cmpd("  conv3d_bwd dw", dgw, gw, BF);
    cmpd("  conv3d_bwd dbias", dgb, gb, BF);
    dfree(dx), dfree(dw), dfree(db), dfree(dout), dfree(dg), dfree(dgx), dfree(dgw), dfree(dgb);
    free(x), free(w), free(b), free(o), free(g), free(gx), free(gw), free(gb);
}

VF_TEST(conv3d)
{
    /* each case on every path the build has: cuDNN's convolution (where it takes the
     * shape) and the hand kernel */
    for (int pi = 0; pi < conv_npaths(); pi++) {
        conv_path_set(pi);
        conv_case(1, 3, 5, 9, 10, 8, 3, 1, 1, 2, 1, 1);    /* causal, C·27 = 81: scalar weight loads */
        conv_case(2, 16, 5, 12, 11, 24, 3, 1, 1, 2, 1, 1); /* C·27 % 8 == 0: vector weight loads */
        conv_case(1, 8, 4, 16, 16, 8, 3, 1, 2, 0, 0, 0);   /* spatial stride 2, no pad */
        conv_case(1, 8, 3, 16, 12, 8, 3, 1, 2, 0, 0, 1);   /* the downsample: pad right and bottom */
        conv_case(1, 8, 5, 6, 6, 8, 3, 2, 1, 2, 1, 1);     /* temporal stride 2 */
        conv_case(1, 70, 3, 20, 20, 130, 1, 1, 1, 0, 0, 0); /* 1x1x1, OC over one tile */
    }
    conv_path_set(-1);
}

/* the comparisons test_cuda_ops.c's every_op_compared counts on */
VF_TEST(listed_cases_exist) { VF_CUDA_OP_CASES_CONV(VF_CASE_FN) }

int main(void) { return vf_cuda_ops_main(); }
