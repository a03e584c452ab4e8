/* test_latent_cache.c — the latent cache writer and reader without a running graph:
 * keys, skip of existing keys, the "__meta__" summary, map growth; reader order
 * (same seed same order, other seed other order, a permutation per epoch), shards
 * disjoint and covering, exact resume from a cursor, batch contents, damaged and
 * mixed-shape caches. */
#include "stages/latent_cache.h"
#include "stages/reader/latent_reader.h"
#include "tests/vf_test.h"

#include <unistd.h>

static char root[256];

static const char *dbpath(const char *name)
{
    static char buf[512];
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/vf_latent_test.XXXXXX");
        VF_CHECK(mkdtemp(root) != NULL);
    }
    snprintf(buf, sizeof buf, "%s/%s", root, name);
    return buf;
}

static const int64_t SHAPE[4] = {2, 2, 3, 4};

/* item i: latent value j = i * 1000 + j, caption "clip <i>" */
static vf_item *make_item(int i, const int64_t *shape, const char *vae)
{
    vf_status st;
    vf_status_clear(&st);
    char id[64], src[64], cap[64];
    snprintf(id, sizeof id, "video%d.mp4#%d", i / 3, i % 3);
    snprintf(src, sizeof src, "%016x", i / 3);
    snprintf(cap, sizeof cap, "clip %d", i);
    vf_item *it = vf_item_new(id, &st);
    vf_tensor *t = vf_tensor_new(VF_DTYPE_F32, 4, shape, &st);
    float *d = t->data;
    for (int64_t j = 0; j < vf_tensor_numel(t); j++) d[j] = (float)(i * 1000 + j);
    vf_item_put(it, "latent", t, &st);
    vf_item_set_str(it, "source", src, &st);
    vf_item_set_num(it, "clip", i % 3, &st);
    vf_item_set_str(it, "transform", "frames=5;size=32x24", &st);
    vf_item_set_str(it, "vae", vae, &st);
    vf_item_set_str(it, "caption", cap, &st);
    return it;
}

static void write_cache(const char *path, int from, int to, int commit_every, size_t map,
                        vf_latent_writer_stats *stats)
{
    vf_status st;
    vf_status_clear(&st);
    vf_latent_writer_opts o = {.path = path, .commit_every = commit_every, .map_size = map};
    vf_latent_writer *w = NULL;
    VF_CHECK_EQ_INT(vf_latent_writer_open(&o, &w, &st), 0);
    if (!w) { fprintf(stderr, "%s\n", st.msg); return; }
    for (int i = from; i < to; i++) {
        bool skipped;
        int rc = vf_latent_writer_add(w, make_item(i, SHAPE, "vaeA"), &skipped, &st);
        VF_CHECK_MSG(rc == 0, "%s", st.msg);
    }
    VF_CHECK_EQ_INT(vf_latent_writer_flush(w, &st), 0);
    vf_latent_writer_get_stats(w, stats);
    vf_latent_writer_close(w);
}

static vf_json *read_meta(const char *path)
{
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *db = NULL;
    vf_lmdb_opts ro = {.readonly = true};
    MDB_txn *txn = NULL;
    vf_json *m = NULL;
    if (vf_lmdb_open(path, &ro, &db, &st) == 0 && vf_lmdb_read_begin(db, &txn, &st) == 0)
        vf_cache_meta_read(db, txn, &m, &st);
    if (txn) mdb_txn_abort(txn);
    vf_lmdb_close(db);
    return m;
}

VF_TEST(keys)
{
    char a[33], b[33];
    vf_cache_key("src", 0, "t", "vae", a);
    VF_CHECK_EQ_INT(strlen(a), 32);
    VF_CHECK(vf_cache_is_entry_key(a, 32));
    vf_cache_key("src", 0, "t", "vae", b);
    VF_CHECK_STR(a, b);
    vf_cache_key("src", 1, "t", "vae", b);
    VF_CHECK(strcmp(a, b) != 0);
    vf_cache_key("src", 0, "t2", "vae", b);
    VF_CHECK(strcmp(a, b) != 0);
    vf_cache_key("src", 0, "t", "vae2", b);
    VF_CHECK(strcmp(a, b) != 0);
    vf_cache_key("sr", 0, "ct", "vae", b); /* fields cannot slide into each other */
    VF_CHECK(strcmp(a, b) != 0);
    /* no bucket: the key is unchanged; a bucket, and another bucket, make new keys */
    vf_cache_key_bucket("src", 0, "t", "vae", NULL, NULL, b);
    VF_CHECK_STR(a, b);
    vf_cache_key_bucket("src", 0, "t", "vae", "", "", b);
    VF_CHECK_STR(a, b);
    vf_cache_key_bucket("src", 0, "t", "vae", NULL, "256x144x17", b);
    VF_CHECK(strcmp(a, b) != 0);
    char c[33];
    vf_cache_key_bucket("src", 0, "t", "vae", NULL, "256x144x33", c);
    VF_CHECK(strcmp(b, c) != 0);
    vf_cache_key_of_id("src", b);
    VF_CHECK(strcmp(a, b) != 0);
    VF_CHECK(!vf_cache_is_entry_key(VF_CACHE_META_KEY, strlen(VF_CACHE_META_KEY)));
    VF_CHECK(!vf_cache_is_entry_key("0123456789ABCDEF0123456789abcdef", 32));
    /* an item without provenance is refused under "provenance", keyed under "id" */
    vf_status st;
    vf_status_clear(&st);
    vf_item *it = vf_item_new("x", &st);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(it, VF_CACHE_KEY_PROVENANCE, a, &st), VF_EINVAL);
    VF_CHECK(strstr(st.msg, "\"x\"") && strstr(st.msg, "source"));
    VF_CHECK_EQ_INT(vf_cache_key_of_item(it, VF_CACHE_KEY_ID, a, &st), 0);
    vf_item_free(it);
}

VF_TEST(writer_skips_existing_and_counts)
{
    char path[512];
    snprintf(path, sizeof path, "%s", dbpath("w1"));
    vf_latent_writer_stats s;
    write_cache(path, 0, 50, 8, 0, &s);
    VF_CHECK_EQ_INT(s.written, 50);
    VF_CHECK_EQ_INT(s.skipped, 0);
    VF_CHECK_EQ_INT(s.commits, 7);
    write_cache(path, 40, 60, 8, 0, &s); /* a rerun: 10 exist, 10 new */
    VF_CHECK_EQ_INT(s.written, 10);
    VF_CHECK_EQ_INT(s.skipped, 10);
    vf_json *m = read_meta(path);
    VF_CHECK(m != NULL);
    VF_CHECK_EQ_INT(vf_json_get_int(m, "entries", -1), 60);
    VF_CHECK_EQ_INT(vf_json_get_int(vf_json_get(m, "shapes"), "(2,2,3,4)", -1), 60);
    VF_CHECK_EQ_INT(vf_json_get_int(vf_json_get(m, "vae"), "vaeA", -1), 60);
    VF_CHECK_STR(vf_json_get_str(m, "key", ""), "provenance");
    vf_json_free(m);
    /* the same item twice inside one batch: stored once */
    vf_status st;
    vf_status_clear(&st);
    vf_latent_writer_opts o = {.path = path, .commit_every = 100};
    vf_latent_writer *w = NULL;
    VF_CHECK_EQ_INT(vf_latent_writer_open(&o, &w, &st), 0);
    bool sk;
    VF_CHECK_EQ_INT(vf_latent_writer_add(w, make_item(1000, SHAPE, "vaeA"), &sk, &st), 0);
    VF_CHECK_EQ_INT(vf_latent_writer_add(w, make_item(1000, SHAPE, "vaeA"), &sk, &st), 0);
    VF_CHECK_EQ_INT(vf_latent_writer_flush(w, &st), 0);
    vf_latent_writer_get_stats(w, &s);
    VF_CHECK_EQ_INT(s.written, 1);
    VF_CHECK_EQ_INT(s.skipped, 1);
    /* another VAE: new keys */
    VF_CHECK_EQ_INT(vf_latent_writer_add(w, make_item(0, SHAPE, "vaeB"), &sk, &st), 0);
    VF_CHECK(!sk);
    /* a bad item fails with its id; queue unharmed */
    vf_item *bad = vf_item_new("no-latent", &st);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_writer_add(w, bad, &sk, &st), VF_EINVAL);
    VF_CHECK(strstr(st.msg, "no-latent") != NULL);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_writer_flush(w, &st), 0);
    vf_latent_writer_close(w);
    m = read_meta(path);
    VF_CHECK_EQ_INT(vf_json_get_int(m, "entries", -1), 62);
    VF_CHECK_EQ_INT(vf_json_get_int(vf_json_get(m, "vae"), "vaeB", -1), 1);
    vf_json_free(m);
    /* keyed by id now: refused */
    o.keying = VF_CACHE_KEY_ID;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_writer_open(&o, &w, &st), VF_EINVAL);
    VF_CHECK(strstr(st.msg, "keyed by provenance") != NULL);
}

VF_TEST(writer_grows_tiny_map)
{
    char path[512];
    snprintf(path, sizeof path, "%s", dbpath("tiny"));
    vf_latent_writer_stats s;
    write_cache(path, 0, 400, 16, 64 << 10, &s);
    VF_CHECK_EQ_INT(s.written, 400);
    VF_CHECK(s.growths >= 2);
    fprintf(stderr, "400 records: map 64 KiB -> %zu (%d growths)\n", s.map_size, s.growths);
    vf_json *m = read_meta(path);
    VF_CHECK_EQ_INT(m ? vf_json_get_int(m, "entries", -1) : -1, 400);
    vf_json_free(m);
}

/* Reads every batch of `epochs` epochs; returns keys joined with '|' between batches. */
static char *read_all(const char *path, uint64_t seed, int shard, int nshards, int batch,
                      int64_t epochs, bool drop_last, const char *cursor, int max_batches,
                      char *last_cursor)
{
    vf_status st;
    vf_status_clear(&st);
    vf_latent_reader_opts o = {.path = path, .batch = batch, .seed = seed, .epochs = epochs,
                               .shard = shard, .nshards = nshards, .drop_last = drop_last,
                               .text_len = 16, .cursor = cursor};
    vf_latent_reader *r = NULL;
    if (vf_latent_reader_open(&o, &r, &st) != 0) {
        fprintf(stderr, "open: %s\n", st.msg);
        VF_CHECK(0);
        return strdup("");
    }
    size_t cap = 1 << 16, len = 0;
    char *out = calloc(1, cap);
    for (int b = 0; max_batches < 0 || b < max_batches; b++) {
        vf_item *it = NULL;
        int rc = vf_latent_reader_next(r, &it, &st);
        if (rc == VF_EOS) break;
        VF_CHECK_MSG(rc == 0, "%s", st.msg);
        if (rc) break;
        const char *k = vf_item_str(it, "keys");
        if (len + strlen(k) + 2 > cap) out = realloc(out, cap *= 2);
        len += (size_t)sprintf(out + len, "%s|", k);
        if (last_cursor) snprintf(last_cursor, 160, "%s", vf_item_str(it, "cursor"));
        vf_item_free(it);
    }
    vf_latent_reader_close(r);
    return out;
}

static int count_keys(const char *s, const char *key)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, key)); p += 32) n++;
    return n;
}

VF_TEST(reader_order_shards_resume)
{
    char path[512];
    snprintf(path, sizeof path, "%s", dbpath("order"));
    vf_latent_writer_stats s;
    write_cache(path, 0, 24, 5, 0, &s);
    char *a = read_all(path, 7, 0, 1, 4, 3, true, NULL, -1, NULL);
    char *b = read_all(path, 7, 0, 1, 4, 3, true, NULL, -1, NULL);
    char *c = read_all(path, 8, 0, 1, 4, 3, true, NULL, -1, NULL);
    VF_CHECK_STR(a, b);
    VF_CHECK(strcmp(a, c) != 0);
    VF_CHECK_EQ_INT(strlen(a), 3 * 24 * 33); /* 3 epochs × 24 keys × (32 + separator) */

    /* each epoch is a permutation, and epochs differ */
    vf_status st;
    vf_status_clear(&st);
    vf_latent_reader_opts o = {.path = path, .batch = 4, .seed = 7, .nshards = 1, .drop_last = true, .text_len = 8};
    vf_latent_reader *r = NULL;
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &r, &st), 0);
    if (r) {
        int seen[24] = {0};
        bool differs = false;
        for (int64_t p = 0; p < 24; p++) {
            seen[vf_latent_reader_index_at(r, 0, p)]++;
            differs |= vf_latent_reader_index_at(r, 0, p) != vf_latent_reader_index_at(r, 1, p);
        }
        for (int i = 0; i < 24; i++) VF_CHECK_EQ_INT(seen[i], 1);
        VF_CHECK(differs);
        /* the key list is LMDB's sorted order */
        for (int64_t i = 1; i < vf_latent_reader_entries(r); i++)
            VF_CHECK(memcmp(vf_latent_reader_key(r, i - 1), vf_latent_reader_key(r, i), 32) < 0);
        vf_latent_reader_close(r);
    }

    /* 3 shards: disjoint and covering every epoch (24 % 3 == 0) */
    char *sh[3];
    for (int k = 0; k < 3; k++) sh[k] = read_all(path, 7, k, 3, 2, 1, true, NULL, -1, NULL);
    {
        vf_latent_reader *q = NULL;
        vf_status_clear(&st);
        VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &q, &st), 0);
        for (int64_t i = 0; q && i < 24; i++) {
            char key[33];
            memcpy(key, vf_latent_reader_key(q, i), 32);
            key[32] = 0;
            int tot = count_keys(sh[0], key) + count_keys(sh[1], key) + count_keys(sh[2], key);
            VF_CHECK_MSG(tot == 1, "key %s seen %d times over the shards", key, tot);
        }
        vf_latent_reader_close(q);
    }
    for (int k = 0; k < 3; k++) free(sh[k]);
    /* 5 shards of 24: 4 per rank per epoch, 4 entries left out */
    char *s5 = read_all(path, 7, 4, 5, 2, 1, true, NULL, -1, NULL);
    VF_CHECK_EQ_INT(strlen(s5), 4 * 33);
    free(s5);

    /* resume: 5 batches, then a new reader from the 5th batch's cursor, equals the rest */
    char cur[160] = "";
    char *head = read_all(path, 7, 0, 1, 4, 3, true, NULL, 5, cur);
    VF_CHECK(strstr(cur, "epoch=0;pos=20;n=24;seed=7;shard=0/1") != NULL);
    char *tail = read_all(path, 7, 0, 1, 4, 3, true, cur, -1, NULL);
    size_t hl = strlen(head);
    VF_CHECK(strncmp(a, head, hl) == 0);
    VF_CHECK_STR(a + hl, tail);
    free(head);
    free(tail);
    /* across an epoch boundary */
    head = read_all(path, 7, 0, 1, 4, 3, true, NULL, 8, cur);
    tail = read_all(path, 7, 0, 1, 4, 3, true, cur, -1, NULL);
    hl = strlen(head);
    VF_CHECK(strncmp(a, head, hl) == 0);
    VF_CHECK_STR(a + hl, tail);
    free(head);
    free(tail);
    /* a cursor of another seed / layout / cache size is refused */
    vf_latent_reader_opts o2 = o;
    o2.cursor = "v1;epoch=0;pos=4;n=24;seed=9;shard=0/1";
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o2, &r, &st), VF_EUSAGE);
    o2.cursor = "v1;epoch=0;pos=4;n=23;seed=7;shard=0/1";
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o2, &r, &st), VF_EBADINPUT);
    VF_CHECK(strstr(st.msg, "23") != NULL);
    o2.cursor = "epoch 3";
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o2, &r, &st), VF_EUSAGE);
    free(a);
    free(b);
    free(c);
}

VF_TEST(reader_batch_contents)
{
    char path[512];
    snprintf(path, sizeof path, "%s", dbpath("order")); /* from the previous test */
    vf_status st;
    vf_status_clear(&st);
    /* drop_last = false: 24 entries in batches of 5 -> 5,5,5,5,4 */
    vf_latent_reader_opts o = {.path = path, .batch = 5, .seed = 3, .epochs = 1, .nshards = 1,
                               .drop_last = false, .text_len = 6};
    vf_latent_reader *r = NULL;
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &r, &st), 0);
    if (!r) return;
    int nb = 0, total = 0;
    for (;;) {
        vf_item *it = NULL;
        int rc = vf_latent_reader_next(r, &it, &st);
        if (rc == VF_EOS) break;
        VF_CHECK_EQ_INT(rc, 0);
        if (rc) break;
        vf_tensor *lat = vf_item_get(it, "latent"), *text = vf_item_get(it, "text"), *tl = vf_item_get(it, "text_len");
        int B = (int)lat->shape[0];
        VF_CHECK_EQ_INT(B, nb < 4 ? 5 : 4);
        VF_CHECK(lat->ndim == 5 && lat->shape[1] == 2 && lat->shape[4] == 4);
        VF_CHECK(text->shape[0] == B && text->shape[1] == 6 && tl->shape[0] == B);
        double idx;
        VF_CHECK(vf_item_num(it, "index", &idx) == 0 && idx == nb);
        for (int b = 0; b < B; b++) {
            /* which item is it? latent[0] = i * 1000 */
            const float *d = (const float *)lat->data + b * 48;
            int i = (int)(d[0] / 1000);
            bool ok = true;
            for (int j = 0; j < 48; j++) ok &= d[j] == (float)(i * 1000 + j);
            VF_CHECK(ok);
            char cap[32];
            int n = snprintf(cap, sizeof cap, "clip %d", i);
            if (n > 6) n = 6;
            const int32_t *t = (const int32_t *)text->data + b * 6;
            VF_CHECK_EQ_INT(((const int32_t *)tl->data)[b], n);
            for (int j = 0; j < 6; j++) VF_CHECK_EQ_INT(t[j], j < n ? (unsigned char)cap[j] : 0);
        }
        total += B;
        nb++;
        vf_item_free(it);
    }
    VF_CHECK_EQ_INT(nb, 5);
    VF_CHECK_EQ_INT(total, 24);
    vf_latent_reader_close(r);
}

/* Flips one byte in the middle of the value stored under the i-th entry key. */
static void damage(const char *path, int i, char key_out[33])
{
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *db = NULL;
    VF_CHECK_EQ_INT(vf_lmdb_open(path, NULL, &db, &st), 0);
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val k, v;
    mdb_txn_begin(vf_lmdb_env(db), NULL, 0, &txn);
    mdb_cursor_open(txn, vf_lmdb_dbi(db), &cur);
    int m = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (int n = 0; m == 0; m = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        if (vf_cache_is_entry_key(k.mv_data, k.mv_size) && n++ == i) break;
    VF_CHECK_EQ_INT(m, 0);
    unsigned char *copy = malloc(v.mv_size);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size / 2] ^= 0x40;
    memcpy(key_out, k.mv_data, 32);
    key_out[32] = 0;
    MDB_val nv = {v.mv_size, copy}, kk = {32, key_out};
    mdb_cursor_close(cur);
    VF_CHECK_EQ_INT(mdb_put(txn, vf_lmdb_dbi(db), &kk, &nv, 0), 0);
    VF_CHECK_EQ_INT(mdb_txn_commit(txn), 0);
    free(copy);
    vf_lmdb_close(db);
}

static int nbad_seen;
static void on_bad(void *user, const char *msg)
{
    nbad_seen++;
    VF_CHECK(strstr(msg, (const char *)user) != NULL);
}

VF_TEST(reader_damaged_and_mixed)
{
    char path[512], key[33];
    snprintf(path, sizeof path, "%s", dbpath("damaged"));
    vf_latent_writer_stats s;
    write_cache(path, 0, 12, 4, 0, &s);
    damage(path, 5, key);
    vf_status st;
    vf_status_clear(&st);
    vf_latent_reader_opts o = {.path = path, .batch = 4, .seed = 1, .epochs = 1, .nshards = 1, .drop_last = true, .text_len = 4};
    vf_latent_reader *r = NULL;
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &r, &st), 0);
    int rc = 0;
    vf_item *it = NULL;
    while (r && (rc = vf_latent_reader_next(r, &it, &st)) == 0) vf_item_free(it);
    VF_CHECK_EQ_INT(rc, VF_ECORRUPT);
    VF_CHECK_MSG(strstr(st.msg, key) && strstr(st.msg, path), "%s", st.msg);
    vf_latent_reader_close(r);
    /* skip: 11 good records -> 2 full batches, the damaged one counted */
    o.skip_bad = true;
    o.on_bad = on_bad;
    o.user = key;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &r, &st), 0);
    int nb = 0;
    while (r && (rc = vf_latent_reader_next(r, &it, &st)) == 0) {
        VF_CHECK(strstr(vf_item_str(it, "keys"), key) == NULL);
        vf_item_free(it);
        nb++;
    }
    VF_CHECK_EQ_INT(rc, VF_EOS);
    VF_CHECK_EQ_INT(nb, 2);
    VF_CHECK_EQ_INT(r ? vf_latent_reader_bad(r) : -1, 1);
    VF_CHECK_EQ_INT(nbad_seen, 1);
    vf_latent_reader_close(r);

    /* two latent shapes in one cache: the reader refuses at open, naming them */
    snprintf(path, sizeof path, "%s", dbpath("mixed"));
    vf_latent_writer_opts wo = {.path = path, .commit_every = 4};
    vf_latent_writer *w = NULL;
    VF_CHECK_EQ_INT(vf_latent_writer_open(&wo, &w, &st), 0);
    int64_t other[4] = {2, 2, 6, 8};
    bool sk;
    for (int i = 0; w && i < 6; i++) vf_latent_writer_add(w, make_item(i, i < 4 ? SHAPE : other, "v"), &sk, &st);
    if (w) vf_latent_writer_flush(w, &st);
    vf_latent_writer_close(w);
    o.path = path;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &r, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "(2,2,3,4) ×4") && strstr(st.msg, "(2,2,6,8) ×2"), "%s", st.msg);
    int64_t shp[4], n;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_cache_probe(path, shp, &n, &st), VF_EBADINPUT);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_cache_probe(dbpath("order"), shp, &n, &st), 0);
    VF_CHECK(shp[0] == 2 && shp[3] == 4 && n == 25);
}

VF_TEST(cleanup)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (root[0]) VF_CHECK(system(cmd) == 0);
}

int main(void) { return vf_test_main(); }
