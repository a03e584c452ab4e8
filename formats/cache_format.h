/* cache_format.h — the conventions of vflow's LMDB latent cache, shared by the writer
 * (stages/latent_cache.c), the reader (stages/reader/latent_reader.c) and `vflow cache`.
 *
 * Entries of the main DB:
 *   <32 lowercase hex chars>  the codec record (vf_item_encode) of one latent item
 *                             (docs/ITEMS.md: tensor "latent" f32 (z, T', h, w), optional
 *                             "logvar", metadata with caption and provenance)
 *   "__meta__"                canonical JSON summary, updated in the same txn as the
 *                             entries it counts (so it is exact after a SIGKILL):
 *     {"format":"vflow-latent-cache","version":1,"key":"provenance"|"id",
 *      "tensor":"latent","dtype":"f32","entries":N,"bytes":B,
 *      "shapes":{"(16,5,32,32)":N,…},"vae":{"<vae hash>":N,…}}
 *     and, when some entry has a bucket (below),
 *      "buckets":{"<W>x<H>x<F>":{"entries":N,"batch":B,"latent":"(z,T',h',w')"},…}
 *
 *   "text:<32 hex chars>"     a caption's text embedding (see below), shared by every
 *                             entry whose caption has it
 *
 * Keys: the 128-bit FNV-1a hash, as 32 hex chars (high half first), of
 *   "vflow-latent-key/1\0" source "\0" clip "\0" transform "\0" vae "\0"
 * (clip as a decimal integer; source/transform/vae the item's metadata strings of those
 * names) — so another file, clip, transform or VAE never collides with an entry, and a
 * rerun derives the same key for the same work. Items without provenance (tests, the
 * synthetic source) use key scheme "id": the hash of "vflow-latent-key/id/1\0" id "\0".
 * An item that carries a text embedding appends its text key's 32 hex chars and "\0" to
 * either hash input, so a changed caption or text encoder makes a new entry key.
 * An item of a bucket (metadata "bucket" = "<W>x<H>x<F>", the clip's pixel geometry, and
 * optionally "bucket_batch" = the training batch of that bucket, both stored in the record
 * as they are) appends "bucket\0" and the bucket's name and "\0" last; keys of items
 * without a bucket are unchanged. A bucket's batch is fixed by its first entry in a cache
 * (0 in the summary: none given, the reader's batch decides).
 *
 * Text embeddings. An item may carry tensor "text_emb" bf16 (L, D): the text encoder's
 * output for the real tokens of its caption (umT5: L <= text_len rows of width D). The
 * writer stores it once per distinct content under "text:" + the FNV-1a-128 hex of
 *   "vflow-text-key/1\0" "(L,D)\0" and the L·D bf16 values (little-endian bytes)
 * as a codec record (id = that key, tensor "text_emb" bf16 (L, D)); the entry keeps
 * metadata "text_key" (the 32 hex chars) and "text_tokens" (L) instead of the tensor.
 * Many clips share a caption, so one record serves them all; a changed encoder or
 * caption changes the values and so the key. The summary then also counts
 *   "texts":N, "text_bytes":B, "text_dim":D, "text_max_len":Lmax, "text_entries":E
 * (E = entries that reference an embedding; a reader needs E = entries).
 *
 * Image-to-video conditioning (formats/cache_cond.c). An entry may carry tensor "y" f32 of
 * the latent's shape (z, T', h, w): the VAE latent of [the clip's first frame, zeros for
 * the other frames], its own encode, normalised as the latent is. A cache holds one
 * conditioning kind: "text" (entries without "y"), "concat" (every entry with "y") or
 * "concat+clip" (also the clip's CLIP image features, "clip_emb"). The summary records
 * "cond":"concat"|"concat+clip" from its first such entry; no "cond" = "text". An entry
 * of another kind than the cache's is refused.
 * A fourth kind, "first_frame" (Wan 2.2 TI2V: the image's latent replaces the noisy
 * latent's frame 0), adds no tensor: the causal encoder takes the first frame alone, so
 * the latent's frame 0 is the image's own encode. Its entries carry metadata
 * "first_frame" = 1, which makes the kind.
 *
 * CLIP image features. An item may carry tensor "clip_emb" bf16 (L, D) (Wan 2.1 I2V: the
 * CLIP ViT-H/14 penultimate states of its first frame, (257, 1280)). They are stored as
 * text embeddings are, once per distinct content, under "clip:" + the FNV-1a-128 hex of
 *   "vflow-clip-key/1\0" "(L,D)\0" and the L·D bf16 values
 * (a codec record, id = that key, tensor "clip_emb"); the entry keeps metadata
 * "clip_key" (32 hex chars) and "clip_rows" (L). The summary counts
 *   "clips":N, "clip_bytes":B, "clip_dim":D, "clip_len":L (one shape per cache).
 * An item with CLIP features keys its entry with, in place of its text hash, the
 * FNV-1a-128 hex of "vflow-cond-key/1\0" text hash "\0" clip key "\0" (vf_cache_item_cond_hash),
 * so features that change (another image encoder, another frame) make a new entry key.
 */
#ifndef VF_CACHE_FORMAT_H
#define VF_CACHE_FORMAT_H
#include "runtime/json.h"
#include "formats/lmdb_store.h"

#define VF_CACHE_FORMAT "vflow-latent-cache"
#define VF_CACHE_VERSION 1
#define VF_CACHE_META_KEY "__meta__"
#define VF_CACHE_KEY_LEN 32
#define VF_CACHE_TENSOR "latent"
#define VF_CACHE_TEXT_TENSOR "text_emb"
#define VF_CACHE_TEXT_PREFIX "text:"
#define VF_CACHE_TEXT_KEY_LEN (5 + VF_CACHE_KEY_LEN) /* "text:" + 32 hex */
#define VF_CACHE_Y_TENSOR "y"
#define VF_CACHE_CLIP_TENSOR "clip_emb"
#define VF_CACHE_CLIP_PREFIX "clip:"
#define VF_CACHE_FIRST_FRAME_KEY "first_frame" /* entry metadata, 1: of kind first_frame */

/* A kind of record stored once per content and referenced from entries: text
 * embeddings (vf_cache_text) and CLIP image features (vf_cache_clip). */
typedef struct vf_cache_shared {
    const char *tensor; /* the item's tensor: "text_emb" | "clip_emb" */
    const char *prefix; /* its record keys: "text:" | "clip:" (5 chars) + 32 hex */
    const char *tag;    /* the content hash's domain */
    const char *ref;    /* the entry's metadata naming the record: "text_key" | "clip_key" */
    const char *rows;   /* the entry's metadata with its rows: "text_tokens" | "clip_rows" */
    const char *what;   /* "text" | "clip", for messages */
} vf_cache_shared;
extern const vf_cache_shared *const vf_cache_text, *const vf_cache_clip;

/* The 32 hex chars of a record's content hash (t: bf16 (L, D) host tensor). */
void vf_cache_shared_hash(const vf_cache_shared *k, const vf_tensor *t, char out[VF_CACHE_KEY_LEN + 1]);
/* Whether an LMDB key is a record key of kind k (its prefix + 32 lowercase hex chars). */
bool vf_cache_is_shared_key(const vf_cache_shared *k, const void *key, size_t klen);
/* Checks such a tensor: bf16, 2 dims (L >= 1, D >= 1), host; VF_EINVAL naming `what`. */
int vf_cache_check_shared(const vf_cache_shared *k, const vf_tensor *t, const char *what, vf_status *st);
/* Strict decode of a stored record of kind k (codec checks, its tensor, id equal to its
 * key, content equal to its hash). VF_ECORRUPT naming the cache path and key. Caller
 * owns *out. */
int vf_cache_shared_decode(const vf_cache_shared *k, const char *path, const void *key, size_t klen,
                           const void *val, size_t vlen, vf_item **out, vf_status *st);
/* Counts one more CLIP record of `bytes` record bytes and shape (L, D). 0, VF_ENOMEM, or
 * VF_EINVAL when the cache holds features of another shape. */
int vf_cache_meta_count_clip(vf_json *meta, int64_t L, int64_t D, int64_t bytes, vf_status *st);

/* The conditioning a cache's entries carry (see "Image-to-video conditioning" above). */
typedef enum vf_cache_cond {
    VF_CACHE_COND_TEXT = 0,        /* latents (and text) only: text-to-video */
    VF_CACHE_COND_CONCAT = 1,      /* + "y": Wan 2.2 I2V-A14B */
    VF_CACHE_COND_CONCAT_CLIP = 2, /* + "y" and CLIP image features: Wan 2.1 I2V */
    VF_CACHE_COND_FIRST_FRAME = 3, /* latents whose frame 0 is the image's: Wan 2.2 TI2V */
} vf_cache_cond;

const char *vf_cache_cond_name(vf_cache_cond c); /* "text" | "concat" | "concat+clip" | "first_frame" */
int vf_cache_cond_parse(const char *s, vf_cache_cond *out); /* 0 or VF_EINVAL */
/* The kind of one item: by its tensor "y" and its CLIP features (tensor "clip_emb" or,
 * stored, metadata "clip_key"), or its metadata "first_frame". */
vf_cache_cond vf_cache_item_cond(const vf_item *it);
/* The kind a summary records (NULL or no "cond": text). */
vf_cache_cond vf_cache_meta_cond(const vf_json *meta);
/* Counts one more entry of kind c into the summary: the first entry of the cache sets
 * the kind; an entry of another kind than the cache's is VF_EBADINPUT naming both. */
int vf_cache_meta_count_cond(vf_json *meta, vf_cache_cond c, vf_status *st);
/* Checks an item's "y" (when present): host f32 of the latent's shape. VF_EINVAL naming
 * the item otherwise. */
int vf_cache_check_y(const vf_item *it, vf_status *st);

typedef enum vf_cache_keying {
    VF_CACHE_KEY_PROVENANCE = 0, /* (source, clip, transform, vae) */
    VF_CACHE_KEY_ID = 1,         /* the item id */
} vf_cache_keying;

const char *vf_cache_keying_name(vf_cache_keying k); /* "provenance" | "id" */
int vf_cache_keying_parse(const char *s, vf_cache_keying *out); /* 0 or VF_EINVAL */

/* The key text (32 hex chars + NUL) of the given provenance / id. */
void vf_cache_key(const char *source, int64_t clip, const char *transform, const char *vae,
                  char out[VF_CACHE_KEY_LEN + 1]);
void vf_cache_key_of_id(const char *id, char out[VF_CACHE_KEY_LEN + 1]);
/* The "vae" provenance of latents normalised per channel: the 32 hex chars of the hash
 * of "vflow-vae-norm/1\0" vae_hash "\0" norm "\0" (norm: the stage's
 * {"mean":[…],"std":[…]} text), so the same weights under another normalisation never
 * share a key. */
void vf_cache_vae_id(const char *vae_hash, const char *norm, char out[VF_CACHE_KEY_LEN + 1]);
/* Records in the summary the normalisation (JSON text) the latents of VAE `vae` got:
 * "latent_norm":{"<vae>":{"mean":[…],"std":[…]}}. 0, VF_ENOMEM, or VF_EINVAL when
 * the text is not JSON. */
int vf_cache_meta_note_norm(vf_json *meta, const char *vae, const char *norm, vf_status *st);
/* The 32 hex chars of a text embedding's content hash (t: bf16 (L, D) host tensor). */
void vf_cache_text_hash(const vf_tensor *t, char out[VF_CACHE_KEY_LEN + 1]);
/* Entry key with an optional text hash (NULL = none, then equal to vf_cache_key). */
void vf_cache_key_text(const char *source, int64_t clip, const char *transform, const char *vae,
                       const char *text_hash, char out[VF_CACHE_KEY_LEN + 1]);
/* Entry key with an optional text hash and an optional bucket (NULL or "" = none). */
void vf_cache_key_bucket(const char *source, int64_t clip, const char *transform, const char *vae,
                         const char *text_hash, const char *bucket, char out[VF_CACHE_KEY_LEN + 1]);
#define VF_CACHE_BUCKET_MAX 48
/* An item's bucket: name "" and *batch 0 when it has none; its "<W>x<H>x<F>" and
 * bucket_batch (0 when not given) otherwise. VF_EINVAL naming the item when the name is
 * malformed, the batch is not an integer >= 1, or a batch comes without a bucket. */
int vf_cache_item_bucket(const vf_item *it, char name[VF_CACHE_BUCKET_MAX], int64_t *batch, vf_status *st);
/* The text hash an item's key includes: of its "text_emb" tensor when it carries one,
 * else its "text_key" metadata (a stored entry), else "" (none). */
void vf_cache_item_text_hash(const vf_item *it, char out[VF_CACHE_KEY_LEN + 1]);
/* The hash an item's entry key includes in place of its text hash th
 * (vf_cache_item_text_hash): th itself for an item without CLIP features, else the hash
 * of th and its CLIP key (of its "clip_emb" tensor, else its "clip_key" metadata). */
void vf_cache_item_cond_hash(const vf_item *it, const char *th, char out[VF_CACHE_KEY_LEN + 1]);
/* Whether an LMDB key is a text record key ("text:" + 32 lowercase hex chars). */
bool vf_cache_is_text_key(const void *key, size_t klen);
/* Checks a text embedding tensor: bf16, 2 dims (L >= 1, D >= 1), host. VF_EINVAL naming
 * `what` otherwise. */
int vf_cache_check_text(const vf_tensor *t, const char *what, vf_status *st);
/* Strict decode of a stored text record (codec checks, tensor "text_emb" bf16 (L, D),
 * id equal to its key). VF_ECORRUPT naming the cache path and key. Caller owns *out. */
int vf_cache_text_decode(const char *path, const void *key, size_t klen, const void *val,
                         size_t vlen, vf_item **out, vf_status *st);
/* Key of an item under a scheme; VF_EINVAL naming the item id and the missing
 * metadata field (provenance needs str source, num clip, str transform, str vae). */
int vf_cache_key_of_item(const vf_item *it, vf_cache_keying k, char out[VF_CACHE_KEY_LEN + 1],
                         vf_status *st);
/* Same with the item's text hash already computed (vf_cache_item_text_hash; "" = none):
 * hashing a large embedding once per item. */
int vf_cache_key_of_item_text(const vf_item *it, vf_cache_keying k, const char *text_hash,
                              char out[VF_CACHE_KEY_LEN + 1], vf_status *st);
/* Whether an LMDB key is an entry key (32 lowercase hex chars), not "__meta__". */
bool vf_cache_is_entry_key(const void *key, size_t klen);

/* Checks an item is a cache entry: tensor "latent", f32, 4 dims (z, T', h, w), and a
 * "text_emb" (when present) as vf_cache_check_text wants it. VF_EINVAL naming the item
 * otherwise. */
int vf_cache_check_item(const vf_item *it, vf_status *st);
/* "(z,T',h,w)" of the latent, for the summary's shape histogram. */
void vf_cache_shape_key(const vf_item *it, char *buf, size_t n);

/* Strict decode of a stored record (codec: magic, version, CRC, every length) plus
 * vf_cache_check_item. VF_ECORRUPT / VF_EVERSION / VF_EINVAL with a message naming the
 * cache path and the key. Caller owns *out. */
int vf_cache_record_decode(const char *path, const void *key, size_t klen, const void *val,
                           size_t vlen, vf_item **out, vf_status *st);

/* The summary record. read: *out = NULL when absent; VF_EVERSION / VF_ECORRUPT when it
 * is of another format or version or not JSON. Caller owns *out (vf_json_free). */
int vf_cache_meta_read(vf_lmdb *db, MDB_txn *txn, vf_json **out, vf_status *st);
/* The same check of a summary record's bytes (path names the cache in messages). */
int vf_cache_meta_parse(const char *path, const void *val, size_t vlen, vf_json **out, vf_status *st);
/* New summary with zero counts for key scheme k. NULL when out of memory. */
vf_json *vf_cache_meta_new(vf_cache_keying k);
/* Counts one more entry of `bytes` record bytes, latent shape `shape`, VAE `vae`
 * (NULL or "" = "none"). 0 or VF_ENOMEM. */
int vf_cache_meta_count(vf_json *meta, const char *shape, const char *vae, int64_t bytes,
                        vf_status *st);
/* Counts one more entry of bucket `bucket` with batch `batch` and latent shape `shape`
 * (recorded with the bucket's first entry). 0, VF_ENOMEM, or VF_EINVAL when the cache
 * records another batch for the bucket. */
int vf_cache_meta_count_bucket(vf_json *meta, const char *bucket, int64_t batch, const char *shape,
                               vf_status *st);
/* Counts one more text record of `bytes` record bytes and shape (L, D). 0, VF_ENOMEM,
 * or VF_EINVAL when D differs from the width the cache already holds. */
int vf_cache_meta_count_text(vf_json *meta, int64_t L, int64_t D, int64_t bytes, vf_status *st);
/* Counts one more entry that references a text record. 0 or VF_ENOMEM. */
int vf_cache_meta_count_text_entry(vf_json *meta, vf_status *st);
/* Stores it (canonical JSON) in txn: 0, VF_LMDB_RETRY (map full) or an error. */
int vf_cache_meta_write(vf_lmdb *db, MDB_txn *txn, const vf_json *meta, vf_status *st);
/* The key scheme a summary records. */
vf_cache_keying vf_cache_meta_keying(const vf_json *meta);

#endif /* VF_CACHE_FORMAT_H */
