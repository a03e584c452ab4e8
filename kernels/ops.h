/* ops.h — the op table: every op the models use, declared once, forward and backward.
 *
 * A backend is a table of function pointers plus a context. The CPU backend
 * (kernels/cpu/) is the reference: f32 storage, f64 accumulation where it matters,
 * deterministic (same bits for the same inputs regardless of thread count). The CUDA
 * backend (kernels/cuda/) stores activations and weights in bf16 and accumulates in f32.
 *
 * Buffers are `void *` in the backend's storage dtype (be->act_dtype for activations
 * and weights, be->grad_dtype for gradients, f32 for norm statistics, lse, master weights
 * and optimizer moments). Models never dereference them: they only pass pointers, so one
 * model source drives both backends.
 *
 * Conventions:
 *  - Row-major, shapes in comments like llm.c: out (N, OC).
 *  - Parameter gradients (dw, dbias, norm gains, the embedding table) ACCUMULATE (+=):
 *    they sum over micro-batches, and the caller zeroes them once per step.
 *  - Activation gradients are WRITTEN (=): in the models the op is their buffer's first
 *    writer, so the buffer needs no memset before it (the library kernels under the
 *    fused ops, cuBLASLt with beta = 0 and cuDNN's SDPA backward, store their outputs
 *    too). Where some callers are first writers and others add a second path into the
 *    same gradient, the op takes a vf_grad_mode (matmul_bwd, matmul_batch_bwd, silu_bwd,
 *    ln_modulate_bwd). Two ops accumulate their input gradient: layernorm_bwd, which
 *    closes a residual branch whose skip path already holds the gradient, and
 *    conv3d_bwd. Each op's comment says which of its outputs are which.
 *  - A NULL optional pointer (bias, weight, gradient) means "absent / not wanted".
 *  - Ops never allocate; workspace, where needed, comes from be->workspace.
 */
#ifndef VF_OPS_H
#define VF_OPS_H

#include "kernels/ops_list.h"
#include "runtime/vflow.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vf_backend vf_backend;

/* How a backward op stores an activation gradient that takes a mode: WRITE stores it (=,
 * the op is the buffer's first writer), ADD adds it to what the buffer holds (+=, a
 * second path into the same gradient). */
typedef enum vf_grad_mode { VF_GRAD_WRITE = 0, VF_GRAD_ADD = 1 } vf_grad_mode;

struct vf_backend {
    const char *name;          /* "cpu", "cuda" */
    vf_device device;
    vf_dtype act_dtype;        /* activations and weights: F32 (cpu) / BF16 (cuda) */
    vf_dtype grad_dtype;       /* parameter gradients */
    void *ctx;                 /* backend private: stream, cuBLASLt handle, workspace */
    const char *model;         /* the device's product name ("NVIDIA H100 80GB HBM3"); NULL on
                                  the CPU. Borrowed, lives as long as the backend. */

    /* ---- memory (device memory is accounted to the calling stage) */
    void *(*alloc)(vf_backend *be, size_t bytes, vf_status *st);
    void (*free)(vf_backend *be, void *p);
    /* Memory that other processes of the node can map, so that views of it cross without a
     * copy (vflow.h "lending memory"): a shared segment (vf_alloc_shared) on the CPU, pool
     * memory (exported by CUDA IPC once) on a GPU. Freed with free_shared. */
    void *(*alloc_shared)(vf_backend *be, size_t bytes, vf_status *st);
    void (*free_shared)(vf_backend *be, void *p);
    /* Host memory this backend's device reads and writes at full speed: page-locked
     * (cudaHostAlloc, portable to every device of the process), so a copy between it and
     * the device is one DMA, not a copy through the driver's own staging buffer. Plain host
     * memory on the CPU backend. Freed with free_pinned. */
    void *(*alloc_pinned)(vf_backend *be, size_t bytes, vf_status *st);
    void (*free_pinned)(vf_backend *be, void *p);
    void (*memset0)(vf_backend *be, void *p, size_t bytes);
    /* copies between host f32 and backend storage of act_dtype / grad_dtype */
    void (*upload)(vf_backend *be, void *dst, const float *src, int64_t n, vf_dtype dst_dtype);
    void (*download)(vf_backend *be, float *dst, const void *src, int64_t n, vf_dtype src_dtype);
    void (*copy)(vf_backend *be, void *dst, const void *src, size_t bytes);
    /* rows blocks of width bytes: block r from src + r·spitch to dst + r·dpitch, in one
     * device call (the same frames of every (b, c) plane of a channel-first tensor: a
     * causal cache and its chunk side by side). The two regions do not overlap. */
    void (*copy2d)(vf_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                   size_t width, size_t rows);
    int (*sync)(vf_backend *be, vf_status *st);

    /* ---- block swap: weights kept in host memory and streamed into device buffers ahead
     * of use, on a copy stream beside the compute stream, so that a copy runs while the
     * ops before it compute. The weights' host memory is alloc_pinned's (on the CPU
     * backend any host memory). swap_new: a copy queue with `slots` numbered slots
     * (events); caller owns it (swap_free, which waits for its copies). swap_in: copy
     * `bytes` from host src to device dst (or, for activation offload and a full
     * fine-tune's swapped gradients, from device src to host dst) on the queue, starting
     * only after every op enqueued on the compute stream so far (the slot's previous user
     * of dst is done), and mark `slot` by it; a queue runs its copies in the order they
     * were enqueued (a copy out of a buffer ends before the next copy into it begins).
     * swap_wait: ops enqueued after it start only once slot's latest copy has landed.
     * swap_stats: seconds the queue's copies took, and seconds the caller waited for
     * them at swap_wait (0 where the backend cannot tell: the CUDA backend waits on the
     * device, not on the host). On the CPU the copy stream is a thread of the queue. */
    void *(*swap_new)(vf_backend *be, int slots, vf_status *st);
    void (*swap_free)(vf_backend *be, void *q);
    void (*swap_in)(vf_backend *be, void *q, int slot, void *dst, const void *src, size_t bytes);
    void (*swap_wait)(vf_backend *be, void *q, int slot);
    void (*swap_stats)(vf_backend *be, void *q, double *copy_s, double *wait_s);

    /* ---- all-to-all among the ranks of a group (sequence parallelism, models/dit_sp.h).
     * a2a_open: this device's group for rank `rank` of n ranks and chunks up to chunk_max
     * bytes, joined through `boot`, the ranks' host group (vflow.h vf_a2a), which every
     * rank passes in the same state and which outlives the device group: the CPU backend's
     * group is boot itself; the CUDA backend's is an NCCL communicator of the n devices,
     * whose unique id goes from rank 0 to the others over boot (one exchange), or, built
     * without NCCL, boot carrying pinned copies. Caller owns it (a2a_close).
     * a2a_run: send and recv are n chunks of `chunk` bytes of this backend's memory, chunk
     * j of send for rank j, chunk i of recv from rank i; they are the same buffer or do not
     * overlap. Every rank calls it the same number of times with the same chunk. It is
     * ordered with the compute ops around it (CUDA: enqueued on the compute stream) and
     * returns the errors it can see (a rank gone, the run stopping, NCCL's). The bytes are
     * moved, never combined: the same bits whatever the timing. */
    void *(*a2a_open)(vf_backend *be, vf_a2a *boot, int n, int rank, size_t chunk_max, vf_status *st);
    int (*a2a_run)(vf_backend *be, void *g, const void *send, void *recv, size_t chunk, vf_status *st);
    void (*a2a_close)(vf_backend *be, void *g);

    /* ---- recorded units (CUDA graphs). The ops a caller enqueues between graph_begin and
     * graph_end form one unit named by key[0..nkey): words that determine the unit's work
     * completely (what it is, its shapes, every pointer its ops touch; nkey ≤ 128).
     * graph_begin returns true when the caller is to enqueue the unit's ops now, false
     * when the backend ran a recording of them instead (the caller enqueues nothing).
     * graph_end closes the unit; it returns true when the ops must be enqueued once more
     * (a recording failed: its ops did not run; the next graph_begin asks for them again
     * and runs them as they come). So a unit is
     *     do { if (be->graph_begin(be, key, n)) <ops>; } while (be->graph_end(be));
     * Ops of a unit must not read host state that changes between runs with one key, nor
     * wait for the device. The CUDA backend records units when VFLOW_CUDA_GRAPHS=1 (run
     * eagerly the first time a key is seen, recorded the second, replayed after); by
     * default, and on the CPU backend, every unit runs as it comes. */
    bool (*graph_begin)(vf_backend *be, const uint64_t *key, int nkey);
    bool (*graph_end)(vf_backend *be);

    /* ---- dense
     * out (N, OC) = inp (N, C) · w (OC, C)ᵀ + bias (OC) */
    void (*matmul_fwd)(vf_backend *be, void *out, const void *inp, const void *w, const void *bias,
                       int64_t N, int64_t C, int64_t OC);
    /* dinp (N, C) = or += dout·w (mode) ; dw (OC, C) += doutᵀ·inp ; dbias (OC) += Σ_N dout */
    void (*matmul_bwd)(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                       const void *inp, const void *w, int64_t N, int64_t C, int64_t OC,
                       vf_grad_mode mode);
    /* A dense layer followed by GELU (tanh), the pre-activation kept for the backward:
     * pre (N, OC) = inp·wᵀ + bias ; out (N, OC) = gelu(pre). */
    void (*matmul_gelu_fwd)(vf_backend *be, void *out, void *pre, const void *inp, const void *w,
                            const void *bias, int64_t N, int64_t C, int64_t OC);
    /* The backward of a dense layer whose input is gelu(pre) (pre the previous layer's
     * output, kept by matmul_gelu_fwd), through the GELU as well:
     *   dpre (N, C) = (dout·w) ⊙ gelu'(pre)   WRITTEN
     *   dbias_pre (C) += Σ_N dpre             the previous layer's bias gradient (may be NULL)
     *   dw (OC, C) += doutᵀ·inp ; dbias (OC) += Σ_N dout    inp = gelu(pre) */
    void (*matmul_dgelu_bwd)(vf_backend *be, void *dpre, void *dbias_pre, void *dw, void *dbias,
                             const void *dout, const void *inp, const void *w, const void *pre,
                             int64_t N, int64_t C, int64_t OC);
    /* nb dense layers over one input, as one call (the DiT's q, k, v projections):
     * out_i (N, OC) = inp (N, C) · w_iᵀ + bias_i for i < nb, where w_i = w + i·wstride,
     * bias_i = bias + i·wstride (a flat parameter layout keeps each bias right after its
     * weight, so the two step alike; bias may be NULL) and out_i = out + i·ostride
     * (strides in elements). */
    void (*matmul_batch_fwd)(vf_backend *be, void *out, const void *inp, const void *w,
                             const void *bias, int64_t N, int64_t C, int64_t OC, int nb,
                             int64_t wstride, int64_t ostride);
    /* Its backward: dinp (N, C) = or += Σ_i dout_i·w_i (mode; the sum in order i = 0, 1, …);
     * dw_i += dout_iᵀ·inp, dbias_i += Σ_N dout_i with dw_i = dw + i·wstride, dbias_i =
     * dbias + i·wstride (the gradients have the parameters' layout), dout_i = dout +
     * i·ostride. */
    void (*matmul_batch_bwd)(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                             const void *inp, const void *w, int64_t N, int64_t C, int64_t OC,
                             int nb, int64_t wstride, int64_t ostride, vf_grad_mode mode);
    /* A dense layer whose weight is frozen and held in FP8 (a LoRA run's base):
     * w8 (OC, C) FP8 E4M3 bytes and its per-tensor scale stand for ŵ = e4m3(w8)·wscale
     * (vf_fp8_dequantise, runtime/vflow.h; in f32, then rounded to act_dtype).
     *   out (N, OC) = inp (N, C) · ŵᵀ + bias (OC)
     * wbuf (OC, C) act_dtype is the caller's scratch: the op dequantises ŵ into it and
     * runs matmul_fwd on it, so it computes what matmul_fwd computes on ŵ, bit for bit. */
    void (*matmul_fp8_fwd)(vf_backend *be, void *out, const void *inp, const uint8_t *w8,
                           float wscale, const void *bias, void *wbuf, int64_t N, int64_t C,
                           int64_t OC);
    /* Its backward through the frozen weight: dinp (N, C) = or += dout · ŵ (mode); no
     * weight or bias gradient (the base is frozen). wbuf as in the forward. */
    void (*matmul_fp8_bwd)(vf_backend *be, void *dinp, const void *dout, const uint8_t *w8,
                           float wscale, void *wbuf, int64_t N, int64_t C, int64_t OC,
                           vf_grad_mode mode);

    /* ---- elementwise (n elements)
     * out = a + b */
    void (*add)(vf_backend *be, void *out, const void *a, const void *b, int64_t n);
    /* y += alpha * x  (also used to accumulate gradients) */
    void (*axpy)(vf_backend *be, void *y, const void *x, float alpha, int64_t n);
    /* GELU, tanh approximation (as torch.nn.GELU(approximate="tanh")) */
    void (*gelu_fwd)(vf_backend *be, void *out, const void *inp, int64_t n);
    /* dinp = gelu'(inp)·dout, WRITTEN; dinp may be dout (in place) */
    void (*gelu_bwd)(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n);
    /* GELU, exact: 0.5·x·(1 + erf(x/√2)) (torch.nn.GELU(), Wan's image embedder) */
    void (*gelu_erf_fwd)(vf_backend *be, void *out, const void *inp, int64_t n);
    /* dinp = gelu_erf'(inp)·dout, WRITTEN */
    void (*gelu_erf_bwd)(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n);
    void (*silu_fwd)(vf_backend *be, void *out, const void *inp, int64_t n);
    /* dinp = or += silu'(inp)·dout (mode) */
    void (*silu_bwd)(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n,
                     vf_grad_mode mode);

    /* ---- normalisation over the last dim C of (N, C)
     * LayerNorm: out = (x-mean)·rstd·w + b (w, b optional); mean, rstd (N) f32 saved */
    void (*layernorm_fwd)(vf_backend *be, void *out, float *mean, float *rstd, const void *inp,
                          const void *w, const void *b, int64_t N, int64_t C, float eps);
    /* dinp += ∂/∂inp (ACCUMULATED: the residual's skip path already holds its share);
     * dw, db += */
    void (*layernorm_bwd)(vf_backend *be, void *dinp, void *dw, void *db, const void *dout,
                          const void *inp, const void *w, const float *mean, const float *rstd,
                          int64_t N, int64_t C);
    /* RMSNorm: out = x·rstd·w (w optional); rstd (N) f32 saved */
    void (*rmsnorm_fwd)(vf_backend *be, void *out, float *rstd, const void *inp, const void *w,
                        int64_t N, int64_t C, float eps);
    /* dinp = ∂/∂inp WRITTEN; dw += */
    void (*rmsnorm_bwd)(vf_backend *be, void *dinp, void *dw, const void *dout, const void *inp,
                        const void *w, const float *rstd, int64_t N, int64_t C);
    /* RMSNorm over channels of a channel-first tensor (B, C, S) (S = T·H·W), per
     * position, with gain w (C): the VAE's per-frame norm (Wan's RMS_norm). */
    void (*rmsnorm_ch_fwd)(vf_backend *be, void *out, const void *inp, const void *w,
                           int64_t B, int64_t C, int64_t S, float eps);

    /* ---- adaLN (DiT)
     * out (B, L, C) = x·(1 + scale[b]) + shift[b];  shift, scale (B, C) */
    void (*modulate_fwd)(vf_backend *be, void *out, const void *x, const void *shift,
                         const void *scale, int64_t B, int64_t L, int64_t C);
    /* dx = dout·(1 + scale) ; dshift = Σ_L dout ; dscale = Σ_L dout·x — all WRITTEN
     * (shift and scale are per-sample activations, not parameters) */
    void (*modulate_bwd)(vf_backend *be, void *dx, void *dshift, void *dscale, const void *dout,
                         const void *x, const void *scale, int64_t B, int64_t L, int64_t C);
    /* LayerNorm (no affine) and modulate as one op, the adaLN of a DiT block:
     * out (B, L, C) = x̂·(1 + scale[b]) + shift[b], x̂ = (x − mean)·rstd per row over C;
     * mean, rstd (B·L) f32 saved. The normalised x̂ is not stored: the backward recomputes
     * it from x and the statistics. */
    void (*ln_modulate_fwd)(vf_backend *be, void *out, float *mean, float *rstd, const void *x,
                            const void *shift, const void *scale, int64_t B, int64_t L,
                            int64_t C, float eps);
    /* dx = or += LayerNorm's backward of dout·(1 + scale) (mode: ADD where dx is a residual
     * stream's gradient); dshift = Σ_L dout ; dscale = Σ_L dout·x̂ WRITTEN. eps is the
     * forward's (the CPU backend recomputes the forward's f64 statistics from x to get its
     * x̂ bit for bit). */
    void (*ln_modulate_bwd)(vf_backend *be, void *dx, void *dshift, void *dscale,
                            const void *dout, const void *x, const float *mean,
                            const float *rstd, const void *scale, int64_t B, int64_t L,
                            int64_t C, float eps, vf_grad_mode mode);
    /* out (B, L, C) = x + gate[b]·y ;  gate (B, C).  out may alias x. */
    void (*gated_add_fwd)(vf_backend *be, void *out, const void *x, const void *gate,
                          const void *y, int64_t B, int64_t L, int64_t C);
    /* dx = dout ; dgate = Σ_L dout·y ; dy = dout·gate — all WRITTEN (dx may be NULL: a
     * caller whose dx is dout keeps dout) */
    void (*gated_add_bwd)(vf_backend *be, void *dx, void *dgate, void *dy, const void *dout,
                          const void *gate, const void *y, int64_t B, int64_t L, int64_t C);

    /* ---- rotary embedding on (B, L, H, D): rotate pairs (2i, 2i+1) of each head by
     * angle[l, i]; cos/sin (L, D/2) f32 precomputed by the model (3D RoPE: the D/2
     * frequencies are split across t, h, w). In place allowed. */
    void (*rope_fwd)(vf_backend *be, void *out, const void *inp, const float *cos,
                     const float *sin, int64_t B, int64_t L, int64_t H, int64_t D);
    /* dinp = R(-angle)·dout, WRITTEN */
    void (*rope_bwd)(vf_backend *be, void *dinp, const void *dout, const float *cos,
                     const float *sin, int64_t B, int64_t L, int64_t H, int64_t D);
    /* RMSNorm over the whole row (C = H·D, gain w (C) optional) and RoPE as one op (the
     * DiT's q and k): out (B, L, H, D) = rope(rmsnorm(inp)·w); rstd (B·L) f32 saved. No
     * aliasing. */
    void (*rmsnorm_rope_fwd)(vf_backend *be, void *out, float *rstd, const void *inp,
                             const void *w, const float *cos, const float *sin, int64_t B,
                             int64_t L, int64_t H, int64_t D, float eps);
    /* dinp = ∂/∂inp WRITTEN ; dw += */
    void (*rmsnorm_rope_bwd)(vf_backend *be, void *dinp, void *dw, const void *dout,
                             const void *inp, const void *w, const float *rstd,
                             const float *cos, const float *sin, int64_t B, int64_t L,
                             int64_t H, int64_t D);

    /* ---- attention, non-causal, softmax(q·kᵀ·scale)·v
     * q (B, Lq, H, D), k/v (B, Lk, H, D), out (B, Lq, H, D), lse (B, H, Lq) f32 saved
     * (lse = ln Σ_j exp(scale·q·k_j), the natural-log log-sum-exp of the scaled scores:
     * flash attention's and cuDNN's Stats convention; lse may be NULL) */
    void (*attention_fwd)(vf_backend *be, void *out, float *lse, const void *q, const void *k,
                          const void *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                          int64_t D, float scale);
    /* dq (B, Lq, H, D) = ∂/∂q, dk, dv (B, Lk, H, D) likewise: WRITTEN, not accumulated
     * (zeros where no score reaches them: Lq or Lk = 0); each may be NULL. */
    void (*attention_bwd)(vf_backend *be, void *dq, void *dk, void *dv, const void *dout,
                          const void *q, const void *k, const void *v, const void *out,
                          const float *lse, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                          int64_t D, float scale);

    /* ---- layout: out = inp permuted; shape (ndim ≤ 6) of inp, perm[i] = source axis of
     * output axis i (as torch.permute). Backward is the inverse permutation. */
    void (*permute)(vf_backend *be, void *out, const void *inp, int ndim, const int64_t *shape,
                    const int *perm);

    /* ---- conv3d, channel-first: inp (B, C, T, H, W), w (OC, C, KT, KH, KW), bias (OC),
     * out (B, OC, To, Ho, Wo), To = (T + pt0 + pt1 - KT)/st + 1, Ho = (H + ph0 + ph1 -
     * KH)/sh + 1, Wo likewise. Zero padding before (pt0, ph0, pw0) and after (pt1, ph1,
     * pw1) each axis, so no padded copy is ever made: causal time is pt0 = KT-1, pt1 = 0;
     * the VAE's spatial downsample pads (ph, pw) = (0, 1), (0, 1). */
    void (*conv3d_fwd)(vf_backend *be, void *out, const void *inp, const void *w, const void *bias,
                       int64_t B, int64_t C, int64_t T, int64_t H, int64_t W, int64_t OC,
                       int KT, int KH, int KW, int st, int sh, int sw, int pt0, int pt1, int ph0,
                       int ph1, int pw0, int pw1);
    /* dinp, dw, dbias += (the VAE is frozen: nothing trains through it) */
    void (*conv3d_bwd)(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                       const void *inp, const void *w, int64_t B, int64_t C, int64_t T,
                       int64_t H, int64_t W, int64_t OC, int KT, int KH, int KW, int st, int sh,
                       int sw, int pt0, int pt1, int ph0, int ph1, int pw0, int pw1);

    /* ---- embedding: out (N, C) = table[tok[n]]; tok i32 on the device */
    void (*embed_fwd)(vf_backend *be, void *out, const int32_t *tok, const void *table,
                      int64_t N, int64_t C);
    /* dtable += (a parameter) */
    void (*embed_bwd)(vf_backend *be, void *dtable, const void *dout, const int32_t *tok,
                      int64_t N, int64_t C);

    /* ---- loss: mean squared error of n values as a share of a mean over count (n for
     * the plain mean; more for a part of a whole, as a sequence-parallel rank's tokens):
     * returns the f64 sum / count and dpred += grad_scale · 2·(pred − target)/count */
    double (*mse_fwd_bwd)(vf_backend *be, void *dpred, const void *pred, const void *target,
                          int64_t n, int64_t count, float grad_scale);

    /* ---- optimizer on f32 master weights, f32 moments, gradients in grad_dtype.
     * t is the 1-based step for bias correction; grad_scale multiplies the gradient
     * (global-norm clipping). weights_out (act_dtype, may be NULL) receives the new
     * weights for the compute copy (bf16 on CUDA). */
    void (*adamw)(vf_backend *be, float *master, float *m, float *v, const void *grad,
                  void *weights_out, int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int64_t t);
    /* Σ g² over n gradient elements, f64 (a fixed-order partial for global-norm). */
    double (*sumsq)(vf_backend *be, const void *grad, int64_t n);
};

/* The ops of the table by name (kernels/ops_list.h): member name, family, offset in
 * struct vf_backend. vf_nops entries, in table order. */
typedef struct vf_op_info {
    const char *name;
    const char *family;
    size_t offset;
} vf_op_info;
extern const vf_op_info vf_ops[];
extern const int vf_nops;
/* The op's function pointer in be (NULL if the backend lacks it), for table checks. */
void (*vf_op_fn(const vf_backend *be, const vf_op_info *op))(void);
/* The op named name, NULL if there is none. */
const vf_op_info *vf_op_find(const char *name);

/* The CPU backend (static, thread-safe, deterministic). */
vf_backend *vf_backend_cpu(void);
/* The CPU backend keeping weights and gradients in dt: F32 is vf_backend_cpu(); BF16 is
 * the host optimizer shard of partitions that compute in bf16 (offload): its memory ops,
 * axpy, adamw (bf16 gradient read exactly, new weights rounded to nearest even, f32
 * state) and sumsq work on bf16, and the model's ops are absent (NULL). Static; NULL
 * with st set for another dtype. */
vf_backend *vf_backend_cpu_for(vf_dtype dt, vf_status *st);
/* The CUDA backend for device index i; NULL and st set when CUDA is not built or no
 * such device exists. */
vf_backend *vf_backend_cuda(int index, vf_status *st);
/* Backend for a device. */
vf_backend *vf_backend_for(vf_device dev, vf_status *st);

/* The most device memory one attention call may take as workspace on the CUDA backend:
 * VFLOW_ATTN_WORKSPACE_MB (MiB; default 4096). -1 when the variable is set but is no
 * positive integer (the CUDA backend then refuses to start, naming it). */
int64_t vf_attention_workspace_limit(void);
/* Device bytes of workspace the backend of dev may hold for one attention_fwd or
 * attention_bwd with B·H heads of Lq queries and Lk keys of width D: what the memory plan
 * counts for cuDNN's fused attention (the CUDA backend grows one workspace per device to
 * the largest a graph asks for). cuDNN's deterministic SDPA backward on Hopper has two
 * forms. One keeps the bf16 score gradient of every (query, key) pair in its workspace;
 * the frontend takes it while that matrix (its estimate: queries in 64-row and keys in
 * 128-row tiles) is within vf_attention_workspace_limit, and the bound is the matrix with
 * both lengths in 128-row tiles. Past the limit, cuDNN 9.25 and newer accumulate dQ in
 * order in an f32 buffer (B·H·Lq·D), which is the bound then; an older cuDNN's shape runs
 * on the hand kernels, with no workspace. Both add two f32 per query row (the frontend's
 * softmax sum, and room for one more row statistic) and 16 MiB for the engine's own
 * scratch, which only a device can tell (the CUDA op test checks the bound there).
 * 0 where dev is not a CUDA device. */
int64_t vf_attention_workspace_bound(vf_device dev, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                                     int64_t D);

/* One conv3d_fwd call's geometry: the op's arguments but the pointers (what the memory
 * plan and the checks of cuDNN's graphs list per layer). */
typedef struct vf_conv3d_shape {
    int64_t B, C, T, H, W, OC;
    int KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1;
} vf_conv3d_shape;
/* Its output frames, rows and columns (ops.h's formulas). */
void vf_conv3d_out(const vf_conv3d_shape *s, int64_t *To, int64_t *Ho, int64_t *Wo);
/* Device bytes of workspace the backend of dev lets cuDNN take for one conv3d_fwd of s:
 * room for a channels-last copy of the padded input, of the output and of the weights in
 * bf16 (what an engine that runs NCDHW operands on channels-last tensor-core kernels
 * converts them into) and 16 MiB for an engine's own scratch. The CUDA backend takes only
 * plans within it (the next of cuDNN's heuristic list where the first wants more; the
 * hand kernel where none fits) and grows one workspace per device to the largest a graph
 * asks for, so the largest layer's bound is what the memory plan counts for a model's
 * convolutions. 0 where dev is not a CUDA device. */
int64_t vf_conv3d_workspace_bound(vf_device dev, const vf_conv3d_shape *s);

/* Dense bf16 tensor-core peak of a device by its product name (FLOP/s, no sparsity),
 * from a small table of NVIDIA's data-sheet numbers: H100 SXM and H200 989 T, H100 /
 * H200 NVL 835 T, H100 PCIe 756 T, A100 312 T. 0 for NULL (the CPU) or a name not
 * in the table: no MFU is reported then. */
double vf_device_bf16_peak(const char *model);

#ifdef __cplusplus
}
#endif
#endif /* VF_OPS_H */
