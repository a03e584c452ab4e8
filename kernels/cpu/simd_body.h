/* simd_body.h — the CPU backend's hot loops, compiled once per ISA by simd.c.
 *
 * Not a normal header: simd.c includes it three times, each time under a different
 * `#pragma GCC target` and with VF_SFX (name suffix), VF_VT / VF_VW (a GCC vector of
 * VF_VW doubles), VF_MR / VF_NR (gemm micro-tile) defined. Everything here is plain C
 * whose per-element operation sequence does not depend on the vector width — no
 * reductions across lanes, no contraction (cpu_internal.h) — so the AVX-512, AVX2 and
 * baseline builds produce the same bits; only their speed differs.
 */

#define VF_CAT2(a, b) a##b
#define VF_CAT(a, b) VF_CAT2(a, b)
#define SFX(name) VF_CAT(name, VF_SFX)

/* C (MR×NR, row-major) = (load ? C : 0) + Σ_k A[k*MR + i] · B[k*NR + j], k ascending */
static void SFX(kern)(int64_t kc, const double *A, const double *B, double *C, int load)
{
    static const double zeros[VF_MR * VF_NR];
    const double *Cin = load ? C : zeros; /* one code path keeps c[][] in registers */
    VF_VT c[VF_MR][VF_NR / VF_VW];
    /* full unrolling (not done at -O2 by itself) is what keeps c[][] in registers */
#pragma GCC unroll 16
    for (int i = 0; i < VF_MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < VF_NR / VF_VW; j++) memcpy(&c[i][j], Cin + i * VF_NR + j * VF_VW, sizeof(VF_VT));
    for (int64_t k = 0; k < kc; k++) {
        VF_VT b[VF_NR / VF_VW];
#pragma GCC unroll 4
        for (int j = 0; j < VF_NR / VF_VW; j++) memcpy(&b[j], B + k * VF_NR + j * VF_VW, sizeof(VF_VT));
#pragma GCC unroll 16
        for (int i = 0; i < VF_MR; i++) {
            double a = A[k * VF_MR + i];
#pragma GCC unroll 4
            for (int j = 0; j < VF_NR / VF_VW; j++) c[i][j] += a * b[j];
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < VF_MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < VF_NR / VF_VW; j++) memcpy(C + i * VF_NR + j * VF_VW, &c[i][j], sizeof(VF_VT));
}

/* Packs `cnt` ≤ R rows (stride srow between rows, sstep along k) of kc elements into a
 * panel dst[k*R + r], zero rows beyond cnt. */
static void SFX(pack)(double *dst, const float *src, int64_t srow, int64_t sstep, int cnt,
                      int R, int64_t kc)
{
    if (srow == 1 || sstep != 1) { /* contiguous writes; rows adjacent or k strided */
        for (int64_t k = 0; k < kc; k++) {
            const float *s = src + k * sstep;
            double *d = dst + k * R;
            if (srow == 1)
                for (int r = 0; r < cnt; r++) d[r] = s[r];
            else
                for (int r = 0; r < cnt; r++) d[r] = s[r * srow];
            for (int r = cnt; r < R; r++) d[r] = 0.0;
        }
        return;
    }
    /* row-major rows (k contiguous): read each row as one stream; the strided writes
     * stay within the panel, which is in L1 */
    for (int r = 0; r < cnt; r++) {
        const float *s = src + r * srow;
        for (int64_t k = 0; k < kc; k++) dst[k * R + r] = s[k];
    }
    for (int r = cnt; r < R; r++)
        for (int64_t k = 0; k < kc; k++) dst[k * R + r] = 0.0;
}

/* One output tile [m0, m0+mc) × [n0, n0+nc) over all K, then the write-back. Cb holds
 * micro-tiles (jp, ip), each MR×NR row-major. */
static void SFX(gemm_tile)(const vf_gemm *g, int64_t m0, int64_t mc, int64_t n0, int64_t nc,
                           double *Ap, double *Bp, double *Cb)
{
    const int mr = VF_MR, nr = VF_NR;
    const int64_t mp = (mc + mr - 1) / mr, np = (nc + nr - 1) / nr;
    if (g->K <= 0) memset(Cb, 0, (size_t)(mp * np * mr * nr) * sizeof(double));
    for (int64_t k0 = 0; k0 < g->K; k0 += VF_GEMM_KC) {
        int64_t kc = g->K - k0 < VF_GEMM_KC ? g->K - k0 : VF_GEMM_KC;
        for (int64_t jp = 0; jp < np; jp++) {
            int cnt = (int)(nc - jp * nr < nr ? nc - jp * nr : nr);
            SFX(pack)(Bp + jp * nr * kc, g->B + k0 * g->sbk + (n0 + jp * nr) * g->sbn, g->sbn,
                      g->sbk, cnt, nr, kc);
        }
        for (int64_t ip = 0; ip < mp; ip++) {
            int cnt = (int)(mc - ip * mr < mr ? mc - ip * mr : mr);
            SFX(pack)(Ap + ip * mr * kc, g->A + (m0 + ip * mr) * g->sam + k0 * g->sak, g->sam,
                      g->sak, cnt, mr, kc);
        }
        for (int64_t jp = 0; jp < np; jp++)
            for (int64_t ip = 0; ip < mp; ip++)
                SFX(kern)(kc, Ap + ip * mr * kc, Bp + jp * nr * kc, Cb + (jp * mp + ip) * mr * nr,
                          k0 > 0);
    }
    const double alpha = g->alpha;
    for (int64_t jp = 0; jp < np; jp++) {
        int64_t j0 = jp * nr, nj = nc - j0 < nr ? nc - j0 : nr;
        for (int64_t ip = 0; ip < mp; ip++) {
            int64_t i0 = ip * mr, ni = mc - i0 < mr ? mc - i0 : mr;
            const double *cb = Cb + (jp * mp + ip) * mr * nr;
            for (int64_t ii = 0; ii < ni; ii++) {
                int64_t m = m0 + i0 + ii, n = n0 + j0;
                const double *src = cb + ii * nr;
                if (g->C64) {
                    double *c = g->C64 + m * g->ldc + n;
                    if (g->accumulate)
                        for (int64_t jj = 0; jj < nj; jj++) c[jj] = c[jj] + alpha * src[jj];
                    else
                        for (int64_t jj = 0; jj < nj; jj++) c[jj] = alpha * src[jj];
                    continue;
                }
                float *c = g->C + m * g->ldc + n;
                if (g->accumulate) {
                    for (int64_t jj = 0; jj < nj; jj++) c[jj] = (float)((double)c[jj] + alpha * src[jj]);
                } else {
                    const double bm = g->bias_m ? (double)g->bias_m[m] : 0.0;
                    if (g->bias_n) {
                        const float *bn = g->bias_n + n;
                        for (int64_t jj = 0; jj < nj; jj++)
                            c[jj] = (float)(((double)bn[jj] + bm) + alpha * src[jj]);
                    } else {
                        for (int64_t jj = 0; jj < nj; jj++) c[jj] = (float)(bm + alpha * src[jj]);
                    }
                }
            }
        }
    }
}

/* ---- softmax rows */

/* e[j] = exp(s[j] − shift) */
static void SFX(exp_f64)(double *e, const float *s, double shift, int64_t n)
{
    for (int64_t j = 0; j < n; j++) e[j] = vf_cpu_exp((double)s[j] - shift);
}

/* p[j] = exp(s[j] − shift) rounded to float (p may be s) */
static void SFX(exp_f32)(float *p, const float *s, double shift, int64_t n)
{
    for (int64_t j = 0; j < n; j++) p[j] = (float)vf_cpu_exp((double)s[j] - shift);
}

/* p[i] = exp(p[i] − shift[i]) rounded to float (the transposed probabilities) */
static void SFX(exp_sub_f32)(float *p, const float *shift, int64_t n)
{
    for (int64_t i = 0; i < n; i++) p[i] = (float)vf_cpu_exp((double)p[i] - (double)shift[i]);
}

/* ---- activations. tanh-GELU written through the logistic function:
 * 0.5·(1 + tanh(u)) = σ(2u) = 1/(1 + e^{−2u}), 1 − tanh²(u) = 4σ(2u)(1 − σ(2u)), which
 * is torch's formula without the cancellation of 1 + tanh(u) for very negative u. */

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_C 0.044715

static void SFX(gelu_fwd)(float *out, const float *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        double s = 1.0 / (1.0 + vf_cpu_exp(-2.0 * GELU_K * (x + GELU_C * x * x * x)));
        out[i] = (float)(x * s);
    }
}

/* GELU' (tanh) at x */
static inline double SFX(gelu_grad)(double x)
{
    double s = 1.0 / (1.0 + vf_cpu_exp(-2.0 * GELU_K * (x + GELU_C * x * x * x)));
    return s + 2.0 * x * s * (1.0 - s) * (GELU_K * (1.0 + 3.0 * GELU_C * x * x));
}

/* SiLU' at x */
static inline double SFX(silu_grad)(double x)
{
    double s = 1.0 / (1.0 + vf_cpu_exp(-x));
    return s * (1.0 + x * (1.0 - s));
}

/* The written form adds the product to +0.0, as the accumulating form did into zeroed
 * memory (a −0 product comes out +0), so writing gives the bits accumulating gave. */
static void SFX(gelu_bwd)(float *dinp, const float *dout, const float *inp, int64_t n, int acc)
{
    if (acc)
        for (int64_t i = 0; i < n; i++)
            dinp[i] = (float)((double)dinp[i] + SFX(gelu_grad)(inp[i]) * (double)dout[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dinp[i] = (float)(0.0 + SFX(gelu_grad)(inp[i]) * (double)dout[i]);
}

/* SiLU x·σ(x), σ(x) = 1/(1 + e^{−x}) (e^{−x} = inf gives σ = 0, no NaN) */
static void SFX(silu_fwd)(float *out, const float *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (float)(x / (1.0 + vf_cpu_exp(-x)));
    }
}

static void SFX(silu_bwd)(float *dinp, const float *dout, const float *inp, int64_t n, int acc)
{
    if (acc)
        for (int64_t i = 0; i < n; i++)
            dinp[i] = (float)((double)dinp[i] + SFX(silu_grad)(inp[i]) * (double)dout[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dinp[i] = (float)(0.0 + SFX(silu_grad)(inp[i]) * (double)dout[i]);
}

/* ---- AdamW (adamw.c has the formula and why): one call per range of a thread's share,
 * grad f32 or bf16 (read exactly as f32), the new weights to f32, bf16 (round to nearest
 * even, NaN kept quiet) or nowhere. Separate loops per dtype pair keep each one straight
 * code the vectoriser takes whole. */

static inline float SFX(adam_one)(const vf_cpu_adam *a, float *master, float *m, float *v, float gf, int64_t i)
{
    double g = (double)gf * a->gsc;
    double mi = a->b1 * (double)m[i] + (1.0 - a->b1) * g;
    double vi = a->b2 * (double)v[i] + (1.0 - a->b2) * g * g;
    float mf = (float)mi, vf = (float)vi;
    double p = (double)master[i] * a->decay;
    p -= a->step * (double)mf / (__builtin_sqrt((double)vf) / a->sbc2 + a->eps);
    m[i] = mf;
    v[i] = vf;
    master[i] = (float)p;
    return (float)p;
}

static inline float SFX(bf16_f32)(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t SFX(f32_bf16)(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t q = (x >> 16) | 0x40u;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static void SFX(adamw)(const vf_cpu_adam *a, float *master, float *m, float *v, const void *grad, vf_dtype gdt,
                       void *wout, vf_dtype wdt, int64_t n)
{
    if (gdt == VF_DTYPE_BF16) {
        const uint16_t *g = grad;
        if (wout && wdt == VF_DTYPE_BF16) {
            uint16_t *w = wout;
            for (int64_t i = 0; i < n; i++) w[i] = SFX(f32_bf16)(SFX(adam_one)(a, master, m, v, SFX(bf16_f32)(g[i]), i));
        } else if (wout) {
            float *w = wout;
            for (int64_t i = 0; i < n; i++) w[i] = SFX(adam_one)(a, master, m, v, SFX(bf16_f32)(g[i]), i);
        } else {
            for (int64_t i = 0; i < n; i++) SFX(adam_one)(a, master, m, v, SFX(bf16_f32)(g[i]), i);
        }
        return;
    }
    const float *g = grad;
    if (wout && wdt == VF_DTYPE_BF16) {
        uint16_t *w = wout;
        for (int64_t i = 0; i < n; i++) w[i] = SFX(f32_bf16)(SFX(adam_one)(a, master, m, v, g[i], i));
    } else if (wout) {
        float *w = wout;
        for (int64_t i = 0; i < n; i++) w[i] = SFX(adam_one)(a, master, m, v, g[i], i);
    } else {
        for (int64_t i = 0; i < n; i++) SFX(adam_one)(a, master, m, v, g[i], i);
    }
}

static const vf_cpu_simd SFX(table) = {
    .name = VF_SIMD_NAME,
    .mr = VF_MR,
    .nr = VF_NR,
    .gemm_tile = SFX(gemm_tile),
    .exp_f64 = SFX(exp_f64),
    .exp_f32 = SFX(exp_f32),
    .exp_sub_f32 = SFX(exp_sub_f32),
    .gelu_fwd = SFX(gelu_fwd),
    .gelu_bwd = SFX(gelu_bwd),
    .silu_fwd = SFX(silu_fwd),
    .silu_bwd = SFX(silu_bwd),
    .adamw = SFX(adamw),
};

#undef SFX
#undef GELU_K
#undef GELU_C
