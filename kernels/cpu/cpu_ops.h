/* cpu_ops.h — the CPU reference backend as typed functions.
 *
 * One function per op of kernels/ops.h, with float * instead of void * (the backend
 * table in kernels/backend.c wraps them). Shapes, layouts and which gradients are
 * written and which accumulated are those of ops.h; what is specific to the CPU
 * implementation is said here. Every function is thread-safe, allocates no memory that outlives the call,
 * and returns the same bits for the same inputs on any OpenMP thread count and on every
 * ISA path (see vf_cpu_set_isa).
 *
 * Aliasing: unless a comment says otherwise, outputs must not overlap inputs. Allowed:
 * add (out may be a or b), axpy (none needed), gated_add_fwd (out == x), rope_fwd and
 * gelu/silu forward (out == inp), modulate_fwd (out == x).
 */
#ifndef VF_CPU_OPS_H
#define VF_CPU_OPS_H

#include <stdint.h>

#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ISA path of the hot loops (simd.c: gemm, softmax exponentials, GELU, SiLU).
 * Chosen at first use from the CPU (avx512 > avx2 > generic) or from the environment
 * variable VFLOW_CPU_ISA. All paths compute each output with the same sequence of
 * double operations, so they agree bit for bit; the choice only changes speed.
 * vf_cpu_set_isa is for tests and benchmarks: not safe while another thread runs a
 * kernel. Returns 0, or VF_EINVAL for an unknown name or an ISA this CPU lacks. */
int vf_cpu_set_isa(const char *name);
const char *vf_cpu_isa(void);

/* ---- memory (memory.c): host memory through vf_alloc (accounted to the caller). */
void *vf_cpu_alloc(size_t bytes, vf_status *st);
void vf_cpu_free(void *p);
/* swap.c: block swap (ops.h): host memory, and a copy queue served by a thread */
void *vf_cpu_swap_new(int slots, vf_status *st);
void vf_cpu_swap_free(void *q);
void vf_cpu_swap_in(void *q, int slot, void *dst, const void *src, size_t bytes);
void vf_cpu_swap_wait(void *q, int slot);
void vf_cpu_swap_stats(void *q, double *copy_s, double *wait_s);

/* collective.c: the all-to-all (ops.h): the host group is the device group (not owned) */
void *vf_cpu_a2a_open(vf_a2a *boot, int n, int rank, size_t chunk_max, vf_status *st);
int vf_cpu_a2a_run(void *g, const void *send, void *recv, size_t chunk, vf_status *st);
/* f32 host data to/from storage of dtype F32, BF16 or F16 (round to nearest even). */
void vf_cpu_upload(void *dst, const float *src, int64_t n, vf_dtype dst_dtype);
void vf_cpu_download(float *dst, const void *src, int64_t n, vf_dtype src_dtype);

/* ---- recorded units (graph.c): nothing to record, every op runs as it comes. */
bool vf_cpu_graph_begin(const uint64_t *key, int nkey); /* true */
bool vf_cpu_graph_end(void);                            /* false */

/* ---- dense (matmul.c). acc: 0 writes dinp, 1 adds to it (ops.h's vf_grad_mode). The
 * fused forms compute exactly what their unfused sequences compute (same bits). */
void vf_cpu_matmul_fwd(float *out, const float *inp, const float *w, const float *bias,
                       int64_t N, int64_t C, int64_t OC);
void vf_cpu_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                       int acc);
void vf_cpu_matmul_gelu_fwd(float *out, float *pre, const float *inp, const float *w,
                            const float *bias, int64_t N, int64_t C, int64_t OC);
void vf_cpu_matmul_dgelu_bwd(float *dpre, float *dbias_pre, float *dw, float *dbias,
                             const float *dout, const float *inp, const float *w,
                             const float *pre, int64_t N, int64_t C, int64_t OC);
void vf_cpu_matmul_batch_fwd(float *out, const float *inp, const float *w, const float *bias,
                             int64_t N, int64_t C, int64_t OC, int nb, int64_t wstride,
                             int64_t ostride);
void vf_cpu_matmul_batch_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                             int nb, int64_t wstride, int64_t ostride, int acc);
/* The FP8-weight forms (ops.h matmul_fp8_*): ŵ dequantised into wbuf (OC·C floats), then
 * the plain ones on it. */
void vf_cpu_matmul_fp8_fwd(float *out, const float *inp, const uint8_t *w8, float wscale,
                           const float *bias, float *wbuf, int64_t N, int64_t C, int64_t OC);
void vf_cpu_matmul_fp8_bwd(float *dinp, const float *dout, const uint8_t *w8, float wscale,
                           float *wbuf, int64_t N, int64_t C, int64_t OC, int acc);

/* ---- elementwise (elementwise.c) */
void vf_cpu_add(float *out, const float *a, const float *b, int64_t n);
void vf_cpu_axpy(float *y, const float *x, float alpha, int64_t n);
void vf_cpu_gelu_fwd(float *out, const float *inp, int64_t n);
/* dinp may be dout (in place) */
void vf_cpu_gelu_bwd(float *dinp, const float *dout, const float *inp, int64_t n);
void vf_cpu_gelu_erf_fwd(float *out, const float *inp, int64_t n);
void vf_cpu_gelu_erf_bwd(float *dinp, const float *dout, const float *inp, int64_t n);
void vf_cpu_silu_fwd(float *out, const float *inp, int64_t n);
void vf_cpu_silu_bwd(float *dinp, const float *dout, const float *inp, int64_t n, int acc);

/* ---- adaLN (modulate.c) */
void vf_cpu_modulate_fwd(float *out, const float *x, const float *shift, const float *scale,
                         int64_t B, int64_t L, int64_t C);
void vf_cpu_modulate_bwd(float *dx, float *dshift, float *dscale, const float *dout,
                         const float *x, const float *scale, int64_t B, int64_t L, int64_t C);
/* LayerNorm + modulate: as layernorm_fwd (no affine) then modulate_fwd, same bits; the
 * backward as modulate_bwd then layernorm_bwd (acc: 0 writes dx, 1 adds to it). */
void vf_cpu_ln_modulate_fwd(float *out, float *mean, float *rstd, const float *x,
                            const float *shift, const float *scale, int64_t B, int64_t L,
                            int64_t C, float eps);
void vf_cpu_ln_modulate_bwd(float *dx, float *dshift, float *dscale, const float *dout,
                            const float *x, const float *mean, const float *rstd,
                            const float *scale, int64_t B, int64_t L, int64_t C, float eps,
                            int acc);
void vf_cpu_gated_add_fwd(float *out, const float *x, const float *gate, const float *y,
                          int64_t B, int64_t L, int64_t C);
void vf_cpu_gated_add_bwd(float *dx, float *dgate, float *dy, const float *dout,
                          const float *gate, const float *y, int64_t B, int64_t L, int64_t C);

/* ---- normalisation (norm.c). Statistics in f64, saved as f32; the variance is the
 * biased one (as torch). */
void vf_cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int64_t N, int64_t C, float eps);
void vf_cpu_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, const float *mean,
                          const float *rstd, int64_t N, int64_t C);
void vf_cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                        int64_t C, float eps);
void vf_cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                        const float *w, const float *rstd, int64_t N, int64_t C);
/* out[b,c,s] = x[b,c,s] · w[c] / sqrt(mean_c x[b,·,s]² + eps). Wan's VAE RMS_norm
 * (F.normalize(x, dim=1) · sqrt(C) · γ) is this op with eps = 0 wherever ‖x‖ > 1e-12;
 * pass a tiny eps (1e-12) to keep all-zero positions at 0 instead of NaN. */
void vf_cpu_rmsnorm_ch_fwd(float *out, const float *inp, const float *w, int64_t B, int64_t C,
                           int64_t S, float eps);
/* Backward of rmsnorm_ch (not in the op table: the VAE is frozen; here so the op is
 * complete and tested). dinp += …, dw += … (either may be NULL). */
void vf_cpu_rmsnorm_ch_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, int64_t B, int64_t C, int64_t S, float eps);

/* ---- rotary embedding (rope.c). For odd D the last element of each head passes
 * through unchanged (cos/sin then hold D/2 = (D-1)/2 angles per position). */
void vf_cpu_rope_fwd(float *out, const float *inp, const float *cos, const float *sin,
                     int64_t B, int64_t L, int64_t H, int64_t D);
void vf_cpu_rope_bwd(float *dinp, const float *dout, const float *cos, const float *sin,
                     int64_t B, int64_t L, int64_t H, int64_t D);
/* RMSNorm + RoPE: as rmsnorm_fwd then rope_fwd, and rope_bwd then rmsnorm_bwd (same bits) */
void vf_cpu_rmsnorm_rope_fwd(float *out, float *rstd, const float *inp, const float *w,
                             const float *cos, const float *sin, int64_t B, int64_t L,
                             int64_t H, int64_t D, float eps);
void vf_cpu_rmsnorm_rope_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, const float *cos,
                             const float *sin, int64_t B, int64_t L, int64_t H, int64_t D);

/* ---- attention (attention.c): blocks of queries per (batch, head); scratch is
 * O(block · Lk), never Lq · Lk. Backward recomputes probabilities from lse; dq, dk, dv
 * may each be NULL. */
void vf_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k,
                          const float *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                          int64_t D, float scale);
void vf_cpu_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                          const float *k, const float *v, const float *out, const float *lse,
                          int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D,
                          float scale);

/* ---- layout (layout.c): ndim 1..6; a plain copy (no accumulation). */
void vf_cpu_permute(float *out, const float *inp, int ndim, const int64_t *shape,
                    const int *perm);

/* ---- conv3d (conv3d.c): forward by chunked im2col + gemm; backward dinp by gathering
 * (each input element sums its taps in f64), dw by im2col + gemm into an f64 buffer of
 * OC·C·KT·KH·KW doubles (one rounding per weight). */
void vf_cpu_conv3d_fwd(float *out, const float *inp, const float *w, const float *bias,
                       int64_t B, int64_t C, int64_t T, int64_t H, int64_t W, int64_t OC,
                       int KT, int KH, int KW, int st, int sh, int sw, int pt0, int pt1,
                       int ph0, int ph1, int pw0, int pw1);
void vf_cpu_conv3d_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int64_t B, int64_t C, int64_t T,
                       int64_t H, int64_t W, int64_t OC, int KT, int KH, int KW, int st,
                       int sh, int sw, int pt0, int pt1, int ph0, int ph1, int pw0, int pw1);

/* ---- embedding and loss (embed_loss.c). Tokens must be >= 0 and < the table's rows
 * (the table size is not passed; a negative token aborts). embed_bwd sums the rows of
 * each token in token order in f64 and rounds once per table entry. */
void vf_cpu_embed_fwd(float *out, const int32_t *tok, const float *table, int64_t N,
                      int64_t C);
void vf_cpu_embed_bwd(float *dtable, const float *dout, const int32_t *tok, int64_t N,
                      int64_t C);
/* ops.h mse_fwd_bwd; dpred may be NULL (loss only). */
double vf_cpu_mse_fwd_bwd(float *dpred, const float *pred, const float *target, int64_t n, int64_t count,
                          float grad_scale);

/* ---- optimizer (adamw.c): torch.optim.AdamW's update, in f64 per element:
 *   g = grad·grad_scale; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²
 *   p = p·(1 - lr·wd); p -= lr/(1-β1^t) · m / (sqrt(v)/sqrt(1-β2^t) + eps)
 * weights_out (may be NULL, may not alias master) receives the new p. */
void vf_cpu_adamw(float *master, float *m, float *v, const float *grad, float *weights_out,
                  int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int64_t t);
/* Σ g² in f64 over 256 fixed blocks summed in block order. */
double vf_cpu_sumsq(const float *grad, int64_t n);
/* The same with the gradient in grad_dtype (F32 or BF16, read exactly) and the new
 * weights written in out_dtype (F32 or BF16, round to nearest even). */
void vf_cpu_adamw_dt(float *master, float *m, float *v, const void *grad, vf_dtype grad_dtype, void *weights_out,
                     vf_dtype out_dtype, int64_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, float grad_scale, int64_t t);
double vf_cpu_sumsq_dt(const void *grad, vf_dtype grad_dtype, int64_t n);
/* y += alpha·x on bf16 storage: the sum formed in double from the exact values, rounded
 * to f32, then to bf16 (for alpha = 1, the replicas' gradient sum, the CUDA backend's
 * bf16 axpy element for element). */
void vf_cpu_axpy_bf16(uint16_t *y, const uint16_t *x, float alpha, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* VF_CPU_OPS_H */
