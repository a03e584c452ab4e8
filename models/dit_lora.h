/* dit_lora.h — LoRA adapters on the DiT's block linears: which linears a target list
 * picks, the layout of the trainable adapter vector, its init, and how a partition runs
 * the adapters on top of its frozen base weights.
 *
 * A targeted linear y = W x + b (W (out, in)) becomes y = W x + b + s · B (A x) with
 * A (rank, in), B (out, rank), s = alpha / rank. Targets are glob patterns (`*` matches
 * any run of characters) over the original Wan module names with the "blocks.N." prefix
 * and the ".weight" suffix removed: "self_attn.q", "cross_attn.*", "ffn.0". Only the
 * linears of a block are candidates (self_attn.{q,k,v,o}, cross_attn.{q,k,v,o},
 * ffn.{0,2}, and with an image branch cross_attn.{k_img,v_img}); a pattern that matches
 * none of the model's is bad input.
 *
 * The adapter vector is laid out like the model's flat vector (a vf_dit_layout: tensors
 * in block order, block_start per block, embeddings and head empty), so the partition and
 * shard range arithmetic of the training stages works on it unchanged. Its tensors carry
 * the names users load: "diffusion_model.blocks.N.self_attn.q.lora_A.weight" (rank, in)
 * followed by "...lora_B.weight" (out, rank).
 */
#ifndef VF_DIT_LORA_H
#define VF_DIT_LORA_H

#include "models/dit.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VF_LORA_MAX_TARGETS 32
#define VF_LORA_PREFIX "diffusion_model."

/* The `lora` option as the training stages receive it (JSON {"rank": r, "alpha": a,
 * "targets": [...]}). rank 0: no LoRA. */
typedef struct vf_dit_lora_cfg {
    int rank;
    double alpha;
    int ntargets;
    char targets[VF_LORA_MAX_TARGETS][VF_DIT_NAME_MAX];
} vf_dit_lora_cfg;

/* Parses the JSON text of a `lora` param; "" (or NULL) gives rank 0. VF_EUSAGE naming the
 * field for a malformed value. */
int vf_dit_lora_cfg_parse(const char *json, vf_dit_lora_cfg *out, vf_status *st);

typedef struct vf_dit_lora {
    vf_dit_lora_cfg cfg;
    float scale;             /* alpha / rank */
    vf_dit_layout *l;        /* the adapter vector: A, B per targeted linear, block order */
    int nbase;               /* tensors of the base layout */
    int *a_of;               /* nbase entries: adapter index of the A of base tensor i, or -1
                                (its B is the next one) */
    int *base_of;            /* l->n entries: the base tensor an adapter tensor belongs to */
} vf_dit_lora;

/* The adapters of `c` on the model laid out by base. VF_EUSAGE naming the pattern when a
 * target matches no linear. Caller owns *out (vf_dit_lora_free). */
int vf_dit_lora_new(const vf_dit_layout *base, const vf_dit_lora_cfg *c, vf_dit_lora **out,
                    vf_status *st);
void vf_dit_lora_free(vf_dit_lora *lo);          /* NULL is fine */

/* The module name ("blocks.3.self_attn.q") of adapter tensor i, into buf. */
void vf_dit_lora_module(const vf_dit_lora *lo, int i, char *buf, size_t n);

/* Deterministic init of elements [off, off+n) of the adapter vector into dst (host f32):
 * A as peft's kaiming_uniform(a = sqrt(5)), i.e. uniform(-1/sqrt(in), 1/sqrt(in)), from
 * Philox (seed, 0, tensor index, VF_RNG_LORA); B zero, so the adapted model starts as the
 * base model. */
void vf_dit_lora_init(const vf_dit_lora *lo, uint64_t seed, int64_t off, int64_t n, float *dst);

/* Reads an adapter file into elements [off, off+n) of the adapter vector (dst host f32;
 * dst NULL: checks the whole file only). Accepted namings of module M (e.g.
 * "blocks.0.self_attn.q"), with or without the "diffusion_model." prefix:
 *   M.lora_A.weight (rank, in) / M.lora_B.weight (out, rank)    (diffusers, ComfyUI)
 *   M.lora_down.weight / M.lora_up.weight                       (kohya-style keys)
 *   lora_unet_<M with '_' for '.'>.lora_down.weight / .lora_up.weight   (kohya / musubi)
 * and an optional scalar M.alpha (scale alpha/rank; absent: 1). B is rescaled so the file's
 * delta is kept under this run's alpha/rank. Bad input (VF_EBADINPUT, one line naming
 * file and key): a key naming no targeted linear, a missing A or B, wrong in/out dims, a
 * rank mismatch between A and B or against the run's rank. */
int vf_dit_lora_file_read(const char *path, const vf_dit_lora *lo, float *dst, int64_t off,
                          int64_t n, vf_status *st);

/* The adapters a LoRA file holds (any naming above) on the model laid out by base: rank
 * from its A tensors, alpha from its .alpha (rank when absent), targets the linears it has
 * keys for; then *vec (caller-owned, vf_free) the adapter vector read from it. For sampling
 * with a file whose training config is not at hand. Bad input is VF_EBADINPUT naming file
 * and key. Caller owns *out. */
int vf_dit_lora_from_file(const vf_dit_layout *base, const char *path, vf_dit_lora **out, float **vec,
                          vf_status *st);

/* Merges the adapters into host f32 weights of the whole model (base laid out by
 * lo's base layout): W += (alpha/rank) · B · A, each element formed in f64 and rounded
 * once. */
void vf_dit_lora_merge(const vf_dit_lora *lo, const vf_dit_layout *base, const float *vec, float *weights);

/* Runs the adapters in partition p: lparams / lgrads are the partition's range of the
 * adapter vector (element vf_dit_layout_range(lo->l, …)'s *off) in backend memory,
 * borrowed. The partition's own gradient buffer must be NULL: base weights then get no
 * gradients and the embeddings' backward is skipped. Allocates the adapters' scratch. */
int vf_dit_part_set_lora(vf_dit_part *p, const vf_dit_lora *lo, void *lparams, void *lgrads,
                         vf_status *st);
/* Scratch bytes the adapters add to a partition at geometry max (what set_lora allocates). */
int64_t vf_dit_lora_workspace(const vf_dit_config *c, int rank, const vf_dit_dims *max,
                              size_t act_size, size_t grad_size);

#ifdef __cplusplus
}
#endif
#endif /* VF_DIT_LORA_H */
