/* test_cuda_vae.c — VAE encode on the CUDA backend against the CPU backend: the same
 * seeded weights, the same clips, encoded whole and in causal chunks, once with every
 * convolution on cuDNN (where it can be had; a shape it refuses falls back, logged) and
 * once on the hand kernel; the backend's counters say that each pass ran on its path.
 *
 * vflow-test: labels=gpu timeout=600
 *
 * The CUDA encoder stores weights and activations in bf16 through ~20 convolutions, so
 * it cannot match the f32 CPU encoder to the op tolerance; its latents must agree to
 * 3e-2 relative (‖gpu − cpu‖ / ‖cpu‖; bf16's 2^-9 rounding compounding over the depth
 * stays well under that, a wrong kernel index gives O(1)). NaN never passes. The GPU's
 * chunked encode must equal its whole-clip encode to 1e-2 (the caches carry bf16
 * activations: not bit-identical like the CPU, but a broken cache is off by O(1)).
 * Exits 77 without CUDA or a usable device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/vf_test.h"
#include "tests/gpu/gpu_test_main.h"

#include "kernels/ops.h"
#include "models/vae.h"
#ifdef VFLOW_HAVE_CUDA
#include "kernels/cuda/cudnn_att.h"
#include "kernels/cuda/cudnn_conv.h"
#endif

static vf_backend *G;

static double relerr(const float *a, const float *b, int64_t n, int *nonfinite)
{
    double num = 0, den = 0;
    *nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) {
            (*nonfinite)++;
            continue;
        }
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* encodes x (batch, 3, T, H, W) on backend be with the seeded tiny preset */
static int encode(vf_backend *be, int batch, int64_t T, int H, int W, int chunk, const float *x, float *mean,
                  float *logvar)
{
    vf_status st = {0};
    vf_vae_config cfg;
    vf_vae_config_tiny(&cfg);
    vf_vae *m = NULL;
    vf_vae_enc *e = NULL;
    int rc = vf_vae_new(&cfg, be, &m, &st);
    if (rc == 0) rc = vf_vae_init_seeded(m, 1234, &st);
    if (rc == 0) rc = vf_vae_enc_new(m, batch, chunk, H, W, &e, &st);
    if (rc == 0) rc = vf_vae_encode_f32(e, batch, T, x, mean, logvar, &st); /* T' on success */
    if (rc >= 0) rc = be->sync(be, &st);
    if (rc < 0) fprintf(stderr, "encode on %s: %s\n", be->name, st.msg);
    vf_vae_enc_free(e);
    vf_vae_free(m);
    return rc;
}

/* Sets the convolution path of G ("cudnn" or "hand"); 0 when it cannot be had here (said
 * loudly; a failure where VFLOW_CONV=cudnn demands it). On the CPU stand-in: 1 for "hand". */
static int conv_path(const char *path)
{
#ifdef VFLOW_HAVE_CUDA
    if (G->device.kind == VF_DEV_CUDA) {
        vf_status st = {0};
        if (vf_cuda_conv_use(path, &st) == 0) return 1;
        const char *e = getenv("VFLOW_CONV");
        fprintf(stderr, "  the %s convolution NOT TESTED here: %s\n", path, st.msg);
        VF_CHECK_MSG(!(e && strcmp(e, "cudnn") == 0), "VFLOW_CONV=cudnn, and cuDNN cannot be had: %s", st.msg);
        return 0;
    }
#endif
    return strcmp(path, "hand") == 0;
}

/* the conv3d_fwd calls that ran on cuDNN and on the hand kernel so far (0 off CUDA) */
static void conv_calls(int64_t n[2])
{
    n[0] = n[1] = 0;
#ifdef VFLOW_HAVE_CUDA
    if (G->device.kind == VF_DEV_CUDA) vf_cuda_conv_counts(&n[0], &n[1]);
#endif
}

static void encode_on_path(const char *path);

/* every convolution through cuDNN (the mid-block attention through cuBLASLt), then all
 * on the hand kernel: each against the CPU */
VF_TEST(vae_encode_gpu_vs_cpu)
{
    encode_on_path("cudnn");
    encode_on_path("hand");
#ifdef VFLOW_HAVE_CUDA
    if (G->device.kind == VF_DEV_CUDA)
        fprintf(stderr, "  conv paths %s, attention paths %s\n", vf_cuda_conv_path(), vf_cuda_attn_path());
#endif
}

static void encode_on_path(const char *path)
{
    if (!conv_path(path)) return;
    int64_t n0[2], n1[2];
    conv_calls(n0);
    fprintf(stderr, "  -- convolutions: %s\n", path);
    const int batch = 2, H = 64, W = 48;
    const int64_t T = 9;
    vf_vae_config cfg;
    vf_vae_config_tiny(&cfg);
    const int64_t Tl = vf_vae_latent_frames(&cfg, T);
    const int sf = vf_vae_space_factor(&cfg);
    const int64_t nl = (int64_t)batch * cfg.z_dim * Tl * (H / sf) * (W / sf);
    const int64_t nx = (int64_t)batch * 3 * T * H * W;
    float *x = malloc(sizeof(float) * (size_t)nx);
    uint64_t s = 99;
    for (int64_t i = 0; i < nx; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    float *mc = calloc((size_t)nl, 4), *lc = calloc((size_t)nl, 4);
    float *mg = calloc((size_t)nl, 4), *lg = calloc((size_t)nl, 4);
    float *mg2 = calloc((size_t)nl, 4), *lg2 = calloc((size_t)nl, 4);
    VF_CHECK_EQ_INT(encode(vf_backend_cpu(), batch, T, H, W, (int)T, x, mc, lc), 0);
    VF_CHECK_EQ_INT(encode(G, batch, T, H, W, (int)T, x, mg, lg), 0);
    VF_CHECK_EQ_INT(encode(G, batch, T, H, W, 4, x, mg2, lg2), 0); /* causal chunks of 4 frames */
    double norm = 0;
    for (int64_t i = 0; i < nl; i++) norm += (double)mc[i] * mc[i];
    VF_CHECK(norm > 0); /* a comparison of zeros would prove nothing */
    int bad = 0;
    double em = relerr(mg, mc, nl, &bad);
    fprintf(stderr, "  mean   gpu vs cpu: rel %.3e (%d non-finite)\n", em, bad);
    VF_CHECK(bad == 0 && em <= 3e-2);
    double el = relerr(lg, lc, nl, &bad);
    fprintf(stderr, "  logvar gpu vs cpu: rel %.3e (%d non-finite)\n", el, bad);
    VF_CHECK(bad == 0 && el <= 3e-2);
    double ec = relerr(mg2, mg, nl, &bad);
    fprintf(stderr, "  mean   gpu chunked vs whole: rel %.3e (%d non-finite)\n", ec, bad);
    VF_CHECK(bad == 0 && ec <= 1e-2);
    conv_calls(n1);
    if (G->device.kind != VF_DEV_CPU) { /* the pass ran on its path (cuDNN may refuse a shape: logged) */
        const int cudnn = strcmp(path, "cudnn") == 0;
        fprintf(stderr, "  %lld convolutions on cuDNN, %lld on the hand kernel\n", (long long)(n1[0] - n0[0]),
                (long long)(n1[1] - n0[1]));
        VF_CHECK_MSG(cudnn ? n1[0] > n0[0] : n1[0] == n0[0], "%s pass: %lld convolutions on cuDNN", path,
                     (long long)(n1[0] - n0[0]));
    }
    free(x), free(mc), free(lc), free(mg), free(lg), free(mg2), free(lg2);
}

int main(void) { return vf_gpu_test_main(&G, NULL); }
