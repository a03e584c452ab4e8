/* lib_path.c — the choice, for one family of the CUDA backend's ops (attention,
 * convolution), between cuDNN and the hand kernels, and the record of what ran
 * (vf_cuda_path, cuda_internal.h): attention_path.c and conv_path.c each hold one.
 *
 * The choice is per process, like the environment it comes from: the family's variable
 * unset or "cudnn" takes cuDNN where it takes the call (set explicitly, a libcudnn that
 * does not load is an error rather than a fallback), "hand" never touches libcudnn for that
 * family. Whatever was chosen, a call cuDNN refuses runs elsewhere and is counted there, so
 * a benchmark's path names a fallback instead of hiding it.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_common.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* every family's setup */

/* Loads libcudnn (g_mu held). 0, or VF_ECUDA with st saying why. */
static int load_cudnn(const vf_cuda_path *p, vf_status *st)
{
#ifdef VFLOW_HAVE_CUDNN
    (void)p;
    return vf_cudnn_load(st);
#else
    return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__,
                         "this build has no cuDNN %s (the cudnn-frontend headers that scripts/setup.sh "
                         "fetches were missing when it was built)",
                         p->what);
#endif
}

/* Once per process (g_mu held): the variable, then libcudnn unless "hand" is asked for. */
static int setup(vf_cuda_path *p, vf_status *st)
{
    int rc = 0;
    if (p->setup) return 0;
    const char *e = getenv(p->env);
    const bool hand = e && strcmp(e, "hand") == 0, required = e && strcmp(e, "cudnn") == 0;
    if (e && *e && !hand && !required)
        VF_FAIL(st, VF_EUSAGE, "%s=%s: the %s path is \"cudnn\" or \"hand\"", p->env, e, p->what);
    if (hand) {
        p->hand = 1;
        fprintf(stderr, "vflow: %s=hand: %s runs on the hand kernels\n", p->env, p->what);
    } else {
        vf_status why = {0};
        if (load_cudnn(p, &why) == 0) p->use_lib = 1;
        else if (required) VF_FAIL(st, VF_ECUDA, "%s=cudnn: %s", p->env, why.msg);
        else fprintf(stderr, "vflow: %s: %s runs on the hand kernels\n", why.msg, p->what);
    }
    p->setup = 1;
fail:
    return rc;
}

int vf_cuda_path_setup(vf_cuda_path *p, vf_status *st)
{
    pthread_mutex_lock(&g_mu);
    int rc = setup(p, st);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int vf_cuda_path_use(vf_cuda_path *p, const char *path, vf_status *st)
{
    int rc = 0;
    pthread_mutex_lock(&g_mu);
    VF_TRY(setup(p, st));
    if (path && strcmp(path, "hand") == 0) {
        __atomic_store_n(&p->use_lib, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&p->hand, 1, __ATOMIC_RELAXED);
    } else if (path && strcmp(path, "cudnn") == 0) {
        __atomic_store_n(&p->hand, 0, __ATOMIC_RELAXED); /* the other libraries' paths, even without cuDNN */
        VF_TRY(load_cudnn(p, st));
        __atomic_store_n(&p->use_lib, 1, __ATOMIC_RELAXED);
    } else {
        VF_FAIL(st, VF_EUSAGE, "%s path \"%s\": expected \"cudnn\" or \"hand\"", p->what, path ? path : "(null)");
    }
fail:
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int vf_cuda_path_lib(const vf_cuda_path *p) { return __atomic_load_n(&p->use_lib, __ATOMIC_RELAXED); }

int vf_cuda_path_hand(const vf_cuda_path *p) { return __atomic_load_n(&p->hand, __ATOMIC_RELAXED); }

void vf_cuda_path_count(vf_cuda_path *p, int path) { __atomic_add_fetch(&p->calls[path], 1, __ATOMIC_RELAXED); }

int64_t vf_cuda_path_calls(const vf_cuda_path *p, int path)
{
    return __atomic_load_n(&p->calls[path], __ATOMIC_RELAXED);
}

const char *vf_cuda_path_name(const vf_cuda_path *p)
{
    /* the paths that ran, in the order of vf_cuda_path_kind, joined by '+' */
    static const char *const joined[1 << VF_PATH_N] = {NULL,   "cudnn",      "hand",       "cudnn+hand",
                                                       "gemm", "cudnn+gemm", "hand+gemm", "cudnn+hand+gemm"};
    unsigned ran = 0;
    for (int i = 0; i < VF_PATH_N; i++)
        if (vf_cuda_path_calls(p, i)) ran |= 1u << i;
    if (ran) return joined[ran];
    return vf_cuda_path_lib(p) ? "cudnn" : "hand";
}

size_t vf_cuda_path_bytes(vf_backend *be, size_t (*bytes)(vf_cuda_ctx *c))
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    vf_cuda_op_begin(c);
    size_t n = bytes(c);
    vf_cuda_op_end(c);
    return n;
}
