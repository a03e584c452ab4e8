/* layout.c — permute (torch.permute semantics, up to 6 dims) on the CPU.
 *
 * out axis i is inp axis perm[i]. The output is written in order; the innermost output
 * axis is a strided walk of the input, the outer ones are split across threads. Its
 * backward is the same op with the inverse permutation (a plain copy, so callers that
 * must accumulate add the result themselves).
 */
#include <string.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

void vf_cpu_permute(float *out, const float *inp, int ndim, const int64_t *shape,
                    const int *perm)
{
    VF_ASSERT(ndim >= 1 && ndim <= VF_MAX_DIMS);
    int64_t istride[VF_MAX_DIMS], oshape[VF_MAX_DIMS], ostride_in[VF_MAX_DIMS];
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        istride[i] = s;
        s *= shape[i];
    }
    const int64_t n = s;
    if (n == 0) return;
    for (int i = 0; i < ndim; i++) {
        VF_ASSERT(perm[i] >= 0 && perm[i] < ndim);
        oshape[i] = shape[perm[i]];
        ostride_in[i] = istride[perm[i]]; /* input step per unit of output axis i */
    }
    const int64_t inner = oshape[ndim - 1], instep = ostride_in[ndim - 1];
    const int64_t outer = n / inner;
#pragma omp parallel for schedule(static) if (n > 16 * VF_CPU_PAR_MIN)
    for (int64_t r = 0; r < outer; r++) {
        /* input offset of output row r: decompose r over output axes 0..ndim-2 */
        int64_t rem = r, off = 0;
        for (int i = ndim - 2; i >= 0; i--) {
            int64_t idx = rem % oshape[i];
            rem /= oshape[i];
            off += idx * ostride_in[i];
        }
        float *o = out + r * inner;
        const float *x = inp + off;
        if (instep == 1) {
            memcpy(o, x, (size_t)inner * sizeof(float));
        } else {
            for (int64_t j = 0; j < inner; j++) o[j] = x[j * instep];
        }
    }
}
