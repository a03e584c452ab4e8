/* bench_decode.c — decode + resize throughput of the decode core (stages/decode/decode_av.h).
 *
 *   bench_decode [-t threads] [-s WxH] [-f frames] [-r repeats] FILE...
 *
 * For each file: open (packet scan included), plan every non-overlapping clip of
 * `frames` frames at stride 1, decode each into one reused (T, H, W, 3) buffer, as the
 * decode stage does minus the item plumbing. Prints one line per file,
 *   FILE <source frames> <frames out> <best seconds> <frames out per second>
 * taking the best of `repeats` runs (the machine may be shared). bench/bench_decode.sh
 * runs it against the ffmpeg CLI on the same files and threads.
 */
#include "stages/decode/decode_av.h"
#include "stages/decode/decode_clip.h"
#include "stages/decode/decode_replan.h"

#include <libavutil/log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One pass over a file; frames written to *out_frames. 0 or a VF_* code. */
static int one_pass(const char *path, const vf_decode_opts *o, int T, uint8_t *buf,
                    int64_t *src_frames, int64_t *out_frames, vf_status *st)
{
    vf_decode_file *f = NULL;
    vf_clip_plan plan = {0};
    int rc = vf_decode_open(path, o, &f, st);
    if (rc) return rc;
    const vf_decode_info *info = vf_decode_get_info(f);
    vf_clip_opts co = {.frames = T, .stride = 1};
    rc = vf_clip_plan_make(vf_decode_frame_times(f), info->nframes, info->duration_s, &co, &plan, st);
    *src_frames = info->nframes;
    *out_frames = 0;
    int64_t lost = 0;
    for (int64_t k = 0; rc == 0 && k < plan.nclips; k++) {
        rc = vf_decode_read(f, plan.idx + k * T, T, buf, st);
        if (rc == VF_EBADINPUT) { /* unreadable frames: the stage drops them and goes on */
            int pr = vf_decode_replan(f, &co, &plan, &k, &lost, st);
            if (pr == 0) { rc = 0; continue; }
            if (pr < 0) { rc = *out_frames ? 0 : pr; break; }
        }
        if (rc == 0) *out_frames += T;
    }
    vf_clip_plan_fini(&plan);
    vf_decode_close(f);
    return rc;
}

int main(int argc, char **argv)
{
    int threads = 1, W = 256, H = 256, T = 16, repeats = 3, first = 1;
    for (; first < argc && argv[first][0] == '-'; first += 2) {
        if (first + 1 >= argc) break;
        const char *a = argv[first], *v = argv[first + 1];
        if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "-s") && sscanf(v, "%dx%d", &W, &H) == 2) {}
        else if (!strcmp(a, "-f")) T = atoi(v);
        else if (!strcmp(a, "-r")) repeats = atoi(v);
        else { fprintf(stderr, "bench_decode: unknown option %s\n", a); return 2; }
    }
    if (first >= argc || T < 1 || W < 1 || H < 1 || repeats < 1) {
        fprintf(stderr, "usage: bench_decode [-t threads] [-s WxH] [-f frames] [-r repeats] FILE...\n");
        return 2;
    }
    av_log_set_level(AV_LOG_ERROR);
    vf_decode_opts o;
    vf_decode_opts_default(&o);
    o.out_w = W;
    o.out_h = H;
    o.threads = threads;
    o.deadline_s = 3600;
    o.max_pixels = 8192LL * 8192;
    uint8_t *buf = malloc((size_t)T * W * H * 3);
    if (!buf) return 1;
    for (int i = first; i < argc; i++) {
        double best = 1e30;
        int64_t src = 0, out = 0;
        for (int r = 0; r < repeats; r++) {
            vf_status st = {0};
            double t0 = now_s();
            if (one_pass(argv[i], &o, T, buf, &src, &out, &st) != 0) {
                fprintf(stderr, "bench_decode: %s: %s\n", argv[i], st.msg);
                free(buf);
                return 1;
            }
            double dt = now_s() - t0;
            if (dt < best) best = dt;
        }
        printf("%s %lld %lld %.4f %.1f\n", argv[i], (long long)src, (long long)out, best, out / best);
        fflush(stdout);
    }
    free(buf);
    return 0;
}
