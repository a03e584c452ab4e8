/* tb_events.h — TensorBoard event files, both sides: the writer the driver logs a run
 * with (runtime/driver/tb_log.c decides what and when), and the reader a resumed run cuts
 * its predecessors' files with. Written by hand: TFRecord framing and the few protobuf
 * fields of an Event (tensorboard event.proto / summary.proto).
 *
 * A file is <dir>/events.out.tfevents.<unix time>.<host>[.<pid>], a sequence of records.
 *
 * A record is u64 length (LE), u32 masked CRC32C of those 8 bytes, the data, u32 masked
 * CRC32C of the data; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. The data is an Event:
 * wall_time (1, double), step (2, int64), then one of file_version (3, string),
 * summary (5: Summary{value (1): {tag (1), simple_value (2, float) or image (4: Image{height
 * (1, int32), width (2), colorspace (3: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA),
 * encoded_image_string (4, the PNG file's bytes)})}}) or
 * session_log (7: SessionLog{status (1): START = 1}).
 *
 * The writer buffers records and writes them out at most every VF_TB_FLUSH_S seconds
 * (checked on each call) and at close, so a killed run keeps all but its last seconds.
 */
#ifndef VF_TB_EVENTS_H
#define VF_TB_EVENTS_H
#include "runtime/vflow.h"

#include <stddef.h>
#include <stdint.h>

#define VF_TB_FLUSH_S 2.0

/* The bytes the encoders append to. Running out of memory is sticky (`oom` set, further
 * appends ignored), so an encoder needs no error path; the writer drops such a buffer. */
typedef struct vf_tb_buf {
    char *s;           /* owned; NULL until the first append */
    size_t len, cap;
    bool oom;
} vf_tb_buf;
void vf_tb_buf_init(vf_tb_buf *b);
void vf_tb_buf_fini(vf_tb_buf *b);
void vf_tb_buf_reset(vf_tb_buf *b); /* empty, keeping the memory */

/* The masked CRC32C TFRecord stores. */
uint32_t vf_tb_masked_crc(const void *data, size_t n);
/* Whether a file name is an event file's (events.out.tfevents.*). */
bool vf_tb_is_event_file(const char *name);

/* Event encoders: append one Event's protobuf bytes to b (no framing). */
void vf_tb_encode_version(vf_tb_buf *b, double wall, int64_t step);
void vf_tb_encode_scalar(vf_tb_buf *b, double wall, int64_t step, const char *tag, float value);
/* An encoded image (PNG bytes png[0..n)) of width x height pixels. */
void vf_tb_encode_image(vf_tb_buf *b, double wall, int64_t step, const char *tag, int width, int height,
                        int colorspace, const void *png, size_t n);
void vf_tb_encode_start(vf_tb_buf *b, double wall, int64_t step);
/* Appends the TFRecord framing of data[0..n) to b. */
void vf_tb_frame(vf_tb_buf *b, const void *data, size_t n);

typedef struct vf_tb_writer {
    int fd;                  /* -1: closed (every call is then a no-op) */
    char path[4200];
    vf_tb_buf buf;             /* framed records not written yet */
    vf_tb_buf ev;              /* scratch: one event */
    int64_t last_flush_ns;
    bool failed;             /* a write failed: logged once by the caller, then dropped */
} vf_tb_writer;

/* Creates dir (one level) and events.out.tfevents.<unix time>.<host>[.<pid>] in it (a
 * new file every time: a resumed run adds one), and writes the file_version event.
 * On failure st names the path and w stays closed. */
int vf_tb_open(vf_tb_writer *w, const char *dir, vf_status *st);
void vf_tb_scalar(vf_tb_writer *w, int64_t step, const char *tag, double value);
void vf_tb_image(vf_tb_writer *w, int64_t step, const char *tag, int width, int height, int colorspace,
                 const void *png, size_t n);
/* A PNG file's bytes png[0..n) (borrowed; copied into the event) as one image event:
 * width, height and colorspace from its IHDR chunk (colour type grey 1, grey+alpha 2, RGBA 4, RGB and palette 3). VF_EBADINPUT
 * (nothing written) when png[0..n) does not start as a PNG file does. */
int vf_tb_png(vf_tb_writer *w, int64_t step, const char *tag, const void *png, size_t n);
/* SessionLog START at step: TensorBoard's readers drop the points at step and after from
 * the files before this one (a resumed run restarting after its checkpoint). */
void vf_tb_start(vf_tb_writer *w, int64_t step);
/* Writes what is buffered when VF_TB_FLUSH_S passed since the last flush, or `now`. */
int vf_tb_flush(vf_tb_writer *w, bool now);
/* Flushes and closes. Safe on a zeroed or closed writer (fd must be -1 or open). */
void vf_tb_close(vf_tb_writer *w);

/* Keeps the records of the event file at path whose step is < step, in their order, up to
 * the first torn or corrupt record (a killed writer's last write); the rest goes. Scalars
 * come in step order, but a sample's image is logged when it is done, after later steps'
 * scalars: a kept record after a dropped one moves down, else the file is only cut. A
 * resumed run cuts its predecessors' files at its first step: readers that take each
 * file on its own (tbparse) then see one point per step too, not only those that honour
 * the START. */
int vf_tb_truncate_from(const char *path, int64_t step, vf_status *st);
/* The step of an Event's protobuf bytes (0 when it has none); -1 when they do not parse. */
int64_t vf_tb_event_step(const void *data, size_t n);

#endif /* VF_TB_EVENTS_H */
