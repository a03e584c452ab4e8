/* latent_cache.h — the writer behind stage kind `latent_cache`, exposed so tests can
 * drive it without a running graph (tests/unit/test_latent_cache.c). Not for other
 * stages: they talk to the cache through items.
 */
#ifndef VF_LATENT_CACHE_H
#define VF_LATENT_CACHE_H
#include "formats/cache_format.h"

typedef struct vf_latent_writer vf_latent_writer;

typedef struct vf_latent_writer_opts {
    const char *path;        /* LMDB directory (created) */
    int commit_every;        /* items per write txn (>= 1) */
    size_t map_size;         /* initial map size; grows on demand */
    vf_cache_keying keying;  /* how entries are keyed (cache_format.h) */
} vf_latent_writer_opts;

/* Opens the cache; refuses one keyed by another scheme or of another format version.
 * Caller owns *out (vf_latent_writer_close). */
int vf_latent_writer_open(const vf_latent_writer_opts *o, vf_latent_writer **out,
                          vf_status *st);
/* Takes the item (always, also on error): checks it (docs/ITEMS.md), derives its key,
 * skips it when the key exists (*skipped = true), else queues its record; commits when
 * commit_every records are queued. */
int vf_latent_writer_add(vf_latent_writer *w, vf_item *it, bool *skipped, vf_status *st);
/* Commits the queued records (durable; the summary record in the same txn). */
int vf_latent_writer_flush(vf_latent_writer *w, vf_status *st);
/* Closes without committing what is still queued. NULL is fine. */
void vf_latent_writer_close(vf_latent_writer *w);

typedef struct vf_latent_writer_stats {
    int64_t written;   /* records stored by this writer */
    int64_t skipped;   /* items whose key already existed (earlier run or duplicate) */
    int64_t queued;    /* waiting for the next commit */
    int64_t commits;
    int64_t texts;     /* text embedding records stored by this writer */
    size_t map_size;
    int growths;
    size_t batch_capacity; /* bytes of the commit buffer */
} vf_latent_writer_stats;
void vf_latent_writer_get_stats(const vf_latent_writer *w, vf_latent_writer_stats *out);

#endif /* VF_LATENT_CACHE_H */
