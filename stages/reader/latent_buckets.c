/* latent_buckets.c — the bucketed order of stage kind `latent_reader`: a cache whose
 * entries carry "bucket" metadata is read one bucket per batch, each bucket with its own
 * batch size, in a seeded per-epoch schedule (the rules are in latent_reader.h).
 *
 * At open every entry's record header is read for its "bucket" (the payloads are not
 * touched; each bucket's first record is decoded whole for its latent shape, the others'
 * shapes are checked as they are read); the reader then keeps per entry 4 bytes of bucket list and 4 of
 * permutation, and per batch of the epoch 8 bytes of schedule.
 *
 * Calls go one way in stages/reader/: latent_reader.c → latent_buckets.c →
 * latent_batch.c. This file calls only latent_batch.c (the shuffle, the epoch rollover,
 * batches); the reader calls it to open, read and resume a bucketed cache.
 */
#include "stages/reader/latent_reader_internal.h"
#include "formats/lr_cursor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<W>x<H>x<F>" with positive integers, nothing else. */
static int parse_name(const char *s, int *w, int *h, int *f)
{
    int end = -1;
    if (!s || sscanf(s, "%dx%dx%d%n", w, h, f, &end) != 3 || end < 0 || s[end] || *w < 1 || *h < 1 || *f < 1)
        return -1;
    return 0;
}

/* The geometry rules every bucket obeys, whether declared or found in the cache. */
static int check_geometry(const char *path, const char *name, int w, int h, int f, vf_status *st)
{
    if (w % 8 || h % 8)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: bucket %s: width %d and height %d must be multiples of the VAE stride 8",
                             path, name, w, h);
    if ((f - 1) % 4)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: bucket %s: %d frames is not 1 + 4k (the VAE's temporal stride)", path, name, f);
    return 0;
}

static void no_release(void *data, void *hint)
{
    (void)data;
    (void)hint;
}

int vf_lr_is_bucketed(vf_latent_reader *r, bool *yes, vf_status *st)
{
    int rc = 0;
    vf_json *meta = NULL;
    MDB_cursor *cur = NULL;
    vf_item *it = NULL;
    *yes = r->o.nbuckets > 0;
    if (*yes) return 0;
    VF_TRY(vf_cache_meta_read(r->db, r->txn, &meta, st));
    if (meta && vf_json_len(vf_json_get(meta, "buckets")) > 0) {
        *yes = true;
        goto fail;
    }
    MDB_val k, v;
    VF_MDB(st, r->db, mdb_cursor_open(r->txn, vf_lmdb_dbi(r->db), &cur));
    int m = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    while (m == 0 && !vf_cache_is_entry_key(k.mv_data, k.mv_size)) m = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    if (m == 0 && vf_item_decode_view(v.mv_data, v.mv_size, no_release, NULL, &it, NULL) == 0)
        *yes = vf_item_str(it, "bucket") != NULL;
fail:
    if (cur) mdb_cursor_close(cur);
    vf_item_free(it);
    vf_json_free(meta);
    return rc;
}

static int find_bucket(vf_latent_reader *r, const char *name)
{
    for (int i = 0; i < r->nbk; i++)
        if (!strcmp(r->bk[i].name, name)) return i;
    return -1;
}

static int cmp_bucket(const void *a, const void *b)
{
    return strcmp(((const vf_lr_bucket *)a)->name, ((const vf_lr_bucket *)b)->name);
}

/* A new bucket named `name` for latents of `shape` (first entry seen). */
static int add_bucket(vf_latent_reader *r, const char *name, const char *key, const int64_t shape[4], vf_status *st)
{
    int rc = 0, w, h, f;
    if (strlen(name) >= VF_LR_BUCKET_NAME || parse_name(name, &w, &h, &f))
        VF_FAIL(st, VF_ECORRUPT, "%s: record \"%.32s\" has bucket \"%s\", not <W>x<H>x<F>", r->path, key, name);
    VF_TRY(check_geometry(r->path, name, w, h, f, st));
    if (r->nbk == VF_LR_MAX_BUCKETS)
        VF_FAIL(st, VF_EBADINPUT, "%s: more than %d buckets", r->path, VF_LR_MAX_BUCKETS);
    vf_lr_bucket *b = &r->bk[r->nbk++];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", name);
    b->w = w, b->h = h, b->frames = f;
    b->shape[0] = shape[0], b->shape[1] = (f - 1) / 4 + 1, b->shape[2] = h / 8, b->shape[3] = w / 8;
    b->batch = 0;
fail:
    return rc;
}

/* Bucket name, batch hint and shape of entry record (k, v): 0, 1 when damaged and
 * skipped, or an error. */
static int scan_one(vf_latent_reader *r, const MDB_val *k, const MDB_val *v, int *bi, vf_status *st)
{
    int rc = 0;
    vf_item *it = NULL;
    vf_status bad;
    vf_status_clear(&bad);
    *bi = -1;
    /* the header alone (no payload read); a bucket's first record whole, for its shape */
    if (vf_item_decode_meta(v->mv_data, v->mv_size, &it, &bad) == 0) {
        const char *name = vf_item_str(it, "bucket");
        if (!name)
            VF_FAIL(st, VF_EBADINPUT, "%s: record \"%.32s\" has no \"bucket\" metadata in a bucketed cache "
                    "(every entry of a bucketed cache needs one)", r->path,
                    (const char *)k->mv_data);
        int i = find_bucket(r, name);
        if (i < 0) {
            vf_item *whole = NULL;
            if (vf_item_decode_view(v->mv_data, v->mv_size, no_release, NULL, &whole, &bad) != 0 ||
                vf_cache_check_item(whole, &bad) != 0) {
                vf_item_free(whole);
                goto damaged;
            }
            rc = add_bucket(r, name, k->mv_data, vf_item_get(whole, VF_CACHE_TENSOR)->shape, st);
            if (rc == 0 && memcmp(vf_item_get(whole, VF_CACHE_TENSOR)->shape, r->bk[r->nbk - 1].shape,
                                  sizeof r->bk[0].shape) != 0) {
                char a[96], e[96];
                vf_shape_str(4, vf_item_get(whole, VF_CACHE_TENSOR)->shape, a, sizeof a);
                vf_shape_str(4, r->bk[r->nbk - 1].shape, e, sizeof e);
                rc = vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__,
                                   "%s: record \"%.32s\" of bucket %s has latent shape %s; the bucket's is %s", r->path,
                                   (const char *)k->mv_data, name, a, e);
            }
            vf_item_free(whole);
            if (rc) goto fail;
            i = r->nbk - 1;
        }
        vf_lr_bucket *b = &r->bk[i];
        double hint;
        if (vf_item_num(it, "bucket_batch", &hint) == 0) {
            if (hint < 1 || hint > 65536 || hint != (double)(int)hint)
                VF_FAIL(st, VF_ECORRUPT, "%s: record \"%.32s\": bucket_batch %g is not a batch size", r->path,
                        (const char *)k->mv_data, hint);
            if (b->batch && b->batch != (int)hint)
                VF_FAIL(st, VF_ECORRUPT, "%s: bucket %s: record \"%.32s\" says bucket_batch %d, others %d", r->path,
                        name, (const char *)k->mv_data, (int)hint, b->batch);
            b->batch = (int)hint;
        }
        *bi = i;
        b->n++;
        goto fail; /* done, rc == 0 */
    }
damaged:
    vf_status_prefix(&bad, "%s: record \"%.32s\"", r->path, (const char *)k->mv_data);
    if (!r->o.skip_bad) {
        bad.code = VF_ECORRUPT;
        *st = bad;
        rc = VF_ECORRUPT;
        goto fail;
    }
    r->bad++;
    if (r->o.on_bad) r->o.on_bad(r->o.user, bad.msg);
    rc = 1;
fail:
    vf_item_free(it);
    return rc;
}

/* Batch sizes from the summary and the declared list, and the declared list's checks. */
static int resolve_batches(vf_latent_reader *r, const vf_json *meta, vf_status *st)
{
    int rc = 0;
    const vf_json *mb = meta ? vf_json_get(meta, "buckets") : NULL;
    for (int i = 0; i < r->nbk; i++) {
        vf_lr_bucket *b = &r->bk[i];
        const vf_json *e = mb ? vf_json_get(mb, b->name) : NULL;
        int64_t mbatch = e ? vf_json_get_int(e, "batch", 0) : 0;
        if (mbatch) b->batch = (int)mbatch;
    }
    for (int d = 0; d < r->o.nbuckets; d++) {
        const vf_latent_bucket_decl *x = &r->o.buckets[d];
        char name[VF_LR_BUCKET_NAME];
        snprintf(name, sizeof name, "%dx%dx%d", x->w, x->h, x->frames);
        VF_TRY(check_geometry(r->path, name, x->w, x->h, x->frames, st));
        if (x->batch < 1) VF_FAIL(st, VF_EBADINPUT, "%s: bucket %s: batch %d (must be >= 1)", r->path, name, x->batch);
        int i = find_bucket(r, name);
        if (i < 0 || r->bk[i].n == 0)
            VF_FAIL(st, VF_EBADINPUT, "%s: bucket %s is declared but the cache holds no entry of it", r->path, name);
        const vf_json *e = mb ? vf_json_get(mb, name) : NULL;
        int64_t mbatch = e ? vf_json_get_int(e, "batch", 0) : 0;
        if (mbatch && mbatch != x->batch)
            VF_FAIL(st, VF_EBADINPUT, "%s: bucket %s is declared with batch %d; the cache's summary says %lld",
                    r->path, name, x->batch, (long long)mbatch);
        r->bk[i].batch = x->batch;
    }
    if (r->o.nbuckets)
        for (int i = 0; i < r->nbk; i++) {
            bool declared = false;
            for (int d = 0; d < r->o.nbuckets; d++)
                declared |= r->o.buckets[d].w == r->bk[i].w && r->o.buckets[d].h == r->bk[i].h &&
                            r->o.buckets[d].frames == r->bk[i].frames;
            if (!declared)
                VF_FAIL(st, VF_EBADINPUT, "%s: the cache holds bucket %s (%lld entries), which the reader's buckets "
                        "do not declare", r->path, r->bk[i].name, (long long)r->bk[i].n);
        }
    for (int i = 0; i < r->nbk; i++)
        if (!r->bk[i].batch) r->bk[i].batch = r->o.batch;
fail:
    return rc;
}

/* Admission (latent_reader_internal.h). */
int vf_lr_admit(vf_latent_reader *r, const char *holder, vf_status *st)
{
    int rc = 0;
    for (const char *q = r->o.shrink; q && *q;) {
        char name[VF_LR_BUCKET_NAME];
        int nb = -1, used = -1;
        if (sscanf(q, "%39[^:;]:%d%n", name, &nb, &used) != 2 || used < 0 || nb < 0)
            VF_FAIL(st, VF_EUSAGE, "%s: shrink \"%s\" is not name:B;…", r->path, r->o.shrink);
        int b = find_bucket(r, name);
        if (b < 0) VF_FAIL(st, VF_EBADINPUT, "%s: shrink names bucket %s, which %s lacks", r->path, name, holder);
        if (nb > r->bk[b].batch)
            VF_FAIL(st, VF_EUSAGE, "%s: shrink raises bucket %s's batch %d to %d", r->path, name, r->bk[b].batch, nb);
        if (nb) r->bk[b].batch = nb;
        else r->bk[b].left_out = true;
        q += used;
        if (*q == ';') q++;
    }
    if (r->o.only && r->o.only[0]) { /* one bucket only: the others are left out of the schedule */
        int keep = find_bucket(r, r->o.only);
        if (keep < 0)
            VF_FAIL(st, VF_EBADINPUT, "%s: only = \"%s\": %s has no such bucket", r->path, r->o.only, holder);
        for (int b = 0; b < r->nbk; b++)
            if (b != keep) r->bk[b].left_out = true;
    }
fail:
    return rc;
}

int vf_lr_none_admitted(const vf_latent_reader *r, vf_status *st)
{
    return vf_status_set(st, VF_EBUDGET, __FILE__, __LINE__,
                         "%s: admission = \"shrink\" left every bucket out (%s): none fits the budget", r->path,
                         r->o.shrink);
}

static uint64_t fnv64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

int vf_lr_buckets_open(vf_latent_reader *r, vf_status *st)
{
    int rc = 0;
    MDB_cursor *cur = NULL;
    vf_json *meta = NULL;
    int32_t *of = NULL;
    MDB_val k, v;
    if (!(r->bk = calloc(VF_LR_MAX_BUCKETS, sizeof *r->bk)) || !(of = malloc(sizeof *of * (size_t)(r->n ? r->n : 1))))
        VF_FAIL(st, VF_ENOMEM, "%s: out of memory for the buckets", r->path);
    VF_MDB(st, r->db, mdb_cursor_open(r->txn, vf_lmdb_dbi(r->db), &cur));
    int64_t i = 0;
    for (int m = mdb_cursor_get(cur, &k, &v, MDB_FIRST); m != MDB_NOTFOUND; m = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        VF_MDB_RC(st, r->db, "mdb_cursor_get", m);
        if (!vf_cache_is_entry_key(k.mv_data, k.mv_size)) continue;
        if (i >= r->n || memcmp(k.mv_data, r->keys + 32 * i, 32) != 0)
            VF_FAIL(st, VF_EBADINPUT, "%s: the cache changed under the reader", r->path);
        rc = scan_one(r, &k, &v, &of[i], st);
        if (rc < 0) goto fail;
        rc = 0;
        i++;
    }
    if (r->nbk == 0) VF_FAIL(st, VF_EBADINPUT, "%s: no readable entry in the cache", r->path);
    int64_t z = r->bk[0].shape[0];
    for (int b = 0; b < r->nbk; b++)
        if (r->bk[b].shape[0] != z)
            VF_FAIL(st, VF_EBADINPUT, "%s: bucket %s has %lld latent channels, bucket %s %lld", r->path, r->bk[b].name,
                    (long long)r->bk[b].shape[0], r->bk[0].name, (long long)z);
    /* number the buckets by name, then lay out their entry lists */
    int remap[VF_LR_MAX_BUCKETS];
    for (int b = 0; b < r->nbk; b++) r->bk[b].scanned = b;
    qsort(r->bk, (size_t)r->nbk, sizeof *r->bk, cmp_bucket);
    for (int b = 0; b < r->nbk; b++) remap[r->bk[b].scanned] = b;
    VF_TRY(vf_cache_meta_read(r->db, r->txn, &meta, st));
    VF_TRY(resolve_batches(r, meta, st));
    VF_TRY(vf_lr_admit(r, "the cache", st));
    if (!(r->bidx = vf_alloc(sizeof(uint32_t) * (size_t)r->n, st)) ||
        !(r->bperm = vf_alloc(sizeof(uint32_t) * (size_t)r->n, st)))
        VF_FAIL(st, VF_ENOMEM, "%s: out of memory for the bucket lists", r->path);
    int64_t off = 0;
    for (int b = 0; b < r->nbk; b++) {
        vf_lr_bucket *x = &r->bk[b];
        x->idx = r->bidx + off;
        x->perm = r->bperm + off;
        off += x->n;
        x->n = 0;
    }
    for (int64_t e = 0; e < r->n; e++)
        if (of[e] >= 0) {
            vf_lr_bucket *x = &r->bk[remap[of[e]]];
            x->idx[x->n++] = (uint32_t)e;
        }
    uint64_t h = 0xcbf29ce484222325ULL;
    r->NB = 0;
    for (int b = 0; b < r->nbk; b++) {
        vf_lr_bucket *x = &r->bk[b];
        x->L = x->n / r->o.nshards;
        x->nb = x->left_out ? 0 : r->o.drop_last ? x->L / x->batch : (x->L + x->batch - 1) / x->batch;
        r->NB += x->nb;
        int64_t nums[3] = {x->n, x->batch, x->nb};
        h = fnv64(h, x->name, strlen(x->name) + 1);
        h = fnv64(h, nums, sizeof nums);
    }
    r->layout = h;
    size_t gn = (size_t)r->nbk * (VF_LR_BUCKET_NAME + 5 * 24) + 1;
    vf_lr_plan_bucket *pb = calloc((size_t)r->nbk, sizeof *pb);
    int np = 0;
    if (!pb || !(r->geo = malloc(gn))) {
        free(pb);
        VF_FAIL(st, VF_ENOMEM, "%s: out of memory", r->path);
    }
    for (int b = 0; b < r->nbk; b++) {
        const vf_lr_bucket *x = &r->bk[b];
        if (x->nb == 0) continue; /* never read: no buffer need be sized for it */
        snprintf(pb[np].name, sizeof pb[np].name, "%s", x->name);
        pb[np].batch = x->batch;
        memcpy(pb[np++].shape, x->shape, sizeof x->shape);
    }
    vf_lr_geo_text(pb, np, r->geo, gn);
    free(pb);
    if (r->NB == 0 && r->o.shrink && r->o.shrink[0]) {
        rc = vf_lr_none_admitted(r, st);
        goto fail;
    }
    if (r->NB == 0)
        VF_FAIL(st, VF_EUSAGE, "%s: no bucket has a full batch per rank and epoch (%d ranks%s)", r->path,
                r->o.nshards, r->o.drop_last ? ", drop_last" : "");
    if (!(r->sched = vf_alloc(sizeof(uint64_t) * (size_t)r->NB, st)))
        VF_FAIL(st, VF_ENOMEM, "%s: out of memory for the batch schedule", r->path);
    r->L = r->NB;
fail:
    if (cur) mdb_cursor_close(cur);
    vf_json_free(meta);
    free(of);
    return rc;
}

void vf_lr_buckets_free(vf_latent_reader *r)
{
    free(r->bk);
    vf_free(r->bidx);
    vf_free(r->bperm);
    vf_free(r->sched);
    free(r->geo);
    r->geo = NULL;
    r->bk = NULL, r->bidx = r->bperm = NULL, r->sched = NULL;
}

int vf_latent_reader_nbuckets(const vf_latent_reader *r) { return r->nbk; }

const char *vf_latent_reader_bucket(const vf_latent_reader *r, int i, int *batch, int64_t *entries,
                                    int64_t shape[4])
{
    const vf_lr_bucket *b = &r->bk[i];
    if (batch) *batch = b->batch;
    if (entries) *entries = b->n;
    if (shape) memcpy(shape, b->shape, sizeof b->shape);
    return b->name;
}

int64_t vf_latent_reader_bucket_batches(const vf_latent_reader *r, int i)
{
    return r->bk[i].left_out ? -1 : r->bk[i].nb;
}

/* ------------------------------------------------------------------ schedule */

static void make_schedule(vf_latent_reader *r, uint64_t epoch)
{
    uint64_t *s = r->sched;
    int64_t j = 0;
    for (int b = 0; b < r->nbk; b++) {
        vf_lr_bucket *x = &r->bk[b];
        vf_lr_shuffle(x->perm, x->n, r->o.seed, epoch, 1 + (uint64_t)b);
        for (int64_t q = 0; q < x->nb; q++) s[j++] = (uint64_t)b << 32 | (uint64_t)q;
    }
    /* the batch order: a permutation of 0..NB-1 applied to the list above; bperm of the
     * buckets stays intact, so the permutation goes through a scratch copy in place */
    uint32_t *p = malloc(sizeof *p * (size_t)r->NB);
    uint64_t *t = malloc(sizeof *t * (size_t)r->NB);
    if (p && t) {
        vf_lr_shuffle(p, r->NB, r->o.seed, epoch, 0);
        for (int64_t i = 0; i < r->NB; i++) t[i] = s[p[i]];
        memcpy(s, t, sizeof *t * (size_t)r->NB);
    }
    free(p);
    free(t);
    r->sched_epoch = epoch;
    r->sched_valid = p && t;
}

/* ------------------------------------------------------------------ cursor */

static void cursor_text(const vf_latent_reader *r, char *buf, size_t n)
{
    const vf_lr_cursor c = {2, r->epoch, r->pos, r->n, r->o.seed, r->o.shard, r->o.nshards, r->layout};
    vf_lr_cursor_print(&c, buf, n);
}

int vf_lr_bucket_cursor_parse(vf_latent_reader *r, const char *text, vf_status *st)
{
    int rc = 0;
    vf_lr_cursor c;
    if (vf_lr_cursor_parse(text, 2, &c))
        VF_FAIL(st, VF_EUSAGE, "%s: cursor \"%s\" is not a bucketed latent_reader cursor (" VF_LR_CURSOR_V2 ")",
                r->path, text);
    VF_TRY(vf_lr_cursor_matches(r, &c, st));
    if (c.buckets != r->layout)
        VF_FAIL(st, VF_EBADINPUT, "%s: cursor was taken over other buckets (entries or batch sizes differ): "
                "the order would differ, so the run cannot resume exactly", r->path);
    if (c.pos > r->NB)
        VF_FAIL(st, VF_EUSAGE, "%s: cursor batch %lld is past the epoch's %lld batches", r->path, (long long)c.pos,
                (long long)r->NB);
    r->epoch = c.epoch;
    r->pos = c.pos;
fail:
    return rc;
}

/* ------------------------------------------------------------------ batches */

int vf_lr_next_bucketed(vf_latent_reader *r, vf_item **out, vf_status *st)
{
    int rc = 0;
    vf_lr_batch b = {0};
    bool txn_live = false;
    *out = NULL;
    for (;;) {
        if (r->o.epochs > 0 && r->epoch >= (uint64_t)r->o.epochs) return VF_EOS;
        if (r->pos >= r->NB) {
            VF_TRY(vf_lr_next_epoch(r, st));
            continue;
        }
        if (!r->sched_valid || r->sched_epoch != r->epoch) make_schedule(r, r->epoch);
        if (!r->sched_valid) VF_FAIL(st, VF_ENOMEM, "%s: out of memory for the batch schedule", r->path);
        const vf_lr_bucket *x = &r->bk[r->sched[r->pos] >> 32];
        const int64_t q = (int64_t)(r->sched[r->pos] & 0xffffffffu), B = x->batch;
        const int64_t p0 = q * B, p1 = p0 + B < x->L ? p0 + B : x->L;
        memcpy(r->shape, x->shape, sizeof r->shape);
        r->per = x->shape[0] * x->shape[1] * x->shape[2] * x->shape[3];
        VF_TRY(vf_lr_batch_new(r, (int)B, &b, st));
        VF_TRY(vf_lmdb_read_renew(r->db, r->txn, st));
        txn_live = true;
        for (int64_t p = p0; p < p1; p++)
            if ((rc = vf_lr_batch_add(r, &b, x->idx[x->perm[r->o.shard + p * r->o.nshards]], st)) < 0) goto fail;
        rc = 0;
        mdb_txn_reset(r->txn);
        txn_live = false;
        int64_t index = r->pos++;
        r->good_in_epoch += b.got;
        if (b.got == 0 || (b.got < B && r->o.drop_last)) { /* damaged records emptied it: the next batch */
            vf_lr_batch_free(&b);
            continue;
        }
        char id[96], cur[VF_LR_CURSOR_MAX];
        snprintf(id, sizeof id, "e%llu.b%lld", (unsigned long long)r->epoch, (long long)index);
        cursor_text(r, cur, sizeof cur);
        vf_item *it = NULL;
        VF_TRY(vf_lr_batch_item(r, &b, id, (double)index, cur, &it, st));
        rc = vf_item_set_str(it, "bucket", x->name, st);
        if (rc == 0) rc = vf_item_set_str(it, "geometries", r->geo, st);
        if (rc) {
            vf_item_free(it);
            goto fail;
        }
        *out = it;
        return 0;
    }
fail:
    if (txn_live) mdb_txn_reset(r->txn);
    vf_lr_batch_free(&b);
    return rc;
}

/* ------------------------------------------------------------------ the stage's side */

static int one_int(const vf_params *t, const char *key, int k, int64_t *v)
{
    if (vf_param_len(t, key) > 0) {
        if (k >= vf_param_len(t, key)) return -1;
        *v = vf_param_int_at(t, key, k);
        return 0;
    }
    if (!vf_param_has(t, key)) return 1;
    *v = vf_param_int(t, key);
    return 0;
}

int vf_lr_decl_from_params(const vf_params *p, vf_latent_bucket_decl **out, int *n, vf_status *st)
{
    int rc = 0, nb = vf_param_len(p, "buckets"), k = 0;
    vf_latent_bucket_decl *d = NULL;
    *out = NULL;
    *n = 0;
    if (nb == 0) return 0;
    int total = 0;
    for (int i = 0; i < nb; i++) {
        const vf_params *t = vf_param_table_at(p, "buckets", i);
        int nf = t ? vf_param_len(t, "frames") : 0;
        total += nf ? nf : 1;
    }
    if (!(d = calloc((size_t)total, sizeof *d))) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    for (int i = 0; i < nb; i++) {
        const vf_params *t = vf_param_table_at(p, "buckets", i);
        int64_t w = 0, h = 0;
        if (!t || one_int(t, "w", 0, &w) || one_int(t, "h", 0, &h))
            VF_FAIL(st, VF_EBADINPUT, "latent_reader: buckets[%d] needs w and h (pixels) and frames", i + 1);
        int nf = vf_param_len(t, "frames") ? vf_param_len(t, "frames") : 1;
        int nbatch = vf_param_len(t, "batch");
        if (nbatch > 0 && nbatch != nf)
            VF_FAIL(st, VF_EBADINPUT, "latent_reader: bucket %lldx%lld: %d batch sizes for %d lengths (give one per "
                    "length, or one number)", (long long)w, (long long)h, nbatch, nf);
        for (int j = 0; j < nf; j++) {
            int64_t f = 0, b = vf_param_int(p, "batch");
            if (one_int(t, "frames", j, &f))
                VF_FAIL(st, VF_EBADINPUT, "latent_reader: bucket %lldx%lld needs frames (a length or a list)",
                        (long long)w, (long long)h);
            if (one_int(t, "batch", j, &b) < 0) b = 0;
            char name[VF_LR_BUCKET_NAME];
            snprintf(name, sizeof name, "%lldx%lldx%lld", (long long)w, (long long)h, (long long)f);
            if (w < 1 || h < 1 || f < 1 || w > 1 << 16 || h > 1 << 16 || f > 1 << 16)
                VF_FAIL(st, VF_EBADINPUT, "latent_reader: bucket %s: sizes and frames must be positive", name);
            VF_TRY(check_geometry("latent_reader", name, (int)w, (int)h, (int)f, st));
            if (b < 1 || b > 65536)
                VF_FAIL(st, VF_EBADINPUT, "latent_reader: bucket %s: batch %lld (must be 1 … 65536)", name, (long long)b);
            d[k++] = (vf_latent_bucket_decl){(int)w, (int)h, (int)f, (int)b};
        }
    }
    *out = d;
    *n = k;
    return 0;
fail:
    free(d);
    return rc;
}

char *vf_lr_shrink_text(const vf_params *p)
{
    int n = vf_param_len(p, "shrink");
    size_t cap = 1, o = 0;
    for (int i = 0; i < n; i++) cap += strlen(vf_param_str_at(p, "shrink", i) ? vf_param_str_at(p, "shrink", i) : "") + 1;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *e = vf_param_str_at(p, "shrink", i);
        o += (size_t)snprintf(s + o, cap - o, "%s%s", i ? ";" : "", e ? e : "");
    }
    return s;
}

int vf_lr_geo_text(const vf_lr_plan_bucket *b, int n, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        int k = snprintf(buf + o, cap - o, "%s%s:%d,%lld,%lld,%lld,%lld", i ? ";" : "", b[i].name, b[i].batch,
                         (long long)b[i].shape[0], (long long)b[i].shape[1], (long long)b[i].shape[2],
                         (long long)b[i].shape[3]);
        if (k < 0 || (size_t)k >= cap - o) {
            buf[0] = 0;
            return -1;
        }
        o += (size_t)k;
    }
    return 0;
}
