/* mkvideo.c — writes test videos whose frames carry their own index in the pixels.
 *
 *   mkvideo -o out.mp4 [-c libx264] [-p yuv420p] [-s 160x120] [-r 30|30000/1001]
 *           [-n 48] [-g 12] [-b 0] [-q Q] [--vfr] [--rotate 90] [--audio]
 *           [--faststart] [--pts-out pts.txt]
 *
 * The picture, in display orientation (after --rotate is applied by a player): a dark
 * grey background (RGB 60), a small orange square moving along the top edge, and in the
 * centre a 4x4 grid of cells in a square of side 0.6 * min(display w, h). Cells, row by
 * row: (0,0) white, (0,3) red, (3,0) and (3,3) black are markers (orientation, channel
 * order, range); the other 12 cells are the bits of the frame index, most significant
 * first, white = 1. Cells are large flat blocks, so the index survives lossy codecs,
 * chroma subsampling and downscaling to ~32 px.
 *
 * -s is the coded size; with --rotate 90/270 the display is h x w. The display matrix
 * is written so that ffmpeg rotates the frame clockwise by the given degrees, and the
 * pixels are stored pre-rotated the other way, so a decoder that honours the matrix
 * sees the upright pattern and one that ignores it does not.
 * --vfr spaces frames irregularly (intervals cycle 1, 0.5, 1.5, 1, 0.75, 1.25 frame
 * periods, millisecond time base); --audio adds a sine audio stream (aac in mp4/mov/mkv,
 * opus in webm, pcm in avi); --pts-out writes each frame's presentation time (s).
 * Exit status: 0 ok, 2 bad usage, 1 libav failure (message on stderr).
 */
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/parseutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cfg {
    const char *out, *codec, *pixfmt, *pts_out;
    int w, h, n, gop, bframes, rotate;
    AVRational fps;
    double q;
    int vfr, audio, faststart;
} cfg;

static void usage(void)
{
    fprintf(stderr, "usage: mkvideo -o OUT [-c codec] [-p pix_fmt] [-s WxH] [-r fps] [-n frames]\n"
                    "               [-g gop] [-b bframes] [-q quality] [--vfr] [--rotate 90|180|270]\n"
                    "               [--audio] [--faststart] [--pts-out FILE]\n");
}

static int die(const char *what, int e)
{
    char buf[128];
    av_strerror(e, buf, sizeof buf);
    fprintf(stderr, "mkvideo: %s: %s\n", what, buf);
    return 1;
}

/* ------------------------------------------------------------ the pattern */

static void fill_rect(uint8_t *img, int W, int H, int x0, int y0, int x1, int y1, const uint8_t c[3])
{
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > W) x1 = W;
    if (y1 > H) y1 = H;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) memcpy(img + ((size_t)y * W + x) * 3, c, 3);
}

/* Draws frame `idx` in display orientation (dw x dh RGB24). */
static void draw(uint8_t *img, int dw, int dh, int idx, int nframes)
{
    static const uint8_t bg[3] = {60, 60, 60}, white[3] = {255, 255, 255}, black[3] = {0, 0, 0},
                         red[3] = {255, 0, 0}, orange[3] = {230, 140, 30};
    fill_rect(img, dw, dh, 0, 0, dw, dh, bg);
    int m = dw < dh ? dw : dh;
    int sq = m / 10 > 2 ? m / 10 : 2;
    int travel = dw - sq > 1 ? dw - sq : 1;
    int sx = (int)((long)idx * 7 % travel);
    (void)nframes;
    fill_rect(img, dw, dh, sx, 1, sx + sq, 1 + sq, orange);
    double G = 0.6 * m, cs = G / 4, gx = (dw - G) / 2, gy = (dh - G) / 2;
    int bit = 11;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) {
            const uint8_t *col;
            if (r == 0 && c == 0) col = white;
            else if (r == 0 && c == 3) col = red;
            else if (r == 3 && (c == 0 || c == 3)) col = black;
            else col = ((idx >> bit--) & 1) ? white : black;
            fill_rect(img, dw, dh, (int)lround(gx + c * cs), (int)lround(gy + r * cs),
                      (int)lround(gx + (c + 1) * cs), (int)lround(gy + (r + 1) * cs), col);
        }
}

/* Display -> coded storage for a clockwise display rotation (the inverse of what the
 * player does: ffmpeg's transpose=clock for 90, hflip+vflip for 180, cclock for 270). */
static void to_coded(const uint8_t *disp, int dw, int dh, uint8_t *coded, int cw, int ch, int rot)
{
    bool tr = rot == 90 || rot == 270;
    bool frow = rot == 90 || rot == 180, fcol = rot == 180 || rot == 270;
    for (int y = 0; y < dh; y++)
        for (int x = 0; x < dw; x++) {
            int r0 = tr ? x : y, c0 = tr ? y : x;
            int row = frow ? ch - 1 - r0 : r0, col = fcol ? cw - 1 - c0 : c0;
            memcpy(coded + ((size_t)row * cw + col) * 3, disp + ((size_t)y * dw + x) * 3, 3);
        }
}

/* ------------------------------------------------------------ encoding */

static int is_jpeg_fmt(enum AVPixelFormat f)
{
    return f == AV_PIX_FMT_YUVJ420P || f == AV_PIX_FMT_YUVJ422P || f == AV_PIX_FMT_YUVJ444P ||
           f == AV_PIX_FMT_YUVJ440P || f == AV_PIX_FMT_YUVJ411P;
}

static int write_pkts(AVFormatContext *oc, AVCodecContext *enc, AVStream *st, AVPacket *pkt)
{
    for (;;) {
        int e = avcodec_receive_packet(enc, pkt);
        if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return 0;
        if (e < 0) return die("encode", e);
        av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
        pkt->stream_index = st->index;
        e = av_interleaved_write_frame(oc, pkt);
        if (e < 0) return die("write", e);
    }
}

static const char *audio_codec_for(const char *fmt)
{
    if (strstr(fmt, "webm")) return "libopus";
    if (strstr(fmt, "avi")) return "pcm_s16le";
    return "aac";
}

static int parse_args(int argc, char **argv, cfg *c)
{
    memset(c, 0, sizeof *c);
    c->w = 160;
    c->h = 120;
    c->n = 48;
    c->gop = 12;
    c->fps = (AVRational){25, 1};
    c->q = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) { usage(); return 2; } i++; } while (0)
        if (!strcmp(a, "-o")) { NEED(); c->out = v; }
        else if (!strcmp(a, "-c")) { NEED(); c->codec = v; }
        else if (!strcmp(a, "-p")) { NEED(); c->pixfmt = v; }
        else if (!strcmp(a, "-s")) { NEED(); if (sscanf(v, "%dx%d", &c->w, &c->h) != 2) { usage(); return 2; } }
        else if (!strcmp(a, "-r")) { NEED(); if (av_parse_ratio(&c->fps, v, 100000, 0, NULL) < 0 || c->fps.num <= 0) { usage(); return 2; } }
        else if (!strcmp(a, "-n")) { NEED(); c->n = atoi(v); }
        else if (!strcmp(a, "-g")) { NEED(); c->gop = atoi(v); }
        else if (!strcmp(a, "-b")) { NEED(); c->bframes = atoi(v); }
        else if (!strcmp(a, "-q")) { NEED(); c->q = atof(v); }
        else if (!strcmp(a, "--rotate")) { NEED(); c->rotate = atoi(v); }
        else if (!strcmp(a, "--pts-out")) { NEED(); c->pts_out = v; }
        else if (!strcmp(a, "--vfr")) c->vfr = 1;
        else if (!strcmp(a, "--audio")) c->audio = 1;
        else if (!strcmp(a, "--faststart")) c->faststart = 1;
        else { usage(); return 2; }
#undef NEED
    }
    if (!c->out || c->w < 1 || c->h < 1 || c->n < 0 || c->n > 4095 ||
        (c->rotate != 0 && c->rotate != 90 && c->rotate != 180 && c->rotate != 270)) {
        usage();
        return 2;
    }
    return 0;
}

/* Frame times in seconds (presentation order). */
static double frame_time(const cfg *c, int i)
{
    double T = av_q2d(av_inv_q(c->fps));
    if (!c->vfr) return i * T;
    static const double cyc[6] = {1, 0.5, 1.5, 1, 0.75, 1.25};
    double t = 0;
    for (int k = 0; k < i; k++) t += cyc[k % 6] * T;
    return t;
}

int main(int argc, char **argv)
{
    cfg c;
    int rc = parse_args(argc, argv, &c);
    if (rc) return rc;
    AVFormatContext *oc = NULL;
    AVCodecContext *enc = NULL, *aenc = NULL;
    AVStream *st = NULL, *ast = NULL;
    AVFrame *fr = NULL, *afr = NULL;
    AVPacket *pkt = av_packet_alloc();
    struct SwsContext *sws = NULL;
    uint8_t *disp = NULL, *coded = NULL;
    FILE *ptsf = NULL;
    int e;

    if ((e = avformat_alloc_output_context2(&oc, NULL, NULL, c.out)) < 0) return die("output format", e);
    const char *fmtname = oc->oformat->name;
    const char *cname = c.codec;
    if (!cname) cname = strstr(fmtname, "webm") ? "libvpx-vp9" : strstr(fmtname, "avi") ? "mpeg4" : "libx264";
    const AVCodec *codec = avcodec_find_encoder_by_name(cname);
    if (!codec) { fprintf(stderr, "mkvideo: no encoder %s\n", cname); return 1; }
    enum AVPixelFormat pf = c.pixfmt ? av_get_pix_fmt(c.pixfmt)
                          : codec->pix_fmts ? codec->pix_fmts[0] : AV_PIX_FMT_YUV420P;
    if (pf == AV_PIX_FMT_NONE) { fprintf(stderr, "mkvideo: unknown pix_fmt %s\n", c.pixfmt); return 2; }

    st = avformat_new_stream(oc, NULL);
    enc = avcodec_alloc_context3(codec);
    if (!st || !enc) return die("alloc", AVERROR(ENOMEM));
    enc->width = c.w;
    enc->height = c.h;
    enc->pix_fmt = pf;
    enc->framerate = c.fps;
    enc->time_base = c.vfr ? (AVRational){1, 1000} : av_inv_q(c.fps);
    enc->gop_size = c.gop;
    enc->max_b_frames = c.bframes;
    enc->sample_aspect_ratio = (AVRational){1, 1};
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(pf);
    bool rgb = desc->flags & AV_PIX_FMT_FLAG_RGB;
    bool gray = desc->nb_components <= 2 && !rgb;
    enc->color_range = is_jpeg_fmt(pf) || rgb ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG;
    enc->colorspace = rgb ? AVCOL_SPC_RGB : AVCOL_SPC_BT470BG;
    enc->color_primaries = AVCOL_PRI_BT470BG;
    enc->color_trc = AVCOL_TRC_SMPTE170M;
    if (!strcmp(cname, "mjpeg")) enc->strict_std_compliance = FF_COMPLIANCE_UNOFFICIAL;
    if (!strcmp(cname, "libx264") || !strcmp(cname, "libx264rgb")) {
        av_opt_set(enc->priv_data, "preset", "veryfast", 0);
        av_opt_set_double(enc->priv_data, "crf", c.q >= 0 ? c.q : 20, 0);
    } else if (strstr(cname, "vpx")) {
        av_opt_set(enc->priv_data, "deadline", "realtime", 0);
        av_opt_set_int(enc->priv_data, "cpu-used", 8, 0);
        av_opt_set_int(enc->priv_data, "crf", c.q >= 0 ? (int)c.q : 30, 0);
        enc->bit_rate = 0;
    } else if (!strcmp(cname, "mpeg4") || !strcmp(cname, "mjpeg") || !strcmp(cname, "msmpeg4")) {
        enc->flags |= AV_CODEC_FLAG_QSCALE;
        enc->global_quality = (int)(FF_QP2LAMBDA * (c.q >= 0 ? c.q : 4));
    }
    if (oc->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if ((e = avcodec_open2(enc, codec, NULL)) < 0) return die("open video encoder", e);
    if ((e = avcodec_parameters_from_context(st->codecpar, enc)) < 0) return die("codecpar", e);
    st->time_base = enc->time_base;
    st->avg_frame_rate = c.fps;
    if (c.rotate) {
        uint8_t *sd = av_stream_new_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, sizeof(int32_t) * 9);
        if (!sd) return die("side data", AVERROR(ENOMEM));
        av_display_rotation_set((int32_t *)sd, c.rotate); /* takes the clockwise angle */
    }

    if (c.audio) {
        const char *an = audio_codec_for(fmtname);
        const AVCodec *ac = avcodec_find_encoder_by_name(an);
        if (!ac) { fprintf(stderr, "mkvideo: no encoder %s\n", an); return 1; }
        ast = avformat_new_stream(oc, NULL);
        aenc = avcodec_alloc_context3(ac);
        if (!ast || !aenc) return die("alloc", AVERROR(ENOMEM));
        aenc->sample_rate = !strcmp(an, "libopus") ? 48000 : 44100;
        aenc->sample_fmt = ac->sample_fmts ? ac->sample_fmts[0] : AV_SAMPLE_FMT_S16;
        av_channel_layout_default(&aenc->ch_layout, 1);
        aenc->bit_rate = 64000;
        aenc->time_base = (AVRational){1, aenc->sample_rate};
        if (oc->oformat->flags & AVFMT_GLOBALHEADER) aenc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
        if ((e = avcodec_open2(aenc, ac, NULL)) < 0) return die("open audio encoder", e);
        if ((e = avcodec_parameters_from_context(ast->codecpar, aenc)) < 0) return die("codecpar", e);
        ast->time_base = aenc->time_base;
    }

    AVDictionary *mopts = NULL;
    if (c.faststart) av_dict_set(&mopts, "movflags", "+faststart", 0);
    if (!(oc->oformat->flags & AVFMT_NOFILE) && (e = avio_open(&oc->pb, c.out, AVIO_FLAG_WRITE)) < 0)
        return die("open output", e);
    if ((e = avformat_write_header(oc, &mopts)) < 0) return die("write header", e);
    av_dict_free(&mopts);

    int cw = c.w, ch = c.h;
    bool tr = c.rotate == 90 || c.rotate == 270;
    int dw = tr ? ch : cw, dh = tr ? cw : ch;
    disp = malloc((size_t)dw * dh * 3);
    coded = malloc((size_t)cw * ch * 3);
    fr = av_frame_alloc();
    if (!disp || !coded || !fr) return die("alloc", AVERROR(ENOMEM));
    fr->format = pf;
    fr->width = cw;
    fr->height = ch;
    if ((e = av_frame_get_buffer(fr, 0)) < 0) return die("frame buffer", e);
    enum AVPixelFormat sws_dst = pf;
    int full = enc->color_range == AVCOL_RANGE_JPEG;
    if (pf == AV_PIX_FMT_YUVJ420P) sws_dst = AV_PIX_FMT_YUV420P;
    else if (pf == AV_PIX_FMT_YUVJ422P) sws_dst = AV_PIX_FMT_YUV422P;
    else if (pf == AV_PIX_FMT_YUVJ444P) sws_dst = AV_PIX_FMT_YUV444P;
    sws = sws_getContext(cw, ch, AV_PIX_FMT_RGB24, cw, ch, sws_dst, SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL, NULL);
    if (!sws) { fprintf(stderr, "mkvideo: cannot convert rgb24 to %s\n", av_get_pix_fmt_name(pf)); return 1; }
    sws_setColorspaceDetails(sws, sws_getCoefficients(SWS_CS_ITU601), 1, sws_getCoefficients(SWS_CS_ITU601),
                             full, 0, 1 << 16, 1 << 16);
    (void)gray;
    if (c.pts_out && !(ptsf = fopen(c.pts_out, "w"))) { perror(c.pts_out); return 1; }

    int64_t asamples = 0;
    for (int i = 0; i <= c.n; i++) {
        double tv = frame_time(&c, i); /* i == n: the end of the last frame */
        /* audio up to this frame's time, so the muxer interleaves */
        while (aenc && asamples < (int64_t)(tv * aenc->sample_rate)) {
            int fs = aenc->frame_size > 0 ? aenc->frame_size : 1024;
            afr = av_frame_alloc();
            afr->format = aenc->sample_fmt;
            afr->nb_samples = fs;
            av_channel_layout_copy(&afr->ch_layout, &aenc->ch_layout);
            afr->sample_rate = aenc->sample_rate;
            if ((e = av_frame_get_buffer(afr, 0)) < 0) return die("audio buffer", e);
            for (int k = 0; k < fs; k++) {
                double s = 0.2 * sin(2 * M_PI * 440 * (asamples + k) / aenc->sample_rate);
                if (afr->format == AV_SAMPLE_FMT_FLTP || afr->format == AV_SAMPLE_FMT_FLT) ((float *)afr->data[0])[k] = (float)s;
                else ((int16_t *)afr->data[0])[k] = (int16_t)(s * 32767);
            }
            afr->pts = asamples;
            asamples += fs;
            if ((e = avcodec_send_frame(aenc, afr)) < 0) return die("encode audio", e);
            av_frame_free(&afr);
            if (write_pkts(oc, aenc, ast, pkt)) return 1;
        }
        if (i == c.n) break;
        draw(disp, dw, dh, i, c.n);
        if (c.rotate) to_coded(disp, dw, dh, coded, cw, ch, c.rotate);
        else memcpy(coded, disp, (size_t)cw * ch * 3);
        if ((e = av_frame_make_writable(fr)) < 0) return die("frame writable", e);
        const uint8_t *src[4] = {coded, NULL, NULL, NULL};
        int sstr[4] = {cw * 3, 0, 0, 0};
        sws_scale(sws, src, sstr, 0, ch, fr->data, fr->linesize);
        fr->pts = c.vfr ? llround(tv * 1000) : i;
        fr->color_range = enc->color_range;
        fr->colorspace = enc->colorspace;
        if (ptsf) fprintf(ptsf, "%.6f\n", c.vfr ? fr->pts / 1000.0 : tv);
        if ((e = avcodec_send_frame(enc, fr)) < 0) return die("encode video", e);
        if (write_pkts(oc, enc, st, pkt)) return 1;
    }
    avcodec_send_frame(enc, NULL);
    if (write_pkts(oc, enc, st, pkt)) return 1;
    if (aenc) {
        avcodec_send_frame(aenc, NULL);
        if (write_pkts(oc, aenc, ast, pkt)) return 1;
    }
    if ((e = av_write_trailer(oc)) < 0) return die("trailer", e);
    if (ptsf) fclose(ptsf);
    if (!(oc->oformat->flags & AVFMT_NOFILE)) avio_closep(&oc->pb);
    sws_freeContext(sws);
    av_frame_free(&fr);
    avcodec_free_context(&enc);
    avcodec_free_context(&aenc);
    avformat_free_context(oc);
    av_packet_free(&pkt);
    free(disp);
    free(coded);
    return 0;
}
