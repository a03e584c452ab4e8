/* test_cudnn_att.c — the cuDNN attention of the CUDA backend, checked without a GPU: the
 * forward (with Stats) and deterministic backward graphs the backend builds
 * (kernels/cuda/cudnn_att.cpp) pass cuDNN's validate() for a Hopper device (sm_90, 132
 * SMs) at Wan-1.3B's self-attention shape (1 × 13 104 × 12 × 128), its cross-attention
 * (512 keys), a bucket with two samples and a query length no multiple of 64; shapes cuDNN
 * does not take are refused with its reason; the path choice (VFLOW_ATTN, vf_cuda_attn_use,
 * VFLOW_ATTN_WORKSPACE_MB) and the workspace the plan counts against what the frontend's
 * source says it puts there.
 *
 * Exits 77 (skip) when the build has no cuDNN attention or libcudnn.so.9 cannot be loaded
 * here (the CUDA toolkit's cuDNN is on the loader's path on the development machine).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/vf_test.h"

#ifdef VFLOW_HAVE_CUDNN
#include <cuda_runtime_api.h>

#include "kernels/cuda/cudnn_att.h"
#include "kernels/ops.h"

static void takes(int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D)
{
    vf_status st = {0};
    int rc = vf_cudnn_att_check(B, Lq, Lk, H, D, 90, 132, &st);
    fprintf(stderr, "  B=%lld Lq=%lld Lk=%lld H=%lld D=%lld: %s\n", (long long)B, (long long)Lq, (long long)Lk,
            (long long)H, (long long)D, rc ? st.msg : "forward and backward validate");
    VF_CHECK_MSG(rc == 0, "%s", st.msg);
}

static void refuses(int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D, const char *reason)
{
    vf_status st = {0};
    int rc = vf_cudnn_att_check(B, Lq, Lk, H, D, 90, 132, &st);
    fprintf(stderr, "  D=%lld: %s\n", (long long)D, rc ? st.msg : "validates");
    VF_CHECK_EQ_INT(rc, VF_ENOTFOUND);
    VF_CHECK_MSG(strstr(st.msg, reason) != NULL, "'%s' does not say '%s'", st.msg, reason);
    VF_CHECK_MSG(strstr(st.msg, "sm_90") != NULL, "'%s' does not name the device", st.msg);
}

VF_TEST(wan_self_attention) { takes(1, 13104, 13104, 12, 128); }

VF_TEST(wan_cross_attention) { takes(1, 13104, 512, 12, 128); }

VF_TEST(bucket_shapes)
{
    takes(2, 6480, 6480, 12, 128); /* 33 frames at 320 × 576: 9 · 20 · 36 tokens, batch 2 */
    takes(2, 6480, 512, 12, 128);
    takes(1, 1000, 77, 4, 64);     /* Lq no multiple of 64, a short caption */
}

VF_TEST(refused_shapes_say_why)
{
    refuses(1, 40, 45, 3, 20, "multiple of 8"); /* the hand kernels take it (attention.cu) */
    refuses(1, 64, 64, 1, 384, "256");          /* the VAE's single 384-wide head */
}

/* The plan's bound covers what the frontend itself puts in the workspace of the
 * deterministic Hopper backward (scaled_dot_product_flash_attention.h): the bf16 score
 * gradient over (64-row query tiles) × (128-row key tiles) per (batch, head) and its f32
 * softmax sum per query row while that fits VFLOW_ATTN_WORKSPACE_MB; past it (cuDNN 9.25+)
 * an f32 dQ accumulator and the softmax sum instead. */
static int64_t frontend_estimate(int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D, int64_t limit)
{
    const int64_t dp = B * H * ((Lq + 63) / 64 * 64) * ((Lk + 127) / 128 * 128) * 2;
    return (dp <= limit ? dp : B * H * Lq * D * 4) + B * H * Lq * 4;
}

VF_TEST(workspace_bound_covers_the_frontends_estimate)
{
    const vf_device gpu = {VF_DEV_CUDA, 0}, cpu = {VF_DEV_CPU, 0};
    const int64_t sh[][4] = {{1, 13104, 13104, 12}, {1, 13104, 512, 12}, {2, 6480, 6480, 12},
                             {1, 1000, 77, 4},      {1, 32760, 32760, 12}, {1, 32760, 32760, 40}};
    const char *limits[] = {NULL, "64"};
    for (int li = 0; li < 2; li++) {
        if (limits[li]) setenv("VFLOW_ATTN_WORKSPACE_MB", limits[li], 1);
        const int64_t limit = vf_attention_workspace_limit();
        VF_CHECK_EQ_INT(limit, limits[li] ? (int64_t)64 << 20 : (int64_t)4096 << 20);
        for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
            const int64_t B = sh[i][0], Lq = sh[i][1], Lk = sh[i][2], H = sh[i][3], D = 128;
            const int64_t est = frontend_estimate(B, Lq, Lk, H, D, limit);
            const int64_t bound = vf_attention_workspace_bound(gpu, B, Lq, Lk, H, D);
            fprintf(stderr, "  limit %lld MiB, B=%lld Lq=%lld Lk=%lld H=%lld: bound %.1f MiB, frontend's %.1f MiB\n",
                    (long long)(limit >> 20), (long long)B, (long long)Lq, (long long)Lk, (long long)H,
                    bound / 1048576.0, est / 1048576.0);
            VF_CHECK(bound >= est);
            VF_CHECK(bound <= est * 11 / 10 + ((int64_t)16 << 20)); /* and not wildly above it */
            VF_CHECK_EQ_INT(vf_attention_workspace_bound(cpu, B, Lq, Lk, H, D), 0);
        }
    }
    /* Wan's 81-frame 480p sample (32 760 tokens): the quadratic form would not fit a GPU */
    VF_CHECK(vf_attention_workspace_bound(gpu, 1, 32760, 32760, 40, 128) < ((int64_t)1 << 30));
    setenv("VFLOW_ATTN_WORKSPACE_MB", "lots", 1);
    VF_CHECK_EQ_INT(vf_attention_workspace_limit(), -1);
    unsetenv("VFLOW_ATTN_WORKSPACE_MB");
}

/* What vf_cudnn_load tells the frontend through its environment: the workspace cap (the
 * ordered-dQ backward past it) and the CUDA runtime it must dlopen (vflow's, not whichever
 * of libcudart.so.12 / .13 it finds first). */
VF_TEST(frontend_environment)
{
    const char *lim = getenv("CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT");
    const char *rt = getenv("CUDNN_FRONTEND_CUDART_LIB_NAME");
    char want[32];
    snprintf(want, sizeof want, "libcudart.so.%d", CUDART_VERSION / 1000);
    VF_CHECK_MSG(lim && strtoll(lim, NULL, 10) == vf_attention_workspace_limit(), "%s", lim ? lim : "(unset)");
    VF_CHECK_MSG(rt && strcmp(rt, want) == 0, "%s, want %s", rt ? rt : "(unset)", want);
}

VF_TEST(path_choice)
{
    vf_status st = {0};
    /* a bad VFLOW_ATTN is a usage error naming the variable, not a silent default */
    setenv("VFLOW_ATTN", "fast", 1);
    VF_CHECK_EQ_INT(vf_cuda_attn_use("cudnn", &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "VFLOW_ATTN=fast") != NULL, "%s", st.msg);
    unsetenv("VFLOW_ATTN");
    vf_status_clear(&st);
    setenv("VFLOW_ATTN_WORKSPACE_MB", "-5", 1);
    VF_CHECK_EQ_INT(vf_cuda_attn_use("cudnn", &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "VFLOW_ATTN_WORKSPACE_MB=-5") != NULL, "%s", st.msg);
    unsetenv("VFLOW_ATTN_WORKSPACE_MB");
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_cuda_attn_use("hand", &st), 0);
    VF_CHECK_STR(vf_cuda_attn_path(), "hand");
    VF_CHECK_EQ_INT(vf_cuda_attn_use("cudnn", &st), 0);
    VF_CHECK_STR(vf_cuda_attn_path(), "cudnn");
    VF_CHECK(vf_cuda_cudnn_version() >= 90000);
    VF_CHECK_EQ_INT(vf_cuda_attn_use("flash", &st), VF_EUSAGE);
    int64_t nc = -1, nh = -1;
    vf_cuda_attn_counts(&nc, &nh);
    VF_CHECK(nc == 0 && nh == 0); /* no op ran */
}

int main(void)
{
    vf_status st = {0};
    if (vf_cudnn_load(&st)) {
        printf("skip: %s\n", st.msg);
        return 77;
    }
    fprintf(stderr, "cuDNN %zu\n", vf_cudnn_loaded_version());
    return vf_test_main();
}
#else
int main(void)
{
    printf("skip: built without cuDNN attention (no CUDA toolkit or no cudnn-frontend headers)\n");
    return 77;
}
#endif
