/* dit_weights.h — DiT weights from the files users have (Wan 2.1 T2V and I2V checkpoints,
 * Wan 2.2 I2V-A14B experts).
 *
 * A source is one of
 *   - a .safetensors file,
 *   - a sharded checkpoint's *.safetensors.index.json ({"weight_map": {tensor: file}},
 *     the files beside it),
 *   - a model directory (config.json + diffusion_pytorch_model.safetensors or its
 *     .index.json): diffusers' WanTransformer3DModel.save_pretrained, or Wan-AI's own
 *     (a WanModel config.json, original names); the config must describe the model
 *     (heads, head_dim, layers, widths, patch, input channels, and text- or image-to-video:
 *     model_type, image_dim),
 *   - a directory holding model.safetensors or model.safetensors.index.json alone (an
 *     expert's subdir of a two-expert vflow checkpoint step, models/dit_experts.h),
 *   - a vflow checkpoint: a step dir (its model.safetensors or the index of its shards),
 *     or a checkpoint dir (its newest complete step, formats/ckpt.h); a LoRA run's step
 *     holds adapters, not a model, and is refused saying so,
 * under one of three namings, recognised by its keys:
 *   original   Wan 2.1's WanModel state dict ("blocks.0.self_attn.q.weight"), the names of
 *              the layout (dit_layout.c) and of vflow's own checkpoints;
 *   comfyui    the same behind the prefix "model.diffusion_model.";
 *   diffusers  WanTransformer3DModel's ("blocks.0.attn1.to_q.weight"): the original names
 *              put through diffusers' convert_wan_transformer_to_diffusers (the same
 *              ordered substring replaces, vf_dit_name_to).
 * F32, BF16, F16 (and F64) tensors are widened / rounded to f32. FP8 checkpoints are
 * dequantised: an F8_E4M3 (float8_e4m3fn) or F8_E5M2 tensor times its per-tensor scale
 * (<base>.scale_weight, ComfyUI; <base>.weight_scale, diffusers; 1 without one), in f32;
 * the scales, ComfyUI's input scales (.scale_input) and its "scaled_fp8" marker are not
 * weights and are not counted as extra tensors. Other FP8 formats are refused.
 *
 * Opening reads the headers only (each file is mapped, nothing of its data is touched);
 * reading converts tensor by tensor straight into the caller's buffer and gives each
 * tensor's pages back afterwards (vf_st_drop), so the host holds about the largest tensor
 * of the file beside the caller's slice, however large the file is.
 *
 * Every refusal is VF_EBADINPUT (exit code 2) with one line naming the file and the
 * tensor: a missing path or shard, a truncated or malformed file, a header over the
 * size limit, another model (a VAE; an image-to-video DiT with an image branch for a model
 * without one), a missing, extra or mis-shaped tensor (expected and found shape; a
 * text-to-video patch_embedding for an image-to-video model says so), an unreadable
 * dtype, a NaN or infinity in a tensor.
 */
#ifndef VF_DIT_WEIGHTS_H
#define VF_DIT_WEIGHTS_H

#include "models/dit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vf_dit_naming {
    VF_DIT_NAMES_ORIGINAL = 0,
    VF_DIT_NAMES_COMFYUI,
    VF_DIT_NAMES_DIFFUSERS,
} vf_dit_naming;

const char *vf_dit_naming_name(vf_dit_naming n); /* "original", "comfyui", "diffusers" */

/* The name the layout tensor `orig` (original naming) has in naming nm, into out (n
 * bytes, truncated). */
void vf_dit_name_to(vf_dit_naming nm, const char *orig, char *out, size_t n);

typedef struct vf_dit_wsrc vf_dit_wsrc;

/* Opens the weights at path (headers only) and recognises the naming. Caller owns *out
 * (vf_dit_wsrc_close). */
int vf_dit_wsrc_open(const char *path, vf_dit_wsrc **out, vf_status *st);
void vf_dit_wsrc_close(vf_dit_wsrc *w); /* NULL is fine */
vf_dit_naming vf_dit_wsrc_naming(const vf_dit_wsrc *w);
/* Tensors in the source (all files) and the bytes of the largest one. */
int vf_dit_wsrc_count(const vf_dit_wsrc *w);
int64_t vf_dit_wsrc_largest(const vf_dit_wsrc *w);
/* The files the weights are read from, in order (one, or an index's shards): returns their
 * count; (*paths)[i] borrowed until vf_dit_wsrc_close. */
int vf_dit_wsrc_files(const vf_dit_wsrc *w, const char *const **paths);

/* The source holds exactly the tensors of l (none missing, none extra) with l's shapes
 * and readable dtypes; a directory's config.json agrees with l's config. */
int vf_dit_wsrc_check(const vf_dit_wsrc *w, const vf_dit_layout *l, vf_status *st);

/* Tensor idx of l as the FP8 E4M3 bytes the source holds, when it holds them so (a
 * ComfyUI fp8_scaled or diffusers/quanto weight_scale file): the bytes into dst (numel
 * bytes, host, caller's), its per-tensor scale into *scale, *found true. A tensor of
 * another dtype: *found false, dst untouched (read it with vf_dit_wsrc_read). Bad input:
 * a NaN code, a scale that is not a positive finite number. */
int vf_dit_wsrc_read_fp8(const vf_dit_wsrc *w, const vf_dit_layout *l, int idx, uint8_t *dst, float *scale,
                         bool *found, vf_status *st);

/* Fills dst (host, n floats; element off of the flat vector at dst[0]) from the source,
 * tensor by tensor; the range may cut tensors. Values must be finite. */
int vf_dit_wsrc_read(const vf_dit_wsrc *w, const vf_dit_layout *l, float *dst, int64_t off,
                     int64_t n, vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VF_DIT_WEIGHTS_H */
