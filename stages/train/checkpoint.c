/* checkpoint.c — stage kind `checkpoint`: the asynchronous, atomic checkpoint writer
 * (docs/TRAINING.md, "Checkpoints").
 *
 * The optimizer shards snapshot their slice (master weights and both moments) at
 * checkpoint steps and send it here in chunks of at most `chunk` bytes, copied out of
 * their state one at a time, over an edge of a small capacity: what is in flight is
 * capacity × chunk per shard however large the model, and a shard goes on training once
 * its last chunk is out. Each chunk is written at its place as it arrives
 * (checkpoint_write.c: the files of the step are opened at its first chunk; the model as
 * one file, or as Hugging Face shards plus index above model_shard_bytes); when every
 * shard's slice is in, the step is committed atomically as formats/ckpt.h describes, and
 * only then are the checkpoints beyond the newest `keep` removed. Chunks of the next
 * checkpoint may arrive while one is still being written (a shard may be a checkpoint
 * ahead of another): each step is written on its own. A failed write or commit (disk full,
 * I/O error) removes its .tmp, leaves the previous checkpoints intact, is reported (log,
 * metrics row "checkpoint_failed", gauges ckpt_failed and ckpt_failed_in_row) and
 * training continues, unless it is the `max_ckpt_failures`-th in a row: then this stage
 * fails the run (exit 1) rather than train on with nothing saved. A run whose final
 * checkpoint failed fails too. Both messages name the newest complete checkpoint and
 * the steps that are not saved.
 *
 * At start it removes leftover step-*.tmp dirs; with --resume it says, loudly, which
 * checkpoint the run continues from and which damaged newer ones it skipped (the shards
 * and the first partition find the same one by the same rule, formats/ckpt.h).
 * With `sync = true` it answers every commit on "ack" and the shards wait for it: the
 * synchronous baseline of bench/bench_checkpoint.sh. The optional output "done" carries
 * one small item {step, path} per successful commit (a `sample` stage turns them into
 * videos); unconnected, nothing is sent.
 *
 * VFLOW_CKPT_FAIL=N[,N…] (tests): the commits of those steps fail as a write error would.
 * VFLOW_CKPT_COMMIT_HOLD_MS=M (tests): each commit pauses M ms with its step-N.tmp half
 * written, so a kill can be timed to land inside a commit.
 * VFLOW_CKPT_CHUNK_HOLD_MS=M (tests): each chunk written is followed by a pause of M ms,
 * so a kill can be timed to land in the middle of a stream.
 */
#include "stages/train/checkpoint.h"
#include "models/dit_lora.h"
#include "stages/train/dit_train.h"
#include "formats/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const vf_param_spec ckpt_params[] = {
    {"dir", VF_P_STR, "\"\"", VF_ANY, "checkpoint directory; \"\" = <run dir>/ckpt"},
    {"every", VF_P_INT, "50", VF_RANGE(0, 1e12), "checkpoint every N steps (and at the last); 0 = last only (read by p:train)"},
    {"keep", VF_P_INT, "2", VF_RANGE(2, 1e6), "complete checkpoints kept (the newest may be mid-write, so >= 2)"},
    {"sync", VF_P_BOOL, "false", VF_ANY, "shards wait for each commit (benchmark baseline)"},
    {"max_ckpt_failures", VF_P_INT, "3", VF_RANGE(0, 1e6),
     "failed checkpoints in a row that stop the run (exit 1); 0 = never stop (a failed final checkpoint still fails the run)"},
    {"chunk", VF_P_INT, "67108864", VF_RANGE(12, 9e15),
     "bytes of each piece of a shard's snapshot (12 per parameter: master + 2 moments); the plan counts "
     "capacity x chunk per snapshot edge (the shards' ckpt_chunk; set by p:train)"},
    {"model_shard_bytes", VF_P_INT, "10000000000", VF_RANGE(0, 9e18),
     "above this many bytes of tensors the model is written as Hugging Face shards of at most this many "
     "(model-0000k-of-0000N.safetensors + model.safetensors.index.json); 1e10 = diffusers' save_pretrained \"10GB\"; 0 = one file"},
    {"model", VF_P_TABLE, VF_DIT_MODEL_DEFAULT, VF_ANY, "DiT preset (names of model.safetensors; set by p:train)",
     NULL, vf_dit_model_fields},
    {"shards", VF_P_INT, "1", VF_RANGE(1, VF_TRAIN_MAX_SHARDS), "optimizer shards S (set by p:train)"},
    {"lora", VF_P_STR, "\"\"", VF_ANY,
     "LoRA adapters as JSON {rank, alpha, targets} (set by p:train): checkpoints hold lora.safetensors instead of the model"},
    {0},
};

/* The layout of what the shards train: the model's, or with `lora` the adapters'. */
static int layout_of(const vf_params *p, vf_dit_layout **l, vf_status *st)
{
    vf_dit_config c;
    vf_dit_lora_cfg lc;
    vf_dit_lora *lo = NULL;
    int rc = vf_dit_config_from_params(vf_param_table(p, "model"), &c, st);
    if (!rc) rc = vf_dit_layout_new(&c, l, st);
    if (!rc) rc = vf_dit_lora_cfg_parse(vf_param_str(p, "lora"), &lc, st);
    if (rc || lc.rank == 0) return rc;
    rc = vf_dit_lora_new(*l, &lc, &lo, st);
    vf_dit_layout_free(*l);
    *l = NULL;
    if (rc) return rc;
    *l = lo->l; /* keep the adapters' layout alone */
    lo->l = NULL;
    vf_dit_lora_free(lo);
    return 0;
}

/* Elements of the largest snapshot chunk a shard sends: its whole slice, or `chunk`'s. */
static int64_t chunk_most(const vf_params *p, const vf_dit_layout *l)
{
    int S = (int)vf_param_int(p, "shards");
    int64_t block = vf_train_norm_block(l->total), most = 1;
    for (int k = 0; k < S; k++) {
        int64_t lo, hi, b0, b1;
        vf_train_shard_range(l->total, block, S, k, &lo, &hi, &b0, &b1);
        if (hi - lo > most) most = hi - lo;
    }
    int64_t chunk = vf_train_ckpt_chunk_elems(vf_param_int(p, "chunk"));
    return chunk < most ? chunk : most;
}

static int ckpt_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out, vf_status *st)
{
    vf_dit_layout *l = NULL;
    int rc = layout_of(p, &l, st);
    if (rc) return rc;
    int64_t most = chunk_most(p, l);
    static const char *const sN[1] = {"N"};
    static const char *const names[3] = {"master", "exp_avg", "exp_avg_sq"};
    vf_port_spec *in = vf_port_add(out, "snap", VF_PORT_IN, true);
    in->multi = true;
    for (int i = 0; i < 3; i++) vf_port_tensor(in, names[i], VF_DTYPE_F32, 1, &most, sN);
    in->meta_bytes = 16384;
    vf_port_spec *ack = vf_port_add(out, "ack", VF_PORT_OUT, false);
    ack->meta_bytes = 256;
    vf_port_spec *done = vf_port_add(out, "done", VF_PORT_OUT, false);
    done->meta_bytes = 256 + (int64_t)sizeof ((vf_ckpt_write_stats *)0)->path;
    vf_dit_layout_free(l);
    return 0;
}

static int ckpt_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out, vf_status *st)
{
    vf_dit_layout *l = NULL;
    int rc = layout_of(p, &l, st);
    if (rc) return rc;
    /* the chunk being written (the next ones wait in the edges): the files take each one
     * at its place, so nothing of a snapshot is assembled here */
    int64_t most = chunk_most(p, l);
    vf_mem_plan_add_input(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_CKPT, "input snapshot chunk being written",
                          12 * most);
    /* each file's list of the pieces written (formats/safetensors_write.c, plain malloc,
     * 24 bytes a piece, grown by doubling): a model tensor's pieces, at most one per chunk
     * it straddles, and the moments' two per chunk; for the two steps in flight */
    int64_t S = vf_param_int(p, "shards"), chunks = l->total / most + S;
    vf_mem_plan_add_lib(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_CKPT, "writer piece lists",
                        2 * 2 * 24 * (l->n + 3 * chunks + 4 * S));
    vf_dit_layout_free(l);
    return 0;
}

/* One step being written: its files (NULL once a write failed), what has come of each
 * shard's slice, and shard 0's step metadata for state.json. */
typedef struct open_step {
    int64_t step;
    vf_ckpt_stream *cs;
    int64_t *got;                  /* elements received per shard */
    bool failed;
    char err[sizeof ((vf_status *)0)->msg];
    char *config, *cursors, *lora_base;
    double lr, loss;
    int64_t skipped;       /* steps the optimizer took no update in (routing) */
    int replicas, stages;
} open_step;

#define MAX_OPEN 16 /* steps being written at once: shards run at most a few checkpoints apart */

typedef struct ckpt_state {
    vf_dit_layout *l;
    int S, keep;
    int64_t shard_bytes;           /* model_shard_bytes; 0 = one model file */
    bool sync;
    char preset[64];               /* the model's preset name, for the model files' metadata */
    float alpha;                   /* LoRA: the adapters' alpha (> 0), else 0 */
    int hold_ms;                   /* VFLOW_CKPT_CHUNK_HOLD_MS */
    char dir[4096];
    bool aside;                    /* a fresh run: an earlier run's steps go aside at the first chunk */
    int64_t *lo, *n;               /* each shard's slice */
    open_step open[MAX_OPEN];
    int nopen;
    int64_t written, failed;
    int max_fail, in_row;          /* max_ckpt_failures; failures since the last success */
    int64_t ok_step;               /* newest complete checkpoint known to this run, -1 none */
    char ok_path[sizeof ((vf_ckpt_write_stats *)0)->path];
    int64_t fail_steps[8];         /* the failures in a row (the first 8), for the message */
    int64_t last_fail_step;        /* -1 none */
    char last_err[sizeof ((vf_status *)0)->msg];
} ckpt_state;

static int ckpt_init(vf_stage *s, const vf_params *p, vf_status *st)
{
    int rc = 0;
    ckpt_state *c = calloc(1, sizeof *c);
    if (!c) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "checkpoint: out of memory");
    vf_stage_set_state(s, c);
    VF_TRY(layout_of(p, &c->l, st));
    vf_dit_lora_cfg lc;
    VF_TRY(vf_dit_lora_cfg_parse(vf_param_str(p, "lora"), &lc, st));
    c->alpha = lc.rank > 0 ? (float)lc.alpha : 0.0f;
    snprintf(c->preset, sizeof c->preset, "%s", vf_param_str(vf_param_table(p, "model"), "name"));
    c->S = (int)vf_param_int(p, "shards");
    c->keep = (int)vf_param_int(p, "keep");
    c->shard_bytes = vf_param_int(p, "model_shard_bytes");
    c->sync = vf_param_bool(p, "sync");
    c->max_fail = (int)vf_param_int(p, "max_ckpt_failures");
    c->ok_step = c->last_fail_step = -1;
    const char *hold = getenv("VFLOW_CKPT_CHUNK_HOLD_MS");
    c->hold_ms = hold ? atoi(hold) : 0;
    c->lo = calloc((size_t)c->S, sizeof *c->lo);
    c->n = calloc((size_t)c->S, sizeof *c->n);
    if (!c->lo || !c->n) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
    int64_t block = vf_train_norm_block(c->l->total);
    for (int k = 0; k < c->S; k++) {
        int64_t hi, b0, b1;
        vf_train_shard_range(c->l->total, block, c->S, k, &c->lo[k], &hi, &b0, &b1);
        c->n[k] = hi - c->lo[k];
    }
fail:
    return rc;
}

static void close_step(open_step *o)
{
    vf_ckpt_stream_abort(o->cs);
    free(o->got);
    free(o->config);
    free(o->cursors);
    free(o->lora_base);
    memset(o, 0, sizeof *o);
}

static void ckpt_fini(vf_stage *s)
{
    ckpt_state *c = vf_stage_state(s);
    if (!c) return;
    for (int i = 0; i < c->nopen; i++) close_step(&c->open[i]);
    free(c->lo);
    free(c->n);
    vf_dit_layout_free(c->l);
    free(c);
    vf_stage_set_state(s, NULL);
}

static void warn_cb(void *user, const char *msg) { vf_log(user, VF_LOG_WARN, "%s", msg); }

static void log_leftover(void *user, const char *path) { vf_log(user, VF_LOG_INFO, "removing the incomplete %s", path); }

static bool fail_injected(int64_t step)
{
    const char *e = getenv("VFLOW_CKPT_FAIL");
    for (const char *p = e; p && *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p) break;
        if (v == step) return true;
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

static double num_or(const vf_item *it, const char *k, double def)
{
    double v;
    return vf_item_num(it, k, &v) == 0 ? v : def;
}

/* "done" (when connected) of a complete step dir: its step and path, and "resumed" 1 for
 * the step a resumed run starts from. A closed consumer is not an error. */
static int send_done(vf_ctx *ctx, int64_t step, const char *path, bool resumed, vf_status *st)
{
    vf_port *done = vf_out(ctx, "done");
    if (!done) return 0;
    vf_item *it = vf_item_new("ckpt", st);
    if (!it) return VF_ENOMEM;
    int rc;
    if ((rc = vf_item_set_num(it, "step", (double)step, st)) || (rc = vf_item_set_str(it, "path", path, st)) ||
        (resumed && (rc = vf_item_set_num(it, "resumed", 1, st)))) {
        vf_item_free(it);
        return rc;
    }
    rc = vf_send(done, it, st);
    return rc == VF_EOS ? 0 : rc;
}

/* Start: leftovers of a killed writer go; with --resume, say where the run continues. A
 * fresh run sets an earlier run's checkpoints aside only when its first snapshot comes
 * (take_chunk): the run may start from one of them (`weights`, `lora_init`), which the
 * shards read first.
 * The dir's parents are made too: an expert's dir (<run>/ckpt/high) sits in one that may
 * not exist yet. */
static int prepare(vf_stage *s, vf_ctx *ctx, ckpt_state *c, vf_status *st)
{
    char up[sizeof c->dir];
    snprintf(up, sizeof up, "%s", c->dir);
    for (char *q = strchr(up + 1, '/'); q; q = strchr(q + 1, '/')) {
        *q = 0;
        (void)mkdir(up, 0755); /* an error shows at the dir's own mkdir below */
        *q = '/';
    }
    if (mkdir(c->dir, 0755) != 0 && errno != EEXIST)
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: mkdir %s: %s", vf_stage_name(s), c->dir,
                             strerror(errno));
    int rc = vf_ckpt_remove_tmp(c->dir, log_leftover, ctx, st);
    c->aside = !vf_resuming(ctx);
    if (rc || !vf_resuming(ctx)) return rc;
    vf_ckpt ck;
    vf_status fs;
    vf_status_clear(&fs);
    rc = vf_ckpt_find(c->dir, warn_cb, ctx, &ck, &fs);
    if (rc == VF_ENOTFOUND) return vf_train_no_ckpt(ctx, &ck, &fs, true, st);
    if (rc) {
        *st = fs;
        return rc;
    }
    vf_log(ctx, ck.skipped ? VF_LOG_WARN : VF_LOG_INFO, "resuming from %s (step %lld)%s", ck.path,
           (long long)ck.step, ck.skipped ? " after skipping damaged newer checkpoints" : "");
    c->ok_step = ck.step;
    snprintf(c->ok_path, sizeof c->ok_path, "%s", ck.path);
    vf_ckpt_fini(&ck);
    /* "done" of the step the run starts from, marked resumed: a consumer that pairs steps
     * (ckpt_join) gets it even when this run has nothing left to train */
    return send_done(ctx, c->ok_step, c->ok_path, true, st);
}

/* "the newest complete checkpoint is D/step-N (step N): steps N+1-`upto` are not saved" */
static void lost_text(const ckpt_state *c, int64_t upto, char *out, size_t n)
{
    if (c->ok_step >= 0 && c->ok_step + 1 == upto)
        snprintf(out, n, "the newest complete checkpoint is %s (step %lld): step %lld is not saved", c->ok_path,
                 (long long)c->ok_step, (long long)upto);
    else if (c->ok_step >= 0)
        snprintf(out, n, "the newest complete checkpoint is %s (step %lld): steps %lld-%lld are not saved", c->ok_path,
                 (long long)c->ok_step, (long long)c->ok_step + 1, (long long)upto);
    else
        snprintf(out, n, "no checkpoint of this run is complete in %s: steps 1-%lld are not saved", c->dir,
                 (long long)upto);
}

/* What a finished step became (rc 0: committed as ws says; else failed with `err`): the
 * log, the metrics, the run's stop after max_ckpt_failures in a row, "done" and "ack". */
static int report(vf_stage *s, vf_ctx *ctx, ckpt_state *c, int64_t step, int rc, const vf_ckpt_write_stats *ws,
                  const char *err, vf_status *st)
{
    char row[5600];
    if (rc == 0) {
        c->written++;
        c->in_row = 0;
        c->ok_step = step;
        snprintf(c->ok_path, sizeof c->ok_path, "%s", ws->path);
        vf_log(ctx, VF_LOG_INFO, "step %lld -> %s (%.2f MB in %.3f s)", (long long)step, ws->path, ws->bytes / 1e6,
               ws->seconds);
        snprintf(row, sizeof row, "{\"event\":\"checkpoint\",\"step\":%lld,\"path\":\"%s\",\"bytes\":%lld,\"write_s\":%.6f}",
                 (long long)step, ws->path, (long long)ws->bytes, ws->seconds);
        vf_metric(ctx, "ckpt_step", (double)step);
        vf_summary(ctx, "checkpoint", "checkpoint of step %lld: %s", (long long)step, ws->path);
    } else {
        c->failed++;
        if (c->in_row < (int)(sizeof c->fail_steps / sizeof c->fail_steps[0])) c->fail_steps[c->in_row] = step;
        c->in_row++;
        c->last_fail_step = step;
        snprintf(c->last_err, sizeof c->last_err, "%s", err);
        vf_log(ctx, VF_LOG_ERROR, "checkpoint of step %lld failed, the previous ones are intact%s: %s",
               (long long)step, c->max_fail > 0 && c->in_row >= c->max_fail ? "" : ", training goes on", err);
        char msg[1024];
        size_t j = 0;
        for (const char *q = err; *q && j + 2 < sizeof msg; q++) { /* JSON-safe */
            if (*q == '"' || *q == '\\') msg[j++] = '\\';
            msg[j++] = (unsigned char)*q < 0x20 ? ' ' : *q;
        }
        msg[j] = 0;
        snprintf(row, sizeof row, "{\"event\":\"checkpoint_failed\",\"step\":%lld,\"error\":\"%s\"}", (long long)step, msg);
    }
    vf_metric(ctx, "ckpt_failed", (double)c->failed);
    vf_metric(ctx, "ckpt_failed_in_row", (double)c->in_row);
    vf_metric_row(ctx, row);
    if (rc && c->max_fail > 0 && c->in_row >= c->max_fail) {
        char steps[160] = "";
        int shown = c->in_row < 8 ? c->in_row : 8;
        for (int i = 0; i < shown; i++) {
            size_t l = strlen(steps);
            snprintf(steps + l, sizeof steps - l, "%s%lld", i ? ", " : "", (long long)c->fail_steps[i]);
        }
        char lost[sizeof ((ckpt_state *)0)->ok_path + 256];
        lost_text(c, step, lost, sizeof lost);
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__,
                             "%s: %d checkpoints in a row failed (steps %s%s; max_ckpt_failures = %d), the last "
                             "with: %s; the run stops: %s",
                             vf_stage_name(s), c->in_row, steps, c->in_row > shown ? ", ..." : "", c->max_fail,
                             c->last_err, lost);
    }
    if (rc == 0) {
        int r2 = send_done(ctx, step, ws->path, false, st);
        if (r2) return r2;
    }
    vf_port *ack = c->sync ? vf_out(ctx, "ack") : NULL;
    if (ack) {
        vf_item *it = vf_item_new("ack", st);
        if (!it) return VF_ENOMEM;
        int r2;
        if ((r2 = vf_item_set_num(it, "step", (double)step, st)) ||
            (r2 = vf_item_set_num(it, "ok", rc == 0 ? 1 : 0, st))) {
            vf_item_free(it);
            return r2;
        }
        r2 = vf_send(ack, it, st);
        return r2 == VF_EOS ? 0 : r2;
    }
    return 0;
}

/* The open step of `step`, begun (its files opened) at its first chunk. A failure to
 * begin marks the step failed: its chunks are counted and dropped, and it is reported
 * when the last has come. */
static open_step *step_for(vf_stage *s, ckpt_state *c, int64_t step, vf_status *st)
{
    for (int i = 0; i < c->nopen; i++)
        if (c->open[i].step == step) return &c->open[i];
    if (c->nopen == MAX_OPEN) {
        vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: snapshots of more than %d steps in flight",
                      vf_stage_name(s), MAX_OPEN);
        return NULL;
    }
    open_step *o = &c->open[c->nopen];
    memset(o, 0, sizeof *o);
    o->step = step;
    o->got = calloc((size_t)c->S, sizeof *o->got);
    if (!o->got) {
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", vf_stage_name(s));
        return NULL;
    }
    c->nopen++;
    vf_status bs;
    vf_status_clear(&bs);
    if (vf_ckpt_stream_begin(c->dir, step, c->S, c->l, c->shard_bytes, c->preset, c->alpha > 0 ? &c->alpha : NULL,
                             &o->cs, &bs)) {
        o->failed = true;
        snprintf(o->err, sizeof o->err, "%s", bs.msg);
    }
    return o;
}

/* One chunk: written at its place; the step committed (or its failure reported) when it
 * was the last. */
static int take_chunk(vf_stage *s, vf_ctx *ctx, ckpt_state *c, vf_item *it, vf_status *st)
{
    int64_t step = (int64_t)num_or(it, "step", -1), a = (int64_t)num_or(it, "c0", -1);
    int k = (int)num_or(it, "shard", -1);
    vf_tensor *tm = vf_item_get(it, "master"), *t1 = vf_item_get(it, "exp_avg"), *t2 = vf_item_get(it, "exp_avg_sq");
    int64_t cnt = tm ? vf_tensor_numel(tm) : -1;
    if (step < 0 || k < 0 || k >= c->S || a < c->lo[k] || !tm || !t1 || !t2 || tm->dtype != VF_DTYPE_F32 ||
        t1->dtype != VF_DTYPE_F32 || t2->dtype != VF_DTYPE_F32 || tm->device.kind != VF_DEV_CPU ||
        t1->device.kind != VF_DEV_CPU || t2->device.kind != VF_DEV_CPU || vf_tensor_numel(t1) != cnt ||
        vf_tensor_numel(t2) != cnt || a + cnt > c->lo[k] + c->n[k])
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "%s: malformed snapshot chunk (step %lld, shard %d, elements [%lld, +%lld))",
                             vf_stage_name(s), (long long)step, k, (long long)a, (long long)cnt);
    if (c->aside) {
        c->aside = false;
        int rc = vf_train_ckpt_aside(ctx, vf_stage_name(s), c->dir, st);
        if (rc) return rc;
    }
    open_step *o = step_for(s, c, step, st);
    if (!o) return st->code ? st->code : VF_ENOMEM;
    if (o->got[k] + cnt > c->n[k])
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: shard %d sent more than its slice for step %lld",
                             vf_stage_name(s), k, (long long)step);
    if (k == 0 && a == c->lo[0]) { /* shard 0's first chunk: the step's metadata */
        const char *cf = vf_item_str(it, "config"), *cu = vf_item_str(it, "cursors");
        const char *lb = vf_item_str(it, "lora_base");
        o->config = cf ? strdup(cf) : NULL;
        o->cursors = cu ? strdup(cu) : NULL;
        o->lora_base = lb ? strdup(lb) : NULL;
        if ((cf && !o->config) || (cu && !o->cursors) || (lb && !o->lora_base))
            return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", vf_stage_name(s));
        o->lr = num_or(it, "lr", 0), o->loss = num_or(it, "loss", 0);
        o->skipped = step - (int64_t)num_or(it, "adam_step", (double)step);
        o->replicas = (int)num_or(it, "replicas", 1), o->stages = (int)num_or(it, "stages", 1);
    }
    if (!o->failed) {
        vf_status ws;
        vf_status_clear(&ws);
        if (vf_ckpt_stream_put(o->cs, k, a, cnt, tm->data, t1->data, t2->data, &ws)) {
            o->failed = true;
            snprintf(o->err, sizeof o->err, "%s", ws.msg);
            vf_ckpt_stream_abort(o->cs); /* its .tmp goes now */
            o->cs = NULL;
        }
        if (c->hold_ms > 0) usleep((useconds_t)c->hold_ms * 1000u);
    }
    o->got[k] += cnt;
    for (int j = 0; j < c->S; j++)
        if (o->got[j] < c->n[j]) return 0;
    /* the last chunk of the step */
    vf_ckpt_write_stats ws = {0};
    vf_status cst;
    vf_status_clear(&cst);
    int rc;
    if (o->failed) {
        rc = VF_EIO;
        snprintf(cst.msg, sizeof cst.msg, "%s", o->err);
    } else {
        const vf_ckpt_state_info info = {.step = step, .config = o->config, .cursors = o->cursors, .lr = o->lr,
                                         .loss = o->loss, .replicas = o->replicas, .stages = o->stages,
                                         .lora_base = o->lora_base, .skipped = o->skipped};
        rc = vf_ckpt_stream_commit(o->cs, &info, c->keep, fail_injected(step), &ws, &cst);
        o->cs = NULL;
    }
    close_step(o);
    c->open[o - c->open] = c->open[--c->nopen];
    return report(s, ctx, c, step, rc, &ws, cst.msg, st);
}

static int ckpt_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    int rc = 0;
    ckpt_state *c = vf_stage_state(s);
    vf_ckpt_dir(vf_param_str(vf_stage_params(s), "dir"), vf_run_dir(ctx), c->dir, sizeof c->dir);
    VF_TRY(prepare(s, ctx, c, st));
    vf_metric(ctx, "ckpt_failed", 0);
    vf_metric(ctx, "ckpt_failed_in_row", 0);
    vf_port *in = vf_in(ctx, "snap");
    for (;;) {
        vf_item *it = NULL;
        rc = vf_recv(in, &it, st);
        if (rc == VF_EOS) {
            rc = 0;
            break;
        }
        VF_TRY(rc);
        rc = take_chunk(s, ctx, c, it, st);
        vf_item_free(it);
        VF_TRY(rc);
    }
    for (int i = 0; i < c->nopen; i++) {
        vf_log(ctx, VF_LOG_WARN, "the incomplete snapshot of step %lld discarded at the end", (long long)c->open[i].step);
        close_step(&c->open[i]);
    }
    c->nopen = 0;
    vf_log(ctx, VF_LOG_INFO, "%lld checkpoints written, %lld failed, in %s", (long long)c->written,
           (long long)c->failed, c->dir);
    if (c->last_fail_step > c->ok_step) {
        char lost[sizeof ((ckpt_state *)0)->ok_path + 256];
        lost_text(c, c->last_fail_step, lost, sizeof lost);
        VF_FAIL(st, VF_EIO, "%s: the final checkpoint (step %lld) failed: %s; %s", vf_stage_name(s),
                (long long)c->last_fail_step, c->last_err, lost);
    }
fail:
    return rc;
}

/* The driver locks the checkpoint dir for the run's life (one run writes it). */
static void ckpt_lock_dir(const vf_params *p, const char *run_dir, char *out, size_t n)
{
    vf_ckpt_dir(vf_param_str(p, "dir"), run_dir, out, n);
}

static const vf_stage_ops ckpt_ops = {
    .api_version = VF_API_VERSION,
    .kind = "checkpoint",
    .doc = "asynchronous atomic checkpoints of the optimizer shards' snapshots (model.safetensors or its "
           "Hugging Face shards + index, optimizer shards, state.json, manifest with CRCs), keeps the newest K",
    .params = ckpt_params,
    .ports = ckpt_ports,
    .memory = ckpt_memory,
    .init = ckpt_init,
    .run = ckpt_run,
    .fini = ckpt_fini,
    .lock_dir = ckpt_lock_dir,
};
VF_REGISTER_STAGE(ckpt_ops)
