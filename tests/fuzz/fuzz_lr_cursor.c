/* fuzz_lr_cursor.c — libFuzzer target for the latent reader's cursor (formats/lr_cursor.c):
 * the text a checkpoint's state.json carries back to a resumed run, as a hand edit, a
 * damaged file or another version of vflow may leave it.
 *
 * The first input byte picks the version to parse as (bit 0: 1 or 2); the rest is two
 * texts a and b, split at the first newline (b = a without one). Properties beyond "no
 * crash / no out-of-bounds read" (ASan):
 *   - a parsed cursor has a position >= 0, prints within VF_LR_CURSOR_MAX bytes, and its
 *     print parses back to the same fields;
 *   - the print of the next position of that cursor compares after it and belongs to
 *     the same stream; with another seed it belongs to another stream;
 *   - comparing a with b works iff comparing b with a does, with the opposite sign;
 *     "same stream" is symmetric, and every text is of its own stream.
 * In the normal build it is linked with replay_main.c and runs over corpus/fuzz_lr_cursor/.
 */
#include "formats/lr_cursor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_lr_cursor: property violated: %s (%s)\n", what, text ? text : "");
    abort();
}

static bool same(const vf_lr_cursor *a, const vf_lr_cursor *b)
{
    return a->version == b->version && a->epoch == b->epoch && a->pos == b->pos && a->n == b->n &&
           a->seed == b->seed && a->shard == b->shard && a->nshards == b->nshards && a->buckets == b->buckets;
}

static void parsed(const char *text, const vf_lr_cursor *c)
{
    char buf[VF_LR_CURSOR_MAX + 64], next[VF_LR_CURSOR_MAX + 64];
    vf_lr_cursor back;
    if (c->pos < 0) fail("a negative position parsed", text);
    vf_lr_cursor_print(c, buf, sizeof buf);
    if (strlen(buf) >= VF_LR_CURSOR_MAX) fail("the print does not fit VF_LR_CURSOR_MAX", buf);
    if (vf_lr_cursor_parse(buf, c->version, &back) || !same(c, &back)) fail("the print does not parse back", buf);
    if (c->pos == INT64_MAX) return;
    vf_lr_cursor d = *c;
    d.pos++;
    vf_lr_cursor_print(&d, next, sizeof next);
    int cmp = 0;
    if (vf_lr_cursor_cmp(buf, next, &cmp) || cmp >= 0) fail("the next position does not compare after", next);
    if (!vf_lr_cursor_same_stream(buf, next)) fail("the next position is of another stream", next);
    d = *c;
    d.seed++;
    vf_lr_cursor_print(&d, next, sizeof next);
    if (vf_lr_cursor_same_stream(buf, next)) fail("another seed is of the same stream", next);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1) return 0;
    const int version = 1 + (data[0] & 1);
    char *a = malloc(size), *b;
    if (!a) abort();
    memcpy(a, data + 1, size - 1);
    a[size - 1] = 0;
    char *nl = strchr(a, '\n');
    if (nl) {
        *nl = 0;
        b = nl + 1;
    } else {
        b = a;
    }
    vf_lr_cursor c;
    if (vf_lr_cursor_parse(a, version, &c) == 0) parsed(a, &c);
    int ab = 7, ba = 7;
    int rab = vf_lr_cursor_cmp(a, b, &ab), rba = vf_lr_cursor_cmp(b, a, &ba);
    if ((rab == 0) != (rba == 0)) fail("comparing works one way only", a);
    if (rab == 0 && (ab > 0) - (ab < 0) != -((ba > 0) - (ba < 0))) fail("comparing is not antisymmetric", a);
    if (rab != 0 && (ab != 7 || ba != 7)) fail("a failed comparison wrote its result", a);
    if (vf_lr_cursor_same_stream(a, b) != vf_lr_cursor_same_stream(b, a)) fail("same stream is not symmetric", a);
    if (!vf_lr_cursor_same_stream(a, a)) fail("a text is not of its own stream", a);
    free(a);
    return 0;
}
