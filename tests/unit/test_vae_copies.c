/* test_vae_copies.c — the VAE moves its bytes in a number of device calls that depends
 * on its structure only: encoding or decoding one clip on a counting CPU backend takes
 * the same number of copies (copy, copy2d), memsets and transfers (upload, download)
 * whatever the frame size and the channel widths. A per-row or per-plane copy (a padded
 * copy for the downsample, a cache written plane by plane) makes the count grow with the
 * height or the width of a level and fails here; on a GPU each such call is a
 * cudaMemcpyAsync of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/vf_test.h"

#include "kernels/ops.h"
#include "models/vae.h"

/* the CPU backend with its memory entries counted */
typedef struct counts {
    int64_t copy, copy2d, memset0, upload, download;
} counts;
static counts n;
static vf_backend counting;

static void c_copy(vf_backend *be, void *d, const void *s, size_t bytes)
{
    n.copy++;
    vf_backend_cpu()->copy(be, d, s, bytes);
}
static void c_copy2d(vf_backend *be, void *d, size_t dp, const void *s, size_t sp, size_t w, size_t r)
{
    n.copy2d++;
    vf_backend_cpu()->copy2d(be, d, dp, s, sp, w, r);
}
static void c_memset0(vf_backend *be, void *p, size_t bytes)
{
    n.memset0++;
    vf_backend_cpu()->memset0(be, p, bytes);
}
static void c_upload(vf_backend *be, void *d, const float *s, int64_t k, vf_dtype t)
{
    n.upload++;
    vf_backend_cpu()->upload(be, d, s, k, t);
}
static void c_download(vf_backend *be, float *d, const void *s, int64_t k, vf_dtype t)
{
    n.download++;
    vf_backend_cpu()->download(be, d, s, k, t);
}

static vf_backend *counting_backend(void)
{
    counting = *vf_backend_cpu();
    counting.copy = c_copy;
    counting.copy2d = c_copy2d;
    counting.memset0 = c_memset0;
    counting.upload = c_upload;
    counting.download = c_download;
    return &counting;
}

static float *ramp(int64_t k, double scale)
{
    float *x = malloc(sizeof(float) * (size_t)k);
    for (int64_t i = 0; i < k; i++) x[i] = (float)(scale * ((double)((i * 7919) % 2001) / 1000.0 - 1.0));
    return x;
}

static counts taken(const char *what, int dim, int h, int w)
{
    fprintf(stderr, "  %s dim %d %dx%d: %lld copy, %lld copy2d, %lld memset, %lld upload, %lld download\n", what,
            dim, h, w, (long long)n.copy, (long long)n.copy2d, (long long)n.memset0, (long long)n.upload,
            (long long)n.download);
    return n;
}

/* the calls of one clip (begin to end) through the encoder of width dim at H x W */
static counts encode_calls(int dim, int H, int W, int64_t T, int chunk)
{
    vf_status st = {0};
    vf_vae_config c;
    vf_vae_config_tiny(&c);
    c.dim = dim;
    vf_vae *m = NULL;
    vf_vae_enc *e = NULL;
    const int sf = vf_vae_space_factor(&c);
    const int64_t Tl = vf_vae_latent_frames(&c, T), nl = c.z_dim * Tl * (H / sf) * (W / sf);
    float *x = ramp(3 * T * H * W, 1.0), *mean = calloc((size_t)nl, 4), *lv = calloc((size_t)nl, 4);
    VF_CHECK(vf_vae_new(&c, counting_backend(), &m, &st) == 0);
    VF_CHECK(vf_vae_init_seeded(m, 5, &st) == 0);
    VF_CHECK(vf_vae_enc_new(m, 1, chunk, H, W, &e, &st) == 0);
    memset(&n, 0, sizeof n);
    VF_CHECK_MSG(vf_vae_encode_f32(e, 1, T, x, mean, lv, &st) == (int)Tl, "%s", st.msg);
    counts got = taken("encode", dim, H, W);
    vf_vae_enc_free(e);
    vf_vae_free(m);
    free(x), free(mean), free(lv);
    return got;
}

static counts decode_calls(int dim, int h, int w, int64_t Tl, int chunk)
{
    vf_status st = {0};
    vf_vae_config c;
    vf_vae_config_tiny(&c);
    c.dim = dim;
    vf_vae *m = NULL;
    vf_vae_dec *d = NULL;
    const int sf = vf_vae_space_factor(&c);
    const int64_t T = vf_vae_decoded_frames(&c, Tl);
    float *z = ramp(c.z_dim * Tl * h * w, 0.5), *x = calloc((size_t)(3 * T * h * sf * w * sf), 4);
    VF_CHECK(vf_vae_dec_model_new(&c, counting_backend(), &m, &st) == 0);
    VF_CHECK(vf_vae_init_seeded(m, 6, &st) == 0);
    VF_CHECK(vf_vae_dec_new(m, 1, chunk, h, w, &d, &st) == 0);
    memset(&n, 0, sizeof n);
    VF_CHECK_MSG(vf_vae_decode_f32(d, 1, Tl, z, x, &st) == (int)T, "%s", st.msg);
    counts got = taken("decode", dim, h, w);
    vf_vae_dec_free(d);
    vf_vae_free(m);
    free(z), free(x);
    return got;
}

static void same(const char *what, counts a, counts b)
{
    VF_CHECK_MSG(a.copy == b.copy && a.copy2d == b.copy2d && a.memset0 == b.memset0,
                 "%s: device copies differ (%lld copy + %lld copy2d + %lld memset vs %lld + %lld + %lld)", what,
                 (long long)a.copy, (long long)a.copy2d, (long long)a.memset0, (long long)b.copy,
                 (long long)b.copy2d, (long long)b.memset0);
    VF_CHECK_MSG(a.upload == b.upload && a.download == b.download,
                 "%s: transfers differ (%lld up, %lld down vs %lld, %lld)", what, (long long)a.upload,
                 (long long)a.download, (long long)b.upload, (long long)b.download);
}

VF_TEST(encode_copies_independent_of_size_and_width)
{
    /* 9 frames in chunks of 4: caches, the first-frame path and both temporal downsamples */
    const counts base = encode_calls(8, 16, 16, 9, 4);
    VF_CHECK(base.copy + base.copy2d > 0); /* the counter sees the encoder's copies */
    same("encode 16x16 vs 32x24", base, encode_calls(8, 32, 24, 9, 4));
    same("encode dim 8 vs dim 16", base, encode_calls(16, 16, 16, 9, 4));
    same("encode dim 8 16x16 vs dim 16 40x32", base, encode_calls(16, 40, 32, 9, 4));
}

VF_TEST(decode_copies_independent_of_size_and_width)
{
    /* 3 latent frames one at a time (as Wan decodes): caches and the first-frame path */
    const counts base = decode_calls(8, 2, 2, 3, 1);
    VF_CHECK(base.copy + base.copy2d > 0);
    same("decode 2x2 vs 4x3", base, decode_calls(8, 4, 3, 3, 1));
    same("decode dim 8 vs dim 16", base, decode_calls(16, 2, 2, 3, 1));
    same("decode dim 8 2x2 vs dim 16 5x4", base, decode_calls(16, 5, 4, 3, 1));
}

int main(void) { return vf_test_main(); }
