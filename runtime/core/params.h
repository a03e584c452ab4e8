/* params.h — construction and validation of stage params (the read side is in vflow.h).
 *
 * Params are a JSON-like tree (runtime/json.h) produced by the Lua host from the table
 * given to p:stage(kind, {...}), or parsed from the resolved graph JSON in a worker.
 * Validation against a stage's schema fills defaults, so stage code reads without
 * error paths.
 */
#ifndef VF_PARAMS_H
#define VF_PARAMS_H
#include "runtime/vflow.h"

/* Parses a JSON object. Caller owns the result (vf_params_free). */
vf_params *vf_params_from_json(const char *json, vf_status *st);
vf_params *vf_params_new(void);
vf_params *vf_params_clone(const vf_params *p, vf_status *st);
/* Checks p against schema (unknown key with did-you-mean, type, range, choices,
 * required, devices) and fills defaults. Messages start with `where` ("file:line: ")
 * and name the stage and key. VF_EUSAGE on error. */
int vf_params_validate(vf_params *p, const vf_param_spec *schema, const char *stage_name,
                       const char *where, vf_status *st);
/* Sets key to a JSON value text (used by --set name.param=v); a text that is not JSON
 * is stored as a string. */
int vf_params_set_json(vf_params *p, const char *key, const char *json_value, vf_status *st);

/* ---- the JSON tree behind params (graph and Lua host side) ---- */
typedef struct vf_json vf_json; /* runtime/json.h */

/* vf_params is a JSON object tree: these convert without copying. vf_params_adopt takes
 * obj (must be VF_JSON_OBJ; freed and NULL returned otherwise). The tree pointers are
 * borrowed from p. */
vf_params *vf_params_adopt(vf_json *obj);
vf_json *vf_params_tree(vf_params *p);
/* As vf_params_validate, and names the stage kind in messages:
 * "file:line: stage 'NAME' (KIND): param 'KEY': ...". kind may be NULL. */
int vf_params_validate_kind(vf_params *p, const vf_param_spec *schema, const char *stage_name,
                            const char *kind, const char *where, vf_status *st);
/* The schema entry for key (NULL if the schema has none). */
const vf_param_spec *vf_param_spec_find(const vf_param_spec *schema, const char *key);
/* Type name for messages and docs: "int", "number", "list of int", … */
const char *vf_param_type_name(vf_param_type t);

/* Did-you-mean: edit distance (Levenshtein, with a swap of two neighbours as one edit),
 * and the closest of cands[0..n) if it is near enough to be a plausible typo of word
 * (NULL otherwise). Borrowed from cands. */
int vf_edit_distance(const char *a, const char *b);
const char *vf_did_you_mean(const char *word, const char *const *cands, int n);
#endif
