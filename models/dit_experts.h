/* dit_experts.h — the two experts of a Wan 2.2 A14B source (high-noise and low-noise, each
 * shaped as one Wan 2.1 14B DiT): which path holds which expert.
 *
 * A two-expert source is one of
 *   - Wan-AI's layout: DIR/high_noise_model/ and DIR/low_noise_model/ (each a model
 *     directory: config.json + diffusion_pytorch_model*.safetensors); a vflow checkpoint
 *     step dir of a two-expert run has the same two subdirs;
 *   - a diffusers pipeline directory: DIR/transformer/ (the high-noise expert) and
 *     DIR/transformer_2/ (the low-noise one), as WanPipeline(transformer_2=...) saves them;
 *   - a file (a ComfyUI single file, a .safetensors, an index): that expert alone, so two
 *     experts in two files are named one each.
 * The expert's path is then read as any DiT source (models/dit_weights.h). A refusal is
 * VF_EBADINPUT (exit code 2) naming the path and what it lacks.
 */
#ifndef VF_DIT_EXPERTS_H
#define VF_DIT_EXPERTS_H

#include "models/dit_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The subdir of Wan-AI's layout (and of a vflow two-expert checkpoint step) holding
 * expert `expert` ("high" | "low"): "high_noise_model" | "low_noise_model"; NULL for
 * another name. */
const char *vf_dit_expert_dir(const char *expert);

/* The path of expert `expert` ("high" | "low") of the source at `weights` into out (n
 * bytes): a two-expert directory's subdir, or `weights` itself when it is a file or expert
 * is "" (the source is one model). An empty `weights` gives "" (the seeded init). A
 * directory that holds two experts with expert "" is refused, saying to name one. */
int vf_dit_expert_path(const char *weights, const char *expert, char *out, size_t n, vf_status *st);

/* vf_dit_wsrc_open of vf_dit_expert_path(weights, expert). Caller owns *out
 * (vf_dit_wsrc_close). */
int vf_dit_wsrc_open_expert(const char *weights, const char *expert, vf_dit_wsrc **out, vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VF_DIT_EXPERTS_H */
