/* checkpoint_write.c — one atomic checkpoint commit (checkpoint.h, formats/ckpt.h).
 *
 * Order, so that a crash or a full disk at any point leaves the previous checkpoints
 * intact and never a step-N dir that is not complete:
 *   step-N.tmp/ created → model.safetensors (or its shards and index), optimizer-kk-of-SS
 *   .safetensors, state.json, each written and fsynced (their CRC32C computed on the way
 *   out) → manifest.json (fsynced) → fsync step-N.tmp → rename to step-N → fsync dir → latest (temp file,
 *   fsync, rename, fsync dir) → remove the oldest complete checkpoints beyond `keep`.
 * model.safetensors streams each tensor from the shards' master slices through a fill
 * callback (a tensor may straddle two shards), so the model is never assembled in one
 * buffer. Above shard_bytes the model is Hugging Face's sharded form (formats/st_sharded.h):
 * the tensors in the single file's order, cut into files of at most shard_bytes of data.
 */
#include "stages/train/checkpoint.h"
#include "formats/ckpt.h"
#include "formats/st_sharded.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct shard_view {
    int64_t off, n;
    const float *master, *m, *v;
} shard_view;

typedef struct fill_ctx {
    const shard_view *sh;
    int S;
    int64_t first; /* flat element of the tensor's byte 0 */
} fill_ctx;

/* Bytes [offset, offset + n) of a tensor whose element 0 is flat element first. */
static int fill_master(void *user, uint64_t offset, void *buf, size_t n, vf_status *st)
{
    const fill_ctx *f = user;
    int64_t e0 = f->first + (int64_t)(offset / 4), e1 = e0 + (int64_t)(n / 4);
    char *out = buf;
    for (int k = 0; k < f->S && e0 < e1; k++) {
        const shard_view *s = &f->sh[k];
        if (e0 < s->off || e0 >= s->off + s->n) continue;
        int64_t take = (s->off + s->n < e1 ? s->off + s->n : e1) - e0;
        memcpy(out, s->master + (e0 - s->off), (size_t)take * 4);
        out += take * 4;
        e0 += take;
    }
    if (e0 != e1)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "checkpoint: element %lld is in no shard's snapshot", (long long)e0);
    return 0;
}

static double meta_num(const vf_item *it, const char *k, double def)
{
    double v;
    return vf_item_num(it, k, &v) == 0 ? v : def;
}

static int add_file(vf_json *files, const char *name, int64_t bytes, uint32_t crc)
{
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", crc);
    vf_json *f = vf_json_obj();
    if (!f || vf_json_set(f, "bytes", vf_json_int(bytes)) || vf_json_set(f, "crc32c", vf_json_str(hex))) {
        vf_json_free(f);
        return VF_ENOMEM;
    }
    return vf_json_set(files, name, f) ? VF_ENOMEM : 0;
}

/* state.json: step, data cursors, run seed / lr schedule, config and its hash. */
static char *state_text(int64_t step, vf_item *const *snaps, int S, int64_t total, vf_status *st)
{
    const vf_item *z = snaps[0];
    vf_json *o = vf_json_obj(), *cfg = NULL, *cur = NULL;
    char *text = NULL;
    vf_status ps;
    vf_status_clear(&ps);
    const char *c = vf_item_str(z, "config"), *cs = vf_item_str(z, "cursors");
    cfg = c ? vf_json_parse(c, &ps) : vf_json_obj();
    cur = cs ? vf_json_parse(cs, &ps) : vf_json_arr();
    if (!o || !cfg || !cur) {
        vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "checkpoint: shard 0's config/cursors: %s", ps.msg);
        goto out;
    }
    char hash[17];
    vf_ckpt_config_hash(cfg, hash);
    int bad = 0;
    bad |= vf_json_set(o, "format", vf_json_str("vflow-checkpoint v1"));
    bad |= vf_json_set(o, "step", vf_json_int(step));
    bad |= vf_json_set(o, "cursors", cur);
    cur = NULL;
    const vf_json *seed = vf_json_get(cfg, "train.seed");
    bad |= vf_json_set(o, "seed", seed ? vf_json_clone(seed) : vf_json_null());
    vf_json *lr = vf_json_obj();
    if (lr) {
        bad |= vf_json_set(lr, "at_step", vf_json_num(meta_num(z, "lr", 0)));
        static const char *const keys[] = {"optim.lr", "optim.schedule", "optim.warmup", "optim.decay_steps",
                                           "optim.min_lr"};
        for (int i = 0; i < 5; i++) {
            const vf_json *v = vf_json_get(cfg, keys[i]);
            if (v) bad |= vf_json_set(lr, keys[i] + 6, vf_json_clone(v));
        }
    }
    bad |= vf_json_set(o, "lr", lr);
    bad |= vf_json_set(o, "adam_step", vf_json_int(step));
    bad |= vf_json_set(o, "loss", vf_json_num(meta_num(z, "loss", 0)));
    bad |= vf_json_set(o, "params", vf_json_int(total));
    bad |= vf_json_set(o, "shards", vf_json_int(S));
    bad |= vf_json_set(o, "replicas", vf_json_int((int64_t)meta_num(z, "replicas", 1)));
    bad |= vf_json_set(o, "stages", vf_json_int((int64_t)meta_num(z, "stages", 1)));
    bad |= vf_json_set(o, "config_hash", vf_json_str(hash));
    bad |= vf_json_set(o, "config", cfg);
    cfg = NULL;
    const char *lb = vf_item_str(z, "lora_base"); /* a LoRA run's base: path and hash (models/dit_base.h) */
    vf_json *base = lb ? vf_json_parse(lb, &ps) : NULL;
    if (base) bad |= vf_json_set(o, "lora_base", base);
    bad |= vf_json_set(o, "time", vf_json_num((double)time(NULL)));
    text = bad ? NULL : vf_json_emit(o, false, 2);
    if (!text) vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "checkpoint: state.json: out of memory");
out:
    vf_json_free(o);
    vf_json_free(cfg);
    vf_json_free(cur);
    return text;
}

/* One model file of the tensors ord[0..n) (layout indices). alpha (not NULL): the file
 * holds LoRA adapters, and each A tensor's module gets its scalar "<module>.alpha". */
static int write_model_file(const char *path, const vf_dit_layout *l, const int *ord, int n, const shard_view *sh,
                            int S, const char *step, const char *preset, const float *alpha, int64_t *bytes,
                            uint32_t *crc, vf_status *st)
{
    int rc = 0;
    vf_st_writer *w = vf_st_writer_new(st);
    fill_ctx *fc = calloc((size_t)(n ? n : 1), sizeof *fc);
    if (!w || !fc) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    for (int j = 0; j < n; j++) {
        const vf_dit_tensor *t = &l->t[ord[j]];
        fc[j] = (fill_ctx){sh, S, t->offset};
        VF_TRY(vf_st_writer_add_fill(w, t->name, VF_ST_F32, t->ndim, t->shape, fill_master, &fc[j], st));
        const char *a = alpha ? strstr(t->name, ".lora_A.weight") : NULL;
        if (a) {
            char an[128];
            snprintf(an, sizeof an, "%.*s.alpha", (int)(a - t->name), t->name);
            VF_TRY(vf_st_writer_add(w, an, VF_ST_F32, 0, NULL, alpha, st));
        }
    }
    VF_TRY(vf_st_writer_meta(w, "format", "pt", st));
    VF_TRY(vf_st_writer_meta(w, "step", step, st));
    if (preset && preset[0]) VF_TRY(vf_st_writer_meta(w, "preset", preset, st));
    *bytes = (int64_t)vf_st_writer_size(w);
    VF_TRY(vf_st_writer_save(w, path, VF_ST_FSYNC, crc, st));
fail:
    vf_st_writer_free(w);
    free(fc);
    return rc;
}

typedef struct named {
    const char *name;
    int i;
} named;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* The index of a sharded model (Hugging Face's form): metadata, then every tensor's file. */
static char *index_text(const vf_dit_layout *l, const int *ord, const int *shard_of, int n, int nshards,
                        int64_t data_bytes, const char *step, const char *preset)
{
    vf_json *o = vf_json_obj(), *meta = vf_json_obj(), *map = vf_json_obj();
    char *text = NULL;
    int bad = !o || !meta || !map;
    bad |= vf_json_set(meta, "total_size", vf_json_int(data_bytes));
    bad |= vf_json_set(meta, "format", vf_json_str("pt"));
    bad |= vf_json_set(meta, "step", vf_json_str(step));
    if (preset && preset[0]) bad |= vf_json_set(meta, "preset", vf_json_str(preset));
    for (int j = 0; j < n && !bad; j++) {
        char name[64];
        vf_st_shard_name(VF_CKPT_MODEL_STEM, shard_of[j], nshards, name, sizeof name);
        bad |= vf_json_set(map, l->t[ord[j]].name, vf_json_str(name));
    }
    bad |= vf_json_set(o, "metadata", meta);
    meta = NULL;
    bad |= vf_json_set(o, "weight_map", map);
    map = NULL;
    if (!bad) text = vf_json_emit(o, false, 2);
    vf_json_free(o);
    vf_json_free(meta);
    vf_json_free(map);
    return text;
}

/* The model: one model.safetensors, or, when its tensors' bytes exceed shard_bytes (> 0),
 * shards of at most shard_bytes each (a larger tensor alone in its own) in the file's
 * tensor order, plus model.safetensors.index.json. Every file goes into the manifest. */
static int write_model(const char *tmp, const vf_dit_layout *l, const shard_view *sh, int S, int64_t step,
                       const char *preset, const float *alpha, int64_t shard_bytes, vf_json *files,
                       int64_t *total_bytes, vf_status *st)
{
    int rc = 0, n = 0, nshards = 1;
    int *ord = malloc(sizeof *ord * (size_t)(l->n ? l->n : 1));
    int *shard_of = malloc(sizeof *shard_of * (size_t)(l->n ? l->n : 1));
    named *by_name = malloc(sizeof *by_name * (size_t)(l->n ? l->n : 1));
    char *itext = NULL;
    if (!ord || !shard_of || !by_name) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    for (int i = 0; i < l->n; i++)
        if (l->t[i].numel > 0) by_name[n++] = (named){l->t[i].name, i}; /* numel 0: the config has no such tensor */
    /* the writer orders one file's tensors by name (all are F32): the shards follow it */
    qsort(by_name, (size_t)n, sizeof *by_name, cmp_named);
    for (int j = 0; j < n; j++) ord[j] = by_name[j].i;
    int64_t data = 0, cur = 0;
    for (int j = 0; j < n; j++) {
        int64_t b = l->t[ord[j]].numel * 4;
        if (shard_bytes > 0 && cur > 0 && cur + b > shard_bytes) nshards++, cur = 0;
        shard_of[j] = nshards - 1;
        cur += b;
        data += b;
    }
    char sstep[32], file[4400], name[64];
    snprintf(sstep, sizeof sstep, "%lld", (long long)step);
    int64_t bytes;
    uint32_t crc;
    if (alpha) { /* LoRA adapters: one lora.safetensors, small enough never to be sharded */
        snprintf(file, sizeof file, "%s/%s", tmp, VF_CKPT_LORA);
        VF_TRY(write_model_file(file, l, ord, n, sh, S, sstep, preset, alpha, &bytes, &crc, st));
        VF_TRY(add_file(files, VF_CKPT_LORA, bytes, crc));
        *total_bytes += bytes;
        goto fail; /* rc == 0 */
    }
    if (shard_bytes <= 0 || data <= shard_bytes) {
        snprintf(file, sizeof file, "%s/%s", tmp, VF_CKPT_MODEL);
        VF_TRY(write_model_file(file, l, ord, n, sh, S, sstep, preset, NULL, &bytes, &crc, st));
        VF_TRY(add_file(files, VF_CKPT_MODEL, bytes, crc));
        *total_bytes += bytes;
        goto fail; /* rc == 0 */
    }
    for (int j0 = 0, k = 0; j0 < n; k++) {
        int j1 = j0;
        while (j1 < n && shard_of[j1] == k) j1++;
        vf_st_shard_name(VF_CKPT_MODEL_STEM, k, nshards, name, sizeof name);
        snprintf(file, sizeof file, "%s/%s", tmp, name);
        VF_TRY(write_model_file(file, l, ord + j0, j1 - j0, sh, S, sstep, preset, NULL, &bytes, &crc, st));
        VF_TRY(add_file(files, name, bytes, crc));
        *total_bytes += bytes;
        j0 = j1;
    }
    itext = index_text(l, ord, shard_of, n, nshards, data, sstep, preset);
    if (!itext) VF_FAIL(st, VF_ENOMEM, "checkpoint: %s: out of memory", VF_CKPT_MODEL_INDEX);
    snprintf(file, sizeof file, "%s/%s", tmp, VF_CKPT_MODEL_INDEX);
    VF_TRY(vf_ckpt_write_text(file, itext, &crc, &bytes, st));
    VF_TRY(add_file(files, VF_CKPT_MODEL_INDEX, bytes, crc));
    *total_bytes += bytes;
fail:
    free(ord);
    free(shard_of);
    free(by_name);
    free(itext);
    return rc;
}

static int write_optimizer(const char *path, const shard_view *s, int k, int S, int64_t step, int64_t total,
                           int64_t *bytes, uint32_t *crc, vf_status *st)
{
    int rc = 0;
    vf_st_writer *w = vf_st_writer_new(st);
    if (!w) return VF_ENOMEM;
    const int64_t shape[1] = {s->n};
    char v[5][32];
    snprintf(v[0], 32, "%lld", (long long)s->off);
    snprintf(v[1], 32, "%lld", (long long)s->n);
    snprintf(v[2], 32, "%d", k);
    snprintf(v[3], 32, "%d", S);
    snprintf(v[4], 32, "%lld", (long long)step);
    static const char *const keys[5] = {"offset", "numel", "shard", "shards", "step"};
    VF_TRY(vf_st_writer_add(w, "exp_avg", VF_ST_F32, 1, shape, s->m, st));
    VF_TRY(vf_st_writer_add(w, "exp_avg_sq", VF_ST_F32, 1, shape, s->v, st));
    for (int i = 0; i < 5; i++) VF_TRY(vf_st_writer_meta(w, keys[i], v[i], st));
    char tot[32];
    snprintf(tot, sizeof tot, "%lld", (long long)total);
    VF_TRY(vf_st_writer_meta(w, "total", tot, st));
    *bytes = (int64_t)vf_st_writer_size(w);
    VF_TRY(vf_st_writer_save(w, path, VF_ST_FSYNC, crc, st));
fail:
    vf_st_writer_free(w);
    return rc;
}

static int prune(const char *dir, int64_t newest, int keep, vf_status *st)
{
    int64_t *steps = NULL;
    int n = 0, rc = vf_ckpt_list(dir, false, &steps, &n, st);
    if (rc) return rc;
    int older = 0;
    for (int i = 0; i < n; i++) older += steps[i] < newest;
    /* the newest plus keep-1 older ones stay */
    for (int i = 0; i < n && older > keep - 1; i++) {
        if (steps[i] >= newest) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/step-%lld", dir, (long long)steps[i]);
        if ((rc = vf_ckpt_remove(p, st))) break;
        older--;
    }
    free(steps);
    if (!rc) rc = vf_ckpt_fsync_dir(dir, st);
    return rc;
}

int vf_ckpt_write_step(const char *dir, int64_t step, vf_item *const *snaps, int S,
                       const vf_dit_layout *l, int keep, int64_t shard_bytes, bool fail_inject,
                       vf_ckpt_write_stats *out, vf_status *st)
{
    int rc = 0;
    char tmp[4200], fin[4200], file[4400];
    shard_view *sh = calloc((size_t)S, sizeof *sh);
    vf_json *man = vf_json_obj(), *files = vf_json_obj();
    char *state = NULL, *mtext = NULL;
    int64_t t0 = (int64_t)time(NULL), total_bytes = 0;
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    bool tmp_made = false;
    memset(out, 0, sizeof *out);
    if (!sh || !man || !files) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    int64_t covered = 0;
    for (int k = 0; k < S; k++) {
        vf_tensor *a = vf_item_get(snaps[k], "master"), *m = vf_item_get(snaps[k], "exp_avg"),
                  *v = vf_item_get(snaps[k], "exp_avg_sq");
        sh[k].off = (int64_t)meta_num(snaps[k], "off", -1);
        sh[k].n = (int64_t)meta_num(snaps[k], "n", -1);
        if (!a || !m || !v || a->dtype != VF_DTYPE_F32 || a->device.kind != VF_DEV_CPU || sh[k].off < 0 ||
            vf_tensor_numel(a) != sh[k].n || vf_tensor_numel(m) != sh[k].n || vf_tensor_numel(v) != sh[k].n)
            VF_FAIL(st, VF_EINVAL, "checkpoint: snapshot of shard %d (step %lld) is malformed", k, (long long)step);
        sh[k].master = a->data, sh[k].m = m->data, sh[k].v = v->data;
        covered += sh[k].n;
    }
    if (covered != l->total)
        VF_FAIL(st, VF_EINVAL, "checkpoint: the %d snapshots of step %lld hold %lld of %lld parameters", S,
                (long long)step, (long long)covered, (long long)l->total);

    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        VF_FAIL(st, VF_EIO, "checkpoint: mkdir %s: %s", dir, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s/step-%lld.tmp", dir, (long long)step);
    snprintf(fin, sizeof fin, "%s/step-%lld", dir, (long long)step);
    VF_TRY(vf_ckpt_remove(tmp, st));
    if (mkdir(tmp, 0755) != 0) VF_FAIL(st, VF_EIO, "checkpoint: mkdir %s: %s", tmp, strerror(errno));
    tmp_made = true;

    int64_t bytes;
    uint32_t crc;
    /* shard 0's snapshot of a LoRA run carries the adapters' alpha */
    float alpha = (float)meta_num(snaps[0], "lora_alpha", 0);
    VF_TRY(write_model(tmp, l, sh, S, step, vf_item_str(snaps[0], "preset"), alpha > 0 ? &alpha : NULL, shard_bytes,
                       files, &total_bytes, st));
    if (fail_inject) VF_FAIL(st, VF_EIO, "checkpoint: %s: injected write failure (VFLOW_CKPT_FAIL)", tmp);
    /* a test's SIGKILL lands mid-commit (model written, optimizer files not yet) when the
     * commit holds here; a small model's whole commit is otherwise over in a millisecond */
    const char *hold = getenv("VFLOW_CKPT_COMMIT_HOLD_MS");
    if (hold && atoi(hold) > 0) usleep((useconds_t)atoi(hold) * 1000u);
    for (int k = 0; k < S; k++) {
        char name[64];
        snprintf(name, sizeof name, "optimizer-%02d-of-%02d.safetensors", k, S);
        snprintf(file, sizeof file, "%s/%s", tmp, name);
        VF_TRY(write_optimizer(file, &sh[k], k, S, step, l->total, &bytes, &crc, st));
        VF_TRY(add_file(files, name, bytes, crc));
        total_bytes += bytes;
    }
    state = state_text(step, snaps, S, l->total, st);
    if (!state) VF_FAIL(st, st->code ? st->code : VF_ENOMEM, "checkpoint: state.json");
    snprintf(file, sizeof file, "%s/%s", tmp, VF_CKPT_STATE);
    VF_TRY(vf_ckpt_write_text(file, state, &crc, &bytes, st));
    VF_TRY(add_file(files, VF_CKPT_STATE, bytes, crc));
    total_bytes += bytes;

    if (vf_json_set(man, "format", vf_json_str("vflow-checkpoint-manifest v1")) ||
        vf_json_set(man, "step", vf_json_int(step)) || vf_json_set(man, "created", vf_json_int(t0)) ||
        vf_json_set(man, "files", files))
        VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    files = NULL;
    mtext = vf_json_emit(man, false, 2);
    if (!mtext) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    snprintf(file, sizeof file, "%s/%s", tmp, VF_CKPT_MANIFEST);
    VF_TRY(vf_ckpt_write_text(file, mtext, NULL, &bytes, st));
    total_bytes += bytes;
    VF_TRY(vf_ckpt_fsync_dir(tmp, st));

    /* a step dir of this number can only be one that resume skipped as damaged */
    VF_TRY(vf_ckpt_remove(fin, st));
    if (rename(tmp, fin) != 0) VF_FAIL(st, VF_EIO, "checkpoint: rename %s -> %s: %s", tmp, fin, strerror(errno));
    tmp_made = false;
    VF_TRY(vf_ckpt_fsync_dir(dir, st));

    char lt[4200], lf[4200], text[64];
    snprintf(lt, sizeof lt, "%s/latest.tmp", dir);
    snprintf(lf, sizeof lf, "%s/latest", dir);
    snprintf(text, sizeof text, "step-%lld\n", (long long)step);
    VF_TRY(vf_ckpt_write_text(lt, text, NULL, NULL, st));
    if (rename(lt, lf) != 0) VF_FAIL(st, VF_EIO, "checkpoint: rename %s: %s", lt, strerror(errno));
    VF_TRY(vf_ckpt_fsync_dir(dir, st));
    VF_TRY(prune(dir, step, keep, st));
    snprintf(out->path, sizeof out->path, "%s", fin);
    out->bytes = total_bytes;
fail:
    if (tmp_made) {
        vf_status rs;
        vf_status_clear(&rs);
        vf_ckpt_remove(tmp, &rs);
    }
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    out->seconds = (double)(ts1.tv_sec - ts0.tv_sec) + 1e-9 * (double)(ts1.tv_nsec - ts0.tv_nsec);
    free(sh);
    vf_json_free(man);
    vf_json_free(files);
    free(state);
    free(mtext);
    return rc;
}
