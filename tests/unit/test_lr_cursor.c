/* test_lr_cursor.c — the latent reader's cursor text (formats/lr_cursor.h) against the
 * grammar written out by hand: both versions print to the literal strings below, parse
 * back to the same fields, and near-misses of the grammar are refused. The comparison
 * of cursors is checked in test_train.c, the reader's use of them in test_latent_cache.c,
 * arbitrary bytes in tests/fuzz/fuzz_lr_cursor.c. */
#include "tests/vf_test.h"

#include "formats/lr_cursor.h"

static bool same(const vf_lr_cursor *a, const vf_lr_cursor *b)
{
    return a->version == b->version && a->epoch == b->epoch && a->pos == b->pos && a->n == b->n &&
           a->seed == b->seed && a->shard == b->shard && a->nshards == b->nshards && a->buckets == b->buckets;
}

VF_TEST(prints_the_grammar)
{
    char buf[VF_LR_CURSOR_MAX];
    const vf_lr_cursor v1 = {1, 3, 8, 32, 7, 1, 2, 0};
    vf_lr_cursor_print(&v1, buf, sizeof buf);
    VF_CHECK_STR(buf, "v1;epoch=3;pos=8;n=32;seed=7;shard=1/2");
    const vf_lr_cursor v2 = {2, 0, 5, 120, 9007199254740991ull, 0, 1, 0x00ab12cd34ef5678ull};
    vf_lr_cursor_print(&v2, buf, sizeof buf);
    VF_CHECK_STR(buf, "v2;epoch=0;batch=5;n=120;seed=9007199254740991;shard=0/1;buckets=00ab12cd34ef5678");
}

VF_TEST(the_longest_fits)
{
    char buf[VF_LR_CURSOR_MAX + 64];
    const vf_lr_cursor c = {2, UINT64_MAX, INT64_MAX, INT64_MAX, UINT64_MAX, -2147483647 - 1, -2147483647 - 1,
                            UINT64_MAX};
    vf_lr_cursor_print(&c, buf, sizeof buf);
    VF_CHECK(strlen(buf) < VF_LR_CURSOR_MAX);
}

VF_TEST(parses_back)
{
    vf_lr_cursor c;
    const vf_lr_cursor v1 = {1, 3, 8, 32, 7, 1, 2, 0};
    VF_CHECK_EQ_INT(vf_lr_cursor_parse("v1;epoch=3;pos=8;n=32;seed=7;shard=1/2", 1, &c), 0);
    VF_CHECK(same(&c, &v1));
    const vf_lr_cursor v2 = {2, 4, 0, 120, 5, 3, 4, 0xffffffffffffffffull};
    VF_CHECK_EQ_INT(vf_lr_cursor_parse("v2;epoch=4;batch=0;n=120;seed=5;shard=3/4;buckets=ffffffffffffffff", 2, &c), 0);
    VF_CHECK(same(&c, &v2));
}

VF_TEST(refuses_near_misses)
{
    vf_lr_cursor c;
    static const char *const v1_bad[] = {
        "",
        "v2;epoch=3;batch=8;n=32;seed=7;shard=1/2;buckets=0000000000000000", /* the other version */
        "v1;epoch=3;pos=8;n=32;seed=7;shard=1/2;",                           /* bytes after the end */
        "v1;epoch=3;pos=8;n=32;seed=7;shard=1",                              /* a field cut */
        "v1;epoch=3;n=32;pos=8;seed=7;shard=1/2",                            /* out of order */
        "v1;epoch=3;pos=-1;n=32;seed=7;shard=1/2",                           /* a negative position */
        "v1;epoch=x;pos=8;n=32;seed=7;shard=1/2",                            /* not a number */
    };
    for (size_t i = 0; i < sizeof v1_bad / sizeof v1_bad[0]; i++)
        VF_CHECK_MSG(vf_lr_cursor_parse(v1_bad[i], 1, &c) == VF_EINVAL, "%s", v1_bad[i]);
    VF_CHECK_EQ_INT(vf_lr_cursor_parse("v1;epoch=3;pos=8;n=32;seed=7;shard=1/2", 2, &c), VF_EINVAL);
    VF_CHECK_EQ_INT(vf_lr_cursor_parse("v2;epoch=3;batch=8;n=32;seed=7;shard=1/2", 2, &c), VF_EINVAL);
    VF_CHECK_EQ_INT(vf_lr_cursor_parse("v1;epoch=3;pos=8;n=32;seed=7;shard=1/2", 3, &c), VF_EINVAL);
    VF_CHECK_EQ_INT(vf_lr_cursor_parse(NULL, 1, &c), VF_EINVAL);
}

int main(void) { return vf_test_main(); }
