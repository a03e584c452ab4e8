/* decode_av.c — open and index one video file (see decode_av.h); seeking and decoding
 * frames are decode_av_read.c.
 *
 * Opening scans every packet of the chosen video stream once (demux only, no decode):
 * that gives the frame count, presentation timestamps in display order, keyframes and
 * early proof of truncation or damage, before any clip is promised downstream. Reads
 * then map each decoded frame back to its index by timestamp, so a seek that lands in
 * the wrong place is detected (and retried from an earlier keyframe) instead of
 * shifting frames, and a frame the decoder drops is reported instead of replaced.
 */
#include "stages/decode/decode_av_internal.h"
#include "stages/decode/decode_scale.h"

#include <errno.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEF_MAX_FRAMES ((int64_t)1 << 21)


static void note_damage(vf_decode_file *f, bool corrupt, const char *msg)
{
    if (f->damaged[0]) return;
    snprintf(f->damaged, sizeof f->damaged, "%s: %.200s", corrupt ? "damaged container" : "truncated", msg);
    size_t k = strlen(f->damaged);
    while (k && (f->damaged[k - 1] == '\n' || f->damaged[k - 1] == ' ')) f->damaged[--k] = 0;
}

/* ------------------------------------------------------------ libav log capture */

/* The last error libav logged (any thread: frame threads log from their own), so a
 * quarantine reason can say "h264: error while decoding MB 3 4" rather than only
 * "Invalid data found". Messages still reach the default logger at its level. */
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log_last[256];
static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;
/* The file whose demuxer is scanning on this thread: demuxers report a file that ends
 * inside an element only as a warning ("File ended prematurely") and then a clean
 * EOF, so the warning is the evidence of truncation. */
static _Thread_local vf_decode_file *tl_scanning;
static void note_damage(vf_decode_file *f, bool corrupt, const char *msg);

static void log_cb(void *avcl, int level, const char *fmt, va_list vl)
{
    vf_decode_file *sf = tl_scanning;
    /* An error the demuxer itself reports while opening/indexing means a damaged
     * container (it may resync and hand out a plausible but shorter index). */
    bool demux_err = sf && level <= AV_LOG_ERROR && avcl && avcl == (void *)sf->fmt;
    if (sf && (demux_err || (level <= AV_LOG_WARNING &&
                             (strstr(fmt, "prematurely") || strstr(fmt, "partial file") ||
                              strstr(fmt, "truncated"))))) {
        va_list cp;
        va_copy(cp, vl);
        char msg[200];
        vsnprintf(msg, sizeof msg, fmt, cp);
        va_end(cp);
        note_damage(sf, demux_err && !strstr(fmt, "prematurely") && !strstr(fmt, "partial file"), msg);
    }
    if (level <= AV_LOG_ERROR) {
        va_list cp;
        va_copy(cp, vl);
        char msg[200];
        vsnprintf(msg, sizeof msg, fmt, cp);
        va_end(cp);
        size_t k = strlen(msg);
        while (k && (msg[k - 1] == '\n' || msg[k - 1] == ' ')) msg[--k] = 0;
        AVClass *avc = avcl ? *(AVClass **)avcl : NULL;
        pthread_mutex_lock(&g_log_mu);
        snprintf(g_log_last, sizeof g_log_last, "%s%s%s", avc ? avc->item_name(avcl) : "",
                 avc ? ": " : "", msg);
        pthread_mutex_unlock(&g_log_mu);
    }
    av_log_default_callback(avcl, level, fmt, vl);
}
static void log_install(void) { av_log_set_callback(log_cb); }
void vf_decode_log_take(char *buf, size_t n)
{
    pthread_mutex_lock(&g_log_mu);
    if (buf) snprintf(buf, n, "%.*s", (int)n - 1, g_log_last);
    g_log_last[0] = 0;
    pthread_mutex_unlock(&g_log_mu);
}

/* ------------------------------------------------------------ helpers */

double vf_decode_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

bool vf_decode_stalled(const vf_decode_file *f, double now)
{
    return f->o.stall_s > 0 && f->progress > 0 && now - f->progress > f->o.stall_s;
}

/* Blocking I/O inside libav (open, probe, read) looks here: past the file's deadline,
 * or with no frame for stall_s, it gives up and the call returns an error. */
static int interrupt_cb(void *opaque)
{
    vf_decode_file *f = opaque;
    double now = vf_decode_now_s();
    if (f->deadline > 0 && now > f->deadline) {
        f->timed_out = true;
        return 1;
    }
    if (vf_decode_stalled(f, now)) {
        f->timed_out = f->stalled = true;
        return 1;
    }
    return 0;
}

static const char *averr(int e, char *buf, size_t n)
{
    av_strerror(e, buf, n);
    return buf;
}

int vf_decode_timeout_fail(vf_decode_file *f, const char *when, vf_status *st)
{
    if (f->stalled || vf_decode_stalled(f, vf_decode_now_s()))
        return vf_status_set(st, VF_ETIMEOUT, __FILE__, __LINE__,
                             "stalled: no frame for %.3g s (stall_s) while %s", f->o.stall_s, when);
    return vf_status_set(st, VF_ETIMEOUT, __FILE__, __LINE__,
                         "deadline of %.3g s passed while %s", f->o.deadline_s, when);
}

void vf_decode_opts_default(vf_decode_opts *o)
{
    memset(o, 0, sizeof *o);
    o->out_w = o->out_h = 256;
    o->threads = 2;
    o->deadline_s = 300;
    o->max_pixels = 4096 * 2304;
    o->err_detect = VF_DECODE_ERR_CONCEAL;
    o->sws_flags = SWS_BICUBIC;
    o->stall_s = 10;
}

int vf_decode_filter_parse(const char *name, int *flags)
{
    static const struct { const char *n; int f; } t[] = {
        {"fast_bilinear", SWS_FAST_BILINEAR}, {"bilinear", SWS_BILINEAR},
        {"bicubic", SWS_BICUBIC}, {"area", SWS_AREA}, {"lanczos", SWS_LANCZOS},
        {"neighbor", SWS_POINT},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (name && strcmp(name, t[i].n) == 0) { *flags = t[i].f; return 0; }
    return VF_EINVAL;
}

static int64_t frame_budget(const vf_decode_opts *o)
{
    /* 3 bytes per pixel covers 8-bit 4:4:4 / RGB and 10-bit 4:2:0 at max_pixels. */
    return o->max_pixels * 3;
}
static int pool_frames(const vf_decode_opts *o)
{
    /* H.264/HEVC keep up to 16 references; frame threads each hold one in flight. */
    int th = o->threads > 0 ? o->threads : 16;
    return 16 + 2 * th + 4;
}

int64_t vf_decode_budget_bytes(const vf_decode_opts *o)
{
    int64_t maxf = o->max_frames > 0 ? o->max_frames : DEF_MAX_FRAMES;
    int64_t probe = o->probesize > 0 ? o->probesize : 5000000;
    return frame_budget(o) * pool_frames(o) + maxf * (2 * 8 + 8) + probe +
           vf_decode_scaler_bytes(o->out_w, o->out_h, (int64_t)sqrt((double)o->max_pixels) * 4);
}

/* ------------------------------------------------------------ open */

void vf_decode_close_input(vf_decode_file *f)
{
    if (f->pending) av_packet_unref(f->pkt);
    f->pending = false;
    f->demux_eof = false;
    avcodec_free_context(&f->dec);
    avformat_close_input(&f->fmt);
}

/* Opens the container and the decoder of the chosen video stream. */
int vf_decode_open_input(vf_decode_file *f, vf_status *st)
{
    int rc = 0, e;
    char eb[128];
    AVDictionary *opts = NULL;
    f->fmt = avformat_alloc_context();
    if (!f->fmt) VF_FAIL(st, VF_ENOMEM, "avformat_alloc_context failed");
    f->fmt->interrupt_callback.callback = interrupt_cb;
    f->fmt->interrupt_callback.opaque = f;
    f->fmt->probesize = f->o.probesize > 0 ? f->o.probesize : 5000000;
    f->fmt->max_analyze_duration = f->o.analyzeduration > 0 ? f->o.analyzeduration : 5000000;
    char lg[160];
    e = avformat_open_input(&f->fmt, f->path, NULL, &opts);
    av_dict_free(&opts);
    if (e < 0) {
        if (f->timed_out) return vf_decode_timeout_fail(f, "opening", st);
        vf_decode_log_take(lg, sizeof lg);
        VF_FAIL(st, VF_EBADINPUT, "not a media file libavformat can read (%s%s%s)",
                averr(e, eb, sizeof eb), lg[0] ? "; libav: " : "", lg);
    }
    e = avformat_find_stream_info(f->fmt, NULL);
    if (e < 0) {
        if (f->timed_out) return vf_decode_timeout_fail(f, "probing", st);
        vf_decode_log_take(lg, sizeof lg);
        VF_FAIL(st, VF_EBADINPUT, "cannot read stream info (%s%s%s)", averr(e, eb, sizeof eb),
                lg[0] ? "; libav: " : "", lg);
    }
    /* The best video stream, never a cover picture (an mp3/m4a with artwork is audio). */
    int best = av_find_best_stream(f->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (best >= 0 && (f->fmt->streams[best]->disposition & AV_DISPOSITION_ATTACHED_PIC)) best = -1;
    int naudio = 0;
    for (unsigned i = 0; i < f->fmt->nb_streams; i++) {
        AVStream *s = f->fmt->streams[i];
        if (s->codecpar->codec_type == AVMEDIA_TYPE_AUDIO) naudio++;
        if (best < 0 && s->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
            !(s->disposition & AV_DISPOSITION_ATTACHED_PIC))
            best = (int)i;
    }
    f->info.audio_streams = naudio;
    if (best < 0) {
        if (naudio) VF_FAIL(st, VF_EBADINPUT, "no video stream (audio only: %d audio stream%s)",
                            naudio, naudio > 1 ? "s" : "");
        VF_FAIL(st, VF_EBADINPUT, "no video stream (%u streams, none video)", f->fmt->nb_streams);
    }
    f->vs = best;
    for (unsigned i = 0; i < f->fmt->nb_streams; i++)
        if ((int)i != best) f->fmt->streams[i]->discard = AVDISCARD_ALL;
    AVStream *vst = f->fmt->streams[best];
    AVCodecParameters *par = vst->codecpar;
    f->tb = vst->time_base;
    snprintf(f->info.codec, sizeof f->info.codec, "%s", avcodec_get_name(par->codec_id));
    snprintf(f->info.format, sizeof f->info.format, "%s", f->fmt->iformat->name);
    const char *pf = av_get_pix_fmt_name(par->format);
    snprintf(f->info.pix_fmt, sizeof f->info.pix_fmt, "%s", pf ? pf : "unknown");
    if (par->width <= 0 || par->height <= 0)
        VF_FAIL(st, VF_EBADINPUT, "video stream (%s) has no frame size", f->info.codec);
    if ((int64_t)par->width * par->height > f->o.max_pixels)
        VF_FAIL(st, VF_EBADINPUT, "frame size %dx%d exceeds max_pixels=%lld", par->width,
                par->height, (long long)f->o.max_pixels);
    if (par->format >= 0) {
        int fb = av_image_get_buffer_size(par->format, par->width, par->height, 1);
        if (fb > frame_budget(&f->o))
            VF_FAIL(st, VF_EBADINPUT,
                    "a %dx%d %s frame needs %d bytes, over the per-frame budget of %lld "
                    "(3 bytes x max_pixels; raise max_pixels)",
                    par->width, par->height, f->info.pix_fmt, fb, (long long)frame_budget(&f->o));
    }
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec) VF_FAIL(st, VF_EBADINPUT, "no decoder for video codec %s", f->info.codec);
    f->dec = avcodec_alloc_context3(codec);
    if (!f->dec) VF_FAIL(st, VF_ENOMEM, "avcodec_alloc_context3 failed");
    e = avcodec_parameters_to_context(f->dec, par);
    if (e < 0) VF_FAIL(st, VF_EBADINPUT, "bad codec parameters (%s)", averr(e, eb, sizeof eb));
    f->dec->pkt_timebase = vst->time_base;
    f->dec->thread_count = f->o.threads;
    f->dec->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
    f->dec->max_pixels = f->o.max_pixels;
    if (f->o.err_detect >= VF_DECODE_ERR_CAREFUL)
        f->dec->err_recognition = AV_EF_CRCCHECK | AV_EF_BITSTREAM | AV_EF_CAREFUL;
    if (f->o.err_detect >= VF_DECODE_ERR_EXPLODE) f->dec->err_recognition |= AV_EF_EXPLODE;
    e = avcodec_open2(f->dec, codec, NULL);
    if (e < 0) VF_FAIL(st, VF_EBADINPUT, "cannot open the %s decoder (%s)", f->info.codec, averr(e, eb, sizeof eb));
    f->info.coded_w = par->width;
    f->info.coded_h = par->height;
    f->demux_eof = false;
    return 0;
fail:
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* One pass over the video packets: timestamps, keyframes, truncation. */
static int scan(vf_decode_file *f, vf_status *st)
{
    int rc = 0, e;
    char eb[128];
    int64_t cap = 1024, n = 0, nk = 0, capk = 64, seen = 0;
    int64_t maxf = f->o.max_frames > 0 ? f->o.max_frames : DEF_MAX_FRAMES;
    int64_t *ts = malloc(cap * sizeof *ts), *kts = malloc(capk * sizeof *kts);
    bool missing = false, corrupt = false, read_err = false;
    double corrupt_at = 0;
    if (!ts || !kts) VF_FAIL(st, VF_ENOMEM, "frame index allocation failed");
    for (;;) {
        e = av_read_frame(f->fmt, f->pkt);
        if (e == AVERROR_EOF) break;
        if (e < 0) {
            if (f->timed_out) { rc = vf_decode_timeout_fail(f, "indexing frames", st); goto fail; }
            if (n == 0)
                VF_FAIL(st, VF_EBADINPUT, "cannot read any video packet (%s)", averr(e, eb, sizeof eb));
            /* the frames before the damage are still the file's: index them */
            if (!f->info.damaged)
                snprintf(f->info.damage, sizeof f->info.damage, "read error after %lld video packets: %s",
                         (long long)n, averr(e, eb, sizeof eb));
            f->info.damaged = read_err = true;
            break;
        }
        if (f->pkt->stream_index != f->vs) {
            av_packet_unref(f->pkt);
            continue;
        }
        seen++; /* discarded packets (edit lists) count against the declared total */
        if (f->pkt->flags & AV_PKT_FLAG_DISCARD) {
            av_packet_unref(f->pkt);
            continue;
        }
        /* A packet without a presentation timestamp (only a decode one, as in AVIs of
         * packed B-frames or MPEG program streams) makes the index's times unreliable:
         * such files are read in output order, counting frames as ffmpeg does. */
        int64_t t = f->pkt->pts != AV_NOPTS_VALUE ? f->pkt->pts : f->pkt->dts;
        if (f->pkt->pts == AV_NOPTS_VALUE) missing = true;
        if ((f->pkt->flags & AV_PKT_FLAG_CORRUPT) && !corrupt) {
            corrupt = true;
            corrupt_at = t != AV_NOPTS_VALUE ? t * av_q2d(f->tb) : -1;
        }
        if (n >= maxf) { /* index bound reached: later frames are not offered */
            av_packet_unref(f->pkt);
            break;
        }
        {
            if (n == cap) {
                cap *= 2;
                int64_t *p = realloc(ts, cap * sizeof *ts);
                if (!p) VF_FAIL(st, VF_ENOMEM, "frame index allocation failed");
                ts = p;
            }
            ts[n++] = t;
            if ((f->pkt->flags & AV_PKT_FLAG_KEY) && t != AV_NOPTS_VALUE) {
                if (nk == capk) {
                    capk *= 2;
                    int64_t *p = realloc(kts, capk * sizeof *kts);
                    if (!p) VF_FAIL(st, VF_ENOMEM, "frame index allocation failed");
                    kts = p;
                }
                kts[nk++] = t;
            }
        }
        av_packet_unref(f->pkt);
    }
    if (n == 0) VF_FAIL(st, VF_EBADINPUT, "the video stream has no packets");
    /* Damage costs the frames it destroyed, not the file: the frames that can be read are
     * offered (the reader proves which) and the damage is reported with the clips. */
    AVStream *vst = f->fmt->streams[f->vs];
    if (!f->info.damaged && f->damaged[0]) snprintf(f->info.damage, sizeof f->info.damage, "%s", f->damaged);
    else if (!f->info.damaged && corrupt && corrupt_at >= 0)
        snprintf(f->info.damage, sizeof f->info.damage, "video packet at %.3f s is damaged", corrupt_at);
    else if (!f->info.damaged && corrupt)
        snprintf(f->info.damage, sizeof f->info.damage, "a video packet is damaged");
    else if (!read_err && vst->nb_frames > 0 && seen < vst->nb_frames && n < maxf)
        snprintf(f->info.damage, sizeof f->info.damage, "truncated: the container declares %lld frames, %lld read",
                 (long long)vst->nb_frames, (long long)seen);
    f->info.damaged = f->info.damage[0] != 0;
    f->n = n;
    f->ts = ts;
    ts = NULL;
    qsort(f->ts, n, sizeof *f->ts, cmp_i64);
    bool dup = false;
    for (int64_t i = 1; i < n && !missing; i++)
        if (f->ts[i] == f->ts[i - 1]) dup = true;
    f->info.has_pts = !missing && !dup;
    f->info.nframes = n;
    /* Keyframes as presentation indices (pts mode only: count mode never seeks). */
    if (f->info.has_pts) {
        qsort(kts, nk, sizeof *kts, cmp_i64);
        f->keys = malloc((nk ? nk : 1) * sizeof *f->keys);
        if (!f->keys) VF_FAIL(st, VF_ENOMEM, "frame index allocation failed");
        int64_t j = 0;
        for (int64_t i = 0; i < nk; i++) {
            int64_t *hit = bsearch(&kts[i], f->ts, n, sizeof *f->ts, cmp_i64);
            if (hit) f->keys[j++] = hit - f->ts;
        }
        f->nkeys = j;
    }
    free(kts);
    return 0;
fail:
    free(ts);
    free(kts);
    return rc;
}

/* Frame rate and the time of each frame. */
static int build_times(vf_decode_file *f, vf_status *st)
{
    int rc = 0;
    AVStream *vst = f->fmt->streams[f->vs];
    double fps = 0;
    if (vst->avg_frame_rate.num > 0 && vst->avg_frame_rate.den > 0) fps = av_q2d(vst->avg_frame_rate);
    else if (vst->r_frame_rate.num > 0 && vst->r_frame_rate.den > 0) fps = av_q2d(vst->r_frame_rate);
    if (f->info.has_pts && f->n > 1) {
        double span = (f->ts[f->n - 1] - f->ts[0]) * av_q2d(f->tb);
        if (!(fps > 0 && fps < 1000) && span > 0) fps = (f->n - 1) / span;
    }
    if (!f->info.has_pts && f->o.fps_hint > 0) fps = f->o.fps_hint;
    if (!(fps > 0 && fps < 1e4)) fps = 25; /* last resort, as libavformat assumes */
    f->info.fps = fps;
    f->times = malloc(f->n * sizeof *f->times);
    if (!f->times) VF_FAIL(st, VF_ENOMEM, "frame index allocation failed");
    for (int64_t i = 0; i < f->n; i++)
        f->times[i] = f->info.has_pts ? (f->ts[i] - f->ts[0]) * av_q2d(f->tb) : i / fps;
    f->info.duration_s = f->times[f->n - 1] + 1 / fps;
    return 0;
fail:
    return rc;
}

int vf_decode_open(const char *path, const vf_decode_opts *o, vf_decode_file **out,
                   vf_status *st)
{
    int rc = 0;
    struct stat sb;
    *out = NULL;
    pthread_once(&g_log_once, log_install);
    vf_decode_log_take(NULL, 0);
    vf_decode_file *f = calloc(1, sizeof *f);
    if (!f) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "decode: out of memory");
    f->o = *o;
    if (f->o.max_pixels <= 0) f->o.max_pixels = 4096 * 2304;
    f->path = strdup(path);
    f->pkt = av_packet_alloc();
    f->frm = av_frame_alloc();
    if (!f->path || !f->pkt || !f->frm) VF_FAIL(st, VF_ENOMEM, "decode: out of memory");
    if (o->deadline_s > 0) f->deadline = vf_decode_now_s() + o->deadline_s;
    f->progress = vf_decode_now_s();
    f->lost_from = -1;
    if (stat(path, &sb) != 0)
        VF_FAIL(st, VF_EBADINPUT, "cannot stat (%s)", strerror(errno));
    if (!S_ISREG(sb.st_mode)) VF_FAIL(st, VF_EBADINPUT, "not a regular file");
    if (sb.st_size == 0) VF_FAIL(st, VF_EBADINPUT, "empty file (0 bytes)");
    tl_scanning = f;
    rc = vf_decode_open_input(f, st);
    if (rc == 0) rc = scan(f, st);
    tl_scanning = NULL;
    if (rc < 0) goto fail;
    VF_TRY(build_times(f, st));
    /* A video-only file whose header promises a longer duration than its frames cover
     * lost its tail (with other streams the header's duration may be theirs). */
    if (f->fmt->nb_streams == 1 && f->fmt->duration > 0 && f->info.has_pts && !f->info.damaged &&
        f->n < (o->max_frames > 0 ? o->max_frames : DEF_MAX_FRAMES)) {
        double declared = f->fmt->duration / (double)AV_TIME_BASE;
        if (f->info.duration_s < declared * 0.98 - 2 / f->info.fps) {
            f->info.damaged = true;
            snprintf(f->info.damage, sizeof f->info.damage,
                     "truncated: the header declares %.3f s, frames cover %.3f s", declared, f->info.duration_s);
        }
    }
    AVStream *vst = f->fmt->streams[f->vs];
    const int32_t *dm = (const int32_t *)av_stream_get_side_data(vst, AV_PKT_DATA_DISPLAYMATRIX, NULL);
    vf_decode_orient_from_matrix(dm, &f->orient);
    f->info.rotation = f->orient.rotation;
    f->info.flipped = f->orient.flipped;
    f->info.width = f->orient.transpose ? f->info.coded_h : f->info.coded_w;
    f->info.height = f->orient.transpose ? f->info.coded_w : f->info.coded_h;
    AVRational sar = av_guess_sample_aspect_ratio(f->fmt, vst, NULL);
    f->info.sar = sar.num > 0 && sar.den > 0 ? av_q2d(sar) : 1;
    if (!(f->info.sar > 0.01 && f->info.sar < 100)) f->info.sar = 1;
    f->scaler = vf_decode_scaler_new(o->out_w, o->out_h, f->orient, f->info.sar, o->sws_flags,
                                     o->threads, st);
    if (!f->scaler) { rc = st ? st->code : VF_ENOMEM; goto fail; }
    f->next = -1;
    f->need_reopen = !f->info.has_pts; /* the demuxer sits at the end after the scan */
    *out = f;
    return 0;
fail:
    vf_decode_close(f);
    return rc;
}

void vf_decode_close(vf_decode_file *f)
{
    if (!f) return;
    vf_decode_close_input(f);
    vf_decode_scaler_free(f->scaler);
    av_packet_free(&f->pkt);
    av_frame_free(&f->frm);
    free(f->ts);
    free(f->times);
    free(f->keys);
    free(f->path);
    free(f);
}

int vf_decode_set_size(vf_decode_file *f, int out_w, int out_h, vf_status *st)
{
    if (out_w < 1 || out_h < 1 || (int64_t)out_w * out_h > f->o.max_pixels)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "decode: output size %dx%d outside 1..max_pixels=%lld",
                             out_w, out_h, (long long)f->o.max_pixels);
    if (out_w == f->o.out_w && out_h == f->o.out_h) return 0;
    vf_decode_scaler *s = vf_decode_scaler_new(out_w, out_h, f->orient, f->info.sar, f->o.sws_flags,
                                               f->o.threads, st);
    if (!s) return st ? st->code : VF_ENOMEM;
    vf_decode_scaler_free(f->scaler);
    f->scaler = s;
    f->o.out_w = out_w;
    f->o.out_h = out_h;
    return 0;
}

bool vf_decode_transposed(const vf_decode_file *f) { return f->orient.transpose; }

const vf_decode_info *vf_decode_get_info(const vf_decode_file *f) { return &f->info; }
const double *vf_decode_frame_times(const vf_decode_file *f) { return f->times; }
void vf_decode_get_stats(const vf_decode_file *f, vf_decode_stats *out) { *out = f->stats; }
void vf_decode_deadline_extend(vf_decode_file *f, double seconds)
{
    if (f->deadline > 0) f->deadline += seconds;
    f->progress += seconds;
}

bool vf_decode_lost(const vf_decode_file *f, int64_t *from, int64_t *to)
{
    if (f->lost_from < 0) return false;
    *from = f->lost_from;
    *to = f->lost_to;
    return true;
}

void vf_decode_drop(vf_decode_file *f, int64_t from, int64_t to)
{
    if (from < 0) from = 0;
    if (to > f->n) to = f->n;
    if (from >= to) return;
    const int64_t k = to - from;
    memmove(f->ts + from, f->ts + to, (size_t)(f->n - to) * sizeof *f->ts);
    memmove(f->times + from, f->times + to, (size_t)(f->n - to) * sizeof *f->times);
    f->n -= k;
    f->info.nframes = f->n;
    if (f->n > 0) f->info.duration_s = f->times[f->n - 1] + 1 / f->info.fps;
    int64_t j = 0;
    for (int64_t i = 0; i < f->nkeys; i++) {
        if (f->keys[i] >= from && f->keys[i] < to) continue;
        f->keys[j++] = f->keys[i] >= to ? f->keys[i] - k : f->keys[i];
    }
    f->nkeys = j;
    f->next = -1; /* reposition on the next read */
    f->need_reopen = !f->info.has_pts;
    f->lost_from = -1;
}
