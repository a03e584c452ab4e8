/* fuzz_item_decode.c — libFuzzer target for the item codec's strict decoder.
 *
 * Each input is decoded as given (almost always refused by the CRC), then again with
 * its length field and CRC rewritten so the structural checks are what gets exercised.
 * Properties checked beyond "no crash / no out-of-bounds read" (ASan):
 *   - a refused record leaves *out NULL and a message in the status;
 *   - an accepted record re-encodes to exactly the same bytes (one encoding per item),
 *     and decode_view agrees with decode.
 * Build for fuzzing: clang -fsanitize=fuzzer,address,undefined with the runtime; in the
 * normal build it is linked with replay_main.c and runs over corpus/fuzz_item_decode/.
 */
#include "runtime/core/item.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_item_decode: property violated: %s\n", what);
    abort();
}

static void nop_release(void *data, void *hint) { (void)data, (void)hint; }

static void check_one(const unsigned char *buf, size_t len)
{
    vf_status st = {0};
    vf_item *it = NULL;
    int rc = vf_item_decode(buf, len, &it, &st);
    if (rc < 0) {
        if (it) fail("refused record returned an item");
        if (!st.msg[0]) fail("refused record without a message");
        return;
    }
    if (!it) fail("accepted record without an item");
    size_t n = vf_item_encoded_size(it), got = 0;
    if (n != len) fail("re-encoded size differs");
    unsigned char *re = malloc(n);
    if (!re) abort();
    if (vf_item_encode(it, re, n, &got, &st) != 0 || got != len || memcmp(re, buf, len) != 0)
        fail("decode -> encode is not the identity");
    free(re);
    vf_item *v = NULL;
    vf_status st2 = {0};
    if (vf_item_decode_view(buf, len, nop_release, NULL, &v, &st2) != 0) fail("decode_view refused what decode took");
    if (vf_item_ntensors(v) != vf_item_ntensors(it) || vf_item_nmeta(v) != vf_item_nmeta(it))
        fail("decode_view disagrees with decode");
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        vf_tensor *a = vf_item_tensor_at(it, i, NULL), *b = vf_item_tensor_at(v, i, NULL);
        if (vf_tensor_nbytes(a) != vf_tensor_nbytes(b) || memcmp(a->data, b->data, vf_tensor_nbytes(a)) != 0)
            fail("decode_view payload differs");
    }
    vf_item_free(v);
    vf_item_free(it);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    /* exact-size copies, so any read past the end is caught by ASan */
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    check_one(buf, size);
    if (size >= 20) {
        for (int i = 0; i < 8; i++) buf[8 + i] = (unsigned char)((uint64_t)size >> (8 * i));
        uint32_t c = vf_crc32c(0, buf, size - 4);
        for (int i = 0; i < 4; i++) buf[size - 4 + i] = (unsigned char)(c >> (8 * i));
        check_one(buf, size);
    }
    free(buf);
    return 0;
}
