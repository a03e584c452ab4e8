/* fuzz_decode.c — libFuzzer target for the decode stage's demux/decode path
 * (stages/decode/decode_av.c, decode_clip.c, decode_replan.c), in-process.
 *
 * The input bytes are a video file: they are put in a memfd and opened by path, so
 * libavformat probes them by content as it does a user's file. Every clip of 2 frames is
 * planned and read, frames proved unreadable are dropped and the clips planned again, as
 * the stage does. Properties beyond "no crash / no out-of-bounds access" (ASan):
 *   - a refused file or a failed read leaves a message (one line, never empty);
 *   - an opened file's frame times increase and every planned index lies in the index;
 *   - nothing takes longer than the deadline plus a margin (no spin).
 * The corpus (corpus/fuzz_decode/) holds small real files: the sample videos of a Debian
 * package (python3-sage's doctest media: gif, vp8, h264, flv1, msmpeg4v3, theora, mpeg4)
 * and findings. In the normal build it is linked with replay_main.c, which mutates each
 * file at a bounded number of offsets (vf_fuzz_replay_offsets) since one decode costs
 * milliseconds, not microseconds.
 */
#include "stages/decode/decode_av.h"
#include "stages/decode/decode_clip.h"
#include "stages/decode/decode_replan.h"

#include <libavutil/log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

const size_t vf_fuzz_replay_offsets = 96;

enum { T = 2, W = 16, H = 16 };
static const double DEADLINE_S = 4.0;

static void fail(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_decode: property violated: %s (%s)\n", what, msg ? msg : "");
    abort();
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void check_msg(const vf_status *st)
{
    if (!st->msg[0]) fail("an error without a message", NULL);
    if (strchr(st->msg, '\n')) fail("a message of more than one line", st->msg);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static int quiet;
    if (!quiet) { av_log_set_level(AV_LOG_QUIET); quiet = 1; }
    int fd = memfd_create("fuzz_decode", 0);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) { close(fd); return 0; }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    vf_decode_opts o;
    vf_decode_opts_default(&o);
    o.out_w = W;
    o.out_h = H;
    o.threads = 1;
    o.deadline_s = DEADLINE_S;
    o.stall_s = 1.0;
    o.max_pixels = 1 << 20;
    o.max_frames = 4096;
    o.probesize = 1 << 20;
    vf_status st = {0};
    vf_decode_file *f = NULL;
    vf_clip_plan plan = {0};
    uint8_t buf[T * W * H * 3];
    double t0 = now_s();
    int rc = vf_decode_open(path, &o, &f, &st);
    if (rc) {
        if (f) fail("refused file returned a handle", st.msg);
        check_msg(&st);
        goto done;
    }
    const vf_decode_info *info = vf_decode_get_info(f);
    const double *times = vf_decode_frame_times(f);
    for (int64_t i = 1; i < info->nframes; i++)
        if (!(times[i] > times[i - 1])) fail("frame times do not increase", path);
    vf_clip_opts co = {.frames = T, .stride = 1};
    rc = vf_clip_plan_make(times, info->nframes, info->duration_s, &co, &plan, &st);
    if (rc) { check_msg(&st); goto done; }
    int64_t lost = 0;
    for (int64_t k = 0; k < plan.nclips; k++) {
        for (int j = 0; j < T; j++)
            if (plan.idx[k * T + j] < 0 || plan.idx[k * T + j] >= info->nframes)
                fail("a planned frame outside the index", path);
        vf_status_clear(&st);
        rc = vf_decode_read(f, plan.idx + k * T, T, buf, &st);
        if (rc == VF_EBADINPUT) {
            int pr = vf_decode_replan(f, &co, &plan, &k, &lost, &st);
            if (pr == 0) continue;
            if (pr < 0) { check_msg(&st); break; }
        }
        if (rc) { check_msg(&st); break; }
    }
done:
    if (now_s() - t0 > DEADLINE_S + 2.0) fail("over the deadline", path);
    vf_clip_plan_fini(&plan);
    vf_decode_close(f);
    close(fd);
    return 0;
}
