/* dit_rf.c — host-side numbers the DiT needs that are not learned: the rectified-flow
 * training pair of a sample (Philox noise and a timestep: logit-normal or uniform, shifted,
 * in a range), the sinusoidal
 * timestep features and the 3D RoPE angle tables. All computed in double and rounded
 * once, so every partition and every backend gets the same f32 values.
 */
#include "models/dit_internal.h"

#include "runtime/philox.h"

#include <math.h>
#include <string.h>

int vf_dit_t_sampling_parse(const char *name)
{
    if (!strcmp(name, "logit_normal")) return VF_DIT_T_LOGIT_NORMAL;
    if (!strcmp(name, "uniform")) return VF_DIT_T_UNIFORM;
    return -1;
}

float vf_dit_rf_t(const vf_dit_rf *rf, uint64_t step, uint64_t sample_id)
{
    vf_rng rt;
    vf_rng_init(&rt, rf->seed, step, sample_id, VF_RNG_TIMESTEP);
    double s;
    if (rf->sampling == VF_DIT_T_UNIFORM) {
        float u;
        vf_rng_uniform(&rt, 0, 1, &u); /* open (0, 1): never exactly clean or pure noise */
        s = u;
    } else {
        double x = (double)rf->t_mean + (double)rf->t_std * vf_rng_normal_at(&rt, 0);
        s = 1.0 / (1.0 + exp(-x));
    }
    double shift = rf->shift > 0 ? rf->shift : 1.0;
    if (shift != 1.0) s = shift * s / (1.0 + (shift - 1.0) * s);
    double lo = rf->t_min, hi = rf->t_max > 0 ? rf->t_max : 1.0;
    if (lo != 0.0 || hi != 1.0) s = lo + (hi - lo) * s;
    return (float)s;
}

void vf_dit_first_frame(const vf_dit_config *c, int T, int H, int W, const float *image, int image_T, float t,
                        float *x_t, float *t_tok)
{
    const int64_t plane = (int64_t)H * W;
    for (int64_t ch = 0; ch < c->z; ch++) /* frame 0 of channel ch is its first plane */
        memcpy(x_t + ch * T * plane, image + ch * image_T * plane, sizeof(float) * (size_t)plane);
    const int64_t frame = (int64_t)(H / c->patch[1]) * (W / c->patch[2]);
    const int64_t L = (int64_t)(T / c->patch[0]) * frame;
    for (int64_t l = 0; l < L; l++) t_tok[l] = l < frame ? 0.0f : t;
}

float vf_dit_rf_sample(const vf_dit_rf *rf, uint64_t step, uint64_t sample_id, int64_t n,
                       const float *x0, float *x_t, float *target)
{
    vf_rng rn;
    float t = vf_dit_rf_t(rf, step, sample_id);
    vf_rng_init(&rn, rf->seed, step, sample_id, VF_RNG_NOISE);
    /* in chunks so the noise never needs a buffer of the sample's size */
    float noise[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t m = n - i0 < 256 ? n - i0 : 256;
        vf_rng_normal(&rn, (uint64_t)i0, m, noise);
        for (int64_t j = 0; j < m; j++) {
            float x = x0[i0 + j], e = noise[j];
            if (x_t) x_t[i0 + j] = (1.0f - t) * x + t * e;
            if (target) target[i0 + j] = e - x;
        }
    }
    return t;
}

void vf_dit_timestep_features(const vf_dit_config *c, const float *t, int B, float *out)
{
    int half = c->freq_dim / 2;
    for (int b = 0; b < B; b++) {
        double pos = (double)t[b] * (double)c->t_scale;
        for (int j = 0; j < half; j++) {
            double w = pow(10000.0, -(double)j / (double)half);
            out[(int64_t)b * c->freq_dim + j] = (float)cos(pos * w);
            out[(int64_t)b * c->freq_dim + half + j] = (float)sin(pos * w);
        }
    }
}

void vf_dit_rope_tables(const vf_dit_config *c, int Tp, int Hp, int Wp, float *cos_out,
                        float *sin_out)
{
    int half = c->head_dim / 2;
    int nh = half / 3, nw = half / 3, nt = half - nh - nw;
    int64_t l = 0;
    for (int ti = 0; ti < Tp; ti++) {
        for (int hi = 0; hi < Hp; hi++) {
            for (int wi = 0; wi < Wp; wi++, l++) {
                for (int j = 0; j < half; j++) {
                    double pos, w;
                    if (j < nt) {
                        pos = ti, w = pow(10000.0, -(double)j / nt);
                    } else if (j < nt + nh) {
                        pos = hi, w = pow(10000.0, -(double)(j - nt) / nh);
                    } else {
                        pos = wi, w = pow(10000.0, -(double)(j - nt - nh) / nw);
                    }
                    cos_out[l * half + j] = (float)cos(pos * w);
                    sin_out[l * half + j] = (float)sin(pos * w);
                }
            }
        }
    }
}
