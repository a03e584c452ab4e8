/* dit_cond.c — the image-to-video conditioning of the first partition's micro-batches
 * (models/dit.h, vf_dit_batch.cond and .img). The CLIP image features of a model with
 * img_dim > 0 (Wan 2.1 I2V) are the batch's "clip_emb" (B, img_len, img_dim), copied. For
 * a model whose patch embedding takes in_dim > z channels, the in_dim − z channels after
 * the noisy latent's are
 *   a first-frame mask of m = in_dim − 2·z channels (Wan: 4, the VAE's time factor),
 *     1 on latent frame 0 and 0 on every later one, built here at train time, and
 *   "y" (z channels), the batch's latent of [first frame, zeros] the reader emits.
 * Wan's pipelines build the mask from the pixel frames' mask [1, 0, …] with frame 0
 * repeated m times and viewed as (T', m): latent frame 0 gets m ones, every later one m
 * zeros, which is what is built here.
 *
 * Image-to-video by the first frame (Wan 2.2 TI2V; a batch of cache kind first_frame):
 * no channels. The clean latent's frame 0 (the image's own encode: the causal VAE encodes
 * the first frame alone) replaces the noisy latent's, its tokens get t = 0 (a model with a
 * time per token), and the loss leaves frame 0 out: diffusers' expand_timesteps
 * construction.
 */
#include "stages/train/dit_stage.h"
#include "formats/cache_format.h"

#include <string.h>

/* Channels of the conditioning and of its mask (0, 0 for a text-to-video model). */
static void cond_channels(const vf_dit_config *c, int64_t *cc, int64_t *m)
{
    *cc = vf_dit_in_dim(c) - c->z;
    *m = *cc - c->z;
}

int vf_dit_cond_setup(dit_part_state *h, vf_status *st)
{
    int64_t cc, m;
    cond_channels(&h->cfg, &cc, &m);
    size_t ni = (size_t)h->max.B * (size_t)h->cfg.img_len * (size_t)h->cfg.img_dim;
    const int64_t P = (int64_t)h->cfg.patch[0] * h->cfg.patch[1] * h->cfg.patch[2];
    if (h->cfg.t_tokens && !(h->h_ttok = vf_alloc(sizeof(float) * (size_t)(h->cap / h->cfg.z / P), st)))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "dit: no memory for the micro-batch's token times");
    if (ni && !(h->h_img = vf_alloc(sizeof(float) * ni, st)))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "dit: no memory for the micro-batch's image features");
    if (cc == 0) return 0;
    int64_t n = h->cap / h->cfg.z * cc; /* cap: z channels of the largest micro-batch */
    if (!(h->h_cond = vf_alloc(sizeof(float) * (size_t)n, st)) || !(h->d_cond = h->be->alloc(h->be, h->as * (size_t)n, st)))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "dit: no memory for the micro-batch's conditioning");
    return 0;
}

void vf_dit_cond_memory(const vf_dit_config *c, int64_t B, int64_t per, int64_t as, vf_device dev, vf_mem_plan *out)
{
    int64_t cc, m, n;
    cond_channels(c, &cc, &m);
    vf_device cpu = {VF_DEV_CPU, 0};
    if (cc > 0 && (n = per / c->z * cc) > 0) {
        vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "micro-batch conditioning channels (host)", 4 * n);
        vf_mem_plan_add(out, dev, VF_MEM_ITEMS, "micro-batch conditioning channels", as * n);
    }
    if (c->img_dim > 0)
        vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "micro-batch image features (host)", 4 * B * c->img_len * c->img_dim);
    if (c->t_tokens)
        vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "micro-batch token times (host)",
                        4 * B * per / c->z / ((int64_t)c->patch[0] * c->patch[1] * c->patch[2]));
}

void vf_dit_cond_teardown(dit_part_state *h)
{
    vf_free(h->h_cond);
    vf_free(h->h_img);
    vf_free(h->h_ttok);
    h->h_ttok = NULL;
    if (h->be && h->d_cond) h->be->free(h->be, h->d_cond);
    h->h_cond = h->h_img = NULL, h->d_cond = NULL;
}

int vf_dit_cond_check(const char *stage, const dit_part_state *h, const vf_item *batch, vf_status *st)
{
    int64_t cc, m;
    cond_channels(&h->cfg, &cc, &m);
    const vf_tensor *lat = vf_item_get(batch, "latent"), *y = vf_item_get(batch, VF_CACHE_Y_TENSOR);
    const vf_tensor *img = vf_item_get(batch, VF_CACHE_CLIP_TENSOR);
    double ff;
    if (vf_item_num(batch, VF_CACHE_FIRST_FRAME_KEY, &ff) == 0 && ff == 1 &&
        (!h->cfg.t_tokens || h->cfg.patch[0] != 1 || cc > 0))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: batch \"%s\" is of cache kind first_frame (image-to-video by the first frame) and "
                             "the model %s: it needs time = \"token\", time patch 1 and no conditioning channels "
                             "(wan2.2-ti2v-5b)", stage, vf_item_id(batch),
                             !h->cfg.t_tokens ? "has one time a sample" : cc > 0 ? "takes conditioning channels"
                                                                              : "has a time patch above 1");
    if (h->cfg.img_dim > 0 &&
        (!img || img->ndim != 3 || img->dtype != VF_DTYPE_F32 || img->device.kind != VF_DEV_CPU ||
         img->shape[0] != lat->shape[0] || img->shape[1] != h->cfg.img_len || img->shape[2] != h->cfg.img_dim))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: the model takes CLIP image features (img_len %d, img_dim %d) and batch \"%s\" has no "
                             "host f32 \"clip_emb\" (B, %d, %d): its reader needs cond = \"concat+clip\" and a cache "
                             "precomputed with a manifest column clip_emb", stage, h->cfg.img_len, h->cfg.img_dim,
                             vf_item_id(batch), h->cfg.img_len, h->cfg.img_dim);
    if (cc == 0) return 0;
    if (m < 1)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "%s: in_dim %d leaves %lld conditioning channels for z %d: image-to-video needs a mask "
                             "and the z channels of the first-frame latent (Wan: in_dim 36 = 16 + 4 + 16)",
                             stage, vf_dit_in_dim(&h->cfg), (long long)cc, h->cfg.z);
    if (!y || y->ndim != 5 || y->dtype != VF_DTYPE_F32 || y->device.kind != VF_DEV_CPU ||
        memcmp(y->shape, lat->shape, 5 * sizeof(int64_t)) != 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: the model is image-to-video (in_dim %d) and batch \"%s\" has no host f32 \"y\" of "
                             "the latent's shape (the first-frame latents): its reader needs cond = \"concat\" and a "
                             "cache precomputed with first_frame = true", stage, vf_dit_in_dim(&h->cfg), vf_item_id(batch));
    return 0;
}

int64_t vf_dit_cond_fill(dit_part_state *h, const vf_item *batch, int first, int nb)
{
    int64_t cc, m;
    cond_channels(&h->cfg, &cc, &m);
    int64_t ni = (int64_t)h->cfg.img_len * h->cfg.img_dim;
    if (h->h_img)
        memcpy(h->h_img, (const float *)vf_item_get(batch, VF_CACHE_CLIP_TENSOR)->data + first * ni,
               sizeof(float) * (size_t)(nb * ni));
    if (cc == 0) return 0;
    const vf_tensor *y = vf_item_get(batch, VF_CACHE_Y_TENSOR);
    int64_t T = y->shape[2], plane = y->shape[3] * y->shape[4], per = h->per; /* per = z·T·plane */
    for (int i = 0; i < nb; i++) {
        float *o = h->h_cond + (int64_t)i * cc * T * plane;
        for (int64_t c = 0; c < m; c++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t k = 0; k < plane; k++) o[(c * T + t) * plane + k] = t == 0 ? 1.0f : 0.0f;
        memcpy(o + m * T * plane, (const float *)y->data + (int64_t)(first + i) * per, sizeof(float) * (size_t)per);
    }
    return (int64_t)nb * cc * T * plane;
}

int vf_dit_cond_first_frame(dit_part_state *h, const vf_item *batch, int first, int nb)
{
    double ff;
    if (vf_item_num(batch, VF_CACHE_FIRST_FRAME_KEY, &ff) != 0 || ff != 1) return 0;
    const vf_tensor *lat = vf_item_get(batch, "latent");
    const int T = (int)lat->shape[2], H = (int)lat->shape[3], W = (int)lat->shape[4];
    const int64_t L = (int64_t)T * (H / h->cfg.patch[1]) * (W / h->cfg.patch[2]);
    for (int i = 0; i < nb; i++)
        vf_dit_first_frame(&h->cfg, T, H, W, (const float *)lat->data + (int64_t)(first + i) * h->per, T, h->h_t[i],
                           h->h_xt + (int64_t)i * h->per, h->h_ttok + (int64_t)i * L);
    return 1;
}
