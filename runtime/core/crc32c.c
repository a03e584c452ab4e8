/* crc32c.c — CRC-32C (Castagnoli), the checksum of the item codec.
 *
 * zlib-style API: vf_crc32c(0, buf, n) is the CRC of buf, and feeding pieces in order
 * gives the same value as the whole. The SSE4.2 crc32 instruction is used when the CPU
 * has it (checked once with __builtin_cpu_supports); otherwise a slicing-by-8 table.
 * Both paths are tested against each other and against the RFC 3720 vectors.
 */
#include "runtime/core/item.h"

#include <stdatomic.h>
#include <string.h>

#define POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t g_table[8][256];
static atomic_int g_table_ready;

static void table_init(void)
{
    if (atomic_load_explicit(&g_table_ready, memory_order_acquire)) return;
    /* Idempotent: two threads racing here compute the same values. */
    static uint32_t t[8][256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (POLY & (0u - (c & 1)));
        t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    memcpy(g_table, t, sizeof t);
    atomic_store_explicit(&g_table_ready, 1, memory_order_release);
}

uint32_t vf_crc32c_sw(uint32_t crc, const void *data, size_t n)
{
    table_init();
    const unsigned char *p = data;
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c; /* little-endian: the low 4 bytes take the running CRC */
        c = g_table[7][w & 0xff] ^ g_table[6][(w >> 8) & 0xff] ^ g_table[5][(w >> 16) & 0xff] ^
            g_table[4][(w >> 24) & 0xff] ^ g_table[3][(w >> 32) & 0xff] ^ g_table[2][(w >> 40) & 0xff] ^
            g_table[1][(w >> 48) & 0xff] ^ g_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

/* GF(2) matrices of 32 rows: appending zero bits to a CRC is linear in it. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++) sq[n] = gf2_times(mat, mat[n]);
}

uint32_t vf_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    if (!len2) return crc1;
    /* crc1 shifted over len2 zero bytes (zlib's crc32_combine): the one-bit operator
     * squared to two and four bits, then to one byte, two, four, … applied where len2's
     * bits say */
    uint32_t even[32], odd[32];
    odd[0] = POLY;
    for (int n = 1; n < 32; n++) odd[n] = 1u << (n - 1);
    gf2_square(even, odd);
    gf2_square(odd, even);
    do {
        gf2_square(even, odd);
        if (len2 & 1) crc1 = gf2_times(even, crc1);
        len2 >>= 1;
        if (!len2) break;
        gf2_square(odd, even);
        if (len2 & 1) crc1 = gf2_times(odd, crc1);
        len2 >>= 1;
    } while (len2);
    return crc1 ^ crc2;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* The crc32 instruction has a 3-cycle latency and a 1-cycle throughput, so the long
 * path runs three independent CRCs over three adjacent blocks and then combines them:
 * shifting a CRC over n zero bytes is linear, done with 4 table lookups from a
 * GF(2) matrix for that n (Mark Adler's method, crc32c.c on Stack Overflow, 2013). */
#define LONG_BLK 8192
#define SHORT_BLK 256

static uint32_t g_long[4][256], g_short[4][256];
static atomic_int g_shift_ready;

/* The operator that appends len zero bytes to a CRC. */
static void zeros_op(uint32_t *even, size_t len)
{
    uint32_t odd[32], row = 1;
    odd[0] = POLY;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd); /* 2 zero bits */
    gf2_square(odd, even); /* 4 zero bits */
    /* each further squaring doubles the run of zeros: 1 byte, 2, 4, ... len */
    do {
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0) return;
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof odd);
}

static void zeros_table(uint32_t t[4][256], size_t len)
{
    uint32_t op[32];
    zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        t[0][n] = gf2_times(op, n);
        t[1][n] = gf2_times(op, n << 8);
        t[2][n] = gf2_times(op, n << 16);
        t[3][n] = gf2_times(op, n << 24);
    }
}

static void shift_init(void)
{
    if (atomic_load_explicit(&g_shift_ready, memory_order_acquire)) return;
    static uint32_t l[4][256], sh[4][256];
    zeros_table(l, LONG_BLK);
    zeros_table(sh, SHORT_BLK);
    memcpy(g_long, l, sizeof l);
    memcpy(g_short, sh, sizeof sh);
    atomic_store_explicit(&g_shift_ready, 1, memory_order_release);
}

static inline uint32_t shift(uint32_t t[4][256], uint32_t crc)
{
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

static inline uint64_t rd64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const void *data, size_t n)
{
    shift_init();
    const unsigned char *p = data;
    uint64_t c0 = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    while (n >= 3 * LONG_BLK) {
        uint64_t c1 = 0, c2 = 0;
        for (const unsigned char *end = p + LONG_BLK; p < end; p += 8) {
            c0 = _mm_crc32_u64(c0, rd64(p));
            c1 = _mm_crc32_u64(c1, rd64(p + LONG_BLK));
            c2 = _mm_crc32_u64(c2, rd64(p + 2 * LONG_BLK));
        }
        c0 = shift(g_long, (uint32_t)c0) ^ c1;
        c0 = shift(g_long, (uint32_t)c0) ^ c2;
        p += 2 * LONG_BLK;
        n -= 3 * LONG_BLK;
    }
    while (n >= 3 * SHORT_BLK) {
        uint64_t c1 = 0, c2 = 0;
        for (const unsigned char *end = p + SHORT_BLK; p < end; p += 8) {
            c0 = _mm_crc32_u64(c0, rd64(p));
            c1 = _mm_crc32_u64(c1, rd64(p + SHORT_BLK));
            c2 = _mm_crc32_u64(c2, rd64(p + 2 * SHORT_BLK));
        }
        c0 = shift(g_short, (uint32_t)c0) ^ c1;
        c0 = shift(g_short, (uint32_t)c0) ^ c2;
        p += 2 * SHORT_BLK;
        n -= 3 * SHORT_BLK;
    }
    while (n >= 8) {
        c0 = _mm_crc32_u64(c0, rd64(p));
        p += 8;
        n -= 8;
    }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}

bool vf_crc32c_hw_available(void) { return __builtin_cpu_supports("sse4.2"); }

uint32_t vf_crc32c_hw(uint32_t crc, const void *data, size_t n)
{
    return vf_crc32c_hw_available() ? crc_hw(crc, data, n) : vf_crc32c_sw(crc, data, n);
}

uint32_t vf_crc32c(uint32_t crc, const void *data, size_t n)
{
    static atomic_int have = -1; /* every thread computes the same answer */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        h = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h ? crc_hw(crc, data, n) : vf_crc32c_sw(crc, data, n);
}
#else
bool vf_crc32c_hw_available(void) { return false; }
uint32_t vf_crc32c_hw(uint32_t crc, const void *data, size_t n) { return vf_crc32c_sw(crc, data, n); }
uint32_t vf_crc32c(uint32_t crc, const void *data, size_t n) { return vf_crc32c_sw(crc, data, n); }
#endif
