/* replay_main.c — runs a libFuzzer target without libFuzzer: over every file of the
 * corpus directory given as argv[1] and over deterministic mutations of each (every
 * truncation up to 4 KiB, a bit flip at every byte offset, boundary bytes written at
 * every offset, and seeded random multi-byte mutations), so the replay test exercises
 * the error paths even with a corpus of valid records. A target whose inputs are slow
 * (a whole video decode) defines vf_fuzz_replay_offsets: truncations, offsets and random
 * mutations are then spread over at most that many points per file. Exit 0 when every
 * input ran (a crash or a failed property aborts); 1 when the corpus is missing or empty. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
extern const size_t vf_fuzz_replay_offsets __attribute__((weak));

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static long g_runs;
static void run(const unsigned char *d, size_t n)
{
    LLVMFuzzerTestOneInput(d, n);
    g_runs++;
}

static void mutate_all(const unsigned char *d, size_t n)
{
    unsigned char *m = malloc(n + 16);
    if (!m) abort();
    run(d, n);
    const size_t lim = &vf_fuzz_replay_offsets ? vf_fuzz_replay_offsets : 0;
    size_t tmax = n < 4096 ? n : 4096, tstep = lim && tmax > lim ? tmax / lim : 1;
    for (size_t k = 0; k < tmax; k += tstep) run(d, k);
    static const unsigned char marks[] = {0x00, 0xff, 0x7f, 0x80, 0x06, 0x07, 0x40};
    size_t step = n > 16384 ? n / 4096 : 1;
    if (lim && n / step > lim) step = n / lim;
    for (size_t off = 0; off < n; off += step) {
        memcpy(m, d, n);
        m[off] ^= (unsigned char)(1u << (off % 8));
        run(m, n);
        for (size_t j = 0; j < sizeof marks; j++) {
            memcpy(m, d, n);
            m[off] = marks[j];
            run(m, n);
        }
    }
    const int nrand = lim && lim < 500 ? (int)lim : 500;
    for (int r = 0; r < nrand; r++) {
        size_t len = n + (rnd() % 3 == 0 ? rnd() % 16 : 0);
        memcpy(m, d, n);
        memset(m + n, 0, len - n);
        int k = 1 + (int)(rnd() % 4);
        for (int i = 0; i < k && len; i++) {
            size_t at = rnd() % len;
            switch (rnd() % 3) {
            case 0: m[at] = (unsigned char)rnd(); break;
            case 1: /* a 4-byte little-endian length-like value */
                if (at + 4 <= len) {
                    uint32_t v = (uint32_t)(rnd() % 3 == 0 ? rnd() : rnd() % 512);
                    memcpy(m + at, &v, 4);
                }
                break;
            default: len = at; break; /* cut */
            }
        }
        run(m, len);
    }
    free(m);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 1;
    }
    DIR *dir = opendir(argv[1]);
    if (!dir) {
        perror(argv[1]);
        return 1;
    }
    int files = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (de->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        unsigned char *d = malloc(n > 0 ? (size_t)n : 1);
        if (!d || fread(d, 1, (size_t)n, f) != (size_t)n) {
            fprintf(stderr, "%s: read failed\n", path);
            return 1;
        }
        fclose(f);
        mutate_all(d, (size_t)n);
        free(d);
        files++;
    }
    closedir(dir);
    printf("%d corpus files, %ld runs\n", files, g_runs);
    return files > 0 ? 0 : 1;
}
