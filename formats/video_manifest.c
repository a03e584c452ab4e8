/* video_manifest.c — CSV / JSONL / glob video lists (see video_manifest.h). */
#include "formats/video_manifest.h"
#include "formats/video_source.h"

#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ small helpers */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, char c)
{
    if (b->n + 2 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    b->p[b->n++] = c;
    b->p[b->n] = 0;
    return 0;
}

static char *xstrdup(const char *s) { return strdup(s ? s : ""); }

static char *read_file(const char *path, size_t *len, vf_status *st)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "manifest %s: %s", path, strerror(errno));
        return NULL;
    }
    sbuf b = {0};
    char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, fp)) > 0)
        for (size_t i = 0; i < k; i++)
            if (sb_put(&b, chunk[i]) < 0) {
                fclose(fp);
                free(b.p);
                vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "manifest %s: out of memory", path);
                return NULL;
            }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        free(b.p);
        vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "manifest %s: read error", path);
        return NULL;
    }
    *len = b.n;
    return b.p ? b.p : xstrdup("");
}

/* Lexical normalisation of an absolute path in place: "//" and "/./" collapse, "x/.."
 * removes x ("/.." stays "/"), no trailing slash but for "/" itself. */
static void normalise_lexical(char *p)
{
    char *w = p; /* write cursor; p[0] == '/' */
    const char *r = p;
    while (*r) {
        while (*r == '/') r++;
        if (!*r) break;
        const char *e = strchr(r, '/');
        size_t n = e ? (size_t)(e - r) : strlen(r);
        if (n == 1 && r[0] == '.') {
            /* nothing */
        } else if (n == 2 && r[0] == '.' && r[1] == '.') {
            while (w > p && *--w != '/') {}
        } else {
            *w++ = '/';
            memmove(w, r, n); /* w <= r: the path only shrinks */
            w += n;
        }
        r += n;
    }
    if (w == p) *w++ = '/';
    *w = 0;
}

/* Absolute, normalised path of `p` (relative to base_dir): the file's realpath when it
 * exists (so two spellings or a symlink of one file give one source identity and one
 * cache key), else the lexical normalisation (the file is quarantined later anyway, and
 * its message then names a clean path). */
static char *abs_path(const char *base_dir, const char *p)
{
    size_t n = strlen(base_dir) + strlen(p) + 2;
    char *r = malloc(n);
    if (!r) return NULL;
    if (p[0] == '/') snprintf(r, n, "%s", p);
    else snprintf(r, n, "%s/%s", base_dir, p);
    char *real = realpath(r, NULL);
    if (real) {
        free(r);
        return real;
    }
    normalise_lexical(r);
    return r;
}

/* Directory of an existing file, absolute. */
static char *abs_dir_of(const char *file)
{
    char *rp = realpath(file, NULL);
    if (!rp) return NULL;
    char *slash = strrchr(rp, '/');
    if (slash == rp) slash[1] = 0;
    else if (slash) *slash = 0;
    return rp;
}

static void row_fini(vf_manifest_row *r)
{
    free(r->path);
    free(r->caption);
    free(r->text_emb);
    free(r->clip_emb);
    for (int i = 0; i < r->nextra; i++) {
        free(r->extra[i].key);
        free(r->extra[i].val);
    }
    free(r->extra);
    memset(r, 0, sizeof *r);
}

void vf_manifest_fini(vf_manifest *m)
{
    for (int64_t i = 0; i < m->n; i++) row_fini(&m->rows[i]);
    free(m->rows);
    free(m->origin);
    memset(m, 0, sizeof *m);
}

static int push_row(vf_manifest *m, vf_manifest_row *r, int64_t *cap)
{
    if (m->n == *cap) {
        int64_t c = *cap ? *cap * 2 : 64;
        vf_manifest_row *p = realloc(m->rows, c * sizeof *p);
        if (!p) return -1;
        m->rows = p;
        *cap = c;
    }
    m->rows[m->n++] = *r;
    memset(r, 0, sizeof *r);
    return 0;
}

static int add_extra(vf_manifest_row *r, const char *key, const char *val, bool is_num)
{
    vf_manifest_extra *p = realloc(r->extra, (r->nextra + 1) * sizeof *p);
    if (!p) return -1;
    r->extra = p;
    /* Item metadata written by the stage itself wins; a manifest column of the same
     * name keeps its value under "manifest.<name>". */
    static const char *reserved[] = {"path", "caption", "transform", "source", "clip",
                                     "pts_start", "pts_end", "fps", "frame0", "size_bytes",
                                     "mtime_ns", "src_w", "src_h", "rotation", NULL};
    bool clash = false;
    for (int i = 0; reserved[i]; i++) clash |= strcmp(key, reserved[i]) == 0;
    char *k;
    if (clash) {
        size_t n = strlen(key) + 10;
        k = malloc(n);
        if (k) snprintf(k, n, "manifest.%s", key);
    } else {
        k = xstrdup(key);
    }
    char *v = xstrdup(val);
    if (!k || !v) { free(k); free(v); return -1; }
    r->extra[r->nextra].key = k;
    r->extra[r->nextra].val = v;
    r->extra[r->nextra].is_num = is_num;
    r->nextra++;
    return 0;
}

enum { COL_OTHER = 0, COL_PATH, COL_TEXT, COL_START, COL_END, COL_FPS, COL_TEXT_EMB, COL_CLIP_EMB };
static int column_role(const char *name)
{
    if (!strcmp(name, "path") || !strcmp(name, "file_name")) return COL_PATH;
    if (!strcmp(name, "text") || !strcmp(name, "caption")) return COL_TEXT;
    if (!strcmp(name, "start")) return COL_START;
    if (!strcmp(name, "end")) return COL_END;
    if (!strcmp(name, "fps")) return COL_FPS;
    if (!strcmp(name, "text_emb")) return COL_TEXT_EMB;
    if (!strcmp(name, "clip_emb")) return COL_CLIP_EMB;
    return COL_OTHER;
}

/* "" -> absent (0 returned, *out untouched); a number or a ratio "30000/1001" -> 0;
 * otherwise -1. */
static int parse_num(const char *s, double *out)
{
    while (isspace((unsigned char)*s)) s++;
    if (!*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end == '/' && end > s) {
        char *e2;
        double d = strtod(end + 1, &e2);
        if (e2 == end + 1 || !(d > 0)) return -1;
        v /= d;
        end = e2;
    }
    while (isspace((unsigned char)*end)) end++;
    if (*end || errno || end == s) return -1;
    *out = v;
    return 0;
}

/* ------------------------------------------------------------ CSV */

/* Splits one CSV record starting at *pos; advances *pos past it and *line by the
 * newlines consumed. Returns the number of fields, -1 on a bad quote, -2 on memory. */
static int csv_record(const char *s, size_t len, size_t *pos, int *line, char ***fields)
{
    int nf = 0, capf = 0;
    char **f = NULL;
    size_t i = *pos;
    int rc = 0;
    for (;;) {
        sbuf b = {0};
        if (sb_put(&b, 0) < 0) { rc = -2; goto out; }
        b.n = 0;
        if (i < len && s[i] == '"') {
            i++;
            for (;;) {
                if (i >= len) { free(b.p); rc = -1; goto out; }
                if (s[i] == '"') {
                    if (i + 1 < len && s[i + 1] == '"') { if (sb_put(&b, '"') < 0) { free(b.p); rc = -2; goto out; } i += 2; continue; }
                    i++;
                    break;
                }
                if (s[i] == '\n') (*line)++;
                if (sb_put(&b, s[i++]) < 0) { free(b.p); rc = -2; goto out; }
            }
            if (i < len && s[i] != ',' && s[i] != '\n' && s[i] != '\r') { free(b.p); rc = -1; goto out; }
        } else {
            while (i < len && s[i] != ',' && s[i] != '\n' && s[i] != '\r') {
                if (s[i] == '"') { free(b.p); rc = -1; goto out; }
                if (sb_put(&b, s[i++]) < 0) { free(b.p); rc = -2; goto out; }
            }
        }
        if (nf == capf) {
            capf = capf ? capf * 2 : 8;
            char **p = realloc(f, capf * sizeof *p);
            if (!p) { free(b.p); rc = -2; goto out; }
            f = p;
        }
        f[nf++] = b.p;
        if (i < len && s[i] == ',') { i++; continue; }
        break;
    }
    if (i < len && s[i] == '\r') i++;
    if (i < len && s[i] == '\n') i++;
    (*line)++;
    *pos = i;
    *fields = f;
    return nf;
out:
    for (int k = 0; k < nf; k++) free(f[k]);
    free(f);
    return rc;
}

static void free_fields(char **f, int n)
{
    for (int i = 0; i < n; i++) free(f[i]);
    free(f);
}

static int load_csv(const char *path, const char *text, size_t len, const char *dir, int shard,
                    int nshards, vf_manifest *m, vf_status *st)
{
    int rc = 0, line = 1, nh = 0, nf = 0;
    char **hdr = NULL, **f = NULL;
    int *role = NULL;
    int64_t cap = 0, row_no = 0;
    vf_manifest_row r = {0};
    size_t pos = 0;
    if (len >= 3 && (unsigned char)text[0] == 0xEF && (unsigned char)text[1] == 0xBB &&
        (unsigned char)text[2] == 0xBF)
        pos = 3; /* UTF-8 BOM from spreadsheet exports */
    nh = csv_record(text, len, &pos, &line, &hdr);
    if (nh == -2) VF_FAIL(st, VF_ENOMEM, "manifest %s: out of memory", path);
    if (nh < 0) VF_FAIL(st, VF_EBADINPUT, "%s:1: malformed CSV header (bad quoting)", path);
    role = calloc(nh > 0 ? nh : 1, sizeof *role);
    if (!role) VF_FAIL(st, VF_ENOMEM, "manifest %s: out of memory", path);
    int pathcol = -1;
    for (int i = 0; i < nh; i++) {
        char *h = hdr[i];
        while (*h == ' ') h++;
        role[i] = column_role(h);
        if (role[i] == COL_PATH && pathcol < 0) pathcol = i;
    }
    if (pathcol < 0)
        VF_FAIL(st, VF_EBADINPUT, "%s:1: the CSV header has no `path` column (header: %s%s)", path,
                nh > 0 ? hdr[0] : "", nh > 1 ? ",..." : "");
    while (pos < len) {
        int at = line;
        /* blank lines between records are skipped */
        if (text[pos] == '\n' || text[pos] == '\r') {
            if (text[pos] == '\n') line++;
            pos++;
            continue;
        }
        nf = csv_record(text, len, &pos, &line, &f);
        if (nf == -2) VF_FAIL(st, VF_ENOMEM, "manifest %s: out of memory", path);
        if (nf < 0) VF_FAIL(st, VF_EBADINPUT, "%s:%d: malformed CSV row (bad quoting)", path, at);
        if (nf != nh)
            VF_FAIL(st, VF_EBADINPUT, "%s:%d: %d fields, the header has %d", path, at, nf, nh);
        bool mine = row_no % nshards == shard;
        row_no++;
        if (!mine) { free_fields(f, nf); f = NULL; continue; }
        memset(&r, 0, sizeof r);
        r.line = at;
        for (int i = 0; i < nf; i++) {
            double v = 0;
            switch (role[i]) {
            case COL_PATH:
                if (i != pathcol) break;
                if (!f[i][0]) VF_FAIL(st, VF_EBADINPUT, "%s:%d: empty path", path, at);
                r.path = abs_path(dir, f[i]);
                break;
            case COL_TEXT:
                if (!r.caption) r.caption = xstrdup(f[i]);
                break;
            case COL_TEXT_EMB: case COL_CLIP_EMB: {
                char **dst = role[i] == COL_TEXT_EMB ? &r.text_emb : &r.clip_emb;
                if (f[i][0] && !*dst && !(*dst = abs_path(dir, f[i])))
                    VF_FAIL(st, VF_ENOMEM, "manifest %s: out of memory", path);
                break;
            }
            case COL_START: case COL_END: case COL_FPS:
                if (parse_num(f[i], &v) < 0)
                    VF_FAIL(st, VF_EBADINPUT, "%s:%d: column `%s` is not a number: '%s'", path, at,
                            hdr[i], f[i]);
                if (role[i] == COL_START) r.start_s = v;
                else if (role[i] == COL_END) r.end_s = v;
                else r.fps = v;
                break;
            default:
                if (add_extra(&r, hdr[i], f[i], false) < 0)
                    VF_FAIL(st, VF_ENOMEM, "manifest %s: out of memory", path);
            }
        }
        if (!r.caption) r.caption = xstrdup("");
        if (!r.path || !r.caption) VF_FAIL(st, VF_ENOMEM, "manifest %s: out of memory", path);
        if (r.end_s > 0 && r.end_s <= r.start_s)
            VF_FAIL(st, VF_EBADINPUT, "%s:%d: end (%g) is not after start (%g)", path, at, r.end_s, r.start_s);
        if (push_row(m, &r, &cap) < 0) VF_FAIL(st, VF_ENOMEM, "manifest %s: out of memory", path);
        free_fields(f, nf);
        f = NULL;
    }
    m->total = row_no;
fail:
    row_fini(&r);
    if (f) free_fields(f, nf);
    free_fields(hdr, nh > 0 ? nh : 0);
    free(role);
    return rc;
}

/* ------------------------------------------------------------ JSONL */

typedef struct jcur {
    const char *s, *e;
} jcur;

static void jws(jcur *c)
{
    while (c->s < c->e && (*c->s == ' ' || *c->s == '\t' || *c->s == '\r')) c->s++;
}

static int put_utf8(sbuf *b, unsigned cp)
{
    if (cp < 0x80) return sb_put(b, (char)cp);
    if (cp < 0x800) return sb_put(b, (char)(0xC0 | cp >> 6)) | sb_put(b, (char)(0x80 | (cp & 63)));
    if (cp < 0x10000)
        return sb_put(b, (char)(0xE0 | cp >> 12)) | sb_put(b, (char)(0x80 | (cp >> 6 & 63))) |
               sb_put(b, (char)(0x80 | (cp & 63)));
    return sb_put(b, (char)(0xF0 | cp >> 18)) | sb_put(b, (char)(0x80 | (cp >> 12 & 63))) |
           sb_put(b, (char)(0x80 | (cp >> 6 & 63))) | sb_put(b, (char)(0x80 | (cp & 63)));
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= ch - '0';
        else if (ch >= 'a' && ch <= 'f') v |= ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') v |= ch - 'A' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

/* A JSON string at c->s (which is '"'): unescaped into a new heap string. */
static char *jstring(jcur *c)
{
    sbuf b = {0};
    if (sb_put(&b, 0) < 0) return NULL;
    b.n = 0;
    c->s++;
    while (c->s < c->e && *c->s != '"') {
        char ch = *c->s++;
        if ((unsigned char)ch < 0x20) goto bad;
        if (ch != '\\') { if (sb_put(&b, ch) < 0) goto bad; continue; }
        if (c->s >= c->e) goto bad;
        ch = *c->s++;
        int e = 0;
        switch (ch) {
        case '"': case '\\': case '/': e = sb_put(&b, ch); break;
        case 'b': e = sb_put(&b, '\b'); break;
        case 'f': e = sb_put(&b, '\f'); break;
        case 'n': e = sb_put(&b, '\n'); break;
        case 'r': e = sb_put(&b, '\r'); break;
        case 't': e = sb_put(&b, '\t'); break;
        case 'u': {
            unsigned cp, lo;
            if (c->e - c->s < 4 || hex4(c->s, &cp) < 0) goto bad;
            c->s += 4;
            if (cp >= 0xD800 && cp < 0xDC00) { /* surrogate pair */
                if (c->e - c->s < 6 || c->s[0] != '\\' || c->s[1] != 'u' || hex4(c->s + 2, &lo) < 0 ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    goto bad;
                c->s += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            e = put_utf8(&b, cp);
            break;
        }
        default: goto bad;
        }
        if (e < 0) goto bad;
    }
    if (c->s >= c->e) goto bad;
    c->s++;
    return b.p;
bad:
    free(b.p);
    return NULL;
}

/* Parses one flat JSON object line into r. Returns 0, or -1 with *why set. */
static int jsonl_row(const char *s, const char *e, const char *dir, vf_manifest_row *r,
                     const char **why)
{
    jcur c = {s, e};
    char *key = NULL, *val = NULL;
    jws(&c);
    if (c.s >= c.e || *c.s != '{') { *why = "not a JSON object"; return -1; }
    c.s++;
    jws(&c);
    if (c.s < c.e && *c.s == '}') { c.s++; goto end; }
    for (;;) {
        jws(&c);
        if (c.s >= c.e || *c.s != '"' || !(key = jstring(&c))) { *why = "bad key"; goto bad; }
        jws(&c);
        if (c.s >= c.e || *c.s != ':') { *why = "expected ':'"; goto bad; }
        c.s++;
        jws(&c);
        bool is_num = false, is_str = false, is_null = false;
        if (c.s < c.e && *c.s == '"') {
            if (!(val = jstring(&c))) { *why = "bad string"; goto bad; }
            is_str = true;
        } else if (c.e - c.s >= 4 && !strncmp(c.s, "null", 4)) {
            c.s += 4;
            is_null = true;
        } else if (c.e - c.s >= 4 && !strncmp(c.s, "true", 4)) {
            c.s += 4;
            val = xstrdup("true");
        } else if (c.e - c.s >= 5 && !strncmp(c.s, "false", 5)) {
            c.s += 5;
            val = xstrdup("false");
        } else if (c.s < c.e && (*c.s == '-' || isdigit((unsigned char)*c.s))) {
            const char *p = c.s;
            while (c.s < c.e && (isdigit((unsigned char)*c.s) || strchr("+-.eE", *c.s))) c.s++;
            val = strndup(p, c.s - p);
            char *endp;
            if (val) strtod(val, &endp);
            if (!val || *endp) { *why = "bad number"; goto bad; }
            is_num = true;
        } else {
            *why = "nested objects/arrays are not supported";
            goto bad;
        }
        int role = column_role(key);
        if (!is_null) {
            if (!val) { *why = "out of memory"; goto bad; }
            double v = 0;
            if (role == COL_PATH) {
                if (!is_str || !val[0]) { *why = "`path` must be a non-empty string"; goto bad; }
                free(r->path);
                r->path = abs_path(dir, val);
            } else if (role == COL_TEXT) {
                free(r->caption);
                r->caption = val;
                val = NULL;
            } else if (role == COL_TEXT_EMB || role == COL_CLIP_EMB) {
                char **dst = role == COL_TEXT_EMB ? &r->text_emb : &r->clip_emb;
                if (!is_str) { *why = "`text_emb` and `clip_emb` must be strings (safetensors paths)"; goto bad; }
                free(*dst);
                *dst = val[0] ? abs_path(dir, val) : NULL;
                if (val[0] && !*dst) { *why = "out of memory"; goto bad; }
            } else if (role == COL_START || role == COL_END || role == COL_FPS) {
                if (parse_num(val, &v) < 0) { *why = "start/end/fps must be numbers"; goto bad; }
                if (role == COL_START) r->start_s = v;
                else if (role == COL_END) r->end_s = v;
                else r->fps = v;
            } else if (add_extra(r, key, val, is_num) < 0) {
                *why = "out of memory";
                goto bad;
            }
        }
        free(key);
        free(val);
        key = val = NULL;
        jws(&c);
        if (c.s < c.e && *c.s == ',') { c.s++; continue; }
        if (c.s < c.e && *c.s == '}') { c.s++; break; }
        *why = "expected ',' or '}'";
        goto bad;
    }
end:
    jws(&c);
    if (c.s != c.e) { *why = "text after the object"; return -1; }
    if (!r->path) { *why = "no `path` key"; return -1; }
    if (!r->caption) r->caption = xstrdup("");
    return 0;
bad:
    free(key);
    free(val);
    return -1;
}

static int load_jsonl(const char *path, const char *text, size_t len, const char *dir, int shard,
                      int nshards, vf_manifest *m, vf_status *st)
{
    int rc = 0, line = 0;
    int64_t cap = 0, row_no = 0;
    vf_manifest_row r = {0};
    size_t pos = 0;
    while (pos < len) {
        size_t eol = pos;
        while (eol < len && text[eol] != '\n') eol++;
        line++;
        const char *s = text + pos, *e = text + eol;
        pos = eol + 1;
        while (s < e && isspace((unsigned char)*s)) s++;
        if (s == e) continue;
        bool mine = row_no % nshards == shard;
        row_no++;
        if (!mine) continue;
        memset(&r, 0, sizeof r);
        r.line = line;
        const char *why = "";
        if (jsonl_row(s, e, dir, &r, &why) < 0)
            VF_FAIL(st, VF_EBADINPUT, "%s:%d: %s", path, line, why);
        if (r.end_s > 0 && r.end_s <= r.start_s)
            VF_FAIL(st, VF_EBADINPUT, "%s:%d: end (%g) is not after start (%g)", path, line, r.end_s, r.start_s);
        if (push_row(m, &r, &cap) < 0) VF_FAIL(st, VF_ENOMEM, "manifest %s: out of memory", path);
    }
    m->total = row_no;
fail:
    row_fini(&r);
    return rc;
}

/* ------------------------------------------------------------ entry points */

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

int vf_manifest_load(const char *path, int shard, int nshards, vf_manifest *out, vf_status *st)
{
    int rc = 0;
    size_t len = 0;
    char *text = NULL, *dir = NULL;
    memset(out, 0, sizeof *out);
    if (nshards < 1 || shard < 0 || shard >= nshards)
        VF_FAIL(st, VF_EUSAGE, "decode: shard %d outside [0, nshards=%d)", shard, nshards);
    out->origin = xstrdup(path);
    struct stat sb;
    if (stat(path, &sb) != 0)
        VF_FAIL(st, VF_EBADINPUT, "manifest %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) VF_FAIL(st, VF_EBADINPUT, "manifest %s: not a regular file", path);
    text = read_file(path, &len, st);
    if (!text) { rc = st ? st->code : VF_EBADINPUT; goto fail; }
    dir = abs_dir_of(path);
    if (!dir) VF_FAIL(st, VF_EBADINPUT, "manifest %s: %s", path, strerror(errno));
    size_t k = 0;
    while (k < len && isspace((unsigned char)text[k])) k++;
    bool jsonl = ends_with(path, ".jsonl") || ends_with(path, ".json") || (k < len && text[k] == '{');
    if (jsonl) VF_TRY(load_jsonl(path, text, len, dir, shard, nshards, out, st));
    else VF_TRY(load_csv(path, text, len, dir, shard, nshards, out, st));
    if (out->total == 0) VF_FAIL(st, VF_EBADINPUT, "manifest %s lists no videos", path);
fail:
    free(text);
    free(dir);
    return rc;
}

static bool has_glob_chars(const char *s) { return strpbrk(s, "*?[{") != NULL; }

int vf_manifest_glob(const char *pattern, int shard, int nshards, vf_manifest *out, vf_status *st)
{
    int rc = 0;
    glob_t g;
    bool have_g = false, folder = false;
    char *pat = NULL, cwd[PATH_MAX];
    int64_t cap = 0;
    memset(out, 0, sizeof *out);
    if (nshards < 1 || shard < 0 || shard >= nshards)
        VF_FAIL(st, VF_EUSAGE, "decode: shard %d outside [0, nshards=%d)", shard, nshards);
    out->origin = xstrdup(pattern);
    struct stat sb;
    if (!has_glob_chars(pattern) && stat(pattern, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t n = strlen(pattern) + 3;
        pat = malloc(n);
        if (pat) snprintf(pat, n, "%s/*", pattern);
        folder = true;
    } else {
        pat = xstrdup(pattern);
    }
    if (!pat) VF_FAIL(st, VF_ENOMEM, "decode: out of memory");
    int e = glob(pat, GLOB_MARK | GLOB_BRACE, NULL, &g);
    have_g = true;
    if (e == GLOB_NOMATCH) VF_FAIL(st, VF_EBADINPUT, "source %s matches no files", pattern);
    if (e != 0) VF_FAIL(st, VF_EBADINPUT, "source %s: cannot list (glob error %d)", pattern, e);
    if (!getcwd(cwd, sizeof cwd)) VF_FAIL(st, VF_EIO, "decode: getcwd: %s", strerror(errno));
    int64_t row_no = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *p = g.gl_pathv[i];
        size_t n = strlen(p);
        if (n && p[n - 1] == '/') continue; /* directories (GLOB_MARK) */
        /* a folder holds videos and their captions: only the videos are rows */
        if (folder && !vf_source_is_video(p)) {
            out->skipped++;
            continue;
        }
        bool mine = row_no % nshards == shard;
        row_no++;
        char *caption = NULL;
        int cr = vf_source_caption(p, &caption, st);
        if (cr < 0) { rc = cr; goto fail; }
        out->captioned += cr;
        if (!mine) {
            free(caption);
            continue;
        }
        vf_manifest_row r = {0};
        r.path = abs_path(cwd, p);
        r.caption = caption ? caption : xstrdup("");
        if (!r.path || !r.caption || push_row(out, &r, &cap) < 0) {
            row_fini(&r);
            VF_FAIL(st, VF_ENOMEM, "decode: out of memory");
        }
    }
    out->total = row_no;
    out->skipped -= out->captioned; /* the captions of its videos are used, not skipped */
    if (row_no == 0 && folder)
        VF_FAIL(st, VF_EBADINPUT, "source %s holds no video files (%lld other files; videos are recognised "
                "by extension: .mp4, .mkv, .webm, .mov, .avi, ...)", pattern, (long long)out->skipped);
    if (row_no == 0) VF_FAIL(st, VF_EBADINPUT, "source %s matches no files (only directories)", pattern);
fail:
    if (have_g) globfree(&g);
    free(pat);
    return rc;
}

int64_t vf_manifest_bytes(const char *manifest, const char *glob_pattern, int nshards)
{
    const int64_t per_row = sizeof(vf_manifest_row) * 2 + 64; /* row + vector slack + mallocs */
    if (nshards < 1) nshards = 1;
    if (manifest && manifest[0]) {
        FILE *fp = fopen(manifest, "rb");
        if (!fp) return 0;
        int64_t bytes = 0, lines = 1;
        char buf[65536];
        size_t k;
        while ((k = fread(buf, 1, sizeof buf, fp)) > 0) {
            bytes += k;
            for (size_t i = 0; i < k; i++) lines += buf[i] == '\n';
        }
        fclose(fp);
        /* the whole text is read once (then freed), plus this shard's rows */
        return 2 * bytes + (lines / nshards + 1) * (per_row + PATH_MAX / 16) + bytes / nshards;
    }
    if (glob_pattern && glob_pattern[0]) {
        glob_t g;
        int64_t total = 0, n = 0;
        char *pat = NULL;
        struct stat sb;
        if (!has_glob_chars(glob_pattern) && stat(glob_pattern, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            size_t l = strlen(glob_pattern) + 3;
            pat = malloc(l);
            if (pat) snprintf(pat, l, "%s/*", glob_pattern);
        }
        if (glob(pat ? pat : glob_pattern, GLOB_BRACE, NULL, &g) == 0) {
            for (size_t i = 0; i < g.gl_pathc; i++) {
                const char *f = g.gl_pathv[i];
                total += strlen(f) + 1;
                /* captions: every .txt of the listing, at most the caption bound each */
                if (ends_with(f, ".txt") && stat(f, &sb) == 0)
                    total += (sb.st_size < VF_CAPTION_FILE_MAX ? sb.st_size : VF_CAPTION_FILE_MAX) + 1;
            }
            n = g.gl_pathc;
            globfree(&g);
        }
        free(pat);
        return 2 * total + (n / nshards + 1) * (per_row + PATH_MAX);
    }
    return 0;
}

int vf_manifest_check(const char *path, vf_status *st)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "manifest %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "manifest %s: not a regular file", path);
    FILE *f = fopen(path, "rb");
    if (!f) return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "manifest %s: %s", path, strerror(errno));
    fclose(f);
    return 0;
}
