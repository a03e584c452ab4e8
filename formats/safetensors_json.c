/* safetensors_json.c — the strict JSON tokenizer of safetensors headers (st_json.h):
 * whitespace, literals, strings with every escape (surrogate pairs to UTF-8), unsigned
 * integers, and skipping a value to a bounded depth. */
#include "formats/st_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vf_stj_err(jp *j, const char *what)
{
    if (!j->err[0]) snprintf(j->err, sizeof j->err, "%s", what);
    return -1;
}

void vf_stj_ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

int vf_stj_lit(jp *j, char c)
{
    vf_stj_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 0;
    }
    char m[40];
    snprintf(m, sizeof m, "expected '%c'", c);
    return vf_stj_err(j, m);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(jp *j, unsigned *out)
{
    if (j->end - j->p < 4) return vf_stj_err(j, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(j->p[i]);
        if (h < 0) return vf_stj_err(j, "bad \\u escape");
        v = v << 4 | (unsigned)h;
    }
    j->p += 4;
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a JSON string; *out is malloc'd (NULL out = skip). The header was checked to
 * be valid UTF-8 as a whole, so raw bytes are copied as they are. */
int vf_stj_str(jp *j, char **out)
{
    if (vf_stj_lit(j, '"')) return -1;
    const char *s = j->p;
    /* unescaped output is never longer than the input */
    const char *q = s;
    while (q < j->end && *q != '"') q += (*q == '\\' && q + 1 < j->end) ? 2 : 1;
    char *o = out ? malloc((size_t)(q - s) + 1) : NULL;
    if (out && !o) return vf_stj_err(j, "out of memory");
    size_t n = 0;
    char tmp[4];
    while (1) {
        if (j->p >= j->end) { free(o); return vf_stj_err(j, "unterminated string"); }
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"') break;
        if (c < 0x20) { free(o); return vf_stj_err(j, "control character in string"); }
        if (c != '\\') {
            if (o) o[n] = (char)c;
            n++;
            continue;
        }
        if (j->p >= j->end) { free(o); return vf_stj_err(j, "unterminated escape"); }
        char e = *j->p++, r;
        switch (e) {
        case '"': r = '"'; break;
        case '\\': r = '\\'; break;
        case '/': r = '/'; break;
        case 'b': r = '\b'; break;
        case 'f': r = '\f'; break;
        case 'n': r = '\n'; break;
        case 'r': r = '\r'; break;
        case 't': r = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(j, &cp)) { free(o); return -1; }
            if (cp >= 0xDC00 && cp <= 0xDFFF) { free(o); return vf_stj_err(j, "lone surrogate in string"); }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u') {
                    free(o);
                    return vf_stj_err(j, "lone surrogate in string");
                }
                j->p += 2;
                if (hex4(j, &lo)) { free(o); return -1; }
                if (lo < 0xDC00 || lo > 0xDFFF) { free(o); return vf_stj_err(j, "lone surrogate in string"); }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            size_t k = put_utf8(tmp, cp);
            if (o) memcpy(o + n, tmp, k);
            n += k;
            continue;
        }
        default: free(o); return vf_stj_err(j, "bad escape in string");
        }
        if (o) o[n] = r;
        n++;
    }
    if (o) {
        o[n] = 0;
        *out = o;
    }
    return 0;
}

/* Unsigned integer as serde_json reads a usize: no sign, fraction, exponent, leading 0. */
int vf_stj_uint(jp *j, uint64_t *out)
{
    vf_stj_ws(j);
    const char *s = j->p;
    if (s < j->end && *s == '-') return vf_stj_err(j, "negative number where an unsigned integer is expected");
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*j->p - '0'), &v))
            return vf_stj_err(j, "integer too large");
        j->p++;
    }
    if (j->p == s) return vf_stj_err(j, "expected an unsigned integer");
    if (j->p - s > 1 && *s == '0') return vf_stj_err(j, "invalid number (leading zero)");
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return vf_stj_err(j, "floating point number where an unsigned integer is expected");
    *out = v;
    return 0;
}

/* Skips any JSON value (unknown fields). */
int vf_stj_skip(jp *j, int depth)
{
    if (depth > ST_MAX_DEPTH) return vf_stj_err(j, "nesting too deep");
    vf_stj_ws(j);
    if (j->p >= j->end) return vf_stj_err(j, "unexpected end of header");
    char c = *j->p;
    if (c == '"') return vf_stj_str(j, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        vf_stj_ws(j);
        if (j->p < j->end && *j->p == close) { j->p++; return 0; }
        while (1) {
            if (c == '{' && (vf_stj_str(j, NULL) || vf_stj_lit(j, ':'))) return -1;
            if (vf_stj_skip(j, depth + 1)) return -1;
            vf_stj_ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            return vf_stj_lit(j, close);
        }
    }
    static const char *lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if ((size_t)(j->end - j->p) >= n && memcmp(j->p, lits[i], n) == 0) { j->p += n; return 0; }
    }
    /* a number: -?int(.frac)?(e[+-]?digits)? */
    const char *s = j->p;
    if (*j->p == '-') j->p++;
    const char *d = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p == d || (j->p - d > 1 && *d == '0')) { j->p = s; return vf_stj_err(j, "invalid value"); }
    if (j->p < j->end && *j->p == '.') {
        d = ++j->p;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        if (j->p == d) return vf_stj_err(j, "invalid number");
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        d = j->p;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        if (j->p == d) return vf_stj_err(j, "invalid number");
    }
    return 0;
}

