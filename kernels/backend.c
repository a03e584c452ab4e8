/* backend.c — the CPU backend's op table (void * wrappers over kernels/cpu/) and the
 * backend lookup by device.
 *
 * The CPU backend stores everything as f32 (act_dtype = grad_dtype = F32), so every
 * wrapper is a cast. Its bf16-storage twin (vf_backend_cpu_for) serves the optimizer
 * shard of bf16 partitions kept in host memory: the memory ops, axpy, adamw and sumsq
 * on bf16 weights and gradients, nothing else. The table is static and immutable: one instance serves every
 * thread. vf_backend_cuda lives in kernels/cuda/ when CUDA is built; otherwise the
 * fallback below says so.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/cpu/cpu_ops.h"

/* ------------------------------------------------------------------ the op list */

const vf_op_info vf_ops[] = {
#define VF_OP_INFO(name, family) {#name, #family, offsetof(vf_backend, name)},
    VF_OPS(VF_OP_INFO)
#undef VF_OP_INFO
};
const int vf_nops = (int)(sizeof vf_ops / sizeof vf_ops[0]);

/* The op table is the tail of struct vf_backend, all function pointers: the list must
 * name as many ops as the struct has, and entry i must be the struct's op member i, so
 * a member missing from the list, an extra or misspelt entry, or a different order
 * stops the build here (test_ops_backend.c checks the same at run time). */
_Static_assert(sizeof vf_ops / sizeof vf_ops[0] ==
                   (sizeof(vf_backend) - offsetof(vf_backend, alloc)) / sizeof(void (*)(void)),
               "kernels/ops_list.h must list every op of struct vf_backend");
enum {
#define VF_OP_INDEX(name, family) VF_OP_INDEX_##name,
    VF_OPS(VF_OP_INDEX)
#undef VF_OP_INDEX
};
#define VF_OP_AT_INDEX(name, family)                                                      \
    _Static_assert(offsetof(vf_backend, name) ==                                          \
                       offsetof(vf_backend, alloc) + VF_OP_INDEX_##name * sizeof(void (*)(void)), \
                   "kernels/ops_list.h: op " #name " is not listed in struct vf_backend's order");
VF_OPS(VF_OP_AT_INDEX)
#undef VF_OP_AT_INDEX

void (*vf_op_fn(const vf_backend *be, const vf_op_info *op))(void)
{
    void (*fn)(void);
    memcpy(&fn, (const char *)be + op->offset, sizeof fn);
    return fn;
}

const vf_op_info *vf_op_find(const char *name)
{
    for (int i = 0; i < vf_nops; i++)
        if (strcmp(vf_ops[i].name, name) == 0) return &vf_ops[i];
    return NULL;
}

static void *cpu_alloc(vf_backend *be, size_t bytes, vf_status *st)
{
    (void)be;
    return vf_cpu_alloc(bytes, st);
}
static void cpu_free(vf_backend *be, void *p) { (void)be, vf_cpu_free(p); }
static void *cpu_alloc_shared(vf_backend *be, size_t bytes, vf_status *st)
{
    (void)be;
    return vf_alloc_shared(bytes, st);
}
static void cpu_free_shared(vf_backend *be, void *p) { (void)be, vf_free_shared(p); }
static void *cpu_swap_new(vf_backend *be, int slots, vf_status *st) { return (void)be, vf_cpu_swap_new(slots, st); }
static void cpu_swap_free(vf_backend *be, void *q) { (void)be, vf_cpu_swap_free(q); }
static void cpu_swap_in(vf_backend *be, void *q, int slot, void *dst, const void *src, size_t bytes)
{
    (void)be, vf_cpu_swap_in(q, slot, dst, src, bytes);
}
static void cpu_swap_wait(vf_backend *be, void *q, int slot) { (void)be, vf_cpu_swap_wait(q, slot); }
static void cpu_swap_stats(vf_backend *be, void *q, double *copy_s, double *wait_s)
{
    (void)be, vf_cpu_swap_stats(q, copy_s, wait_s);
}
static void *cpu_a2a_open(vf_backend *be, vf_a2a *boot, int n, int rank, size_t chunk_max, vf_status *st)
{
    return (void)be, vf_cpu_a2a_open(boot, n, rank, chunk_max, st);
}
static int cpu_a2a_run(vf_backend *be, void *g, const void *send, void *recv, size_t chunk, vf_status *st)
{
    return (void)be, vf_cpu_a2a_run(g, send, recv, chunk, st);
}
static void cpu_a2a_close(vf_backend *be, void *g) { (void)be, (void)g; } /* boot's owner closes it */
static void cpu_memset0(vf_backend *be, void *p, size_t bytes) { (void)be, memset(p, 0, bytes); }
static void cpu_upload(vf_backend *be, void *dst, const float *src, int64_t n, vf_dtype dt)
{
    (void)be, vf_cpu_upload(dst, src, n, dt);
}
static void cpu_download(vf_backend *be, float *dst, const void *src, int64_t n, vf_dtype dt)
{
    (void)be, vf_cpu_download(dst, src, n, dt);
}
static void cpu_copy(vf_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes) memmove(dst, src, bytes);
}
static void cpu_copy2d(vf_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                       size_t width, size_t rows)
{
    (void)be;
    for (size_t r = 0; r < rows && width; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}
static int cpu_sync(vf_backend *be, vf_status *st) { return (void)be, (void)st, 0; }

static void cpu_matmul_fwd(vf_backend *be, void *out, const void *inp, const void *w,
                           const void *bias, int64_t N, int64_t C, int64_t OC)
{
    (void)be, vf_cpu_matmul_fwd(out, inp, w, bias, N, C, OC);
}
static bool cpu_graph_begin(vf_backend *be, const uint64_t *key, int nkey)
{
    return (void)be, vf_cpu_graph_begin(key, nkey);
}
static bool cpu_graph_end(vf_backend *be) { return (void)be, vf_cpu_graph_end(); }
static void cpu_matmul_bwd(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                           const void *inp, const void *w, int64_t N, int64_t C, int64_t OC,
                           vf_grad_mode mode)
{
    (void)be, vf_cpu_matmul_bwd(dinp, dw, dbias, dout, inp, w, N, C, OC, mode == VF_GRAD_ADD);
}
static void cpu_matmul_gelu_fwd(vf_backend *be, void *out, void *pre, const void *inp,
                                const void *w, const void *bias, int64_t N, int64_t C, int64_t OC)
{
    (void)be, vf_cpu_matmul_gelu_fwd(out, pre, inp, w, bias, N, C, OC);
}
static void cpu_matmul_dgelu_bwd(vf_backend *be, void *dpre, void *dbias_pre, void *dw,
                                 void *dbias, const void *dout, const void *inp, const void *w,
                                 const void *pre, int64_t N, int64_t C, int64_t OC)
{
    (void)be, vf_cpu_matmul_dgelu_bwd(dpre, dbias_pre, dw, dbias, dout, inp, w, pre, N, C, OC);
}
static void cpu_matmul_batch_fwd(vf_backend *be, void *out, const void *inp, const void *w,
                                 const void *bias, int64_t N, int64_t C, int64_t OC, int nb,
                                 int64_t wstride, int64_t ostride)
{
    (void)be, vf_cpu_matmul_batch_fwd(out, inp, w, bias, N, C, OC, nb, wstride, ostride);
}
static void cpu_matmul_batch_bwd(vf_backend *be, void *dinp, void *dw, void *dbias,
                                 const void *dout, const void *inp, const void *w, int64_t N,
                                 int64_t C, int64_t OC, int nb, int64_t wstride, int64_t ostride,
                                 vf_grad_mode mode)
{
    (void)be, vf_cpu_matmul_batch_bwd(dinp, dw, dbias, dout, inp, w, N, C, OC, nb, wstride,
                                      ostride, mode == VF_GRAD_ADD);
}
static void cpu_matmul_fp8_fwd(vf_backend *be, void *out, const void *inp, const uint8_t *w8,
                               float wscale, const void *bias, void *wbuf, int64_t N, int64_t C,
                               int64_t OC)
{
    (void)be, vf_cpu_matmul_fp8_fwd(out, inp, w8, wscale, bias, wbuf, N, C, OC);
}
static void cpu_matmul_fp8_bwd(vf_backend *be, void *dinp, const void *dout, const uint8_t *w8,
                               float wscale, void *wbuf, int64_t N, int64_t C, int64_t OC,
                               vf_grad_mode mode)
{
    (void)be, vf_cpu_matmul_fp8_bwd(dinp, dout, w8, wscale, wbuf, N, C, OC, mode == VF_GRAD_ADD);
}
static void cpu_add(vf_backend *be, void *out, const void *a, const void *b, int64_t n)
{
    (void)be, vf_cpu_add(out, a, b, n);
}
static void cpu_axpy(vf_backend *be, void *y, const void *x, float alpha, int64_t n)
{
    (void)be, vf_cpu_axpy(y, x, alpha, n);
}
static void cpu_gelu_fwd(vf_backend *be, void *out, const void *inp, int64_t n)
{
    (void)be, vf_cpu_gelu_fwd(out, inp, n);
}
static void cpu_gelu_bwd(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n)
{
    (void)be, vf_cpu_gelu_bwd(dinp, dout, inp, n);
}
static void cpu_gelu_erf_fwd(vf_backend *be, void *out, const void *inp, int64_t n)
{
    (void)be, vf_cpu_gelu_erf_fwd(out, inp, n);
}
static void cpu_gelu_erf_bwd(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n)
{
    (void)be, vf_cpu_gelu_erf_bwd(dinp, dout, inp, n);
}
static void cpu_silu_fwd(vf_backend *be, void *out, const void *inp, int64_t n)
{
    (void)be, vf_cpu_silu_fwd(out, inp, n);
}
static void cpu_silu_bwd(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n,
                         vf_grad_mode mode)
{
    (void)be, vf_cpu_silu_bwd(dinp, dout, inp, n, mode == VF_GRAD_ADD);
}
static void cpu_layernorm_fwd(vf_backend *be, void *out, float *mean, float *rstd,
                              const void *inp, const void *w, const void *b, int64_t N,
                              int64_t C, float eps)
{
    (void)be, vf_cpu_layernorm_fwd(out, mean, rstd, inp, w, b, N, C, eps);
}
static void cpu_layernorm_bwd(vf_backend *be, void *dinp, void *dw, void *db, const void *dout,
                              const void *inp, const void *w, const float *mean,
                              const float *rstd, int64_t N, int64_t C)
{
    (void)be, vf_cpu_layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void cpu_rmsnorm_fwd(vf_backend *be, void *out, float *rstd, const void *inp,
                            const void *w, int64_t N, int64_t C, float eps)
{
    (void)be, vf_cpu_rmsnorm_fwd(out, rstd, inp, w, N, C, eps);
}
static void cpu_rmsnorm_bwd(vf_backend *be, void *dinp, void *dw, const void *dout,
                            const void *inp, const void *w, const float *rstd, int64_t N,
                            int64_t C)
{
    (void)be, vf_cpu_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C);
}
static void cpu_rmsnorm_ch_fwd(vf_backend *be, void *out, const void *inp, const void *w,
                               int64_t B, int64_t C, int64_t S, float eps)
{
    (void)be, vf_cpu_rmsnorm_ch_fwd(out, inp, w, B, C, S, eps);
}
static void cpu_modulate_fwd(vf_backend *be, void *out, const void *x, const void *shift,
                             const void *scale, int64_t B, int64_t L, int64_t C)
{
    (void)be, vf_cpu_modulate_fwd(out, x, shift, scale, B, L, C);
}
static void cpu_modulate_bwd(vf_backend *be, void *dx, void *dshift, void *dscale,
                             const void *dout, const void *x, const void *scale, int64_t B,
                             int64_t L, int64_t C)
{
    (void)be, vf_cpu_modulate_bwd(dx, dshift, dscale, dout, x, scale, B, L, C);
}
static void cpu_ln_modulate_fwd(vf_backend *be, void *out, float *mean, float *rstd,
                                const void *x, const void *shift, const void *scale, int64_t B,
                                int64_t L, int64_t C, float eps)
{
    (void)be, vf_cpu_ln_modulate_fwd(out, mean, rstd, x, shift, scale, B, L, C, eps);
}
static void cpu_ln_modulate_bwd(vf_backend *be, void *dx, void *dshift, void *dscale,
                                const void *dout, const void *x, const float *mean,
                                const float *rstd, const void *scale, int64_t B, int64_t L,
                                int64_t C, float eps, vf_grad_mode mode)
{
    (void)be, vf_cpu_ln_modulate_bwd(dx, dshift, dscale, dout, x, mean, rstd, scale, B, L, C,
                                     eps, mode == VF_GRAD_ADD);
}
static void cpu_gated_add_fwd(vf_backend *be, void *out, const void *x, const void *gate,
                              const void *y, int64_t B, int64_t L, int64_t C)
{
    (void)be, vf_cpu_gated_add_fwd(out, x, gate, y, B, L, C);
}
static void cpu_gated_add_bwd(vf_backend *be, void *dx, void *dgate, void *dy, const void *dout,
                              const void *gate, const void *y, int64_t B, int64_t L, int64_t C)
{
    (void)be, vf_cpu_gated_add_bwd(dx, dgate, dy, dout, gate, y, B, L, C);
}
static void cpu_rope_fwd(vf_backend *be, void *out, const void *inp, const float *cos,
                         const float *sin, int64_t B, int64_t L, int64_t H, int64_t D)
{
    (void)be, vf_cpu_rope_fwd(out, inp, cos, sin, B, L, H, D);
}
static void cpu_rope_bwd(vf_backend *be, void *dinp, const void *dout, const float *cos,
                         const float *sin, int64_t B, int64_t L, int64_t H, int64_t D)
{
    (void)be, vf_cpu_rope_bwd(dinp, dout, cos, sin, B, L, H, D);
}
static void cpu_rmsnorm_rope_fwd(vf_backend *be, void *out, float *rstd, const void *inp,
                                 const void *w, const float *cos, const float *sin, int64_t B,
                                 int64_t L, int64_t H, int64_t D, float eps)
{
    (void)be, vf_cpu_rmsnorm_rope_fwd(out, rstd, inp, w, cos, sin, B, L, H, D, eps);
}
static void cpu_rmsnorm_rope_bwd(vf_backend *be, void *dinp, void *dw, const void *dout,
                                 const void *inp, const void *w, const float *rstd,
                                 const float *cos, const float *sin, int64_t B, int64_t L,
                                 int64_t H, int64_t D)
{
    (void)be, vf_cpu_rmsnorm_rope_bwd(dinp, dw, dout, inp, w, rstd, cos, sin, B, L, H, D);
}
static void cpu_attention_fwd(vf_backend *be, void *out, float *lse, const void *q,
                              const void *k, const void *v, int64_t B, int64_t Lq, int64_t Lk,
                              int64_t H, int64_t D, float scale)
{
    (void)be, vf_cpu_attention_fwd(out, lse, q, k, v, B, Lq, Lk, H, D, scale);
}
static void cpu_attention_bwd(vf_backend *be, void *dq, void *dk, void *dv, const void *dout,
                              const void *q, const void *k, const void *v, const void *out,
                              const float *lse, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                              int64_t D, float scale)
{
    (void)be, vf_cpu_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, B, Lq, Lk, H, D, scale);
}
static void cpu_permute(vf_backend *be, void *out, const void *inp, int ndim,
                        const int64_t *shape, const int *perm)
{
    (void)be, vf_cpu_permute(out, inp, ndim, shape, perm);
}
static void cpu_conv3d_fwd(vf_backend *be, void *out, const void *inp, const void *w,
                           const void *bias, int64_t B, int64_t C, int64_t T, int64_t H,
                           int64_t W, int64_t OC, int KT, int KH, int KW, int st, int sh, int sw,
                           int pt0, int pt1, int ph0, int ph1, int pw0, int pw1)
{
    (void)be, vf_cpu_conv3d_fwd(out, inp, w, bias, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw,
                                pt0, pt1, ph0, ph1, pw0, pw1);
}
static void cpu_conv3d_bwd(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                           const void *inp, const void *w, int64_t B, int64_t C, int64_t T,
                           int64_t H, int64_t W, int64_t OC, int KT, int KH, int KW, int st,
                           int sh, int sw, int pt0, int pt1, int ph0, int ph1, int pw0, int pw1)
{
    (void)be, vf_cpu_conv3d_bwd(dinp, dw, dbias, dout, inp, w, B, C, T, H, W, OC, KT, KH, KW,
                                st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1);
}
static void cpu_embed_fwd(vf_backend *be, void *out, const int32_t *tok, const void *table,
                          int64_t N, int64_t C)
{
    (void)be, vf_cpu_embed_fwd(out, tok, table, N, C);
}
static void cpu_embed_bwd(vf_backend *be, void *dtable, const void *dout, const int32_t *tok,
                          int64_t N, int64_t C)
{
    (void)be, vf_cpu_embed_bwd(dtable, dout, tok, N, C);
}
static double cpu_mse_fwd_bwd(vf_backend *be, void *dpred, const void *pred, const void *target,
                              int64_t n, int64_t count, float grad_scale)
{
    return (void)be, vf_cpu_mse_fwd_bwd(dpred, pred, target, n, count, grad_scale);
}
static void cpu_adamw(vf_backend *be, float *master, float *m, float *v, const void *grad,
                      void *weights_out, int64_t n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, float grad_scale, int64_t t)
{
    (void)be, vf_cpu_adamw(master, m, v, grad, weights_out, n, lr, beta1, beta2, eps,
                           weight_decay, grad_scale, t);
}
static double cpu_sumsq(vf_backend *be, const void *grad, int64_t n)
{
    return (void)be, vf_cpu_sumsq(grad, n);
}

static vf_backend cpu_backend = {
    .name = "cpu",
    .device = {VF_DEV_CPU, 0},
    .act_dtype = VF_DTYPE_F32,
    .grad_dtype = VF_DTYPE_F32,
    .ctx = NULL,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .alloc_shared = cpu_alloc_shared,
    .free_shared = cpu_free_shared,
    .alloc_pinned = cpu_alloc,
    .free_pinned = cpu_free,
    .memset0 = cpu_memset0,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .copy2d = cpu_copy2d,
    .sync = cpu_sync,
    .swap_new = cpu_swap_new,
    .swap_free = cpu_swap_free,
    .swap_in = cpu_swap_in,
    .swap_wait = cpu_swap_wait,
    .swap_stats = cpu_swap_stats,
    .a2a_open = cpu_a2a_open,
    .a2a_run = cpu_a2a_run,
    .a2a_close = cpu_a2a_close,
    .graph_begin = cpu_graph_begin,
    .graph_end = cpu_graph_end,
    .matmul_fwd = cpu_matmul_fwd,
    .matmul_bwd = cpu_matmul_bwd,
    .matmul_gelu_fwd = cpu_matmul_gelu_fwd,
    .matmul_dgelu_bwd = cpu_matmul_dgelu_bwd,
    .matmul_batch_fwd = cpu_matmul_batch_fwd,
    .matmul_batch_bwd = cpu_matmul_batch_bwd,
    .matmul_fp8_fwd = cpu_matmul_fp8_fwd,
    .matmul_fp8_bwd = cpu_matmul_fp8_bwd,
    .add = cpu_add,
    .axpy = cpu_axpy,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .gelu_erf_fwd = cpu_gelu_erf_fwd,
    .gelu_erf_bwd = cpu_gelu_erf_bwd,
    .silu_fwd = cpu_silu_fwd,
    .silu_bwd = cpu_silu_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .rmsnorm_ch_fwd = cpu_rmsnorm_ch_fwd,
    .modulate_fwd = cpu_modulate_fwd,
    .modulate_bwd = cpu_modulate_bwd,
    .ln_modulate_fwd = cpu_ln_modulate_fwd,
    .ln_modulate_bwd = cpu_ln_modulate_bwd,
    .gated_add_fwd = cpu_gated_add_fwd,
    .gated_add_bwd = cpu_gated_add_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .rmsnorm_rope_fwd = cpu_rmsnorm_rope_fwd,
    .rmsnorm_rope_bwd = cpu_rmsnorm_rope_bwd,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .permute = cpu_permute,
    .conv3d_fwd = cpu_conv3d_fwd,
    .conv3d_bwd = cpu_conv3d_bwd,
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .mse_fwd_bwd = cpu_mse_fwd_bwd,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
};

vf_backend *vf_backend_cpu(void) { return &cpu_backend; }

/* ------------------------------------------------------------------ bf16 storage */

/* The ops that see weights and gradients of the bf16 backend: converting forms of the
 * CPU's (the memory ops take their dtypes as arguments already). */
static void cpu16_axpy(vf_backend *be, void *y, const void *x, float alpha, int64_t n)
{
    (void)be, vf_cpu_axpy_bf16(y, x, alpha, n);
}
static void cpu16_adamw(vf_backend *be, float *master, float *m, float *v, const void *grad, void *weights_out,
                        int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                        float grad_scale, int64_t t)
{
    (void)be, vf_cpu_adamw_dt(master, m, v, grad, VF_DTYPE_BF16, weights_out, VF_DTYPE_BF16, n, lr, beta1, beta2,
                              eps, weight_decay, grad_scale, t);
}
static double cpu16_sumsq(vf_backend *be, const void *grad, int64_t n)
{
    return (void)be, vf_cpu_sumsq_dt(grad, VF_DTYPE_BF16, n);
}

static vf_backend cpu_bf16_backend;
static pthread_once_t cpu_bf16_once = PTHREAD_ONCE_INIT;

static void cpu_bf16_init(void)
{
    vf_backend b = cpu_backend;
    b.name = "cpu-bf16";
    b.act_dtype = b.grad_dtype = VF_DTYPE_BF16;
    /* the model's ops compute on f32 storage: absent here, so a misuse faults at once */
    for (int i = 0; i < vf_nops; i++) {
        if (!strcmp(vf_ops[i].family, "memory") || !strcmp(vf_ops[i].family, "adamw") ||
            !strcmp(vf_ops[i].name, "axpy"))
            continue;
        void (*none)(void) = NULL;
        memcpy((char *)&b + vf_ops[i].offset, &none, sizeof none);
    }
    b.axpy = cpu16_axpy;
    b.adamw = cpu16_adamw;
    b.sumsq = cpu16_sumsq;
    cpu_bf16_backend = b;
}

vf_backend *vf_backend_cpu_for(vf_dtype dt, vf_status *st)
{
    if (dt == VF_DTYPE_F32) return &cpu_backend;
    if (dt == VF_DTYPE_BF16) {
        pthread_once(&cpu_bf16_once, cpu_bf16_init);
        return &cpu_bf16_backend;
    }
    vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "the CPU backend keeps weights in f32 or bf16, not %s",
                  vf_dtype_name(dt));
    return NULL;
}

#ifndef VFLOW_HAVE_CUDA
vf_backend *vf_backend_cuda(int index, vf_status *st)
{
    vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                  "device cuda:%d: this vflow was built without CUDA (no nvcc at configure "
                  "time, or -DVFLOW_CUDA=OFF); use device \"cpu\" or rebuild with CUDA",
                  index);
    return NULL;
}
#endif

vf_backend *vf_backend_for(vf_device dev, vf_status *st)
{
    switch (dev.kind) {
    case VF_DEV_CPU:
        return vf_backend_cpu();
    case VF_DEV_CUDA:
        return vf_backend_cuda(dev.index, st);
    }
    vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "unknown device kind %d", (int)dev.kind);
    return NULL;
}

/* ------------------------------------------------------------------ attention workspace */

int64_t vf_attention_workspace_limit(void)
{
    const char *e = getenv("VFLOW_ATTN_WORKSPACE_MB");
    if (!e || !*e) return (int64_t)4096 << 20;
    char *end = NULL;
    long long mb = strtoll(e, &end, 10);
    if (*end || mb <= 0 || mb > ((long long)1 << 40)) return -1;
    return (int64_t)mb << 20;
}

int64_t vf_attention_workspace_bound(vf_device dev, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                                     int64_t D)
{
    if (dev.kind != VF_DEV_CUDA || B <= 0 || H <= 0 || Lq <= 0 || Lk <= 0) return 0;
    int64_t limit = vf_attention_workspace_limit();
    if (limit < 0) limit = (int64_t)4096 << 20;
    const int64_t tq = (Lq + 127) / 128 * 128, tk = (Lk + 127) / 128 * 128;
    const int64_t rows = B * H * tq * 2 * 4 + ((int64_t)16 << 20);
    const int64_t dp_estimate = B * H * ((Lq + 63) / 64 * 64) * tk * 2;
    if (dp_estimate <= limit) return B * H * tq * tk * 2 + rows;
    return B * H * tq * D * 4 + rows;
}

/* ------------------------------------------------------------------ conv3d workspace */

void vf_conv3d_out(const vf_conv3d_shape *s, int64_t *To, int64_t *Ho, int64_t *Wo)
{
    *To = (s->T + s->pt0 + s->pt1 - s->KT) / s->st + 1;
    *Ho = (s->H + s->ph0 + s->ph1 - s->KH) / s->sh + 1;
    *Wo = (s->W + s->pw0 + s->pw1 - s->KW) / s->sw + 1;
}

int64_t vf_conv3d_workspace_bound(vf_device dev, const vf_conv3d_shape *s)
{
    if (dev.kind != VF_DEV_CUDA || s->B <= 0 || s->C <= 0 || s->OC <= 0) return 0;
    int64_t To, Ho, Wo;
    vf_conv3d_out(s, &To, &Ho, &Wo);
    const int64_t in = s->B * s->C * (s->T + s->pt0 + s->pt1) * (s->H + s->ph0 + s->ph1) *
                       (s->W + s->pw0 + s->pw1);
    const int64_t out = s->B * s->OC * To * Ho * Wo;
    const int64_t w = s->OC * s->C * s->KT * s->KH * s->KW;
    return 2 * (in + out + w) + ((int64_t)16 << 20);
}

/* ------------------------------------------------------------------ device peaks */

double vf_device_bf16_peak(const char *model)
{
    /* most specific first: "H100 NVL" before "H100" */
    static const struct {
        const char *part;
        double peak;
    } table[] = {
        {"H100 NVL", 835e12}, {"H100 PCIe", 756e12}, {"H100", 989e12},
        {"H200 NVL", 835e12}, {"H200", 989e12},      {"A100", 312e12},
    };
    if (!model) return 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strstr(model, table[i].part)) return table[i].peak;
    return 0;
}
