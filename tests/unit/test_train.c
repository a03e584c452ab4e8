/* test_train.c — the parts of the training stages that need no running graph:
 *
 *  - ownership of the flat vector: shard slices tile it on norm-block boundaries for
 *    every S; the norm block depends on the parameter count only;
 *  - the 1F1B order: every micro-batch forward then backward, warmup counts, backwards in
 *    order, the in-flight bound, and a simulation of P partitions exchanging over queues
 *    that must finish (no deadlock) with at most M items on any edge;
 *  - the learning-rate schedule (warmup, cosine end points, constant), micro-batch cuts,
 *    reader-cursor order;
 *  - checkpoints (stages/train/checkpoint_write.c, formats/ckpt.c): files, manifest CRCs,
 *    `latest`, keep-K pruning, an injected write failure leaving the previous ones intact
 *    and no .tmp, a damaged newest one skipped with a warning, state.json contents,
 *    model.safetensors by name equal to the snapshots, moments and master slices read
 *    back under another shard count, and the config check naming every differing key;
 *  - a sharded model (model_shard_bytes below the model's bytes): shards of at most the
 *    limit (a larger tensor alone), the index mapping every tensor once with total_size,
 *    each shard's metadata, master slices read back bit for bit, one file at or above the
 *    limit and with 0, and a shard the manifest does not list failing the check.
 */
#include "tests/vf_test.h"

#include "formats/ckpt.h"
#include "formats/lr_cursor.h"
#include "formats/st_sharded.h"
#include "runtime/philox.h"
#include "stages/train/adamw_io.h"
#include "stages/train/checkpoint.h"
#include "stages/train/dit_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ ownership */

VF_TEST(shard_slices_tile_the_vector_on_norm_blocks)
{
    const int64_t totals[] = {328848, 5000, 4096 * 7 + 3, 10000000, 1};
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++) {
        int64_t total = totals[i], block = vf_train_norm_block(total);
        int64_t nblk = (total + block - 1) / block;
        VF_CHECK(block >= 4096 && (block & (block - 1)) == 0);
        VF_CHECK(nblk <= 4097);
        for (int S = 1; S <= 8 && S <= nblk; S++) {
            int64_t next = 0, nextb = 0;
            for (int k = 0; k < S; k++) {
                int64_t lo, hi, b0, b1;
                vf_train_shard_range(total, block, S, k, &lo, &hi, &b0, &b1);
                VF_CHECK_MSG(lo == next && b0 == nextb, "total %lld S %d k %d", (long long)total, S, k);
                VF_CHECK(lo == b0 * block);
                VF_CHECK(hi == (b1 * block < total ? b1 * block : total));
                VF_CHECK(hi > lo);
                next = hi, nextb = b1;
            }
            VF_CHECK(next == total && nextb == nblk);
        }
    }
}

/* ------------------------------------------------------------------ 1F1B */

VF_TEST(one_f_one_b_order)
{
    vf_1f1b_op ops[64];
    for (int P = 1; P <= 5; P++)
        for (int M = 1; M <= 8; M++)
            for (int p = 0; p < P; p++) {
                int nsv = vf_train_1f1b(P, p, M, ops);
                int warm = P - p - 1 < M ? P - p - 1 : M, nf = 0, nb = 0, flight = 0, most = 0;
                for (int k = 0; k < 2 * M; k++) {
                    if (k < warm) VF_CHECK(ops[k].fwd);
                    if (ops[k].fwd) {
                        VF_CHECK_EQ_INT(ops[k].mb, nf);
                        nf++, flight++;
                    } else {
                        VF_CHECK_EQ_INT(ops[k].mb, nb);
                        VF_CHECK(nb < nf);
                        nb++, flight--;
                    }
                    if (flight > most) most = flight;
                }
                VF_CHECK(nf == M && nb == M);
                VF_CHECK_MSG(most == nsv, "P %d M %d p %d: in flight %d, reported %d", P, M, p, most, nsv);
                VF_CHECK(nsv <= P - p && nsv <= M);
            }
}

/* P partitions, each executing its ops in order when their input is there: activations
 * p -> p+1 and gradients p+1 -> p as queues. Must finish, with at most M items queued. */
VF_TEST(one_f_one_b_pipeline_finishes)
{
    for (int P = 1; P <= 6; P++)
        for (int M = 1; M <= 8; M++) {
            vf_1f1b_op ops[8][16];
            int pc[8] = {0}, act[8] = {0}, grad[8] = {0}, most = 0;
            for (int p = 0; p < P; p++) vf_train_1f1b(P, p, M, ops[p]);
            bool moved = true;
            while (moved) {
                moved = false;
                for (int p = 0; p < P; p++) {
                    if (pc[p] == 2 * M) continue;
                    vf_1f1b_op op = ops[p][pc[p]];
                    if (op.fwd) {
                        if (p > 0 && act[p - 1] == 0) continue;
                        if (p > 0) act[p - 1]--;
                        if (p < P - 1) act[p]++;
                    } else {
                        if (p < P - 1 && grad[p] == 0) continue;
                        if (p < P - 1) grad[p]--;
                        if (p > 0) grad[p - 1]++;
                    }
                    pc[p]++;
                    moved = true;
                    for (int q = 0; q < P; q++) {
                        if (act[q] > most) most = act[q];
                        if (grad[q] > most) most = grad[q];
                    }
                }
            }
            for (int p = 0; p < P; p++) VF_CHECK_MSG(pc[p] == 2 * M, "P %d M %d: partition %d stuck at op %d", P, M, p, pc[p]);
            VF_CHECK(most <= M);
        }
}

/* ------------------------------------------------------------------ schedules */

VF_TEST(lr_schedule)
{
    vf_lr_sched c = {1e-3, 1e-4, 10, 110, true};
    VF_CHECK_NEAR(vf_train_lr(&c, 1), 1e-4, 1e-12);
    VF_CHECK_NEAR(vf_train_lr(&c, 5), 5e-4, 1e-12);
    VF_CHECK_NEAR(vf_train_lr(&c, 10), 1e-3, 1e-12);
    VF_CHECK_NEAR(vf_train_lr(&c, 60), 5.5e-4, 1e-12);
    VF_CHECK_NEAR(vf_train_lr(&c, 110), 1e-4, 1e-12);
    VF_CHECK_NEAR(vf_train_lr(&c, 500), 1e-4, 1e-12);
    VF_CHECK(vf_train_lr(&c, 30) > vf_train_lr(&c, 31));
    vf_lr_sched k = {2e-3, 0, 0, 0, false};
    VF_CHECK(vf_train_lr(&k, 1) == 2e-3 && vf_train_lr(&k, 1000) == 2e-3);
}

VF_TEST(micro_batch_cuts_and_cursor_order)
{
    for (int B = 1; B <= 17; B++)
        for (int M = 1; M <= B; M++) {
            int next = 0, lo = B, hi = 0;
            for (int m = 0; m < M; m++) {
                int f, n;
                vf_train_mb_range(B, M, m, &f, &n);
                VF_CHECK(f == next && n >= 1);
                next = f + n;
                if (n < lo) lo = n;
                if (n > hi) hi = n;
            }
            VF_CHECK(next == B && hi - lo <= 1);
        }
    int c = 9;
    VF_CHECK(vf_lr_cursor_cmp("v1;epoch=0;pos=8;n=32", "v1;epoch=0;pos=12;n=32", &c) == 0 && c < 0);
    VF_CHECK(vf_lr_cursor_cmp("v1;epoch=1;pos=0;n=32", "v1;epoch=0;pos=28;n=32", &c) == 0 && c > 0);
    VF_CHECK(vf_lr_cursor_cmp("v1;epoch=2;pos=4;x", "v1;epoch=2;pos=4;y", &c) == 0 && c == 0);
    VF_CHECK(vf_lr_cursor_cmp("garbage", "v1;epoch=2;pos=4", &c) < 0);
    VF_CHECK(vf_lr_cursor_same_stream("v1;epoch=0;pos=8;n=32;seed=0;shard=0/1", "v1;epoch=3;pos=12;n=32;seed=0;shard=0/1"));
    VF_CHECK(!vf_lr_cursor_same_stream("v1;epoch=0;pos=8;n=32;seed=0;shard=0/1", "v1;epoch=0;pos=8;n=33;seed=0;shard=0/1"));
    VF_CHECK(!vf_lr_cursor_same_stream("v1;epoch=0;pos=8;n=32;seed=0;shard=0/1", "v1;epoch=0;pos=8;n=32;seed=0;shard=1/2"));
}

/* ------------------------------------------------------------------ checkpoints */

typedef struct fixture {
    vf_dit_layout *l;
    float *master, *m, *v; /* whole flat vectors */
    char dir[256];
} fixture;

static void fixture_init(fixture *f)
{
    vf_dit_config c;
    VF_ASSERT(vf_dit_preset("tiny", &c, NULL) == 0);
    VF_ASSERT(vf_dit_layout_new(&c, &f->l, NULL) == 0);
    int64_t n = f->l->total;
    f->master = malloc(sizeof(float) * (size_t)n);
    f->m = malloc(sizeof(float) * (size_t)n);
    f->v = malloc(sizeof(float) * (size_t)n);
    vf_rng r;
    vf_rng_init(&r, 5, 0, 0, VF_RNG_TEST);
    vf_rng_normal(&r, 0, n, f->master);
    vf_rng_normal(&r, n, n, f->m);
    vf_rng_uniform(&r, 2 * (uint64_t)n, n, f->v);
    snprintf(f->dir, sizeof f->dir, "/tmp/vf_test_train.%d", (int)getpid());
}

static void fixture_fini(fixture *f)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    VF_ASSERT(system(cmd) == 0);
    free(f->master), free(f->m), free(f->v);
    vf_dit_layout_free(f->l);
}

/* Snapshot items of S shards at `step`, values shifted by step so steps differ. */
static void make_snaps(const fixture *f, int S, int64_t step, vf_item **snaps)
{
    int64_t total = f->l->total, block = vf_train_norm_block(total);
    for (int k = 0; k < S; k++) {
        int64_t lo, hi, b0, b1;
        vf_train_shard_range(total, block, S, k, &lo, &hi, &b0, &b1);
        int64_t n = hi - lo;
        vf_item *it = vf_item_new("snap", NULL);
        const float *src[3] = {f->master, f->m, f->v};
        const char *names[3] = {"master", "exp_avg", "exp_avg_sq"};
        for (int i = 0; i < 3; i++) {
            vf_tensor *t = vf_tensor_new(VF_DTYPE_F32, 1, &n, NULL);
            for (int64_t j = 0; j < n; j++) ((float *)t->data)[j] = src[i][lo + j] + (float)step;
            vf_item_put(it, names[i], t, NULL);
        }
        vf_item_set_num(it, "step", (double)step, NULL);
        vf_item_set_num(it, "shard", k, NULL);
        vf_item_set_num(it, "off", (double)lo, NULL);
        vf_item_set_num(it, "n", (double)n, NULL);
        vf_item_set_num(it, "lr", 1e-3, NULL);
        if (k == 0) {
            vf_item_set_str(it, "config", "{\"model.dim\":64,\"optim.lr\":0.001,\"train.seed\":7}", NULL);
            vf_item_set_str(it, "cursors", "[\"v1;epoch=0;pos=8;n=32;seed=0;shard=0/1\"]", NULL);
            vf_item_set_num(it, "loss", 0.5, NULL);
        }
        snaps[k] = it;
    }
}

static int write_step_sharded(const fixture *f, int S, int64_t step, int keep, int64_t shard_bytes, bool inject,
                              vf_status *st)
{
    vf_item *snaps[8];
    make_snaps(f, S, step, snaps);
    vf_ckpt_write_stats ws;
    int rc = vf_ckpt_write_step(f->dir, step, snaps, S, f->l, keep, shard_bytes, inject, &ws, st);
    for (int k = 0; k < S; k++) vf_item_free(snaps[k]);
    return rc;
}

static int write_step(const fixture *f, int S, int64_t step, int keep, bool inject, vf_status *st)
{
    return write_step_sharded(f, S, step, keep, 0, inject, st);
}

static bool exists(const char *dir, const char *name)
{
    char p[512];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

static int nwarn;
static void count_warn(void *user, const char *msg)
{
    (void)user;
    nwarn++;
    VF_CHECK(strstr(msg, "damaged") != NULL);
}

VF_TEST(checkpoint_commit_keep_fail_damage_and_read_back)
{
    fixture f;
    fixture_init(&f);
    vf_status st = {0};
    int64_t total = f.l->total;
    for (int64_t step = 2; step <= 6; step += 2) VF_CHECK_MSG(write_step(&f, 3, step, 2, false, &st) == 0, "%s", st.msg);
    VF_CHECK(!exists(f.dir, "step-2") && exists(f.dir, "step-4") && exists(f.dir, "step-6"));
    char lp[300], buf[64] = "";
    snprintf(lp, sizeof lp, "%s/latest", f.dir);
    FILE *fp = fopen(lp, "r");
    VF_CHECK(fp && fgets(buf, sizeof buf, fp));
    if (fp) fclose(fp);
    VF_CHECK_STR(buf, "step-6\n");
    VF_CHECK(exists(f.dir, "step-6/optimizer-02-of-03.safetensors") && exists(f.dir, "step-6/manifest.json"));

    /* a failed commit leaves no trace and the previous ones intact */
    vf_status_clear(&st);
    VF_CHECK(write_step(&f, 3, 8, 2, true, &st) == VF_EIO);
    VF_CHECK(strstr(st.msg, "injected") != NULL);
    VF_CHECK(!exists(f.dir, "step-8") && !exists(f.dir, "step-8.tmp") && exists(f.dir, "step-4"));
    vf_ckpt ck;
    vf_status_clear(&st);
    VF_CHECK(vf_ckpt_find(f.dir, NULL, NULL, &ck, &st) == 0 && ck.step == 6);

    /* state.json */
    VF_CHECK(vf_json_get_int(ck.state, "step", -1) == 6);
    const vf_json *cur = vf_json_at(vf_json_get(ck.state, "cursors"), 0);
    VF_CHECK(cur && cur->type == VF_JSON_STR && strcmp(cur->s, "v1;epoch=0;pos=8;n=32;seed=0;shard=0/1") == 0);
    VF_CHECK(vf_json_get_int(vf_json_get(ck.state, "config"), "train.seed", -1) == 7);
    char hash[17];
    vf_ckpt_config_hash(vf_json_get(ck.state, "config"), hash);
    VF_CHECK_STR(vf_json_get_str(ck.state, "config_hash", ""), hash);

    /* model.safetensors by name == the snapshots' masters */
    char mp[4400];
    snprintf(mp, sizeof mp, "%s/model.safetensors", ck.path);
    vf_st_file *sf = NULL;
    float *back = malloc(sizeof(float) * (size_t)total);
    VF_CHECK(vf_st_open(mp, &sf, &st) == 0);
    VF_CHECK(vf_st_count(sf) == vf_dit_layout_count(f.l));
    VF_CHECK(vf_dit_st_load(sf, f.l, back, 0, total, &st) == 0);
    int bad = 0;
    for (int64_t i = 0; i < total; i++) bad += back[i] != f.master[i] + 6.0f;
    VF_CHECK_EQ_INT(bad, 0);
    vf_st_close(sf);

    /* slices under another shard count: S = 2, and a range cutting tensors */
    int64_t block = vf_train_norm_block(total);
    float *m = malloc(sizeof(float) * (size_t)total), *v = malloc(sizeof(float) * (size_t)total);
    for (int k = 0; k < 2; k++) {
        int64_t lo, hi, b0, b1;
        vf_train_shard_range(total, block, 2, k, &lo, &hi, &b0, &b1);
        VF_CHECK(vf_ckpt_read_moments(ck.path, lo, hi, m + lo, v + lo, &st) == 0);
        VF_CHECK(vf_adamw_load_master(ck.path, f.l, lo, hi, back + lo, &st) == 0);
    }
    bad = 0;
    for (int64_t i = 0; i < total; i++)
        bad += m[i] != f.m[i] + 6.0f || v[i] != f.v[i] + 6.0f || back[i] != f.master[i] + 6.0f;
    VF_CHECK_EQ_INT(bad, 0);
    VF_CHECK(vf_adamw_load_master(ck.path, f.l, 777, 12345, back, &st) == 0 && back[0] == f.master[777] + 6.0f);
    free(m), free(v), free(back);
    vf_ckpt_fini(&ck);

    /* the newest damaged: skipped loudly for the previous one */
    char fp6[300];
    snprintf(fp6, sizeof fp6, "%s/step-6/optimizer-01-of-03.safetensors", f.dir);
    FILE *w = fopen(fp6, "r+b");
    VF_CHECK(w != NULL);
    if (w) {
        fseek(w, 200, SEEK_SET);
        int ch = fgetc(w);
        fseek(w, 200, SEEK_SET);
        fputc(ch ^ 0x40, w);
        fclose(w);
    }
    vf_status_clear(&st);
    char p6[300];
    snprintf(p6, sizeof p6, "%s/step-6", f.dir);
    VF_CHECK(vf_ckpt_verify(p6, &st) == VF_ECORRUPT);
    VF_CHECK(strstr(st.msg, "CRC32C") != NULL);
    nwarn = 0;
    vf_status_clear(&st);
    VF_CHECK(vf_ckpt_find(f.dir, count_warn, NULL, &ck, &st) == 0 && ck.step == 4 && ck.skipped == 1);
    VF_CHECK_EQ_INT(nwarn, 1);
    vf_ckpt_fini(&ck);
    /* without a manifest the older one is not complete either */
    char man[300];
    snprintf(man, sizeof man, "%s/step-4/manifest.json", f.dir);
    VF_CHECK(unlink(man) == 0);
    vf_status_clear(&st);
    VF_CHECK(vf_ckpt_find(f.dir, NULL, NULL, &ck, &st) == VF_ENOTFOUND);
    /* a later commit of a skipped step replaces it */
    vf_status_clear(&st);
    VF_CHECK_MSG(write_step(&f, 1, 6, 2, false, &st) == 0, "%s", st.msg);
    VF_CHECK(vf_ckpt_find(f.dir, NULL, NULL, &ck, &st) == 0 && ck.step == 6);
    vf_ckpt_fini(&ck);
    fixture_fini(&f);
}

VF_TEST(checkpoint_sharded_model_files_index_verify_and_read_back)
{
    fixture f;
    fixture_init(&f);
    vf_status st = {0};
    const vf_dit_layout *l = f.l;
    int64_t total = l->total, data = 0, largest = 0;
    for (int i = 0; i < l->n; i++) {
        data += l->t[i].numel * 4;
        if (l->t[i].numel * 4 > largest) largest = l->t[i].numel * 4;
    }
    /* below the largest tensor, so that one sits alone in a shard */
    int64_t limit = largest - 4;
    VF_CHECK_MSG(write_step_sharded(&f, 3, 2, 2, limit, false, &st) == 0, "%s", st.msg);
    char sd[300], p[600];
    snprintf(sd, sizeof sd, "%s/step-2", f.dir);
    VF_CHECK(!exists(sd, "model.safetensors") && exists(sd, "model.safetensors.index.json"));
    VF_CHECK_MSG(vf_ckpt_verify(sd, &st) == 0, "%s", st.msg);

    /* the index: every layout tensor once, total_size the data bytes, files beside it */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", sd);
    FILE *fp = fopen(p, "rb");
    char *text = calloc(1, 1 << 20);
    VF_CHECK(fp && fread(text, 1, (1 << 20) - 1, fp) > 0);
    if (fp) fclose(fp);
    vf_json *ix = vf_json_parse(text, &st);
    free(text);
    VF_ASSERT(ix != NULL);
    VF_CHECK(vf_json_get_int(vf_json_get(ix, "metadata"), "total_size", -1) == data);
    const vf_json *map = vf_json_get(ix, "weight_map");
    VF_CHECK_EQ_INT(vf_json_len(map), vf_dit_layout_count(l));
    int nshards = 0;
    VF_CHECK(sscanf(vf_json_get_str(map, l->t[0].name, ""), "model-%*5d-of-%5d.safetensors", &nshards) == 1);
    VF_CHECK(nshards >= 3);
    /* each shard: at most `limit` of data unless it holds one tensor; the same metadata */
    int64_t seen = 0;
    for (int k = 0; k < nshards; k++) {
        char name[64];
        vf_st_shard_name("model", k, nshards, name, sizeof name);
        snprintf(p, sizeof p, "%s/%s", sd, name);
        vf_st_file *sf = NULL;
        VF_CHECK_MSG(vf_st_open(p, &sf, &st) == 0, "%s", st.msg);
        if (!sf) continue;
        int64_t b = 0;
        for (int i = 0; i < vf_st_count(sf); i++) {
            b += (int64_t)vf_st_at(sf, i)->nbytes;
            VF_CHECK_STR(vf_json_get_str(map, vf_st_at(sf, i)->name, ""), name);
        }
        VF_CHECK_MSG(b <= limit || vf_st_count(sf) == 1, "%s: %lld bytes in %d tensors", name, (long long)b,
                     vf_st_count(sf));
        VF_CHECK(vf_st_meta_get(sf, "step") && strcmp(vf_st_meta_get(sf, "step"), "2") == 0);
        VF_CHECK(vf_st_meta_get(sf, "format") && strcmp(vf_st_meta_get(sf, "format"), "pt") == 0);
        seen += vf_st_count(sf);
        vf_st_close(sf);
    }
    VF_CHECK_EQ_INT((int)seen, vf_dit_layout_count(l));
    vf_json_free(ix);

    /* the master weights back under another shard count, bit for bit */
    float *back = malloc(sizeof(float) * (size_t)total);
    int64_t block = vf_train_norm_block(total);
    for (int k = 0; k < 2; k++) {
        int64_t lo, hi, b0, b1;
        vf_train_shard_range(total, block, 2, k, &lo, &hi, &b0, &b1);
        VF_CHECK_MSG(vf_adamw_load_master(sd, l, lo, hi, back + lo, &st) == 0, "%s", st.msg);
    }
    int bad = 0;
    for (int64_t i = 0; i < total; i++) bad += back[i] != f.master[i] + 2.0f;
    VF_CHECK_EQ_INT(bad, 0);
    free(back);

    /* at or above the model's bytes, and with 0: one model.safetensors */
    VF_CHECK_MSG(write_step_sharded(&f, 1, 4, 4, data, false, &st) == 0, "%s", st.msg);
    VF_CHECK_MSG(write_step_sharded(&f, 1, 6, 4, 0, false, &st) == 0, "%s", st.msg);
    snprintf(sd, sizeof sd, "%s/step-4", f.dir);
    VF_CHECK(exists(sd, "model.safetensors") && !exists(sd, "model.safetensors.index.json"));
    snprintf(sd, sizeof sd, "%s/step-6", f.dir);
    VF_CHECK(exists(sd, "model.safetensors") && !exists(sd, "model.safetensors.index.json"));

    /* a shard the manifest does not list fails the check: drop it from the manifest */
    snprintf(sd, sizeof sd, "%s/step-2", f.dir);
    snprintf(p, sizeof p, "%s/manifest.json", sd);
    fp = fopen(p, "rb");
    text = calloc(1, 1 << 16);
    size_t len = fp ? fread(text, 1, (1 << 16) - 1, fp) : 0;
    if (fp) fclose(fp);
    vf_json *man = vf_json_parse_n(text, len, &st);
    free(text);
    VF_ASSERT(man != NULL);
    char last[64];
    vf_st_shard_name("model", nshards - 1, nshards, last, sizeof last);
    vf_json_free(vf_json_take(vf_json_get(man, "files"), last));
    char *mt = vf_json_emit(man, false, 2);
    VF_CHECK(vf_ckpt_write_text(p, mt, NULL, NULL, &st) == 0);
    free(mt);
    vf_json_free(man);
    vf_status_clear(&st);
    VF_CHECK(vf_ckpt_verify(sd, &st) == VF_ECORRUPT);
    VF_CHECK_MSG(strstr(st.msg, last) && strstr(st.msg, "not in the manifest"), "%s", st.msg);
    fixture_fini(&f);
}

VF_TEST(config_check_names_every_differing_key)
{
    vf_status st = {0};
    vf_json *a = vf_json_parse("{\"optim.lr\":0.001,\"model.depth\":4,\"data.batch\":4,\"train.seed\":1}", &st);
    vf_json *b = vf_json_parse("{\"optim.lr\":0.002,\"model.depth\":4,\"data.batch\":8,\"model.dim\":64,\"train.seed\":1.0}", &st);
    VF_CHECK(vf_ckpt_config_check("ck", a, a, &st) == 0);
    VF_CHECK(vf_ckpt_config_check("ck", a, b, &st) == VF_EUSAGE);
    VF_CHECK(vf_exit_code(VF_EUSAGE) == 2);
    VF_CHECK(strstr(st.msg, "3 keys") != NULL);
    VF_CHECK(strstr(st.msg, "optim.lr (checkpoint 0.001, now 0.002)") != NULL);
    VF_CHECK(strstr(st.msg, "data.batch (checkpoint 4, now 8)") != NULL);
    VF_CHECK(strstr(st.msg, "model.dim (checkpoint (absent), now 64)") != NULL);
    VF_CHECK(strstr(st.msg, "train.seed") == NULL && strstr(st.msg, "model.depth") == NULL);
    char h1[17], h2[17];
    vf_ckpt_config_hash(a, h1);
    vf_ckpt_config_hash(b, h2);
    VF_CHECK(strcmp(h1, h2) != 0 && strlen(h1) == 16);
    vf_json_free(a);
    vf_json_free(b);
}

int main(void) { return vf_test_main(); }
