/* fp8_tool.c — drives the FP8 E4M3 conversion and quantiser (runtime/core/fp8.c) from
 * scripts (the cross-check against torch's float8_e4m3fn cast in
 * tests/reference/test_fp8_torch.py). Files are raw little-endian arrays.
 *
 *   fp8_tool cast IN OUT    IN n f32 → OUT n bytes, vf_f32_to_e4m3 of each
 *   fp8_tool quant IN OUT   IN n f32 → OUT the f32 scale (vf_fp8_scale), then n bytes
 *                           (vf_fp8_quantise)
 *   fp8_tool decode IN OUT  IN n bytes → OUT n f32, vf_e4m3_to_f32 of each
 * Exit 0, or 2 with one line naming the file on a read or write failure.
 */
#include "runtime/vflow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file at path, malloc'd into *out (caller frees); its size, or -1. */
static long slurp(const char *path, unsigned char **out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    unsigned char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!b || fseek(f, 0, SEEK_SET) != 0 || fread(b, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    if (n < 0) free(b), b = NULL;
    *out = b;
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: fp8_tool cast|quant|decode IN OUT\n");
        return 2;
    }
    unsigned char *in = NULL;
    long n = slurp(argv[2], &in);
    if (n < 0) {
        fprintf(stderr, "fp8_tool: cannot read %s\n", argv[2]);
        return 2;
    }
    const bool dec = strcmp(argv[1], "decode") == 0;
    const long cnt = dec ? n : n / 4;
    unsigned char *out = malloc((size_t)cnt * 4 + 4);
    size_t nout = 0;
    float *src = malloc((size_t)cnt * sizeof(float) + 4);
    if (!dec) memcpy(src, in, (size_t)cnt * 4);
    if (strcmp(argv[1], "cast") == 0) {
        for (long i = 0; i < cnt; i++) out[i] = vf_f32_to_e4m3(src[i]);
        nout = (size_t)cnt;
    } else if (strcmp(argv[1], "quant") == 0) {
        const float sc = vf_fp8_scale(src, cnt);
        memcpy(out, &sc, 4);
        vf_fp8_quantise(src, cnt, sc, out + 4);
        nout = (size_t)cnt + 4;
    } else if (dec) {
        for (long i = 0; i < cnt; i++) {
            const float v = vf_e4m3_to_f32(in[i]);
            memcpy(out + 4 * i, &v, 4);
        }
        nout = (size_t)cnt * 4;
    } else {
        fprintf(stderr, "fp8_tool: unknown command %s\n", argv[1]);
        return 2;
    }
    FILE *f = fopen(argv[3], "wb");
    if (!f || fwrite(out, 1, nout, f) != nout || fclose(f) != 0) {
        fprintf(stderr, "fp8_tool: cannot write %s\n", argv[3]);
        return 2;
    }
    free(in), free(out), free(src);
    return 0;
}
