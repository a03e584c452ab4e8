/* dit_sp.h — Ulysses sequence parallelism of the DiT's self-attention: the N ranks of a
 * partition each hold a contiguous range of the tokens, and around self-attention they
 * trade tokens for heads with an all-to-all (vflow.h vf_a2a), so that each rank attends
 * over every token for H/N of the heads, and trade back after it.
 *
 * Tokens: a sequence of L tokens is cut into N ranges of Lr = ceil(L/N) tokens, rank r
 * holding [r·Lr, (r+1)·Lr); the last ranks' ranges run past L, and those pad tokens are
 * kept out of every real token's result: the keys and values are cut to the L real ones
 * before attention, so a pad is never attended to. Its own query rows come out as
 * attention over the real keys, which the caller masks (the loss gives pads no gradient).
 * Heads: rank r attends with heads [r·H/N, (r+1)·H/N), so H % N == 0.
 *
 * Layouts (act dtype, B samples): local q, k, v, out, dout, dq, dk, dv are (B, Lr, H, Dh);
 * the heads layout a rank attends in is (B, N·Lr, H/N, Dh), as many elements. Each row
 * of every (b, head) attention is computed by the same kernel over the same keys as
 * without SP, so the results are the same bits as one rank's attention over the whole
 * sequence. The all-to-all runs over host memory: the CPU backend.
 */
#ifndef VF_DIT_SP_H
#define VF_DIT_SP_H

#include "kernels/ops.h"

typedef struct vf_dit_sp {
    vf_a2a *a2a;     /* the partition's group (not owned); NULL with one rank */
    int n, rank;     /* ranks N and this one */
    int64_t L, Lr;   /* real tokens of the sequence, tokens each rank holds */
} vf_dit_sp;

/* The geometry of rank `rank` of n over L tokens with H heads; VF_EUSAGE naming both
 * numbers when n does not divide H. a2a may be NULL only when n is 1. */
int vf_dit_sp_init(vf_dit_sp *sp, vf_a2a *a2a, int n, int rank, int64_t L, int64_t H, vf_status *st);
/* This rank's real tokens: [*lo, *lo + *count) of the sequence (count may be 0). */
void vf_dit_sp_range(const vf_dit_sp *sp, int64_t *lo, int64_t *count);

/* What a rank keeps between forward and backward, each (B, N·Lr, H/N, Dh) in the heads
 * layout, and lse (B, H/N, N·Lr) f32; work: scratch buffers of as many elements (one
 * forward, two backward). The caller allocates them (vf_dit_sp_elems elements each) and
 * owns them. */
typedef struct vf_dit_sp_saved {
    void *q, *k, *v, *o;
    float *lse;
} vf_dit_sp_saved;
int64_t vf_dit_sp_elems(const vf_dit_sp *sp, int64_t B, int64_t H, int64_t Dh);

/* out = self-attention of the local q, k, v over the whole sequence (B, Lr, H, Dh),
 * filling sv. Errors of the all-to-all (a rank gone, a mismatch) come back with their
 * message. */
int vf_dit_sp_attention_fwd(vf_backend *be, const vf_dit_sp *sp, void *out, const void *q, const void *k,
                            const void *v, int64_t B, int64_t H, int64_t Dh, float scale, vf_dit_sp_saved *sv,
                            void *work, vf_status *st);
/* dq, dk, dv (local, WRITTEN) of the attention fwd saved in sv, from the local dout; the
 * pad rows of dout are taken as zero (a pad has no loss), and dk, dv of pad rows are 0. */
int vf_dit_sp_attention_bwd(vf_backend *be, const vf_dit_sp *sp, void *dq, void *dk, void *dv, const void *dout,
                            int64_t B, int64_t H, int64_t Dh, float scale, const vf_dit_sp_saved *sv,
                            void *const work[2], vf_status *st);

#endif /* VF_DIT_SP_H */
