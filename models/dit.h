/* dit.h — the video diffusion transformer (Wan/Open-Sora style), cut into pipeline partitions.
 *
 * Architecture (names and layout follow Wan 2.1's WanModel so its weights map 1:1):
 *
 *   latent x_t (B, z, T, H, W) --patchify (pt,ph,pw)--> (B, L, z·pt·ph·pw), L = T'·H'·W'
 *     --patch_embedding (linear, = Wan's Conv3d with kernel = stride = patch)--> x (B, L, dim)
 *   t (B) in [0,1] --sinusoid(t·t_scale, freq_dim)--> time_embedding: Linear-SiLU-Linear
 *     --> e (B, dim) ; time_projection: SiLU-Linear --> e0 (B, 6, dim)      [shared by all blocks]
 *     per token (t_tokens, Wan 2.2 TI2V): t (B, L) --> e (B, L, dim), e0 (6, B, L, dim): each
 *     token's m and head (shift, scale) below are those of its own time
 *   image-to-video (in_dim > z): the channels of cond (B, in_dim − z, T, H, W) follow x_t's
 *     before patchify (Wan I2V: 4-channel first-frame mask ‖ 16-channel latent of the first
 *     frame followed by zeros), so patch_embedding takes in_dim·pt·ph·pw features a token
 *   caption: text embeddings (B, Ltxt, text_dim) (text = embeddings: umT5 states, rows past a
 *     caption's length zero, as Wan's pipeline pads them), or caption bytes (B, Ltxt)
 *     --text_tokens (257 × text_dim: 256 bytes + pad)--> (B, Ltxt, text_dim) (text = bytes);
 *     then text_embedding: Linear-GELU(tanh)-Linear --> ctx (B, Ltxt, dim)   [shared by all blocks]
 *   image features (img_dim > 0, Wan 2.1 I2V): CLIP states (B, Limg, img_dim) --img_emb:
 *     LN_affine-Linear-GELU(erf)-Linear-LN_affine (LayerNorm eps 1e-5)--> ctx_img (B, Limg, dim)
 *   block i (x, e0, ctx):
 *     m = modulation_i (6, dim) + e0            (Wan: one shared projection + a learned table per block)
 *     x += m[2] · self_attn(LN(x)·(1+m[1]) + m[0])     q,k: RMSNorm over dim (learned gain), 3D RoPE
 *     x += cross_attn(LN_affine(x), ctx)              q from x, k/v from ctx, RMSNorm on q and k;
 *                                                     with images o(attn(q, k, v) + attn(q, k_img,
 *                                                     v_img)), k_img/v_img from ctx_img, own RMSNorm
 *     x += m[5] · ffn(LN(x)·(1+m[4]) + m[3])          ffn: Linear-GELU(tanh)-Linear
 *   head: (shift, scale) = head.modulation (2, dim) + e ;  v = Linear(LN(x)·(1+scale)+shift)
 *     --> (B, L, pt·ph·pw·z) --unpatchify--> (B, z, T, H, W)
 *   LN = LayerNorm without affine, eps 1e-6; attention scale 1/sqrt(head_dim).
 *
 * With text embeddings (the Wan presets) the model is Wan 2.1's WanModel tensor for tensor:
 * the context has text_len rows, the real tokens' embeddings followed by zero rows, and
 * every row is attended (no mask), exactly as diffusers' WanPipeline feeds it.
 *
 * Captions without a text encoder (the tiny presets): byte tokens 0..255; positions at or
 * past a sample's length get token 256, the learned pad embedding. The attention op has no mask, so pads
 * are attended like any token: the model learns what the pad embedding contributes
 * (a "null text" token, as Wan's zero-padded T5 context is attended too). Every sample
 * has exactly text_len tokens, so a micro-batch is one dense (B, Ltxt) tensor.
 *
 * Parameters live in ONE flat vector in a fixed order: embeddings (patch, text, time),
 * blocks 0..depth-1, head (see dit_layout.c for the exact list). Partition [b0, b1) owns
 * one contiguous range of it; optimizer shards take equal slices of it.
 *
 * Pipeline partitions: partition p runs blocks [b0, b1); the first also the embeddings,
 * the last also the head and the loss. Between partitions flows a vf_dit_xfer (forward:
 * activations and conditioning; backward: their gradients). Everything is deterministic on
 * the CPU backend: P partitions give bitwise the same loss and gradients as one, and
 * recompute gives bitwise the same as keeping all activations.
 *
 * Memory: all device buffers are allocated once (vf_dit_part_new, vf_dit_saved_new) for a
 * maximum geometry; calls with smaller geometry use prefixes. The byte counts of those
 * allocations are what vf_dit_part_memory reports, from the same carving code.
 */
#ifndef VF_DIT_H
#define VF_DIT_H

#include "kernels/ops.h"
#include "formats/safetensors.h"
#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VF_DIT_VOCAB 257      /* byte tokens 0..255 + pad */
#define VF_DIT_PAD_TOKEN 256
#define VF_DIT_NAME_MAX 64

/* A caption as byte tokens (text = bytes): its first text_len bytes into tok[0..n);
 * returns n, its length in tokens (the model takes positions at and past it as the pad
 * token). The latent reader and sampling both tokenise with it. */
int vf_dit_caption_tokens(const char *text, int text_len, int32_t *tok);

/* ------------------------------------------------------------------ config */

typedef struct vf_dit_config {
    int dim;          /* model width d */
    int depth;        /* number of blocks */
    int heads;        /* attention heads; heads · head_dim == dim */
    int head_dim;     /* even, ≥ 6 (3D RoPE splits head_dim/2 frequencies over t, h, w) */
    int ffn;          /* MLP hidden width (dim · mlp_ratio) */
    int z;            /* latent channels in and out */
    int patch[3];     /* (pt, ph, pw), Wan: (1, 2, 2) */
    int text_dim;     /* width of what text_embedding takes: the text embeddings (umT5-xxl:
                         4096) or the byte-token table */
    int text_len;     /* caption tokens per sample (Wan: 512) */
    int freq_dim;     /* sinusoidal timestep features (Wan: 256), even */
    float t_scale;    /* the timestep fed to the sinusoid is t · t_scale (Wan: 1000) */
    float eps;        /* LayerNorm / RMSNorm epsilon (Wan: 1e-6) */
    int text_emb;     /* 1: condition on text embeddings (B, text_len, text_dim), no
                         text_tokens table (Wan); 0: on caption bytes (the tiny presets) */
    int in_dim;       /* channels patch_embedding takes: z plus the conditioning channels of
                         image-to-video (Wan I2V: 36 = 16 noisy + 4 mask + 16 first-frame
                         latent); 0 = z (no conditioning channels) */
    int img_dim;      /* width of the image features img_emb takes (CLIP ViT-H/14: 1280); 0 =
                         no image branch (img_emb, cross_attn.k_img/v_img/norm_k_img) */
    int img_len;      /* image feature rows per sample (Wan 2.1 I2V: 257); 0 without images */
    int t_tokens;     /* 1: a time embedding per token (Wan 2.2 TI2V: t (B, L), e (B, L, dim),
                         e0 (6, B, L, dim)), so tokens of one sample may sit at different
                         times; 0: one per sample (Wan 2.1, Wan 2.2 A14B) */
} vf_dit_config;

/* The channels patch_embedding takes (in_dim, or z when in_dim is 0). */
static inline int vf_dit_in_dim(const vf_dit_config *c) { return c->in_dim > 0 ? c->in_dim : c->z; }
/* Rows of the cross-attention context of one sample: text_len, then img_len image rows. */
static inline int64_t vf_dit_ctx_len(const vf_dit_config *c)
{
    return (int64_t)c->text_len + (c->img_dim > 0 ? c->img_len : 0);
}

/* Fills a built-in preset: "tiny", "small", "dit-xl-2", "wan-1.3b", "wan-14b", and the
 * image-to-video "wan-i2v-14b" (Wan 2.1 I2V 480p and 720p: 36 input channels, CLIP image
 * branch), "wan2.2-a14b" (one Wan 2.2 T2V-A14B expert: Wan 2.1 14B's shape) and "wan2.2-i2v-a14b" (one Wan 2.2 I2V-A14B expert: 36 input channels, no
 * CLIP) (the same numbers as lua/model_dit.lua). VF_ENOTFOUND for another name. */
int vf_dit_preset(const char *name, vf_dit_config *out, vf_status *st);
/* Checks ranges and consistency; VF_EINVAL naming the field. */
int vf_dit_config_check(const vf_dit_config *c, vf_status *st);
/* "dim=64 depth=4 …": canonical text, e.g. for a config hash. Returns bytes needed. */
int vf_dit_config_str(const vf_dit_config *c, char *buf, size_t n);

/* Schema of the `model` table param of the DiT stages (lua/model_dit.lua presets), {0}-
 * terminated, defaults = the tiny preset; VF_DIT_MODEL_DEFAULT is that preset as JSON, the
 * default of a `model` param. vf_dit_config_from_params reads a validated table. */
extern const vf_param_spec vf_dit_model_fields[];
#define VF_DIT_MODEL_DEFAULT                                                                  \
    "{\"name\":\"tiny\",\"dim\":64,\"depth\":4,\"heads\":4,\"head_dim\":16,\"ffn\":256,"          \
    "\"z\":4,\"patch\":[1,2,2],\"text_dim\":64,\"text_len\":32,\"freq_dim\":64,"                \
    "\"t_scale\":1000,\"eps\":1e-6,\"text\":\"bytes\"}"
int vf_dit_config_from_params(const vf_params *model, vf_dit_config *out, vf_status *st);

/* ------------------------------------------------------------------ parameter layout */

/* Which part of the model a tensor belongs to. */
enum { VF_DIT_EMBED = -1 /* block index ≥ 0 for blocks; depth for the head */ };

/* A tensor the config does not have (text_tokens.weight with text embeddings) keeps its
 * index with an empty name and numel 0: code walking the layout skips numel == 0. */
typedef struct vf_dit_tensor {
    char name[VF_DIT_NAME_MAX]; /* safetensors name, e.g. "blocks.3.self_attn.q.weight" */
    int ndim;
    int64_t shape[5];
    int64_t offset;             /* elements from the start of the flat vector */
    int64_t numel;
    int block;                  /* VF_DIT_EMBED, 0..depth-1, or depth (head) */
} vf_dit_tensor;

typedef struct vf_dit_layout {
    vf_dit_config cfg;
    int n;                      /* number of tensors */
    vf_dit_tensor *t;           /* n entries in flat order */
    int64_t total;              /* elements */
    int64_t *block_start;       /* depth + 2 entries: start of block i (i < depth), of the head
                                   (i = depth), and total (i = depth + 1); embeddings start at 0 */
} vf_dit_layout;

/* Builds the layout of a checked config. Caller owns *out (vf_dit_layout_free). */
int vf_dit_layout_new(const vf_dit_config *c, vf_dit_layout **out, vf_status *st);
void vf_dit_layout_free(vf_dit_layout *l);      /* NULL is fine */
/* Index of tensor `name`, or -1. */
int vf_dit_layout_find(const vf_dit_layout *l, const char *name);
/* Tensors the config has (entries with numel > 0): what a file of its weights holds. */
int vf_dit_layout_count(const vf_dit_layout *l);
/* The contiguous element range [*off, *off + *n) owned by the partition of blocks
 * [b0, b1): embeddings too when b0 == 0, the head too when b1 == depth. */
void vf_dit_layout_range(const vf_dit_layout *l, int b0, int b1, int64_t *off, int64_t *n);
/* Parameters of a config (= layout total) without building the layout. */
int64_t vf_dit_param_count(const vf_dit_config *c);

/* Deterministic init of elements [off, off+n) of the flat vector into dst (host f32,
 * n floats): every tensor draws from Philox (seed, 0, tensor index, VF_RNG_INIT), so a
 * partition can initialise its own range alone and get the same numbers.
 * Wan's scheme: Linear weights xavier-uniform (patch embedding over its flattened
 * fan-in), text/time embedding MLP weights N(0, 0.02), byte-token table N(0, 1), biases
 * 0, RMSNorm / LayerNorm gains 1 and biases 0, modulation tables N(0,1)/sqrt(dim), head
 * weight 0 (the model starts by predicting the head bias). */
void vf_dit_init(const vf_dit_layout *l, uint64_t seed, int64_t off, int64_t n, float *dst);

/* Weights by name. vf_dit_st_add adds the tensors of the flat range [off, off + n) to a
 * safetensors writer as F32 (flat[0] is element off; borrowed until the writer has
 * written). vf_dit_st_load fills dst (element off at dst[0]) with the tensors of that
 * range read from f by name (F32/F64/BF16/F16 converted), checking shapes; extra tensors
 * in f are ignored. The range must not cut a tensor (partition ranges never do). */
int vf_dit_st_add(vf_st_writer *w, const vf_dit_layout *l, const float *flat, int64_t off,
                  int64_t n, vf_status *st);
int vf_dit_st_load(const vf_st_file *f, const vf_dit_layout *l, float *dst, int64_t off,
                   int64_t n, vf_status *st);

/* ------------------------------------------------------------------ geometry, memory */

/* A micro-batch's geometry: B samples of latent (z, T, H, W); T, H, W divisible by the
 * patch. L, the tokens of one sample (T/pt · H/ph · W/pw), is computed once where the
 * geometry is made (vf_dit_dims_of, vf_dit_dims_max) and read from here everywhere else;
 * a partition refuses dims whose L does not match their T, H, W. As a maximum geometry
 * (several buckets) N > 0 bounds B·L below max B × max L: buffers of B·L tokens are sized
 * for N, those of B samples for B, those of L tokens for L; 0 = B·L. Batches leave it 0. */
typedef struct vf_dit_dims {
    int B, T, H, W;
    int64_t N;
    int64_t L;
} vf_dit_dims;

/* B samples of latent (·, T, H, W) under c's patch: L set, N = 0. */
vf_dit_dims vf_dit_dims_of(const vf_dit_config *c, int B, int T, int H, int W);

/* The maximum geometry over n geometries (each of its own B and T, H, W): B the largest
 * B, T, H, W and L those of the most tokens, N the largest B·L (N = 0 when that is B·L). */
vf_dit_dims vf_dit_dims_max(const vf_dit_dims *d, int n);

/* T/pt · H/ph · W/pw of d's T, H, W: what vf_dit_dims_of puts in L, and what a partition
 * checks L against. */
int64_t vf_dit_tokens(const vf_dit_config *c, const vf_dit_dims *d);

/* Model FLOPs (a multiply-add counts 2) by the standard per-layer count, for MFU. One
 * block's forward for one sample of L video tokens and Ltxt text tokens, d = dim:
 *   self-attention projections q, k, v, o   4 · 2·L·d²
 *   self-attention scores QKᵀ and AV        2 · 2·L²·d
 *   cross-attention q, o projections        2 · 2·L·d²
 *   cross-attention k, v projections        2 · 2·Ltxt·d²
 *   cross-attention scores                  2 · 2·L·Ltxt·d
 *   MLP (two matmuls)                       2 · 2·L·d·ffn
 * and with an image branch (img_dim > 0, Limg = img_len)
 *   image k_img, v_img projections          2 · 2·Limg·d²
 *   image attention scores                  2 · 2·L·Limg·d
 * Norms, modulation, RoPE, the embeddings and the head are left out. */
double vf_dit_block_flops(const vf_dit_config *c, int64_t L, int64_t Ltxt);
/* What a partition keeps of each block's forward for its backward: the `recompute`
 * argument of the functions below (a bool true is VF_DIT_RECOMPUTE). */
typedef enum vf_dit_recompute {
    VF_DIT_KEEP = 0,          /* everything the backward reads: no recompute */
    VF_DIT_RECOMPUTE = 1,     /* the block input, and the self-attention's output and
                                 log-sum-exp: the backward reruns the rest of the forward */
    VF_DIT_RECOMPUTE_ALL = 2, /* the block input only: the backward reruns the whole
                                 forward, the self-attention included */
} vf_dit_recompute;

/* One training step's FLOPs per sample: depth blocks × 3 (forward + backward, which
 * costs twice the forward); with recompute the forward once more, less the
 * self-attention's scores and AV where their result is kept (VF_DIT_RECOMPUTE). */
double vf_dit_train_flops(const vf_dit_config *c, int64_t L, int64_t Ltxt, int recompute);

/* Bytes a partition holds, computed by the same code that carves its buffers. */
typedef struct vf_dit_mem {
    int64_t params;      /* its range of weights (act dtype) */
    int64_t grads;       /* its range of gradients (grad dtype) */
    int64_t saved;       /* one micro-batch's saved activations (vf_dit_saved) */
    int64_t saved_block; /* of which per block (vf_dit_block_act_bytes) */
    int64_t workspace;   /* scratch of the partition object (backward buffers, RoPE tables,
                            the one-block recompute area) */
    int64_t xfer;        /* one vf_dit_xfer (x, e, e0, ctx) as sent between partitions */
    int64_t ends;        /* a rank of sequence parallelism (vf_dit_part_memory_sp, sp > 1;
                            0 else): the whole clips the first partition patchifies before
                            it keeps its tokens' patches, allocated apart from the workspace */
    int64_t grains;      /* the CPU backend's scratch for its sums over tokens (allocated
                            on the CPU only; a plan counts it there) */
} vf_dit_mem;

/* Memory of partition [b0, b1) at geometry `max` with element sizes act_size (weights,
 * activations) and grad_size (gradients). The total for M micro-batches in flight is
 * params + grads + M·saved + workspace. */
void vf_dit_part_memory(const vf_dit_config *c, int b0, int b1, const vf_dit_dims *max,
                        int recompute, size_t act_size, size_t grad_size, vf_dit_mem *out);
/* The same for one rank of sp ranks (models/dit_sp.h) of micro-batches up to max (whole
 * sequences): what vf_dit_part_new_sp allocates. sp = 1 is vf_dit_part_memory. */
void vf_dit_part_memory_sp(const vf_dit_config *c, int b0, int b1, const vf_dit_dims *max, int sp,
                           int recompute, size_t act_size, size_t grad_size, vf_dit_mem *out);
/* Saved activation bytes of one block for B samples of L tokens (act_size per element)
 * as recompute (vf_dit_recompute) says: everything its backward reads; its input (B, L,
 * dim) and what the recompute does not redo, the self-attention's output (B, L, dim) and
 * its log-sum-exp (B, heads, L) f32; or its input only. */
int64_t vf_dit_block_act_bytes(const vf_dit_config *c, int64_t B, int64_t L, int recompute,
                               size_t act_size);
/* Attention workspace of a micro-batch of geometry d on dev: the larger of its self- and
 * cross-attention's vf_attention_workspace_bound (kernels/ops.h; 0 on the CPU). The
 * backend holds one such workspace per device, outside the partition's buffers (the
 * attention's lse is in them: the saved activations). */
int64_t vf_dit_attn_workspace(const vf_dit_config *c, const vf_dit_dims *d, vf_device dev);

/* ------------------------------------------------------------------ partitions */

/* What crosses a partition boundary for one micro-batch (backend memory; caller-owned
 * buffers). Forward (act dtype):
 *   x   (B, L, dim)     hidden state after the sender's last block
 *   e   (B, dim)        time embedding: input of the head's adaLN
 *   e0  (B, 6, dim)     time projection: input of every block's adaLN
 *                       (t_tokens: e (B, L, dim) and e0 (6, B, L, dim), one row a token, the
 *                       six chunks one after another)
 *   ctx (B, Lctx, dim)  cross-attention k/v input: the caption tokens after text_embedding,
 *                       B·text_len rows, then (img_dim > 0) the image tokens after img_emb,
 *                       B·img_len rows (Lctx = vf_dit_ctx_len)
 * Backward (grad dtype): the gradients of the same four, flowing from partition p+1 to p.
 * e, e0 and ctx are produced by partition 0 and read by every later partition unchanged,
 * so a middle partition forwards the tensors it received; in backward each partition
 * ADDS its contribution to de/de0/dctx (in place, so the sum is formed in the same order
 * as in one partition) and partition 0 turns them into embedding gradients. */
typedef struct vf_dit_xfer {
    void *x, *e, *e0, *ctx;
} vf_dit_xfer;

/* Adds the four tensors of a vf_dit_xfer item to port spec p, named "x", "e", "e0",
 * "ctx", of dtype dt, shaped (B, L, dim), (B, dim), (B, 6, dim), (B, Lctx, dim)
 * (t_tokens: e (B, L, dim), e0 (6, B, L, dim)) with B and L symbolic, bounded by `max`
 * (the same names serve forward and gradient edges). */
void vf_dit_xfer_port(vf_port_spec *p, const vf_dit_config *c, const vf_dit_dims *max,
                      vf_dtype dt);

/* One micro-batch's inputs. Host pointers are read during the call only. */
typedef struct vf_dit_batch {
    vf_dit_dims dims;
    const void *x_t;          /* (B, z, T, H, W) backend memory, act dtype; partition 0 */
    const float *t;           /* (B) host, flow time in [0, 1]; partition 0 */
    const int32_t *text;      /* (B, text_len) host byte tokens; partition 0 (text = bytes) */
    const int32_t *text_len;  /* (B) host; NULL = all text_len tokens are real; partition 0 */
    const void *target;       /* (B, z, T, H, W) backend memory, act dtype; last partition.
                                 A rank of sequence parallelism (vf_dit_part_set_sp): its
                                 tokens' rows (B, Lr, z·P) as vf_dit_sp_target_rows cuts them */
    const float *text_emb;    /* (B, text_len, text_dim) host f32; partition 0 (text =
                                 embeddings): rows at and past text_len[b] are taken as zero */
    const void *cond;         /* (B, in_dim − z, T, H, W) backend memory, act dtype: the
                                 conditioning channels after x_t's; partition 0, in_dim > z */
    const float *img;         /* (B, img_len, img_dim) host f32 image features (Wan 2.1 I2V:
                                 CLIP ViT-H/14 penultimate states); partition 0, img_dim > 0 */
    const float *t_tok;       /* (B, L) host, flow time of each token (t_tokens models; Wan 2.2
                                 TI2V gives the first frame's tokens 0); NULL: each token takes
                                 its sample's t; partition 0 */
    int skip_frames;          /* latent frames at the start of each sample the loss leaves out
                                 (Wan 2.2 TI2V: 1, the image's), a multiple of the time patch;
                                 last partition */
} vf_dit_batch;

typedef struct vf_dit_part vf_dit_part;
typedef struct vf_dit_saved vf_dit_saved;

/* A partition of blocks [b0, b1) of the model laid out by l (borrowed, must outlive it),
 * running on backend be, for geometries up to `max`. params / grads point at the
 * partition's range of the flat weight / gradient vectors (element vf_dit_layout_range's
 * *off) in backend memory; borrowed: the caller (optimizer plumbing) owns and updates
 * them. recompute (vf_dit_recompute): what each micro-batch keeps of a block's forward
 * for its backward. Caller owns *out (vf_dit_part_free). */
int vf_dit_part_new(vf_backend *be, const vf_dit_layout *l, int b0, int b1,
                    const vf_dit_dims *max, int recompute, void *params, void *grads,
                    vf_dit_part **out, vf_status *st);
/* The partition as one rank of sp ranks of sequence parallelism (models/dit_sp.h), for
 * micro-batches up to max (whole sequences): its blocks, saved stores and workspace hold
 * the rank's tokens (vf_dit_sp_rank_max), the first partition's patchify staging whole
 * clips (vf_dit_mem ends). sp = 1 is vf_dit_part_new.
 * Ownership as there. */
int vf_dit_part_new_sp(vf_backend *be, const vf_dit_layout *l, int b0, int b1, const vf_dit_dims *max, int sp,
                       int recompute, void *params, void *grads, vf_dit_part **out, vf_status *st);
void vf_dit_part_free(vf_dit_part *p);          /* NULL is fine */
bool vf_dit_part_is_first(const vf_dit_part *p);
bool vf_dit_part_is_last(const vf_dit_part *p);
/* Repoints the weights / gradients (e.g. after the optimizer swapped buffers). */
void vf_dit_part_set_buffers(vf_dit_part *p, void *params, void *grads);

/* Block swap (models/dit_swap.c). The last K of the partition's nb blocks keep their
 * weights in host memory and stream into a ring of min(K, 2) device buffers ahead of use,
 * on the backend's copy queue (ops.h "block swap"): forward walks them in order,
 * backward in reverse, each pass enqueueing the next block's copy while a block
 * computes. Weights only go host to device here, so the base must be frozen (a partition
 * without gradients: LoRA; vf_dit_part_set_swap_grads swaps a full fine-tune's
 * gradients too). vf_dit_swap_split gives the element ranges for K, relative
 * to the partition's range: the swapped blocks' [*hole, *hole + *hole_n), one block of
 * *blk_n elements each. vf_dit_part_set_swap: `host` (borrowed, outlives p; host memory
 * from be->alloc_pinned) holds those hole_n elements in the act dtype, and the params
 * given to vf_dit_part_new must then hold the range without the hole (what precedes it,
 * then what follows). 0 < K < nb, else VF_EUSAGE naming both numbers. With an FP8 base
 * (vf_dit_part_set_fp8 first) `host` is not read: the base's own host copy of the swapped
 * blocks' FP8 bytes streams instead (vf_dit_fp8_new_swap with the same K, else
 * VF_EUSAGE), one byte a weight. Allocates the ring and the copy queue. */
void vf_dit_swap_split(const vf_dit_layout *l, int b0, int b1, int K, int64_t *hole, int64_t *hole_n,
                       int64_t *blk_n);
int vf_dit_part_set_swap(vf_dit_part *p, int K, const void *host, vf_status *st);
/* Block swap of a partition with gradients (a full fine-tune): as vf_dit_part_set_swap,
 * and the grads given to vf_dit_part_new hold the range without the hole too, while
 * `ghost` (borrowed, outlives p; be->alloc_pinned memory, or memory the backend's copies
 * reach as fast) holds the hole's hole_n gradients in the grad dtype. Each backward brings
 * a swapped block's gradient into the ring beside its weights and sends it back to ghost
 * after the block's backward, on the same queue; the sums are bitwise those without swap.
 * ghost NULL is vf_dit_part_set_swap (a partition with gradients then VF_EUSAGE). */
int vf_dit_part_set_swap_grads(vf_dit_part *p, int K, const void *host, void *ghost, vf_status *st);
/* Makes the work enqueued after it wait for p's last swap copies (the gradients back to
 * the host): call it, then be->sync, before anyone reads the host copy. No-op without
 * swap; p NULL is fine. */
void vf_dit_part_swap_drain(vf_dit_part *p);
/* Seconds the copies of p's swap took and the compute waited for them (ops.h swap_stats;
 * zeros without swap). */
void vf_dit_part_swap_stats(const vf_dit_part *p, double *copy_s, double *wait_s);

/* Activation offload (models/dit_offload.c), for a partition with recompute: what each
 * block keeps for its backward (its input, and with VF_DIT_RECOMPUTE its self-attention
 * result) goes to pinned host memory after the block's forward and comes back ahead of
 * its backward in reverse order, through a ring of 3 device records on a copy queue
 * (ops.h "block swap"). The results are bitwise those without. Call it before the first
 * vf_dit_saved_new: each saved store then holds on the device only the partition's input
 * (and the head's) and takes a host store. Without recompute VF_EUSAGE. */
int vf_dit_part_set_offload(vf_dit_part *p, vf_status *st);
/* Bytes with activation offload: one saved store on the device (what replaces
 * vf_dit_mem.saved), its host store, and the partition's device ring; for a rank of sp
 * ranks as vf_dit_part_memory_sp counts it (sp = 1: one rank). */
typedef struct vf_dit_offload_mem {
    int64_t saved, host, ring;
} vf_dit_offload_mem;
void vf_dit_offload_memory(const vf_dit_config *c, int b0, int b1, const vf_dit_dims *max, int sp,
                           int recompute, size_t act_size, size_t grad_size, vf_dit_offload_mem *out);

/* Saved activations of one micro-batch in flight (1F1B keeps up to P per partition).
 * Sized for the partition's max geometry. Caller owns *out (vf_dit_saved_free). */
int vf_dit_saved_new(vf_dit_part *p, vf_dit_saved **out, vf_status *st);
void vf_dit_saved_free(vf_dit_saved *s);        /* NULL is fine */
/* Bytes of device memory actually allocated (equal to vf_dit_part_memory's saved and
 * workspace figures for the same partition and geometry). */
size_t vf_dit_saved_bytes(const vf_dit_saved *s);
size_t vf_dit_part_workspace_bytes(const vf_dit_part *p);
/* vf_dit_mem.ends of a partition made by vf_dit_part_new_sp (0 with one rank). */
size_t vf_dit_part_ends_bytes(const vf_dit_part *p);
/* The prediction v (B, z, T, H, W) of the last partition's forward (act dtype, inside
 * sv; valid until sv is reused). NULL on other partitions. */
const void *vf_dit_saved_pred(const vf_dit_saved *sv);

/* Forward of one micro-batch.
 *  - first partition: reads b->x_t, t, text or text_emb, text_len, cond, img; `in` is ignored
 *    (may be NULL).
 *  - other partitions: reads in->x, in->e, in->e0, in->ctx (copied into sv).
 *  - not last: writes out->x; and e, e0, ctx into out's buffers when they are non-NULL
 *    and differ from in's (partition 0 must be given them; later ones may forward the
 *    received tensors instead of copying).
 *  - last: out is ignored (may be NULL); the prediction stays in sv.
 * sv receives what backward needs; it must not be in use by another micro-batch. */
int vf_dit_part_forward(vf_dit_part *p, const vf_dit_batch *b, const vf_dit_xfer *in,
                        vf_dit_xfer *out, vf_dit_saved *sv, vf_status *st);

/* Last partition only, after forward: *loss = mean over B·z·T·H·W of (pred − target)²
 * (f64), over the frames after b->skip_frames of each sample where it is set (then the mean
 * of the samples' means, which is the same over samples of one geometry); stores
 * grad_scale · ∂loss/∂pred in sv for backward. grad_scale is typically
 * the micro-batch's share of the global batch (B / B_global) so accumulated gradients
 * are those of the global mean. */
int vf_dit_part_loss(vf_dit_part *p, const vf_dit_batch *b, vf_dit_saved *sv,
                     float grad_scale, double *loss, vf_status *st);

/* Backward of one micro-batch whose forward (and, on the last partition, loss) filled sv.
 * d holds gradient buffers (grad dtype) of the partition's boundary, in and out:
 *  - last partition: d->x is ignored on entry; d->e, d->e0, d->ctx are zeroed first.
 *  - other partitions: on entry d = gradients of this partition's output (dx) and of the
 *    conditioning from all later partitions.
 *  - on return, unless first: d->x = gradient w.r.t. this partition's input x, and
 *    d->e / d->e0 / d->ctx include this partition's contributions.
 *  - first partition: consumes them into the embeddings' gradients. d may be NULL when
 *    the partition is both first and last (internal buffers are used).
 * Parameter gradients are ACCUMULATED (+=) into the partition's grads (zero them once per
 * optimizer step). sv may be reused afterwards. */
int vf_dit_part_backward(vf_dit_part *p, const vf_dit_batch *b, vf_dit_saved *sv,
                         vf_dit_xfer *d, vf_status *st);

/* ------------------------------------------------------------------ rectified flow */

/* Timestep distribution, as the video trainers sample it:
 *   s = sigmoid(mean + std · n), n ~ N(0,1)   (logit-normal, SD3; the default)
 *   s = u, u ~ U(0,1)                         (uniform)
 *   s ← shift·s / (1 + (shift − 1)·s)         (the flow-matching shift; 1 = none)
 *   t = t_min + (t_max − t_min)·s             (a range, as diffusion-pipe's min_t/max_t:
 *                                              one expert's part of [0, 1])
 * in double, rounded to f32 once. With shift 1 and the range [0, 1] t is bitwise the
 * distribution's draw. */
typedef enum vf_dit_t_sampling { VF_DIT_T_LOGIT_NORMAL = 0, VF_DIT_T_UNIFORM = 1 } vf_dit_t_sampling;
typedef struct vf_dit_rf {
    uint64_t seed;
    float t_mean, t_std;
    vf_dit_t_sampling sampling;
    double shift, t_min, t_max; /* 0, 0, 0 in a zeroed struct read as 1, 0, 1 */
} vf_dit_rf;
/* "logit_normal" / "uniform" → its kind; -1 for another name. */
int vf_dit_t_sampling_parse(const char *name);
/* One timestep of the distribution for (rf->seed, step, sample_id). */
float vf_dit_rf_t(const vf_dit_rf *rf, uint64_t step, uint64_t sample_id);

/* One sample's training pair, a pure function of (rf->seed, step, sample_id):
 * noise ~ N(0,1) from Philox (seed, step, sample_id, VF_RNG_NOISE), element i of the
 * sample's latent ↔ normal element i; t from (seed, step, sample_id, VF_RNG_TIMESTEP)
 * element 0. x_t = (1−t)·x0 + t·noise, target = noise − x0, n = z·T·H·W. Host f32.
 * x_t / target may be NULL when not wanted. Returns t.
 * sample_id must name the sample independently of how the global batch is cut into
 * micro-batches or partitions: its position in the global batch of this step (the step
 * is already part of the key), or a hash of its cache key (vf_rng_hash_str) — never its
 * index inside a micro-batch. */
float vf_dit_rf_sample(const vf_dit_rf *rf, uint64_t step, uint64_t sample_id, int64_t n,
                       const float *x0, float *x_t, float *target);

/* Image-to-video by the first frame (Wan 2.2 TI2V, diffusers' expand_timesteps): one sample's
 * noisy latent x_t (z, T, H, W) gets frame 0 of the image's clean latent `image` (z, image_T,
 * H, W) as its frame 0, and t_tok (L) each token's time: 0 for frame 0's tokens, t for every
 * other. c's time patch must be 1 (with a larger one no token is frame 0's alone; the
 * training stage refuses it). The target is left as the pair made it: the loss leaves
 * frame 0 out (vf_dit_batch.skip_frames). */
void vf_dit_first_frame(const vf_dit_config *c, int T, int H, int W, const float *image, int image_T, float t,
                        float *x_t, float *t_tok);

/* Host helpers shared with tests and tools: 3D RoPE angle tables cos/sin (L, head_dim/2)
 * for a grid of T'·H'·W' tokens (Wan's split: head_dim/2 − 2·⌊head_dim/6⌋ frequencies for
 * t, ⌊head_dim/6⌋ each for h and w, base 10000), and the sinusoidal timestep features
 * (B, freq_dim) = [cos(t·ω), sin(t·ω)], ω_j = 10000^(−j/(freq_dim/2)). */
void vf_dit_rope_tables(const vf_dit_config *c, int Tp, int Hp, int Wp, float *cos_out,
                        float *sin_out);
void vf_dit_timestep_features(const vf_dit_config *c, const float *t, int B, float *out);

#ifdef __cplusplus
}
#endif
#endif /* VF_DIT_H */
