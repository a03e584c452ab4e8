/* cache_cli.c — `vflow cache stat|ls|verify PATH`: look into an LMDB latent cache
 * (format in cache_format.h) without running a graph.
 *
 *   stat PATH            entries, record bytes, map size and file size, latent shapes
 *                        and VAE hashes (from the "__meta__" summary), text embedding
 *                        records (count, width, longest), the entries, batch and
 *                        latent shape of each bucket, reader slots
 *   ls PATH [--limit N]  one line per entry: key, item id, latent shape, caption (and,
 *                        in a cache with text embeddings, a fifth column "L tokens text:<hash>")
 *   verify PATH          decodes every record (codec magic, version, lengths, CRC32C,
 *                        a 4-D f32 "latent"; text records: bf16 (L, D) whose content
 *                        hashes to their key), re-derives each key from the record's
 *                        provenance (or id) and text hash, checks that every referenced
 *                        text record exists and the summary counts; lists every damaged
 *                        key with its reason; exit 1 if any, 0 when clean.
 * Exit codes: 0 ok, 1 verify found damage, 2 usage or a cache that cannot be opened.
 */
#include "cli/cli.h"
#include "formats/cache_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int usage(void)
{
    fprintf(stderr, "usage: vflow cache stat PATH\n"
                    "       vflow cache ls PATH [--limit N]\n"
                    "       vflow cache verify PATH\n");
    return 2;
}

static int fail(vf_status *st)
{
    fprintf(stderr, "vflow cache: %s\n", st->msg);
    return 2;
}

/* ------------------------------------------------------------------ stat */

static void print_hist(const char *title, const vf_json *obj)
{
    int n = vf_json_len(obj);
    if (n == 0) printf("%-10s (none)\n", title);
    for (int i = 0; i < n; i++)
        printf("%-10s %s  %lld\n", i ? "" : title, vf_json_key_at(obj, i),
               (long long)vf_json_as_num(vf_json_at(obj, i)));
}

/* One line per bucket of the summary: name, entries, batch, latent shape. */
static void print_buckets(const vf_json *b)
{
    for (int i = 0; i < vf_json_len(b); i++) {
        const vf_json *e = vf_json_at(b, i);
        int64_t n = vf_json_get_int(e, "entries", 0);
        printf("%-10s %-14s %lld entr%s, batch %lld, latent %s\n", i ? "" : "buckets", vf_json_key_at(b, i),
               (long long)n, n == 1 ? "y" : "ies", (long long)vf_json_get_int(e, "batch", 0),
               vf_json_get_str(e, "latent", "?"));
    }
}

static int cmd_stat(vf_lmdb *db, MDB_txn *txn, vf_status *st)
{
    int rc = 0;
    MDB_stat ms;
    MDB_envinfo info;
    MDB_cursor *cur = NULL;
    vf_json *meta = NULL;
    VF_MDB(st, db, mdb_stat(txn, vf_lmdb_dbi(db), &ms));
    VF_MDB(st, db, mdb_env_info(vf_lmdb_env(db), &info));
    VF_TRY(vf_cache_meta_read(db, txn, &meta, st));
    /* entry count and record bytes by a key/size scan: exact even without a summary */
    int64_t entries = 0, bytes = 0, other = 0, texts = 0, tbytes = 0, clips = 0, cbytes = 0;
    MDB_val k, v;
    VF_MDB(st, db, mdb_cursor_open(txn, vf_lmdb_dbi(db), &cur));
    for (int m = mdb_cursor_get(cur, &k, &v, MDB_FIRST); m != MDB_NOTFOUND; m = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        VF_MDB_RC(st, db, "mdb_cursor_get", m);
        if (vf_cache_is_entry_key(k.mv_data, k.mv_size)) {
            entries++;
            bytes += (int64_t)v.mv_size;
        } else if (vf_cache_is_text_key(k.mv_data, k.mv_size)) {
            texts++;
            tbytes += (int64_t)v.mv_size;
        } else if (vf_cache_is_shared_key(vf_cache_clip, k.mv_data, k.mv_size)) {
            clips++;
            cbytes += (int64_t)v.mv_size;
        } else {
            other++;
        }
    }
    char data[4096];
    struct stat sb;
    snprintf(data, sizeof data, "%s/data.mdb", vf_lmdb_path(db));
    long long fsize = stat(data, &sb) == 0 ? (long long)sb.st_size : -1;
    printf("%-10s %s\n", "cache", vf_lmdb_path(db));
    if (meta)
        printf("%-10s %s v%lld (keys: %s)\n", "format", vf_json_get_str(meta, "format", "?"),
               (long long)vf_json_get_int(meta, "version", -1), vf_json_get_str(meta, "key", "?"));
    else
        printf("%-10s (no \"%s\" summary: not written by latent_cache)\n", "format", VF_CACHE_META_KEY);
    printf("%-10s %lld\n", "entries", (long long)entries);
    if (meta) printf("%-10s %s\n", "cond", vf_cache_cond_name(vf_cache_meta_cond(meta)));
    printf("%-10s %lld (records), %.2f MiB\n", "bytes", (long long)bytes, (double)bytes / 1048576.0);
    if (other > (meta ? 1 : 0)) printf("%-10s %lld keys that are not entries\n", "other", (long long)(other - (meta ? 1 : 0)));
    printf("%-10s %zu (data.mdb %lld bytes, %zu pages of %u in use)\n", "map size", info.me_mapsize, fsize,
           info.me_last_pgno + 1, ms.ms_psize);
    if (meta) {
        print_hist("shapes", vf_json_get(meta, "shapes"));
        print_hist("vae", vf_json_get(meta, "vae"));
        print_buckets(vf_json_get(meta, "buckets"));
        if (vf_json_get_int(meta, "text_dim", 0) || texts)
            printf("%-10s %lld records, %.2f MiB, width %lld, longest %lld, referenced by %lld entries\n", "text", (long long)texts,
                   (double)tbytes / 1048576.0, (long long)vf_json_get_int(meta, "text_dim", 0),
                   (long long)vf_json_get_int(meta, "text_max_len", 0), (long long)vf_json_get_int(meta, "text_entries", 0));
        if (clips)
            printf("%-10s %lld records, %.2f MiB, (%lld, %lld) each\n", "clip", (long long)clips,
                   (double)cbytes / 1048576.0, (long long)vf_json_get_int(meta, "clip_len", 0),
                   (long long)vf_json_get_int(meta, "clip_dim", 0));
        if (vf_json_get_int(meta, "entries", -1) != entries)
            printf("%-10s summary counts %lld entries, the cache holds %lld (run `vflow cache verify`)\n", "warning",
                   (long long)vf_json_get_int(meta, "entries", -1), (long long)entries);
    }
    printf("%-10s %u of %u slots in use\n", "readers", info.me_numreaders, info.me_maxreaders);
fail:
    if (cur) mdb_cursor_close(cur);
    vf_json_free(meta);
    return rc;
}

/* ------------------------------------------------------------------ ls */

static void print_clean(const char *s, size_t max)
{
    for (size_t i = 0; s && s[i] && i < max; i++)
        putchar((unsigned char)s[i] < 0x20 ? ' ' : s[i]);
}

static int cmd_ls(vf_lmdb *db, MDB_txn *txn, int64_t limit, vf_status *st)
{
    int rc = 0;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int64_t n = 0;
    VF_MDB(st, db, mdb_cursor_open(txn, vf_lmdb_dbi(db), &cur));
    printf("key\tid\tshape\tcaption\n");
    for (int m = mdb_cursor_get(cur, &k, &v, MDB_FIRST); m != MDB_NOTFOUND && (limit <= 0 || n < limit);
         m = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        VF_MDB_RC(st, db, "mdb_cursor_get", m);
        if (!vf_cache_is_entry_key(k.mv_data, k.mv_size)) continue;
        n++;
        vf_item *it = NULL;
        vf_status e;
        vf_status_clear(&e);
        printf("%.32s\t", (const char *)k.mv_data);
        if (vf_cache_record_decode(vf_lmdb_path(db), k.mv_data, k.mv_size, v.mv_data, v.mv_size, &it, &e) != 0) {
            printf("(damaged: run `vflow cache verify`)\n");
            continue;
        }
        char shape[96];
        vf_cache_shape_key(it, shape, sizeof shape);
        print_clean(vf_item_id(it), 400);
        printf("\t%s\t", shape);
        print_clean(vf_item_str(it, "caption"), 200);
        double tl;
        if (vf_item_str(it, "text_key") && vf_item_num(it, "text_tokens", &tl) == 0)
            printf("\t%lld tokens text:%s", (long long)tl, vf_item_str(it, "text_key"));
        putchar('\n');
        vf_item_free(it);
    }
fail:
    if (cur) mdb_cursor_close(cur);
    return rc;
}

/* ------------------------------------------------------------------ verify */

static int cmd_verify(vf_lmdb *db, MDB_txn *txn, int *damaged, vf_status *st)
{
    int rc = 0;
    MDB_cursor *cur = NULL;
    vf_json *meta = NULL, *count = NULL;
    MDB_val k, v;
    int64_t n = 0, bad = 0;
    vf_status ms;
    vf_status_clear(&ms);
    if (vf_cache_meta_read(db, txn, &meta, &ms) != 0) {
        printf("%s\t%s\n", VF_CACHE_META_KEY, ms.msg);
        bad++;
    }
    vf_cache_keying keying = meta ? vf_cache_meta_keying(meta) : VF_CACHE_KEY_PROVENANCE;
    if (!(count = vf_cache_meta_new(keying))) VF_FAIL(st, VF_ENOMEM, "out of memory");
    VF_MDB(st, db, mdb_cursor_open(txn, vf_lmdb_dbi(db), &cur));
    for (int m = mdb_cursor_get(cur, &k, &v, MDB_FIRST); m != MDB_NOTFOUND; m = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        VF_MDB_RC(st, db, "mdb_cursor_get", m);
        if (k.mv_size == strlen(VF_CACHE_META_KEY) && !memcmp(k.mv_data, VF_CACHE_META_KEY, k.mv_size)) continue;
        n++;
        const vf_cache_shared *sk = vf_cache_is_text_key(k.mv_data, k.mv_size)                   ? vf_cache_text
                                    : vf_cache_is_shared_key(vf_cache_clip, k.mv_data, k.mv_size) ? vf_cache_clip
                                                                                                  : NULL;
        if (sk) {
            vf_item *t = NULL;
            vf_status e;
            vf_status_clear(&e);
            if (vf_cache_shared_decode(sk, vf_lmdb_path(db), k.mv_data, k.mv_size, v.mv_data, v.mv_size, &t, &e) != 0) {
                printf("%.*s\t%s\n", VF_CACHE_TEXT_KEY_LEN, (const char *)k.mv_data, e.msg);
                bad++;
                continue;
            }
            const vf_tensor *te = vf_item_get(t, sk->tensor);
            vf_status_clear(&e);
            if ((sk == vf_cache_text ? vf_cache_meta_count_text : vf_cache_meta_count_clip)(
                    count, te->shape[0], te->shape[1], (int64_t)v.mv_size, &e) != 0) {
                printf("%.*s\t%s\n", VF_CACHE_TEXT_KEY_LEN, (const char *)k.mv_data, e.msg);
                bad++;
            }
            vf_item_free(t);
            continue;
        }
        if (!vf_cache_is_entry_key(k.mv_data, k.mv_size)) {
            printf("%.*s\tnot an entry key (32 lowercase hex chars)\n", (int)(k.mv_size > 64 ? 64 : k.mv_size),
                   (const char *)k.mv_data);
            bad++;
            continue;
        }
        vf_item *it = NULL;
        vf_status e;
        vf_status_clear(&e);
        if (vf_cache_record_decode(vf_lmdb_path(db), k.mv_data, k.mv_size, v.mv_data, v.mv_size, &it, &e) != 0) {
            printf("%.32s\t%s\n", (const char *)k.mv_data, e.msg);
            bad++;
            continue;
        }
        char want[VF_CACHE_KEY_LEN + 1], shape[96];
        vf_status_clear(&e);
        if (vf_cache_key_of_item(it, keying, want, &e) != 0) {
            printf("%.32s\t%s\n", (const char *)k.mv_data, e.msg);
            bad++;
        } else if (memcmp(want, k.mv_data, VF_CACHE_KEY_LEN) != 0) {
            printf("%.32s\trecord of item \"%s\" belongs under key %s (%s keys)\n", (const char *)k.mv_data,
                   vf_item_id(it), want, vf_cache_keying_name(keying));
            bad++;
        } else {
            vf_cache_shape_key(it, shape, sizeof shape);
            const char *vae = vf_item_str(it, "vae"), *th = vf_item_str(it, "text_key");
            VF_TRY(vf_cache_meta_count(count, shape, vae, (int64_t)v.mv_size, st));
            vf_status_clear(&e);
            if (vf_cache_meta_count_cond(count, vf_cache_item_cond(it), &e) != 0) {
                printf("%.32s\t%s\n", (const char *)k.mv_data, e.msg);
                bad++;
            }
            const char *ck = vf_item_str(it, vf_cache_clip->ref);
            char ckey[VF_CACHE_TEXT_KEY_LEN + 1];
            MDB_val cv;
            snprintf(ckey, sizeof ckey, VF_CACHE_CLIP_PREFIX "%s", ck ? ck : "");
            vf_status_clear(&e);
            if (ck && vf_lmdb_get(db, txn, ckey, strlen(ckey), &cv, &e) != 0) {
                printf("%.32s\treferences clip record \"%s\", which is missing\n", (const char *)k.mv_data, ckey);
                bad++;
            }
            char bucket[VF_CACHE_BUCKET_MAX];
            int64_t bbatch;
            vf_status_clear(&e);
            if (vf_cache_item_bucket(it, bucket, &bbatch, &e) != 0 ||
                (bucket[0] && vf_cache_meta_count_bucket(count, bucket, bbatch, shape, &e) != 0)) {
                if (e.code == VF_ENOMEM) { vf_item_free(it); VF_FAIL(st, VF_ENOMEM, "%s", e.msg); }
                printf("%.32s\t%s\n", (const char *)k.mv_data, e.msg);
                bad++;
            }
            if (th) {
                char tkey[VF_CACHE_TEXT_KEY_LEN + 1];
                MDB_val tv;
                snprintf(tkey, sizeof tkey, VF_CACHE_TEXT_PREFIX "%s", th);
                vf_status_clear(&e);
                if (vf_lmdb_get(db, txn, tkey, strlen(tkey), &tv, &e) != 0) {
                    printf("%.32s\treferences text record \"%s\", which is missing\n", (const char *)k.mv_data, tkey);
                    bad++;
                }
                VF_TRY(vf_cache_meta_count_text_entry(count, st));
            }
        }
        vf_item_free(it);
    }
    /* the summary must count exactly the good records */
    if (meta) {
        static const char *const fields[] = {"entries", "bytes", "shapes", "vae", "texts", "text_bytes",
                                             "text_dim", "text_max_len", "text_entries", "buckets", "cond",
                                             "clips", "clip_bytes", "clip_dim", "clip_len"};
        for (int i = 0; i < 15; i++)
            if (!vf_json_equal(vf_json_get(meta, fields[i]), vf_json_get(count, fields[i]))) {
                char *a = vf_json_emit(vf_json_get(meta, fields[i]), true, 0);
                char *b = vf_json_emit(vf_json_get(count, fields[i]), true, 0);
                printf("%s\tsummary \"%s\" is %s, the records give %s\n", VF_CACHE_META_KEY, fields[i], a ? a : "?",
                       b ? b : "?");
                free(a);
                free(b);
                bad++;
            }
    } else if (n > 0) {
        printf("%s\tmissing (entries were not written by latent_cache)\n", VF_CACHE_META_KEY);
        bad++;
    }
    printf("%s: %lld records checked, %lld problems\n", vf_lmdb_path(db), (long long)n, (long long)bad);
    *damaged = bad > 0;
fail:
    if (cur) mdb_cursor_close(cur);
    vf_json_free(meta);
    vf_json_free(count);
    return rc;
}

int vf_cache_cli(int argc, char **argv)
{
    if (argc < 3) return usage();
    const char *cmd = argv[1], *path = argv[2];
    int64_t limit = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--limit") && i + 1 < argc && !strcmp(cmd, "ls")) {
            char *end;
            limit = strtoll(argv[++i], &end, 10);
            if (*end || limit < 0) return usage();
        } else {
            return usage();
        }
    }
    if (strcmp(cmd, "stat") && strcmp(cmd, "ls") && strcmp(cmd, "verify")) return usage();
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *db = NULL;
    MDB_txn *txn = NULL;
    vf_lmdb_opts ro = {.readonly = true};
    int rc = vf_lmdb_open(path, &ro, &db, &st), damaged = 0;
    if (rc == 0) rc = vf_lmdb_read_begin(db, &txn, &st);
    if (rc == 0) {
        if (!strcmp(cmd, "stat")) rc = cmd_stat(db, txn, &st);
        else if (!strcmp(cmd, "ls")) rc = cmd_ls(db, txn, limit, &st);
        else rc = cmd_verify(db, txn, &damaged, &st);
    }
    if (txn) mdb_txn_abort(txn);
    vf_lmdb_close(db);
    fflush(stdout);
    if (rc) return fail(&st);
    return damaged ? 1 : 0;
}
