/* conv3d.c — channel-first 3D convolution on the CPU (the VAE's causal convolutions and
 * patch embeddings), forward and backward.
 *
 * inp (B, C, T, H, W), w (OC, C, KT, KH, KW), bias (OC), out (B, OC, To, Ho, Wo) with
 * To = (T + pt0 + pt1 − KT)/st + 1, Ho = (H + ph0 + ph1 − KH)/sh + 1, Wo likewise; zero
 * padding pt0 in front of time and pt1 behind (causal: pt0 = KT−1, pt1 = 0), ph0 above
 * and ph1 below, pw0 left and pw1 right. Only the padding before an axis moves the taps;
 * the padding after it only sets the output size.
 *
 * Forward and the weight gradient use im2col over chunks of output positions (a
 * CK × np column block, CK = C·KT·KH·KW, np chosen from CK and the output size only)
 * and the f64 gemm engine; the weight gradient sums chunk products into an f64 buffer
 * in a fixed chunk order and rounds once. The input gradient is a gather: every input
 * element sums its (oc, kt, kh, kw) taps in that order in f64, one thread per input row,
 * so no scatter races and no dependence on the thread count.
 */
#include <string.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

typedef struct conv_geom {
    int64_t B, C, T, H, W, OC, To, Ho, Wo, P, CK;
    int KT, KH, KW, st, sh, sw, pt0, ph, pw; /* ph, pw: the padding above and left */
} conv_geom;

static conv_geom geom(int64_t B, int64_t C, int64_t T, int64_t H, int64_t W, int64_t OC, int KT,
                      int KH, int KW, int st, int sh, int sw, int pt0, int pt1, int ph0, int ph1,
                      int pw0, int pw1)
{
    conv_geom g = {.B = B, .C = C, .T = T, .H = H, .W = W, .OC = OC, .KT = KT, .KH = KH,
                   .KW = KW, .st = st, .sh = sh, .sw = sw, .pt0 = pt0, .ph = ph0, .pw = pw0};
    VF_ASSERT(st > 0 && sh > 0 && sw > 0 && KT > 0 && KH > 0 && KW > 0);
    VF_ASSERT(pt0 >= 0 && pt1 >= 0 && ph0 >= 0 && ph1 >= 0 && pw0 >= 0 && pw1 >= 0);
    VF_ASSERT(T + pt0 + pt1 >= KT && H + ph0 + ph1 >= KH && W + pw0 + pw1 >= KW);
    g.To = (T + pt0 + pt1 - KT) / st + 1;
    g.Ho = (H + ph0 + ph1 - KH) / sh + 1;
    g.Wo = (W + pw0 + pw1 - KW) / sw + 1;
    g.P = g.To * g.Ho * g.Wo;
    g.CK = C * KT * KH * KW;
    return g;
}

/* Positions per im2col chunk: about 2 MB of columns, at least 64 positions. Depends on
 * the geometry only (the weight gradient's rounding follows the chunking). */
static int64_t chunk_positions(const conv_geom *g)
{
    int64_t np = (int64_t)(512 * 1024) / (g->CK > 0 ? g->CK : 1);
    if (np < 64) np = 64;
    return np < g->P ? np : g->P;
}

/* col (CK × np) = patches of batch b for output positions [p0, p0+np); rows ck in
 * [r0, r1) only (so the rows can be split across threads). Walks the positions one
 * output row (to, ho) at a time: a row either lies in the time/height padding (zeros)
 * or reads one input row, contiguously when the width stride is 1. */
static void im2col(float *col, const float *inp, const conv_geom *g, int64_t b, int64_t p0,
                   int64_t np, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++) {
        int64_t kw = r % g->KW, kh = (r / g->KW) % g->KH, kt = (r / (g->KW * g->KH)) % g->KT;
        int64_t c = r / ((int64_t)g->KW * g->KH * g->KT);
        const float *x = inp + (b * g->C + c) * g->T * g->H * g->W;
        float *dst = col + r * np;
        /* valid output columns: 0 ≤ wo·sw − pw + kw < W */
        int64_t lo_num = g->pw - kw, hi_num = g->W - 1 + g->pw - kw;
        int64_t wlo = lo_num > 0 ? (lo_num + g->sw - 1) / g->sw : 0;
        int64_t whi = hi_num < 0 ? -1 : hi_num / g->sw; /* inclusive */
        if (whi > g->Wo - 1) whi = g->Wo - 1;
        int64_t p = 0, pos = p0;
        while (p < np) {
            int64_t to = pos / (g->Ho * g->Wo), ho = (pos / g->Wo) % g->Ho, wo0 = pos % g->Wo;
            int64_t n = g->Wo - wo0 < np - p ? g->Wo - wo0 : np - p; /* this output row */
            int64_t t = to * g->st - g->pt0 + kt, h = ho * g->sh - g->ph + kh;
            float *d = dst + p;
            if (t < 0 || t >= g->T || h < 0 || h >= g->H) {
                for (int64_t i = 0; i < n; i++) d[i] = 0.0f;
            } else {
                const float *xr = x + (t * g->H + h) * g->W;
                const int64_t off = kw - g->pw; /* input column of wo: wo·sw + off */
                for (int64_t i = 0; i < n; i++) {
                    int64_t wo = wo0 + i;
                    d[i] = (wo >= wlo && wo <= whi) ? xr[wo * g->sw + off] : 0.0f;
                }
            }
            p += n;
            pos += n;
        }
    }
}

void vf_cpu_conv3d_fwd(float *out, const float *inp, const float *w, const float *bias,
                       int64_t B, int64_t C, int64_t T, int64_t H, int64_t W, int64_t OC,
                       int KT, int KH, int KW, int st, int sh, int sw, int pt0, int pt1,
                       int ph0, int ph1, int pw0, int pw1)
{
    const conv_geom g = geom(B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1);
    if (g.P == 0 || B == 0 || OC == 0) return;
    const int64_t np = chunk_positions(&g), nchunk = (g.P + np - 1) / np;
    const int64_t ntask = B * nchunk;
    const int nth = omp_get_max_threads();
    /* Enough chunks: one per thread with a serial gemm; else chunks in turn, gemm split. */
    const int per_task = ntask >= 2 * nth;
    const double work = (double)B * g.P * g.CK * OC;
#pragma omp parallel if (per_task && work > VF_CPU_PAR_MIN)
    {
        float *col = vf_cpu_scratch((size_t)(g.CK * np) * sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntask; t++) {
            int64_t b = t / nchunk, p0 = (t % nchunk) * np, n = g.P - p0 < np ? g.P - p0 : np;
            im2col(col, inp, &g, b, p0, n, 0, g.CK);
            vf_gemm gm = {.M = OC, .N = n, .K = g.CK, .A = w, .sam = g.CK, .sak = 1, .B = col,
                          .sbk = n, .sbn = 1, .C = out + b * OC * g.P + p0, .ldc = g.P,
                          .bias_m = bias, .alpha = 1.0};
            vf_cpu_gemm(&gm, !per_task);
        }
        vf_cpu_scratch_free(col);
    }
}

/* dinp row (b, c, t, h) of W elements: Σ over (oc, kt, kh, kw) in that order. */
static void dinp_row(float *drow, double *acc, const float *dout, const float *w,
                     const conv_geom *g, int64_t b, int64_t c, int64_t t, int64_t h)
{
    for (int64_t x = 0; x < g->W; x++) acc[x] = drow[x];
    for (int64_t oc = 0; oc < g->OC; oc++)
        for (int kt = 0; kt < g->KT; kt++) {
            int64_t tn = t + g->pt0 - kt;
            if (tn < 0 || tn % g->st || tn / g->st >= g->To) continue;
            for (int kh = 0; kh < g->KH; kh++) {
                int64_t hn = h + g->ph - kh;
                if (hn < 0 || hn % g->sh || hn / g->sh >= g->Ho) continue;
                const float *grow = dout + ((b * g->OC + oc) * g->To + tn / g->st) * g->Ho * g->Wo +
                                    (hn / g->sh) * g->Wo;
                const float *wk = w + (((oc * g->C + c) * g->KT + kt) * g->KH + kh) * g->KW;
                for (int kw = 0; kw < g->KW; kw++) {
                    /* input x = wo·sw − pw + kw must lie in [0, W) */
                    int64_t lo_num = g->pw - kw, hi_num = g->W - 1 + g->pw - kw;
                    if (hi_num < 0) continue;
                    int64_t lo = lo_num > 0 ? (lo_num + g->sw - 1) / g->sw : 0;
                    int64_t hi = hi_num / g->sw;
                    if (hi > g->Wo - 1) hi = g->Wo - 1;
                    double wt = wk[kw];
                    const int64_t off = kw - g->pw;
                    if (g->sw == 1) {
                        for (int64_t wo = lo; wo <= hi; wo++) acc[wo + off] += wt * (double)grow[wo];
                    } else {
                        for (int64_t wo = lo; wo <= hi; wo++)
                            acc[wo * g->sw + off] += wt * (double)grow[wo];
                    }
                }
            }
        }
    for (int64_t x = 0; x < g->W; x++) drow[x] = (float)acc[x];
}

void vf_cpu_conv3d_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int64_t B, int64_t C, int64_t T,
                       int64_t H, int64_t W, int64_t OC, int KT, int KH, int KW, int st,
                       int sh, int sw, int pt0, int pt1, int ph0, int ph1, int pw0, int pw1)
{
    const conv_geom g = geom(B, C, T, H, W, OC, KT, KH, KW, st, sh, sw, pt0, pt1, ph0, ph1, pw0, pw1);
    const double work = (double)B * g.P * g.CK * OC;

    if (dbias) {
#pragma omp parallel for schedule(static) if (B * OC * g.P > VF_CPU_PAR_MIN)
        for (int64_t oc = 0; oc < OC; oc++) {
            double a = 0.0;
            for (int64_t b = 0; b < B; b++) {
                const float *gr = dout + (b * OC + oc) * g.P;
                for (int64_t p = 0; p < g.P; p++) a += gr[p];
            }
            dbias[oc] = (float)((double)dbias[oc] + a);
        }
    }

    if (dw && g.P > 0) {
        const int64_t np = chunk_positions(&g), nchunk = (g.P + np - 1) / np;
        double *dw64 = vf_cpu_scratch((size_t)(OC * g.CK) * sizeof(double));
        float *col = vf_cpu_scratch((size_t)(g.CK * np) * sizeof(float));
        memset(dw64, 0, (size_t)(OC * g.CK) * sizeof(double));
        for (int64_t b = 0; b < B; b++)
            for (int64_t ci = 0; ci < nchunk; ci++) {
                int64_t p0 = ci * np, n = g.P - p0 < np ? g.P - p0 : np;
                const int64_t RB = 16, nrb = (g.CK + RB - 1) / RB;
#pragma omp parallel for schedule(static) if (g.CK * n > VF_CPU_PAR_MIN)
                for (int64_t rb = 0; rb < nrb; rb++)
                    im2col(col, inp, &g, b, p0, n, rb * RB, (rb + 1) * RB < g.CK ? (rb + 1) * RB : g.CK);
                /* dw64 (OC × CK) += dout[b, :, p0..] · colᵀ */
                vf_gemm gm = {.M = OC, .N = g.CK, .K = n, .A = dout + b * OC * g.P + p0,
                              .sam = g.P, .sak = 1, .B = col, .sbk = 1, .sbn = n, .C64 = dw64,
                              .ldc = g.CK, .accumulate = 1, .alpha = 1.0};
                vf_cpu_gemm(&gm, 1);
            }
#pragma omp parallel for schedule(static) if (OC * g.CK > VF_CPU_PAR_MIN)
        for (int64_t i = 0; i < OC * g.CK; i++) dw[i] = (float)((double)dw[i] + dw64[i]);
        vf_cpu_scratch_free(col);
        vf_cpu_scratch_free(dw64);
    }

    if (dinp) {
        const int64_t rows = B * C * T * H;
#pragma omp parallel if (work > VF_CPU_PAR_MIN && rows > 1)
        {
            double *acc = vf_cpu_scratch((size_t)(W > 0 ? W : 1) * sizeof(double));
#pragma omp for schedule(static)
            for (int64_t r = 0; r < rows; r++) {
                int64_t h = r % H, t = (r / H) % T, c = (r / (H * T)) % C, b = r / (H * T * C);
                dinp_row(dinp + r * W, acc, dout, w, &g, b, c, t, h);
            }
            vf_cpu_scratch_free(acc);
        }
    }
}
