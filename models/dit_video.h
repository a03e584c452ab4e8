/* dit_video.h — a video from a DiT checkpoint: the checkpoint's config and weights, the
 * flow-matching sampler (models/dit_sample.h), the latents de-normalised and decoded by
 * the causal VAE decoder (models/vae.h), written as mp4 (+ PNG strip, first-frame PNG) by
 * formats/video_write.h. `vflow sample` and the `sample` stage share it.
 *
 * Use: vf_dit_video_open (cheap: config, geometry and normalisation checks, so bad input
 * fails before anything heavy), vf_dit_video_load (the DiT weights on the device, the VAE
 * decoder), then per prompt vf_dit_video_prompt (text embeddings) or vf_dit_video_caption
 * (caption bytes) + vf_dit_video_render. Bad input (a size the VAE or the patch does not
 * divide, embeddings of another width, a prompt of the kind the model does not take, an
 * unwritable output) is VF_EBADINPUT with a message naming it.
 *
 * Ownership: a vf_dit_video owns its weights, buffers, backend allocations and decoder;
 * the option strings are borrowed and must outlive it.
 */
#ifndef VF_MODELS_DIT_VIDEO_H
#define VF_MODELS_DIT_VIDEO_H

#include "formats/ckpt.h"
#include "models/dit.h"
#include "models/vae.h"
#include "runtime/vflow.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vf_dit_video_opts {
    int frames, width, height; /* the clip: 1 + tf·k frames, a size the VAE stride x patch divides */
    int steps, chunk;          /* Euler steps; latent frames per decoder call */
    double shift, guidance, fps;
    uint64_t seed, vae_seed;   /* the noise; the VAE's seeded init when `vae` is NULL */
    const char *vae;           /* VAE weights (file or diffusers dir), NULL = the preset's seeded init */
    const char *vae_preset;    /* "tiny" | "wan" | "wan2.2", NULL = by the latent channels (16: wan, 48: wan2.2) */
    const char *cache;         /* LMDB cache whose recorded latent normalisation applies, or NULL */
    const char *device;        /* "cpu" | "cuda:N" */
    const char *weights;       /* DiT weights instead of the checkpoint's model (a LoRA
                                  checkpoint's base otherwise: its config's lora.base, or
                                  the seeded init of train.seed), or NULL */
    const char *lora;          /* a LoRA file merged into the weights (instead of a LoRA
                                  checkpoint's own lora.safetensors), or NULL */
    const char *image;         /* image-to-video: the first frame (an image file of the video's
                                  size, formats/image_read.h), or NULL for a text-to-video model */
    const char *image_embeds;  /* Wan 2.1 I2V (img_dim > 0): the image's CLIP features (a
                                  safetensors file of one (img_len, img_dim) tensor), or NULL */
    const char *low;           /* the low-noise expert (Wan 2.2 A14B): a weights file or a checkpoint
                                  (its model), or NULL: a two-expert checkpoint's low_noise_model/,
                                  else one model */
    double boundary;           /* where the experts switch (t fraction after the shift); < 0 = the
                                  checkpoint's state.json "boundary" */
    double guidance2;          /* the low-noise expert's guidance; < 0 = guidance (as diffusers) */
    const char *flag_prefix;   /* how messages name the options: "--" (CLI) or "" (stage params) */
} vf_dit_video_opts;

/* The CLI's defaults: 17 frames, 256x256, 30 steps, chunk 1, shift 3, guidance 5, 16 fps, cpu,
 * boundary and guidance2 unset (-1). */
void vf_dit_video_opts_default(vf_dit_video_opts *o);

/* The checkpoint step dir: `path` itself when it holds state.json (verified), else its
 * newest complete step. VF_EBADINPUT when there is none. Caller owns ck (vf_ckpt_fini). */
int vf_dit_video_find_ckpt(const char *path, vf_ckpt *ck, vf_status *st);

/* The DiT config a checkpoint was trained with (state.json's model.* over the tiny
 * preset); VF_EBADINPUT for a checkpoint that is not a DiT's. An image-to-video model
 * (in_dim > z, img_dim > 0) is returned as such: vf_dit_video_open checks the inputs it
 * needs. */
int vf_dit_video_config(const vf_ckpt *ck, vf_dit_config *c, vf_status *st);

typedef struct vf_dit_video vf_dit_video;

/* The config, the clip's latent geometry and the latents' normalisation (cache, else the
 * VAE directory's config, else the preset's scalar affine); for an image-to-video model
 * the image (read, its size checked against the video's) and the CLIP features. Nothing
 * heavy. VF_EBADINPUT naming the option for an image given to a text-to-video model, an
 * image-to-video model without one, an image of another size, a Wan 2.1 I2V model
 * without image_embeds. */
int vf_dit_video_open(const vf_ckpt *ck, const vf_dit_video_opts *o, vf_dit_video **out, vf_status *st);
/* The DiT weights onto the device (read tensor by tensor through a host f32 copy), with
 * a LoRA adapter merged in (W += alpha/rank · B·A) when the checkpoint is a LoRA run's or
 * o.lora names one, the low-noise expert's beside them when there are two (a two-expert
 * checkpoint's high_noise_model/ is the main model), and the VAE decoder; for an
 * image-to-video model the VAE encoder
 * too, which encodes the image's conditioning (models/dit_i2v.h) and is freed. */
int vf_dit_video_load(vf_dit_video *v, vf_status *st);
/* The prompt's embeddings (a safetensors file of one (L, text_dim) tensor) and the
 * negative one's (NULL: the empty caption when guidance > 1). `what` names the input in
 * messages ("--prompt-embeds", "prompt"). */
int vf_dit_video_prompt(vf_dit_video *v, const char *pos, const char *pos_what, const char *neg,
                        const char *neg_what, vf_status *st);
/* For a model that conditions on caption bytes (the tiny presets): the captions as text,
 * tokenised as the latent reader does (the first text_len bytes, then pads); neg NULL or
 * "" is the empty caption. VF_EBADINPUT for a model with text embeddings, and
 * vf_dit_video_prompt's for a byte model. */
int vf_dit_video_caption(vf_dit_video *v, const char *pos, const char *neg, vf_status *st);
/* The model's text_len: caption bytes (or embedding rows) it reads. */
int vf_dit_video_text_len(const vf_dit_video *v);

typedef struct vf_dit_video_out {
    const char *mp4;    /* the video (written as .part, renamed when complete) */
    const char *png;    /* PNG strip of 4 frames first to last, or NULL */
    const char *first;  /* PNG of the first frame alone, or NULL */
    const char *latent; /* raw f32 latent before de-normalising, or NULL */
    const char *frames; /* raw RGB24 frames, or NULL */
} vf_dit_video_out;

typedef struct vf_dit_video_stats {
    int64_t frames;
    double sample_s, decode_s;
    char codec[32];
} vf_dit_video_stats;

/* Samples the latent for the current prompt, decodes and writes it. */
int vf_dit_video_render(vf_dit_video *v, const vf_dit_video_out *o, vf_dit_video_stats *s, vf_status *st);

const vf_dit_config *vf_dit_video_cfg(const vf_dit_video *v);
void vf_dit_video_free(vf_dit_video *v); /* NULL is fine */

/* Bytes a vf_dit_video of this model and clip holds (the `sample` stage's memory hook):
 * the weights on the device (elem = the device's act dtype size), the host f32 staging
 * while loading, the sampler's activations and workspace (one forward of the whole model,
 * block inputs kept), the decoder's vf_vae_dec_mem figures (vae_conv_workspace: its cuDNN workspace, counted on a
 * CUDA device), host frame buffers, the video encoder (an estimate). Also
 * checks the clip's geometry against the model (VF_EBADINPUT as vf_dit_video_open). */
typedef struct vf_dit_video_mem {
    int64_t weights, staging, acts, vae_weights, vae_caches, vae_workspace, vae_conv_workspace, vae_host, frames;
    int64_t encoder; /* the video encoder's frames and tables (an estimate) */
    int64_t cond;    /* image-to-video: the conditioning and image features, host and device */
    vf_vae_mem_info vae_enc; /* image-to-video: the VAE encoder of the image (freed before sampling) */
} vf_dit_video_mem;
int vf_dit_video_mem_of(const vf_dit_config *c, const vf_dit_video_opts *o, size_t elem, vf_dit_video_mem *m,
                        vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VF_MODELS_DIT_VIDEO_H */
