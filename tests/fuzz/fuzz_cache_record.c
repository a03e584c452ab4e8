/* fuzz_cache_record.c — libFuzzer target for the latent cache's record decoders
 * (formats/cache_format.c): entry records, text-embedding records and the summary
 * record, as a reader meets them in an LMDB file someone else wrote.
 *
 * The first input byte picks the decoder and the key it is stored under (an entry key,
 * a text key, a key that is neither); the rest is the value. Properties beyond "no crash
 * / no out-of-bounds read" (ASan):
 *   - a refused record leaves *out NULL and a message naming the cache path;
 *   - an accepted entry is a cache item (vf_cache_check_item passes) and re-encodes to a
 *     record the decoder accepts again with the same bytes;
 *   - an accepted summary names this format and version.
 * In the normal build it is linked with replay_main.c and runs over corpus/fuzz_cache_record/.
 */
#include "formats/cache_format.h"
#include "runtime/core/item.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_cache_record: property violated: %s (%s)\n", what, msg ? msg : "");
    abort();
}

static const char *PATH = "fuzz.lmdb";

static void refused(vf_item *it, const vf_status *st)
{
    if (it) fail("refused record returned an item", st->msg);
    if (!strstr(st->msg, PATH)) fail("refusal does not name the cache", st->msg);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1) return 0;
    static const char *keys[] = {"0123456789abcdef0123456789abcdef",
                                 "text:0123456789abcdef0123456789abcdef", "__meta__"};
    const int which = data[0] % 3;
    const char *key = keys[data[0] / 3 % 3];
    const unsigned char *val = data + 1;
    const size_t vlen = size - 1;
    vf_status st = {0};
    vf_item *it = NULL;
    if (which == 0) {
        if (vf_cache_record_decode(PATH, key, strlen(key), val, vlen, &it, &st) != 0) {
            refused(it, &st);
            return 0;
        }
        vf_status cs = {0};
        if (vf_cache_check_item(it, &cs) != 0) fail("accepted entry is not a cache item", cs.msg);
        size_t n = 0, n2 = 0;
        void *again = NULL, *third = NULL;
        if (vf_item_encode_alloc(it, &again, &n, &cs) != 0) fail("accepted entry does not encode", cs.msg);
        vf_item *it2 = NULL;
        if (vf_cache_record_decode(PATH, key, strlen(key), again, n, &it2, &cs) != 0)
            fail("re-encoded entry refused", cs.msg);
        if (vf_item_encode_alloc(it2, &third, &n2, &cs) != 0 || n2 != n || memcmp(third, again, n) != 0)
            fail("re-encoding is not stable", NULL);
        vf_free(third);
        vf_free(again);
        vf_item_free(it2);
        vf_item_free(it);
    } else if (which == 1) {
        if (vf_cache_text_decode(PATH, key, strlen(key), val, vlen, &it, &st) != 0) {
            refused(it, &st);
            return 0;
        }
        vf_item_free(it);
    } else {
        vf_json *m = NULL;
        if (vf_cache_meta_parse(PATH, val, vlen, &m, &st) != 0) {
            if (m) fail("refused summary returned a tree", st.msg);
            if (!strstr(st.msg, PATH)) fail("refusal does not name the cache", st.msg);
            return 0;
        }
        if (strcmp(vf_json_get_str(m, "format", ""), VF_CACHE_FORMAT) != 0) fail("summary of another format", NULL);
        vf_json_free(m);
    }
    return 0;
}
