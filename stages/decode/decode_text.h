/* decode_text.h — the embeddings of a manifest row, loaded by the decode stage and
 * attached to every clip of the row: the caption's text embedding (column `text_emb`,
 * tensor "text_emb") and, for image-to-video, the CLIP image features of the row's first
 * frame (column `clip_emb`, tensor "clip_emb").
 *
 * Each file is a safetensors file holding one tensor (L, D) of any float dtype (F32,
 * F64, BF16, F16) (tools/encode_captions.py and tools/encode_images.py write such files).
 * It becomes a host bf16 (L, D) tensor, rounded to nearest even: the latent cache stores
 * them as bf16, and rounding here makes the key hash, the stored record and what
 * latent_reader emits one value.
 */
#ifndef VF_DECODE_TEXT_H
#define VF_DECODE_TEXT_H
#include "runtime/vflow.h"
#include "formats/video_manifest.h"

/* Loads `path` (column `what`, for messages). 0: *out (caller owns) is bf16 (L, D) with
 * 1 <= L <= max_len and D == dim; 1: the file is bad, `why` says which file and tensor
 * and what is wrong (missing, unreadable, not one tensor, not 2-D, another width, too
 * long, not a float dtype, NaN or infinity); < 0: out of memory (st set). */
int vf_decode_text_load(const char *what, const char *path, int64_t dim, int64_t max_len, vf_tensor **out,
                        char *why, size_t whyn, vf_status *st);

/* The widths a decode stage loads: text_dim / image_dim 0 = that column is not read. CLIP
 * features must have exactly image_len rows. */
typedef struct vf_decode_emb_dims {
    int64_t text_dim, text_len, image_dim, image_len;
} vf_decode_emb_dims;

/* A row's embeddings (NULL where its dim is 0); freed by vf_decode_embs_free. */
typedef struct vf_decode_embs {
    vf_tensor *text, *image;
} vf_decode_embs;

/* Every row of man against the dims: a column given with its dim 0 is VF_EUSAGE, a dim
 * > 0 and a row without the column VF_EBADINPUT; the message names the stage, the
 * manifest line and the column. */
int vf_decode_embs_check(const vf_manifest *man, const char *stage, const vf_decode_emb_dims *dims, vf_status *st);
/* Loads row r's files: 0, 1 (a bad file: `why` says which; *e holds nothing) or < 0. */
int vf_decode_embs_load(const vf_manifest_row *r, const vf_decode_emb_dims *dims, vf_decode_embs *e, char *why,
                        size_t whyn, vf_status *st);
/* Adds what e holds to item it (new references). */
int vf_decode_embs_put(vf_item *it, const vf_decode_embs *e, vf_status *st);
void vf_decode_embs_free(vf_decode_embs *e);
#endif
