/* latent_reader.c — stage kind `latent_reader`: batches of latents out of the LMDB cache
 * in a deterministic, sharded, resumable order (the order, batching and cursor rules
 * are in latent_reader.h).
 *
 * The key list (32 bytes per entry) and one epoch's permutation (4 bytes per entry)
 * stay in memory; records are read one at a time inside a short read txn per batch and
 * copied into the batch tensors, so memory is the key list plus one batch.
 *
 * Text embeddings: with text_dim = D > 0 (a model conditioned on embeddings) the cache
 * must hold them ("text_dim" D in its summary, every entry referencing one), and each
 * batch also carries "text_emb" f32 (B, text_len, D): the entry's bf16 record widened to
 * f32 (exact), rows at and past its L zero, as Wan's pipeline pads the umT5 output;
 * "text_len" then holds each L. A cache without embeddings or of another width, an
 * embedding longer than text_len, or entries without one are refused by `ports` (so at
 * check/plan time) and at open (exit 2), before any batch. With text_dim = 0 the reader
 * serves caption bytes only, whatever the cache holds.
 *
 * Image-to-video: `cond` is the conditioning kind the model needs (formats/cache_format.h:
 * text, concat, concat+clip); a cache of another kind is refused at check/plan time and
 * at open (exit 2, naming both). With concat each batch also carries "y" f32 (B, z, T',
 * h, w), the entries' first-frame latents; with concat+clip also "clip_emb" f32 (B,
 * image_len, image_dim), the entries' CLIP image features widened from bf16 (a cache
 * whose features have another shape is refused the same way). With first_frame (Wan 2.2
 * TI2V) the batch carries no more tensors, and metadata "first_frame" = 1: the latents'
 * frame 0 is the image's, which training keeps clean.
 *
 * Calls go one way in stages/reader/: latent_reader.c → latent_buckets.c →
 * latent_batch.c. This file is the top: the stage, opening and closing a reader, the
 * plain order; a bucketed cache's order and the plan's view of its buckets
 * (plan_buckets opens a reader) go through latent_buckets.c, every batch through
 * latent_batch.c.
 */
#include "stages/reader/latent_reader_internal.h"
#include "formats/lr_cursor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* struct vf_latent_reader: stages/reader/latent_reader_internal.h */

/* ------------------------------------------------------------------ order */

static void make_perm(vf_latent_reader *r, uint64_t epoch)
{
    vf_lr_shuffle(r->perm, r->n, r->o.seed, epoch, 0);
    r->perm_epoch = epoch;
    r->perm_valid = true;
}

int64_t vf_latent_reader_index_at(vf_latent_reader *r, uint64_t epoch, int64_t pos)
{
    if (!r->perm_valid || r->perm_epoch != epoch) make_perm(r, epoch);
    return r->perm[r->o.shard + pos * r->o.nshards];
}

int64_t vf_latent_reader_entries(const vf_latent_reader *r) { return r->n; }
int64_t vf_latent_reader_epoch_len(const vf_latent_reader *r) { return r->L; }
int64_t vf_latent_reader_bad(const vf_latent_reader *r) { return r->bad; }
int64_t vf_latent_reader_cut(const vf_latent_reader *r, int64_t *seen)
{
    *seen = r->nseen;
    return r->ncut;
}
const char *vf_latent_reader_key(const vf_latent_reader *r, int64_t i) { return r->keys + 32 * i; }
void vf_latent_reader_shape(const vf_latent_reader *r, int64_t shape[4]) { memcpy(shape, r->shape, sizeof r->shape); }

void vf_latent_reader_set_on_bad(vf_latent_reader *r, void (*fn)(void *, const char *), void *user)
{
    r->o.on_bad = fn;
    r->o.user = user;
}

/* ------------------------------------------------------------------ cursor */

static void cursor_text(const vf_latent_reader *r, char *buf, size_t n)
{
    const vf_lr_cursor c = {1, r->epoch, r->pos, r->n, r->o.seed, r->o.shard, r->o.nshards, 0};
    vf_lr_cursor_print(&c, buf, n);
}

/* The cursor was taken by a reader of this cache (its entry count) with this seed and
 * shard: VF_EBADINPUT / VF_EUSAGE naming the cache otherwise. */
int vf_lr_cursor_matches(const vf_latent_reader *r, const vf_lr_cursor *cp, vf_status *st)
{
    int rc = 0;
    const vf_lr_cursor c = *cp;
    if (c.n != r->n)
        VF_FAIL(st, VF_EBADINPUT, "%s: cursor was taken over %lld entries, the cache now has %lld: "
                "the order would differ, so the run cannot resume exactly", r->path, (long long)c.n, (long long)r->n);
    if (c.seed != r->o.seed || c.shard != r->o.shard || c.nshards != r->o.nshards)
        VF_FAIL(st, VF_EUSAGE, "%s: cursor is for seed %llu shard %d/%d; this reader has seed %llu shard %d/%d",
                r->path, (unsigned long long)c.seed, c.shard, c.nshards, (unsigned long long)r->o.seed, r->o.shard,
                r->o.nshards);
fail:
    return rc;
}

static int cursor_parse(vf_latent_reader *r, const char *text, vf_status *st)
{
    int rc = 0;
    vf_lr_cursor c;
    if (vf_lr_cursor_parse(text, 1, &c))
        VF_FAIL(st, VF_EUSAGE, "%s: cursor \"%s\" is not a latent_reader cursor (" VF_LR_CURSOR_V1 ")", r->path, text);
    VF_TRY(vf_lr_cursor_matches(r, &c, st));
    if (c.pos > r->L)
        VF_FAIL(st, VF_EUSAGE, "%s: cursor position %lld is past the epoch length %lld", r->path, (long long)c.pos,
                (long long)r->L);
    r->epoch = c.epoch;
    r->pos = c.pos;
fail:
    return rc;
}

/* ------------------------------------------------------------------ open */

static int parse_shape(const char *s, int64_t shape[4])
{
    long long a, b, c, d;
    int end = -1;
    if (sscanf(s, "(%lld,%lld,%lld,%lld)%n", &a, &b, &c, &d, &end) != 4 || end < 0 || s[end]) return -1;
    if (a < 1 || b < 1 || c < 1 || d < 1) return -1;
    shape[0] = a, shape[1] = b, shape[2] = c, shape[3] = d;
    return 0;
}

/* Shape from the summary, or from the first entry when there is no summary. */
static int cache_shape(vf_lmdb *db, MDB_txn *txn, int64_t shape[4], vf_status *st)
{
    int rc = 0;
    vf_json *meta = NULL;
    MDB_cursor *cur = NULL;
    vf_item *it = NULL;
    VF_TRY(vf_cache_meta_read(db, txn, &meta, st));
    if (meta) {
        const vf_json *shapes = vf_json_get(meta, "shapes");
        int ns = vf_json_len(shapes);
        if (ns == 0) VF_FAIL(st, VF_EBADINPUT, "%s: the cache is empty", vf_lmdb_path(db));
        if (ns > 1) {
            char list[512] = "";
            size_t o = 0;
            for (int i = 0; i < ns && o < sizeof list - 64; i++)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s ×%lld", i ? ", " : "", vf_json_key_at(shapes, i),
                                      (long long)vf_json_as_num(vf_json_at(shapes, i)));
            VF_FAIL(st, VF_EBADINPUT,
                    "%s: the cache holds latents of %d shapes (%s); latent_reader batches one shape: "
                    "write one cache per resolution/length", vf_lmdb_path(db), ns, list);
        }
        if (parse_shape(vf_json_key_at(shapes, 0), shape) != 0)
            VF_FAIL(st, VF_ECORRUPT, "%s: summary shape \"%s\" is not (z,T,h,w)", vf_lmdb_path(db), vf_json_key_at(shapes, 0));
        goto fail; /* done, rc == 0 */
    }
    MDB_val k, v;
    VF_MDB(st, db, mdb_cursor_open(txn, vf_lmdb_dbi(db), &cur));
    int m = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    while (m == 0 && !vf_cache_is_entry_key(k.mv_data, k.mv_size)) m = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    if (m == MDB_NOTFOUND) VF_FAIL(st, VF_EBADINPUT, "%s: the cache is empty", vf_lmdb_path(db));
    VF_MDB_RC(st, db, "mdb_cursor_get", m);
    VF_TRY(vf_cache_record_decode(vf_lmdb_path(db), k.mv_data, k.mv_size, v.mv_data, v.mv_size, &it, st));
    memcpy(shape, vf_item_get(it, VF_CACHE_TENSOR)->shape, 4 * sizeof(int64_t));
fail:
    if (cur) mdb_cursor_close(cur);
    vf_item_free(it);
    vf_json_free(meta);
    return rc;
}

/* Text embedding width and longest length the summary records (0, 0 = none), and
 * whether every entry references one. */
static int cache_text(vf_lmdb *db, MDB_txn *txn, int64_t *dim, int64_t *max_len, int64_t *missing,
                      vf_status *st)
{
    vf_json *meta = NULL;
    *dim = *max_len = *missing = 0;
    int rc = vf_cache_meta_read(db, txn, &meta, st);
    if (rc || !meta) return rc;
    *dim = vf_json_get_int(meta, "text_dim", 0);
    *max_len = vf_json_get_int(meta, "text_max_len", 0);
    if (*dim) *missing = vf_json_get_int(meta, "entries", 0) - vf_json_get_int(meta, "text_entries", 0);
    vf_json_free(meta);
    return 0;
}

/* The reader's refusals of a cache's text embeddings (want_dim: the param; 0 = any). */
static int check_text(const char *path, int64_t dim, int64_t max_len, int64_t missing, int64_t want_dim,
                      int64_t text_len, vf_status *st)
{
    int rc = 0;
    if (want_dim > 0 && dim == 0)
        VF_FAIL(st, VF_EBADINPUT, "%s: the cache holds no text embeddings (tensor \"text_emb\"); text_dim = %lld asks for "
                "them: precompute with a manifest column text_emb (docs/PRECOMPUTE.md)", path, (long long)want_dim);
    if (!dim) return 0;
    if (want_dim > 0 && want_dim != dim)
        VF_FAIL(st, VF_EBADINPUT, "%s: tensor \"text_emb\" has width %lld in the cache; the model takes text_dim %lld",
                path, (long long)dim, (long long)want_dim);
    if (max_len > text_len)
        VF_FAIL(st, VF_EBADINPUT, "%s: tensor \"text_emb\": the cache holds embeddings of %lld rows, longer than "
                "text_len %lld", path, (long long)max_len, (long long)text_len);
    if (missing)
        VF_FAIL(st, VF_EBADINPUT, "%s: %lld entries have no text embedding (tensor \"text_emb\") in a cache of "
                "embeddings: write such clips to a cache of their own", path, (long long)missing);
fail:
    return rc;
}

static int text_info(const char *path, int64_t *dim, int64_t *max_len, int64_t *missing, vf_status *st)
{
    int rc = 0;
    vf_lmdb *db = NULL;
    MDB_txn *txn = NULL;
    vf_lmdb_opts ro = {.readonly = true};
    *dim = *max_len = *missing = 0;
    VF_TRY(vf_lmdb_open(path, &ro, &db, st));
    VF_TRY(vf_lmdb_read_begin(db, &txn, st));
    VF_TRY(cache_text(db, txn, dim, max_len, missing, st));
fail:
    if (txn) mdb_txn_abort(txn);
    vf_lmdb_close(db);
    return rc;
}

int vf_latent_cache_text_info(const char *path, int64_t *dim, int64_t *max_len, vf_status *st)
{
    int64_t missing;
    return text_info(path, dim, max_len, &missing, st);
}

int vf_latent_cache_probe(const char *path, int64_t shape[4], int64_t *entries, vf_status *st)
{
    int rc = 0;
    vf_lmdb *db = NULL;
    MDB_txn *txn = NULL;
    MDB_stat ms;
    vf_lmdb_opts ro = {.readonly = true};
    VF_TRY(vf_lmdb_open(path, &ro, &db, st));
    VF_TRY(vf_lmdb_read_begin(db, &txn, st));
    VF_TRY(cache_shape(db, txn, shape, st));
    VF_MDB(st, db, mdb_stat(txn, vf_lmdb_dbi(db), &ms));
    *entries = (int64_t)ms.ms_entries;
fail:
    if (txn) mdb_txn_abort(txn);
    vf_lmdb_close(db);
    return rc;
}

static int list_keys(vf_latent_reader *r, vf_status *st)
{
    int rc = 0;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    MDB_stat ms;
    vf_lmdb *db = r->db;
    VF_MDB(st, db, mdb_stat(r->txn, vf_lmdb_dbi(db), &ms));
    r->keys = vf_alloc(32 * (ms.ms_entries ? ms.ms_entries : 1), st);
    if (!r->keys) VF_FAIL(st, VF_ENOMEM, "%s: out of memory for %zu keys", r->path, ms.ms_entries);
    VF_MDB(st, db, mdb_cursor_open(r->txn, vf_lmdb_dbi(db), &cur));
    for (int m = mdb_cursor_get(cur, &k, &v, MDB_FIRST); m != MDB_NOTFOUND; m = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        VF_MDB_RC(st, db, "mdb_cursor_get", m);
        if (!vf_cache_is_entry_key(k.mv_data, k.mv_size)) continue;
        if ((size_t)r->n >= ms.ms_entries) break; /* cannot happen within one txn */
        memcpy(r->keys + 32 * r->n++, k.mv_data, 32);
    }
fail:
    if (cur) mdb_cursor_close(cur);
    return rc;
}

void vf_latent_reader_close(vf_latent_reader *r)
{
    if (!r) return;
    if (r->txn) mdb_txn_abort(r->txn);
    vf_lmdb_close(r->db);
    vf_free(r->keys);
    vf_free(r->perm);
    vf_free(r->seen);
    vf_lr_buckets_free(r);
    free(r->path);
    free(r);
}

int vf_latent_reader_open(const vf_latent_reader_opts *o, vf_latent_reader **out,
                          vf_status *st)
{
    int rc = 0;
    *out = NULL;
    vf_latent_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(o->path))) {
        free(r);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", o->path);
    }
    r->o = *o;
    r->o.path = r->path;
    r->o.cursor = NULL;
    if (o->batch < 1 || o->nshards < 1 || o->shard < 0 || o->shard >= o->nshards || o->text_len < 1)
        VF_FAIL(st, VF_EUSAGE, "%s: bad reader options (batch %d, shard %d/%d, text_len %d)", o->path, o->batch,
                o->shard, o->nshards, o->text_len);
    vf_lmdb_opts ro = {.readonly = true};
    VF_TRY(vf_lmdb_open(o->path, &ro, &r->db, st));
    VF_TRY(vf_lmdb_read_begin(r->db, &r->txn, st));
    bool bucketed;
    VF_TRY(vf_lr_is_bucketed(r, &bucketed, st));
    if (!bucketed) VF_TRY(cache_shape(r->db, r->txn, r->shape, st));
    r->per = r->shape[0] * r->shape[1] * r->shape[2] * r->shape[3];
    int64_t tmax, tmissing;
    VF_TRY(vf_lr_check_cond(r->path, r->db, r->txn, o->cond, o->image_len, o->image_dim, st));
    if (o->text_dim > 0) { /* the model takes embeddings: the cache's must fit it */
        VF_TRY(cache_text(r->db, r->txn, &r->text_dim, &tmax, &tmissing, st));
        VF_TRY(check_text(r->path, r->text_dim, tmax, tmissing, o->text_dim, o->text_len, st));
    }
    VF_TRY(list_keys(r, st));
    if (r->n == 0) VF_FAIL(st, VF_EBADINPUT, "%s: the cache is empty", r->path);
    if (!(r->seen = vf_alloc((size_t)(r->n + 7) / 8, st)))
        VF_FAIL(st, VF_ENOMEM, "%s: out of memory for the entry bitmap", r->path);
    memset(r->seen, 0, (size_t)(r->n + 7) / 8);
    if (bucketed) {
        VF_TRY(vf_lr_buckets_open(r, st));
        r->o.buckets = NULL, r->o.only = r->o.shrink = NULL; /* borrowed for the open only */
        mdb_txn_reset(r->txn);
        if (o->cursor && o->cursor[0]) VF_TRY(vf_lr_bucket_cursor_parse(r, o->cursor, st));
        r->epoch_from_start = r->pos == 0;
        *out = r;
        return 0;
    }
    mdb_txn_reset(r->txn);
    if (r->n > UINT32_MAX) VF_FAIL(st, VF_EBADINPUT, "%s: %lld entries; at most 2^32-1 are supported", r->path, (long long)r->n);
    r->L = r->n / o->nshards;
    if (r->L == 0)
        VF_FAIL(st, VF_EUSAGE, "%s: %lld entries cannot feed %d data-parallel ranks", r->path, (long long)r->n, o->nshards);
    if (o->drop_last && r->L < o->batch)
        VF_FAIL(st, VF_EUSAGE, "%s: %lld entries per rank and epoch make no full batch of %d (drop_last)", r->path,
                (long long)r->L, o->batch);
    if (!(r->perm = vf_alloc(sizeof(uint32_t) * (size_t)r->n, st)))
        VF_FAIL(st, VF_ENOMEM, "%s: out of memory for the permutation", r->path);
    if (o->cursor && o->cursor[0]) VF_TRY(cursor_parse(r, o->cursor, st));
    r->epoch_from_start = r->pos == 0;
    *out = r;
    return 0;
fail:
    vf_latent_reader_close(r);
    return rc;
}

/* ------------------------------------------------------------------ batches */

int vf_latent_reader_next(vf_latent_reader *r, vf_item **out, vf_status *st)
{
    int rc = 0;
    const int B = r->o.batch;
    vf_lr_batch b = {0};
    bool txn_live = false;
    *out = NULL;
    if (r->nbk) return vf_lr_next_bucketed(r, out, st);
    for (;;) {
        if (r->o.epochs > 0 && r->epoch >= (uint64_t)r->o.epochs) {
            rc = VF_EOS;
            goto fail;
        }
        if (r->pos >= r->L || (r->o.drop_last && r->L - r->pos < B)) {
            VF_TRY(vf_lr_next_epoch(r, st));
            continue;
        }
        if (!b.lat) VF_TRY(vf_lr_batch_new(r, B, &b, st));
        VF_TRY(vf_lmdb_read_renew(r->db, r->txn, st));
        txn_live = true;
        int64_t first = r->pos;
        while (b.got < B && r->pos < r->L) {
            rc = vf_lr_batch_add(r, &b, vf_latent_reader_index_at(r, r->epoch, r->pos), st);
            if (rc < 0) goto fail;
            r->pos++;
        }
        rc = 0;
        mdb_txn_reset(r->txn);
        txn_live = false;
        r->good_in_epoch += b.got;
        if (b.got == 0 || (b.got < B && r->o.drop_last)) {
            memset(b.text->data, 0, vf_tensor_nbytes(b.text));
            b.got = 0, b.keys[0] = 0;
            continue; /* epoch end reached with a partial batch: next epoch */
        }
        char id[64], cur[VF_LR_CURSOR_MAX];
        snprintf(id, sizeof id, "e%llu.b%lld", (unsigned long long)r->epoch, (long long)(first / B));
        cursor_text(r, cur, sizeof cur);
        return vf_lr_batch_item(r, &b, id, (double)(first / B), cur, out, st);
    }
fail:
    if (txn_live) mdb_txn_reset(r->txn);
    vf_lr_batch_free(&b);
    return rc;
}

/* ------------------------------------------------------------------ stage */

static const vf_param_spec reader_params[] = {
    {"path", VF_P_STR, NULL, VF_ANY, "LMDB latent cache directory (written by latent_cache)", NULL, NULL},
    {"batch", VF_P_INT, "4", VF_RANGE(1, 65536), "samples per batch item", NULL, NULL},
    {"seed", VF_P_INT, "0", VF_RANGE(0, 9.007199254740991e15), "shuffle seed (the order of epoch e is a function of seed, e)", NULL, NULL},
    {"epochs", VF_P_INT, "0", VF_RANGE(0, 1e15), "epochs to read; 0 = until the consumer stops", NULL, NULL},
    {"shard", VF_P_INT, "0", VF_RANGE(0, 65535), "data-parallel rank of this reader", NULL, NULL},
    {"nshards", VF_P_INT, "1", VF_RANGE(1, 65536), "data-parallel ranks", NULL, NULL},
    {"drop_last", VF_P_BOOL, "true", VF_ANY, "drop each epoch's last partial batch", NULL, NULL},
    {"text_len", VF_P_INT, "64", VF_RANGE(1, 65536),
     "caption bytes kept as i32 tokens; rows of \"text_emb\" (embeddings zero-padded to it)", NULL, NULL},
    {"text_dim", VF_P_INT, "0", VF_RANGE(0, 1 << 20),
     "width of the text embeddings the model takes: emit \"text_emb\" (the cache must hold them); 0 = caption bytes only", NULL, NULL},
    {"cond", VF_P_STR, "\"text\"", VF_ANY,
     "conditioning the model needs: text; concat (image-to-video: emit \"y\", the first-frame latents); the cache "
     "must be of this kind; concat+clip (also \"clip_emb\", CLIP image features of image_len x image_dim); "
     "first_frame (Wan 2.2 TI2V: the latents' frame 0 is the image's)",
     "text|concat|concat+clip|first_frame", NULL},
    {"image_dim", VF_P_INT, "1280", VF_RANGE(1, 1 << 20), "cond = concat+clip: width of the CLIP image features",
     NULL, NULL},
    {"image_len", VF_P_INT, "257", VF_RANGE(1, 65536), "cond = concat+clip: rows of the CLIP image features", NULL,
     NULL},
    {"cursor", VF_P_STR, "\"\"", VF_ANY, "resume position (a batch's \"cursor\" metadata); empty = start", NULL, NULL},
    {"on_bad", VF_P_STR, "\"fail\"", VF_ANY, "damaged record: fail the run, or skip and count it", "fail|skip", NULL},
    {"latent_shape", VF_P_LIST_INT, "[]", VF_RANGE(1, 1 << 20),
     "(z, T', h, w) for planning before the cache exists; ignored when it exists (with buckets: z)", NULL, NULL},
    {"buckets", VF_P_LIST_TABLE, "[]", VF_ANY,
     "{ {w = W, h = H, frames = {17, 33}, batch = {4, 2} (or one number)}, … }: the buckets of a bucketed "
     "cache (its summary must agree), to plan before the cache exists; [] = as the cache has them", NULL, NULL},
    {"admission", VF_P_STR, "\"refuse\"", VF_ANY,
     "a bucket the memory plan says does not fit: refuse the run (exit 2), or shrink its batch to the largest "
     "that fits (drop it when none does), one line per bucket", "refuse|shrink", NULL},
    {"shrink", VF_P_LIST_STR, "[]", VF_ANY,
     "\"WxHxF:B\" admitted batch of a bucket, 0 = leave it out (set by the planner with admission = \"shrink\")",
     NULL, NULL},
    {"only", VF_P_STR, "\"\"", VF_ANY, "read only this bucket (\"WxHxF\"), e.g. to measure it alone; \"\" = all",
     NULL, NULL},
    {0},
};

/* The buckets a reader with params p reads (after `only`): the cache's when it exists
 * (opened and checked against the declared list), else the declared list's at
 * latent (z, (F-1)/4+1, H/8, W/8), z = latent_shape[0] or 16. *n = 0: not bucketed.
 * out holds VF_LR_MAX_BUCKETS. */
static int plan_buckets(const vf_params *p, vf_lr_plan_bucket *out, int *n, vf_status *st)
{
    int rc = 0, nd = 0;
    vf_latent_bucket_decl *decl = NULL;
    vf_latent_reader *r = NULL;
    char *shrink = NULL;
    *n = 0;
    VF_TRY(vf_lr_decl_from_params(p, &decl, &nd, st));
    if (nd == 0) { /* a cache that is not bucketed keeps the single-shape rules */
        vf_latent_reader tmp = {0};
        vf_lmdb_opts ro = {.readonly = true};
        bool yes = false;
        vf_status probe;
        vf_status_clear(&probe);
        tmp.path = (char *)vf_param_str(p, "path");
        if (vf_lmdb_open(tmp.path, &ro, &tmp.db, &probe) == 0 && vf_lmdb_read_begin(tmp.db, &tmp.txn, &probe) == 0)
            vf_lr_is_bucketed(&tmp, &yes, &probe);
        if (tmp.txn) mdb_txn_abort(tmp.txn);
        vf_lmdb_close(tmp.db);
        if (!yes) goto fail;
    }
    vf_latent_reader_opts o = {
        .path = vf_param_str(p, "path"),
        .batch = (int)vf_param_int(p, "batch"),
        .nshards = (int)vf_param_int(p, "nshards"),
        .drop_last = vf_param_bool(p, "drop_last"),
        .text_len = (int)vf_param_int(p, "text_len"),
        .skip_bad = true,
        .buckets = decl,
        .nbuckets = nd,
        .only = vf_param_str(p, "only"),
    };
    shrink = vf_lr_shrink_text(p);
    o.shrink = shrink;
    vf_status probe;
    vf_status_clear(&probe);
    rc = vf_latent_reader_open(&o, &r, &probe);
    if (rc == 0) {
        for (int b = 0; b < r->nbk; b++) {
            const vf_lr_bucket *x = &r->bk[b];
            if (x->nb == 0) continue; /* never read (left out by only, or no full batch) */
            vf_lr_plan_bucket *y = &out[(*n)++];
            snprintf(y->name, sizeof y->name, "%s", x->name);
            y->batch = x->batch;
            memcpy(y->shape, x->shape, sizeof y->shape);
            y->entries = x->n;
        }
        goto fail; /* done */
    }
    if (rc != VF_ENOTFOUND) { /* the cache is there and refuses to be read */
        if (st) *st = probe;
        goto fail;
    }
    rc = 0;
    if (nd == 0) goto fail; /* no cache, no declared buckets: the single-shape rules decide */
    /* the declared list as the buckets of a reader without a cache, admitted as an open
     * cache's are: shrink's batches and left-out buckets, then `only` */
    int64_t z = vf_param_len(p, "latent_shape") == 4 ? vf_param_int_at(p, "latent_shape", 0) : 16;
    vf_latent_reader d = {.o = o, .path = (char *)"latent_reader", .nbk = nd};
    if (!(d.bk = calloc((size_t)nd, sizeof *d.bk)))
        VF_FAIL(st, VF_ENOMEM, "latent_reader: out of memory for the buckets");
    for (int i = 0; i < nd; i++) {
        vf_lr_bucket *x = &d.bk[i];
        snprintf(x->name, sizeof x->name, "%dx%dx%d", decl[i].w, decl[i].h, decl[i].frames);
        x->w = decl[i].w, x->h = decl[i].h, x->frames = decl[i].frames, x->batch = decl[i].batch;
        x->shape[0] = z, x->shape[1] = (decl[i].frames - 1) / 4 + 1, x->shape[2] = decl[i].h / 8;
        x->shape[3] = decl[i].w / 8;
    }
    rc = vf_lr_admit(&d, "the declared list", st);
    for (int i = 0; rc == 0 && i < nd; i++) {
        if (d.bk[i].left_out) continue;
        vf_lr_plan_bucket *y = &out[(*n)++];
        snprintf(y->name, sizeof y->name, "%s", d.bk[i].name);
        y->batch = d.bk[i].batch;
        memcpy(y->shape, d.bk[i].shape, sizeof y->shape);
        y->entries = 0;
    }
    if (rc == 0 && *n == 0) rc = vf_lr_none_admitted(&d, st); /* only shrink leaves out what `only` keeps */
    free(d.bk);
fail:
    vf_latent_reader_close(r);
    free(decl);
    free(shrink);
    return rc;
}

/* Latent shape and entry count for ports/memory: the cache's, else the latent_shape param. */
static int plan_shape(const vf_params *p, int64_t shape[4], int64_t *entries, int64_t *text_dim, vf_status *st)
{
    vf_status probe;
    vf_status_clear(&probe);
    int64_t dim, tmax, missing, want = vf_param_int(p, "text_dim");
    const char *path = vf_param_str(p, "path");
    *text_dim = want;
    int rc = vf_latent_cache_probe(path, shape, entries, &probe);
    /* a cache that exists: its embeddings must fit the model now, at check/plan time */
    if (rc == 0 && want > 0) rc = text_info(path, &dim, &tmax, &missing, &probe);
    if (rc == 0 && want > 0) rc = check_text(path, dim, tmax, missing, want, vf_param_int(p, "text_len"), &probe);
    vf_cache_cond want_cond = VF_CACHE_COND_TEXT;
    vf_cache_cond_parse(vf_param_str(p, "cond"), &want_cond);
    if (rc == 0)
        rc = vf_lr_cache_check_cond(path, want_cond, vf_param_int(p, "image_len"), vf_param_int(p, "image_dim"), &probe);
    if (rc == 0) return 0;
    *entries = 0;
    if (rc == VF_ENOTFOUND && vf_param_len(p, "latent_shape") == 4) {
        for (int i = 0; i < 4; i++) shape[i] = vf_param_int_at(p, "latent_shape", i);
        return 0;
    }
    if (rc != VF_ENOTFOUND && st) *st = probe;
    if (rc == VF_ENOTFOUND)
        vf_status_set(st, rc, __FILE__, __LINE__, "latent_reader: %s: no latent cache there: run the precompute "
                      "first (vflow run pipelines/precompute_latents.lua --set cache=%s ...), or give latent_shape = "
                      "{z, T, h, w} (or buckets) to plan before it exists", path, path);
    return rc;
}

/* `vflow run`: the cache is there (planning may go without it, training not). */
static int reader_preflight(const vf_params *p, vf_status *st)
{
    int64_t shape[4], entries;
    vf_status probe;
    vf_status_clear(&probe);
    const char *path = vf_param_str(p, "path");
    int rc = vf_latent_cache_probe(path, shape, &entries, &probe);
    if (rc == VF_ENOTFOUND)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "latent_reader: %s: no latent cache there: run the "
                             "precompute first (vflow run pipelines/precompute_latents.lua --set cache=%s ...)", path,
                             path);
    return 0; /* a cache that is there but damaged: the reader's own errors name it */
}

/* What the plan sizes for: the batch and latent shape bounding every bucket (the
 * largest batch, each latent dim's largest), the largest batch's latent floats, and the
 * bytes of its "geometries"; the plain batch and shape without buckets. */
typedef struct plan_geo {
    int64_t B, shape[4], entries, text_dim;
    int64_t most;      /* floats of the largest batch's latents */
    int64_t per_most;  /* floats of the largest latent */
    int64_t meta;      /* bucket metadata bytes */
    int nbk;
    vf_lr_plan_bucket *bk; /* caller frees */
} plan_geo;

static int plan_geometry(const vf_params *p, plan_geo *g, vf_status *st)
{
    vf_lr_plan_bucket *bk = calloc(VF_LR_MAX_BUCKETS, sizeof *bk);
    if (!bk) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "latent_reader: out of memory");
    memset(g, 0, sizeof *g);
    int rc = plan_buckets(p, bk, &g->nbk, st);
    if (rc == 0) rc = plan_shape(p, g->shape, &g->entries, &g->text_dim, g->nbk ? NULL : st);
    if (g->nbk) { /* plan_shape refuses several shapes; the buckets decide */
        rc = 0;
        memset(g->shape, 0, sizeof g->shape);
        g->entries = 0;
        g->text_dim = vf_param_int(p, "text_dim");
        for (int b = 0; b < g->nbk; b++) {
            int64_t per = bk[b].shape[0] * bk[b].shape[1] * bk[b].shape[2] * bk[b].shape[3];
            if (bk[b].batch > g->B) g->B = bk[b].batch;
            for (int i = 0; i < 4; i++)
                if (bk[b].shape[i] > g->shape[i]) g->shape[i] = bk[b].shape[i];
            if (bk[b].batch * per > g->most) g->most = bk[b].batch * per;
            if (per > g->per_most) g->per_most = per;
            g->entries += bk[b].entries;
            g->meta += (int64_t)strlen(bk[b].name) + 5 * 24 + 1;
        }
        g->meta += VF_LR_BUCKET_NAME + 32;
    } else if (rc == 0) {
        g->B = vf_param_int(p, "batch");
        g->per_most = g->shape[0] * g->shape[1] * g->shape[2] * g->shape[3];
        g->most = g->B * g->per_most;
    }
    if (rc == 0 && g->nbk) g->bk = bk;
    else free(bk);
    return rc;
}

static int reader_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out,
                        vf_status *st)
{
    plan_geo g;
    int rc = plan_geometry(p, &g, st);
    if (rc) return rc;
    int64_t *s = g.shape, D = g.text_dim;
    int64_t B = g.B, TL = vf_param_int(p, "text_len");
    static const char *const lsym[5] = {"B", "", "", "", ""}, *const tsym[2] = {"B", ""};
    int64_t ld[5] = {B, s[0], s[1], s[2], s[3]}, td[2] = {B, TL};
    vf_port_spec *o = vf_port_add(out, "out", VF_PORT_OUT, true);
    vf_port_tensor(o, "latent", VF_DTYPE_F32, 5, ld, lsym);
    vf_port_tensor(o, "text", VF_DTYPE_I32, 2, td, tsym);
    vf_port_tensor(o, "text_len", VF_DTYPE_I32, 1, td, tsym);
    if (!strncmp(vf_param_str(p, "cond"), "concat", 6)) vf_port_tensor(o, VF_CACHE_Y_TENSOR, VF_DTYPE_F32, 5, ld, lsym);
    if (!strcmp(vf_param_str(p, "cond"), "concat+clip"))
        vf_port_tensor(o, VF_CACHE_CLIP_TENSOR, VF_DTYPE_F32, 3,
                       (int64_t[3]){B, vf_param_int(p, "image_len"), vf_param_int(p, "image_dim")}, lsym);
    if (D) {
        static const char *const esym[3] = {"B", "", ""};
        vf_port_tensor(o, VF_CACHE_TEXT_TENSOR, VF_DTYPE_F32, 3, (int64_t[3]){B, TL, D}, esym);
    }
    o->meta_bytes = 33 * B + 256 + g.meta; /* "keys", "cursor", epoch, index; "bucket", "geometries" */
    if (g.nbk && vf_lr_geo_text(g.bk, g.nbk, o->geometries, sizeof o->geometries) != 0) {
        free(g.bk);
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "latent_reader: %d buckets are too many to plan (at most %d characters of geometry)",
                             g.nbk, VF_PORT_GEO_MAX - 1);
    }
    free(g.bk);
    return 0;
}

static int reader_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out,
                         vf_status *st)
{
    plan_geo g;
    int rc = plan_geometry(p, &g, st);
    if (rc) return rc;
    free(g.bk);
    int64_t n = g.entries, D = g.text_dim;
    vf_device cpu = {VF_DEV_CPU, 0};
    int64_t B = g.B, per = g.per_most * 4;
    vf_mem_plan_add(out, cpu, VF_MEM_OTHER, "key list + permutation", n * (32 + 4) + (n + 7) / 8);
    if (g.nbk) /* entry lists and permutations of the buckets, the epoch's batch schedule */
        vf_mem_plan_add(out, cpu, VF_MEM_OTHER, "bucket lists + batch schedule", n * 16 + 8 * (n + g.nbk));
    vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "batch being filled", 4 * g.most + B * (4 * vf_param_int(p, "text_len") + 4) + 33 * B);
    bool y = !strncmp(vf_param_str(p, "cond"), "concat", 6); /* the batch's first-frame latents, and a record's */
    vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "one decoded record", (y ? 3 : 2) * per + 4096);
    if (y) vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "batch first-frame latents", 4 * g.most);
    if (!strcmp(vf_param_str(p, "cond"), "concat+clip")) /* the batch's f32 features, one decoded bf16 record */
        vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "batch clip image features",
                        (4 * B + 2) * vf_param_int(p, "image_len") * vf_param_int(p, "image_dim") + 4096);
    if (D) { /* the batch's f32 embeddings, and one decoded bf16 record */
        int64_t TL = vf_param_int(p, "text_len");
        vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "batch text embeddings", B * TL * D * 4);
        vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "one decoded text record", TL * D * 2 + 4096);
    }
    return 0;
}

static int reader_init(vf_stage *s, const vf_params *p, vf_status *st)
{
    vf_latent_reader_opts o = {
        .path = vf_param_str(p, "path"),
        .batch = (int)vf_param_int(p, "batch"),
        .seed = (uint64_t)vf_param_int(p, "seed"),
        .epochs = vf_param_int(p, "epochs"),
        .shard = (int)vf_param_int(p, "shard"),
        .nshards = (int)vf_param_int(p, "nshards"),
        .drop_last = vf_param_bool(p, "drop_last"),
        .text_len = (int)vf_param_int(p, "text_len"),
        .text_dim = vf_param_int(p, "text_dim"),
        .cursor = vf_param_str(p, "cursor"),
        .skip_bad = !strcmp(vf_param_str(p, "on_bad"), "skip"),
        .only = vf_param_str(p, "only"),
    };
    vf_cache_cond_parse(vf_param_str(p, "cond"), &o.cond); /* the param's choices are the names */
    o.image_len = vf_param_int(p, "image_len"), o.image_dim = vf_param_int(p, "image_dim");
    vf_latent_bucket_decl *decl = NULL;
    int rc = vf_lr_decl_from_params(p, &decl, &o.nbuckets, st);
    if (rc) return rc;
    o.buckets = decl;
    char *shrink = vf_lr_shrink_text(p);
    o.shrink = shrink;
    if (o.shard >= o.nshards) {
        free(decl);
        free(shrink);
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: shard %d is not below nshards %d",
                             vf_stage_name(s), o.shard, o.nshards);
    }
    vf_latent_reader *r = NULL;
    rc = vf_latent_reader_open(&o, &r, st);
    free(decl);
    free(shrink);
    if (rc) {
        vf_status_prefix(st, "%s", vf_stage_name(s));
        return rc;
    }
    vf_stage_set_state(s, r);
    return 0;
}

/* One line for the run: how many captions training sees cut to text_len bytes. */
static void warn_cut(vf_latent_reader *r, vf_ctx *ctx, int64_t text_len)
{
    int64_t seen = 0, cut = vf_latent_reader_cut(r, &seen);
    if (cut)
        vf_log(ctx, VF_LOG_WARN, "%lld of the %lld clips read have captions longer than text_len = %lld bytes: "
               "training sees their first %lld (the model's text_len: --set text_len=N in pipelines/train_dit.lua)",
               (long long)cut, (long long)seen, (long long)text_len, (long long)text_len);
}

static void log_bad(void *user, const char *msg)
{
    vf_ctx *ctx = user;
    vf_log(ctx, VF_LOG_WARN, "skipping damaged record: %s", msg);
}

static int reader_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    vf_latent_reader *r = vf_stage_state(s);
    vf_port *out = vf_out(ctx, "out");
    vf_latent_reader_set_on_bad(r, log_bad, ctx);
    /* a bucket with entries but not one batch per epoch on this rank is never read: say so
     * (one the admission or `only` left out was said already) */
    int64_t ranks = vf_param_int(vf_stage_params(s), "nshards");
    for (int b = 0; b < vf_latent_reader_nbuckets(r); b++) {
        int batch = 0;
        int64_t n = 0;
        const char *name = vf_latent_reader_bucket(r, b, &batch, &n, NULL);
        if (n > 0 && vf_latent_reader_bucket_batches(r, b) == 0)
            vf_log(ctx, VF_LOG_WARN, "bucket %s: %lld entr%s, batch %d%s: no full batch, its entries are never read "
                   "(drop_last); give it a smaller batch or more clips", name, (long long)n, n == 1 ? "y" : "ies", batch,
                   ranks > 1 ? " per rank" : "");
    }
    int64_t batches = 0, text_len = vf_param_int(vf_stage_params(s), "text_len");
    double epoch0 = -1;
    bool cut_told = false;
    int rc = 0;
    while (!vf_stopping(ctx)) {
        vf_item *it = NULL;
        rc = vf_latent_reader_next(r, &it, st);
        if (rc == VF_EOS) break;
        if (rc) {
            vf_status_prefix(st, "%s", vf_stage_name(s));
            return rc;
        }
        double epoch = 0;
        vf_item_num(it, "epoch", &epoch);
        if (epoch0 < 0) epoch0 = epoch;
        if (!cut_told && epoch > epoch0) { /* a whole epoch read: the count is final */
            warn_cut(r, ctx, text_len);
            cut_told = true;
        }
        rc = vf_send(out, it, st);
        if (rc == VF_EOS) break; /* the consumer has all it wants */
        if (rc) return rc;
        batches++;
        vf_metric(ctx, "batches", (double)batches);
        vf_metric(ctx, "bad", (double)vf_latent_reader_bad(r));
    }
    if (!cut_told) warn_cut(r, ctx, text_len);
    vf_log(ctx, VF_LOG_INFO, "%lld batches, %lld damaged records skipped", (long long)batches,
           (long long)vf_latent_reader_bad(r));
    return 0;
}

static void reader_fini(vf_stage *s)
{
    vf_latent_reader_close(vf_stage_state(s));
    vf_stage_set_state(s, NULL);
}

static const vf_stage_ops latent_reader_ops = {
    .api_version = VF_API_VERSION,
    .kind = "latent_reader",
    .doc = "batches from the LMDB latent cache: seeded per-epoch shuffle, data-parallel shards, exact resume cursor",
    .params = reader_params,
    .flags = VF_STAGE_SOURCE,
    .preflight = reader_preflight,
    .ports = reader_ports,
    .memory = reader_memory,
    .init = reader_init,
    .run = reader_run,
    .fini = reader_fini,
};
VF_REGISTER_STAGE(latent_reader_ops)
