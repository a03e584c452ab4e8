/* dit_tool.c — drives models/dit from the command line for tests/reference/test_dit_parity.py
 * and for quick measurements.
 *
 *   dit_tool layout CFG [lora_cfg=JSON]      one line per tensor: name offset numel d0,d1,…
 *                 (with lora_cfg: the tensors of the LoRA adapter vector instead)
 *   dit_tool init CFG seed=S out=params.bin  deterministic init, raw f32
 *   dit_tool save CFG params=P out=F         raw f32 params -> safetensors by tensor name
 *   dit_tool weights CFG weights=PATH [expert=high|low] [out=params.bin] [part=k/S]
 *                 checks a weights file / index / diffusers dir against CFG (models/dit_weights.h;
 *                 expert: that expert of a two-expert source, models/dit_experts.h)
 *                 and reads it (part: only elements [k·N/S, (k+1)·N/S), as an optimizer shard
 *                 does); prints "naming <name> tensors <n> read <elements> largest <bytes>
 *                 maxrss_mib <peak resident MiB>", writes raw f32 params
 *   dit_tool grad CFG dims=B,T,H,W params=P|weights=PATH xt=X t=T text=I|emb=E len=N target=Y
 *                 [cond=C] [img=M] [ttok=U] [skip=F] [parts=1] [recompute=0] [grads=G.bin] [pred=V.bin]
 *                 [lora=F lora_cfg=JSON]
 *                 prints "loss <value>" (skip=F: over the latent frames after the first F);
 *                 writes the flat gradient and the prediction (f32);
 *                 with lora= the adapters of file F (any naming models/dit_lora.h reads) run
 *                 on the frozen weights as in LoRA training, and grads= gets the adapter
 *                 vector's gradient
 *   dit_tool first_frame CFG dims=B,T,H,W xt=X x0=X0 t=T out=XIN ttok_out=U
 *                 TI2V's model input (vf_dit_first_frame): each sample's x_t with frame 0 of
 *                 its clean latent x0 (B,z,T,H,W), and each token's time (B,L)
 *   dit_tool lora CFG lora=F lora_cfg=JSON [out=A.bin]
 *                 reads a LoRA file into the adapter vector (raw f32, adapter layout order);
 *                 prints "adapters <n> params <count>"; bad input: the message, exit 2
 *   dit_tool bench CFG dims=B,T,H,W [steps=5] [parts=1] [recompute=0]
 *                 forward+loss+backward of random data; prints ms per step
 *   dit_tool sample CFG dims=B,T,H,W weights=PATH|params=P pos=E [pos_len=N] [neg=E]
 *                 [neg_len=N] [noise=X] [steps=50] [shift=5] [guidance=5] [seed=0] out=LAT
 *                 [noise_out=X]
 *                 (pos/neg: embeddings f32 (B,text_len,text_dim) with text_emb=1, byte
 *                 tokens i32 (B,text_len) with text_emb=0)
 *                 flow-matching Euler sampling with guidance (models/dit_sample.h): prints
 *                 "sigmas s0 … sN" and "ms <wall time>"; writes the final latent (f32); noise
 *                 from the seed unless noise= gives it (noise_out= writes the seed's noise);
 *                 image-to-video: image=PNG (the first frame, (H·s)x(W·s) for the VAE's
 *                 stride s) vae=PATH (its weights and latent normalisation, a diffusers
 *                 AutoencoderKLWan dir) [vae_preset=tiny] [cond_out=C] builds the
 *                 conditioning as models/dit_i2v.h does for every sample (cond_out=: it,
 *                 f32 (in_dim-z,T,H,W)); img=M the CLIP features f32 (B,img_len,img_dim);
 *                 two experts: low=PATH (the low-noise expert's weights) boundary=B
 *                 [guidance2=G] (default: guidance); prints "experts high|low …", one per step
 *
 * CFG is either preset=NAME or key=value pairs of vf_dit_config (dim depth heads head_dim
 * ffn z patch=pt,ph,pw text_dim text_len freq_dim text_emb=0|1 in_dim img_dim img_len
 * t_tokens=0|1),
 * starting from preset "tiny". Inputs are raw little-endian arrays: params f32 (layout
 * order), xt/target f32 (B,z,T,H,W), t f32 (B), text i32 (B,text_len) (text_emb=0) or emb
 * f32 (B,text_len,text_dim) (text_emb=1), len i32 (B); image-to-video: cond f32
 * (B,in_dim-z,T,H,W), img f32 (B,img_len,img_dim); t_tokens=1: ttok f32 (B,L), each token's
 * time (without it every token takes its sample's t).
 */
#include "models/dit.h"
#include "models/dit_lora.h"
#include "formats/image_read.h"
#include "models/dit_i2v.h"
#include "models/dit_sample.h"
#include "models/dit_experts.h"
#include "runtime/philox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const char *arg(int argc, char **argv, const char *key)
{
    size_t n = strlen(key);
    for (int i = 2; i < argc; i++)
        if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    return NULL;
}

static int parse_cfg(int argc, char **argv, vf_dit_config *c, vf_status *st)
{
    const char *pre = arg(argc, argv, "preset");
    if (vf_dit_preset(pre ? pre : "tiny", c, st)) return -1;
    struct { const char *k; int *v; } ints[] = {
        {"dim", &c->dim}, {"depth", &c->depth}, {"heads", &c->heads},
        {"head_dim", &c->head_dim}, {"ffn", &c->ffn}, {"z", &c->z},
        {"text_dim", &c->text_dim}, {"text_len", &c->text_len}, {"freq_dim", &c->freq_dim},
        {"in_dim", &c->in_dim}, {"img_dim", &c->img_dim}, {"img_len", &c->img_len}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const char *v = arg(argc, argv, ints[i].k);
        if (v) *ints[i].v = atoi(v);
    }
    const char *tm = arg(argc, argv, "text_emb");
    if (tm) c->text_emb = atoi(tm);
    if ((tm = arg(argc, argv, "t_tokens"))) c->t_tokens = atoi(tm);
    const char *p = arg(argc, argv, "patch");
    if (p && sscanf(p, "%d,%d,%d", &c->patch[0], &c->patch[1], &c->patch[2]) != 3) {
        fprintf(stderr, "dit_tool: patch=pt,ph,pw\n");
        return -1;
    }
    return vf_dit_config_check(c, st);
}

static void *slurp(const char *path, size_t want)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        fprintf(stderr, "dit_tool: cannot open %s\n", path ? path : "(missing argument)");
        exit(1);
    }
    void *buf = malloc(want ? want : 1);
    size_t got = fread(buf, 1, want, f);
    fclose(f);
    if (got != want) {
        fprintf(stderr, "dit_tool: %s has %zu bytes, expected %zu\n", path, got, want);
        exit(1);
    }
    return buf;
}

static void spit(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "dit_tool: cannot write %s\n", path);
        exit(1);
    }
}

static void die(const vf_status *st)
{
    fprintf(stderr, "dit_tool: %s\n", st->msg);
    exit(st->code == VF_EBADINPUT ? 2 : 1);
}

/* The flat weights from a weights source (checked against the layout first). */
static float *load_weights(const vf_dit_layout *l, const char *path, vf_dit_naming *naming, int *count)
{
    vf_status st = {0};
    vf_dit_wsrc *w = NULL;
    float *p = malloc(sizeof(float) * (size_t)l->total);
    if (!p || vf_dit_wsrc_open(path, &w, &st) || vf_dit_wsrc_check(w, l, &st) ||
        vf_dit_wsrc_read(w, l, p, 0, l->total, &st))
        die(&st);
    if (naming) *naming = vf_dit_wsrc_naming(w);
    if (count) *count = vf_dit_wsrc_count(w);
    vf_dit_wsrc_close(w);
    return p;
}

/* With lora=: the adapters and their vector (run_step then trains them on frozen weights). */
static vf_dit_lora *g_lora;
static float *g_lparams;

/* Runs forward, loss and backward of one batch over `parts` partitions (blocks split as
 * evenly as possible) on host buffers; returns the loss. grads must be zeroed (with LoRA
 * they are the adapter vector's). */
static double run_step(vf_backend *be, const vf_dit_layout *l, int parts, bool recompute,
                       float *params, float *grads, const vf_dit_batch *b, float *pred_out)
{
    vf_status st = {0};
    const vf_dit_config *c = &l->cfg;
    vf_dit_part *pp[64];
    vf_dit_saved *sv[64];
    vf_dit_xfer fx[64], gx[64];
    int64_t L = b->dims.L, N = b->dims.B * L, Nt = (int64_t)b->dims.B * vf_dit_ctx_len(c);
    int64_t R = c->t_tokens ? N : b->dims.B; /* rows of the time embedding */
    for (int i = 0; i < parts; i++) {
        int b0 = c->depth * i / parts, b1 = c->depth * (i + 1) / parts;
        int64_t off, n;
        vf_dit_layout_range(l, b0, b1, &off, &n);
        int64_t loff = 0, ln;
        if (g_lora) vf_dit_layout_range(g_lora->l, b0, b1, &loff, &ln);
        if (vf_dit_part_new(be, l, b0, b1, &b->dims, recompute, params + off, g_lora ? NULL : grads + off,
                            &pp[i], &st) ||
            (g_lora && vf_dit_part_set_lora(pp[i], g_lora, g_lparams + loff, grads + loff, &st)) ||
            vf_dit_saved_new(pp[i], &sv[i], &st))
            die(&st);
        size_t sz[4] = {N * c->dim, R * c->dim, 6 * R * c->dim, Nt * c->dim};
        void **f[4] = {&fx[i].x, &fx[i].e, &fx[i].e0, &fx[i].ctx};
        void **g[4] = {&gx[i].x, &gx[i].e, &gx[i].e0, &gx[i].ctx};
        for (int k = 0; k < 4; k++) {
            *f[k] = calloc(sz[k], sizeof(float));
            *g[k] = calloc(sz[k], sizeof(float));
        }
    }
    for (int i = 0; i < parts; i++)
        if (vf_dit_part_forward(pp[i], b, i ? &fx[i - 1] : NULL, &fx[i], sv[i], &st)) die(&st);
    double loss = 0;
    if (vf_dit_part_loss(pp[parts - 1], b, sv[parts - 1], 1.0f, &loss, &st)) die(&st);
    if (pred_out) {
        size_t n = (size_t)b->dims.B * c->z * b->dims.T * b->dims.H * b->dims.W;
        memcpy(pred_out, vf_dit_saved_pred(sv[parts - 1]), n * sizeof(float));
    }
    /* the gradient buffers travel backwards: partition i writes gx[i], i-1 continues in it */
    for (int i = parts - 1; i >= 0; i--) {
        vf_dit_xfer *d = &gx[i];
        if (i < parts - 1) { /* received from i+1: copy, as a transport would */
            size_t sz[4] = {N * c->dim, R * c->dim, 6 * R * c->dim, Nt * c->dim};
            memcpy(d->x, gx[i + 1].x, sz[0] * 4);
            memcpy(d->e, gx[i + 1].e, sz[1] * 4);
            memcpy(d->e0, gx[i + 1].e0, sz[2] * 4);
            memcpy(d->ctx, gx[i + 1].ctx, sz[3] * 4);
        }
        if (vf_dit_part_backward(pp[i], b, sv[i], d, &st)) die(&st);
    }
    for (int i = 0; i < parts; i++) {
        vf_dit_saved_free(sv[i]);
        vf_dit_part_free(pp[i]);
        free(fx[i].x), free(fx[i].e), free(fx[i].e0), free(fx[i].ctx);
        free(gx[i].x), free(gx[i].e), free(gx[i].e0), free(gx[i].ctx);
    }
    return loss;
}

/* Text embeddings (B, text_len, width) f32 from path: the width is what the file size
 * says, so a file of another model's width is named as such by the sampler's check. */
static float *slurp_emb(const char *key, const char *path, int B, int text_len, int *width)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        fprintf(stderr, "dit_tool: %s: cannot open %s\n", key, path ? path : "(missing argument)");
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    long row = 4L * B * text_len;
    if (size <= 0 || size % row) {
        fprintf(stderr, "dit_tool: %s: %s has %ld bytes, not B=%d x text_len=%d rows of f32\n", key,
                path, size, B, text_len);
        exit(2);
    }
    *width = (int)(size / row);
    return slurp(path, (size_t)size);
}

static void parse_dims(int argc, char **argv, const vf_dit_config *c, vf_dit_dims *d)
{
    const char *s = arg(argc, argv, "dims");
    int B, T, H, W;
    if (!s || sscanf(s, "%d,%d,%d,%d", &B, &T, &H, &W) != 4) {
        fprintf(stderr, "dit_tool: dims=B,T,H,W required\n");
        exit(2);
    }
    *d = vf_dit_dims_of(c, B, T, H, W);
}

/* The image-to-video conditioning of image file `path` for every sample of d, built by
 * models/dit_i2v.c with the VAE of vae= (weights and normalisation). */
static float *i2v_cond(int argc, char **argv, vf_backend *be, const vf_dit_config *c, const vf_dit_dims *d,
                       const char *path)
{
    vf_status st = {0};
    vf_vae_config vc;
    vf_vae *m = NULL;
    const char *vae = arg(argc, argv, "vae"), *pre = arg(argc, argv, "vae_preset");
    if (pre && strcmp(pre, "tiny")) vf_vae_config_wan(&vc);
    else vf_vae_config_tiny(&vc);
    float mean[64], sd[64];
    bool found = false;
    uint8_t *rgb = NULL;
    int w = 0, h = 0;
    const int sf = vf_vae_space_factor(&vc);
    int64_t T = vf_vae_decoded_frames(&vc, d->T), per = (vf_dit_in_dim(c) - c->z) * (int64_t)d->T * d->H * d->W;
    if (!vae) {
        fprintf(stderr, "dit_tool: image= needs vae=DIR\n");
        exit(2);
    }
    if (vf_image_read(path, &rgb, &w, &h, &st) || vf_vae_config_norm(vae, c->z, mean, sd, &found, &st) ||
        vf_vae_new(&vc, be, &m, &st) || vf_vae_load(m, vae, &st))
        die(&st);
    if (!found || w != d->W * sf || h != d->H * sf) {
        fprintf(stderr, "dit_tool: %s: %dx%d (want %dx%d) or %s has no latents_mean/std\n", path, w, h, d->W * sf,
                d->H * sf, vae);
        exit(2);
    }
    float *cond = malloc(sizeof(float) * (size_t)(per * d->B));
    if (vf_dit_i2v_cond(c, m, vf_vae_time_factor(&vc), rgb, w, h, T, mean, sd, cond, &st)) die(&st);
    for (int b = 1; b < d->B; b++) memcpy(cond + b * per, cond, sizeof(float) * (size_t)per);
    const char *out = arg(argc, argv, "cond_out");
    if (out) spit(out, cond, sizeof(float) * (size_t)per);
    vf_vae_free(m);
    free(rgb);
    return cond;
}

static double clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static double now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

int main(int argc, char **argv)
{
    vf_status st = {0};
    vf_dit_config c;
    vf_dit_layout *l = NULL;
    if (argc < 2) {
        fprintf(stderr, "usage: dit_tool layout|init|save|weights|grad|bench|sample CFG ...\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (parse_cfg(argc, argv, &c, &st) || vf_dit_layout_new(&c, &l, &st)) die(&st);
    vf_backend *be = vf_backend_cpu();
    const char *s;

    if (strcmp(cmd, "layout") == 0) {
        vf_dit_lora *lo = NULL;
        if ((s = arg(argc, argv, "lora_cfg"))) {
            vf_dit_lora_cfg lc;
            if (vf_dit_lora_cfg_parse(s, &lc, &st) || vf_dit_lora_new(l, &lc, &lo, &st)) die(&st);
        }
        const vf_dit_layout *ly = lo ? lo->l : l;
        for (int i = 0; i < ly->n; i++) {
            const vf_dit_tensor *t = &ly->t[i];
            if (t->numel == 0) continue;
            printf("%s %lld %lld ", t->name, (long long)t->offset, (long long)t->numel);
            for (int k = 0; k < t->ndim; k++) printf(k ? ",%lld" : "%lld", (long long)t->shape[k]);
            printf("\n");
        }
        vf_dit_lora_free(lo);
    } else if (strcmp(cmd, "first_frame") == 0) {
        vf_dit_dims d;
        parse_dims(argc, argv, &c, &d);
        size_t per = (size_t)c.z * d.T * d.H * d.W;
        float *xt = slurp(arg(argc, argv, "xt"), per * d.B * 4), *x0 = slurp(arg(argc, argv, "x0"), per * d.B * 4);
        float *t = slurp(arg(argc, argv, "t"), (size_t)d.B * 4), *tt = malloc(sizeof(float) * (size_t)(d.B * d.L));
        for (int i = 0; i < d.B; i++)
            vf_dit_first_frame(&c, d.T, d.H, d.W, x0 + per * i, d.T, t[i], xt + per * i, tt + d.L * i);
        spit(arg(argc, argv, "out"), xt, per * d.B * 4);
        spit(arg(argc, argv, "ttok_out"), tt, (size_t)(d.B * d.L) * 4);
        free(xt), free(x0), free(t), free(tt);
    } else if (strcmp(cmd, "init") == 0) {
        float *p = malloc(sizeof(float) * (size_t)l->total);
        s = arg(argc, argv, "seed");
        vf_dit_init(l, s ? strtoull(s, NULL, 10) : 0, 0, l->total, p);
        spit(arg(argc, argv, "out") ? arg(argc, argv, "out") : "params.bin", p,
             sizeof(float) * (size_t)l->total);
        free(p);
    } else if (strcmp(cmd, "save") == 0) {
        float *p = slurp(arg(argc, argv, "params"), sizeof(float) * (size_t)l->total);
        vf_st_writer *w = vf_st_writer_new(&st);
        const char *out = arg(argc, argv, "out") ? arg(argc, argv, "out") : "model.safetensors";
        if (!w || vf_dit_st_add(w, l, p, 0, l->total, &st) ||
            vf_st_writer_save(w, out, VF_ST_ATOMIC, NULL, &st))
            die(&st);
        vf_st_writer_free(w);
        free(p);
    } else if (strcmp(cmd, "weights") == 0) {
        int k = 0, S = 1;
        if ((s = arg(argc, argv, "part")) && (sscanf(s, "%d/%d", &k, &S) != 2 || S < 1 || k < 0 || k >= S)) {
            fprintf(stderr, "dit_tool: part=k/S\n");
            return 2;
        }
        int64_t lo = l->total * k / S, hi = l->total * (k + 1) / S;
        vf_dit_wsrc *w = NULL;
        float *p = malloc(sizeof(float) * (size_t)(hi - lo + 1));
        const char *ex = arg(argc, argv, "expert");
        if (!p || vf_dit_wsrc_open_expert(arg(argc, argv, "weights"), ex ? ex : "", &w, &st) ||
            vf_dit_wsrc_check(w, l, &st) ||
            vf_dit_wsrc_read(w, l, p, lo, hi - lo, &st))
            die(&st);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("naming %s tensors %d read %lld largest %lld maxrss_mib %.1f\n",
               vf_dit_naming_name(vf_dit_wsrc_naming(w)), vf_dit_wsrc_count(w), (long long)(hi - lo),
               (long long)vf_dit_wsrc_largest(w), ru.ru_maxrss / 1024.0);
        vf_dit_wsrc_close(w);
        if ((s = arg(argc, argv, "out"))) spit(s, p, sizeof(float) * (size_t)(hi - lo));
        free(p);
    } else if (strcmp(cmd, "lora") == 0) {
        vf_dit_lora_cfg lc;
        vf_dit_lora *lo = NULL;
        if (vf_dit_lora_cfg_parse(arg(argc, argv, "lora_cfg"), &lc, &st) || vf_dit_lora_new(l, &lc, &lo, &st))
            die(&st);
        float *a = malloc(sizeof(float) * (size_t)(lo->l->total + 1));
        if (vf_dit_lora_file_read(arg(argc, argv, "lora"), lo, a, 0, lo->l->total, &st)) {
            fprintf(stderr, "%s\n", st.msg);
            return 2;
        }
        printf("adapters %d params %lld\n", lo->l->n / 2, (long long)lo->l->total);
        if ((s = arg(argc, argv, "out"))) spit(s, a, sizeof(float) * (size_t)lo->l->total);
        free(a);
        vf_dit_lora_free(lo);
    } else if (strcmp(cmd, "grad") == 0 || strcmp(cmd, "bench") == 0) {
        vf_dit_batch b = {0};
        parse_dims(argc, argv, &c, &b.dims);
        int parts = (s = arg(argc, argv, "parts")) ? atoi(s) : 1;
        bool recompute = (s = arg(argc, argv, "recompute")) && atoi(s);
        if (parts < 1 || parts > c.depth || parts > 64) {
            fprintf(stderr, "dit_tool: parts must be in [1, depth]\n");
            return 2;
        }
        size_t nlat = (size_t)b.dims.B * c.z * b.dims.T * b.dims.H * b.dims.W;
        size_t ntxt = (size_t)b.dims.B * c.text_len;
        size_t np = (size_t)l->total;
        float *params, *xt, *t, *target, *emb = NULL, *cond = NULL, *img = NULL, *ttok = NULL;
        int32_t *text = NULL, *len;
        if (strcmp(cmd, "grad") == 0) {
            params = arg(argc, argv, "weights") ? load_weights(l, arg(argc, argv, "weights"), NULL, NULL)
                                                : slurp(arg(argc, argv, "params"), np * 4);
            xt = slurp(arg(argc, argv, "xt"), nlat * 4);
            t = slurp(arg(argc, argv, "t"), (size_t)b.dims.B * 4);
            if (c.text_emb)
                emb = slurp(arg(argc, argv, "emb"), ntxt * (size_t)c.text_dim * 4);
            else
                text = slurp(arg(argc, argv, "text"), ntxt * 4);
            len = slurp(arg(argc, argv, "len"), (size_t)b.dims.B * 4);
            target = slurp(arg(argc, argv, "target"), nlat * 4);
            size_t ncond = nlat / (size_t)c.z * (size_t)(vf_dit_in_dim(&c) - c.z);
            if (ncond) cond = slurp(arg(argc, argv, "cond"), ncond * 4);
            if (c.img_dim) img = slurp(arg(argc, argv, "img"), (size_t)b.dims.B * c.img_len * c.img_dim * 4);
            if ((s = arg(argc, argv, "ttok"))) ttok = slurp(s, (size_t)(b.dims.B * b.dims.L) * 4);
        } else { /* bench: init weights, random latents, rectified-flow pairs */
            params = malloc(np * 4), xt = malloc(nlat * 4), target = malloc(nlat * 4);
            t = malloc((size_t)b.dims.B * 4);
            text = malloc(ntxt * 4), len = malloc((size_t)b.dims.B * 4);
            if (c.text_emb) {
                emb = malloc(ntxt * (size_t)c.text_dim * 4);
                vf_rng r;
                vf_rng_init(&r, 2, 0, 0, VF_RNG_TEST);
                vf_rng_normal(&r, 0, (int64_t)ntxt * c.text_dim, emb);
            }
            vf_dit_init(l, 1, 0, l->total, params);
            float *x0 = malloc(nlat * 4);
            vf_rng r;
            vf_rng_init(&r, 1, 0, 0, VF_RNG_TEST);
            vf_rng_normal(&r, 0, (int64_t)nlat, x0);
            vf_dit_rf rf = {1, 0.0f, 1.0f};
            size_t per = nlat / (size_t)b.dims.B;
            for (int i = 0; i < b.dims.B; i++) {
                t[i] = vf_dit_rf_sample(&rf, 0, (uint64_t)i, (int64_t)per, x0 + per * i,
                                        xt + per * i, target + per * i);
                len[i] = c.text_len / 2;
            }
            for (size_t i = 0; i < ntxt; i++) text[i] = 'a' + (int)(i % 26);
            free(x0);
        }
        b.x_t = xt, b.t = t, b.text = text, b.text_len = len, b.target = target, b.text_emb = emb;
        b.cond = cond, b.img = img, b.t_tok = ttok;
        b.skip_frames = (s = arg(argc, argv, "skip")) ? atoi(s) : 0;
        if ((s = arg(argc, argv, "lora"))) {
            vf_dit_lora_cfg lc;
            if (vf_dit_lora_cfg_parse(arg(argc, argv, "lora_cfg"), &lc, &st) || vf_dit_lora_new(l, &lc, &g_lora, &st))
                die(&st);
            np = (size_t)g_lora->l->total; /* the gradient is the adapter vector's */
            g_lparams = malloc(sizeof(float) * (np + 1));
            if (vf_dit_lora_file_read(s, g_lora, g_lparams, 0, (int64_t)np, &st)) die(&st);
        }
        float *grads = calloc(np, sizeof(float));
        float *pred = malloc(nlat * 4);
        if (strcmp(cmd, "grad") == 0) {
            double loss = run_step(be, l, parts, recompute, params, grads, &b, pred);
            printf("loss %.17g\n", loss);
            if ((s = arg(argc, argv, "grads"))) spit(s, grads, np * 4);
            if ((s = arg(argc, argv, "pred"))) spit(s, pred, nlat * 4);
        } else {
            int steps = (s = arg(argc, argv, "steps")) ? atoi(s) : 5;
            run_step(be, l, parts, recompute, params, grads, &b, NULL); /* warm-up */
            double t0 = now_ms(), c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
            double loss = 0;
            for (int i = 0; i < steps; i++) {
                memset(grads, 0, np * 4);
                loss = run_step(be, l, parts, recompute, params, grads, &b, NULL);
            }
            double ms = (now_ms() - t0) / steps;
            double cpu = (clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0) / steps;
            /* model FLOPs: 6·N·S + 12·L·d·S² + 12·L·d·S·S_txt per sample (weights, self- and cross-attention) */
            double S = (double)b.dims.L, St = c.text_len;
            double flop = b.dims.B * (6.0 * (double)l->total * S +
                                      12.0 * c.depth * c.dim * S * (S + St));
            printf("params %lld tokens/sample %lld step_ms %.2f cpu_ms %.2f GFLOP/step %.3f "
                   "GFLOP/s %.2f loss %.6f\n", (long long)l->total, (long long)S, ms, cpu,
                   flop / 1e9, flop / 1e6 / ms, loss);
        }
        free(params), free(xt), free(t), free(text), free(len), free(target), free(grads),
            free(pred), free(emb), free(cond), free(img), free(ttok);
    } else if (strcmp(cmd, "sample") == 0) {
        vf_dit_dims d;
        parse_dims(argc, argv, &c, &d);
        vf_dit_sample_cfg sc = {
            .steps = (s = arg(argc, argv, "steps")) ? atoi(s) : 50,
            .shift = (s = arg(argc, argv, "shift")) ? strtod(s, NULL) : 5.0,
            .guidance = (s = arg(argc, argv, "guidance")) ? strtod(s, NULL) : 5.0,
            .seed = (s = arg(argc, argv, "seed")) ? strtoull(s, NULL, 10) : 0,
        };
        size_t nlat = (size_t)d.B * c.z * d.T * d.H * d.W;
        float *pos = NULL, *neg = NULL, *noise = NULL;
        int32_t *pos_len = NULL, *neg_len = NULL;
        sc.text_dim = c.text_dim;
        if (vf_dit_sample_check(&sc, &c, &st)) die(&st);
        const char *ek[2] = {"pos", "neg"};
        float **ev[2] = {&pos, &neg};
        int32_t *ptok = NULL, *ntok = NULL; /* byte tokens (B, text_len), text_emb=0 */
        if (!c.text_emb) {
            ptok = slurp(arg(argc, argv, "pos"), (size_t)d.B * c.text_len * 4);
            if ((s = arg(argc, argv, "neg"))) ntok = slurp(s, (size_t)d.B * c.text_len * 4);
        }
        for (int k = 0; k < 2 && c.text_emb; k++) {
            int w = 0;
            if (k == 1 && !arg(argc, argv, "neg")) break;
            *ev[k] = slurp_emb(ek[k], arg(argc, argv, ek[k]), d.B, c.text_len, &w);
            if (w != c.text_dim) {
                fprintf(stderr, "dit_tool: %s: text embeddings of width %d, the model's text_dim is %d\n",
                        ek[k], w, c.text_dim);
                return 2;
            }
        }
        if ((s = arg(argc, argv, "pos_len"))) pos_len = slurp(s, (size_t)d.B * 4);
        if ((s = arg(argc, argv, "neg_len"))) neg_len = slurp(s, (size_t)d.B * 4);
        if ((s = arg(argc, argv, "noise"))) noise = slurp(s, nlat * 4);
        if ((s = arg(argc, argv, "noise_out"))) {
            float *z = malloc(nlat * 4);
            vf_dit_sample_noise(&c, &d, sc.seed, z);
            spit(s, z, nlat * 4);
            free(z);
        }
        const char *out = arg(argc, argv, "out");
        if (!out) {
            fprintf(stderr, "dit_tool: sample needs out=LATENT\n");
            return 2;
        }
        float *params = arg(argc, argv, "weights")
                            ? load_weights(l, arg(argc, argv, "weights"), NULL, NULL)
                            : slurp(arg(argc, argv, "params"), (size_t)l->total * 4);
        float *lat = malloc(nlat * 4), *sig = malloc(sizeof(float) * (size_t)(sc.steps + 1));
        void *w = be->alloc(be, (size_t)l->total * vf_dtype_size(be->act_dtype), &st);
        if (!w) die(&st);
        be->upload(be, w, params, l->total, be->act_dtype);
        double t0 = now_ms();
        vf_dit_prompt pp = {.emb = pos, .tokens = ptok, .len = pos_len},
                      np = {.emb = neg, .tokens = ntok, .len = neg_len};
        vf_dit_sample_cond cond = {0};
        vf_dit_sample_expert low = {l, NULL, (s = arg(argc, argv, "boundary")) ? strtod(s, NULL) : -1,
                                    (s = arg(argc, argv, "guidance2")) ? strtod(s, NULL) : sc.guidance};
        float *lw = NULL;
        if ((s = arg(argc, argv, "low"))) {
            lw = load_weights(l, s, NULL, NULL);
            if (!(low.weights = be->alloc(be, (size_t)l->total * vf_dtype_size(be->act_dtype), &st))) die(&st);
            be->upload(be, low.weights, lw, l->total, be->act_dtype);
            sc.low = &low;
        }
        if ((s = arg(argc, argv, "image"))) cond.cond = i2v_cond(argc, argv, be, &c, &d, s);
        if ((s = arg(argc, argv, "img"))) cond.img = slurp(s, (size_t)d.B * c.img_len * c.img_dim * 4);
        if (vf_dit_sample(be, l, w, &sc, &d, &pp, neg || ntok ? &np : NULL, &cond, noise, lat, &st)) die(&st);
        free((void *)cond.cond), free((void *)cond.img), free(lw);
        if (low.weights) be->free(be, low.weights);
        double ms = now_ms() - t0;
        vf_dit_sample_sigmas(sc.steps, sc.shift, sig);
        printf("sigmas");
        for (int i = 0; i <= sc.steps; i++) printf(" %.9g", sig[i]);
        if (sc.low) { /* which expert each step ran */
            printf("\nexperts");
            for (int i = 0; i < sc.steps; i++) printf(" %s", vf_dit_sample_is_low(sig[i], low.boundary) ? "low" : "high");
        }
        printf("\nms %.1f\n", ms);
        spit(out, lat, nlat * 4);
        be->free(be, w);
        free(params), free(lat), free(sig), free(pos), free(neg), free(ptok), free(ntok), free(pos_len), free(neg_len),
            free(noise);
    } else {
        fprintf(stderr, "dit_tool: unknown command %s\n", cmd);
        return 2;
    }
    vf_dit_layout_free(l);
    return 0;
}
