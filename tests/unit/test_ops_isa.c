/* test_ops_isa.c — every ISA build of the CPU backend's hot loops (simd_body.h: gemm,
 * softmax exponentials, GELU, SiLU, AdamW) gives the same bytes: matmul, attention, conv3d,
 * GELU and SiLU forward and backward, AdamW with f32 and bf16 gradients and weights are run under each ISA this CPU supports
 * (avx512, avx2, generic) and compared with the generic build. Also checks the
 * backend's own exp against libm (the same float after rounding, ≤ 1 ulp in double). */
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/cpu_internal.h"
#include "tests/unit/ops_testlib.h"

typedef struct bufs {
    float *b[24];
    size_t n[24];
    int nb;
} bufs;

static float *out_buf(bufs *o, int64_t n)
{
    VF_ASSERT(o->nb < 24);
    o->b[o->nb] = tl_zerosf(n);
    o->n[o->nb] = sizeof(float) * (size_t)n;
    return o->b[o->nb++];
}

/* inputs shared by every run */
static float *X, *W, *R, *Q, *K, *V;
enum { N = 77, C = 301, OC = 45, B = 2, LQ = 70, LK = 67, H = 3, D = 13, NE = 5003 };

static void run_all(bufs *o)
{
    o->nb = 0;
    float *mo = out_buf(o, N * OC), *dx = out_buf(o, N * C), *dw = out_buf(o, OC * C);
    vf_cpu_matmul_fwd(mo, X, W, W, N, C, OC);
    vf_cpu_matmul_bwd(dx, dw, NULL, R, X, W, N, C, OC, 0);
    float *ao = out_buf(o, B * LQ * H * D), *lse = out_buf(o, B * H * LQ);
    float *dq = out_buf(o, B * LQ * H * D), *dk = out_buf(o, B * LK * H * D);
    float *dv = out_buf(o, B * LK * H * D);
    vf_cpu_attention_fwd(ao, lse, Q, K, V, B, LQ, LK, H, D, 0.3f);
    vf_cpu_attention_bwd(dq, dk, dv, R, Q, K, V, ao, lse, B, LQ, LK, H, D, 0.3f);
    float *g1 = out_buf(o, NE), *g2 = out_buf(o, NE), *s1 = out_buf(o, NE), *s2 = out_buf(o, NE);
    vf_cpu_gelu_fwd(g1, X, NE);
    vf_cpu_gelu_bwd(g2, R, X, NE);
    vf_cpu_silu_fwd(s1, X, NE);
    vf_cpu_silu_bwd(s2, R, X, NE, 0);
    float *s3 = out_buf(o, NE); /* the accumulating loops too */
    vf_cpu_gelu_bwd(s3, R, X, NE);
    vf_cpu_silu_bwd(s3, R, X, NE, 1);
    /* conv3d (B=1, C=5, T=3, H=W=9, OC=4, causal 3x3x3) */
    float *co = out_buf(o, 4 * 3 * 81), *cdw = out_buf(o, 4 * 5 * 27), *cdx = out_buf(o, 5 * 3 * 81);
    vf_cpu_conv3d_fwd(co, X, W, NULL, 1, 5, 3, 9, 9, 4, 3, 3, 3, 1, 1, 1, 2, 0, 1, 1, 1, 1);
    vf_cpu_conv3d_bwd(cdx, cdw, NULL, R, X, W, 1, 5, 3, 9, 9, 4, 3, 3, 3, 1, 1, 1, 2, 0, 1, 1, 1, 1);
    /* AdamW, two steps: f32 gradients to f32 weights, then bf16 gradients (R's bits
     * reinterpreted: arbitrary bf16 values, NaNs among them) to bf16 weights */
    float *am = out_buf(o, NE), *av = out_buf(o, NE), *ap = out_buf(o, NE), *aw = out_buf(o, NE);
    memcpy(ap, W, sizeof(float) * NE);
    vf_cpu_adamw_dt(ap, am, av, R, VF_DTYPE_F32, aw, VF_DTYPE_F32, NE, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 1);
    vf_cpu_adamw_dt(ap, am, av, R, VF_DTYPE_BF16, aw, VF_DTYPE_BF16, NE, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, 2);
}

VF_TEST(same_bits_every_isa)
{
    X = tl_randf(40000, -3, 3), W = tl_randf(40000, -1, 1), R = tl_randf(40000, -1, 1);
    Q = tl_randf(40000, -1, 1), K = tl_randf(40000, -1, 1), V = tl_randf(40000, -1, 1);
    const char *def = vf_cpu_isa();
    fprintf(stderr, "  default ISA: %s\n", def);
    bufs ref = {0}, got = {0};
    VF_CHECK(vf_cpu_set_isa("generic") == 0);
    run_all(&ref);
    const char *isas[] = {"avx512", "avx2"};
    for (int i = 0; i < 2; i++) {
        if (vf_cpu_set_isa(isas[i]) != 0) {
            fprintf(stderr, "  isa %-8s not supported here\n", isas[i]);
            continue;
        }
        run_all(&got);
        int same = 1;
        for (int j = 0; j < ref.nb; j++)
            if (memcmp(ref.b[j], got.b[j], ref.n[j]) != 0) {
                fprintf(stderr, "  isa %s: output %d differs from generic\n", isas[i], j);
                same = 0;
            }
        VF_CHECK(same);
        if (same) fprintf(stderr, "  isa %-8s same bits as generic (%d outputs)\n", isas[i], ref.nb);
        for (int j = 0; j < got.nb; j++) free(got.b[j]);
    }
    VF_CHECK(vf_cpu_set_isa("no-such-isa") == VF_EINVAL);
    VF_CHECK(vf_cpu_set_isa(def) == 0);
    for (int j = 0; j < ref.nb; j++) free(ref.b[j]);
    free(X), free(W), free(R), free(Q), free(K), free(V);
}

VF_TEST(exp_matches_libm)
{
    double worst = 0;
    int64_t mism = 0, n = 0;
    for (double x = -745; x <= 709; x += 0.0137) {
        double a = vf_cpu_exp(x), b = exp(x);
        if (x >= -708) {
            double ulp = nextafter(b, INFINITY) - b, u = fabs(a - b) / ulp;
            if (!(u <= worst)) worst = u;
        }
        mism += (float)a != (float)b;
        n++;
    }
    fprintf(stderr, "  %lld points: max %.2f ulp (double), %lld float mismatches\n", (long long)n,
            worst, (long long)mism);
    VF_CHECK(worst <= 2.0);
    VF_CHECK(mism == 0);
    VF_CHECK(isnan(vf_cpu_exp(NAN)));
    VF_CHECK(vf_cpu_exp(INFINITY) == INFINITY);
    VF_CHECK((float)vf_cpu_exp(-INFINITY) == 0.0f);
    VF_CHECK(vf_cpu_exp(0.0) == 1.0);
}

int main(void) { return vf_test_main(); }
