/* test_cuda_attn.c — attention on the CUDA backend against the CPU backend: cuDNN's fused SDPA and
 * the hand kernels on the same cases, heads wider than either takes (the VAE's), and the
 * Wan-1.3B shapes with the workspace the plan counts.
 *
 * vflow-test: labels=gpu timeout=600
 *
 * The inputs, the comparison and the stand-in mode are tests/gpu/cuda_ops_harness.h's.
 */
#include "tests/gpu/cuda_ops_harness.h"

/* ------------------------------------------------------------------ attention
 * Every case runs on each path the CUDA backend has: cuDNN's fused SDPA (where the build
 * and the machine have it) and the hand kernels (VFLOW_ATTN=hand's path); on the CPU
 * stand-in only once. The backend's counters say which path ran: the DiT's shapes (head
 * dim 64 or 128, 16-byte aligned) must run on cuDNN in its pass, a head dim cuDNN does not
 * take or a pointer off alignment on the hand kernels. Each path must give the same bits
 * twice (forward, and backward: cuDNN's deterministic algorithm). */

enum { ANY, CUDNN, HAND };
static int att_cudnn; /* the cuDNN pass is running */

static int64_t cudnn_calls(void)
{
    int64_t n = 0;
#ifdef VFLOW_HAVE_CUDA
    if (G->device.kind == VF_DEV_CUDA) vf_cuda_attn_counts(&n, NULL);
#endif
    return n;
}

/* the path of the op(s) that moved the cuDNN count from n0 */
static void check_path(const char *what, int64_t n0, int want)
{
    const int64_t n1 = cudnn_calls();
    if (!att_cudnn) {
        VF_CHECK_MSG(n1 == n0, "%s ran on cuDNN in the hand pass", what);
    } else if (want == CUDNN) {
        VF_CHECK_MSG(n1 > n0, "%s ran on the hand kernels, not on cuDNN", what);
    } else if (want == HAND) {
        VF_CHECK_MSG(n1 == n0, "%s ran on cuDNN, which cannot take it", what);
    }
}

/* the bf16 bytes of a and b are the same */
static void same_bits(const char *what, dbuf a, dbuf b)
{
    if (!sync_ok(what)) {
        vf_test_failed_ = 1;
        return;
    }
    float *x = dget(a), *y = dget(b);
    VF_CHECK_MSG(memcmp(x, y, sizeof(float) * (size_t)a.n) == 0, "%s: two runs differ", what);
    free(x), free(y);
}

static void attention_case(int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D, int off, int want)
{
    char nm[96];
    const int64_t nq = B * Lq * H * D, nk = B * Lk * H * D;
    const float scale = 1.0f / sqrtf((float)D);
    float *q = rnd(nq, -2, 2), *k = rnd(nk, -2, 2), *v = rnd(nk, -1, 1);
    float *o = nanv(nq), *lse = nanv(B * H * Lq);
    dbuf dq = dbf(q, nq, off), dk = dbf(k, nk, off), dv = dbf(v, nk, off), dout = dbf(NULL, nq, off);
    dbuf dout2 = dbf(NULL, nq, off);
    dbuf dlse = dnew(NULL, B * H * Lq, VF_DTYPE_F32, 0), dlse2 = dnew(NULL, B * H * Lq, VF_DTYPE_F32, 0);
    C->attention_fwd(C, o, lse, q, k, v, B, Lq, Lk, H, D, scale);
    int64_t n0 = cudnn_calls();
    G->attention_fwd(G, dout.p, dlse.p, dq.p, dk.p, dv.p, B, Lq, Lk, H, D, scale);
    snprintf(nm, sizeof nm, "attention_fwd B%lld Lq%lld Lk%lld H%lld D%lld off%d", (long long)B, (long long)Lq,
             (long long)Lk, (long long)H, (long long)D, off);
    check_path(nm, n0, Lk > 0 ? want : HAND);
    cmpd(nm, dout, o, BF);
    if (Lk > 0) {
        cmpd("  lse (f32)", dlse, lse, F32);
    } else { /* softmax over nothing: out 0, lse −inf on both */
        float *gl = dget(dlse);
        int ok = 1;
        for (int64_t i = 0; i < B * H * Lq; i++) ok &= gl[i] == -INFINITY && lse[i] == -INFINITY;
        VF_CHECK(ok);
        free(gl);
    }
    G->attention_fwd(G, dout2.p, dlse2.p, dq.p, dk.p, dv.p, B, Lq, Lk, H, D, scale);
    same_bits("  attention_fwd twice: out", dout, dout2);
    same_bits("  attention_fwd twice: lse", dlse, dlse2);
    G->attention_fwd(G, dout2.p, NULL, dq.p, dk.p, dv.p, B, Lq, Lk, H, D, scale); /* no lse wanted */
    cmpd("  attention_fwd without lse", dout2, o, BF);
    /* backward: both from the CPU's output and lse (bf16-rounded out, as stored); the
     * gradients are written (ops.h): NaN-poisoned on both sides */
    for (int64_t i = 0; i < nq; i++) o[i] = bfr(o[i]);
    float *g = rnd(nq, -1, 1), *gq = nanv(nq), *gk = nanv(nk), *gv = nanv(nk);
    dbuf dg = dbf(g, nq, off), dgq = dbf(NULL, nq, off), dgk = dbf(NULL, nk, off), dgv = dbf(NULL, nk, off);
    dbuf dgq2 = dbf(NULL, nq, off), dgk2 = dbf(NULL, nk, off), dgv2 = dbf(NULL, nk, off);
    dbuf do2 = dbf(o, nq, off), dl2 = dnew(lse, B * H * Lq, VF_DTYPE_F32, 0);
    C->attention_bwd(C, gq, gk, gv, g, q, k, v, o, lse, B, Lq, Lk, H, D, scale);
    n0 = cudnn_calls();
    G->attention_bwd(G, dgq.p, dgk.p, dgv.p, dg.p, dq.p, dk.p, dv.p, do2.p, dl2.p, B, Lq, Lk, H, D, scale);
    snprintf(nm, sizeof nm, "attention_bwd D%lld Lq%lld Lk%lld", (long long)D, (long long)Lq, (long long)Lk);
    check_path(nm, n0, Lq > 0 && Lk > 0 ? want : HAND);
    snprintf(nm, sizeof nm, "attention_bwd dq D%lld Lq%lld Lk%lld", (long long)D, (long long)Lq, (long long)Lk);
    cmpd(nm, dgq, gq, BF);
    snprintf(nm, sizeof nm, "attention_bwd dk D%lld Lq%lld Lk%lld", (long long)D, (long long)Lq, (long long)Lk);
    cmpd(nm, dgk, gk, BF);
    snprintf(nm, sizeof nm, "attention_bwd dv D%lld Lq%lld Lk%lld", (long long)D, (long long)Lq, (long long)Lk);
    cmpd(nm, dgv, gv, BF);
    G->attention_bwd(G, dgq2.p, dgk2.p, dgv2.p, dg.p, dq.p, dk.p, dv.p, do2.p, dl2.p, B, Lq, Lk, H, D, scale);
    same_bits("  attention_bwd twice: dq", dgq, dgq2);
    same_bits("  attention_bwd twice: dk", dgk, dgk2);
    same_bits("  attention_bwd twice: dv", dgv, dgv2);
    /* dk, dv absent (only dq wanted: the hand kernels, on either path) */
    C->attention_bwd(C, gq, NULL, NULL, g, q, k, v, o, lse, B, Lq, Lk, H, D, scale);
    G->attention_bwd(G, dgq.p, NULL, NULL, dg.p, dq.p, dk.p, dv.p, do2.p, dl2.p, B, Lq, Lk, H, D, scale);
    cmpd("  attention_bwd dq only", dgq, gq, BF);
    dfree(dq), dfree(dk), dfree(dv), dfree(dout), dfree(dout2), dfree(dlse), dfree(dlse2), dfree(dg), dfree(dgq), dfree(dgk),
        dfree(dgv), dfree(dgq2), dfree(dgk2), dfree(dgv2), dfree(do2), dfree(dl2);
    free(q), free(k), free(v), free(o), free(lse), free(g), free(gq), free(gk), free(gv);
}

static void attention_cases(void)
{
    attention_case(2, 100, 100, 3, 64, 0, CUDNN);   /* self-attention, ragged tiles */
    attention_case(1, 200, 200, 2, 128, 0, CUDNN);  /* head dim 128 */
    attention_case(1, 130, 20, 2, 128, 0, CUDNN);   /* cross-attention, short key length */
    attention_case(1, 333, 512, 3, 128, 0, CUDNN);  /* cross, 512 keys, Lq no multiple of 64 */
    attention_case(2, 33, 33, 2, 16, 0, ANY);       /* tiny model head dim (hand: padded to 64) */
    attention_case(1, 70, 50, 2, 72, 0, ANY);       /* DiT-XL head dim (hand: padded to 128) */
    attention_case(1, 40, 45, 3, 20, 1, HAND);      /* unaligned, D % 8 != 0: scalar tile loads */
    attention_case(1, 37, 29, 1, 160, 0, ANY);      /* above 128 (hand: generic kernels) */
    attention_case(1, 5, 0, 2, 64, 0, HAND);        /* no keys */
    attention_case(1, 1000, 1000, 2, 64, 0, CUDNN); /* many tiles */
}

/* The cuDNN pass where cuDNN can be had: a build without it, or a libcudnn that does not
 * load, skips it loudly (and fails when VFLOW_ATTN=cudnn demands cuDNN). */
static int use_cudnn(void)
{
#ifdef VFLOW_HAVE_CUDA
    if (G->device.kind != VF_DEV_CUDA) return 0;
    vf_status st = {0};
    if (vf_cuda_attn_use("cudnn", &st) == 0) return 1;
    const char *e = getenv("VFLOW_ATTN");
    fprintf(stderr, "  cuDNN attention NOT TESTED here: %s\n", st.msg);
    VF_CHECK_MSG(!(e && strcmp(e, "cudnn") == 0), "VFLOW_ATTN=cudnn, and cuDNN cannot be had: %s", st.msg);
#endif
    return 0;
}

static void use_hand(void)
{
#ifdef VFLOW_HAVE_CUDA
    vf_status st = {0};
    if (G->device.kind == VF_DEV_CUDA) VF_CHECK(vf_cuda_attn_use("hand", &st) == 0);
#endif
}

VF_TEST(attention)
{
    att_cudnn = use_cudnn();
    if (att_cudnn) {
        fprintf(stderr, "  -- cuDNN %d (fused SDPA, deterministic backward)\n", vf_cuda_cudnn_version());
        attention_cases();
    }
    fprintf(stderr, "  -- hand kernels\n");
    use_hand();
    att_cudnn = 0;
    attention_cases();
}

static int64_t gemm_calls(void)
{
    int64_t n = 0;
#ifdef VFLOW_HAVE_CUDA
    if (G->device.kind == VF_DEV_CUDA) n = vf_cuda_attn_gemm_calls();
#endif
    return n;
}

/* Heads wider than the hand kernels' tiles (128) and than cuDNN's backward (256) take:
 * the VAE's mid-block attention, one head 384 wide over a frame's positions. Outside the
 * hand pass each forward runs on cuDNN where it takes the shape (9.19 takes a 384-wide
 * forward) or as cuBLASLt GEMMs around a softmax (attention_gemm.cu), against the CPU like
 * every case; under "hand" the hand kernels run it. */
VF_TEST(attention_wide_heads)
{
#ifdef VFLOW_HAVE_CUDA
    vf_status st = {0};
    if (G->device.kind == VF_DEV_CUDA && vf_cuda_attn_use("cudnn", &st) != 0)
        fprintf(stderr, "  no cuDNN (%s): the GEMM path all the same\n", st.msg);
#endif
    att_cudnn = 1; /* either library may run these */
    const int64_t g0 = gemm_calls(), n0 = cudnn_calls();
    attention_case(2, 300, 280, 1, 384, 0, ANY);   /* ragged lengths */
    attention_case(1, 1024, 1024, 1, 384, 0, ANY); /* a 32 x 32 frame, as at 256 x 256 */
    attention_case(1, 50, 60, 2, 272, 1, ANY);     /* two heads, off 16-byte alignment */
    if (G->device.kind == VF_DEV_CUDA)
        VF_CHECK_MSG(gemm_calls() - g0 + cudnn_calls() - n0 >= 9,
                     "the wide heads' forwards ran %lld times as cuBLASLt GEMMs and %lld on cuDNN, not 9 in all",
                     (long long)(gemm_calls() - g0), (long long)(cudnn_calls() - n0));
    att_cudnn = 0; /* the cuDNN count must not move */
    use_hand();
    const int64_t g1 = gemm_calls();
    attention_case(2, 300, 280, 1, 384, 0, HAND);
    VF_CHECK_MSG(gemm_calls() == g1, "the hand pass ran cuBLASLt GEMMs");
}

/* Wan-1.3B's attention shapes on cuDNN (no CPU reference at this size): finite outputs,
 * the same bits twice, and the workspace cuDNN holds within what the plan counts for the
 * largest shape so far (vf_attention_workspace_bound; the workspace only grows). */
static void wan_case(int64_t Lq, int64_t Lk, int want_fwd, int want_bwd)
{
    char nm[96];
    const int64_t B = 1, H = 12, D = 128, nq = B * Lq * H * D, nk = B * Lk * H * D;
    float *q = rnd(nq, -2, 2), *k = rnd(nk, -2, 2), *v = rnd(nk, -1, 1), *g = rnd(nq, -1, 1);
    dbuf dq = dbf(q, nq, 0), dk = dbf(k, nk, 0), dv = dbf(v, nk, 0), dg = dbf(g, nq, 0);
    dbuf o = dbf(NULL, nq, 0), lse = dnew(NULL, B * H * Lq, VF_DTYPE_F32, 0);
    dbuf gq[2], gk[2], gv[2];
    const int64_t n0 = cudnn_calls();
    G->attention_fwd(G, o.p, lse.p, dq.p, dk.p, dv.p, B, Lq, Lk, H, D, 1.0f / sqrtf((float)D));
    snprintf(nm, sizeof nm, "Wan attention forward Lq%lld Lk%lld", (long long)Lq, (long long)Lk);
    check_path(nm, n0, want_fwd);
    const int64_t n1 = cudnn_calls();
    for (int r = 0; r < 2; r++) {
        gq[r] = dbf(NULL, nq, 0), gk[r] = dbf(NULL, nk, 0), gv[r] = dbf(NULL, nk, 0);
        G->attention_bwd(G, gq[r].p, gk[r].p, gv[r].p, dg.p, dq.p, dk.p, dv.p, o.p, lse.p, B, Lq, Lk, H, D,
                         1.0f / sqrtf((float)D));
    }
    snprintf(nm, sizeof nm, "Wan attention backward Lq%lld Lk%lld", (long long)Lq, (long long)Lk);
    check_path(nm, n1, want_bwd);
    if (sync_ok(nm)) {
        float *x = dget(gq[0]);
        int64_t bad = 0;
        for (int64_t i = 0; i < nq; i++) bad += !isfinite(x[i]);
        VF_CHECK_MSG(bad == 0, "%s: %lld non-finite dq", nm, (long long)bad);
        free(x);
    }
    same_bits("  dq twice", gq[0], gq[1]);
    same_bits("  dk twice", gk[0], gk[1]);
    same_bits("  dv twice", gv[0], gv[1]);
#ifdef VFLOW_HAVE_CUDA
    static int64_t bound = 0; /* the largest bound of the shapes so far */
    const size_t ws = vf_cuda_attn_workspace(G);
    const int64_t b = vf_attention_workspace_bound(G->device, B, Lq, Lk, H, D);
    bound = b > bound ? b : bound;
    fprintf(stderr, "  %s: cuDNN workspace %.1f MiB, the plan's bound %.1f MiB (this shape's %.1f MiB)\n", nm,
            ws / 1048576.0, bound / 1048576.0, b / 1048576.0);
    VF_CHECK_MSG((int64_t)ws <= bound, "%s: cuDNN holds %zu bytes of workspace, the plan counts %lld", nm, ws,
                 (long long)bound);
#endif
    for (int r = 0; r < 2; r++) dfree(gq[r]), dfree(gk[r]), dfree(gv[r]);
    dfree(dq), dfree(dk), dfree(dv), dfree(dg), dfree(o), dfree(lse);
    free(q), free(k), free(v), free(g);
}

VF_TEST(attention_cudnn_wan_shapes)
{
    att_cudnn = use_cudnn();
    if (!att_cudnn) return;
    /* smallest workspace first, so each shape's own need shows: 81 frames at 480p, past
     * the 4 GiB cap (cuDNN 9.25+ takes its ordered-dQ form, linear in the sequence; an
     * older one leaves the backward to the hand kernels, the forward needing none), the cross-attention (512 keys), the
     * self-attention at 13 104 tokens (the score-gradient form: 3.9 GiB) */
    wan_case(32760, 32760, CUDNN, vf_cuda_cudnn_version() >= 92500 ? CUDNN : HAND);
    wan_case(13104, 512, CUDNN, CUDNN);
    wan_case(13104, 13104, CUDNN, CUDNN);
    att_cudnn = 0;
}

/* the comparisons test_cuda_ops.c's every_op_compared counts on */
VF_TEST(listed_cases_exist) { VF_CUDA_OP_CASES_ATTN(VF_CASE_FN) }

int main(void) { return vf_cuda_ops_main(); }
