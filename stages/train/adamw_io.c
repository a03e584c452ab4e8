/* adamw_io.c — the run config and the master weights of a checkpoint for the adamw shard
 * (adamw_io.h). */
#include "stages/train/adamw_io.h"
#include "formats/ckpt.h"
#include "formats/st_sharded.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ config */

static int put(vf_json *o, const char *k, vf_json *v, vf_status *st)
{
    if (!v || vf_json_set(o, k, v) != 0)
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    return 0;
}

int vf_adamw_config(const vf_params *p, int64_t steps, vf_json **out, vf_status *st)
{
    int rc = 0;
    vf_params *data = NULL;
    vf_json *o = vf_json_obj();
    *out = NULL;
    if (!o) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");

    const vf_json *m = vf_params_ctree(vf_param_table(p, "model"));
    for (int i = 0; i < vf_json_len(m); i++) {
        const char *k = vf_json_key_at(m, i);
        if (strcmp(k, "name") == 0) continue; /* a label; the numbers are what must match */
        /* caption bytes, the default, leave the config as it was before the text field */
        if (strcmp(k, "text") == 0 && m->items[i]->type == VF_JSON_STR && strcmp(m->items[i]->s, "bytes") == 0)
            continue;
        char key[96];
        snprintf(key, sizeof key, "model.%s", k);
        VF_TRY(put(o, key, vf_json_clone(m->items[i]), st));
    }
    bool cosine = strcmp(vf_param_str(p, "schedule"), "cosine") == 0;
    int64_t decay = vf_param_int(p, "decay_steps");
    VF_TRY(put(o, "optim.lr", vf_json_num(vf_param_num(p, "lr")), st));
    VF_TRY(put(o, "optim.beta1", vf_json_num(vf_param_num(p, "beta1")), st));
    VF_TRY(put(o, "optim.beta2", vf_json_num(vf_param_num(p, "beta2")), st));
    VF_TRY(put(o, "optim.eps", vf_json_num(vf_param_num(p, "eps")), st));
    VF_TRY(put(o, "optim.weight_decay", vf_json_num(vf_param_num(p, "weight_decay")), st));
    VF_TRY(put(o, "optim.clip_grad", vf_json_num(vf_param_num(p, "clip_grad")), st));
    VF_TRY(put(o, "optim.warmup", vf_json_int(vf_param_int(p, "warmup")), st));
    VF_TRY(put(o, "optim.schedule", vf_json_str(vf_param_str(p, "schedule")), st));
    /* the decay horizon shapes a cosine schedule only: a constant one may be extended */
    VF_TRY(put(o, "optim.min_lr", vf_json_num(cosine ? vf_param_num(p, "min_lr") : 0.0), st));
    VF_TRY(put(o, "optim.decay_steps", vf_json_int(cosine ? (decay > 0 ? decay : steps) : 0), st));
    VF_TRY(put(o, "train.seed", vf_json_int(vf_param_int(p, "seed")), st));
    VF_TRY(put(o, "train.t_mean", vf_json_num(vf_param_num(p, "t_mean")), st));
    VF_TRY(put(o, "train.t_std", vf_json_num(vf_param_num(p, "t_std")), st));
    /* the rest of the timestep distribution where it is not the default, so a checkpoint
     * of a run with the default resumes as before */
    if (strcmp(vf_param_str(p, "t_sampling"), "logit_normal") != 0)
        VF_TRY(put(o, "train.t_sampling", vf_json_str(vf_param_str(p, "t_sampling")), st));
    static const char *const tk[] = {"t_shift", "t_min", "t_max"};
    static const double tdef[] = {1.0, 0.0, 1.0};
    for (int i = 0; i < 3; i++) {
        if (vf_param_num(p, tk[i]) == tdef[i]) continue;
        char key[32];
        snprintf(key, sizeof key, "train.%s", tk[i]);
        VF_TRY(put(o, key, vf_json_num(vf_param_num(p, tk[i])), st));
    }
    /* a run that trains one expert of a two-expert model resumes only as that expert */
    if (vf_param_str(p, "expert")[0]) VF_TRY(put(o, "train.expert", vf_json_str(vf_param_str(p, "expert")), st));
    /* an expert routed by the drawn t resumes only as that, at the same boundary */
    if (vf_param_str(p, "route")[0]) {
        VF_TRY(put(o, "train.route", vf_json_str(vf_param_str(p, "route")), st));
        VF_TRY(put(o, "train.boundary", vf_json_num(vf_param_num(p, "boundary")), st));
    }
    /* a LoRA run resumes only as the same adapters */
    const char *lj = vf_param_str(p, "lora");
    if (lj && lj[0]) {
        vf_json *lora = vf_json_parse(lj, st);
        if (!lora) VF_FAIL(st, VF_EUSAGE, "adamw: param lora is not JSON");
        static const char *const lk[] = {"rank", "alpha", "targets"};
        for (int i = 0; i < 3 && !rc; i++) {
            char key[32];
            snprintf(key, sizeof key, "lora.%s", lk[i]);
            const vf_json *v = vf_json_get(lora, lk[i]);
            if (v) rc = put(o, key, vf_json_clone(v), st);
        }
        vf_json_free(lora);
        VF_TRY(rc); /* the frozen base: by content in state.json's lora_base (models/dit_base.h) */
    }

    const char *dj = vf_param_str(p, "data");
    if (dj && dj[0]) {
        data = vf_params_parse_for("latent_reader", dj, "adamw data", st);
        if (!data) {
            vf_status_prefix(st, "adamw: param data (the latent_reader params as JSON)");
            rc = VF_EUSAGE;
            goto fail;
        }
        static const char *const keys[] = {"batch", "seed", "nshards", "drop_last", "text_len"};
        const vf_json *t = vf_params_ctree(data);
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            const vf_json *v = vf_json_get(t, keys[i]);
            if (!v) continue;
            char key[64];
            snprintf(key, sizeof key, "data.%s", keys[i]);
            VF_TRY(put(o, key, vf_json_clone(v), st));
        }
    }
    *out = o;
    o = NULL;
fail:
    vf_params_free(data);
    vf_json_free(o);
    return rc;
}

/* ------------------------------------------------------------------ master weights */

int vf_adamw_load_master(const char *ckpt_path, const vf_dit_layout *l, int64_t lo, int64_t hi,
                         float *dst, vf_status *st)
{
    int rc = 0;
    vf_st_sharded *f = NULL;
    char path[PATH_MAX + 64];
    /* one file, or the shards behind the index above the writer's model_shard_bytes; a
     * LoRA run's adapters (its config check has made sure the run is one) */
    vf_ckpt_model_path(ckpt_path, path, sizeof path);
    VF_TRY(vf_st_sharded_open(path, &f, st));
    int64_t covered = 0;
    for (int i = 0; i < l->n; i++) {
        const vf_dit_tensor *t = &l->t[i];
        int64_t a = t->offset > lo ? t->offset : lo;
        int64_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (b <= a) continue;
        const vf_st_tensor *ft;
        const vf_st_file *sf = NULL;
        const char *fp = path;
        if (!vf_st_sharded_find(f, t->name, &sf, &fp))
            VF_FAIL(st, VF_ECORRUPT, "%s: tensor %s is missing", path, t->name);
        VF_TRY(vf_st_expect(sf, t->name, t->ndim, t->shape, &ft, st));
        if (ft->dtype != VF_ST_F32)
            VF_FAIL(st, VF_ECORRUPT, "%s: tensor %s is %s; checkpoints hold F32 master weights", fp,
                    t->name, vf_st_dtype_name(ft->dtype));
        /* the mapping need not be aligned for floats: copy bytes */
        memcpy(dst + (a - lo), (const char *)ft->data + (size_t)(a - t->offset) * 4, (size_t)(b - a) * 4);
        covered += b - a;
    }
    if (covered != hi - lo)
        VF_FAIL(st, VF_ECORRUPT, "%s: the model layout covers %lld of the %lld elements [%lld, %lld)",
                path, (long long)covered, (long long)(hi - lo), (long long)lo, (long long)hi);
fail:
    vf_st_sharded_close(f);
    return rc;
}
