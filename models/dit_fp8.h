/* dit_fp8.h — a partition's frozen base held in FP8 (LoRA with base_dtype "fp8"): which
 * tensors go FP8, the bytes that takes, loading it tensor by tensor, and handing it to a
 * partition.
 *
 * The block linears' weights (self_attn and cross_attn q, k, v, o, k_img, v_img; ffn.0,
 * ffn.2) are held as FP8 E4M3 bytes with one f32 scale per tensor; everything else
 * (biases, norms, modulation tables, the embeddings, the head) stays in the backend's
 * dtype, packed in flat order without the FP8 tensors' room. A weight that arrives in
 * f32 is quantised by vf_fp8_quantise's rule (scale = absmax/448, round to nearest even,
 * runtime/vflow.h); one a file ships as F8_E4M3 with its scale is kept byte for byte.
 * The partition's linears then run on the matmul_fp8 ops (kernels/ops.h), which
 * dequantise into one scratch of the largest linear's size. Only a frozen base can be
 * FP8: the base gets no gradients.
 */
#ifndef VF_DIT_FP8_H
#define VF_DIT_FP8_H

#include "models/dit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether tensor idx of l is one an FP8 base holds in FP8: a block linear's weight. */
bool vf_dit_fp8_tensor(const vf_dit_layout *l, int idx);

/* What an FP8 base of the flat range [off, off + n) of l takes (l's tensors wholly inside
 * it): base bytes on the device (the FP8 bytes, 1 per element, and the rest at act_size),
 * the dequantisation scratch (the largest FP8 tensor at act_size), and the host's per-
 * tensor scales and offsets. */
typedef struct vf_dit_fp8_mem {
    int64_t fp8;       /* FP8 bytes: one per element of the block linears */
    int64_t rest;      /* the other tensors, act_size each */
    int64_t scratch;   /* one linear's weight, dequantised */
    int64_t host;      /* scales and offsets (host) */
    int64_t nfp8;      /* elements held in FP8 */
} vf_dit_fp8_mem;
void vf_dit_fp8_memory(const vf_dit_layout *l, int64_t off, int64_t n, size_t act_size,
                       vf_dit_fp8_mem *out);

typedef struct vf_dit_fp8 vf_dit_fp8;

/* An empty FP8 base for [off, off + n) of l on be (device buffers allocated, contents
 * undefined until each tensor is put). l is borrowed and must outlive it. Caller owns
 * *out (vf_dit_fp8_free). */
int vf_dit_fp8_new(vf_backend *be, const vf_dit_layout *l, int64_t off, int64_t n, vf_dit_fp8 **out,
                   vf_status *st);
void vf_dit_fp8_free(vf_dit_fp8 *fb); /* NULL is fine */
/* The same, made for block swap of its last K blocks, which end at block b1 (the range's
 * last block): their FP8 bytes live in pinned host memory the base owns, one block's
 * bytes after another, and the device holds the rest; vf_dit_part_set_swap with the same
 * K streams them (ops.h "block swap"). The other tensors stay resident. K 0: none;
 * blocks outside the range VF_EUSAGE. */
int vf_dit_fp8_new_swap(vf_backend *be, const vf_dit_layout *l, int64_t off, int64_t n, int b1, int K,
                        vf_dit_fp8 **out, vf_status *st);

/* Tensor idx from host f32 values (numel floats, read; an FP8 tensor's are quantised in
 * place, so the caller's buffer holds its bytes afterwards). */
int vf_dit_fp8_put(vf_dit_fp8 *fb, int idx, float *host, vf_status *st);
/* FP8 tensor idx from the bytes and scale a file ships (numel bytes, read). VF_EINVAL for
 * a tensor the base does not hold in FP8. */
int vf_dit_fp8_put_bytes(vf_dit_fp8 *fb, int idx, const uint8_t *bytes, float scale, vf_status *st);


/* Runs partition p on the FP8 base fb (borrowed: it must outlive p's use of it), whose
 * range must be p's. p must have no base gradients (a frozen base). */
int vf_dit_part_set_fp8(vf_dit_part *p, const vf_dit_fp8 *fb, vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VF_DIT_FP8_H */
