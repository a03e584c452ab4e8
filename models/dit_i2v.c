/* dit_i2v.c — the image-to-video inputs of sampling (dit_i2v.h): the first-frame mask,
 * the normalised latent of [image, zeros], and the CLIP features read from a file. */
#include "models/dit_i2v.h"
#include "formats/text_emb.h"

#include <stdlib.h>
#include <string.h>

int vf_dit_i2v_cond(const vf_dit_config *c, vf_vae *m, int chunk, const uint8_t *rgb, int W, int H, int64_t T,
                    const float *mean, const float *std, float *cond, vf_status *st)
{
    int rc = 0;
    vf_vae_enc *enc = NULL;
    const int64_t cc = (int64_t)vf_dit_in_dim(c) - c->z, mc = cc - c->z;
    if (mc < 1)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "in_dim %d leaves %lld conditioning channels for z %d: image-to-video needs a mask and "
                             "the z channels of the first-frame latent (Wan: in_dim 36 = 16 + 4 + 16)",
                             vf_dit_in_dim(c), (long long)cc, c->z);
    const vf_vae_config *vc = vf_vae_cfg(m);
    const int sf = vf_vae_space_factor(vc);
    const int64_t Tl = vf_vae_latent_frames(vc, T), plane = Tl * (H / sf) * (W / sf);
    float *y = cond + mc * plane; /* the encoder writes the latent in place, after the mask */
    VF_TRY(vf_vae_enc_new(m, 1, chunk, H, W, &enc, st));
    VF_TRY(vf_vae_encode_begin(enc, 1, T, st));
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        int n = (int)(T - t0 < chunk ? T - t0 : chunk);
        VF_TRY(vf_vae_input_first_u8(enc, 0, rgb, t0, n, st));
        if ((rc = vf_vae_encode_chunk(enc, n, y, NULL, st)) < 0) goto fail; /* else latent frames so far */
    }
    if ((rc = vf_vae_encode_end(enc, st)) < 0) goto fail;
    rc = 0;
    vf_vae_normalise(y, c->z, plane, mean, std);
    int64_t per_t = plane / Tl;
    for (int64_t k = 0; k < mc; k++)
        for (int64_t t = 0; t < Tl; t++)
            for (int64_t i = 0; i < per_t; i++) cond[(k * Tl + t) * per_t + i] = t == 0 ? 1.0f : 0.0f;
fail:
    vf_vae_enc_free(enc);
    return rc;
}

int vf_dit_i2v_clip_read(const vf_dit_config *c, const char *path, const char *what, float *out, vf_status *st)
{
    float *v = NULL;
    int64_t rows = 0;
    int rc = vf_text_emb_read(path, c->img_dim, c->img_len, &v, &rows, st);
    if (!rc && rows != c->img_len)
        rc = vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                           "%s: %lld rows of CLIP features, the model takes img_len = %d", path, (long long)rows,
                           c->img_len);
    if (rc) {
        vf_status_prefix(st, "%s", what);
        free(v);
        return rc == VF_ENOMEM ? rc : VF_EBADINPUT;
    }
    memcpy(out, v, sizeof(float) * (size_t)(rows * c->img_dim));
    free(v);
    return 0;
}
