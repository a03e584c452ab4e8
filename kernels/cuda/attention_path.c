/* attention_path.c — which implementation runs the CUDA backend's attention ops: cuDNN's
 * fused SDPA (cudnn_att.cpp) wherever it takes the call, the hand kernels (attention.cu)
 * otherwise, and the process-wide record of what ran (cudnn_att.h says the rules).
 *
 * The choice is per process, like the environment it comes from: VFLOW_ATTN unset or
 * "cudnn" takes cuDNN where it can (set explicitly, a libcudnn that does not load is an
 * error rather than a fallback), "hand" never touches libcudnn. Whatever was chosen, a
 * call cuDNN refuses runs on the hand kernels and is counted there, so a benchmark's
 * vf_cuda_attn_path names a fallback instead of hiding it.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_att.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_setup;       /* VFLOW_ATTN read and acted on */
static int g_cudnn_ok;    /* libcudnn loaded, and this build has the cuDNN path */
static int g_use_cudnn;   /* the chosen path: cuDNN where it takes the call (atomic reads) */
static int64_t g_calls[2]; /* ops run per path: [0] cuDNN, [1] hand kernels (atomics) */

/* Loads libcudnn unless it is loaded (g_mu held). 0, or VF_ECUDA with st saying why. */
static int load_cudnn(vf_status *st)
{
    if (g_cudnn_ok) return 0;
#ifdef VFLOW_HAVE_CUDNN
    int rc = vf_cudnn_load(st);
    if (rc == 0) g_cudnn_ok = 1;
    return rc;
#else
    return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__,
                         "this build has no cuDNN attention (the cudnn-frontend headers that "
                         "scripts/setup.sh fetches were missing when it was built)");
#endif
}

/* Once per process (g_mu held): VFLOW_ATTN, then libcudnn unless the hand path is asked for. */
static int setup(vf_status *st)
{
    int rc = 0;
    if (g_setup) return 0;
    const char *e = getenv("VFLOW_ATTN");
    const bool hand = e && strcmp(e, "hand") == 0, required = e && strcmp(e, "cudnn") == 0;
    if (e && *e && !hand && !required)
        VF_FAIL(st, VF_EUSAGE, "VFLOW_ATTN=%s: the attention path is \"cudnn\" or \"hand\"", e);
    if (vf_attention_workspace_limit() < 0)
        VF_FAIL(st, VF_EUSAGE, "VFLOW_ATTN_WORKSPACE_MB=%s: expected a positive number of MiB",
                getenv("VFLOW_ATTN_WORKSPACE_MB"));
    if (hand) {
        fprintf(stderr, "vflow: VFLOW_ATTN=hand: attention runs on the hand kernels\n");
    } else {
        vf_status why = {0};
        if (load_cudnn(&why) == 0) {
            g_use_cudnn = 1;
        } else if (required) {
            VF_FAIL(st, VF_ECUDA, "VFLOW_ATTN=cudnn: %s", why.msg);
        } else {
            fprintf(stderr, "vflow: %s: attention runs on the hand kernels\n", why.msg);
        }
    }
    g_setup = 1;
fail:
    return rc;
}

int vf_cuda_attn_init(vf_cuda_ctx *c, vf_status *st)
{
    (void)c; /* the cuDNN state of c is made on its first attention (cudnn_att.cpp) */
    pthread_mutex_lock(&g_mu);
    int rc = setup(st);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int vf_cuda_attn_use(const char *path, vf_status *st)
{
    int rc = 0;
    pthread_mutex_lock(&g_mu);
    VF_TRY(setup(st));
    if (path && strcmp(path, "hand") == 0) {
        __atomic_store_n(&g_use_cudnn, 0, __ATOMIC_RELAXED);
    } else if (path && strcmp(path, "cudnn") == 0) {
        VF_TRY(load_cudnn(st));
        __atomic_store_n(&g_use_cudnn, 1, __ATOMIC_RELAXED);
    } else {
        VF_FAIL(st, VF_EUSAGE, "attention path \"%s\": expected \"cudnn\" or \"hand\"", path ? path : "(null)");
    }
fail:
    pthread_mutex_unlock(&g_mu);
    return rc;
}

const char *vf_cuda_attn_path(void)
{
    int64_t n[2];
    vf_cuda_attn_counts(&n[0], &n[1]);
    if (n[0] && n[1]) return "cudnn+hand";
    if (n[0] || n[1]) return n[0] ? "cudnn" : "hand";
    return __atomic_load_n(&g_use_cudnn, __ATOMIC_RELAXED) ? "cudnn" : "hand";
}

void vf_cuda_attn_counts(int64_t *cudnn, int64_t *hand)
{
    if (cudnn) *cudnn = __atomic_load_n(&g_calls[0], __ATOMIC_RELAXED);
    if (hand) *hand = __atomic_load_n(&g_calls[1], __ATOMIC_RELAXED);
}

int vf_cuda_cudnn_version(void)
{
#ifdef VFLOW_HAVE_CUDNN
    return (int)vf_cudnn_loaded_version();
#else
    return 0;
#endif
}

size_t vf_cuda_attn_workspace(vf_backend *be)
{
#ifdef VFLOW_HAVE_CUDNN
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    vf_cuda_op_begin(c);
    size_t n = vf_cudnn_att_workspace(c);
    vf_cuda_op_end(c);
    return n;
#else
    (void)be;
    return 0;
#endif
}

static void count(int path) { __atomic_add_fetch(&g_calls[path], 1, __ATOMIC_RELAXED); }

/* ------------------------------------------------------------------ the table's entries */

void vf_cuda_attention_fwd(vf_backend *be, void *out, float *lse, const void *q, const void *k,
                           const void *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D,
                           float scale)
{
    if (B <= 0 || Lq <= 0 || H <= 0 || D <= 0) return;
#ifdef VFLOW_HAVE_CUDNN
    if (Lk > 0 && __atomic_load_n(&g_use_cudnn, __ATOMIC_RELAXED)) {
        vf_cuda_ctx *c = vf_cuda_ctx_of(be);
        vf_cuda_op_begin(c);
        int rc = vf_cudnn_att_fwd(c, out, lse, q, k, v, B, Lq, Lk, H, D, scale);
        vf_cuda_op_end(c);
        if (rc == 0) count(0);
        if (rc != VF_ENOTFOUND) return;
    }
#endif
    if (Lk > 0) count(1); /* no keys is no attention: zeros, on either path */
    vf_cuda_attention_hand_fwd(be, out, lse, q, k, v, B, Lq, Lk, H, D, scale);
}

void vf_cuda_attention_bwd(vf_backend *be, void *dq, void *dk, void *dv, const void *dout,
                           const void *q, const void *k, const void *v, const void *out,
                           const float *lse, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                           int64_t D, float scale)
{
    if (B <= 0 || H <= 0 || D <= 0 || (!dq && !dk && !dv)) return;
    const bool work = Lq > 0 && Lk > 0;
#ifdef VFLOW_HAVE_CUDNN
    if (work && __atomic_load_n(&g_use_cudnn, __ATOMIC_RELAXED)) {
        vf_cuda_ctx *c = vf_cuda_ctx_of(be);
        vf_cuda_op_begin(c);
        int rc = vf_cudnn_att_bwd(c, dq, dk, dv, dout, q, k, v, out, lse, B, Lq, Lk, H, D, scale);
        vf_cuda_op_end(c);
        if (rc == 0) count(0);
        if (rc != VF_ENOTFOUND) return;
    }
#endif
    if (work) count(1);
    vf_cuda_attention_hand_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, B, Lq, Lk, H, D, scale);
}
