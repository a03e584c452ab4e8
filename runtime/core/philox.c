/* philox.c — Philox4x32-10 and the keyed streams built on it (see philox.h).
 *
 * The round function and constants follow Random123's philox.h: multipliers
 * 0xD2511F53 / 0xCD9E8D57, Weyl key increments 0x9E3779B9 / 0xBB67AE85, the key bumped
 * between rounds. tests/unit/test_dit.c checks the known-answer vectors of Random123's
 * kat_vectors file.
 */
#include "runtime/philox.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t c[4], const uint32_t k[2])
{
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0];
    uint32_t n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void vf_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

void vf_rng_init(vf_rng *r, uint64_t seed, uint64_t step, uint64_t id, uint32_t purpose)
{
    const uint32_t ctr[4] = {purpose, (uint32_t)step, (uint32_t)(step >> 32),
                             0x67726676u /* "vfrg" */};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    vf_philox4x32_10(ctr, key, out);
    r->key[0] = out[0];
    r->key[1] = out[1];
    r->id[0] = (uint32_t)id;
    r->id[1] = (uint32_t)(id >> 32);
}

static inline void rng_block(const vf_rng *r, uint64_t j, uint32_t out[4])
{
    const uint32_t ctr[4] = {(uint32_t)j, (uint32_t)(j >> 32), r->id[0], r->id[1]};
    vf_philox4x32_10(ctr, r->key, out);
}

void vf_rng_u32(const vf_rng *r, uint64_t first, int64_t n, uint32_t *out)
{
    uint32_t w[4];
    uint64_t have = UINT64_MAX; /* block index held in w */
    for (int64_t k = 0; k < n; k++) {
        uint64_t i = first + (uint64_t)k;
        if (i / 4 != have) {
            have = i / 4;
            rng_block(r, have, w);
        }
        out[k] = w[i % 4];
    }
}

void vf_rng_uniform(const vf_rng *r, uint64_t first, int64_t n, float *out)
{
    uint32_t w[4];
    uint64_t have = UINT64_MAX;
    for (int64_t k = 0; k < n; k++) {
        uint64_t i = first + (uint64_t)k;
        if (i / 4 != have) {
            have = i / 4;
            rng_block(r, have, w);
        }
        out[k] = ((float)(w[i % 4] >> 8) + 0.5f) * (1.0f / 16777216.0f);
    }
}

/* Box–Muller on the two uniform pairs of one block. */
static void normal_block(const vf_rng *r, uint64_t j, double z[4])
{
    uint32_t w[4];
    rng_block(r, j, w);
    const double two_pi = 6.283185307179586476925286766559;
    for (int p = 0; p < 2; p++) {
        double u1 = ((double)w[2 * p] + 0.5) * (1.0 / 4294967296.0);     /* (0,1) */
        double u2 = ((double)w[2 * p + 1] + 0.5) * (1.0 / 4294967296.0);
        double rad = sqrt(-2.0 * log(u1));
        z[2 * p] = rad * cos(two_pi * u2);
        z[2 * p + 1] = rad * sin(two_pi * u2);
    }
}

double vf_rng_normal_at(const vf_rng *r, uint64_t i)
{
    double z[4];
    normal_block(r, i / 4, z);
    return z[i % 4];
}

void vf_rng_normal(const vf_rng *r, uint64_t first, int64_t n, float *out)
{
    double z[4];
    uint64_t have = UINT64_MAX;
    for (int64_t k = 0; k < n; k++) {
        uint64_t i = first + (uint64_t)k;
        if (i / 4 != have) {
            have = i / 4;
            normal_block(r, have, z);
        }
        out[k] = (float)z[i % 4];
    }
}

uint64_t vf_rng_hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}
