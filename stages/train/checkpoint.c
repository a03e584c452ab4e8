/* checkpoint.c — stage kind `checkpoint`: the asynchronous, atomic checkpoint writer
 * (docs/TRAINING.md, "Checkpoints").
 *
 * The optimizer shards snapshot their slice (master weights and both moments, copied to
 * the host) at checkpoint steps and send it here over an edge of capacity 1: a shard has
 * at most one snapshot in flight and goes on training while this stage writes. When the
 * S snapshots of one step are in, it commits them (checkpoint_write.c; the model as one
 * file, or as Hugging Face shards plus index above model_shard_bytes), atomically as
 * formats/ckpt.h describes, and only then are the checkpoints beyond the newest `keep`
 * removed. A failed commit (disk full,
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

static const vf_param_spec ckpt_params[] = {
    {"dir", VF_P_STR, "\"\"", VF_ANY, "checkpoint directory; \"\" = <run dir>/ckpt"},
    {"every", VF_P_INT, "50", VF_RANGE(0, 1e12), "checkpoint every N steps (and at the last); 0 = last only (read by p:train)"},
    {"keep", VF_P_INT, "2", VF_RANGE(2, 1e6), "complete checkpoints kept (the newest may be mid-write, so >= 2)"},
    {"sync", VF_P_BOOL, "false", VF_ANY, "shards wait for each commit (benchmark baseline)"},
    {"max_ckpt_failures", VF_P_INT, "3", VF_RANGE(0, 1e6),
     "failed checkpoints in a row that stop the run (exit 1); 0 = never stop (a failed final checkpoint still fails the run)"},
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

static int ckpt_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out, vf_status *st)
{
    vf_dit_layout *l = NULL;
    int rc = layout_of(p, &l, st);
    if (rc) return rc;
    int S = (int)vf_param_int(p, "shards");
    int64_t block = vf_train_norm_block(l->total), most = 1;
    for (int k = 0; k < S; k++) {
        int64_t lo, hi, b0, b1;
        vf_train_shard_range(l->total, block, S, k, &lo, &hi, &b0, &b1);
        if (hi - lo > most) most = hi - lo;
    }
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
    /* the S snapshots of the step being written (the next ones wait in the edges) */
    vf_mem_plan_add_input(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_CKPT, "input snapshots being written", 12 * l->total);
    /* the safetensors writer's bounce buffer for filled tensors (FILL_CHUNK, 1 MiB in
     * formats/safetensors_write.c) is plain malloc: in the totals, in no account */
    vf_mem_plan_add_lib(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_CKPT, "writer bounce buffer", 1 << 20);
    vf_dit_layout_free(l);
    return 0;
}

typedef struct ckpt_state {
    vf_dit_layout *l;
    int S, keep;
    int64_t shard_bytes;           /* model_shard_bytes; 0 = one model file */
    bool sync;
    char dir[4096];
    /* snapshots received, at most two steps' worth (one shard may run a checkpoint ahead) */
    vf_item **pend;
    int npend;
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
    c->S = (int)vf_param_int(p, "shards");
    c->keep = (int)vf_param_int(p, "keep");
    c->shard_bytes = vf_param_int(p, "model_shard_bytes");
    c->sync = vf_param_bool(p, "sync");
    c->max_fail = (int)vf_param_int(p, "max_ckpt_failures");
    c->ok_step = c->last_fail_step = -1;
    c->pend = calloc((size_t)(2 * c->S + 1), sizeof *c->pend);
    if (!c->pend) VF_FAIL(st, VF_ENOMEM, "checkpoint: out of memory");
fail:
    return rc;
}

static void ckpt_fini(vf_stage *s)
{
    ckpt_state *c = vf_stage_state(s);
    if (!c) return;
    for (int i = 0; i < c->npend; i++) vf_item_free(c->pend[i]);
    free(c->pend);
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

static double step_of(const vf_item *it)
{
    double v;
    return vf_item_num(it, "step", &v) == 0 ? v : -1;
}

/* Start: leftovers of a killed writer go; with --resume, say where the run continues. */
static int prepare(vf_stage *s, vf_ctx *ctx, ckpt_state *c, vf_status *st)
{
    if (mkdir(c->dir, 0755) != 0 && errno != EEXIST)
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: mkdir %s: %s", vf_stage_name(s), c->dir,
                             strerror(errno));
    int rc = vf_ckpt_remove_tmp(c->dir, log_leftover, ctx, st);
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
    return 0;
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

/* Commits step `step` if all S snapshots are pending; removes them from the list. */
static int commit_if_complete(vf_stage *s, vf_ctx *ctx, ckpt_state *c, int64_t step, vf_status *st)
{
    vf_item *snaps[VF_TRAIN_MAX_SHARDS] = {0};
    int have = 0;
    for (int i = 0; i < c->npend; i++) {
        if ((int64_t)step_of(c->pend[i]) != step) continue;
        double k;
        if (vf_item_num(c->pend[i], "shard", &k) || k < 0 || k >= c->S || snaps[(int)k])
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%s: bad or duplicate snapshot for step %lld",
                                 vf_stage_name(s), (long long)step);
        snaps[(int)k] = c->pend[i];
        have++;
    }
    if (have < c->S) return 0;
    vf_ckpt_write_stats ws;
    vf_status wst;
    vf_status_clear(&wst);
    int rc = vf_ckpt_write_step(c->dir, step, snaps, c->S, c->l, c->keep, c->shard_bytes, fail_injected(step), &ws,
                                &wst);
    char row[5600];
    if (rc == 0) {
        c->written++;
        c->in_row = 0;
        c->ok_step = step;
        snprintf(c->ok_path, sizeof c->ok_path, "%s", ws.path);
        vf_log(ctx, VF_LOG_INFO, "step %lld -> %s (%.2f MB in %.3f s)", (long long)step, ws.path, ws.bytes / 1e6,
               ws.seconds);
        snprintf(row, sizeof row, "{\"event\":\"checkpoint\",\"step\":%lld,\"path\":\"%s\",\"bytes\":%lld,\"write_s\":%.6f}",
                 (long long)step, ws.path, (long long)ws.bytes, ws.seconds);
        vf_metric(ctx, "ckpt_step", (double)step);
        vf_summary(ctx, "checkpoint", "checkpoint of step %lld: %s", (long long)step, ws.path);
    } else {
        c->failed++;
        if (c->in_row < (int)(sizeof c->fail_steps / sizeof c->fail_steps[0])) c->fail_steps[c->in_row] = step;
        c->in_row++;
        c->last_fail_step = step;
        snprintf(c->last_err, sizeof c->last_err, "%s", wst.msg);
        vf_log(ctx, VF_LOG_ERROR, "checkpoint of step %lld failed, the previous ones are intact%s: %s",
               (long long)step, c->max_fail > 0 && c->in_row >= c->max_fail ? "" : ", training goes on", wst.msg);
        char msg[1024];
        size_t j = 0;
        for (const char *q = wst.msg; *q && j + 2 < sizeof msg; q++) { /* JSON-safe */
            if (*q == '"' || *q == '\\') msg[j++] = '\\';
            msg[j++] = (unsigned char)*q < 0x20 ? ' ' : *q;
        }
        msg[j] = 0;
        snprintf(row, sizeof row, "{\"event\":\"checkpoint_failed\",\"step\":%lld,\"error\":\"%s\"}", (long long)step, msg);
    }
    vf_metric(ctx, "ckpt_failed", (double)c->failed);
    vf_metric(ctx, "ckpt_failed_in_row", (double)c->in_row);
    vf_metric_row(ctx, row);
    int k = 0;
    for (int i = 0; i < c->npend; i++) {
        if ((int64_t)step_of(c->pend[i]) == step) vf_item_free(c->pend[i]);
        else c->pend[k++] = c->pend[i];
    }
    c->npend = k;
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
    vf_port *done = rc == 0 ? vf_out(ctx, "done") : NULL;
    if (done) {
        vf_item *it = vf_item_new("ckpt", st);
        if (!it) return VF_ENOMEM;
        if ((rc = vf_item_set_num(it, "step", (double)step, st)) || (rc = vf_item_set_str(it, "path", ws.path, st))) {
            vf_item_free(it);
            return rc;
        }
        rc = vf_send(done, it, st);
        if (rc == VF_EOS) rc = 0;
        if (rc) return rc;
    }
    vf_port *ack = c->sync ? vf_out(ctx, "ack") : NULL;
    if (ack) {
        vf_item *it = vf_item_new("ack", st);
        if (!it) return VF_ENOMEM;
        if ((rc = vf_item_set_num(it, "step", (double)step, st)) ||
            (rc = vf_item_set_num(it, "ok", ws.path[0] ? 1 : 0, st))) {
            vf_item_free(it);
            return rc;
        }
        rc = vf_send(ack, it, st);
        if (rc == VF_EOS) rc = 0;
        return rc;
    }
    return 0;
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
        if (c->npend >= 2 * c->S) {
            vf_item_free(it);
            VF_FAIL(st, VF_EINVAL, "%s: snapshots of more than two steps pending", vf_stage_name(s));
        }
        c->pend[c->npend++] = it;
        VF_TRY(commit_if_complete(s, ctx, c, (int64_t)step_of(it), st));
    }
    if (c->npend)
        vf_log(ctx, VF_LOG_WARN, "%d snapshot(s) of an incomplete step discarded at the end", c->npend);
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
