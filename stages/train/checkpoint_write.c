/* checkpoint_write.c — one checkpoint written from the optimizer shards' snapshot chunks
 * (checkpoint.h): the model files written here, the optimizer files, state.json and the
 * atomic commit through formats/ckpt.h's vf_ckpt_writer, which also describes the layout.
 *
 * Every file is opened with its header when the checkpoint begins, and each chunk (the
 * master weights and both moments of a range of one shard's slice) is written at its
 * place as it arrives, in whatever order: master's pieces into the model tensors the
 * range overlaps (a tensor may straddle two chunks or two shards), the moments into the
 * shard's optimizer file. Nothing of the state is ever assembled in memory; the files
 * are the bytes a whole-file write of the same tensors gives (formats/safetensors.h,
 * vf_st_stream). Above shard_bytes the model is Hugging Face's sharded form
 * (formats/st_sharded.h): the tensors in the single file's order, cut into files of at
 * most shard_bytes of data.
 */
#include "stages/train/checkpoint.h"
#include "formats/ckpt.h"
#include "formats/st_sharded.h"
#include "stages/train/dit_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Where one model tensor's bytes go. */
typedef struct mtensor {
    int64_t off, numel; /* flat range */
    int file;           /* index into the model files */
    uint64_t at;        /* file offset of its element 0 */
} mtensor;

struct vf_ckpt_stream {
    vf_ckpt_writer *cw;
    const vf_dit_layout *l;
    int S;
    int64_t *lo, *n, *got;   /* per shard: its range and the elements received */
    vf_ckpt_optim **opt;     /* per shard */
    int nfiles, nshards;     /* model files; nshards > 1: the sharded form */
    bool lora;               /* the file is the LoRA adapters' */
    vf_st_writer **mw;
    vf_st_stream **ms;
    mtensor *mt;             /* the layout's tensors with data, by flat offset */
    int nmt;
    char *index;             /* sharded form: the index's text */
    struct timespec t0;
};

static int cmp_off(const void *a, const void *b)
{
    const mtensor *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

typedef struct named {
    const char *name;
    int i;
} named;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* The name of model file f. */
static void model_name(const vf_ckpt_stream *c, int f, char *out, size_t n)
{
    if (c->nshards) vf_st_shard_name(VF_CKPT_MODEL_STEM, f, c->nshards, out, n);
    else snprintf(out, n, "%s", c->lora ? VF_CKPT_LORA : VF_CKPT_MODEL);
}

/* The model files opened: one model.safetensors (or a LoRA run's lora.safetensors, with
 * each A tensor's module's scalar "<module>.alpha"), or shards of at most shard_bytes (a
 * larger tensor alone in its own) in the file's tensor order (by name) plus the index
 * text. Every tensor's file and offset recorded in c->mt. */
static int open_model(vf_ckpt_stream *c, const char *preset, const float *alpha, int64_t shard_bytes,
                      vf_status *st)
{
    int rc = 0, n = 0;
    const vf_dit_layout *l = c->l;
    named *by_name = malloc(sizeof *by_name * (size_t)(l->n ? l->n : 1));
    int *shard_of = malloc(sizeof *shard_of * (size_t)(l->n ? l->n : 1));
    const char **names = malloc(sizeof *names * (size_t)(l->n ? l->n : 1));
    c->mt = malloc(sizeof *c->mt * (size_t)(l->n ? l->n : 1));
    if (!by_name || !shard_of || !names || !c->mt) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    for (int i = 0; i < l->n; i++)
        if (l->t[i].numel > 0) by_name[n++] = (named){l->t[i].name, i}; /* numel 0: the config has no such tensor */
    /* the writer orders one file's tensors by name (all are F32): the shards follow it */
    qsort(by_name, (size_t)n, sizeof *by_name, cmp_named);
    int64_t data = 0, cur = 0;
    c->nfiles = 1;
    for (int j = 0; j < n; j++) {
        int64_t b = l->t[by_name[j].i].numel * 4;
        if (!alpha && shard_bytes > 0 && cur > 0 && cur + b > shard_bytes) c->nfiles++, cur = 0;
        shard_of[j] = c->nfiles - 1;
        names[j] = by_name[j].name;
        cur += b;
        data += b;
    }
    /* LoRA adapters are never sharded; the model is when it is larger than shard_bytes */
    if (alpha || shard_bytes <= 0 || data <= shard_bytes) {
        c->nfiles = 1;
        for (int j = 0; j < n; j++) shard_of[j] = 0;
    }
    c->nshards = c->nfiles > 1 ? c->nfiles : 0;
    c->lora = alpha != NULL;
    c->mw = calloc((size_t)c->nfiles, sizeof *c->mw);
    c->ms = calloc((size_t)c->nfiles, sizeof *c->ms);
    if (!c->mw || !c->ms) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    char sstep[32];
    snprintf(sstep, sizeof sstep, "%lld", (long long)vf_ckpt_writer_step(c->cw));
    for (int f = 0; f < c->nfiles; f++) {
        vf_st_writer *w = c->mw[f] = vf_st_writer_new(st);
        if (!w) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
        for (int j = 0; j < n; j++) {
            if (shard_of[j] != f) continue;
            const vf_dit_tensor *t = &l->t[by_name[j].i];
            VF_TRY(vf_st_writer_add_streamed(w, t->name, VF_ST_F32, t->ndim, t->shape, st));
            const char *a = alpha ? strstr(t->name, ".lora_A.weight") : NULL;
            if (a) {
                char an[128];
                snprintf(an, sizeof an, "%.*s.alpha", (int)(a - t->name), t->name);
                VF_TRY(vf_st_writer_add(w, an, VF_ST_F32, 0, NULL, alpha, st));
            }
        }
        VF_TRY(vf_st_writer_meta(w, "format", "pt", st));
        VF_TRY(vf_st_writer_meta(w, "step", sstep, st));
        if (preset && preset[0]) VF_TRY(vf_st_writer_meta(w, "preset", preset, st));
        char name[64], file[4400];
        model_name(c, f, name, sizeof name);
        vf_ckpt_writer_path(c->cw, name, file, sizeof file);
        VF_TRY(vf_st_stream_open(w, file, &c->ms[f], st));
    }
    for (int j = 0; j < n; j++) {
        const vf_dit_tensor *t = &l->t[by_name[j].i];
        c->mt[j] = (mtensor){t->offset, t->numel, shard_of[j],
                             (uint64_t)vf_st_stream_offset(c->ms[shard_of[j]], t->name)};
    }
    c->nmt = n;
    qsort(c->mt, (size_t)n, sizeof *c->mt, cmp_off);
    if (c->nshards) {
        /* the index carries the files' __metadata__ */
        const char *meta[6] = {"format", "pt", "step", sstep, "preset", preset};
        c->index = vf_st_index_text(VF_CKPT_MODEL_STEM, names, shard_of, n, c->nshards, data, meta,
                                    preset && preset[0] ? 3 : 2);
        if (!c->index) VF_FAIL(st, VF_ENOMEM, "checkpoint: %s: out of memory", VF_CKPT_MODEL_INDEX);
    }
fail:
    free(by_name);
    free(shard_of);
    free(names);
    return rc;
}

int vf_ckpt_stream_begin(const char *dir, int64_t step, int S, const vf_dit_layout *l, int64_t shard_bytes,
                         const char *preset, const float *alpha, vf_ckpt_stream **out, vf_status *st)
{
    int rc = 0;
    *out = NULL;
    vf_ckpt_stream *c = calloc(1, sizeof *c);
    if (!c) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "checkpoint: out of memory");
    clock_gettime(CLOCK_MONOTONIC, &c->t0);
    c->l = l, c->S = S;
    c->lo = calloc((size_t)S, sizeof *c->lo);
    c->n = calloc((size_t)S, sizeof *c->n);
    c->got = calloc((size_t)S, sizeof *c->got);
    c->opt = calloc((size_t)S, sizeof *c->opt);
    if (!c->lo || !c->n || !c->got || !c->opt) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    VF_TRY(vf_ckpt_writer_begin(dir, step, &c->cw, st));
    VF_TRY(open_model(c, preset, alpha, shard_bytes, st));
    int64_t block = vf_train_norm_block(l->total);
    for (int k = 0; k < S; k++) {
        int64_t hi, b0, b1;
        vf_train_shard_range(l->total, block, S, k, &c->lo[k], &hi, &b0, &b1);
        c->n[k] = hi - c->lo[k];
        VF_TRY(vf_ckpt_optim_open(c->cw, k, S, c->lo[k], c->n[k], l->total, &c->opt[k], st));
    }
    *out = c;
    return 0;
fail:
    vf_ckpt_stream_abort(c);
    return rc;
}

int vf_ckpt_stream_range(const vf_ckpt_stream *c, int k, int64_t *lo, int64_t *n)
{
    if (k < 0 || k >= c->S) return VF_EINVAL;
    *lo = c->lo[k], *n = c->n[k];
    return 0;
}

int vf_ckpt_stream_put(vf_ckpt_stream *c, int k, int64_t a, int64_t cnt, const float *master, const float *m,
                       const float *v, vf_status *st)
{
    if (k < 0 || k >= c->S || cnt < 0 || a < c->lo[k] || a + cnt > c->lo[k] + c->n[k] ||
        c->got[k] + cnt > c->n[k])
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "checkpoint: a chunk of shard %d (elements [%lld, +%lld)) lies outside its slice "
                             "[%lld, +%lld) or repeats one", k, (long long)a, (long long)cnt,
                             (long long)(k >= 0 && k < c->S ? c->lo[k] : -1),
                             (long long)(k >= 0 && k < c->S ? c->n[k] : -1));
    int rc = vf_ckpt_optim_put(c->opt[k], a, cnt, m, v, st);
    if (rc) return rc;
    /* the first tensor that ends after a, then each one the range overlaps */
    int lo = 0, hi = c->nmt;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c->mt[mid].off + c->mt[mid].numel <= a) lo = mid + 1;
        else hi = mid;
    }
    int64_t e = a + cnt, done = 0;
    for (int j = lo; j < c->nmt && c->mt[j].off < e; j++) {
        const mtensor *t = &c->mt[j];
        int64_t x0 = t->off > a ? t->off : a, x1 = t->off + t->numel < e ? t->off + t->numel : e;
        if (x1 <= x0) continue;
        rc = vf_st_stream_put(c->ms[t->file], t->at + (uint64_t)(x0 - t->off) * 4, master + (x0 - a),
                              (size_t)(x1 - x0) * 4, st);
        if (rc) return rc;
        done += x1 - x0;
    }
    if (done != cnt)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "checkpoint: %lld elements of [%lld, +%lld) are in no model tensor",
                             (long long)(cnt - done), (long long)a, (long long)cnt);
    c->got[k] += cnt;
    return 0;
}

bool vf_ckpt_stream_complete(const vf_ckpt_stream *c)
{
    for (int k = 0; k < c->S; k++)
        if (c->got[k] != c->n[k]) return false;
    return true;
}

const char *vf_ckpt_stream_dir(const vf_ckpt_stream *c) { return vf_ckpt_writer_dir(c->cw); }

int vf_ckpt_stream_commit(vf_ckpt_stream *c, const vf_ckpt_state_info *info, int keep, bool fail_inject,
                          vf_ckpt_write_stats *out, vf_status *st)
{
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (!vf_ckpt_stream_complete(c))
        VF_FAIL(st, VF_EINVAL, "checkpoint: step %lld is committed before every shard's chunks came",
                (long long)vf_ckpt_writer_step(c->cw));
    for (int f = 0; f < c->nfiles; f++) {
        char name[64];
        model_name(c, f, name, sizeof name);
        int64_t bytes;
        uint32_t crc;
        rc = vf_st_stream_finish(c->ms[f], VF_ST_FSYNC, &bytes, &crc, st);
        c->ms[f] = NULL;
        VF_TRY(rc);
        VF_TRY(vf_ckpt_writer_add(c->cw, name, bytes, crc, st));
    }
    if (c->index) VF_TRY(vf_ckpt_writer_text(c->cw, VF_CKPT_MODEL_INDEX, c->index, st));
    if (fail_inject)
        VF_FAIL(st, VF_EIO, "checkpoint: %s: injected write failure (VFLOW_CKPT_FAIL)", vf_ckpt_writer_dir(c->cw));
    /* a test's SIGKILL lands mid-commit (the data written, the optimizer files not yet
     * closed nor the manifest written) when the commit holds here; a small model's
     * whole commit is otherwise over in a millisecond */
    const char *hold = getenv("VFLOW_CKPT_COMMIT_HOLD_MS");
    if (hold && atoi(hold) > 0) usleep((useconds_t)atoi(hold) * 1000u);
    for (int k = 0; k < c->S; k++) {
        rc = vf_ckpt_optim_close(c->opt[k], st);
        c->opt[k] = NULL;
        VF_TRY(rc);
    }
    vf_ckpt_state_info at = *info;
    at.params = c->l->total;
    at.shards = c->S;
    VF_TRY(vf_ckpt_writer_state(c->cw, &at, st));
    rc = vf_ckpt_writer_commit(c->cw, keep, out->path, sizeof out->path, &out->bytes, st);
    c->cw = NULL;
fail:;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out->seconds = (double)(t1.tv_sec - c->t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - c->t0.tv_nsec);
    vf_ckpt_stream_abort(c);
    return rc;
}

void vf_ckpt_stream_abort(vf_ckpt_stream *c)
{
    if (!c) return;
    for (int f = 0; c->ms && f < c->nfiles; f++) vf_st_stream_abort(c->ms[f]);
    for (int f = 0; c->mw && f < c->nfiles; f++) vf_st_writer_free(c->mw[f]);
    for (int k = 0; c->opt && k < c->S; k++) vf_ckpt_optim_abort(c->opt[k]);
    vf_ckpt_writer_abort(c->cw); /* removes the .tmp; NULL after a commit */
    free(c->ms), free(c->mw), free(c->opt);
    free(c->lo), free(c->n), free(c->got);
    free(c->mt);
    free(c->index);
    free(c);
}

/* ------------------------------------------------------------------ whole snapshots */

static double meta_num(const vf_item *it, const char *k, double def)
{
    double v;
    return vf_item_num(it, k, &v) == 0 ? v : def;
}

int vf_ckpt_write_step(const char *dir, int64_t step, vf_item *const *snaps, int S,
                       const vf_dit_layout *l, int keep, int64_t shard_bytes, bool fail_inject,
                       vf_ckpt_write_stats *out, vf_status *st)
{
    int rc = 0;
    vf_ckpt_stream *c = NULL;
    memset(out, 0, sizeof *out);
    /* shard 0's snapshot of a LoRA run carries the adapters' alpha */
    float alpha = (float)meta_num(snaps[0], "lora_alpha", 0);
    VF_TRY(vf_ckpt_stream_begin(dir, step, S, l, shard_bytes, vf_item_str(snaps[0], "preset"),
                                alpha > 0 ? &alpha : NULL, &c, st));
    for (int k = 0; k < S; k++) {
        vf_tensor *a = vf_item_get(snaps[k], "master"), *m = vf_item_get(snaps[k], "exp_avg"),
                  *v = vf_item_get(snaps[k], "exp_avg_sq");
        int64_t off = (int64_t)meta_num(snaps[k], "off", -1), n = (int64_t)meta_num(snaps[k], "n", -1);
        int64_t lo = -1, want = -1;
        vf_ckpt_stream_range(c, k, &lo, &want);
        if (!a || !m || !v || a->dtype != VF_DTYPE_F32 || a->device.kind != VF_DEV_CPU || off != lo || n != want ||
            vf_tensor_numel(a) != n || vf_tensor_numel(m) != n || vf_tensor_numel(v) != n)
            VF_FAIL(st, VF_EINVAL, "checkpoint: snapshot of shard %d (step %lld) is malformed", k, (long long)step);
        VF_TRY(vf_ckpt_stream_put(c, k, off, n, a->data, m->data, v->data, st));
    }
    const vf_item *z = snaps[0];
    const vf_ckpt_state_info info = {
        .step = step,
        .config = vf_item_str(z, "config"),
        .cursors = vf_item_str(z, "cursors"),
        .lr = meta_num(z, "lr", 0),
        .loss = meta_num(z, "loss", 0),
        .replicas = (int)meta_num(z, "replicas", 1),
        .stages = (int)meta_num(z, "stages", 1),
        .lora_base = vf_item_str(z, "lora_base"),
        .skipped = step - (int64_t)meta_num(z, "adam_step", (double)step),
    };
    rc = vf_ckpt_stream_commit(c, &info, keep, fail_inject, out, st);
    c = NULL;
fail:
    vf_ckpt_stream_abort(c);
    return rc;
}
