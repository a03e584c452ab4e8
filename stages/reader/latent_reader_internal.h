/* latent_reader_internal.h — the reader's state and the functions its three files share:
 * the plain order and the stage (latent_reader.c), the bucketed order (latent_buckets.c)
 * and batches (latent_batch.c); included only by them. Calls go one way:
 * latent_reader.c → latent_buckets.c → latent_batch.c; the declarations below are
 * grouped by the file that defines them, lowest first. */
#ifndef VF_LATENT_READER_INTERNAL_H
#define VF_LATENT_READER_INTERNAL_H
#include "stages/reader/latent_reader.h"
#include "formats/lr_cursor.h"

#define VF_LR_MAX_BUCKETS 256

/* One bucket of a bucketed cache: its entries and its batching on this rank. */
typedef struct vf_lr_bucket {
    char name[VF_LR_BUCKET_NAME];  /* "<W>x<H>x<F>" */
    int w, h, frames;
    int64_t shape[4];      /* latent (z, T', h', w') */
    int batch;             /* B of its batches */
    int64_t n;             /* entries (readable at open) */
    uint32_t *idx;         /* entry indices, key order (into the reader's bidx) */
    uint32_t *perm;        /* this epoch's permutation of 0..n-1 (into bperm) */
    int64_t L, nb;         /* per rank and epoch: entries, batches */
    int scanned;           /* its number in the order the scan met the buckets */
    bool left_out;         /* by `only` or the admission: never read */
} vf_lr_bucket;

struct vf_latent_reader {
    vf_latent_reader_opts o;
    char *path;
    vf_lmdb *db;
    MDB_txn *txn;   /* reset between batches */
    char *keys;     /* n × 32 bytes, sorted */
    int64_t n, L;
    int64_t shape[4]; /* the latent shape (bucketed: the current batch's bucket's) */
    int64_t per;    /* floats per latent */
    int64_t text_dim; /* D of the cache's text embeddings; 0 = the cache has none */
    uint32_t *perm; /* permutation of the cached epoch */
    uint64_t perm_epoch;
    bool perm_valid;
    uint64_t epoch;
    int64_t pos;    /* position in the epoch (bucketed: the batch's in the schedule) */
    int64_t bad, good_in_epoch;
    uint8_t *seen;           /* n bits: entries whose caption was read (cut counting) */
    int64_t nseen, ncut;     /* of those: entries read, captions longer than text_len */
    bool epoch_from_start;
    /* bucketed: nbk > 0 buckets, sorted by name */
    int nbk;
    vf_lr_bucket *bk;
    uint32_t *bidx, *bperm;  /* n each: bucket entry lists and permutations, back to back */
    uint64_t *sched;         /* NB batches of the epoch: bucket << 32 | batch within it */
    int64_t NB;
    uint64_t sched_epoch;
    bool sched_valid;
    uint64_t layout;         /* hash of the buckets' names, entries, batch sizes and batches read */
    char *geo;               /* every batch's "geometries": "name:B,z,T,h,w;…" */
};

/* ---- latent_batch.c: the bottom, called by both files above it */

/* Fisher–Yates permutation of 0..n-1 from stream (seed, step = epoch, id, SHUFFLE). */
void vf_lr_shuffle(uint32_t *p, int64_t n, uint64_t seed, uint64_t epoch, uint64_t id);
/* Reads entry idx into the batch slots (r->shape must be its latent shape): 0, 1 when
 * it was damaged and skipped, or an error. */
int vf_lr_read_one(vf_latent_reader *r, int64_t idx, float *lat, int32_t *text, int32_t *tlen,
                   float *emb, float *y, float *img, vf_status *st);
/* The cache's conditioning kind (its summary's) against the one the model needs:
 * VF_EBADINPUT naming both and the cache. */
/* concat+clip also needs the cache's CLIP features to be (image_len, image_dim). */
int vf_lr_check_cond(const char *path, vf_lmdb *db, MDB_txn *txn, vf_cache_cond want, int64_t image_len,
                     int64_t image_dim, vf_status *st);
/* The same for the cache at path, opened read-only for it (plan and check time). */
int vf_lr_cache_check_cond(const char *path, vf_cache_cond want, int64_t image_len, int64_t image_dim, vf_status *st);
/* The end of an epoch, in either schedule: the next one starts at its first batch; an epoch
 * read from its start without one good record is VF_EBADINPUT. */
int vf_lr_next_epoch(vf_latent_reader *r, vf_status *st);
int vf_lr_item(vf_latent_reader *r, const char *id, vf_tensor *t[6], double index, const char *cursor,
               const char *keys, vf_item **out, vf_status *st);

/* A batch being filled, bucketed or not: its tensors and the keys of the entries in it. */
typedef struct vf_lr_batch {
    vf_tensor *lat, *text, *tlen, *emb; /* (B, z, T', h, w), (B, text_len), (B), (B, text_len, D) or NULL */
    vf_tensor *y;                       /* (B, z, T', h, w) of a concat cache, or NULL */
    vf_tensor *img;                     /* (B, image_len, image_dim) of a concat+clip cache, or NULL */
    char *keys;                         /* "key,key,…" of the entries added */
    int B, got;
} vf_lr_batch;
/* Room for B entries of latent shape r->shape. VF_ENOMEM naming the cache. */
int vf_lr_batch_new(vf_latent_reader *r, int B, vf_lr_batch *b, vf_status *st);
/* Reads entry idx into the next slot (in r's read transaction): 0 added, 1 damaged and
 * skipped, or an error. */
int vf_lr_batch_add(vf_latent_reader *r, vf_lr_batch *b, int64_t idx, vf_status *st);
/* The item of the entries added (a partial batch's tensors cut to them), as vf_lr_item
 * makes it; the tensors move into it, b keeps nothing. */
int vf_lr_batch_item(vf_latent_reader *r, vf_lr_batch *b, const char *id, double index, const char *cursor,
                     vf_item **out, vf_status *st);
void vf_lr_batch_free(vf_lr_batch *b); /* what b still holds */

/* ---- latent_buckets.c: the bucketed order, called by latent_reader.c */

/* Whether the cache is bucketed (declared buckets, a "buckets" summary, or a first
 * record with "bucket" metadata), read in txn. */
int vf_lr_is_bucketed(vf_latent_reader *r, bool *yes, vf_status *st);
/* Scans the entries' "bucket" metadata, forms the buckets and their batches, checks them
 * against the summary and the declared list; after the key list, inside the open txn. */
int vf_lr_buckets_open(vf_latent_reader *r, vf_status *st);
void vf_lr_buckets_free(vf_latent_reader *r);
/* The planner's admission (o.shrink: smaller batches, or none) and `only` over r's buckets
 * with their batches resolved: the one place either decides a bucket's batch or leaves it
 * out, for an open cache and for the declared list alone, so a plan before the cache
 * exists and the run over it agree. `holder` names what holds the buckets ("the cache"). */
int vf_lr_admit(vf_latent_reader *r, const char *holder, vf_status *st);
/* Every bucket left out by the admission: VF_EBUDGET (exit 2) naming the shrink. */
int vf_lr_none_admitted(const vf_latent_reader *r, vf_status *st);
/* latent_reader.c: the checks every cursor shares (cache size, seed, shard). */
int vf_lr_cursor_matches(const vf_latent_reader *r, const vf_lr_cursor *c, vf_status *st);
int vf_lr_bucket_cursor_parse(vf_latent_reader *r, const char *c, vf_status *st);
int vf_lr_next_bucketed(vf_latent_reader *r, vf_item **out, vf_status *st);

/* The stage's side. A bucket as the plan sees it. */
typedef struct vf_lr_plan_bucket {
    char name[VF_LR_BUCKET_NAME];
    int batch;
    int64_t shape[4];
    int64_t entries; /* 0 when planned from the declared list before the cache exists */
} vf_lr_plan_bucket;

/* The param `buckets` ({ {w=, h=, frames={…}, batch={…} or B}, … }) as one declaration
 * per (w, h, frames); B defaults to `batch`. Checked here (naming the bucket,
 * VF_EBADINPUT). Caller frees *out (NULL when there are none). */
int vf_lr_decl_from_params(const vf_params *p, vf_latent_bucket_decl **out, int *n, vf_status *st);
/* The param `shrink` (list of "name:B") as opts.shrink's "name:B;…" (caller frees). */
char *vf_lr_shrink_text(const vf_params *p);
/* "name:B,z,T',h',w';…" of n buckets into buf (the batches' "geometries"); -1 when it
 * does not fit. */
int vf_lr_geo_text(const vf_lr_plan_bucket *b, int n, char *buf, size_t cap);

#endif /* VF_LATENT_READER_INTERNAL_H */
