/* test_tensor.c — dtypes, device strings, tensor lifetime and the bf16/f16 conversions
 * (runtime/core/tensor.c). The f16 conversion is checked against the compiler's own
 * _Float16 (libgcc's soft-float routines), an independent reference. */
#include "runtime/core/alloc.h"
#include "tests/vf_test.h"
#include "runtime/vflow.h"

#include <stdint.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float fl(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

VF_TEST(dtypes)
{
    const char *names[] = {"u8", "i32", "f32", "bf16", "f16"};
    size_t sizes[] = {1, 4, 4, 2, 2};
    for (int i = 0; i < VF_DTYPE_COUNT; i++) {
        VF_CHECK_STR(vf_dtype_name((vf_dtype)i), names[i]);
        VF_CHECK_EQ_INT(vf_dtype_size((vf_dtype)i), sizes[i]);
        vf_dtype d;
        VF_CHECK_EQ_INT(vf_dtype_parse(names[i], &d), 0);
        VF_CHECK_EQ_INT(d, i);
    }
    vf_dtype d;
    VF_CHECK_EQ_INT(vf_dtype_parse("float32", &d), VF_EINVAL);
    VF_CHECK_EQ_INT(vf_dtype_size(VF_DTYPE_COUNT), 0);
}

VF_TEST(devices)
{
    vf_status st = {0};
    vf_device d;
    char buf[32];
    VF_CHECK_EQ_INT(vf_device_parse("cpu", &d, &st), 0);
    VF_CHECK(d.kind == VF_DEV_CPU);
    VF_CHECK_EQ_INT(vf_device_parse("cuda", &d, &st), 0);
    VF_CHECK(d.kind == VF_DEV_CUDA && d.index == 0);
    VF_CHECK_EQ_INT(vf_device_parse("cuda:12", &d, &st), 0);
    VF_CHECK(d.kind == VF_DEV_CUDA && d.index == 12);
    vf_device_str(d, buf, sizeof buf);
    VF_CHECK_STR(buf, "cuda:12");
    vf_device_str((vf_device){VF_DEV_CPU, 0}, buf, sizeof buf);
    VF_CHECK_STR(buf, "cpu");
    const char *bad[] = {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cuda:99999", "", "cpu:0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        vf_status_clear(&st);
        VF_CHECK_EQ_INT(vf_device_parse(bad[i], &d, &st), VF_EINVAL);
        VF_CHECK_MSG(strstr(st.msg, bad[i]) != NULL && strstr(st.msg, "cuda"), "%s", st.msg);
    }
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_device_parse(NULL, &d, &st), VF_EINVAL);
}

VF_TEST(shape_strings)
{
    char buf[64];
    int64_t s[5] = {2, 16, 5, 32, 32};
    vf_shape_str(5, s, buf, sizeof buf);
    VF_CHECK_STR(buf, "(2,16,5,32,32)");
    vf_shape_str(0, s, buf, sizeof buf);
    VF_CHECK_STR(buf, "()");
    vf_shape_str(5, s, buf, 6); /* truncates, stays terminated */
    VF_CHECK_EQ_INT(strlen(buf), 5);
}

static int g_rel;
static void rel(void *data, void *hint)
{
    g_rel++;
    VF_CHECK(data == hint);
}

VF_TEST(lifetime_and_accounting)
{
    vf_status st = {0};
    vf_account *a = vf_account_new("test_tensor");
    vf_account *prev = vf_account_set_current(a);
    int64_t shape[3] = {4, 5, 6};
    vf_tensor *t = vf_tensor_zeros(VF_DTYPE_F32, 3, shape, &st);
    VF_CHECK(t && vf_tensor_numel(t) == 120 && vf_tensor_nbytes(t) == 480);
    VF_CHECK(((uintptr_t)t->data % 64) == 0);
    VF_CHECK(((float *)t->data)[119] == 0.0f);
    VF_CHECK_EQ_INT(vf_account_live(a), 480);
    vf_tensor *r = vf_tensor_ref(t);
    VF_CHECK(r == t);
    vf_tensor_unref(t);
    VF_CHECK_EQ_INT(vf_account_live(a), 480);
    vf_tensor_unref(r);
    VF_CHECK_EQ_INT(vf_account_live(a), 0);
    vf_tensor_unref(NULL);

    static float ext[6];
    int64_t s2[2] = {2, 3};
    g_rel = 0;
    t = vf_tensor_wrap(VF_DTYPE_F32, 2, s2, (vf_device){VF_DEV_CPU, 0}, ext, rel, ext, &st);
    vf_tensor_ref(t);
    vf_tensor_unref(t);
    VF_CHECK_EQ_INT(g_rel, 0);
    vf_tensor_unref(t);
    VF_CHECK_EQ_INT(g_rel, 1);
    t = vf_tensor_wrap(VF_DTYPE_U8, 2, s2, (vf_device){VF_DEV_CUDA, 1}, ext, NULL, NULL, &st);
    VF_CHECK(t && t->device.kind == VF_DEV_CUDA && t->device.index == 1);
    vf_tensor_unref(t);

    int64_t bad[2] = {3, -1};
    VF_CHECK(vf_tensor_new(VF_DTYPE_F32, 2, bad, &st) == NULL && st.code == VF_EINVAL);
    vf_status_clear(&st);
    int64_t huge[3] = {1ll << 40, 1ll << 40, 4};
    VF_CHECK(vf_tensor_new(VF_DTYPE_F32, 3, huge, &st) == NULL && strstr(st.msg, "too large"));
    vf_status_clear(&st);
    VF_CHECK(vf_tensor_new(VF_DTYPE_F32, 7, huge, &st) == NULL && st.code == VF_EINVAL);
    vf_account_set_current(prev);
}

VF_TEST(bf16)
{
    VF_CHECK_EQ_INT(vf_f32_to_bf16(1.0f), 0x3F80);
    VF_CHECK_EQ_INT(vf_f32_to_bf16(-2.0f), 0xC000);
    VF_CHECK_EQ_INT(vf_f32_to_bf16(fl(0x3F808000)), 0x3F80); /* tie: to even */
    VF_CHECK_EQ_INT(vf_f32_to_bf16(fl(0x3F818000)), 0x3F82); /* tie: to even (up) */
    VF_CHECK_EQ_INT(vf_f32_to_bf16(fl(0x3F808001)), 0x3F81); /* above the tie */
    VF_CHECK_EQ_INT(vf_f32_to_bf16(fl(0x7F7FFFFF)), 0x7F80); /* FLT_MAX rounds to inf */
    VF_CHECK(isnan(vf_bf16_to_f32(vf_f32_to_bf16(fl(0x7F800001))))); /* NaN stays NaN */
    /* every bf16 value survives bf16 -> f32 -> bf16 */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = vf_bf16_to_f32((uint16_t)h);
        VF_CHECK(bits(f) == h << 16);
        if (!isnan(f) && vf_f32_to_bf16(f) != h) {
            VF_CHECK_MSG(0, "bf16 %04x", h);
            break;
        }
    }
}

VF_TEST(f16_against_compiler)
{
    VF_CHECK_EQ_INT(vf_f32_to_f16(1.0f), 0x3C00);
    VF_CHECK_EQ_INT(vf_f32_to_f16(65504.0f), 0x7BFF);
    VF_CHECK_EQ_INT(vf_f32_to_f16(65520.0f), 0x7C00);
    VF_CHECK_EQ_INT(vf_f32_to_f16(5.9604644775390625e-8f), 0x0001);  /* 2^-24 */
    VF_CHECK_EQ_INT(vf_f32_to_f16(2.98023223876953125e-8f), 0x0000); /* 2^-25: tie to even 0 */
    VF_CHECK_EQ_INT(vf_f32_to_f16(-0.0f), 0x8000);
    VF_CHECK_NEAR(vf_f16_to_f32(0x3555), 0.333251953125, 0);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = vf_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            VF_CHECK(((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff));
            continue;
        }
        if (vf_f32_to_f16(f) != h) {
            VF_CHECK_MSG(0, "f16 %04x does not round trip", h);
            break;
        }
    }
#if defined(__FLT16_MAX__)
    /* Random f32 bit patterns around the f16 range and every rounding boundary. */
    uint64_t s = 88172645463325252ull;
    int bad = 0;
    for (int i = 0; i < 2000000 && bad < 5; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        uint32_t u = (uint32_t)s;
        if (i & 1) u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u)));
        float f = fl(u);
        _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        uint16_t mine = vf_f32_to_f16(f);
        if (isnan(f)) {
            VF_CHECK((mine & 0x7c00) == 0x7c00 && (mine & 0x3ff));
            continue;
        }
        if (mine != rb) {
            VF_CHECK_MSG(0, "f32 %08x: mine %04x, compiler %04x", u, mine, rb);
            bad++;
        }
        if (vf_f16_to_f32(rb) != (float)ref) {
            VF_CHECK_MSG(0, "f16 %04x to f32 disagrees with the compiler", rb);
            bad++;
        }
    }
#else
    fprintf(stderr, "no _Float16 in this compiler: reference comparison skipped\n");
#endif
}

int main(void) { return vf_test_main(); }
