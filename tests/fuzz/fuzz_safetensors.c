/* fuzz_safetensors.c — libFuzzer target for the safetensors reader (formats/safetensors.c).
 *
 * Properties beyond "no crash / no out-of-bounds read" (ASan):
 *   - a refused file leaves *out NULL and a message naming the file;
 *   - an accepted file's tensors lie inside the buffer and tile the data area exactly
 *     (their bytes add up to len - 8 - N);
 *   - the writer re-serialises an accepted file into one the reader accepts again, with
 *     the same names, dtypes, shapes, bytes and metadata.
 * Build for fuzzing: clang -fsanitize=fuzzer,address,undefined with the runtime; in the
 * normal build it is linked with replay_main.c and runs over corpus/fuzz_safetensors/.
 */
#include "formats/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_safetensors: property violated: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    vf_status st = {0};
    vf_st_file *f = NULL;
    if (vf_st_open_mem(data, size, "fuzz.safetensors", &f, &st) != 0) {
        if (f) fail("refused file returned a handle");
        if (!strstr(st.msg, "fuzz.safetensors")) fail("refusal does not name the file");
        return 0;
    }
    uint64_t sum = 0;
    for (int i = 0; i < vf_st_count(f); i++) {
        const vf_st_tensor *t = vf_st_at(f, i);
        const unsigned char *p = t->data;
        if (p < data + 8 || p + t->nbytes > data + size) fail("tensor outside the buffer");
        sum += t->nbytes;
    }
    if (sum != size - 8 - vf_st_header_len(f)) fail("tensors do not tile the data area");
    vf_st_writer *w = vf_st_writer_new(&st);
    FILE *tf = tmpfile();
    if (!w || !tf) abort();
    for (int i = 0; i < vf_st_count(f); i++) {
        const vf_st_tensor *t = vf_st_at(f, i);
        if (vf_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, &st) != 0)
            fail("writer refused a tensor the reader accepted");
    }
    for (int i = 0; i < vf_st_meta_count(f); i++) {
        const char *k, *v;
        vf_st_meta_at(f, i, &k, &v);
        if (vf_st_writer_meta(w, k, v, &st) != 0) fail("writer refused metadata the reader accepted");
    }
    if (vf_st_writer_write_file(w, tf, "rewrite", 0, NULL, &st) != 0) fail("rewrite failed");
    long n = ftell(tf);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    rewind(tf);
    if (!buf || fread(buf, 1, (size_t)n, tf) != (size_t)n) abort();
    vf_st_file *g = NULL;
    if (vf_st_open_mem(buf, (size_t)n, "rewrite", &g, &st) != 0) fail("rewritten file refused");
    if (vf_st_count(g) != vf_st_count(f) || vf_st_meta_count(g) != vf_st_meta_count(f)) fail("rewrite lost entries");
    for (int i = 0; i < vf_st_count(f); i++) {
        const vf_st_tensor *a = vf_st_at(f, i), *b = vf_st_find(g, a->name);
        if (!b || a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes ||
            (a->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim)) ||
            memcmp(a->data, b->data, a->nbytes))
            fail("rewrite changed a tensor");
    }
    for (int i = 0; i < vf_st_meta_count(f); i++) {
        const char *k, *v;
        vf_st_meta_at(f, i, &k, &v);
        const char *v2 = vf_st_meta_get(g, k);
        if (!v2 || strcmp(v, v2)) fail("rewrite changed metadata");
    }
    vf_st_close(g);
    free(buf);
    fclose(tf);
    vf_st_writer_free(w);
    vf_st_close(f);
    return 0;
}
