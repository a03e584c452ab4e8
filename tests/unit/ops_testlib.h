/* ops_testlib.h — shared checks for the CPU op tests (tests/unit/test_ops_*.c).
 *
 * Each op test writes its own independent f64 reference forward (plain loops) and uses:
 *  - check_fwd: the op's f32 output against the f64 reference, per element
 *    |got − want| ≤ rtol·(|want| + 1e-2·max|want|) (NaN never passes);
 *  - check_grad: the op's analytic backward against central finite differences of
 *    L = Σ r·f(x) computed in f64 on the reference (r a random projection);
 *  - determinism: the op run with 1, 2 and 3 OpenMP threads must give identical bytes.
 *
 * Why 1e-3 for gradients: the differences are taken in f64 with h = 1e-5·max(1,|x|), so
 * their own error is ~1e-9 (truncation h²·f''' plus cancellation eps64·|L|/h); the op
 * stores f32 and accumulates in f64, so its error is a few f32 roundings (~1e-7..1e-6
 * relative), more where a backward formula cancels terms computed from f32-saved
 * statistics (LayerNorm with a large mean, RMSNorm with C = 1, near one-hot attention:
 * up to ~1.5e-4 seen). 1e-3 leaves margin for those and still catches any real mistake
 * (a wrong term, index, scale or sign errs by O(1)). The largest error seen is printed
 * so a drift towards the tolerance shows in the log.
 *
 * Accumulation: check_grad_acc runs the backward twice, once into zeroed buffers and
 * once into buffers preset to random values g0 (of the gradient's own magnitude), and
 * checks both (the second as got − g0).
 */
#ifndef VF_OPS_TESTLIB_H
#define VF_OPS_TESTLIB_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "tests/vf_test.h"

/* ---- deterministic random numbers (splitmix64) */
static uint64_t tl_seed_ = 0x9e3779b97f4a7c15ull;
static inline uint64_t tl_next(void)
{
    uint64_t z = (tl_seed_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double tl_unif(double lo, double hi)
{
    return lo + (hi - lo) * (double)(tl_next() >> 11) * (1.0 / 9007199254740992.0);
}

/* n floats uniform in [lo, hi) (caller frees); values are exact as doubles too */
static inline float *tl_randf(int64_t n, double lo, double hi)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = (float)tl_unif(lo, hi);
    return p;
}
/* x widened to f64 (caller frees). The floats are read through a volatile pointer: with
 * tl_randf and this copy inlined into one caller, GCC 12.2 at -O3 (SLP vectorisation)
 * forwards the doubles tl_randf computed, before their rounding to float, into the copy,
 * so the reference would hold values the f32 data never had; a volatile load takes the
 * stored float from memory at every optimisation level. */
static inline double *tl_tod(const float *x, int64_t n)
{
    double *p = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    const volatile float *vx = x;
    for (int64_t i = 0; i < n; i++) p[i] = vx[i];
    return p;
}
static inline float *tl_zerosf(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static inline double *tl_zerosd(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static inline float *tl_dupf(const float *x, int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (n > 0) memcpy(p, x, sizeof(float) * (size_t)n);
    return p;
}

static inline double tl_maxabs(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Per element |got − want| ≤ rtol·(|want| + 1e-2·max|want|); prints the worst. */
static inline int tl_close(const char *what, const float *got, const double *want, int64_t n,
                           double rtol)
{
    double mx = tl_maxabs(want, n), worst = 0;
    int64_t bad = -1, worst_i = 0;
    for (int64_t i = 0; i < n; i++) {
        double scale = fabs(want[i]) + 1e-2 * mx;
        double e = fabs((double)got[i] - want[i]);
        double rel = scale > 0 ? e / scale : e;
        if (!(e <= rtol * scale) && !(e == 0)) { /* NaN fails here */
            if (bad < 0) bad = i;
        }
        if (!(rel <= worst)) {
            worst = rel;
            worst_i = i;
        }
    }
    if (bad >= 0) {
        fprintf(stderr, "  %s: element %lld: got %.9g want %.12g (rtol %g, max|want| %g)\n", what,
                (long long)bad, (double)got[bad], want[bad], rtol, mx);
        return 0;
    }
    fprintf(stderr, "  %-44s n=%-6lld max err/scale %.2e (at %lld)\n", what, (long long)n, worst,
            (long long)worst_i);
    return 1;
}
#define CHECK_FWD(what, got, want, n, rtol) VF_CHECK(tl_close((what), (got), (want), (n), (rtol)))

/* ---- finite differences */

/* f(ctx, out) evaluates the f64 reference forward into out[nout] from the inputs held
 * in ctx (which the checker perturbs in place through x). */
typedef void (*tl_ref_fn)(void *ctx, double *out);

static inline double tl_proj(const double *r, const double *o, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += r[i] * o[i];
    return s;
}

/* d(Σ r·f)/dx[i] by central differences in f64 */
static inline double tl_fd(tl_ref_fn f, void *ctx, double *x, int64_t i, const double *r,
                           double *out, int64_t nout)
{
    double v = x[i], h = 1e-5 * (fabs(v) > 1 ? fabs(v) : 1);
    x[i] = v + h;
    double xp = x[i];
    f(ctx, out);
    double lp = tl_proj(r, out, nout);
    x[i] = v - h;
    double xm = x[i];
    f(ctx, out);
    double lm = tl_proj(r, out, nout);
    x[i] = v;
    return (lp - lm) / (xp - xm);
}

/* Indices checked: all when n ≤ maxn, else maxn spread over [0, n) (deterministic). */
static inline int64_t tl_pick(int64_t j, int64_t n, int64_t maxn)
{
    return n <= maxn ? j : (int64_t)((double)j * (double)n / (double)maxn + 0.5) % n;
}

/* Compares the analytic gradient got[] (minus g0[] if not NULL) with finite
 * differences for x (n elements; at most maxn of them). */
static inline int tl_grad(const char *what, tl_ref_fn f, void *ctx, double *x, int64_t n,
                          const double *r, int64_t nout, const float *got, const float *g0,
                          int64_t maxn, double rtol)
{
    int64_t m = n < maxn ? n : maxn;
    double *out = malloc(sizeof(double) * (size_t)(nout > 0 ? nout : 1));
    double *fd = malloc(sizeof(double) * (size_t)(m > 0 ? m : 1));
    double *and_ = malloc(sizeof(double) * (size_t)(m > 0 ? m : 1));
    for (int64_t j = 0; j < m; j++) {
        int64_t i = tl_pick(j, n, maxn);
        fd[j] = tl_fd(f, ctx, x, i, r, out, nout);
        and_[j] = g0 ? (double)got[i] - (double)g0[i] : (double)got[i];
    }
    double mx = tl_maxabs(fd, m), worst = 0;
    int ok = 1;
    for (int64_t j = 0; j < m; j++) {
        double scale = fabs(fd[j]) + 1e-2 * mx, e = fabs(and_[j] - fd[j]);
        double rel = scale > 0 ? e / scale : e;
        if (!(e <= rtol * scale) && !(e == 0)) {
            if (ok)
                fprintf(stderr, "  %s: element %lld: analytic %.9g, finite difference %.9g\n",
                        what, (long long)tl_pick(j, n, maxn), and_[j], fd[j]);
            ok = 0;
        }
        if (!(rel <= worst)) worst = rel;
    }
    if (ok)
        fprintf(stderr, "  %-44s n=%-6lld max err/scale %.2e vs f64 FD\n", what, (long long)m,
                worst);
    free(out), free(fd), free(and_);
    return ok;
}
#define CHECK_GRAD(what, f, ctx, x, n, r, nout, got, g0, maxn)                      \
    VF_CHECK(tl_grad((what), (f), (ctx), (x), (n), (r), (nout), (got), (g0), (maxn), 1e-3))

/* Preset for the accumulation run: random values of the magnitude of a (the gradient
 * computed into zeros), so got − g0 keeps the precision of the gradient itself. */
static inline float *tl_preset_like(const float *a, int64_t n)
{
    double mx = 0;
    for (int64_t i = 0; i < n; i++) mx = fabs((double)a[i]) > mx ? fabs((double)a[i]) : mx;
    if (mx == 0) mx = 1;
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = (float)(mx * tl_unif(-1, 1));
    return p;
}

/* ---- thread-count determinism: run(ctx) must initialise and fill the nbuf buffers
 * bufs[i] (bytes[i] each); they must come out identical for 1, 2 and 3 threads. */
typedef void (*tl_run_fn)(void *ctx);
static inline int tl_same_threads(const char *what, tl_run_fn run, void *ctx, int nbuf,
                                  void *const *bufs, const size_t *bytes)
{
    int saved = omp_get_max_threads(), ok = 1;
    void *first[8];
    omp_set_num_threads(1);
    run(ctx);
    for (int i = 0; i < nbuf; i++) {
        first[i] = malloc(bytes[i] ? bytes[i] : 1);
        memcpy(first[i], bufs[i], bytes[i]);
    }
    for (int nt = 2; nt <= 3; nt++) {
        omp_set_num_threads(nt);
        run(ctx);
        for (int i = 0; i < nbuf; i++)
            if (memcmp(first[i], bufs[i], bytes[i]) != 0) {
                fprintf(stderr, "  %s: output %d differs between 1 and %d threads\n", what, i, nt);
                ok = 0;
            }
    }
    omp_set_num_threads(saved);
    for (int i = 0; i < nbuf; i++) free(first[i]);
    if (ok) fprintf(stderr, "  %-44s identical bytes on 1, 2, 3 threads\n", what);
    return ok;
}

#endif
