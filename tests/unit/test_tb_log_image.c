/* test_tb_log_image.c — metrics rows naming an image become TensorBoard image events:
 * a PNG written by vf_png_write (path relative to the run dir) is one image event at the
 * row's step with its bytes as they are and its IHDR's size and colour, tagged by the
 * row's "tag" or else sample/<file stem>; a missing file, a file that is not a PNG, one
 * over VF_TB_IMAGE_MAX and a row without a step are each one WARN line naming the file
 * and no event. TensorBoard's reader reads such images in tests/reference/test_tb_images.py. */
#include "tests/vf_test.h"

#include "formats/video_write.h"
#include "formats/tb_events.h"
#include "runtime/driver/tb_log.h"
#include "runtime/json.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char warned[8][600];
static int nwarned;

static void on_warn(void *arg, const char *msg)
{
    (void)arg;
    if (nwarned < 8) snprintf(warned[nwarned], sizeof warned[0], "%s", msg);
    nwarned++;
}

static void row(vf_tb_log *t, const char *text)
{
    vf_status st = {0};
    vf_json *j = vf_json_parse(text, &st);
    VF_CHECK(j != NULL);
    vf_tb_log_event(t, NULL, 0, j);
    vf_json_free(j);
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = b ? fread(b, 1, (size_t)sz, f) : 0;
    fclose(f);
    return b;
}

VF_TEST(image_rows)
{
    char dir[] = "/tmp/vf_tb_log_img.XXXXXX", p[256];
    VF_CHECK(mkdtemp(dir) != NULL);
    vf_status st = {0};
    snprintf(p, sizeof p, "%s/samples", dir);
    VF_CHECK(mkdir(p, 0755) == 0);
    uint8_t rgb[6 * 4 * 3];
    for (size_t i = 0; i < sizeof rgb; i++) rgb[i] = (uint8_t)(i * 7);
    snprintf(p, sizeof p, "%s/samples/cat.frame0.png", dir);
    VF_CHECK(vf_png_write(p, rgb, 6, 4, &st) == 0);
    snprintf(p, sizeof p, "%s/samples/garbled.png", dir);
    FILE *f = fopen(p, "wb");
    VF_CHECK(f != NULL);
    if (f) fputs("\x89PNG\r\n\x1a\n but nothing more of one", f), fclose(f);
    snprintf(p, sizeof p, "%s/samples/huge.png", dir);
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    VF_CHECK(fd >= 0 && ftruncate(fd, VF_TB_IMAGE_MAX + 1) == 0); /* sparse: no disk */
    if (fd >= 0) close(fd);

    vf_graph g;
    memset(&g, 0, sizeof g);
    vf_tb_log *t = NULL;
    VF_CHECK(vf_tb_log_open(&t, &g, dir, false, &st) == 0);
    vf_tb_log_set_warn(t, on_warn, NULL);
    row(t, "{\"event\":\"sample\",\"step\":6,\"image\":\"samples/cat.frame0.png\",\"tag\":\"sample/kitten\"}");
    row(t, "{\"event\":\"sample\",\"step\":8,\"image\":\"samples/cat.frame0.png\"}");
    row(t, "{\"event\":\"sample\",\"step\":8,\"image\":\"samples/missing.png\"}");
    row(t, "{\"event\":\"sample\",\"step\":8,\"image\":\"samples/garbled.png\"}");
    row(t, "{\"event\":\"sample\",\"step\":8,\"image\":\"samples/huge.png\"}");
    row(t, "{\"event\":\"sample\",\"image\":\"samples/cat.frame0.png\"}");
    vf_tb_log_close(t);
    char path[600] = "";
    snprintf(p, sizeof p, "%s/tb", dir);
    DIR *d = opendir(p);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) snprintf(path, sizeof path, "%s/%s", p, e->d_name);
    if (d) closedir(d);

    VF_CHECK_EQ_INT(nwarned, 4);
    static const char *const names[] = {"missing.png", "garbled.png", "huge.png", "cat.frame0.png"};
    for (int i = 0; i < 4 && i < nwarned; i++)
        VF_CHECK_MSG(strstr(warned[i], names[i]) != NULL, "warning %d: %s", i, warned[i]);
    VF_CHECK(nwarned < 3 || strstr(warned[2], "16 MiB") != NULL);

    /* the event file: file_version, then the two good images as encoded here */
    size_t n = 0, pn = 0, off = 0;
    unsigned char *b = slurp(path, &n);
    snprintf(p, sizeof p, "%s/samples/cat.frame0.png", dir);
    unsigned char *png = slurp(p, &pn);
    VF_CHECK(b != NULL && png != NULL && pn > 33);
    static const struct { int64_t step; const char *tag; } want[] = {{6, "sample/kitten"}, {8, "sample/cat"}};
    int records = 0;
    while (b && png && off + 16 <= n) {
        uint64_t len = le(b + off, 8);
        if (off + 16 + len > n) break;
        if (records >= 1 && records <= 2) {
            vf_tb_buf e;
            vf_tb_buf_init(&e);
            double wall;
            memcpy(&wall, b + off + 13, 8); /* the Event's wall_time, after its key byte */
            vf_tb_encode_image(&e, wall, want[records - 1].step, want[records - 1].tag, 6, 4, 3, png, pn);
            VF_CHECK_MSG(len == e.len && memcmp(b + off + 12, e.s, e.len) == 0, "record %d is not %s's image",
                         records, want[records - 1].tag);
            vf_tb_buf_fini(&e);
        }
        off += 16 + len;
        records++;
    }
    VF_CHECK_EQ_INT(off, n);
    VF_CHECK_EQ_INT(records, 3);
    free(b);
    free(png);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    VF_CHECK(system(cmd) == 0);
}

int main(void) { return vf_test_main(); }
