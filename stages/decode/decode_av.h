/* decode_av.h — the decoding core of the `decode` stage, as a plain C API.
 *
 * Opens one video file with libavformat/libavcodec, indexes its frames by a packet scan
 * (presentation timestamps, keyframes), and decodes any increasing list of frames,
 * resized to cover the output size, centre-cropped, rotated by the display matrix and
 * converted to RGB by libswscale, into a caller buffer. It knows nothing of items,
 * clips or the runtime: stages/decode/decode.c wraps it, tests and bench/bench_decode.c call
 * it directly.
 *
 * Frames are numbered 0..nframes-1 in presentation order. With trustworthy timestamps
 * (every packet has one, all distinct) a decoded frame is identified by its timestamp,
 * so seeking is exact; otherwise (has_pts false) frames are counted in output order from
 * the start of the file, no seeking happens, and any decoder error fails the read (a
 * lost frame would shift every later index). A frame the decoder does not deliver (decode
 * error, truncation, corruption flags) fails the read: frames are never duplicated or
 * invented.
 *
 * Defences: a per-file deadline enforced through AVIOInterruptCB and between frames,
 * probesize / analyzeduration limits, max_pixels (stream header and every frame),
 * err_detect, a bound on the number of indexed frames. Failures return VF_EBADINPUT
 * (the file is bad: the caller quarantines it), VF_ETIMEOUT (deadline) or VF_ENOMEM,
 * with a one-line reason in the vf_status.
 */
#ifndef VF_DECODE_AV_H
#define VF_DECODE_AV_H
#include "runtime/vflow.h"

/* err_detect levels: how hard libavcodec looks for damage. */
enum {
    VF_DECODE_ERR_CONCEAL = 0, /* libav defaults: frames the decoder conceals pass, as ffmpeg
                                  outputs them; they are reported as damage */
    VF_DECODE_ERR_CAREFUL = 1, /* crc/bitstream/careful; frames flagged corrupt are dropped */
    VF_DECODE_ERR_EXPLODE = 2, /* as careful, and any damage aborts the frame */
};

/* The scaler filters offered (names are those of ffmpeg's `flags` option). */
int vf_decode_filter_parse(const char *name, int *sws_flags);

typedef struct vf_decode_opts {
    int out_w, out_h;          /* output frame size (pixels), >= 1 */
    int threads;               /* libavcodec threads; 0 = one per core */
    double deadline_s;         /* whole-file budget from open, <= 0: none */
    int64_t max_pixels;        /* largest decoded frame accepted (w*h) */
    int64_t probesize;         /* bytes read to probe; <= 0: 5 MB */
    int64_t analyzeduration;   /* microseconds of stream analysed; <= 0: 5 s */
    int64_t max_frames;        /* frames indexed at most; <= 0: 1 << 21 */
    int err_detect;            /* VF_DECODE_ERR_* */
    int sws_flags;             /* SWS_BICUBIC, ... (vf_decode_filter_parse) */
    double fps_hint;           /* frame rate for files without timestamps; 0 = from stream */
    double stall_s;            /* no frame out of the decoder for this long: the file is
                                  stalled (VF_ETIMEOUT); <= 0: none */
} vf_decode_opts;

/* Defaults: 256x256, 2 threads, 300 s, 4096x2304 pixels, conceal, bicubic, stall 10 s. */
void vf_decode_opts_default(vf_decode_opts *o);

typedef struct vf_decode_info {
    int coded_w, coded_h;      /* decoded frame size */
    int width, height;         /* display size, after rotation */
    int rotation;              /* clockwise degrees applied: 0, 90, 180, 270 */
    bool flipped;              /* a mirror is applied too */
    double sar;                /* sample aspect ratio used (1 when unknown) */
    double fps;                /* source frame rate (average) */
    int64_t nframes;           /* frames indexed */
    double duration_s;         /* first frame start to last frame end */
    bool has_pts;              /* false: frames numbered in output order (a stream whose
                                  packets lack presentation timestamps) */
    bool damaged;              /* the container is truncated or damaged (damage says how):
                                  the frames it has are indexed and offered */
    char damage[240];
    int audio_streams;         /* other streams are ignored; counted for reports */
    char codec[32];
    char pix_fmt[32];
    char format[32];
} vf_decode_info;

typedef struct vf_decode_file vf_decode_file;

/* Opens `path` (borrowed; copied), probes it and indexes its video frames. The
 * deadline clock starts here. On success the caller owns *out (vf_decode_close).
 * Errors: VF_EBADINPUT (not a video, no decodable video stream, too large, no frames,
 * truncated index, ...), VF_ETIMEOUT, VF_ENOMEM; st says why in one line. */
int vf_decode_open(const char *path, const vf_decode_opts *o, vf_decode_file **out,
                   vf_status *st);
void vf_decode_close(vf_decode_file *f); /* NULL is fine */

/* Borrowed, valid while f lives. */
const vf_decode_info *vf_decode_get_info(const vf_decode_file *f);
/* Presentation time of every indexed frame in seconds from the first one
 * (nframes entries, increasing). Borrowed, valid while f lives. */
const double *vf_decode_frame_times(const vf_decode_file *f);

/* Changes the output frame size of later reads to out_w x out_h (cover-resize and
 * centre crop as at open): a run with buckets knows a file's size only after opening
 * it. The size is checked against max_pixels. 0, VF_EUSAGE, VF_ENOMEM. */
int vf_decode_set_size(vf_decode_file *f, int out_w, int out_h, vf_status *st);
/* Whether the display matrix turns the picture by 90 or 270 degrees. */
bool vf_decode_transposed(const vf_decode_file *f);

/* Decodes frames idx[0..n) (presentation indices, strictly increasing, < nframes) into
 * out: n frames of (out_h, out_w, 3) u8 RGB, contiguous, caller-owned. Reads in
 * increasing order continue decoding where the last one stopped; others seek. On
 * failure the contents of out are unspecified.
 *
 * Indexed frames the decoder proves unreadable — it went from one frame to a later one
 * without delivering those between, ended before them, or flagged them corrupt (at
 * err_detect careful) — fail the read with VF_EBADINPUT and are reported by
 * vf_decode_lost: the caller drops them (vf_decode_drop) and plans its clips again over
 * the frames that can be read, as ffmpeg would count them. */
int vf_decode_read(vf_decode_file *f, const int64_t *idx, int n, uint8_t *out,
                   vf_status *st);
/* After a failed read: true when it proved frames [*from, *to) unreadable. */
bool vf_decode_lost(const vf_decode_file *f, int64_t *from, int64_t *to);
/* Removes frames [from, to) from the index (times and numbering of later frames
 * follow); the next read repositions the decoder. */
void vf_decode_drop(vf_decode_file *f, int64_t from, int64_t to);

/* Moves the file's deadline later by `seconds`: time spent outside the decoder (a
 * blocked send downstream) does not count against the file. */
void vf_decode_deadline_extend(vf_decode_file *f, double seconds);

/* Bytes libav and the scaler may hold for one open file at these options (decoder
 * frame pool at max_pixels, scaler scratch, frame index); a file whose frames would
 * need more is refused at open. Used by the stage's memory hook. */
int64_t vf_decode_budget_bytes(const vf_decode_opts *o);

/* Counters of the last vf_decode_read (for tests and the bench). */
typedef struct vf_decode_stats {
    int64_t frames_decoded;    /* frames out of the decoder, wanted or not */
    int64_t seeks;             /* seeks (including retries and rewinds) */
} vf_decode_stats;
void vf_decode_get_stats(const vf_decode_file *f, vf_decode_stats *out);

#endif
