/* latent_batch.c — one batch item of the latent reader from cache entries, bucketed or not:
 * the entries read into the batch's tensors (vf_lr_read_one), their keys, and the item
 * with its metadata (epoch, index, cursor, keys) around the tensors. */
#include "stages/reader/latent_reader_internal.h"
#include "formats/cache_format.h"

#include <stdlib.h>
#include <string.h>

/* The batch item around its tensors t = {latent, text, text_len, text_emb or NULL}
 * (taken, also on failure) with metadata epoch, index, cursor, keys. */
int vf_lr_item(vf_latent_reader *r, const char *id, vf_tensor *t[4], double index, const char *cursor,
               const char *keys, vf_item **out, vf_status *st)
{
    static const char *const names[4] = {"latent", "text", "text_len", VF_CACHE_TEXT_TENSOR};
    int rc = 0;
    vf_item *it = vf_item_new(id, st);
    *out = NULL;
    if (!it) rc = vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", r->path);
    for (int i = 0; i < 4; i++) { /* vf_item_put takes the reference also when it fails */
        if (!t[i]) continue;
        if (rc == 0) rc = vf_item_put(it, names[i], t[i], st);
        else vf_tensor_unref(t[i]);
    }
    if (rc) goto fail;
    VF_TRY(vf_item_set_num(it, "epoch", (double)r->epoch, st));
    VF_TRY(vf_item_set_num(it, "index", index, st));
    VF_TRY(vf_item_set_str(it, "cursor", cursor, st));
    VF_TRY(vf_item_set_str(it, "keys", keys, st));
    *out = it;
    return 0;
fail:
    vf_item_free(it);
    return rc;
}

int vf_lr_batch_new(vf_latent_reader *r, int B, vf_lr_batch *b, vf_status *st)
{
    const int64_t TL = r->o.text_len, D = r->text_dim;
    int64_t lshape[5] = {B, r->shape[0], r->shape[1], r->shape[2], r->shape[3]}, tshape[2] = {B, TL};
    memset(b, 0, sizeof *b);
    b->B = B;
    if (!(b->lat = vf_tensor_new(VF_DTYPE_F32, 5, lshape, st)) || !(b->text = vf_tensor_zeros(VF_DTYPE_I32, 2, tshape, st)) ||
        !(b->tlen = vf_tensor_zeros(VF_DTYPE_I32, 1, tshape, st)) || !(b->keys = malloc(33 * (size_t)B + 1)) ||
        (D && !(b->emb = vf_tensor_zeros(VF_DTYPE_F32, 3, (int64_t[3]){B, TL, D}, st)))) {
        vf_lr_batch_free(b);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory for a batch of %d", r->path, B);
    }
    b->keys[0] = 0;
    return 0;
}

int vf_lr_batch_add(vf_latent_reader *r, vf_lr_batch *b, int64_t idx, vf_status *st)
{
    const size_t TL = (size_t)r->o.text_len, D = (size_t)r->text_dim, g = (size_t)b->got;
    int rc = vf_lr_read_one(r, idx, (float *)b->lat->data + g * (size_t)r->per, (int32_t *)b->text->data + g * TL,
                            (int32_t *)b->tlen->data + g, b->emb ? (float *)b->emb->data + g * TL * D : NULL, st);
    if (rc != 0) return rc;
    memcpy(b->keys + 33 * g, r->keys + 32 * idx, 32);
    b->keys[33 * g + 32] = ',';
    b->got++;
    return 0;
}

int vf_lr_batch_item(vf_latent_reader *r, vf_lr_batch *b, const char *id, double index, const char *cursor,
                     vf_item **out, vf_status *st)
{
    b->keys[33 * b->got - 1] = 0;
    if (b->got < b->B) { /* a partial batch: the tensors shrink */
        b->lat->shape[0] = b->text->shape[0] = b->tlen->shape[0] = b->got;
        if (b->emb) b->emb->shape[0] = b->got;
    }
    vf_tensor *ts[4] = {b->lat, b->text, b->tlen, b->emb};
    b->lat = b->text = b->tlen = b->emb = NULL;
    int rc = vf_lr_item(r, id, ts, index, cursor, b->keys, out, st);
    vf_lr_batch_free(b);
    return rc;
}

void vf_lr_batch_free(vf_lr_batch *b)
{
    vf_tensor_unref(b->lat);
    vf_tensor_unref(b->text);
    vf_tensor_unref(b->tlen);
    vf_tensor_unref(b->emb);
    free(b->keys);
    memset(b, 0, sizeof *b);
}

