/* dit_train.h — what the training stages (dit partitions, adamw shards, checkpoint) agree
 * on: who owns which part of the flat parameter vector, the 1F1B order, the learning-rate
 * schedule, the item metadata keys, and a small pool of backend buffers for hot items.
 *
 * Ownership of the flat vector:
 *  - partition p of P owns the range of its blocks (vf_dit_layout_range over the block
 *    boundaries `splits`, P + 1 entries 0 = s0 < s1 < … < sP = depth);
 *  - the vector is cut into norm blocks of `block` elements, a function of the parameter
 *    count alone (vf_train_norm_block); shard k of S owns blocks [k·nb/S, (k+1)·nb/S), so
 *    a norm block never straddles two shards, and the global gradient norm — per-block
 *    f64 partial sums added in block order — is the same number for every S.
 *
 * Items (docs/ITEMS.md, "training loop"):
 *   act     dit_p -> dit_p+1   x, e, e0, ctx, target; meta step, mb, B, Bg, T, H, W
 *   grad    dit_p+1 -> dit_p   x, e, e0, ctx (gradients); meta step, mb
 *   slice   dit_p -> adamw_k   "g" (n) gradient slice, absent when n == 0; meta step, part,
 *                              replica, off, n, samples, tokens, t0_ns, t1_ns, busy_ns,
 *                              [cursor] (partition 0), [loss] (last partition)
 *   weights adamw_k -> dit_p   "w" (n) updated weights, absent when n == 0; meta step,
 *                              shard, off, n
 *   norm    adamw_k -> adamw_j "partials" u8 (8·nblk: f64 per norm block); meta step,
 *                              shard, blk0, nblk
 *   snap    adamw_k -> checkpoint  "master", "exp_avg", "exp_avg_sq" f32 (n) on the host;
 *                              meta step, shard, shards, off, n, lr; shard 0 adds
 *                              "cursors" (JSON list), "config" (JSON), "loss", "preset",
 *                              and with LoRA "lora_alpha"
 * With LoRA (the stages' `lora` param) "the flat parameter vector" of all of the above is
 * the adapter vector (models/dit_lora.h), laid out and cut exactly as the model's is.
 *   ack     checkpoint -> adamw_k  (sync mode only) meta step, ok
 */
#ifndef VF_DIT_TRAIN_H
#define VF_DIT_TRAIN_H

#include "formats/ckpt.h"
#include "kernels/ops.h"
#include "models/dit.h"
#include "models/dit_lora.h"
#include "runtime/vflow.h"

/* Most partitions / shards the port tables allow (VF_MAX_PORTS per stage). */
#define VF_TRAIN_MAX_PARTS 24
#define VF_TRAIN_MAX_SHARDS 24

/* ------------------------------------------------------------------ ownership */

/* Elements per norm block: max(4096, the power of two ≥ ceil(total / 4096)), so a model
 * has at most ~4096 blocks (one sumsq call each) and tiny models keep fine blocks. */
int64_t vf_train_norm_block(int64_t total);

/* Elements of one snapshot chunk of `bytes` (the checkpoint's `chunk`, the shards'
 * ckpt_chunk): master weights and both moments, 12 bytes an element; at least 1. */
int64_t vf_train_ckpt_chunk_elems(int64_t bytes);

/* Shard k of S: elements [*lo, *hi) and norm blocks [*b0, *b1). */
void vf_train_shard_range(int64_t total, int64_t block, int S, int k, int64_t *lo, int64_t *hi,
                          int64_t *b0, int64_t *b1);

/* The model a stage's params describe (`model`) and what of it trains (`lora`): *cfg, its
 * layout *l and, with LoRA, the adapters *lora (NULL for a full fine-tune); the trainable
 * flat vector is (*lora)->l or *l. The partitions and the optimizer shards both take it
 * from here, so they agree on it. Caller frees *lora and *l, also on failure. */
int vf_train_model(const vf_params *p, vf_dit_config *cfg, vf_dit_layout **l, vf_dit_lora **lora,
                   vf_status *st);

/* The block boundaries param `splits` (P + 1 ints) checked against depth: 0, strictly
 * increasing, ending at depth. VF_EUSAGE naming `who` otherwise. */
int vf_train_splits(const vf_params *p, int depth, int *splits, int *P, const char *who,
                    vf_status *st);

/* [a0, a1) ∩ [b0, b1) as (*off, *n); n = 0 when empty. */
void vf_train_overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1, int64_t *off, int64_t *n);

/* The largest vf_train_overlap of [a0, a1) with the k ranges [lo[i], hi[i]), at least 1:
 * the element count of the buffers of a pool that serves all k pieces (the pool's size
 * and the stage's memory hook come from this one function). */
int64_t vf_train_most_overlap(int64_t a0, int64_t a1, const int64_t *lo, const int64_t *hi, int k);

/* ------------------------------------------------------------------ schedules */

/* One op of the 1F1B order of partition p: forward (fwd = true) or backward of mb. */
typedef struct vf_1f1b_op {
    bool fwd;
    int mb;
} vf_1f1b_op;

/* The 2·M ops of partition p of P for M micro-batches: min(P − p − 1, M) warmup
 * forwards, then alternating forward/backward, then the remaining backwards. ops has
 * room for 2·M. Also returns the most micro-batches in flight (saved stores needed). */
int vf_train_1f1b(int P, int p, int M, vf_1f1b_op *ops);

/* Learning rate at 1-based step s: linear warmup over `warmup` steps to lr, then constant
 * or cosine from lr down to min_lr at decay_steps (held there after). */
typedef struct vf_lr_sched {
    double lr, min_lr;
    int64_t warmup, decay_steps;
    bool cosine;
} vf_lr_sched;
double vf_train_lr(const vf_lr_sched *s, int64_t step);

/* Micro-batch m of M over a global batch of B samples: [*first, *first + *n). */
void vf_train_mb_range(int B, int M, int m, int *first, int *n);

/* ------------------------------------------------------------------ buffers */

/* A pool of equal-size backend buffers handed out as tensors: the tensor's release puts
 * the buffer back (from any thread), so hot items (activations, gradients, weight
 * slices) cost no allocation after the first steps. Reference counted: the stage holds
 * one reference, every tensor out one more, so buffers outlive the stage while a
 * consumer in the same process still holds an item. */
typedef struct vf_bufpool vf_bufpool;

/* Pool of buffers of `bytes` on backend be, keeping at most `keep` idle ones. Caller owns
 * it (vf_bufpool_unref). */
vf_bufpool *vf_bufpool_new(vf_backend *be, size_t bytes, int keep, vf_status *st);
void vf_bufpool_unref(vf_bufpool *p); /* NULL is fine */
size_t vf_bufpool_bytes(const vf_bufpool *p);
/* New tensor (dt, shape) over a pooled buffer; its nbytes must fit the pool's size.
 * Caller owns the reference. */
vf_tensor *vf_bufpool_tensor(vf_bufpool *p, vf_dtype dt, int ndim, const int64_t *shape,
                             vf_status *st);

/* Copies n elements starting at element `off` of item tensor src into backend memory dst
 * (dtype dst_dt) of be: a device copy when src lives on be's device in dst_dt, an upload
 * when src is host f32, a host-to-device copy when src is host memory in dst_dt. Other
 * combinations are VF_EINVAL naming `what`. */
int vf_train_tensor_in(vf_backend *be, void *dst, vf_dtype dst_dt, const vf_tensor *src,
                       int64_t off, int64_t n, const char *what, vf_status *st);

/* The orderly end of a training stage. A stage that simply returns may leave its
 * process before its producers have ended their edges towards it, and a producer cannot
 * always tell; so training stages end in two phases: first they end every output (their
 * consumers are still running and read the end of stream), then they close the inputs
 * whose producers should just stop (the data reader) and read every other input to its
 * end, dropping what is left. Names of unconnected ports are skipped. */
int vf_train_finish(vf_ctx *ctx, const char *const *outs, int nout, const char *const *stop_ins,
                    int nstop, const char *const *drain_ins, int ndrain, vf_status *st);

/* --resume found no complete checkpoint (`seen`: what vf_ckpt_find saw, `why`: its
 * message naming the directory). With --resume=auto and a directory that never held a
 * checkpoint the run starts from step 0 (0 returned; the checkpoint writer logs the
 * WARN, `loud`); with plain --resume it is bad input (VF_EUSAGE naming the directory), and
 * so is --resume=auto over checkpoints that are all damaged or gone (VF_EBADINPUT): a
 * run never starts over its own lost checkpoints silently. */
int vf_train_no_ckpt(vf_ctx *ctx, const vf_ckpt *seen, const vf_status *why, bool loud, vf_status *st);

/* A run started without --resume over a checkpoint dir that holds an earlier run's
 * checkpoints: they move into dir/earlier-<time> (formats/ckpt.h vf_ckpt_set_aside), with
 * a WARN from stage `who` saying which steps and where, so that nothing of that run is
 * lost and none of it is taken for this run's (a later --resume, `keep`). */
int vf_train_ckpt_aside(vf_ctx *ctx, const char *who, const char *dir, vf_status *st);

/* Wall clock for step timing (monotonic, ns; comparable across the processes of a node). */
int64_t vf_train_now_ns(void);

#endif /* VF_DIT_TRAIN_H */
