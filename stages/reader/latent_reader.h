/* latent_reader.h — the order and batching behind stage kind `latent_reader`, exposed
 * so tests can drive them without a running graph (tests/unit/test_latent_reader.c).
 *
 * Order. The entry keys of the cache, sorted (LMDB's order), are indexed 0..N-1. Epoch
 * e visits them in the permutation P_e = Fisher–Yates(0..N-1) whose swap j for step i
 * (i = N-1 … 1) is floor(r_i · (i+1) / 2^64), r_i the 64-bit word made of Philox words
 * 2i, 2i+1 of the stream (seed, step = e, id = 0, VF_RNG_SHUFFLE): a pure function of
 * (seed, e, N). Rank k of K takes P_e[k], P_e[k+K], …: L = floor(N/K) items per epoch
 * on every rank (equal step counts for data parallel; the N mod K left over change with
 * the epoch), ranks disjoint, covering every entry when K divides N.
 *
 * Batches. Positions pos … of the rank's epoch list are read in order; B good records
 * make a batch (a damaged record is skipped and counted with on_bad = skip, or fails
 * the run naming its key). The epoch's last partial batch is dropped with drop_last,
 * emitted smaller otherwise. Without buckets all latents of one cache have one shape
 * (checked from the "__meta__" summary at open and on every record).
 *
 * Buckets. A cache whose entries carry metadata "bucket" = "<W>x<H>x<F>" (pixel
 * geometry; latent f32 (z, (F-1)/4+1, H/8, W/8)) is read one bucket per batch. Its
 * buckets, sorted by name bytes, are numbered b = 0..NB-1 (entries in key order within
 * each). A bucket's batch size is, first found: the declared list (opts.buckets), the
 * summary's "buckets"{name}{"batch"}, the entries' "bucket_batch", opts.batch; a declared
 * list that disagrees with the summary, names a bucket without entries, or misses one
 * the cache holds is refused. Epoch e: bucket b's entries are permuted by the
 * Fisher–Yates above on stream (seed, e, id = 1 + b); rank k of K takes positions k,
 * k+K, … (L_b = floor(n_b/K)), cut into batches of B_b (the last partial one dropped
 * with drop_last); the list of all buckets' batches (b ascending, then batch index) is
 * then permuted by the same Fisher–Yates on stream (seed, e, id = 0). Every rank gets
 * the same bucket at the same step. Each batch adds metadata "bucket" (its name) and
 * "geometries" ("name:B,z,T',h',w';…" over all buckets, so a consumer sizes its buffers
 * once for the largest); "index" is its place in the epoch's batch list. A record whose
 * header is damaged is left out of the buckets at open (on_bad = skip) or fails the open;
 * one whose payload is damaged is skipped when its batch is read (the batch is then
 * smaller, or dropped with drop_last).
 *
 * Cursor (its text: formats/lr_cursor.h, version 1 plain, 2 bucketed): where the next
 * batch starts, the position counting entries (bucketed: the next batch's place in the
 * epoch's list). Each batch carries the cursor AFTER it, so a checkpoint that stores the
 * cursor of the last batch it trained on resumes with exactly the next batch. Resuming
 * with another seed, shard layout or number of entries is refused (the order would
 * differ); bucketed, so is resuming over other buckets (the cursor's hash of the
 * buckets' names, entries and batch sizes differs).
 */
#ifndef VF_LATENT_READER_H
#define VF_LATENT_READER_H
#include "formats/cache_format.h"

typedef struct vf_latent_reader vf_latent_reader;

#define VF_LR_BUCKET_NAME 40

/* A declared bucket: pixel width, height, frames, and the batch size of its batches. */
typedef struct vf_latent_bucket_decl {
    int w, h, frames, batch;
} vf_latent_bucket_decl;

typedef struct vf_latent_reader_opts {
    const char *path;
    int batch;           /* B >= 1 */
    uint64_t seed;
    int64_t epochs;      /* 0 = forever */
    int shard, nshards;  /* rank k of K */
    bool drop_last;
    int text_len;        /* caption bytes kept as i32 tokens; rows of "text_emb" */
    int64_t text_dim;    /* > 0: emit "text_emb"; the cache must hold embeddings of this width */
    vf_cache_cond cond;  /* the conditioning the model needs: the cache's kind must be it;
                            concat: emit "y" (B, z, T', h, w); concat+clip also
                            "clip_emb" (B, image_len, image_dim); first_frame: batches
                            carry metadata "first_frame" = 1 */
    int64_t image_len, image_dim; /* concat+clip: the CLIP features' shape the model takes */
    const char *cursor;  /* NULL / "" = start of epoch 0 */
    bool skip_bad;       /* on_bad = skip (else fail) */
    /* called for every skipped damaged record with a message naming it (may be NULL) */
    void (*on_bad)(void *user, const char *msg);
    void *user;
    const vf_latent_bucket_decl *buckets; /* declared buckets (borrowed); NULL = as the cache has them */
    int nbuckets;
    const char *only;    /* bucketed: read only the bucket of this name (NULL / "" = all) */
    const char *shrink;  /* bucketed: "name:B;…" admitted batch sizes (B = 0: the bucket is left out) */
} vf_latent_reader_opts;

/* Opens the cache read-only, lists its keys, checks the latent shape. Caller owns *out. */
int vf_latent_reader_open(const vf_latent_reader_opts *o, vf_latent_reader **out,
                          vf_status *st);
void vf_latent_reader_close(vf_latent_reader *r); /* NULL is fine */
/* Replaces the on_bad callback (the stage sets it once its context exists). */
void vf_latent_reader_set_on_bad(vf_latent_reader *r, void (*fn)(void *, const char *), void *user);

/* The latent shape (z, T', h, w) of the cache at path and its entry count, from the
 * "__meta__" summary (or the first record when there is none): for `ports` / `memory`
 * at plan time. VF_ENOTFOUND when there is no cache; VF_EBADINPUT when it holds several
 * shapes or none. */
int vf_latent_cache_probe(const char *path, int64_t shape[4], int64_t *entries, vf_status *st);

/* Text embedding width and longest length a cache's summary records (0, 0 when it
 * holds none). VF_ENOTFOUND when there is no cache. */
int vf_latent_cache_text_info(const char *path, int64_t *dim, int64_t *max_len, vf_status *st);

/* Next batch item (docs/ITEMS.md: "latent" f32 (B, z, T', h, w), "text" i32 (B, text_len),
 * "text_len" i32 (B) (caption bytes, or embedding rows with text_dim > 0),
 * "text_emb" f32 (B, text_len, D) with text_dim > 0 (rows at and past each length zero); meta "epoch", "index" (floor(first position / B)), "cursor"
 * (after this batch), "keys" (comma-separated entry keys)). Caller owns *out.
 * VF_EOS after the last epoch. */
int vf_latent_reader_next(vf_latent_reader *r, vf_item **out, vf_status *st);

int64_t vf_latent_reader_entries(const vf_latent_reader *r);    /* N */
int64_t vf_latent_reader_epoch_len(const vf_latent_reader *r);  /* L = floor(N/K) */
int64_t vf_latent_reader_bad(const vf_latent_reader *r);        /* records skipped */
/* Captions (bytes, without text_dim) longer than text_len and cut to it, among the
 * distinct entries read so far (*seen). */
int64_t vf_latent_reader_cut(const vf_latent_reader *r, int64_t *seen);
/* The latent shape (z, T', h, w) of the cache. */
void vf_latent_reader_shape(const vf_latent_reader *r, int64_t shape[4]);
/* Key of entry index i (0..N-1, sorted order), 32 chars, not NUL-terminated. */
const char *vf_latent_reader_key(const vf_latent_reader *r, int64_t i);
/* Buckets of a bucketed cache (0 without), and bucket i's name, batch size, entries and
 * latent shape. */
int vf_latent_reader_nbuckets(const vf_latent_reader *r);
const char *vf_latent_reader_bucket(const vf_latent_reader *r, int i, int *batch, int64_t *entries,
                                    int64_t shape[4]);
/* Batches bucket i gives per epoch on this rank; -1 when it is left out (`only`, or the
 * admission). */
int64_t vf_latent_reader_bucket_batches(const vf_latent_reader *r, int i);
/* Entry index at position pos of epoch e on this rank (pos < L). */
int64_t vf_latent_reader_index_at(vf_latent_reader *r, uint64_t epoch, int64_t pos);

#endif /* VF_LATENT_READER_H */
