/* test_tb_events.c — the TensorBoard event encoder against known bytes: the CRC32C check
 * value, masked CRCs and Event messages as TensorBoard's own protobuf classes serialise
 * them (tensorboard.compat.proto.event_pb2 and summary_pb2, 2.20.0), and a written file
 * whose records frame and checksum as TFRecord does. TensorBoard's reader reads whole runs in
 * tests/reference/test_tb_events.py. */
#include "tests/vf_test.h"

#include "formats/tb_events.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static bool same(const vf_tb_buf *b, const char *want, size_t n)
{
    if (b->len != n || memcmp(b->s, want, n) != 0) {
        fprintf(stderr, "got %zu bytes:", b->len);
        for (size_t i = 0; i < b->len; i++) fprintf(stderr, " %02x", (unsigned char)b->s[i]);
        fprintf(stderr, "\n");
        return false;
    }
    return true;
}

VF_TEST(crc_vectors)
{
    VF_CHECK(vf_crc32c(0, "123456789", 9) == 0xe3069283u); /* the CRC-32C check value */
    VF_CHECK(vf_tb_masked_crc("123456789", 9) == 0xc78ab0e5u);
    const char len13[8] = {13};
    VF_CHECK(vf_tb_masked_crc(len13, 8) == 0x34b8373cu);
}

/* Event(wall_time=1795569741.25, step=7, file_version="brain.Event:2").SerializeToString() */
static const char k_version[] = "\x09\x00\x00\x50\x13\x8e\xc1\xda\x41\x10\x07\x1a\x0d\x62\x72\x61\x69\x6e\x2e"
                                "\x45\x76\x65\x6e\x74\x3a\x32";
/* Event(wall_time=1795569741.25, step=300, summary=Summary(value=[Value(tag="train/loss",
 * simple_value=1.5)])) */
static const char k_scalar[] = "\x09\x00\x00\x50\x13\x8e\xc1\xda\x41\x10\xac\x02\x2a\x13\x0a\x11\x0a\x0a\x74"
                               "\x72\x61\x69\x6e\x2f\x6c\x6f\x73\x73\x15\x00\x00\xc0\x3f";
/* Event(wall_time=1795569741.25, step=6, summary=Summary(value=[Value(tag="sample/cat",
 * image=Summary.Image(height=48, width=300, colorspace=3,
 * encoded_image_string=b"\x89PNG\r\n\x1a\n\x00IHDR"))])) */
static const char k_image[] = "\x09\x00\x00\x50\x13\x8e\xc1\xda\x41\x10\x06\x2a\x26\x0a\x24\x0a\x0a\x73"
                              "\x61\x6d\x70\x6c\x65\x2f\x63\x61\x74\x22\x16\x08\x30\x10\xac\x02\x18\x03"
                              "\x22\x0d\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x49\x48\x44\x52";
/* Event(wall_time=0.5, step=12, session_log=SessionLog(status=START)) */
static const char k_start[] = "\x09\x00\x00\x00\x00\x00\x00\xe0\x3f\x10\x0c\x3a\x02\x08\x01";

VF_TEST(events_match_tensorboard_protobuf)
{
    vf_tb_buf b;
    vf_tb_buf_init(&b);
    vf_tb_encode_version(&b, 1795569741.25, 7);
    VF_CHECK(same(&b, k_version, sizeof k_version - 1));
    vf_tb_buf_reset(&b);
    vf_tb_encode_scalar(&b, 1795569741.25, 300, "train/loss", 1.5f);
    VF_CHECK(same(&b, k_scalar, sizeof k_scalar - 1));
    vf_tb_buf_reset(&b);
    vf_tb_encode_start(&b, 0.5, 12);
    VF_CHECK(same(&b, k_start, sizeof k_start - 1));
    vf_tb_buf_reset(&b);
    vf_tb_encode_image(&b, 1795569741.25, 6, "sample/cat", 300, 48, 3, "\x89PNG\r\n\x1a\n\0IHDR", 13);
    VF_CHECK(same(&b, k_image, sizeof k_image - 1));
    vf_tb_buf_fini(&b);
}

VF_TEST(frame_layout)
{
    vf_tb_buf b;
    vf_tb_buf_init(&b);
    vf_tb_frame(&b, "123456789", 9);
    VF_CHECK_EQ_INT(b.len, 8 + 4 + 9 + 4);
    const unsigned char *u = (const unsigned char *)b.s;
    VF_CHECK(u[0] == 9 && u[1] == 0 && u[7] == 0);
    uint32_t c = (uint32_t)u[21] | (uint32_t)u[22] << 8 | (uint32_t)u[23] << 16 | (uint32_t)u[24] << 24;
    VF_CHECK(c == 0xc78ab0e5u); /* little-endian masked CRC of the data */
    VF_CHECK(memcmp(b.s + 12, "123456789", 9) == 0);
    vf_tb_buf_fini(&b);
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

VF_TEST(file_records_check)
{
    char dir[] = "/tmp/vf_tb_test.XXXXXX";
    VF_CHECK(mkdtemp(dir) != NULL);
    char sub[64];
    snprintf(sub, sizeof sub, "%s/tb", dir);
    vf_tb_writer w;
    vf_status st = {0};
    VF_CHECK(vf_tb_open(&w, sub, &st) == 0);
    for (int i = 1; i <= 5; i++) vf_tb_scalar(&w, i, "train/loss", 1.0 / i);
    vf_tb_start(&w, 3);
    char path[sizeof w.path];
    snprintf(path, sizeof path, "%s", w.path);
    vf_tb_close(&w);
    VF_CHECK(strstr(path, "/events.out.tfevents.") != NULL);
    FILE *f = fopen(path, "rb");
    VF_CHECK(f != NULL);
    unsigned char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    size_t off = 0;
    int records = 0;
    while (off + 12 <= n) {
        uint64_t len = le(buf + off, 8);
        VF_CHECK((uint32_t)le(buf + off + 8, 4) == vf_tb_masked_crc(buf + off, 8));
        VF_CHECK(off + 16 + len <= n);
        if (off + 16 + len > n) break;
        VF_CHECK((uint32_t)le(buf + off + 12 + len, 4) == vf_tb_masked_crc(buf + off + 12, len));
        if (records == 0) VF_CHECK(len > 13 && memcmp(buf + off + 12 + len - 13, "brain.Event:2", 13) == 0);
        off += 16 + len;
        records++;
    }
    VF_CHECK_EQ_INT(off, n);
    VF_CHECK_EQ_INT(records, 1 + 5 + 1);
    unlink(path);
    rmdir(sub);
    rmdir(dir);
}

/* records in the file at path, and the largest step among them */
static int count_records(const char *path, int64_t *max_step)
{
    FILE *f = fopen(path, "rb");
    unsigned char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    int records = 0;
    *max_step = -1;
    for (size_t off = 0; off + 16 <= n;) {
        uint64_t len = le(buf + off, 8);
        if (off + 16 + len > n) return -1;
        int64_t s = vf_tb_event_step(buf + off + 12, len);
        if (s > *max_step) *max_step = s;
        off += 16 + len;
        records++;
    }
    return records;
}

VF_TEST(truncate_keeps_earlier_steps)
{
    char dir[] = "/tmp/vf_tb_cut.XXXXXX";
    VF_CHECK(mkdtemp(dir) != NULL);
    vf_tb_writer w;
    vf_status st = {0};
    VF_CHECK(vf_tb_open(&w, dir, &st) == 0);
    for (int i = 1; i <= 6; i++) {
        vf_tb_scalar(&w, i, "train/loss", 1.0 / i);
        vf_tb_scalar(&w, i, "train/lr", 1e-3);
    }
    char path[sizeof w.path];
    snprintf(path, sizeof path, "%s", w.path);
    vf_tb_close(&w);
    /* a torn last record, as a killed writer can leave */
    FILE *f = fopen(path, "ab");
    VF_CHECK(f != NULL);
    if (f) fwrite("\x20\0\0\0\0\0\0\0\1\2", 1, 10, f), fclose(f);
    int64_t max = 0;
    VF_CHECK(vf_tb_truncate_from(path, 100, &st) == 0);
    VF_CHECK_EQ_INT(count_records(path, &max), 1 + 12); /* only the torn tail went */
    VF_CHECK_EQ_INT(max, 6);
    VF_CHECK(vf_tb_truncate_from(path, 4, &st) == 0);
    VF_CHECK_EQ_INT(count_records(path, &max), 1 + 6);
    VF_CHECK_EQ_INT(max, 3);
    VF_CHECK(vf_tb_truncate_from(path, 1, &st) == 0);
    VF_CHECK_EQ_INT(count_records(path, &max), 1); /* the file_version record stays */
    VF_CHECK_EQ_INT(max, 0);
    VF_CHECK(vf_tb_truncate_from("/nonexistent/events", 1, &st) < 0);
    unlink(path);
    rmdir(dir);
}

/* A sample's image comes after later steps' scalars: a cut keeps it when its step is
 * earlier, byte for byte, and drops it otherwise. */
VF_TEST(truncate_keeps_late_images)
{
    char dir[] = "/tmp/vf_tb_img.XXXXXX";
    VF_CHECK(mkdtemp(dir) != NULL);
    vf_tb_writer w;
    vf_status st = {0};
    VF_CHECK(vf_tb_open(&w, dir, &st) == 0);
    for (int i = 1; i <= 6; i++) {
        vf_tb_scalar(&w, i, "train/loss", 1.0 / i);
        if (i == 5) vf_tb_image(&w, 2, "sample/cat", 3, 2, 3, "\x89PNG two", 9);
    }
    vf_tb_image(&w, 4, "sample/cat", 3, 2, 3, "\x89PNG four", 10);
    vf_tb_scalar(&w, 7, "train/loss", 0.1);
    char path[sizeof w.path];
    snprintf(path, sizeof path, "%s", w.path);
    vf_tb_close(&w);
    int64_t max = 0;
    VF_CHECK_EQ_INT(count_records(path, &max), 1 + 7 + 2);
    VF_CHECK(vf_tb_truncate_from(path, 5, &st) == 0);
    VF_CHECK_EQ_INT(count_records(path, &max), 1 + 4 + 2); /* steps 1-4 and both images */
    VF_CHECK_EQ_INT(max, 4);
    VF_CHECK(vf_tb_truncate_from(path, 3, &st) == 0);
    VF_CHECK_EQ_INT(count_records(path, &max), 1 + 2 + 1); /* steps 1-2, the step-2 image */
    VF_CHECK_EQ_INT(max, 2);
    /* the records that stay are whole: the last one is the step-2 image as encoded */
    vf_tb_buf want;
    vf_tb_buf_init(&want);
    FILE *f = fopen(path, "rb");
    unsigned char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    size_t off = 0, last = 0;
    while (off + 16 <= n) last = off, off += 16 + le(buf + off, 8);
    VF_CHECK_EQ_INT(off, n);
    uint64_t len = le(buf + last, 8);
    double wall;
    memcpy(&wall, buf + last + 13, 8); /* the Event's wall_time field, after its key byte */
    vf_tb_encode_image(&want, wall, 2, "sample/cat", 3, 2, 3, "\x89PNG two", 9);
    VF_CHECK(len == want.len && memcmp(buf + last + 12, want.s, want.len) == 0);
    vf_tb_buf_fini(&want);
    unlink(path);
    rmdir(dir);
}

int main(void) { return vf_test_main(); }
