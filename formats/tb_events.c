/* tb_events.c — TensorBoard event files (tb_events.h): protobuf encoding of the Event
 * messages the driver writes, TFRecord framing, the buffered file writer, and reading
 * the records back to cut a file at a step. */
#include "formats/tb_events.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ bytes */

void vf_tb_buf_init(vf_tb_buf *b) { memset(b, 0, sizeof *b); }

void vf_tb_buf_fini(vf_tb_buf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

void vf_tb_buf_reset(vf_tb_buf *b)
{
    b->len = 0;
    b->oom = false;
}

static void buf_add(vf_tb_buf *b, const void *s, size_t n)
{
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        char *q = realloc(b->s, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->s = q;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
}

/* What TensorBoard's readers look for in a run's dir. */
#define FILE_PREFIX "events.out.tfevents."

bool vf_tb_is_event_file(const char *name) { return strncmp(name, FILE_PREFIX, strlen(FILE_PREFIX)) == 0; }

uint32_t vf_tb_masked_crc(const void *data, size_t n)
{
    uint32_t c = vf_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ------------------------------------------------------------------ protobuf */

static void put_varint(vf_tb_buf *b, uint64_t v)
{
    char t[10];
    size_t n = 0;
    do {
        t[n++] = (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    buf_add(b, t, n);
}

static void put_le(vf_tb_buf *b, uint64_t v, int bytes)
{
    char t[8];
    for (int i = 0; i < bytes; i++) t[i] = (char)(v >> (8 * i));
    buf_add(b, t, (size_t)bytes);
}

static void put_key(vf_tb_buf *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }

static void put_bytes(vf_tb_buf *b, int field, const void *s, size_t n)
{
    put_key(b, field, 2);
    put_varint(b, n);
    buf_add(b, s, n);
}

/* Event fields 1 (wall_time) and 2 (step), which every event carries. */
static void put_head(vf_tb_buf *b, double wall, int64_t step)
{
    uint64_t bits;
    memcpy(&bits, &wall, sizeof bits);
    put_key(b, 1, 1);
    put_le(b, bits, 8);
    put_key(b, 2, 0);
    put_varint(b, (uint64_t)step); /* int64: negatives as ten-byte two's complement */
}

void vf_tb_encode_version(vf_tb_buf *b, double wall, int64_t step)
{
    put_head(b, wall, step);
    put_bytes(b, 3, "brain.Event:2", 13);
}

void vf_tb_encode_scalar(vf_tb_buf *b, double wall, int64_t step, const char *tag, float value)
{
    /* Summary.Value {tag = 1, simple_value = 2 (fixed32)} inside Summary {value = 1} */
    size_t tl = strlen(tag);
    vf_tb_buf val, sum;
    vf_tb_buf_init(&val);
    vf_tb_buf_init(&sum);
    put_bytes(&val, 1, tag, tl);
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    put_key(&val, 2, 5);
    put_le(&val, bits, 4);
    put_bytes(&sum, 1, val.s, val.len);
    put_head(b, wall, step);
    put_bytes(b, 5, sum.s, sum.len);
    if (val.oom || sum.oom) b->oom = true;
    vf_tb_buf_fini(&val);
    vf_tb_buf_fini(&sum);
}

static void put_int(vf_tb_buf *b, int field, int64_t v)
{
    if (!v) return; /* proto3: a zero scalar is not written */
    put_key(b, field, 0);
    put_varint(b, (uint64_t)v);
}

void vf_tb_encode_image(vf_tb_buf *b, double wall, int64_t step, const char *tag, int width, int height,
                        int colorspace, const void *png, size_t n)
{
    /* Summary.Image {height = 1, width = 2, colorspace = 3, encoded_image_string = 4}
     * as Summary.Value {tag = 1, image = 4} inside Summary {value = 1} */
    vf_tb_buf img, val, sum;
    vf_tb_buf_init(&img);
    vf_tb_buf_init(&val);
    vf_tb_buf_init(&sum);
    put_int(&img, 1, height);
    put_int(&img, 2, width);
    put_int(&img, 3, colorspace);
    if (n) put_bytes(&img, 4, png, n);
    put_bytes(&val, 1, tag, strlen(tag));
    put_bytes(&val, 4, img.s, img.len);
    put_bytes(&sum, 1, val.s, val.len);
    put_head(b, wall, step);
    put_bytes(b, 5, sum.s, sum.len);
    if (img.oom || val.oom || sum.oom) b->oom = true;
    vf_tb_buf_fini(&img);
    vf_tb_buf_fini(&val);
    vf_tb_buf_fini(&sum);
}

void vf_tb_encode_start(vf_tb_buf *b, double wall, int64_t step)
{
    static const char start[] = {0x08, 0x01}; /* SessionLog {status = START} */
    put_head(b, wall, step);
    put_bytes(b, 7, start, sizeof start);
}

void vf_tb_frame(vf_tb_buf *b, const void *data, size_t n)
{
    char len[8];
    for (int i = 0; i < 8; i++) len[i] = (char)((uint64_t)n >> (8 * i));
    buf_add(b, len, 8);
    put_le(b, vf_tb_masked_crc(len, 8), 4);
    buf_add(b, data, n);
    put_le(b, vf_tb_masked_crc(data, n), 4);
}

/* ------------------------------------------------------------------ writer */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void add_event(vf_tb_writer *w)
{
    if (w->fd < 0) return;
    vf_tb_frame(&w->buf, w->ev.s, w->ev.len);
    vf_tb_buf_reset(&w->ev);
    vf_tb_flush(w, w->buf.len > (1u << 20));
}

int vf_tb_open(vf_tb_writer *w, const char *dir, vf_status *st)
{
    int rc = 0;
    memset(w, 0, sizeof *w);
    w->fd = -1;
    vf_tb_buf_init(&w->buf);
    vf_tb_buf_init(&w->ev);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) VF_FAIL(st, VF_EIO, "%s: %s", dir, strerror(errno));
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    double now = wall_now();
    snprintf(w->path, sizeof w->path, "%s/" FILE_PREFIX "%lld.%s", dir, (long long)now, host);
    int fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) { /* a resume within the same second */
        size_t l = strlen(w->path);
        snprintf(w->path + l, sizeof w->path - l, ".%d", (int)getpid());
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    if (fd < 0) VF_FAIL(st, VF_EIO, "%s: %s", w->path, strerror(errno));
    w->fd = fd;
    w->last_flush_ns = mono_ns();
    vf_tb_encode_version(&w->ev, now, 0);
    add_event(w);
    return vf_tb_flush(w, true) < 0 ? vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: write failed", w->path) : 0;
fail:
    vf_tb_buf_fini(&w->buf);
    vf_tb_buf_fini(&w->ev);
    return rc;
}

void vf_tb_scalar(vf_tb_writer *w, int64_t step, const char *tag, double value)
{
    if (w->fd < 0) return;
    vf_tb_encode_scalar(&w->ev, wall_now(), step, tag, (float)value);
    add_event(w);
}

void vf_tb_image(vf_tb_writer *w, int64_t step, const char *tag, int width, int height, int colorspace,
                 const void *png, size_t n)
{
    if (w->fd < 0) return;
    vf_tb_encode_image(&w->ev, wall_now(), step, tag, width, height, colorspace, png, n);
    add_event(w);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int vf_tb_png(vf_tb_writer *w, int64_t step, const char *tag, const void *png, size_t n)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const unsigned char *d = png;
    /* signature, then the IHDR chunk: length 13, "IHDR", width, height (big-endian),
     * bit depth, colour type */
    if (n < 33 || memcmp(d, sig, 8) != 0 || be32(d + 8) != 13 || memcmp(d + 12, "IHDR", 4) != 0 || be32(d + 16) == 0 ||
        be32(d + 16) > INT32_MAX || be32(d + 20) == 0 || be32(d + 20) > INT32_MAX)
        return VF_EBADINPUT;
    /* PNG colour type -> Summary.Image colorspace (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA);
     * a palette image decodes to RGB */
    int colorspace;
    switch (d[25]) {
    case 0: colorspace = 1; break;
    case 4: colorspace = 2; break;
    case 6: colorspace = 4; break;
    default: colorspace = 3; break;
    }
    vf_tb_image(w, step, tag, (int)be32(d + 16), (int)be32(d + 20), colorspace, png, n);
    return 0;
}

void vf_tb_start(vf_tb_writer *w, int64_t step)
{
    if (w->fd < 0) return;
    vf_tb_encode_start(&w->ev, wall_now(), step);
    add_event(w);
}

int vf_tb_flush(vf_tb_writer *w, bool now)
{
    if (w->fd < 0) return 0;
    int64_t t = mono_ns();
    if (!now && (double)(t - w->last_flush_ns) < VF_TB_FLUSH_S * 1e9) return 0;
    w->last_flush_ns = t;
    if (w->buf.oom) w->failed = true;
    size_t off = 0;
    while (!w->failed && off < w->buf.len) {
        ssize_t n = write(w->fd, w->buf.s + off, w->buf.len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) w->failed = true;
        else off += (size_t)n;
    }
    /* A failed write drops what is buffered: the run goes on, metrics.jsonl has it all. */
    vf_tb_buf_fini(&w->buf);
    vf_tb_buf_init(&w->buf);
    return w->failed ? VF_EIO : 0;
}

void vf_tb_close(vf_tb_writer *w)
{
    if (w->fd >= 0) {
        vf_tb_flush(w, true);
        close(w->fd);
    }
    w->fd = -1;
    vf_tb_buf_fini(&w->buf);
    vf_tb_buf_fini(&w->ev);
}

/* ------------------------------------------------------------------ cutting */

static bool get_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    *v = 0;
    for (int sh = 0; sh < 64 && *p < end; sh += 7) {
        unsigned char c = *(*p)++;
        *v |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) return true;
    }
    return false;
}

int64_t vf_tb_event_step(const void *data, size_t n)
{
    const unsigned char *p = data, *end = p + n;
    while (p < end) {
        uint64_t key, v;
        if (!get_varint(&p, end, &key)) return -1;
        switch (key & 7) {
        case 0:
            if (!get_varint(&p, end, &v)) return -1;
            if (key >> 3 == 2) return (int64_t)v;
            break;
        case 1: if (end - p < 8) return -1; p += 8; break;
        case 2:
            if (!get_varint(&p, end, &v) || v > (uint64_t)(end - p)) return -1;
            p += v;
            break;
        case 5: if (end - p < 4) return -1; p += 4; break;
        default: return -1;
        }
    }
    return 0;
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

int vf_tb_truncate_from(const char *path, int64_t step, vf_status *st)
{
    int rc = 0;
    unsigned char *data = NULL;
    size_t cap = 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) VF_FAIL(st, VF_EIO, "%s: %s", path, strerror(errno));
    off_t off = 0, keep = 0; /* next record to read; end of what stays */
    for (;;) {
        unsigned char head[12];
        if (pread(fd, head, sizeof head, off) != (ssize_t)sizeof head) break;
        uint64_t len = get_le(head, 8);
        if ((uint32_t)get_le(head + 8, 4) != vf_tb_masked_crc(head, 8) || len > (1u << 30)) break;
        if (12 + len + 4 > cap) {
            unsigned char *d = realloc(data, 12 + len + 4);
            if (!d) VF_FAIL(st, VF_ENOMEM, "%s: out of memory", path);
            data = d, cap = 12 + len + 4;
        }
        memcpy(data, head, 12);
        if (pread(fd, data + 12, len + 4, off + 12) != (ssize_t)(len + 4)) break;
        if ((uint32_t)get_le(data + 12 + len, 4) != vf_tb_masked_crc(data + 12, len)) break;
        int64_t s = vf_tb_event_step(data + 12, len);
        if (s < 0) break;
        off += (off_t)(12 + len + 4);
        if (s >= step) continue;
        /* an earlier step's record after a dropped one (an image logged late) moves down
         * over the gap; a crash midway leaves a torn record there, which the next cut ends at */
        if (keep != off - (off_t)(12 + len + 4) && pwrite(fd, data, 12 + len + 4, keep) != (ssize_t)(12 + len + 4))
            VF_FAIL(st, VF_EIO, "%s: write: %s", path, strerror(errno));
        keep += (off_t)(12 + len + 4);
    }
    if (ftruncate(fd, keep) < 0) VF_FAIL(st, VF_EIO, "%s: truncate: %s", path, strerror(errno));
fail:
    if (fd >= 0) close(fd);
    free(data);
    return rc;
}
