/* text_emb.c — reading a text embedding file (contract in text_emb.h). */
#include "formats/text_emb.h"
#include "formats/safetensors.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

int vf_text_emb_read(const char *path, int64_t text_dim, int64_t text_len, float **out, int64_t *rows,
                     vf_status *st)
{
    int rc = 0;
    vf_st_file *f = NULL;
    float *v = NULL;
    vf_status fs;
    vf_status_clear(&fs);
    *out = NULL;
    *rows = 0;
    if (vf_st_open(path, &f, &fs) != 0) return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: %s", path, fs.msg);
    if (vf_st_count(f) != 1)
        VF_FAIL(st, VF_EBADINPUT, "%s: holds %d tensors; expected one (L, %lld)", path, vf_st_count(f),
                (long long)text_dim);
    const vf_st_tensor *t = vf_st_at(f, 0);
    vf_st_dtype dt = t->dtype;
    bool is_float = dt == VF_ST_F32 || dt == VF_ST_BF16 || dt == VF_ST_F16 || dt == VF_ST_F64;
    if (!is_float || t->ndim != 2 || t->shape[1] != text_dim || t->shape[0] < 1 || t->shape[0] > text_len) {
        char sh[96];
        vf_shape_str(t->ndim, t->shape, sh, sizeof sh);
        VF_FAIL(st, VF_EBADINPUT, "%s: tensor \"%s\" is %s %s; expected a float (L, %lld) with 1 <= L <= text_len %lld",
                path, t->name, vf_st_dtype_name(dt), sh, (long long)text_dim, (long long)text_len);
    }
    int64_t n = t->numel;
    if (!(v = malloc(sizeof(float) * (size_t)n)))
        VF_FAIL(st, VF_ENOMEM, "%s: out of memory for %lld values", path, (long long)n);
    if (vf_st_read_f32(f, t->name, v, n, &fs) != 0) VF_FAIL(st, VF_EBADINPUT, "%s: %s", path, fs.msg);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            VF_FAIL(st, VF_EBADINPUT, "%s: tensor \"%s\" holds %g at row %lld, column %lld", path, t->name, (double)v[i],
                    (long long)(i / text_dim), (long long)(i % text_dim));
    *out = v;
    *rows = t->shape[0];
    v = NULL;
fail:
    free(v);
    vf_st_close(f);
    return rc;
}
