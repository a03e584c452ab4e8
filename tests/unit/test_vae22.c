/* test_vae22.c — the causal VAE as Wan 2.2's (residual levels with the average-down /
 * duplicate-up shortcuts, pixel patchify 2) on the CPU backend: encoding and decoding
 * in chunks equal the whole clip bit for bit, declared memory == allocated, the preset's
 * strides and names, and the config rule of the shortcuts.
 *
 * Parity with diffusers' AutoencoderKLWan(is_residual=True, patch_size=2) is
 * tests/reference/test_vae22_diffusers.py.
 */
#include "tests/vf_test.h"

#include "models/vae.h"

#include <inttypes.h>
#include <string.h>

#define H_ 32
#define W_ 48

/* A tiny Wan 2.2 config: widths 8 (decoder 16), mult 1 2 4 4, 1 res block, z 8. */
static void tiny22(vf_vae_config *c)
{
    vf_vae_config_wan22(c);
    c->dim = 8;
    c->dec_dim = 16;
    c->num_res_blocks = 1;
    c->z_dim = 8;
}

static float *ramp(int64_t n, uint32_t seed)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
    }
    return x;
}

static vf_vae *model(int decoder, uint64_t seed)
{
    vf_vae_config c;
    tiny22(&c);
    vf_vae *m = NULL;
    vf_status st = {0};
    int rc = decoder ? vf_vae_dec_model_new(&c, vf_backend_cpu(), &m, &st)
                     : vf_vae_new(&c, vf_backend_cpu(), &m, &st);
    VF_CHECK_MSG(rc == 0, "%s", st.msg);
    if (rc == 0) VF_CHECK(vf_vae_init_seeded(m, seed, &st) == 0);
    return m;
}

VF_TEST(encode_chunked_equals_whole)
{
    vf_vae *m = model(0, 3);
    const int64_t T = 13, Tl = 4, n = (int64_t)8 * Tl * (H_ / 16) * (W_ / 16);
    float *x = ramp(3 * T * H_ * W_, 5), *whole = calloc((size_t)n, 4), *part = calloc((size_t)n, 4);
    vf_status st = {0};
    const int chunks[] = {(int)T, 1, 3, 4, 5};
    for (int ci = 0; ci < 5; ci++) {
        vf_vae_enc *e = NULL;
        VF_CHECK(vf_vae_enc_new(m, 1, chunks[ci], H_, W_, &e, &st) == 0);
        int rc = vf_vae_encode_f32(e, 1, T, x, ci ? part : whole, NULL, &st);
        VF_CHECK_MSG(rc == Tl, "chunk %d: %d %s", chunks[ci], rc, st.msg);
        if (ci) VF_CHECK_MSG(memcmp(part, whole, (size_t)n * 4) == 0, "chunk %d", chunks[ci]);
        vf_vae_enc_free(e);
    }
    double amax = 0;
    for (int64_t i = 0; i < n; i++) amax = fmax(amax, fabs(whole[i]));
    VF_CHECK(amax > 1e-3 && isfinite(amax));
    free(x), free(whole), free(part);
    vf_vae_free(m);
}

/* The encoder is causal and takes frame 0 alone first: a clip's latent frame 0 is the
 * encode of its first frame by itself, bit for bit (what TI2V training takes as the image's
 * latent, models/dit.h vf_dit_first_frame). */
VF_TEST(encode_first_frame_alone_is_latent_frame_0)
{
    vf_vae *m = model(0, 4);
    const int64_t T = 9, Tl = 3, plane = (int64_t)(H_ / 16) * (W_ / 16), n = 8 * Tl * plane;
    float *x = ramp(3 * T * H_ * W_, 6), *x0 = malloc(sizeof(float) * 3 * H_ * W_);
    float *whole = calloc((size_t)n, 4), *one = calloc((size_t)(8 * plane), 4);
    for (int c = 0; c < 3; c++) memcpy(x0 + c * H_ * W_, x + c * T * H_ * W_, sizeof(float) * H_ * W_);
    vf_status st = {0};
    vf_vae_enc *e = NULL;
    VF_CHECK(vf_vae_enc_new(m, 1, 4, H_, W_, &e, &st) == 0);
    VF_CHECK(vf_vae_encode_f32(e, 1, T, x, whole, NULL, &st) == Tl);
    vf_vae_enc_free(e);
    e = NULL;
    VF_CHECK(vf_vae_enc_new(m, 1, 4, H_, W_, &e, &st) == 0);
    VF_CHECK(vf_vae_encode_f32(e, 1, 1, x0, one, NULL, &st) == 1);
    vf_vae_enc_free(e);
    for (int c = 0; c < 8; c++)
        VF_CHECK_MSG(memcmp(one + c * plane, whole + c * Tl * plane, sizeof(float) * (size_t)plane) == 0,
                     "channel %d", c);
    free(x), free(x0), free(whole), free(one);
    vf_vae_free(m);
}

VF_TEST(decode_chunked_equals_whole)
{
    vf_vae *m = model(1, 4);
    const int h = 2, w = 3;
    const int64_t Tl = 4, T = 13, n = 3 * T * (h * 16) * (w * 16);
    float *z = ramp((int64_t)8 * Tl * h * w, 9), *whole = calloc((size_t)n, 4), *part = calloc((size_t)n, 4);
    vf_status st = {0};
    const int chunks[] = {(int)Tl, 1, 2, 3};
    for (int ci = 0; ci < 4; ci++) {
        vf_vae_dec *d = NULL;
        VF_CHECK(vf_vae_dec_new(m, 1, chunks[ci], h, w, &d, &st) == 0);
        int rc = vf_vae_decode_f32(d, 1, Tl, z, ci ? part : whole, &st);
        VF_CHECK_MSG(rc == T, "chunk %d: %d %s", chunks[ci], rc, st.msg);
        if (ci) VF_CHECK_MSG(memcmp(part, whole, (size_t)n * 4) == 0, "chunk %d", chunks[ci]);
        vf_vae_dec_free(d);
    }
    double amax = 0;
    for (int64_t i = 0; i < n; i++) amax = fmax(amax, fabs(whole[i]));
    VF_CHECK(amax > 1e-3 && amax <= 1);
    free(z), free(whole), free(part);
    vf_vae_free(m);
}

/* What vf_vae_mem / vf_vae_dec_mem declare is what the encoder / decoder allocate. */
VF_TEST(declared_equals_allocated)
{
    vf_vae *e = model(0, 1), *d = model(1, 1);
    vf_status st = {0};
    const int chunks[] = {1, 4, 5};
    for (int ci = 0; ci < 3; ci++) {
        vf_vae_mem_info mi;
        vf_vae_enc *enc = NULL;
        VF_CHECK(vf_vae_mem(vf_vae_cfg(e), 4, 2, chunks[ci], 64, 48, &mi, &st) == 0);
        VF_CHECK(vf_vae_enc_new(e, 2, chunks[ci], 64, 48, &enc, &st) == 0);
        int64_t conv = (int64_t)sizeof(float) * 3 * chunks[ci] * 64 * 48;
        VF_CHECK_EQ_INT(vf_vae_enc_bytes(enc), mi.caches + mi.workspace + conv);
        VF_CHECK_EQ_INT(mi.weights, vf_vae_numel(e) * 4);
        vf_vae_enc_free(enc);
        vf_vae_dec *dec = NULL;
        VF_CHECK(vf_vae_dec_mem(vf_vae_cfg(d), 4, 2, chunks[ci], 4, 3, &mi, &st) == 0);
        VF_CHECK(vf_vae_dec_new(d, 2, chunks[ci], 4, 3, &dec, &st) == 0);
        VF_CHECK_EQ_INT(vf_vae_dec_bytes(dec), mi.caches + mi.workspace);
        VF_CHECK_EQ_INT(mi.weights, vf_vae_numel(d) * 4);
        vf_vae_dec_free(dec);
    }
    vf_vae_free(e), vf_vae_free(d);
}

static bool has_param(const vf_vae *m, const char *name, int64_t d0, int64_t d1)
{
    for (int i = 0; i < vf_vae_nparams(m); i++) {
        const vf_vae_param *p = vf_vae_param_at(m, i);
        if (!strcmp(p->name, name)) return p->shape[0] == d0 && p->shape[1] == d1;
    }
    return false;
}

VF_TEST(preset_and_names)
{
    vf_vae_config c;
    vf_vae_config_wan22(&c);
    vf_status st = {0};
    VF_CHECK(vf_vae_config_check(&c, &st) == 0);
    VF_CHECK_EQ_INT(vf_vae_time_factor(&c), 4);
    VF_CHECK_EQ_INT(vf_vae_space_factor(&c), 16);
    VF_CHECK_EQ_INT(vf_vae_io_channels(&c), 12);
    /* the original names of wan/modules/vae2_2.py, nested per level */
    vf_vae *e = NULL, *d = NULL;
    VF_CHECK(vf_vae_new(&c, vf_backend_cpu(), &e, &st) == 0);
    VF_CHECK(vf_vae_dec_model_new(&c, vf_backend_cpu(), &d, &st) == 0);
    VF_CHECK(has_param(e, "encoder.conv1.weight", 160, 12));
    VF_CHECK(has_param(e, "encoder.downsamples.0.downsamples.0.residual.2.weight", 160, 160));
    VF_CHECK(has_param(e, "encoder.downsamples.1.downsamples.0.shortcut.weight", 320, 160));
    VF_CHECK(has_param(e, "encoder.downsamples.1.downsamples.2.time_conv.weight", 320, 320));
    VF_CHECK(has_param(e, "conv1.weight", 96, 96));
    VF_CHECK(has_param(d, "decoder.conv1.weight", 1024, 48));
    VF_CHECK(has_param(d, "decoder.upsamples.0.upsamples.3.time_conv.weight", 2048, 1024));
    VF_CHECK(has_param(d, "decoder.upsamples.0.upsamples.3.resample.1.weight", 1024, 1024));
    VF_CHECK(has_param(d, "decoder.upsamples.2.upsamples.0.shortcut.weight", 512, 1024));
    VF_CHECK(has_param(d, "decoder.head.2.weight", 12, 256));
    char name[128];
    vf_vae_diffusers_name(&c, "decoder.upsamples.0.upsamples.3.time_conv.weight", name, sizeof name);
    VF_CHECK_STR(name, "decoder.up_blocks.0.upsampler.time_conv.weight");
    vf_vae_diffusers_name(&c, "encoder.downsamples.2.downsamples.1.residual.6.bias", name, sizeof name);
    VF_CHECK_STR(name, "encoder.down_blocks.2.resnets.1.conv2.bias");
    vf_vae_diffusers_name(&c, "encoder.downsamples.2.downsamples.2.resample.1.bias", name, sizeof name);
    VF_CHECK_STR(name, "encoder.down_blocks.2.downsampler.resample.1.bias");
    vf_vae_free(e), vf_vae_free(d);
    /* Wan 2.1's config text (its cache keys) does not change; Wan 2.2's differs */
    char a[512], b[512];
    vf_vae_config w21;
    vf_vae_config_wan(&w21);
    vf_vae_config_str(&w21, a, sizeof a);
    vf_vae_config_str(&c, b, sizeof b);
    VF_CHECK(strstr(a, "residual") == NULL && strstr(b, "residual=1;patch=2;dec_dim=256") != NULL);
    /* a level whose shortcut cannot group its channels evenly is refused by name */
    c.dim_mult[3] = 8;
    VF_CHECK(vf_vae_config_check(&c, &st) == VF_EINVAL);
    VF_CHECK_MSG(strstr(st.msg, "residual encoder level 3") != NULL, "%s", st.msg);
}

int main(void) { return vf_test_main(); }
