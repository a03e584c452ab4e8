/* dit_red.h — sums over tokens in the backward pass that give the same bits whatever the
 * sequence parallelism (internal to models/).
 *
 * A weight's gradient, a norm's gain's, a per-sample modulation's and the cross-attention
 * keys' all sum over the tokens. The CPU backend sums each call over its rows in order in
 * f64 and rounds once, so the bits depend on where the rows are cut. To make sp = 1, 2, 3,
 * … give the same bits, every such sum on the CPU backend runs in grains: a sample's tokens
 * are cut at every rank boundary ⌈L/N⌉·j of every N ≤ VF_DIT_GRAIN_NMAX that divides the
 * heads (the only sp values a run may take), and the op runs once a grain, segment after
 * segment and within a segment sample after sample, each call adding its rounded sum to
 * the running one. A rank of sp = N holds whole segments, so the same calls happen in the
 * same order when the running sums travel from rank to rank: the ranks of a partition
 * pass them on over their all-to-all group (vflow.h vf_a2a), rank r adding its grains
 * between receiving from r − 1 and sending to r + 1; the sender zeroes its copy. A
 * parameter's gradient, which adds up over the micro-batches of a step, goes round the
 * ring (the last rank hands it to rank 0 before rank 0's grains: `ring`); a pass's own
 * sums (the per-sample modulation and cross-attention key gradients) start at zero on
 * rank 0. Either way the whole sum ends on the last rank, every other rank's copy is zero,
 * and what reads it afterwards (the time and text embeddings' backward, the shards' sum
 * over the ranks) adds exact zeros for those.
 *
 * On other backends (GPUs) grains are off: one call over all rows, as the op's own
 * accumulation order has it, and each rank's gradients are its partial sums.
 */
#ifndef VF_DIT_RED_H
#define VF_DIT_RED_H

#include "models/dit_internal.h"

/* The largest sp whose rank boundaries cut the grains (Wan's 12 and 40 heads: sp = 2, 3,
 * 4, 6, 8 and 2, 4, 5, 8). A larger sp still runs, each sp deterministic. */
#define VF_DIT_GRAIN_NMAX 8
#define VF_DIT_GRAINS_MAX 64

typedef struct dit_grains {
    bool on;                            /* false: one call over all rows */
    bool pass;                          /* the running sums travel between ranks */
    int n;                              /* segments of a sample here */
    int64_t at[VF_DIT_GRAINS_MAX + 1];  /* segment i: local rows [at[i], at[i+1]) of each
                                           sample (the last one takes the pads too) */
    int64_t B, L;                       /* samples, rows a sample has here */
} dit_grains;

/* The grains of a backward pass over B samples of L local rows (the rank's Lr with p->sp). */
void dit_grains_of(const vf_dit_part *p, int64_t B, int64_t L, dit_grains *g);
/* No grains: one call over B·L rows (sums over samples, not tokens). */
void dit_grains_off(int64_t B, int64_t L, dit_grains *g);
/* One grain call: sample b's rows [row, row + rows) of the B·L, from its local token tok. */
typedef struct dit_grain {
    int64_t b, row, rows, tok;
} dit_grain;
/* Grain calls in order: k from 0 to dit_grains_count - 1 is segment k / B, sample k % B. */
int dit_grains_count(const dit_grains *g);
dit_grain dit_grain_at(const dit_grains *g, int k);

/* A running sum: n elements of gradient dtype at p (NULL or n = 0: none). */
typedef struct dit_acc {
    void *p;
    int64_t n;
} dit_acc;

/* The hops of the running sums a[0..na) before this rank adds its grains (enter) and after
 * (leave); ring: a parameter's gradient (from the last rank round to rank 0), else a pass's
 * own sum, which enter zeroes on every rank first. Errors are kept in p->sp_rc. No-ops
 * unless g->pass. */
void dit_red_enter(vf_dit_part *p, const dit_grains *g, const dit_acc *a, int na, bool ring);
void dit_red_leave(vf_dit_part *p, const dit_grains *g, const dit_acc *a, int na, bool ring);

/* Bytes of the grains' scratch of a partition planned as pl (the CPU backend's: two rows
 * of per-sample sums, a sample's cross-attention key and value gradients, the lse of a
 * sample's rows). */
int64_t dit_red_scratch_bytes(const dit_plan *pl);

/* The ops that sum over tokens (dit_red_ops.c), each over g's B·L rows with ops.h's
 * arguments and meaning: parameter gradients go round the ring; a per-sample sum (R = B
 * rows of per = L tokens; with a time row a token, R = B·L and per = 1, nothing sums and
 * the op runs as one call), the
 * cross-attention's key and value gradients and dit_red_rows_sum's sums are the pass's. */
void dit_red_matmul_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, int64_t C, int64_t OC, vf_grad_mode mode);
void dit_red_matmul_dgelu_bwd(vf_dit_part *p, const dit_grains *g, void *dpre, void *dbias_pre, void *dw,
                              void *dbias, const void *dout, const void *inp, const void *w, const void *pre,
                              int64_t C, int64_t OC);
void dit_red_matmul_batch_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, void *dbias,
                              const void *dout, const void *inp, const void *w, int64_t C, int64_t OC, int nb,
                              int64_t wstride, int64_t ostride, vf_grad_mode mode);
/* dit_lin_bwd and dit_lora_bwd of block blk's linear k */
void dit_red_lin_bwd(vf_dit_part *p, const dit_grains *g, int blk, int k, void *dinp, const void *dout,
                     const void *in, int64_t C, int64_t OC, vf_grad_mode mode);
void dit_red_lora_bwd(vf_dit_part *p, const dit_grains *g, int blk, int k, void *dx, const void *dy, const void *x,
                      int64_t in, int64_t out);
void dit_red_layernorm_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, void *db, const void *dout,
                           const void *inp, const void *w, const float *mean, const float *rstd, int64_t C);
void dit_red_rmsnorm_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, const void *dout,
                         const void *inp, const void *w, const float *rstd, int64_t C);
/* cs, sn: the tables of the g->L local tokens */
void dit_red_rmsnorm_rope_bwd(vf_dit_part *p, const dit_grains *g, void *dinp, void *dw, const void *dout,
                              const void *inp, const void *w, const float *rstd, const float *cs, const float *sn,
                              int64_t H, int64_t D);
void dit_red_ln_modulate_bwd(vf_dit_part *p, const dit_grains *g, void *dx, void *dshift, void *dscale,
                             const void *dout, const void *x, const float *mean, const float *rstd, const void *scale,
                             int64_t R, int64_t per, int64_t C, float eps, vf_grad_mode mode);
void dit_red_gated_add_bwd(vf_dit_part *p, const dit_grains *g, void *dx, void *dgate, void *dy, const void *dout,
                           const void *gate, const void *y, int64_t R, int64_t per, int64_t C);
/* Cross-attention of the g->L query rows over Lk keys a sample (lse (B, H, L)) */
void dit_red_cross_attention_bwd(vf_dit_part *p, const dit_grains *g, void *dq, void *dk, void *dv,
                                 const void *dout, const void *q, const void *k, const void *v, const void *out,
                                 const float *lse, int64_t Lk, int64_t H, int64_t Dh, float scale);
/* sum (nk, C) WRITTEN = each of rows (nk, B·L, C) summed over its rows (modulate_bwd's
 * dshift of a time row a token) */
void dit_red_rows_sum(vf_dit_part *p, const dit_grains *g, void *sum, const void *rows, int nk, int64_t C);

#endif /* VF_DIT_RED_H */
