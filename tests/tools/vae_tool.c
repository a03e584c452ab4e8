/* vae_tool.c — drives the causal VAE encoder (models/vae.h) from the command line, for
 * the PyTorch parity test (tests/reference/test_vae_parity.py) and by hand.
 *
 *   vae_tool encode [CONFIG] (--weights W.safetensors | --seed N) --input IN.safetensors
 *                   [--chunk C] [--device cpu|cuda:N] [--repeat N] --out OUT.safetensors
 *       IN holds "x" f32 (B, 3, T, H, W) in [-1, 1]; OUT gets "mean" and "logvar" f32
 *       (B, z, T', H/s, W/s), raw (no scale/shift), metadata "vae" = the weights hash;
 *       with W a diffusers directory whose config.json records latents_mean/latents_std,
 *       also "latent": mean normalised per channel (vf_vae_normalise).
 *       W may be a safetensors file (original or diffusers names) or a diffusers directory.
 *       The clip is encoded in chunks of C frames (default: T, i.e. whole). Prints
 *       "encode_run_s S" as each of N repeats of the encode alone ends, then the hash and
 *       "encode_s S" (the best of them, for benchmarks).
 *   vae_tool decode [CONFIG] (--weights W | --seed N) --input IN.safetensors [--chunk C]
 *                   [--device D] [--repeat N] --out OUT.safetensors
 *       IN holds "z" f32 (B, z, T', h, w), de-normalised (what the decoder takes), or
 *       "latent", normalised per channel, which W's config.json (a diffusers directory
 *       recording latents_mean/latents_std) de-normalises first (vf_vae_denormalise).
 *       OUT gets "x" f32 (B, 3, 1 + 4(T'-1), 8h, 8w) in [-1, 1], metadata "vae" = the
 *       decoder's weights hash. Decoded in chunks of C latent frames (default 1, as Wan
 *       does). Prints "decode_run_s S" per repeat, the hash, then "decode_s S" (the best).
 *   vae_tool save [CONFIG] --seed N --out W.safetensors     seeded weights to a file
 *   vae_tool names [CONFIG]                                 tensor names and shapes
 *   vae_tool dec-names [CONFIG]                             the decoder's
 *   vae_tool mem [CONFIG] --batch B --chunk C --size H W    memory bytes (one line JSON)
 *   vae_tool dec-mem [CONFIG] --batch B --chunk C --size h w   the decoder's (latent size)
 *
 *   CONFIG: --preset tiny|wan|wan2.2, then overrides --dim D --mult 1,2,4,4 --res R
 *           --tdown 0,1,1 --z Z --eps E --residual 0|1 --patch P --dec-dim D
 *   --phases 1 (encode, decode): after the timed repeats, one more pass op by op
 *       (kernels/phases.h) and a line "phases {JSON}": the time of each phase of work
 *       (attention, gemm, conv, elementwise, transfer, memset; ms) and the idle time.
 *   encode and decode end with the lines conv_path=P and attn_path=P: what ran the
 *       convolutions and the mid-block attention on a CUDA device (cudnn, hand, gemm,
 *       joined by '+' where shapes took different paths), "cpu" on the CPU.
 *
 * Exit 0 on success, 1 with the error on stderr, 2 on bad usage.
 */
#include "models/vae.h"
#include "formats/safetensors.h"
#include "kernels/phases.h"
#ifdef VFLOW_HAVE_CUDA
#include "kernels/cuda/cudnn_att.h"
#include "kernels/cuda/cudnn_conv.h"
#endif

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int usage(void)
{
    fprintf(stderr, "usage: vae_tool encode|decode|save|names|dec-names|mem|dec-mem [--preset "
                    "tiny|wan|wan2.2] [--dim D] [--residual 0|1] [--patch P] [--dec-dim D] "
                    "[--mult a,b,..] [--res R] [--tdown 0,1,..] [--z Z] [--eps E] "
                    "[--weights F | --seed N] [--input F] [--chunk C] [--device D] [--out F] "
                    "[--batch B] [--size H W] [--repeat N] [--phases 1]\n");
    return 2;
}

/* The lines naming what ran the convolutions and the mid-block attention ("cudnn",
 * "hand", "cudnn+hand", ...; "cpu" off the GPU), for benchmarks to record. */
static void print_paths(vf_device dev)
{
    const char *conv = "cpu", *attn = "cpu";
#ifdef VFLOW_HAVE_CUDA
    if (dev.kind == VF_DEV_CUDA) conv = vf_cuda_conv_path(), attn = vf_cuda_attn_path();
#endif
    printf("conv_path=%s\nattn_path=%s\n", conv, attn);
}

/* With a timer: turns it on for one more run of `again`, then prints its phases. */
static int phase_pass(vf_phases *ph, int (*again)(void *), void *arg, vf_status *st)
{
    if (!ph) return 0;
    vf_phase_times t;
    char json[1024];
    vf_phases_enable(ph, true);
    int rc = again(arg);
    vf_phases_enable(ph, false);
    if (rc < 0) return rc;
    if ((rc = vf_phases_read(ph, &t, st)) < 0) return rc;
    vf_phase_times_json(&t, json, sizeof json);
    printf("phases %s\n", json);
    return 0;
}

typedef struct dec_run {
    vf_vae_dec *d;
    int B;
    int64_t Tl;
    const float *z;
    float *x;
    vf_status *st;
} dec_run;
static int dec_again(void *a)
{
    dec_run *r = a;
    return vf_vae_decode_f32(r->d, r->B, r->Tl, r->z, r->x, r->st);
}

/* The decode command: IN's "z" (or "latent", de-normalised) through the decoder. */
static int decode(vf_vae *m, const char *weights, const char *input, const char *outp, int chunk,
                  int repeat, vf_phases *ph, vf_status *st)
{
    int rc = 0;
    const vf_vae_config *cfg = vf_vae_cfg(m);
    vf_st_file *in = NULL;
    vf_st_writer *w = NULL;
    vf_vae_dec *d = NULL;
    float *z = NULL, *x = NULL;
    VF_TRY(vf_st_open(input, &in, st));
    const char *key = vf_st_find(in, "z") ? "z" : "latent";
    const vf_st_tensor *zt = vf_st_find(in, key);
    if (!zt || zt->ndim != 5 || zt->shape[1] != cfg->z_dim)
        VF_FAIL(st, VF_EBADINPUT, "%s: expected tensor \"z\" or \"latent\" (B, %d, T', h, w)",
                input, cfg->z_dim);
    int B = (int)zt->shape[0], h = (int)zt->shape[3], wd = (int)zt->shape[4];
    int64_t Tl = zt->shape[2], T = vf_vae_decoded_frames(cfg, Tl);
    int sf = vf_vae_space_factor(cfg);
    if (!(z = malloc(sizeof(float) * (size_t)zt->numel)))
        VF_FAIL(st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_st_read_f32(in, key, z, zt->numel, st));
    if (!strcmp(key, "latent")) {
        float nm[1024], ns[1024];
        bool norm = false;
        if (weights) VF_TRY(vf_vae_config_norm(weights, cfg->z_dim, nm, ns, &norm, st));
        if (!norm)
            VF_FAIL(st, VF_EBADINPUT, "%s: \"latent\" is normalised, and --weights records no "
                                      "latents_mean/latents_std", input);
        int64_t per = zt->numel / B;
        for (int b = 0; b < B; b++)
            vf_vae_denormalise(z + b * per, cfg->z_dim, per / cfg->z_dim, nm, ns);
    }
    int64_t oshape[5] = {B, 3, T, (int64_t)h * sf, (int64_t)wd * sf};
    int64_t on = (int64_t)B * 3 * T * h * sf * wd * sf;
    if (!(x = calloc((size_t)on, sizeof(float)))) VF_FAIL(st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_vae_dec_new(m, B, chunk, h, wd, &d, st));
    double best = 1e300;
    for (int r = 0; r < repeat; r++) {
        double t0 = now_s();
        if ((rc = vf_vae_decode_f32(d, B, Tl, z, x, st)) < 0) goto fail;
        double dt = now_s() - t0;
        if (dt < best) best = dt;
        printf("decode_run_s %.6f\n", dt); /* each run as it ends: a caller that stops us keeps them */
        fflush(stdout);
    }
    rc = 0;
    VF_TRY(phase_pass(ph, dec_again, &(dec_run){d, B, Tl, z, x, st}, st));
    if (!(w = vf_st_writer_new(st))) VF_FAIL(st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_st_writer_add(w, "x", VF_ST_F32, 5, oshape, x, st));
    VF_TRY(vf_st_writer_meta(w, "vae", vf_vae_hash(m), st));
    VF_TRY(vf_st_writer_save(w, outp, 0, NULL, st));
    printf("%s\ndecode_s %.6f\n", vf_vae_hash(m), best);
fail:
    vf_st_writer_free(w);
    vf_vae_dec_free(d);
    vf_st_close(in);
    free(z);
    free(x);
    return rc;
}

typedef struct enc_run {
    vf_vae_enc *e;
    int B;
    int64_t T;
    const float *x;
    float *mean, *logvar;
    vf_status *st;
} enc_run;
static int enc_again(void *a)
{
    enc_run *r = a;
    return vf_vae_encode_f32(r->e, r->B, r->T, r->x, r->mean, r->logvar, r->st);
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        out[n++] = (int)strtol(s, &end, 10);
        if (end == s) return -1;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    const char *cmd = argv[1];
    vf_vae_config cfg;
    vf_vae_config_tiny(&cfg);
    const char *weights = NULL, *input = NULL, *outp = NULL, *device = "cpu";
    uint64_t seed = 0;
    int chunk = 0, batch = 1, H = 0, W = 0, repeat = 1, phases = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(a, "--preset")) {
            if (!strcmp(v, "wan")) vf_vae_config_wan(&cfg);
            else if (!strcmp(v, "wan2.2")) vf_vae_config_wan22(&cfg);
            else if (!strcmp(v, "tiny")) vf_vae_config_tiny(&cfg);
            else return usage();
        } else if (!strcmp(a, "--dim")) cfg.dim = atoi(v);
        else if (!strcmp(a, "--mult")) {
            if ((cfg.nlevels = parse_list(v, cfg.dim_mult, VF_VAE_MAX_LEVELS)) < 1) return usage();
        } else if (!strcmp(a, "--tdown")) {
            if (parse_list(v, cfg.temporal_downsample, VF_VAE_MAX_LEVELS - 1) < 0) return usage();
        } else if (!strcmp(a, "--res")) cfg.num_res_blocks = atoi(v);
        else if (!strcmp(a, "--z")) cfg.z_dim = atoi(v);
        else if (!strcmp(a, "--residual")) cfg.residual = atoi(v);
        else if (!strcmp(a, "--patch")) cfg.patch = atoi(v);
        else if (!strcmp(a, "--dec-dim")) cfg.dec_dim = atoi(v);
        else if (!strcmp(a, "--eps")) cfg.eps = strtof(v, NULL);
        else if (!strcmp(a, "--weights")) weights = v;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--input")) input = v;
        else if (!strcmp(a, "--out")) outp = v;
        else if (!strcmp(a, "--chunk")) chunk = atoi(v);
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--repeat")) repeat = atoi(v) > 0 ? atoi(v) : 1;
        else if (!strcmp(a, "--phases")) phases = atoi(v);
        else if (!strcmp(a, "--size")) {
            if (i + 2 >= argc) return usage();
            H = atoi(v), W = atoi(argv[i + 2]);
            i++;
        } else return usage();
        i++;
    }

    vf_status st = {0};
    int rc = 0;
    vf_vae *m = NULL;
    vf_vae_enc *e = NULL;
    vf_st_file *in = NULL;
    vf_st_writer *w = NULL;
    float *x = NULL, *mean = NULL, *logvar = NULL;
    vf_device dev;
    vf_backend *be;
    vf_phases *ph = NULL;

    bool dec = !strcmp(cmd, "decode") || !strcmp(cmd, "dec-names") || !strcmp(cmd, "dec-mem");
    if (!strcmp(cmd, "mem") || !strcmp(cmd, "dec-mem")) {
        vf_vae_mem_info mi;
        if (dec) VF_TRY(vf_vae_dec_mem(&cfg, 4, batch, chunk, H, W, &mi, &st));
        else VF_TRY(vf_vae_mem(&cfg, 4, batch, chunk, H, W, &mi, &st));
        printf("{\"weights\": %" PRId64 ", \"caches\": %" PRId64 ", \"workspace\": %" PRId64
               ", \"host\": %" PRId64 ", \"conv_workspace\": %" PRId64 "}\n",
               mi.weights, mi.caches, mi.workspace, mi.host, mi.conv_workspace);
        return 0;
    }
    VF_TRY(vf_device_parse(device, &dev, &st));
    if (!(be = vf_backend_for(dev, &st))) {
        rc = st.code ? st.code : VF_EINVAL;
        goto fail;
    }
    if (phases) { /* the model runs on the timer's table, timing off until the last pass */
        VF_TRY(vf_phases_new(be, &ph, &st));
        be = vf_phases_backend(ph);
    }
    if (dec) VF_TRY(vf_vae_dec_model_new(&cfg, be, &m, &st));
    else VF_TRY(vf_vae_new(&cfg, be, &m, &st));
    if (!strcmp(cmd, "names") || !strcmp(cmd, "dec-names")) {
        for (int i = 0; i < vf_vae_nparams(m); i++) {
            const vf_vae_param *p = vf_vae_param_at(m, i);
            char shp[96];
            vf_shape_str(p->ndim, p->shape, shp, sizeof shp);
            printf("%s %s\n", p->name, shp);
        }
        printf("total %" PRId64 "\n", vf_vae_numel(m));
        goto done;
    }
    if (weights) VF_TRY(vf_vae_load(m, weights, &st));
    else VF_TRY(vf_vae_init_seeded(m, seed, &st));
    if (!strcmp(cmd, "save")) {
        if (!outp) return usage();
        VF_TRY(vf_vae_save(m, outp, &st));
        printf("%s\n", vf_vae_hash(m));
        goto done;
    }
    if (!strcmp(cmd, "decode")) {
        if (!input || !outp) return usage();
        rc = decode(m, weights, input, outp, chunk > 0 ? chunk : 1, repeat, ph, &st);
        if (rc == 0) print_paths(dev);
        goto done;
    }
    if (strcmp(cmd, "encode") || !input || !outp) return usage();

    VF_TRY(vf_st_open(input, &in, &st));
    const vf_st_tensor *xt = vf_st_find(in, "x");
    if (!xt || xt->ndim != 5 || xt->shape[1] != 3)
        VF_FAIL(&st, VF_EINVAL, "%s: expected tensor \"x\" (B, 3, T, H, W)", input);
    int B = (int)xt->shape[0];
    int64_t T = xt->shape[2];
    H = (int)xt->shape[3], W = (int)xt->shape[4];
    if (!(x = malloc(sizeof(float) * (size_t)xt->numel)))
        VF_FAIL(&st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_st_read_f32(in, "x", x, xt->numel, &st));
    int64_t Tl = vf_vae_latent_frames(&cfg, T);
    int sf = vf_vae_space_factor(&cfg);
    int64_t oshape[5] = {B, cfg.z_dim, Tl > 0 ? Tl : 0, H / sf, W / sf};
    int64_t on = (int64_t)B * cfg.z_dim * (Tl > 0 ? Tl : 0) * (H / sf) * (W / sf);
    if (!(mean = calloc((size_t)on + 1, sizeof(float))) ||
        !(logvar = calloc((size_t)on + 1, sizeof(float))))
        VF_FAIL(&st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_vae_enc_new(m, B, chunk > 0 ? chunk : (int)T, H, W, &e, &st));
    double best = 1e300;
    for (int r = 0; r < repeat; r++) {
        double t0 = now_s();
        VF_TRY(vf_vae_encode_f32(e, B, T, x, mean, logvar, &st));
        double dt = now_s() - t0;
        if (dt < best) best = dt;
        printf("encode_run_s %.6f\n", dt); /* each run as it ends: a caller that stops us keeps them */
        fflush(stdout);
    }
    VF_TRY(phase_pass(ph, enc_again, &(enc_run){e, B, T, x, mean, logvar, &st}, &st));
    if (!(w = vf_st_writer_new(&st))) VF_FAIL(&st, VF_ENOMEM, "out of memory");
    VF_TRY(vf_st_writer_add(w, "mean", VF_ST_F32, 5, oshape, mean, &st));
    VF_TRY(vf_st_writer_add(w, "logvar", VF_ST_F32, 5, oshape, logvar, &st));
    VF_TRY(vf_st_writer_meta(w, "vae", vf_vae_hash(m), &st));
    float nm[1024], ns[1024];
    bool norm = false;
    if (weights) VF_TRY(vf_vae_config_norm(weights, cfg.z_dim, nm, ns, &norm, &st));
    if (norm) {
        if (!(x = realloc(x, sizeof(float) * ((size_t)on + 1))))
            VF_FAIL(&st, VF_ENOMEM, "out of memory");
        memcpy(x, mean, sizeof(float) * (size_t)on);
        int64_t per = on / B;
        for (int b = 0; b < B; b++)
            vf_vae_normalise(x + b * per, cfg.z_dim, per / cfg.z_dim, nm, ns);
        VF_TRY(vf_st_writer_add(w, "latent", VF_ST_F32, 5, oshape, x, &st));
    }
    VF_TRY(vf_st_writer_save(w, outp, 0, NULL, &st));
    printf("%s\nencode_s %.6f\n", vf_vae_hash(m), best);
    print_paths(dev);
done:
fail:
    if (rc < 0) fprintf(stderr, "vae_tool: %s\n", st.msg);
    vf_st_writer_free(w);
    vf_st_close(in);
    vf_vae_enc_free(e);
    vf_vae_free(m);
    vf_phases_free(ph);
    free(x);
    free(mean);
    free(logvar);
    return rc < 0 ? 1 : 0;
}
