/* decode_text.c — loading a row's text embedding file (see decode_text.h). */
#include "stages/decode/decode_text.h"
#include "formats/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int vf_decode_text_load(const char *path, int64_t text_dim, int64_t text_len, vf_tensor **out,
                        char *why, size_t whyn, vf_status *st)
{
    int rc = 0;
    vf_st_file *f = NULL;
    float *tmp = NULL;
    vf_status fs;
    vf_status_clear(&fs);
    *out = NULL;
    if (vf_st_open(path, &f, &fs) != 0) {
        snprintf(why, whyn, "text_emb %s: %s", path, fs.msg);
        return 1;
    }
    if (vf_st_count(f) != 1) {
        snprintf(why, whyn, "text_emb %s: holds %d tensors; expected one (L, %lld)", path, vf_st_count(f),
                 (long long)text_dim);
        rc = 1;
        goto fail;
    }
    const vf_st_tensor *t = vf_st_at(f, 0);
    vf_st_dtype dt = t->dtype;
    bool is_float = dt == VF_ST_F32 || dt == VF_ST_BF16 || dt == VF_ST_F16 || dt == VF_ST_F64;
    if (!is_float || t->ndim != 2 || t->shape[1] != text_dim || t->shape[0] < 1 || t->shape[0] > text_len) {
        char sh[96];
        vf_shape_str(t->ndim, t->shape, sh, sizeof sh);
        snprintf(why, whyn, "text_emb %s: tensor \"%s\" is %s %s; expected a float (L, %lld) with 1 <= L <= text_len %lld",
                 path, t->name, vf_st_dtype_name(dt), sh, (long long)text_dim, (long long)text_len);
        rc = 1;
        goto fail;
    }
    int64_t n = t->numel;
    if (!(tmp = malloc(sizeof(float) * (size_t)n)))
        VF_FAIL(st, VF_ENOMEM, "text_emb %s: out of memory for %lld values", path, (long long)n);
    if (vf_st_read_f32(f, t->name, tmp, n, &fs) != 0) {
        snprintf(why, whyn, "text_emb %s: %s", path, fs.msg);
        rc = 1;
        goto fail;
    }
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(tmp[i])) {
            snprintf(why, whyn, "text_emb %s: tensor \"%s\" holds %g at row %lld, column %lld", path, t->name,
                     (double)tmp[i], (long long)(i / text_dim), (long long)(i % text_dim));
            rc = 1;
            goto fail;
        }
    int64_t shape[2] = {t->shape[0], t->shape[1]};
    vf_tensor *e = vf_tensor_new(VF_DTYPE_BF16, 2, shape, st);
    if (!e) VF_FAIL(st, VF_ENOMEM, "text_emb %s: out of memory", path);
    uint16_t *d = e->data;
    for (int64_t i = 0; i < n; i++) d[i] = vf_f32_to_bf16(tmp[i]);
    *out = e;
fail:
    free(tmp);
    vf_st_close(f);
    return rc;
}
