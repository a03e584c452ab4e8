/* vw_tool.c — writes a video and a PNG strip through formats/video_write.h, for the
 * tests that check them with ffprobe/ffmpeg.
 *
 *   vw_tool OUT W H T FPS [codec=NAME] [raw=FILE] [png=FILE] [nan=1] [before=FILE]
 *
 * The clip is float samples (3, T, H, W) in [-1, 1] as a VAE decoder gives them: a
 * moving luminance texture under a smooth colour cast, plus one sharp bright square, so
 * a lossy codec has both flat and edged content. raw= receives the RGB24 frames as written (T
 * frames of H·W·3 bytes); png= the strip of up to 4 frames side by side. nan=1 puts NaN
 * and out-of-range samples in frame 0 (they must come out clamped). Exit 0 ok, 2 bad
 * input (one line naming the file), 1 other failures. before= first writes another video
 * (the same frames in reverse order) to FILE in the same process.
 */
#include "formats/video_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *arg(int argc, char **argv, const char *key)
{
    size_t n = strlen(key);
    for (int i = 6; i < argc; i++)
        if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: vw_tool OUT W H T FPS [codec=NAME] [raw=FILE] [png=FILE] [nan=1]\n");
        return 2;
    }
    int W = atoi(argv[2]), H = atoi(argv[3]), T = atoi(argv[4]);
    double fps = atof(argv[5]);
    if (W <= 0 || H <= 0 || T <= 0 || W > 4096 || H > 4096 || T > 10000) {
        fprintf(stderr, "vw_tool: bad size %sx%s x %s\n", argv[2], argv[3], argv[4]);
        return 2;
    }
    const size_t plane = (size_t)T * H * W;
    float *x = malloc(sizeof(float) * 3 * plane);
    uint8_t *rgb = malloc((size_t)H * W * 3 * (size_t)T);
    if (!x || !rgb) return 1;
    for (int c = 0; c < 3; c++)
        for (int t = 0; t < T; t++)
            for (int y = 0; y < H; y++)
                for (int i = 0; i < W; i++) {
                    /* a luminance texture shared by the channels, a smooth colour cast, and a
                     * bright square: what decoded frames look like, rather than three
                     * unrelated channels that 4:2:0 chroma cannot carry */
                    float lum = 0.6f * sinf(0.11f * (float)(i + 3 * t)) * cosf(0.09f * (float)y);
                    float cast = 0.25f * (float)(c - 1) * cosf(0.02f * (float)(i + y));
                    float v = lum + cast;
                    int sx = (2 * t) % (W / 2 + 1), sy = H / 4;
                    if (i >= sx && i < sx + W / 6 && y >= sy && y < sy + H / 6) v = 0.9f - 0.1f * (float)c;
                    x[(size_t)c * plane + ((size_t)t * H + y) * W + i] = v;
                }
    if (arg(argc, argv, "nan")) {
        x[0] = NAN, x[plane] = 7.0f, x[2 * plane] = -3.0f;
    }
    vf_status st = {0};
    vf_video_writer *w = NULL;
    int rc = 0;
    if (arg(argc, argv, "before")) { /* another clip (the frames reversed) first, in this process */
        vf_video_opts ob = {arg(argc, argv, "before"), W, H, fps, arg(argc, argv, "codec")};
        rc = vf_video_open(&ob, &w, &st);
        for (int t = T - 1; !rc && t >= 0; t--) {
            vf_video_rgb_from_float(x, T, H, W, t, rgb);
            rc = vf_video_add(w, rgb, &st);
        }
        if (!rc) rc = vf_video_close(w, &st);
        w = NULL;
        char pb[4096];
        snprintf(pb, sizeof pb, "%s.png", arg(argc, argv, "before"));
        if (!rc) rc = vf_png_write(pb, rgb, W, H, &st); /* as the sample stage writes a strip after a video */
    }
    vf_video_opts o = {argv[1], W, H, fps, arg(argc, argv, "codec")};
    if (!rc) rc = vf_video_open(&o, &w, &st);
    for (int t = 0; !rc && t < T; t++) {
        uint8_t *f = rgb + (size_t)t * H * W * 3;
        vf_video_rgb_from_float(x, T, H, W, t, f);
        rc = vf_video_add(w, f, &st);
    }
    const char *codec = w ? vf_video_codec(w) : "";
    printf("codec %s\n", codec);
    if (!rc) rc = vf_video_close(w, &st);
    else vf_video_free(w);
    const char *raw = arg(argc, argv, "raw"), *png = arg(argc, argv, "png");
    if (!rc && raw) {
        FILE *f = fopen(raw, "wb");
        if (!f || fwrite(rgb, (size_t)H * W * 3, (size_t)T, f) != (size_t)T || fclose(f)) return 1;
    }
    if (!rc && png) {
        int k = T < 4 ? T : 4, SW = k * W;
        uint8_t *strip = malloc((size_t)H * SW * 3);
        if (!strip) return 1;
        for (int j = 0; j < k; j++)
            for (int y = 0; y < H; y++)
                memcpy(strip + ((size_t)y * SW + (size_t)j * W) * 3, rgb + (((size_t)j * H + y) * W) * 3, (size_t)W * 3);
        rc = vf_png_write(png, strip, SW, H, &st);
        free(strip);
    }
    free(x);
    free(rgb);
    if (rc) {
        fprintf(stderr, "vw_tool: %s\n", st.msg);
        return vf_exit_code(rc);
    }
    return 0;
}
