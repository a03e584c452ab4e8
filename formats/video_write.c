/* video_write.c — RGB frames to a video file and RGB images to PNG through libav
 * (contract in video_write.h).
 *
 * The encode loop follows libavcodec's send/receive state machine: each frame sent is
 * followed by draining every packet the encoder has ready, and closing sends the flush
 * frame (NULL) and drains until AVERROR_EOF. Packet times are rescaled from the encoder's
 * time base to the stream's, which the muxer may change in avformat_write_header.
 */
#include "formats/video_write.h"

#include <errno.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct vf_video_writer {
    char *path, *part;
    AVFormatContext *oc;
    AVCodecContext *enc;
    AVStream *vs;
    AVFrame *frame;
    AVPacket *pkt;
    struct SwsContext *sws;
    uint8_t *rgb;  /* the frame being converted, with RGB_PAD zero bytes after it */
    int width, height;
    int64_t next_pts;
    int header_written;
};

/* swscale's SIMD RGB readers load 16 bytes at a time and run past the end of the last
 * row; reading the caller's neighbouring memory made the encoded video depend on it. */
#define RGB_PAD 64

static const char *av_msg(int err, char *buf, size_t n)
{
    av_strerror(err, buf, n);
    return buf;
}

/* drains every packet the encoder has ready into the muxer */
static int drain(vf_video_writer *w, vf_status *st)
{
    int rc = 0;
    char eb[128];
    for (;;) {
        int r = avcodec_receive_packet(w->enc, w->pkt);
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return 0;
        if (r < 0) VF_FAIL(st, VF_EEXTERNAL, "%s: encoding failed: %s", w->path, av_msg(r, eb, sizeof eb));
        av_packet_rescale_ts(w->pkt, w->enc->time_base, w->vs->time_base);
        w->pkt->stream_index = w->vs->index;
        r = av_interleaved_write_frame(w->oc, w->pkt); /* takes the packet's reference */
        if (r < 0) VF_FAIL(st, VF_EIO, "%s: cannot write: %s", w->path, av_msg(r, eb, sizeof eb));
    }
fail:
    av_packet_unref(w->pkt);
    return rc;
}

static const AVCodec *pick_encoder(const char *name)
{
    if (name) return avcodec_find_encoder_by_name(name);
    const AVCodec *c = avcodec_find_encoder_by_name("libx264");
    return c ? c : avcodec_find_encoder(AV_CODEC_ID_MPEG4);
}

int vf_video_open(const vf_video_opts *o, vf_video_writer **out, vf_status *st)
{
    int rc = 0;
    char eb[128];
    *out = NULL;
    if (!o->path || !o->path[0]) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "video: no output path");
    if (o->width <= 0 || o->height <= 0 || (o->width | o->height) & 1)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: frame size %dx%d: width and height must be even and positive (yuv420p)",
                             o->path, o->width, o->height);
    if (!(o->fps > 0) || !isfinite(o->fps) || o->fps > 1000)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: fps %g is not in (0, 1000]", o->path,
                             o->fps);
    /* encoders report their settings and statistics at info level (libx264: a dozen lines
     * a file); a worker's log keeps warnings and errors */
    if (av_log_get_level() > AV_LOG_WARNING) av_log_set_level(AV_LOG_WARNING);
    const AVOutputFormat *fmt = av_guess_format(NULL, o->path, NULL);
    if (!fmt)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "%s: no container for this file name's extension (use .mp4, .mkv, .avi, …)", o->path);
    const AVCodec *codec = pick_encoder(o->codec);
    if (!codec)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: libavcodec has no encoder '%s'", o->path,
                             o->codec ? o->codec : "mpeg4");
    vf_video_writer *w = calloc(1, sizeof *w);
    if (!w) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "video: out of memory");
    w->width = o->width, w->height = o->height;
    size_t n = strlen(o->path);
    w->path = strdup(o->path);
    w->part = malloc(n + 6);
    if (!w->path || !w->part) VF_FAIL(st, VF_ENOMEM, "video: out of memory");
    snprintf(w->part, n + 6, "%s.part", o->path);

    int r = avformat_alloc_output_context2(&w->oc, fmt, NULL, w->part);
    if (r < 0 || !w->oc) VF_FAIL(st, VF_EEXTERNAL, "%s: %s", o->path, av_msg(r, eb, sizeof eb));
    w->enc = avcodec_alloc_context3(codec);
    w->frame = av_frame_alloc();
    w->pkt = av_packet_alloc();
    if (!w->enc || !w->frame || !w->pkt) VF_FAIL(st, VF_ENOMEM, "video: out of memory");
    AVRational rate = av_d2q(o->fps, 1001000);
    w->enc->width = o->width;
    w->enc->height = o->height;
    w->enc->pix_fmt = AV_PIX_FMT_YUV420P;
    w->enc->framerate = rate;
    w->enc->time_base = av_inv_q(rate);
    w->enc->gop_size = 12;
    w->enc->thread_count = 1; /* one sample at a time; the worker's other threads do the rest */
    if (codec->id == AV_CODEC_ID_H264) {
        av_opt_set(w->enc->priv_data, "crf", "18", 0);
        av_opt_set(w->enc->priv_data, "preset", "medium", 0);
    } else if (codec->id == AV_CODEC_ID_MPEG4) {
        w->enc->flags |= AV_CODEC_FLAG_QSCALE;
        w->enc->global_quality = FF_QP2LAMBDA * 3;
    }
    if (w->oc->oformat->flags & AVFMT_GLOBALHEADER) w->enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if ((r = avcodec_open2(w->enc, codec, NULL)) < 0)
        VF_FAIL(st, VF_EEXTERNAL, "%s: cannot open encoder %s: %s", o->path, codec->name, av_msg(r, eb, sizeof eb));
    w->vs = avformat_new_stream(w->oc, NULL);
    if (!w->vs) VF_FAIL(st, VF_ENOMEM, "video: out of memory");
    w->vs->time_base = w->enc->time_base;
    w->vs->avg_frame_rate = rate;
    if ((r = avcodec_parameters_from_context(w->vs->codecpar, w->enc)) < 0)
        VF_FAIL(st, VF_EEXTERNAL, "%s: %s", o->path, av_msg(r, eb, sizeof eb));
    if ((r = avio_open(&w->oc->pb, w->part, AVIO_FLAG_WRITE)) < 0)
        VF_FAIL(st, VF_EIO, "%s: cannot create: %s", w->part, av_msg(r, eb, sizeof eb));
    if ((r = avformat_write_header(w->oc, NULL)) < 0)
        VF_FAIL(st, VF_EIO, "%s: cannot write the header: %s", o->path, av_msg(r, eb, sizeof eb));
    w->header_written = 1;

    w->frame->format = AV_PIX_FMT_YUV420P;
    w->frame->width = o->width;
    w->frame->height = o->height;
    if ((r = av_frame_get_buffer(w->frame, 0)) < 0) VF_FAIL(st, VF_ENOMEM, "video: out of memory");
    w->sws = sws_getContext(o->width, o->height, AV_PIX_FMT_RGB24, o->width, o->height, AV_PIX_FMT_YUV420P,
                            SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, NULL, NULL, NULL);
    if (!w->sws) VF_FAIL(st, VF_EEXTERNAL, "%s: cannot set up RGB -> yuv420p conversion", o->path);
    if (!(w->rgb = calloc((size_t)o->width * (size_t)o->height * 3 + RGB_PAD, 1)))
        VF_FAIL(st, VF_ENOMEM, "video: out of memory");
    *out = w;
    return 0;
fail:
    vf_video_free(w);
    return rc;
}

int vf_video_add(vf_video_writer *w, const uint8_t *rgb, vf_status *st)
{
    int rc = 0;
    char eb[128];
    int r = av_frame_make_writable(w->frame);
    if (r < 0) VF_FAIL(st, VF_ENOMEM, "video: out of memory");
    memcpy(w->rgb, rgb, (size_t)w->width * (size_t)w->height * 3);
    const uint8_t *src[1] = {w->rgb};
    const int stride[1] = {3 * w->width};
    sws_scale(w->sws, src, stride, 0, w->height, w->frame->data, w->frame->linesize);
    w->frame->pts = w->next_pts++;
    if ((r = avcodec_send_frame(w->enc, w->frame)) < 0)
        VF_FAIL(st, VF_EEXTERNAL, "%s: encoding failed: %s", w->path, av_msg(r, eb, sizeof eb));
    VF_TRY(drain(w, st));
fail:
    return rc;
}

int vf_video_close(vf_video_writer *w, vf_status *st)
{
    int rc = 0;
    char eb[128];
    int r = avcodec_send_frame(w->enc, NULL);
    if (r < 0 && r != AVERROR_EOF) VF_FAIL(st, VF_EEXTERNAL, "%s: flushing the encoder: %s", w->path, av_msg(r, eb, sizeof eb));
    VF_TRY(drain(w, st));
    if ((r = av_write_trailer(w->oc)) < 0) VF_FAIL(st, VF_EIO, "%s: cannot write: %s", w->path, av_msg(r, eb, sizeof eb));
    w->header_written = 0;
    avio_flush(w->oc->pb);
    if (w->oc->pb->error < 0)
        VF_FAIL(st, VF_EIO, "%s: cannot write: %s", w->path, av_msg(w->oc->pb->error, eb, sizeof eb));
    r = avio_closep(&w->oc->pb);
    if (r < 0) VF_FAIL(st, VF_EIO, "%s: cannot write: %s", w->path, av_msg(r, eb, sizeof eb));
    if (rename(w->part, w->path) != 0) VF_FAIL(st, VF_EIO, "%s: cannot rename into place: %s", w->path, strerror(errno));
    free(w->part);
    w->part = NULL; /* nothing left to remove */
fail:
    vf_video_free(w);
    return rc;
}

void vf_video_free(vf_video_writer *w)
{
    if (!w) return;
    if (w->oc) {
        if (w->oc->pb) avio_closep(&w->oc->pb);
        avformat_free_context(w->oc);
    }
    if (w->part) unlink(w->part);
    avcodec_free_context(&w->enc);
    av_frame_free(&w->frame);
    av_packet_free(&w->pkt);
    sws_freeContext(w->sws);
    free(w->rgb);
    free(w->path);
    free(w->part);
    free(w);
}

const char *vf_video_codec(const vf_video_writer *w) { return w->enc->codec->name; }

int vf_png_write(const char *path, const uint8_t *rgb, int width, int height, vf_status *st)
{
    int rc = 0;
    char eb[128], *part = NULL;
    FILE *f = NULL;
    AVCodecContext *enc = NULL;
    AVFrame *fr = NULL;
    AVPacket *pkt = NULL;
    if (width <= 0 || height <= 0 || width > 1 << 15 || height > 1 << 15)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: image size %dx%d", path, width, height);
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
    if (!codec) return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "%s: libavcodec has no PNG encoder", path);
    enc = avcodec_alloc_context3(codec);
    fr = av_frame_alloc();
    pkt = av_packet_alloc();
    size_t n = strlen(path);
    part = malloc(n + 6);
    if (!enc || !fr || !pkt || !part) VF_FAIL(st, VF_ENOMEM, "png: out of memory");
    snprintf(part, n + 6, "%s.part", path);
    enc->width = width, enc->height = height, enc->pix_fmt = AV_PIX_FMT_RGB24;
    enc->time_base = (AVRational){1, 1};
    int r = avcodec_open2(enc, codec, NULL);
    if (r < 0) VF_FAIL(st, VF_EEXTERNAL, "%s: cannot open the PNG encoder: %s", path, av_msg(r, eb, sizeof eb));
    fr->format = AV_PIX_FMT_RGB24, fr->width = width, fr->height = height;
    if (av_frame_get_buffer(fr, 0) < 0) VF_FAIL(st, VF_ENOMEM, "png: out of memory");
    for (int y = 0; y < height; y++) memcpy(fr->data[0] + (size_t)y * fr->linesize[0], rgb + (size_t)y * width * 3, (size_t)width * 3);
    if ((r = avcodec_send_frame(enc, fr)) < 0 || (r = avcodec_receive_packet(enc, pkt)) < 0)
        VF_FAIL(st, VF_EEXTERNAL, "%s: PNG encoding failed: %s", path, av_msg(r, eb, sizeof eb));
    if (!(f = fopen(part, "wb"))) VF_FAIL(st, VF_EIO, "%s: cannot create: %s", part, strerror(errno));
    if (fwrite(pkt->data, 1, (size_t)pkt->size, f) != (size_t)pkt->size || fflush(f) != 0) {
        int e = errno;
        VF_FAIL(st, VF_EIO, "%s: cannot write: %s", path, strerror(e));
    }
    int e = fclose(f);
    f = NULL;
    if (e != 0) VF_FAIL(st, VF_EIO, "%s: cannot write: %s", path, strerror(errno));
    if (rename(part, path) != 0) VF_FAIL(st, VF_EIO, "%s: cannot rename into place: %s", path, strerror(errno));
    free(part);
    part = NULL;
fail:
    if (f) fclose(f);
    if (part) unlink(part);
    free(part);
    avcodec_free_context(&enc);
    av_frame_free(&fr);
    av_packet_free(&pkt);
    return rc;
}

void vf_video_rgb_from_float(const float *x, int T, int H, int W, int t, uint8_t *rgb)
{
    const size_t plane = (size_t)T * H * W, off = (size_t)t * H * W;
    for (size_t i = 0; i < (size_t)H * W; i++)
        for (int c = 0; c < 3; c++) {
            float v = (x[c * plane + off + i] + 1.0f) * 127.5f;
            v = v < 0 ? 0 : v > 255 ? 255 : v;
            if (v != v) v = 0; /* NaN passes both comparisons */
            rgb[3 * i + c] = (uint8_t)lrintf(v);
        }
}
