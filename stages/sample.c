/* sample.c — stage kind `sample`: videos from the checkpoints of a training run, while it
 * trains.
 *
 * Input "ckpt" takes the checkpoint stage's "done" items ({step, path of the step dir}).
 * The stage thread only receives and hands out work, so the checkpoint writer (and the
 * training behind it) never waits on sampling: each k-th checkpoint (`every`) becomes a
 * job for a worker pthread this stage owns, which loads the step's DiT weights, samples
 * one clip per prompt (flow-matching Euler with shift and guidance), decodes it with the
 * causal VAE and writes <run dir>/samples/step-N/<prompt file stem>.mp4, .png (a strip
 * of 4 frames) and .frame0.png (the first frame alone) (models/dit_video.h, the path
 * `vflow sample` takes; the files appear by rename when complete). Each finished video is
 * a metrics row {"event":"sample","step","path","seconds","image":"samples/step-N/<stem>
 * .frame0.png","tag":"sample/<stem>"}, which the driver shows as a TensorBoard image.
 * An image-to-video model samples every video from one image (`image`, and for Wan 2.1
 * I2V its CLIP features `image_embeds`), conditioned as vflow sample --image is; a
 * two-expert checkpoint (high_noise_model/, low_noise_model/, or a LoRA run's
 * lora_high_noise / lora_low_noise on the bases recorded, `low` naming the low one's) or
 * `low` samples with both experts, switching at `boundary` (else the checkpoint's).
 * A notification that arrives while a job is in flight is skipped, logged
 * ("step N skipped, still sampling step M") and counted (gauge sample_skipped).
 *
 * A failed job or prompt (a bad embeddings file, out of memory, a full disk) is an ERROR
 * line and a metrics row {"event":"sample_failed",…}; it never stops training nor fails
 * the run. At end of stream the job in flight finishes (unless the run is aborting); the
 * final checkpoint, if it was skipped or is not a k-th one, is sampled then (training is
 * over: nobody waits), so a run always ends with the videos of its last checkpoint.
 * Results are logged from the stage thread, which polls the worker between receives.
 * The worker runs at a lower scheduling priority than training.
 */
#include "formats/ckpt.h"
#include "models/dit.h"
#include "models/dit_video.h"
#include "runtime/vflow.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SAMPLE_MAX_PROMPTS 64

static const vf_param_spec sample_params[] = {
    {"prompts", VF_P_LIST_STR, "[]", VF_ANY,
     "text-embedding files (safetensors, one (L, text_dim) tensor each, as vflow sample --prompt-embeds); one video each"},
    {"captions", VF_P_LIST_STR, "[]", VF_ANY,
     "captions as text, for a model trained on caption bytes (the tiny presets); one video each, instead of prompts"},
    {"negative", VF_P_STR, "\"\"", VF_ANY,
     "negative text-embedding file (with prompts) or negative caption (with captions); \"\" = the empty caption"},
    {"frames", VF_P_INT, "17", VF_RANGE(1, 100000), "frames per video (1 + 4·k for the 8x VAEs)"},
    {"size", VF_P_LIST_INT, "[256,256]", VF_RANGE(2, 8192), "{width, height} of the videos"},
    {"steps", VF_P_INT, "20", VF_RANGE(1, 10000), "Euler steps"},
    {"shift", VF_P_NUM, "3", VF_RANGE(1e-6, 1e6), "schedule shift"},
    {"guidance", VF_P_NUM, "5", VF_RANGE(0, 1e6), "classifier-free guidance scale (<= 1: positive only)"},
    {"seed", VF_P_INT, "0", VF_RANGE(0, 9007199254740991.0), "initial noise"},
    {"fps", VF_P_NUM, "16", VF_RANGE(1e-3, 1000), "frame rate of the mp4"},
    {"chunk", VF_P_INT, "1", VF_RANGE(1, 1000), "latent frames per VAE decoder call"},
    {"vae", VF_P_STR, "\"\"", VF_ANY, "VAE weights (file or diffusers dir); \"\" = the preset's seeded init"},
    {"vae_preset", VF_P_STR, "\"\"", VF_ANY, "tiny | wan; \"\" = by the model's latent channels (16: wan)"},
    {"vae_seed", VF_P_INT, "0", VF_RANGE(0, 9007199254740991.0), "seed of the VAE's init when vae = \"\""},
    {"cache", VF_P_STR, "\"\"", VF_ANY,
     "latent cache whose recorded normalisation de-normalises the latents (as vflow sample --cache); \"\" = none"},
    {"device", VF_P_DEVICE, "\"cpu\"", VF_ANY, "where sampling and decoding run"},
    {"every", VF_P_INT, "1", VF_RANGE(1, 1e9), "sample the k-th, 2k-th, … checkpoint (and the final one)"},
    {"image", VF_P_STR, "\"\"", VF_ANY,
     "image-to-video: the first frame of every video, an image file of the videos' size (as vflow sample --image)"},
    {"image_embeds", VF_P_STR, "\"\"", VF_ANY,
     "Wan 2.1 I2V: the image's CLIP features (tools/encode_images.py), as vflow sample --image-embeds"},
    {"low", VF_P_STR, "\"\"", VF_ANY,
     "the low-noise expert's weights (file or checkpoint) beside each checkpoint's model, or of a LoRA two-expert "
     "checkpoint the low expert's base; \"\" = the checkpoint's low_noise_model/ (or recorded low base) when it has one"},
    {"boundary", VF_P_NUM, "-1", VF_RANGE(-1, 1),
     "two experts: the t fraction after the shift where they switch; -1 = the checkpoint's"},
    {"guidance_2", VF_P_NUM, "-1", VF_RANGE(-1, 1e6), "the low-noise expert's guidance; -1 = guidance"},
    {"model", VF_P_TABLE, VF_DIT_MODEL_DEFAULT, VF_ANY, "DiT preset, for the memory plan (set by p:train)", NULL,
     vf_dit_model_fields},
    {0},
};

static void opts_of(const vf_params *p, vf_dit_video_opts *o)
{
    vf_dit_video_opts_default(o);
    o->frames = (int)vf_param_int(p, "frames");
    o->width = vf_param_len(p, "size") > 0 ? (int)vf_param_int_at(p, "size", 0) : 0;
    o->height = vf_param_len(p, "size") > 1 ? (int)vf_param_int_at(p, "size", 1) : 0;
    o->steps = (int)vf_param_int(p, "steps");
    o->chunk = (int)vf_param_int(p, "chunk");
    o->shift = vf_param_num(p, "shift");
    o->guidance = vf_param_num(p, "guidance");
    o->fps = vf_param_num(p, "fps");
    o->seed = (uint64_t)vf_param_int(p, "seed");
    o->vae_seed = (uint64_t)vf_param_int(p, "vae_seed");
    o->vae = vf_param_str(p, "vae");
    o->vae_preset = vf_param_str(p, "vae_preset");
    o->cache = vf_param_str(p, "cache");
    o->device = vf_param_str(p, "device");
    o->image = vf_param_str(p, "image");
    o->image_embeds = vf_param_str(p, "image_embeds");
    o->low = vf_param_str(p, "low");
    o->boundary = vf_param_num(p, "boundary");
    o->guidance2 = vf_param_num(p, "guidance_2");
    o->flag_prefix = "";
}

/* What the planner and init refuse before anything runs. */
static int check_params(const vf_params *p, vf_status *st)
{
    int n = vf_param_len(p, "prompts"), nc = vf_param_len(p, "captions");
    if ((n > 0) == (nc > 0))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "sample: give prompts (text-embedding files) or captions (text, for a byte-caption "
                             "model), not %s", n ? "both" : "neither");
    if (n + nc > SAMPLE_MAX_PROMPTS)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "sample: at most %d %s, got %d",
                             SAMPLE_MAX_PROMPTS, n ? "prompts" : "captions", n + nc);
    if (vf_param_len(p, "size") != 2)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "sample: size must be {width, height}");
    return 0;
}

static int sample_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out, vf_status *st)
{
    vf_port_spec *in = vf_port_add(out, "ckpt", VF_PORT_IN, true);
    in->meta_bytes = 256 + PATH_MAX;
    return 0;
}

static int sample_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out, vf_status *st)
{
    int rc = 0;
    vf_dit_config c;
    vf_dit_video_opts o;
    vf_dit_video_mem m;
    vf_device dev;
    VF_TRY(check_params(p, st));
    VF_TRY(vf_dit_config_from_params(vf_param_table(p, "model"), &c, st));
    opts_of(p, &o);
    /* refused at check time rather than at the first checkpoint of a long run */
    const bool i2v = vf_dit_in_dim(&c) != c.z;
    if (i2v != (o.image[0] != 0) || (c.img_dim > 0) != (o.image_embeds[0] != 0))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "sample: %s model (in_dim %d, img_dim %d) %s", i2v ? "an image-to-video" : "a text-to-video",
                             vf_dit_in_dim(&c), c.img_dim,
                             !i2v                   ? "takes no image nor image_embeds"
                             : !o.image[0]          ? "needs image (the first frame, an image file of the videos' size)"
                             : c.img_dim > 0        ? "needs image_embeds (the image's CLIP features, tools/encode_images.py)"
                                                    : "has no image branch: leave image_embeds out");
    VF_TRY(vf_device_parse(o.device, &dev, st));
    /* the device's activation dtype: f32 on the CPU backend, bf16 on CUDA */
    size_t elem = dev.kind == VF_DEV_CUDA ? 2 : 4;
    if ((rc = vf_dit_video_mem_of(&c, &o, elem, &m, st))) {
        vf_status_prefix(st, "sample");
        return rc;
    }
    /* everything is allocated on the worker pthread, in no stage account: library figures */
    const vf_device cpu = {VF_DEV_CPU, 0};
    vf_mem_plan_add_lib(out, dev, VF_MEM_WEIGHTS, "sample DiT weights", m.weights);
    if (o.low[0] || o.boundary >= 0) /* two experts: both on the device */
        vf_mem_plan_add_lib(out, dev, VF_MEM_WEIGHTS, "sample DiT weights (low-noise expert)", m.weights);
    if (i2v) { /* the image's encoder, freed before sampling, and its conditioning */
        vf_mem_plan_add_lib(out, dev, VF_MEM_VAE, "sample VAE encoder (image)",
                            m.vae_enc.weights + m.vae_enc.caches + m.vae_enc.workspace);
        vf_mem_plan_add_lib(out, cpu, VF_MEM_VAE, "sample VAE encoder host (image)", m.vae_enc.host);
        vf_mem_plan_add_lib(out, cpu, VF_MEM_ITEMS, "sample image conditioning", m.cond);
    }
    vf_mem_plan_add_lib(out, cpu, VF_MEM_WEIGHTS, "sample f32 staging (loading)", m.staging);
    vf_mem_plan_add_lib(out, dev, VF_MEM_ACTS, "sampler activations", m.acts);
    vf_mem_plan_add_lib(out, dev, VF_MEM_VAE, "sample VAE weights", m.vae_weights);
    vf_mem_plan_add_lib(out, dev, VF_MEM_VAE, "sample VAE caches", m.vae_caches);
    vf_mem_plan_add_lib(out, dev, VF_MEM_VAE, "sample VAE workspace", m.vae_workspace);
    if (dev.kind == VF_DEV_CUDA) /* cuDNN's, for the decoder's convolutions */
        vf_mem_plan_add_lib(out, dev, VF_MEM_VAE, "sample VAE conv workspace", m.vae_conv_workspace);
    vf_mem_plan_add_lib(out, cpu, VF_MEM_VAE, "sample VAE host", m.vae_host);
    vf_mem_plan_add_lib(out, cpu, VF_MEM_DECODE, "sample frames buffers", m.frames);
    vf_mem_plan_add_lib(out, cpu, VF_MEM_DECODE, "sample video encoder (libx264 frames, estimated)", m.encoder);
fail:
    return rc;
}

typedef struct prompt_result {
    int rc;
    double seconds;
    char prompt[PATH_MAX];
    char mp4[PATH_MAX + 300];
    char stem[256];
    char msg[sizeof ((vf_status *)0)->msg];
} prompt_result;

typedef struct sample_state {
    vf_dit_video_opts o;
    int nprompts, every;
    bool captions; /* the prompts are captions as text (a byte-caption model) */
    const char *negative;
    char root[PATH_MAX];               /* <run dir>/samples */
    pthread_t th;
    bool th_started, orphaned;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    bool have_job, done_pending, quit;
    int64_t job_step;
    char job_path[PATH_MAX];
    /* the worker's results, written by it while have_job, read by the stage thread after */
    int job_rc;
    char job_msg[sizeof ((vf_status *)0)->msg];
    prompt_result res[SAMPLE_MAX_PROMPTS];
    int nres;
    double job_s;
    /* the stage thread's counts */
    int64_t received, sampled, videos, skipped, failed;
    int64_t last_seen, last_started;   /* steps of the newest notification and job, -1 none */
    char last_seen_path[PATH_MAX];
    const vf_params *p;
} sample_state;

static void json_safe(const char *in, char *out, size_t n)
{
    size_t j = 0;
    for (const char *q = in; *q && j + 2 < n; q++) {
        if (*q == '"' || *q == '\\') out[j++] = '\\';
        out[j++] = (unsigned char)*q < 0x20 ? ' ' : *q;
    }
    out[j] = 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "a/b/cat.safetensors" -> "cat" */
/* A caption's file stem: its index, then its first words as [a-z0-9_]. */
static void stem_of_caption(int i, const char *text, char *out, size_t n)
{
    size_t k = (size_t)snprintf(out, n, "%02d", i);
    bool sep = true;
    for (const char *s = text; *s && k + 2 < n && k < 48; s++) {
        char ch = *s;
        if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) {
            if (sep) out[k++] = '_';
            out[k++] = ch;
            sep = false;
        } else
            sep = true;
    }
    out[k] = 0;
}

static void stem_of(const char *path, char *out, size_t n)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, n, "%s", b);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

static int mkdir_ok(const char *p, vf_status *st)
{
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "mkdir %s: %s", p, strerror(errno));
    return 0;
}

/* One job on the worker: the step's weights once, then one video per prompt. */
static void run_job(sample_state *c, int64_t step, const char *path)
{
    vf_status st;
    vf_ckpt ck = {0};
    vf_dit_video *v = NULL;
    char dir[PATH_MAX + 32];
    double t0 = now_s();
    int rc = 0;
    vf_status_clear(&st);
    c->nres = 0;
    c->job_msg[0] = 0;
    snprintf(dir, sizeof dir, "%s/step-%lld", c->root, (long long)step);
    if ((rc = mkdir_ok(c->root, &st)) || (rc = mkdir_ok(dir, &st))) goto out;
    if ((rc = vf_dit_video_find_ckpt(path, &ck, &st))) goto out;
    if ((rc = vf_dit_video_open(&ck, &c->o, &v, &st))) goto out;
    if ((rc = vf_dit_video_load(v, &st))) goto out;
    for (int i = 0; i < c->nprompts; i++) {
        pthread_mutex_lock(&c->mu);
        bool quit = c->quit;
        pthread_mutex_unlock(&c->mu);
        if (quit) break;
        prompt_result *r = &c->res[c->nres++];
        const char *prompt = vf_param_str_at(c->p, c->captions ? "captions" : "prompts", i);
        char stem[sizeof r->stem], *mp4 = r->mp4, png[PATH_MAX + 300], first[PATH_MAX + 300];
        vf_status ps;
        vf_status_clear(&ps);
        double t1 = now_s();
        snprintf(r->prompt, sizeof r->prompt, "%s", prompt);
        if (c->captions) stem_of_caption(i, prompt, stem, sizeof stem);
        else stem_of(prompt, stem, sizeof stem);
        memcpy(r->stem, stem, sizeof stem);
        snprintf(mp4, sizeof r->mp4, "%s/%s.mp4", dir, stem);
        snprintf(png, sizeof png, "%s/%s.png", dir, stem);
        snprintf(first, sizeof first, "%s/%s.frame0.png", dir, stem);
        vf_dit_video_out o = {mp4, png, first, NULL, NULL};
        vf_dit_video_stats s;
        r->rc = c->captions ? vf_dit_video_caption(v, prompt, c->negative, &ps)
                            : vf_dit_video_prompt(v, prompt, "prompt", c->negative, "negative", &ps);
        if (!r->rc) r->rc = vf_dit_video_render(v, &o, &s, &ps);
        snprintf(r->msg, sizeof r->msg, "%s", r->rc ? ps.msg : "");
        r->seconds = now_s() - t1;
    }
out:
    c->job_rc = rc;
    if (rc) snprintf(c->job_msg, sizeof c->job_msg, "%s", st.msg);
    c->job_s = now_s() - t0;
    vf_dit_video_free(v);
    vf_ckpt_fini(&ck);
}

static void *worker_main(void *arg)
{
    sample_state *c = arg;
    /* below training: the partitions and shards keep the cores they need */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->have_job && !c->quit) pthread_cond_wait(&c->cv, &c->mu);
        if (!c->have_job) break;
        int64_t step = c->job_step;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s", c->job_path);
        pthread_mutex_unlock(&c->mu);
        run_job(c, step, path);
        pthread_mutex_lock(&c->mu);
        c->have_job = false;
        c->done_pending = true;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Logs a finished job (stage thread). */
static void report(vf_ctx *ctx, sample_state *c)
{
    pthread_mutex_lock(&c->mu);
    bool done = c->done_pending;
    c->done_pending = false;
    int64_t step = c->job_step;
    pthread_mutex_unlock(&c->mu);
    if (!done) return;
    char row[4 * PATH_MAX], err[2 * sizeof c->job_msg], what[2 * sizeof c->res[0].mp4],
        stem[2 * sizeof c->res[0].stem];
    c->sampled++;
    if (c->job_rc) {
        c->failed++;
        vf_log(ctx, VF_LOG_ERROR, "sampling step %lld failed, training goes on: %s", (long long)step, c->job_msg);
        json_safe(c->job_msg, err, sizeof err);
        snprintf(row, sizeof row, "{\"event\":\"sample_failed\",\"step\":%lld,\"error\":\"%s\"}", (long long)step, err);
        vf_metric_row(ctx, row);
    }
    int ok = 0;
    for (int i = 0; i < c->nres; i++) {
        const prompt_result *r = &c->res[i];
        if (r->rc == 0) {
            ok++;
            c->videos++;
            vf_log(ctx, VF_LOG_INFO, "step %lld -> %s (%.1f s)", (long long)step, r->mp4, r->seconds);
            json_safe(r->mp4, what, sizeof what);
            json_safe(r->stem, stem, sizeof stem);
            /* "image": the first frame, relative to the run dir, for TensorBoard (tb_log.h) */
            snprintf(row, sizeof row,
                     "{\"event\":\"sample\",\"step\":%lld,\"path\":\"%s\",\"seconds\":%.3f,"
                     "\"image\":\"samples/step-%lld/%s.frame0.png\",\"tag\":\"sample/%s\"}",
                     (long long)step, what, r->seconds, (long long)step, stem, stem);
        } else {
            c->failed++;
            vf_log(ctx, VF_LOG_ERROR, "sampling step %lld, prompt %s failed, training goes on: %s", (long long)step,
                   r->prompt, r->msg);
            json_safe(r->msg, err, sizeof err);
            json_safe(r->prompt, what, sizeof what);
            snprintf(row, sizeof row, "{\"event\":\"sample_failed\",\"step\":%lld,\"prompt\":\"%s\",\"error\":\"%s\"}",
                     (long long)step, what, err);
        }
        vf_metric_row(ctx, row);
    }
    vf_metric(ctx, "sample_step", (double)step);
    vf_metric(ctx, "sample_videos", (double)c->videos);
    vf_metric(ctx, "sample_failed", (double)c->failed);
    if (!c->job_rc) vf_log(ctx, VF_LOG_INFO, "step %lld: %d of %d videos in %.1f s", (long long)step, ok, c->nprompts,
                           c->job_s);
}

/* One notification: a job for the worker, or skipped while it is busy. */
static void notify(vf_ctx *ctx, sample_state *c, vf_item *it)
{
    double step = -1;
    const char *path = vf_item_str(it, "path");
    vf_item_num(it, "step", &step);
    report(ctx, c); /* a finished job's results, before a new job reuses them */
    double resumed = 0;
    vf_item_num(it, "resumed", &resumed);
    if (resumed != 0) return; /* the step a resumed run starts from: sampled by the run that wrote it */
    c->received++;
    if (!path) {
        vf_log(ctx, VF_LOG_WARN, "a checkpoint notification without a path, ignored");
        return;
    }
    c->last_seen = (int64_t)step;
    snprintf(c->last_seen_path, sizeof c->last_seen_path, "%s", path);
    if (c->received % c->every) return; /* not a k-th checkpoint */
    pthread_mutex_lock(&c->mu);
    if (c->have_job) {
        int64_t busy = c->job_step;
        pthread_mutex_unlock(&c->mu);
        c->skipped++;
        vf_log(ctx, VF_LOG_INFO, "step %lld skipped, still sampling step %lld", (long long)step, (long long)busy);
        vf_metric(ctx, "sample_skipped", (double)c->skipped);
        return;
    }
    c->have_job = true;
    c->last_started = (int64_t)step;
    c->job_step = (int64_t)step;
    snprintf(c->job_path, sizeof c->job_path, "%s", path);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Waits for the job in flight, for as long as the run is not aborting; true when idle. */
static bool wait_idle(vf_ctx *ctx, sample_state *c)
{
    pthread_mutex_lock(&c->mu);
    while (c->have_job && !vf_aborting(ctx)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    bool idle = !c->have_job;
    pthread_mutex_unlock(&c->mu);
    return idle;
}

static void stop_worker(sample_state *c)
{
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static int sample_init(vf_stage *s, const vf_params *p, vf_status *st)
{
    int rc = 0;
    VF_TRY(check_params(p, st));
    sample_state *c = calloc(1, sizeof *c);
    if (!c) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "%s: out of memory", vf_stage_name(s));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    vf_stage_set_state(s, c);
    c->p = p;
    opts_of(p, &c->o);
    c->captions = vf_param_len(p, "captions") > 0;
    c->nprompts = vf_param_len(p, c->captions ? "captions" : "prompts");
    c->every = (int)vf_param_int(p, "every");
    c->negative = vf_param_str(p, "negative");
    c->last_seen = c->last_started = -1;
fail:
    return rc;
}

static void sample_fini(vf_stage *s)
{
    sample_state *c = vf_stage_state(s);
    if (!c) return;
    vf_stage_set_state(s, NULL);
    /* an aborted run left the worker mid-job: it still reads this state, and the process
     * is going down, so the state stays */
    if (c->orphaned) return;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static int sample_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    int rc = 0;
    sample_state *c = vf_stage_state(s);
    snprintf(c->root, sizeof c->root, "%s/samples", vf_run_dir(ctx));
    if ((rc = pthread_create(&c->th, NULL, worker_main, c)) != 0)
        return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "%s: cannot start the worker: %s", vf_stage_name(s),
                             strerror(rc));
    c->th_started = true;
    vf_metric(ctx, "sample_skipped", 0);
    vf_metric(ctx, "sample_failed", 0);
    vf_metric(ctx, "sample_videos", 0);
    if (c->captions) { /* what the model reads of them: one line for the run */
        int64_t tl = vf_param_int(vf_param_table(c->p, "model"), "text_len"), cut = 0;
        for (int i = 0; i < c->nprompts; i++) cut += (int64_t)strlen(vf_param_str_at(c->p, "captions", i)) > tl;
        if (cut)
            vf_log(ctx, VF_LOG_WARN, "%lld of the %d captions are longer than the model's text_len = %lld bytes: the "
                   "videos are sampled from their first %lld", (long long)cut, c->nprompts, (long long)tl, (long long)tl);
    }
    vf_port *in = vf_in(ctx, "ckpt");
    for (;;) {
        report(ctx, c);
        vf_item *it = NULL;
        rc = vf_recv_timeout(in, 100, &it, st);
        if (rc == VF_ETIMEOUT) {
            vf_status_clear(st);
            continue;
        }
        if (rc == VF_EOS) {
            rc = 0;
            break;
        }
        if (rc) break;
        notify(ctx, c, it);
        vf_item_free(it);
    }
    /* end of stream: the job in flight finishes, unless the run is aborting; then the
     * final checkpoint if it was skipped or not a k-th one */
    bool idle = wait_idle(ctx, c);
    if (idle && rc == 0 && c->last_seen >= 0 && c->last_seen != c->last_started) {
        report(ctx, c);
        vf_log(ctx, VF_LOG_INFO, "sampling the final checkpoint, step %lld", (long long)c->last_seen);
        pthread_mutex_lock(&c->mu);
        c->have_job = true;
        c->job_step = c->last_started = c->last_seen;
        snprintf(c->job_path, sizeof c->job_path, "%s", c->last_seen_path);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        idle = wait_idle(ctx, c);
    }
    stop_worker(c);
    if (idle) {
        pthread_join(c->th, NULL);
        report(ctx, c);
    } else {
        vf_log(ctx, VF_LOG_WARN, "the run is aborting: sampling of step %lld abandoned", (long long)c->job_step);
        pthread_detach(c->th);
        c->orphaned = true;
    }
    vf_log(ctx, VF_LOG_INFO, "%lld checkpoints seen, %lld sampled, %lld skipped, %lld videos, %lld failures in %s",
           (long long)c->received, (long long)c->sampled, (long long)c->skipped, (long long)c->videos,
           (long long)c->failed, c->root);
    return rc;
}

/* `vflow run`: the files the videos are made from are there before training starts, not
 * found missing at the first checkpoint. */
static int sample_preflight(const vf_params *p, vf_status *st)
{
    struct stat sb;
    for (int i = 0; i < vf_param_len(p, "prompts"); i++) {
        const char *f = vf_param_str_at(p, "prompts", i);
        if (stat(f, &sb) != 0)
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "sample: prompt %s: %s", f, strerror(errno));
    }
    static const char *const files[] = {"cache", "vae"};
    for (int i = 0; i < 2; i++) {
        const char *f = vf_param_str(p, files[i]);
        if (f[0] && stat(f, &sb) != 0)
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "sample: %s %s: %s", files[i], f, strerror(errno));
    }
    if (vf_param_len(p, "captions") == 0 && vf_param_str(p, "negative")[0] &&
        stat(vf_param_str(p, "negative"), &sb) != 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "sample: negative %s: %s",
                             vf_param_str(p, "negative"), strerror(errno));
    return 0;
}

static const vf_stage_ops sample_ops = {
    .api_version = VF_API_VERSION,
    .kind = "sample",
    .doc = "videos from a training run's checkpoints (checkpoint.done -> ckpt): one mp4 + PNG strip + first-frame "
           "PNG per prompt in <run dir>/samples/step-N/, on a worker thread that training never waits for",
    .params = sample_params,
    .ports = sample_ports,
    .memory = sample_memory,
    .init = sample_init,
    .run = sample_run,
    .fini = sample_fini,
    .preflight = sample_preflight,
};
VF_REGISTER_STAGE(sample_ops)
