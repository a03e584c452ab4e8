/* st_json.h — the strict JSON tokenizer of safetensors headers (safetensors_json.c),
 * private to formats/safetensors*.c: the reader walks the header with it and turns its
 * messages into header errors. The int functions return 0, or -1 with j->err set. */
#ifndef VF_FORMATS_ST_JSON_H
#define VF_FORMATS_ST_JSON_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DEPTH 128 /* serde_json's recursion limit */

typedef struct jp {
    const char *p, *end;
    char err[160];
} jp;

int vf_stj_err(jp *j, const char *what);
void vf_stj_ws(jp *j);
int vf_stj_lit(jp *j, char c);
int vf_stj_str(jp *j, char **out);
int vf_stj_uint(jp *j, uint64_t *out);
int vf_stj_skip(jp *j, int depth);

#endif
