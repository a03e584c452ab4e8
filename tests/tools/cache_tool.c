/* cache_tool.c — drives the latent cache writer/reader (stages/latent_cache.h,
 * stages/reader/latent_reader.h) from scripts, without a graph: the Python cross-check
 * (tests/reference/test_latent_cache_py.py) and the kill tests use it.
 *
 *   cache_tool write PATH FROM TO [--commit K] [--map BYTES] [--shape z,T,h,w]
 *                     [--vae NAME] [--sleep-ms MS] [--text D] [--text-rows R] [--y]
 *       writes items FROM..TO-1 (item i: id "vid<i/3>.mp4#<i%3>", source "src<i/3>",
 *       clip i%3, transform "frames=5;size=32x24", caption "clip <i>", latent element j
 *       = i*1000 + j; with --text D also "text_emb" bf16 (2 + c, D), c = i % 3, element
 *       (r, k) = c + 1 + r/8 - k/64, exact in bf16; --text-rows R: R rows each; --y: also
 *       "y" of the latent's shape, element j = -(i*1000 + j): an image-to-video entry);
 *       prints "written W skipped S texts X growths G map M"; --bucket WxHxF gives every
 *       item metadata "bucket" and the latent (z, (F-1)/4+1, H/8, W/8) (z from --shape,
 *       else 4); --bucket-batch B adds metadata "bucket_batch" B
 *   cache_tool keys FROM TO [--vae NAME] [--text D] [--bucket WxHxF]  the keys those items get
 *   cache_tool key SOURCE CLIP TRANSFORM VAE one key
 *   cache_tool idkeys FROM TO                keys of item ids "FROM" … "TO-1" (key = "id")
 *   cache_tool read PATH [--batch B] [--seed S] [--epochs E] [--shard k/K]
 *                     [--cursor C] [--max N] [--skip-bad] [--keep-last]
 *                     [--text-len L] [--text-dim D] [--dump DIR] [--buckets WxHxF:B,…]
 *                     [--cond text|concat|concat+clip|first_frame] [--image L,D]
 *       one line per batch: "<cursor>\t<keys>", then "\t<bucket>" when the batch has one;
 *       --buckets declares the reader's buckets; --dump writes each batch's tensors
 *       (latent, text, text_len, text_emb when the cache has embeddings, y with --cond
 *       concat, also clip_emb (L, D) with concat+clip) to
 *       DIR/batch_<n>.safetensors, metadata "keys"
 *   cache_tool cli ARGS…                     vflow's `cache` subcommand (cache_cli.c)
 */
#include "stages/latent_cache.h"
#include "stages/reader/latent_reader.h"
#include "cli/cli.h"
#include "formats/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *opt(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}
static bool flag(int argc, char **argv, const char *name)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], name)) return true;
    return false;
}

static int text_rows; /* --text-rows R: every embedding R rows (else 2 + c) */
static const char *bucket;  /* --bucket WxHxF: metadata "bucket" of every item written */
static int bucket_batch;    /* --bucket-batch B: metadata "bucket_batch" */
static bool with_y;         /* --y: "y" (image-to-video) beside the latent */

static vf_tensor *make_text(int i, int D, vf_status *st)
{
    int c = i % 3, rows = text_rows > 0 ? text_rows : 2 + c;
    int64_t shape[2] = {rows, D};
    vf_tensor *t = vf_tensor_new(VF_DTYPE_BF16, 2, shape, st);
    if (!t) return NULL;
    uint16_t *d = t->data;
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < D; k++) d[r * D + k] = vf_f32_to_bf16((float)(c + 1) + r / 8.0f - k / 64.0f);
    return t;
}

static vf_item *make_item(int i, const int64_t shape[4], const char *vae, int text_dim, vf_status *st)
{
    char id[64], src[64], cap[64];
    snprintf(id, sizeof id, "vid%d.mp4#%d", i / 3, i % 3);
    snprintf(src, sizeof src, "src%d", i / 3);
    snprintf(cap, sizeof cap, "clip %d", i);
    vf_item *it = vf_item_new(id, st);
    vf_tensor *t = vf_tensor_new(VF_DTYPE_F32, 4, shape, st);
    if (!it || !t) return NULL;
    float *d = t->data;
    for (int64_t j = 0; j < vf_tensor_numel(t); j++) d[j] = (float)(i * 1000 + j);
    vf_item_put(it, "latent", t, st);
    vf_tensor *y = with_y ? vf_tensor_new(VF_DTYPE_F32, 4, shape, st) : NULL;
    for (int64_t j = 0; y && j < vf_tensor_numel(y); j++) ((float *)y->data)[j] = -(float)(i * 1000 + j);
    if (y) vf_item_put(it, "y", y, st);
    vf_item_set_str(it, "source", src, st);
    vf_item_set_num(it, "clip", i % 3, st);
    vf_item_set_str(it, "transform", "frames=5;size=32x24", st);
    vf_item_set_str(it, "vae", vae, st);
    vf_item_set_str(it, "caption", cap, st);
    if (text_dim > 0) vf_item_put(it, "text_emb", make_text(i, text_dim, st), st);
    if (bucket) vf_item_set_str(it, "bucket", bucket, st);
    if (bucket_batch) vf_item_set_num(it, "bucket_batch", bucket_batch, st);
    return it;
}

static int die(vf_status *st)
{
    fprintf(stderr, "cache_tool: %s\n", st->msg);
    return 1;
}

int main(int argc, char **argv)
{
    vf_status st;
    vf_status_clear(&st);
    if (argc < 2) return 2;
    const char *cmd = argv[1];
    text_rows = atoi(opt(argc, argv, "--text-rows", "0"));
    if (!strcmp(cmd, "cli")) return vf_cache_cli(argc - 1, argv + 1);
    if (!strcmp(cmd, "key") && argc == 6) {
        char k[33];
        vf_cache_key(argv[2], atoll(argv[3]), argv[4], argv[5], k);
        printf("%s\n", k);
        return 0;
    }
    if (!strcmp(cmd, "idkeys") && argc == 4) {
        for (long i = atol(argv[2]); i < atol(argv[3]); i++) {
            char id[32], k[33];
            snprintf(id, sizeof id, "%ld", i);
            vf_cache_key_of_id(id, k);
            printf("%s\n", k);
        }
        return 0;
    }
    if (!strcmp(cmd, "keys") && argc >= 4) {
        const char *vae = opt(argc, argv, "--vae", "vaeA");
        bucket = opt(argc, argv, "--bucket", NULL); /* a bucket is part of the key */
        int64_t shape[4] = {1, 1, 1, 1};
        for (int i = atoi(argv[2]); i < atoi(argv[3]); i++) {
            vf_item *it = make_item(i, shape, vae, atoi(opt(argc, argv, "--text", "0")), &st);
            char k[33];
            if (!it || vf_cache_key_of_item(it, VF_CACHE_KEY_PROVENANCE, k, &st)) return die(&st);
            printf("%s\n", k);
            vf_item_free(it);
        }
        return 0;
    }
    if (!strcmp(cmd, "write") && argc >= 5) {
        int64_t shape[4] = {4, 2, 8, 8};
        const char *sh = opt(argc, argv, "--shape", NULL);
        if (sh && sscanf(sh, "%ld,%ld,%ld,%ld", &shape[0], &shape[1], &shape[2], &shape[3]) != 4) return 2;
        bucket = opt(argc, argv, "--bucket", NULL);
        bucket_batch = atoi(opt(argc, argv, "--bucket-batch", "0"));
        with_y = flag(argc, argv, "--y");
        int bw, bh, bf;
        if (bucket) {
            if (sscanf(bucket, "%dx%dx%d", &bw, &bh, &bf) != 3) return 2;
            shape[1] = (bf - 1) / 4 + 1, shape[2] = bh / 8, shape[3] = bw / 8;
        }
        vf_latent_writer_opts o = {
            .path = argv[2],
            .commit_every = atoi(opt(argc, argv, "--commit", "8")),
            .map_size = (size_t)atoll(opt(argc, argv, "--map", "0")),
        };
        const char *vae = opt(argc, argv, "--vae", "vaeA");
        long sleep_ms = atol(opt(argc, argv, "--sleep-ms", "0"));
        vf_latent_writer *w = NULL;
        if (vf_latent_writer_open(&o, &w, &st)) return die(&st);
        for (int i = atoi(argv[3]); i < atoi(argv[4]); i++) {
            bool skipped;
            vf_item *it = make_item(i, shape, vae, atoi(opt(argc, argv, "--text", "0")), &st);
            if (!it || vf_latent_writer_add(w, it, &skipped, &st)) return die(&st);
            if (sleep_ms) {
                struct timespec d = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000};
                nanosleep(&d, NULL);
            }
        }
        if (vf_latent_writer_flush(w, &st)) return die(&st);
        vf_latent_writer_stats s;
        vf_latent_writer_get_stats(w, &s);
        printf("written %lld skipped %lld texts %lld growths %d map %zu\n", (long long)s.written,
               (long long)s.skipped, (long long)s.texts, s.growths, s.map_size);
        vf_latent_writer_close(w);
        return 0;
    }
    if (!strcmp(cmd, "read") && argc >= 3) {
        int k = 0, K = 1;
        sscanf(opt(argc, argv, "--shard", "0/1"), "%d/%d", &k, &K);
        vf_latent_reader_opts o = {
            .path = argv[2],
            .batch = atoi(opt(argc, argv, "--batch", "4")),
            .seed = strtoull(opt(argc, argv, "--seed", "0"), NULL, 10),
            .epochs = atoll(opt(argc, argv, "--epochs", "1")),
            .shard = k,
            .nshards = K,
            .drop_last = !flag(argc, argv, "--keep-last"),
            .text_len = atoi(opt(argc, argv, "--text-len", "16")),
            .text_dim = atoll(opt(argc, argv, "--text-dim", "0")),
            .cursor = opt(argc, argv, "--cursor", NULL),
            .skip_bad = flag(argc, argv, "--skip-bad"),
        };
        if (vf_cache_cond_parse(opt(argc, argv, "--cond", "text"), &o.cond)) return 2;
        if (sscanf(opt(argc, argv, "--image", "257,1280"), "%ld,%ld", &o.image_len, &o.image_dim) != 2) return 2;
        vf_latent_bucket_decl decl[64];
        const char *bl = opt(argc, argv, "--buckets", NULL);
        for (int n = 0, at = 0; bl && bl[at] && o.nbuckets < 64; at += n + (bl[at + n] == ',')) {
            vf_latent_bucket_decl *d = &decl[o.nbuckets++];
            if (sscanf(bl + at, "%dx%dx%d:%d%n", &d->w, &d->h, &d->frames, &d->batch, &n) != 4) return 2;
        }
        o.buckets = decl;
        long max = atol(opt(argc, argv, "--max", "-1"));
        vf_latent_reader *r = NULL;
        if (vf_latent_reader_open(&o, &r, &st)) return die(&st);
        for (long b = 0; max < 0 || b < max; b++) {
            vf_item *it = NULL;
            int rc = vf_latent_reader_next(r, &it, &st);
            if (rc == VF_EOS) break;
            if (rc) return die(&st);
            const char *bk = vf_item_str(it, "bucket");
            printf("%s\t%s%s%s\n", vf_item_str(it, "cursor"), vf_item_str(it, "keys"), bk ? "\t" : "", bk ? bk : "");
            const char *dump = opt(argc, argv, "--dump", NULL);
            if (dump) {
                char f[4200];
                snprintf(f, sizeof f, "%s/batch_%ld.safetensors", dump, b);
                vf_st_writer *w = vf_st_writer_new(&st);
                static const char *const names[] = {"latent", "text", "text_len", "text_emb", "y", "clip_emb"};
                for (int i = 0; w && i < 6; i++)
                    if (vf_item_get(it, names[i]) && vf_st_writer_add_tensor(w, names[i], vf_item_get(it, names[i]), &st))
                        return die(&st);
                if (!w || vf_st_writer_meta(w, "keys", vf_item_str(it, "keys"), &st) ||
                    vf_st_writer_save(w, f, 0, NULL, &st))
                    return die(&st);
                vf_st_writer_free(w);
            }
            vf_item_free(it);
        }
        vf_latent_reader_close(r);
        return 0;
    }
    fprintf(stderr, "cache_tool: bad command (see the comment at the top of cache_tool.c)\n");
    return 2;
}
