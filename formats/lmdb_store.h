/* lmdb_store.h — the LMDB environment helper shared by the latent cache writer
 * (stages/latent_cache.c), the reader (stages/reader/latent_reader.c) and `vflow cache`.
 *
 * Layout: PATH is a DIRECTORY holding data.mdb and lock.mdb (LMDB's default, not
 * MDB_NOSUBDIR), so `mdb_stat PATH`, `mdb_dump PATH` and python-lmdb's
 * `lmdb.open(PATH)` work without extra flags. Everything lives in the unnamed main DB.
 *
 * What it takes care of (the behaviour of LMDB 0.9.24, the version Debian 12 ships):
 *  - durability: the writer uses LMDB's default durable commits (never MDB_NOSYNC,
 *    never MDB_WRITEMAP), so a writer killed with SIGKILL loses at most the batch it was
 *    committing and the environment needs no recovery;
 *  - stale reader slots of killed processes are cleared with mdb_reader_check at open,
 *    and the reader table is raised (default 1024 slots);
 *  - map growth: a put or commit that hits MDB_MAP_FULL aborts the txn, doubles the map
 *    with mdb_env_set_mapsize (while this process has no txn open) and retries the
 *    whole batch; a reader whose txn_begin sees MDB_MAP_RESIZED adopts the new size
 *    (set_mapsize(0)) and retries;
 *  - batched commits: a vf_lmdb_batch collects (key, value) pairs in one arena and
 *    commits them in a single write txn, skipping keys that already exist;
 *  - errors: every LMDB call goes through VF_MDB / VF_MDB_KEY (or, for a code a call
 *    already returned, VF_MDB_RC naming that call), which turn its code into a
 *    vf_status naming the C file:line, the call, the environment path, the key and the
 *    cause: a write that fails for want of room says "no space left on device" with
 *    the bytes free, also when LMDB reports the short write as EIO.
 *
 * Threads and processes: LMDB forbids opening one env twice in a process, so
 * vf_lmdb_open keeps a process-wide registry: opening a path that is already open
 * returns the same handle with one more reference (its first opener's options; a
 * read-write open of a path open read-only is refused). Never used across fork() (a
 * child opens its own). Read txns are MDB_NOTLS, so a read txn belongs to its caller, not
 * to the thread. One writer at a time (LMDB serialises them). A process that grows the
 * map must have no read txn open on the env either (set_mapsize's condition), so the
 * writer lives alone in its process (latent_cache is VF_STAGE_OWN_WORKER).
 */
#ifndef VF_LMDB_STORE_H
#define VF_LMDB_STORE_H
#include "runtime/vflow.h"
#include <lmdb.h>

typedef struct vf_lmdb vf_lmdb;

typedef struct vf_lmdb_opts {
    bool readonly;        /* MDB_RDONLY: readers and `vflow cache`; the env must exist */
    size_t map_size;      /* writer: initial map size (0 = 64 MiB); readers adopt the env's */
    size_t max_map_size;  /* writer: growth stops here with an error (0 = 1 TiB) */
    unsigned max_readers; /* reader slots (0 = 1024) */
} vf_lmdb_opts;

/* Opens (a writer creates the directory and the env if missing). Caller owns *out
 * (vf_lmdb_close). VF_ENOTFOUND when a read-only open finds no environment. */
int vf_lmdb_open(const char *path, const vf_lmdb_opts *o, vf_lmdb **out, vf_status *st);
void vf_lmdb_close(vf_lmdb *db); /* drops one reference; NULL is fine; no txn may be open */

const char *vf_lmdb_path(const vf_lmdb *db);   /* borrowed */
MDB_env *vf_lmdb_env(vf_lmdb *db);             /* borrowed, for direct calls */
MDB_dbi vf_lmdb_dbi(const vf_lmdb *db);        /* the main DB */
size_t vf_lmdb_map_size(const vf_lmdb *db);    /* current map size */
int vf_lmdb_growths(const vf_lmdb *db);        /* times the map was doubled */
int vf_lmdb_stale_readers(const vf_lmdb *db);  /* slots mdb_reader_check cleared at open */

/* Turns an LMDB return code into st: message "<path>: <call>: <mdb_strerror>[ (key
 * "<key>")]" with file:line, <call> being `what` up to its "(" (VF_MDB passes the call's
 * text); a write that failed for want of room (ENOSPC, EDQUOT, or EIO with under a
 * megabyte free on the file system holding path: LMDB's short write) reads "<path>:
 * <call>: no space left on device (… the bytes free)". Returns the vf code (MDB_NOTFOUND -> VF_ENOTFOUND, corrupt
 * pages / invalid file -> VF_ECORRUPT, version mismatch -> VF_EVERSION, ENOMEM ->
 * VF_ENOMEM, other errno values and MDB_MAP_FULL -> VF_EIO, MDB_BAD_VALSIZE ->
 * VF_EINVAL, the rest VF_EEXTERNAL).
 * key may be NULL; non-printable key bytes are shown as \xNN. */
int vf_lmdb_status(vf_status *st, int mdb_rc, const char *file, int line, const char *path,
                   const char *what, const void *key, size_t klen);

/* Check macros: call an mdb_* function; on a non-zero code set st and `goto fail`
 * (expects `int rc` in scope, like VF_TRY). */
#define VF_MDB(st, db, call)                                                        \
    do {                                                                            \
        int mrc_ = (call);                                                          \
        if (mrc_ != MDB_SUCCESS) {                                                  \
            rc = vf_lmdb_status((st), mrc_, __FILE__, __LINE__, vf_lmdb_path(db),   \
                                #call, NULL, 0);                                    \
            goto fail;                                                              \
        }                                                                           \
    } while (0)
/* A code `mrc` that the mdb_* function named `call` (a string) returned. */
#define VF_MDB_RC(st, db, call, mrc)                                                \
    do {                                                                            \
        int mrc_ = (mrc);                                                           \
        if (mrc_ != MDB_SUCCESS) {                                                  \
            rc = vf_lmdb_status((st), mrc_, __FILE__, __LINE__, vf_lmdb_path(db),   \
                                (call), NULL, 0);                                   \
            goto fail;                                                              \
        }                                                                           \
    } while (0)
/* As VF_MDB_RC, for a call about one key (shown in the message). */
#define VF_MDB_KEY(st, db, call, key, klen, mrc)                                    \
    do {                                                                            \
        int mrc_ = (mrc);                                                           \
        if (mrc_ != MDB_SUCCESS) {                                                  \
            rc = vf_lmdb_status((st), mrc_, __FILE__, __LINE__, vf_lmdb_path(db),   \
                                (call), (key), (klen));                             \
            goto fail;                                                              \
        }                                                                           \
    } while (0)

/* Begins a read-only txn (MDB_MAP_RESIZED handled). Caller ends it with mdb_txn_abort
 * (or mdb_txn_reset + vf_lmdb_read_renew to reuse it). */
int vf_lmdb_read_begin(vf_lmdb *db, MDB_txn **txn, vf_status *st);
int vf_lmdb_read_renew(vf_lmdb *db, MDB_txn *txn, vf_status *st);
/* Looks up key in txn: 0 with *val set (borrowed: valid until the txn ends),
 * VF_ENOTFOUND (st untouched), or an error. */
int vf_lmdb_get(vf_lmdb *db, MDB_txn *txn, const void *key, size_t klen, MDB_val *val,
                vf_status *st);
/* Returned (positive) by vf_lmdb_put, and to be returned by a vf_lmdb_txn_fn, when
 * LMDB said MDB_MAP_FULL: the commit then grows the map and retries. */
#define VF_LMDB_RETRY 2
/* mdb_put wrapper for vf_lmdb_txn_fn callbacks: 0, VF_LMDB_RETRY (map full; st
 * untouched) or an error naming the key. */
int vf_lmdb_put(vf_lmdb *db, MDB_txn *txn, const void *key, size_t klen, const void *val,
                size_t vlen, unsigned flags, vf_status *st);
/* Whether key exists, in a short read txn of its own (none is left open, so the writer
 * may grow the map right after). */
int vf_lmdb_exists(vf_lmdb *db, const void *key, size_t klen, bool *exists, vf_status *st);
/* Number of entries in the main DB (mdb_stat in a short read txn). */
int vf_lmdb_count(vf_lmdb *db, size_t *entries, vf_status *st);

/* ------------------------------------------------------------------ batched writes */

typedef struct vf_lmdb_batch vf_lmdb_batch;

vf_lmdb_batch *vf_lmdb_batch_new(vf_status *st); /* caller owns; vf_lmdb_batch_free */
void vf_lmdb_batch_free(vf_lmdb_batch *b);       /* NULL is fine */
int vf_lmdb_batch_count(const vf_lmdb_batch *b);
size_t vf_lmdb_batch_bytes(const vf_lmdb_batch *b); /* arena bytes in use (keys + values) */
size_t vf_lmdb_batch_capacity(const vf_lmdb_batch *b); /* arena bytes allocated */
/* Grows the arena to at least `bytes` (one allocation, vf_alloc'd: charged to the
 * calling stage). The arena otherwise doubles on demand, holding old and new while it
 * copies; presizing from the first record avoids that. */
int vf_lmdb_batch_presize(vf_lmdb_batch *b, size_t bytes, vf_status *st);
/* Appends key (copied) with room for vlen value bytes; *dst points at that room and
 * stays valid until the next reserve/put/commit/clear. */
int vf_lmdb_batch_reserve(vf_lmdb_batch *b, const void *key, size_t klen, size_t vlen,
                          void **dst, vf_status *st);
int vf_lmdb_batch_put(vf_lmdb_batch *b, const void *key, size_t klen, const void *val,
                      size_t vlen, vf_status *st); /* copies both */
void vf_lmdb_batch_clear(vf_lmdb_batch *b);
/* Keeps the first n entries (drops a half-filled reservation after a failed encode). */
void vf_lmdb_batch_truncate(vf_lmdb_batch *b, int n);
/* Entry i: key and value, borrowed from the batch. */
void vf_lmdb_batch_at(const vf_lmdb_batch *b, int i, MDB_val *key, MDB_val *val);

/* Called inside the write txn after the batch's puts; written[i] says whether entry i
 * was stored (0: its key already existed). It may read and put in txn (e.g. update a
 * summary record) with vf_lmdb_get / vf_lmdb_put, passing VF_LMDB_RETRY on. It can run more than once for one commit (after a map growth the
 * txn is retried from scratch), so it must derive what it writes from txn and
 * `written` only. */
typedef int (*vf_lmdb_txn_fn)(void *user, vf_lmdb *db, MDB_txn *txn,
                              const vf_lmdb_batch *b, const unsigned char *written,
                              vf_status *st);

/* Writes every entry of b whose key does not exist yet (MDB_NOOVERWRITE), runs fn (if
 * not NULL), commits durably; grows the map and retries on MDB_MAP_FULL. On success the
 * batch is cleared and *nwritten / *nexisting (either may be NULL) count the entries
 * stored / skipped. On failure nothing of the batch is stored and b is kept. */
int vf_lmdb_batch_commit(vf_lmdb *db, vf_lmdb_batch *b, vf_lmdb_txn_fn fn, void *user,
                         int *nwritten, int *nexisting, vf_status *st);

#endif /* VF_LMDB_STORE_H */
