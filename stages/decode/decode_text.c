/* decode_text.c — loading a row's embedding files (see decode_text.h). */
#include "stages/decode/decode_text.h"
#include "formats/text_emb.h"

#include <stdio.h>
#include <stdlib.h>

int vf_decode_text_load(const char *what, const char *path, int64_t dim, int64_t max_len, vf_tensor **out,
                        char *why, size_t whyn, vf_status *st)
{
    int rc = 0;
    float *v = NULL;
    int64_t rows = 0;
    vf_status fs;
    vf_status_clear(&fs);
    *out = NULL;
    int r = vf_text_emb_read(path, dim, max_len, &v, &rows, &fs);
    if (r == VF_EBADINPUT) { /* a bad file: the row is quarantined with this reason */
        snprintf(why, whyn, "%s %s", what, fs.msg);
        return 1;
    }
    if (r) VF_FAIL(st, r, "%s %s", what, fs.msg);
    int64_t shape[2] = {rows, dim}, n = rows * dim;
    vf_tensor *e = vf_tensor_new(VF_DTYPE_BF16, 2, shape, st);
    if (!e) VF_FAIL(st, VF_ENOMEM, "%s %s: out of memory", what, path);
    uint16_t *d = e->data;
    for (int64_t i = 0; i < n; i++) d[i] = vf_f32_to_bf16(v[i]);
    *out = e;
fail:
    free(v);
    return rc;
}

int vf_decode_embs_check(const vf_manifest *man, const char *stage, const vf_decode_emb_dims *dims, vf_status *st)
{
    static const char *const col[2] = {"text_emb", "clip_emb"}, *const dimname[2] = {"text_dim", "image_dim"};
    const int64_t dim[2] = {dims->text_dim, dims->image_dim};
    for (int64_t i = 0; i < man->n; i++) {
        const vf_manifest_row *r = &man->rows[i];
        const char *file[2] = {r->text_emb, r->clip_emb};
        for (int k = 0; k < 2; k++) {
            if (file[k] && !dim[k])
                return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                                     "stage '%s': %s:%d names a file in column %s but %s is 0: set the decode "
                                     "stage's %s to the features' width", stage, man->origin, r->line, col[k],
                                     dimname[k], dimname[k]);
            if (!file[k] && dim[k])
                return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                     "stage '%s': %s:%d has no file in column %s; %s = %lld needs one on every row",
                                     stage, man->origin, r->line, col[k], dimname[k], (long long)dim[k]);
        }
    }
    return 0;
}

int vf_decode_embs_load(const vf_manifest_row *r, const vf_decode_emb_dims *dims, vf_decode_embs *e, char *why,
                        size_t whyn, vf_status *st)
{
    int rc = 0;
    e->text = e->image = NULL;
    if (dims->text_dim && (rc = vf_decode_text_load("text_emb", r->text_emb, dims->text_dim, dims->text_len, &e->text,
                                                    why, whyn, st)) != 0)
        return rc;
    if (dims->image_dim) {
        rc = vf_decode_text_load("clip_emb", r->clip_emb, dims->image_dim, dims->image_len, &e->image, why, whyn, st);
        if (rc == 0 && e->image->shape[0] != dims->image_len) { /* the model takes exactly image_len rows */
            snprintf(why, whyn, "clip_emb %s: %lld rows; image_len is %lld (CLIP ViT-H/14: 257)", r->clip_emb,
                     (long long)e->image->shape[0], (long long)dims->image_len);
            rc = 1;
        }
    }
    if (rc) vf_decode_embs_free(e);
    return rc;
}

int vf_decode_embs_put(vf_item *it, const vf_decode_embs *e, vf_status *st)
{
    int rc = 0;
    if (e->text) VF_TRY(vf_item_put(it, "text_emb", vf_tensor_ref(e->text), st));
    if (e->image) VF_TRY(vf_item_put(it, "clip_emb", vf_tensor_ref(e->image), st));
fail:
    return rc;
}

void vf_decode_embs_free(vf_decode_embs *e)
{
    vf_tensor_unref(e->text);
    vf_tensor_unref(e->image);
    e->text = e->image = NULL;
}
