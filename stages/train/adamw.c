/* adamw.c — stage kind `adamw`: one shard of the AdamW optimizer (docs/TRAINING.md).
 *
 * Shard k of S owns the k-th slice of the flat parameter vector (whole norm blocks,
 * dit_train.h) and holds for it the f32 master weights and both moments on its device:
 * a GPU, or host memory (`offload`). The weights and gradients stay the partitions': they
 * lend them (adamw_xchg.c), and the shard reads the gradients and writes the weights in
 * place, or through bounded chunk buffers where a partition is on another device. In host
 * memory next to bf16 partitions (param dtype) it reads their bf16 gradients and writes
 * bf16 weights through the CPU backend's bf16 form: gradients read exactly as f32, the
 * step in f64 per element as on the GPU, the new weights rounded to bf16
 * (kernels/cpu/adamw.c). Per step s:
 *   1. receive one item from every partition of every data-parallel replica ("grads",
 *      P·D items; without views for a partition that does not overlap the slice), and sum
 *      the replicas' gradients in replica order;
 *   2. global norm: f64 sum of squares of each norm block it owns, sent to every other
 *      shard ("norm_out" / "norm_in"), and all blocks' partials added in block order —
 *      the same number on every shard and for every S;
 *   3. clip factor min(1, clip / (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_), the
 *      learning rate of step s, and the AdamW update (kernels/ops.h: decoupled weight
 *      decay, bias correction) writing the new compute weights into the partitions'
 *      weights;
 *   4. reply to each partition ("weights_p<p>", fanned out to the D replicas of that
 *      partition): the weights are in place and the shard let go of the buffers;
 *   5. at checkpoint steps (every `every`, and the last) stream master, m, v to the
 *      checkpoint stage ("snap") in chunks of `ckpt_chunk` bytes, each copied to the host
 *      as it is sent, and go on — unless `sync`, where it waits for the writer's "ack"
 *      (the benchmark's synchronous baseline).
 * The snapshot is of step s: its chunks all leave after step s's update and before the
 * shard takes step s + 1's gradients, so none holds an update of s + 1. The shard needs
 * no staging copy of its state for it — host memory for a snapshot is the chunks in
 * flight (capacity × chunk on the edge, one being copied) — and the partitions compute
 * step s + 1 meanwhile: the step waits only when the writer takes longer for a shard's
 * slice than the partitions take for a step (backpressure through the edge's credits).
 * Before the first step it writes the initial weights, chunk by chunk, into the weights
 * the partitions lend it and replies: Philox init (vf_dit_init with `seed`), or with
 * --resume its slice of the newest complete checkpoint, after checking that the
 * checkpoint's config matches this run's (exit 2 otherwise).
 * Shard 0 also reports the step: loss (from the last partitions), grad norm, lr, step
 * time, samples/s, tokens/s and the measured pipeline bubble.
 */
#include "stages/train/adamw_internal.h"
#include "stages/train/adamw_io.h"
#include "models/dit_base.h"
#include "models/dit_lora.h"
#include "models/dit_experts.h"
#include "stages/train/dit_train.h"
#include "formats/ckpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const vf_param_spec adamw_params[] = {
    {"model", VF_P_TABLE, VF_DIT_MODEL_DEFAULT, VF_ANY, "DiT preset (vf.models.dit \"tiny\")", NULL,
     vf_dit_model_fields},
    {"shard", VF_P_INT, "0", VF_RANGE(0, VF_TRAIN_MAX_SHARDS - 1), "index k of this shard (set by the adamw expander)"},
    {"shards", VF_P_INT, "1", VF_RANGE(1, VF_TRAIN_MAX_SHARDS), "optimizer shards S"},
    {"splits", VF_P_LIST_INT, "[]", VF_RANGE(0, 1 << 20), "partition block boundaries {0, …, depth} (set by p:train); [] = one partition"},
    {"replicas", VF_P_INT, "1", VF_RANGE(1, 64),
     "gradient sources per partition: data-parallel replicas D times sequence-parallel ranks sp (set by p:train), "
     "summed in order"},
    {"lr", VF_P_NUM, "1e-3", VF_RANGE(0, 10), "peak learning rate"},
    {"beta1", VF_P_NUM, "0.9", VF_RANGE(0, 1), "Adam β1"},
    {"beta2", VF_P_NUM, "0.999", VF_RANGE(0, 1), "Adam β2"},
    {"eps", VF_P_NUM, "1e-8", VF_RANGE(0, 1), "Adam ε"},
    {"weight_decay", VF_P_NUM, "0.01", VF_RANGE(0, 10), "decoupled weight decay"},
    {"clip_grad", VF_P_NUM, "1.0", VF_RANGE(0, 1e9), "global gradient-norm clip; 0 = off"},
    {"warmup", VF_P_INT, "0", VF_RANGE(0, 1e12), "linear warmup steps"},
    {"schedule", VF_P_STR, "\"constant\"", VF_ANY, "after warmup", "constant|cosine"},
    {"min_lr", VF_P_NUM, "0", VF_RANGE(0, 10), "cosine: final learning rate"},
    {"decay_steps", VF_P_INT, "0", VF_RANGE(0, 1e12), "cosine: step where it reaches min_lr; 0 = steps"},
    {"steps", VF_P_INT, "0", VF_RANGE(0, 1e12), "optimizer steps of the run (set by p:train)"},
    {"seed", VF_P_INT, "0", VF_RANGE(0, 9007199254740991.0), "weight init seed (and run seed)"},
    {"t_mean", VF_P_NUM, "0", VF_ANY, "timestep logit mean (for the resume config check; set by p:train)"},
    {"t_std", VF_P_NUM, "1", VF_RANGE(0, 100), "timestep logit std (for the resume config check)"},
    {"t_sampling", VF_P_STR, "\"logit_normal\"", VF_ANY, "timestep distribution (for the resume config check)"},
    {"t_shift", VF_P_NUM, "1", VF_RANGE(0.001, 1000), "timestep shift (for the resume config check)"},
    {"t_min", VF_P_NUM, "0", VF_RANGE(0, 1), "timestep range, low end (for the resume config check)"},
    {"t_max", VF_P_NUM, "1", VF_RANGE(0, 1), "timestep range, high end (for the resume config check)"},
    {"route", VF_P_STR, "\"\"", VF_ANY,
     "routing by the drawn t (the partitions' route, set by p:train): a step none of whose samples is this "
     "expert's takes no update (no AdamW step, no weight decay, Adam's step count unchanged); \"\" = none"},
    {"boundary", VF_P_NUM, "0.875", VF_RANGE(0, 1), "with route: the experts' boundary (for the resume config check)"},
    {"data", VF_P_STR, "\"\"", VF_ANY, "the latent_reader params as JSON (resume config check; set by p:train)"},
    {"every", VF_P_INT, "0", VF_RANGE(0, 1e12), "snapshot every N steps (and at the last); 0 = last only"},
    {"ckpt_dir", VF_P_STR, "\"\"", VF_ANY, "checkpoint dir to resume from; \"\" = <run dir>/ckpt"},
    {"sync", VF_P_BOOL, "false", VF_ANY, "wait for each checkpoint to be written (benchmark baseline)"},
    {"ckpt_chunk", VF_P_INT, "67108864", VF_RANGE(12, 9e15),
     "bytes of each snapshot chunk sent to the checkpoint stage (its `chunk`; set by p:train)"},
    {"device", VF_P_DEVICE, "\"cpu\"", VF_ANY, "where master weights and moments live (cpu = offload)"},
    {"dtype", VF_P_STR, "\"auto\"", VF_ANY,
     "the partitions' weight and gradient dtype (set by p:train from their devices); auto = the shard device's",
     "auto|f32|bf16"},
    {"weights", VF_P_STR, "\"\"", VF_ANY,
     "start from these DiT weights (a .safetensors file, a sharded *.safetensors.index.json, a diffusers "
     "directory or a vflow checkpoint step dir; original, ComfyUI or diffusers names; F32/BF16/F16, scaled FP8); "
     "\"\" = init from seed (set by p:train)"},
    {"expert", VF_P_STR, "\"\"", VF_ANY,
     "with weights of a two-expert model (Wan 2.2 A14B): which expert to start from (set by p:train); "
     "\"\" = the weights are one model (high | low: checked with the weights)"},
    {"lora", VF_P_STR, "\"\"", VF_ANY,
     "LoRA adapters as JSON {rank, alpha, targets} (set by p:train): the shard holds a slice of the adapters "
     "only; \"\" = every weight"},
    {"lora_init", VF_P_STR, "\"\"", VF_ANY,
     "with LoRA: start the adapters from this LoRA file (set by p:train); \"\" = init from seed"},
    {"chunk", VF_P_INT, "16777216", VF_RANGE(1, 1e12),
     "elements a chunk buffer holds (rounded up to a norm block): the bounded copies through which the shard "
     "reaches partitions on other devices"},
    {"part_devices", VF_P_LIST_STR, "[]", VF_ANY,
     "the partitions' devices (set by p:train): where one is not this shard's, the plan counts the chunk buffers"},
    {0},
};

/* ------------------------------------------------------------------ state */

typedef struct shard {
    vf_adamw_geo g;
    vf_backend *be;
    vf_dtype act, grad;
    size_t as, gs;
    float *master, *m, *v; /* backend f32, n each */
    vf_adamw_xchg x;       /* the exchange with the partitions: their lent weights and gradients */
    double *partials;      /* host, one per norm block of the model */
    vf_lr_sched lr;
    float beta1, beta2, eps, wd, clip;
    int64_t steps, every, t0;
    bool route;            /* routing by the drawn t: a step may bring none of the expert's samples */
    int64_t updates;       /* Adam's step count (its bias correction): the steps that updated */
    int64_t chunk;         /* elements of a snapshot chunk and of the start's host staging */
    bool sync;
    vf_json *config;
    char *base_json;       /* shard 0 of a LoRA run on given weights: state.json's "lora_base" */
    char ckdir[PATH_MAX];
} shard;

static int adamw_init(vf_stage *s, const vf_params *p, vf_status *st)
{
    int rc = 0;
    shard *h = calloc(1, sizeof *h);
    if (!h) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "adamw: out of memory");
    vf_stage_set_state(s, h);
    VF_TRY(vf_adamw_geo_init(p, &h->g, st));
    /* in host memory the shard keeps the partitions' dtype for their gradients and new
     * weights (the bf16 CPU backend converts to and from the f32 state) */
    vf_device dev = vf_param_device(p, "device");
    vf_dtype act, grad;
    vf_adamw_dtypes(p, &act, &grad);
    h->be = dev.kind == VF_DEV_CPU ? vf_backend_cpu_for(act, st) : vf_backend_for(dev, st);
    if (!h->be) {
        rc = st && st->code ? st->code : VF_EINVAL;
        goto fail;
    }
    h->act = h->be->act_dtype, h->grad = h->be->grad_dtype;
    h->as = vf_dtype_size(h->act), h->gs = vf_dtype_size(h->grad);
    int64_t n = h->g.n;
    vf_backend *be = h->be;
    h->master = be->alloc(be, 4 * (size_t)n, st);
    h->m = h->master ? be->alloc(be, 4 * (size_t)n, st) : NULL;
    h->v = h->m ? be->alloc(be, 4 * (size_t)n, st) : NULL;
    h->partials = calloc((size_t)h->g.nblk, sizeof *h->partials);
    if (!h->v || !h->partials)
        VF_FAIL(st, st && st->code ? st->code : VF_ENOMEM, "adamw %s: cannot allocate the state of %lld "
                "parameters", vf_stage_name(s), (long long)n);
    vf_adamw_chunks ch;
    vf_adamw_chunks_of(p, &h->g, &ch);
    VF_TRY(vf_adamw_xchg_init(&h->x, &h->g, be, &ch, st));
    h->lr = (vf_lr_sched){vf_param_num(p, "lr"), vf_param_num(p, "min_lr"), vf_param_int(p, "warmup"),
                          vf_param_int(p, "decay_steps"), strcmp(vf_param_str(p, "schedule"), "cosine") == 0};
    h->steps = vf_param_int(p, "steps");
    if (h->lr.decay_steps <= 0) h->lr.decay_steps = h->steps;
    h->beta1 = (float)vf_param_num(p, "beta1"), h->beta2 = (float)vf_param_num(p, "beta2");
    h->eps = (float)vf_param_num(p, "eps"), h->wd = (float)vf_param_num(p, "weight_decay");
    h->clip = (float)vf_param_num(p, "clip_grad");
    h->every = vf_param_int(p, "every");
    h->sync = vf_param_bool(p, "sync");
    h->route = vf_param_str(p, "route")[0] != 0;
    h->chunk = vf_adamw_chunk(&h->g, vf_param_int(p, "ckpt_chunk"));
    VF_TRY(vf_adamw_config(p, h->steps, &h->config, st));
fail:
    return rc;
}

static void adamw_fini(vf_stage *s)
{
    shard *h = vf_stage_state(s);
    if (!h) return;
    vf_backend *be = h->be;
    if (be) {
        if (h->master) be->free(be, h->master);
        if (h->m) be->free(be, h->m);
        if (h->v) be->free(be, h->v);
    }
    vf_adamw_xchg_fini(&h->x);
    free(h->partials);
    vf_json_free(h->config);
    free(h->base_json);
    vf_adamw_geo_fini(&h->g);
    free(h);
    vf_stage_set_state(s, NULL);
}

/* ------------------------------------------------------------------ start */

static void warn_cb(void *user, const char *msg) { vf_log(user, VF_LOG_WARN, "%s", msg); }

/* Shard 0 of a LoRA run: the identity of its base for state.json ("lora_base", models/
 * dit_base.h), checked against the checkpoint it resumes from (ck; NULL: a fresh start). */
static int lora_base_of_run(const vf_params *p, const vf_ckpt *ck, char **json, vf_status *st)
{
    int rc = 0;
    char w[PATH_MAX];
    vf_dit_base b = {0};
    vf_json *o = NULL;
    VF_TRY(vf_dit_expert_path(vf_param_str(p, "weights"), vf_param_str(p, "expert"), w, sizeof w, st));
    if (ck) VF_TRY(vf_dit_base_verify(ck->path, ck->state, w, false, "--set weights=", &b, st));
    if (!w[0]) return 0; /* the seeded init: nothing to record */
    if (!b.sha256[0]) VF_TRY(vf_dit_base_id(w, &b, st));
    if (!(o = vf_dit_base_json(&b)) || !(*json = vf_json_emit(o, false, 0)))
        VF_FAIL(st, VF_ENOMEM, "adamw: out of memory");
fail:
    vf_json_free(o);
    return rc;
}

/* The start's values of elements [lo + a, lo + a + cnt) of the slice into host (and, on
 * a resume, the moments into m, v): the checkpoint's, or the init's. */
static int start_chunk(shard *h, const vf_params *p, const vf_ckpt *ck, const vf_dit_wsrc *w, int64_t a,
                       int64_t cnt, float *host, float *m, float *v, vf_status *st)
{
    int64_t at = h->g.lo + a;
    if (ck) {
        int rc = vf_adamw_load_master(ck->path, h->g.tl, at, at + cnt, host, st);
        return rc ? rc : vf_ckpt_read_moments(ck->path, at, at + cnt, m, v, st);
    }
    const char *lpath = vf_param_str(p, "lora_init");
    if (h->g.lora && lpath[0]) /* an existing adapter, in any of the namings users have */
        return vf_dit_lora_file_read(lpath, h->g.lora, host, at, cnt, st);
    if (h->g.lora) /* the partitions hold the base; the shards the adapters */
        vf_dit_lora_init(h->g.lora, (uint64_t)vf_param_int(p, "seed"), at, cnt, host);
    else if (w) /* the user's weights (checked at plan time; again at open) */
        return vf_dit_wsrc_read(w, h->g.l, host, at, cnt, st);
    else
        vf_dit_init(h->g.l, (uint64_t)vf_param_int(p, "seed"), at, cnt, host);
    return 0;
}

/* Initial master weights and moments: the newest checkpoint with --resume, else init;
 * read and uploaded chunk by chunk, so the host staging is two chunks whatever the
 * slice. */
static int load_start(vf_stage *s, vf_ctx *ctx, shard *h, vf_status *st)
{
    int rc = 0;
    vf_ckpt ck = {0};
    vf_dit_wsrc *w = NULL;
    float *host = NULL, *mv = NULL;
    vf_backend *be = h->be;
    int64_t n = h->g.n, ce = h->chunk;
    const vf_params *p = vf_stage_params(s);
    vf_ckpt_dir(vf_param_str(p, "ckpt_dir"), vf_run_dir(ctx), h->ckdir, sizeof h->ckdir);
    bool found = false;
    if (h->g.k == 0 && h->g.lora && !vf_resuming(ctx)) VF_TRY(lora_base_of_run(p, NULL, &h->base_json, st));
    if (vf_resuming(ctx)) {
        vf_status fs;
        vf_status_clear(&fs);
        rc = vf_ckpt_find(h->ckdir, warn_cb, ctx, &ck, &fs);
        if (rc == VF_ENOTFOUND) {
            rc = vf_train_no_ckpt(ctx, &ck, &fs, false, st);
            if (rc) goto fail;
        } else if (rc) {
            *st = fs;
            goto fail;
        } else {
            found = true;
        }
        if (h->g.k == 0 && h->g.lora) VF_TRY(lora_base_of_run(p, found ? &ck : NULL, &h->base_json, st));
    }
    host = vf_alloc(sizeof(float) * (size_t)ce, st);
    mv = found ? vf_alloc(2 * sizeof(float) * (size_t)ce, st) : NULL;
    if (!host || (found && !mv)) VF_FAIL(st, VF_ENOMEM, "adamw %s: no host staging", vf_stage_name(s));
    const char *wpath = vf_param_str(p, "weights");
    if (found) {
        /* older LoRA checkpoints name their base in the config (the path as given); the
         * base is checked by content instead (lora_base_of_run) */
        const vf_json *old_base = vf_json_get(vf_ckpt_state_config(ck.state), "lora.base");
        if (old_base && vf_json_set(h->config, "lora.base", vf_json_clone(old_base)))
            VF_FAIL(st, VF_ENOMEM, "adamw %s: out of memory", vf_stage_name(s));
        VF_TRY(vf_ckpt_config_check(ck.path, vf_ckpt_state_config(ck.state), h->config, st));
    } else if (!h->g.lora && wpath[0]) {
        VF_TRY(vf_dit_wsrc_open_expert(wpath, vf_param_str(p, "expert"), &w, st));
        VF_TRY(vf_dit_wsrc_check(w, h->g.l, st));
    }
    for (int64_t a = 0; a < n; a += ce) {
        int64_t cnt = n - a < ce ? n - a : ce;
        VF_TRY(start_chunk(h, p, found ? &ck : NULL, w, a, cnt, host, mv, mv + ce, st));
        be->upload(be, h->master + a, host, cnt, VF_DTYPE_F32);
        VF_TRY(vf_adamw_xchg_put(&h->x, host, a, cnt, st));
        if (found) {
            be->upload(be, h->m + a, mv, cnt, VF_DTYPE_F32);
            be->upload(be, h->v + a, mv + ce, cnt, VF_DTYPE_F32);
        }
    }
    if (found) {
        h->t0 = ck.step;
        /* a routed expert's count lags the step by the steps without its samples */
        h->updates = vf_json_get_int(ck.state, "adam_step", ck.step);
        vf_log(ctx, VF_LOG_INFO, "resuming at step %lld from %s", (long long)ck.step, ck.path);
        if (h->g.k == 0) vf_summary(ctx, "resume", "resumed from step %lld (%s)", (long long)ck.step, ck.path);
    } else {
        be->memset0(be, h->m, 4 * (size_t)n);
        be->memset0(be, h->v, 4 * (size_t)n);
        h->t0 = 0, h->updates = 0;
        const char *lpath = vf_param_str(p, "lora_init");
        if (h->g.k == 0 && h->g.lora && lpath[0]) vf_log(ctx, VF_LOG_INFO, "LoRA adapters start from %s", lpath);
        if (h->g.k == 0 && w)
            vf_log(ctx, VF_LOG_INFO, "starting from %s (%s names)", wpath, vf_dit_naming_name(vf_dit_wsrc_naming(w)));
    }
    /* the uploads above read the staging asynchronously on a device: done before it goes */
    VF_TRY(be->sync(be, st));
fail:
    if (rc) vf_status_prefix(st, "adamw %s", vf_stage_name(s));
    vf_dit_wsrc_close(w);
    vf_ckpt_fini(&ck);
    vf_free(host);
    vf_free(mv);
    return rc;
}

/* ------------------------------------------------------------------ per step */

static int set_nums(vf_item *it, vf_status *st, int n, const char *const *keys, const double *vals)
{
    for (int i = 0; i < n; i++) {
        int rc = vf_item_set_num(it, keys[i], vals[i], st);
        if (rc) return rc;
    }
    return 0;
}

/* What shard 0 learns from the partitions' items of one step. */
typedef struct step_info {
    double loss, samples, tokens, bubble;
    double flops, peak; /* model FLOPs of the step; Σ bf16 peak of the distinct devices, 0 unknown */
    int64_t t_first, t_last;
    vf_json *cursors;
} step_info;

static double num_or(const vf_item *it, const char *k, double def)
{
    double v;
    return vf_item_num(it, k, &v) == 0 ? v : def;
}

/* What shard 0 reports of the step, from the partitions' items (held by the exchange). */
static void step_facts(const shard *h, step_info *si)
{
    vf_item *const *got = h->x.got;
    /* what shard 0 reports */
    si->loss = 0, si->samples = 0, si->tokens = 0, si->flops = 0, si->peak = 0;
    double busy = 0;
    bool unknown_peak = false;
    si->t_first = INT64_MAX, si->t_last = 0;
    for (int q = 0; q < h->g.P; q++)
        for (int r = 0; r < h->g.D; r++) {
            vf_item *it = got[q * h->g.D + r];
            int64_t t0 = (int64_t)num_or(it, "t0_ns", 0), t1 = (int64_t)num_or(it, "t1_ns", 0);
            if (t0 < si->t_first) si->t_first = t0;
            if (t1 > si->t_last) si->t_last = t1;
            busy += num_or(it, "busy_ns", 0);
            /* routing: each replica's mean over its routed samples, weighed by their count */
            if (q == h->g.P - 1)
                si->loss += h->route ? num_or(it, "loss", 0) * num_or(it, "routed", 0) : num_or(it, "loss", 0) / h->g.D;
            /* each device's peak once: partitions may share a device */
            const char *dev = vf_item_str(it, "peak_dev");
            double pk = num_or(it, "peak_flops", 0);
            if (!(pk > 0) || !dev) unknown_peak = true;
            bool again = false;
            for (int q2 = 0; q2 <= q && !again && dev; q2++)
                for (int r2 = 0; r2 < h->g.D && !again; r2++) {
                    if (q2 == q && r2 == r) break;
                    const char *o = vf_item_str(got[q2 * h->g.D + r2], "peak_dev");
                    again = o && strcmp(o, dev) == 0;
                }
            if (!again && pk > 0) si->peak += pk;
            if (q == 0) {
                si->flops += num_or(it, "flops", 0);
                si->samples += num_or(it, "samples", 0);
                si->tokens += num_or(it, "tokens", 0);
                const char *c = vf_item_str(it, "cursor");
                if (si->cursors) vf_json_push(si->cursors, vf_json_str(c ? c : ""));
            }
        }
    if (unknown_peak) si->peak = 0; /* a partition on the CPU or an unknown GPU: no MFU */
    if (h->route) si->loss = si->samples > 0 ? si->loss / si->samples : 0;
    double window = (double)(si->t_last - si->t_first) * (double)(h->g.P * h->g.D);
    si->bubble = window > 0 ? 1.0 - busy / window : 0;
}

/* Partial sums of squares of the owned norm blocks, exchanged with the other shards;
 * returns the global norm (all blocks, in block order). */
static int global_norm(vf_stage *s, vf_ctx *ctx, shard *h, int64_t step, double *norm, vf_status *st)
{
    int rc = 0;
    VF_TRY(vf_adamw_xchg_sumsq(&h->x, h->partials, st));
    if (h->g.S > 1) {
        int64_t nb = h->g.b1 - h->g.b0, bytes = 8 * nb;
        vf_tensor *t = vf_tensor_new(VF_DTYPE_U8, 1, &bytes, st);
        vf_item *it = t ? vf_item_new("norm", st) : NULL;
        if (!it) {
            vf_tensor_unref(t);
            return VF_ENOMEM;
        }
        memcpy(t->data, h->partials + h->g.b0, (size_t)bytes);
        static const char *const keys[] = {"step", "shard", "blk0", "nblk"};
        double vals[] = {(double)step, h->g.k, (double)h->g.b0, (double)nb};
        if ((rc = vf_item_put(it, "partials", t, st)) || (rc = set_nums(it, st, 4, keys, vals))) {
            vf_item_free(it);
            return rc;
        }
        if ((rc = vf_send(vf_out(ctx, "norm_out"), it, st)) < 0) return rc;
        for (int got = 0; got < h->g.S - 1; got++) {
            vf_item *in = NULL;
            rc = vf_recv(vf_in(ctx, "norm_in"), &in, st);
            if (rc == VF_EOS)
                return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                     "adamw %s: another shard ended during step %lld", vf_stage_name(s),
                                     (long long)step);
            if (rc) return rc;
            vf_tensor *p = vf_item_get(in, "partials");
            int64_t b0 = (int64_t)num_or(in, "blk0", -1), k = (int64_t)num_or(in, "nblk", -1);
            if ((int64_t)num_or(in, "step", -1) != step || !p || b0 < 0 || k < 0 || b0 + k > h->g.nblk ||
                (int64_t)vf_tensor_nbytes(p) != 8 * k) {
                vf_item_free(in);
                return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                     "adamw %s: malformed norm partials for step %lld", vf_stage_name(s),
                                     (long long)step);
            }
            memcpy(h->partials + b0, p->data, (size_t)(8 * k));
            vf_item_free(in);
        }
    }
    double sum = 0;
    for (int64_t j = 0; j < h->g.nblk; j++) sum += h->partials[j];
    *norm = sqrt(sum);
fail:
    return rc;
}

/* One snapshot chunk: master, m, v of slice elements [a, a + cnt) copied to the host,
 * tagged with the step; the first chunk carries the step's numbers, shard 0's also the
 * config, the data cursors, the loss and a LoRA run's base (state.json). */
static vf_item *snap_chunk(vf_stage *s, shard *h, int64_t step, double lr, const step_info *si, int64_t a,
                           int64_t cnt, vf_status *st)
{
    int rc = 0;
    vf_item *it = vf_item_new("snap", st);
    if (!it) return NULL;
    const float *src[3] = {h->master, h->m, h->v};
    static const char *const names[3] = {"master", "exp_avg", "exp_avg_sq"};
    for (int i = 0; i < 3; i++) {
        vf_tensor *t = vf_tensor_new(VF_DTYPE_F32, 1, &cnt, st);
        if (!t) VF_FAIL(st, VF_ENOMEM, "adamw %s: snapshot of step %lld: out of host memory",
                        vf_stage_name(s), (long long)step);
        h->be->download(h->be, t->data, src[i] + a, cnt, VF_DTYPE_F32);
        VF_TRY(vf_item_put(it, names[i], t, st));
    }
    static const char *const keys[] = {"step", "shard", "shards", "c0", "off", "n", "total", "lr", "replicas",
                                       "stages"};
    double vals[] = {(double)step, h->g.k, h->g.S, (double)(h->g.lo + a), (double)h->g.lo, (double)h->g.n,
                     (double)h->g.total, lr, h->g.D, h->g.P};
    VF_TRY(set_nums(it, st, a == 0 ? 10 : 4, keys, vals));
    if (h->g.k == 0 && a == 0) {
        VF_TRY(vf_item_set_num(it, "adam_step", (double)h->updates, st));
        char *c = vf_json_emit(h->config, true, 0), *cur = si->cursors ? vf_json_emit(si->cursors, true, 0) : NULL;
        if (c) rc = vf_item_set_str(it, "config", c, st);
        if (!rc && cur) rc = vf_item_set_str(it, "cursors", cur, st);
        free(c);
        free(cur);
        VF_TRY(rc);
        VF_TRY(vf_item_set_num(it, "loss", si->loss, st));
        if (h->base_json) VF_TRY(vf_item_set_str(it, "lora_base", h->base_json, st));
    }
    return it;
fail:
    vf_item_free(it);
    return NULL;
}

/* The snapshot of step `step`, streamed to the checkpoint stage chunk by chunk (the
 * header's rule: all before the next update); with `sync`, then the writer's ack. */
static int snapshot(vf_stage *s, vf_ctx *ctx, shard *h, int64_t step, double lr, const step_info *si,
                    vf_status *st)
{
    int rc = 0;
    vf_port *out = vf_out(ctx, "snap");
    if (!out) return 0;
    for (int64_t a = 0; a < h->g.n; a += h->chunk) {
        int64_t cnt = h->g.n - a < h->chunk ? h->g.n - a : h->chunk;
        vf_item *it = snap_chunk(s, h, step, lr, si, a, cnt, st);
        if (!it) return st->code ? st->code : VF_ENOMEM;
        rc = vf_send(out, it, st);
        if (rc == VF_EOS) return 0; /* no writer any more: nothing to stream, nothing to wait for */
        if (rc) return rc;
    }
    if (h->sync) {
        vf_item *ack = NULL;
        rc = vf_recv(vf_in(ctx, "ack"), &ack, st);
        if (rc == VF_EOS) rc = 0;
        vf_item_free(ack);
    }
    return rc;
}

/* Orderly end (dit_train.h vf_train_finish): outputs first, then inputs to their end. */
static int finish(vf_ctx *ctx, shard *h, vf_status *st)
{
    char names[VF_TRAIN_MAX_PARTS][VF_NAME_MAX];
    const char *outs[VF_TRAIN_MAX_PARTS + 2] = {"norm_out", "snap"};
    for (int q = 0; q < h->g.P; q++) {
        snprintf(names[q], sizeof names[q], "weights_p%d", q);
        outs[2 + q] = names[q];
    }
    static const char *const drain[] = {"grads", "norm_in", "ack"};
    return vf_train_finish(ctx, outs, 2 + h->g.P, NULL, 0, drain, 3, st);
}

static int adamw_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    int rc = 0;
    shard *h = vf_stage_state(s);
    step_info si = {0};
    /* the partitions lend their weights first; the start goes straight into them */
    rc = vf_adamw_xchg_recv(&h->x, s, ctx, -1, st);
    if (rc == VF_EOS) {
        vf_log(ctx, VF_LOG_INFO, "the partitions ended before the first step");
        return finish(ctx, h, st);
    }
    VF_TRY(rc);
    VF_TRY(load_start(s, ctx, h, st));
    if (h->t0 >= h->steps) {
        vf_log(ctx, VF_LOG_INFO, "already at step %lld of %lld: nothing to train", (long long)h->t0,
               (long long)h->steps);
        VF_TRY(vf_adamw_xchg_release(&h->x, st));
        if (h->g.k == 0)
            vf_summary(ctx, "train", "already at step %lld of %lld: nothing to train (steps is the run's total: "
                       "--set steps=N with N > %lld trains on)", (long long)h->t0, (long long)h->steps,
                       (long long)h->t0);
        return finish(ctx, h, st);
    }
    VF_TRY(vf_adamw_xchg_reply(&h->x, ctx, h->t0, st));
    int64_t t_prev = vf_train_now_ns(), done = h->t0, last_snap = h->t0;
    double last_lr = 0;
    for (int64_t step = h->t0 + 1; step <= h->steps; step++) {
        step_info cur = {0};
        cur.cursors = h->g.k == 0 ? vf_json_arr() : NULL;
        rc = vf_adamw_xchg_recv(&h->x, s, ctx, step, st);
        if (rc == 0) step_facts(h, &cur);
        if (rc) vf_json_free(cur.cursors);
        if (rc == VF_EOS) {
            /* The partitions stopped at a step boundary (a drain: Ctrl-C, SIGTERM): every
             * shard sees it after the same step, so all snapshot that step and the run
             * can be resumed from where it stopped. */
            rc = 0;
            if (done > last_snap) {
                vf_log(ctx, VF_LOG_INFO, "partitions stopped after step %lld: snapshot for a final checkpoint",
                       (long long)done);
                VF_TRY(snapshot(s, ctx, h, done, last_lr, &si, st));
            } else {
                vf_log(ctx, VF_LOG_INFO, "partitions stopped before step %lld", (long long)step);
            }
            break;
        }
        VF_TRY(rc);
        vf_json_free(si.cursors);
        si = cur;
        /* routing: no sample of this expert in the step (every shard sees the same count)
         * leaves its weights, moments and Adam's step count as they are */
        bool none = h->route && si.samples == 0;
        double norm = 0, coef = 1.0, lr = vf_train_lr(&h->lr, step);
        if (!none) {
            VF_TRY(vf_adamw_xchg_sum(&h->x, st));
            VF_TRY(global_norm(s, ctx, h, step, &norm, st));
            coef = h->clip > 0 ? (double)h->clip / (norm + 1e-6) : 1.0;
            if (coef > 1.0) coef = 1.0;
            vf_adamw_hyper hp = {(float)lr, h->beta1, h->beta2, h->eps, h->wd, (float)coef, ++h->updates};
            VF_TRY(vf_adamw_xchg_update(&h->x, h->master, h->m, h->v, &hp, st));
        }
        h->x.kept = none;
        /* Async: the reply goes out first, so the partitions compute the next step while
         * the snapshot is copied and sent. Sync (the benchmark's baseline, as a save
         * inside a training loop): the snapshot is written and acknowledged before the
         * reply. ckpt_s is the shard's time in the snapshot; the step's wall time runs
         * from reply to reply. */
        bool ck = step == h->steps || (h->every > 0 && step % h->every == 0);
        int64_t t_ck = vf_train_now_ns();
        if (ck && h->sync) VF_TRY(snapshot(s, ctx, h, step, lr, &si, st));
        double ckpt_s = (double)(vf_train_now_ns() - t_ck) * 1e-9;
        int64_t moved = h->x.moved;
        if (step < h->steps) VF_TRY(vf_adamw_xchg_reply(&h->x, ctx, step, st));
        else VF_TRY(vf_adamw_xchg_release(&h->x, st));
        int64_t t_now = vf_train_now_ns();
        {
            char row[160];
            snprintf(row, sizeof row, "{\"event\":\"xchg\",\"step\":%lld,\"shard\":%d,\"copied_bytes\":%lld}",
                     (long long)step, h->g.k, (long long)moved);
            vf_metric_row(ctx, row);
        }
        if (ck && !h->sync) {
            VF_TRY(snapshot(s, ctx, h, step, lr, &si, st));
            ckpt_s = (double)(vf_train_now_ns() - t_now) * 1e-9;
        }
        if (h->g.k == 0) {
            double dt = (double)(t_now - t_prev) * 1e-9;
            char row[700];
            if (none) /* a step without the expert's samples: no loss, no gradient to speak of */
                snprintf(row, sizeof row,
                         "{\"event\":\"train_step\",\"step\":%lld,\"samples\":0,\"lr\":%.9g,\"step_s\":%.6f,"
                         "\"ckpt_s\":%.6f}", (long long)step, lr, dt, ckpt_s);
            else
                snprintf(row, sizeof row,
                         "{\"event\":\"train_step\",\"step\":%lld,\"loss\":%.9g,\"grad_norm\":%.9g,\"clip\":%.6g,"
                         "\"lr\":%.9g,\"step_s\":%.6f,\"samples_s\":%.6g,\"tokens_s\":%.6g,\"bubble\":%.4f,"
                         "\"ckpt_s\":%.6f}",
                         (long long)step, si.loss, norm, coef, lr, dt, dt > 0 ? si.samples / dt : 0,
                         dt > 0 ? si.tokens / dt : 0, si.bubble, ckpt_s);
            /* model FLOPs over the devices' bf16 peak: GPUs of the peak table only */
            double mfu = !none && si.peak > 0 && dt > 0 ? si.flops / dt / si.peak : -1;
            size_t len = strlen(row);
            if (mfu >= 0 && len > 0) snprintf(row + len - 1, sizeof row - len + 1, ",\"mfu\":%.6g}", mfu);
            len = strlen(row);
            if (h->route && !none && len > 0) /* the expert's samples of the step, over the replicas */
                snprintf(row + len - 1, sizeof row - len + 1, ",\"samples\":%.0f}", si.samples);
            /* the expert trained: its TensorBoard tags carry the name (runtime/driver/tb_log.c),
             * so two experts trained in one run log apart */
            const char *ex = vf_param_str(vf_stage_params(s), "expert");
            len = strlen(row);
            if (ex[0] && len > 0) snprintf(row + len - 1, sizeof row - len + 1, ",\"expert\":\"%.8s\"}", ex);
            vf_metric_row(ctx, row);
            if (mfu >= 0) vf_metric(ctx, "mfu", mfu);
            vf_metric(ctx, "step", (double)step);
            if (!none) {
                vf_metric(ctx, "loss", si.loss);
                vf_metric(ctx, "grad_norm", norm);
            }
            vf_metric(ctx, "lr", lr);
            vf_metric(ctx, "step_s", dt);
            vf_metric(ctx, "samples_s", dt > 0 ? si.samples / dt : 0);
            vf_metric(ctx, "tokens_s", dt > 0 ? si.tokens / dt : 0);
            vf_metric(ctx, "bubble", si.bubble);
        }
        t_prev = t_now;
        done = step, last_lr = lr;
        if (ck) last_snap = step;
    }
    if (h->g.k == 0 && done > h->t0) /* what a run too short for a progress line did */
        vf_summary(ctx, "train", "trained steps %lld-%lld of %lld%s, last loss %.6g", (long long)h->t0 + 1,
                   (long long)done, (long long)h->steps, done < h->steps ? " (stopped early)" : "", si.loss);
    rc = finish(ctx, h, st);
fail:
    vf_json_free(si.cursors);
    return rc;
}

/* What the planner may turn: more shards (the sugar splits the vector by them), and the
 * shards on the host. */
static const vf_knob_spec adamw_knobs[] = {
    {.name = "shards", .param = "shards", .arg = "shards", .arg_only = true, .move = VF_KNOB_DOUBLE, .max = 24,
     .rank = 40},
    {.name = "offload", .param = "device", .move = VF_KNOB_SET, .value = "\"cpu\"", .rank = 50,
     .note = "optimizer shards on the host"},
    {0},
};

/* What lua/train.lua's adamw expander takes (besides `shards`, a param of each shard too). */
static const vf_param_spec adamw_expander_params[] = {
    {"isolate", VF_P_BOOL, "true", VF_ANY,
     "one process per shard (worker = its name); false leaves placement to the default rules (lua/train.lua)"},
    {0},
};

static const vf_stage_ops adamw_ops = {
    .api_version = VF_API_VERSION,
    .kind = "adamw",
    .doc = "AdamW optimizer shard: f32 master + moments of one slice, global-norm clipping across "
           "shards, warmup + cosine/constant lr, snapshots for async checkpoints",
    .params = adamw_params,
    .ports = vf_adamw_ports,
    .memory = vf_adamw_memory,
    .init = adamw_init,
    .run = adamw_run,
    .fini = adamw_fini,
    .knobs = adamw_knobs,
    .expander_params = adamw_expander_params,
};
VF_REGISTER_STAGE(adamw_ops)
