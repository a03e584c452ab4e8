/* dit_io.c — DiT weights to and from safetensors files, by tensor name.
 *
 * The file holds the model's tensors under their layout names (Wan 2.1 names plus
 * text_tokens.weight), so model.safetensors loads into a WanModel-shaped PyTorch module
 * with load_state_dict(strict=True), and a partition can load just its range from a full
 * checkpoint.
 */
#include "models/dit_internal.h"

/* Tensors of l lying in [off, off + n); whole tensors only. */
static int range_tensors(const vf_dit_layout *l, int64_t off, int64_t n, int *i0, int *i1,
                         vf_status *st)
{
    *i0 = *i1 = -1;
    for (int i = 0; i < l->n; i++) {
        const vf_dit_tensor *t = &l->t[i];
        if (t->numel == 0 || t->offset + t->numel <= off || t->offset >= off + n) continue;
        if (t->offset < off || t->offset + t->numel > off + n)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                                 "dit weights: range [%lld, %lld) cuts tensor %s",
                                 (long long)off, (long long)(off + n), t->name);
        if (*i0 < 0) *i0 = i;
        *i1 = i + 1;
    }
    return 0;
}

int vf_dit_st_add(vf_st_writer *w, const vf_dit_layout *l, const float *flat, int64_t off,
                  int64_t n, vf_status *st)
{
    int rc, i0, i1;
    if ((rc = range_tensors(l, off, n, &i0, &i1, st))) return rc;
    for (int i = i0; i >= 0 && i < i1; i++) {
        const vf_dit_tensor *t = &l->t[i];
        if (t->numel == 0) continue;
        rc = vf_st_writer_add(w, t->name, VF_ST_F32, t->ndim, t->shape, flat + (t->offset - off),
                              st);
        if (rc) return rc;
    }
    return 0;
}

int vf_dit_st_load(const vf_st_file *f, const vf_dit_layout *l, float *dst, int64_t off,
                   int64_t n, vf_status *st)
{
    int rc, i0, i1;
    if ((rc = range_tensors(l, off, n, &i0, &i1, st))) return rc;
    for (int i = i0; i >= 0 && i < i1; i++) {
        const vf_dit_tensor *t = &l->t[i];
        const vf_st_tensor *ft;
        if (t->numel == 0) continue;
        if ((rc = vf_st_expect(f, t->name, t->ndim, t->shape, &ft, st))) return rc;
        if ((rc = vf_st_read_f32(f, t->name, dst + (t->offset - off), t->numel, st))) return rc;
    }
    return 0;
}
