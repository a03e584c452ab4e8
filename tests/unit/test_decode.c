/* test_decode.c — the decode core (stages/decode/decode_av.h) on real videos.
 * (Clip planner and manifests without videos: test_decode_plan.c.)
 * vflow-test: labels=decode timeout=600
 *
 * Videos come from tests/tools/mkvideo (frames carry their index as a 12-bit block
 * pattern, see its header), in several codecs, containers, pixel formats and frame
 * rates. Every decoded frame's index is read back from its pixels and compared with the
 * frame the clip plan promised, so a skipped, repeated, shifted or mis-rotated frame
 * fails. Independent references: ffprobe (frame count, rate, timestamps) and the ffmpeg
 * CLI (scale + crop + autorotate of the same frame, compared pixel-wise).
 */
#include "tests/vf_test.h"

#include "stages/decode/decode_av.h"
#include "stages/decode/decode_clip.h"
#include "formats/video_manifest.h"
#include "stages/decode/decode_replan.h"

#include <libavcodec/avcodec.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[200];
static char g_mkvideo[1024];

/* ------------------------------------------------------------ helpers */

static void setup(void)
{
    if (g_dir[0]) return;
    snprintf(g_dir, sizeof g_dir, "/tmp/vf_test_decode_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); exit(1); }
    const char *b = getenv("VFLOW_BUILD");
    snprintf(g_mkvideo, sizeof g_mkvideo, "%s/tools/mkvideo", b ? b : ".");
    if (access(g_mkvideo, X_OK) != 0) {
        fprintf(stderr, "mkvideo not found at %s\n", g_mkvideo);
        exit(1);
    }
    av_log_set_level(AV_LOG_QUIET);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int r = system(cmd);
    if (r != 0) fprintf(stderr, "command failed (%d): %s\n", r, cmd);
    return r;
}

/* Output of a command (first 64 KiB). Caller frees. */
static char *sh_out(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, p);
    buf[n] = 0;
    pclose(p);
    return buf;
}

static bool have_encoder(const char *name, const char *pixfmt)
{
    const AVCodec *c = avcodec_find_encoder_by_name(name);
    if (!c) return false;
    if (!pixfmt || !c->pix_fmts) return true;
    enum AVPixelFormat pf = av_get_pix_fmt(pixfmt);
    for (const enum AVPixelFormat *p = c->pix_fmts; *p != AV_PIX_FMT_NONE; p++)
        if (*p == pf) return true;
    return false;
}

static const char *path_in_dir(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

/* Reads the frame index out of an (H, W, 3) output frame of a (dw x dh) display
 * picture; -1 if a marker is wrong (orientation, channel order or damage). */
static int read_index(const uint8_t *img, int W, int H, int dw, int dh, bool color, char *why,
                      size_t whyn)
{
    double s = (double)W / dw > (double)H / dh ? (double)W / dw : (double)H / dh;
    double G = 0.6 * (dw < dh ? dw : dh) * s, cs = G / 4;
    double gx = W / 2.0 - G / 2, gy = H / 2.0 - G / 2;
    int idx = 0, bit = 11;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) {
            double m[3] = {0, 0, 0};
            int cnt = 0;
            int x0 = (int)ceil(gx + (c + 0.3) * cs), x1 = (int)floor(gx + (c + 0.7) * cs);
            int y0 = (int)ceil(gy + (r + 0.3) * cs), y1 = (int)floor(gy + (r + 0.7) * cs);
            for (int y = y0; y <= y1; y++)
                for (int x = x0; x <= x1; x++) {
                    if (x < 0 || y < 0 || x >= W || y >= H) continue;
                    for (int k = 0; k < 3; k++) m[k] += img[((size_t)y * W + x) * 3 + k];
                    cnt++;
                }
            if (!cnt) { snprintf(why, whyn, "cell %d,%d outside the frame", r, c); return -1; }
            for (int k = 0; k < 3; k++) m[k] /= cnt;
            double lum = (m[0] + m[1] + m[2]) / 3;
            if (r == 0 && c == 0) {
                if (lum < 170) { snprintf(why, whyn, "white marker reads %.0f", lum); return -1; }
            } else if (r == 0 && c == 3) {
                if (color && !(m[0] > 150 && m[1] < 100 && m[2] < 100)) {
                    snprintf(why, whyn, "red marker reads %.0f,%.0f,%.0f", m[0], m[1], m[2]);
                    return -1;
                }
            } else if (r == 3 && (c == 0 || c == 3)) {
                if (lum > 85) { snprintf(why, whyn, "black marker %d,%d reads %.0f", r, c, lum); return -1; }
            } else {
                if (lum > 85 && lum < 170) { snprintf(why, whyn, "cell %d,%d ambiguous (%.0f)", r, c, lum); return -1; }
                idx |= (lum >= 128) << bit;
                bit--;
            }
        }
    return idx;
}

/* Mean of the output's left edge strip, mid-height: the background (RGB 60). */
static double background(const uint8_t *img, int W, int H)
{
    double sum = 0;
    int n = 0;
    for (int y = H / 2 - 2; y <= H / 2 + 2; y++)
        for (int x = 1; x < 3 && x < W; x++)
            for (int k = 0; k < 3; k++) { sum += img[((size_t)y * W + x) * 3 + k]; n++; }
    return sum / n;
}

typedef struct vcase {
    const char *name, *codec, *ext, *pixfmt, *rate;
    int w, h, n, gop, bframes;
    const char *extra;     /* more mkvideo flags */
    int frames, stride;    /* clip params */
    int ow, oh;            /* output size */
    double fps_expect;
    bool color;            /* red marker checkable (not gray) */
} vcase;

static const char *make_video(const vcase *c, char *path, size_t n)
{
    snprintf(path, n, "%s/%s.%s", g_dir, c->name, c->ext);
    if (sh("%s -o %s -c %s -p %s -r %s -s %dx%d -n %d -g %d -b %d %s >/dev/null 2>&1", g_mkvideo,
           path, c->codec, c->pixfmt, c->rate, c->w, c->h, c->n, c->gop, c->bframes,
           c->extra ? c->extra : "") != 0)
        return NULL;
    return path;
}

/* Decodes every clip of the plan and checks each frame's index; returns frames checked. */
static int check_clips(vf_decode_file *f, const vf_clip_plan *plan, int ow, int oh, bool color,
                       const char *name)
{
    const vf_decode_info *info = vf_decode_get_info(f);
    const int T = plan->frames;
    uint8_t *buf = malloc((size_t)T * ow * oh * 3);
    int checked = 0;
    for (int64_t k = 0; k < plan->nclips; k++) {
        vf_status st = {0};
        const int64_t *idx = plan->idx + k * T;
        int rc = vf_decode_read(f, idx, T, buf, &st);
        VF_CHECK_MSG(rc == 0, "%s clip %lld: %s", name, (long long)k, st.msg);
        if (rc) break;
        for (int j = 0; j < T; j++) {
            char why[128] = "";
            const uint8_t *img = buf + (size_t)j * ow * oh * 3;
            int got = read_index(img, ow, oh, info->width, info->height, color, why, sizeof why);
            VF_CHECK_MSG(got == idx[j], "%s clip %lld frame %d: want source frame %lld, read %d %s",
                         name, (long long)k, j, (long long)idx[j], got, why);
            double bg = background(img, ow, oh);
            VF_CHECK_MSG(fabs(bg - 60) <= 5, "%s: background %.1f, want 60 (colour range?)", name, bg);
            checked++;
        }
    }
    free(buf);
    return checked;
}

static vf_decode_opts opts_for(int ow, int oh)
{
    vf_decode_opts o;
    vf_decode_opts_default(&o);
    o.out_w = ow;
    o.out_h = oh;
    o.threads = 2;
    o.deadline_s = 60;
    return o;
}

/* ffprobe: frames counted by decoding, and the stream's average rate. */
static void ffprobe_facts(const char *path, long *nframes, double *fps)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "ffprobe -v error -select_streams v:0 -count_frames -show_entries "
             "stream=nb_read_frames,avg_frame_rate -of default=nw=1 '%s'", path);
    char *o = sh_out(cmd);
    *nframes = -1;
    *fps = -1;
    if (!o) return;
    char *p = strstr(o, "nb_read_frames=");
    if (p) *nframes = atol(p + 15);
    p = strstr(o, "avg_frame_rate=");
    int a = 0, b = 1;
    if (p && sscanf(p + 15, "%d/%d", &a, &b) == 2 && b) *fps = (double)a / b;
    free(o);
}

static void run_case(const vcase *c)
{
    char path[512];
    if (!make_video(c, path, sizeof path)) { VF_CHECK_MSG(0, "%s: mkvideo failed", c->name); return; }
    long nf;
    double fps;
    ffprobe_facts(path, &nf, &fps);
    VF_CHECK_MSG(nf == c->n, "%s: ffprobe counts %ld frames, mkvideo wrote %d", c->name, nf, c->n);
    vf_decode_opts o = opts_for(c->ow, c->oh);
    vf_decode_file *f = NULL;
    vf_status st = {0};
    int rc = vf_decode_open(path, &o, &f, &st);
    VF_CHECK_MSG(rc == 0, "%s: open: %s", c->name, st.msg);
    if (rc) return;
    const vf_decode_info *info = vf_decode_get_info(f);
    VF_CHECK_MSG(info->nframes == nf, "%s: indexed %lld frames, ffprobe %ld", c->name,
                 (long long)info->nframes, nf);
    VF_CHECK_MSG(fabs(info->fps - fps) < 0.02 * fps, "%s: fps %.3f, ffprobe %.3f", c->name, info->fps, fps);
    if (c->fps_expect > 0) VF_CHECK_NEAR(info->fps, c->fps_expect, 1e-3);
    vf_clip_opts co = {.frames = c->frames, .stride = c->stride};
    vf_clip_plan plan;
    rc = vf_clip_plan_make(vf_decode_frame_times(f), info->nframes, info->duration_s, &co, &plan, &st);
    VF_CHECK_MSG(rc == 0, "%s: plan: %s", c->name, st.msg);
    int64_t span = vf_clip_span(&co), want = (c->n - span) / ((int64_t)c->frames * c->stride) + 1;
    VF_CHECK_EQ_INT(plan.nclips, want);
    for (int64_t k = 0; k < plan.nclips; k++)
        for (int j = 0; j < c->frames; j++)
            VF_CHECK_EQ_INT(plan.idx[k * c->frames + j], k * c->frames * c->stride + j * c->stride);
    int checked = check_clips(f, &plan, c->ow, c->oh, c->color, c->name);
    VF_CHECK_EQ_INT(checked, plan.nclips * c->frames);
    fprintf(stderr, "  %-16s %s %-11s %s %dx%d: %lld clips, %d frames checked\n", c->name,
            info->codec, info->pix_fmt, info->format, info->coded_w, info->coded_h,
            (long long)plan.nclips, checked);
    vf_clip_plan_fini(&plan);
    vf_decode_close(f);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

/* ------------------------------------------------------------ formats */

VF_TEST(formats_exact_frames)
{
    setup();
    const vcase cases[] = {
        /* name          codec          ext    pixfmt        rate        w    h   n  gop b  extra frames stride ow oh fps color */
        {"h264_bframes", "libx264", "mp4", "yuv420p", "30", 160, 120, 40, 12, 2, NULL, 8, 1, 64, 64, 30, true},
        {"h264_444_24", "libx264", "mkv", "yuv444p", "24", 128, 96, 30, 10, 0, NULL, 6, 1, 48, 48, 24, true},
        {"mpeg4_avi_s2", "mpeg4", "avi", "yuv420p", "25", 176, 144, 50, 12, 0, NULL, 5, 2, 64, 48, 25, true},
        {"vp9_odd", "libvpx-vp9", "webm", "yuv420p", "30", 161, 97, 32, 8, 0, NULL, 8, 1, 64, 40, 30, true},
        {"vp9_444", "libvpx-vp9", "webm", "yuv444p", "25", 96, 96, 20, 8, 0, NULL, 4, 1, 32, 32, 25, true},
        {"mjpeg_full", "mjpeg", "avi", "yuvj420p", "25", 120, 90, 24, 1, 0, NULL, 6, 1, 48, 48, 25, true},
        {"ffv1_bgr0", "ffv1", "mkv", "bgr0", "25", 96, 72, 20, 5, 0, NULL, 4, 1, 40, 40, 25, true},
        {"ffv1_10bit", "ffv1", "mkv", "yuv420p10le", "25", 96, 72, 20, 5, 0, NULL, 4, 1, 40, 40, 25, true},
        {"x264rgb", "libx264rgb", "mkv", "bgr0", "25", 96, 72, 16, 8, 0, NULL, 4, 1, 40, 40, 25, true},
        {"raw_gray_odd", "rawvideo", "nut", "gray", "25", 75, 61, 12, 1, 0, NULL, 4, 1, 36, 36, 25, false},
        {"prores_10bit", "prores_ks", "mov", "yuv422p10le", "25", 96, 72, 12, 1, 0, NULL, 4, 1, 40, 40, 25, true},
        {"h264_ntsc", "libx264", "mp4", "yuv420p", "30000/1001", 128, 72, 34, 15, 3, NULL, 16, 2, 48, 48, 30000.0 / 1001, true},
        {"h264_10bit", "libx264", "mkv", "yuv420p10le", "25", 96, 72, 16, 8, 1, NULL, 8, 1, 40, 40, 25, true},
        {"h264_audio", "libx264", "mp4", "yuv420p", "25", 128, 96, 26, 8, 2, "--audio", 8, 1, 48, 48, 25, true},
        {"vp9_audio", "libvpx-vp9", "webm", "yuv420p", "25", 128, 96, 20, 8, 0, "--audio", 6, 1, 48, 48, 25, true},
        {"mpeg4_audio", "mpeg4", "avi", "yuv420p", "25", 128, 96, 20, 8, 0, "--audio", 6, 1, 48, 48, 25, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!have_encoder(cases[i].codec, cases[i].pixfmt)) {
            fprintf(stderr, "  %-16s skipped: no %s encoder for %s\n", cases[i].name, cases[i].codec,
                    cases[i].pixfmt);
            continue;
        }
        run_case(&cases[i]);
    }
}

VF_TEST(audio_streams_counted)
{
    setup();
    vcase c = {"aud_count", "libx264", "mkv", "yuv420p", "25", 96, 64, 10, 5, 0, "--audio", 4, 1, 32, 32, 25, true};
    char path[512];
    VF_CHECK(make_video(&c, path, sizeof path) != NULL);
    vf_decode_opts o = opts_for(32, 32);
    vf_decode_file *f = NULL;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_decode_open(path, &o, &f, &st), 0);
    if (f) VF_CHECK_EQ_INT(vf_decode_get_info(f)->audio_streams, 1);
    vf_decode_close(f);
}

/* ------------------------------------------------------------ timing: VFR, fps target */

VF_TEST(vfr_timestamps_and_fps_target)
{
    setup();
    char path[512], pts[512], cmd[1200];
    vcase c = {"vfr", "libx264", "mkv", "yuv420p", "30", 128, 96, 60, 10, 2, NULL, 5, 1, 48, 48, 0, true};
    snprintf(pts, sizeof pts, "%s/vfr_pts.txt", g_dir);
    char extra[600];
    snprintf(extra, sizeof extra, "--vfr --pts-out %s", pts);
    c.extra = extra;
    VF_CHECK(make_video(&c, path, sizeof path) != NULL);
    /* frame times by ffprobe (presentation order), relative to the first */
    snprintf(cmd, sizeof cmd,
             "ffprobe -v error -select_streams v:0 -show_entries frame=pts_time -of csv=p=0 '%s'", path);
    char *o = sh_out(cmd);
    double ft[200];
    int nf = 0;
    for (char *s = o; s && *s && nf < 200;) {
        ft[nf++] = strtod(s, &s);
        while (*s == '\n' || *s == ',') s++;
    }
    free(o);
    VF_CHECK_EQ_INT(nf, 60);
    vf_decode_opts op = opts_for(48, 48);
    vf_decode_file *f = NULL;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_decode_open(path, &op, &f, &st), 0);
    if (!f) return;
    const vf_decode_info *info = vf_decode_get_info(f);
    const double *t = vf_decode_frame_times(f);
    VF_CHECK(info->has_pts);
    VF_CHECK_EQ_INT(info->nframes, nf);
    for (int i = 0; i < nf && i < info->nframes; i++) VF_CHECK_NEAR(t[i], ft[i] - ft[0], 1.5e-3);
    /* target 20 fps: expected frames = nearest ffprobe time to k/20, ties earlier */
    vf_clip_opts co = {.frames = 5, .fps = 20};
    vf_clip_plan plan;
    VF_CHECK_EQ_INT(vf_clip_plan_make(t, info->nframes, info->duration_s, &co, &plan, &st), 0);
    VF_CHECK_MSG(plan.nclips >= 3, "only %lld clips", (long long)plan.nclips);
    for (int64_t k = 0; k < plan.nclips; k++)
        for (int j = 0; j < 5; j++) {
            double want_t = (plan.grid[k] * 5 + j) / 20.0;
            int best = 0;
            for (int i = 1; i < nf; i++)
                if (fabs(ft[i] - ft[0] - want_t) < fabs(ft[best] - ft[0] - want_t) - 1e-6) best = i;
            VF_CHECK_EQ_INT(plan.idx[k * 5 + j], best);
        }
    check_clips(f, &plan, 48, 48, true, "vfr");
    vf_clip_plan_fini(&plan);
    /* stride mode on VFR: indices, not time */
    co = (vf_clip_opts){.frames = 6, .stride = 3};
    VF_CHECK_EQ_INT(vf_clip_plan_make(t, info->nframes, info->duration_s, &co, &plan, &st), 0);
    check_clips(f, &plan, 48, 48, true, "vfr-stride");
    vf_clip_plan_fini(&plan);
    vf_decode_close(f);
}

/* ------------------------------------------------------------ seeking */

VF_TEST(seek_out_of_order_long_gop)
{
    setup();
    vcase c = {"longgop", "libx264", "mp4", "yuv420p", "25", 128, 96, 150, 40, 3, NULL, 6, 1, 40, 40, 25, true};
    char path[512];
    VF_CHECK(make_video(&c, path, sizeof path) != NULL);
    vf_decode_opts o = opts_for(40, 40);
    vf_decode_file *f = NULL;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_decode_open(path, &o, &f, &st), 0);
    if (!f) return;
    const vf_decode_info *info = vf_decode_get_info(f);
    uint8_t *buf = malloc(6 * 40 * 40 * 3);
    /* backwards, forwards past keyframes, and a sparse list */
    const int64_t lists[][6] = {{130, 131, 132, 133, 134, 135}, {3, 4, 5, 6, 7, 8},
                                {81, 83, 85, 87, 89, 91},       {41, 42, 43, 44, 45, 46},
                                {0, 40, 80, 120, 140, 149},     {44, 45, 46, 47, 48, 49}};
    for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
        vf_status_clear(&st);
        VF_CHECK_MSG(vf_decode_read(f, lists[l], 6, buf, &st) == 0, "list %zu: %s", l, st.msg);
        for (int j = 0; j < 6; j++) {
            char why[128] = "";
            int got = read_index(buf + j * 40 * 40 * 3, 40, 40, info->width, info->height, true, why, sizeof why);
            VF_CHECK_MSG(got == lists[l][j], "list %zu frame %d: want %lld read %d %s", l, j,
                         (long long)lists[l][j], got, why);
        }
    }
    /* continuing right after the previous read does not seek */
    vf_decode_stats s;
    const int64_t cont[3] = {50, 51, 52};
    VF_CHECK_EQ_INT(vf_decode_read(f, cont, 3, buf, &st), 0);
    vf_decode_get_stats(f, &s);
    VF_CHECK_EQ_INT(s.seeks, 0);
    free(buf);
    vf_decode_close(f);
}

/* A raw H.264 elementary stream has no timestamps: frames are numbered in output order
 * from the start, reads going backwards restart the file, and B-frame reordering must
 * not disturb the numbering. */
VF_TEST(no_timestamps_count_mode)
{
    setup();
    char p[512];
    snprintf(p, sizeof p, "%s/raw.h264", g_dir);
    VF_CHECK(sh("%s -o %s -n 30 -s 128x96 -b 2 -g 10 >/dev/null 2>&1", g_mkvideo, p) == 0);
    vf_decode_opts o = opts_for(40, 40);
    o.fps_hint = 12;
    vf_decode_file *f = NULL;
    vf_status st = {0};
    VF_CHECK_MSG(vf_decode_open(p, &o, &f, &st) == 0, "%s", st.msg);
    if (!f) return;
    const vf_decode_info *info = vf_decode_get_info(f);
    VF_CHECK(!info->has_pts);
    VF_CHECK_EQ_INT(info->nframes, 30);
    VF_CHECK_NEAR(info->fps, 12, 0);
    VF_CHECK_NEAR(vf_decode_frame_times(f)[6], 0.5, 1e-9);
    uint8_t *buf = malloc(5 * 40 * 40 * 3);
    const int64_t lists[][5] = {{20, 21, 22, 23, 24}, {2, 4, 6, 8, 10}, {11, 12, 13, 14, 29}};
    for (int l = 0; l < 3; l++) {
        VF_CHECK_MSG(vf_decode_read(f, lists[l], 5, buf, &st) == 0, "%s", st.msg);
        for (int j = 0; j < 5; j++) {
            char why[128] = "";
            int got = read_index(buf + j * 40 * 40 * 3, 40, 40, info->width, info->height, true, why, sizeof why);
            VF_CHECK_MSG(got == lists[l][j], "list %d: want %lld read %d %s", l, (long long)lists[l][j], got, why);
        }
    }
    free(buf);
    vf_decode_close(f);
}

/* ------------------------------------------------------------ geometry vs ffmpeg */

/* Our frame k against `ffmpeg -vf scale=..:force_original_aspect_ratio=increase,crop`
 * (autorotate on): mean absolute difference per channel. */
static double diff_vs_ffmpeg(const char *path, int k, int ow, int oh, const uint8_t *ours)
{
    char cmd[1500];
    snprintf(cmd, sizeof cmd,
             "ffmpeg -v error -i '%s' -vf \"select=eq(n\\,%d),scale=%d:%d:force_original_aspect_ratio=increase:flags=bicubic,crop=%d:%d\" "
             "-frames:v 1 -pix_fmt rgb24 -f rawvideo - 2>/dev/null", path, k, ow, oh, ow, oh);
    FILE *p = popen(cmd, "r");
    if (!p) return 1e9;
    size_t n = (size_t)ow * oh * 3;
    uint8_t *ref = malloc(n);
    size_t got = fread(ref, 1, n, p);
    pclose(p);
    double d = 0;
    if (got != n) { free(ref); return 1e9; }
    for (size_t i = 0; i < n; i++) d += abs((int)ref[i] - (int)ours[i]);
    free(ref);
    return d / n;
}

VF_TEST(rotation_and_geometry_match_ffmpeg)
{
    setup();
    struct { const char *name; int rot, w, h, ow, oh; } rc[] = {
        {"rot0", 0, 160, 96, 48, 64}, {"rot90", 90, 160, 96, 48, 64},
        {"rot180", 180, 160, 96, 64, 40}, {"rot270", 270, 160, 96, 40, 56},
        {"odd_wide", 0, 201, 77, 50, 50},
    };
    for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++) {
        char path[512], extra[64];
        snprintf(extra, sizeof extra, "--rotate %d", rc[i].rot);
        vcase c = {rc[i].name, "libx264", "mp4", rc[i].w % 2 ? "yuv444p" : "yuv420p", "25", rc[i].w, rc[i].h,
                   12, 6, 0, extra, 4, 1, rc[i].ow, rc[i].oh, 25, true};
        VF_CHECK(make_video(&c, path, sizeof path) != NULL);
        vf_decode_opts o = opts_for(rc[i].ow, rc[i].oh);
        vf_decode_file *f = NULL;
        vf_status st = {0};
        VF_CHECK_MSG(vf_decode_open(path, &o, &f, &st) == 0, "%s: %s", rc[i].name, st.msg);
        if (!f) continue;
        const vf_decode_info *info = vf_decode_get_info(f);
        VF_CHECK_EQ_INT(info->rotation, rc[i].rot);
        bool tr = rc[i].rot == 90 || rc[i].rot == 270;
        VF_CHECK_EQ_INT(info->width, tr ? rc[i].h : rc[i].w);
        size_t fb = (size_t)rc[i].ow * rc[i].oh * 3;
        uint8_t *buf = malloc(fb * 4);
        const int64_t idx[4] = {2, 5, 6, 11};
        VF_CHECK_MSG(vf_decode_read(f, idx, 4, buf, &st) == 0, "%s: %s", rc[i].name, st.msg);
        for (int j = 0; j < 4; j++) {
            char why[128] = "";
            int got = read_index(buf + j * fb, rc[i].ow, rc[i].oh, info->width, info->height, true, why, sizeof why);
            VF_CHECK_MSG(got == idx[j], "%s: want %lld read %d %s", rc[i].name, (long long)idx[j], got, why);
            double d = diff_vs_ffmpeg(path, (int)idx[j], rc[i].ow, rc[i].oh, buf + j * fb);
            /* crop-then-scale vs scale-then-crop differ by sub-pixel edge placement only */
            VF_CHECK_MSG(d < 6.0, "%s frame %lld: mean |ours - ffmpeg| = %.2f", rc[i].name, (long long)idx[j], d);
        }
        free(buf);
        vf_decode_close(f);
    }
}

/* A bucketed run sets the output size after opening (the file's aspect ratio picks it):
 * the frames equal those of a file opened at that size, bit for bit, and ffmpeg's
 * cover-scale + crop; a second size change and max_pixels are honoured. */
VF_TEST(set_size_after_open)
{
    setup();
    struct { const char *name; int rot, ow, oh; } rc[] = {{"sz_rot0", 0, 64, 32}, {"sz_rot90", 90, 32, 64}};
    for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++) {
        char path[512], extra[64];
        snprintf(extra, sizeof extra, "--rotate %d", rc[i].rot);
        vcase c = {rc[i].name, "libx264", "mp4", "yuv420p", "25", 160, 96, 12, 6, 0, extra, 4, 1, rc[i].ow, rc[i].oh, 25, true};
        VF_CHECK(make_video(&c, path, sizeof path) != NULL);
        vf_decode_opts o = opts_for(48, 48), ref_o = opts_for(rc[i].ow, rc[i].oh);
        vf_decode_file *f = NULL, *g = NULL;
        vf_status st = {0};
        VF_CHECK_MSG(vf_decode_open(path, &o, &f, &st) == 0, "%s: %s", rc[i].name, st.msg);
        VF_CHECK_MSG(vf_decode_open(path, &ref_o, &g, &st) == 0, "%s: %s", rc[i].name, st.msg);
        if (!f || !g) { vf_decode_close(f); vf_decode_close(g); continue; }
        VF_CHECK(vf_decode_transposed(f) == (rc[i].rot == 90));
        VF_CHECK_EQ_INT(vf_decode_set_size(f, 5000, 5000, &st), VF_EUSAGE); /* over max_pixels */
        vf_status_clear(&st);
        VF_CHECK_EQ_INT(vf_decode_set_size(f, 16, 16, &st), 0);
        VF_CHECK_EQ_INT(vf_decode_set_size(f, rc[i].ow, rc[i].oh, &st), 0);
        size_t fb = (size_t)rc[i].ow * rc[i].oh * 3;
        uint8_t *a = malloc(fb * 3), *b = malloc(fb * 3);
        const int64_t idx[3] = {1, 6, 10};
        VF_CHECK_MSG(vf_decode_read(f, idx, 3, a, &st) == 0, "%s: %s", rc[i].name, st.msg);
        VF_CHECK_MSG(vf_decode_read(g, idx, 3, b, &st) == 0, "%s: %s", rc[i].name, st.msg);
        VF_CHECK_MSG(memcmp(a, b, fb * 3) == 0, "%s: frames differ from a file opened at %dx%d", rc[i].name,
                     rc[i].ow, rc[i].oh);
        const vf_decode_info *info = vf_decode_get_info(f);
        for (int j = 0; j < 3; j++) {
            double d = diff_vs_ffmpeg(path, (int)idx[j], rc[i].ow, rc[i].oh, a + j * fb);
            VF_CHECK_MSG(d < 6.0, "%s frame %lld: mean |ours - ffmpeg| = %.2f", rc[i].name, (long long)idx[j], d);
            char why[128] = "";
            int got = read_index(a + j * fb, rc[i].ow, rc[i].oh, info->width, info->height, true, why, sizeof why);
            VF_CHECK_MSG(got == idx[j], "%s: want %lld read %d %s", rc[i].name, (long long)idx[j], got, why);
        }
        free(a);
        free(b);
        vf_decode_close(f);
        vf_decode_close(g);
    }
}

/* ------------------------------------------------------------ bad input */

static void copy_prefix(const char *src, const char *dst, double frac)
{
    FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
    fseek(a, 0, SEEK_END);
    long n = ftell(a);
    fseek(a, 0, SEEK_SET);
    long keep = (long)(n * frac);
    char *buf = malloc(n);
    fread(buf, 1, n, a);
    fwrite(buf, 1, keep, b);
    free(buf);
    fclose(a);
    fclose(b);
}

/* Overwrites [from, to) fraction of the file with pseudo-random bytes. */
static void scramble(const char *path, double from, double to)
{
    FILE *f = fopen(path, "r+b");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    uint32_t x = 12345;
    fseek(f, (long)(n * from), SEEK_SET);
    for (long i = (long)(n * from); i < (long)(n * to); i++) {
        x = x * 1664525u + 1013904223u;
        fputc((int)(x >> 24), f);
    }
    fclose(f);
}

/* Opens and decodes all clips as the stage does: frames the decoder proves unreadable
 * are dropped and the clips planned again over the rest (*nreplans times, each followed
 * by a clip read at or after the failed one). 0 if the file gives at least one clip
 * (*nclips of them), else VF_* with why. */
static int decode_all(const char *path, int frames, int64_t *nclips, int *nreplans, char *why, size_t whyn)
{
    vf_decode_opts o = opts_for(32, 32);
    vf_decode_file *f = NULL;
    vf_status st = {0};
    vf_clip_plan plan = {0};
    *nclips = 0;
    *nreplans = 0;
    int rc = vf_decode_open(path, &o, &f, &st);
    if (rc == 0) {
        const vf_decode_info *info = vf_decode_get_info(f);
        vf_clip_opts co = {.frames = frames, .stride = 1};
        rc = vf_clip_plan_make(vf_decode_frame_times(f), info->nframes, info->duration_s, &co, &plan, &st);
        uint8_t *buf = malloc((size_t)frames * 32 * 32 * 3);
        bool replanned = false;
        for (int64_t k = 0; rc == 0 && k < plan.nclips; k++) {
            rc = vf_decode_read(f, plan.idx + k * frames, frames, buf, &st);
            int64_t lost = 0;
            if (rc == VF_EBADINPUT) {
                int pr = vf_decode_replan(f, &co, &plan, &k, &lost, &st);
                if (pr == 0) { rc = 0; replanned = true; continue; }
                if (pr < 0) { rc = *nclips ? 0 : pr; break; }
            }
            /* frame numbers are checked only on undamaged files: after dropped
             * frames the index no longer equals the number drawn into the picture */
            for (int j = 0; rc == 0 && !info->damaged && j < frames; j++) {
                char w2[128];
                int got = read_index(buf + (size_t)j * 32 * 32 * 3, 32, 32, info->width, info->height, true, w2, sizeof w2);
                if (got != plan.idx[k * frames + j]) {
                    snprintf(st.msg, sizeof st.msg, "WRONG FRAME: want %lld read %d %s",
                             (long long)plan.idx[k * frames + j], got, w2);
                    rc = -100;
                }
            }
            if (rc == 0) (*nclips)++;
            if (rc == 0 && replanned) (*nreplans)++, replanned = false;
        }
        free(buf);
    }
    snprintf(why, whyn, "%s", st.msg);
    vf_clip_plan_fini(&plan);
    vf_decode_close(f);
    return rc;
}

VF_TEST(bad_files_rejected_with_reasons)
{
    setup();
    char d[400], p[700], src[700];
    path_in_dir(d, sizeof d, "mixed");
    mkdir(d, 0755);
    /* good ones */
    snprintf(p, sizeof p, "%s/good1.mp4", d);
    VF_CHECK(sh("%s -o %s -n 24 -s 128x96 >/dev/null 2>&1", g_mkvideo, p) == 0);
    snprintf(p, sizeof p, "%s/good2.webm", d);
    VF_CHECK(sh("%s -o %s -n 20 -s 96x96 --audio >/dev/null 2>&1", g_mkvideo, p) == 0);
    snprintf(p, sizeof p, "%s/good3.mkv", d);
    VF_CHECK(sh("%s -o %s -c mpeg4 -n 16 -s 96x64 >/dev/null 2>&1", g_mkvideo, p) == 0);
    /* bad ones */
    snprintf(src, sizeof src, "%s/src_fast.mp4", g_dir);
    VF_CHECK(sh("%s -o %s -n 40 -s 128x96 --faststart >/dev/null 2>&1", g_mkvideo, src) == 0);
    snprintf(p, sizeof p, "%s/truncated_faststart.mp4", d);
    copy_prefix(src, p, 0.6);
    snprintf(src, sizeof src, "%s/src_plain.mp4", g_dir);
    VF_CHECK(sh("%s -o %s -n 40 -s 128x96 >/dev/null 2>&1", g_mkvideo, src) == 0);
    snprintf(p, sizeof p, "%s/truncated_moov.mp4", d);
    copy_prefix(src, p, 0.7);
    snprintf(src, sizeof src, "%s/src.mkv", g_dir);
    VF_CHECK(sh("%s -o %s -n 40 -s 128x96 -c mpeg4 >/dev/null 2>&1", g_mkvideo, src) == 0);
    snprintf(p, sizeof p, "%s/truncated.mkv", d);
    copy_prefix(src, p, 0.6);
    snprintf(src, sizeof src, "%s/src_audio.webm", g_dir);
    VF_CHECK(sh("%s -o %s -n 40 -s 128x96 --audio >/dev/null 2>&1", g_mkvideo, src) == 0);
    snprintf(p, sizeof p, "%s/truncated_audio.webm", d);
    copy_prefix(src, p, 0.6);
    snprintf(src, sizeof src, "%s/src.mkv", g_dir);
    snprintf(p, sizeof p, "%s/corrupt_data.mkv", d);
    sh("cp %s %s", src, p);
    scramble(p, 0.3, 0.5);
    /* moov first, garbage only inside the media data: the demuxer is happy, the
     * decoder must notice */
    snprintf(p, sizeof p, "%s/corrupt_payload.mp4", d);
    sh("cp %s/src_fast.mp4 %s", g_dir, p);
    scramble(p, 0.55, 0.75);
    /* the same at other places, and twice in a longer file: each loses frames in a clip
     * with clips before and after it, so the walk must resume exactly at the failed
     * clip's grid position to give ffprobe's count */
    snprintf(p, sizeof p, "%s/corrupt_payload_early.mp4", d);
    sh("cp %s/src_fast.mp4 %s", g_dir, p);
    scramble(p, 0.35, 0.45);
    snprintf(src, sizeof src, "%s/src_long.mp4", g_dir);
    VF_CHECK(sh("%s -o %s -n 72 -s 128x96 --faststart >/dev/null 2>&1", g_mkvideo, src) == 0);
    snprintf(p, sizeof p, "%s/corrupt_payload_twice.mp4", d);
    sh("cp %s %s", src, p);
    scramble(p, 0.3, 0.36);
    scramble(p, 0.7, 0.76);
    snprintf(p, sizeof p, "%s/corrupt_header.mp4", d);
    sh("cp %s/src_fast.mp4 %s", g_dir, p);
    scramble(p, 0.0, 0.02);
    snprintf(p, sizeof p, "%s/zero.mp4", d);
    write_file(p, "");
    snprintf(p, sizeof p, "%s/text.mp4", d);
    write_file(p, "this is not a video, just some text renamed to .mp4\n");
    snprintf(p, sizeof p, "%s/audio_only.mp4", d);
    VF_CHECK(sh("ffmpeg -v error -f lavfi -i sine=frequency=440:duration=1 -c:a aac -y %s", p) == 0);
    snprintf(p, sizeof p, "%s/too_short.mp4", d);
    VF_CHECK(sh("%s -o %s -n 5 -s 64x64 >/dev/null 2>&1", g_mkvideo, p) == 0);

    /* The rule: a file gives exactly the clips of 8 frames that ffprobe's readable
     * frames make; it is refused, with a reason, only when they make none. */
    vf_manifest m;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_manifest_glob(d, 0, 1, &m, &st), 0);
    int good = 0, bad = 0, damaged_ok = 0, replanned = 0;
    for (int64_t i = 0; i < m.n; i++) {
        char why[2100] = "";
        const char *base = strrchr(m.rows[i].path, '/') + 1;
        int64_t nclips = 0;
        int replans = 0;
        int rc = decode_all(m.rows[i].path, 8, &nclips, &replans, why, sizeof why);
        long readable = 0;
        double fps = 0;
        ffprobe_facts(m.rows[i].path, &readable, &fps);
        fprintf(stderr, "  %-26s ffprobe %3ld frames: %s%s (%d replans)\n", base, readable,
                rc == 0 ? "ok" : "rejected: ", rc == 0 ? "" : why, replans);
        if (!strncmp(base, "corrupt_payload", 15))
            VF_CHECK_MSG(replans >= 1, "%s: no clip was read after planning again: the fixture no longer "
                         "exercises the replan", base);
        replanned += replans >= 1;
        if (readable >= 8) {
            VF_CHECK_MSG(rc == 0 && nclips == readable / 8, "%s: %lld clips, ffprobe's %ld frames make %ld (%s)",
                         base, (long long)nclips, readable, readable / 8, why);
            good += rc == 0 && strncmp(base, "good", 4) == 0;
            damaged_ok += rc == 0 && strncmp(base, "good", 4) != 0;
        } else {
            VF_CHECK_MSG(rc == VF_EBADINPUT && why[0], "%s should be rejected with a reason (rc %d: %s)",
                         base, rc, why);
            bad += rc == VF_EBADINPUT;
        }
        if (!strcmp(base, "zero.mp4")) VF_CHECK_MSG(strstr(why, "empty") != NULL, "%s", why);
        if (!strcmp(base, "audio_only.mp4")) VF_CHECK_MSG(strstr(why, "no video stream") != NULL, "%s", why);
        if (!strcmp(base, "too_short.mp4")) VF_CHECK_MSG(strstr(why, "5 frames readable") != NULL, "%s", why);
    }
    VF_CHECK_EQ_INT(good, 3);
    VF_CHECK(bad >= 4); /* zero, text, audio only, too short: nothing readable */
    VF_CHECK(damaged_ok >= 3); /* truncated files give the clips they have */
    VF_CHECK(replanned >= 3);  /* the corrupt_payload fixtures */
    vf_manifest_fini(&m);
}

VF_TEST(limits_deadline_max_pixels)
{
    setup();
    char p[512];
    snprintf(p, sizeof p, "%s/limits.mp4", g_dir);
    VF_CHECK(sh("%s -o %s -n 10 -s 160x120 >/dev/null 2>&1", g_mkvideo, p) == 0);
    vf_decode_opts o = opts_for(32, 32);
    o.max_pixels = 100 * 100;
    vf_decode_file *f = NULL;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_decode_open(p, &o, &f, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "max_pixels") != NULL, "%s", st.msg);
    vf_decode_close(f);
    o = opts_for(32, 32);
    o.deadline_s = 1e-6;
    vf_status_clear(&st);
    f = NULL;
    VF_CHECK_EQ_INT(vf_decode_open(p, &o, &f, &st), VF_ETIMEOUT);
    VF_CHECK_MSG(strstr(st.msg, "deadline") != NULL, "%s", st.msg);
    vf_decode_close(f);
}

int main(void)
{
    int r = vf_test_main();
    if (g_dir[0] && !getenv("VF_TEST_KEEP")) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    }
    return r;
}
