/* test_fp8.c — the FP8 E4M3 conversion and the per-tensor quantiser (runtime/core/fp8.c)
 * against the format's definition: every code decodes to the value its bits say and
 * encodes back to itself; every midpoint between two neighbouring codes rounds to the
 * even one and every value just off it to the nearer; values past ±448 saturate. The
 * bit-for-bit comparison with torch's float8_e4m3fn cast is
 * tests/reference/test_fp8_torch.py. */
#include "tests/vf_test.h"
#include "runtime/vflow.h"

#include <math.h>
#include <stdint.h>

/* The value of code x from its fields, in f64: (−1)^s · 2^(e−7) · (1 + m/8), or
 * 2^−6 · m/8 for e = 0. */
static double e4m3_def(int x)
{
    const int s = x >> 7, e = (x >> 3) & 15, m = x & 7;
    const double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return s ? -v : v;
}

VF_TEST(fp8_codes)
{
    for (int x = 0; x < 256; x++) {
        const float v = vf_e4m3_to_f32((uint8_t)x);
        if ((x & 0x7f) == 0x7f) {
            VF_CHECK_MSG(isnan(v), "code 0x%02x is NaN", x);
            continue;
        }
        VF_CHECK_MSG((double)v == e4m3_def(x), "code 0x%02x decodes to %g", x, (double)v);
        VF_CHECK_MSG(vf_f32_to_e4m3(v) == x, "code 0x%02x encodes back to 0x%02x", x, vf_f32_to_e4m3(v));
    }
    VF_CHECK(vf_e4m3_to_f32(0x7e) == 448.0f && vf_e4m3_to_f32(0x01) == ldexpf(1.0f, -9));
    VF_CHECK(vf_e4m3_to_f32(0x38) == 1.0f && vf_e4m3_to_f32(0x08) == ldexpf(1.0f, -6));
}

VF_TEST(fp8_rounding)
{
    for (int k = 0; k < 0x7e; k++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            const double lo = fabs(e4m3_def(k)), hi = fabs(e4m3_def(k + 1));
            const float mid = (float)((lo + hi) / 2); /* exact: 5 significant bits at most */
            const float s = sgn ? -1.0f : 1.0f;
            const int even = (k & 1) ? k + 1 : k, sb = sgn << 7;
            VF_CHECK_MSG(vf_f32_to_e4m3(s * mid) == (sb | even), "midpoint after 0x%02x (sign %d)", k, sgn);
            VF_CHECK_MSG(vf_f32_to_e4m3(s * nextafterf(mid, INFINITY)) == (sb | (k + 1)), "above midpoint 0x%02x", k);
            VF_CHECK_MSG(vf_f32_to_e4m3(s * nextafterf(mid, 0.0f)) == (sb | k), "below midpoint 0x%02x", k);
        }
    }
    VF_CHECK(vf_f32_to_e4m3(448.0f) == 0x7e && vf_f32_to_e4m3(470.0f) == 0x7e);
    VF_CHECK(vf_f32_to_e4m3(1e30f) == 0x7e && vf_f32_to_e4m3(INFINITY) == 0x7e);
    VF_CHECK(vf_f32_to_e4m3(-1e30f) == 0xfe && vf_f32_to_e4m3(NAN) == 0x7f);
    VF_CHECK(vf_f32_to_e4m3(ldexpf(1.0f, -11)) == 0x00);  /* a quarter step: to zero */
    VF_CHECK(vf_f32_to_e4m3(-0.0f) == 0x80);
}

VF_TEST(fp8_quantiser)
{
    const float w[6] = {0.5f, -3.5f, 0.0f, 1e-4f, 2.0f, -0.25f};
    uint8_t q[6];
    const float sc = vf_fp8_scale(w, 6);
    VF_CHECK(sc == 3.5f / 448.0f);
    vf_fp8_quantise(w, 6, sc, q);
    VF_CHECK(q[1] == 0xfe && q[2] == 0x00); /* the absmax element is ±448 */
    float back[6];
    vf_fp8_dequantise(q, 6, sc, back);
    for (int i = 0; i < 6; i++) {
        VF_CHECK(back[i] == vf_e4m3_to_f32(q[i]) * sc);
        VF_CHECK(q[i] == vf_f32_to_e4m3(w[i] / sc));
    }
    const float z[3] = {0, 0, 0};
    VF_CHECK(vf_fp8_scale(z, 3) == 1.0f);
}

int main(void) { return vf_test_main(); }
