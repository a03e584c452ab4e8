/* matmul.c — the dense layer on CUDA through cuBLASLt: matmul_fwd with the bias add
 * fused as the GEMM's epilogue, matmul_bwd with dinp written (beta = 0) or added (beta =
 * 1) as its mode says, dW accumulated in place (beta = 1) and the bias gradient produced
 * by the dW GEMM's BGRADB epilogue where cuBLASLt offers it for the shape (else by our
 * fixed-order column-sum kernel, matmul.cu); GELU fused into the epilogues on either side
 * (GELU_AUX_BIAS, DGELU_BGRAD); several layers over one input as one strided-batched
 * GEMM. bf16 operands, f32 compute and scale.
 *
 * Row-major to cuBLAS's column-major: a row-major (R, C) matrix is a column-major
 * (C x R) one with the same leading dimension, so
 *   out (N, OC) = inp·wᵀ      ->  outᶜ (OC x N)  = wᶜᵀ (OC x C) · inpᶜ (C x N)
 *   dinp (N, C) += dout·w     ->  dinpᶜ (C x N) += wᶜ (C x OC) · doutᶜ (OC x N)
 *   dw (OC, C) += doutᵀ·inp   ->  dwᶜ (C x OC)  += inpᶜ (C x N) · doutᶜᵀ (N x OC)
 * and dbias = Σ_N dout is the reduction of op(B) = doutᶜᵀ over the GEMM's k = N, what
 * BGRADB computes (into an f32 scratch vector, then added to the bf16 dbias).
 *
 * Plans (descriptor, layouts, the heuristic's algorithm) are cached per shape, epilogue,
 * batch and operand alignment: pointers into a flat parameter vector may be only 2-byte
 * aligned, and cuBLASLt's fastest kernels need 16, so alignment is part of the key.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>

#include "kernels/cuda/cuda_internal.h"

/* ------------------------------------------------------------------ loading cuBLASLt
 * cuBLASLt is opened with dlopen when the first CUDA backend is made, not linked:
 * merely loading the 540 MB library at process start costs ~150 MB of resident memory
 * (relocations), in every worker, also the CPU-only ones (decode, LMDB writer) whose
 * memory the plan bounds. The entry points used are called through this table. */
#define LT_FUNCS(X)                                                                                \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)  \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) \
    X(cublasLtMatrixLayoutSetAttribute)                                                            \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                          \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

static struct {
#define LT_PTR(f) __typeof__(&f) f;
    LT_FUNCS(LT_PTR)
#undef LT_PTR
} lt;
static pthread_mutex_t g_lt_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_lt_state; /* 0 not tried, 1 loaded, -1 failed */
static char g_lt_err[256];

int vf_cuda_lt_load(vf_status *st)
{
    pthread_mutex_lock(&g_lt_mu);
    if (g_lt_state == 0) {
        char name[64];
        snprintf(name, sizeof name, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
        void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(g_lt_err, sizeof g_lt_err, "cannot load %s: %s", name, dlerror());
            g_lt_state = -1;
        } else {
            g_lt_state = 1;
#define LT_SYM(f)                                                                                  \
    if (g_lt_state == 1 && !(*(void **)&lt.f = dlsym(h, #f))) {                                    \
        snprintf(g_lt_err, sizeof g_lt_err, "%s: no symbol %s", name, #f);                         \
        g_lt_state = -1;                                                                           \
    }
            LT_FUNCS(LT_SYM)
#undef LT_SYM
        }
    }
    int ok = g_lt_state == 1;
    pthread_mutex_unlock(&g_lt_mu);
    if (ok) return 0;
    return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "cuBLASLt: %s (is the CUDA toolkit's lib64 on the "
                         "library path?)", g_lt_err);
}

cublasStatus_t vf_cuda_lt_create(cublasLtHandle_t *h) { return lt.cublasLtCreate(h); }
void vf_cuda_lt_destroy(cublasLtHandle_t h) { lt.cublasLtDestroy(h); }

/* A plan's key: everything cuBLASLt's heuristic sees. Zeroed before it is filled, so
 * whole keys compare with memcmp. */
typedef struct lt_key {
    int ta, tb, epi, bias_f32, d_f32; /* d_f32: D is f32, else bf16 */
    uint64_t m, n, k;
    int64_t lda, ldb, ldd;
    int al_a, al_b, al_d, al_aux;
    int64_t aux_ld;                 /* GELU input (GELU_AUX_BIAS out, DGELU in), 0: none */
    int batch;                      /* strided batch of this many GEMMs (0, 1: one) */
    int64_t sa, sb, sd, sbias;      /* batch strides in elements (A, B, D, bias) */
} lt_key;

struct vf_lt_plan {
    lt_key key;
    /* value */
    int ok; /* 1 usable, 0 no algorithm for it (the caller falls back) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};

static int align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return (a & 15) == 0 ? 16 : (a & 7) == 0 ? 8 : (a & 3) == 0 ? 4 : 2;
}

/* the alignment every matrix of a strided batch has: that of p and of the stride */
static int align_batch(const void *p, int64_t stride_elems)
{
    const int a = align_of(p), b = align_of((const void *)(uintptr_t)(stride_elems * 2));
    return stride_elems ? (a < b ? a : b) : a;
}

void vf_cuda_lt_free(vf_cuda_ctx *c)
{
    for (int i = 0; i < c->nplans; i++) {
        vf_lt_plan *p = &c->plans[i];
        if (p->desc) lt.cublasLtMatmulDescDestroy(p->desc);
        if (p->la) lt.cublasLtMatrixLayoutDestroy(p->la);
        if (p->lb) lt.cublasLtMatrixLayoutDestroy(p->lb);
        if (p->ld) lt.cublasLtMatrixLayoutDestroy(p->ld);
    }
    free(c->plans);
    c->plans = NULL;
    c->nplans = 0;
}

#define LT(call)                                                                                   \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) goto bad;                                                 \
    } while (0)

/* a layout of rows × cols with leading dimension ld, batched as the key says */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld,
                             const lt_key *k, int64_t stride)
{
    cublasStatus_t s = lt.cublasLtMatrixLayoutCreate(l, t, rows, cols, ld);
    if (s != CUBLAS_STATUS_SUCCESS || k->batch <= 1) return s;
    int32_t n = k->batch;
    s = lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return s;
}

/* Builds the plan for p->key. Sets p->ok. */
static void plan_build(vf_cuda_ctx *c, vf_lt_plan *p)
{
    const lt_key *k = &p->key;
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t oa = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)k->epi;
    p->ok = 0;
    LT(lt.cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (k->bias_f32) {
            cudaDataType_t bt = CUDA_R_32F;
            LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        }
        if (k->batch > 1)
            LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &k->sbias,
                                                 sizeof k->sbias));
        if (k->aux_ld)
            LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &k->aux_ld,
                                                 sizeof k->aux_ld));
    }
    LT(layout(&p->la, CUDA_R_16BF, k->ta ? k->k : k->m, k->ta ? k->m : k->k, k->lda, k, k->sa));
    LT(layout(&p->lb, CUDA_R_16BF, k->tb ? k->n : k->k, k->tb ? k->k : k->n, k->ldb, k, k->sb));
    LT(layout(&p->ld, k->d_f32 ? CUDA_R_32F : CUDA_R_16BF, k->m, k->n, k->ldd, k, k->sd));
    LT(lt.cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = VF_CUDA_LT_WS_BYTES;
    uint32_t aa = (uint32_t)k->al_a, ab = (uint32_t)k->al_b, ad = (uint32_t)k->al_d;
    LT(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
    LT(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
    LT(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad));
    LT(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad));
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    LT(lt.cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &nres));
    if (nres < 1) goto bad;
    p->algo = res.algo;
    p->ok = 1;
    lt.cublasLtMatmulPreferenceDestroy(pref);
    return;
bad:
    if (pref) lt.cublasLtMatmulPreferenceDestroy(pref);
}

static vf_lt_plan *plan_get(vf_cuda_ctx *c, const lt_key *key)
{
    for (int i = 0; i < c->nplans; i++)
        if (memcmp(&c->plans[i].key, key, sizeof *key) == 0) return &c->plans[i];
    if (c->nplans == VF_CUDA_PLAN_CACHE) vf_cuda_lt_free(c); /* a model has a few dozen shapes */
    if (!c->plans && !(c->plans = calloc(VF_CUDA_PLAN_CACHE, sizeof *c->plans))) return NULL;
    vf_lt_plan *p = &c->plans[c->nplans++];
    memset(p, 0, sizeof *p);
    p->key = *key;
    plan_build(c, p);
    return p;
}

/* What a GEMM adds to D = op(A)·op(B) + beta·D: an epilogue with its bias (or bias
 * gradient) vector and GELU input matrix, and a strided batch. Zero: none. */
typedef struct lt_extra {
    cublasLtEpilogue_t epi;
    void *bias;
    int bias_f32;
    void *aux;
    int64_t aux_ld;
    int batch;
    int64_t sa, sb, sd, sbias;
} lt_extra;

/* D (m x n, col-major, ldd; f32 where d_f32, else bf16) = alpha·op(A)·op(B) + beta·D with
 * x's epilogue and batch (x may be NULL: a plain GEMM). Returns 0, or VF_ENOTFOUND when
 * cuBLASLt has no algorithm for this combination (only asked with an epilogue or a batch,
 * where the caller has a fallback), or VF_ECUDA (noted). */
static int lt_gemm_ex(vf_cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                      int64_t lda, const void *B, int64_t ldb, void *D, int64_t ldd, int d_f32, float beta,
                      const lt_extra *x)
{
    static const lt_extra none = {.epi = CUBLASLT_EPILOGUE_DEFAULT};
    if (!x) x = &none;
    lt_key key;
    memset(&key, 0, sizeof key);
    key.ta = ta, key.tb = tb, key.epi = (int)x->epi, key.bias_f32 = x->bias_f32, key.d_f32 = d_f32;
    key.m = (uint64_t)m, key.n = (uint64_t)n, key.k = (uint64_t)k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
    key.al_a = align_batch(A, x->batch > 1 ? x->sa : 0), key.al_b = align_batch(B, x->batch > 1 ? x->sb : 0);
    key.al_d = align_batch(D, x->batch > 1 ? x->sd : 0), key.al_aux = x->aux ? align_of(x->aux) : 0;
    key.aux_ld = x->aux ? x->aux_ld : 0;
    if (x->batch > 1) key.batch = x->batch, key.sa = x->sa, key.sb = x->sb, key.sd = x->sd, key.sbias = x->sbias;
    vf_lt_plan *p = plan_get(c, &key);
    if (!p) {
        vf_cuda_note_msg(c, __FILE__, __LINE__, "cuBLASLt plan cache: out of host memory");
        return VF_ECUDA;
    }
    if (!p->ok) {
        if (x->epi != CUBLASLT_EPILOGUE_DEFAULT || x->batch > 1) return VF_ENOTFOUND;
        vf_cuda_note_msg(c, __FILE__, __LINE__,
                         "cuBLASLt has no bf16 algorithm for m=%lld n=%lld k=%lld (transa %d transb %d, "
                         "alignments %d/%d/%d)",
                         (long long)m, (long long)n, (long long)k, ta, tb, key.al_a, key.al_b, key.al_d);
        return VF_ECUDA;
    }
    if (x->epi != CUBLASLT_EPILOGUE_DEFAULT) {
        if (vf_cuda_note_lt(c, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x->bias,
                                                                 sizeof x->bias),
                            "lt.cublasLtMatmulDescSetAttribute(BIAS_POINTER)", __FILE__, __LINE__))
            return VF_ECUDA;
        if (x->aux &&
            vf_cuda_note_lt(c, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                                 &x->aux, sizeof x->aux),
                            "lt.cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)", __FILE__, __LINE__))
            return VF_ECUDA;
    }
    return vf_cuda_note_lt(c,
                           lt.cublasLtMatmul(c->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->ld, D, p->ld,
                                          &p->algo, c->lt_ws, VF_CUDA_LT_WS_BYTES, c->stream),
                           "cublasLtMatmul", __FILE__, __LINE__);
}

/* the dense layer's GEMMs: bf16 D, alpha 1 */
static int lt_gemm(vf_cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                   const void *B, int64_t ldb, void *D, int64_t ldd, float beta, const lt_extra *x)
{
    return lt_gemm_ex(c, ta, tb, m, n, k, 1.0f, A, lda, B, ldb, D, ldd, 0, beta, x);
}

int vf_cuda_lt_gemm(vf_cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                    int64_t lda, const void *B, int64_t ldb, void *D, int64_t ldd, int d_f32)
{
    return lt_gemm_ex(c, ta, tb, m, n, k, alpha, A, lda, B, ldb, D, ldd, d_f32, 0.0f, NULL);
}

/* ------------------------------------------------------------------ the dense layer */

/* out (N, OC) = inp·wᵀ + bias (caller holds the op bracket) */
static void dense_fwd(vf_cuda_ctx *c, void *out, const void *inp, const void *w, const void *bias, int64_t N,
                      int64_t C, int64_t OC)
{
    if (C <= 0) { /* an empty sum: the bias alone (or zeros) */
        VF_CUDA_NOTE(c, cudaMemsetAsync(out, 0, (size_t)(N * OC) * 2, c->stream));
        if (bias) vf_cuda_add_bias_rows(c, out, bias, N, OC);
        return;
    }
    /* the fused bias wants an aligned vector: a bias at an odd offset of the flat
     * parameter vector is added by the row kernel instead */
    const bool fuse = bias && align_of(bias) == 16;
    const lt_extra xb = {.epi = CUBLASLT_EPILOGUE_BIAS, .bias = (void *)bias};
    int rc = lt_gemm(c, 1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f, fuse ? &xb : NULL);
    if (rc == 0 && bias && !fuse) vf_cuda_add_bias_rows(c, out, bias, N, OC);
    /* no fused bias for this shape: plain GEMM, then the add */
    if (rc == VF_ENOTFOUND && lt_gemm(c, 1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f, NULL) == 0)
        vf_cuda_add_bias_rows(c, out, bias, N, OC);
}

/* dinp (N, C) = or += (beta) dout·w (caller holds the op bracket) */
static void dense_dinp(vf_cuda_ctx *c, void *dinp, const void *dout, const void *w, int64_t N, int64_t C, int64_t OC,
                       float beta)
{
    if (!dinp || C <= 0) return;
    if (OC <= 0) { /* an empty sum */
        if (beta == 0.0f) VF_CUDA_NOTE(c, cudaMemsetAsync(dinp, 0, (size_t)(N * C) * 2, c->stream));
        return;
    }
    lt_gemm(c, 0, 0, C, N, OC, w, C, dout, OC, dinp, C, beta, NULL);
}

/* dw (OC, C) += doutᵀ·inp and dbias (OC) += Σ_N dout, the bias gradient by the GEMM's
 * BGRADB epilogue (into an f32 scratch vector, then added) where cuBLASLt offers it for
 * the shape, else by the column-sum kernel (caller holds the op bracket) */
static void dense_wgrad(vf_cuda_ctx *c, void *dw, void *dbias, const void *dout, const void *inp, int64_t N,
                        int64_t C, int64_t OC)
{
    bool bias_done = false;
    if (dw && C > 0) {
        if (dbias && !c->no_bgrad && (size_t)OC * sizeof(float) <= vf_cuda_partials_bytes(c)) {
            float *gb = vf_cuda_partials(c);
            const lt_extra xg = {.epi = CUBLASLT_EPILOGUE_BGRADB, .bias = gb, .bias_f32 = 1};
            int rc = lt_gemm(c, 0, 1, C, OC, N, inp, C, dout, OC, dw, C, 1.0f, &xg);
            if (rc == 0) {
                vf_cuda_add_f32_to_bf16(c, dbias, gb, OC);
                bias_done = true;
            } else if (rc != VF_ENOTFOUND) {
                return;
            }
        }
        if (!bias_done) lt_gemm(c, 0, 1, C, OC, N, inp, C, dout, OC, dw, C, 1.0f, NULL);
    }
    if (dbias && !bias_done) vf_cuda_bias_grad(c, dbias, dout, N, OC);
}

void vf_cuda_matmul_fwd(vf_backend *be, void *out, const void *inp, const void *w, const void *bias,
                        int64_t N, int64_t C, int64_t OC)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0 || OC <= 0) return;
    vf_cuda_op_begin(c);
    dense_fwd(c, out, inp, w, bias, N, C, OC);
    vf_cuda_op_end(c);
}

void vf_cuda_matmul_bwd(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, int64_t N, int64_t C, int64_t OC, vf_grad_mode mode)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0) return;
    vf_cuda_op_begin(c);
    dense_dinp(c, dinp, dout, w, N, C, OC, mode == VF_GRAD_ADD ? 1.0f : 0.0f);
    if (OC > 0) dense_wgrad(c, dw, dbias, dout, inp, N, C, OC);
    vf_cuda_op_end(c);
}

/* ------------------------------------------------------------------ a frozen FP8 weight
 * The weight is dequantised into the caller's bf16 scratch by one elementwise kernel and
 * the GEMM is the bf16 one above, rather than cuBLASLt's FP8 GEMM: that one wants both
 * operands in FP8 (the bf16 activations would be quantised too, with scales of their
 * own), takes only the TN layout (the backward's dinp = dout·w reads w untransposed, so
 * it would need a second, transposed FP8 copy) and needs sm89 or newer; the scratch is one
 * linear's weight at a time, and the kernel reads a byte and writes two per element, a
 * small cost beside the GEMM's N·C·OC. */

void vf_cuda_matmul_fp8_fwd(vf_backend *be, void *out, const void *inp, const uint8_t *w8, float wscale,
                            const void *bias, void *wbuf, int64_t N, int64_t C, int64_t OC)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0 || OC <= 0) return;
    vf_cuda_op_begin(c);
    vf_cuda_fp8_dequant(c, wbuf, w8, wscale, OC * C);
    dense_fwd(c, out, inp, wbuf, bias, N, C, OC);
    vf_cuda_op_end(c);
}

void vf_cuda_matmul_fp8_bwd(vf_backend *be, void *dinp, const void *dout, const uint8_t *w8, float wscale,
                            void *wbuf, int64_t N, int64_t C, int64_t OC, vf_grad_mode mode)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0 || !dinp) return;
    vf_cuda_op_begin(c);
    vf_cuda_fp8_dequant(c, wbuf, w8, wscale, OC * C);
    dense_dinp(c, dinp, dout, wbuf, N, C, OC, mode == VF_GRAD_ADD ? 1.0f : 0.0f);
    vf_cuda_op_end(c);
}

/* ------------------------------------------------------------------ GELU in the epilogue
 * GELU_AUX_BIAS: out = gelu(inp·wᵀ + bias) with the pre-activation stored as the aux
 * matrix; DGELU_BGRAD: dpre = (dout·w) ⊙ gelu'(pre) with Σ_N dpre as its bias gradient
 * (cuBLASLt's GELU is the tanh form, as ops.h's). The aux matrix wants 16-byte alignment
 * and a leading dimension that is a multiple of 8; where cuBLASLt refuses, the GEMM runs
 * plain and the GELU (or its derivative, in place) and the bias gradient by our kernels. */

static bool aux_ok(const void *aux, int64_t ld) { return align_of(aux) == 16 && ld % 8 == 0; }

void vf_cuda_matmul_gelu_fwd(vf_backend *be, void *out, void *pre, const void *inp, const void *w,
                             const void *bias, int64_t N, int64_t C, int64_t OC)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0 || OC <= 0) return;
    vf_cuda_op_begin(c);
    int rc = VF_ENOTFOUND;
    if (C > 0 && aux_ok(pre, OC) && (!bias || align_of(bias) == 16)) {
        const lt_extra xg = {.epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                             .bias = (void *)bias, .aux = pre, .aux_ld = OC};
        rc = lt_gemm(c, 1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f, &xg);
    }
    if (rc == VF_ENOTFOUND) {
        dense_fwd(c, pre, inp, w, bias, N, C, OC);
        vf_cuda_gelu_apply(c, out, pre, N * OC);
    }
    vf_cuda_op_end(c);
}

void vf_cuda_matmul_dgelu_bwd(vf_backend *be, void *dpre, void *dbias_pre, void *dw, void *dbias,
                              const void *dout, const void *inp, const void *w, const void *pre, int64_t N,
                              int64_t C, int64_t OC)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0) return;
    vf_cuda_op_begin(c);
    int rc = VF_ENOTFOUND;
    bool bias_done = !dbias_pre || C <= 0;
    if (C > 0 && OC > 0 && aux_ok(pre, C)) {
        float *gb = vf_cuda_partials(c);
        const bool bgrad = dbias_pre && !c->no_bgrad && (size_t)C * sizeof(float) <= vf_cuda_partials_bytes(c);
        if (bgrad) {
            const lt_extra xg = {.epi = CUBLASLT_EPILOGUE_DGELU_BGRAD, .bias = gb, .bias_f32 = 1, .aux = (void *)pre,
                                 .aux_ld = C};
            rc = lt_gemm(c, 0, 0, C, N, OC, w, C, dout, OC, dpre, C, 0.0f, &xg);
            if (rc == 0) {
                vf_cuda_add_f32_to_bf16(c, dbias_pre, gb, C);
                bias_done = true;
            }
        }
        if (rc == VF_ENOTFOUND) {
            const lt_extra xd = {.epi = CUBLASLT_EPILOGUE_DGELU, .aux = (void *)pre, .aux_ld = C};
            rc = lt_gemm(c, 0, 0, C, N, OC, w, C, dout, OC, dpre, C, 0.0f, &xd);
        }
    }
    if (rc == VF_ENOTFOUND && C > 0) {
        dense_dinp(c, dpre, dout, w, N, C, OC, 0.0f);
        vf_cuda_dgelu_apply(c, dpre, dpre, pre, N * C);
    }
    if (!bias_done) vf_cuda_bias_grad(c, dbias_pre, dpre, N, C);
    if (OC > 0) dense_wgrad(c, dw, dbias, dout, inp, N, C, OC);
    vf_cuda_op_end(c);
}

/* ------------------------------------------------------------------ nb layers, one input
 * The forward is one strided-batched GEMM: the weights (and biases, through
 * BIAS_BATCH_STRIDE) at the layout's stride, the input shared (stride 0), the outputs at
 * theirs. The backward runs layer by layer: the input gradient sums over the layers,
 * which a batch cannot, and the weight gradients accumulate (beta 1) into the parameters'
 * layout, where cuBLASLt's batched GEMM with the shared input at stride 0 gives wrong
 * weight gradients (seen on an H200 with CUDA 13.0: rel 0.69 in test_cuda_ops' batch
 * cases); each layer's GEMM is large at a DiT's sizes, so one batch would save little. Where
 * cuBLASLt takes no batch of these strides, the forward also runs layer by layer. */

void vf_cuda_matmul_batch_fwd(vf_backend *be, void *out, const void *inp, const void *w, const void *bias,
                              int64_t N, int64_t C, int64_t OC, int nb, int64_t wstride, int64_t ostride)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0 || OC <= 0 || nb <= 0) return;
    vf_cuda_op_begin(c);
    int rc = VF_ENOTFOUND;
    if (nb > 1 && C > 0 && (!bias || align_batch(bias, wstride) == 16)) {
        const lt_extra xb = {.epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, .bias = (void *)bias,
                             .batch = nb, .sa = wstride, .sb = 0, .sd = ostride, .sbias = wstride};
        rc = lt_gemm(c, 1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f, &xb);
    }
    if (rc == VF_ENOTFOUND)
        for (int i = 0; i < nb; i++)
            dense_fwd(c, (char *)out + (size_t)(i * ostride) * 2, inp, (const char *)w + (size_t)(i * wstride) * 2,
                      bias ? (const char *)bias + (size_t)(i * wstride) * 2 : NULL, N, C, OC);
    vf_cuda_op_end(c);
}

void vf_cuda_matmul_batch_bwd(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                              const void *inp, const void *w, int64_t N, int64_t C, int64_t OC, int nb,
                              int64_t wstride, int64_t ostride, vf_grad_mode mode)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0 || nb <= 0) return;
    vf_cuda_op_begin(c);
    for (int i = 0; i < nb; i++)
        dense_dinp(c, dinp, (const char *)dout + (size_t)(i * ostride) * 2,
                   (const char *)w + (size_t)(i * wstride) * 2, N, C, OC,
                   i == 0 && mode == VF_GRAD_WRITE ? 0.0f : 1.0f);
    if (OC > 0)
        for (int i = 0; i < nb; i++)
            dense_wgrad(c, dw ? (char *)dw + (size_t)(i * wstride) * 2 : NULL,
                        dbias ? (char *)dbias + (size_t)(i * wstride) * 2 : NULL,
                        (const char *)dout + (size_t)(i * ostride) * 2, inp, N, C, OC);
    vf_cuda_op_end(c);
}
