/* conv_path.c — which implementation runs the CUDA backend's conv3d_fwd: cuDNN's
 * convolution (cudnn_conv.cpp) wherever it takes the call, the hand kernel (conv3d.cu)
 * otherwise, and the process-wide record of what ran (cudnn_conv.h says the rules).
 *
 * The choice is per process (lib_path.c): VFLOW_CONV unset or "cudnn" takes cuDNN where it
 * can (set explicitly, a libcudnn that does not load is an error rather than a fallback),
 * "hand" never touches libcudnn for convolutions. Whatever was chosen, a call cuDNN refuses
 * runs on the hand kernel and is counted there, so a benchmark's vf_cuda_conv_path names a
 * fallback instead of hiding it.
 */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_conv.h"

static vf_cuda_path g_path = {.env = "VFLOW_CONV", .what = "convolution"};

int vf_cuda_conv_init(vf_cuda_ctx *c, vf_status *st)
{
    (void)c; /* the hand kernel needs no opt-in; cuDNN's state is made on first use */
    return vf_cuda_path_setup(&g_path, st);
}

int vf_cuda_conv_use(const char *path, vf_status *st) { return vf_cuda_path_use(&g_path, path, st); }

const char *vf_cuda_conv_path(void) { return vf_cuda_path_name(&g_path); }

void vf_cuda_conv_counts(int64_t *cudnn, int64_t *hand)
{
    if (cudnn) *cudnn = vf_cuda_path_calls(&g_path, VF_PATH_CUDNN);
    if (hand) *hand = vf_cuda_path_calls(&g_path, VF_PATH_HAND);
}

size_t vf_cuda_conv_workspace(vf_backend *be)
{
#ifdef VFLOW_HAVE_CUDNN
    return vf_cuda_path_bytes(be, vf_cudnn_conv_workspace);
#else
    (void)be;
    return 0;
#endif
}

/* ------------------------------------------------------------------ the table's entry */

void vf_cuda_conv3d_fwd(vf_backend *be, void *out, const void *inp, const void *w, const void *bias, int64_t B,
                        int64_t C, int64_t T, int64_t H, int64_t W, int64_t OC, int KT, int KH, int KW, int st,
                        int sh, int sw, int pt0, int pt1, int ph0, int ph1, int pw0, int pw1)
{
    const vf_conv3d_shape s = {B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1};
    int64_t To, Ho, Wo;
    /* a geometry outside ops.h's contract goes to the hand kernel, which says what is wrong */
    if (B <= 0 || OC <= 0 || C <= 0 || st <= 0 || sh <= 0 || sw <= 0 || pt0 < 0 || pt1 < 0 || ph0 < 0 ||
        ph1 < 0 || pw0 < 0 || pw1 < 0 || T + pt0 + pt1 < KT || H + ph0 + ph1 < KH || W + pw0 + pw1 < KW)
        goto hand;
    vf_conv3d_out(&s, &To, &Ho, &Wo);
    if (To <= 0 || Ho <= 0 || Wo <= 0) goto hand;
#ifdef VFLOW_HAVE_CUDNN
    if (vf_cuda_path_lib(&g_path)) {
        vf_cuda_ctx *c = vf_cuda_ctx_of(be);
        vf_cuda_op_begin(c);
        int rc = vf_cudnn_conv_fwd(c, out, inp, w, bias, &s);
        vf_cuda_op_end(c);
        if (rc == 0) vf_cuda_path_count(&g_path, VF_PATH_CUDNN);
        if (rc != VF_ENOTFOUND) return;
    }
#endif
    vf_cuda_path_count(&g_path, VF_PATH_HAND);
hand:
    vf_cuda_conv3d_hand_fwd(be, out, inp, w, bias, B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1,
                            pw0, pw1);
}
