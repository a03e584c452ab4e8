/* test_vae.c — the causal VAE encoder (models/vae.h) on the CPU backend: chunked ==
 * whole, micro-batch == single clips, clip-length checks, memory independent of the
 * clip length, seeded init / hash / save-load round trip, and the vae_encode stage's
 * ports and memory hooks.
 *
 * Parity with an independent PyTorch implementation is tests/reference/test_vae_parity.py.
 */
#include "tests/vf_test.h"

#include "models/vae.h"
#include "runtime/core/alloc.h"

#include <inttypes.h>
#include <unistd.h>

#define H_ 32
#define W_ 32

/* Deterministic input in [-1, 1]: (B, 3, T, H, W). */
static float *make_clip(int B, int64_t T, uint32_t seed)
{
    int64_t n = (int64_t)B * 3 * T * H_ * W_;
    float *x = malloc(sizeof(float) * (size_t)n);
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
    }
    return x;
}

static vf_vae *tiny_model(uint64_t seed)
{
    vf_vae_config c;
    vf_vae_config_tiny(&c);
    vf_vae *m = NULL;
    vf_status st = {0};
    int rc = vf_vae_new(&c, vf_backend_cpu(), &m, &st);
    VF_CHECK_MSG(rc == 0, "%s", st.msg);
    if (rc == 0) {
        rc = vf_vae_init_seeded(m, seed, &st);
        VF_CHECK_MSG(rc == 0, "%s", st.msg);
    }
    return m;
}

static int64_t latent_numel(const vf_vae *m, int B, int64_t T)
{
    const vf_vae_config *c = vf_vae_cfg(m);
    int sf = vf_vae_space_factor(c);
    return (int64_t)B * c->z_dim * vf_vae_latent_frames(c, T) * (H_ / sf) * (W_ / sf);
}

/* Encodes x (B clips of T frames) in chunks of `chunk`; caller frees the results. */
static int encode(vf_vae *m, int B, int64_t T, int chunk, const float *x, float **mean,
                  float **logvar)
{
    vf_status st = {0};
    vf_vae_enc *e = NULL;
    int64_t n = latent_numel(m, B, T);
    *mean = calloc((size_t)n, sizeof(float));
    *logvar = calloc((size_t)n, sizeof(float));
    int rc = vf_vae_enc_new(m, B, chunk, H_, W_, &e, &st);
    if (rc == 0) rc = vf_vae_encode_f32(e, B, T, x, *mean, *logvar, &st);
    VF_CHECK_MSG(rc >= 0, "B=%d T=%" PRId64 " chunk=%d: %s", B, T, chunk, st.msg);
    vf_vae_enc_free(e);
    return rc;
}

static double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= d)) d = x; /* NaN propagates */
    }
    return d;
}

VF_TEST(chunked_equals_whole)
{
    vf_vae *m = tiny_model(7);
    const int64_t Ts[] = {5, 9, 17};
    const int chunks[] = {1, 4, 5};
    for (int ti = 0; ti < 3; ti++) {
        int64_t T = Ts[ti], n = latent_numel(m, 1, T);
        float *x = make_clip(1, T, (uint32_t)T);
        float *mw, *lw;
        encode(m, 1, T, (int)T, x, &mw, &lw);
        double amax = 0;
        for (int64_t i = 0; i < n; i++) amax = fmax(amax, fabs(mw[i]));
        VF_CHECK_MSG(amax > 1e-3, "latent of T=%" PRId64 " is ~0 (max %g)", T, amax);
        for (int ci = 0; ci < 3; ci++) {
            float *mc, *lc;
            encode(m, 1, T, chunks[ci], x, &mc, &lc);
            double dm = max_abs_diff(mc, mw, n), dl = max_abs_diff(lc, lw, n);
            fprintf(stderr, "   T=%2" PRId64 " chunk=%d: max |chunked - whole| mean %.3g logvar %.3g\n",
                    T, chunks[ci], dm, dl);
            VF_CHECK_MSG(dm <= 1e-5 && dl <= 1e-5, "T=%" PRId64 " chunk=%d: %g %g", T,
                         chunks[ci], dm, dl);
            free(mc);
            free(lc);
        }
        free(x);
        free(mw);
        free(lw);
    }
    vf_vae_free(m);
}

/* Changing the last frame must not change latent frames before the last one: the
 * encoder is causal. */
VF_TEST(causal)
{
    vf_vae *m = tiny_model(3);
    int64_t T = 9, n = latent_numel(m, 1, T), per_t = n / vf_vae_latent_frames(vf_vae_cfg(m), T);
    float *x = make_clip(1, T, 11), *ma, *la, *mb, *lb;
    encode(m, 1, T, 4, x, &ma, &la);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < H_ * W_; i++) x[((int64_t)c * T + T - 1) * H_ * W_ + i] *= -0.5f;
    encode(m, 1, T, 4, x, &mb, &lb);
    /* latent (z, T', h, w): frames 0 .. T'-2 of each channel must be identical */
    int64_t Tl = vf_vae_latent_frames(vf_vae_cfg(m), T), z = vf_vae_cfg(m)->z_dim;
    double early = 0, last = 0;
    for (int64_t c = 0; c < z; c++)
        for (int64_t t = 0; t < Tl; t++)
            for (int64_t i = 0; i < per_t / z; i++) {
                int64_t k = (c * Tl + t) * (per_t / z) + i;
                double d = fabs(ma[k] - mb[k]);
                if (t < Tl - 1) early = fmax(early, d);
                else last = fmax(last, d);
            }
    VF_CHECK_MSG(early == 0, "earlier latent frames changed by %g", early);
    VF_CHECK_MSG(last > 1e-4, "the last latent frame did not change (%g)", last);
    free(x), free(ma), free(la), free(mb), free(lb);
    vf_vae_free(m);
}

VF_TEST(micro_batch_equals_single)
{
    vf_vae *m = tiny_model(5);
    int64_t T = 9, n1 = latent_numel(m, 1, T);
    float *x = make_clip(2, T, 21);
    float *m2, *l2, *ma, *la, *mb, *lb;
    encode(m, 2, T, 4, x, &m2, &l2);
    encode(m, 1, T, 4, x, &ma, &la);
    encode(m, 1, T, 3, x + 3 * T * H_ * W_, &mb, &lb);
    double d = fmax(max_abs_diff(m2, ma, n1), max_abs_diff(m2 + n1, mb, n1));
    d = fmax(d, fmax(max_abs_diff(l2, la, n1), max_abs_diff(l2 + n1, lb, n1)));
    fprintf(stderr, "   max |batch of 2 - single| %.3g\n", d);
    VF_CHECK_MSG(d <= 1e-5, "micro-batch differs from single encodes by %g", d);
    VF_CHECK(max_abs_diff(ma, mb, n1) > 1e-3); /* two different clips */
    free(x), free(m2), free(l2), free(ma), free(la), free(mb), free(lb);
    vf_vae_free(m);
}

VF_TEST(bad_clip_length_refused)
{
    vf_vae *m = tiny_model(1);
    vf_vae_enc *e = NULL;
    vf_status st = {0};
    VF_CHECK(vf_vae_enc_new(m, 1, 4, H_, W_, &e, &st) == 0);
    const int64_t bad[] = {0, 2, 4, 6, 8, 16};
    for (int i = 0; i < 6; i++) {
        vf_status_clear(&st);
        int rc = vf_vae_encode_begin(e, 1, bad[i], &st);
        VF_CHECK_MSG(rc == VF_EINVAL, "T=%" PRId64 " accepted", bad[i]);
        VF_CHECK_MSG(strstr(st.msg, "1 + 4") != NULL, "message: %s", st.msg);
    }
    vf_status_clear(&st);
    VF_CHECK(vf_vae_encode_begin(e, 1, 13, &st) == 0);
    /* feeding fewer frames than announced is refused at the end */
    float *x = make_clip(1, 13, 2);
    float *mean = calloc((size_t)latent_numel(m, 1, 13), sizeof(float));
    VF_CHECK(vf_vae_input_f32(e, 0, x, 0, 4, &st) == 0);
    VF_CHECK(vf_vae_encode_chunk(e, 4, mean, NULL, &st) >= 0);
    VF_CHECK(vf_vae_encode_end(e, &st) == VF_EINVAL);
    /* frame size not a multiple of 8 */
    vf_vae_enc *e2 = NULL;
    vf_status_clear(&st);
    VF_CHECK(vf_vae_enc_new(m, 1, 4, 36, 32, &e2, &st) == VF_EINVAL);
    VF_CHECK(strstr(st.msg, "36x32") != NULL);
    free(x), free(mean);
    vf_vae_enc_free(e);
    vf_vae_free(m);
}

/* Peak memory of encoding one clip (model + encoder, all through vf_alloc into a fresh
 * account) for 17 and 65 frames at the same chunk: within 1.2x. */
static int64_t encode_peak(int64_t T, int chunk, int64_t *declared)
{
    char name[64];
    snprintf(name, sizeof name, "test-vae-T%" PRId64, T);
    vf_account *a = vf_account_new(name);
    float *x = make_clip(1, T, 4); /* the clip itself arrives on an edge: not counted */
    vf_account *prev = vf_account_set_current(a);
    vf_vae *m = tiny_model(9);
    float *mean, *lv;
    encode(m, 1, T, chunk, x, &mean, &lv);
    vf_vae_free(m);
    vf_account_set_current(prev);
    vf_vae_mem_info mi;
    vf_status st = {0};
    vf_vae_config c;
    vf_vae_config_tiny(&c);
    VF_CHECK(vf_vae_mem(&c, 4, 1, chunk, H_, W_, &mi, &st) == 0);
    *declared = mi.weights + mi.caches + mi.workspace + mi.host;
    free(x), free(mean), free(lv);
    VF_CHECK(vf_account_live(a) == 0);
    return vf_account_peak(a);
}

VF_TEST(memory_independent_of_clip_length)
{
    int64_t d17, d65;
    int64_t p17 = encode_peak(17, 4, &d17), p65 = encode_peak(65, 4, &d65);
    fprintf(stderr, "   peak account bytes, chunk 4, 32x32: 17 frames %" PRId64 ", 65 frames %" PRId64
                    " (ratio %.3f); declared %" PRId64 "\n",
            p17, p65, (double)p65 / (double)p17, d17);
    VF_CHECK(p17 > 0);
    VF_CHECK_MSG((double)p65 <= 1.2 * (double)p17, "65 frames peak %" PRId64 " vs 17 frames %" PRId64,
                 p65, p17);
    VF_CHECK(d17 == d65);
    VF_CHECK_MSG(p17 <= d17, "measured peak %" PRId64 " above declared %" PRId64, p17, d17);
}

/* What vf_vae_mem declares is what the encoder allocates. */
VF_TEST(declared_equals_allocated)
{
    vf_vae *m = tiny_model(1);
    const int batches[] = {1, 3}, chunks[] = {1, 4, 7};
    for (int bi = 0; bi < 2; bi++)
        for (int ci = 0; ci < 3; ci++) {
            vf_vae_enc *e = NULL;
            vf_status st = {0};
            vf_vae_mem_info mi;
            VF_CHECK(vf_vae_mem(vf_vae_cfg(m), 4, batches[bi], chunks[ci], 64, 48, &mi, &st) == 0);
            VF_CHECK(vf_vae_enc_new(m, batches[bi], chunks[ci], 64, 48, &e, &st) == 0);
            int64_t conv = (int64_t)sizeof(float) * 3 * chunks[ci] * 64 * 48;
            VF_CHECK_EQ_INT(vf_vae_enc_bytes(e), mi.caches + mi.workspace + conv);
            VF_CHECK_EQ_INT(mi.weights, vf_vae_numel(m) * 4);
            vf_vae_enc_free(e);
        }
    vf_vae_free(m);
}

VF_TEST(seeded_init_hash_and_save_load)
{
    vf_vae *a = tiny_model(42), *b = tiny_model(42), *c = tiny_model(43);
    VF_CHECK_EQ_INT(strlen(vf_vae_hash(a)), 32);
    VF_CHECK_STR(vf_vae_hash(a), vf_vae_hash(b));
    VF_CHECK(strcmp(vf_vae_hash(a), vf_vae_hash(c)) != 0);
    VF_CHECK(memcmp(vf_vae_weights(a), vf_vae_weights(b), (size_t)vf_vae_numel(a) * 4) == 0);
    /* another config with the same weights count would still hash differently */
    char path[] = "/tmp/test_vae_XXXXXX";
    int fd = mkstemp(path);
    VF_CHECK(fd >= 0);
    close(fd);
    vf_status st = {0};
    VF_CHECK_MSG(vf_vae_save(a, path, &st) == 0, "%s", st.msg);
    vf_vae *d = NULL;
    VF_CHECK(vf_vae_new(vf_vae_cfg(a), vf_backend_cpu(), &d, &st) == 0);
    VF_CHECK_MSG(vf_vae_load(d, path, &st) == 0, "%s", st.msg);
    VF_CHECK_STR(vf_vae_hash(d), vf_vae_hash(a));
    VF_CHECK(memcmp(vf_vae_weights(a), vf_vae_weights(d), (size_t)vf_vae_numel(a) * 4) == 0);
    /* a model of another shape refuses the file, naming a tensor */
    vf_vae_config other = *vf_vae_cfg(a);
    other.z_dim = 8;
    vf_vae *e = NULL;
    VF_CHECK(vf_vae_new(&other, vf_backend_cpu(), &e, &st) == 0);
    vf_status_clear(&st);
    VF_CHECK(vf_vae_load(e, path, &st) < 0);
    VF_CHECK_MSG(strstr(st.msg, "encoder.head.2.weight") != NULL, "%s", st.msg);
    unlink(path);
    vf_vae_free(a), vf_vae_free(b), vf_vae_free(c), vf_vae_free(d), vf_vae_free(e);
}

VF_TEST(presets_and_config_check)
{
    vf_vae_config c;
    vf_vae_config_wan(&c);
    VF_CHECK_EQ_INT(vf_vae_time_factor(&c), 4);
    VF_CHECK_EQ_INT(vf_vae_space_factor(&c), 8);
    VF_CHECK_EQ_INT(vf_vae_latent_frames(&c, 17), 5);
    VF_CHECK_EQ_INT(vf_vae_latent_frames(&c, 81), 21);
    VF_CHECK_EQ_INT(vf_vae_latent_frames(&c, 16), -1);
    /* Wan-2.1's encoder (+ conv1) holds 53.6M parameters */
    VF_CHECK_EQ_INT(vf_vae_count_params(&c, NULL), 53596928);
    vf_status st = {0};
    VF_CHECK(vf_vae_config_check(&c, &st) == 0);
    c.temporal_downsample[1] = 2;
    VF_CHECK(vf_vae_config_check(&c, &st) == VF_EINVAL);
    VF_CHECK(strstr(st.msg, "temporal_downsample[1]") != NULL);
}

int main(void) { return vf_test_main(); }
