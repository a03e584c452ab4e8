/* dit_weights.c — reading DiT weights from a safetensors file, a sharded index or a
 * diffusers directory, in the original, ComfyUI or diffusers naming (dit_weights.h).
 *
 * The naming is told by one key each: patch_embedding.weight (original),
 * model.diffusion_model.patch_embedding.weight (ComfyUI), condition_embedder.time_proj.weight
 * (diffusers). Before that, the keys are searched for what makes the file another model
 * (a VAE's encoder/decoder) and for FP8 formats it does not read, so those are refused by
 * what they are rather than by a list of missing tensors; an image branch (Wan 2.1 I2V's
 * img_emb, k_img) is noted and refused by the check when the model has none.
 * FP8 E4M3/E5M2 weights are dequantised with their per-tensor scale while read.
 */
#include "models/dit_weights.h"

#include "formats/ckpt.h"
#include "formats/st_sharded.h"
#include "runtime/json.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define COMFY_PREFIX "model.diffusion_model."

struct vf_dit_wsrc {
    char *path;             /* what the user gave */
    vf_st_sharded *set;     /* the file, or the shards behind an index (owned) */
    int nf;
    const vf_st_file *const *f; /* the set's files (borrowed from set) */
    const char *const *fname;   /* each file's path (borrowed from set) */
    vf_dit_naming naming;
    vf_json *config;        /* a directory's config.json (diffusers' or the original's), or NULL */
    char *config_path;
    int ntensors;
    int64_t largest;
    char img_tensor[256];   /* the first tensor of an image branch (img_emb, k_img), or "" */
    int img_file;           /* the file it is in */
};

const char *vf_dit_naming_name(vf_dit_naming n)
{
    static const char *const names[] = {"original", "comfyui", "diffusers"};
    return (unsigned)n < 3 ? names[n] : "?";
}

/* ------------------------------------------------------------------ names */

/* Replaces every occurrence of `from` in s (n bytes of room) by `to`, left to right. */
static void replace_all(char *s, size_t n, const char *from, const char *to)
{
    char buf[512];
    size_t fl = strlen(from), tl = strlen(to), o = 0;
    const char *p = s;
    for (;;) {
        const char *q = strstr(p, from);
        size_t k = q ? (size_t)(q - p) : strlen(p);
        if (o + k >= sizeof buf) k = sizeof buf - 1 - o;
        memcpy(buf + o, p, k);
        o += k;
        if (!q) break;
        if (o + tl < sizeof buf) memcpy(buf + o, to, tl), o += tl;
        p = q + fl;
    }
    buf[o] = 0;
    snprintf(s, n, "%s", buf);
}

/* diffusers' TRANSFORMER_KEYS_RENAME_DICT (convert_wan_transformer_to_diffusers), in its
 * order: every pair is applied to every key, so the order matters (norm2/norm3 swap). */
static const char *const to_diffusers[][2] = {
    {"time_embedding.0", "condition_embedder.time_embedder.linear_1"},
    {"time_embedding.2", "condition_embedder.time_embedder.linear_2"},
    {"text_embedding.0", "condition_embedder.text_embedder.linear_1"},
    {"text_embedding.2", "condition_embedder.text_embedder.linear_2"},
    {"time_projection.1", "condition_embedder.time_proj"},
    {"cross_attn", "attn2"},
    {"self_attn", "attn1"},
    {".o.", ".to_out.0."},
    {".q.", ".to_q."},
    {".k.", ".to_k."},
    {".v.", ".to_v."},
    {".k_img.", ".add_k_proj."},
    {".v_img.", ".add_v_proj."},
    {".norm_k_img.", ".norm_added_k."},
    {"head.modulation", "scale_shift_table"},
    {"head.head", "proj_out"},
    {"modulation", "scale_shift_table"},
    {"ffn.0", "ffn.net.0.proj"},
    {"ffn.2", "ffn.net.2"},
    {"norm2", "norm__placeholder"},
    {"norm3", "norm2"},
    {"norm__placeholder", "norm3"},
    {"img_emb.proj.0", "condition_embedder.image_embedder.norm1"},
    {"img_emb.proj.1", "condition_embedder.image_embedder.ff.net.0.proj"},
    {"img_emb.proj.3", "condition_embedder.image_embedder.ff.net.2"},
    {"img_emb.proj.4", "condition_embedder.image_embedder.norm2"},
};

void vf_dit_name_to(vf_dit_naming nm, const char *orig, char *out, size_t n)
{
    if (nm == VF_DIT_NAMES_COMFYUI) {
        snprintf(out, n, COMFY_PREFIX "%s", orig);
        return;
    }
    snprintf(out, n, "%s", orig);
    if (nm != VF_DIT_NAMES_DIFFUSERS) return;
    for (size_t i = 0; i < sizeof to_diffusers / sizeof to_diffusers[0]; i++)
        replace_all(out, n, to_diffusers[i][0], to_diffusers[i][1]);
}

/* ------------------------------------------------------------------ files */

static int bad(vf_status *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(vf_status *st, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "weights: %s", msg);
}

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static char *slurp_text(const char *path, size_t max, vf_status *st)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        bad(st, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, fp) : 0;
    fclose(fp);
    if (!buf || n > max) {
        free(buf);
        bad(st, "%s: over %zu bytes", path, max);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* One file or a sharded index (formats/st_sharded.h); every refusal is bad input. */
static int open_set(vf_dit_wsrc *w, const char *path, vf_status *st)
{
    vf_status fs;
    vf_status_clear(&fs);
    int rc = vf_st_sharded_open(path, &w->set, &fs);
    if (rc) /* missing, truncated, malformed, header over the limit: the reader's message */
        return vf_status_set(st, rc == VF_ENOMEM ? rc : VF_EBADINPUT, __FILE__, __LINE__, "weights: %s", fs.msg);
    w->nf = vf_st_sharded_files(w->set, &w->f, &w->fname);
    return 0;
}

/* A vflow checkpoint's step dir (state.json beside the model) or checkpoint dir (its newest
 * complete step): 1 when dir is one (*rc: 0 opened, or the error in st), 0 when not. */
static int open_ckpt(vf_dit_wsrc *w, const char *dir, int *rc, vf_status *st)
{
    char p[PATH_MAX + 64], step[PATH_MAX];
    snprintf(p, sizeof p, "%s/state.json", dir);
    if (is_file(p)) {
        snprintf(step, sizeof step, "%s", dir);
    } else {
        snprintf(p, sizeof p, "%s/latest", dir);
        if (!is_file(p)) return 0;
        vf_ckpt ck = {0};
        vf_status fs;
        vf_status_clear(&fs);
        int e = vf_ckpt_find(dir, NULL, NULL, &ck, &fs);
        if (e == 0) snprintf(step, sizeof step, "%s", ck.path);
        vf_ckpt_fini(&ck);
        if (e) {
            *rc = bad(st, "weights: %s: a checkpoint dir without a complete step: %s", dir, fs.msg);
            return 1;
        }
    }
    snprintf(p, sizeof p, "%s/" VF_CKPT_MODEL_INDEX, step);
    if (!is_file(p)) snprintf(p, sizeof p, "%s/" VF_CKPT_MODEL, step);
    if (is_file(p)) {
        *rc = open_set(w, p, st);
        return 1;
    }
    snprintf(p, sizeof p, "%s/" VF_CKPT_LORA, step);
    bool lora = is_file(p);
    *rc = bad(st, "weights: %s: a %s checkpoint step without %s: not a model%s", step, lora ? "LoRA run's" : "vflow",
              VF_CKPT_MODEL,
              lora ? " (its adapters belong to the base its state.json names as lora_base: give that base, and "
                     "these adapters as lora_init to continue them)" : "");
    return 1;
}

/* A diffusers directory: its config must be a WanTransformer3DModel's when it says. */
static int open_dir(vf_dit_wsrc *w, const char *dir, vf_status *st)
{
    int rc = 0;
    char p[4096];
    if (open_ckpt(w, dir, &rc, st)) return rc;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (is_file(p)) {
        char *text = slurp_text(p, 1 << 20, st);
        if (!text) return VF_EBADINPUT;
        vf_status js;
        vf_status_clear(&js);
        vf_json *j = vf_json_parse(text, &js);
        free(text);
        if (!j || j->type != VF_JSON_OBJ) {
            vf_json_free(j);
            return bad(st, "%s: not a JSON object: %s", p, js.msg);
        }
        const char *cls = vf_json_get_str(j, "_class_name", "");
        if (cls[0] && strcmp(cls, "WanTransformer3DModel") != 0 && strcmp(cls, "WanModel") != 0)
            rc = bad(st, "%s: _class_name %s is not Wan's DiT (WanTransformer3DModel or WanModel)%s", p, cls,
                     strstr(cls, "Autoencoder") ? ": a VAE given as the DiT" : "");
        if (rc) {
            vf_json_free(j);
            return rc;
        }
        w->config = j;
        w->config_path = strdup(p);
    }
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model" VF_ST_INDEX_SUFFIX, dir);
    if (is_file(p)) return open_set(w, p, st);
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors", dir);
    if (is_file(p)) return open_set(w, p, st);
    /* an expert's dir of a two-expert checkpoint step (high_noise_model/, models/
     * dit_experts.h): the step's model files, with no state.json beside them */
    snprintf(p, sizeof p, "%s/" VF_CKPT_MODEL_INDEX, dir);
    if (is_file(p)) return open_set(w, p, st);
    snprintf(p, sizeof p, "%s/" VF_CKPT_MODEL, dir);
    if (is_file(p)) return open_set(w, p, st);
    return bad(st, "%s: a directory without diffusion_pytorch_model.safetensors(.index.json) or %s(.index.json): "
               "not a model directory (diffusers', Wan-AI's or a checkpoint expert's)", dir, VF_CKPT_MODEL);
}

static const vf_st_tensor *find_any(const vf_dit_wsrc *w, const char *name, int *fi)
{
    for (int i = 0; i < w->nf; i++) {
        const vf_st_tensor *t = vf_st_find(w->f[i], name);
        if (t) {
            if (fi) *fi = i;
            return t;
        }
    }
    return NULL;
}

/* FP8 formats read: E4M3 (torch's float8_e4m3fn) and E5M2; the others are refused. */
static bool fp8_read(vf_st_dtype d) { return d == VF_ST_F8_E4M3 || d == VF_ST_F8_E5M2; }
static bool fp8_other(vf_st_dtype d)
{
    return d == VF_ST_F8_E8M0 || d == VF_ST_F8_E4M3FNUZ || d == VF_ST_F8_E5M2FNUZ;
}

/* Tensors of a scaled-FP8 checkpoint that are no weights: the per-tensor scales of the
 * weights (ComfyUI's <base>.scale_weight, diffusers' <base>.weight_scale), ComfyUI's
 * input scales (<base>.scale_input, for FP8 matmuls) and its marker "scaled_fp8". */
static bool fp8_aux(const char *n)
{
    return ends_with(n, ".scale_weight") || ends_with(n, ".weight_scale") || ends_with(n, ".scale_input") ||
           ends_with(n, "scaled_fp8");
}

/* What the keys say the files are, before the naming is looked for. */
static int recognise(vf_dit_wsrc *w, vf_status *st)
{
    for (int i = 0; i < w->nf; i++) {
        for (int k = 0; k < vf_st_count(w->f[i]); k++) {
            const vf_st_tensor *t = vf_st_at(w->f[i], k);
            const char *n = t->name;
            if (strncmp(n, COMFY_PREFIX, strlen(COMFY_PREFIX)) == 0) n += strlen(COMFY_PREFIX);
            if (!w->img_tensor[0] && (strncmp(n, "img_emb.", 8) == 0 || strstr(n, "condition_embedder.image_embedder.") ||
                                      strstr(n, ".k_img.") || strstr(n, ".add_k_proj."))) {
                snprintf(w->img_tensor, sizeof w->img_tensor, "%s", t->name);
                w->img_file = i;
            }
            if (strncmp(n, "encoder.", 8) == 0 || strncmp(n, "decoder.", 8) == 0 || strstr(n, "quant_conv.") ||
                strstr(n, "first_stage_model."))
                return bad(st, "%s: tensor %s: a VAE (encoder/decoder), not the DiT", w->fname[i], t->name);
            if (fp8_other(t->dtype))
                return bad(st, "%s: tensor %s is %s; vflow reads F32, BF16, F16 and FP8 E4M3/E5M2 weights",
                           w->fname[i], t->name, vf_st_dtype_name(t->dtype));
            w->ntensors++;
            if ((int64_t)t->nbytes > w->largest) w->largest = (int64_t)t->nbytes;
        }
    }
    if (find_any(w, "patch_embedding.weight", NULL)) {
        w->naming = VF_DIT_NAMES_ORIGINAL;
        if (find_any(w, "condition_embedder.time_proj.weight", NULL))
            w->naming = VF_DIT_NAMES_DIFFUSERS;
        return 0;
    }
    if (find_any(w, COMFY_PREFIX "patch_embedding.weight", NULL)) {
        w->naming = VF_DIT_NAMES_COMFYUI;
        return 0;
    }
    const vf_st_tensor *t0 = w->nf && vf_st_count(w->f[0]) ? vf_st_at(w->f[0], 0) : NULL;
    return bad(st, "%s: tensor patch_embedding.weight: not found under the original, ComfyUI "
               "(" COMFY_PREFIX ") or diffusers names: not a Wan DiT (first tensor: %s)", w->path,
               t0 ? t0->name : "none");
}

int vf_dit_wsrc_open(const char *path, vf_dit_wsrc **out, vf_status *st)
{
    int rc = 0;
    *out = NULL;
    vf_dit_wsrc *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "weights: out of memory");
    }
    struct stat sb;
    if (stat(path, &sb) != 0)
        VF_FAIL(st, VF_EBADINPUT, "weights: %s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        VF_TRY(open_dir(w, path, st));
    else
        VF_TRY(open_set(w, path, st)); /* a *.json is an index */
    VF_TRY(recognise(w, st));
    *out = w;
    return 0;
fail:
    vf_dit_wsrc_close(w);
    return rc;
}

void vf_dit_wsrc_close(vf_dit_wsrc *w)
{
    if (!w) return;
    vf_st_sharded_close(w->set);
    free(w->path);
    vf_json_free(w->config);
    free(w->config_path);
    free(w);
}

vf_dit_naming vf_dit_wsrc_naming(const vf_dit_wsrc *w) { return w->naming; }
int vf_dit_wsrc_count(const vf_dit_wsrc *w) { return w->ntensors; }
int64_t vf_dit_wsrc_largest(const vf_dit_wsrc *w) { return w->largest; }

int vf_dit_wsrc_files(const vf_dit_wsrc *w, const char *const **paths)
{
    *paths = w->fname;
    return w->nf;
}

/* ------------------------------------------------------------------ check, read */

static float half_to_float(uint16_t h);

static void shape_str(char *buf, size_t n, int ndim, const int64_t *s)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && o < n; i++) o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)s[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* The per-tensor scale of weight `name` (<base>.scale_weight or <base>.weight_scale, base
 * = name without ".weight"): one finite number, F32/BF16/F16; 1 when there is none. */
static int scale_of(const vf_dit_wsrc *w, const char *name, float *out, vf_status *st)
{
    char sn[300];
    size_t bl = strlen(name);
    if (ends_with(name, ".weight")) bl -= strlen(".weight");
    static const char *const sfx[2] = {".scale_weight", ".weight_scale"};
    if (out) *out = 1.0f;
    for (int k = 0; k < 2; k++) {
        snprintf(sn, sizeof sn, "%.*s%s", (int)bl, name, sfx[k]);
        int fi = 0;
        const vf_st_tensor *t = find_any(w, sn, &fi);
        if (!t) continue;
        float v = 0;
        uint16_t h;
        if (t->numel != 1)
            return bad(st, "%s: tensor %s has %lld elements; a per-tensor scale has one", w->fname[fi], sn,
                       (long long)t->numel);
        if (t->dtype == VF_ST_F32) {
            memcpy(&v, t->data, 4);
        } else if (t->dtype == VF_ST_BF16) {
            uint32_t u;
            memcpy(&h, t->data, 2);
            u = (uint32_t)h << 16;
            memcpy(&v, &u, 4);
        } else if (t->dtype == VF_ST_F16) {
            memcpy(&h, t->data, 2);
            v = half_to_float(h);
        } else {
            return bad(st, "%s: tensor %s is %s; a scale is F32, BF16 or F16", w->fname[fi], sn,
                       vf_st_dtype_name(t->dtype));
        }
        if (!isfinite(v)) return bad(st, "%s: tensor %s: the scale is %s", w->fname[fi], sn, isnan(v) ? "NaN" : "infinite");
        if (out) *out = v;
        return 0;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A directory's config.json against the model: what the shapes cannot tell apart (the
 * split of dim into heads), and the rest for a clear message naming the field. Keys of
 * WanTransformer3DModel's config, or of the original WanModel's config.json. */
static int check_config(const vf_dit_wsrc *w, const vf_dit_config *c, vf_status *st)
{
    if (!w->config) return 0;
    const bool orig = vf_json_get(w->config, "num_heads") != NULL;
    /* the kind of model: text-to-video, or image-to-video with or without the image branch
     * (the original's model_type; diffusers' image_dim, null without) */
    const char *type = vf_json_get_str(w->config, "model_type", "");
    const vf_json *idim = vf_json_get(w->config, "image_dim");
    const bool img = idim && vf_json_is_number(idim) && vf_json_as_num(idim) > 0;
    if (type[0] && (strcmp(type, "t2v") == 0) != (vf_dit_in_dim(c) == c->z))
        return bad(st, "%s: model_type %s: %s model; the model is %s (in_dim %d, z %d)", w->config_path, type,
                   strcmp(type, "t2v") ? "an image-to-video (I2V)" : "a text-to-video (T2V)",
                   vf_dit_in_dim(c) == c->z ? "text-to-video (T2V)" : "image-to-video (I2V)", vf_dit_in_dim(c), c->z);
    if (!orig && img != (c->img_dim > 0))
        return bad(st, "%s: image_dim %s; the model %s (img_dim %d)", w->config_path, img ? "set: an image-to-video (I2V) "
                   "model with CLIP image features" : "null: no image branch", c->img_dim > 0 ? "has an image branch" :
                   "has no image branch", c->img_dim);
    struct { const char *key; int64_t want; } f[] = {
        {orig ? "num_heads" : "num_attention_heads", c->heads},
        {orig ? "dim" : "attention_head_dim", orig ? c->dim : c->head_dim},
        {"num_layers", c->depth},
        {"ffn_dim", c->ffn},
        {orig ? "in_dim" : "in_channels", vf_dit_in_dim(c)},
        {orig ? "out_dim" : "out_channels", c->z},
        {"text_dim", c->text_dim},
        {"freq_dim", c->freq_dim},
        {"image_dim", c->img_dim},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        const vf_json *v = vf_json_get(w->config, f[i].key);
        if (v && vf_json_is_number(v) && (int64_t)vf_json_as_num(v) != f[i].want)
            return bad(st, "%s: %s %lld, the model has %lld (dim %d = heads %d x head_dim %d, depth %d, ffn %d, z %d, "
                       "text_dim %d, freq_dim %d)", w->config_path, f[i].key, (long long)vf_json_as_num(v),
                       (long long)f[i].want, c->dim, c->heads, c->head_dim, c->depth, c->ffn, c->z, c->text_dim,
                       c->freq_dim);
    }
    const vf_json *ps = vf_json_get(w->config, "patch_size");
    for (int i = 0; ps && ps->type == VF_JSON_ARR && i < 3 && i < vf_json_len(ps); i++)
        if ((int64_t)vf_json_as_num(vf_json_at(ps, i)) != c->patch[i])
            return bad(st, "%s: patch_size[%d] %lld, the model's patch is (%d, %d, %d)", w->config_path, i,
                       (long long)vf_json_as_num(vf_json_at(ps, i)), c->patch[0], c->patch[1], c->patch[2]);
    return 0;
}

int vf_dit_wsrc_check(const vf_dit_wsrc *w, const vf_dit_layout *l, vf_status *st)
{
    int rc = check_config(w, &l->cfg, st);
    if (rc) return rc;
    if (w->img_tensor[0] && l->cfg.img_dim == 0)
        return bad(st, "%s: tensor %s: an image-to-video (I2V) checkpoint with an image branch (Wan 2.1 I2V); the "
                   "model has none (preset wan-i2v-14b has)", w->fname[w->img_file], w->img_tensor);
    char **want = calloc((size_t)l->n, sizeof *want);
    int nw = 0;
    if (!want) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "weights: out of memory");
    for (int i = 0; i < l->n; i++) {
        const vf_dit_tensor *t = &l->t[i];
        if (t->numel == 0) continue;
        char name[256], a[128], b[128];
        vf_dit_name_to(w->naming, t->name, name, sizeof name);
        int fi = 0;
        const vf_st_tensor *ft = find_any(w, name, &fi);
        shape_str(a, sizeof a, t->ndim, t->shape);
        if (!ft)
            VF_FAIL(st, VF_EBADINPUT, "weights: %s: tensor %s missing (the model expects shape %s)", w->path, name,
                    a);
        bool same = ft->ndim == t->ndim;
        for (int k = 0; same && k < t->ndim; k++) same = ft->shape[k] == t->shape[k];
        shape_str(b, sizeof b, ft->ndim, ft->shape);
        if (!same) {
            /* the input channels tell text-to-video (z) from image-to-video (z + conditioning) */
            char why[160] = "";
            if (strcmp(t->name, "patch_embedding.weight") == 0 && ft->ndim == 5 && ft->shape[0] == t->shape[0])
                snprintf(why, sizeof why, ": %lld input channels, %s checkpoint for %s model",
                         (long long)ft->shape[1], ft->shape[1] == l->cfg.z ? "a text-to-video (T2V)" : "an image-to-video (I2V)",
                         vf_dit_in_dim(&l->cfg) == l->cfg.z ? "a text-to-video" : "an image-to-video");
            VF_FAIL(st, VF_EBADINPUT, "weights: %s: tensor %s has shape %s, the model expects %s%s", w->fname[fi], name,
                    b, a, why);
        }
        if (ft->dtype != VF_ST_F32 && ft->dtype != VF_ST_BF16 && ft->dtype != VF_ST_F16 && ft->dtype != VF_ST_F64 &&
            !fp8_read(ft->dtype))
            VF_FAIL(st, VF_EBADINPUT, "weights: %s: tensor %s is %s; F32, BF16, F16 or FP8 expected", w->fname[fi],
                    name, vf_st_dtype_name(ft->dtype));
        VF_TRY(scale_of(w, name, NULL, st)); /* a scale, when there is one, must be one finite number */
        if (!(want[nw++] = strdup(name))) VF_FAIL(st, VF_ENOMEM, "weights: out of memory");
    }
    qsort(want, (size_t)nw, sizeof *want, cmp_str);
    for (int i = 0; i < w->nf; i++) {
        for (int k = 0; k < vf_st_count(w->f[i]); k++) {
            const char *n = vf_st_at(w->f[i], k)->name;
            if (fp8_aux(n)) continue;
            if (!bsearch(&n, want, (size_t)nw, sizeof *want, cmp_str))
                VF_FAIL(st, VF_EBADINPUT, "weights: %s: tensor %s is not part of the model (%s names; another "
                        "model or config?)", w->fname[i], n, vf_dit_naming_name(w->naming));
        }
    }
fail:
    for (int i = 0; i < nw; i++) free(want[i]);
    free(want);
    return rc;
}

static float half_to_float(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) {
        if (m == 0) {
            u = s;
        } else { /* subnormal: normalise */
            int sh = 0;
            while (!(m & 1024)) m <<= 1, sh++;
            u = s | (uint32_t)(127 - 15 - sh + 1) << 23 | (m & 1023) << 13;
        }
    } else if (e == 31) {
        u = s | 0x7f800000u | m << 13;
    } else {
        u = s | (e + 127 - 15) << 23 | m << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Elements [a, b) of file tensor ft into dst; VF_EBADINPUT at the first non-finite. */
static int convert(const vf_dit_wsrc *w, int fi, const vf_st_tensor *ft, float scale, int64_t a, int64_t b,
                   float *dst, vf_status *st)
{
    const unsigned char *src = ft->data;
    for (int64_t i = a; i < b; i++) {
        float v;
        switch (ft->dtype) {
        case VF_ST_F8_E4M3: v = vf_e4m3_to_f32(src[i]); break;
        case VF_ST_F8_E5M2: v = half_to_float((uint16_t)(src[i] << 8)); break;
        case VF_ST_F32: memcpy(&v, src + 4 * i, 4); break;
        case VF_ST_F64: {
            double d;
            memcpy(&d, src + 8 * i, 8);
            v = (float)d;
            break;
        }
        case VF_ST_BF16: {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&v, &u, 4);
            break;
        }
        case VF_ST_F16: {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            v = half_to_float(h);
            break;
        }
        default:
            return bad(st, "%s: tensor %s is %s; F32, BF16, F16 or FP8 expected", w->fname[fi], ft->name,
                       vf_st_dtype_name(ft->dtype));
        }
        if (scale != 1.0f) v *= scale;
        if (!isfinite(v))
            return bad(st, "%s: tensor %s: element %lld is %s", w->fname[fi], ft->name, (long long)i,
                       isnan(v) ? "NaN" : "infinite");
        dst[i - a] = v;
    }
    return 0;
}

/* The file tensor of layout tensor t (its name in the source's naming into name, 256
 * bytes; its file's index into *fi): VF_EBADINPUT when missing or of another size. */
static int file_tensor(const vf_dit_wsrc *w, const vf_dit_tensor *t, char *name, int *fi, const vf_st_tensor **out,
                       vf_status *st)
{
    vf_dit_name_to(w->naming, t->name, name, 256);
    const vf_st_tensor *ft = find_any(w, name, fi);
    if (!ft || ft->numel != t->numel)
        return bad(st, "%s: tensor %s %s", w->path, name, ft ? "has another size than the model's" : "missing");
    *out = ft;
    return 0;
}

int vf_dit_wsrc_read(const vf_dit_wsrc *w, const vf_dit_layout *l, float *dst, int64_t off, int64_t n,
                     vf_status *st)
{
    for (int i = 0; i < l->n; i++) {
        const vf_dit_tensor *t = &l->t[i];
        int64_t a = t->offset > off ? t->offset : off;
        int64_t b = t->offset + t->numel < off + n ? t->offset + t->numel : off + n;
        if (t->numel == 0 || b <= a) continue;
        char name[256];
        int fi = 0;
        const vf_st_tensor *ft = NULL;
        int rc = file_tensor(w, t, name, &fi, &ft, st);
        if (rc) return rc;
        float scale;
        rc = scale_of(w, name, &scale, st);
        if (rc) return rc;
        rc = convert(w, fi, ft, scale, a - t->offset, b - t->offset, dst + (a - off), st);
        vf_st_drop(w->f[fi], ft);
        if (rc) return rc;
    }
    return 0;
}

int vf_dit_wsrc_read_fp8(const vf_dit_wsrc *w, const vf_dit_layout *l, int idx, uint8_t *dst, float *scale,
                         bool *found, vf_status *st)
{
    const vf_dit_tensor *t = &l->t[idx];
    char name[256];
    int fi = 0;
    const vf_st_tensor *ft = NULL;
    *found = false;
    int rc = file_tensor(w, t, name, &fi, &ft, st);
    if (rc || ft->dtype != VF_ST_F8_E4M3) return rc;
    rc = scale_of(w, name, scale, st);
    if (rc) return rc;
    /* the values are kept as they are, and checked as the f32 reader checks them: no
     * NaN code, and a positive scale (a sign or a zero would not survive a rescale) */
    const unsigned char *src = ft->data;
    for (int64_t i = 0; i < t->numel && rc == 0; i++)
        if ((src[i] & 0x7f) == 0x7f) rc = bad(st, "%s: tensor %s: element %lld is NaN", w->fname[fi], name, (long long)i);
    if (rc == 0 && !(*scale > 0.0f))
        rc = bad(st, "%s: tensor %s: its scale %g is not positive", w->fname[fi], name, (double)*scale);
    if (rc == 0) memcpy(dst, src, (size_t)t->numel);
    vf_st_drop(w->f[fi], ft);
    *found = rc == 0;
    return rc;
}
