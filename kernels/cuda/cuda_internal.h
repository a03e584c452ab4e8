/* cuda_internal.h — what the files of the CUDA backend share (not public; stages use
 * kernels/ops.h and get a backend from vf_backend_cuda).
 *
 * One backend per device per process: a context with ONE stream on which every op is
 * enqueued, a cuBLASLt handle + workspace, a device scratch area (partial sums of the
 * deterministic reductions, upload/download staging), a small pinned host area, and a
 * mutex. Why one stream and a mutex: several stage threads of one worker may share a GPU
 * (a DiT partition and an optimizer shard); with a single stream every buffer handed
 * between them is ordered for free (no events between streams), and freed pool blocks
 * can be reused by the next allocation without waiting (stream order). The mutex keeps
 * the launches of one op together, because ops use the shared scratch between launches.
 *
 * Errors: ops return void (ops.h), so a failing CUDA call inside an op is recorded in
 * the context (first error wins, with file:line and the call) and returned by the next
 * be->sync(), which every caller of a device op eventually makes (downloads, loss, send).
 * Calls that can return a status (alloc, sync, creation, transports) check through
 * VF_CUDA_TRY, which fills a vf_status with file:line and the CUDA error string.
 */
#ifndef VF_CUDA_INTERNAL_H
#define VF_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

#include <cuda_runtime_api.h>
#include <cublasLt.h>

#include "kernels/ops.h"
#include "runtime/core/alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VF_CUDA_MAX_DEVICES 16
#define VF_CUDA_LT_WS_BYTES ((size_t)32 << 20)    /* cuBLASLt workspace */
#define VF_CUDA_SCRATCH_DEFAULT ((size_t)64 << 20) /* VFLOW_CUDA_SCRATCH_MB overrides */
#define VF_CUDA_STAGE_BYTES ((size_t)8 << 20)     /* upload/download staging inside scratch */
#define VF_CUDA_HOST_BYTES ((size_t)64 << 10)     /* pinned host: reduction partials */
#define VF_CUDA_RED_BLOCKS 256                    /* fixed blocks of mse / sumsq (as the CPU) */
#define VF_CUDA_PLAN_CACHE 256                    /* cuBLASLt plans kept per device */

typedef struct vf_lt_plan vf_lt_plan; /* matmul.c */
struct vf_cudnn;                      /* cudnn_common.cpp */
struct vf_cuda_graphs;                /* graph.c */

typedef struct vf_cuda_ctx {
    int device;
    char devname[16];          /* "cuda:N" for messages */
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_ws;               /* VF_CUDA_LT_WS_BYTES */
    void *scratch;             /* device: [staging VF_CUDA_STAGE_BYTES][partials …] */
    size_t scratch_bytes;
    void *host;                /* pinned host, VF_CUDA_HOST_BYTES */
    pthread_mutex_t mu;        /* held while an op enqueues (shared scratch, plan cache) and
                                  while a unit is recorded (graph.c); recursive */
    cudaEvent_t sync_ev;       /* what be->sync waits for: recorded under mu, so never into
                                  a recording in progress */
    int sm_count;
    int sm_version;            /* compute capability as major·10 + minor (90 on Hopper) */
    size_t smem_optin;         /* largest dynamic shared memory a block may opt into */
    /* first error of an op (returned by sync) */
    int err;
    int err_line;
    const char *err_file;
    char err_msg[512];
    /* cuBLASLt plans (matmul.c) */
    vf_lt_plan *plans;
    int nplans;
    int no_bgrad;              /* VFLOW_CUDA_NO_BGRAD=1: bias gradients by our own kernel */
    struct vf_cudnn *cudnn;    /* cuDNN handle, graphs, workspaces (cudnn_internal.h); made
                                  on the first attention or convolution cuDNN takes */
    struct vf_cuda_graphs *graphs; /* recorded units (graph.c); made on the first recording */
    vf_account *acct;          /* the backend's own buffers ("cuda backend@cuda:N") */
} vf_cuda_ctx;

static inline vf_cuda_ctx *vf_cuda_ctx_of(vf_backend *be) { return (vf_cuda_ctx *)be->ctx; }

/* Records a failed CUDA runtime call of an op (first error wins). Returns 0 when e is
 * cudaSuccess, VF_ECUDA otherwise. */
int vf_cuda_note(vf_cuda_ctx *c, cudaError_t e, const char *what, const char *file, int line);
int vf_cuda_note_lt(vf_cuda_ctx *c, cublasStatus_t s, const char *what, const char *file, int line);
/* Records an op-level misuse (bad sizes the kernels do not support) as a sticky error. */
void vf_cuda_note_msg(vf_cuda_ctx *c, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Inside ops: note and carry on (the op returns void; sync reports it). */
#define VF_CUDA_NOTE(c, call) vf_cuda_note((c), (call), #call, __FILE__, __LINE__)
#define VF_CUDA_NOTE_LAUNCH(c) vf_cuda_note((c), cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* With a status: on failure fill st (file:line, the call, CUDA's message) and goto fail. */
#define VF_CUDA_TRY(st, call)                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            rc = vf_status_set((st), VF_ECUDA, __FILE__, __LINE__, "%s: %s (%s)", #call,         \
                               cudaGetErrorString(e_), cudaGetErrorName(e_));                   \
            goto fail;                                                                          \
        }                                                                                       \
    } while (0)

/* Op bracket: makes the device current on this thread and takes the enqueue lock. */
void vf_cuda_op_begin(vf_cuda_ctx *c);
void vf_cuda_op_end(vf_cuda_ctx *c);

/* The scratch area split: staging (upload/download) and partials (reductions). */
static inline void *vf_cuda_stage(vf_cuda_ctx *c) { return c->scratch; }
static inline float *vf_cuda_partials(vf_cuda_ctx *c) { return (float *)((char *)c->scratch + VF_CUDA_STAGE_BYTES); }
static inline size_t vf_cuda_partials_bytes(vf_cuda_ctx *c) { return c->scratch_bytes - VF_CUDA_STAGE_BYTES; }

/* The device this thread last created / fetched a backend for (vf_backend_cuda), or -1:
 * where the device transports deliver received device tensors (a CPU stage's thread,
 * which never asked for a CUDA backend, gets host tensors). */
int vf_cuda_thread_device(void);

/* ------------------------------------------------------------------ device pool (pool.c) */

/* Device memory for device `dev`, charged to the calling thread's account (its device
 * twin "<account>@cuda:N"). Blocks are cudaMalloc'd, cached by size on free and reused;
 * cached bytes are charged to "pool cache@cuda:N". NULL + st on failure (after
 * returning the cache to the driver and retrying once). Thread-safe. */
void *vf_cuda_pool_alloc(int dev, size_t bytes, vf_status *st);
/* Returns a block to the cache (any thread; NULL is fine). Work already enqueued on
 * the device's stream that reads the block stays valid: the next user is enqueued after
 * it on the same stream. */
void vf_cuda_pool_free(int dev, void *p);
/* Frees the cached blocks that were never exported (cudaFree). */
void vf_cuda_pool_trim(int dev);
/* The pool block holding device address p: its base, size, a process-unique id, and
 * (export = true) its CUDA IPC handle, made once per block; the block is then never
 * given back to the driver while this process lives (an importer may have it mapped).
 * VF_ENOTFOUND when p is not pool memory. */
int vf_cuda_pool_lookup(int dev, const void *p, void **base, size_t *size, uint64_t *id,
                        cudaIpcMemHandle_t *handle, int export_it, vf_status *st);
/* Base address of this process's block `id` (both ends of an IPC edge in one process).
 * VF_ENOTFOUND when no such block. */
int vf_cuda_pool_by_id(int dev, uint64_t id, void **base);
/* Bytes held from the driver / cached (for metrics and tests). */
size_t vf_cuda_pool_reserved(int dev);
size_t vf_cuda_pool_cached(int dev);

/* ------------------------------------------------------------------ op entry points
 * (the .cu files; signatures as the table in ops.h) */

/* graph.c: recorded units as CUDA graphs (VFLOW_CUDA_GRAPHS=1) */
bool vf_cuda_graph_begin(vf_backend *be, const uint64_t *key, int nkey);
bool vf_cuda_graph_end(vf_backend *be);
void vf_cuda_graphs_free(vf_cuda_ctx *c);

/* memory.cu */
void vf_cuda_memset0(vf_backend *be, void *p, size_t bytes);
void vf_cuda_upload(vf_backend *be, void *dst, const float *src, int64_t n, vf_dtype dt);
void vf_cuda_download(vf_backend *be, float *dst, const void *src, int64_t n, vf_dtype dt);
void vf_cuda_copy(vf_backend *be, void *dst, const void *src, size_t bytes);
void vf_cuda_copy2d(vf_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                    size_t width, size_t rows);
/* swap.c: block swap (ops.h): pinned host memory and a copy stream with events */
void *vf_cuda_swap_new(vf_backend *be, int slots, vf_status *st);
void vf_cuda_swap_free(vf_backend *be, void *q);
void vf_cuda_swap_in(vf_backend *be, void *q, int slot, void *dst, const void *src, size_t bytes);
void vf_cuda_swap_wait(vf_backend *be, void *q, int slot);
void vf_cuda_swap_stats(vf_backend *be, void *q, double *copy_s, double *wait_s);

/* collective.c: the all-to-all (ops.h): NCCL among the ranks' devices, bootstrapped over
 * their host group; the host group itself without NCCL. Caller owns the group. */
void *vf_cuda_a2a_open(vf_backend *be, vf_a2a *boot, int n, int rank, size_t chunk_max, vf_status *st);
int vf_cuda_a2a_run(vf_backend *be, void *g, const void *send, void *recv, size_t chunk, vf_status *st);
void vf_cuda_a2a_close(vf_backend *be, void *g);
/* layout.cu */
void vf_cuda_permute(vf_backend *be, void *out, const void *inp, int ndim, const int64_t *shape,
                     const int *perm);
/* embed_loss.cu */
void vf_cuda_embed_fwd(vf_backend *be, void *out, const int32_t *tok, const void *table, int64_t N,
                       int64_t C);
void vf_cuda_embed_bwd(vf_backend *be, void *dtable, const void *dout, const int32_t *tok,
                       int64_t N, int64_t C);

/* matmul.c (cuBLASLt) and matmul.cu (bias rows and gradient) */
void vf_cuda_matmul_fwd(vf_backend *be, void *out, const void *inp, const void *w,
                        const void *bias, int64_t N, int64_t C, int64_t OC);
void vf_cuda_matmul_bwd(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, int64_t N, int64_t C, int64_t OC,
                        vf_grad_mode mode);
void vf_cuda_matmul_gelu_fwd(vf_backend *be, void *out, void *pre, const void *inp, const void *w,
                             const void *bias, int64_t N, int64_t C, int64_t OC);
void vf_cuda_matmul_dgelu_bwd(vf_backend *be, void *dpre, void *dbias_pre, void *dw, void *dbias,
                              const void *dout, const void *inp, const void *w, const void *pre,
                              int64_t N, int64_t C, int64_t OC);
void vf_cuda_matmul_batch_fwd(vf_backend *be, void *out, const void *inp, const void *w,
                              const void *bias, int64_t N, int64_t C, int64_t OC, int nb,
                              int64_t wstride, int64_t ostride);
void vf_cuda_matmul_batch_bwd(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                              const void *inp, const void *w, int64_t N, int64_t C, int64_t OC,
                              int nb, int64_t wstride, int64_t ostride, vf_grad_mode mode);
void vf_cuda_matmul_fp8_fwd(vf_backend *be, void *out, const void *inp, const uint8_t *w8,
                            float wscale, const void *bias, void *wbuf, int64_t N, int64_t C,
                            int64_t OC);
void vf_cuda_matmul_fp8_bwd(vf_backend *be, void *dinp, const void *dout, const uint8_t *w8,
                            float wscale, void *wbuf, int64_t N, int64_t C, int64_t OC,
                            vf_grad_mode mode);
void vf_cuda_lt_free(vf_cuda_ctx *c);
/* Opens cuBLASLt (dlopen, once per process): 0 or VF_ECUDA naming the library. */
int vf_cuda_lt_load(vf_status *st);
/* D (m x n, col-major, ldd; f32 where d_f32, else bf16) = alpha·op(A)·op(B) with bf16
 * A, B (op: transposed where ta / tb), f32 compute; the caller holds the op bracket. 0, or
 * VF_ECUDA (noted in c). */
int vf_cuda_lt_gemm(vf_cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                    int64_t lda, const void *B, int64_t ldb, void *D, int64_t ldd, int d_f32);
cublasStatus_t vf_cuda_lt_create(cublasLtHandle_t *h);
void vf_cuda_lt_destroy(cublasLtHandle_t h);

/* elementwise.cu */
void vf_cuda_add(vf_backend *be, void *out, const void *a, const void *b, int64_t n);
void vf_cuda_axpy(vf_backend *be, void *y, const void *x, float alpha, int64_t n);
void vf_cuda_gelu_fwd(vf_backend *be, void *out, const void *inp, int64_t n);
void vf_cuda_gelu_bwd(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n);
void vf_cuda_gelu_erf_fwd(vf_backend *be, void *out, const void *inp, int64_t n);
void vf_cuda_gelu_erf_bwd(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n);
void vf_cuda_silu_fwd(vf_backend *be, void *out, const void *inp, int64_t n);
void vf_cuda_silu_bwd(vf_backend *be, void *dinp, const void *dout, const void *inp, int64_t n,
                      vf_grad_mode mode);
/* out = gelu(inp); dinp = gelu'(inp)·dout (dinp may be dout), n elements (caller holds the
 * op bracket: the fused GEMMs' fallbacks) */
void vf_cuda_gelu_apply(vf_cuda_ctx *c, void *out, const void *inp, int64_t n);
void vf_cuda_dgelu_apply(vf_cuda_ctx *c, void *dinp, const void *dout, const void *inp, int64_t n);
/* rope.cu */
void vf_cuda_rope_fwd(vf_backend *be, void *out, const void *inp, const float *cos,
                      const float *sin, int64_t B, int64_t L, int64_t H, int64_t D);
void vf_cuda_rope_bwd(vf_backend *be, void *dinp, const void *dout, const float *cos,
                      const float *sin, int64_t B, int64_t L, int64_t H, int64_t D);
void vf_cuda_rmsnorm_rope_fwd(vf_backend *be, void *out, float *rstd, const void *inp,
                              const void *w, const float *cos, const float *sin, int64_t B,
                              int64_t L, int64_t H, int64_t D, float eps);
void vf_cuda_rmsnorm_rope_bwd(vf_backend *be, void *dinp, void *dw, const void *dout,
                              const void *inp, const void *w, const float *rstd,
                              const float *cos, const float *sin, int64_t B, int64_t L,
                              int64_t H, int64_t D);
/* adamw.cu */
void vf_cuda_adamw(vf_backend *be, float *master, float *m, float *v, const void *grad,
                   void *weights_out, int64_t n, float lr, float beta1, float beta2, float eps,
                   float weight_decay, float grad_scale, int64_t t);

/* modulate.cu */
void vf_cuda_modulate_fwd(vf_backend *be, void *out, const void *x, const void *shift,
                          const void *scale, int64_t B, int64_t L, int64_t C);
void vf_cuda_modulate_bwd(vf_backend *be, void *dx, void *dshift, void *dscale, const void *dout,
                          const void *x, const void *scale, int64_t B, int64_t L, int64_t C);
void vf_cuda_ln_modulate_fwd(vf_backend *be, void *out, float *mean, float *rstd, const void *x,
                             const void *shift, const void *scale, int64_t B, int64_t L,
                             int64_t C, float eps);
void vf_cuda_ln_modulate_bwd(vf_backend *be, void *dx, void *dshift, void *dscale,
                             const void *dout, const void *x, const float *mean,
                             const float *rstd, const void *scale, int64_t B, int64_t L,
                             int64_t C, float eps, vf_grad_mode mode);
void vf_cuda_gated_add_fwd(vf_backend *be, void *out, const void *x, const void *gate,
                           const void *y, int64_t B, int64_t L, int64_t C);
void vf_cuda_gated_add_bwd(vf_backend *be, void *dx, void *dgate, void *dy, const void *dout,
                           const void *gate, const void *y, int64_t B, int64_t L, int64_t C);
/* embed_loss.cu */
double vf_cuda_mse_fwd_bwd(vf_backend *be, void *dpred, const void *pred, const void *target,
                           int64_t n, int64_t count, float grad_scale);
/* adamw.cu */
double vf_cuda_sumsq(vf_backend *be, const void *grad, int64_t n);
/* matmul.cu: dbias (OC) += Σ_n dout (N, OC), bf16 in/out, f32 sums in a fixed order (no lock: the
 * caller holds the op bracket). */
void vf_cuda_bias_grad(vf_cuda_ctx *c, void *dbias, const void *dout, int64_t N, int64_t OC);
/* out (N, OC) += bias (OC) broadcast over rows (caller holds the op bracket) */
void vf_cuda_add_bias_rows(vf_cuda_ctx *c, void *out, const void *bias, int64_t N, int64_t OC);
/* dbias (n, bf16) += src (n, f32) */
void vf_cuda_add_f32_to_bf16(vf_cuda_ctx *c, void *dbias, const float *src, int64_t n);
/* dst (n, bf16) = e4m3(w8[i])·scale, the product in f32 rounded to nearest even (matmul.cu;
 * caller holds the op bracket). */
void vf_cuda_fp8_dequant(vf_cuda_ctx *c, void *dst, const uint8_t *w8, float scale, int64_t n);

/* dw/db (C) += Σ_n dout·x̂, Σ_n dout with x̂ = (x − mean)·rstd per row (mean NULL:
 * RMSNorm); either output may be NULL (norm.cu; caller holds the op bracket). */
void vf_cuda_norm_wgrad(vf_cuda_ctx *c, void *dw, void *db, const void *dout, const void *x,
                        const float *mean, const float *rstd, int64_t N, int64_t C);

/* norm.cu: LayerNorm of rows with adaLN's modulate in place of the affine (scale, shift
 * (B, C) per sample of L rows), forward and the input gradient (= or += by acc); the
 * caller holds the op bracket (modulate.cu's ln_modulate ops) */
void vf_cuda_ln_mod_fwd(vf_cuda_ctx *c, void *out, float *mean, float *rstd, const void *x,
                        const void *shift, const void *scale, int64_t B, int64_t L, int64_t C,
                        float eps);
void vf_cuda_ln_mod_dx(vf_cuda_ctx *c, void *dx, const void *dout, const void *x, const float *mean,
                       const float *rstd, const void *scale, int64_t B, int64_t L, int64_t C,
                       bool acc);

/* norm.cu */
void vf_cuda_layernorm_fwd(vf_backend *be, void *out, float *mean, float *rstd, const void *inp,
                           const void *w, const void *b, int64_t N, int64_t C, float eps);
void vf_cuda_layernorm_bwd(vf_backend *be, void *dinp, void *dw, void *db, const void *dout,
                           const void *inp, const void *w, const float *mean, const float *rstd,
                           int64_t N, int64_t C);
void vf_cuda_rmsnorm_fwd(vf_backend *be, void *out, float *rstd, const void *inp, const void *w,
                         int64_t N, int64_t C, float eps);
void vf_cuda_rmsnorm_bwd(vf_backend *be, void *dinp, void *dw, const void *dout, const void *inp,
                         const void *w, const float *rstd, int64_t N, int64_t C);
void vf_cuda_rmsnorm_ch_fwd(vf_backend *be, void *out, const void *inp, const void *w, int64_t B,
                            int64_t C, int64_t S, float eps);

/* lib_path.c: for one family of ops, the process-wide choice between cuDNN and the hand
 * kernels read from an environment variable (unset or "cudnn": cuDNN where it takes the
 * call; "hand"), libcudnn loaded unless "hand", and the calls counted per path that ran. */
enum { VF_PATH_CUDNN, VF_PATH_HAND, VF_PATH_GEMM, VF_PATH_N };
typedef struct vf_cuda_path {
    const char *env;           /* "VFLOW_ATTN" */
    const char *what;          /* "attention", for messages */
    int setup;                 /* the variable read and acted on (under lib_path.c's lock) */
    int use_lib;               /* cuDNN where it takes the call (atomic) */
    int hand;                  /* "hand" asked for: the hand kernels only (atomic) */
    int64_t calls[VF_PATH_N];  /* ops run per path (atomics) */
} vf_cuda_path;
/* Reads the variable and loads libcudnn, once per process: 0, VF_EUSAGE for a bad value,
 * VF_ECUDA when "cudnn" is demanded and cannot be had. */
int vf_cuda_path_setup(vf_cuda_path *p, vf_status *st);
/* Chooses "cudnn" or "hand" for the calls that follow (VF_EUSAGE, VF_ECUDA as above). */
int vf_cuda_path_use(vf_cuda_path *p, const char *path, vf_status *st);
int vf_cuda_path_lib(const vf_cuda_path *p); /* whether cuDNN is to be asked */
int vf_cuda_path_hand(const vf_cuda_path *p); /* whether "hand" was asked for */
void vf_cuda_path_count(vf_cuda_path *p, int path);
int64_t vf_cuda_path_calls(const vf_cuda_path *p, int path);
/* The paths that ran, joined by '+' ("cudnn", "cudnn+hand", "gemm", …); before any ran,
 * the one the next call takes where cuDNN takes it. A static string. */
const char *vf_cuda_path_name(const vf_cuda_path *p);
/* bytes(c) of be's context under its op bracket (what a family's workspace query reads). */
size_t vf_cuda_path_bytes(vf_backend *be, size_t (*bytes)(vf_cuda_ctx *c));

/* attention_path.c: the table's attention entries, which run cuDNN's fused SDPA
 * (cudnn_att.cpp) where it takes the call and the hand kernels otherwise; init reads
 * VFLOW_ATTN and loads libcudnn once per process (0, or VF_EUSAGE / VF_ECUDA). */
int vf_cuda_attn_init(vf_cuda_ctx *c, vf_status *st);
void vf_cuda_attention_fwd(vf_backend *be, void *out, float *lse, const void *q, const void *k,
                           const void *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D,
                           float scale);
void vf_cuda_attention_bwd(vf_backend *be, void *dq, void *dk, void *dv, const void *dout,
                           const void *q, const void *k, const void *v, const void *out,
                           const float *lse, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                           int64_t D, float scale);
/* attention.cu: the hand kernels (ops.h's contract; they take the op bracket) */
int vf_cuda_attention_init(vf_cuda_ctx *c, vf_status *st);
void vf_cuda_attention_hand_fwd(vf_backend *be, void *out, float *lse, const void *q, const void *k,
                                const void *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                                int64_t D, float scale);
void vf_cuda_attention_hand_bwd(vf_backend *be, void *dq, void *dk, void *dv, const void *dout,
                                const void *q, const void *k, const void *v, const void *out,
                                const float *lse, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                                int64_t D, float scale);

/* attention_gemm.cu: attention_fwd (ops.h) as S = scale·Q·Kᵀ, softmax, P·V through
 * cuBLASLt, in blocks of query rows within the scratch partials; the caller holds the op
 * bracket. 0; VF_ENOTFOUND when not even one row fits the partials (nothing enqueued);
 * VF_ECUDA (noted). */
int vf_cuda_attention_gemm_fwd(vf_cuda_ctx *c, void *out, float *lse, const void *q, const void *k,
                               const void *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D,
                               float scale);

/* conv_path.c: the table's conv3d_fwd, which runs cuDNN's convolution (cudnn_conv.cpp)
 * where it takes the call and the hand kernel otherwise; init reads VFLOW_CONV and loads
 * libcudnn once per process (0, or VF_EUSAGE / VF_ECUDA). */
int vf_cuda_conv_init(vf_cuda_ctx *c, vf_status *st);
void vf_cuda_conv3d_fwd(vf_backend *be, void *out, const void *inp, const void *w, const void *bias,
                        int64_t B, int64_t C, int64_t T, int64_t H, int64_t W, int64_t OC, int KT,
                        int KH, int KW, int st, int sh, int sw, int pt0, int pt1, int ph0, int ph1,
                        int pw0, int pw1);
/* conv3d.cu: the hand kernels (ops.h's contract; they take the op bracket) */
void vf_cuda_conv3d_hand_fwd(vf_backend *be, void *out, const void *inp, const void *w,
                             const void *bias, int64_t B, int64_t C, int64_t T, int64_t H,
                             int64_t W, int64_t OC, int KT, int KH, int KW, int st, int sh, int sw,
                             int pt0, int pt1, int ph0, int ph1, int pw0, int pw1);
void vf_cuda_conv3d_bwd(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, int64_t B, int64_t C, int64_t T, int64_t H,
                        int64_t W, int64_t OC, int KT, int KH, int KW, int st, int sh, int sw,
                        int pt0, int pt1, int ph0, int ph1, int pw0, int pw1);
/* out (B, OC, P) += bias (OC) broadcast over positions (caller holds the op bracket) */
void vf_cuda_conv_bias(vf_cuda_ctx *c, void *out, const void *bias, int64_t B, int64_t OC,
                       int64_t P);

/* xfer_cuda.c: registers the device-tensor transports with the runtime (transport_dev.h). */
void vf_cuda_xfer_register(void);

#ifdef __cplusplus
}
#endif
#endif /* VF_CUDA_INTERNAL_H */
