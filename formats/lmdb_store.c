/* lmdb_store.c — LMDB environment helper: open with stale-reader cleanup, batched
 * durable commits that grow the map on MDB_MAP_FULL, MDB_MAP_RESIZED handling for
 * readers, and LMDB codes turned into vf_status (contract in lmdb_store.h). */
#include "formats/lmdb_store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define DEFAULT_MAP (64ull << 20)
#define DEFAULT_MAX_MAP (1ull << 40)
#define DEFAULT_READERS 1024u

struct vf_lmdb {
    MDB_env *env;
    MDB_dbi dbi;
    bool readonly;
    size_t map_size, max_map;
    int growths, stale;
    /* process-wide registry (LMDB forbids two envs on one file in a process) */
    dev_t dev;
    ino_t ino;
    pid_t pid; /* a child after fork() must not share its parent's env */
    int refs;
    struct vf_lmdb *next;
    char path[];
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static vf_lmdb *reg_head;

typedef struct bentry {
    size_t koff, klen, voff, vlen;
} bentry;

struct vf_lmdb_batch {
    char *arena;
    size_t used, cap;
    bentry *e;
    int n, capn;
    unsigned char *written; /* capn entries */
};

/* ------------------------------------------------------------------ errors */

/* A write that failed for want of room: LMDB reports a short write as EIO, so the file
 * system holding the environment says whether it is full. 1 when the failure is a full
 * disk (ENOSPC, EDQUOT, or EIO with less than a megabyte left), with " (… bytes free)" in
 * why when the free space is known. */
static int disk_full(const char *path, int err, char *why, size_t n)
{
    struct statvfs fs;
    why[0] = 0;
    bool known = path && statvfs(path, &fs) == 0;
    unsigned long long free_bytes = known ? (unsigned long long)fs.f_bavail * fs.f_frsize : 0;
    if (err != ENOSPC && err != EDQUOT && !(err == EIO && known && free_bytes < (1ull << 20))) return 0;
    if (err == EIO || known)
        snprintf(why, n, " (%s%sthe file system holding it has %llu bytes free)",
                 err == EIO ? "LMDB's short write, reported as " : "", err == EIO ? "Input/output error; " : "", free_bytes);
    return 1;
}

int vf_lmdb_status(vf_status *st, int mdb_rc, const char *file, int line, const char *path,
                   const char *what, const void *key, size_t klen)
{
    int code;
    if (mdb_rc > 0) /* an errno value (EIO, ENOSPC, EACCES, …) */
        code = mdb_rc == ENOMEM ? VF_ENOMEM : mdb_rc == ENOENT ? VF_ENOTFOUND : VF_EIO;
    else
        switch (mdb_rc) {
        case MDB_NOTFOUND: code = VF_ENOTFOUND; break;
        case MDB_CORRUPTED:
        case MDB_PAGE_NOTFOUND:
        case MDB_INVALID: code = VF_ECORRUPT; break;
        case MDB_VERSION_MISMATCH: code = VF_EVERSION; break;
        case MDB_MAP_FULL: code = VF_EIO; break;
        case MDB_BAD_VALSIZE: code = VF_EINVAL; break;
        default: code = VF_EEXTERNAL;
        }
    char k[160] = "";
    if (key) {
        size_t o = (size_t)snprintf(k, sizeof k, " (key \"");
        const unsigned char *p = key;
        for (size_t i = 0; i < klen && o + 8 < sizeof k; i++)
            o += (size_t)snprintf(k + o, sizeof k - o, p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' ? "%c" : "\\x%02x", p[i]);
        snprintf(k + o, sizeof k - o, "\")");
    }
    /* the call's name without its arguments: "mdb_txn_commit(txn)" -> "mdb_txn_commit" */
    int wl = (int)strcspn(what ? what : "", "(");
    char why[160];
    if (mdb_rc > 0 && disk_full(path, mdb_rc, why, sizeof why))
        return vf_status_set(st, code, file, line, "%s: %.*s: no space left on device%s%s", path ? path : "(lmdb)", wl,
                             what, why, k);
    return vf_status_set(st, code, file, line, "%s: %.*s: %s%s", path ? path : "(lmdb)", wl, what ? what : "",
                         mdb_strerror(mdb_rc), k);
}

/* ------------------------------------------------------------------ open / close */

static int mkdir_p(const char *path, vf_status *st)
{
    char *p = strdup(path);
    if (!p) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            int rc = vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: cannot create directory %s: %s",
                                   path, p, strerror(e));
            free(p);
            return rc;
        }
        *s = c;
        if (!c) break;
    }
    free(p);
    return 0;
}

static int open_env(vf_lmdb *db, const vf_lmdb_opts *o, vf_status *st);

int vf_lmdb_open(const char *path, const vf_lmdb_opts *o, vf_lmdb **out, vf_status *st)
{
    int rc = 0;
    vf_lmdb_opts def = {0};
    if (!o) o = &def;
    *out = NULL;
    size_t pl = strlen(path);
    while (pl > 1 && path[pl - 1] == '/') pl--; /* "cache/x.lmdb/" == "cache/x.lmdb" */
    vf_lmdb *db = calloc(1, sizeof *db + pl + 1);
    if (!db) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", path);
    memcpy(db->path, path, pl);
    db->readonly = o->readonly;
    db->max_map = o->max_map_size ? o->max_map_size : DEFAULT_MAX_MAP;

    struct stat sb;
    if (o->readonly) {
        char data[4096];
        snprintf(data, sizeof data, "%s/data.mdb", db->path);
        if (stat(db->path, &sb) != 0 || !S_ISDIR(sb.st_mode) || stat(data, &sb) != 0)
            VF_FAIL(st, VF_ENOTFOUND, "%s: no LMDB environment here (expected a directory with data.mdb)",
                    db->path);
    } else {
        if (stat(db->path, &sb) == 0 && !S_ISDIR(sb.st_mode))
            VF_FAIL(st, VF_EINVAL, "%s: exists and is not a directory (an LMDB cache is a directory)",
                    db->path);
        VF_TRY(mkdir_p(db->path, st));
    }
    if (stat(db->path, &sb) != 0)
        VF_FAIL(st, VF_EIO, "%s: stat: %s", db->path, strerror(errno));
    db->dev = sb.st_dev;
    db->ino = sb.st_ino;
    db->pid = getpid();
    pthread_mutex_lock(&reg_mu);
    for (vf_lmdb *e = reg_head; e; e = e->next)
        if (e->dev == db->dev && e->ino == db->ino && e->pid == db->pid) {
            if (e->readonly && !o->readonly) {
                pthread_mutex_unlock(&reg_mu);
                VF_FAIL(st, VF_EINVAL, "%s: already open read-only in this process (as %s); a writer must open it first",
                        db->path, e->path);
            }
            e->refs++; /* share: one MDB_env per file per process */
            pthread_mutex_unlock(&reg_mu);
            free(db);
            *out = e;
            return 0;
        }
    /* held across the open so two threads cannot both create an env for the file */
    rc = open_env(db, o, st);
    if (rc == 0) {
        db->refs = 1;
        db->next = reg_head;
        reg_head = db;
    }
    pthread_mutex_unlock(&reg_mu);
    if (rc) goto fail;
    *out = db;
    return 0;
fail:
    if (db->env) mdb_env_close(db->env);
    free(db);
    return rc;
}

static int open_env(vf_lmdb *db, const vf_lmdb_opts *o, vf_status *st)
{
    int rc = 0;
    MDB_txn *txn = NULL;
    VF_MDB(st, db, mdb_env_create(&db->env));
    VF_MDB(st, db, mdb_env_set_maxreaders(db->env, o->max_readers ? o->max_readers : DEFAULT_READERS));
    if (!o->readonly)
        VF_MDB(st, db, mdb_env_set_mapsize(db->env, o->map_size ? o->map_size : DEFAULT_MAP));
    /* durable default mode: no MDB_NOSYNC / MDB_WRITEMAP (REFERENCE: never both) */
    VF_MDB(st, db, mdb_env_open(db->env, db->path, MDB_NOTLS | (o->readonly ? MDB_RDONLY : 0), 0644));
    VF_MDB(st, db, mdb_reader_check(db->env, &db->stale));
    /* the file's map may be larger than asked for (grown by an earlier run): keep it */
    MDB_envinfo info;
    VF_MDB(st, db, mdb_env_info(db->env, &info));
    db->map_size = info.me_mapsize;
    VF_MDB(st, db, mdb_txn_begin(db->env, NULL, o->readonly ? MDB_RDONLY : 0, &txn));
    VF_MDB(st, db, mdb_dbi_open(txn, NULL, 0, &db->dbi));
    rc = mdb_txn_commit(txn);
    txn = NULL;
    if (rc) VF_MDB_RC(st, db, "mdb_txn_commit", rc);
    return 0;
fail:
    if (txn) mdb_txn_abort(txn);
    return rc;
}

void vf_lmdb_close(vf_lmdb *db)
{
    if (!db) return;
    pthread_mutex_lock(&reg_mu);
    bool last = --db->refs <= 0;
    if (last)
        for (vf_lmdb **pp = &reg_head; *pp; pp = &(*pp)->next)
            if (*pp == db) {
                *pp = db->next;
                break;
            }
    pthread_mutex_unlock(&reg_mu);
    if (!last) return;
    if (db->env) mdb_env_close(db->env);
    free(db);
}

const char *vf_lmdb_path(const vf_lmdb *db) { return db ? db->path : "(lmdb)"; }
MDB_env *vf_lmdb_env(vf_lmdb *db) { return db->env; }
MDB_dbi vf_lmdb_dbi(const vf_lmdb *db) { return db->dbi; }
size_t vf_lmdb_map_size(const vf_lmdb *db) { return db->map_size; }
int vf_lmdb_growths(const vf_lmdb *db) { return db->growths; }
int vf_lmdb_stale_readers(const vf_lmdb *db) { return db->stale; }

/* ------------------------------------------------------------------ reads */

static int adopt_new_size(vf_lmdb *db, vf_status *st)
{
    int rc = 0;
    MDB_envinfo info;
    VF_MDB(st, db, mdb_env_set_mapsize(db->env, 0)); /* 0: adopt the size in the file */
    VF_MDB(st, db, mdb_env_info(db->env, &info));
    db->map_size = info.me_mapsize;
fail:
    return rc;
}

int vf_lmdb_read_begin(vf_lmdb *db, MDB_txn **txn, vf_status *st)
{
    int rc = 0;
    *txn = NULL;
    for (int tries = 0;; tries++) {
        int m = mdb_txn_begin(db->env, NULL, MDB_RDONLY, txn);
        if (m == MDB_MAP_RESIZED && tries < 8) {
            VF_TRY(adopt_new_size(db, st));
            continue;
        }
        VF_MDB_RC(st, db, "mdb_txn_begin", m);
        return 0;
    }
fail:
    *txn = NULL;
    return rc;
}

int vf_lmdb_read_renew(vf_lmdb *db, MDB_txn *txn, vf_status *st)
{
    int rc = 0;
    for (int tries = 0;; tries++) {
        int m = mdb_txn_renew(txn);
        if (m == MDB_MAP_RESIZED && tries < 8) {
            VF_TRY(adopt_new_size(db, st));
            continue;
        }
        VF_MDB_RC(st, db, "mdb_txn_renew", m);
        return 0;
    }
fail:
    return rc;
}

int vf_lmdb_get(vf_lmdb *db, MDB_txn *txn, const void *key, size_t klen, MDB_val *val,
                vf_status *st)
{
    int rc = 0;
    MDB_val k = {klen, (void *)key};
    int m = mdb_get(txn, db->dbi, &k, val);
    if (m == MDB_NOTFOUND) return VF_ENOTFOUND;
    VF_MDB_KEY(st, db, "mdb_get", key, klen, m);
fail:
    return rc;
}

int vf_lmdb_exists(vf_lmdb *db, const void *key, size_t klen, bool *exists, vf_status *st)
{
    MDB_txn *txn;
    MDB_val v;
    int rc = vf_lmdb_read_begin(db, &txn, st);
    if (rc) return rc;
    rc = vf_lmdb_get(db, txn, key, klen, &v, st);
    mdb_txn_abort(txn);
    *exists = rc == 0;
    return rc == VF_ENOTFOUND ? 0 : rc;
}

int vf_lmdb_count(vf_lmdb *db, size_t *entries, vf_status *st)
{
    int rc = 0;
    MDB_txn *txn = NULL;
    MDB_stat s;
    VF_TRY(vf_lmdb_read_begin(db, &txn, st));
    VF_MDB(st, db, mdb_stat(txn, db->dbi, &s));
    *entries = s.ms_entries;
fail:
    if (txn) mdb_txn_abort(txn);
    return rc;
}

int vf_lmdb_put(vf_lmdb *db, MDB_txn *txn, const void *key, size_t klen, const void *val,
                size_t vlen, unsigned flags, vf_status *st)
{
    int rc = 0;
    MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
    int m = mdb_put(txn, db->dbi, &k, &v, flags);
    if (m == MDB_MAP_FULL) return VF_LMDB_RETRY;
    VF_MDB_KEY(st, db, "mdb_put", key, klen, m);
fail:
    return rc;
}

/* ------------------------------------------------------------------ batches */

vf_lmdb_batch *vf_lmdb_batch_new(vf_status *st)
{
    vf_lmdb_batch *b = calloc(1, sizeof *b);
    if (!b) vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "lmdb batch: out of memory");
    return b;
}

void vf_lmdb_batch_free(vf_lmdb_batch *b)
{
    if (!b) return;
    vf_free(b->arena);
    free(b->e);
    free(b->written);
    free(b);
}

int vf_lmdb_batch_count(const vf_lmdb_batch *b) { return b->n; }
size_t vf_lmdb_batch_bytes(const vf_lmdb_batch *b) { return b->used; }
size_t vf_lmdb_batch_capacity(const vf_lmdb_batch *b) { return b->cap; }
void vf_lmdb_batch_clear(vf_lmdb_batch *b) { b->n = 0; b->used = 0; }

void vf_lmdb_batch_truncate(vf_lmdb_batch *b, int n)
{
    if (n >= b->n) return;
    if (n <= 0) {
        vf_lmdb_batch_clear(b);
        return;
    }
    b->n = n;
    b->used = b->e[n - 1].voff + b->e[n - 1].vlen;
}

void vf_lmdb_batch_at(const vf_lmdb_batch *b, int i, MDB_val *key, MDB_val *val)
{
    key->mv_data = b->arena + b->e[i].koff;
    key->mv_size = b->e[i].klen;
    val->mv_data = b->arena + b->e[i].voff;
    val->mv_size = b->e[i].vlen;
}

int vf_lmdb_batch_presize(vf_lmdb_batch *b, size_t bytes, vf_status *st)
{
    if (bytes <= b->cap) return 0;
    /* vf_alloc: 64-byte aligned like the offsets inside the arena (so a reserved value
     * is aligned), and charged to the calling stage's memory account */
    char *q = vf_alloc(bytes, st);
    if (!q) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "lmdb batch: out of memory (%zu bytes)", bytes);
    if (b->used) memcpy(q, b->arena, b->used);
    vf_free(b->arena);
    b->arena = q;
    b->cap = bytes;
    return 0;
}

int vf_lmdb_batch_reserve(vf_lmdb_batch *b, const void *key, size_t klen, size_t vlen,
                          void **dst, vf_status *st)
{
    /* values start 64-byte aligned in the arena (the codec aligns payloads to that) */
    size_t koff = b->used, voff = (koff + klen + 63) & ~(size_t)63, end = voff + vlen;
    if (end < koff) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "lmdb batch: value too large");
    if (end > b->cap) {
        size_t nc = b->cap ? b->cap : 1u << 16;
        while (nc < end) nc *= 2;
        int rc = vf_lmdb_batch_presize(b, nc, st);
        if (rc) return rc;
    }
    if (b->n == b->capn) {
        int nc = b->capn ? b->capn * 2 : 64;
        bentry *e = realloc(b->e, sizeof *e * (size_t)nc);
        if (e) b->e = e;
        unsigned char *w = e ? realloc(b->written, (size_t)nc) : NULL;
        if (w) b->written = w;
        if (!e || !w) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "lmdb batch: out of memory");
        b->capn = nc;
    }
    memcpy(b->arena + koff, key, klen);
    b->e[b->n++] = (bentry){koff, klen, voff, vlen};
    b->used = end;
    *dst = b->arena + voff;
    return 0;
}

int vf_lmdb_batch_put(vf_lmdb_batch *b, const void *key, size_t klen, const void *val,
                      size_t vlen, vf_status *st)
{
    void *dst;
    int rc = vf_lmdb_batch_reserve(b, key, klen, vlen, &dst, st);
    if (rc == 0 && vlen) memcpy(dst, val, vlen);
    return rc;
}

/* Doubles the map; the caller has no txn open (LMDB's condition for set_mapsize). */
static int grow_map(vf_lmdb *db, vf_status *st)
{
    int rc = 0;
    size_t want = db->map_size * 2;
    if (want > db->max_map || want < db->map_size)
        VF_FAIL(st, VF_EIO, "%s: LMDB map full at %zu bytes and max_map_size %zu forbids growing it",
                db->path, db->map_size, db->max_map);
    VF_MDB(st, db, mdb_env_set_mapsize(db->env, want));
    MDB_envinfo info;
    VF_MDB(st, db, mdb_env_info(db->env, &info));
    db->map_size = info.me_mapsize;
    db->growths++;
fail:
    return rc;
}

int vf_lmdb_batch_commit(vf_lmdb *db, vf_lmdb_batch *b, vf_lmdb_txn_fn fn, void *user,
                         int *nwritten, int *nexisting, vf_status *st)
{
    int rc = 0, nw = 0;
    MDB_txn *txn = NULL;
    if (db->readonly)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: opened read-only", db->path);
    for (;;) {
        int m = mdb_txn_begin(db->env, NULL, 0, &txn);
        if (m == MDB_MAP_RESIZED) { /* another process grew it (not ours: one writer) */
            txn = NULL;
            VF_TRY(adopt_new_size(db, st));
            continue;
        }
        VF_MDB_RC(st, db, "mdb_txn_begin", m);
        bool full = false;
        nw = 0;
        for (int i = 0; i < b->n && !full; i++) {
            MDB_val k, v;
            vf_lmdb_batch_at(b, i, &k, &v);
            m = mdb_put(txn, db->dbi, &k, &v, MDB_NOOVERWRITE);
            if (m == MDB_KEYEXIST) { b->written[i] = 0; continue; }
            if (m == MDB_MAP_FULL) { full = true; break; }
            VF_MDB_KEY(st, db, "mdb_put", k.mv_data, k.mv_size, m);
            b->written[i] = 1;
            nw++;
        }
        if (!full && fn) {
            rc = fn(user, db, txn, b, b->written, st);
            if (rc == VF_LMDB_RETRY) full = true;
            else if (rc < 0) goto fail;
            rc = 0;
        }
        if (!full) {
            m = mdb_txn_commit(txn); /* frees txn whatever it returns */
            txn = NULL;
            if (m == MDB_SUCCESS) break;
            if (m != MDB_MAP_FULL) VF_MDB_RC(st, db, "mdb_txn_commit", m);
        } else {
            mdb_txn_abort(txn);
            txn = NULL;
        }
        VF_TRY(grow_map(db, st));
    }
    if (nwritten) *nwritten = nw;
    if (nexisting) *nexisting = b->n - nw;
    vf_lmdb_batch_clear(b);
    return 0;
fail:
    if (txn) mdb_txn_abort(txn);
    return rc;
}
