/* video_write.h — writes RGB frames as a video file (mp4, mkv, avi, … by the name's
 * extension) through libavcodec, and single RGB images as PNG.
 *
 * The codec is H.264 (libx264, CRF 18) where libavcodec has that encoder, else MPEG-4
 * part 2 at a fixed quantiser of 3; `codec` in the options names another encoder. Frames
 * are packed RGB24 rows of `width` pixels; they are converted to yuv420p with accurate
 * rounding, so width and height must be even. The file appears only when complete: it is
 * written as "<path>.part" and renamed by vf_video_close, which also reports a write that
 * failed late (a full disk shows up when the muxer flushes or at the trailer); a writer
 * freed without vf_video_close removes its partial file.
 *
 * Ownership: a vf_video_writer owns its libav contexts and the partial file until
 * vf_video_close or vf_video_free; frames passed to vf_video_add stay the caller's.
 */
#ifndef VF_FORMATS_VIDEO_WRITE_H
#define VF_FORMATS_VIDEO_WRITE_H

#include "runtime/vflow.h"

#include <stdint.h>

typedef struct vf_video_opts {
    const char *path;  /* output file; its extension picks the container */
    int width, height; /* even, > 0 */
    double fps;        /* > 0; stored as the nearest fraction with denominator <= 1001·1000 */
    const char *codec; /* encoder name (libavcodec's); NULL = libx264 where present, else mpeg4 */
} vf_video_opts;

typedef struct vf_video_writer vf_video_writer;

int vf_video_open(const vf_video_opts *o, vf_video_writer **out, vf_status *st);
/* one frame: height rows of width*3 bytes (RGB24), row stride width*3 */
int vf_video_add(vf_video_writer *w, const uint8_t *rgb, vf_status *st);
/* flushes the encoder, writes the trailer, renames the file into place; frees w */
int vf_video_close(vf_video_writer *w, vf_status *st);
/* abandons the file (removed) and frees w; NULL is fine */
void vf_video_free(vf_video_writer *w);
/* the encoder in use ("libx264", "mpeg4", …) */
const char *vf_video_codec(const vf_video_writer *w);

/* Writes one RGB24 image (rows of width*3 bytes) as a PNG file, atomically. */
int vf_png_write(const char *path, const uint8_t *rgb, int width, int height, vf_status *st);

/* Frame t of a clip of float samples (3, T, H, W) in [-1, 1] (what a VAE decoder gives)
 * as RGB24: round((x + 1) · 127.5), clamped to 0..255. */
void vf_video_rgb_from_float(const float *x, int T, int H, int W, int t, uint8_t *rgb);

#endif
