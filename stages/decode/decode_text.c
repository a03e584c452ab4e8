/* decode_text.c — loading a row's text embedding file (see decode_text.h). */
#include "stages/decode/decode_text.h"
#include "formats/text_emb.h"

#include <stdio.h>
#include <stdlib.h>

int vf_decode_text_load(const char *path, int64_t text_dim, int64_t text_len, vf_tensor **out,
                        char *why, size_t whyn, vf_status *st)
{
    int rc = 0;
    float *v = NULL;
    int64_t rows = 0;
    vf_status fs;
    vf_status_clear(&fs);
    *out = NULL;
    int r = vf_text_emb_read(path, text_dim, text_len, &v, &rows, &fs);
    if (r == VF_EBADINPUT) { /* a bad file: the row is quarantined with this reason */
        snprintf(why, whyn, "text_emb %s", fs.msg);
        return 1;
    }
    if (r) VF_FAIL(st, r, "text_emb %s", fs.msg);
    int64_t shape[2] = {rows, text_dim}, n = rows * text_dim;
    vf_tensor *e = vf_tensor_new(VF_DTYPE_BF16, 2, shape, st);
    if (!e) VF_FAIL(st, VF_ENOMEM, "text_emb %s: out of memory", path);
    uint16_t *d = e->data;
    for (int64_t i = 0; i < n; i++) d[i] = vf_f32_to_bf16(v[i]);
    *out = e;
fail:
    free(v);
    return rc;
}
