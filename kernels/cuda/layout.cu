/* layout.cu — permute on the CUDA backend (a strided gather, one thread per output). */
#include "kernels/cuda/common.cuh"

/* ------------------------------------------------------------------ permute */

struct PermArgs {
    int ndim;
    int64_t oshape[VF_MAX_DIMS];
    int64_t istride[VF_MAX_DIMS]; /* input stride of each OUTPUT axis */
};

/* one thread per output element, written in order; the input is a strided gather */
__global__ void k_permute(bf16 *out, const bf16 *inp, int64_t n, PermArgs a)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, off = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t idx = rem % a.oshape[d];
            rem /= a.oshape[d];
            off += idx * a.istride[d];
        }
        out[i] = inp[off];
    }
}

extern "C" void vf_cuda_permute(vf_backend *be, void *out, const void *inp, int ndim, const int64_t *shape,
                                const int *perm)
{
    OpScope s(be);
    if (ndim < 1 || ndim > VF_MAX_DIMS) {
        vf_cuda_note_msg(s.c, __FILE__, __LINE__, "permute: %d dims (1..%d)", ndim, VF_MAX_DIMS);
        return;
    }
    int64_t istride[VF_MAX_DIMS], n = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        istride[i] = n;
        n *= shape[i];
    }
    if (n == 0) return;
    PermArgs a;
    a.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (perm[i] < 0 || perm[i] >= ndim) {
            vf_cuda_note_msg(s.c, __FILE__, __LINE__, "permute: perm[%d] = %d out of range", i, perm[i]);
            return;
        }
        a.oshape[i] = shape[perm[i]];
        a.istride[i] = istride[perm[i]];
    }
    k_permute<<<grid_for(n, 256), 256, 0, s.c->stream>>>((bf16 *)out, (const bf16 *)inp, n, a);
    VF_CUDA_NOTE_LAUNCH(s.c);
}
