/* dit_stage.h — internals of stage kind `dit` (one pipeline partition), shared by the
 * stage glue (dit_stage.c: params, ports, memory, the step loop) and the step engine
 * (dit_step.c: the first partition's batch, the 1F1B order of one step, the gradient
 * slices). Not for other stages.
 */
#ifndef VF_DIT_STAGE_H
#define VF_DIT_STAGE_H

#include "stages/train/dit_train.h"
#include "models/dit_lora.h"
#include "models/dit_fp8.h"

/* Hot-item pools: forward activations (+ target), last partition's boundary gradients. */
enum { XF_X = 0, XF_E, XF_E0, XF_CTX, XF_TARGET, XF_N };
extern const char *const vf_dit_xf_names[XF_N];

typedef struct dit_part_state {
    /* model and placement */
    vf_dit_config cfg;
    vf_dit_layout *l;
    vf_backend *be;
    vf_dtype act, grad;
    size_t as, gs;
    int p, P, M, S, D, r;
    int sp, sp_rank;                         /* sequence parallelism: ranks N and this one */
    vf_ctx *ctx;                             /* the run's (its abort flag stops a waiting rank) */
    char run_dir[4096];
    vf_a2a *a2a;                             /* the ranks' group (sp > 1, from setup) */
    struct vf_dit_sp *spg;                   /* the rank's geometry, which the partition reads */
    float *h_trows;                          /* first partition, sp > 1: the rank's target rows */
    int splits[VF_TRAIN_MAX_PARTS + 1];
    bool first, last;
    int recompute;          /* vf_dit_recompute */
    int64_t off, n;                          /* this partition's range of the trainable vector
                                                (the model's, or with LoRA the adapters') */
    vf_dit_lora *lora;                       /* NULL: full fine-tune */
    int64_t boff, bn;                        /* with LoRA: the range of the frozen base */
    void *base;                              /* with LoRA: the base weights of the range (act
                                                dtype), loaded once and never updated; with
                                                block swap without the swapped blocks */
    vf_dit_fp8 *fp8;                         /* with base_dtype "fp8": the base instead, its
                                                block linears in FP8 (base then NULL) */
    int swap;                                /* swap_blocks K: the last K blocks' base in swap_host */
    bool offload;                            /* offload_activations */
    void *swap_host;                         /* pinned host memory (be->alloc_pinned) of those blocks;
                                                in a full fine-tune their weights, lent to the
                                                shards beside params (dit_xchg.c) */
    void *swap_ghost;                        /* in a full fine-tune: those blocks' gradients on the
                                                host, lent beside grads (NULL with LoRA) */
    bool swap_shared;                        /* swap_host and swap_ghost are vf_alloc_shared's */
    int64_t swap_hole, swap_hole_n;          /* their elements, relative to boff */
    int64_t slo[VF_TRAIN_MAX_SHARDS], shi[VF_TRAIN_MAX_SHARDS];
    int64_t steps;
    double peak;                             /* the device's bf16 peak FLOP/s, 0 unknown (CPU) */
    char peak_dev[320];                      /* host/device: shards add each device's peak once */
    vf_dit_rf rf;
    char ckpt_dir[4096];

    /* buffers: weights and gradients of the trainable range (backend shared memory: the
     * shards reach them through views, dit_xchg.c); in a full fine-tune with block swap
     * without the swapped blocks' hole, which swap_host and swap_ghost hold */
    void *params, *grads;
    bool lend_w[VF_TRAIN_MAX_SHARDS];        /* shard k writes its weights in place (else it
                                                replies with them as data) */

    /* set up at the first micro-batch, once its geometry is known */
    bool ready;
    vf_dit_dims max;                         /* largest micro-batch (over the buckets) */
    bool bucketed;                           /* first partition: batches name their buckets */
    vf_dit_part *part;
    vf_dit_saved **sv;
    int nsv;
    vf_1f1b_op *ops;
    vf_bufpool *act_pool[XF_N], *gout_pool[XF_CTX + 1];
    /* first partition: host staging of one micro-batch and its device copy */
    float *h_xt, *h_target, *h_t;
    float *h_emb;                            /* (B, text_len, text_dim) with text embeddings */
    float *h_cond;                           /* (B, in_dim − z, T, H, W) image-to-video conditioning */
    void *d_cond;                            /* its device copy (dit_cond.c) */
    float *h_img;                            /* (B, img_len, img_dim) CLIP image features (img_dim > 0) */
    float *h_ttok;                           /* (B, L) each token's time (t_tokens models) */
    int32_t *h_text, *h_len;
    void *d_xt, *d_target;
    int64_t per;                             /* latent elements per sample of this step */
    int64_t cap;                             /* latent elements the staging holds (B·per at most) */

    /* resume: skip reader batches up to this cursor (first partition) */
    char skip_to[512];

    /* routing by the drawn t (dit_route.c; route 0: every sample of the batch trains) */
    int route;                               /* VF_DIT_ROUTE_* */
    double boundary;
    int *route_j, route_cap;                 /* first partition: the routed samples' indices
                                                in the replica's batch, this step */
    int routed;                              /* first partition: how many, this replica */
    int64_t routed_total;                    /* over the D replicas */
} dit_part_state;

/* Routing by the drawn t (dit_route.c): an expert of two trains the samples whose t,
 * drawn over the run's whole distribution for (seed, step, j·D + r), falls on its side of
 * the boundary (high: t >= boundary, low: below). param: params route ("" | high | low)
 * and boundary checked against the distribution rf (VF_EUSAGE: another name, a boundary
 * outside (0, 1), a t_min / t_max range). pick: how many samples of replica r's batch of
 * Bg go to `route`, their indices j into keep (in order; keep may be NULL). step (first
 * partition): sets h->route_j, h->routed and h->routed_total (the D replicas' batches of
 * Bg each) and, when any is routed, replaces *batch (freed) with an item of the routed
 * samples' rows (caller owns it). */
enum { VF_DIT_ROUTE_NONE = 0, VF_DIT_ROUTE_HIGH, VF_DIT_ROUTE_LOW };
int vf_dit_route_param(const vf_params *prm, const vf_dit_rf *rf, int *route, double *boundary, vf_status *st);
int vf_dit_route_pick(const vf_dit_rf *rf, int route, double boundary, int64_t step, int Bg, int D, int r, int *keep);
int vf_dit_route_step(dit_part_state *h, vf_item **batch, int64_t step, int Bg, vf_status *st);

/* dit_cond.c: the image-to-video conditioning of the first partition: the channels (mask
 * and first-frame latent "y") when in_dim > z, the CLIP image features "clip_emb" when
 * img_dim > 0; nothing for a text-to-video model. Setup sizes the staging to h->cap and
 * h->max.B; check refuses (naming the stage) a batch without a fitting "y" or
 * "clip_emb"; fill writes micro-batch [first, first + nb)'s into h->h_cond and h->h_img
 * and returns how many values of h_cond that is. */
int vf_dit_cond_setup(dit_part_state *h, vf_status *st);
void vf_dit_cond_teardown(dit_part_state *h);
int vf_dit_cond_check(const char *stage, const dit_part_state *h, const vf_item *batch, vf_status *st);
/* What setup allocates, for the plan: micro-batches of up to B samples and `per` latent
 * values, act dtype of `as` bytes on device dev. */
void vf_dit_cond_memory(const vf_dit_config *c, int64_t B, int64_t per, int64_t as, vf_device dev, vf_mem_plan *out);
int64_t vf_dit_cond_fill(dit_part_state *h, const vf_item *batch, int first, int nb); /* its elements */
/* Image-to-video by the first frame (a batch of kind first_frame, Wan 2.2 TI2V): the pairs
 * of micro-batch [first, first + nb) made, each sample's frame 0 of h->h_xt becomes its
 * clean latent's and h->h_ttok gets its tokens' times (vf_dit_first_frame). Returns the
 * latent frames the loss leaves out: 1, or 0 for a batch of another kind (nothing done). */
int vf_dit_cond_first_frame(dit_part_state *h, const vf_item *batch, int first, int nb);

/* What one step produced, for the gradient items and the metrics. */
typedef struct dit_step_out {
    double loss;                             /* last partition: mean over the replica's batch */
    int samples;                             /* first partition: the global batch of this replica */
    int64_t tokens;                          /* samples × tokens per sample */
    double flops;                            /* first partition: the whole model's FLOPs of the
                                                replica's batch (vf_dit_train_flops) */
    int64_t busy_ns;
    char cursor[512];                        /* first partition: reader cursor after the batch */
    int routed;                              /* routing: the samples of the step's micro-batches
                                                (rank 0 of sp; 0 on the others) */
} dit_step_out;

#define VF_DIT_MAX_BUCKETS 256

/* The largest micro-batch over a bucketed reader's buckets: geo is a batch's
 * "geometries" metadata, "name:B,z,T,H,W;…" (B the bucket's batch, z, T, H, W its
 * latent); M micro-batches. Each bucket is checked against the model (channels, patch,
 * B >= M) and named when it fails (VF_EBADINPUT). each (VF_DIT_MAX_BUCKETS entries; NULL
 * if not wanted) receives every bucket's micro-batch and *neach their number. */
int vf_dit_bucket_max(const char *who, const vf_dit_config *c, int M, const char *geo, vf_dit_dims *max,
                      vf_dit_dims *each, int *neach, vf_status *st);

/* Allocates what depends on the geometry (partition, saved stores, pools, staging) for
 * micro-batches up to max. */
int vf_dit_stage_setup(dit_part_state *h, const vf_dit_dims *max, vf_status *st);
void vf_dit_stage_teardown(dit_part_state *h);

/* Runs the M micro-batches of `step` in 1F1B order (grads zeroed first). The first
 * partition receives its batch from "batch" (skipping batches before skip_to). VF_EOS
 * when the input ended before the step began. */
int vf_dit_stage_step(vf_stage *s, vf_ctx *ctx, dit_part_state *h, int64_t step, dit_step_out *o,
                      vf_status *st);

/* Sequence parallelism (dit_sp_rank.c). check: sp divides the heads, sp_rank below sp
 * (VF_EUSAGE naming the numbers). device: sp > 1 runs on the CPU backend (VF_EUSAGE naming
 * the device; what `vflow run` checks before it starts anything, while `vflow plan`
 * plans a rank on any device). open (setup,
 * sp > 1): the group of the partition's ranks and the partition's SP geometry, for
 * micro-batches up to max (h owns both). close: both gone. dims: d (whole sequences)
 * cut to the rank's tokens (d->L = Lr); unchanged with sp = 1. loss: the ranks' losses
 * summed in rank order (every rank gets the sum). */
int vf_dit_sp_rank_check(const vf_dit_config *c, int sp, int sp_rank, vf_status *st);
int vf_dit_sp_rank_device(int sp, vf_device dev, vf_status *st);
int vf_dit_sp_rank_open(dit_part_state *h, const vf_dit_dims *max, vf_status *st);
void vf_dit_sp_rank_close(dit_part_state *h);
void vf_dit_sp_rank_dims(dit_part_state *h, vf_dit_dims *d);
int vf_dit_sp_rank_loss(dit_part_state *h, double *loss, vf_status *st);
/* The index the shards know this partition by among their D·sp "replicas". */
#define VF_DIT_LANE(h) ((h)->r * (h)->sp + (h)->sp_rank)

/* The exchange with the optimizer shards (dit_xchg.c). lend: before the first step, the
 * weights' views to every shard (step -1). recv: the S replies of one step, *step set from
 * the first (when < 0) and checked against the rest; weights that come as data are
 * copied in; VF_EOS when the shards ended. send: the step's slice items, the weights' and
 * gradients' views with the step's metadata. */
int vf_dit_xchg_lend(vf_stage *s, vf_ctx *ctx, dit_part_state *h, vf_status *st);
int vf_dit_xchg_recv(vf_stage *s, vf_ctx *ctx, dit_part_state *h, int64_t *step, vf_status *st);
int vf_dit_xchg_send(vf_stage *s, vf_ctx *ctx, dit_part_state *h, int64_t step, const dit_step_out *o, int64_t t0,
                     int64_t t1, vf_status *st);

/* Elements of the largest tensor of the model in [off, off + n): the host staging of
 * loading the frozen base tensor by tensor (dit_stage.c). */
int64_t vf_dit_largest_in(const vf_dit_layout *l, int64_t off, int64_t n);

/* The frozen base in FP8 (dit_base_fp8.c, models/dit_fp8.h). base_dtype: the param read
 * ("" the model's dtype, "fp8"); *fp8 set; VF_EUSAGE naming the param for another value
 * or for "fp8" without LoRA (lora false: a full fine-tune trains the base). plan: the
 * base's device bytes (FP8 bytes, the other tensors at as, the dequantisation scratch)
 * and its host scales; with `swap` blocks swapped (the last of a partition ending at
 * block b1) their FP8 bytes on the host and a ring of two on the device. load: the base of h's range from the `weights` file (F8_E4M3
 * tensors with their scales kept as they are, others quantised) or the seeded init,
 * into h->fp8. */
int vf_dit_base_dtype(const vf_params *prm, bool lora, bool *fp8, vf_status *st);
void vf_dit_base_fp8_plan(vf_mem_plan *out, vf_device dev, const vf_dit_layout *l, int64_t off, int64_t n,
                          int b1, int swap, size_t as);
int vf_dit_base_fp8_load(vf_stage *s, dit_part_state *h, const vf_params *prm, vf_status *st);
/* Block swap (dit_swap.c). check: swap_blocks K of partition p (blocks [b0, b1)) is
 * usable: 0, or below the blocks (VF_EUSAGE naming both numbers). plan: its lines in the
 * stage's memory plan (ring on the device, swapped blocks on the host). resident: base
 * elements that stay on the device. dst: where the base element at rel (from boff) is
 * loaded, in swap_host (*host true) or in base. */
int vf_dit_swap_check(int K, int p, int b0, int b1, vf_status *st);
/* The swap_blocks param: *K (0 while it is "auto", *is_auto then), checked as above. */
int vf_dit_swap_param(const vf_params *prm, int p, int b0, int b1, int *K, bool *is_auto, vf_status *st);
/* dit_offload.c: offload_activations refused without recompute (VF_EUSAGE naming the
 * partition); its plan lines for nsv saved stores of a rank of sp, returning the bytes of
 * one saved store on the device (what replaces vf_dit_mem.saved). */
int vf_dit_offload_check(bool offload, int recompute, int p, vf_status *st);
int64_t vf_dit_offload_plan(vf_mem_plan *out, vf_device dev, const vf_dit_config *c, int b0, int b1,
                            const vf_dit_dims *max, int sp, int recompute, size_t as, size_t gs, int nsv);
/* gs: 0 for a frozen base (its weights only), else the gradients' element size (a full
 * fine-tune: the ring and the host copy hold each swapped block's gradient too). */
void vf_dit_swap_plan(vf_mem_plan *out, vf_device dev, const vf_dit_layout *l, int b0, int b1, int K,
                      size_t as, size_t gs);
/* Sequence parallelism in the plan (dit_sp_plan.c), for sp = N ranks of the partition: the
 * lines SP adds to one rank's (the attention's heads-layout scratch, the all-to-all's
 * buffers, the cuDNN workspace of H/N heads over every token), given the whole sequence's
 * geometry mx and each bucket's. */
void vf_dit_sp_plan(vf_mem_plan *out, vf_device dev, const vf_dit_config *c, int sp, const vf_dit_dims *mx,
                    const vf_dit_dims *each, int neach, size_t as);
/* The whole sequences a rank of the first partition holds (dit_sp_plan.c), from its
 * partition's m (vf_dit_part_memory_sp): the patchify of the whole clips it takes its
 * tokens' patches from (m->ends). */
void vf_dit_sp_ends_plan(vf_mem_plan *out, vf_device dev, const vf_dit_mem *m);
/* The target on activation port ps of a rank of sp > 1 (dit_sp_plan.c): its rows (B, L,
 * z·P) of dtype dt, mr the rank's geometry (vf_dit_sp_rank_max of mx); and, where ps lists
 * no geometries (one latent shape), mx's latent as its one entry, a batch of B·M samples
 * (M micro-batches of mx's B): the next partition sizes for it, and a rank's target
 * does not carry it. */
void vf_dit_sp_target_port(vf_port_spec *ps, const vf_dit_config *c, const vf_dit_dims *mr, const vf_dit_dims *mx,
                           int M, vf_dtype dt);
/* The first partition's host rows of its targets (dit_sp_rank.c), for the rank's micro-batch
 * d (d->B samples, d->L its tokens, whole latents' T, H, W): with sp = 1 the pairs' targets
 * (h->h_target), else this rank's rows of them cut into h->h_trows
 * (vf_dit_sp_target_rows); *n their values. The pointer is h's. */
const float *vf_dit_sp_rank_target(dit_part_state *h, const vf_dit_dims *d, int64_t *n);
int64_t vf_dit_swap_resident(const dit_part_state *h);
void *vf_dit_swap_dst(const dit_part_state *h, int64_t rel, bool *host);
/* A full fine-tune with block swap (h->swap, no LoRA): the host copies of the swapped
 * blocks' weights and gradients (swap_host, swap_ghost), memory the shards in other
 * processes map on the CPU backend, page-locked on a GPU's; VF_ENOMEM naming the stage.
 * free: what alloc made (either kind; NULL ones fine). */
int vf_dit_swap_host_alloc(vf_stage *s, dit_part_state *h, vf_status *st);
void vf_dit_swap_host_free(dit_part_state *h);
/* Elements of the trainable range that params and grads hold: the range, less the
 * swapped blocks in a full fine-tune. */
int64_t vf_dit_swap_lent_n(const dit_part_state *h);
/* Zeroes the step's gradients: the resident ones and the swapped blocks' host copy. */
void vf_dit_swap_zero_grads(dit_part_state *h);
/* The piece [off, off + n) of the trainable range split at the swapped blocks' host copy
 * (a full fine-tune): *hn of its elements lie there, from piece element *ha on, which are
 * elements [*hp, *hp + *hn) of swap_host / swap_ghost; the other n − *hn are elements
 * [*rp, *rp + n − *hn) of params / grads. *hn = 0 (and *ha = *hp = 0) without them. */
void vf_dit_swap_piece(const dit_part_state *h, int64_t off, int64_t n, int64_t *rp, int64_t *ha, int64_t *hn,
                       int64_t *hp);
/* metrics: a "swap" row of the partition's copy totals after `step` (nothing without swap). */
void vf_dit_swap_metrics(vf_ctx *ctx, const dit_part_state *h, int64_t step);

#endif /* VF_DIT_STAGE_H */
