/* fuzz_split_record.c — libFuzzer target for split records, the wire form a ZeroMQ
 * edge receives (vf_item_decode_split: a record whose large tensors come as frames).
 *
 * An input is the record (as long as its length field at offset 8 says, at most the
 * input) followed by the frames, each as a u32 little-endian length and its bytes (this
 * harness's own framing, standing in for ZeroMQ's message parts). The record and every
 * frame are decoded from exact-size copies, as given and again with the record's length
 * field and CRC rewritten so the structural checks are what gets exercised.
 * Properties beyond "no crash / no out-of-bounds read" (ASan):
 *   - a refused message leaves *out NULL, a message in the status and every buffer
 *     unreleased (the caller still owns them);
 *   - an accepted one releases the record and every frame exactly once, by the time the
 *     item is freed, and its tensors carry exactly the frames' bytes.
 * Seeds (corpus/fuzz_split_record/) are written by make_corpus.c.
 */
#include "runtime/core/item.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FRAMES 8

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_split_record: property violated: %s\n", what);
    abort();
}

static int released[MAX_FRAMES + 1]; /* [0] the record, [1 + k] frame k */
static void count_release(void *data, void *hint)
{
    (void)data;
    released[(intptr_t)hint]++;
}

static void check_one(const unsigned char *rec, size_t len, unsigned char **frames, const size_t *flen, int nf)
{
    vf_frame f[MAX_FRAMES];
    for (int k = 0; k < nf; k++) f[k] = (vf_frame){frames[k], flen[k], count_release, (void *)(intptr_t)(k + 1)};
    memset(released, 0, sizeof released);
    vf_status st = {0};
    vf_item *it = NULL;
    int rc = vf_item_decode_split(rec, len, count_release, (void *)0, f, nf, &it, &st);
    if (rc < 0) {
        if (it) fail("refused message returned an item");
        if (!st.msg[0]) fail("refused message without a status message");
        for (int k = 0; k <= nf; k++)
            if (released[k]) fail("refused message released a buffer");
        return;
    }
    if (!it) fail("accepted message without an item");
    /* every frame became one tensor with its bytes, in order */
    int k = 0;
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        vf_tensor *t = vf_item_tensor_at(it, i, NULL);
        if (k < nf && vf_tensor_nbytes(t) == flen[k] && (t->data == frames[k] || released[k + 1] == 1) &&
            memcmp(t->data, frames[k], flen[k]) == 0)
            k++;
    }
    if (k != nf) fail("a frame's bytes are not a tensor of the item");
    vf_item_free(it);
    for (int j = 0; j <= nf; j++)
        if (released[j] != 1) fail("a buffer was not released exactly once");
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    size_t len = size;
    if (size >= 16) {
        uint64_t l = 0;
        for (int i = 7; i >= 0; i--) l = l << 8 | data[8 + i];
        if (l < size) len = (size_t)l;
    }
    unsigned char *frames[MAX_FRAMES];
    size_t flen[MAX_FRAMES];
    int nf = 0;
    for (size_t at = len; at + 4 <= size && nf < MAX_FRAMES;) {
        size_t n = (size_t)data[at] | (size_t)data[at + 1] << 8 | (size_t)data[at + 2] << 16 |
                   (size_t)data[at + 3] << 24;
        at += 4;
        if (n > size - at) n = size - at;
        frames[nf] = malloc(n ? n : 1); /* exact size: ASan sees any overread */
        if (!frames[nf]) abort();
        memcpy(frames[nf], data + at, n);
        flen[nf++] = n;
        at += n;
    }
    unsigned char *rec = malloc(len ? len : 1);
    if (!rec) abort();
    memcpy(rec, data, len);
    check_one(rec, len, frames, flen, nf);
    if (len >= 20) {
        for (int i = 0; i < 8; i++) rec[8 + i] = (unsigned char)((uint64_t)len >> (8 * i));
        uint32_t c = vf_crc32c(0, rec, len - 4);
        for (int i = 0; i < 4; i++) rec[len - 4 + i] = (unsigned char)(c >> (8 * i));
        check_one(rec, len, frames, flen, nf);
    }
    free(rec);
    for (int k = 0; k < nf; k++) free(frames[k]);
    return 0;
}
