/* backend_cuda.c — the CUDA backend's op table and its per-device context.
 *
 * vf_backend_cuda(i) creates, once per process and device, a context (cuda_internal.h:
 * stream, cuBLASLt handle and workspace, scratch, pinned host area, enqueue lock; the
 * cuDNN state comes with the first attention) and a table whose entries are the kernels
 * of the other files of kernels/cuda/. Storage is bf16 for activations, weights and all
 * gradients (act_dtype = grad_dtype = BF16):
 * cuBLASLt takes no mixed bf16/f32 operands, and bf16 gradients are what mixed-precision
 * trainers keep (2 bytes/param, REFERENCE "Memory"); every sum inside an op is f32.
 *
 * Nothing here runs at load time except the registration of the device transports
 * (a pointer store): workers are forked from the driver, and CUDA must not be
 * initialised before a fork.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_att.h"

/* ------------------------------------------------------------------ errors */

static int note_impl(vf_cuda_ctx *c, const char *file, int line, const char *msg)
{
    if (!c->err) { /* first error wins: later ones are usually consequences */
        c->err = VF_ECUDA;
        c->err_file = file;
        c->err_line = line;
        snprintf(c->err_msg, sizeof c->err_msg, "%s", msg);
    }
    return VF_ECUDA;
}

int vf_cuda_note(vf_cuda_ctx *c, cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess) return 0;
    char m[512];
    snprintf(m, sizeof m, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return note_impl(c, file, line, m);
}

int vf_cuda_note_lt(vf_cuda_ctx *c, cublasStatus_t s, const char *what, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    char m[512];
    snprintf(m, sizeof m, "%s: cuBLAS status %d", what, (int)s);
    return note_impl(c, file, line, m);
}

void vf_cuda_note_msg(vf_cuda_ctx *c, const char *file, int line, const char *fmt, ...)
{
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    note_impl(c, file, line, m);
}

/* ------------------------------------------------------------------ op bracket */

static __thread int t_device = -1;
int vf_cuda_thread_device(void) { return t_device; }

void vf_cuda_op_begin(vf_cuda_ctx *c)
{
    pthread_mutex_lock(&c->mu);
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != c->device) VF_CUDA_NOTE(c, cudaSetDevice(c->device));
}

void vf_cuda_op_end(vf_cuda_ctx *c) { pthread_mutex_unlock(&c->mu); }

/* ------------------------------------------------------------------ memory entries */

static void *cu_alloc(vf_backend *be, size_t bytes, vf_status *st)
{
    return vf_cuda_pool_alloc(vf_cuda_ctx_of(be)->device, bytes, st);
}

static void cu_free(vf_backend *be, void *p) { vf_cuda_pool_free(vf_cuda_ctx_of(be)->device, p); }

/* Page-locked host memory, charged to the calling stage's host account like any host
 * allocation; a 64-byte prefix keeps its size for the credit at free (the data stays
 * 64-byte aligned). */
#define PINNED_PREFIX 64
static void *cu_alloc_pinned(vf_backend *be, size_t bytes, vf_status *st)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    vf_account *a = vf_account_current();
    if (a && vf_account_charge(a, (int64_t)bytes, st)) return NULL;
    void *p = NULL;
    vf_cuda_op_begin(c);
    cudaError_t e = cudaHostAlloc(&p, bytes + PINNED_PREFIX, cudaHostAllocPortable);
    vf_cuda_op_end(c);
    if (e != cudaSuccess) {
        if (a) vf_account_credit(a, (int64_t)bytes);
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cuda:%d: cudaHostAlloc of %zu bytes: %s", c->device, bytes,
                      cudaGetErrorString(e));
        return NULL;
    }
    *(size_t *)p = bytes;
    *(vf_account **)((char *)p + sizeof(size_t)) = a;
    return (char *)p + PINNED_PREFIX;
}

static void cu_free_pinned(vf_backend *be, void *p)
{
    if (!p) return;
    char *base = (char *)p - PINNED_PREFIX;
    vf_account *a = *(vf_account **)(base + sizeof(size_t));
    if (a) vf_account_credit(a, (int64_t) * (size_t *)base);
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    vf_cuda_op_begin(c);
    VF_CUDA_NOTE(c, cudaFreeHost(base));
    vf_cuda_op_end(c);
}

static int cu_sync(vf_backend *be, vf_status *st)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    int rc = 0;
    /* the event is recorded under the enqueue lock (never into another thread's recording
     * in progress, graph.c), and waited for without it: other stage threads on this device
     * keep launching */
    vf_cuda_op_begin(c);
    cudaError_t e = cudaEventRecord(c->sync_ev, c->stream);
    vf_cuda_op_end(c);
    if (e == cudaSuccess) e = cudaEventSynchronize(c->sync_ev);
    pthread_mutex_lock(&c->mu);
    if (e != cudaSuccess) vf_cuda_note(c, e, "cudaEventSynchronize (be->sync)", __FILE__, __LINE__);
    if (c->err) rc = vf_status_set(st, c->err, c->err_file, c->err_line, "%s: %s", c->devname, c->err_msg);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ------------------------------------------------------------------ creation */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static vf_backend *g_be[VF_CUDA_MAX_DEVICES];
static char g_model[VF_CUDA_MAX_DEVICES][256]; /* cudaDeviceProp.name: vf_backend.model */

static size_t scratch_bytes_from_env(void)
{
    const char *s = getenv("VFLOW_CUDA_SCRATCH_MB");
    long mb = s ? strtol(s, NULL, 10) : 0;
    if (mb <= 0) return VF_CUDA_SCRATCH_DEFAULT;
    if (mb < 16) mb = 16; /* the staging area alone takes 8 MiB */
    return (size_t)mb << 20;
}

static void ctx_free(vf_cuda_ctx *c)
{
    if (!c) return;
    cudaSetDevice(c->device);
#ifdef VFLOW_HAVE_CUDNN
    vf_cudnn_free(c);
#endif
    vf_cuda_graphs_free(c);
    vf_cuda_lt_free(c);
    if (c->lt) vf_cuda_lt_destroy(c->lt);
    if (c->sync_ev) cudaEventDestroy(c->sync_ev);
    if (c->lt_ws) cudaFree(c->lt_ws);
    if (c->scratch) cudaFree(c->scratch);
    if (c->host) cudaFreeHost(c->host);
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->acct) vf_account_credit(c->acct, (int64_t)(VF_CUDA_LT_WS_BYTES + c->scratch_bytes));
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static vf_backend *backend_new(int index, vf_status *st)
{
    int rc = 0;
    vf_backend *be = NULL;
    vf_cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "cuda:%d: out of memory (backend)", index);
        return NULL;
    }
    { /* recursive: a unit being recorded holds it while its ops take it (graph.c) */
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
        pthread_mutex_init(&c->mu, &ma);
        pthread_mutexattr_destroy(&ma);
    }
    c->device = index;
    snprintf(c->devname, sizeof c->devname, "cuda:%d", index);
    c->no_bgrad = getenv("VFLOW_CUDA_NO_BGRAD") && atoi(getenv("VFLOW_CUDA_NO_BGRAD")) != 0;
    VF_CUDA_TRY(st, cudaSetDevice(index));
    struct cudaDeviceProp prop;
    VF_CUDA_TRY(st, cudaGetDeviceProperties(&prop, index));
    if (prop.major < 8)
        VF_FAIL(st, VF_ECUDA,
                "cuda:%d (%s) has compute capability %d.%d; the bf16 tensor-core kernels need 8.0 or "
                "newer (this build targets sm_90)",
                index, prop.name, prop.major, prop.minor);
    c->sm_count = prop.multiProcessorCount;
    c->sm_version = prop.major * 10 + prop.minor;
    snprintf(g_model[index], sizeof g_model[index], "%s", prop.name);
    c->smem_optin = prop.sharedMemPerBlockOptin;
    VF_CUDA_TRY(st, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    VF_CUDA_TRY(st, cudaEventCreateWithFlags(&c->sync_ev, cudaEventDisableTiming));
    VF_TRY(vf_cuda_lt_load(st));
    {
        cublasStatus_t s = vf_cuda_lt_create(&c->lt);
        if (s != CUBLAS_STATUS_SUCCESS) VF_FAIL(st, VF_ECUDA, "cuda:%d: cublasLtCreate: status %d", index, (int)s);
    }
    c->scratch_bytes = scratch_bytes_from_env();
    {
        char name[64];
        snprintf(name, sizeof name, "cuda backend@cuda:%d", index);
        c->acct = vf_account_new_dev(name, (vf_device){VF_DEV_CUDA, index});
        if (c->acct) VF_TRY(vf_account_charge(c->acct, (int64_t)(VF_CUDA_LT_WS_BYTES + c->scratch_bytes), st));
    }
    VF_CUDA_TRY(st, cudaMalloc(&c->lt_ws, VF_CUDA_LT_WS_BYTES));
    VF_CUDA_TRY(st, cudaMalloc(&c->scratch, c->scratch_bytes));
    VF_CUDA_TRY(st, cudaMallocHost(&c->host, VF_CUDA_HOST_BYTES));
    VF_TRY(vf_cuda_attention_init(c, st));
    VF_TRY(vf_cuda_attn_init(c, st));
    VF_TRY(vf_cuda_conv_init(c, st));

    if (!(be = calloc(1, sizeof *be))) VF_FAIL(st, VF_ENOMEM, "cuda:%d: out of memory (backend)", index);
    *be = (vf_backend){
        .name = "cuda",
        .device = {VF_DEV_CUDA, index},
        .act_dtype = VF_DTYPE_BF16,
        .grad_dtype = VF_DTYPE_BF16,
        .ctx = c,
        .model = g_model[index],
        .alloc = cu_alloc,
        .free = cu_free,
        .alloc_shared = cu_alloc, /* pool blocks are exported by CUDA IPC as they are */
        .free_shared = cu_free,
        .alloc_pinned = cu_alloc_pinned,
        .free_pinned = cu_free_pinned,
        .memset0 = vf_cuda_memset0,
        .upload = vf_cuda_upload,
        .download = vf_cuda_download,
        .copy = vf_cuda_copy,
        .copy2d = vf_cuda_copy2d,
        .sync = cu_sync,
        .swap_new = vf_cuda_swap_new,
        .swap_free = vf_cuda_swap_free,
        .swap_in = vf_cuda_swap_in,
        .swap_wait = vf_cuda_swap_wait,
        .swap_stats = vf_cuda_swap_stats,
        .a2a_open = vf_cuda_a2a_open,
        .a2a_run = vf_cuda_a2a_run,
        .a2a_close = vf_cuda_a2a_close,
        .graph_begin = vf_cuda_graph_begin,
        .graph_end = vf_cuda_graph_end,
        .matmul_fwd = vf_cuda_matmul_fwd,
        .matmul_bwd = vf_cuda_matmul_bwd,
        .matmul_gelu_fwd = vf_cuda_matmul_gelu_fwd,
        .matmul_dgelu_bwd = vf_cuda_matmul_dgelu_bwd,
        .matmul_batch_fwd = vf_cuda_matmul_batch_fwd,
        .matmul_batch_bwd = vf_cuda_matmul_batch_bwd,
        .matmul_fp8_fwd = vf_cuda_matmul_fp8_fwd,
        .matmul_fp8_bwd = vf_cuda_matmul_fp8_bwd,
        .add = vf_cuda_add,
        .axpy = vf_cuda_axpy,
        .gelu_fwd = vf_cuda_gelu_fwd,
        .gelu_bwd = vf_cuda_gelu_bwd,
        .gelu_erf_fwd = vf_cuda_gelu_erf_fwd,
        .gelu_erf_bwd = vf_cuda_gelu_erf_bwd,
        .silu_fwd = vf_cuda_silu_fwd,
        .silu_bwd = vf_cuda_silu_bwd,
        .layernorm_fwd = vf_cuda_layernorm_fwd,
        .layernorm_bwd = vf_cuda_layernorm_bwd,
        .rmsnorm_fwd = vf_cuda_rmsnorm_fwd,
        .rmsnorm_bwd = vf_cuda_rmsnorm_bwd,
        .rmsnorm_ch_fwd = vf_cuda_rmsnorm_ch_fwd,
        .modulate_fwd = vf_cuda_modulate_fwd,
        .modulate_bwd = vf_cuda_modulate_bwd,
        .ln_modulate_fwd = vf_cuda_ln_modulate_fwd,
        .ln_modulate_bwd = vf_cuda_ln_modulate_bwd,
        .gated_add_fwd = vf_cuda_gated_add_fwd,
        .gated_add_bwd = vf_cuda_gated_add_bwd,
        .rope_fwd = vf_cuda_rope_fwd,
        .rope_bwd = vf_cuda_rope_bwd,
        .rmsnorm_rope_fwd = vf_cuda_rmsnorm_rope_fwd,
        .rmsnorm_rope_bwd = vf_cuda_rmsnorm_rope_bwd,
        .attention_fwd = vf_cuda_attention_fwd,
        .attention_bwd = vf_cuda_attention_bwd,
        .permute = vf_cuda_permute,
        .conv3d_fwd = vf_cuda_conv3d_fwd,
        .conv3d_bwd = vf_cuda_conv3d_bwd,
        .embed_fwd = vf_cuda_embed_fwd,
        .embed_bwd = vf_cuda_embed_bwd,
        .mse_fwd_bwd = vf_cuda_mse_fwd_bwd,
        .adamw = vf_cuda_adamw,
        .sumsq = vf_cuda_sumsq,
    };
    return be;
fail:
    (void)rc;
    vf_status_prefix(st, "cuda:%d", index);
    ctx_free(c);
    free(be);
    return NULL;
}

vf_backend *vf_backend_cuda(int index, vf_status *st)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        vf_status_set(st, VF_ECUDA, __FILE__, __LINE__,
                      "device cuda:%d: no usable CUDA device (%s); use device \"cpu\"", index,
                      e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
        return NULL;
    }
    if (index < 0 || index >= n || index >= VF_CUDA_MAX_DEVICES) {
        vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                      "device cuda:%d does not exist: this machine has %d CUDA device%s (cuda:0..cuda:%d)",
                      index, n, n == 1 ? "" : "s", n - 1);
        return NULL;
    }
    pthread_mutex_lock(&g_mu);
    if (!g_be[index]) g_be[index] = backend_new(index, st);
    vf_backend *be = g_be[index];
    pthread_mutex_unlock(&g_mu);
    if (be) {
        t_device = index;
        cudaSetDevice(index);
    }
    return be;
}

/* The device transports must be known to the data plane in every process that may
 * receive a device tensor, also one whose stages never ask for a CUDA backend (a CPU
 * optimizer shard fed by GPU partitions). This object file is always linked (it defines
 * vf_backend_cuda, which backend.c references), so its constructor always runs. */
__attribute__((constructor)) static void register_xfer(void) { vf_cuda_xfer_register(); }
