/* dit_sample.c — the sampling loop of dit_sample.h: the shifted flow-matching schedule,
 * seeded noise, and Euler steps with classifier-free guidance over one partition that
 * holds the whole model; an image-to-video model's conditioning channels go to the device
 * once and feed every forward.
 *
 * The latent stays f32 on the host between steps, as WanPipeline keeps `latents` in f32
 * and casts only the model input to the transformer's dtype; the guidance combination
 * and the Euler update are the scheduler's f32 element-wise operations in its order, so
 * on the CPU backend the loop differs from diffusers only by the model's own rounding.
 */
#include "models/dit_sample.h"

#include "runtime/philox.h"

#include <math.h>
#include <string.h>

/* Two configs of one shape: the partition built for one runs the other's weights. */
static bool same_shape(const vf_dit_config *a, const vf_dit_config *b)
{
    return a->dim == b->dim && a->depth == b->depth && a->heads == b->heads && a->head_dim == b->head_dim &&
           a->ffn == b->ffn && a->z == b->z && !memcmp(a->patch, b->patch, sizeof a->patch) &&
           a->text_dim == b->text_dim && a->text_len == b->text_len && a->freq_dim == b->freq_dim &&
           a->t_scale == b->t_scale && a->eps == b->eps && a->text_emb == b->text_emb &&
           vf_dit_in_dim(a) == vf_dit_in_dim(b) && a->img_dim == b->img_dim && a->img_len == b->img_len;
}

int vf_dit_sample_check(const vf_dit_sample_cfg *cfg, const vf_dit_config *c, vf_status *st)
{
    if (cfg->steps < 1)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "sample: steps = %d, must be at least 1", cfg->steps);
    if (!isfinite(cfg->shift) || cfg->shift <= 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "sample: shift = %g, must be a finite number > 0", cfg->shift);
    if (!isfinite(cfg->guidance) || cfg->guidance < 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "sample: guidance = %g, must be a finite number >= 0", cfg->guidance);
    if (c->text_emb && cfg->text_dim != c->text_dim)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "sample: text embeddings of width %d, the model's text_dim is %d",
                             cfg->text_dim, c->text_dim);
    const vf_dit_sample_expert *lo = cfg->low;
    if (!lo) return 0;
    if (!isfinite(lo->boundary) || lo->boundary < 0 || lo->boundary > 1)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "sample: boundary = %g, must be a t fraction in [0, 1]", lo->boundary);
    if (!isfinite(lo->guidance) || lo->guidance < 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "sample: guidance of the low-noise expert = %g, must be a finite number >= 0",
                             lo->guidance);
    if (!lo->l || !lo->weights || !same_shape(c, &lo->l->cfg))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "sample: the low-noise expert's config differs from the high-noise one's "
                             "(the two experts of a model share one shape)");
    return 0;
}

bool vf_dit_sample_is_low(float sigma, double boundary)
{
    /* WanPipeline: t = sigmas·1000 in f32 against boundary_ratio·1000, compared in f32 */
    float t = sigma * 1000.0f;
    return !(t >= (float)(boundary * 1000.0));
}

/* The scheduler's shift in f32, in its order of operations: s·σ / (1 + (s−1)·σ). */
static float shifted_f32(float s, float sm1, float sigma)
{
    float num = s * sigma;
    float den = 1.0f + sm1 * sigma;
    return num / den;
}

void vf_dit_sample_sigmas(int steps, double shift, float *sigmas)
{
    /* the training table the scheduler is constructed with: σ = t/1000 for t = 1000..1, in
       f32, shifted once; its ends bound the inference schedule */
    float s = (float)shift, sm1 = (float)(shift - 1.0);
    double smax = shifted_f32(s, sm1, 1000.0f / 1000.0f);
    double smin = shifted_f32(s, sm1, 1.0f / 1000.0f);
    double start = smax * 1000.0, stop = smin * 1000.0;
    /* numpy.linspace: start + i·((stop − start)/(N − 1)), the last point set to stop */
    double step = steps > 1 ? (stop - start) / (double)(steps - 1) : 0.0;
    for (int i = 0; i < steps; i++) {
        double t = (i == steps - 1 && steps > 1) ? stop : (double)i * step + start;
        double u = t / 1000.0;
        sigmas[i] = (float)(shift * u / (1.0 + (shift - 1.0) * u));
    }
    sigmas[steps] = 0.0f;
}

void vf_dit_sample_noise(const vf_dit_config *c, const vf_dit_dims *d, uint64_t seed, float *out)
{
    int64_t per = (int64_t)c->z * d->T * d->H * d->W;
    for (int b = 0; b < d->B; b++) {
        vf_rng r;
        vf_rng_init(&r, seed, 0, (uint64_t)b, VF_RNG_SAMPLE);
        vf_rng_normal(&r, 0, per, out + per * b);
    }
}

/* A branch gives what the model conditions on: embeddings or byte tokens. */
static bool prompt_ok(const vf_dit_config *c, const vf_dit_prompt *pr)
{
    return pr && (c->text_emb ? pr->emb != NULL : pr->tokens != NULL);
}

/* One forward of the whole model at x (host f32) and time sigma; v (host f32) receives
 * the prediction. */
static int predict(vf_backend *be, vf_dit_part *p, vf_dit_saved *sv, void *x_dev,
                   const float *x, float sigma, const vf_dit_dims *d, const vf_dit_prompt *text,
                   const void *cond_dev, const float *img, float *t_host, float *v, int64_t n,
                   vf_status *st)
{
    int rc = 0;
    be->upload(be, x_dev, x, n, be->act_dtype);
    for (int b = 0; b < d->B; b++) t_host[b] = sigma;
    vf_dit_batch batch = {.dims = *d, .x_t = x_dev, .t = t_host, .text = text->tokens,
                          .text_len = text->len, .text_emb = text->emb, .cond = cond_dev,
                          .img = img};
    VF_TRY(vf_dit_part_forward(p, &batch, NULL, NULL, sv, st));
    be->download(be, v, vf_dit_saved_pred(sv), n, be->act_dtype);
    VF_TRY(be->sync(be, st));
fail:
    return rc;
}

int vf_dit_sample(vf_backend *be, const vf_dit_layout *l, void *weights,
                  const vf_dit_sample_cfg *cfg, const vf_dit_dims *dims, const vf_dit_prompt *pos,
                  const vf_dit_prompt *neg, const vf_dit_sample_cond *cond, const float *noise, float *out,
                  vf_status *st)
{
    int rc = 0;
    const vf_dit_config *c = &l->cfg;
    vf_dit_part *p = NULL;
    vf_dit_saved *sv = NULL;
    void *x_dev = NULL, *cond_dev = NULL;
    float *sigmas = NULL, *v = NULL, *vneg = NULL, *t_host = NULL;
    const int64_t n = (int64_t)dims->B * c->z * dims->T * dims->H * dims->W;
    const bool cfg_on = cfg->guidance > 1.0; /* WanPipeline.do_classifier_free_guidance */
    const float g = (float)cfg->guidance;

    VF_TRY(vf_dit_sample_check(cfg, c, st));
    const char *kind = c->text_emb ? "text embeddings" : "caption tokens";
    if (!prompt_ok(c, pos)) VF_FAIL(st, VF_EBADINPUT, "sample: no positive %s", kind);
    if (cfg_on && !prompt_ok(c, neg))
        VF_FAIL(st, VF_EBADINPUT, "sample: guidance = %g > 1 needs negative %s", cfg->guidance, kind);
    const int64_t cc = (int64_t)vf_dit_in_dim(c) - c->z, nc = n / c->z * cc;
    if (cc > 0 && !(cond && cond->cond))
        VF_FAIL(st, VF_EBADINPUT, "sample: the model is image-to-video (in_dim %d) and no image conditioning "
                "(first-frame mask and latent) is given", vf_dit_in_dim(c));
    if (c->img_dim > 0 && !(cond && cond->img))
        VF_FAIL(st, VF_EBADINPUT, "sample: the model takes CLIP image features (img_dim %d) and none are given",
                c->img_dim);

    /* forward keeps only each block's input, the least a forward can keep */
    VF_TRY(vf_dit_part_new(be, l, 0, c->depth, dims, VF_DIT_RECOMPUTE_ALL, weights, NULL, &p, st));
    VF_TRY(vf_dit_saved_new(p, &sv, st));
    x_dev = be->alloc(be, (size_t)n * vf_dtype_size(be->act_dtype), st);
    sigmas = vf_alloc(sizeof(float) * (size_t)(cfg->steps + 1), st);
    v = vf_alloc(sizeof(float) * (size_t)n, st);
    vneg = cfg_on ? vf_alloc(sizeof(float) * (size_t)n, st) : NULL;
    t_host = vf_alloc(sizeof(float) * (size_t)dims->B, st);
    cond_dev = cc > 0 ? be->alloc(be, (size_t)nc * vf_dtype_size(be->act_dtype), st) : NULL;
    if (!x_dev || !sigmas || !v || (cfg_on && !vneg) || !t_host || (cc > 0 && !cond_dev))
        VF_FAIL(st, VF_ENOMEM, "sample: out of memory for a latent of %lld elements",
                (long long)n);
    if (cc > 0) be->upload(be, cond_dev, cond->cond, nc, be->act_dtype);
    const float *img = c->img_dim > 0 ? cond->img : NULL;

    vf_dit_sample_sigmas(cfg->steps, cfg->shift, sigmas);
    if (noise)
        memcpy(out, noise, sizeof(float) * (size_t)n);
    else
        vf_dit_sample_noise(c, dims, cfg->seed, out);

    bool on_low = false;
    for (int i = 0; i < cfg->steps; i++) {
        float gi = g;
        if (cfg->low) {
            bool low = vf_dit_sample_is_low(sigmas[i], cfg->low->boundary);
            if (low != on_low) vf_dit_part_set_buffers(p, low ? cfg->low->weights : weights, NULL);
            on_low = low;
            if (low) gi = (float)cfg->low->guidance;
        }
        VF_TRY(predict(be, p, sv, x_dev, out, sigmas[i], dims, pos, cond_dev, img, t_host, v, n, st));
        if (cfg_on) {
            VF_TRY(predict(be, p, sv, x_dev, out, sigmas[i], dims, neg, cond_dev, img, t_host, vneg, n, st));
            for (int64_t k = 0; k < n; k++) {
                float diff = v[k] - vneg[k];
                float scaled = gi * diff;
                v[k] = vneg[k] + scaled;
            }
        }
        float dt = sigmas[i + 1] - sigmas[i];
        for (int64_t k = 0; k < n; k++) {
            float step = dt * v[k];
            out[k] = out[k] + step;
        }
    }
fail:
    vf_free(t_host);
    vf_free(vneg);
    vf_free(v);
    vf_free(sigmas);
    if (x_dev) be->free(be, x_dev);
    if (cond_dev) be->free(be, cond_dev);
    vf_dit_saved_free(sv);
    vf_dit_part_free(p);
    return rc;
}
