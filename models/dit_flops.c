/* dit_flops.c — the DiT's model FLOPs by the standard per-layer count (formula:
 * models/dit.h), what the training step's MFU divides by the device's peak. */
#include "models/dit.h"

double vf_dit_block_flops(const vf_dit_config *c, int64_t L, int64_t Ltxt)
{
    const double d = c->dim, l = (double)L, lt = (double)Ltxt, f = c->ffn;
    const double li = c->img_dim > 0 ? c->img_len : 0;
    return 4 * 2 * l * d * d           /* self-attention q, k, v, o */
           + 2 * 2 * l * l * d         /* QKᵀ and AV */
           + 2 * 2 * l * d * d         /* cross-attention q, o */
           + 2 * 2 * lt * d * d        /* cross-attention k, v over the text */
           + 2 * 2 * l * lt * d        /* cross-attention scores and AV */
           + 2 * 2 * li * d * d        /* image k_img, v_img */
           + 2 * 2 * l * li * d        /* image attention scores and AV */
           + 2 * 2 * l * d * f;        /* MLP */
}

double vf_dit_train_flops(const vf_dit_config *c, int64_t L, int64_t Ltxt, bool recompute)
{
    return vf_dit_block_flops(c, L, Ltxt) * c->depth * (recompute ? 4 : 3);
}
