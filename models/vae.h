/* vae.h — the causal 3D VAE (Wan-2.1 style): encoder and decoder, their streaming APIs.
 *
 * Architecture, identical in structure, tensor names and shapes to the
 * encoder half of Wan-2.1's `WanVAE_` (wan/modules/vae.py), so a Wan-2.1 VAE state dict
 * saved as safetensors loads directly into the `wan` preset:
 *
 *   x (B, 3, T, H, W) in [-1, 1]
 *   encoder.conv1            causal conv 3x3x3, 3 -> d0
 *   encoder.downsamples.k    per level i (dims d_i = dim * dim_mult[i]):
 *                              num_res_blocks ResidualBlocks (d_{i-1} -> d_i, then d_i -> d_i)
 *                              then, except after the last level, a Resample:
 *                              spatial: zero pad (right 1, bottom 1) + conv 3x3 stride 2
 *                              temporal (if temporal_downsample[i]): causal conv 3x1x1
 *                              stride 2 in time, frame 0 passing alone (see below)
 *   encoder.middle.{0,1,2}   ResidualBlock, spatial self-attention (one head, per frame),
 *                            ResidualBlock
 *   encoder.head.{0,2}       RMSNorm, SiLU, causal conv 3x3x3 -> 2z
 *   conv1                    conv 1x1x1, 2z -> 2z; channels [0, z) = mean, [z, 2z) = logvar
 *
 *   ResidualBlock(in, out): y = conv(silu(norm(conv(silu(norm(x)))))) + shortcut(x),
 *   shortcut = conv 1x1x1 when in != out, identity otherwise.
 *   norm = x·γ/sqrt(mean_c x² + eps), over channels per position (Wan's RMS_norm,
 *   F.normalize(x)·sqrt(C)·γ, is this with eps → 0; the presets use eps = 1e-12).
 *
 * Causality. Nothing mixes frames except causal convolutions: every 3x3x3 conv sees the
 * two frames before its current frame (zeros before the clip starts); the temporal
 * downsample emits y_0 = x_0 and y_j = conv(x_{2j-2}, x_{2j-1}, x_{2j}). A clip of
 * T = 1 + 4k frames (for the 4x temporal presets) gives T' = 1 + k latent frames. This is
 * exactly what Wan's encode computes (it feeds frame 0 alone, then groups of 4); here the
 * streaming state makes ANY chunking give the same result: each causal conv keeps a cache
 * of its last two input frames, each temporal downsample keeps its one or two pending
 * frames, so encoding chunk by chunk equals encoding whole while the workspace depends
 * only on (micro_batch, chunk, H, W).
 *
 * Tensor names and shapes (safetensors, F32/BF16/F16/F64 accepted on load; Cin/Cout of
 * the block, C of the level, Z = z_dim):
 *   encoder.conv1.weight                      (d0, 3, 3, 3, 3)      .bias (d0)
 *   encoder.downsamples.K.residual.0.gamma    (Cin, 1, 1, 1)
 *   encoder.downsamples.K.residual.2.weight   (Cout, Cin, 3, 3, 3)  .bias (Cout)
 *   encoder.downsamples.K.residual.3.gamma    (Cout, 1, 1, 1)
 *   encoder.downsamples.K.residual.6.weight   (Cout, Cout, 3, 3, 3) .bias (Cout)
 *   encoder.downsamples.K.shortcut.weight     (Cout, Cin, 1, 1, 1)  .bias (Cout)  [Cin != Cout]
 *   encoder.downsamples.K.resample.1.weight   (C, C, 3, 3)          .bias (C)
 *   encoder.downsamples.K.time_conv.weight    (C, C, 3, 1, 1)       .bias (C)  [temporal]
 *   encoder.middle.0.*, encoder.middle.2.*    ResidualBlock (C -> C) as above
 *   encoder.middle.1.norm.gamma               (C, 1, 1)
 *   encoder.middle.1.to_qkv.weight            (3C, C, 1, 1)         .bias (3C)
 *   encoder.middle.1.proj.weight              (C, C, 1, 1)          .bias (C)
 *   encoder.head.0.gamma                      (C, 1, 1, 1)
 *   encoder.head.2.weight                     (2Z, C, 3, 3, 3)      .bias (2Z)
 *   conv1.weight                              (2Z, 2Z, 1, 1, 1)     .bias (2Z)
 * K counts the entries of `downsamples` in order (residual blocks and resamples share
 * the index space, as in Wan's nn.Sequential). The flat parameter buffer holds the
 * tensors in exactly this order (vf_vae_param_at lists them).
 *
 * Memory. Weights: one flat buffer. Encoder state (vf_vae_enc): per-layer causal caches
 * (2 frames each) and a workspace of ping-pong activation buffers sized for the worst
 * chunk; both from be->alloc, so a stage's account sees them. vf_vae_mem computes
 * the same numbers without allocating, for a stage's `memory` hook.
 *
 * The decoder (vf_vae_dec, vae_dec.c) is a model of its own over the same config:
 * vf_vae_dec_model_new builds the decoder's parameter table (Wan's Decoder3d and conv2,
 * listed below), which loads, saves, inits and hashes through the same functions.
 *
 *   z (B, Z, T', h, w), de-normalised (vf_vae_denormalise)
 *   conv2                    conv 1x1x1, Z -> Z (diffusers' post_quant_conv)
 *   decoder.conv1            causal conv 3x3x3, Z -> C (C = dim * dim_mult[L-1])
 *   decoder.middle.{0,1,2}   ResidualBlock, attention, ResidualBlock (as the encoder's)
 *   decoder.upsamples.K      per level i = 0..L-1 (out = dim * dim_mult[L-1-i]):
 *                              num_res_blocks + 1 ResidualBlocks (in -> out, out -> out)
 *                              then, except after the last level, a Resample:
 *                              temporal (if temporal_downsample[L-2-i]): causal conv 3x1x1
 *                              out -> 2·out, the halves interleaved as frames 2t, 2t+1;
 *                              frame 0 of the stream passes alone (see below)
 *                              spatial: nearest 2x, conv 3x3 (padding 1), out -> out/2
 *   decoder.head.{0,2}       RMSNorm, SiLU, causal conv 3x3x3 -> 3; output clamped to [-1, 1]
 *
 * Decoder tensors (C the width where they sit):
 *   conv2.weight                              (Z, Z, 1, 1, 1)       .bias (Z)
 *   decoder.conv1.weight                      (C, Z, 3, 3, 3)       .bias (C)
 *   decoder.middle.*                          as encoder.middle.*
 *   decoder.upsamples.K.residual.*, .shortcut as the encoder's residual blocks
 *   decoder.upsamples.K.time_conv.weight      (2C, C, 3, 1, 1)      .bias (2C)  [temporal]
 *   decoder.upsamples.K.resample.1.weight     (C/2, C, 3, 3)        .bias (C/2)
 *   decoder.head.0.gamma                      (C, 1, 1, 1)
 *   decoder.head.2.weight                     (3, C, 3, 3, 3)       .bias (3)
 * diffusers: conv2 -> post_quant_conv, decoder.upsamples.K -> decoder.up_blocks.i.resnets.j
 * or .upsamplers.0 (K = i·(num_res_blocks + 2) + j), the rest as the encoder's.
 *
 * Wan 2.2 (residual = 1, patch = 2, dec_dim; wan/modules/vae2_2.py, diffusers'
 * AutoencoderKLWan(is_residual=True, patch_size=2)). The same layers, arranged per level:
 *   patchify 2: pixel (c, y, x) -> channel c·4 + (x mod 2)·2 + (y mod 2) at (y/2, x/2), so
 *     the network sees 12 channels at half the size (stride 4x16x16); the decoder's 12
 *     output channels fold back the same way, then the clamp.
 *   encoder level i (in -> out): its residual blocks and downsamples as above, plus a
 *     shortcut from the level's input: the (ft, 2, 2) neighbourhood of every output
 *     position unfolded into channels (ft = 2 at a temporal downsample, frame 0 paired with
 *     a zero frame before it; the last level: 1, 1, 1) and averaged in groups of
 *     in·factor/out consecutive channels (AvgDown3D).
 *   decoder level i (in -> out, the last level without): num_res_blocks + 1 residual
 *     blocks, the temporal upsample, the spatial upsample out -> out, plus a shortcut from
 *     the level's input: each channel repeated out·factor/in times and folded into the
 *     (ft, 2, 2) neighbourhood (DupUp3D; frame 0 of the stream keeps its last sub-frame).
 *   widths: encoder dim·dim_mult[i] (in of level 0: dim); decoder dec_dim·dim_mult[L-1-i].
 *   names nest per level (K = the level, j = the entry within it):
 *     encoder.downsamples.K.downsamples.j.{residual.*, shortcut.*}  residual block j
 *     encoder.downsamples.K.downsamples.R.{resample.1, time_conv}.*  (R = num_res_blocks)
 *     decoder.upsamples.K.upsamples.j.*                               residual block j
 *     decoder.upsamples.K.upsamples.(R+1).{time_conv, resample.1}.*   resample.1: (C, C, 3, 3)
 *   diffusers: encoder.down_blocks.K.{resnets.j, downsampler}, decoder.up_blocks.K.{resnets.j,
 *   upsampler}, the rest as Wan 2.1's. The shortcuts hold no weights.
 *
 * Decoding is causal like encoding: latent frame 0 gives 1 frame, every later one 4 (for
 * the 4x presets), T' latent frames give 1 + 4(T'-1). Wan decodes one latent frame per
 * call with per-layer caches; here every causal conv keeps its last two input frames and
 * every temporal upsample keeps whether frame 0 went through, so any chunking gives the
 * same frames as decoding whole, with a workspace set by the chunk.
 */
#ifndef VF_VAE_H
#define VF_VAE_H

#include "kernels/ops.h"
#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VF_VAE_MAX_LEVELS 6
#define VF_VAE_NAME_MAX 80

typedef struct vf_vae_config {
    int dim;                                 /* base width (Wan-2.1: 96) */
    int nlevels;                             /* entries of dim_mult (Wan: 4) */
    int dim_mult[VF_VAE_MAX_LEVELS];         /* Wan: 1 2 4 4 */
    int num_res_blocks;                      /* per level (Wan: 2) */
    int temporal_downsample[VF_VAE_MAX_LEVELS - 1]; /* 0/1 after level i (Wan: 0 1 1) */
    int z_dim;                               /* latent channels (Wan: 16) */
    float eps;                               /* RMSNorm eps */
    float scale, shift;                      /* latent affine: (mean - shift) * scale */
    /* Wan 2.2's VAE (vf_vae_config_wan22); 0, 0 (or 1), 0 give Wan 2.1's structure */
    int residual;                            /* 1: residual levels with the avg/dup shortcuts */
    int patch;                               /* pixel patchify p (0 = 1): 3·p² channels in and out */
    int dec_dim;                             /* decoder base width; 0: dim */
} vf_vae_config;

/* Wan-2.1's encoder widths (dim 96, mult 1 2 4 4, 2 res blocks, temporal 0 1 1, z 16). */
void vf_vae_config_wan(vf_vae_config *c);
/* Small preset for tests and CPU runs (dim 8, mult 1 2 2 2, 1 res block, z 4). */
void vf_vae_config_tiny(vf_vae_config *c);
/* Wan 2.2's VAE (TI2V-5B): dim 160, decoder 256, mult 1 2 4 4, 2 res blocks, temporal
 * 0 1 1, z 48, residual levels, patchify 2 (stride 4x16x16). */
void vf_vae_config_wan22(vf_vae_config *c);
/* The decoder's base width (dec_dim, or dim when 0) and the input/output channels of
 * the network (3·patch²). */
int vf_vae_dec_base(const vf_vae_config *c);
int vf_vae_patch(const vf_vae_config *c);
int vf_vae_io_channels(const vf_vae_config *c);
/* VF_EINVAL with a message naming the bad field. */
int vf_vae_config_check(const vf_vae_config *c, vf_status *st);
/* Temporal (2^#temporal) and spatial (patch·2^(nlevels-1)) compression factors. */
int vf_vae_time_factor(const vf_vae_config *c);
int vf_vae_space_factor(const vf_vae_config *c);
/* Latent frames for a clip of T frames: 1 + (T-1)/tf, or -1 if T is not 1 + k·tf. */
int64_t vf_vae_latent_frames(const vf_vae_config *c, int64_t T);
/* Number of encoder parameters (elements of the flat buffer) for cfg; *max_tensor (if
 * not NULL) gets the element count of the largest tensor. */
int64_t vf_vae_count_params(const vf_vae_config *c, int64_t *max_tensor);
/* The same for the decoder (decoder.* and conv2). */
int64_t vf_vae_dec_count_params(const vf_vae_config *c, int64_t *max_tensor);
/* Whether decoder level i (0 = the deepest) ends with a temporal upsample: the mirror of
 * the encoder's temporal_downsample[L-2-i]. */
int vf_vae_dec_temporal(const vf_vae_config *c, int i);
/* VF_EINVAL unless every residual level's shortcut groups its channels evenly (Wan
 * 2.2's AvgDown3D / DupUp3D); 0 for configs without residual levels. */
int vf_vae_residual_check(const vf_vae_config *c, vf_status *st);
/* Canonical text of the config (hashed with the weights); writes at most n bytes. */
void vf_vae_config_str(const vf_vae_config *c, char *buf, size_t n);

/* One parameter tensor of the flat buffer. */
typedef struct vf_vae_param {
    char name[VF_VAE_NAME_MAX];
    int ndim;
    int64_t shape[5];
    int64_t numel;
    int64_t offset;   /* in elements from the start of the flat buffer */
} vf_vae_param;

typedef struct vf_vae vf_vae;

/* New model for cfg on backend be (borrowed, must outlive the model): builds the
 * parameter table and allocates the flat weights (uninitialised) through be->alloc.
 * Caller owns *out (vf_vae_free). Initialise with vf_vae_init_seeded or vf_vae_load. */
int vf_vae_new(const vf_vae_config *cfg, vf_backend *be, vf_vae **out, vf_status *st);
/* The decoder's model: the same, over the decoder's parameter table (decoder.*, conv2);
 * VF_EINVAL when a level's width is odd (the spatial upsample halves it). */
int vf_vae_dec_model_new(const vf_vae_config *cfg, vf_backend *be, vf_vae **out,
                         vf_status *st);
int vf_vae_is_decoder(const vf_vae *m);
void vf_vae_free(vf_vae *m); /* NULL is fine */
const vf_vae_config *vf_vae_cfg(const vf_vae *m);
vf_backend *vf_vae_backend(const vf_vae *m);
int vf_vae_nparams(const vf_vae *m);
const vf_vae_param *vf_vae_param_at(const vf_vae *m, int i); /* borrowed */
int64_t vf_vae_numel(const vf_vae *m);   /* total parameter count */
void *vf_vae_weights(vf_vae *m);         /* flat buffer in be->act_dtype (borrowed) */

/* Deterministic init from seed: element e of parameter p gets a value that is a pure
 * function of (seed, p, e) (splitmix64), so it does not depend on the backend or on
 * how the work is split. Conv/linear weights and biases ~ U(-1/sqrt(fan_in), +), norm
 * gains 1. */
int vf_vae_init_seeded(vf_vae *m, uint64_t seed, vf_status *st);
/* Loads every tensor of the table from `path`: a safetensors file in the original names
 * above (Wan's, ComfyUI's wan_2.1_vae.safetensors) or in diffusers' AutoencoderKLWan
 * names (recognised by "encoder.conv_in.weight"; vf_vae_diffusers_name), either under a
 * common prefix (vf_vae_file_naming), or a diffusers
 * model directory (config.json, checked against the model's config, and
 * diffusion_pytorch_model.safetensors). Names and shapes checked (errors name the file
 * and tensor as the file spells it); tensors of the other half are ignored. */
int vf_vae_load(vf_vae *m, const char *path, vf_status *st);
/* How a weights file names the VAE, from where its first convolution is: diffusers'
 * names ({en,de}coder.conv_in.weight) or the original ones ({en,de}coder.conv1.weight), under a
 * common prefix ("" or ending in '.', e.g. "first_stage_model." of a combined
 * checkpoint) copied into prefix (n bytes). */
struct vf_st_file;
void vf_vae_file_naming(const struct vf_st_file *f, char *prefix, size_t n, bool *diffusers);
/* diffusers' name (AutoencoderKLWan state dict) of the original name `name` of the
 * encoder's or the decoder's table for config c. */
void vf_vae_diffusers_name(const vf_vae_config *c, const char *name, char *out, size_t n);
/* The safetensors file behind `path` (itself, or a diffusers directory's weights after
 * its config.json matched c: VF_EBADINPUT naming the field otherwise). */
int vf_vae_weights_file(const char *path, const vf_vae_config *c, char *file, size_t n, vf_status *st);
/* Per-channel latent normalisation recorded in a diffusers directory's config.json
 * (latents_mean, latents_std: z values each) into mean/std; *found = false when path
 * is not a directory or records none. VF_EBADINPUT naming the file and key when a list
 * is not z numbers. */
int vf_vae_config_norm(const char *path, int z, float *mean, float *std, bool *found, vf_status *st);
/* Wan's per-channel latent normalisation, in place on one clip's latent (z, plane):
 * lat[c][i] = (lat[c][i] - mean[c]) / std[c]. */
void vf_vae_normalise(float *lat, int64_t z, int64_t plane, const float *mean, const float *std);
/* Its inverse, before decoding: lat[c][i] = lat[c][i] * std[c] + mean[c]. */
void vf_vae_denormalise(float *lat, int64_t z, int64_t plane, const float *mean,
                        const float *std);
/* Writes the weights as an F32 safetensors file (metadata "vflow.vae" = config text). */
int vf_vae_save(vf_vae *m, const char *path, vf_status *st);
/* 32 hex chars: hash of the config text (latent scale/shift included: they change the
 * latents a stage emits) and every tensor's name, shape and f32 values, set by init/load
 * (the same weights give the same hash on every backend). Borrowed. */
const char *vf_vae_hash(const vf_vae *m);

/* ------------------------------------------------------------------ streaming encoder */

typedef struct vf_vae_enc vf_vae_enc;

/* Bytes the encoder needs, for the memory hook, with `elem` bytes per element on the
 * backend (4 for f32, 2 for bf16): on the backend's device the weights, the causal
 * caches and the chunk workspace (work buffers, attention statistics, the chunk's
 * input) for up to max_batch clips, `chunk` frames per call, frames of H x W; on the
 * host the f32 staging (the larger of the u8 conversion buffer of the encoder and the
 * one-tensor buffer used while loading weights; never both at once) and the
 * bookkeeping (parameter table, layer states). None of it
 * depends on the clip length. conv_workspace: what the CUDA backend lets cuDNN take as
 * workspace for the largest of the model's convolutions (vf_conv3d_workspace_bound; it
 * holds one per device, grown to the largest a graph asks for): a stage on a CUDA device
 * counts it, one on the CPU does not. */
typedef struct vf_vae_mem_info {
    int64_t weights;
    int64_t caches;
    int64_t workspace;
    int64_t host;
    int64_t conv_workspace;
} vf_vae_mem_info;
int vf_vae_mem(const vf_vae_config *c, size_t elem, int max_batch, int chunk, int H, int W,
               vf_vae_mem_info *out, vf_status *st);

/* The shapes of the encoder's convolutions for one chunk (vf_vae_mem's geometry, each at
 * the most frames a chunk can bring it), in the order they run: the first `cap` into out
 * (may be NULL with cap 0). Returns how many there are, or a negative code (st set). */
int vf_vae_conv_shapes(const vf_vae_config *c, int max_batch, int chunk, int H, int W,
                       vf_conv3d_shape *out, int cap, vf_status *st);

/* New encoder over model m (borrowed; must outlive it) for up to max_batch clips per
 * forward, at most `chunk` frames per vf_vae_encode_chunk, frames of H x W (multiples
 * of the spatial factor). Allocates caches and workspace through the model's backend.
 * Caller owns *out (vf_vae_enc_free). */
int vf_vae_enc_new(vf_vae *m, int max_batch, int chunk, int H, int W, vf_vae_enc **out,
                   vf_status *st);
void vf_vae_enc_free(vf_vae_enc *e); /* NULL is fine */
/* Bytes actually allocated (caches + workspace + host staging; weights not included). */
int64_t vf_vae_enc_bytes(const vf_vae_enc *e);

/* Starts a micro-batch of `batch` clips of T frames each. T must be 1 + k·tf (1, 5, 9,
 * 17, … for the 4x presets): anything else is VF_EINVAL naming the accepted lengths.
 * Resets every cache. */
int vf_vae_encode_begin(vf_vae_enc *e, int batch, int64_t T, vf_status *st);
/* Host input of the next chunk for clip b: frames [t0, t0+n) of a clip given as
 * f32 (3, T, H, W) channel-first in [-1, 1] ... */
int vf_vae_input_f32(vf_vae_enc *e, int b, const float *clip, int64_t t0, int n,
                     vf_status *st);
/* ... or as decoded u8 (T, H, W, 3) RGB, mapped to x/127.5 - 1. */
int vf_vae_input_u8(vf_vae_enc *e, int b, const uint8_t *clip, int64_t t0, int n,
                    vf_status *st);
/* ... or as the image-to-video conditioning clip [its first frame, zeros]: frame 0 of the
 * decoded u8 (T, H, W, 3) `clip` mapped as vf_vae_input_u8 maps it, every later frame 0
 * in [-1, 1] (only frame 0 of `clip` is read, so a single image serves). */
int vf_vae_input_first_u8(vf_vae_enc *e, int b, const uint8_t *clip, int64_t t0, int n, vf_status *st);
/* Encodes the next n frames (1 <= n <= chunk) of every clip, taken from the inputs set
 * above. Latent frames completed by this chunk are written at their place in mean and
 * logvar (host f32, (batch, z, T', h, w) for the T given to begin; logvar may be NULL),
 * raw (before scale/shift). Returns the number of latent frames produced so far (>= 0)
 * or a negative code. */
int vf_vae_encode_chunk(vf_vae_enc *e, int n, float *mean, float *logvar, vf_status *st);
/* Checks every frame was fed (VF_EINVAL otherwise) and returns T' (>= 0). */
int vf_vae_encode_end(vf_vae_enc *e, vf_status *st);

/* Whole-clip convenience over the streaming API: x (batch, 3, T, H, W) host f32,
 * fed in chunks of the encoder's `chunk`; mean/logvar as in vf_vae_encode_chunk. */
int vf_vae_encode_f32(vf_vae_enc *e, int batch, int64_t T, const float *x, float *mean,
                      float *logvar, vf_status *st);

/* ------------------------------------------------------------------ streaming decoder */

typedef struct vf_vae_dec vf_vae_dec;

/* Frames decoded from Tlat latent frames: 1 + tf·(Tlat - 1); -1 for Tlat < 1. */
int64_t vf_vae_decoded_frames(const vf_vae_config *c, int64_t Tlat);
/* Bytes the decoder needs (as vf_vae_mem) for up to max_batch clips, `chunk` latent
 * frames per call, latents of h x w: weights, causal caches, workspace (work buffers,
 * attention statistics, the chunk's latent input), host (load staging, bookkeeping).
 * None of it depends on the clip length. */
int vf_vae_dec_mem(const vf_vae_config *c, size_t elem, int max_batch, int chunk, int h, int w,
                   vf_vae_mem_info *out, vf_status *st);
/* The decoder's, as vf_vae_conv_shapes (latents of h x w, chunk latent frames). */
int vf_vae_dec_conv_shapes(const vf_vae_config *c, int max_batch, int chunk, int h, int w,
                           vf_conv3d_shape *out, int cap, vf_status *st);
/* New decoder over the decoder model m (vf_vae_dec_model_new; borrowed, must outlive it)
 * for up to max_batch clips, at most `chunk` latent frames per vf_vae_decode_chunk,
 * latents of h x w. Caller owns *out (vf_vae_dec_free). */
int vf_vae_dec_new(vf_vae *m, int max_batch, int chunk, int h, int w, vf_vae_dec **out,
                   vf_status *st);
void vf_vae_dec_free(vf_vae_dec *d); /* NULL is fine */
/* Bytes allocated on the backend (caches + workspace; weights not included). */
int64_t vf_vae_dec_bytes(const vf_vae_dec *d);
/* Starts a micro-batch of `batch` clips of Tlat latent frames each; resets every cache. */
int vf_vae_decode_begin(vf_vae_dec *d, int batch, int64_t Tlat, vf_status *st);
/* Decodes the next n latent frames (1 <= n <= chunk) of every clip, read from z (host
 * f32 (batch, z, Tlat, h, w), de-normalised: vf_vae_denormalise). The frames this chunk
 * completes are written at their place in x (host f32 (batch, 3, T, 8h, 8w) for the
 * 8x presets, T = vf_vae_decoded_frames), clamped to [-1, 1]. Returns the frames
 * written so far (>= 0) or a negative code. */
int vf_vae_decode_chunk(vf_vae_dec *d, int n, const float *z, float *x, vf_status *st);
/* Checks every latent frame was decoded (VF_EINVAL otherwise) and returns T. */
int vf_vae_decode_end(vf_vae_dec *d, vf_status *st);
/* Whole-clip convenience: begin, chunks of the decoder's `chunk`, end. */
int vf_vae_decode_f32(vf_vae_dec *d, int batch, int64_t Tlat, const float *z, float *x,
                      vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VF_VAE_H */
