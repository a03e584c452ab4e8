/* test_codec_split.c — split records, the ZeroMQ transport's wire form of the item codec
 * (runtime/core/item.c, item.h): large tensors leave the record as frames of their own.
 *
 * The layout is checked against the ordinary record, rebuilt by hand: putting each
 * frame's payload back where an inline tensor's goes, clearing the flag and the frame
 * locations and recomputing the CRC must give vf_item_encode's bytes exactly. Then:
 * items without large tensors encode to ordinary records; decoding aliases each frame
 * (no copy) and releases every buffer once, when its last tensor goes; a frame that is
 * not aligned for its dtype is copied and released at once; the ordinary decoders refuse
 * split records; and wrong frame counts or lengths, frame tensors in an ordinary record
 * and a split flag without frames are refused with nothing released.
 */
#include "runtime/core/item.h"
#include "tests/vf_test.h"

#include <stdint.h>
#include <stdlib.h>

#define MIN_FRAME ((size_t)64 * 1024)

static vf_tensor *pattern(vf_dtype dt, int ndim, const int64_t *shape, unsigned seed)
{
    vf_status st = {0};
    vf_tensor *t = vf_tensor_new(dt, ndim, shape, &st);
    VF_CHECK(t != NULL);
    unsigned char *p = t->data;
    for (size_t i = 0; i < vf_tensor_nbytes(t); i++) p[i] = (unsigned char)(i * 7 + seed + (i >> 9));
    return t;
}

static bool tensors_equal(const vf_tensor *a, const vf_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return vf_tensor_nbytes(a) == vf_tensor_nbytes(b) && memcmp(a->data, b->data, vf_tensor_nbytes(a)) == 0;
}

static bool items_equal(const vf_item *a, const vf_item *b)
{
    if (strcmp(vf_item_id(a), vf_item_id(b)) != 0) return false;
    if (vf_item_ntensors(a) != vf_item_ntensors(b) || vf_item_nmeta(a) != vf_item_nmeta(b)) return false;
    for (int i = 0; i < vf_item_ntensors(a); i++) {
        const char *na, *nb;
        vf_tensor *ta = vf_item_tensor_at(a, i, &na), *tb = vf_item_tensor_at(b, i, &nb);
        if (strcmp(na, nb) != 0 || !tensors_equal(ta, tb)) return false;
    }
    for (int i = 0; i < vf_item_nmeta(a); i++) {
        const char *ka, *kb, *sa, *sb;
        double da, db;
        bool ia, ib;
        vf_item_meta_at(a, i, &ka, &sa, &da, &ia);
        vf_item_meta_at(b, i, &kb, &sb, &db, &ib);
        if (strcmp(ka, kb) != 0 || ia != ib) return false;
        if (ia ? memcmp(&da, &db, 8) != 0 : strcmp(sa, sb) != 0) return false;
    }
    return true;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void fix_crc(unsigned char *b, size_t len) { put_le(b + len - 4, vf_crc32c(0, b, len - 4), 4); }

/* Counts releases of the buffers handed to the decoder. */
static int released[16];
static void count_release(void *data, void *hint)
{
    (void)data;
    released[(intptr_t)hint]++;
}

static void *encode_split(const vf_item *it, size_t *len, int *nframes)
{
    vf_status st = {0};
    void *buf = NULL;
    VF_CHECK_EQ_INT(vf_item_encode_split(it, MIN_FRAME, &buf, len, nframes, &st), 0);
    VF_CHECK_EQ_INT(*len, vf_item_split_size(it, MIN_FRAME));
    return buf;
}

VF_TEST(small_items_are_ordinary_records)
{
    vf_status st = {0};
    vf_item *it = vf_item_new("small", &st);
    int64_t s[2] = {4, 1000}; /* 16000 bytes of f32 */
    vf_item_put(it, "x", pattern(VF_DTYPE_F32, 2, s, 1), &st);
    vf_item_set_num(it, "n", 3, &st);
    size_t len, olen;
    int nf = -1;
    unsigned char *b = encode_split(it, &len, &nf);
    VF_CHECK_EQ_INT(nf, 0);
    olen = vf_item_encoded_size(it);
    unsigned char *o = malloc(olen);
    VF_CHECK_EQ_INT(vf_item_encode(it, o, olen, &olen, &st), 0);
    VF_CHECK(len == olen && memcmp(b, o, len) == 0);
    vf_item *back = NULL;
    memset(released, 0, sizeof released);
    VF_CHECK_EQ_INT(vf_item_decode_split(b, len, count_release, (void *)0, NULL, 0, &back, &st), 0);
    VF_CHECK(back && items_equal(it, back));
    VF_CHECK_EQ_INT(released[0], 0); /* "x" aliases the record */
    vf_item_free(back);
    VF_CHECK_EQ_INT(released[0], 1);
    free(o);
    vf_free(b);
    vf_item_free(it);
}

/* id "", no metadata, "s" u8[100] then "b" u8[MIN_FRAME]:
 *   16 fixed | id len @16 | nmeta @20 | ntensors @24 | "s": name len @28, name @32,
 *   dtype @33 ndim @34 loc @35 pad @36 dims @37 loc len @45 | "b": name len @49,
 *   name @53, dtype @54 ndim @55 loc @56 pad @57 dims @58 loc len @66 | pad to 128;
 *   "s" payload @128 (padded to 128); then the CRC (split) or "b"'s payload (ordinary). */
VF_TEST(split_layout_rebuilds_the_ordinary_record)
{
    vf_status st = {0};
    vf_item *it = vf_item_new("", &st);
    int64_t s1[1] = {100}, s2[1] = {(int64_t)MIN_FRAME};
    vf_item_put(it, "s", pattern(VF_DTYPE_U8, 1, s1, 2), &st);
    vf_item_put(it, "b", pattern(VF_DTYPE_U8, 1, s2, 3), &st);
    size_t len;
    int nf = 0;
    unsigned char *b = encode_split(it, &len, &nf);
    VF_CHECK_EQ_INT(nf, 1);
    VF_CHECK_EQ_INT(len, 128 + 128 + 4);
    VF_CHECK_EQ_INT(b[6] | b[7] << 8, VF_CODEC_FLAG_SPLIT);
    VF_CHECK_EQ_INT(b[35], VF_LOC_INLINE);
    VF_CHECK_EQ_INT(b[56], VF_LOC_FRAME);
    VF_CHECK_EQ_INT(b[66] | b[67] << 8 | b[68] << 16 | b[69] << 24, 0); /* no location data */
    /* the ordinary record, by hand */
    size_t olen = 128 + 128 + MIN_FRAME + 4;
    unsigned char *r = calloc(1, olen);
    memcpy(r, b, 256);
    put_le(r + 6, 0, 2);
    put_le(r + 8, olen, 8);
    r[56] = VF_LOC_INLINE;
    memcpy(r + 256, vf_item_get(it, "b")->data, MIN_FRAME);
    fix_crc(r, olen);
    unsigned char *o = malloc(olen);
    size_t got = 0;
    VF_CHECK_EQ_INT(vf_item_encode(it, o, olen, &got, &st), 0);
    VF_CHECK_EQ_INT(got, olen);
    VF_CHECK_MSG(memcmp(r, o, olen) == 0, "the split record is not the ordinary one less the frame");
    free(r);
    free(o);
    vf_free(b);
    vf_item_free(it);
}

/* Metadata, an inline tensor between two frames, several dtypes and ranks. */
static vf_item *mixed(void)
{
    vf_status st = {0};
    vf_item *it = vf_item_new("clip-7", &st);
    int64_t a[3] = {3, 128, 64}, b[1] = {10}, c[2] = {MIN_FRAME, 1}, d[1] = {MIN_FRAME / 2 - 1};
    vf_item_put(it, "latent", pattern(VF_DTYPE_F32, 3, a, 4), &st); /* 96 KiB: a frame */
    vf_item_put(it, "ids", pattern(VF_DTYPE_I32, 1, b, 5), &st);     /* inline */
    vf_item_put(it, "frames", pattern(VF_DTYPE_U8, 2, c, 6), &st);   /* exactly MIN_FRAME: a frame */
    vf_item_put(it, "half", pattern(VF_DTYPE_BF16, 1, d, 7), &st);   /* 2 bytes short: inline */
    vf_item_set_str(it, "path", "/data/a.mp4", &st);
    vf_item_set_num(it, "fps", 24, &st);
    VF_CHECK_EQ_INT(st.code, 0);
    return it;
}

/* Copies of the item's frame payloads, as a receiver would get them (64-byte aligned
 * plus `skew`), with count_release hints 1.. */
static void frames_of(const vf_item *it, vf_frame *f, int *nf, size_t skew, void **hold)
{
    *nf = 0;
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        vf_tensor *t = vf_item_tensor_at(it, i, NULL);
        size_t n = vf_tensor_nbytes(t);
        if (n < MIN_FRAME) continue;
        unsigned char *m = aligned_alloc(64, (n + skew + 63) / 64 * 64);
        memcpy(m + skew, t->data, n);
        hold[*nf] = m;
        f[*nf] = (vf_frame){m + skew, n, count_release, (void *)(intptr_t)(*nf + 1)};
        (*nf)++;
    }
}

VF_TEST(frames_are_aliased_and_released_once)
{
    vf_status st = {0};
    vf_item *it = mixed();
    size_t len;
    int nf = 0, nfr = 0;
    unsigned char *b = encode_split(it, &len, &nf);
    VF_CHECK_EQ_INT(nf, 2);
    VF_CHECK_EQ_INT(len, vf_item_encoded_size(it) - (96 * 1024 + MIN_FRAME));
    vf_frame f[4];
    void *hold[4];
    frames_of(it, f, &nfr, 0, hold);
    VF_CHECK_EQ_INT(nfr, 2);
    memset(released, 0, sizeof released);
    vf_item *back = NULL;
    VF_CHECK_EQ_INT(vf_item_decode_split(b, len, count_release, (void *)0, f, nfr, &back, &st), 0);
    VF_CHECK_MSG(back && items_equal(it, back), "%s", st.msg);
    VF_CHECK(vf_item_get(back, "latent")->data == f[0].data); /* no copy */
    VF_CHECK(vf_item_get(back, "frames")->data == f[1].data);
    VF_CHECK(released[0] + released[1] + released[2] == 0);
    vf_tensor *keep = vf_tensor_ref(vf_item_get(back, "frames"));
    vf_item_free(back);
    VF_CHECK_EQ_INT(released[0], 1);
    VF_CHECK_EQ_INT(released[1], 1);
    VF_CHECK_EQ_INT(released[2], 0); /* still aliased by `keep` */
    vf_tensor_unref(keep);
    VF_CHECK_EQ_INT(released[2], 1);
    free(hold[0]);
    free(hold[1]);
    vf_free(b);
    vf_item_free(it);
}

VF_TEST(misaligned_frame_is_copied_and_released_at_once)
{
    vf_status st = {0};
    vf_item *it = mixed();
    size_t len;
    int nf = 0, nfr = 0;
    unsigned char *b = encode_split(it, &len, &nf);
    vf_frame f[4];
    void *hold[4];
    frames_of(it, f, &nfr, 1, hold); /* odd addresses: "latent" is f32 */
    memset(released, 0, sizeof released);
    vf_item *back = NULL;
    VF_CHECK_EQ_INT(vf_item_decode_split(b, len, count_release, (void *)0, f, nfr, &back, &st), 0);
    VF_CHECK(back && items_equal(it, back));
    VF_CHECK(vf_item_get(back, "latent")->data != f[0].data);
    VF_CHECK_EQ_INT(released[1], 1); /* copied: released before decode returns */
    VF_CHECK(vf_item_get(back, "frames")->data == f[1].data); /* u8: any address is aligned */
    VF_CHECK_EQ_INT(released[2], 0);
    vf_item_free(back);
    VF_CHECK(released[0] == 1 && released[1] == 1 && released[2] == 1);
    free(hold[0]);
    free(hold[1]);
    vf_free(b);
    vf_item_free(it);
}

static void expect_refused(const unsigned char *b, size_t len, const vf_frame *f, int nf, int code,
                           const char *needle)
{
    vf_status st = {0};
    vf_item *out = NULL;
    memset(released, 0, sizeof released);
    int rc = vf_item_decode_split(b, len, count_release, (void *)0, f, nf, &out, &st);
    VF_CHECK_MSG(rc == code, "got %d (%s), want %d", rc, st.msg, code);
    VF_CHECK_MSG(strstr(st.msg, needle) != NULL, "message \"%s\" lacks \"%s\"", st.msg, needle);
    VF_CHECK(out == NULL);
    for (int k = 0; k < 16; k++) VF_CHECK_MSG(released[k] == 0, "buffer %d released on error", k);
}

VF_TEST(bad_split_records_are_refused)
{
    vf_status st = {0};
    vf_item *it = mixed();
    size_t len;
    int nf = 0, nfr = 0;
    unsigned char *b = encode_split(it, &len, &nf);
    vf_frame f[4];
    void *hold[4];
    frames_of(it, f, &nfr, 0, hold);
    /* the ordinary decoders never take a split record */
    vf_item *out = NULL;
    VF_CHECK_EQ_INT(vf_item_decode(b, len, &out, &st), VF_ECORRUPT);
    VF_CHECK(strstr(st.msg, "flags") && out == NULL);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_item_decode_view(b, len, count_release, NULL, &out, &st), VF_ECORRUPT);
    /* frames missing, one too many, or of the wrong length */
    expect_refused(b, len, f, 1, VF_ECORRUPT, "2 frame tensor(s), 1 frame(s)");
    expect_refused(b, len, NULL, 0, VF_ECORRUPT, "2 frame tensor(s), 0 frame(s)");
    vf_frame three[3] = {f[0], f[1], f[1]};
    expect_refused(b, len, three, 3, VF_ECORRUPT, "3 frame(s)");
    vf_frame shortf[2] = {f[0], f[1]};
    shortf[1].len--;
    expect_refused(b, len, shortf, 2, VF_ECORRUPT, "frame of tensor 'frames' has 65535 bytes");
    vf_frame swapped[2] = {f[1], f[0]};
    expect_refused(b, len, swapped, 2, VF_ECORRUPT, "frame of tensor 'latent'");
    /* frame locations in a record without the split flag */
    unsigned char *c = malloc(len);
    memcpy(c, b, len);
    put_le(c + 6, 0, 2);
    fix_crc(c, len);
    expect_refused(c, len, f, nfr, VF_ECORRUPT, "not split");
    free(c);
    /* the split flag on a record without frames */
    vf_item *small = vf_item_new("s", &st);
    int64_t s[1] = {8};
    vf_item_put(small, "x", pattern(VF_DTYPE_U8, 1, s, 9), &st);
    size_t sl;
    unsigned char *sb = encode_split(small, &sl, &nf);
    put_le(sb + 6, VF_CODEC_FLAG_SPLIT, 2);
    fix_crc(sb, sl);
    expect_refused(sb, sl, NULL, 0, VF_ECORRUPT, "no tensor is a frame");
    /* the record's own CRC still covers it */
    b[40] ^= 1;
    expect_refused(b, len, f, nfr, VF_ECORRUPT, "CRC32C mismatch");
    vf_free(sb);
    vf_item_free(small);
    free(hold[0]);
    free(hold[1]);
    vf_free(b);
    vf_item_free(it);
}

VF_TEST(every_truncation_of_a_split_record_is_refused)
{
    vf_item *it = mixed();
    size_t len;
    int nf = 0, nfr = 0;
    unsigned char *b = encode_split(it, &len, &nf);
    vf_frame f[4];
    void *hold[4];
    frames_of(it, f, &nfr, 0, hold);
    for (size_t n = 0; n < len; n++) {
        unsigned char *cut = malloc(n ? n : 1); /* exact size: ASan sees any overread */
        memcpy(cut, b, n);
        vf_status st = {0};
        vf_item *out = NULL;
        memset(released, 0, sizeof released);
        int rc = vf_item_decode_split(cut, n, count_release, (void *)0, f, nfr, &out, &st);
        VF_CHECK_MSG(rc < 0 && out == NULL && st.msg[0], "truncation to %zu accepted", n);
        VF_CHECK(released[0] + released[1] + released[2] == 0);
        free(cut);
    }
    free(hold[0]);
    free(hold[1]);
    vf_free(b);
    vf_item_free(it);
}

int main(void) { return vf_test_main(); }
