/* test_codec.c — the item codec (runtime/core/item.c) and CRC32C (runtime/core/crc32c.c).
 *
 * Round trips for every dtype and rank, then the strictness that makes the codec safe
 * for the wire and for LMDB: every truncation and every single-bit flip of a valid
 * record is refused with an error (never a crash: this test also runs under ASan), and
 * records with a VALID CRC but broken structure are refused with a message naming the
 * offset. CRC32C against the RFC 3720 vectors, hardware path against the table path.
 */
#include "runtime/core/item.h"
#include "tests/vf_test.h"

#include <stdint.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static vf_tensor *rand_tensor(vf_dtype dt, int ndim, const int64_t *shape)
{
    vf_status st = {0};
    vf_tensor *t = vf_tensor_new(dt, ndim, shape, &st);
    VF_CHECK(t != NULL);
    unsigned char *p = t->data;
    for (size_t i = 0; i < vf_tensor_nbytes(t); i++) p[i] = (unsigned char)rnd();
    return t;
}

/* An item with a few tensors and metadata; its record is a few hundred bytes. */
static vf_item *sample_item(const char *id)
{
    vf_status st = {0};
    vf_item *it = vf_item_new(id, &st);
    int64_t s1[3] = {2, 3, 5}, s2[1] = {7};
    vf_item_put(it, "frames", rand_tensor(VF_DTYPE_U8, 3, s1), &st);
    vf_item_put(it, "latent", rand_tensor(VF_DTYPE_F32, 1, s2), &st);
    vf_item_set_str(it, "path", "/data/clip 01.mp4", &st);
    vf_item_set_num(it, "fps", 29.97, &st);
    vf_item_set_str(it, "empty", "", &st);
    VF_CHECK_EQ_INT(st.code, 0);
    return it;
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

static void *encode(const vf_item *it, size_t *len)
{
    vf_status st = {0};
    void *buf = NULL;
    VF_CHECK_EQ_INT(vf_item_encode_alloc(it, &buf, len, &st), 0);
    VF_CHECK_EQ_INT(*len, vf_item_encoded_size(it));
    return buf;
}

VF_TEST(roundtrip_every_dtype_and_rank)
{
    for (int dt = 0; dt < VF_DTYPE_COUNT; dt++) {
        for (int nd = 0; nd <= VF_MAX_DIMS; nd++) {
            int64_t shape[VF_MAX_DIMS];
            for (int i = 0; i < nd; i++) shape[i] = 1 + (i + dt) % 3;
            vf_status st = {0};
            vf_item *it = vf_item_new(nd % 2 ? "clip#3" : "", &st);
            VF_CHECK_EQ_INT(vf_item_put(it, "x", rand_tensor((vf_dtype)dt, nd, shape), &st), 0);
            vf_item_set_num(it, "n", -1.5e300, &st);
            vf_item_set_str(it, "caption", "a cat, \"quoted\"", &st);
            size_t len;
            void *buf = encode(it, &len);
            vf_item *back = NULL;
            int rc = vf_item_decode(buf, len, &back, &st);
            VF_CHECK_MSG(rc == 0, "dtype %s ndim %d: %s", vf_dtype_name((vf_dtype)dt), nd, st.msg);
            VF_CHECK(back && items_equal(it, back));
            double v;
            VF_CHECK(back && vf_item_num(back, "n", &v) == 0 && v == -1.5e300);
            VF_CHECK(back && vf_item_str(back, "n") == NULL);
            VF_CHECK_EQ_INT(back ? vf_item_num(back, "caption", &v) : 0, VF_ENOTFOUND);
            vf_item_free(back);
            vf_item_free(it);
            vf_free(buf);
        }
    }
}

VF_TEST(roundtrip_empty_and_zero_size)
{
    vf_status st = {0};
    vf_item *it = vf_item_new(NULL, &st);
    VF_CHECK_STR(vf_item_id(it), "");
    size_t len;
    void *buf = encode(it, &len);
    VF_CHECK_EQ_INT(len, 68); /* one padded header line + CRC */
    vf_item *back = NULL;
    VF_CHECK_EQ_INT(vf_item_decode(buf, len, &back, &st), 0);
    VF_CHECK(back && items_equal(it, back));
    vf_item_free(back);
    vf_free(buf);
    int64_t shape[3] = {4, 0, 2};
    vf_item_put(it, "nothing", rand_tensor(VF_DTYPE_BF16, 3, shape), &st);
    buf = encode(it, &len);
    VF_CHECK_EQ_INT(vf_item_decode(buf, len, &back, &st), 0);
    VF_CHECK(back && items_equal(it, back));
    vf_item_free(back);
    vf_free(buf);
    vf_item_free(it);
}

VF_TEST(item_api)
{
    vf_status st = {0};
    vf_item *it = sample_item("a");
    int64_t s[1] = {3};
    VF_CHECK_EQ_INT(vf_item_ntensors(it), 2);
    vf_item_put(it, "frames", rand_tensor(VF_DTYPE_I32, 1, s), &st); /* replaces */
    VF_CHECK_EQ_INT(vf_item_ntensors(it), 2);
    VF_CHECK_EQ_INT(vf_item_get(it, "frames")->dtype, VF_DTYPE_I32);
    vf_tensor *t = vf_item_take(it, "frames");
    VF_CHECK(t && vf_item_get(it, "frames") == NULL && vf_item_ntensors(it) == 1);
    vf_tensor_unref(t);
    VF_CHECK(vf_item_take(it, "frames") == NULL);
    vf_item_set_str(it, "path", "other", &st);
    VF_CHECK_STR(vf_item_str(it, "path"), "other");
    VF_CHECK_EQ_INT(vf_item_nmeta(it), 3);
    VF_CHECK_EQ_INT(vf_item_set_id(it, "b", &st), 0);
    VF_CHECK_STR(vf_item_id(it), "b");
    /* a bad name is refused and the tensor reference is still consumed (ASan: no leak) */
    VF_CHECK_EQ_INT(vf_item_put(it, "", rand_tensor(VF_DTYPE_U8, 1, s), &st), VF_EINVAL);
    vf_item_free(it);
}

VF_TEST(every_truncation_is_refused)
{
    vf_item *it = sample_item("clip-7");
    size_t len;
    unsigned char *buf = encode(it, &len);
    int refused = 0;
    for (size_t n = 0; n < len; n++) {
        /* a copy of exactly n bytes, so ASan catches any read past it */
        unsigned char *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        vf_status st = {0};
        vf_item *out = NULL;
        int rc = vf_item_decode(cut, n, &out, &st);
        int rc2 = vf_item_decode_view(cut, n, NULL, NULL, &out, &st);
        if (rc < 0 && rc2 < 0 && out == NULL && st.msg[0]) refused++;
        else fprintf(stderr, "truncation to %zu bytes accepted (rc %d/%d)\n", n, rc, rc2);
        free(cut);
    }
    VF_CHECK_EQ_INT(refused, (long long)len);
    vf_free(buf);
    vf_item_free(it);
}

VF_TEST(every_bit_flip_is_refused)
{
    vf_item *it = sample_item("clip-8");
    size_t len;
    unsigned char *buf = encode(it, &len);
    unsigned char *m = malloc(len);
    long accepted = 0, total = 0;
    for (size_t off = 0; off < len; off++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(m, buf, len);
            m[off] ^= (unsigned char)(1u << bit);
            vf_status st = {0};
            vf_item *out = NULL;
            int rc = vf_item_decode(m, len, &out, &st);
            total++;
            if (rc >= 0 || out) {
                accepted++;
                vf_item_free(out);
            } else if (!(rc == VF_ECORRUPT || rc == VF_EVERSION)) {
                fprintf(stderr, "flip at %zu bit %d: unexpected code %d\n", off, bit, rc);
                accepted++;
            }
        }
    }
    VF_CHECK_EQ_INT(accepted, 0);
    VF_CHECK_EQ_INT(total, (long)len * 8);
    free(m);
    vf_free(buf);
    vf_item_free(it);
}

/* Rewrites the CRC so structural checks, not the checksum, must catch the damage. */
static void fix_crc(unsigned char *b, size_t len)
{
    uint32_t c = vf_crc32c(0, b, len - 4);
    for (int i = 0; i < 4; i++) b[len - 4 + i] = (unsigned char)(c >> (8 * i));
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static int expect_refused(unsigned char *b, size_t len, int code, const char *needle)
{
    vf_status st = {0};
    vf_item *out = NULL;
    int rc = vf_item_decode(b, len, &out, &st);
    VF_CHECK_MSG(rc == code, "got %d (%s), want %d", rc, st.msg, code);
    VF_CHECK_MSG(strstr(st.msg, needle) != NULL, "message \"%s\" lacks \"%s\"", st.msg, needle);
    VF_CHECK(out == NULL);
    vf_item_free(out);
    return rc;
}

VF_TEST(crafted_records_with_valid_crc)
{
    vf_status st = {0};
    vf_item *it = vf_item_new("", &st);
    int64_t shape[2] = {3, 40}; /* 480 payload bytes, padded to 512 */
    vf_item_put(it, "t", rand_tensor(VF_DTYPE_F32, 2, shape), &st);
    size_t len;
    unsigned char *buf = encode(it, &len);
    unsigned char *b = malloc(len + 64);
    /* layout: 16 fixed | id len 4 @16 | nmeta 4 @20 | ntensors 4 @24 | name len 4 @28 |
     * "t" @32 | dtype @33 ndim @34 loc @35 pad @36 | dims @37.. | loc len @53 | pad to 64 */
    const size_t DT = 33, ND = 34, LOC = 35, RES = 36, DIM0 = 37;

#define FRESH() (memcpy(b, buf, len))
    FRESH();
    memcpy(b, "VFIX", 4);
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "bad magic");
    FRESH();
    put_le(b + 4, 2, 2);
    fix_crc(b, len);
    expect_refused(b, len, VF_EVERSION, "version 2");
    FRESH();
    put_le(b + 6, 1, 2);
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "flags");
    FRESH();
    put_le(b + 8, len + 1, 8);
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "length field");
    FRESH();
    b[DT] = VF_DTYPE_COUNT;
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "unknown dtype");
    FRESH();
    b[ND] = 7;
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "7 dims");
    FRESH();
    b[LOC] = 9;
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "unknown location");
    FRESH();
    b[LOC] = 1; /* cuda-ipc: structurally fine, but this decoder cannot resolve it */
    fix_crc(b, len);
    expect_refused(b, len, VF_EINVAL, "device");
    FRESH();
    b[RES] = 1;
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "reserved");
    FRESH();
    put_le(b + DIM0, (uint64_t)-3, 8);
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "negative");
    FRESH();
    put_le(b + DIM0, 1ull << 40, 8);
    put_le(b + DIM0 + 8, 1ull << 40, 8);
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "overflow");
    FRESH();
    put_le(b + DIM0, 4, 8); /* 4x40 floats: payload longer than the record */
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "runs past the end");
    FRESH();
    put_le(b + DIM0, 1, 8); /* 1x40 floats: bytes left over after the payload */
    memset(b + 64 + 160, 0, 512 - 160); /* zero, so they are not read as bad padding */
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "unexpected bytes");
    FRESH();
    b[60] = 1; /* the header ends at 57, zero padding up to 64 */
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "non-zero header padding");
    FRESH();
    b[64 + 480 + 3] = 1; /* the payload's padding */
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "non-zero padding after tensor 't'");
    FRESH();
    put_le(b + 24, 4096, 4);
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "cannot fit");
    FRESH();
    put_le(b + 24, 1u << 31, 4);
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "exceeds");
    FRESH();
    put_le(b + 20, 100, 4); /* 100 metadata entries that are not there */
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "offset");
    FRESH();
    put_le(b + 28, 0, 4); /* empty tensor name */
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "tensor name at offset 28");
    FRESH();
    put_le(b + 16, 0xffffffffu, 4); /* id longer than the record */
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "item id at offset 16");
    /* grow the record by 64 bytes of zeros: the total must match */
    FRESH();
    memset(b + len, 0, 64);
    memcpy(b + len + 60, b + len - 4, 4);
    fix_crc(b, len + 64);
    expect_refused(b, len + 64, VF_ECORRUPT, "length field");
#undef FRESH
    free(b);
    vf_free(buf);
    vf_item_free(it);

    /* duplicate tensor names and metadata keys, built by hand from a valid 2-entry item */
    it = vf_item_new("", &st);
    int64_t s1[1] = {1};
    vf_item_put(it, "aa", rand_tensor(VF_DTYPE_U8, 1, s1), &st);
    vf_item_put(it, "ab", rand_tensor(VF_DTYPE_U8, 1, s1), &st);
    vf_item_set_num(it, "ka", 1, &st);
    vf_item_set_num(it, "kb", 2, &st);
    buf = encode(it, &len);
    b = malloc(len);
    memcpy(b, buf, len);
    unsigned char *p = memmem(b, len, "ab", 2);
    p[1] = 'a';
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "duplicate tensor name 'aa'");
    memcpy(b, buf, len);
    p = memmem(b, len, "kb", 2);
    p[1] = 'a';
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "duplicate metadata key 'ka'");
    memcpy(b, buf, len);
    p = memmem(b, len, "ka", 2);
    p[2] = 7; /* kind byte right after the key */
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "unknown kind 7");
    memcpy(b, buf, len);
    p = memmem(b, len, "ka", 2);
    p[1] = '\0';
    fix_crc(b, len);
    expect_refused(b, len, VF_ECORRUPT, "NUL");
    free(b);
    vf_free(buf);
    vf_item_free(it);
}

static int g_released;
static void *g_released_buf;
static void on_release(void *data, void *hint)
{
    g_released++;
    g_released_buf = data;
    VF_CHECK(hint == (void *)0x1234);
}

VF_TEST(decode_view_aliases_and_releases_once)
{
    vf_item *it = sample_item("v");
    size_t len;
    unsigned char *buf = encode(it, &len);
    vf_status st = {0};
    vf_item *v = NULL;
    g_released = 0;
    VF_CHECK_EQ_INT(vf_item_decode_view(buf, len, on_release, (void *)0x1234, &v, &st), 0);
    VF_CHECK(v && items_equal(it, v));
    vf_tensor *t = vf_item_get(v, "latent");
    VF_CHECK((unsigned char *)t->data > buf && (unsigned char *)t->data < buf + len);
    VF_CHECK((((unsigned char *)t->data - buf) % 64) == 0);
    vf_tensor *kept = vf_tensor_ref(vf_item_get(v, "frames"));
    vf_item_free(v);
    VF_CHECK_EQ_INT(g_released, 0); /* one tensor still aliases the buffer */
    vf_tensor_unref(kept);
    VF_CHECK_EQ_INT(g_released, 1);
    VF_CHECK(g_released_buf == buf);

    /* no tensors: released before decode returns */
    vf_item *e = vf_item_new("meta-only", &st);
    vf_item_set_num(e, "k", 1, &st);
    size_t elen;
    void *ebuf = encode(e, &elen);
    g_released = 0;
    VF_CHECK_EQ_INT(vf_item_decode_view(ebuf, elen, on_release, (void *)0x1234, &v, &st), 0);
    VF_CHECK_EQ_INT(g_released, 1);
    VF_CHECK(items_equal(e, v));
    vf_item_free(v);
    vf_item_free(e);
    vf_free(ebuf);

    /* on error the release is not called */
    g_released = 0;
    buf[len - 1] ^= 1;
    VF_CHECK_EQ_INT(vf_item_decode_view(buf, len, on_release, (void *)0x1234, &v, &st), VF_ECORRUPT);
    VF_CHECK_EQ_INT(g_released, 0);
    buf[len - 1] ^= 1;

    /* a misaligned buffer (as ZeroMQ or LMDB may hand out): f32 is copied, u8 aliased */
    unsigned char *odd = malloc(len + 1);
    memcpy(odd + 1, buf, len);
    g_released = 0;
    VF_CHECK_EQ_INT(vf_item_decode_view(odd + 1, len, on_release, (void *)0x1234, &v, &st), 0);
    VF_CHECK(items_equal(it, v));
    t = vf_item_get(v, "latent");
    VF_CHECK(((uintptr_t)t->data % 4) == 0);
    VF_CHECK(!((unsigned char *)t->data >= odd && (unsigned char *)t->data < odd + len + 1));
    VF_CHECK((unsigned char *)vf_item_get(v, "frames")->data > odd);
    vf_item_free(v);
    VF_CHECK_EQ_INT(g_released, 1);
    free(odd);
    vf_free(buf);
    vf_item_free(it);
}

VF_TEST(share_is_shallow)
{
    vf_item *it = sample_item("s");
    vf_status st = {0};
    vf_item *c = vf_item_share(it, &st);
    VF_CHECK(c && items_equal(it, c));
    VF_CHECK(vf_item_get(c, "latent") == vf_item_get(it, "latent"));
    vf_item_free(it);
    VF_CHECK_EQ_INT(vf_item_ntensors(c), 2); /* still valid */
    vf_item_free(c);
}

VF_TEST(crc32c_vectors)
{
    unsigned char z[32] = {0}, ff[32], inc[32];
    memset(ff, 0xff, 32);
    for (int i = 0; i < 32; i++) inc[i] = (unsigned char)i;
    /* RFC 3720 B.4 */
    VF_CHECK_EQ_INT(vf_crc32c(0, z, 32), 0x8A9136AA);
    VF_CHECK_EQ_INT(vf_crc32c(0, ff, 32), 0x62A8AB43);
    VF_CHECK_EQ_INT(vf_crc32c(0, inc, 32), 0x46DD794E);
    VF_CHECK_EQ_INT(vf_crc32c(0, "123456789", 9), 0xE3069283);
    VF_CHECK_EQ_INT(vf_crc32c_sw(0, z, 32), 0x8A9136AA);
    VF_CHECK_EQ_INT(vf_crc32c_sw(0, "123456789", 9), 0xE3069283);
    VF_CHECK_EQ_INT(vf_crc32c_hw(0, "123456789", 9), 0xE3069283);
    VF_CHECK_EQ_INT(vf_crc32c(0, "", 0), 0);
    fprintf(stderr, "crc32c: SSE4.2 path %s\n", vf_crc32c_hw_available() ? "available" : "not available");
}

VF_TEST(crc32c_hw_equals_table)
{
    size_t n = 1 << 16;
    unsigned char *b = malloc(n + 8);
    for (size_t i = 0; i < n + 8; i++) b[i] = (unsigned char)rnd();
    /* lengths around the 3-way blocks of the hardware path (3 x 256, 3 x 8192) */
    static const size_t edge_len[] = {767, 768, 769, 24575, 24576, 24577, 2 * 24576 + 13, 65536 - 8};
    for (size_t k = 0; k < sizeof edge_len / sizeof *edge_len; k++)
        VF_CHECK_EQ_INT(vf_crc32c_hw(7, b + 3, edge_len[k]), vf_crc32c_sw(7, b + 3, edge_len[k]));
    for (int k = 0; k < 300; k++) {
        size_t off = rnd() % 8, len = k < 100 ? (size_t)k : rnd() % n;
        uint32_t seed = k % 3 ? rnd() : 0;
        uint32_t a = vf_crc32c_sw(seed, b + off, len), h = vf_crc32c_hw(seed, b + off, len);
        VF_CHECK_MSG(a == h, "len %zu off %zu: sw %08x hw %08x", len, off, a, h);
        /* chaining pieces gives the CRC of the whole */
        size_t cut = len ? rnd() % len : 0;
        VF_CHECK_EQ_INT(vf_crc32c(vf_crc32c(seed, b + off, cut), b + off + cut, len - cut), a);
    }
    free(b);
}

/* crc(A‖B) from crc(A), crc(B) and |B|: against the CRC of the whole, for cuts at every
 * small length and at random ones (B empty, one byte, not a power of two, long). */
VF_TEST(crc32c_combine_equals_whole)
{
    size_t n = 70001;
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rnd();
    for (int k = 0; k < 200; k++) {
        size_t len = k < 40 ? (size_t)k : rnd() % n, cut = k < 40 ? (size_t)k / 2 : (len ? rnd() % len : 0);
        uint32_t whole = vf_crc32c(0, b, len);
        uint32_t got = vf_crc32c_combine(vf_crc32c(0, b, cut), vf_crc32c(0, b + cut, len - cut), len - cut);
        VF_CHECK_MSG(got == whole, "len %zu cut %zu: %08x vs %08x", len, cut, got, whole);
    }
    /* three pieces combined left to right */
    uint32_t c = vf_crc32c_combine(vf_crc32c_combine(vf_crc32c(0, b, 1000), vf_crc32c(0, b + 1000, 3), 3),
                                   vf_crc32c(0, b + 1003, n - 1003), n - 1003);
    VF_CHECK_EQ_INT(c, vf_crc32c(0, b, n));
    free(b);
}

VF_TEST(port_bound_covers_largest_item)
{
    vf_port_specs ps = {0};
    vf_port_spec *p = vf_port_add(&ps, "frames", VF_PORT_OUT, true);
    const char *sym[4] = {"T", "", "", ""};
    int64_t dims[4] = {17, 8, 8, 3};
    vf_port_tensor(p, "frames", VF_DTYPE_U8, 4, dims, sym);
    int64_t d2[1] = {5};
    vf_port_tensor(p, "pts", VF_DTYPE_F32, 1, d2, NULL);
    p->meta_bytes = 512;
    VF_CHECK(vf_port_find(&ps, "frames") == p);
    VF_CHECK(vf_port_find(&ps, "nope") == NULL);
    VF_CHECK_STR(p->t[0].sym[0], "T");
    int64_t bound = vf_port_max_item_bytes(p);
    /* the largest item: tensors at their bounds, 512 bytes of id + metadata */
    vf_status st = {0};
    vf_item *it = vf_item_new("0123456789abcdef0123456789abcdef", &st);
    vf_item_put(it, "frames", rand_tensor(VF_DTYPE_U8, 4, dims), &st);
    vf_item_put(it, "pts", rand_tensor(VF_DTYPE_F32, 1, d2), &st);
    char val[400];
    memset(val, 'x', sizeof val - 1);
    val[sizeof val - 1] = 0;
    vf_item_set_str(it, "caption", val, &st);
    for (int i = 0; i < 8; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        vf_item_set_num(it, k, i, &st);
    }
    VF_CHECK_MSG((int64_t)vf_item_encoded_size(it) <= bound, "encoded %zu > bound %lld", vf_item_encoded_size(it),
                 (long long)bound);
    VF_CHECK(bound < (int64_t)vf_item_encoded_size(it) + 4096); /* and not absurdly loose */
    vf_item_free(it);
    dims[0] = -1;
    vf_port_spec *q = vf_port_add(&ps, "open", VF_PORT_OUT, false);
    vf_port_tensor(q, "x", VF_DTYPE_U8, 1, dims, NULL);
    VF_CHECK_EQ_INT(vf_port_max_item_bytes(q), -1);

    vf_mem_plan m = {0};
    vf_device cpu = {VF_DEV_CPU, 0}, g1 = {VF_DEV_CUDA, 1};
    vf_mem_plan_add(&m, cpu, VF_MEM_WEIGHTS, "weights", 100);
    vf_mem_plan_add(&m, g1, VF_MEM_WEIGHTS, "weights", 7);
    vf_mem_plan_add(&m, cpu, VF_MEM_WEIGHTS, "weights", 11);
    vf_mem_plan_add(&m, cpu, VF_MEM_WORKSPACE, "workspace", 5);
    VF_CHECK_EQ_INT(m.n, 3);
    VF_CHECK_EQ_INT(vf_mem_plan_total(&m, cpu), 116);
    VF_CHECK_EQ_INT(vf_mem_plan_total(&m, g1), 7);
    VF_CHECK_EQ_INT(vf_mem_plan_total(&m, (vf_device){VF_DEV_CUDA, 0}), 0);
}

int main(void) { return vf_test_main(); }
