/* dit_video.c — a video from a DiT checkpoint: config and weights from the checkpoint,
 * flow-matching sampling, de-normalising, the causal VAE decoder, mp4 + PNG (dit_video.h).
 *
 * The latents' normalisation must be the one the model was trained on: the per-channel
 * mean/std the cache recorded, else a diffusers VAE directory's config.json, else the VAE
 * config's scalar scale/shift (the tiny preset's 1 and 0). Nothing is left half-written:
 * the mp4 and PNG appear by rename when complete.
 */
#include "models/dit_video.h"
#include "models/dit_base.h"
#include "formats/cache_format.h"
#include "formats/lmdb_store.h"
#include "formats/safetensors.h"
#include "formats/text_emb.h"
#include "formats/video_write.h"
#include "kernels/ops.h"
#include "formats/image_read.h"
#include "models/dit_i2v.h"
#include "models/dit_lora.h"
#include "models/dit_sample.h"
#include "models/dit_weights.h"
#include "runtime/json.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct vf_dit_video {
    vf_dit_video_opts o;
    vf_dit_config c;
    vf_dit_layout *l;
    vf_vae_config vc;
    const char *preset;
    char ckpt[PATH_MAX];
    int64_t Tl, T;               /* latent frames, decoded frames */
    vf_dit_dims d;
    float mean[64], sd[64];
    vf_backend *be;
    void *dev_w;                 /* the weights on the device (l->total, act dtype) */
    void *dev_low;               /* the low-noise expert's, or NULL (one model) */
    char mdir[PATH_MAX + 32];    /* the step dir or expert subdir holding the main model's files */
    char low[PATH_MAX + 80];     /* the low-noise expert's weights source, "" = none; of a
                                  * LoRA two-expert step: its base given with o.low */
    bool lora2;                  /* a LoRA two-expert step: lora_high_noise + lora_low_noise */
    double boundary;             /* where the experts switch, with two */
    vf_vae *vm;
    vf_vae_dec *dec;
    float *pos, *neg, *lat, *frames; /* embeddings (text_len, text_dim); latent; decoded clip */
    int32_t *pos_tok, *neg_tok;  /* caption byte tokens (text_len), text = bytes */
    uint8_t *rgb;
    uint8_t *image;              /* image-to-video: the first frame (height, width, 3) */
    float *cond, *img;           /* image-to-video: mask ‖ y (in_dim − z, T', h, w); CLIP features */
    int32_t pos_len, neg_len;
    bool have_neg;
};

void vf_dit_video_opts_default(vf_dit_video_opts *o)
{
    *o = (vf_dit_video_opts){.frames = 17, .width = 256, .height = 256, .steps = 30, .chunk = 1, .shift = 3.0,
                             .guidance = 5.0, .fps = 16.0, .device = "cpu", .flag_prefix = "--",
                             .boundary = -1, .guidance2 = -1};
}

static const char *pf(const vf_dit_video *v) { return v->o.flag_prefix ? v->o.flag_prefix : ""; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int vf_dit_video_find_ckpt(const char *path, vf_ckpt *ck, vf_status *st)
{
    char p[PATH_MAX];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", path, VF_CKPT_STATE);
    if (stat(p, &sb) == 0) {
        /* a step dir itself: vf_ckpt_find over its parent would take the newest instead */
        memset(ck, 0, sizeof *ck);
        ck->latest = -1;
        snprintf(ck->path, sizeof ck->path, "%s", path);
        int rc = vf_ckpt_open(path, -1, &ck->state, st);
        if (rc) return rc;
        ck->step = vf_json_get_int(ck->state, "step", -1);
        return 0;
    }
    int rc = vf_ckpt_find(path, NULL, NULL, ck, st);
    if (rc == VF_ENOTFOUND) st->code = rc = VF_EBADINPUT; /* the user named it */
    return rc;
}

int vf_dit_video_config(const vf_ckpt *ck, vf_dit_config *c, vf_status *st)
{
    int rc = 0;
    const vf_json *cfg = vf_ckpt_state_config(ck->state);
    if (!cfg || !vf_json_get(cfg, "model.dim"))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s/state.json: no model config (not a DiT checkpoint)",
                             ck->path);
    VF_TRY(vf_dit_preset("tiny", c, st));
    c->dim = (int)vf_json_get_int(cfg, "model.dim", c->dim);
    c->depth = (int)vf_json_get_int(cfg, "model.depth", c->depth);
    c->heads = (int)vf_json_get_int(cfg, "model.heads", c->heads);
    c->head_dim = (int)vf_json_get_int(cfg, "model.head_dim", c->head_dim);
    c->ffn = (int)vf_json_get_int(cfg, "model.ffn", c->ffn);
    c->z = (int)vf_json_get_int(cfg, "model.z", c->z);
    c->text_dim = (int)vf_json_get_int(cfg, "model.text_dim", c->text_dim);
    c->text_len = (int)vf_json_get_int(cfg, "model.text_len", c->text_len);
    c->freq_dim = (int)vf_json_get_int(cfg, "model.freq_dim", c->freq_dim);
    c->t_scale = (float)vf_json_get_num(cfg, "model.t_scale", c->t_scale);
    c->eps = (float)vf_json_get_num(cfg, "model.eps", c->eps);
    const vf_json *patch = vf_json_get(cfg, "model.patch");
    for (int k = 0; k < 3 && patch; k++)
        if (vf_json_at(patch, k)) c->patch[k] = (int)vf_json_as_num(vf_json_at(patch, k));
    c->text_emb = strcmp(vf_json_get_str(cfg, "model.text", "bytes"), "embeddings") == 0;
    c->in_dim = (int)vf_json_get_int(cfg, "model.in_dim", 0);
    c->img_dim = (int)vf_json_get_int(cfg, "model.img_dim", 0);
    c->img_len = (int)vf_json_get_int(cfg, "model.img_len", 0);
    if (vf_dit_config_check(c, st)) {
        vf_status_prefix(st, "%s/state.json", ck->path);
        return VF_EBADINPUT;
    }
fail:
    return rc;
}

/* One (L, D) tensor of any float dtype from a safetensors file, as f32 rows of width
 * c->text_dim zero-padded to text_len; *len = L. */
static int read_embeds(const char *path, const char *what, const vf_dit_config *c, float *out, int32_t *len,
                       vf_status *st)
{
    float *v = NULL;
    int64_t rows = 0;
    int rc = vf_text_emb_read(path, c->text_dim, c->text_len, &v, &rows, st);
    if (rc) {
        vf_status_prefix(st, "%s", what);
        return rc;
    }
    memset(out, 0, sizeof(float) * (size_t)c->text_len * (size_t)c->text_dim);
    memcpy(out, v, sizeof(float) * (size_t)(rows * c->text_dim));
    *len = (int32_t)rows;
    free(v);
    return 0;
}

/* The per-channel normalisation a cache recorded for its latents (one VAE), if any. */
static int cache_norm(const char *path, int z, float *mean, float *std, bool *found, vf_status *st)
{
    int rc = 0;
    vf_lmdb *db = NULL;
    MDB_txn *txn = NULL;
    vf_json *meta = NULL;
    vf_lmdb_opts ro = {.readonly = true};
    *found = false;
    rc = vf_lmdb_open(path, &ro, &db, st);
    if (rc == VF_ENOTFOUND) { /* a cache the user named that is not there: bad input */
        st->code = rc = VF_EBADINPUT;
        vf_status_prefix(st, "cache");
    }
    if (rc) goto fail;
    if (mdb_txn_begin(vf_lmdb_env(db), NULL, MDB_RDONLY, &txn))
        VF_FAIL(st, VF_EEXTERNAL, "%s: cannot read", path);
    VF_TRY(vf_cache_meta_read(db, txn, &meta, st));
    const vf_json *ln = meta ? vf_json_get(meta, "latent_norm") : NULL;
    if (!ln || vf_json_len(ln) == 0) goto fail; /* none recorded: the scalar affine */
    if (vf_json_len(ln) > 1)
        VF_FAIL(st, VF_EBADINPUT, "%s: latents of %d VAEs with different normalisations; sample from a cache of one",
                path, vf_json_len(ln));
    const vf_json *one = vf_json_at(ln, 0), *m = vf_json_get(one, "mean"), *s = vf_json_get(one, "std");
    if (!m || !s || vf_json_len(m) != z || vf_json_len(s) != z)
        VF_FAIL(st, VF_EBADINPUT, "%s: latent_norm is not %d means and %d stds (the model's latent channels)", path, z, z);
    for (int i = 0; i < z; i++) {
        mean[i] = (float)vf_json_as_num(vf_json_at(m, i));
        std[i] = (float)vf_json_as_num(vf_json_at(s, i));
    }
    *found = true;
fail:
    vf_json_free(meta);
    if (txn) mdb_txn_abort(txn);
    vf_lmdb_close(db);
    return rc;
}

static int spit(const char *path, const void *p, size_t n, vf_status *st)
{
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

/* The VAE preset and the clip's latent geometry, checked against the model. */
static int geometry(const vf_dit_config *c, const vf_dit_video_opts *o, const char *pre, vf_vae_config *vc,
                    const char **preset, vf_dit_dims *d, int64_t *Tl, vf_status *st)
{
    int rc = 0;
    *preset = o->vae_preset && o->vae_preset[0] ? o->vae_preset
              : c->z == 16                         ? "wan"
              : c->z == 48                         ? "wan2.2"
                                                   : "tiny";
    if (!strcmp(*preset, "wan")) vf_vae_config_wan(vc);
    else if (!strcmp(*preset, "wan2.2")) vf_vae_config_wan22(vc);
    else if (!strcmp(*preset, "tiny")) vf_vae_config_tiny(vc);
    else VF_FAIL(st, VF_EBADINPUT, "%svae-preset %s: expected tiny, wan or wan2.2", pre, *preset);
    if (vc->z_dim != c->z)
        VF_FAIL(st, VF_EBADINPUT, "%svae-preset %s: %d latent channels, the model's are %d", pre, *preset, vc->z_dim,
                c->z);
    const int sf = vf_vae_space_factor(vc), tf = vf_vae_time_factor(vc);
    *Tl = vf_vae_latent_frames(vc, o->frames);
    if (*Tl < 1 || *Tl % c->patch[0])
        VF_FAIL(st, VF_EBADINPUT, "%sframes %d: the VAE takes 1 + %d·k frames (1, %d, %d, …)%s", pre, o->frames, tf,
                1 + tf, 1 + 2 * tf, *Tl >= 1 ? " whose latent frames the patch divides" : "");
    if (o->width % (sf * c->patch[2]) || o->height % (sf * c->patch[1]))
        VF_FAIL(st, VF_EBADINPUT, "%ssize %dx%d: width and height must be multiples of %d and %d (VAE stride %d x patch)",
                pre, o->width, o->height, sf * c->patch[2], sf * c->patch[1], sf);
    *d = vf_dit_dims_of(c, 1, (int)*Tl, o->height / sf, o->width / sf);
fail:
    return rc;
}

/* What an image-to-video model needs and a text-to-video one refuses: the image (of the
 * video's size) and, with an image branch, its CLIP features. */
static int image_inputs(vf_dit_video *v, vf_status *st)
{
    int rc = 0, w = 0, h = 0;
    const char *img = v->o.image && v->o.image[0] ? v->o.image : NULL;
    const char *emb = v->o.image_embeds && v->o.image_embeds[0] ? v->o.image_embeds : NULL;
    const bool i2v = vf_dit_in_dim(&v->c) > v->c.z;
    char what[PATH_MAX + 32];
    if (!i2v && (img || emb))
        VF_FAIL(st, VF_EBADINPUT, "%s%s %s: the checkpoint %s holds a text-to-video model (in_dim = z = %d); an image "
                "conditions image-to-video models only", pf(v), img ? "image" : "image-embeds", img ? img : emb,
                v->ckpt, v->c.z);
    if (!i2v) return 0;
    if (!img)
        VF_FAIL(st, VF_EBADINPUT, "%s: an image-to-video model (in_dim %d): give the first frame with %simage FILE",
                v->ckpt, vf_dit_in_dim(&v->c), pf(v));
    if (v->c.img_dim > 0 && !emb)
        VF_FAIL(st, VF_EBADINPUT, "%s: the model takes the image's CLIP features (img_dim %d, img_len %d) and vflow has "
                "no CLIP model: give %simage-embeds FILE (tools/encode_images.py writes it)", v->ckpt, v->c.img_dim,
                v->c.img_len, pf(v));
    if (v->c.img_dim == 0 && emb)
        VF_FAIL(st, VF_EBADINPUT, "%simage-embeds %s: the model has no image branch (img_dim 0, as Wan 2.2 I2V-A14B); "
                "leave it out", pf(v), emb);
    if ((rc = vf_image_read(img, &v->image, &w, &h, st))) {
        vf_status_prefix(st, "%simage", pf(v));
        goto fail;
    }
    if (w != v->o.width || h != v->o.height)
        VF_FAIL(st, VF_EBADINPUT, "%simage %s: %dx%d pixels, the video is %dx%d: give the first frame at the "
                "video's size", pf(v), img, w, h, v->o.width, v->o.height);
    size_t nc = (size_t)(vf_dit_in_dim(&v->c) - v->c.z) * (size_t)v->Tl * v->d.H * v->d.W;
    if (!(v->cond = malloc(sizeof(float) * nc))) VF_FAIL(st, VF_ENOMEM, "out of memory");
    if (emb) {
        if (!(v->img = malloc(sizeof(float) * (size_t)v->c.img_len * v->c.img_dim))) VF_FAIL(st, VF_ENOMEM, "out of memory");
        snprintf(what, sizeof what, "%simage-embeds", pf(v));
        VF_TRY(vf_dit_i2v_clip_read(&v->c, emb, what, v->img, st));
    }
fail:
    return rc;
}

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Which model files the main model and the low-noise expert come from, and the boundary:
 * a two-expert checkpoint's high_noise_model/ (main) and low_noise_model/, a one-expert
 * one's subdir, or the step dir itself; o.low (a file, or a checkpoint's model)
 * overrides the low expert. A LoRA two-expert step (lora_high_noise, lora_low_noise) is
 * two experts whose weights vf_dit_video_load makes of each expert's base and adapter;
 * there o.low is the low expert's base. */
static int experts(vf_dit_video *v, const vf_ckpt *ck, vf_status *st)
{
    int rc = 0;
    vf_ckpt lk = {0};
    char hi[PATH_MAX + 32], lo[PATH_MAX + 32];
    snprintf(hi, sizeof hi, "%s/%s", v->ckpt, VF_CKPT_EXPERT_HIGH);
    snprintf(lo, sizeof lo, "%s/%s", v->ckpt, VF_CKPT_EXPERT_LOW);
    bool h = is_dir(hi), l = is_dir(lo);
    snprintf(v->mdir, sizeof v->mdir, "%s", h ? hi : l ? lo : v->ckpt);
    char lh[PATH_MAX + 32], ll[PATH_MAX + 32];
    snprintf(lh, sizeof lh, "%s/%s", v->ckpt, VF_CKPT_LORA_HIGH);
    snprintf(ll, sizeof ll, "%s/%s", v->ckpt, VF_CKPT_LORA_LOW);
    v->lora2 = is_file(lh) && is_file(ll);
    if (v->lora2 && v->o.lora && v->o.lora[0])
        VF_FAIL(st, VF_EBADINPUT, "%slora %s: %s holds both experts' adapters (%s, %s); merge another adapter into "
                "an expert's base and give that with %sweights (high) or %slow", pf(v), v->o.lora, v->ckpt,
                VF_CKPT_LORA_HIGH, VF_CKPT_LORA_LOW, pf(v), pf(v));
    v->low[0] = 0;
    if (h && l) snprintf(v->low, sizeof v->low, "%s/%s", lo, VF_CKPT_MODEL);
    if (v->o.low && v->o.low[0]) {
        struct stat sb;
        snprintf(v->low, sizeof v->low, "%s", v->o.low);
        if (stat(v->o.low, &sb) != 0)
            VF_FAIL(st, VF_EBADINPUT, "%slow %s: %s", pf(v), v->o.low, strerror(errno));
        if (S_ISDIR(sb.st_mode) && vf_dit_video_find_ckpt(v->o.low, &lk, st) == 0)
            snprintf(v->low, sizeof v->low, "%s/%s", lk.path, VF_CKPT_MODEL);
        st->code = 0, st->msg[0] = 0; /* not a checkpoint: a weights file or diffusers dir */
    }
    if (v->low[0] && !strcmp(v->low + strlen(v->low) - strlen(VF_CKPT_MODEL), VF_CKPT_MODEL)) {
        struct stat sb; /* a step dir's model: one file or the sharded index */
        if (stat(v->low, &sb) != 0) strcpy(v->low + strlen(v->low) - strlen(VF_CKPT_MODEL), VF_CKPT_MODEL_INDEX);
    }
    v->boundary = v->o.boundary >= 0 ? v->o.boundary : vf_json_get_num(ck->state, "boundary", -1);
    const bool two = v->low[0] || v->lora2;
    if (two && (!isfinite(v->boundary) || v->boundary < 0 || v->boundary > 1))
        VF_FAIL(st, VF_EBADINPUT, "%s: two experts (high and low noise) and no boundary in [0, 1] where they switch: "
                "give %sboundary (Wan 2.2 A14B: 0.875 text-to-video, 0.9 image-to-video)", v->ckpt, pf(v));
    if (v->o.guidance2 >= 0 && !two)
        VF_FAIL(st, VF_EBADINPUT, "%sguidance-2 %g: %s holds one model; the second guidance is the low-noise "
                "expert's (give %slow or a two-expert checkpoint)", pf(v), v->o.guidance2, v->ckpt, pf(v));
fail:
    vf_ckpt_fini(&lk);
    return rc;
}

int vf_dit_video_open(const vf_ckpt *ck, const vf_dit_video_opts *o, vf_dit_video **out, vf_status *st)
{
    int rc = 0;
    vf_dit_video *v = calloc(1, sizeof *v);
    *out = NULL;
    if (!v) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    v->o = *o;
    snprintf(v->ckpt, sizeof v->ckpt, "%s", ck->path);
    VF_TRY(vf_dit_video_config(ck, &v->c, st));
    VF_TRY(vf_dit_layout_new(&v->c, &v->l, st));
    VF_TRY(geometry(&v->c, o, pf(v), &v->vc, &v->preset, &v->d, &v->Tl, st));
    v->T = vf_vae_decoded_frames(&v->vc, v->Tl);

    size_t nemb = (size_t)v->c.text_len * (size_t)v->c.text_dim;
    size_t nlat = (size_t)v->c.z * (size_t)v->Tl * v->d.H * v->d.W;
    if (!v->c.text_emb) nemb = 0; /* byte captions: tokens instead */
    if (!(v->pos = malloc(sizeof(float) * (nemb + 1))) || !(v->neg = calloc(nemb + 1, sizeof(float))) ||
        !(v->pos_tok = calloc((size_t)v->c.text_len, sizeof(int32_t))) ||
        !(v->neg_tok = calloc((size_t)v->c.text_len, sizeof(int32_t))) || !(v->lat = malloc(sizeof(float) * nlat)))
        VF_FAIL(st, VF_ENOMEM, "out of memory");

    /* latent normalisation, before anything heavy, so a missing one fails fast */
    bool have = false;
    if (v->c.z > 64) VF_FAIL(st, VF_EBADINPUT, "%d latent channels", v->c.z);
    if (o->cache && o->cache[0]) VF_TRY(cache_norm(o->cache, v->c.z, v->mean, v->sd, &have, st));
    if (!have && o->vae && o->vae[0]) VF_TRY(vf_vae_config_norm(o->vae, v->c.z, v->mean, v->sd, &have, st));
    if (!have) {
        if (strcmp(v->preset, "tiny"))
            VF_FAIL(st, VF_EBADINPUT, "the latents' per-channel normalisation is unknown: give %scache (the cache the "
                    "model trained on) or %svae (a diffusers AutoencoderKLWan directory)", pf(v), pf(v));
        for (int i = 0; i < v->c.z; i++) v->mean[i] = v->vc.shift, v->sd[i] = 1.0f / v->vc.scale; /* latent = (x - shift)·scale */
    }
    VF_TRY(image_inputs(v, st));
    VF_TRY(experts(v, ck, st));
    *out = v;
    return 0;
fail:
    vf_dit_video_free(v);
    return rc;
}

/* The VAE's weights into model m: o.vae's, else the preset's seeded init. */
static int vae_weights(const vf_dit_video *v, vf_vae *m, vf_status *st)
{
    if (v->o.vae && v->o.vae[0]) return vf_vae_load(m, v->o.vae, st);
    return vf_vae_init_seeded(m, v->o.vae_seed, st);
}

/* The image's conditioning channels, through an encoder that lives for this call only. */
static int image_cond(vf_dit_video *v, vf_status *st)
{
    int rc = 0;
    vf_vae *enc = NULL;
    VF_TRY(vf_vae_new(&v->vc, v->be, &enc, st));
    VF_TRY(vae_weights(v, enc, st));
    VF_TRY(vf_dit_i2v_cond(&v->c, enc, vf_vae_time_factor(&v->vc), v->image, v->o.width, v->o.height, v->T, v->mean,
                           v->sd, v->cond, st));
fail:
    vf_vae_free(enc);
    return rc;
}

/* The flat weights of layout l from a weights source (file, index, diffusers dir), checked. */
static int read_weights(const vf_dit_layout *l, const char *path, float *host, vf_status *st)
{
    int rc = 0;
    vf_dit_wsrc *ws = NULL;
    VF_TRY(vf_dit_wsrc_open(path, &ws, st));
    VF_TRY(vf_dit_wsrc_check(ws, l, st));
    VF_TRY(vf_dit_wsrc_read(ws, l, host, 0, l->total, st));
fail:
    vf_dit_wsrc_close(ws);
    return rc;
}

/* The low-noise expert's weights into host (l->total floats, the caller's): o.low's or the
 * checkpoint's low_noise_model/; of a LoRA two-expert step (state: its parsed
 * state.json, borrowed), lora_low_noise merged into the low expert's base: o.low, else
 * the base the step records for the low expert (VF_CKPT_STATE_LOW), either checked
 * against that record, else the seeded init when neither expert had a base. */
static int low_weights(vf_dit_video *v, const vf_json *state, float *host, vf_status *st)
{
    int rc = 0;
    vf_dit_lora *lo = NULL;
    float *lvec = NULL;
    vf_dit_base b, high;
    char how[32], lpath[PATH_MAX + 64];
    const vf_dit_layout *l = v->l;
    if (!v->lora2) return read_weights(l, v->low, host, st);
    const vf_json *rec = vf_json_get(state, VF_CKPT_STATE_LOW);
    snprintf(how, sizeof how, "%slow ", pf(v));
    if (!rec && !v->low[0] && vf_dit_base_recorded(state, &high))
        VF_FAIL(st, VF_EBADINPUT, "%s: the adapters' bases: the high expert's is recorded (%s), the low expert's is "
                "not (no \"%s\" in %s): give the low expert's base with %sPATH", v->ckpt, high.path,
                VF_CKPT_STATE_LOW, VF_CKPT_STATE, how);
    VF_TRY(vf_dit_base_verify(v->ckpt, rec, v->low, true, how, &b, st));
    if (b.path[0]) {
        VF_TRY(read_weights(l, b.path, host, st));
    } else { /* a LoRA run on the seeded init */
        vf_dit_init(l, (uint64_t)vf_json_get_int(vf_ckpt_state_config(state), "train.seed", 0), 0, l->total, host);
    }
    snprintf(lpath, sizeof lpath, "%s/%s", v->ckpt, VF_CKPT_LORA_LOW);
    if (vf_dit_lora_from_file(l, lpath, &lo, &lvec, st)) {
        rc = st->code = VF_EBADINPUT;
        goto fail;
    }
    vf_dit_lora_merge(lo, l, lvec, host);
fail:
    vf_free(lvec);
    vf_dit_lora_free(lo);
    return rc;
}

int vf_dit_video_load(vf_dit_video *v, vf_status *st)
{
    int rc = 0;
    vf_dit_lora *lo = NULL;
    float *host_w = NULL, *lvec = NULL;
    vf_ckpt ck = {0};
    char model[PATH_MAX + 64], lora[PATH_MAX + 64];
    struct stat sb;
    const vf_dit_layout *l = v->l;
    /* the model: --weights, the checkpoint's, or a LoRA checkpoint's base */
    const char *base = v->o.weights && v->o.weights[0] ? v->o.weights : NULL;
    snprintf(lora, sizeof lora, "%s/%s", v->ckpt, v->lora2 ? VF_CKPT_LORA_HIGH : VF_CKPT_LORA);
    bool lora_ckpt = stat(lora, &sb) == 0;
    uint64_t seed = 0;
    snprintf(model, sizeof model, "%s/%s", v->mdir, VF_CKPT_MODEL);
    if (stat(model, &sb) != 0) snprintf(model, sizeof model, "%s/%s", v->mdir, VF_CKPT_MODEL_INDEX);
    bool own_model = stat(model, &sb) == 0;
    if (!own_model && lora_ckpt && !(v->o.lora && v->o.lora[0])) {
        /* the checkpoint's adapters go on the base they were trained on: the one recorded,
         * or --weights, either checked against the record */
        vf_dit_base b;
        char how[32];
        snprintf(how, sizeof how, "%sweights ", pf(v));
        VF_TRY(vf_dit_video_find_ckpt(v->ckpt, &ck, st));
        VF_TRY(vf_dit_base_verify(v->ckpt, ck.state, base, true, how, &b, st));
        snprintf(model, sizeof model, "%s", b.path);
        base = model[0] ? model : NULL;
        seed = (uint64_t)vf_json_get_int(vf_ckpt_state_config(ck.state), "train.seed", 0);
    } else if (!base && own_model) {
        base = model;
    } else if (!base && !lora_ckpt) {
        VF_FAIL(st, VF_EBADINPUT, "%s: neither %s, %s nor %s", v->ckpt, VF_CKPT_MODEL, VF_CKPT_MODEL_INDEX,
                VF_CKPT_LORA);
    } else if (!base) { /* --lora on a LoRA checkpoint of the seeded init */
        VF_TRY(vf_dit_video_find_ckpt(v->ckpt, &ck, st));
        seed = (uint64_t)vf_json_get_int(vf_ckpt_state_config(ck.state), "train.seed", 0);
    }
    if (!(host_w = malloc(sizeof(float) * (size_t)l->total))) VF_FAIL(st, VF_ENOMEM, "out of memory");
    if (base) {
        VF_TRY(read_weights(l, base, host_w, st));
    } else {
        vf_dit_init(l, seed, 0, l->total, host_w); /* a LoRA run on the seeded init */
    }
    /* the adapter: --lora, else a LoRA checkpoint's own (on whichever base) */
    const char *lpath = v->o.lora && v->o.lora[0] ? v->o.lora : lora_ckpt ? lora : NULL;
    if (lpath) {
        if (vf_dit_lora_from_file(l, lpath, &lo, &lvec, st)) {
            vf_status_prefix(st, "%slora", pf(v));
            rc = VF_EBADINPUT;
            goto fail;
        }
        vf_dit_lora_merge(lo, l, lvec, host_w);
    }
    vf_device dev;
    if (vf_device_parse(v->o.device, &dev, st)) {
        st->code = VF_EBADINPUT;
        VF_FAIL(st, VF_EBADINPUT, "%sdevice %s: %s", pf(v), v->o.device, st->msg);
    }
    if (!(v->be = vf_backend_for(dev, st))) {
        rc = st->code ? st->code : VF_EEXTERNAL;
        goto fail;
    }
    if (!(v->dev_w = v->be->alloc(v->be, (size_t)l->total * vf_dtype_size(v->be->act_dtype), st))) {
        rc = st->code ? st->code : VF_ENOMEM;
        goto fail;
    }
    v->be->upload(v->be, v->dev_w, host_w, l->total, v->be->act_dtype);
    if (v->low[0] || v->lora2) {
        if (v->lora2 && !ck.state) VF_TRY(vf_dit_video_find_ckpt(v->ckpt, &ck, st));
        if ((rc = low_weights(v, ck.state, host_w, st))) {
            vf_status_prefix(st, "the low-noise expert");
            goto fail;
        }
        if (!(v->dev_low = v->be->alloc(v->be, (size_t)l->total * vf_dtype_size(v->be->act_dtype), st))) {
            rc = st->code ? st->code : VF_ENOMEM;
            goto fail;
        }
        v->be->upload(v->be, v->dev_low, host_w, l->total, v->be->act_dtype);
    }
    free(host_w);
    host_w = NULL;

    if (v->image) VF_TRY(image_cond(v, st));
    VF_TRY(vf_vae_dec_model_new(&v->vc, v->be, &v->vm, st));
    VF_TRY(vae_weights(v, v->vm, st));
    int chunk = v->o.chunk < v->Tl ? v->o.chunk : (int)v->Tl;
    VF_TRY(vf_vae_dec_new(v->vm, 1, chunk, v->d.H, v->d.W, &v->dec, st));
    size_t plane = (size_t)v->o.height * (size_t)v->o.width;
    if (!(v->frames = malloc(sizeof(float) * 3 * (size_t)v->T * plane)) || !(v->rgb = malloc(3 * plane * (size_t)v->T)))
        VF_FAIL(st, VF_ENOMEM, "out of memory");
fail:
    free(host_w);
    vf_free(lvec);
    vf_dit_lora_free(lo);
    vf_ckpt_fini(&ck);
    return rc;
}

int vf_dit_video_prompt(vf_dit_video *v, const char *pos, const char *pos_what, const char *neg, const char *neg_what,
                        vf_status *st)
{
    int rc = 0;
    if (!v->c.text_emb)
        VF_FAIL(st, VF_EBADINPUT, "%s: the model conditions on caption bytes (trained without text embeddings); "
                "give the caption as text (%sprompt)", v->ckpt, pf(v));
    VF_TRY(read_embeds(pos, pos_what, &v->c, v->pos, &v->pos_len, st));
    v->have_neg = false;
    if (neg && neg[0]) {
        VF_TRY(read_embeds(neg, neg_what, &v->c, v->neg, &v->neg_len, st));
        v->have_neg = true;
    } else if (v->o.guidance > 1) {
        /* WanPipeline's default negative prompt is text; without its embeddings the
         * unconditional branch is the empty caption: zero rows */
        memset(v->neg, 0, sizeof(float) * (size_t)v->c.text_len * (size_t)v->c.text_dim);
        v->neg_len = 0;
        v->have_neg = true;
    }
fail:
    return rc;
}

/* A caption's tokens as the reader makes them, pads after (what the model reads there). */
static int32_t caption_tokens(const char *text, int text_len, int32_t *tok)
{
    int n = vf_dit_caption_tokens(text, text_len, tok);
    for (int j = n; j < text_len; j++) tok[j] = VF_DIT_PAD_TOKEN;
    return n;
}

int vf_dit_video_text_len(const vf_dit_video *v) { return (int)v->c.text_len; }

int vf_dit_video_caption(vf_dit_video *v, const char *pos, const char *neg, vf_status *st)
{
    int rc = 0;
    if (v->c.text_emb)
        VF_FAIL(st, VF_EBADINPUT, "%s: the model conditions on text embeddings; give a text-embedding file "
                "(%sprompt-embeds, written by tools/encode_captions.py)", v->ckpt, pf(v));
    v->pos_len = caption_tokens(pos, v->c.text_len, v->pos_tok);
    v->neg_len = caption_tokens(neg ? neg : "", v->c.text_len, v->neg_tok);
    v->have_neg = true; /* the empty caption when none is given, as training's null text */
fail:
    return rc;
}

int vf_dit_video_render(vf_dit_video *v, const vf_dit_video_out *o, vf_dit_video_stats *s, vf_status *st)
{
    int rc = 0;
    vf_video_writer *vw = NULL;
    const int W = v->o.width, H = v->o.height;
    const int64_t T = v->T;
    size_t nlat = (size_t)v->c.z * (size_t)v->Tl * v->d.H * v->d.W, plane = (size_t)H * (size_t)W;
    memset(s, 0, sizeof *s);
    if (!v->dec) VF_FAIL(st, VF_EINVAL, "dit_video: render before load");

    vf_dit_sample_expert low = {v->l, v->dev_low, v->boundary, v->o.guidance2 >= 0 ? v->o.guidance2 : v->o.guidance};
    vf_dit_sample_cfg sc = {v->o.steps, v->o.shift, v->o.guidance, v->o.seed, v->c.text_dim, v->dev_low ? &low : NULL};
    VF_TRY(vf_dit_sample_check(&sc, &v->c, st));
    double t1 = now_s();
    vf_dit_prompt pp = {.len = &v->pos_len}, np = {.len = &v->neg_len};
    if (v->c.text_emb) pp.emb = v->pos, np.emb = v->neg;
    else pp.tokens = v->pos_tok, np.tokens = v->neg_tok;
    vf_dit_sample_cond cond = {v->cond, v->img};
    VF_TRY(vf_dit_sample(v->be, v->l, v->dev_w, &sc, &v->d, &pp, v->have_neg ? &np : NULL, &cond, NULL, v->lat, st));
    s->sample_s = now_s() - t1;
    if (o->latent) VF_TRY(spit(o->latent, v->lat, sizeof(float) * nlat, st));

    /* decode: de-normalise, then the causal decoder a chunk of latent frames at a time */
    vf_vae_denormalise(v->lat, v->c.z, v->Tl * v->d.H * v->d.W, v->mean, v->sd);
    double t2 = now_s();
    VF_TRY(vf_vae_decode_f32(v->dec, 1, v->Tl, v->lat, v->frames, st));
    s->decode_s = now_s() - t2;

    vf_video_opts vo = {o->mp4, W, H, v->o.fps, NULL};
    if ((rc = vf_video_open(&vo, &vw, st))) {
        if (rc != VF_ENOMEM) st->code = rc = VF_EBADINPUT; /* the output named */
        goto fail;
    }
    for (int64_t t = 0; t < T; t++) {
        vf_video_rgb_from_float(v->frames, (int)T, H, W, (int)t, v->rgb + (size_t)t * plane * 3);
        VF_TRY(vf_video_add(vw, v->rgb + (size_t)t * plane * 3, st));
    }
    snprintf(s->codec, sizeof s->codec, "%s", vf_video_codec(vw));
    rc = vf_video_close(vw, st);
    vw = NULL;
    if (rc) goto fail;
    s->frames = T;
    if (o->frames) VF_TRY(spit(o->frames, v->rgb, 3 * plane * (size_t)T, st));
    if (o->png) {
        int k = T < 4 ? (int)T : 4, SW = k * W;
        uint8_t *strip = malloc((size_t)H * SW * 3);
        if (!strip) VF_FAIL(st, VF_ENOMEM, "out of memory");
        for (int j = 0; j < k; j++) {
            int64_t t = k == 1 ? 0 : (int64_t)j * (T - 1) / (k - 1); /* first to last, evenly */
            for (int y = 0; y < H; y++)
                memcpy(strip + ((size_t)y * SW + (size_t)j * W) * 3, v->rgb + ((size_t)t * plane + (size_t)y * W) * 3,
                       (size_t)W * 3);
        }
        rc = vf_png_write(o->png, strip, SW, H, st);
        free(strip);
        if (rc) goto fail;
    }
    if (o->first) VF_TRY(vf_png_write(o->first, v->rgb, W, H, st));
fail:
    vf_video_free(vw);
    return rc;
}

const vf_dit_config *vf_dit_video_cfg(const vf_dit_video *v) { return &v->c; }

void vf_dit_video_free(vf_dit_video *v)
{
    if (!v) return;
    vf_vae_dec_free(v->dec);
    vf_vae_free(v->vm);
    if (v->dev_w) v->be->free(v->be, v->dev_w);
    if (v->dev_low) v->be->free(v->be, v->dev_low);
    vf_dit_layout_free(v->l);
    free(v->pos), free(v->neg), free(v->pos_tok), free(v->neg_tok), free(v->lat), free(v->frames), free(v->rgb);
    free(v->image), free(v->cond), free(v->img);
    free(v);
}

int vf_dit_video_mem_of(const vf_dit_config *c, const vf_dit_video_opts *o, size_t elem, vf_dit_video_mem *m,
                        vf_status *st)
{
    int rc = 0;
    vf_dit_layout *l = NULL;
    vf_vae_config vc;
    const char *preset;
    vf_dit_dims d;
    int64_t Tl;
    vf_vae_mem_info mi;
    memset(m, 0, sizeof *m);
    VF_TRY(vf_dit_layout_new(c, &l, st));
    VF_TRY(geometry(c, o, o->flag_prefix ? o->flag_prefix : "", &vc, &preset, &d, &Tl, st));
    int chunk = o->chunk < Tl ? o->chunk : (int)Tl;
    VF_TRY(vf_vae_dec_mem(&vc, elem, 1, chunk, d.H, d.W, &mi, st));
    int64_t T = vf_vae_decoded_frames(&vc, Tl), plane = (int64_t)o->width * o->height;
    m->weights = l->total * (int64_t)elem;
    m->staging = l->total * (int64_t)sizeof(float);
    vf_dit_mem dm;
    vf_dit_part_memory(c, 0, c->depth, &d, true, elem, elem, &dm);
    m->acts = dm.saved + dm.workspace + (int64_t)c->z * Tl * d.H * d.W * (int64_t)elem;
    m->vae_weights = mi.weights, m->vae_caches = mi.caches, m->vae_workspace = mi.workspace, m->vae_host = mi.host;
    m->vae_conv_workspace = mi.conv_workspace;
    /* decoded f32 clip, RGB24 frames, the latent, the two embeddings, the PNG strip */
    m->frames = 3 * T * plane * 4 + 3 * T * plane + (int64_t)c->z * Tl * d.H * d.W * 4 +
                2 * (int64_t)c->text_len * c->text_dim * 4 + 4 * plane * 3;
    /* the encoder's own frames (libx264 at preset medium: 40 frames of rate-control
     * lookahead, 3 B-frames, 3 references, each padded by 32 pixels with its half-pel and
     * low-resolution planes, about 3 bytes per padded pixel) and its fixed tables, an
     * estimate: libav does not say what it holds */
    m->encoder = 48 * 3 * (int64_t)(o->width + 64) * (o->height + 64) + ((int64_t)6 << 20);
    int64_t cc = (int64_t)vf_dit_in_dim(c) - c->z;
    if (cc > 0) { /* the image, its conditioning (host f32, device), the CLIP features; the encoder */
        m->cond = plane * 3 + cc * Tl * d.H * d.W * (4 + (int64_t)elem) + (int64_t)c->img_len * c->img_dim * 4;
        VF_TRY(vf_vae_mem(&vc, elem, 1, vf_vae_time_factor(&vc), o->height, o->width, &m->vae_enc, st));
    }
fail:
    vf_dit_layout_free(l);
    return rc;
}
