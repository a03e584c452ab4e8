/* attention.c — non-causal scaled dot-product attention on the CPU, flash-style memory.
 *
 * q (B, Lq, H, D), k/v (B, Lk, H, D), out (B, Lq, H, D), lse (B, H, Lq).
 * Work items are (batch, head, block of BQ queries); a thread holds the scores of one
 * block only (BQ × Lk floats), never Lq × Lk. Heads are strided views of the (B, L, H, D)
 * tensors handed to the f64-accumulating gemm engine, so there are no copies.
 *
 * Softmax: s = scale·q·k (rounded once to f32), lse = max + log Σ exp(s − max) in f64,
 * p = exp(s − lse) with the f32 lse that is saved — the forward uses exactly the
 * probabilities the backward recomputes.
 *
 * Backward (as FlashAttention: probabilities recomputed from lse, Dᵢ = Σ_d dOᵢ·Oᵢ):
 *   dP = dO·Vᵀ, dS = P∘(dP − D), dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = Pᵀ·dO.
 * To keep one owner per output and a fixed summation order without atomics it runs two
 * passes: per query block for dQ, per key block for dK and dV (where each key block sees
 * all Lq queries in one gemm, summed in f64 and rounded once). The scores are computed
 * twice; the products commute exactly, so both passes see the same probabilities.
 * The gradients are written, not accumulated (ops.h): every element of a wanted dq, dk,
 * dv has exactly one owner that stores it once, zeros where no score reaches it.
 */
#include <math.h>
#include <string.h>
#include <omp.h>


#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

#define BQ 64 /* queries per forward / dq work item */
#define BK 64 /* keys per dk/dv work item */

/* S (nq × Lk, ldc Lk) = scale · q[b, i0.., h] · k[b, :, h]ᵀ */
static void scores(float *S, const float *q, const float *k, int64_t b, int64_t h, int64_t i0,
                   int64_t nq, int64_t Lq, int64_t Lk, int64_t H, int64_t D, float scale)
{
    vf_gemm g = {.M = nq, .N = Lk, .K = D, .A = q + ((b * Lq + i0) * H + h) * D, .sam = H * D,
                 .sak = 1, .B = k + (b * Lk * H + h) * D, .sbk = 1, .sbn = H * D, .C = S,
                 .ldc = Lk, .alpha = scale};
    vf_cpu_gemm(&g, 0);
}

void vf_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k,
                          const float *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H,
                          int64_t D, float scale)
{
    const int64_t nqb = (Lq + BQ - 1) / BQ, ntask = B * H * nqb;
    const double work = (double)B * H * Lq * Lk * D;
#pragma omp parallel if (work > VF_CPU_PAR_MIN && ntask > 1)
    {
        const vf_cpu_simd *isa = vf_cpu_simd_get();
        float *S = vf_cpu_scratch((size_t)(BQ * (Lk > 0 ? Lk : 1)) * sizeof(float));
        double *E = vf_cpu_scratch((size_t)(Lk > 0 ? Lk : 1) * sizeof(double));
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntask; t++) {
            int64_t b = t / (H * nqb), h = (t / nqb) % H, i0 = (t % nqb) * BQ;
            int64_t nq = Lq - i0 < BQ ? Lq - i0 : BQ;
            float *o = out + ((b * Lq + i0) * H + h) * D;
            if (Lk == 0) { /* softmax over nothing: zero output, lse = -inf */
                for (int64_t i = 0; i < nq; i++) {
                    memset(o + i * H * D, 0, (size_t)D * sizeof(float));
                    if (lse) lse[(b * H + h) * Lq + i0 + i] = -INFINITY;
                }
                continue;
            }
            scores(S, q, k, b, h, i0, nq, Lq, Lk, H, D, scale);
            for (int64_t i = 0; i < nq; i++) {
                float *s = S + i * Lk;
                float mx = s[0];
                for (int64_t j = 1; j < Lk; j++) mx = s[j] > mx ? s[j] : mx;
                isa->exp_f64(E, s, mx, Lk);
                double sum = 0.0;
                for (int64_t j = 0; j < Lk; j++) sum += E[j];
                float l = (float)((double)mx + log(sum));
                isa->exp_f32(s, s, l, Lk);
                if (lse) lse[(b * H + h) * Lq + i0 + i] = l;
            }
            /* o (nq × D, ldc H·D) = P · v[b, :, h] */
            vf_gemm g = {.M = nq, .N = D, .K = Lk, .A = S, .sam = Lk, .sak = 1,
                         .B = v + (b * Lk * H + h) * D, .sbk = H * D, .sbn = 1, .C = o,
                         .ldc = H * D, .alpha = 1.0};
            vf_cpu_gemm(&g, 0);
        }
        vf_cpu_scratch_free(S);
        vf_cpu_scratch_free(E);
    }
}

/* dS (nq × Lk) from P (in S) and dP (in G): G ← P∘(dP − Dᵢ), row i uses Dv[i]. */
static void dsoftmax(float *G, const float *P, const double *Dv, int64_t nq, int64_t Lk)
{
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < Lk; j++)
            G[i * Lk + j] = (float)((double)P[i * Lk + j] * ((double)G[i * Lk + j] - Dv[i]));
}

void vf_cpu_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                          const float *k, const float *v, const float *out, const float *lse,
                          int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D, float scale)
{
    if (Lq == 0 || Lk == 0) { /* no scores: nothing flows back, every gradient is zero */
        if (dq) memset(dq, 0, sizeof(float) * (size_t)(B * Lq * H * D));
        if (dk) memset(dk, 0, sizeof(float) * (size_t)(B * Lk * H * D));
        if (dv) memset(dv, 0, sizeof(float) * (size_t)(B * Lk * H * D));
        return;
    }
    const double work = (double)B * H * Lq * Lk * D;
    const int64_t HD = H * D;

    /* Dᵢ = Σ_d dO·O per (b, h, i), f64 */
    double *Dv = vf_cpu_scratch((size_t)(B * H * Lq) * sizeof(double));
#pragma omp parallel for collapse(2) schedule(static) if (B * H * Lq * D > VF_CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Lq; i++) {
                const float *g = dout + ((b * Lq + i) * H + h) * D, *o = out + ((b * Lq + i) * H + h) * D;
                double a = 0.0;
                for (int64_t d = 0; d < D; d++) a += (double)g[d] * (double)o[d];
                Dv[(b * H + h) * Lq + i] = a;
            }

    if (dq) {
        const int64_t nqb = (Lq + BQ - 1) / BQ, ntask = B * H * nqb;
#pragma omp parallel if (work > VF_CPU_PAR_MIN && ntask > 1)
        {
            const vf_cpu_simd *isa = vf_cpu_simd_get();
            float *S = vf_cpu_scratch((size_t)(BQ * Lk) * sizeof(float));
            float *G = vf_cpu_scratch((size_t)(BQ * Lk) * sizeof(float));
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < ntask; t++) {
                int64_t b = t / (H * nqb), h = (t / nqb) % H, i0 = (t % nqb) * BQ;
                int64_t nq = Lq - i0 < BQ ? Lq - i0 : BQ;
                const float *l = lse + (b * H + h) * Lq + i0;
                scores(S, q, k, b, h, i0, nq, Lq, Lk, H, D, scale);
                for (int64_t i = 0; i < nq; i++) isa->exp_f32(S + i * Lk, S + i * Lk, l[i], Lk);
                /* G = dO · vᵀ */
                vf_gemm gp = {.M = nq, .N = Lk, .K = D, .A = dout + ((b * Lq + i0) * H + h) * D,
                              .sam = HD, .sak = 1, .B = v + (b * Lk * H + h) * D, .sbk = 1,
                              .sbn = HD, .C = G, .ldc = Lk, .alpha = 1.0};
                vf_cpu_gemm(&gp, 0);
                dsoftmax(G, S, Dv + (b * H + h) * Lq + i0, nq, Lk);
                /* dq = scale · dS · k */
                vf_gemm gq = {.M = nq, .N = D, .K = Lk, .A = G, .sam = Lk, .sak = 1,
                              .B = k + (b * Lk * H + h) * D, .sbk = HD, .sbn = 1,
                              .C = dq + ((b * Lq + i0) * H + h) * D, .ldc = HD, .alpha = scale};
                vf_cpu_gemm(&gq, 0);
            }
            vf_cpu_scratch_free(S);
            vf_cpu_scratch_free(G);
        }
    }

    if (dk || dv) {
        const int64_t nkb = (Lk + BK - 1) / BK, ntask = B * H * nkb;
#pragma omp parallel if (work > VF_CPU_PAR_MIN && ntask > 1)
        {
            const vf_cpu_simd *isa = vf_cpu_simd_get();
            float *S = vf_cpu_scratch((size_t)(BK * Lq) * sizeof(float));
            float *G = vf_cpu_scratch((size_t)(BK * Lq) * sizeof(float));
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < ntask; t++) {
                int64_t b = t / (H * nkb), h = (t / nkb) % H, j0 = (t % nkb) * BK;
                int64_t nk = Lk - j0 < BK ? Lk - j0 : BK;
                const float *l = lse + (b * H + h) * Lq;
                const float *kb = k + ((b * Lk + j0) * H + h) * D;
                const float *vb = v + ((b * Lk + j0) * H + h) * D;
                const float *qh = q + (b * Lq * H + h) * D, *gh = dout + (b * Lq * H + h) * D;
                /* Sᵀ (nk × Lq) = scale · k_blk · qᵀ, then Pᵀ */
                vf_gemm gs = {.M = nk, .N = Lq, .K = D, .A = kb, .sam = HD, .sak = 1, .B = qh,
                              .sbk = 1, .sbn = HD, .C = S, .ldc = Lq, .alpha = scale};
                vf_cpu_gemm(&gs, 0);
                for (int64_t j = 0; j < nk; j++) isa->exp_sub_f32(S + j * Lq, l, Lq);
                if (dv) { /* dv_blk = Pᵀ · dO */
                    vf_gemm g = {.M = nk, .N = D, .K = Lq, .A = S, .sam = Lq, .sak = 1, .B = gh,
                                 .sbk = HD, .sbn = 1, .C = dv + ((b * Lk + j0) * H + h) * D,
                                 .ldc = HD, .alpha = 1.0};
                    vf_cpu_gemm(&g, 0);
                }
                if (!dk) continue;
                /* dPᵀ (nk × Lq) = v_blk · dOᵀ; dSᵀ = Pᵀ∘(dPᵀ − Dᵢ) */
                vf_gemm gp = {.M = nk, .N = Lq, .K = D, .A = vb, .sam = HD, .sak = 1, .B = gh,
                              .sbk = 1, .sbn = HD, .C = G, .ldc = Lq, .alpha = 1.0};
                vf_cpu_gemm(&gp, 0);
                const double *Dh = Dv + (b * H + h) * Lq;
                for (int64_t j = 0; j < nk; j++)
                    for (int64_t i = 0; i < Lq; i++)
                        G[j * Lq + i] =
                            (float)((double)S[j * Lq + i] * ((double)G[j * Lq + i] - Dh[i]));
                /* dk_blk = scale · dSᵀ · q */
                vf_gemm gk = {.M = nk, .N = D, .K = Lq, .A = G, .sam = Lq, .sak = 1, .B = qh,
                              .sbk = HD, .sbn = 1, .C = dk + ((b * Lk + j0) * H + h) * D,
                              .ldc = HD, .alpha = scale};
                vf_cpu_gemm(&gk, 0);
            }
            vf_cpu_scratch_free(S);
            vf_cpu_scratch_free(G);
        }
    }
    vf_cpu_scratch_free(Dv);
}
