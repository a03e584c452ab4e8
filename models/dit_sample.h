/* dit_sample.h — text- and image-to-video sampling with the DiT: flow-matching Euler steps with a
 * shifted schedule and classifier-free guidance, the denoising loop of diffusers'
 * WanPipeline driven by FlowMatchEulerDiscreteScheduler(shift = s).
 *
 * Schedule (the scheduler's set_timesteps with use_dynamic_shifting = False):
 *   shifted(σ) = s·σ / (1 + (s−1)·σ)
 *   σ_max = shifted(1), σ_min = shifted(1/1000)           (f32, the scheduler's training table)
 *   u_i = linspace(1000·σ_max, 1000·σ_min, N)_i / 1000     (f64, numpy's linspace)
 *   σ_i = f32(shifted(u_i)) for i < N, σ_N = 0
 * so the shift is applied twice to the end points: σ_{N−1} = shifted(shifted(0.001)).
 * Step i (x starts as the noise, f32 on the host):
 *   v = DiT(x, t = σ_i, positive text)      (the model sees the timestep σ_i·1000)
 *   guidance > 1: v = v_neg + g·(v − v_neg), v_neg = DiT(x, σ_i, negative text)
 *   x ← x + (σ_{i+1} − σ_i)·v               (σ difference in f32, as the scheduler)
 * As in WanPipeline, guidance ≤ 1 runs the positive prediction alone (no negative
 * forward, the negative text is not needed).
 *
 * Noise: element i of sample b is element i of the Philox normal stream
 * (seed, 0, b, VF_RNG_SAMPLE): a pure function of (seed, b, i), the same for any batch
 * size and on every backend; or the caller's buffer (e.g. another library's noise).
 */
#ifndef VF_DIT_SAMPLE_H
#define VF_DIT_SAMPLE_H

#include "models/dit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The low-noise expert of a two-expert model (Wan 2.2 A14B), diffusers' transformer_2:
 * a step whose timestep t = f32(σ_i·1000) is below f32(boundary·1000) runs this model with
 * `guidance` (guidance_scale_2); the others run the main (high-noise) model with the
 * config's guidance (guidance_scale). Whether the negative branch runs at all follows the
 * main guidance alone (WanPipeline.do_classifier_free_guidance: guidance_scale > 1), so
 * a low expert's guidance ≤ 1 still combines both branches when the main one's is > 1. */
typedef struct vf_dit_sample_expert {
    const vf_dit_layout *l; /* the low expert's layout: the main model's config (borrowed) */
    void *weights;          /* its flat weights in backend memory, act dtype (borrowed) */
    double boundary;        /* in [0, 1]: the t fraction after the shift where experts switch */
    double guidance;        /* its classifier-free guidance scale, finite, >= 0 */
} vf_dit_sample_expert;

typedef struct vf_dit_sample_cfg {
    int steps;          /* N ≥ 1 Euler steps (model calls per guidance branch) */
    double shift;       /* schedule shift s > 0 (Wan 2.1 T2V: 3.0 at 480p, 5.0 at 720p) */
    double guidance;    /* classifier-free guidance scale g ≥ 0 (WanPipeline default 5.0) */
    uint64_t seed;      /* initial noise when the caller gives none */
    int text_dim;       /* width of the embedding rows: must be the model's (text = embeddings) */
    const vf_dit_sample_expert *low; /* the low-noise expert (borrowed), or NULL: one model */
} vf_dit_sample_cfg;

/* One branch of the guidance (the positive or the negative text) for B samples: what the
 * model conditions on, embeddings (text = embeddings, Wan) or caption bytes (text = bytes,
 * the tiny presets), as in vf_dit_batch. */
typedef struct vf_dit_prompt {
    const float *emb;      /* (B, text_len, text_dim) host f32: rows at and past len[b] are
                              taken as zero (WanPipeline zero-pads to text_len) */
    const int32_t *tokens; /* (B, text_len) host byte tokens: positions at and past len[b]
                              are the pad token, as in training */
    const int32_t *len;    /* (B) real rows / tokens per sample, or NULL (all text_len) */
} vf_dit_prompt;

/* Image-to-video inputs, the same at every step and in both guidance branches, as
 * WanImageToVideoPipeline passes `condition` and `image_embeds` to both (models/dit_i2v.h
 * builds them). */
typedef struct vf_dit_sample_cond {
    const float *cond; /* (B, in_dim − z, T, H, W) host f32: first-frame mask ‖ y; the
                          channels after the noisy latent's (in_dim > z) */
    const float *img;  /* (B, img_len, img_dim) host f32 CLIP image features (img_dim > 0) */
} vf_dit_sample_cond;

/* Checks cfg against the model (steps ≥ 1, shift finite and > 0, guidance finite and
 * ≥ 0, for a model with text = embeddings text_dim equal to its embedding width, and a
 * low expert's boundary in [0, 1], guidance finite and ≥ 0, config equal to the main
 * model's). VF_EBADINPUT naming the field. */
int vf_dit_sample_check(const vf_dit_sample_cfg *cfg, const vf_dit_config *c, vf_status *st);

/* Whether step i (sigma σ_i of the schedule) runs the low-noise expert of boundary b. */
bool vf_dit_sample_is_low(float sigma, double boundary);

/* The schedule: sigmas[0..steps] (steps + 1 values, the last 0), bit for bit those of
 * FlowMatchEulerDiscreteScheduler(shift).set_timesteps(steps). */
void vf_dit_sample_sigmas(int steps, double shift, float *sigmas);

/* The initial noise of `dims` (B, z, T, H, W) for a seed, host f32 (see above). */
void vf_dit_sample_noise(const vf_dit_config *c, const vf_dit_dims *dims, uint64_t seed,
                         float *out);

/* Samples B latents with the whole model on backend be (all blocks in one partition).
 *   l        the model's layout (text = embeddings)
 *   weights  the flat weight vector (l->total elements) in backend memory, act dtype
 *   pos      the positive text: its embeddings or its byte tokens, as the model takes
 *   neg      the same for the negative text; needed when guidance > 1, else NULL is fine
 *   cond     the image-to-video inputs the model takes (in_dim > z: cond; img_dim > 0:
 *            img), or NULL for a text-to-video model
 *   noise    (B, z, T, H, W) host f32 initial noise, or NULL: drawn from cfg->seed
 *   out      (B, z, T, H, W) host f32: the final latent x at σ = 0
 * Host pointers are read during the call only. VF_EBADINPUT for bad cfg, a missing
 * negative text or image input the model takes; allocation and model errors as vf_dit_part_new / forward. */
int vf_dit_sample(vf_backend *be, const vf_dit_layout *l, void *weights,
                  const vf_dit_sample_cfg *cfg, const vf_dit_dims *dims, const vf_dit_prompt *pos,
                  const vf_dit_prompt *neg, const vf_dit_sample_cond *cond, const float *noise, float *out,
                  vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VF_DIT_SAMPLE_H */
