/* params.c — stage params: a JSON object tree, checked against the stage's schema.
 *
 * A vf_params pointer IS the vf_json object node (no wrapper), so a nested table param
 * is handed out as a vf_params without copying. Validation is the only place that can
 * fail: it fills defaults and normalises numbers (integral floats become ints for
 * VF_P_INT, ints become floats for VF_P_NUM) so the getters in vflow.h need no error
 * path and the canonical JSON of equal configs is byte-identical (config hashes).
 *
 * Every validation message reads
 *   "FILE:LINE: stage 'NAME' (KIND): param 'KEY': what is wrong[; did you mean 'x'?]"
 * with VF_EUSAGE, so the CLI exits 2 and the user sees the Lua line to fix.
 */
#include "runtime/core/params.h"
#include "runtime/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define J(p) ((const vf_json *)(p))

/* ------------------------------------------------------------------ tree */

vf_params *vf_params_adopt(vf_json *obj)
{
    if (!obj || obj->type != VF_JSON_OBJ) {
        vf_json_free(obj);
        return NULL;
    }
    return (vf_params *)obj;
}
vf_json *vf_params_tree(vf_params *p) { return (vf_json *)p; }
const vf_json *vf_params_ctree(const vf_params *p) { return (const vf_json *)p; }

vf_params *vf_params_new(void) { return vf_params_adopt(vf_json_obj()); }
void vf_params_free(vf_params *p) { vf_json_free((vf_json *)p); }

vf_params *vf_params_clone(const vf_params *p, vf_status *st)
{
    vf_json *c = vf_json_clone(J(p));
    if (!c) vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory copying params");
    return (vf_params *)c;
}

vf_params *vf_params_from_json(const char *json, vf_status *st)
{
    vf_json *j = vf_json_parse(json, st);
    if (!j) return NULL;
    if (j->type != VF_JSON_OBJ) {
        vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "params must be a JSON object, got %s",
                      vf_json_type_name(j->type));
        vf_json_free(j);
        return NULL;
    }
    return (vf_params *)j;
}

/* Sets a (possibly dotted, "model.dim") key, creating intermediate tables. */
int vf_params_set_json(vf_params *p, const char *key, const char *json_value, vf_status *st)
{
    vf_status tmp = {0};
    vf_json *v = vf_json_parse(json_value, &tmp);
    if (!v) v = vf_json_str(json_value);
    if (!v) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    vf_json *obj = (vf_json *)p;
    char path[256];
    snprintf(path, sizeof path, "%s", key);
    char *seg = path;
    for (char *dot; (dot = strchr(seg, '.')) != NULL; seg = dot + 1) {
        *dot = 0;
        vf_json *sub = vf_json_get(obj, seg);
        if (!sub || sub->type != VF_JSON_OBJ) {
            if (sub && sub->type != VF_JSON_ARR && sub->type != VF_JSON_NULL) {
                vf_json_free(v);
                return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                                     "param '%s': '%s' is not a table", key, seg);
            }
            if (vf_json_set(obj, seg, vf_json_obj()) < 0) {
                vf_json_free(v);
                return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
            }
            sub = vf_json_get(obj, seg);
        }
        obj = sub;
    }
    if (vf_json_set(obj, seg, v) < 0)
        return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    return 0;
}

/* ------------------------------------------------------------------ getters */

static const vf_json *pget(const vf_params *p, const char *key)
{
    const vf_json *v = p ? vf_json_get(J(p), key) : NULL;
    return v && v->type != VF_JSON_NULL ? v : NULL;
}

static int64_t as_int(const vf_json *v)
{
    if (!v) return 0;
    if (v->type == VF_JSON_INT) return v->i;
    if (v->type == VF_JSON_NUM) return (int64_t)v->n;
    if (v->type == VF_JSON_BOOL) return v->b;
    return 0;
}

bool vf_param_has(const vf_params *p, const char *key) { return pget(p, key) != NULL; }
int64_t vf_param_int(const vf_params *p, const char *key) { return as_int(pget(p, key)); }
double vf_param_num(const vf_params *p, const char *key) { return vf_json_as_num(pget(p, key)); }
bool vf_param_bool(const vf_params *p, const char *key)
{
    const vf_json *v = pget(p, key);
    return v && (v->type == VF_JSON_BOOL ? v->b : as_int(v) != 0);
}
const char *vf_param_str(const vf_params *p, const char *key)
{
    const vf_json *v = pget(p, key);
    return v && v->type == VF_JSON_STR ? v->s : NULL;
}

/* "cpu" | "cuda" | "cuda:N": the syntax VF_P_DEVICE accepts. */
static int parse_device(const char *s, vf_device *out)
{
    vf_device d = {VF_DEV_CPU, 0};
    if (strcmp(s, "cpu") == 0) {
        *out = d;
        return 0;
    }
    if (strncmp(s, "cuda", 4) != 0) return VF_EINVAL;
    d.kind = VF_DEV_CUDA;
    if (s[4] == 0) {
        *out = d;
        return 0;
    }
    if (s[4] != ':' || !s[5] || strlen(s + 5) > 3) return VF_EINVAL;
    for (const char *c = s + 5; *c; c++)
        if (*c < '0' || *c > '9') return VF_EINVAL;
    d.index = atoi(s + 5);
    *out = d;
    return 0;
}

vf_device vf_param_device(const vf_params *p, const char *key)
{
    vf_device d = {VF_DEV_CPU, 0};
    const char *s = vf_param_str(p, key);
    if (s) parse_device(s, &d);
    return d;
}
int vf_param_len(const vf_params *p, const char *key)
{
    const vf_json *v = pget(p, key);
    return v && v->type == VF_JSON_ARR ? v->len : 0;
}
int64_t vf_param_int_at(const vf_params *p, const char *key, int i)
{
    return as_int(vf_json_at(pget(p, key), i));
}
double vf_param_num_at(const vf_params *p, const char *key, int i)
{
    return vf_json_as_num(vf_json_at(pget(p, key), i));
}
const char *vf_param_str_at(const vf_params *p, const char *key, int i)
{
    const vf_json *v = vf_json_at(pget(p, key), i);
    return v && v->type == VF_JSON_STR ? v->s : NULL;
}
const vf_params *vf_param_table(const vf_params *p, const char *key)
{
    const vf_json *v = pget(p, key);
    return v && v->type == VF_JSON_OBJ ? (const vf_params *)v : NULL;
}
const vf_params *vf_param_table_at(const vf_params *p, const char *key, int i)
{
    const vf_json *v = vf_json_at(pget(p, key), i);
    return v && v->type == VF_JSON_OBJ ? (const vf_params *)v : NULL;
}
char *vf_params_json(const vf_params *p) { return vf_json_emit(J(p), true, 0); }

/* ------------------------------------------------------------------ did you mean */

int vf_edit_distance(const char *a, const char *b)
{
    /* optimal string alignment: insertions, deletions, substitutions and swaps of two
     * neighbours ("stpes" -> "steps") cost 1 each */
    size_t n = strlen(a), m = strlen(b);
    if (n > 128 || m > 128) return (int)(n > m ? n : m);
    int rows[3][129], *pp = rows[0], *prev = rows[1], *row = rows[2];
    for (size_t j = 0; j <= m; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int best = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < best)
                best = pp[j - 2] + 1;
            row[j] = best;
        }
        int *t = pp;
        pp = prev, prev = row, row = t;
    }
    return prev[m];
}

const char *vf_did_you_mean(const char *word, const char *const *cands, int n)
{
    int len = (int)strlen(word);
    /* A plausible typo: one or two edits, fewer for short words (so "x" suggests nothing). */
    int limit = len / 3;
    if (limit > 2) limit = 2;
    if (limit < 1) limit = 1;
    const char *best = NULL;
    int bestd = limit + 1;
    for (int i = 0; i < n; i++) {
        if (!cands[i]) continue;
        int d = vf_edit_distance(word, cands[i]);
        if (d < bestd && d < len) {
            bestd = d;
            best = cands[i];
        }
    }
    return best;
}

/* ------------------------------------------------------------------ validation */

const vf_param_spec *vf_param_spec_find(const vf_param_spec *schema, const char *key)
{
    for (const vf_param_spec *s = schema; s && s->name; s++)
        if (strcmp(s->name, key) == 0) return s;
    return NULL;
}

const char *vf_param_type_name(vf_param_type t)
{
    switch (t) {
    case VF_P_INT: return "int";
    case VF_P_NUM: return "number";
    case VF_P_BOOL: return "bool";
    case VF_P_STR: return "string";
    case VF_P_DEVICE: return "device";
    case VF_P_LIST_INT: return "list of int";
    case VF_P_LIST_NUM: return "list of number";
    case VF_P_LIST_STR: return "list of string";
    case VF_P_TABLE: return "table";
    case VF_P_LIST_TABLE: return "list of table";
    }
    return "?";
}

static const char *expected(vf_param_type t)
{
    switch (t) {
    case VF_P_INT: return "an integer";
    case VF_P_NUM: return "a number";
    case VF_P_BOOL: return "a boolean";
    case VF_P_STR: return "a string";
    case VF_P_DEVICE: return "a device (\"cpu\" or \"cuda:N\")";
    case VF_P_LIST_INT: return "a list of integers";
    case VF_P_LIST_NUM: return "a list of numbers";
    case VF_P_LIST_STR: return "a list of strings";
    case VF_P_TABLE: return "a table";
    case VF_P_LIST_TABLE: return "a list of tables";
    }
    return "?";
}

/* Context of one validation: the message prefix and the status to fill. */
typedef struct vctx {
    char prefix[512];  /* "file:line: stage 'x' (kind): " */
    vf_status *st;
} vctx;

static int verr(const vctx *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int verr(const vctx *c, const char *key, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return vf_status_set(c->st, VF_EUSAGE, __FILE__, __LINE__, "%sparam '%s': %s", c->prefix, key,
                         what);
}

/* "string \"ten\"", "number 1.5", "list [1,2]" — what the user gave, short. */
static void describe(const vf_json *v, char *buf, size_t n)
{
    char *text = vf_json_emit(v, false, 0);
    const char *kind = v->type == VF_JSON_INT || v->type == VF_JSON_NUM ? "number"
                                                                         : vf_json_type_name(v->type);
    if (!text) {
        snprintf(buf, n, "%s", kind);
    } else if (strlen(text) > 40) {
        snprintf(buf, n, "%s %.37s...", kind, text);
    } else {
        snprintf(buf, n, "%s %s", kind, text);
    }
    free(text);
}

static int validate_obj(vf_json *obj, const vf_param_spec *schema, const char *path,
                        const vctx *c, int depth);

static void fmt_num(double v, char *buf, size_t n)
{
    if (fabs(v) >= 1e15 && v == floor(v)) snprintf(buf, n, "%.6g", v);
    else snprintf(buf, n, "%.15g", v);
}

static int check_range(const vf_json *v, const vf_param_spec *s, const char *key, const char *elem,
                       const vctx *c)
{
    if (s->min > s->max) return 0;
    double x = vf_json_as_num(v);
    if (x >= s->min && x <= s->max) return 0;
    char xs[40], lo[40], hi[40];
    fmt_num(x, xs, sizeof xs);
    fmt_num(s->min, lo, sizeof lo);
    fmt_num(s->max, hi, sizeof hi);
    return verr(c, key, "%s%s is out of range [%s, %s]", elem, xs, lo, hi);
}

/* Makes v an INT node if it is an integral number. */
static bool to_int(vf_json *v)
{
    if (v->type == VF_JSON_INT) return true;
    if (v->type != VF_JSON_NUM || v->n != floor(v->n) || fabs(v->n) > 9.0e18) return false;
    v->i = (int64_t)v->n;
    v->type = VF_JSON_INT;
    return true;
}

static bool to_num(vf_json *v)
{
    if (v->type == VF_JSON_NUM) return true;
    if (v->type != VF_JSON_INT) return false;
    v->n = (double)v->i;
    v->type = VF_JSON_NUM;
    return true;
}

static int check_choice(const char *val, const vf_param_spec *s, const char *key, const char *elem,
                        const vctx *c)
{
    if (!s->choices) return 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s->choices);
    const char *cands[32] = {0};
    int n = 0;
    for (char *tok = strtok(buf, "|"); tok && n < 32; tok = strtok(NULL, "|")) {
        if (strcmp(tok, val) == 0) return 0;
        cands[n++] = tok;
    }
    const char *near = vf_did_you_mean(val, cands, n);
    char list[512] = "";
    for (int i = 0; i < n; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", cands[i]);
    }
    if (near)
        return verr(c, key, "%s\"%s\" is not one of: %s; did you mean '%s'?", elem, val, list, near);
    return verr(c, key, "%s\"%s\" is not one of: %s", elem, val, list);
}

/* Checks one scalar against an element type (the type of a list's items, or of the
 * param itself). elem is "" or "element 3: ". */
static int check_scalar(vf_json *v, vf_param_type t, const vf_param_spec *s, const char *key,
                        const char *elem, const vctx *c)
{
    char got[96];
    switch (t) {
    case VF_P_INT:
        /* an int param with choices also takes those words ("auto"), kept as strings */
        if (v->type == VF_JSON_STR && s->choices) return check_choice(v->s, s, key, elem, c);
        if (!to_int(v)) break;
        return check_range(v, s, key, elem, c);
    case VF_P_NUM:
        if (!to_num(v)) break;
        return check_range(v, s, key, elem, c);
    case VF_P_BOOL:
        if (v->type != VF_JSON_BOOL) break;
        return 0;
    case VF_P_STR:
        if (v->type != VF_JSON_STR) break;
        return check_choice(v->s, s, key, elem, c);
    case VF_P_DEVICE: {
        vf_device d;
        if (v->type != VF_JSON_STR) break;
        if (parse_device(v->s, &d) < 0)
            return verr(c, key, "%sunknown device \"%s\" (expected \"cpu\", \"cuda\" or \"cuda:N\")",
                        elem, v->s);
        return 0;
    }
    default: break;
    }
    describe(v, got, sizeof got);
    if (t == VF_P_INT && s->choices) return verr(c, key, "%sexpected an integer or %s, got %s", elem, s->choices, got);
    return verr(c, key, "%sexpected %s, got %s", elem, expected(t), got);
}

static int check_value(vf_json *v, const vf_param_spec *s, const char *key, const vctx *c, int depth)
{
    vf_param_type elem_t;
    switch (s->type) {
    case VF_P_LIST_INT: elem_t = VF_P_INT; break;
    case VF_P_LIST_NUM: elem_t = VF_P_NUM; break;
    case VF_P_LIST_STR: elem_t = VF_P_STR; break;
    case VF_P_TABLE:
        /* An empty Lua table converts to an empty list; as a table param it is {}. */
        if (v->type == VF_JSON_ARR && v->len == 0) v->type = VF_JSON_OBJ;
        if (v->type != VF_JSON_OBJ) {
            char got[96];
            describe(v, got, sizeof got);
            return verr(c, key, "expected a table, got %s", got);
        }
        return s->fields ? validate_obj(v, s->fields, key, c, depth + 1) : 0;
    case VF_P_LIST_TABLE:
        if (v->type != VF_JSON_ARR) {
            char got[96];
            describe(v, got, sizeof got);
            return verr(c, key, "expected a list of tables, got %s", got);
        }
        for (int i = 0; i < v->len; i++) {
            vf_json *e = v->items[i];
            if (e->type == VF_JSON_ARR && e->len == 0) e->type = VF_JSON_OBJ;
            if (e->type != VF_JSON_OBJ) {
                char got[96];
                describe(e, got, sizeof got);
                return verr(c, key, "element %d: expected a table, got %s", i + 1, got);
            }
            if (s->fields) {
                char sub[256];
                snprintf(sub, sizeof sub, "%s[%d]", key, i + 1);
                int rc = validate_obj(e, s->fields, sub, c, depth + 1);
                if (rc < 0) return rc;
            }
        }
        return 0;
    default: return check_scalar(v, s->type, s, key, "", c);
    }
    if (v->type != VF_JSON_ARR) {
        char got[96];
        describe(v, got, sizeof got);
        return verr(c, key, "expected %s, got %s", expected(s->type), got);
    }
    for (int i = 0; i < v->len; i++) {
        char elem[32];
        snprintf(elem, sizeof elem, "element %d: ", i + 1);
        int rc = check_scalar(v->items[i], elem_t, s, key, elem, c);
        if (rc < 0) return rc;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int validate_obj(vf_json *obj, const vf_param_spec *schema, const char *path,
                        const vctx *c, int depth)
{
    char key[256];
    if (depth > 16) return verr(c, path, "nested too deeply");
    /* Unknown keys first, in sorted order so the first error reported is stable. */
    if (obj->len) {
        const char **keys = malloc(sizeof *keys * (size_t)obj->len);
        if (!keys) return vf_status_set(c->st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
        for (int i = 0; i < obj->len; i++) keys[i] = obj->keys[i];
        qsort(keys, (size_t)obj->len, sizeof *keys, cmp_str);
        for (int i = 0; i < obj->len; i++) {
            if (vf_param_spec_find(schema, keys[i])) continue;
            snprintf(key, sizeof key, "%s%s%s", path, *path ? "." : "", keys[i]);
            const char *names[128] = {0};
            int n = 0;
            for (const vf_param_spec *s = schema; s && s->name && n < 128; s++) names[n++] = s->name;
            const char *near = vf_did_you_mean(keys[i], names, n);
            int rc;
            if (near) {
                rc = verr(c, key, "unknown param; did you mean '%s'?", near);
            } else if (n == 0) {
                rc = verr(c, key, "unknown param (%s takes no params)", *path ? "this table" : "this stage");
            } else {
                char list[600] = "";
                for (int k = 0; k < n; k++) {
                    size_t l = strlen(list);
                    snprintf(list + l, sizeof list - l, "%s%s", k ? ", " : "", names[k]);
                }
                rc = verr(c, key, "unknown param (known: %s)", list);
            }
            free(keys);
            return rc;
        }
        free(keys);
    }
    for (const vf_param_spec *s = schema; s && s->name; s++) {
        snprintf(key, sizeof key, "%s%s%s", path, *path ? "." : "", s->name);
        vf_json *v = vf_json_get(obj, s->name);
        if (v && v->type == VF_JSON_NULL) {
            vf_json_free(vf_json_take(obj, s->name));
            v = NULL;
        }
        if (v) {
            int rc = check_value(v, s, key, c, depth);
            if (rc < 0) return rc;
            continue;
        }
        if (!s->def) return verr(c, key, "required param is missing");
        vf_status pst = {0};
        vf_json *d = vf_json_parse(s->def, &pst);
        if (!d)
            return vf_status_set(c->st, VF_EINVAL, __FILE__, __LINE__,
                                 "%sparam '%s': the schema's default is not JSON (%s): %s", c->prefix,
                                 key, s->def, pst.msg);
        if (d->type == VF_JSON_NULL) { /* optional without a value */
            vf_json_free(d);
            continue;
        }
        int rc = check_value(d, s, key, c, depth);
        if (rc < 0) {
            vf_json_free(d);
            vf_status_prefix(c->st, "bad default in the stage's schema");
            return rc;
        }
        if (vf_json_set(obj, s->name, d) < 0)
            return vf_status_set(c->st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    }
    return 0;
}

int vf_params_validate_kind(vf_params *p, const vf_param_spec *schema, const char *stage_name,
                            const char *kind, const char *where, vf_status *st)
{
    vctx c = {.st = st};
    size_t n = 0;
    if (where && *where) n += (size_t)snprintf(c.prefix, sizeof c.prefix, "%s: ", where);
    if (stage_name && n < sizeof c.prefix) {
        if (kind)
            n += (size_t)snprintf(c.prefix + n, sizeof c.prefix - n, "stage '%s' (%s): ", stage_name,
                                  kind);
        else
            n += (size_t)snprintf(c.prefix + n, sizeof c.prefix - n, "stage '%s': ", stage_name);
    }
    if (!p) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "%sno params", c.prefix);
    return validate_obj((vf_json *)p, schema, "", &c, 0);
}

int vf_params_validate(vf_params *p, const vf_param_spec *schema, const char *stage_name,
                       const char *where, vf_status *st)
{
    return vf_params_validate_kind(p, schema, stage_name, NULL, where, st);
}
