/* philox.h — counter-based random numbers (Philox4x32-10, Salmon et al. SC'11, Random123).
 *
 * Every random number vflow draws is a pure function of (seed, step, id, purpose,
 * index): no generator state advances, so the value does not depend on which thread,
 * partition, shard or micro-batch asks for it, nor on the order of the calls. That is
 * what makes noise and timesteps identical for any pipeline split (docs/TRAINING.md).
 *
 * A stream is keyed by (seed, step, purpose): its 64-bit Philox key is the first two
 * words of philox(ctr = {purpose, step_lo, step_hi, "vfrg"}, key = {seed_lo, seed_hi}),
 * a keyed hash of the three. Within the stream, element i of sample/tensor `id` comes
 * from the block at counter {i/4 lo, i/4 hi, id_lo, id_hi}: 2^64 blocks per id.
 *
 * Pure functions of their arguments; thread-safe; no allocation.
 */
#ifndef VF_PHILOX_H
#define VF_PHILOX_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a stream is for; part of the key, so two purposes never share numbers. */
enum vf_rng_purpose {
    VF_RNG_INIT = 1,      /* parameter initialisation (id = tensor index) */
    VF_RNG_NOISE = 2,     /* rectified-flow noise (id = sample id) */
    VF_RNG_TIMESTEP = 3,  /* rectified-flow timestep (id = sample id) */
    VF_RNG_SHUFFLE = 4,   /* data order (id = epoch) */
    VF_RNG_SAMPLE = 5,    /* initial noise of sampling (id = sample index) */
    VF_RNG_LORA = 6,      /* LoRA adapter initialisation (id = adapter tensor index) */
    VF_RNG_TEST = 99,     /* tests */
};

/* One Philox4x32-10 block: out = philox(ctr, key). out may alias ctr. */
void vf_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* A stream: a derived key and the id half of the counter. Plain value; copy freely. */
typedef struct vf_rng {
    uint32_t key[2];
    uint32_t id[2];
} vf_rng;

/* Stream for (seed, step, id, purpose). */
void vf_rng_init(vf_rng *r, uint64_t seed, uint64_t step, uint64_t id, uint32_t purpose);
/* Elements [first, first+n) of the stream as raw 32-bit words (word i = block i/4,
 * lane i%4). */
void vf_rng_u32(const vf_rng *r, uint64_t first, int64_t n, uint32_t *out);
/* Uniform in the open interval (0, 1): ((u >> 8) + 0.5) / 2^24, element i from word i. */
void vf_rng_uniform(const vf_rng *r, uint64_t first, int64_t n, float *out);
/* Standard normal by Box–Muller in double precision: block j gives elements 4j..4j+3
 * from the uniform pairs (w0, w1) and (w2, w3) (cos then sin of each pair). */
void vf_rng_normal(const vf_rng *r, uint64_t first, int64_t n, float *out);
/* Element i of the normal stream alone (same value vf_rng_normal writes). */
double vf_rng_normal_at(const vf_rng *r, uint64_t i);

/* 64-bit FNV-1a of a string: a stable numeric id for string item ids. */
uint64_t vf_rng_hash_str(const char *s);

#ifdef __cplusplus
}
#endif
#endif /* VF_PHILOX_H */
