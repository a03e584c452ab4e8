/* decode_scale.h — frame geometry of the decode stage: display orientation from the
 * stream's display matrix, cover-resize + centre crop, pixel format conversion to RGB24
 * with libswscale. Internal to stages/decode_*.c.
 */
#ifndef VF_DECODE_SCALE_H
#define VF_DECODE_SCALE_H
#include <libavutil/frame.h>
#include "runtime/vflow.h"

/* How a decoded image maps onto the display: out(x, y) = in(row, col) with
 * (r0, c0) = transpose ? (x, y) : (y, x), row = flip_row ? h-1-r0 : r0,
 * col = flip_col ? w-1-c0 : c0 — the same table ffmpeg's autorotate uses. */
typedef struct vf_decode_orient {
    bool transpose, flip_row, flip_col;
    int rotation;   /* clockwise degrees, for reports */
    bool flipped;   /* a mirror on top of the rotation */
} vf_decode_orient;

/* From a 3x3 display matrix (AV_PKT_DATA_DISPLAYMATRIX; NULL = identity). Angles that
 * are not a multiple of 90 degrees are rounded to the nearest one. */
void vf_decode_orient_from_matrix(const int32_t *matrix, vf_decode_orient *o);

typedef struct vf_decode_scaler vf_decode_scaler;

/* A scaler producing (out_h, out_w, 3) RGB frames in display orientation. sar: sample
 * aspect ratio of the source pixels (1 if unknown). threads: libswscale slice threads.
 * Caller owns the result (vf_decode_scaler_free). NULL and st set on failure. */
vf_decode_scaler *vf_decode_scaler_new(int out_w, int out_h, vf_decode_orient orient,
                                       double sar, int sws_flags, int threads,
                                       vf_status *st);
void vf_decode_scaler_free(vf_decode_scaler *s);

/* Converts frame (any software pixel format, any size) into dst (out_h*out_w*3 bytes,
 * caller-owned). The frame's data pointers are cropped in place (its buffers are not
 * touched), so the caller unrefs it afterwards as usual. */
int vf_decode_scaler_run(vf_decode_scaler *s, AVFrame *frame, uint8_t *dst, vf_status *st);

/* Source rectangle (in decoded pixels) the output covers, for a w x h frame. */
void vf_decode_crop_rect(int w, int h, int out_w, int out_h, vf_decode_orient orient,
                         double sar, int *x0, int *y0, int *cw, int *ch);

/* Heap bytes a scaler holds at most (rotation scratch + libswscale state estimate). */
int64_t vf_decode_scaler_bytes(int out_w, int out_h, int64_t max_src_w);
#endif
