/* test_safetensors.c — reader/writer round trips and every malformed header the
 * reference reader refuses (the same cases are cross-checked against the Python
 * package in tests/reference/test_safetensors_py.py). */
#include "formats/safetensors.h"
#include "tests/vf_test.h"

#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

static char tmpdir[256];

static const char *tpath(const char *name)
{
    static char buf[512];
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/vf_st_test.XXXXXX");
        VF_CHECK(mkdtemp(tmpdir) != NULL);
    }
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

/* A file image: u64 N, header text, data bytes. */
static uint8_t *image(const char *hdr, size_t hlen, uint64_t n, size_t nbuf, size_t *len)
{
    *len = 8 + hlen + nbuf;
    uint8_t *b = calloc(1, *len + 1);
    memcpy(b, &n, 8);
    memcpy(b + 8, hdr, hlen);
    for (size_t i = 0; i < nbuf; i++) b[8 + hlen + i] = (uint8_t)i;
    return b;
}

static int try_mem(const char *hdr, size_t nbuf, vf_status *st)
{
    size_t len;
    uint8_t *b = image(hdr, strlen(hdr), strlen(hdr), nbuf, &len);
    vf_st_file *f = NULL;
    vf_status_clear(st);
    int rc = vf_st_open_mem(b, len, "case.safetensors", &f, st);
    vf_st_close(f);
    free(b);
    return rc;
}

#define T1BODY "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"
#define T1 "{" T1BODY

VF_TEST(malformed_refused)
{
    static const struct { const char *name, *hdr; size_t nbuf; const char *want; } bad[] = {
        {"trailing_garbage", T1 "x", 8, "trailing"},
        {"dup_field", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "duplicate field dtype"},
        {"dup_name_same_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "appears twice"},
        {"meta_num", "{\"__metadata__\":{\"k\":1}," T1BODY, 8, "strings"},
        {"meta_twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate field __metadata__"},
        {"shape_float", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "\"a\""},
        {"shape_exp", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", 8, "floating"},
        {"shape_neg", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "negative"},
        {"shape_leading_zero", "{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "leading zero"},
        {"shape_string", "{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8, "shape"},
        {"offsets3", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "exactly 2"},
        {"offsets1", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8, "data_offsets"},
        {"offsets_reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, "before begin"},
        {"bad_dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
        {"lower_dtype", "{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
        {"missing_shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "missing field shape"},
        {"missing_dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "missing field dtype"},
        {"missing_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "missing field data_offsets"},
        {"gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "gap"},
        {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
        {"size_mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12 bytes"},
        {"extra_buffer", T1, 9, "file is"},
        {"short_buffer", T1, 7, "file is"},
        {"shape_overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, "overflow"},
        {"f4_odd", "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "byte boundary"},
        {"top_array", "[]", 0, "not a JSON object"},
        {"tensor_not_object", "{\"a\":5}", 0, "\"a\""},
        {"lone_surrogate", "{\"a\\ud800\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "surrogate"},
        {"bad_escape", "{\"a\\q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "escape"},
        {"raw_control", "{\"a\n\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "control"},
        {"trailing_comma", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, "JSON"},
        {"unterminated", "{\"a\":{\"dtype\":\"F32\"", 0, "\"a\""},
        {"empty_header", "", 0, "JSON"},
        {"bad_utf8", "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "UTF-8"},
        {"overlong_utf8", "{\"a\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "UTF-8"},
    };
    vf_status st;
    char deep[400] = "{\"a\":{\"x\":";
    for (int i = 0; i < 200; i++) strcat(deep, "[");
    VF_CHECK_EQ_INT(try_mem(deep, 0, &st), VF_ECORRUPT);
    VF_CHECK(strstr(st.msg, "deep") != NULL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = try_mem(bad[i].hdr, bad[i].nbuf, &st);
        VF_CHECK_MSG(rc == VF_ECORRUPT, "case %s accepted (rc %d)", bad[i].name, rc);
        VF_CHECK_MSG(strstr(st.msg, "case.safetensors") && strstr(st.msg, bad[i].want),
                     "case %s: message \"%s\" lacks \"%s\"", bad[i].name, st.msg, bad[i].want);
    }
}

VF_TEST(length_field_refused)
{
    vf_status st;
    vf_st_file *f = NULL;
    uint8_t small[7] = {0};
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_st_open_mem(small, sizeof small, "x.st", &f, &st), VF_ECORRUPT);
    VF_CHECK(strstr(st.msg, "too small") != NULL);
    size_t len;
    uint8_t *b = image(T1, strlen(T1), 100000001ull, 8, &len); /* over 100 MB */
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_st_open_mem(b, len, "x.st", &f, &st), VF_ECORRUPT);
    VF_CHECK(strstr(st.msg, "100 MB") != NULL);
    free(b);
    b = image(T1, strlen(T1), strlen(T1) + 9, 8, &len); /* runs past the end */
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_st_open_mem(b, len, "x.st", &f, &st), VF_ECORRUPT);
    VF_CHECK(strstr(st.msg, "past the end") != NULL);
    free(b);
    b = image(T1, strlen(T1), UINT64_MAX, 8, &len);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_st_open_mem(b, len, "x.st", &f, &st), VF_ECORRUPT);
    free(b);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_st_open(tpath("missing.safetensors"), &f, &st), VF_ENOTFOUND);
    VF_CHECK(strstr(st.msg, "missing.safetensors") != NULL);
}

VF_TEST(lenient_cases_accepted)
{
    /* accepted by the reference reader (safetensors 0.8) too */
    static const struct { const char *name, *hdr; size_t nbuf; } ok[] = {
        {"leading_ws", " \t\n" T1, 8},
        {"trailing_ws", T1 "  \n\r\t", 8},
        {"unknown_field", "{\"a\":{\"dtype\":\"F32\",\"x\":{\"y\":[1,-2.5e3,true,null,\"z\"]},\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
        {"meta_null", "{\"__metadata__\":null," T1BODY, 8},
        {"meta_dup_key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}," T1BODY, 8},
        {"scalar", "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4},
        {"zero_size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1},
        {"empty", "{}", 0},
        {"meta_only", "{\"__metadata__\":{\"a\":\"b\"}}", 0},
        {"ws_inside", "{ \"a\" : { \"dtype\" : \"F32\" , \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ] } }", 8},
        {"f4_even", "{\"a\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1},
        {"any_order", "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[8,10]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 10},
    };
    vf_status st;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int rc = try_mem(ok[i].hdr, ok[i].nbuf, &st);
        VF_CHECK_MSG(rc == 0, "case %s refused: %s", ok[i].name, st.msg);
    }
    /* escapes and surrogate pairs decode to UTF-8; duplicate meta keys keep the last */
    const char *h = "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"},\"a\\u00e9\\n\\ud83d\\ude00\\/\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t len;
    uint8_t *b = image(h, strlen(h), strlen(h), 8, &len);
    vf_st_file *f = NULL;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_st_open_mem(b, len, "esc", &f, &st), 0);
    if (f) {
        VF_CHECK(vf_st_find(f, "a\xc3\xa9\n\xf0\x9f\x98\x80/") != NULL);
        VF_CHECK_STR(vf_st_meta_get(f, "k"), "2");
        VF_CHECK_EQ_INT(vf_st_meta_count(f), 1);
    }
    vf_st_close(f);
    free(b);
}

/* fill callback: element i of a U16 ramp (1.5 MiB, so several chunks) */
static int ramp_fill(void *user, uint64_t off, void *buf, size_t n, vf_status *st)
{
    (void)st;
    uint16_t *o = buf;
    VF_CHECK(off % 2 == 0 && n % 2 == 0);
    for (size_t i = 0; i < n / 2; i++) o[i] = (uint16_t)((off / 2 + i) * 7 + (uintptr_t)user);
    return 0;
}

VF_TEST(round_trip)
{
    vf_status st;
    vf_status_clear(&st);
    float f32[6] = {0, 1, -2.5f, 3e-7f, 1e30f, -0.0f};
    uint16_t bf[4] = {0x3f80, 0xc000, 0x0001, 0x7f80};
    uint16_t h16[3] = {0x3c00, 0xbc00, 0x7bff};
    uint8_t u8[5] = {1, 2, 3, 254, 255};
    int32_t i32[2] = {-7, 2147483647};
    int64_t i64[2] = {-1, INT64_MAX};
    double f64[1] = {3.141592653589793};
    float scalar = 42.0f;
    int64_t s6[1] = {6}, s22[2] = {2, 2}, s5[1] = {5}, s12[2] = {1, 2}, s0[2] = {0, 4},
            s7[7] = {1, 1, 1, 1, 1, 1, 1}, s3[1] = {3}, sbig[1] = {786432};
    vf_st_writer *w = vf_st_writer_new(&st);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "w.f32", VF_ST_F32, 1, s6, f32, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "b \"quoted\"\\ \x01\t\xc3\xa9", VF_ST_BF16, 2, s22, bf, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "h", VF_ST_F16, 1, s3, h16, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "u", VF_ST_U8, 1, s5, u8, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "i", VF_ST_I32, 2, s12, i32, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "l", VF_ST_I64, 1, s12 + 1, i64, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "d", VF_ST_F64, 7, s7, f64, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "scalar", VF_ST_F32, 0, NULL, &scalar, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "empty", VF_ST_F32, 2, s0, NULL, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_add_fill(w, "ramp", VF_ST_U16, 1, sbig, ramp_fill, (void *)3, &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_meta(w, "format", "pt", &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_meta(w, "note", "line\nbreak \"q\"", &st), 0);
    VF_CHECK_EQ_INT(vf_st_writer_meta(w, "format", "vflow", &st), 0); /* replaces */
    /* refusals */
    vf_status e;
    vf_status_clear(&e);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "u", VF_ST_U8, 1, s5, u8, &e), VF_EINVAL);
    VF_CHECK(strstr(e.msg, "twice") != NULL);
    vf_status_clear(&e);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "__metadata__", VF_ST_U8, 1, s5, u8, &e), VF_EINVAL);
    vf_status_clear(&e);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "bad\xff", VF_ST_U8, 1, s5, u8, &e), VF_EINVAL);
    int64_t neg[1] = {-1};
    vf_status_clear(&e);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "neg", VF_ST_U8, 1, neg, u8, &e), VF_EINVAL);
    vf_status_clear(&e);
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "f4", VF_ST_F4, 1, s3, u8, &e), VF_EINVAL);

    uint64_t size = vf_st_writer_size(w);
    uint32_t crc = 0;
    char path[512];
    snprintf(path, sizeof path, "%s", tpath("rt.safetensors"));
    VF_CHECK_EQ_INT(vf_st_writer_save(w, path, VF_ST_ATOMIC, &crc, &st), 0);
    VF_CHECK_MSG(st.code == 0, "%s", st.msg);
    VF_CHECK(access(tpath("rt.safetensors.tmp"), F_OK) != 0);

    /* CRC and size agree with the bytes on disk */
    FILE *fp = fopen(path, "rb");
    VF_CHECK(fp != NULL);
    uint8_t *all = malloc(size + 1);
    size_t got = fread(all, 1, size + 1, fp);
    fclose(fp);
    VF_CHECK_EQ_INT(got, size);
    VF_CHECK_EQ_INT(vf_crc32c(0, all, got), crc);
    uint64_t n;
    memcpy(&n, all, 8);
    VF_CHECK_EQ_INT(n % 8, 0);
    VF_CHECK(all[8] == '{');

    vf_st_file *f = NULL;
    VF_CHECK_EQ_INT(vf_st_open(path, &f, &st), 0);
    VF_CHECK_MSG(st.code == 0, "%s", st.msg);
    if (f) {
        VF_CHECK_EQ_INT(vf_st_count(f), 10);
        VF_CHECK_STR(vf_st_meta_get(f, "format"), "vflow");
        VF_CHECK_STR(vf_st_meta_get(f, "note"), "line\nbreak \"q\"");
        /* writer order: descending dtype enum, then name; all aligned */
        static const char *order[] = {"l", "d", "empty", "scalar", "w.f32", "i",
                                      "b \"quoted\"\\ \x01\t\xc3\xa9", "h", "ramp", "u"};
        for (int i = 0; i < vf_st_count(f); i++) {
            const vf_st_tensor *t = vf_st_at(f, i);
            VF_CHECK_STR(t->name, order[i]);
            VF_CHECK_MSG((uintptr_t)t->data % (uintptr_t)(vf_st_dtype_bits(t->dtype) / 8) == 0,
                         "%s misaligned", t->name);
        }
        const vf_st_tensor *t = vf_st_find(f, "w.f32");
        VF_CHECK(t && t->dtype == VF_ST_F32 && t->ndim == 1 && t->shape[0] == 6 &&
                 !memcmp(t->data, f32, sizeof f32));
        t = vf_st_find(f, "b \"quoted\"\\ \x01\t\xc3\xa9");
        VF_CHECK(t && t->dtype == VF_ST_BF16 && t->ndim == 2 && !memcmp(t->data, bf, sizeof bf));
        t = vf_st_find(f, "d");
        VF_CHECK(t && t->ndim == 7 && t->numel == 1 && !memcmp(t->data, f64, 8));
        t = vf_st_find(f, "scalar");
        VF_CHECK(t && t->ndim == 0 && t->numel == 1 && !memcmp(t->data, &scalar, 4));
        t = vf_st_find(f, "empty");
        VF_CHECK(t && t->numel == 0 && t->nbytes == 0);
        t = vf_st_find(f, "l");
        VF_CHECK(t && !memcmp(t->data, i64, sizeof i64));
        t = vf_st_find(f, "ramp");
        bool ramp_ok = t && t->nbytes == 2 * 786432;
        for (int64_t i = 0; ramp_ok && i < 786432; i++) {
            uint16_t v;
            memcpy(&v, (const uint8_t *)t->data + 2 * i, 2);
            ramp_ok = v == (uint16_t)(i * 7 + 3);
        }
        VF_CHECK(ramp_ok);
        VF_CHECK(vf_st_find(f, "nope") == NULL);

        /* conversions */
        float out[6];
        VF_CHECK_EQ_INT(vf_st_read_f32(f, "w.f32", out, 6, &st), 0);
        VF_CHECK(!memcmp(out, f32, sizeof f32));
        VF_CHECK_EQ_INT(vf_st_read_f32(f, "b \"quoted\"\\ \x01\t\xc3\xa9", out, 4, &st), 0);
        VF_CHECK(out[0] == 1.0f && out[1] == -2.0f && isinf(out[3]));
        VF_CHECK_EQ_INT(vf_st_read_f32(f, "h", out, 3, &st), 0);
        VF_CHECK(out[0] == 1.0f && out[1] == -1.0f && out[2] == 65504.0f);
        VF_CHECK_EQ_INT(vf_st_read_f32(f, "d", out, 1, &st), 0);
        VF_CHECK(out[0] == (float)f64[0]);
        vf_status_clear(&e);
        VF_CHECK_EQ_INT(vf_st_read_f32(f, "u", out, 5, &e), VF_EINVAL);
        VF_CHECK(strstr(e.msg, "rt.safetensors") && strstr(e.msg, "\"u\"") && strstr(e.msg, "U8"));
        vf_status_clear(&e);
        VF_CHECK_EQ_INT(vf_st_read_f32(f, "w.f32", out, 5, &e), VF_EINVAL);
        vf_status_clear(&e);
        VF_CHECK_EQ_INT(vf_st_read_f32(f, "nope", out, 5, &e), VF_ENOTFOUND);
        VF_CHECK(strstr(e.msg, "\"nope\"") != NULL);
        const vf_st_tensor *x;
        int64_t want[2] = {2, 3};
        vf_status_clear(&e);
        VF_CHECK_EQ_INT(vf_st_expect(f, "b \"quoted\"\\ \x01\t\xc3\xa9", 2, want, &x, &e), VF_EINVAL);
        VF_CHECK(strstr(e.msg, "(2,2)") && strstr(e.msg, "(2,3)"));
        VF_CHECK_EQ_INT(vf_st_expect(f, "i", 2, s12, &x, &st), 0);
        vf_tensor *vt = NULL;
        VF_CHECK_EQ_INT(vf_st_read_tensor(f, "i", &vt, &st), 0);
        VF_CHECK(vt && vt->dtype == VF_DTYPE_I32 && vt->ndim == 2 && vt->shape[1] == 2 &&
                 !memcmp(vt->data, i32, sizeof i32));
        vf_tensor_unref(vt);
        vf_status_clear(&e);
        VF_CHECK_EQ_INT(vf_st_read_tensor(f, "l", &vt, &e), VF_EINVAL);
        vf_status_clear(&e);
        VF_CHECK_EQ_INT(vf_st_read_tensor(f, "d", &vt, &e), VF_EINVAL); /* F64: no runtime dtype */
    }
    vf_st_close(f);

    /* the same writer through a FILE* and through an fd gives the same bytes */
    FILE *tf = tmpfile();
    uint32_t crc2 = 0;
    VF_CHECK_EQ_INT(vf_st_writer_write_file(w, tf, "tmpfile", VF_ST_FSYNC, &crc2, &st), 0);
    VF_CHECK_EQ_INT(crc2, crc);
    VF_CHECK_EQ_INT(ftell(tf), (long)size);
    rewind(tf);
    uint8_t *again = malloc(size);
    VF_CHECK_EQ_INT(fread(again, 1, size, tf), size);
    VF_CHECK(!memcmp(again, all, size));
    fclose(tf);
    vf_st_file *g = NULL;
    VF_CHECK_EQ_INT(vf_st_open_mem(again, size, "again", &g, &st), 0);
    vf_st_close(g);
    free(again);
    free(all);
    vf_st_writer_free(w);
}

static uint8_t *slurp_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, fp);
    fclose(fp);
    return b;
}

/* A file streamed in pieces, in shuffled order, is the whole-file writer's bytes, with
 * its CRC; a gap or a repeated piece is refused at finish, naming the range. */
VF_TEST(stream_in_pieces_equals_whole_file)
{
    vf_status st;
    vf_status_clear(&st);
    int64_t na = 1000, nb = 37;
    float *a = malloc(sizeof(float) * (size_t)na), *b = malloc(sizeof(float) * (size_t)nb), alpha = 8.0f;
    for (int64_t i = 0; i < na; i++) a[i] = (float)i * 0.25f - 3.0f;
    for (int64_t i = 0; i < nb; i++) b[i] = -(float)i;
    int64_t sa[2] = {10, 100}, sb[1] = {nb};
    /* the reference: the whole-file writer */
    vf_st_writer *w = vf_st_writer_new(&st);
    vf_st_writer_add(w, "z.a", VF_ST_F32, 2, sa, a, &st);
    vf_st_writer_add(w, "b", VF_ST_F32, 1, sb, b, &st);
    vf_st_writer_add(w, "a.alpha", VF_ST_F32, 0, NULL, &alpha, &st);
    vf_st_writer_meta(w, "step", "7", &st);
    uint32_t crc_whole = 0;
    char whole[512], part[512];
    snprintf(whole, sizeof whole, "%s", tpath("whole.safetensors"));
    snprintf(part, sizeof part, "%s", tpath("part.safetensors"));
    VF_CHECK_EQ_INT(vf_st_writer_save(w, whole, 0, &crc_whole, &st), 0);
    vf_st_writer_free(w);
    for (int round = 0; round < 3; round++) {
        vf_st_writer *s2 = vf_st_writer_new(&st);
        vf_st_writer_add_streamed(s2, "z.a", VF_ST_F32, 2, sa, &st);
        vf_st_writer_add_streamed(s2, "b", VF_ST_F32, 1, sb, &st);
        vf_st_writer_add(s2, "a.alpha", VF_ST_F32, 0, NULL, &alpha, &st);
        vf_st_writer_meta(s2, "step", "7", &st);
        vf_status e;
        vf_status_clear(&e);
        VF_CHECK_EQ_INT(vf_st_writer_save(s2, tpath("refused.safetensors"), 0, NULL, &e), VF_EINVAL);
        VF_CHECK(strstr(e.msg, "streamed") != NULL);
        vf_st_stream *fs = NULL;
        VF_CHECK_EQ_INT(vf_st_stream_open(s2, part, &fs, &st), 0);
        if (!fs) break;
        uint64_t oa = (uint64_t)vf_st_stream_offset(fs, "z.a"), ob = (uint64_t)vf_st_stream_offset(fs, "b");
        VF_CHECK(vf_st_stream_offset(fs, "nope") == -1);
        /* b whole, then a in pieces of 1..97 elements from the back */
        VF_CHECK_EQ_INT(vf_st_stream_put(fs, ob, b, sizeof(float) * (size_t)nb, &st), 0);
        int64_t end = na;
        for (int k = 1; end > 0; k = k % 97 + 1) {
            int64_t c = k < end ? k : end;
            VF_CHECK_EQ_INT(vf_st_stream_put(fs, oa + 4 * (uint64_t)(end - c), a + end - c, 4 * (size_t)c, &st), 0);
            end -= c;
        }
        if (round == 1) /* one element twice */
            VF_CHECK_EQ_INT(vf_st_stream_put(fs, oa + 40, a + 10, 4, &st), 0);
        vf_status_clear(&e);
        VF_CHECK_EQ_INT(vf_st_stream_put(fs, vf_st_stream_size(fs) - 2, a, 4, &e), VF_EINVAL); /* outside */
        if (round == 2) { /* a gap: the stream is rebuilt without the first element of a */
            vf_st_stream_abort(fs);
            VF_CHECK_EQ_INT(vf_st_stream_open(s2, part, &fs, &st), 0);
            VF_CHECK_EQ_INT(vf_st_stream_put(fs, ob, b, sizeof(float) * (size_t)nb, &st), 0);
            VF_CHECK_EQ_INT(vf_st_stream_put(fs, oa + 4, a + 1, 4 * (size_t)(na - 1), &st), 0);
        }
        int64_t bytes = 0;
        uint32_t crc = 0;
        vf_status_clear(&e);
        int rc = vf_st_stream_finish(fs, VF_ST_FSYNC, &bytes, &crc, &e);
        if (round == 0) {
            VF_CHECK_MSG(rc == 0, "%s", e.msg);
            size_t l1 = 0, l2 = 0;
            uint8_t *x = slurp_file(whole, &l1), *y = slurp_file(part, &l2);
            VF_CHECK(x && y && l1 == l2 && memcmp(x, y, l1) == 0);
            VF_CHECK_EQ_INT(bytes, (int64_t)l1);
            VF_CHECK_EQ_INT(crc, crc_whole);
            free(x), free(y);
        } else {
            VF_CHECK_EQ_INT(rc, VF_EINVAL);
            VF_CHECK_MSG(strstr(e.msg, round == 1 ? "written twice" : "never written") != NULL, "%s", e.msg);
        }
        vf_st_writer_free(s2);
    }
    free(a), free(b);
}

VF_TEST(empty_file_matches_reference_bytes)
{
    /* the reference test_empty: "{}" padded to 8 */
    vf_status st;
    vf_status_clear(&st);
    vf_st_writer *w = vf_st_writer_new(&st);
    FILE *tf = tmpfile();
    VF_CHECK_EQ_INT(vf_st_writer_write_file(w, tf, "e", 0, NULL, &st), 0);
    uint8_t buf[32];
    rewind(tf);
    VF_CHECK_EQ_INT(fread(buf, 1, sizeof buf, tf), 16);
    VF_CHECK(!memcmp(buf, "\x08\0\0\0\0\0\0\0{}      ", 16));
    fclose(tf);
    /* the reference test_serialization: one F32 (1,2,3) "attn.0" */
    float v[6] = {0, 1, 2, 3, 4, 5};
    int64_t sh[3] = {1, 2, 3};
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "attn.0", VF_ST_F32, 3, sh, v, &st), 0);
    const char *want = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    VF_CHECK_EQ_INT(vf_st_writer_size(w), 8 + 64 + 24);
    tf = tmpfile();
    VF_CHECK_EQ_INT(vf_st_writer_write_file(w, tf, "e", 0, NULL, &st), 0);
    rewind(tf);
    uint8_t b2[96];
    VF_CHECK_EQ_INT(fread(b2, 1, sizeof b2, tf), 96);
    VF_CHECK(b2[0] == 64 && !memcmp(b2 + 8, want, strlen(want)) && !memcmp(b2 + 72, v, 24));
    fclose(tf);
    vf_st_writer_free(w);
}

static int failing_fill(void *user, uint64_t off, void *buf, size_t n, vf_status *st)
{
    return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "device copy failed");
}

VF_TEST(write_errors_reported)
{
    vf_status st;
    vf_status_clear(&st);
    vf_st_writer *w = vf_st_writer_new(&st);
    static float big[1 << 16];
    int64_t sh[1] = {1 << 16};
    VF_CHECK_EQ_INT(vf_st_writer_add(w, "x", VF_ST_F32, 1, sh, big, &st), 0);
    /* disk full */
    if (access("/dev/full", W_OK) == 0) {
        vf_status_clear(&st);
        VF_CHECK_EQ_INT(vf_st_writer_save(w, "/dev/full", 0, NULL, &st), VF_EIO);
        VF_CHECK_MSG(strstr(st.msg, "/dev/full") && strstr(st.msg, "space"), "%s", st.msg);
    }
    /* unwritable directory: atomic save leaves nothing behind */
    vf_status_clear(&st);
    VF_CHECK(vf_st_writer_save(w, "/nonexistent-dir/x.safetensors", VF_ST_ATOMIC, NULL, &st) == VF_EIO);
    /* a failing fill: error names the file and the tensor, tmp file removed */
    VF_CHECK_EQ_INT(vf_st_writer_add_fill(w, "dev", VF_ST_F32, 1, sh, failing_fill, NULL, &st), 0);
    vf_status_clear(&st);
    char p[512];
    snprintf(p, sizeof p, "%s", tpath("fail.safetensors"));
    VF_CHECK_EQ_INT(vf_st_writer_save(w, p, VF_ST_ATOMIC, NULL, &st), VF_ECUDA);
    VF_CHECK_MSG(strstr(st.msg, "\"dev\"") && strstr(st.msg, "device copy failed"), "%s", st.msg);
    VF_CHECK(access(p, F_OK) != 0);
    VF_CHECK(access(tpath("fail.safetensors.tmp"), F_OK) != 0);
    vf_st_writer_free(w);
}

VF_TEST(cleanup)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (tmpdir[0]) VF_CHECK(system(cmd) == 0);
}

int main(void) { return vf_test_main(); }
