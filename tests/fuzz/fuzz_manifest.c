/* fuzz_manifest.c — libFuzzer target for the decode stage's manifest reader
 * (formats/video_manifest.c): CSV (quotes, BOM, extra columns, start/end/fps) and
 * JSONL, as users write them by hand or export them from other tools.
 *
 * The first input byte picks the file name's extension (.csv, .jsonl, none) and the
 * shard split; the rest is the file. Properties beyond "no crash / no out-of-bounds
 * read" (ASan):
 *   - a refused manifest has a message naming the file;
 *   - an accepted one has rows with a non-empty path each, n <= total, and the shards
 *     of a split partition the rows (their counts add up to the whole).
 * In the normal build it is linked with replay_main.c and runs over corpus/fuzz_manifest/.
 */
#include "formats/video_manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fail(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_manifest: property violated: %s (%s)\n", what, msg ? msg : "");
    abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1) return 0;
    static const char *ext[] = {".csv", ".jsonl", ""};
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/vf_fuzz_manifest.%d%s", (int)getpid(), ext[data[0] % 3]);
    const int nshards = 1 + data[0] / 3 % 3;
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    if (size > 1) fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    vf_status st = {0};
    vf_manifest all = {0};
    int rc = vf_manifest_load(path, 0, 1, &all, &st);
    if (rc) {
        if (!strstr(st.msg, "vf_fuzz_manifest")) fail("refusal does not name the file", st.msg);
    } else {
        if (all.n != all.total) fail("one shard is not the whole", NULL);
        for (int64_t i = 0; i < all.n; i++)
            if (!all.rows[i].path || !all.rows[i].path[0]) fail("a row without a path", NULL);
        int64_t sum = 0;
        for (int s = 0; s < nshards; s++) {
            vf_manifest m = {0};
            vf_status ss = {0};
            if (vf_manifest_load(path, s, nshards, &m, &ss) != 0) fail("a shard refused what the whole accepts", ss.msg);
            if (m.total != all.total) fail("shards disagree on the total", NULL);
            sum += m.n;
            vf_manifest_fini(&m);
        }
        if (sum != all.n) fail("shards do not partition the rows", NULL);
    }
    vf_manifest_fini(&all);
    unlink(path);
    return 0;
}
