/* latent_batch.c — the bottom of the latent reader, what both orders share: the seeded
 * Fisher–Yates shuffle, reading one cache entry (its latent, caption tokens, text
 * embedding and first-frame latent "y") into a batch's slots, the check of the cache's
 * conditioning kind, the epoch rollover, and the batch item with its
 * metadata (epoch, index, cursor, keys) around the tensors.
 *
 * Calls go one way in stages/reader/: latent_reader.c → latent_buckets.c →
 * latent_batch.c. This file calls neither of the others.
 */
#include "stages/reader/latent_reader_internal.h"
#include "formats/cache_format.h"
#include "models/dit.h"
#include "runtime/philox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ order */

void vf_lr_shuffle(uint32_t *p, int64_t n, uint64_t seed, uint64_t epoch, uint64_t id)
{
    for (int64_t i = 0; i < n; i++) p[i] = (uint32_t)i;
    vf_rng rng;
    vf_rng_init(&rng, seed, epoch, id, VF_RNG_SHUFFLE);
    enum { CH = 2048 };
    uint32_t w[2 * CH];
    for (int64_t hi = n - 1; hi >= 1;) {
        int64_t lo = hi - CH + 1 < 1 ? 1 : hi - CH + 1;
        vf_rng_u32(&rng, 2 * (uint64_t)lo, 2 * (hi - lo + 1), w);
        for (int64_t i = hi; i >= lo; i--) {
            const uint32_t *q = &w[2 * (i - lo)];
            uint64_t rnd = (uint64_t)q[0] | (uint64_t)q[1] << 32;
            uint64_t j = (uint64_t)(((unsigned __int128)rnd * (uint64_t)(i + 1)) >> 64);
            uint32_t t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
        hi = lo - 1;
    }
}

/* ------------------------------------------------------------------ records */

/* The record of kind `kind` (text embedding, CLIP features) that entry `it` references,
 * widened into out (TL × D, zero rows past its length; D = the cache's width, at most
 * TL rows); *L gets its length. VF_ECORRUPT naming the entry and record. */
static int read_shared(vf_latent_reader *r, const char *key, const vf_item *it, const vf_cache_shared *kind,
                       int64_t TL, int64_t D, float *out, int32_t *L, vf_status *st)
{
    int rc = 0;
    vf_item *rec = NULL;
    const char *h = vf_item_str(it, kind->ref);
    char tkey[VF_CACHE_TEXT_KEY_LEN + 1];
    MDB_val v;
    if (!h || strlen(h) != VF_CACHE_KEY_LEN)
        VF_FAIL(st, VF_ECORRUPT, "%s: record \"%.32s\" references no %s record (metadata \"%s\")", r->path, key,
                kind->what, kind->ref);
    snprintf(tkey, sizeof tkey, "%s%s", kind->prefix, h);
    rc = vf_lmdb_get(r->db, r->txn, tkey, VF_CACHE_TEXT_KEY_LEN, &v, st);
    if (rc == VF_ENOTFOUND)
        VF_FAIL(st, VF_ECORRUPT, "%s: record \"%.32s\" references %s record \"%s\", which is missing", r->path, key,
                kind->what, tkey);
    if (rc) goto fail;
    VF_TRY(vf_cache_shared_decode(kind, r->path, tkey, VF_CACHE_TEXT_KEY_LEN, v.mv_data, v.mv_size, &rec, st));
    const vf_tensor *t = vf_item_get(rec, kind->tensor);
    int64_t n = t->shape[0];
    if (t->shape[1] != D || n > TL)
        VF_FAIL(st, VF_ECORRUPT, "%s: %s record \"%s\" is (%lld, %lld); the cache's are (<= %lld, %lld)", r->path,
                kind->what, tkey, (long long)n, (long long)t->shape[1], (long long)TL, (long long)D);
    const uint16_t *src = t->data;
    for (int64_t i = 0; i < n * D; i++) out[i] = vf_bf16_to_f32(src[i]);
    memset(out + n * D, 0, sizeof(float) * (size_t)((TL - n) * D));
    *L = (int32_t)n;
fail:
    vf_item_free(rec);
    return rc;
}

int vf_lr_check_cond(const char *path, vf_lmdb *db, MDB_txn *txn, vf_cache_cond want, int64_t image_len,
                     int64_t image_dim, vf_status *st)
{
    vf_json *meta = NULL;
    int rc = vf_cache_meta_read(db, txn, &meta, st);
    if (rc) return rc;
    vf_cache_cond have = vf_cache_meta_cond(meta);
    int64_t L = vf_json_get_int(meta, "clip_len", 0), D = vf_json_get_int(meta, "clip_dim", 0);
    vf_json_free(meta);
    if (have == want && want == VF_CACHE_COND_CONCAT_CLIP && (L != image_len || D != image_dim))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: tensor \"" VF_CACHE_CLIP_TENSOR "\": the cache's CLIP image features are (%lld, "
                             "%lld); the model takes (img_len %lld, img_dim %lld)", path, (long long)L, (long long)D,
                             (long long)image_len, (long long)image_dim);
    if (have == want) return 0;
    return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                         "%s: the cache's conditioning kind is %s; the model needs %s (%s)", path,
                         vf_cache_cond_name(have), vf_cache_cond_name(want),
                         want == VF_CACHE_COND_TEXT ? "a text-to-video model: train it on a cache without first-frame latents"
                         : want == VF_CACHE_COND_FIRST_FRAME
                             ? "image-to-video by the first frame (Wan 2.2 TI2V): precompute with vae_encode ti2v = true"
                         : want == VF_CACHE_COND_CONCAT
                             ? "an image-to-video model: precompute with vae_encode first_frame = true, docs/PRECOMPUTE.md"
                             : "an image-to-video model with CLIP image features: precompute with first_frame = true and "
                               "a manifest column clip_emb (tools/encode_images.py), docs/PRECOMPUTE.md");
}

int vf_lr_cache_check_cond(const char *path, vf_cache_cond want, int64_t image_len, int64_t image_dim, vf_status *st)
{
    int rc = 0;
    vf_lmdb *db = NULL;
    MDB_txn *txn = NULL;
    vf_lmdb_opts ro = {.readonly = true};
    VF_TRY(vf_lmdb_open(path, &ro, &db, st));
    VF_TRY(vf_lmdb_read_begin(db, &txn, st));
    VF_TRY(vf_lr_check_cond(path, db, txn, want, image_len, image_dim, st));
fail:
    if (txn) mdb_txn_abort(txn);
    vf_lmdb_close(db);
    return rc;
}

int vf_lr_read_one(vf_latent_reader *r, int64_t idx, float *lat, int32_t *text, int32_t *tlen,
                    float *emb, float *y, float *img, vf_status *st)
{
    const char *key = r->keys + 32 * idx;
    MDB_val v;
    vf_item *it = NULL;
    vf_status bad;
    vf_status_clear(&bad);
    int rc = vf_lmdb_get(r->db, r->txn, key, 32, &v, st);
    if (rc == VF_ENOTFOUND)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: entry %.32s vanished (cache changed under the reader)",
                             r->path, key);
    if (rc) return rc;
    rc = vf_cache_record_decode(r->path, key, 32, v.mv_data, v.mv_size, &it, &bad);
    if (rc == 0 && memcmp(vf_item_get(it, VF_CACHE_TENSOR)->shape, r->shape, sizeof r->shape) != 0) {
        char a[96], b[96];
        vf_shape_str(4, vf_item_get(it, VF_CACHE_TENSOR)->shape, a, sizeof a);
        vf_shape_str(4, r->shape, b, sizeof b);
        rc = vf_status_set(&bad, VF_ECORRUPT, __FILE__, __LINE__, "%s: record \"%.32s\" has latent shape %s; the cache's is %s",
                           r->path, key, a, b);
    }
    const vf_tensor *yt = rc == 0 && y ? vf_item_get(it, VF_CACHE_Y_TENSOR) : NULL;
    if (rc == 0 && y && !yt) /* vf_cache_record_decode checked its shape when it is there */
        rc = vf_status_set(&bad, VF_ECORRUPT, __FILE__, __LINE__,
                           "%s: record \"%.32s\" has no first-frame latent (tensor \"" VF_CACHE_Y_TENSOR "\") in a "
                           "cache of kind %s", r->path, key, vf_cache_cond_name(r->o.cond));
    int32_t emb_len = 0;
    if (rc == 0 && emb) rc = read_shared(r, key, it, vf_cache_text, r->o.text_len, r->text_dim, emb, &emb_len, &bad);
    int32_t img_len = 0;
    if (rc == 0 && img) /* exactly image_len rows: the cache's summary was checked at open */
        rc = read_shared(r, key, it, vf_cache_clip, r->o.image_len, r->o.image_dim, img, &img_len, &bad);
    if (rc) {
        vf_item_free(it);
        if (!r->o.skip_bad) {
            *st = bad;
            return rc;
        }
        r->bad++;
        if (r->o.on_bad) r->o.on_bad(r->o.user, bad.msg);
        return 1;
    }
    memcpy(lat, vf_item_get(it, VF_CACHE_TENSOR)->data, sizeof(float) * (size_t)r->per);
    if (y) memcpy(y, yt->data, sizeof(float) * (size_t)r->per);
    const char *caption = vf_item_str(it, "caption");
    int n = vf_dit_caption_tokens(caption, r->o.text_len, text);
    *tlen = emb ? emb_len : n;
    if (!emb && !(r->seen[idx >> 3] & (1u << (idx & 7)))) { /* each entry once, for the cut count */
        r->seen[idx >> 3] |= (uint8_t)(1u << (idx & 7));
        r->nseen++;
        r->ncut += n == r->o.text_len && caption && caption[n];
    }
    vf_item_free(it);
    return 0;
}

int vf_lr_next_epoch(vf_latent_reader *r, vf_status *st)
{
    /* an epoch read whole from its start without one good record: every record is damaged */
    if (r->epoch_from_start && r->good_in_epoch == 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: no readable record in epoch %llu (%lld damaged)",
                             r->path, (unsigned long long)r->epoch, (long long)r->bad);
    r->epoch++;
    r->pos = 0;
    r->good_in_epoch = 0;
    r->epoch_from_start = true;
    return 0;
}

/* ------------------------------------------------------------------ batches */

/* The batch item around its tensors t = {latent, text, text_len, text_emb or NULL, y or
 * NULL} (taken, also on failure) with metadata epoch, index, cursor, keys. */
int vf_lr_item(vf_latent_reader *r, const char *id, vf_tensor *t[6], double index, const char *cursor,
               const char *keys, vf_item **out, vf_status *st)
{
    static const char *const names[6] = {"latent", "text", "text_len", VF_CACHE_TEXT_TENSOR, VF_CACHE_Y_TENSOR,
                                         VF_CACHE_CLIP_TENSOR};
    int rc = 0;
    vf_item *it = vf_item_new(id, st);
    *out = NULL;
    if (!it) rc = vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", r->path);
    for (int i = 0; i < 6; i++) { /* vf_item_put takes the reference also when it fails */
        if (!t[i]) continue;
        if (rc == 0) rc = vf_item_put(it, names[i], t[i], st);
        else vf_tensor_unref(t[i]);
    }
    if (rc) goto fail;
    VF_TRY(vf_item_set_num(it, "epoch", (double)r->epoch, st));
    VF_TRY(vf_item_set_num(it, "index", index, st));
    VF_TRY(vf_item_set_str(it, "cursor", cursor, st));
    VF_TRY(vf_item_set_str(it, "keys", keys, st));
    if (r->o.cond == VF_CACHE_COND_FIRST_FRAME) VF_TRY(vf_item_set_num(it, VF_CACHE_FIRST_FRAME_KEY, 1, st));
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
        (D && !(b->emb = vf_tensor_zeros(VF_DTYPE_F32, 3, (int64_t[3]){B, TL, D}, st))) ||
        ((r->o.cond == VF_CACHE_COND_CONCAT || r->o.cond == VF_CACHE_COND_CONCAT_CLIP) &&
         !(b->y = vf_tensor_new(VF_DTYPE_F32, 5, lshape, st))) ||
        (r->o.cond == VF_CACHE_COND_CONCAT_CLIP &&
         !(b->img = vf_tensor_new(VF_DTYPE_F32, 3, (int64_t[3]){B, r->o.image_len, r->o.image_dim}, st)))) {
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
                            (int32_t *)b->tlen->data + g, b->emb ? (float *)b->emb->data + g * TL * D : NULL,
                            b->y ? (float *)b->y->data + g * (size_t)r->per : NULL,
                            b->img ? (float *)b->img->data + g * (size_t)(r->o.image_len * r->o.image_dim) : NULL, st);
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
        if (b->y) b->y->shape[0] = b->got;
        if (b->img) b->img->shape[0] = b->got;
    }
    vf_tensor *ts[6] = {b->lat, b->text, b->tlen, b->emb, b->y, b->img};
    b->lat = b->text = b->tlen = b->emb = b->y = b->img = NULL;
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
    vf_tensor_unref(b->y);
    vf_tensor_unref(b->img);
    free(b->keys);
    memset(b, 0, sizeof *b);
}

