/* train_tool.c — helpers for the training tests and benchmark.
 *
 *   train_tool mkcache PATH N Z T H W [SEED [DUMP]]
 *       writes an LMDB latent cache (keyed by id) of N latents (Z, T, H, W) with
 *       learnable structure: sample i belongs to class c = i mod 4, named in its caption;
 *       its latent is a class-specific travelling plane wave over (t, h, w) per channel,
 *       plus 10% per-sample noise. A DiT that reads the caption can predict most of it,
 *       so the rectified-flow loss falls well below its starting value. DUMP (optional)
 *       receives, per sample in id order, its 32-char cache key, its caption (96 bytes,
 *       NUL padded) and its latent (f32): what a reference trainer needs to rebuild the
 *       batches without decoding the cache.
 *   train_tool mkbucket PATH N Z W H F B FIRST [SEED]
 *       the same latents for samples FIRST … FIRST+N-1, of bucket "WxHxF": metadata
 *       "bucket" and "bucket_batch" B, latent (Z, (F-1)/4+1, H/8, W/8); run once per
 *       bucket into one cache to make a bucketed one
 *   train_tool ckpt-find DIR
 *       prints "STEP PATH" of the newest complete checkpoint (formats/ckpt.h rules) and
 *       the damaged ones it skipped on stderr; exit 1 when there is none.
 */
#include "formats/cache_format.h"
#include "formats/ckpt.h"
#include "runtime/philox.h"
#include "stages/latent_cache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_bucket; /* mkbucket: the bucket name, its batch and first sample */
static int g_bucket_batch, g_first;

static int mkcache(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: train_tool mkcache PATH N Z T H W [SEED]\n");
        return 2;
    }
    const char *path = argv[2];
    int N = atoi(argv[3]), Z = atoi(argv[4]), T = atoi(argv[5]), H = atoi(argv[6]), W = atoi(argv[7]);
    uint64_t seed = argc > 8 ? strtoull(argv[8], NULL, 10) : 1;
    FILE *dump = argc > 9 ? fopen(argv[9], "wb") : NULL;
    if (argc > 9 && !dump) {
        fprintf(stderr, "train_tool mkcache: cannot write %s\n", argv[9]);
        return 1;
    }
    static const char *const names[4] = {"a red square drifting right", "green stripes rolling down",
                                         "a blue ring pulsing", "orange noise flickering"};
    vf_status st = {0};
    vf_latent_writer *w = NULL;
    vf_latent_writer_opts o = {path, 64, 1 << 24, VF_CACHE_KEY_ID};
    if (vf_latent_writer_open(&o, &w, &st)) goto fail;
    int64_t shape[4] = {Z, T, H, W}, n = (int64_t)Z * T * H * W;
    float *noise = malloc(sizeof(float) * (size_t)n);
    for (int i = g_first; i < g_first + N; i++) {
        int c = i % 4;
        char id[32], cap[96];
        snprintf(id, sizeof id, "sample-%05d", i);
        snprintf(cap, sizeof cap, "class %d: %s", c, names[c]);
        vf_tensor *t = vf_tensor_new(VF_DTYPE_F32, 4, shape, &st);
        vf_item *it = vf_item_new(id, &st);
        if (!t || !it) goto fail;
        vf_rng r;
        vf_rng_init(&r, seed, 0, (uint64_t)i, VF_RNG_TEST);
        vf_rng_normal(&r, 0, n, noise);
        float *x = t->data;
        double fh = 1 + c % 2, fw = 1 + c / 2, ph = 0.7 * c;
        for (int z = 0; z < Z; z++)
            for (int tt = 0; tt < T; tt++)
                for (int h = 0; h < H; h++)
                    for (int ww = 0; ww < W; ww++) {
                        int64_t k = (((int64_t)z * T + tt) * H + h) * W + ww;
                        double a = 2 * M_PI * (fh * h / H + fw * ww / W) + ph + 0.5 * tt + 1.3 * z;
                        x[k] = (float)((z % 2 ? cos(a) : sin(a)) + 0.1 * noise[k]);
                    }
        if (dump) {
            char key[VF_CACHE_KEY_LEN + 1], capbuf[96] = {0};
            vf_cache_key_of_id(id, key);
            snprintf(capbuf, sizeof capbuf, "%s", cap);
            fwrite(key, 1, VF_CACHE_KEY_LEN, dump);
            fwrite(capbuf, 1, sizeof capbuf, dump);
            fwrite(x, sizeof(float), (size_t)n, dump);
        }
        bool skipped;
        if (g_bucket && (vf_item_set_str(it, "bucket", g_bucket, &st) ||
                         vf_item_set_num(it, "bucket_batch", g_bucket_batch, &st)))
            goto fail;
        if (vf_item_put(it, "latent", t, &st) || vf_item_set_str(it, "caption", cap, &st) ||
            vf_latent_writer_add(w, it, &skipped, &st))
            goto fail;
    }
    free(noise);
    if (dump && fclose(dump) != 0) {
        fprintf(stderr, "train_tool mkcache: writing the dump failed\n");
        return 1;
    }
    if (vf_latent_writer_flush(w, &st)) goto fail;
    vf_latent_writer_close(w);
    printf("wrote %d latents (%d,%d,%d,%d) to %s\n", N, Z, T, H, W, path);
    return 0;
fail:
    fprintf(stderr, "train_tool mkcache: %s\n", st.msg);
    vf_latent_writer_close(w);
    return 1;
}

static void warn(void *user, const char *msg) { fprintf(stderr, "%s\n", msg); }

static int ckpt_find(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: train_tool ckpt-find DIR\n");
        return 2;
    }
    vf_ckpt ck;
    vf_status st = {0};
    if (vf_ckpt_find(argv[2], warn, NULL, &ck, &st)) {
        fprintf(stderr, "%s\n", st.msg);
        return 1;
    }
    printf("%lld %s\n", (long long)ck.step, ck.path);
    vf_ckpt_fini(&ck);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "mkcache") == 0) return mkcache(argc, argv);
    if (argc >= 10 && strcmp(argv[1], "mkbucket") == 0) { /* PATH N Z W H F B FIRST [SEED] */
        int w = atoi(argv[5]), h = atoi(argv[6]), f = atoi(argv[7]);
        char T[16], H[16], W[16];
        snprintf(T, sizeof T, "%d", (f - 1) / 4 + 1);
        snprintf(H, sizeof H, "%d", h / 8);
        snprintf(W, sizeof W, "%d", w / 8);
        static char name[64];
        snprintf(name, sizeof name, "%dx%dx%d", w, h, f);
        g_bucket = name, g_bucket_batch = atoi(argv[8]), g_first = atoi(argv[9]);
        char *av[] = {argv[0], "mkcache", argv[2], argv[3], argv[4], T, H, W, argc > 10 ? argv[10] : "1", NULL};
        return mkcache(9, av);
    }
    if (argc >= 2 && strcmp(argv[1], "ckpt-find") == 0) return ckpt_find(argc, argv);
    fprintf(stderr, "usage: train_tool mkcache|ckpt-find ...\n");
    return 2;
}
