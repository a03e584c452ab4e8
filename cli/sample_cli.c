/* sample_cli.c — `vflow sample`: a video from a checkpoint, on the command line.
 *
 *   vflow sample CKPT --prompt-embeds F [--negative-embeds F] --out x.mp4
 *   vflow sample CKPT --prompt TEXT [--negative TEXT] --out x.mp4     (byte-caption models)
 *                [--frames 17] [--size 256x256] [--steps 30] [--shift 3] [--guidance 5]
 *                [--seed 0] [--fps 16] [--device cpu|cuda:N] [--chunk 1] [--png F]
 *                [--vae PATH] [--vae-preset tiny|wan|wan2.2] [--vae-seed N] [--cache LMDB]
 *                [--latent-out F] [--frames-out F] [--weights F] [--lora F]
 *                [--image F [--image-embeds F]]                   (image-to-video models)
 *                [--low CKPT|F] [--boundary B] [--guidance-2 G]   (two experts, Wan 2.2 A14B)
 *
 * CKPT is a checkpoint step dir or a checkpoint dir (its newest complete step). The DiT's
 * config comes from the checkpoint's state.json, its weights from model.safetensors (or
 * the sharded index), or from --weights. A LoRA run's checkpoint (lora.safetensors) is
 * sampled as its base (--weights, else the run's base weights or seeded init) with the
 * adapter merged in, W += alpha/rank · B·A; --lora F merges another adapter file (any
 * naming models/dit_lora.h reads) into whatever weights are used. The prompt embeddings
 * are what a manifest's text_emb column names: a safetensors file holding one (L,
 * text_dim) tensor (tools/encode_captions.py writes them). A model trained on caption
 * bytes (the tiny presets, no text encoder) takes the caption itself (--prompt),
 * tokenised as the latent reader does. Sampling is flow-matching Euler with shift and
 * classifier-free guidance (models/dit_sample.h); the latent is de-normalised and decoded by the causal VAE
 * decoder chunk by chunk (models/vae.h) and written by formats/video_write.h; all of it
 * through models/dit_video.h, which the `sample` stage shares.
 *
 * An image-to-video checkpoint (Wan I2V: in_dim 36) samples from an image: --image F, the
 * first frame, an image file of the video's size (--size); its conditioning is the
 * first-frame mask and the VAE latent of [image, zeros], normalised like the latents, as
 * diffusers' WanImageToVideoPipeline builds it (models/dit_i2v.h). A Wan 2.1 I2V model
 * (CLIP image branch) also takes --image-embeds F, the image's CLIP features as
 * tools/encode_images.py writes them. A text-to-video checkpoint with --image, an
 * image-to-video one without, or an image of another size is exit 2 naming it.
 *
 * Two experts (Wan 2.2 A14B): a two-expert checkpoint step dir (high_noise_model/ and
 * low_noise_model/, state.json's "boundary"), or any checkpoint with --low naming the
 * low-noise expert (a weights file, or a checkpoint whose model it is). A LoRA run's
 * two-expert step (lora_high_noise, lora_low_noise) is sampled with each adapter merged
 * into its expert's base: the ones its state.json records (the low one under
 * "low_noise"), or --weights (high) and --low (low) naming them, checked by content.
 * The high-noise expert runs the steps whose timestep t = σ·1000 is at least
 * boundary·1000 with --guidance, the low-noise one the rest with --guidance-2 (default --guidance), as
 * diffusers' WanPipeline(transformer, transformer_2, boundary_ratio) with guidance_scale
 * and guidance_scale_2. --boundary overrides the checkpoint's.
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
#include "formats/ckpt.h"
#include "models/dit_video.h"
#include "runtime/vflow.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sample_args {
    const char *ckpt, *pos, *neg, *caption, *neg_caption, *out, *png, *vae, *vae_preset, *cache, *device, *lat_out, *frames_out;
    const char *weights, *lora, *image, *image_embeds, *low;
    int frames, width, height, steps, chunk;
    double shift, guidance, fps, boundary, guidance2;
    uint64_t seed, vae_seed;
} sample_args;

static const char USAGE[] =
    "usage: vflow sample CKPT (--prompt-embeds F [--negative-embeds F] | --prompt TEXT [--negative TEXT])\n"
    "         --out x.mp4 [--frames 17]\n"
    "         [--size WxH|S] [--steps 30] [--shift 3] [--guidance 5] [--seed 0] [--fps 16]\n"
    "         [--device cpu] [--chunk 1] [--png F] [--vae PATH] [--vae-preset tiny|wan|wan2.2]\n"
    "         [--vae-seed 0] [--cache LMDB] [--latent-out F] [--frames-out F]\n"
    "         [--weights F] [--lora F] [--image F [--image-embeds F]]\n"
    "         [--low CKPT|F] [--boundary B] [--guidance-2 G]\n";

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
                       .guidance = 5.0, .fps = 16.0, .device = "cpu", .boundary = -1, .guidance2 = -1};
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
        else if (!strcmp(flag, "--prompt")) a->caption = v;
        else if (!strcmp(flag, "--negative")) a->neg_caption = v;
        else if (!strcmp(flag, "--out")) a->out = v;
        else if (!strcmp(flag, "--png")) a->png = v;
        else if (!strcmp(flag, "--vae")) a->vae = v;
        else if (!strcmp(flag, "--weights")) a->weights = v;
        else if (!strcmp(flag, "--lora")) a->lora = v;
        else if (!strcmp(flag, "--image")) a->image = v;
        else if (!strcmp(flag, "--image-embeds")) a->image_embeds = v;
        else if (!strcmp(flag, "--low")) a->low = v;
        else if (!strcmp(flag, "--boundary")) {
            if (num(flag, v, 0, 1, &a->boundary)) return 2;
        } else if (!strcmp(flag, "--guidance-2")) {
            if (num(flag, v, 0, 1e6, &a->guidance2)) return 2;
        }
        else if (!strcmp(flag, "--vae-preset")) a->vae_preset = v;
        else if (!strcmp(flag, "--cache")) a->cache = v;
        else if (!strcmp(flag, "--device")) a->device = v;
        else if (!strcmp(flag, "--latent-out")) a->lat_out = v;
        else if (!strcmp(flag, "--frames-out")) a->frames_out = v;
        else if (!strcmp(flag, "--size")) {
            /* WxH, or one number for a square: as every size knob spells it */
            char *e1, *e2 = NULL;
            long w = strtol(v, &e1, 10), h = *e1 == 'x' ? strtol(e1 + 1, &e2, 10) : !*e1 && e1 != v ? w : -1;
            if (h <= 0 || w <= 0 || w > 8192 || h > 8192 || (e2 && *e2))
                return bad("--size %s: expected WxH (e.g. 832x480) or one number for a square (e.g. 256)%s", v, "");
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
    if (!a->pos == !a->caption)
        return bad("give one of --prompt-embeds F (a safetensors file of one (L, text_dim) tensor) and --prompt TEXT "
                   "(a model trained on caption bytes)%s%s", "", "");
    if ((a->neg && !a->pos) || (a->neg_caption && !a->caption))
        return bad("--negative-embeds goes with --prompt-embeds, --negative with --prompt%s%s", "", "");
    if (!a->out) return bad("--out FILE.mp4 is required%s%s", "", "");
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
    vf_dit_video *v = NULL;
    double t0 = now_s();
    vf_dit_video_opts o;
    vf_dit_video_opts_default(&o);
    o.frames = a.frames, o.width = a.width, o.height = a.height, o.steps = a.steps, o.chunk = a.chunk;
    o.shift = a.shift, o.guidance = a.guidance, o.fps = a.fps, o.seed = a.seed, o.vae_seed = a.vae_seed;
    o.vae = a.vae, o.vae_preset = a.vae_preset, o.cache = a.cache, o.device = a.device;
    o.weights = a.weights, o.lora = a.lora, o.image = a.image, o.image_embeds = a.image_embeds;
    o.low = a.low, o.boundary = a.boundary, o.guidance2 = a.guidance2;

    VF_TRY(vf_dit_video_find_ckpt(a.ckpt, &ck, &st));
    VF_TRY(vf_dit_video_open(&ck, &o, &v, &st));
    if (a.pos) VF_TRY(vf_dit_video_prompt(v, a.pos, "--prompt-embeds", a.neg, "--negative-embeds", &st));
    else VF_TRY(vf_dit_video_caption(v, a.caption, a.neg_caption, &st));
    for (int i = 0; !a.pos && i < 2; i++) { /* what the model reads of a long caption */
        const char *c = i ? a.neg_caption : a.caption;
        int tl = vf_dit_video_text_len(v);
        if (c && (int)strlen(c) > tl)
            fprintf(stderr, "vflow sample: warning: %s is %zu bytes; the model reads its first %d (text_len)\n",
                    i ? "--negative" : "--prompt", strlen(c), tl);
    }
    VF_TRY(vf_dit_video_load(v, &st));
    vf_dit_video_out out = {a.out, a.png, NULL, a.lat_out, a.frames_out};
    vf_dit_video_stats s;
    VF_TRY(vf_dit_video_render(v, &out, &s, &st));
    printf("vflow sample: %s: %lld frames %dx%d at %g fps (%s) from %s step %lld; %d steps %.1f s, decode %.1f s, "
           "total %.1f s\n",
           a.out, (long long)s.frames, a.width, a.height, a.fps, s.codec, ck.path, (long long)ck.step, a.steps,
           s.sample_s, s.decode_s, now_s() - t0);
fail:
    vf_dit_video_free(v);
    vf_ckpt_fini(&ck);
    if (rc) {
        fprintf(stderr, "vflow sample: %s\n", st.msg);
        return vf_exit_code(rc);
    }
    return 0;
}
