/* params.h — construction and validation of stage params (the read side is in vflow.h).
 *
 * Params are a JSON-like tree (runtime/json.h) produced by the Lua host from the table
 * given to p:stage(kind, {...}), or parsed from the resolved graph JSON in a worker.
 * Validation against a stage's schema fills defaults, so stage code reads without
 * error paths.
 */
#ifndef VF_PARAMS_H
#define VF_PARAMS_H
#include "vflow.h"

/* Parses a JSON object. Caller owns the result (vf_params_free). */
vf_params *vf_params_from_json(const char *json, vf_status *st);
vf_params *vf_params_new(void);
void vf_params_free(vf_params *p);
vf_params *vf_params_clone(const vf_params *p, vf_status *st);
/* Checks p against schema (unknown key with did-you-mean, type, range, choices,
 * required, devices) and fills defaults. Messages start with `where` ("file:line: ")
 * and name the stage and key. VF_EUSAGE on error. */
int vf_params_validate(vf_params *p, const vf_param_spec *schema, const char *stage_name,
                       const char *where, vf_status *st);
/* Sets key to a JSON value text (used by --set name.param=v); a text that is not JSON
 * is stored as a string. */
int vf_params_set_json(vf_params *p, const char *key, const char *json_value, vf_status *st);
#endif
