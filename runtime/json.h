/* json.h — a small strict JSON value tree.
 *
 * Used for stage params (vf_params is a JSON object), the resolved graph that the driver
 * writes to the run dir and hands to its workers, and canonical text for config hashes.
 * Strict RFC 8259 parsing (no comments, no trailing commas, no NaN), errors with line and
 * column. Integers that fit int64 stay exact (VF_JSON_INT); other numbers are doubles.
 * Canonical output sorts object keys and uses the shortest round-tripping number text, so
 * equal trees give equal bytes.
 *
 * Ownership: every vf_json node owns its children. Functions that "take" a node free it
 * on failure too, so callers never leak on error paths.
 */
#ifndef VF_JSON_H
#define VF_JSON_H

#include "runtime/vflow.h"

typedef enum vf_json_type {
    VF_JSON_NULL = 0,
    VF_JSON_BOOL,
    VF_JSON_INT,
    VF_JSON_NUM,
    VF_JSON_STR,
    VF_JSON_ARR,
    VF_JSON_OBJ,
} vf_json_type;

typedef struct vf_json vf_json;
struct vf_json {
    vf_json_type type;
    bool b;
    int64_t i;
    double n;
    char *s;          /* VF_JSON_STR: NUL-terminated (may contain no NUL inside) */
    int len, cap;     /* ARR / OBJ: number of entries */
    vf_json **items;  /* ARR / OBJ: values */
    char **keys;      /* OBJ: keys, parallel to items, in insertion order */
};

/* Parses text (NUL-terminated, or n bytes with vf_json_parse_n). On error returns NULL
 * and sets st (VF_EINVAL) to "line L, column C: what". Caller owns the result. */
vf_json *vf_json_parse(const char *text, vf_status *st);
vf_json *vf_json_parse_n(const char *text, size_t n, vf_status *st);
void vf_json_free(vf_json *j); /* NULL is fine */

/* Builders. Return a new node the caller owns, or NULL when out of memory. */
vf_json *vf_json_null(void);
vf_json *vf_json_bool(bool b);
vf_json *vf_json_int(int64_t i);
vf_json *vf_json_num(double n);
vf_json *vf_json_str(const char *s);         /* copies s */
vf_json *vf_json_arr(void);
vf_json *vf_json_obj(void);
vf_json *vf_json_clone(const vf_json *j);

/* Appends v to arr; takes v (freed on failure). 0 or VF_ENOMEM. */
int vf_json_push(vf_json *arr, vf_json *v);
/* Sets obj[key] = v, replacing (and freeing) an existing value; takes v. */
int vf_json_set(vf_json *obj, const char *key, vf_json *v);
/* Removes obj[key] and returns it to the caller (NULL if absent). */
vf_json *vf_json_take(vf_json *obj, const char *key);

/* Getters: borrowed pointers, NULL when absent or j is not of the right type. */
vf_json *vf_json_get(const vf_json *obj, const char *key);
vf_json *vf_json_at(const vf_json *arr, int i);
int vf_json_len(const vf_json *j);          /* entries of ARR/OBJ, 0 otherwise */
const char *vf_json_key_at(const vf_json *obj, int i);
/* Typed shortcuts with a fallback when absent or of another type. An INT reads as a
 * number; an integral NUM reads as an int. */
const char *vf_json_get_str(const vf_json *obj, const char *key, const char *def);
int64_t vf_json_get_int(const vf_json *obj, const char *key, int64_t def);
double vf_json_get_num(const vf_json *obj, const char *key, double def);
bool vf_json_get_bool(const vf_json *obj, const char *key, bool def);

bool vf_json_is_number(const vf_json *j);    /* INT or NUM */
double vf_json_as_num(const vf_json *j);     /* INT or NUM as double, 0 otherwise */
bool vf_json_equal(const vf_json *a, const vf_json *b); /* deep; 1 (INT) == 1.0 (NUM) */
const char *vf_json_type_name(vf_json_type t); /* "null", "boolean", "integer", … */
/* True when s[0..n) is valid UTF-8 without NUL bytes (what a JSON string may hold). */
bool vf_json_utf8_ok(const char *s, size_t n);

/* Text. canonical: compact with sorted keys (for hashes); otherwise keys keep their
 * insertion order and, with indent > 0, one entry per line. Caller frees with free().
 * Returns NULL when out of memory or the tree holds a non-finite double. */
char *vf_json_emit(const vf_json *j, bool canonical, int indent);

#endif /* VF_JSON_H */
