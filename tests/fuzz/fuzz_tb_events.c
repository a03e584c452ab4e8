/* fuzz_tb_events.c — libFuzzer target for the reading side of TensorBoard event files
 * (formats/tb_events.c): cutting a file at a step, as a resumed run does to the files of
 * the runs before it (torn by a kill, damaged, or written by another tool), the step of
 * an Event's bytes, and the PNG header an image event takes its size from.
 *
 * The first input byte is the step S to cut at (mod 16); the second picks what the rest
 * is: an event file (even) or a PNG file (odd). Properties beyond "no crash / no
 * out-of-bounds read" (ASan):
 *   - the cut file is the records of the input's readable prefix (each framed with both
 *     CRCs right, up to the first one that is not) whose Event step is below S, in their
 *     order, and nothing else;
 *   - a scalar Event encoded for a step and tag taken from the input reads back as that
 *     step;
 *   - a PNG accepted for an image event starts with the PNG signature and an IHDR chunk.
 * In the normal build it is linked with replay_main.c and runs over corpus/fuzz_tb_events/.
 */
#include "formats/tb_events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_tb_events: property violated: %s\n", what);
    abort();
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The records of in[0..n) that a cut at step s keeps, appended to want. */
static void expected(const unsigned char *in, size_t n, int64_t s, vf_tb_buf *want)
{
    size_t off = 0;
    while (n - off >= 16) {
        uint64_t len = le(in + off, 8);
        if ((uint32_t)le(in + off + 8, 4) != vf_tb_masked_crc(in + off, 8) || len > n - off - 16) break;
        if ((uint32_t)le(in + off + 12 + len, 4) != vf_tb_masked_crc(in + off + 12, len)) break;
        int64_t step = vf_tb_event_step(in + off + 12, len);
        if (step < 0) break;
        if (step < s) vf_tb_frame(want, in + off + 12, len);
        off += 16 + len;
    }
}

static void cut(const unsigned char *in, size_t n, int64_t s)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/vf_fuzz_tb_events.%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) fail("cannot write the input file");
    if (n) fwrite(in, 1, n, f);
    fclose(f);
    vf_status st = {0};
    if (vf_tb_truncate_from(path, s, &st) != 0) fail("cutting a readable file failed");
    f = fopen(path, "rb");
    unsigned char *got = malloc(n + 1);
    size_t g = f && got ? fread(got, 1, n + 1, f) : 0;
    if (f) fclose(f);
    unlink(path);
    vf_tb_buf want;
    vf_tb_buf_init(&want);
    expected(in, n, s, &want);
    if (want.oom || !got) abort();
    if (g != want.len || (g && memcmp(got, want.s, g) != 0)) fail("the cut file is not the kept records");
    free(got);
    vf_tb_buf_fini(&want);
}

static void scalar_round_trip(const unsigned char *in, size_t n)
{
    int64_t step = 0;
    char tag[24] = {0};
    memcpy(&step, in, n < 8 ? n : 8);
    if (n > 8) memcpy(tag, in + 8, n - 8 < sizeof tag - 1 ? n - 8 : sizeof tag - 1);
    vf_tb_buf b;
    vf_tb_buf_init(&b);
    vf_tb_encode_scalar(&b, 1.5, step, tag, 0.25f);
    if (b.oom) abort();
    if (vf_tb_event_step(b.s, b.len) != step) fail("a scalar event does not read back as its step");
    vf_tb_buf_fini(&b);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 2) return 0;
    const int64_t s = data[0] % 16;
    const unsigned char *in = data + 2;
    const size_t n = size - 2;
    if (data[1] % 2 == 0) {
        cut(in, n, s);
        scalar_round_trip(in, n);
        vf_tb_event_step(in, n);
        return 0;
    }
    vf_tb_writer closed = {.fd = -1}; /* checks the bytes, writes nothing */
    static const unsigned char sig[16] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    if (vf_tb_png(&closed, s, "sample/x", in, n) == 0 && (n < 33 || memcmp(in, sig, 16) != 0))
        fail("accepted an image that is not a PNG");
    return 0;
}
