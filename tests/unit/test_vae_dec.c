/* test_vae_dec.c — the causal VAE decoder (models/vae.h, vae_dec.c) on the CPU backend:
 * chunked == whole bit for bit, causality, micro-batch == single clips, memory set by the
 * chunk (the same account peak for 2 and 8 latent frames, declared == allocated),
 * seeded init / hash / save-load round trip, the de-normalisation helper, Wan's sizes.
 *
 * Parity with diffusers' AutoencoderKLWan.decode is tests/reference/test_vae_dec_diffusers.py.
 */
#include "tests/vf_test.h"

#include "models/vae.h"
#include "runtime/core/alloc.h"

#include <inttypes.h>
#include <unistd.h>

#define h_ 4
#define w_ 4

/* Deterministic latent (B, z, Tl, h, w), roughly N(0, 0.5²)-sized. */
static float *make_latent(int B, int z, int64_t Tl, uint32_t seed)
{
    int64_t n = (int64_t)B * z * Tl * h_ * w_;
    float *x = malloc(sizeof(float) * (size_t)n);
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
    }
    return x;
}

static vf_vae *tiny_decoder(uint64_t seed)
{
    vf_vae_config c;
    vf_vae_config_tiny(&c);
    vf_vae *m = NULL;
    vf_status st = {0};
    int rc = vf_vae_dec_model_new(&c, vf_backend_cpu(), &m, &st);
    VF_CHECK_MSG(rc == 0, "%s", st.msg);
    if (rc == 0) {
        rc = vf_vae_init_seeded(m, seed, &st);
        VF_CHECK_MSG(rc == 0, "%s", st.msg);
    }
    return m;
}

static int64_t frames_numel(const vf_vae *m, int B, int64_t Tl)
{
    const vf_vae_config *c = vf_vae_cfg(m);
    int sf = vf_vae_space_factor(c);
    return (int64_t)B * 3 * vf_vae_decoded_frames(c, Tl) * (h_ * sf) * (w_ * sf);
}

/* Decodes z (B clips of Tl latent frames) in chunks of `chunk`; caller frees *x. */
static int decode(vf_vae *m, int B, int64_t Tl, int chunk, const float *z, float **x)
{
    vf_status st = {0};
    vf_vae_dec *d = NULL;
    *x = calloc((size_t)frames_numel(m, B, Tl), sizeof(float));
    int rc = vf_vae_dec_new(m, B, chunk, h_, w_, &d, &st);
    if (rc == 0) rc = vf_vae_decode_f32(d, B, Tl, z, *x, &st);
    VF_CHECK_MSG(rc >= 0, "B=%d Tl=%" PRId64 " chunk=%d: %s", B, Tl, chunk, st.msg);
    vf_vae_dec_free(d);
    return rc;
}

VF_TEST(chunked_equals_whole_bit_for_bit)
{
    vf_vae *m = tiny_decoder(7);
    const int64_t Tls[] = {1, 2, 5};
    const int chunks[] = {1, 2, 3};
    for (int ti = 0; ti < 3; ti++) {
        int64_t Tl = Tls[ti], n = frames_numel(m, 1, Tl);
        float *z = make_latent(1, vf_vae_cfg(m)->z_dim, Tl, (uint32_t)Tl), *xw;
        VF_CHECK_EQ_INT(decode(m, 1, Tl, (int)Tl, z, &xw),
                        vf_vae_decoded_frames(vf_vae_cfg(m), Tl));
        double amax = 0, out = 0;
        for (int64_t i = 0; i < n; i++) {
            amax = fmax(amax, fabs(xw[i]));
            if (!(fabs(xw[i]) <= 1)) out = fabs(xw[i]);
        }
        VF_CHECK_MSG(amax > 1e-3, "frames of Tl=%" PRId64 " are ~0 (max %g)", Tl, amax);
        VF_CHECK_MSG(out == 0, "a value %g outside [-1, 1]", out);
        for (int ci = 0; ci < 3; ci++) {
            float *xc;
            decode(m, 1, Tl, chunks[ci], z, &xc);
            int same = memcmp(xc, xw, sizeof(float) * (size_t)n) == 0;
            fprintf(stderr, "   Tl=%" PRId64 " chunk=%d: chunked %s whole\n", Tl, chunks[ci],
                    same ? "==" : "!=");
            VF_CHECK_MSG(same, "Tl=%" PRId64 " chunk=%d differs from whole", Tl, chunks[ci]);
            free(xc);
        }
        free(z);
        free(xw);
    }
    vf_vae_free(m);
}

/* Changing the last latent frame must not change the frames before its 4: the decoder
 * is causal. */
/* A decoder that decoded one clip decodes the next as a fresh one would: nothing of the
 * first clip (causal caches, temporal-resample state, buffer contents) reaches it. */
VF_TEST(reused_decoder_equals_fresh)
{
    vf_vae *m = tiny_decoder(7);
    const int64_t Tl = 3;
    float *za = make_latent(1, vf_vae_cfg(m)->z_dim, Tl, 11), *zb = make_latent(1, vf_vae_cfg(m)->z_dim, Tl, 12);
    float *fresh = NULL;
    decode(m, 1, Tl, 1, zb, &fresh);
    int64_t n = frames_numel(m, 1, Tl);
    float *xa = calloc((size_t)n, sizeof(float)), *xb = calloc((size_t)n, sizeof(float));
    vf_status st = {0};
    vf_vae_dec *d = NULL;
    VF_CHECK(vf_vae_dec_new(m, 1, 1, h_, w_, &d, &st) == 0);
    VF_CHECK(vf_vae_decode_f32(d, 1, Tl, za, xa, &st) >= 0);
    VF_CHECK(vf_vae_decode_f32(d, 1, Tl, zb, xb, &st) >= 0);
    int64_t first = -1;
    for (int64_t i = 0; i < n && first < 0; i++)
        if (memcmp(&xb[i], &fresh[i], sizeof(float)) != 0) first = i;
    VF_CHECK_MSG(first < 0, "second clip differs from a fresh decoder's at element %" PRId64 " of %" PRId64, first,
                 n);
    vf_vae_dec_free(d);
    free(za), free(zb), free(fresh), free(xa), free(xb);
    vf_vae_free(m);
}

VF_TEST(causal)
{
    vf_vae *m = tiny_decoder(3);
    const vf_vae_config *c = vf_vae_cfg(m);
    int64_t Tl = 3, T = vf_vae_decoded_frames(c, Tl), plane = (int64_t)h_ * w_ * 64;
    float *z = make_latent(1, c->z_dim, Tl, 11), *xa, *xb;
    decode(m, 1, Tl, 1, z, &xa);
    for (int k = 0; k < c->z_dim; k++)
        for (int i = 0; i < h_ * w_; i++) z[((int64_t)k * Tl + Tl - 1) * h_ * w_ + i] *= -0.5f;
    decode(m, 1, Tl, 1, z, &xb);
    double early = 0, last = 0;
    for (int64_t ch = 0; ch < 3; ch++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < plane; i++) {
                int64_t k = (ch * T + t) * plane + i;
                double d = fabs(xa[k] - xb[k]);
                if (t < T - 4) early = fmax(early, d);
                else last = fmax(last, d);
            }
    VF_CHECK_MSG(early == 0, "earlier frames changed by %g", early);
    VF_CHECK_MSG(last > 1e-4, "the last 4 frames did not change (%g)", last);
    free(z), free(xa), free(xb);
    vf_vae_free(m);
}

VF_TEST(micro_batch_equals_single)
{
    vf_vae *m = tiny_decoder(5);
    int z = vf_vae_cfg(m)->z_dim;
    int64_t Tl = 3, n1 = frames_numel(m, 1, Tl);
    float *lat = make_latent(2, z, Tl, 21), *x2, *xa, *xb;
    decode(m, 2, Tl, 2, lat, &x2);
    decode(m, 1, Tl, 2, lat, &xa);
    decode(m, 1, Tl, 1, lat + (int64_t)z * Tl * h_ * w_, &xb);
    VF_CHECK(memcmp(x2, xa, sizeof(float) * (size_t)n1) == 0);
    VF_CHECK(memcmp(x2 + n1, xb, sizeof(float) * (size_t)n1) == 0);
    VF_CHECK(memcmp(xa, xb, sizeof(float) * (size_t)n1) != 0); /* two different clips */
    free(lat), free(x2), free(xa), free(xb);
    vf_vae_free(m);
}

/* Peak memory of decoding one clip (model + decoder, all through vf_alloc into a fresh
 * account) of Tl latent frames one at a time. */
static int64_t decode_peak(int64_t Tl, int64_t *declared)
{
    char name[64];
    snprintf(name, sizeof name, "test-vae-dec-T%" PRId64, Tl);
    vf_account *a = vf_account_new(name);
    vf_vae_config c;
    vf_vae_config_tiny(&c);
    float *z = make_latent(1, c.z_dim, Tl, 4), *x; /* arrive on / leave by edges: not counted */
    vf_account *prev = vf_account_set_current(a);
    vf_vae *m = tiny_decoder(9);
    decode(m, 1, Tl, 1, z, &x);
    vf_vae_free(m);
    vf_account_set_current(prev);
    vf_vae_mem_info mi;
    vf_status st = {0};
    VF_CHECK(vf_vae_dec_mem(&c, 4, 1, 1, h_, w_, &mi, &st) == 0);
    *declared = mi.weights + mi.caches + mi.workspace + mi.host;
    free(z), free(x);
    VF_CHECK(vf_account_live(a) == 0);
    return vf_account_peak(a);
}

VF_TEST(memory_set_by_the_chunk)
{
    int64_t d2, d8;
    int64_t p2 = decode_peak(2, &d2), p8 = decode_peak(8, &d8);
    fprintf(stderr,
            "   peak account bytes, chunk 1, latent 4x4 (32x32 frames): 2 latent frames %" PRId64
            ", 8 latent frames %" PRId64 "; declared %" PRId64 "\n",
            p2, p8, d2);
    VF_CHECK(p2 > 0);
    VF_CHECK_MSG(p2 == p8, "peak %" PRId64 " for 2 latent frames, %" PRId64 " for 8", p2, p8);
    VF_CHECK(d2 == d8);
    VF_CHECK_MSG(p2 <= d2, "measured peak %" PRId64 " above declared %" PRId64, p2, d2);
}

/* What vf_vae_dec_mem declares is what the decoder allocates. */
VF_TEST(declared_equals_allocated)
{
    vf_vae *m = tiny_decoder(1);
    const int batches[] = {1, 3}, chunks[] = {1, 2, 5};
    for (int bi = 0; bi < 2; bi++)
        for (int ci = 0; ci < 3; ci++) {
            vf_vae_dec *d = NULL;
            vf_status st = {0};
            vf_vae_mem_info mi;
            VF_CHECK(vf_vae_dec_mem(vf_vae_cfg(m), 4, batches[bi], chunks[ci], 8, 6, &mi, &st) ==
                     0);
            VF_CHECK(vf_vae_dec_new(m, batches[bi], chunks[ci], 8, 6, &d, &st) == 0);
            VF_CHECK_EQ_INT(vf_vae_dec_bytes(d), mi.caches + mi.workspace);
            VF_CHECK_EQ_INT(mi.weights, vf_vae_numel(m) * 4);
            vf_vae_dec_free(d);
        }
    vf_vae_free(m);
}

VF_TEST(seeded_init_hash_save_load_and_misuse)
{
    vf_vae *a = tiny_decoder(42), *b = NULL, *enc = NULL;
    vf_vae_config c = *vf_vae_cfg(a);
    vf_status st = {0};
    VF_CHECK(vf_vae_new(&c, vf_backend_cpu(), &enc, &st) == 0);
    VF_CHECK(vf_vae_init_seeded(enc, 42, &st) == 0);
    VF_CHECK(strcmp(vf_vae_hash(a), vf_vae_hash(enc)) != 0);
    char path[] = "/tmp/test_vae_dec_XXXXXX";
    int fd = mkstemp(path);
    VF_CHECK(fd >= 0);
    close(fd);
    VF_CHECK_MSG(vf_vae_save(a, path, &st) == 0, "%s", st.msg);
    VF_CHECK(vf_vae_dec_model_new(&c, vf_backend_cpu(), &b, &st) == 0);
    VF_CHECK_MSG(vf_vae_load(b, path, &st) == 0, "%s", st.msg);
    VF_CHECK_STR(vf_vae_hash(b), vf_vae_hash(a));
    VF_CHECK(memcmp(vf_vae_weights(a), vf_vae_weights(b), (size_t)vf_vae_numel(a) * 4) == 0);
    /* the encoder finds none of its tensors in a decoder file */
    vf_status_clear(&st);
    VF_CHECK(vf_vae_load(enc, path, &st) < 0);
    VF_CHECK_MSG(strstr(st.msg, "encoder.conv1.weight") != NULL, "%s", st.msg);
    /* an encoder model is no decoder */
    vf_vae_dec *d = NULL;
    vf_status_clear(&st);
    VF_CHECK(vf_vae_dec_new(enc, 1, 1, h_, w_, &d, &st) == VF_EINVAL);
    /* decoding past the clip, and ending early, are refused */
    float *z = make_latent(1, c.z_dim, 2, 1),
          *x = calloc((size_t)frames_numel(a, 1, 2), sizeof(float));
    vf_status_clear(&st);
    VF_CHECK(vf_vae_dec_new(a, 1, 2, h_, w_, &d, &st) == 0);
    VF_CHECK(vf_vae_decode_begin(d, 1, 2, &st) == 0);
    VF_CHECK(vf_vae_decode_chunk(d, 1, z, x, &st) == 1);
    VF_CHECK(vf_vae_decode_chunk(d, 2, z, x, &st) == VF_EINVAL);
    VF_CHECK(vf_vae_decode_end(d, &st) == VF_EINVAL);
    /* odd widths cannot be halved by the upsamples */
    vf_vae_config odd = c;
    odd.dim = 7;
    odd.dim_mult[1] = odd.dim_mult[2] = odd.dim_mult[3] = 1;
    vf_vae *o = NULL;
    vf_status_clear(&st);
    VF_CHECK(vf_vae_dec_model_new(&odd, vf_backend_cpu(), &o, &st) == VF_EINVAL);
    VF_CHECK_MSG(strstr(st.msg, "even") != NULL, "%s", st.msg);
    unlink(path);
    free(z), free(x);
    vf_vae_dec_free(d);
    vf_vae_free(a), vf_vae_free(b), vf_vae_free(enc);
}

VF_TEST(denormalise_inverts_normalise)
{
    const float mean[2] = {0.25f, -1.5f}, std[2] = {2.0f, 0.5f};
    float lat[6] = {1, 2, 3, -1, 0, 4};
    vf_vae_denormalise(lat, 2, 3, mean, std);
    VF_CHECK(lat[0] == 2.25f && lat[2] == 6.25f && lat[3] == -2.0f && lat[5] == 0.5f);
    vf_vae_normalise(lat, 2, 3, mean, std);
    VF_CHECK(lat[0] == 1 && lat[1] == 2 && lat[4] == 0 && lat[5] == 4);
}

VF_TEST(wan_sizes)
{
    vf_vae_config c;
    vf_vae_config_wan(&c);
    /* Wan-2.1's decoder + conv2: 73.3M parameters (diffusers' AutoencoderKLWan:
     * decoder.* and post_quant_conv.*) */
    VF_CHECK_EQ_INT(vf_vae_dec_count_params(&c, NULL), 73295603);
    VF_CHECK_EQ_INT(vf_vae_decoded_frames(&c, 21), 81);
    VF_CHECK_EQ_INT(vf_vae_decoded_frames(&c, 1), 1);
    VF_CHECK_EQ_INT(vf_vae_dec_temporal(&c, 0), 1);
    VF_CHECK_EQ_INT(vf_vae_dec_temporal(&c, 1), 1);
    VF_CHECK_EQ_INT(vf_vae_dec_temporal(&c, 2), 0);
    char d[160];
    vf_vae_diffusers_name(&c, "decoder.upsamples.7.time_conv.weight", d, sizeof d);
    VF_CHECK_STR(d, "decoder.up_blocks.1.upsamplers.0.time_conv.weight");
    vf_vae_diffusers_name(&c, "decoder.upsamples.4.shortcut.bias", d, sizeof d);
    VF_CHECK_STR(d, "decoder.up_blocks.1.resnets.0.conv_shortcut.bias");
    vf_vae_diffusers_name(&c, "decoder.upsamples.14.residual.6.weight", d, sizeof d);
    VF_CHECK_STR(d, "decoder.up_blocks.3.resnets.2.conv2.weight");
    vf_vae_diffusers_name(&c, "conv2.bias", d, sizeof d);
    VF_CHECK_STR(d, "post_quant_conv.bias");
}

int main(void) { return vf_test_main(); }
