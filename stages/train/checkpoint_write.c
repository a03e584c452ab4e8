/* checkpoint_write.c — one checkpoint from the optimizer shards' snapshots
 * (checkpoint.h): the model files written here, everything else and the atomic commit
 * through formats/ckpt.h's vf_ckpt_writer, which also describes the layout.
 *
 * model.safetensors streams each tensor from the shards' master slices through a fill
 * callback (a tensor may straddle two shards), so the model is never assembled in one
 * buffer. Above shard_bytes the model is Hugging Face's sharded form (formats/st_sharded.h):
 * the tensors in the single file's order, cut into files of at most shard_bytes of data.
 */
#include "stages/train/checkpoint.h"
#include "formats/ckpt.h"
#include "formats/st_sharded.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The model: one model.safetensors, or, when its tensors' bytes exceed shard_bytes (> 0),
 * shards of at most shard_bytes each (a larger tensor alone in its own) in the file's
 * tensor order, plus model.safetensors.index.json. Every file goes into the manifest. */
static int write_model(vf_ckpt_writer *cw, const vf_dit_layout *l, const shard_view *sh, int S, const char *preset,
                       const float *alpha, int64_t shard_bytes, vf_status *st)
{
    int rc = 0, n = 0, nshards = 1;
    int *ord = malloc(sizeof *ord * (size_t)(l->n ? l->n : 1));
    int *shard_of = malloc(sizeof *shard_of * (size_t)(l->n ? l->n : 1));
    named *by_name = malloc(sizeof *by_name * (size_t)(l->n ? l->n : 1));
    const char **names = malloc(sizeof *names * (size_t)(l->n ? l->n : 1));
    char *itext = NULL;
    if (!ord || !shard_of || !by_name || !names) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    for (int i = 0; i < l->n; i++)
        if (l->t[i].numel > 0) by_name[n++] = (named){l->t[i].name, i}; /* numel 0: the config has no such tensor */
    /* the writer orders one file's tensors by name (all are F32): the shards follow it */
    qsort(by_name, (size_t)n, sizeof *by_name, cmp_named);
    for (int j = 0; j < n; j++) ord[j] = by_name[j].i, names[j] = by_name[j].name;
    int64_t data = 0, cur = 0;
    for (int j = 0; j < n; j++) {
        int64_t b = l->t[ord[j]].numel * 4;
        if (shard_bytes > 0 && cur > 0 && cur + b > shard_bytes) nshards++, cur = 0;
        shard_of[j] = nshards - 1;
        cur += b;
        data += b;
    }
    char sstep[32], file[4400], name[64];
    snprintf(sstep, sizeof sstep, "%lld", (long long)vf_ckpt_writer_step(cw));
    int64_t bytes;
    uint32_t crc;
    if (alpha || shard_bytes <= 0 || data <= shard_bytes) {
        /* one file: LoRA adapters (small enough never to be sharded), or the model */
        const char *one = alpha ? VF_CKPT_LORA : VF_CKPT_MODEL;
        vf_ckpt_writer_path(cw, one, file, sizeof file);
        VF_TRY(write_model_file(file, l, ord, n, sh, S, sstep, preset, alpha, &bytes, &crc, st));
        VF_TRY(vf_ckpt_writer_add(cw, one, bytes, crc, st));
        goto fail; /* rc == 0 */
    }
    for (int j0 = 0, k = 0; j0 < n; k++) {
        int j1 = j0;
        while (j1 < n && shard_of[j1] == k) j1++;
        vf_st_shard_name(VF_CKPT_MODEL_STEM, k, nshards, name, sizeof name);
        vf_ckpt_writer_path(cw, name, file, sizeof file);
        VF_TRY(write_model_file(file, l, ord + j0, j1 - j0, sh, S, sstep, preset, NULL, &bytes, &crc, st));
        VF_TRY(vf_ckpt_writer_add(cw, name, bytes, crc, st));
        j0 = j1;
    }
    /* the index carries the files' __metadata__ */
    const char *meta[6] = {"format", "pt", "step", sstep, "preset", preset};
    itext = vf_st_index_text(VF_CKPT_MODEL_STEM, names, shard_of, n, nshards, data, meta,
                             preset && preset[0] ? 3 : 2);
    if (!itext) VF_FAIL(st, VF_ENOMEM, "checkpoint: %s: out of memory", VF_CKPT_MODEL_INDEX);
    VF_TRY(vf_ckpt_writer_text(cw, VF_CKPT_MODEL_INDEX, itext, st));
fail:
    free(ord);
    free(shard_of);
    free(by_name);
    free(names);
    free(itext);
    return rc;
}

int vf_ckpt_write_step(const char *dir, int64_t step, vf_item *const *snaps, int S,
                       const vf_dit_layout *l, int keep, int64_t shard_bytes, bool fail_inject,
                       vf_ckpt_write_stats *out, vf_status *st)
{
    int rc = 0;
    shard_view *sh = calloc((size_t)S, sizeof *sh);
    vf_ckpt_writer *cw = NULL;
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    memset(out, 0, sizeof *out);
    if (!sh) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
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

    VF_TRY(vf_ckpt_writer_begin(dir, step, &cw, st));
    /* shard 0's snapshot of a LoRA run carries the adapters' alpha */
    float alpha = (float)meta_num(snaps[0], "lora_alpha", 0);
    VF_TRY(write_model(cw, l, sh, S, vf_item_str(snaps[0], "preset"), alpha > 0 ? &alpha : NULL, shard_bytes, st));
    if (fail_inject)
        VF_FAIL(st, VF_EIO, "checkpoint: %s: injected write failure (VFLOW_CKPT_FAIL)", vf_ckpt_writer_dir(cw));
    /* a test's SIGKILL lands mid-commit (model written, optimizer files not yet) when the
     * commit holds here; a small model's whole commit is otherwise over in a millisecond */
    const char *hold = getenv("VFLOW_CKPT_COMMIT_HOLD_MS");
    if (hold && atoi(hold) > 0) usleep((useconds_t)atoi(hold) * 1000u);
    for (int k = 0; k < S; k++)
        VF_TRY(vf_ckpt_writer_optimizer(cw, k, S, sh[k].off, sh[k].n, l->total, sh[k].m, sh[k].v, st));
    const vf_item *z = snaps[0];
    const vf_ckpt_state_info info = {
        .step = step,
        .config = vf_item_str(z, "config"),
        .cursors = vf_item_str(z, "cursors"),
        .lr = meta_num(z, "lr", 0),
        .loss = meta_num(z, "loss", 0),
        .params = l->total,
        .shards = S,
        .replicas = (int)meta_num(z, "replicas", 1),
        .stages = (int)meta_num(z, "stages", 1),
        .lora_base = vf_item_str(z, "lora_base"),
    };
    VF_TRY(vf_ckpt_writer_state(cw, &info, st));
    rc = vf_ckpt_writer_commit(cw, keep, out->path, sizeof out->path, &out->bytes, st);
    cw = NULL;
fail:
    vf_ckpt_writer_abort(cw);
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    out->seconds = (double)(ts1.tv_sec - ts0.tv_sec) + 1e-9 * (double)(ts1.tv_nsec - ts0.tv_nsec);
    free(sh);
    return rc;
}
