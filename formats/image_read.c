/* image_read.c — one still image as RGB24 through libavformat/libavcodec/libswscale
 * (contract in image_read.h).
 *
 * libavformat's image demuxers probe the file by content, so a PNG named .jpg still
 * reads; the first decoded frame is the picture. Conversion to RGB24 keeps the size
 * (swscale with equal source and destination sizes only converts the pixel format).
 */
#include "formats/image_read.h"

#include <errno.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *av_msg(int err, char *buf, size_t n)
{
    av_strerror(err, buf, n);
    return buf;
}

/* The first frame of stream si, decoded into fr. */
static int first_frame(const char *path, AVFormatContext *fc, AVCodecContext *dc, int si, AVPacket *pkt, AVFrame *fr,
                       vf_status *st)
{
    char eb[128];
    int r;
    while ((r = av_read_frame(fc, pkt)) >= 0) {
        if (pkt->stream_index == si) {
            r = avcodec_send_packet(dc, pkt);
            av_packet_unref(pkt);
            if (r < 0) break;
            r = avcodec_receive_frame(dc, fr);
            if (r == 0) return 0;
            if (r != AVERROR(EAGAIN)) break;
        } else {
            av_packet_unref(pkt);
        }
    }
    if (r == AVERROR_EOF || r >= 0) { /* a decoder that holds the frame until flushed */
        avcodec_send_packet(dc, NULL);
        if ((r = avcodec_receive_frame(dc, fr)) == 0) return 0;
    }
    return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: no picture could be decoded: %s", path,
                         av_msg(r, eb, sizeof eb));
}

int vf_image_read(const char *path, uint8_t **rgb, int *width, int *height, vf_status *st)
{
    int rc = 0, r;
    char eb[128];
    AVFormatContext *fc = NULL;
    AVCodecContext *dc = NULL;
    AVPacket *pkt = NULL;
    AVFrame *fr = NULL;
    struct SwsContext *sws = NULL;
    uint8_t *out = NULL;
    struct stat sb;
    *rgb = NULL;
    if (stat(path, &sb) != 0) VF_FAIL(st, VF_EBADINPUT, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) VF_FAIL(st, VF_EBADINPUT, "%s: not a regular file", path);
    if ((r = avformat_open_input(&fc, path, NULL, NULL)) < 0)
        VF_FAIL(st, VF_EBADINPUT, "%s: not an image libav reads: %s", path, av_msg(r, eb, sizeof eb));
    if ((r = avformat_find_stream_info(fc, NULL)) < 0)
        VF_FAIL(st, VF_EBADINPUT, "%s: not an image libav reads: %s", path, av_msg(r, eb, sizeof eb));
    const AVCodec *codec = NULL;
    int si = av_find_best_stream(fc, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (si < 0 || !codec) VF_FAIL(st, VF_EBADINPUT, "%s: holds no picture", path);
    if (!(dc = avcodec_alloc_context3(codec)) || !(pkt = av_packet_alloc()) || !(fr = av_frame_alloc()))
        VF_FAIL(st, VF_ENOMEM, "%s: out of memory", path);
    if ((r = avcodec_parameters_to_context(dc, fc->streams[si]->codecpar)) < 0 || (r = avcodec_open2(dc, codec, NULL)) < 0)
        VF_FAIL(st, VF_EBADINPUT, "%s: cannot open its decoder: %s", path, av_msg(r, eb, sizeof eb));
    VF_TRY(first_frame(path, fc, dc, si, pkt, fr, st));
    int w = fr->width, h = fr->height;
    if (w <= 0 || h <= 0 || (int64_t)w * h > VF_IMAGE_MAX_PIXELS)
        VF_FAIL(st, VF_EBADINPUT, "%s: picture of %dx%d pixels (at most %d in all)", path, w, h, VF_IMAGE_MAX_PIXELS);
    if (!(out = malloc((size_t)w * (size_t)h * 3))) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", path);
    if (fr->format == AV_PIX_FMT_RGB24) { /* the common PNG: the bytes as they are */
        for (int y = 0; y < h; y++) memcpy(out + (size_t)y * w * 3, fr->data[0] + (size_t)y * fr->linesize[0], (size_t)w * 3);
    } else {
        sws = sws_getContext(w, h, fr->format, w, h, AV_PIX_FMT_RGB24,
                             SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL, NULL);
        const char *pf = av_get_pix_fmt_name(fr->format);
        if (!sws) VF_FAIL(st, VF_EBADINPUT, "%s: pixel format %s cannot become RGB", path, pf ? pf : "?");
        uint8_t *dst[4] = {out, NULL, NULL, NULL};
        int dls[4] = {w * 3, 0, 0, 0};
        if (sws_scale(sws, (const uint8_t *const *)fr->data, fr->linesize, 0, h, dst, dls) != h)
            VF_FAIL(st, VF_EBADINPUT, "%s: converting to RGB failed", path);
    }
    *rgb = out, *width = w, *height = h;
    out = NULL;
fail:
    free(out);
    sws_freeContext(sws);
    av_frame_free(&fr);
    av_packet_free(&pkt);
    avcodec_free_context(&dc);
    avformat_close_input(&fc);
    return rc;
}
