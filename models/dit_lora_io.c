/* dit_lora_io.c — reading LoRA adapter files in the namings users have (dit_lora.h):
 * diffusers / ComfyUI lora_A / lora_B, lora_down / lora_up, and kohya's lora_unet_*.
 */
#include "models/dit_lora.h"
#include "formats/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_A, K_B, K_ALPHA };

/* Splits key into (module, kind): the module in original names ("blocks.0.self_attn.q")
 * of the adapter it belongs to, matched against lo's adapters; returns the index of the
 * adapter's A tensor, or -1 when the key is no adapter key of a targeted linear. */
static int key_adapter(const vf_dit_lora *lo, const char *key, int *kind)
{
    static const struct {
        const char *suf;
        int kind;
    } sufs[] = {{".lora_A.weight", K_A},   {".lora_B.weight", K_B}, {".lora_down.weight", K_A},
                {".lora_up.weight", K_B}, {".alpha", K_ALPHA}};
    size_t kl = strlen(key);
    for (size_t s = 0; s < sizeof sufs / sizeof sufs[0]; s++) {
        size_t sl = strlen(sufs[s].suf);
        if (kl <= sl || strcmp(key + kl - sl, sufs[s].suf) != 0) continue;
        char mod[160];
        size_t ml = kl - sl;
        if (ml >= sizeof mod) return -1;
        memcpy(mod, key, ml);
        mod[ml] = 0;
        const char *m = mod;
        bool kohya = false;
        if (!strncmp(m, "model.", 6)) m += 6;
        if (!strncmp(m, VF_LORA_PREFIX, strlen(VF_LORA_PREFIX))) m += strlen(VF_LORA_PREFIX);
        else if (!strncmp(m, "lora_unet_", 10)) m += 10, kohya = true;
        *kind = sufs[s].kind;
        for (int i = 0; i < lo->l->n; i += 2) {
            char name[VF_DIT_NAME_MAX];
            vf_dit_lora_module(lo, i, name, sizeof name);
            if (kohya)
                for (char *c = name; *c; c++)
                    if (*c == '.') *c = '_';
            if (!strcmp(name, m)) return i;
        }
        return -1;
    }
    return -1;
}

int vf_dit_lora_from_file(const vf_dit_layout *base, const char *path, vf_dit_lora **out, float **vec,
                          vf_status *st)
{
    int rc = 0;
    vf_st_file *f = NULL;
    vf_dit_lora *all = NULL, *lo = NULL;
    *out = NULL, *vec = NULL;
    if (vf_st_open(path, &f, st)) {
        st->code = VF_EBADINPUT;
        return VF_EBADINPUT;
    }
    /* every linear a candidate, to name the file's keys */
    vf_dit_lora_cfg c = {.rank = 1, .alpha = 1, .ntargets = 1};
    snprintf(c.targets[0], sizeof c.targets[0], "*");
    VF_TRY(vf_dit_lora_new(base, &c, &all, st));
    int rank = 0;
    double alpha = 0;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < vf_st_count(f); i++) {
        const vf_st_tensor *t = vf_st_at(f, i);
        int kind = 0, a = key_adapter(all, t->name, &kind);
        if (a < 0)
            VF_FAIL(st, VF_EBADINPUT, "%s: key %s names no linear of the model (a LoRA for another model)", path, t->name);
        char mod[VF_DIT_NAME_MAX];
        vf_dit_lora_module(all, a, mod, sizeof mod);
        const char *k = strchr(mod + 7, '.') + 1; /* past "blocks.N." */
        int per = 0;
        while (per < c.ntargets && strcmp(c.targets[per], k)) per++;
        if (per == c.ntargets && per < VF_LORA_MAX_TARGETS) snprintf(c.targets[c.ntargets++], VF_DIT_NAME_MAX, "%s", k);
        if (kind == K_A && t->ndim == 2 && !rank) rank = (int)t->shape[0];
        if (kind == K_ALPHA && !(alpha > 0)) {
            float al = 0;
            VF_TRY(vf_st_read_f32(f, t->name, &al, 1, st));
            alpha = al;
        }
    }
    if (rank < 1) VF_FAIL(st, VF_EBADINPUT, "%s: no lora_A / lora_down tensor: not a LoRA file", path);
    c.rank = rank;
    c.alpha = alpha > 0 ? alpha : rank;
    VF_TRY(vf_dit_lora_new(base, &c, &lo, st));
    *vec = vf_alloc(sizeof(float) * (size_t)(lo->l->total ? lo->l->total : 1), st);
    if (!*vec) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", path);
    VF_TRY(vf_dit_lora_file_read(path, lo, *vec, 0, lo->l->total, st));
    *out = lo;
    lo = NULL;
fail:
    if (rc) {
        vf_free(*vec);
        *vec = NULL;
        if (st && st->code != VF_ENOMEM) st->code = rc = VF_EBADINPUT;
    }
    vf_dit_lora_free(all);
    vf_dit_lora_free(lo);
    vf_st_close(f);
    return rc;
}

void vf_dit_lora_merge(const vf_dit_lora *lo, const vf_dit_layout *base, const float *vec, float *weights)
{
    for (int j = 0; j + 1 < lo->l->n; j += 2) {
        const vf_dit_tensor *A = &lo->l->t[j], *B = &lo->l->t[j + 1], *W = &base->t[lo->base_of[j]];
        const int64_t R = A->shape[0], I = A->shape[1], O = B->shape[0];
        const float *a = vec + A->offset, *b = vec + B->offset;
        float *w = weights + W->offset;
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < I; i++) {
                double d = 0;
                for (int64_t k = 0; k < R; k++) d += (double)b[o * R + k] * (double)a[k * I + i];
                w[o * I + i] = (float)((double)w[o * I + i] + (double)lo->scale * d);
            }
    }
}

int vf_dit_lora_file_read(const char *path, const vf_dit_lora *lo, float *dst, int64_t off,
                          int64_t n, vf_status *st)
{
    int rc = 0;
    vf_st_file *f = NULL;
    float *buf = NULL;
    const int na = lo->l->n / 2;
    const vf_st_tensor **ta = calloc((size_t)(na ? na : 1), sizeof *ta),
                       **tb = calloc((size_t)(na ? na : 1), sizeof *tb),
                       **tal = calloc((size_t)(na ? na : 1), sizeof *tal);
    if (!ta || !tb || !tal) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", path);
    if (vf_st_open(path, &f, st)) {
        rc = VF_EBADINPUT;
        st->code = VF_EBADINPUT;
        goto fail;
    }
    for (int i = 0; i < vf_st_count(f); i++) {
        const vf_st_tensor *t = vf_st_at(f, i);
        int kind = 0, a = key_adapter(lo, t->name, &kind);
        if (a < 0)
            VF_FAIL(st, VF_EBADINPUT,
                    "%s: key %s names no linear this run adapts (a LoRA for another model, or targets "
                    "that do not cover it)", path, t->name);
        const vf_st_tensor **slot = kind == K_A ? &ta[a / 2] : kind == K_B ? &tb[a / 2] : &tal[a / 2];
        if (*slot) VF_FAIL(st, VF_EBADINPUT, "%s: key %s: a second tensor for the same adapter (%s)", path, t->name,
                           (*slot)->name);
        *slot = t;
    }
    const int R = lo->cfg.rank;
    for (int j = 0; j < na; j++) {
        const vf_dit_tensor *A = &lo->l->t[2 * j], *B = &lo->l->t[2 * j + 1];
        if (!ta[j] || !tb[j])
            VF_FAIL(st, VF_EBADINPUT, "%s: key %s is missing (the file has no %s for this targeted linear)", path,
                    ta[j] ? B->name : A->name, ta[j] ? "B / lora_up" : "A / lora_down");
        const vf_st_tensor *a = ta[j], *b = tb[j];
        if (a->ndim != 2 || b->ndim != 2)
            VF_FAIL(st, VF_EBADINPUT, "%s: key %s: LoRA matrices are 2-D", path, a->ndim != 2 ? a->name : b->name);
        if (a->shape[0] != b->shape[1])
            VF_FAIL(st, VF_EBADINPUT, "%s: key %s: rank mismatch between A (%lld rows) and B (%lld columns, %s)", path,
                    a->name, (long long)a->shape[0], (long long)b->shape[1], b->name);
        if (a->shape[1] != A->shape[1] || b->shape[0] != B->shape[0])
            VF_FAIL(st, VF_EBADINPUT, "%s: key %s: the adapter maps %lld -> %lld, the model's linear %lld -> %lld "
                    "(a LoRA for another model)", path, a->shape[1] != A->shape[1] ? a->name : b->name,
                    (long long)a->shape[1], (long long)b->shape[0], (long long)A->shape[1], (long long)B->shape[0]);
        if (a->shape[0] != R)
            VF_FAIL(st, VF_EBADINPUT, "%s: key %s: rank %lld, this run's lora.rank is %d", path, a->name,
                    (long long)a->shape[0], R);
        if (tal[j] && tal[j]->numel != 1)
            VF_FAIL(st, VF_EBADINPUT, "%s: key %s: alpha must be a scalar", path, tal[j]->name);
    }
    if (!dst) goto fail; /* checked */
    for (int j = 0; j < na; j++) {
        double fscale = 1.0;
        if (tal[j]) {
            float al;
            VF_TRY(vf_st_read_f32(f, tal[j]->name, &al, 1, st));
            fscale = (double)al / R;
        }
        for (int ab = 0; ab < 2; ab++) {
            const vf_dit_tensor *t = &lo->l->t[2 * j + ab];
            int64_t lo_ = t->offset > off ? t->offset : off;
            int64_t hi = t->offset + t->numel < off + n ? t->offset + t->numel : off + n;
            if (lo_ >= hi) continue;
            buf = realloc(buf, sizeof *buf * (size_t)t->numel);
            if (!buf) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", path);
            VF_TRY(vf_st_read_f32(f, (ab ? tb[j] : ta[j])->name, buf, t->numel, st));
            /* the file's delta (fscale · B·A) under this run's scale */
            double k = ab ? fscale / (double)lo->scale : 1.0;
            for (int64_t e = lo_; e < hi; e++) {
                float v = buf[e - t->offset];
                dst[e - off] = k == 1.0 ? v : (float)(v * k);
            }
        }
    }
fail:
    if (rc && st && st->code != VF_ENOMEM) st->code = rc = VF_EBADINPUT;
    free(buf);
    free(ta), free(tb), free(tal);
    vf_st_close(f);
    return rc;
}
