/* test_cache_text.c — text embeddings through the latent cache without a running graph:
 * the decode stage's loader of a row's embedding file (shapes, dtypes and bad files),
 * the writer's deduplicated bf16 text records and their summary counts, entry keys that
 * change with the embedding, and latent_reader's "text_emb" batch tensor (the stored
 * bf16 values widened to f32, zero rows past each length) with its refusals at open. */
#include "formats/safetensors.h"
#include "stages/decode/decode_text.h"
#include "stages/latent_cache.h"
#include "stages/reader/latent_reader.h"
#include "tests/vf_test.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static char root[256];

static const char *tmp_path(const char *name)
{
    static char buf[512];
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/vf_cache_text.XXXXXX");
        VF_CHECK(mkdtemp(root) != NULL);
    }
    snprintf(buf, sizeof buf, "%s/%s", root, name);
    return buf;
}

enum { D = 5, NCAP = 3 };
static const int64_t SHAPE[4] = {2, 2, 3, 4};

/* value of caption c's embedding at (row r, column k), before bf16 rounding */
static float emb_value(int c, int r, int k) { return (float)((c + 1) * 0.1 + r * 0.37 - k * 0.0113); }
static int emb_rows(int c) { return 2 + c; }

static vf_tensor *make_emb(int c, int width)
{
    vf_status st;
    vf_status_clear(&st);
    int64_t shape[2] = {emb_rows(c), width};
    vf_tensor *t = vf_tensor_new(VF_DTYPE_BF16, 2, shape, &st);
    uint16_t *d = t->data;
    for (int r = 0; r < emb_rows(c); r++)
        for (int k = 0; k < width; k++) d[r * width + k] = vf_f32_to_bf16(emb_value(c, r, k));
    return t;
}

/* clip i: latent values i * 1000 + j, caption i % NCAP with its embedding */
static vf_item *make_item(int i, int width)
{
    vf_status st;
    vf_status_clear(&st);
    char id[64], src[64];
    snprintf(id, sizeof id, "video%d.mp4#0", i);
    snprintf(src, sizeof src, "%016x", i);
    vf_item *it = vf_item_new(id, &st);
    vf_tensor *t = vf_tensor_new(VF_DTYPE_F32, 4, SHAPE, &st);
    float *d = t->data;
    for (int64_t j = 0; j < vf_tensor_numel(t); j++) d[j] = (float)(i * 1000 + j);
    vf_item_put(it, "latent", t, &st);
    vf_item_put(it, "text_emb", make_emb(i % NCAP, width), &st);
    vf_item_set_str(it, "source", src, &st);
    vf_item_set_num(it, "clip", 0, &st);
    vf_item_set_str(it, "transform", "frames=5", &st);
    vf_item_set_str(it, "vae", "vaeA", &st);
    vf_item_set_str(it, "caption", "a caption", &st);
    return it;
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

static void write_st(const char *path, int ntensors, vf_st_dtype dt, int64_t rows, int64_t width, float poison)
{
    vf_status st;
    vf_status_clear(&st);
    vf_st_writer *w = vf_st_writer_new(&st);
    int64_t n = rows * width, shape[2] = {rows, width};
    float *f = malloc(sizeof(float) * (size_t)n);
    uint16_t *h = malloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        f[i] = emb_value(0, (int)(i / width), (int)(i % width));
        h[i] = vf_f32_to_bf16(f[i]);
    }
    f[n - 1] += poison;
    for (int k = 0; k < ntensors; k++) {
        char name[32];
        snprintf(name, sizeof name, "emb%d", k);
        VF_CHECK_EQ_INT(vf_st_writer_add(w, name, dt, 2, shape, dt == VF_ST_BF16 ? (void *)h : (void *)f, &st), 0);
    }
    VF_CHECK_MSG(vf_st_writer_save(w, path, 0, NULL, &st) == 0, "%s", st.msg);
    vf_st_writer_free(w);
    free(f);
    free(h);
}

VF_TEST(loader_accepts_floats_refuses_bad_files)
{
    vf_status st;
    vf_status_clear(&st);
    char why[1024], p[512];
    vf_tensor *t = NULL;
    /* f32 and bf16 files give the same bf16 tensor */
    for (int bf = 0; bf < 2; bf++) {
        snprintf(p, sizeof p, "%s", tmp_path(bf ? "ok_bf16.safetensors" : "ok_f32.safetensors"));
        write_st(p, 1, bf ? VF_ST_BF16 : VF_ST_F32, 3, D, 0);
        VF_CHECK_MSG(vf_decode_text_load("text_emb", p, D, 8, &t, why, sizeof why, &st) == 0, "%s", why);
        VF_CHECK(t && t->dtype == VF_DTYPE_BF16 && t->shape[0] == 3 && t->shape[1] == D);
        vf_tensor *want = make_emb(0, D);
        VF_CHECK(t && !memcmp(t->data, want->data, 2 * 2 * D)); /* the first two rows */
        const uint16_t *g = t ? t->data : NULL;
        VF_CHECK(g && g[2 * D] == vf_f32_to_bf16(emb_value(0, 2, 0)));
        vf_tensor_unref(want);
        vf_tensor_unref(t);
        t = NULL;
    }
    struct { const char *name; int n; int64_t rows, width; float poison; const char *expect; } bad[] = {
        {"wide.safetensors", 1, 3, D + 1, 0, "(3,6)"},
        {"long.safetensors", 1, 9, D, 0, "text_len 8"},
        {"two.safetensors", 2, 3, D, 0, "2 tensors"},
        {"nan.safetensors", 1, 3, D, NAN, "nan"},
        {"missing.safetensors", 0, 0, 0, 0, "missing.safetensors"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(p, sizeof p, "%s", tmp_path(bad[i].name));
        if (bad[i].n) write_st(p, bad[i].n, VF_ST_F32, bad[i].rows, bad[i].width, bad[i].poison);
        why[0] = 0;
        vf_status_clear(&st);
        VF_CHECK_EQ_INT(vf_decode_text_load("text_emb", p, D, 8, &t, why, sizeof why, &st), 1);
        VF_CHECK(t == NULL);
        VF_CHECK_MSG(strstr(why, p) && strstr(why, bad[i].expect), "%s: %s", bad[i].name, why);
        if (bad[i].n == 1) VF_CHECK_MSG(strstr(why, "\"emb0\""), "names the tensor: %s", why);
    }
}

VF_TEST(keys_change_with_the_clip_features)
{
    vf_status st;
    vf_status_clear(&st);
    char a[33], b[33], c[33], plain[33], ch[33], again[33];
    vf_item *x = make_item(0, D), *y = make_item(0, D), *z = make_item(0, D);
    vf_tensor *fx = make_emb(2, D);
    vf_item_put(x, "clip_emb", vf_tensor_ref(fx), &st);
    vf_item_put(y, "clip_emb", make_emb(3, D), &st); /* the same clip and caption, other features */
    VF_CHECK_EQ_INT(vf_cache_key_of_item(x, VF_CACHE_KEY_PROVENANCE, a, &st), 0);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(y, VF_CACHE_KEY_PROVENANCE, b, &st), 0);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(z, VF_CACHE_KEY_PROVENANCE, c, &st), 0);
    VF_CHECK(strcmp(a, b) != 0);
    VF_CHECK(strcmp(a, c) != 0);
    char th[33];
    vf_cache_item_text_hash(z, th);
    vf_cache_key_text("0000000000000000", 0, "frames=5", "vaeA", th, plain);
    VF_CHECK_STR(c, plain); /* without features: the key it always had */
    VF_CHECK_EQ_INT(vf_cache_key_of_item(x, VF_CACHE_KEY_ID, a, &st), 0);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(y, VF_CACHE_KEY_ID, b, &st), 0);
    VF_CHECK(strcmp(a, b) != 0);
    /* a stored entry (the clip_key reference in place of the tensor) keeps its key */
    VF_CHECK_EQ_INT(vf_cache_key_of_item(x, VF_CACHE_KEY_PROVENANCE, a, &st), 0);
    vf_cache_shared_hash(vf_cache_clip, fx, ch);
    vf_tensor_unref(vf_item_take(x, "clip_emb"));
    vf_item_set_str(x, "clip_key", ch, &st);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(x, VF_CACHE_KEY_PROVENANCE, again, &st), 0);
    VF_CHECK_STR(a, again);
    vf_tensor_unref(fx);
    vf_item_free(x);
    vf_item_free(y);
    vf_item_free(z);
}

VF_TEST(keys_change_with_the_embedding)
{
    vf_status st;
    vf_status_clear(&st);
    char a[33], b[33], c[33], plain[33];
    vf_item *x = make_item(0, D), *y = make_item(0, D), *z = make_item(0, D);
    vf_tensor_unref(vf_item_take(z, "text_emb"));
    vf_item_put(y, "text_emb", make_emb(1, D), &st); /* same clip, another caption */
    VF_CHECK_EQ_INT(vf_cache_key_of_item(x, VF_CACHE_KEY_PROVENANCE, a, &st), 0);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(y, VF_CACHE_KEY_PROVENANCE, b, &st), 0);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(z, VF_CACHE_KEY_PROVENANCE, c, &st), 0);
    vf_cache_key("0000000000000000", 0, "frames=5", "vaeA", plain);
    VF_CHECK(strcmp(a, b) != 0);
    VF_CHECK(strcmp(a, c) != 0);
    VF_CHECK_STR(c, plain); /* without an embedding: the key it always had */
    VF_CHECK_EQ_INT(vf_cache_key_of_item(x, VF_CACHE_KEY_ID, a, &st), 0);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(y, VF_CACHE_KEY_ID, b, &st), 0);
    VF_CHECK(strcmp(a, b) != 0);
    /* a stored entry (the reference in place of the tensor) keeps its key */
    char h[33], again[33];
    vf_cache_item_text_hash(x, h);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(x, VF_CACHE_KEY_PROVENANCE, a, &st), 0);
    vf_tensor_unref(vf_item_take(x, "text_emb"));
    vf_item_set_str(x, "text_key", h, &st);
    VF_CHECK_EQ_INT(vf_cache_key_of_item(x, VF_CACHE_KEY_PROVENANCE, again, &st), 0);
    VF_CHECK_STR(a, again);
    vf_item_free(x);
    vf_item_free(y);
    vf_item_free(z);
}

static int write_items(const char *path, int from, int to, int width, vf_latent_writer_stats *s, vf_status *st)
{
    vf_latent_writer_opts o = {.path = path, .commit_every = 4};
    vf_latent_writer *w = NULL;
    int rc = vf_latent_writer_open(&o, &w, st);
    for (int i = from; i < to && rc == 0; i++) {
        bool skipped;
        rc = vf_latent_writer_add(w, make_item(i, width), &skipped, st);
    }
    if (rc == 0) rc = vf_latent_writer_flush(w, st);
    if (w && s) vf_latent_writer_get_stats(w, s);
    vf_latent_writer_close(w);
    return rc;
}

VF_TEST(writer_dedups_reader_emits)
{
    vf_status st;
    vf_status_clear(&st);
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("cache"));
    vf_latent_writer_stats s;
    VF_CHECK_MSG(write_items(path, 0, 10, D, &s, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(s.written, 10);
    VF_CHECK_EQ_INT(s.texts, NCAP); /* one record per distinct caption embedding */
    VF_CHECK_MSG(write_items(path, 8, 12, D, &s, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(s.written, 2);
    VF_CHECK_EQ_INT(s.skipped, 2);
    VF_CHECK_EQ_INT(s.texts, 0); /* the cache has them all */
    vf_json *m = read_meta(path);
    VF_CHECK(m != NULL);
    VF_CHECK_EQ_INT(vf_json_get_int(m, "entries", -1), 12);
    VF_CHECK_EQ_INT(vf_json_get_int(m, "texts", -1), NCAP);
    VF_CHECK_EQ_INT(vf_json_get_int(m, "text_entries", -1), 12);
    VF_CHECK_EQ_INT(vf_json_get_int(m, "text_dim", -1), D);
    VF_CHECK_EQ_INT(vf_json_get_int(m, "text_max_len", -1), emb_rows(NCAP - 1));
    vf_json_free(m);
    /* another width is refused, naming the tensor and both widths */
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(write_items(path, 20, 21, D + 2, NULL, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "text_emb") && strstr(st.msg, "width 7") && strstr(st.msg, "width 5"), "%s", st.msg);

    /* the reader: every sample's rows are the stored bf16 values, then zeros */
    const int TL = 6, B = 4;
    vf_latent_reader_opts o = {.path = path, .batch = B, .seed = 1, .epochs = 1, .nshards = 1, .drop_last = true,
                               .text_len = TL, .text_dim = D};
    vf_latent_reader *r = NULL;
    VF_CHECK_MSG(vf_latent_reader_open(&o, &r, &st) == 0, "%s", st.msg);
    int seen = 0;
    vf_item *it = NULL;
    while (r && vf_latent_reader_next(r, &it, &st) == 0) {
        const vf_tensor *lat = vf_item_get(it, "latent"), *e = vf_item_get(it, "text_emb"),
                        *tl = vf_item_get(it, "text_len");
        VF_CHECK(e && e->dtype == VF_DTYPE_F32 && e->ndim == 3 && e->shape[0] == B && e->shape[1] == TL &&
                 e->shape[2] == D);
        VF_CHECK(tl && tl->dtype == VF_DTYPE_I32);
        if (!e || !lat || !tl) break;
        int64_t per = vf_tensor_numel(lat) / B;
        for (int b = 0; b < B; b++) {
            int i = (int)(((const float *)lat->data)[b * per] / 1000), c = i % NCAP;
            VF_CHECK_EQ_INT(((const int32_t *)tl->data)[b], emb_rows(c));
            const float *row = (const float *)e->data + (size_t)b * TL * D;
            int diff = 0;
            for (int q = 0; q < TL; q++)
                for (int k = 0; k < D; k++) {
                    float want = q < emb_rows(c) ? vf_bf16_to_f32(vf_f32_to_bf16(emb_value(c, q, k))) : 0.0f;
                    diff += memcmp(&row[q * D + k], &want, 4) != 0;
                }
            VF_CHECK_MSG(diff == 0, "sample of clip %d: %d values differ", i, diff);
            seen++;
        }
        vf_item_free(it);
        it = NULL;
    }
    VF_CHECK_EQ_INT(seen, 12);
    vf_latent_reader_close(r);

    /* refusals at open: another width, a text_len shorter than the longest embedding */
    o.text_dim = D + 1;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &r, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, path) && strstr(st.msg, "text_emb") && strstr(st.msg, "width 5"), "%s", st.msg);
    o.text_dim = D;
    o.text_len = 3;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &r, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "text_emb") && strstr(st.msg, "text_len 3"), "%s", st.msg);
    /* a model on caption bytes reads the same cache: no "text_emb", no refusal */
    o.text_dim = 0;
    vf_status_clear(&st);
    VF_CHECK_MSG(vf_latent_reader_open(&o, &r, &st) == 0, "%s", st.msg);
    vf_item *b = NULL;
    VF_CHECK(r && vf_latent_reader_next(r, &b, &st) == 0 && b && !vf_item_get(b, "text_emb") && vf_item_get(b, "text"));
    vf_item_free(b);
    vf_latent_reader_close(r);
    int64_t dim = 0, maxl = 0;
    VF_CHECK_EQ_INT(vf_latent_cache_text_info(path, &dim, &maxl, &st), 0);
    VF_CHECK_EQ_INT(dim, D);
    VF_CHECK_EQ_INT(maxl, 4);
}

static int nbad;
static void count_bad(void *user, const char *msg)
{
    (void)user;
    nbad += strstr(msg, "text:") && strstr(msg, "missing") ? 1 : 0;
}

/* A text record that vanished (damage): the entries referencing it fail the read
 * naming both keys, or are skipped and counted with on_bad = skip. */
VF_TEST(reader_missing_text_record)
{
    vf_status st;
    vf_status_clear(&st);
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("damaged"));
    VF_CHECK_MSG(write_items(path, 0, 9, D, NULL, &st) == 0, "%s", st.msg);
    vf_item *x = make_item(1, D);
    char h[33], tkey[64];
    vf_cache_item_text_hash(x, h);
    vf_item_free(x);
    snprintf(tkey, sizeof tkey, "text:%s", h);
    vf_lmdb *db = NULL;
    VF_CHECK_EQ_INT(vf_lmdb_open(path, NULL, &db, &st), 0);
    MDB_txn *txn = NULL;
    MDB_val k = {strlen(tkey), tkey};
    VF_CHECK_EQ_INT(mdb_txn_begin(vf_lmdb_env(db), NULL, 0, &txn), 0);
    VF_CHECK_EQ_INT(mdb_del(txn, vf_lmdb_dbi(db), &k, NULL), 0);
    VF_CHECK_EQ_INT(mdb_txn_commit(txn), 0);
    vf_lmdb_close(db);

    vf_latent_reader_opts o = {.path = path, .batch = 9, .seed = 1, .epochs = 1, .nshards = 1, .drop_last = false,
                               .text_len = 8, .text_dim = D};
    vf_latent_reader *r = NULL;
    vf_item *it = NULL;
    VF_CHECK_MSG(vf_latent_reader_open(&o, &r, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(r ? vf_latent_reader_next(r, &it, &st) : -1, VF_ECORRUPT);
    VF_CHECK_MSG(strstr(st.msg, tkey) && strstr(st.msg, "missing"), "%s", st.msg);
    vf_item_free(it);
    it = NULL;
    vf_latent_reader_close(r);
    o.skip_bad = true;
    o.on_bad = count_bad;
    vf_status_clear(&st);
    VF_CHECK_MSG(vf_latent_reader_open(&o, &r, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(r ? vf_latent_reader_next(r, &it, &st) : -1, 0);
    VF_CHECK_EQ_INT(nbad, 3); /* clips 1, 4, 7 share the caption */
    VF_CHECK(it && vf_item_get(it, "text_emb") && vf_item_get(it, "text_emb")->shape[0] == 6);
    vf_item_free(it);
    vf_latent_reader_close(r);
}

VF_TEST(reader_refuses_embeddings_a_cache_lacks)
{
    vf_status st;
    vf_status_clear(&st);
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("plain"));
    vf_latent_writer_opts wo = {.path = path, .commit_every = 4};
    vf_latent_writer *w = NULL;
    VF_CHECK_EQ_INT(vf_latent_writer_open(&wo, &w, &st), 0);
    for (int i = 0; i < 4 && w; i++) {
        bool skipped;
        vf_item *it = make_item(i, D);
        vf_tensor_unref(vf_item_take(it, "text_emb"));
        VF_CHECK_EQ_INT(vf_latent_writer_add(w, it, &skipped, &st), 0);
    }
    VF_CHECK_EQ_INT(vf_latent_writer_flush(w, &st), 0);
    vf_latent_writer_close(w);
    vf_latent_reader_opts o = {.path = path, .batch = 2, .nshards = 1, .text_len = 8, .text_dim = D};
    vf_latent_reader *r = NULL;
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &r, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "no text embeddings"), "%s", st.msg);
    o.text_dim = 0; /* the byte-token path: no "text_emb" */
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_latent_reader_open(&o, &r, &st), 0);
    vf_item *it = NULL;
    VF_CHECK_EQ_INT(vf_latent_reader_next(r, &it, &st), 0);
    VF_CHECK(it && !vf_item_get(it, "text_emb") && vf_item_get(it, "text"));
    vf_item_free(it);
    vf_latent_reader_close(r);
}

VF_TEST(cleanup)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    VF_CHECK(root[0] && system(cmd) == 0);
}

int main(void) { return vf_test_main(); }
