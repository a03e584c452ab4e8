/* ckpt_state.c — a checkpoint's state.json (ckpt.h): its text from what the writer
 * knows, what the readers take out of the parsed file, and the config check a resume
 * makes with it.
 */
#include "formats/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ writing */

char *vf_ckpt_state_text(const vf_ckpt_state_info *s, vf_status *st)
{
    vf_json *o = vf_json_obj(), *cfg = NULL, *cur = NULL;
    char *text = NULL;
    vf_status ps;
    vf_status_clear(&ps);
    cfg = s->config ? vf_json_parse(s->config, &ps) : vf_json_obj();
    cur = s->cursors ? vf_json_parse(s->cursors, &ps) : vf_json_arr();
    if (!o || !cfg || !cur) {
        vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "checkpoint: state.json: the config or cursors: %s", ps.msg);
        goto out;
    }
    char hash[17];
    vf_ckpt_config_hash(cfg, hash);
    int bad = 0;
    bad |= vf_json_set(o, "format", vf_json_str("vflow-checkpoint v1"));
    bad |= vf_json_set(o, "step", vf_json_int(s->step));
    bad |= vf_json_set(o, "cursors", cur);
    cur = NULL;
    const vf_json *seed = vf_json_get(cfg, "train.seed");
    bad |= vf_json_set(o, "seed", seed ? vf_json_clone(seed) : vf_json_null());
    vf_json *lr = vf_json_obj();
    if (lr) {
        bad |= vf_json_set(lr, "at_step", vf_json_num(s->lr));
        static const char *const keys[] = {"optim.lr", "optim.schedule", "optim.warmup", "optim.decay_steps",
                                           "optim.min_lr"};
        for (int i = 0; i < 5; i++) {
            const vf_json *v = vf_json_get(cfg, keys[i]);
            if (v) bad |= vf_json_set(lr, keys[i] + 6, vf_json_clone(v));
        }
    }
    bad |= vf_json_set(o, "lr", lr);
    bad |= vf_json_set(o, "adam_step", vf_json_int(s->step - s->skipped));
    bad |= vf_json_set(o, "loss", vf_json_num(s->loss));
    bad |= vf_json_set(o, "params", vf_json_int(s->params));
    bad |= vf_json_set(o, "shards", vf_json_int(s->shards));
    bad |= vf_json_set(o, "replicas", vf_json_int(s->replicas));
    bad |= vf_json_set(o, "stages", vf_json_int(s->stages));
    bad |= vf_json_set(o, "config_hash", vf_json_str(hash));
    bad |= vf_json_set(o, "config", cfg);
    cfg = NULL;
    vf_json *base = s->lora_base ? vf_json_parse(s->lora_base, &ps) : NULL;
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

/* ------------------------------------------------------------------ reading */

const vf_json *vf_ckpt_state_config(const vf_json *state) { return vf_json_get(state, "config"); }

const char *vf_ckpt_state_cursor(const vf_json *state, int r)
{
    const vf_json *c = vf_json_at(vf_json_get(state, "cursors"), r);
    return c && c->type == VF_JSON_STR ? c->s : "";
}

/* ------------------------------------------------------------------ config */

void vf_ckpt_config_hash(const vf_json *config, char out[17])
{
    char *text = vf_json_emit(config, true, 0);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = text ? text : ""; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    free(text);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

static void value_text(const vf_json *v, char *buf, size_t n)
{
    if (!v) {
        snprintf(buf, n, "(absent)");
        return;
    }
    char *t = vf_json_emit(v, true, 0);
    snprintf(buf, n, "%s", t ? t : "?");
    free(t);
}

static void add_diff(char *list, size_t cap, int *nd, const char *key, const vf_json *a,
                     const vf_json *b)
{
    char va[128], vb[128];
    value_text(a, va, sizeof va);
    value_text(b, vb, sizeof vb);
    size_t l = strlen(list);
    snprintf(list + l, cap - l, "%s%s (checkpoint %s, now %s)", *nd ? "; " : "", key, va, vb);
    (*nd)++;
}

int vf_ckpt_config_check(const char *ckpt_path, const vf_json *saved, const vf_json *now,
                         vf_status *st)
{
    char list[1536] = "";
    int nd = 0;
    if (!saved || saved->type != VF_JSON_OBJ)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "%s: state.json has no \"config\" to compare this run with", ckpt_path);
    for (int i = 0; i < vf_json_len(now); i++) {
        const char *k = vf_json_key_at(now, i);
        const vf_json *a = vf_json_get(saved, k);
        if (!a || !vf_json_equal(a, now->items[i])) add_diff(list, sizeof list, &nd, k, a, now->items[i]);
    }
    for (int i = 0; i < vf_json_len(saved); i++) {
        const char *k = vf_json_key_at(saved, i);
        if (!vf_json_get(now, k)) add_diff(list, sizeof list, &nd, k, saved->items[i], NULL);
    }
    if (!nd) return 0;
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                         "%s: this run's config differs from the checkpoint's in %d key%s: %s; resume "
                         "with the original settings, or start a new run dir",
                         ckpt_path, nd, nd == 1 ? "" : "s", list);
}
