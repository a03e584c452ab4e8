/* fp8.c — FP8 E4M3 (torch's float8_e4m3fn) conversion and the per-tensor quantiser that
 * turns a frozen base weight into FP8 at load.
 *
 * E4M3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 is
 * NaN; the largest finite value is 448, the smallest subnormal 2⁻⁹. The conversion from f32
 * rounds to nearest even and saturates finite values past ±448 to ±448. torch's cast
 * rounds the same way but gives NaN from 464 up; the quantiser divides by absmax/448
 * first, so what it converts stays within ±448 (up to the division's rounding, which
 * rounds back to 448 either way), and there the two agree bit for bit.
 */
#include "runtime/vflow.h"

#include <math.h>
#include <string.h>

uint8_t vf_f32_to_e4m3(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint8_t sign = (uint8_t)((x >> 24) & 0x80);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7f;   /* NaN */
    if (ax >= 0x43e00000u) return sign | 0x7e;  /* ≥ 448 (infinity too): saturate */
    if (ax < 0x3c800000u) {                     /* below 2⁻⁶: a multiple of 2⁻⁹ or zero */
        float a;
        memcpy(&a, &ax, 4);
        /* a·2⁹ is exact (a power-of-two scale of a normal f32 well above f32's own
         * subnormals, or an f32 subnormal that rounds to 0 either way); rintf rounds to
         * nearest even under the default rounding mode. 8 steps is the smallest normal,
         * whose encoding 0x08 the sum also gives. */
        return sign | (uint8_t)rintf(a * 512.0f);
    }
    /* Normal: keep 3 of f32's 23 mantissa bits, to nearest even; a carry moves into the
     * exponent as it should. Then rebias the exponent from 127 to 7. */
    uint32_t r = ax + 0x7ffffu + ((ax >> 20) & 1u);
    uint32_t q = (r >> 20) - ((127u - 7u) << 3);
    return sign | (uint8_t)(q > 0x7eu ? 0x7eu : q);
}

float vf_e4m3_to_f32(uint8_t x)
{
    const int s = x >> 7, e = (x >> 3) & 15, m = x & 7;
    if (e == 15 && m == 7) return NAN;
    const float v = e ? ldexpf(1.0f + (float)m / 8.0f, e - 7) : ldexpf((float)m / 8.0f, -6);
    return s ? -v : v;
}

float vf_fp8_scale(const float *src, int64_t n)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(src[i]);
        if (a > amax) amax = a;
    }
    /* An all-zero tensor keeps scale 1: its bytes are zeros whatever the scale. */
    return amax > 0.0f ? amax / 448.0f : 1.0f;
}

void vf_fp8_quantise(const float *src, int64_t n, float scale, uint8_t *dst)
{
    for (int64_t i = 0; i < n; i++) dst[i] = vf_f32_to_e4m3(src[i] / scale);
}

void vf_fp8_dequantise(const uint8_t *src, int64_t n, float scale, float *dst)
{
    for (int64_t i = 0; i < n; i++) dst[i] = vf_e4m3_to_f32(src[i]) * scale;
}
