/* json.c — strict JSON parser, value tree and emitter (see json.h).
 *
 * The parser is recursive descent over a byte span with a nesting limit, so hostile
 * input (a resolved graph handed to a worker, a --set value) cannot blow the stack.
 * Positions are turned into line/column only when an error is reported.
 */
#include "runtime/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 200

/* ------------------------------------------------------------------ nodes */

static vf_json *node(vf_json_type t)
{
    vf_json *j = calloc(1, sizeof *j);
    if (j) j->type = t;
    return j;
}

vf_json *vf_json_null(void) { return node(VF_JSON_NULL); }
vf_json *vf_json_bool(bool b)
{
    vf_json *j = node(VF_JSON_BOOL);
    if (j) j->b = b;
    return j;
}
vf_json *vf_json_int(int64_t i)
{
    vf_json *j = node(VF_JSON_INT);
    if (j) j->i = i;
    return j;
}
vf_json *vf_json_num(double n)
{
    vf_json *j = node(VF_JSON_NUM);
    if (j) j->n = n;
    return j;
}
vf_json *vf_json_str(const char *s)
{
    vf_json *j = node(VF_JSON_STR);
    if (!j) return NULL;
    j->s = strdup(s ? s : "");
    if (!j->s) {
        free(j);
        return NULL;
    }
    return j;
}
vf_json *vf_json_arr(void) { return node(VF_JSON_ARR); }
vf_json *vf_json_obj(void) { return node(VF_JSON_OBJ); }

void vf_json_free(vf_json *j)
{
    if (!j) return;
    for (int i = 0; i < j->len; i++) {
        vf_json_free(j->items[i]);
        if (j->keys) free(j->keys[i]);
    }
    free(j->items);
    free(j->keys);
    free(j->s);
    free(j);
}

static int grow(vf_json *j)
{
    if (j->len < j->cap) return 0;
    int cap = j->cap ? j->cap * 2 : 4;
    vf_json **items = realloc(j->items, (size_t)cap * sizeof *items);
    if (!items) return VF_ENOMEM;
    j->items = items;
    if (j->type == VF_JSON_OBJ) {
        char **keys = realloc(j->keys, (size_t)cap * sizeof *keys);
        if (!keys) return VF_ENOMEM;
        j->keys = keys;
    }
    j->cap = cap;
    return 0;
}

int vf_json_push(vf_json *arr, vf_json *v)
{
    if (!arr || !v || arr->type != VF_JSON_ARR || grow(arr) < 0) {
        vf_json_free(v);
        return arr && v && arr->type == VF_JSON_ARR ? VF_ENOMEM : VF_EINVAL;
    }
    arr->items[arr->len++] = v;
    return 0;
}

static int find_key(const vf_json *obj, const char *key)
{
    if (!obj || obj->type != VF_JSON_OBJ) return -1;
    for (int i = 0; i < obj->len; i++)
        if (strcmp(obj->keys[i], key) == 0) return i;
    return -1;
}

int vf_json_set(vf_json *obj, const char *key, vf_json *v)
{
    if (!obj || !v || obj->type != VF_JSON_OBJ) {
        vf_json_free(v);
        return VF_EINVAL;
    }
    int k = find_key(obj, key);
    if (k >= 0) {
        vf_json_free(obj->items[k]);
        obj->items[k] = v;
        return 0;
    }
    char *dup = strdup(key);
    if (!dup || grow(obj) < 0) {
        free(dup);
        vf_json_free(v);
        return VF_ENOMEM;
    }
    obj->keys[obj->len] = dup;
    obj->items[obj->len++] = v;
    return 0;
}

vf_json *vf_json_take(vf_json *obj, const char *key)
{
    int k = find_key(obj, key);
    if (k < 0) return NULL;
    vf_json *v = obj->items[k];
    free(obj->keys[k]);
    memmove(obj->items + k, obj->items + k + 1, (size_t)(obj->len - k - 1) * sizeof *obj->items);
    memmove(obj->keys + k, obj->keys + k + 1, (size_t)(obj->len - k - 1) * sizeof *obj->keys);
    obj->len--;
    return v;
}

vf_json *vf_json_clone(const vf_json *j)
{
    if (!j) return NULL;
    vf_json *c = node(j->type);
    if (!c) return NULL;
    c->b = j->b;
    c->i = j->i;
    c->n = j->n;
    if (j->type == VF_JSON_STR && !(c->s = strdup(j->s))) goto fail;
    for (int i = 0; i < j->len; i++) {
        vf_json *v = vf_json_clone(j->items[i]);
        if (!v) goto fail;
        int rc = j->type == VF_JSON_OBJ ? vf_json_set(c, j->keys[i], v) : vf_json_push(c, v);
        if (rc < 0) goto fail;
    }
    return c;
fail:
    vf_json_free(c);
    return NULL;
}

/* ------------------------------------------------------------------ getters */

vf_json *vf_json_get(const vf_json *obj, const char *key)
{
    int k = find_key(obj, key);
    return k < 0 ? NULL : obj->items[k];
}
vf_json *vf_json_at(const vf_json *arr, int i)
{
    if (!arr || (arr->type != VF_JSON_ARR && arr->type != VF_JSON_OBJ) || i < 0 || i >= arr->len)
        return NULL;
    return arr->items[i];
}
int vf_json_len(const vf_json *j)
{
    return j && (j->type == VF_JSON_ARR || j->type == VF_JSON_OBJ) ? j->len : 0;
}
const char *vf_json_key_at(const vf_json *obj, int i)
{
    if (!obj || obj->type != VF_JSON_OBJ || i < 0 || i >= obj->len) return NULL;
    return obj->keys[i];
}
bool vf_json_is_number(const vf_json *j)
{
    return j && (j->type == VF_JSON_INT || j->type == VF_JSON_NUM);
}
double vf_json_as_num(const vf_json *j)
{
    if (!j) return 0;
    return j->type == VF_JSON_INT ? (double)j->i : j->type == VF_JSON_NUM ? j->n : 0;
}
const char *vf_json_get_str(const vf_json *obj, const char *key, const char *def)
{
    vf_json *v = vf_json_get(obj, key);
    return v && v->type == VF_JSON_STR ? v->s : def;
}
int64_t vf_json_get_int(const vf_json *obj, const char *key, int64_t def)
{
    vf_json *v = vf_json_get(obj, key);
    if (!v) return def;
    if (v->type == VF_JSON_INT) return v->i;
    if (v->type == VF_JSON_NUM && v->n == floor(v->n) && fabs(v->n) < 9.2e18) return (int64_t)v->n;
    return def;
}
double vf_json_get_num(const vf_json *obj, const char *key, double def)
{
    vf_json *v = vf_json_get(obj, key);
    return vf_json_is_number(v) ? vf_json_as_num(v) : def;
}
bool vf_json_get_bool(const vf_json *obj, const char *key, bool def)
{
    vf_json *v = vf_json_get(obj, key);
    return v && v->type == VF_JSON_BOOL ? v->b : def;
}

const char *vf_json_type_name(vf_json_type t)
{
    switch (t) {
    case VF_JSON_NULL: return "null";
    case VF_JSON_BOOL: return "boolean";
    case VF_JSON_INT: return "integer";
    case VF_JSON_NUM: return "number";
    case VF_JSON_STR: return "string";
    case VF_JSON_ARR: return "list";
    case VF_JSON_OBJ: return "table";
    }
    return "?";
}

bool vf_json_equal(const vf_json *a, const vf_json *b)
{
    if (!a || !b) return a == b;
    if (vf_json_is_number(a) && vf_json_is_number(b)) {
        if (a->type == VF_JSON_INT && b->type == VF_JSON_INT) return a->i == b->i;
        return vf_json_as_num(a) == vf_json_as_num(b);
    }
    if (a->type != b->type) return false;
    switch (a->type) {
    case VF_JSON_NULL: return true;
    case VF_JSON_BOOL: return a->b == b->b;
    case VF_JSON_STR: return strcmp(a->s, b->s) == 0;
    case VF_JSON_ARR:
        if (a->len != b->len) return false;
        for (int i = 0; i < a->len; i++)
            if (!vf_json_equal(a->items[i], b->items[i])) return false;
        return true;
    case VF_JSON_OBJ:
        if (a->len != b->len) return false;
        for (int i = 0; i < a->len; i++)
            if (!vf_json_equal(a->items[i], vf_json_get(b, a->keys[i]))) return false;
        return true;
    default: return false;
    }
}

/* ------------------------------------------------------------------ parser */

typedef struct parser {
    const char *s, *p, *end;
    vf_status *st;
    int failed;
} parser;

static void position(const parser *ps, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *c = ps->s; c < at && c < ps->end; c++) {
        if (*c == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)*c & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

static vf_json *perr(parser *ps, const char *at, const char *what)
{
    if (!ps->failed) {
        int line, col;
        position(ps, at, &line, &col);
        vf_status_set(ps->st, VF_EINVAL, __FILE__, __LINE__, "line %d, column %d: %s", line, col,
                      what);
        ps->failed = 1;
    }
    return NULL;
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(parser *ps, const char *at, unsigned *out)
{
    if (ps->end - at < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(at[i]);
        if (h < 0) return -1;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (1..4), 0 if invalid. */
static int utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    int n;
    unsigned min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) n = 2, min = 0x80, c &= 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 3, min = 0x800, c &= 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 4, min = 0x10000, c &= 0x07;
    else return 0;
    if (end - p < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (p[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    return n;
}

bool vf_json_utf8_ok(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        int l = *p ? utf8_len(p, end) : 0;
        if (!l) return false;
        p += l;
    }
    return true;
}

static int put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string starting at the opening quote; returns a malloc'd C string. */
static char *parse_string(parser *ps)
{
    const char *start = ps->p++;
    /* Decoded text is never longer than the source span. */
    const char *q = ps->p;
    while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    if (q >= ps->end) {
        perr(ps, start, "unterminated string");
        return NULL;
    }
    char *out = malloc((size_t)(q - ps->p) + 1), *o = out;
    if (!out) {
        perr(ps, start, "out of memory");
        return NULL;
    }
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            perr(ps, ps->p, "control character in string (escape it)");
            goto fail;
        }
        if (c != '\\') {
            int n = utf8_len((const unsigned char *)ps->p, (const unsigned char *)ps->end);
            if (!n) {
                perr(ps, ps->p, "invalid UTF-8 in string");
                goto fail;
            }
            memcpy(o, ps->p, (size_t)n);
            o += n;
            ps->p += n;
            continue;
        }
        const char *esc = ps->p++;
        switch (*ps->p) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp;
            if (read_hex4(ps, ps->p + 1, &cp) < 0) {
                perr(ps, esc, "bad \\u escape");
                goto fail;
            }
            ps->p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (ps->end - ps->p < 7 || ps->p[1] != '\\' || ps->p[2] != 'u' ||
                    read_hex4(ps, ps->p + 3, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF) {
                    perr(ps, esc, "unpaired UTF-16 surrogate in \\u escape");
                    goto fail;
                }
                ps->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                perr(ps, esc, "unpaired UTF-16 surrogate in \\u escape");
                goto fail;
            }
            if (cp == 0) {
                perr(ps, esc, "\\u0000 is not allowed in strings");
                goto fail;
            }
            o += put_utf8(o, cp);
            break;
        }
        default:
            perr(ps, esc, "bad escape in string");
            goto fail;
        }
        ps->p++;
    }
    ps->p++; /* closing quote */
    *o = 0;
    return out;
fail:
    free(out);
    return NULL;
}

static vf_json *parse_number(parser *ps)
{
    const char *start = ps->p, *p = ps->p;
    bool is_int = true;
    if (p < ps->end && *p == '-') p++;
    if (p >= ps->end || !(*p >= '0' && *p <= '9')) return perr(ps, start, "bad number");
    if (*p == '0') {
        p++;
        if (p < ps->end && *p >= '0' && *p <= '9')
            return perr(ps, start, "bad number (leading zero)");
    } else {
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && *p == '.') {
        is_int = false;
        p++;
        if (p >= ps->end || !(*p >= '0' && *p <= '9')) return perr(ps, start, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        is_int = false;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (p >= ps->end || !(*p >= '0' && *p <= '9')) return perr(ps, start, "bad number");
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    char buf[400];
    size_t n = (size_t)(p - start);
    if (n >= sizeof buf) return perr(ps, start, "number too long");
    memcpy(buf, start, n);
    buf[n] = 0;
    ps->p = p;
    if (is_int) {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno != ERANGE) {
            vf_json *j = vf_json_int(v);
            return j ? j : perr(ps, start, "out of memory");
        }
    }
    double d = strtod(buf, NULL);
    if (!isfinite(d)) return perr(ps, start, "number out of range");
    vf_json *j = vf_json_num(d);
    return j ? j : perr(ps, start, "out of memory");
}

static vf_json *parse_value(parser *ps, int depth);

static vf_json *parse_container(parser *ps, int depth, bool is_obj)
{
    const char *start = ps->p++;
    vf_json *j = is_obj ? vf_json_obj() : vf_json_arr();
    if (!j) return perr(ps, start, "out of memory");
    if (depth > JSON_MAX_DEPTH) {
        vf_json_free(j);
        return perr(ps, start, "nested too deeply");
    }
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
        ps->p++;
        return j;
    }
    for (;;) {
        char *key = NULL;
        skip_ws(ps);
        if (is_obj) {
            if (ps->p >= ps->end || *ps->p != '"') {
                perr(ps, ps->p, "expected a string key");
                goto fail;
            }
            const char *kat = ps->p;
            if (!(key = parse_string(ps))) goto fail;
            if (find_key(j, key) >= 0) {
                char msg[160];
                snprintf(msg, sizeof msg, "duplicate key \"%.100s\"", key);
                free(key);
                perr(ps, kat, msg);
                goto fail;
            }
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                perr(ps, ps->p, "expected ':'");
                goto fail;
            }
            ps->p++;
        }
        vf_json *v = parse_value(ps, depth + 1);
        if (!v) {
            free(key);
            goto fail;
        }
        int rc = is_obj ? vf_json_set(j, key, v) : vf_json_push(j, v);
        free(key);
        if (rc < 0) {
            perr(ps, ps->p, "out of memory");
            goto fail;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
            ps->p++;
            return j;
        }
        perr(ps, ps->p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        goto fail;
    }
fail:
    vf_json_free(j);
    return NULL;
}

static bool word(parser *ps, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0) return false;
    ps->p += n;
    return true;
}

static vf_json *parse_value(parser *ps, int depth)
{
    skip_ws(ps);
    if (ps->p >= ps->end) return perr(ps, ps->p, "unexpected end of input");
    const char *at = ps->p;
    switch (*ps->p) {
    case '{': return parse_container(ps, depth, true);
    case '[': return parse_container(ps, depth, false);
    case '"': {
        char *s = parse_string(ps);
        if (!s) return NULL;
        vf_json *j = node(VF_JSON_STR);
        if (!j) {
            free(s);
            return perr(ps, at, "out of memory");
        }
        j->s = s;
        return j;
    }
    case 't':
        if (word(ps, "true")) return vf_json_bool(true);
        break;
    case 'f':
        if (word(ps, "false")) return vf_json_bool(false);
        break;
    case 'n':
        if (word(ps, "null")) return vf_json_null();
        break;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps);
    }
    return perr(ps, at, "unexpected character");
}

vf_json *vf_json_parse_n(const char *text, size_t n, vf_status *st)
{
    parser ps = {text, text, text + n, st, 0};
    vf_json *j = parse_value(&ps, 0);
    if (!j) return NULL;
    skip_ws(&ps);
    if (ps.p != ps.end) {
        vf_json_free(j);
        return perr(&ps, ps.p, "trailing characters after the value");
    }
    return j;
}

vf_json *vf_json_parse(const char *text, vf_status *st)
{
    if (!text) {
        vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "no JSON text");
        return NULL;
    }
    return vf_json_parse_n(text, strlen(text), st);
}

/* ------------------------------------------------------------------ emitter */

typedef struct sbuf {
    char *b;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *sb, const char *s, size_t n)
{
    if (sb->oom) return;
    if (sb->n + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 64;
        while (sb->n + n + 1 > cap) cap *= 2;
        char *b = realloc(sb->b, cap);
        if (!b) {
            sb->oom = 1;
            return;
        }
        sb->b = b;
        sb->cap = cap;
    }
    memcpy(sb->b + sb->n, s, n);
    sb->n += n;
    sb->b[sb->n] = 0;
}
static void sb_puts(sbuf *sb, const char *s) { sb_put(sb, s, strlen(s)); }

static void emit_string(sbuf *sb, const char *s)
{
    sb_put(sb, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': sb_put(sb, "\\\"", 2); break;
        case '\\': sb_put(sb, "\\\\", 2); break;
        case '\n': sb_put(sb, "\\n", 2); break;
        case '\r': sb_put(sb, "\\r", 2); break;
        case '\t': sb_put(sb, "\\t", 2); break;
        case '\b': sb_put(sb, "\\b", 2); break;
        case '\f': sb_put(sb, "\\f", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                sb_put(sb, esc, 6);
            } else {
                sb_put(sb, (const char *)p, 1);
            }
        }
    }
    sb_put(sb, "\"", 1);
}

/* Shortest text that reads back as the same double; always looks like a float so the
 * type survives a round trip. */
static void emit_double(sbuf *sb, double d)
{
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    if (!strpbrk(buf, ".eE")) strcat(buf, ".0");
    sb_puts(sb, buf);
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(**(char *const *const *)a, **(char *const *const *)b);
}

static void newline(sbuf *sb, int indent, int level)
{
    if (indent <= 0) return;
    sb_put(sb, "\n", 1);
    for (int i = 0; i < indent * level; i++) sb_put(sb, " ", 1);
}

static int emit(sbuf *sb, const vf_json *j, bool canonical, int indent, int level)
{
    char buf[32];
    switch (j->type) {
    case VF_JSON_NULL: sb_puts(sb, "null"); return 0;
    case VF_JSON_BOOL: sb_puts(sb, j->b ? "true" : "false"); return 0;
    case VF_JSON_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)j->i);
        sb_puts(sb, buf);
        return 0;
    case VF_JSON_NUM:
        if (!isfinite(j->n)) return VF_EINVAL;
        emit_double(sb, j->n);
        return 0;
    case VF_JSON_STR: emit_string(sb, j->s); return 0;
    case VF_JSON_ARR:
        sb_put(sb, "[", 1);
        for (int i = 0; i < j->len; i++) {
            if (i) sb_put(sb, ",", 1);
            newline(sb, indent, level + 1);
            if (emit(sb, j->items[i], canonical, indent, level + 1) < 0) return VF_EINVAL;
        }
        if (j->len) newline(sb, indent, level);
        sb_put(sb, "]", 1);
        return 0;
    case VF_JSON_OBJ: {
        /* Order: indices into keys, sorted when canonical. */
        char ***order = malloc(sizeof *order * (size_t)(j->len ? j->len : 1));
        if (!order) return VF_ENOMEM;
        for (int i = 0; i < j->len; i++) order[i] = &j->keys[i];
        if (canonical) qsort(order, (size_t)j->len, sizeof order[0], cmp_keys);
        sb_put(sb, "{", 1);
        int rc = 0;
        for (int i = 0; i < j->len && rc == 0; i++) {
            int k = (int)(order[i] - j->keys);
            if (i) sb_put(sb, ",", 1);
            newline(sb, indent, level + 1);
            emit_string(sb, j->keys[k]);
            sb_put(sb, indent > 0 ? ": " : ":", indent > 0 ? 2 : 1);
            rc = emit(sb, j->items[k], canonical, indent, level + 1);
        }
        free(order);
        if (rc < 0) return rc;
        if (j->len) newline(sb, indent, level);
        sb_put(sb, "}", 1);
        return 0;
    }
    }
    return VF_EINVAL;
}

char *vf_json_emit(const vf_json *j, bool canonical, int indent)
{
    sbuf sb = {0};
    if (!j || emit(&sb, j, canonical, canonical ? 0 : indent, 0) < 0 || sb.oom) {
        free(sb.b);
        return NULL;
    }
    if (!sb.b) sb_puts(&sb, "");
    return sb.b;
}
