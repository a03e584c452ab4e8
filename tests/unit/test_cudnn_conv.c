/* test_cudnn_conv.c — the cuDNN convolution of the CUDA backend, checked without a GPU:
 * the graph the backend builds for a conv3d_fwd (kernels/cuda/cudnn_conv.cpp: NCDHW bf16,
 * pre- and post-padding, with and without the fused bias) passes cuDNN's validate() for a
 * Hopper device (sm_90, 132 SMs) for every convolution of Wan's VAE encoder and decoder at
 * 256 × 256 and 480 × 832 (the shapes the models' measuring walks list), the
 * causal time padding and the downsample's (0, 1, 0, 1) without a padded copy among them;
 * the memory plan's conv workspace is the largest bound over those shapes; the path choice
 * (VFLOW_CONV, vf_cuda_conv_use) says what it runs. cuDNN's validate() of a convolution
 * checks its attributes, types and layouts, not where the padding puts the taps: the
 * numbers are tests/gpu's (test_cuda_ops conv3d, test_cuda_vae, each against the CPU).
 *
 * Exits 77 (skip) when the build has no cuDNN or libcudnn.so.9 cannot be loaded here (the
 * CUDA toolkit's cuDNN is on the loader's path on the development machine).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/vf_test.h"

#ifdef VFLOW_HAVE_CUDNN
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/ops.h"
#include "models/vae.h"

enum { MAX_SHAPES = 256 };

static int validates(const vf_conv3d_shape *s, int bias)
{
    vf_status st = {0};
    int rc = vf_cudnn_conv_check(s, bias, 90, 132, &st);
    VF_CHECK_MSG(rc == 0, "%s", st.msg);
    return rc == 0;
}

static int same_shape(const vf_conv3d_shape *a, const vf_conv3d_shape *b) { return memcmp(a, b, sizeof *a) == 0; }

/* every distinct shape of one model walk validates, with and without the bias; returns
 * the largest workspace bound among them and counts the padding kinds seen */
static int64_t check_walk(const char *what, const vf_conv3d_shape *s, int n, int *causal, int *down)
{
    const vf_device gpu = {VF_DEV_CUDA, 0};
    int64_t ws = 0, distinct = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = same_shape(&s[i], &s[j]);
        const int64_t b = vf_conv3d_workspace_bound(gpu, &s[i]);
        if (b > ws) ws = b;
        if (seen) continue;
        distinct++;
        validates(&s[i], 1);
        validates(&s[i], 0);
        if (s[i].KT == 3 && s[i].pt0 == 0 && s[i].KH == 3) (*causal)++; /* a causal 3x3x3 over [cache | chunk] */
        if (s[i].sh == 2 && s[i].ph0 == 0 && s[i].ph1 == 1 && s[i].pw1 == 1) (*down)++;
    }
    fprintf(stderr, "  %s: %d convolutions, %lld shapes validate; largest bound %.1f MiB\n", what, n,
            (long long)distinct, ws / 1048576.0);
    return ws;
}

static void wan_encoder(int H, int W)
{
    vf_status st = {0};
    vf_vae_config c;
    vf_vae_config_wan(&c);
    static vf_conv3d_shape s[MAX_SHAPES];
    int n = vf_vae_conv_shapes(&c, 1, 4, H, W, s, MAX_SHAPES, &st);
    VF_CHECK_MSG(n > 0 && n <= MAX_SHAPES, "%d: %s", n, st.msg);
    if (n <= 0 || n > MAX_SHAPES) return;
    char what[64];
    snprintf(what, sizeof what, "encoder %dx%d, chunks of 4 frames", H, W);
    int causal = 0, down = 0;
    const int64_t ws = check_walk(what, s, n, &causal, &down);
    VF_CHECK(causal > 0 && down > 0);
    vf_vae_mem_info mi;
    VF_CHECK_MSG(vf_vae_mem(&c, 2, 1, 4, H, W, &mi, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(mi.conv_workspace, ws);
}

static void wan_decoder(int H, int W)
{
    vf_status st = {0};
    vf_vae_config c;
    vf_vae_config_wan(&c);
    const int sf = vf_vae_space_factor(&c);
    static vf_conv3d_shape s[MAX_SHAPES];
    int n = vf_vae_dec_conv_shapes(&c, 1, 1, H / sf, W / sf, s, MAX_SHAPES, &st);
    VF_CHECK_MSG(n > 0 && n <= MAX_SHAPES, "%d: %s", n, st.msg);
    if (n <= 0 || n > MAX_SHAPES) return;
    char what[64];
    snprintf(what, sizeof what, "decoder to %dx%d, one latent frame a chunk", H, W);
    int causal = 0, down = 0;
    const int64_t ws = check_walk(what, s, n, &causal, &down);
    VF_CHECK(causal > 0 && down == 0);
    vf_vae_mem_info mi;
    VF_CHECK_MSG(vf_vae_dec_mem(&c, 2, 1, 1, H / sf, W / sf, &mi, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(mi.conv_workspace, ws);
}

VF_TEST(wan_encoder_256) { wan_encoder(256, 256); }
VF_TEST(wan_encoder_480p) { wan_encoder(480, 832); }
VF_TEST(wan_decoder_256) { wan_decoder(256, 256); }
VF_TEST(wan_decoder_480p) { wan_decoder(480, 832); }

/* the padding forms, one at a time: causal time (2 + 0) with spatial 1 + 1, the
 * downsample's 0 + 1 after H and W with stride 2, padding after time, a 1x1x1 */
VF_TEST(padding_forms)
{
    const vf_conv3d_shape causal = {1, 96, 5, 64, 64, 96, 3, 3, 3, 1, 1, 1, 2, 0, 1, 1, 1, 1};
    const vf_conv3d_shape down = {1, 96, 4, 64, 64, 96, 1, 3, 3, 1, 2, 2, 0, 0, 0, 1, 0, 1};
    const vf_conv3d_shape after = {2, 16, 4, 9, 7, 24, 3, 3, 3, 2, 1, 1, 1, 2, 0, 2, 2, 0};
    const vf_conv3d_shape pointwise = {1, 384, 2, 32, 32, 192, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
    const vf_conv3d_shape *all[] = {&causal, &down, &after, &pointwise};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        validates(all[i], 1);
        validates(all[i], 0);
    }
    int64_t To, Ho, Wo;
    vf_conv3d_out(&down, &To, &Ho, &Wo);
    VF_CHECK(To == 4 && Ho == 32 && Wo == 32);
    vf_conv3d_out(&causal, &To, &Ho, &Wo);
    VF_CHECK(To == 5 && Ho == 64 && Wo == 64);
}

/* the bound covers a channels-last bf16 copy of the padded input, the output and the
 * weights; 0 off the GPU */
VF_TEST(workspace_bound)
{
    const vf_device gpu = {VF_DEV_CUDA, 0}, cpu = {VF_DEV_CPU, 0};
    const vf_conv3d_shape s = {1, 384, 6, 60, 104, 384, 3, 3, 3, 1, 1, 1, 0, 0, 1, 1, 1, 1};
    const int64_t in = 384LL * 6 * 62 * 106, out = 384LL * 4 * 60 * 104, w = 384LL * 384 * 27;
    VF_CHECK(vf_conv3d_workspace_bound(gpu, &s) >= 2 * (in + out + w));
    VF_CHECK_EQ_INT(vf_conv3d_workspace_bound(cpu, &s), 0);
}

VF_TEST(path_choice)
{
    vf_status st = {0};
    /* a bad VFLOW_CONV is a usage error naming the variable, not a silent default */
    setenv("VFLOW_CONV", "winograd", 1);
    VF_CHECK_EQ_INT(vf_cuda_conv_use("cudnn", &st), VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "VFLOW_CONV=winograd") != NULL, "%s", st.msg);
    unsetenv("VFLOW_CONV");
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_cuda_conv_use("hand", &st), 0);
    VF_CHECK_STR(vf_cuda_conv_path(), "hand");
    VF_CHECK_EQ_INT(vf_cuda_conv_use("cudnn", &st), 0);
    VF_CHECK_STR(vf_cuda_conv_path(), "cudnn");
    VF_CHECK_EQ_INT(vf_cuda_conv_use("fft", &st), VF_EUSAGE);
    int64_t nc = -1, nh = -1;
    vf_cuda_conv_counts(&nc, &nh);
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
    printf("skip: built without cuDNN (no CUDA toolkit or no cudnn-frontend headers)\n");
    return 77;
}
#endif
