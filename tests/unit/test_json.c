/* test_json.c — the strict JSON tree: parse, exact integers, canonical emit, errors with
 * line/column, round trips, builders. Expected texts are written out by hand (RFC 8259). */
#include "tests/vf_test.h"

#include "runtime/json.h"

#include <float.h>
#include <stdint.h>

static char *canon(const char *text)
{
    vf_status st = {0};
    vf_json *j = vf_json_parse(text, &st);
    if (!j) {
        fprintf(stderr, "parse failed: %s\n", st.msg);
        return NULL;
    }
    char *out = vf_json_emit(j, true, 0);
    vf_json_free(j);
    return out;
}

static void check_canon(const char *in, const char *want)
{
    char *got = canon(in);
    VF_CHECK_STR(got, want);
    free(got);
}

/* The parse fails and the message is exactly `want`. */
static void check_err(const char *in, const char *want)
{
    vf_status st = {0};
    vf_json *j = vf_json_parse(in, &st);
    VF_CHECK(j == NULL);
    VF_CHECK_EQ_INT(st.code, VF_EINVAL);
    VF_CHECK_STR(st.msg, want);
    vf_json_free(j);
}

VF_TEST(scalars)
{
    check_canon("null", "null");
    check_canon(" true ", "true");
    check_canon("false", "false");
    check_canon("0", "0");
    check_canon("-0", "0");
    check_canon("42", "42");
    check_canon("\"a\\nb\\\"c\\\\\"", "\"a\\nb\\\"c\\\\\"");
    check_canon("1.5", "1.5");
    check_canon("1e3", "1000.0");
    check_canon("-2.5E-3", "-0.0025");
    check_canon("0.1", "0.1");
}

VF_TEST(integers_exact)
{
    vf_status st = {0};
    vf_json *j = vf_json_parse("[9007199254740993, -9223372036854775808, 9223372036854775807, 9223372036854775808]", &st);
    VF_CHECK(j != NULL);
    if (!j) return;
    VF_CHECK_EQ_INT(j->items[0]->type, VF_JSON_INT);
    VF_CHECK(j->items[0]->i == 9007199254740993LL); /* not representable as a double */
    VF_CHECK(j->items[1]->i == INT64_MIN);
    VF_CHECK(j->items[2]->i == INT64_MAX);
    VF_CHECK_EQ_INT(j->items[3]->type, VF_JSON_NUM); /* overflow: becomes a double */
    char *s = vf_json_emit(j, true, 0);
    VF_CHECK_STR(s, "[9007199254740993,-9223372036854775808,9223372036854775807,9.223372036854776e+18]");
    free(s);
    vf_json_free(j);
}

VF_TEST(doubles_round_trip)
{
    double vals[] = {0.1, 1.0 / 3.0, 1e-300, 1e300, DBL_MAX, DBL_MIN, -123.456, 5e-324, 2.0};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        vf_json *j = vf_json_num(vals[i]);
        char *s = vf_json_emit(j, true, 0);
        vf_status st = {0};
        vf_json *back = vf_json_parse(s, &st);
        VF_CHECK_MSG(back && back->type == VF_JSON_NUM && back->n == vals[i], "%s", s);
        vf_json_free(back);
        vf_json_free(j);
        free(s);
    }
    /* Non-finite numbers have no JSON text. */
    vf_json *inf = vf_json_num(1.0 / 0.0);
    VF_CHECK(vf_json_emit(inf, true, 0) == NULL);
    vf_json_free(inf);
}

VF_TEST(canonical_sorts_keys)
{
    check_canon("{\"b\":1,\"a\":{\"z\":[1,2,{\"y\":0,\"x\":1}],\"c\":null}}",
                "{\"a\":{\"c\":null,\"z\":[1,2,{\"x\":1,\"y\":0}]},\"b\":1}");
    /* Non-canonical keeps insertion order; indent puts one entry per line. */
    vf_status st = {0};
    vf_json *j = vf_json_parse("{\"b\":1,\"a\":[true]}", &st);
    char *s = vf_json_emit(j, false, 0);
    VF_CHECK_STR(s, "{\"b\":1,\"a\":[true]}");
    free(s);
    s = vf_json_emit(j, false, 2);
    VF_CHECK_STR(s, "{\n  \"b\": 1,\n  \"a\": [\n    true\n  ]\n}");
    free(s);
    vf_json_free(j);
    check_canon("{}", "{}");
    check_canon("[]", "[]");
}

VF_TEST(unicode)
{
    check_canon("\"\\u00e9\\u4e2d\\ud83d\\ude00\"", "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"");
    check_canon("\"\xc3\xa9\"", "\"\xc3\xa9\"");
    check_canon("\"\\u0001\"", "\"\\u0001\"");
    check_err("\"\\ud83d\"", "line 1, column 2: unpaired UTF-16 surrogate in \\u escape");
    check_err("\"\\u0000\"", "line 1, column 2: \\u0000 is not allowed in strings");
    check_err("\"\xff\"", "line 1, column 2: invalid UTF-8 in string");
    check_err("\"\xc0\x80\"", "line 1, column 2: invalid UTF-8 in string"); /* overlong NUL */
    VF_CHECK(vf_json_utf8_ok("abc\xc3\xa9", 5));
    VF_CHECK(!vf_json_utf8_ok("a\0b", 3));
    VF_CHECK(!vf_json_utf8_ok("\xed\xa0\x80", 3)); /* a surrogate encoded in UTF-8 */
}

VF_TEST(errors_with_position)
{
    check_err("", "line 1, column 1: unexpected end of input");
    check_err("{\"a\":1,}", "line 1, column 8: expected a string key");
    check_err("[1,2,]", "line 1, column 6: unexpected character");
    check_err("{\n  \"a\": 01\n}", "line 2, column 8: bad number (leading zero)");
    check_err("{\"a\" 1}", "line 1, column 6: expected ':'");
    check_err("[1 2]", "line 1, column 4: expected ',' or ']'");
    check_err("{\"a\":1,\n\"a\":2}", "line 2, column 1: duplicate key \"a\"");
    check_err("\"abc", "line 1, column 1: unterminated string");
    check_err("\"a\tb\"", "line 1, column 3: control character in string (escape it)");
    check_err("tru", "line 1, column 1: unexpected character");
    check_err("1 2", "line 1, column 3: trailing characters after the value");
    check_err("NaN", "line 1, column 1: unexpected character");
    check_err("1.", "line 1, column 1: bad number");
    check_err("-", "line 1, column 1: bad number");
    check_err("1e999", "line 1, column 1: number out of range");
    check_err("// c\n1", "line 1, column 1: unexpected character");
    check_err("\"\\x\"", "line 1, column 2: bad escape in string");
}

VF_TEST(depth_limit)
{
    char deep[1000];
    memset(deep, '[', 500);
    memset(deep + 500, ']', 499);
    deep[999] = 0;
    vf_status st = {0};
    vf_json *j = vf_json_parse(deep, &st);
    VF_CHECK(j == NULL);
    VF_CHECK(strstr(st.msg, "nested too deeply") != NULL);
}

VF_TEST(builders_and_getters)
{
    vf_json *o = vf_json_obj();
    VF_CHECK_EQ_INT(vf_json_set(o, "n", vf_json_int(3)), 0);
    VF_CHECK_EQ_INT(vf_json_set(o, "x", vf_json_num(2.5)), 0);
    VF_CHECK_EQ_INT(vf_json_set(o, "s", vf_json_str("hi")), 0);
    VF_CHECK_EQ_INT(vf_json_set(o, "b", vf_json_bool(true)), 0);
    vf_json *a = vf_json_arr();
    vf_json_push(a, vf_json_int(1));
    vf_json_push(a, vf_json_null());
    vf_json_set(o, "a", a);
    VF_CHECK_EQ_INT(vf_json_set(o, "n", vf_json_int(4)), 0); /* replaces */
    VF_CHECK_EQ_INT(vf_json_len(o), 5);
    VF_CHECK_EQ_INT(vf_json_get_int(o, "n", -1), 4);
    VF_CHECK_NEAR(vf_json_get_num(o, "n", -1), 4.0, 0);
    VF_CHECK_EQ_INT(vf_json_get_int(o, "x", -1), -1); /* 2.5 is not an int */
    VF_CHECK_STR(vf_json_get_str(o, "s", NULL), "hi");
    VF_CHECK(vf_json_get_str(o, "n", NULL) == NULL);
    VF_CHECK(vf_json_get_bool(o, "b", false));
    VF_CHECK(vf_json_at(a, 2) == NULL);
    VF_CHECK_STR(vf_json_key_at(o, 1), "x");
    vf_json *c = vf_json_clone(o);
    VF_CHECK(vf_json_equal(o, c));
    vf_json *t = vf_json_take(c, "s");
    VF_CHECK_STR(t->s, "hi");
    VF_CHECK(!vf_json_equal(o, c));
    VF_CHECK(vf_json_get(c, "s") == NULL);
    VF_CHECK_EQ_INT(vf_json_len(c), 4);
    vf_json_free(t);
    char *s = vf_json_emit(o, true, 0);
    VF_CHECK_STR(s, "{\"a\":[1,null],\"b\":true,\"n\":4,\"s\":\"hi\",\"x\":2.5}");
    free(s);
    /* 1 and 1.0 are equal values */
    vf_json *i1 = vf_json_int(1), *d1 = vf_json_num(1.0);
    VF_CHECK(vf_json_equal(i1, d1));
    vf_json_free(i1);
    vf_json_free(d1);
    /* push/set on the wrong node type take (free) the value and fail */
    VF_CHECK(vf_json_push(o, vf_json_int(1)) < 0);
    VF_CHECK(vf_json_set(a, "k", vf_json_int(1)) < 0);
    vf_json_free(c);
    vf_json_free(o);
}

VF_TEST(round_trip_text)
{
    const char *text = "{\"graph\":{\"edges\":[{\"cap\":2,\"loop\":false}],\"name\":\"t\\u00e9\"},"
                       "\"x\":[-1,0.25,1e-07,\"\\t\"]}";
    char *a = canon(text);
    char *b = canon(a);
    VF_CHECK_STR(a, b);
    VF_CHECK_STR(a, "{\"graph\":{\"edges\":[{\"cap\":2,\"loop\":false}],\"name\":\"t\xc3\xa9\"},"
                    "\"x\":[-1,0.25,1e-07,\"\\t\"]}");
    free(a);
    free(b);
}

int main(void) { return vf_test_main(); }
