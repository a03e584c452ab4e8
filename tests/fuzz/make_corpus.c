/* make_corpus.c — writes the seed corpora of fuzz_item_decode and fuzz_split_record (run
 * once; the output is committed under corpus/). Not built by CMake:
 *   cc -std=c11 -D_GNU_SOURCE -I. tests/fuzz/make_corpus.c build/libvf_runtime.a \
 *      -lzmq -lpthread -lm -o /tmp/make_corpus && /tmp/make_corpus tests/fuzz/corpus/fuzz_item_decode \
 *      tests/fuzz/corpus/fuzz_split_record
 * Valid records of several shapes, then damaged ones (truncated, bit-flipped, wrong
 * version, wrong CRC); split records with their frames (small: split at 16 bytes). */
#include "runtime/core/item.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_dir;

static void put(const char *name, const unsigned char *b, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static vf_tensor *tensor(vf_dtype dt, int nd, const int64_t *shape)
{
    vf_status st = {0};
    vf_tensor *t = vf_tensor_new(dt, nd, shape, &st);
    for (size_t i = 0; i < vf_tensor_nbytes(t); i++) ((unsigned char *)t->data)[i] = (unsigned char)(i * 7 + 1);
    return t;
}

static unsigned char *enc(vf_item *it, size_t *n)
{
    vf_status st = {0};
    void *b = NULL;
    if (vf_item_encode_alloc(it, &b, n, &st) != 0) {
        fprintf(stderr, "%s\n", st.msg);
        exit(1);
    }
    vf_item_free(it);
    return b;
}

/* A split record of `it` at 16 bytes, then each frame as u32 length + bytes (the
 * harness's framing); short_last: the last frame one byte short. */
static void put_split(const char *name, vf_item *it, bool short_last)
{
    vf_status st = {0};
    void *rec = NULL;
    size_t len = 0;
    int nf = 0;
    if (vf_item_encode_split(it, 16, &rec, &len, &nf, &st) != 0) {
        fprintf(stderr, "%s\n", st.msg);
        exit(1);
    }
    unsigned char *b = malloc(len + 4 * (size_t)nf + vf_item_tensor_bytes(it));
    memcpy(b, rec, len);
    size_t n = len;
    for (int i = 0, k = 0; i < vf_item_ntensors(it); i++) {
        vf_tensor *t = vf_item_tensor_at(it, i, NULL);
        size_t fl = vf_tensor_nbytes(t);
        if (fl < 16) continue;
        if (short_last && ++k == nf) fl--;
        for (int j = 0; j < 4; j++) b[n + j] = (unsigned char)(fl >> (8 * j));
        memcpy(b + n + 4, t->data, fl);
        n += 4 + fl;
    }
    put(name, b, n);
    free(b);
    vf_free(rec);
    vf_item_free(it);
}

static void split_corpus(void)
{
    vf_status st = {0};
    vf_item *it = vf_item_new("clip.mp4#3", &st);
    int64_t s4[4] = {2, 3, 2, 3}, s2[2] = {4, 4}, s1[1] = {2};
    vf_item_put(it, "frames", tensor(VF_DTYPE_U8, 4, s4), &st); /* 36 bytes: a frame */
    vf_item_put(it, "ids", tensor(VF_DTYPE_I32, 1, s1), &st);   /* 8 bytes: inline */
    vf_item_put(it, "latent", tensor(VF_DTYPE_F32, 2, s2), &st); /* 64 bytes: a frame */
    vf_item_set_str(it, "path", "/data/clip.mp4", &st);
    vf_item_set_num(it, "fps", 24, &st);
    put_split("valid_split_clip", it, false);
    it = vf_item_new("one", &st);
    int64_t s3[3] = {2, 2, 5};
    vf_item_put(it, "x", tensor(VF_DTYPE_BF16, 3, s3), &st);
    put_split("valid_split_one", it, false);
    it = vf_item_new("short", &st);
    vf_item_put(it, "a", tensor(VF_DTYPE_F16, 2, s2), &st);
    vf_item_put(it, "b", tensor(VF_DTYPE_U8, 4, s4), &st);
    put_split("bad_split_short_frame", it, true);
}

int main(int argc, char **argv)
{
    vf_status st = {0};
    g_dir = argc > 1 ? argv[1] : ".";
    size_t n;
    unsigned char *b;

    b = enc(vf_item_new("", &st), &n);
    put("valid_empty", b, n);
    vf_free(b);

    vf_item *it = vf_item_new("clip.mp4#0", &st);
    int64_t s4[4] = {2, 3, 2, 3};
    vf_item_put(it, "frames", tensor(VF_DTYPE_U8, 4, s4), &st);
    vf_item_set_str(it, "path", "/data/clip.mp4", &st);
    vf_item_set_str(it, "caption", "a dog on a beach", &st);
    vf_item_set_num(it, "fps", 24, &st);
    vf_item_set_num(it, "clip", 0, &st);
    unsigned char *sample = enc(it, &n);
    size_t sample_n = n;
    put("valid_clip", sample, n);

    for (int dt = 0; dt < VF_DTYPE_COUNT; dt++) {
        int64_t sh[6] = {1, 2, 1, 2, 1, 2};
        it = vf_item_new("t", &st);
        vf_item_put(it, "x", tensor((vf_dtype)dt, dt + 1, sh), &st);
        vf_item_put(it, "scalar", tensor((vf_dtype)dt, 0, sh), &st);
        b = enc(it, &n);
        char name[64];
        snprintf(name, sizeof name, "valid_%s", vf_dtype_name((vf_dtype)dt));
        put(name, b, n);
        vf_free(b);
    }
    it = vf_item_new("six", &st);
    int64_t s6[6] = {1, 1, 2, 1, 3, 1}, s0[3] = {4, 0, 5};
    vf_item_put(it, "six", tensor(VF_DTYPE_F32, 6, s6), &st);
    vf_item_put(it, "zero", tensor(VF_DTYPE_BF16, 3, s0), &st);
    b = enc(it, &n);
    put("valid_ndim6_zero", b, n);
    vf_free(b);

    it = vf_item_new("many-meta", &st);
    for (int i = 0; i < 20; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%02d", i);
        if (i % 2) vf_item_set_num(it, k, i * 0.5, &st);
        else vf_item_set_str(it, k, "v", &st);
    }
    b = enc(it, &n);
    put("valid_many_meta", b, n);
    vf_free(b);

    /* damaged copies of valid_clip */
    put("bad_truncated_header", sample, 12);
    put("bad_truncated_half", sample, sample_n / 2);
    put("bad_truncated_crc", sample, sample_n - 2);
    b = malloc(sample_n);
    memcpy(b, sample, sample_n);
    b[40] ^= 0x10;
    put("bad_bitflip", b, sample_n);
    memcpy(b, sample, sample_n);
    b[4] = 9;
    put("bad_version", b, sample_n);
    memcpy(b, sample, sample_n);
    b[sample_n - 1] ^= 0xff;
    put("bad_crc", b, sample_n);
    free(b);
    vf_free(sample);
    if (argc > 2) {
        g_dir = argv[2];
        split_corpus();
    }
    return 0;
}
