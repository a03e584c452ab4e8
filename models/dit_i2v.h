/* dit_i2v.h — the image-to-video inputs of sampling, built as diffusers'
 * WanImageToVideoPipeline builds them (prepare_latents, encode_image's output):
 *
 *   y     the VAE encode (posterior mode) of [the image, zeros for the other T − 1
 *         frames], in [−1, 1] as x/127.5 − 1, normalised per channel like the latents
 *         ((y − mean)/std); its own encode, since zeros do not encode to zero latents
 *   mask  m = in_dim − 2·z channels (Wan: 4, the VAE's time factor): 1 on latent frame 0,
 *         0 on every later one (the pixel mask [1, 0, …] with frame 0 repeated m times,
 *         viewed as (T', m))
 *   cond  (in_dim − z, T', h, w) = mask ‖ y, what the model takes after the noisy latent
 *   img   the CLIP features of a Wan 2.1 I2V model (img_dim > 0): (img_len, img_dim) from a
 *         file tools/encode_images.py writes, since vflow has no CLIP model
 * The image must have the video's size: the pipeline resizes any image to (width,
 * height) without keeping its aspect ratio, which vflow does not do silently.
 */
#ifndef VF_MODELS_DIT_I2V_H
#define VF_MODELS_DIT_I2V_H

#include "models/dit.h"
#include "models/vae.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills cond (in_dim − z, T', H/s, W/s) host f32 (caller-owned) for one image: rgb (H, W,
 * 3) u8 (borrowed, read during the call), T pixel frames (1 + tf·k), the encoder model m
 * (vf_vae_new; borrowed) with its latents' normalisation mean/std (z values each). The
 * encoder runs `chunk` pixel frames per call. VF_EUSAGE when in_dim leaves no mask
 * channels; the encoder's errors otherwise. */
int vf_dit_i2v_cond(const vf_dit_config *c, vf_vae *m, int chunk, const uint8_t *rgb, int W, int H, int64_t T,
                    const float *mean, const float *std, float *cond, vf_status *st);

/* Reads the CLIP features of path (one float tensor (img_len, img_dim), e.g. the
 * "clip_emb" tools/encode_images.py writes) into out (img_len·img_dim f32, caller-owned).
 * VF_EBADINPUT "<what> PATH: …" for a missing file or another shape. */
int vf_dit_i2v_clip_read(const vf_dit_config *c, const char *path, const char *what, float *out, vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VF_MODELS_DIT_I2V_H */
