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
 * sequence. The all-to-all is the backend's (ops.h a2a_run): on the CPU the ranks'
 * shared-memory group, on GPUs NCCL among their devices.
 */
#ifndef VF_DIT_SP_H
#define VF_DIT_SP_H

#include "kernels/ops.h"
#include "models/dit.h"

typedef struct vf_dit_sp {
    vf_a2a *a2a;     /* the partition's host group (not owned); NULL with one rank */
    void *grp;       /* the backend's device group over it (ops.h a2a_open; not owned), or
                        NULL: the exchanges go through a2a itself (the CPU backend) */
    int n, rank;     /* ranks N and this one */
    int64_t L, Lr;   /* real tokens of the sequence, tokens each rank holds */
} vf_dit_sp;

/* The geometry of rank `rank` of n over L tokens with H heads; VF_EUSAGE naming both
 * numbers when n does not divide H. a2a may be NULL only when n is 1. */
int vf_dit_sp_init(vf_dit_sp *sp, vf_a2a *a2a, int n, int rank, int64_t L, int64_t H, vf_status *st);
/* This rank's real tokens: [*lo, *lo + *count) of the sequence (count may be 0). */
void vf_dit_sp_range(const vf_dit_sp *sp, int64_t *lo, int64_t *count);

/* Elements of one local tensor (B, Lr, H, Dh), and of each scratch buffer the
 * attention takes: four forward, five backward, owned by the caller. */
int64_t vf_dit_sp_elems(const vf_dit_sp *sp, int64_t B, int64_t H, int64_t Dh);
#define VF_DIT_SP_WORK_FWD 4
#define VF_DIT_SP_WORK_BWD 5

/* The self-attention over the whole sequence of the local q, k, v (B, Lr, H, Dh): out
 * (B, Lr, H, Dh) and lse (B, H/N, N·Lr) f32, which the backward takes as they are (in
 * the place of ops.h attention_fwd's). Errors of the all-to-all (a rank gone, a
 * mismatch) come back with their message. */
int vf_dit_sp_attention_fwd(vf_backend *be, const vf_dit_sp *sp, void *out, float *lse, const void *q,
                            const void *k, const void *v, int64_t B, int64_t H, int64_t Dh, float scale,
                            void *const work[VF_DIT_SP_WORK_FWD], vf_status *st);
/* dq, dk, dv (local, WRITTEN; none may be NULL) of that attention, from the local dout,
 * q, k, v, out and lse; the pad rows of dout are taken as zero (a pad has no loss), and
 * dk, dv of pad rows come out zero. */
int vf_dit_sp_attention_bwd(vf_backend *be, const vf_dit_sp *sp, void *dq, void *dk, void *dv, const void *dout,
                            const void *q, const void *k, const void *v, const void *out, const float *lse,
                            int64_t B, int64_t H, int64_t Dh, float scale, void *const work[VF_DIT_SP_WORK_BWD],
                            vf_status *st);

/* The geometry one rank of n holds for micro-batches up to max (whole sequences; N the
 * largest B·L over buckets, 0 when that is B·L): L = ⌈L/n⌉, N a bound on B·⌈L/n⌉ over
 * the buckets, ⌊(N + B·(n − 1))/n⌋ (0 when that is not below B·⌈L/n⌉); B, T, H, W kept. */
vf_dit_dims vf_dit_sp_rank_max(const vf_dit_dims *max, int n);

/* For sp = n ranks over sequences of up to L tokens, micro-batches of up to B samples
 * of model c in element size as: the bytes of one all-to-all chunk (what the group's
 * vf_a2a_open takes as chunk_max), and the device bytes vf_dit_part_set_sp allocates for
 * the attention's scratch (what a memory plan adds to the partition's). */
size_t vf_dit_sp_chunk_bytes(int n, int64_t L, int64_t B, const vf_dit_config *c, size_t as);
int64_t vf_dit_sp_scratch_bytes(int n, int64_t L, int64_t B, const vf_dit_config *c, size_t as);
/* The bytes of rank's share of the all-to-all's own buffers on device dev, for the same
 * geometry: on the CPU its part of the host group's shared memory (two banks of n × n
 * chunks, which the n ranks map once: 2·n chunks each), on a GPU the device group's
 * staging (n chunks; ops.h a2a_open). *host: the host bytes, *device: the device's. */
void vf_dit_sp_group_bytes(vf_device dev, int n, int64_t L, int64_t B, const vf_dit_config *c, size_t as,
                           int64_t *host, int64_t *device);

/* This rank's rows of the targets of a micro-batch of d->B samples, in the order the head
 * predicts them (token (t', h', w'), then its patch values (pt, ph, pw, z)): src (B, z, T,
 * H, W) host f32, whole latents of d's T, H, W (sp->L tokens each) -> dst (B, Lr, z·P)
 * host f32, pad rows zero. Buffers owned by the caller. What vf_dit_part_loss takes as
 * the target of a rank, so the target travels between partitions as the rank's rows. */
void vf_dit_sp_target_rows(const vf_dit_config *c, const vf_dit_sp *sp, const vf_dit_dims *d, const float *src,
                           float *dst);
/* Values of the largest micro-batch's target as a rank of n sends it, for micro-batches up
 * to max (whole sequences): B·L·z·P (N·z·P over buckets) for n = 1, else the rank's rows,
 * those of vf_dit_sp_rank_max. */
int64_t vf_dit_sp_target_values(const vf_dit_config *c, const vf_dit_dims *max, int n);

/* Runs partition p's self-attentions as rank sp->rank of sp (not owned: it outlives p),
 * and its passes on this rank's tokens: batch dims with L = sp->Lr (T, H, W those of the
 * whole latent, whose tokens are sp->L), p made for the rank's tokens (vf_dit_part_new_sp
 * with sp->n ranks over sequences of at least sp->L tokens; a middle partition may also
 * be vf_dit_part_new's for sp->Lr tokens). The first partition patchifies the whole
 * clips in its ends' buffers and embeds this rank's tokens' patches; the last runs the
 * head and the loss on this rank's rows against their targets (vf_dit_sp_target_rows),
 * the loss and its gradients this rank's share of the whole sequences' mean, so the
 * ranks' losses add up to one rank's, and so do their weight gradients (on the CPU
 * backend the whole sums on the last rank and zeros on the others: dit_red.h). sp's L and Lr may be changed
 * between micro-batches (another bucket) as long as sp->L stays within what it was at
 * this call. VF_EUSAGE at an end whose partition vf_dit_part_new_sp did not make for
 * sp->n ranks over sp->L tokens or more. On a backend other than the CPU's it joins the
 * device group of sp's ranks (ops.h a2a_open over sp->a2a: every rank sets its partition
 * at the same point), which p owns. Its all-to-all failures come back from
 * vf_dit_part_forward and vf_dit_part_backward. */
int vf_dit_part_set_sp(vf_dit_part *p, const vf_dit_sp *sp, vf_status *st);

#endif /* VF_DIT_SP_H */
