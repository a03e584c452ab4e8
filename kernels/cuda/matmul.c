/* matmul.c — the dense layer on CUDA through cuBLASLt: matmul_fwd with the bias add
 * fused as the GEMM's epilogue, matmul_bwd with dinp and dW accumulated in place
 * (beta = 1, as ops.h's += rule wants) and the bias gradient produced by the dW GEMM's
 * BGRADB epilogue where cuBLASLt offers it for the shape (else by our fixed-order
 * column-sum kernel, matmul.cu). bf16 operands, f32 compute and scale.
 *
 * Row-major to cuBLAS's column-major: a row-major (R, C) matrix is a column-major
 * (C x R) one with the same leading dimension, so
 *   out (N, OC) = inp·wᵀ      ->  outᶜ (OC x N)  = wᶜᵀ (OC x C) · inpᶜ (C x N)
 *   dinp (N, C) += dout·w     ->  dinpᶜ (C x N) += wᶜ (C x OC) · doutᶜ (OC x N)
 *   dw (OC, C) += doutᵀ·inp   ->  dwᶜ (C x OC)  += inpᶜ (C x N) · doutᶜᵀ (N x OC)
 * and dbias = Σ_N dout is the reduction of op(B) = doutᶜᵀ over the GEMM's k = N, what
 * BGRADB computes (into an f32 scratch vector, then added to the bf16 dbias).
 *
 * Plans (descriptor, layouts, the heuristic's algorithm) are cached per shape and per
 * operand alignment: pointers into a flat parameter vector may be only 2-byte aligned,
 * and cuBLASLt's fastest kernels need 16, so alignment is part of the key.
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

struct vf_lt_plan {
    /* key */
    int ta, tb, epi, bias_f32, d_f32;
    uint64_t m, n, k;
    int64_t lda, ldb, ldd;
    int al_a, al_b, al_d;
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

/* Builds the plan for key k (p already holds the key). Sets p->ok. */
static void plan_build(vf_cuda_ctx *c, vf_lt_plan *p)
{
    cublasLtMatmulPreference_t pref = NULL;
    cublasOperation_t oa = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)p->epi;
    p->ok = 0;
    LT(lt.cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (p->bias_f32) {
            cudaDataType_t bt = CUDA_R_32F;
            LT(lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        }
    }
    LT(lt.cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, p->ta ? p->k : p->m, p->ta ? p->m : p->k, p->lda));
    LT(lt.cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, p->tb ? p->n : p->k, p->tb ? p->k : p->n, p->ldb));
    LT(lt.cublasLtMatrixLayoutCreate(&p->ld, p->d_f32 ? CUDA_R_32F : CUDA_R_16BF, p->m, p->n, p->ldd));
    LT(lt.cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = VF_CUDA_LT_WS_BYTES;
    uint32_t aa = (uint32_t)p->al_a, ab = (uint32_t)p->al_b, ad = (uint32_t)p->al_d;
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

static vf_lt_plan *plan_get(vf_cuda_ctx *c, const vf_lt_plan *key)
{
    for (int i = 0; i < c->nplans; i++) {
        vf_lt_plan *p = &c->plans[i];
        if (p->ta == key->ta && p->tb == key->tb && p->epi == key->epi && p->bias_f32 == key->bias_f32 &&
            p->d_f32 == key->d_f32 &&
            p->m == key->m && p->n == key->n && p->k == key->k && p->lda == key->lda && p->ldb == key->ldb &&
            p->ldd == key->ldd && p->al_a == key->al_a && p->al_b == key->al_b && p->al_d == key->al_d)
            return p;
    }
    if (!c->plans) {
        c->plans = calloc(VF_CUDA_PLAN_CACHE, sizeof *c->plans);
        if (!c->plans) return NULL;
    }
    if (c->nplans == VF_CUDA_PLAN_CACHE) vf_cuda_lt_free(c); /* a model has a few dozen shapes */
    if (!c->plans && !(c->plans = calloc(VF_CUDA_PLAN_CACHE, sizeof *c->plans))) return NULL;
    vf_lt_plan *p = &c->plans[c->nplans++];
    memset(p, 0, sizeof *p);
    p->ta = key->ta, p->tb = key->tb, p->epi = key->epi, p->bias_f32 = key->bias_f32, p->d_f32 = key->d_f32;
    p->m = key->m, p->n = key->n, p->k = key->k, p->lda = key->lda, p->ldb = key->ldb, p->ldd = key->ldd;
    p->al_a = key->al_a, p->al_b = key->al_b, p->al_d = key->al_d;
    plan_build(c, p);
    return p;
}

/* D (m x n, col-major, ldd; f32 where d_f32, else bf16) = alpha·op(A)·op(B) + beta·D,
 * with an optional epilogue. Returns 0, or VF_ENOTFOUND when cuBLASLt has no algorithm
 * for this combination (only asked with an epilogue, where the caller has a fallback),
 * or VF_ECUDA (noted). */
static int lt_gemm_ex(vf_cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const void *A, int64_t lda, const void *B, int64_t ldb, void *D, int64_t ldd, int d_f32,
                      float beta, cublasLtEpilogue_t epi, void *bias, int bias_f32)
{
    vf_lt_plan key = {.ta = ta, .tb = tb, .epi = (int)epi, .bias_f32 = bias_f32, .d_f32 = d_f32, .m = (uint64_t)m,
                      .n = (uint64_t)n, .k = (uint64_t)k, .lda = lda, .ldb = ldb, .ldd = ldd,
                      .al_a = align_of(A), .al_b = align_of(B), .al_d = align_of(D)};
    vf_lt_plan *p = plan_get(c, &key);
    if (!p) {
        vf_cuda_note_msg(c, __FILE__, __LINE__, "cuBLASLt plan cache: out of host memory");
        return VF_ECUDA;
    }
    if (!p->ok) {
        if (epi != CUBLASLT_EPILOGUE_DEFAULT) return VF_ENOTFOUND;
        vf_cuda_note_msg(c, __FILE__, __LINE__,
                         "cuBLASLt has no bf16 algorithm for m=%lld n=%lld k=%lld (transa %d transb %d, "
                         "alignments %d/%d/%d)",
                         (long long)m, (long long)n, (long long)k, ta, tb, key.al_a, key.al_b, key.al_d);
        return VF_ECUDA;
    }
    if (epi != CUBLASLT_EPILOGUE_DEFAULT &&
        vf_cuda_note_lt(c, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                        "lt.cublasLtMatmulDescSetAttribute(BIAS_POINTER)", __FILE__, __LINE__))
        return VF_ECUDA;
    return vf_cuda_note_lt(c,
                           lt.cublasLtMatmul(c->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->ld, D, p->ld,
                                          &p->algo, c->lt_ws, VF_CUDA_LT_WS_BYTES, c->stream),
                           "cublasLtMatmul", __FILE__, __LINE__);
}

/* the dense layer's GEMMs: bf16 D, alpha 1 */
static int lt_gemm(vf_cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A,
                   int64_t lda, const void *B, int64_t ldb, void *D, int64_t ldd, float beta,
                   cublasLtEpilogue_t epi, void *bias, int bias_f32)
{
    return lt_gemm_ex(c, ta, tb, m, n, k, 1.0f, A, lda, B, ldb, D, ldd, 0, beta, epi, bias, bias_f32);
}

int vf_cuda_lt_gemm(vf_cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                    int64_t lda, const void *B, int64_t ldb, void *D, int64_t ldd, int d_f32)
{
    return lt_gemm_ex(c, ta, tb, m, n, k, alpha, A, lda, B, ldb, D, ldd, d_f32, 0.0f, CUBLASLT_EPILOGUE_DEFAULT,
                      NULL, 0);
}

void vf_cuda_matmul_fwd(vf_backend *be, void *out, const void *inp, const void *w, const void *bias,
                        int64_t N, int64_t C, int64_t OC)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0 || OC <= 0) return;
    vf_cuda_op_begin(c);
    if (C <= 0) { /* an empty sum: the bias alone (or zeros) */
        VF_CUDA_NOTE(c, cudaMemsetAsync(out, 0, (size_t)(N * OC) * 2, c->stream));
        if (bias) vf_cuda_add_bias_rows(c, out, bias, N, OC);
        vf_cuda_op_end(c);
        return;
    }
    /* the fused bias wants an aligned vector: a bias at an odd offset of the flat
     * parameter vector is added by the row kernel instead */
    const bool fuse = bias && align_of(bias) == 16;
    int rc = lt_gemm(c, 1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f,
                     fuse ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, (void *)bias, 0);
    if (rc == 0 && bias && !fuse) vf_cuda_add_bias_rows(c, out, bias, N, OC);
    /* no fused bias for this shape: plain GEMM, then the add */
    if (rc == VF_ENOTFOUND &&
        lt_gemm(c, 1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0) == 0)
        vf_cuda_add_bias_rows(c, out, bias, N, OC);
    vf_cuda_op_end(c);
}

void vf_cuda_matmul_bwd(vf_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, int64_t N, int64_t C, int64_t OC)
{
    vf_cuda_ctx *c = vf_cuda_ctx_of(be);
    if (N <= 0 || OC <= 0) return;
    vf_cuda_op_begin(c);
    if (dinp && C > 0) lt_gemm(c, 0, 0, C, N, OC, w, C, dout, OC, dinp, C, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0);
    bool bias_done = false;
    if (dw && C > 0) {
        float *gb = NULL;
        if (dbias && !c->no_bgrad && (size_t)OC * sizeof(float) <= vf_cuda_partials_bytes(c)) {
            gb = vf_cuda_partials(c);
            int rc = lt_gemm(c, 0, 1, C, OC, N, inp, C, dout, OC, dw, C, 1.0f, CUBLASLT_EPILOGUE_BGRADB, gb, 1);
            if (rc == 0) {
                vf_cuda_add_f32_to_bf16(c, dbias, gb, OC);
                bias_done = true;
            } else if (rc != VF_ENOTFOUND) {
                vf_cuda_op_end(c);
                return;
            }
        }
        if (!bias_done) lt_gemm(c, 0, 1, C, OC, N, inp, C, dout, OC, dw, C, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0);
    }
    if (dbias && !bias_done) vf_cuda_bias_grad(c, dbias, dout, N, OC);
    vf_cuda_op_end(c);
}
