/* latent_cache.c — stage kind `latent_cache`: the single LMDB writer of a precompute.
 *
 * Input "in": one latent item per clip (docs/ITEMS.md: tensor "latent" f32 (z, T', h, w),
 * optional "logvar", metadata with caption and provenance). Each item is stored under
 * the key of its provenance (source, clip, transform, vae — formats/cache_format.h), so
 * another VAE or transform never collides; the value is the item's codec record (with
 * its CRC32C). A key that already exists is skipped and counted: a rerun of a killed
 * precompute redoes only what was never committed. Records are committed `commit_every`
 * at a time in one durable write txn, together with the updated "__meta__" summary
 * (entries, bytes, latent shapes, VAE hashes, the per-channel normalisation of each
 * VAE's latents, the entries of each bucket), so the summary stays exact whatever
 * moment the writer is killed at. The map grows by doubling when full (lmdb_store.c).
 *
 * An item that carries "text_emb" bf16 (L, D) (its caption's text embedding) has it
 * stored once per distinct content under "text:<hash>" (formats/cache_format.h) and
 * keeps only the reference ("text_key", "text_tokens"): the many clips of one caption
 * share one record. A text record already in the cache or queued in the same batch is
 * not written again; all embeddings of a cache must have one width. CLIP image features
 * ("clip_emb", image-to-video) are stored the same way under "clip:<hash>" (the entry
 * keeps "clip_key", "clip_rows"); all of a cache's have one shape.
 *
 * An item with a first-frame latent "y" (image-to-video) keeps it in its record beside
 * the latent. A cache holds entries of one conditioning kind (text, concat, concat+clip:
 * formats/cache_format.h); the summary records it, and an item of another kind than the
 * cache's entries is refused with a line naming both.
 *
 * With `buckets` (the names the decoder declares) a bucket that has no entry in the
 * cache at the end of the run gets a warning line naming it.
 *
 * Runs in a worker of its own (VF_STAGE_OWN_WORKER): the LMDB writer, and map growth
 * needs no other txn open in the process. Declared memory: the commit buffer, sized at
 * the first record to commit_every records (a cache's records are alike in size, so it
 * does not regrow), and the received item being encoded into it.
 */
#include "stages/latent_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const vf_param_spec cache_params[] = {
    {"path", VF_P_STR, NULL, VF_ANY, "LMDB cache directory (created if missing)", NULL, NULL},
    {"commit_every", VF_P_INT, "32", VF_RANGE(1, 1000000), "records per write transaction", NULL, NULL},
    {"map_size", VF_P_INT, "67108864", VF_RANGE(65536, 1.125899906842624e15),
     "initial LMDB map size in bytes (doubles when full)", NULL, NULL},
    {"key", VF_P_STR, "\"provenance\"", VF_ANY,
     "entry keys: provenance = hash(source, clip, transform, vae); id = hash(item id)",
     "provenance|id", NULL},
    {"buckets", VF_P_LIST_STR, "null", VF_ANY,
     "bucket names WxHxF (256x144x17) the decoder declares: one with no entry in the cache at the end gets a warning",
     NULL, NULL},
    {0},
};

#define SHAPE_MAX 96
#define VAE_MAX 160

typedef struct pending {
    const vf_cache_shared *shared; /* a text or CLIP record; NULL = an entry */
    bool has_text;     /* an entry that references a text record */
    char shape[SHAPE_MAX];
    char vae[VAE_MAX];
    char tkey[VF_CACHE_TEXT_KEY_LEN + 1]; /* text and CLIP records: their key */
    char bucket[VF_CACHE_BUCKET_MAX];     /* entries of a bucket: its name; "" = none */
    int64_t bucket_batch;
    vf_cache_cond cond; /* entries: their conditioning kind */
    int64_t L, D;      /* text and CLIP records: their shape */
    int64_t bytes;
} pending;

struct vf_latent_writer {
    vf_lmdb *db;
    vf_lmdb_batch *batch;
    vf_cache_keying keying;
    int commit_every;
    pending *pend; /* 2 × commit_every: what the summary needs of each queued record */
    int npend_entries;                 /* entries (not text records) queued */
    int64_t text_dim;                  /* width of the cache's text embeddings; 0 = none yet */
    bool cond_set;                     /* the cache's conditioning kind is known (an entry exists) */
    vf_cache_cond cond;
    int nnorms;                        /* per-channel normalisations seen ("latent_norm") */
    char **norm_vae, **norm_text;      /* nnorms each: recorded in the summary per VAE */
    int64_t written, skipped, commits, texts, clips;
    int64_t last_entries, last_texts, last_clips; /* stored by the last commit (set in update_meta) */
};

/* ------------------------------------------------------------------ writer */

void vf_latent_writer_close(vf_latent_writer *w)
{
    if (!w) return;
    vf_lmdb_batch_free(w->batch);
    vf_lmdb_close(w->db);
    for (int i = 0; i < w->nnorms; i++) {
        free(w->norm_vae[i]);
        free(w->norm_text[i]);
    }
    free(w->norm_vae);
    free(w->norm_text);
    free(w->pend);
    free(w);
}

int vf_latent_writer_open(const vf_latent_writer_opts *o, vf_latent_writer **out,
                          vf_status *st)
{
    int rc = 0;
    MDB_txn *txn = NULL;
    vf_json *meta = NULL;
    *out = NULL;
    vf_latent_writer *w = calloc(1, sizeof *w);
    if (!w) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", o->path);
    w->keying = o->keying;
    w->commit_every = o->commit_every > 0 ? o->commit_every : 1;
    w->pend = calloc(2 * (size_t)w->commit_every, sizeof *w->pend);
    if (!w->pend) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", o->path);
    if (!(w->batch = vf_lmdb_batch_new(st))) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", o->path);
    vf_lmdb_opts lo = {.map_size = o->map_size};
    VF_TRY(vf_lmdb_open(o->path, &lo, &w->db, st));
    VF_TRY(vf_lmdb_read_begin(w->db, &txn, st));
    VF_TRY(vf_cache_meta_read(w->db, txn, &meta, st));
    mdb_txn_abort(txn);
    txn = NULL;
    w->text_dim = meta ? vf_json_get_int(meta, "text_dim", 0) : 0;
    w->cond_set = meta && vf_json_get_int(meta, "entries", 0) > 0;
    w->cond = vf_cache_meta_cond(meta);
    if (meta && vf_cache_meta_keying(meta) != w->keying)
        VF_FAIL(st, VF_EINVAL, "%s: cache entries are keyed by %s; this stage keys by %s (param key)",
                o->path, vf_cache_keying_name(vf_cache_meta_keying(meta)), vf_cache_keying_name(w->keying));
    vf_json_free(meta);
    *out = w;
    return 0;
fail:
    if (txn) mdb_txn_abort(txn);
    vf_json_free(meta);
    vf_latent_writer_close(w);
    return rc;
}

/* Inside the write txn: add what was stored to the summary (re-read each time, since a
 * map growth retries the txn from scratch). */
static int update_meta(void *user, vf_lmdb *db, MDB_txn *txn, const vf_lmdb_batch *b,
                       const unsigned char *written, vf_status *st)
{
    vf_latent_writer *w = user;
    vf_json *meta = NULL;
    int rc = vf_cache_meta_read(db, txn, &meta, st);
    if (rc) return rc;
    if (!meta && !(meta = vf_cache_meta_new(w->keying)))
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cache summary: out of memory");
    w->last_entries = w->last_texts = w->last_clips = 0;
    for (int i = 0; i < vf_lmdb_batch_count(b) && rc == 0; i++) {
        const pending *pd = &w->pend[i];
        if (!written[i]) continue;
        if (pd->shared) {
            bool text = pd->shared == vf_cache_text;
            rc = text ? vf_cache_meta_count_text(meta, pd->L, pd->D, pd->bytes, st)
                      : vf_cache_meta_count_clip(meta, pd->L, pd->D, pd->bytes, st);
            if (rc) vf_status_prefix(st, "%s: %s", vf_lmdb_path(db), pd->tkey);
            *(text ? &w->last_texts : &w->last_clips) += 1;
            continue;
        }
        rc = vf_cache_meta_count(meta, pd->shape, pd->vae, pd->bytes, st);
        if (rc == 0) rc = vf_cache_meta_count_cond(meta, pd->cond, st);
        if (rc == 0 && pd->has_text) rc = vf_cache_meta_count_text_entry(meta, st);
        if (rc == 0 && pd->bucket[0]) {
            rc = vf_cache_meta_count_bucket(meta, pd->bucket, pd->bucket_batch, pd->shape, st);
            if (rc) vf_status_prefix(st, "%s", vf_lmdb_path(db));
        }
        w->last_entries++;
    }
    for (int i = 0; i < w->nnorms && rc == 0; i++) rc = vf_cache_meta_note_norm(meta, w->norm_vae[i], w->norm_text[i], st);
    if (rc == 0) rc = vf_cache_meta_write(db, txn, meta, st);
    vf_json_free(meta);
    return rc;
}

int vf_latent_writer_flush(vf_latent_writer *w, vf_status *st)
{
    if (vf_lmdb_batch_count(w->batch) == 0) return 0;
    int rc = vf_lmdb_batch_commit(w->db, w->batch, update_meta, w, NULL, NULL, st);
    if (rc) return rc;
    w->written += w->last_entries;
    w->skipped += w->npend_entries - w->last_entries; /* duplicates within the batch */
    w->texts += w->last_texts;
    w->clips += w->last_clips;
    w->npend_entries = 0;
    w->commits++;
    return 0;
}

/* Remembers the per-channel normalisation the item's VAE applied, for the summary. */
static int note_norm(vf_latent_writer *w, const vf_item *it, vf_status *st)
{
    const char *vae = vf_item_str(it, "vae"), *norm = vf_item_str(it, "latent_norm");
    if (!vae || !norm) return 0;
    for (int i = 0; i < w->nnorms; i++)
        if (!strcmp(w->norm_vae[i], vae)) return 0;
    char **a = realloc(w->norm_vae, sizeof *a * (size_t)(w->nnorms + 1));
    if (a) w->norm_vae = a;
    char **b = a ? realloc(w->norm_text, sizeof *b * (size_t)(w->nnorms + 1)) : NULL;
    if (b) w->norm_text = b;
    char *x = b ? strdup(vae) : NULL, *y = x ? strdup(norm) : NULL;
    if (!y) {
        free(x);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", vf_lmdb_path(w->db));
    }
    w->norm_vae[w->nnorms] = x;
    w->norm_text[w->nnorms++] = y;
    return 0;
}

/* Moves the item's tensor of kind `kind` (text embedding or CLIP features; content hash
 * h) into a record of its own (queued unless the cache or the batch has it) and leaves
 * the reference in the item's metadata. */
static int put_shared(vf_latent_writer *w, vf_item *it, const vf_cache_shared *kind, const char *h, vf_status *st)
{
    int rc = 0;
    vf_item *rec = NULL;
    vf_tensor *t = vf_item_take(it, kind->tensor);
    char tkey[VF_CACHE_TEXT_KEY_LEN + 1];
    snprintf(tkey, sizeof tkey, "%s%s", kind->prefix, h);
    int64_t L = t->shape[0], D = t->shape[1];
    if (kind == vf_cache_text && w->text_dim && D != w->text_dim)
        VF_FAIL(st, VF_EBADINPUT, "tensor \"" VF_CACHE_TEXT_TENSOR "\" has width %lld; the cache holds width %lld",
                (long long)D, (long long)w->text_dim);
    if (kind == vf_cache_text) w->text_dim = D;
    VF_TRY(vf_item_set_str(it, kind->ref, h, st));
    VF_TRY(vf_item_set_num(it, kind->rows, (double)L, st));
    bool exists = false;
    int n = vf_lmdb_batch_count(w->batch);
    for (int k = 0; k < n && !exists; k++) exists = w->pend[k].shared && !strcmp(w->pend[k].tkey, tkey);
    if (!exists) VF_TRY(vf_lmdb_exists(w->db, tkey, VF_CACHE_TEXT_KEY_LEN, &exists, st));
    if (exists) goto fail; /* rc == 0: one record serves every caption of this content */
    if (!(rec = vf_item_new(tkey, st))) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", vf_lmdb_path(w->db));
    VF_TRY(vf_item_put(rec, kind->tensor, vf_tensor_ref(t), st));
    size_t need = vf_item_encoded_size(rec), len = 0;
    void *dst;
    VF_TRY(vf_lmdb_batch_reserve(w->batch, tkey, VF_CACHE_TEXT_KEY_LEN, need, &dst, st));
    rc = vf_item_encode(rec, dst, need, &len, st);
    if (rc == 0 && len != need)
        rc = vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "encoded %zu bytes, expected %zu", len, need);
    if (rc) {
        vf_lmdb_batch_truncate(w->batch, n);
        goto fail;
    }
    pending *pd = &w->pend[n];
    memset(pd, 0, sizeof *pd);
    pd->shared = kind;
    snprintf(pd->tkey, sizeof pd->tkey, "%s", tkey);
    pd->L = L, pd->D = D, pd->bytes = (int64_t)len;
fail:
    if (rc) vf_status_prefix(st, "%s: item \"%s\": %s record", vf_lmdb_path(w->db), vf_item_id(it), kind->what);
    vf_item_free(rec);
    vf_tensor_unref(t);
    return rc;
}

int vf_latent_writer_add(vf_latent_writer *w, vf_item *it, bool *skipped, vf_status *st)
{
    int rc = 0;
    char key[VF_CACHE_KEY_LEN + 1];
    *skipped = false;
    char th[VF_CACHE_KEY_LEN + 1];
    char bucket[VF_CACHE_BUCKET_MAX];
    int64_t bucket_batch;
    VF_TRY(vf_cache_check_item(it, st));
    VF_TRY(vf_cache_item_bucket(it, bucket, &bucket_batch, st));
    vf_cache_item_text_hash(it, th); /* once: it reads the whole embedding */
    VF_TRY(vf_cache_key_of_item_text(it, w->keying, th, key, st));
    bool exists = false;
    VF_TRY(vf_lmdb_exists(w->db, key, VF_CACHE_KEY_LEN, &exists, st));
    if (exists) {
        *skipped = true;
        w->skipped++;
        goto fail; /* rc == 0: done with the item */
    }
    vf_cache_cond cond = vf_cache_item_cond(it);
    if (w->cond_set && cond != w->cond)
        VF_FAIL(st, VF_EBADINPUT, "%s: item \"%s\" is of conditioning kind %s; the cache holds entries of kind %s: "
                "write it to a cache of its own", vf_lmdb_path(w->db), vf_item_id(it), vf_cache_cond_name(cond),
                vf_cache_cond_name(w->cond));
    VF_TRY(note_norm(w, it, st));
    bool has_text = vf_item_get(it, VF_CACHE_TEXT_TENSOR) != NULL;
    if (has_text) VF_TRY(put_shared(w, it, vf_cache_text, th, st));
    if (vf_item_get(it, VF_CACHE_CLIP_TENSOR)) {
        char ch[VF_CACHE_KEY_LEN + 1];
        vf_cache_shared_hash(vf_cache_clip, vf_item_get(it, VF_CACHE_CLIP_TENSOR), ch);
        VF_TRY(put_shared(w, it, vf_cache_clip, ch, st));
    }
    size_t need = vf_item_encoded_size(it), len = 0;
    void *dst;
    int i = vf_lmdb_batch_count(w->batch);
    /* records of one geometry are alike in size; with buckets the arena grows to
     * commit_every of the largest record seen, never past the port's bound */
    VF_TRY(vf_lmdb_batch_presize(w->batch, (size_t)w->commit_every * (need + VF_CACHE_KEY_LEN + 64), st));
    VF_TRY(vf_lmdb_batch_reserve(w->batch, key, VF_CACHE_KEY_LEN, need, &dst, st));
    rc = vf_item_encode(it, dst, need, &len, st);
    if (rc == 0 && len != need)
        rc = vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "item \"%s\": encoded %zu bytes, expected %zu",
                           vf_item_id(it), len, need);
    if (rc) {
        /* the half-made entry must never be committed */
        vf_status_prefix(st, "%s: item \"%s\"", vf_lmdb_path(w->db), vf_item_id(it));
        vf_lmdb_batch_truncate(w->batch, i);
        goto fail;
    }
    memset(&w->pend[i], 0, sizeof w->pend[i]);
    vf_cache_shape_key(it, w->pend[i].shape, SHAPE_MAX);
    const char *vae = vf_item_str(it, "vae");
    snprintf(w->pend[i].vae, VAE_MAX, "%s", vae ? vae : "none");
    w->pend[i].bytes = (int64_t)len;
    w->pend[i].has_text = has_text;
    w->pend[i].cond = cond;
    w->cond = cond, w->cond_set = true;
    snprintf(w->pend[i].bucket, sizeof w->pend[i].bucket, "%s", bucket);
    w->pend[i].bucket_batch = bucket_batch;
    w->npend_entries++;
    if (w->npend_entries >= w->commit_every) VF_TRY(vf_latent_writer_flush(w, st));
fail:
    vf_item_free(it);
    return rc;
}

void vf_latent_writer_get_stats(const vf_latent_writer *w, vf_latent_writer_stats *out)
{
    out->written = w->written;
    out->skipped = w->skipped;
    out->queued = vf_lmdb_batch_count(w->batch);
    out->commits = w->commits;
    out->texts = w->texts;
    out->map_size = vf_lmdb_map_size(w->db);
    out->growths = vf_lmdb_growths(w->db);
    out->batch_capacity = vf_lmdb_batch_capacity(w->batch);
}

/* ------------------------------------------------------------------ stage */

static int cache_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out,
                       vf_status *st)
{
    const vf_port_spec *up = upstream ? vf_port_find(upstream, "in") : NULL;
    vf_port_spec *in = vf_port_add(out, "in", VF_PORT_IN, true);
    in->multi = true; /* several encoders (on several nodes) feed the one writer */
    if (up) { /* stores what arrives: the upstream's spec bounds the records */
        in->ntensors = up->ntensors;
        memcpy(in->t, up->t, sizeof in->t);
        in->meta_bytes = up->meta_bytes;
        in->device = up->device;
        const vf_tensor_spec *lat = NULL;
        for (int i = 0; i < up->ntensors; i++)
            if (!strcmp(up->t[i].name, VF_CACHE_TENSOR)) lat = &up->t[i];
        if (!lat || lat->dtype != VF_DTYPE_F32 || lat->ndim != 4)
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                                 "latent_cache: its input must carry tensor \"latent\" f32 (z, T', h, w)");
    } else {
        static const char *const sym[4] = {"z", "T", "h", "w"};
        int64_t dims[4] = {0, 0, 0, 0}; /* unknown until connected */
        vf_port_tensor(in, VF_CACHE_TENSOR, VF_DTYPE_F32, 4, dims, sym);
    }
    return 0;
}

static int cache_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out,
                        vf_status *st)
{
    const vf_port_spec *in = vf_port_find(ports, "in");
    int64_t rec = in ? vf_port_max_item_bytes(in) : 0;
    /* the arena vf_latent_writer_put presizes once to commit_every x (record + key + 64):
     * a cache's records are alike in size, so it never regrows (the record here is the
     * port's bound; the id and metadata of a real one are shorter) */
    vf_mem_plan_add(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_ITEMS, "commit batch",
                    vf_param_int(p, "commit_every") * (rec > 0 ? rec + VF_CACHE_KEY_LEN + 64 : 0));
    /* the received item being encoded into the arena (a ZeroMQ receive is charged to
     * this stage, an in-process one to its producer) */
    if (rec > 0) vf_mem_plan_add_input(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_ITEMS, "input item", rec);
    return 0;
}

static int cache_init(vf_stage *s, const vf_params *p, vf_status *st)
{
    vf_latent_writer_opts o = {
        .path = vf_param_str(p, "path"),
        .commit_every = (int)vf_param_int(p, "commit_every"),
        .map_size = (size_t)vf_param_int(p, "map_size"),
    };
    if (vf_cache_keying_parse(vf_param_str(p, "key"), &o.keying) != 0)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: bad key scheme \"%s\"",
                             vf_stage_name(s), vf_param_str(p, "key"));
    vf_latent_writer *w = NULL;
    int rc = vf_latent_writer_open(&o, &w, st);
    if (rc) {
        vf_status_prefix(st, "%s", vf_stage_name(s));
        return rc;
    }
    vf_stage_set_state(s, w);
    return 0;
}

static void report(vf_ctx *ctx, vf_latent_writer *w)
{
    vf_latent_writer_stats x;
    vf_latent_writer_get_stats(w, &x);
    vf_metric(ctx, "written", (double)x.written);
    vf_metric(ctx, "skipped", (double)x.skipped);
}

/* A declared bucket that no video reached is known only once every clip is in: one
 * warning line each, so a training run that declares it can be fixed before launch. */
static void warn_empty_buckets(vf_stage *s, vf_ctx *ctx, const vf_json *meta)
{
    const vf_params *p = vf_stage_params(s);
    const vf_json *have = meta ? vf_json_get(meta, "buckets") : NULL;
    if (vf_stopping(ctx) || vf_aborting(ctx)) return; /* a cut run saw only part of the videos */
    for (int i = 0; i < vf_param_len(p, "buckets"); i++) {
        const char *b = vf_param_str_at(p, "buckets", i);
        if (vf_json_get_int(vf_json_get(have, b), "entries", 0) > 0) continue;
        vf_log(ctx, VF_LOG_WARN, "bucket %s: no samples in %s (no video's aspect ratio and length led there); "
               "leave it out of the training run's buckets", b, vf_param_str(p, "path"));
    }
}

static int cache_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    vf_latent_writer *w = vf_stage_state(s);
    vf_port *in = vf_in(ctx, "in");
    int rc = 0;
    for (int64_t n = 0;; n++) {
        vf_item *it = NULL;
        rc = vf_recv(in, &it, st);
        if (rc == VF_EOS) break;
        if (rc == VF_ESTOPPED) {
            /* what is queued is whole and consistent: keep it, a rerun skips it */
            vf_status keep = *st;
            vf_status_clear(st);
            if (vf_latent_writer_flush(w, st) == 0) *st = keep;
            return rc;
        }
        if (rc < 0) return rc;
        bool skipped;
        rc = vf_latent_writer_add(w, it, &skipped, st);
        if (rc) {
            vf_status_prefix(st, "%s", vf_stage_name(s));
            return rc;
        }
        if (n % 16 == 0) report(ctx, w);
    }
    if ((rc = vf_latent_writer_flush(w, st)) != 0) {
        vf_status_prefix(st, "%s", vf_stage_name(s));
        return rc;
    }
    report(ctx, w);
    vf_latent_writer_stats x;
    vf_latent_writer_get_stats(w, &x);
    size_t entries = 0;
    vf_status ign;
    vf_status_clear(&ign);
    vf_lmdb_count(w->db, &entries, &ign);
    /* the count holds "__meta__" (subtracted below) and the text records */
    MDB_txn *rt = NULL;
    vf_json *meta = NULL;
    if (vf_lmdb_read_begin(w->db, &rt, &ign) == 0 && vf_cache_meta_read(w->db, rt, &meta, &ign) == 0 && meta) {
        int64_t shared = vf_json_get_int(meta, "texts", 0) + vf_json_get_int(meta, "clips", 0);
        entries = entries > (size_t)shared ? entries - (size_t)shared : 0;
    }
    if (rt) mdb_txn_abort(rt);
    warn_empty_buckets(s, ctx, meta);
    vf_json_free(meta);
    char row[320];
    snprintf(row, sizeof row,
             "{\"event\":\"latent_cache_done\",\"written\":%lld,\"skipped\":%lld,\"texts\":%lld,\"commits\":%lld,"
             "\"entries\":%zu,\"map_size\":%zu,\"growths\":%d}",
             (long long)x.written, (long long)x.skipped, (long long)x.texts, (long long)x.commits,
             entries ? entries - 1 : 0, x.map_size, x.growths);
    vf_metric_row(ctx, row);
    vf_log(ctx, VF_LOG_INFO, "%s: wrote %lld records, skipped %lld existing, %zu in cache, map %zu bytes (%d growths)",
           vf_param_str(vf_stage_params(s), "path"), (long long)x.written, (long long)x.skipped,
           entries ? entries - 1 : 0, x.map_size, x.growths);
    return 0;
}

static void cache_fini(vf_stage *s)
{
    vf_latent_writer_close(vf_stage_state(s));
    vf_stage_set_state(s, NULL);
}

static const vf_stage_ops latent_cache_ops = {
    .api_version = VF_API_VERSION,
    .kind = "latent_cache",
    .doc = "single LMDB writer of latent records, keyed by provenance; skips existing keys, batched durable commits",
    .params = cache_params,
    .flags = VF_STAGE_OWN_WORKER,
    .ports = cache_ports,
    .memory = cache_memory,
    .init = cache_init,
    .run = cache_run,
    .fini = cache_fini,
};
VF_REGISTER_STAGE(latent_cache_ops)
