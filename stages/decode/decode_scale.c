/* decode_scale.c — decoded frame -> (H, W, 3) RGB clip frame.
 *
 * The output covers the display image (resize keeping the aspect so the target is
 * filled, then centre crop). We crop first, in source pixels, and scale only the kept
 * rectangle: the same picture as ffmpeg's `scale=...:force_original_aspect_ratio=
 * increase,crop=W:H` up to rounding of the crop edges, for less work. Rotation and
 * mirroring from the display matrix are applied to the small RGB result, which is
 * cheap at training resolutions. Colour matrix and range come from each frame (full
 * range for yuvj* and JPEG-range frames), so any pixel format decodes to the same RGB.
 */
#include "stages/decode/decode_scale.h"

#include <libavutil/display.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <string.h>

struct vf_decode_scaler {
    int out_w, out_h;       /* final output */
    int tw, th;             /* scaler output: output before orientation */
    vf_decode_orient orient;
    double sar;
    int sws_flags, threads;
    struct SwsContext *sws;
    /* key of the cached sws context */
    int src_w, src_h, src_fmt, src_range, src_cs;
    uint8_t *tmp;           /* (th, tw, 3) when the orientation is not identity */
};

void vf_decode_orient_from_matrix(const int32_t *m, vf_decode_orient *o)
{
    memset(o, 0, sizeof *o);
    if (!m) return;
    /* Mirrors ffmpeg 5.1 fftools: theta = -rotation_get, normalised to [0, 360). */
    double theta = -round(av_display_rotation_get(m));
    if (isnan(theta)) return;
    theta -= 360 * floor(theta / 360 + 0.9 / 360);
    int q = (int)lround(theta / 90) % 4;
    switch (q) {
    case 1: /* transpose=clock, or cclock_flip when mirrored */
        if (m[3] > 0) { o->transpose = true; o->flipped = true; }
        else { o->transpose = true; o->flip_row = true; }
        o->rotation = 90;
        break;
    case 2:
        o->flip_col = m[0] < 0;   /* hflip */
        o->flip_row = m[4] < 0;   /* vflip */
        o->rotation = 180;
        o->flipped = o->flip_col != o->flip_row;
        break;
    case 3: /* transpose=cclock, or clock_flip when mirrored */
        if (m[3] < 0) { o->transpose = true; o->flip_row = true; o->flip_col = true; o->flipped = true; }
        else { o->transpose = true; o->flip_col = true; }
        o->rotation = 270;
        break;
    default:
        o->flip_row = m[4] < 0;   /* vflip */
        o->flipped = o->flip_row;
        break;
    }
}

void vf_decode_crop_rect(int w, int h, int out_w, int out_h, vf_decode_orient orient,
                         double sar, int *x0, int *y0, int *cw, int *ch)
{
    /* Target size in source orientation. */
    int tw = orient.transpose ? out_h : out_w, th = orient.transpose ? out_w : out_h;
    if (!(sar > 0)) sar = 1;
    /* Scale from physical source units (w*sar x h) that makes the image cover tw x th. */
    double sx = tw / (w * sar), sy = (double)th / h;
    double s = sx > sy ? sx : sy;
    long c_w = lround(tw / (s * sar)), c_h = lround(th / s);
    if (c_w < 1) c_w = 1;
    if (c_h < 1) c_h = 1;
    if (c_w > w) c_w = w;
    if (c_h > h) c_h = h;
    *cw = (int)c_w;
    *ch = (int)c_h;
    *x0 = (w - *cw) / 2;
    *y0 = (h - *ch) / 2;
}

vf_decode_scaler *vf_decode_scaler_new(int out_w, int out_h, vf_decode_orient orient,
                                       double sar, int sws_flags, int threads,
                                       vf_status *st)
{
    int rc = 0;
    vf_decode_scaler *s = vf_calloc(sizeof *s, st);
    if (!s) return NULL;
    s->out_w = out_w;
    s->out_h = out_h;
    s->orient = orient;
    s->tw = orient.transpose ? out_h : out_w;
    s->th = orient.transpose ? out_w : out_h;
    s->sar = sar > 0 ? sar : 1;
    s->sws_flags = sws_flags;
    s->threads = threads < 1 ? 1 : threads;
    s->src_fmt = AV_PIX_FMT_NONE;
    if (orient.transpose || orient.flip_row || orient.flip_col) {
        s->tmp = vf_alloc((size_t)out_w * out_h * 3, st);
        if (!s->tmp) VF_FAIL(st, VF_ENOMEM, "decode: scaler scratch %dx%d", out_w, out_h);
    }
    return s;
fail:
    (void)rc;
    vf_decode_scaler_free(s);
    return NULL;
}

void vf_decode_scaler_free(vf_decode_scaler *s)
{
    if (!s) return;
    sws_freeContext(s->sws);
    vf_free(s->tmp);
    vf_free(s);
}

/* yuvj* are the deprecated full-range aliases: swscale wants the plain format plus an
 * explicit range (it warns otherwise). */
static enum AVPixelFormat unjpeg(enum AVPixelFormat f, int *full)
{
    switch (f) {
    case AV_PIX_FMT_YUVJ420P: *full = 1; return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P: *full = 1; return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P: *full = 1; return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P: *full = 1; return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P: *full = 1; return AV_PIX_FMT_YUV411P;
    default: return f;
    }
}

static int ensure_sws(vf_decode_scaler *s, int w, int h, enum AVPixelFormat fmt, int range,
                      int cs, vf_status *st)
{
    int rc = 0;
    if (s->sws && s->src_w == w && s->src_h == h && s->src_fmt == (int)fmt &&
        s->src_range == range && s->src_cs == cs)
        return 0;
    sws_freeContext(s->sws);
    s->sws = sws_alloc_context();
    if (!s->sws) VF_FAIL(st, VF_ENOMEM, "decode: sws_alloc_context failed");
    av_opt_set_int(s->sws, "srcw", w, 0);
    av_opt_set_int(s->sws, "srch", h, 0);
    av_opt_set_int(s->sws, "src_format", fmt, 0);
    av_opt_set_int(s->sws, "dstw", s->tw, 0);
    av_opt_set_int(s->sws, "dsth", s->th, 0);
    av_opt_set_int(s->sws, "dst_format", AV_PIX_FMT_RGB24, 0);
    av_opt_set_int(s->sws, "sws_flags", s->sws_flags, 0);
    av_opt_set_int(s->sws, "src_range", range, 0);
    av_opt_set_int(s->sws, "dst_range", 1, 0);
    /* Slice threads exist from libswscale 6.1 (FFmpeg 5.0); older ones lack the option. */
    av_opt_set_int(s->sws, "threads", s->threads, 0);
    int e = sws_init_context(s->sws, NULL, NULL);
    if (e < 0) {
        sws_freeContext(s->sws);
        s->sws = NULL;
        VF_FAIL(st, VF_EBADINPUT, "cannot convert pixel format %s at %dx%d to RGB",
                av_get_pix_fmt_name(fmt) ? av_get_pix_fmt_name(fmt) : "?", w, h);
    }
    const int *coef = sws_getCoefficients(cs);
    sws_setColorspaceDetails(s->sws, coef, range, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0,
                             1 << 16, 1 << 16);
    s->src_w = w;
    s->src_h = h;
    s->src_fmt = fmt;
    s->src_range = range;
    s->src_cs = cs;
    return 0;
fail:
    return rc;
}

static void orient_copy(const vf_decode_scaler *s, const uint8_t *src, uint8_t *dst)
{
    const int tw = s->tw, th = s->th;
    const vf_decode_orient o = s->orient;
    for (int y = 0; y < s->out_h; y++) {
        uint8_t *d = dst + (size_t)y * s->out_w * 3;
        for (int x = 0; x < s->out_w; x++) {
            int r0 = o.transpose ? x : y, c0 = o.transpose ? y : x;
            int row = o.flip_row ? th - 1 - r0 : r0;
            int col = o.flip_col ? tw - 1 - c0 : c0;
            const uint8_t *p = src + ((size_t)row * tw + col) * 3;
            d[3 * x] = p[0];
            d[3 * x + 1] = p[1];
            d[3 * x + 2] = p[2];
        }
    }
}

int vf_decode_scaler_run(vf_decode_scaler *s, AVFrame *f, uint8_t *dst, vf_status *st)
{
    int rc = 0;
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(f->format);
    if (!desc || (desc->flags & AV_PIX_FMT_FLAG_HWACCEL))
        VF_FAIL(st, VF_EBADINPUT, "decoded frame has no usable pixel format (%d)", f->format);
    double sar = s->sar;
    int x0, y0, cw, ch;
    vf_decode_crop_rect(f->width, f->height, s->out_w, s->out_h, s->orient, sar, &x0, &y0, &cw, &ch);
    if (!(desc->flags & AV_PIX_FMT_FLAG_BITSTREAM)) {
        /* Moves the data pointers onto the kept rectangle (chroma offsets round down
         * for subsampled formats: at most half a source pixel). */
        f->crop_left = x0;
        f->crop_top = y0;
        f->crop_right = f->width - cw - x0;
        f->crop_bottom = f->height - ch - y0;
        if (av_frame_apply_cropping(f, AV_FRAME_CROP_UNALIGNED) < 0)
            VF_FAIL(st, VF_EBADINPUT, "cannot crop a %dx%d %s frame", f->width, f->height,
                    desc->name);
    }
    int full = f->color_range == AVCOL_RANGE_JPEG;
    enum AVPixelFormat fmt = unjpeg(f->format, &full);
    if (desc->flags & AV_PIX_FMT_FLAG_RGB) full = 1;
    int cs = f->colorspace;
    if (cs == AVCOL_SPC_BT2020_CL) cs = AVCOL_SPC_BT2020_NCL;
    VF_TRY(ensure_sws(s, f->width, f->height, fmt, full, cs, st));
    uint8_t *out = s->tmp ? s->tmp : dst;
    uint8_t *planes[4] = {out, NULL, NULL, NULL};
    int strides[4] = {s->tw * 3, 0, 0, 0};
    int h = sws_scale(s->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height,
                      planes, strides);
    if (h != s->th)
        VF_FAIL(st, VF_EBADINPUT, "scaling a %dx%d %s frame failed", f->width, f->height,
                desc->name);
    if (s->tmp) orient_copy(s, s->tmp, dst);
    return 0;
fail:
    return rc;
}

int64_t vf_decode_scaler_bytes(int out_w, int out_h, int64_t max_src_w)
{
    /* Scratch + swscale's line buffers and filter tables: a few dozen lines of the
     * widest side in 32-bit samples per plane, bounded generously. */
    int64_t wide = max_src_w > out_w ? max_src_w : out_w;
    return (int64_t)out_w * out_h * 3 + 4 * 64 * wide * 4 * 4 + (1 << 20);
}
