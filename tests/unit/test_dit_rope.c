/* test_dit_rope.c — the DiT's non-learned tables (models/dit.h vf_dit_rope_tables,
 * vf_dit_timestep_features) against formulas written here from Wan 2.1's definition,
 * not from the code under test:
 *   - RoPE (wan/modules/model.py): a head of d channels gets the concatenation of
 *     rope_params(d − 4⌊d/6⌋), rope_params(2⌊d/6⌋), rope_params(2⌊d/6⌋) for the frame,
 *     row and column axes, where rope_params(n) has the n/2 angular frequencies
 *     1 / 10000^(2k/n), k = 0 … n/2−1; the tokens of a (F, H, W) grid run frame-major,
 *     then row, then column, and token (f, h, w) turns pair k of each axis by its
 *     position on that axis times the frequency.
 *   - timestep features (sinusoidal_embedding_1d): [cos(p·ω_k), sin(p·ω_k)] with
 *     ω_k = 10000^(−k/half), half = freq_dim/2 and p the timestep t·1000.
 * Grids have a different size on every axis so a swapped axis or a wrong split shows.
 */
#include "tests/vf_test.h"

#include "models/dit.h"

#include <stdint.h>

/* Angular frequency k of Wan's rope_params(n): 1 / theta^(2k / n). */
static double wan_rope_freq(int n, int k) { return 1.0 / pow(10000.0, (double)(2 * k) / (double)n); }

static void check_rope(int head_dim, int F, int H, int W)
{
    vf_dit_config c = {.head_dim = head_dim};
    const int half = head_dim / 2;
    const int n_t = head_dim - 4 * (head_dim / 6), n_hw = 2 * (head_dim / 6); /* rope_params' dims */
    VF_CHECK_EQ_INT(n_t / 2 + 2 * (n_hw / 2), half);
    int64_t L = (int64_t)F * H * W;
    float *cs = malloc(sizeof(float) * (size_t)(L * half)), *sn = malloc(sizeof(float) * (size_t)(L * half));
    vf_dit_rope_tables(&c, F, H, W, cs, sn);
    double worst = 0;
    for (int f = 0; f < F; f++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++) {
                int64_t l = ((int64_t)f * H + h) * W + w;
                for (int col = 0; col < half; col++) {
                    double ang;
                    if (col < n_t / 2)
                        ang = f * wan_rope_freq(n_t, col);
                    else if (col < n_t / 2 + n_hw / 2)
                        ang = h * wan_rope_freq(n_hw, col - n_t / 2);
                    else
                        ang = w * wan_rope_freq(n_hw, col - n_t / 2 - n_hw / 2);
                    double ec = fabs(cs[l * half + col] - cos(ang)), es = fabs(sn[l * half + col] - sin(ang));
                    if (ec > worst) worst = ec;
                    if (es > worst) worst = es;
                    if (ec > 1e-6 || es > 1e-6) {
                        VF_CHECK_MSG(0, "head_dim %d grid %dx%dx%d token (%d,%d,%d) column %d: cos %.9g sin %.9g, "
                                     "want %.9g %.9g", head_dim, F, H, W, f, h, w, col, cs[l * half + col],
                                     sn[l * half + col], cos(ang), sin(ang));
                        free(cs), free(sn);
                        return;
                    }
                }
            }
    fprintf(stderr, "  rope head_dim %3d grid %dx%dx%d: worst |error| %.2e\n", head_dim, F, H, W, worst);
    free(cs), free(sn);
}

VF_TEST(rope_tables_follow_wan)
{
    check_rope(16, 3, 4, 5);  /* the tiny preset: 4 + 2 + 2 frequencies */
    check_rope(128, 2, 5, 3); /* Wan 2.1: 22 + 21 + 21 */
    check_rope(20, 4, 3, 2);  /* half = 10, not a multiple of 3: 4 + 3 + 3 */
    check_rope(6, 2, 3, 4);   /* the smallest head: 1 + 1 + 1 */
    check_rope(64, 1, 7, 6);  /* one frame */
}

VF_TEST(timestep_features_follow_wan)
{
    const float t[] = {0.0f, 0.0625f, 0.5f, 0.9990234375f};
    const int B = 4;
    for (int fd = 2; fd <= 256; fd *= 4) {
        vf_dit_config c = {.freq_dim = fd, .t_scale = 1000.0f};
        float *out = malloc(sizeof(float) * (size_t)(B * fd));
        vf_dit_timestep_features(&c, t, B, out);
        int half = fd / 2;
        for (int b = 0; b < B; b++)
            for (int k = 0; k < half; k++) {
                double p = (double)t[b] * 1000.0, om = exp(-log(10000.0) * k / half);
                double ec = fabs(out[b * fd + k] - cos(p * om)), es = fabs(out[b * fd + half + k] - sin(p * om));
                VF_CHECK_MSG(ec <= 1e-6 && es <= 1e-6, "freq_dim %d t %g k %d: cos %.9g sin %.9g, want %.9g %.9g",
                             fd, t[b], k, out[b * fd + k], out[b * fd + half + k], cos(p * om), sin(p * om));
            }
        free(out);
    }
}

int main(void) { return vf_test_main(); }
