/* sample_cli.c — `vflow sample`: a video from a checkpoint, on the command line.
 *
 *   vflow sample CKPT --prompt-embeds F [--negative-embeds F] --out x.mp4
 *                [--frames 17] [--size 256x256] [--steps 30] [--shift 3] [--guidance 5]
 *                [--seed 0] [--fps 16] [--device cpu|cuda:N] [--chunk 1] [--png F]
 *                [--vae PATH] [--vae-preset tiny|wan] [--vae-seed N] [--cache LMDB]
 *                [--latent-out F] [--frames-out F]
 *
 * CKPT is a checkpoint step dir or a checkpoint dir (its newest complete step). The DiT's
 * config comes from the checkpoint's state.json, its weights from model.safetensors (or
 * the sharded index). The prompt embeddings are what a manifest's text_emb column names:
 * a safetensors file holding one (L, text_dim) tensor (tools/encode_captions.py writes
 * them). Sampling is flow-matching Euler with shift and classifier-free guidance
 * (models/dit_sample.h); the latent is de-normalised and decoded by the causal VAE
 * decoder chunk by chunk (models/vae.h) and written by formats/video_write.h.
 *
 * The latents' normalisation must be the one the model was trained on: the per-channel
 * mean/std the cache recorded (--cache), else a diffusers VAE directory's config.json
 * (--vae DIR), else the VAE config's scalar scale/shift (the tiny preset's 1 and 0). The
 * VAE is --vae's weights, or the preset's seeded init (--vae-seed, as vae_encode's
 * `seed`). Bad input (a size the VAE or the patch does not divide, embeddings of another
 * width, a checkpoint without text embeddings, an unwritable output) is exit 2 with one
 * line naming it; nothing is left half-written.
 */
#include "cli/cli.h"
#include "formats/cache_format.h"
#include "formats/ckpt.h"
#include "formats/lmdb_store.h"
#include "formats/safetensors.h"
#include "formats/video_write.h"
#include "kernels/ops.h"
#include "models/dit.h"
#include "models/dit_sample.h"
#include "models/dit_weights.h"
#include "models/vae.h"
#include "runtime/json.h"
#include "runtime/vflow.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef struct sample_args {
    const char *ckpt, *pos, *neg, *out, *png, *vae, *vae_preset, *cache, *device, *lat_out, *frames_out;
    int frames, width, height, steps, chunk;
    double shift, guidance, fps;
    uint64_t seed, vae_seed;
} sample_args;

static const char USAGE[] =
    "usage: vflow sample CKPT --prompt-embeds F --out x.mp4 [--negative-embeds F] [--frames 17]\n"
    "         [--size WxH] [--steps 30] [--shift 3] [--guidance 5] [--seed 0] [--fps 16]\n"
    "         [--device cpu] [--chunk 1] [--png F] [--vae PATH] [--vae-preset tiny|wan]\n"
    "         [--vae-seed 0] [--cache LMDB] [--latent-out F] [--frames-out F]\n";

static int bad(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "vflow sample: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 2;
}

static int num(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi) {
        fprintf(stderr, "vflow sample: %s %s: expected a number in [%g, %g]\n", flag, v, lo, hi);
        return 2;
    }
    *out = x;
    return 0;
}

static int parse(int argc, char **argv, sample_args *a)
{
    *a = (sample_args){.frames = 17, .width = 256, .height = 256, .steps = 30, .chunk = 1, .shift = 3.0,
                       .guidance = 5.0, .fps = 16.0, .device = "cpu"};
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i], *v = NULL;
        char flag[64];
        if (s[0] != '-' || s[1] != '-') {
            if (a->ckpt) return bad("more than one checkpoint: %s and %s", a->ckpt, s);
            a->ckpt = s;
            continue;
        }
        const char *eq = strchr(s, '=');
        size_t n = eq ? (size_t)(eq - s) : strlen(s);
        if (n >= sizeof flag) return bad("unknown option %s%s", s, "");
        memcpy(flag, s, n);
        flag[n] = 0;
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else return bad("%s needs a value%s", flag, "");
        double x;
        if (!strcmp(flag, "--prompt-embeds")) a->pos = v;
        else if (!strcmp(flag, "--negative-embeds")) a->neg = v;
        else if (!strcmp(flag, "--out")) a->out = v;
        else if (!strcmp(flag, "--png")) a->png = v;
        else if (!strcmp(flag, "--vae")) a->vae = v;
        else if (!strcmp(flag, "--vae-preset")) a->vae_preset = v;
        else if (!strcmp(flag, "--cache")) a->cache = v;
        else if (!strcmp(flag, "--device")) a->device = v;
        else if (!strcmp(flag, "--latent-out")) a->lat_out = v;
        else if (!strcmp(flag, "--frames-out")) a->frames_out = v;
        else if (!strcmp(flag, "--size")) {
            char *e1, *e2;
            long w = strtol(v, &e1, 10), h = *e1 == 'x' ? strtol(e1 + 1, &e2, 10) : -1;
            if (h <= 0 || w <= 0 || w > 8192 || h > 8192 || *e2) return bad("--size %s: expected WxH, e.g. 256x256%s", v, "");
            a->width = (int)w, a->height = (int)h;
        } else if (!strcmp(flag, "--frames")) {
            if (num(flag, v, 1, 100000, &x)) return 2;
            a->frames = (int)x;
        } else if (!strcmp(flag, "--steps")) {
            if (num(flag, v, 1, 10000, &x)) return 2;
            a->steps = (int)x;
        } else if (!strcmp(flag, "--chunk")) {
            if (num(flag, v, 1, 1000, &x)) return 2;
            a->chunk = (int)x;
        } else if (!strcmp(flag, "--shift")) {
            if (num(flag, v, 1e-6, 1e6, &a->shift)) return 2;
        } else if (!strcmp(flag, "--guidance")) {
            if (num(flag, v, 0, 1e6, &a->guidance)) return 2;
        } else if (!strcmp(flag, "--fps")) {
            if (num(flag, v, 1e-3, 1000, &a->fps)) return 2;
        } else if (!strcmp(flag, "--seed") || !strcmp(flag, "--vae-seed")) {
            if (num(flag, v, 0, 9007199254740991.0, &x)) return 2;
            *(flag[2] == 's' ? &a->seed : &a->vae_seed) = (uint64_t)x;
        } else
            return bad("unknown option %s (see vflow sample --help)%s", flag, "");
    }
    if (!a->ckpt) return bad("no checkpoint given%s%s", "", "");
    if (!a->pos) return bad("--prompt-embeds F is required (a safetensors file of one (L, text_dim) tensor)%s%s", "", "");
    if (!a->out) return bad("--out FILE.mp4 is required%s%s", "", "");
    return 0;
}

/* The checkpoint step dir: CKPT itself when it holds state.json, else its newest
 * complete step. */
static int find_ckpt(const char *path, vf_ckpt *ck, vf_status *st)
{
    char p[PATH_MAX];
    struct stat sb;
    snprintf(p, sizeof p, "%s/state.json", path);
    if (stat(p, &sb) == 0) {
        int rc = vf_ckpt_verify(path, st);
        if (rc) return rc;
        /* the dir and its step: vf_ckpt_find over the parent finds the newest, not this one */
        memset(ck, 0, sizeof *ck);
        snprintf(ck->path, sizeof ck->path, "%s", path);
        FILE *f = fopen(p, "rb");
        if (!f) return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", p, strerror(errno));
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *text = malloc((size_t)n + 1);
        size_t got = text ? fread(text, 1, (size_t)n, f) : 0;
        fclose(f);
        if (!text || got != (size_t)n) {
            free(text);
            return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: cannot read", p);
        }
        text[n] = 0;
        ck->state = vf_json_parse(text, st);
        free(text);
        if (!ck->state) {
            vf_status_prefix(st, "%s", p);
            return VF_EBADINPUT;
        }
        ck->step = vf_json_get_int(ck->state, "step", -1);
        return 0;
    }
    int rc = vf_ckpt_find(path, NULL, NULL, ck, st);
    if (rc == VF_ENOTFOUND) st->code = rc = VF_EBADINPUT; /* the user named it */
    return rc;
}

/* The DiT config the checkpoint was trained with: its state.json's model.* values over
 * the tiny preset (every field is recorded; "model.text" only for text embeddings). */
static int ckpt_config(const vf_ckpt *ck, vf_dit_config *c, vf_status *st)
{
    int rc = 0;
    const vf_json *cfg = vf_json_get(ck->state, "config");
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
    if (vf_dit_config_check(c, st)) {
        vf_status_prefix(st, "%s/state.json", ck->path);
        return VF_EBADINPUT;
    }
    if (!c->text_emb)
        VF_FAIL(st, VF_EBADINPUT, "%s: the model conditions on caption bytes; vflow sample takes text embeddings "
                "(a model trained with text_dim, e.g. the Wan presets)", ck->path);
fail:
    return rc;
}

/* One (L, D) tensor of any float dtype from a safetensors file, as f32 rows of width
 * c->text_dim zero-padded to text_len; *len = L. */
static int read_embeds(const char *path, const char *flag, const vf_dit_config *c, float *out, int32_t *len,
                       vf_status *st)
{
    int rc = 0;
    vf_st_file *f = NULL;
    float *tmp = NULL;
    if ((rc = vf_st_open(path, &f, st))) {
        st->code = VF_EBADINPUT;
        vf_status_prefix(st, "%s", flag);
        return VF_EBADINPUT;
    }
    if (vf_st_count(f) != 1)
        VF_FAIL(st, VF_EBADINPUT, "%s %s: %d tensors, expected one (L, %d) tensor", flag, path, vf_st_count(f), c->text_dim);
    const vf_st_tensor *t = vf_st_at(f, 0);
    if (t->ndim != 2 || t->shape[1] != c->text_dim || t->shape[0] < 1)
        VF_FAIL(st, VF_EBADINPUT, "%s %s: tensor '%s' is not (L, %d): the model's text_dim is %d", flag, path, t->name,
                c->text_dim, c->text_dim);
    if (t->shape[0] > c->text_len)
        VF_FAIL(st, VF_EBADINPUT, "%s %s: tensor '%s' has %lld rows, longer than the model's text_len %d", flag, path,
                t->name, (long long)t->shape[0], c->text_len);
    if (!(tmp = malloc(sizeof(float) * (size_t)t->numel))) VF_FAIL(st, VF_ENOMEM, "out of memory");
    if (vf_st_read_f32(f, t->name, tmp, t->numel, st)) {
        vf_status_prefix(st, "%s %s", flag, path);
        st->code = rc = VF_EBADINPUT;
        goto fail;
    }
    for (int64_t i = 0; i < t->numel; i++)
        if (!isfinite(tmp[i])) VF_FAIL(st, VF_EBADINPUT, "%s %s: tensor '%s' holds NaN or Inf", flag, path, t->name);
    memset(out, 0, sizeof(float) * (size_t)c->text_len * (size_t)c->text_dim);
    memcpy(out, tmp, sizeof(float) * (size_t)t->numel);
    *len = (int32_t)t->shape[0];
fail:
    free(tmp);
    vf_st_close(f);
    return rc;
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
    VF_TRY(vf_lmdb_open(path, &ro, &db, st));
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int spit(const char *path, const void *p, size_t n, vf_status *st)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

int vf_cli_sample(int argc, char **argv)
{
    if (argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
        fputs(USAGE, stdout);
        return 0;
    }
    sample_args a;
    int rc = parse(argc, argv, &a);
    if (rc) {
        fputs(USAGE, stderr);
        return rc;
    }
    vf_status st = {0};
    vf_ckpt ck = {0};
    vf_dit_config c;
    vf_dit_layout *l = NULL;
    vf_dit_wsrc *ws = NULL;
    vf_backend *be = NULL;
    vf_vae *vm = NULL;
    vf_vae_dec *dec = NULL;
    vf_video_writer *vw = NULL;
    float *host_w = NULL, *pos = NULL, *neg = NULL, *lat = NULL, *frames = NULL;
    uint8_t *rgb = NULL;
    void *dev_w = NULL;
    int32_t pos_len = 0, neg_len = 0;
    char model[PATH_MAX + 64];
    double t0 = now_s();

    VF_TRY(find_ckpt(a.ckpt, &ck, &st));
    VF_TRY(ckpt_config(&ck, &c, &st));
    VF_TRY(vf_dit_layout_new(&c, &l, &st));

    /* the VAE: its config gives the latent geometry of the requested clip */
    vf_vae_config vc;
    const char *preset = a.vae_preset ? a.vae_preset : c.z == 16 ? "wan" : "tiny";
    if (!strcmp(preset, "wan")) vf_vae_config_wan(&vc);
    else if (!strcmp(preset, "tiny")) vf_vae_config_tiny(&vc);
    else VF_FAIL(&st, VF_EBADINPUT, "--vae-preset %s: expected tiny or wan", preset);
    if (vc.z_dim != c.z)
        VF_FAIL(&st, VF_EBADINPUT, "--vae-preset %s: %d latent channels, the model's are %d", preset, vc.z_dim, c.z);
    const int sf = vf_vae_space_factor(&vc), tf = vf_vae_time_factor(&vc);
    int64_t Tl = vf_vae_latent_frames(&vc, a.frames);
    if (Tl < 1 || Tl % c.patch[0])
        VF_FAIL(&st, VF_EBADINPUT, "--frames %d: the VAE takes 1 + %d·k frames (1, %d, %d, …)%s", a.frames, tf, 1 + tf,
                1 + 2 * tf, Tl >= 1 ? " whose latent frames the patch divides" : "");
    if (a.width % (sf * c.patch[2]) || a.height % (sf * c.patch[1]))
        VF_FAIL(&st, VF_EBADINPUT, "--size %dx%d: width and height must be multiples of %d and %d (VAE stride %d x patch)",
                a.width, a.height, sf * c.patch[2], sf * c.patch[1], sf);
    vf_dit_dims d = {1, (int)Tl, a.height / sf, a.width / sf};

    /* embeddings */
    size_t nemb = (size_t)c.text_len * (size_t)c.text_dim, nlat = (size_t)c.z * (size_t)Tl * d.H * d.W;
    if (!(pos = malloc(sizeof(float) * nemb)) || !(lat = malloc(sizeof(float) * nlat)))
        VF_FAIL(&st, VF_ENOMEM, "out of memory");
    VF_TRY(read_embeds(a.pos, "--prompt-embeds", &c, pos, &pos_len, &st));
    if (a.neg) {
        if (!(neg = malloc(sizeof(float) * nemb))) VF_FAIL(&st, VF_ENOMEM, "out of memory");
        VF_TRY(read_embeds(a.neg, "--negative-embeds", &c, neg, &neg_len, &st));
    } else if (a.guidance > 1) {
        /* WanPipeline's default negative prompt is text; without its embeddings the
         * unconditional branch is the empty caption: zero rows */
        if (!(neg = calloc(nemb, sizeof(float)))) VF_FAIL(&st, VF_ENOMEM, "out of memory");
        neg_len = 0;
    }

    /* latent normalisation, before anything heavy, so a missing one fails fast */
    float mean[64], sd[64];
    bool have_norm = false;
    if (c.z > 64) VF_FAIL(&st, VF_EBADINPUT, "%d latent channels", c.z);
    if (a.cache) VF_TRY(cache_norm(a.cache, c.z, mean, sd, &have_norm, &st));
    if (!have_norm && a.vae) VF_TRY(vf_vae_config_norm(a.vae, c.z, mean, sd, &have_norm, &st));
    if (!have_norm) {
        if (!strcmp(preset, "wan"))
            VF_FAIL(&st, VF_EBADINPUT, "the latents' per-channel normalisation is unknown: give --cache (the cache the "
                    "model trained on) or --vae (a diffusers AutoencoderKLWan directory)%s", "");
        for (int i = 0; i < c.z; i++) mean[i] = vc.shift, sd[i] = 1.0f / vc.scale; /* latent = (x - shift)·scale */
    }

    /* weights: the checkpoint's model file, read tensor by tensor */
    snprintf(model, sizeof model, "%s/model.safetensors", ck.path);
    struct stat sb;
    if (stat(model, &sb) != 0) snprintf(model, sizeof model, "%s/model.safetensors.index.json", ck.path);
    VF_TRY(vf_dit_wsrc_open(model, &ws, &st));
    VF_TRY(vf_dit_wsrc_check(ws, l, &st));
    if (!(host_w = malloc(sizeof(float) * (size_t)l->total))) VF_FAIL(&st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_dit_wsrc_read(ws, l, host_w, 0, l->total, &st));
    vf_device dev;
    if (vf_device_parse(a.device, &dev, &st)) {
        st.code = VF_EBADINPUT;
        VF_FAIL(&st, VF_EBADINPUT, "--device %s: %s", a.device, st.msg);
    }
    if (!(be = vf_backend_for(dev, &st))) {
        rc = st.code ? st.code : VF_EEXTERNAL;
        goto fail;
    }
    if (!(dev_w = be->alloc(be, (size_t)l->total * vf_dtype_size(be->act_dtype), &st))) {
        rc = st.code;
        goto fail;
    }
    be->upload(be, dev_w, host_w, l->total, be->act_dtype);
    free(host_w);
    host_w = NULL;

    /* sample */
    vf_dit_sample_cfg sc = {a.steps, a.shift, a.guidance, a.seed, c.text_dim};
    VF_TRY(vf_dit_sample_check(&sc, &c, &st));
    double t1 = now_s();
    VF_TRY(vf_dit_sample(be, l, dev_w, &sc, &d, pos, &pos_len, neg, neg ? &neg_len : NULL, NULL, lat, &st));
    double t_sample = now_s() - t1;
    if (a.lat_out) VF_TRY(spit(a.lat_out, lat, sizeof(float) * nlat, &st));

    /* decode: de-normalise, then the causal decoder a chunk of latent frames at a time */
    vf_vae_denormalise(lat, c.z, Tl * d.H * d.W, mean, sd);
    VF_TRY(vf_vae_dec_model_new(&vc, be, &vm, &st));
    if (a.vae) VF_TRY(vf_vae_load(vm, a.vae, &st));
    else VF_TRY(vf_vae_init_seeded(vm, a.vae_seed, &st));
    int chunk = a.chunk < Tl ? a.chunk : (int)Tl;
    VF_TRY(vf_vae_dec_new(vm, 1, chunk, d.H, d.W, &dec, &st));
    int64_t T = vf_vae_decoded_frames(&vc, Tl);
    size_t plane = (size_t)a.height * (size_t)a.width;
    if (!(frames = malloc(sizeof(float) * 3 * (size_t)T * plane)) || !(rgb = malloc(3 * plane * (size_t)T)))
        VF_FAIL(&st, VF_ENOMEM, "out of memory");
    double t2 = now_s();
    VF_TRY(vf_vae_decode_f32(dec, 1, Tl, lat, frames, &st));
    double t_decode = now_s() - t2;

    /* write */
    vf_video_opts vo = {a.out, a.width, a.height, a.fps, NULL};
    if ((rc = vf_video_open(&vo, &vw, &st))) {
        if (rc != VF_ENOMEM) st.code = rc = VF_EBADINPUT; /* the output the user named */
        goto fail;
    }
    for (int64_t t = 0; t < T; t++) {
        vf_video_rgb_from_float(frames, (int)T, a.height, a.width, (int)t, rgb + (size_t)t * plane * 3);
        VF_TRY(vf_video_add(vw, rgb + (size_t)t * plane * 3, &st));
    }
    const char *codec = vf_video_codec(vw);
    char codec_name[32];
    snprintf(codec_name, sizeof codec_name, "%s", codec);
    rc = vf_video_close(vw, &st);
    vw = NULL;
    if (rc) goto fail;
    if (a.frames_out) VF_TRY(spit(a.frames_out, rgb, 3 * plane * (size_t)T, &st));
    if (a.png) {
        int k = T < 4 ? (int)T : 4, SW = k * a.width;
        uint8_t *strip = malloc((size_t)a.height * SW * 3);
        if (!strip) VF_FAIL(&st, VF_ENOMEM, "out of memory");
        for (int j = 0; j < k; j++) {
            int64_t t = k == 1 ? 0 : (int64_t)j * (T - 1) / (k - 1); /* first to last, evenly */
            for (int y = 0; y < a.height; y++)
                memcpy(strip + ((size_t)y * SW + (size_t)j * a.width) * 3,
                       rgb + ((size_t)t * plane + (size_t)y * a.width) * 3, (size_t)a.width * 3);
        }
        rc = vf_png_write(a.png, strip, SW, a.height, &st);
        free(strip);
        if (rc) goto fail;
    }
    printf("vflow sample: %s: %lld frames %dx%d at %g fps (%s) from %s step %lld; %d steps %.1f s, decode %.1f s, "
           "total %.1f s\n",
           a.out, (long long)T, a.width, a.height, a.fps, codec_name, ck.path, (long long)ck.step, a.steps, t_sample,
           t_decode, now_s() - t0);
fail:
    vf_video_free(vw);
    vf_vae_dec_free(dec);
    vf_vae_free(vm);
    if (dev_w) be->free(be, dev_w);
    vf_dit_wsrc_close(ws);
    vf_dit_layout_free(l);
    vf_ckpt_fini(&ck);
    free(host_w), free(pos), free(neg), free(lat), free(frames), free(rgb);
    if (rc) {
        fprintf(stderr, "vflow sample: %s\n", st.msg);
        return vf_exit_code(rc);
    }
    return 0;
}
