/* test_ops_adamw.c — CPU AdamW step and gradient sum of squares.
 *
 * AdamW is checked over several steps against an f64 transcription of
 * torch.optim.AdamW's update and, where /usr/bin/python3 has torch, against
 * torch.optim.AdamW itself on the same numbers (the semantic check: decoupled decay,
 * bias correction, eps outside the sqrt). sumsq against an f64 sum. Both for identical
 * bytes on 1/2/3 threads.
 *
 * The vectorised kernel against a plain scalar transcription of its per-element double
 * sequence, bit for bit, in every dtype form: f32 or bf16 gradients (the host shard of
 * bf16 partitions, offload), new weights to f32, bf16 or nowhere; bf16 output is the
 * runtime's round-to-nearest-even of the f32 weight, NaN and infinities included. The
 * bf16 forms on any thread count give the same bytes too, and the bf16 axpy and sumsq
 * against scalar transcriptions. */
#include <unistd.h>

#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

typedef struct hp {
    float lr, b1, b2, eps, wd, gs;
} hp;

/* steps t = 1..nsteps of the f64 reference (no intermediate rounding at all) */
static void adamw_ref(double *p, double *m, double *v, const float *g, int64_t n, hp h, int nsteps)
{
    for (int t = 1; t <= nsteps; t++)
        for (int64_t i = 0; i < n; i++) {
            double gi = (double)g[(t - 1) * n + i] * h.gs;
            p[i] *= 1.0 - (double)h.lr * h.wd;
            m[i] = h.b1 * m[i] + (1.0 - h.b1) * gi;
            v[i] = h.b2 * v[i] + (1.0 - h.b2) * gi * gi;
            double bc1 = 1.0 - pow(h.b1, t), bc2 = 1.0 - pow(h.b2, t);
            p[i] -= (double)h.lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + h.eps);
        }
}

/* torch.optim.AdamW on the same data; returns 1 and fills out[n] if torch ran */
static int adamw_torch(const float *p0, const float *g, int64_t n, hp h, int nsteps, float *out)
{
    const char *py = getenv("VFLOW_PY");
    if (!py || !*py) py = "/usr/bin/python3";
    if (access(py, X_OK) != 0) return 0;
    char in_path[] = "/tmp/vf_adamw_XXXXXX";
    int fd = mkstemp(in_path);
    if (fd < 0) return 0;
    FILE *f = fdopen(fd, "w");
    fprintf(f, "%lld %d %a %a %a %a %a %a\n", (long long)n, nsteps, h.lr, h.b1, h.b2, h.eps, h.wd,
            h.gs);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%a\n", p0[i]);
    for (int64_t i = 0; i < n * nsteps; i++) fprintf(f, "%a\n", g[i]);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s -c '\n"
             "import sys\n"
             "try:\n"
             "    import torch\n"
             "except ImportError:\n"
             "    sys.exit(3)\n"
             "t = open(sys.argv[1]).read().split()\n"
             "n, k = int(t[0]), int(t[1])\n"
             "lr, b1, b2, eps, wd, gs = [float.fromhex(x) for x in t[2:8]]\n"
             "v = [float.fromhex(x) for x in t[8:]]\n"
             "p = torch.nn.Parameter(torch.tensor(v[:n], dtype=torch.float32))\n"
             "opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd,"
             " foreach=False)\n"
             "for s in range(k):\n"
             "    p.grad = torch.tensor(v[n + s * n:n + (s + 1) * n], dtype=torch.float32) * gs\n"
             "    opt.step()\n"
             "print(\"\\n\".join(x.hex() for x in p.detach().double().tolist()))\n"
             "' %s",
             py, in_path);
    FILE *pp = popen(cmd, "r");
    int got = 0;
    if (pp) {
        double d;
        char line[128];
        while (got < n && fgets(line, sizeof line, pp)) {
            d = strtod(line, NULL);
            out[got++] = (float)d;
        }
        int rc = pclose(pp);
        if (rc != 0) got = 0;
    }
    unlink(in_path);
    return got == n;
}

/* Parameters after the steps: each step rounds p to f32 (half an ulp, ~6e-8·|p|), so
 * allow that per step plus 1e-4 of the motion p − p0 the reference made (a semantic slip
 * — decay, bias correction, eps placement — errs by a good part of the motion). */
static int params_close(const char *what, const float *p, const double *want, const float *p0,
                        int64_t n, int nsteps)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double motion = fabs(want[i] - (double)p0[i]);
        double allow = 1.2e-7 * nsteps * fabs(want[i]) + 1e-4 * motion;
        double e = fabs((double)p[i] - want[i]);
        if (!(e <= allow)) {
            fprintf(stderr, "  %s: element %lld: got %.9g want %.12g (motion %.3g)\n", what,
                    (long long)i, (double)p[i], want[i], motion);
            return 0;
        }
        if (e / allow > worst) worst = e / allow;
    }
    fprintf(stderr, "  %-44s n=%-6lld max err/allowed %.2f\n", what, (long long)n, worst);
    return 1;
}

static void check_adamw(int64_t n, hp h, int nsteps, int with_torch)
{
    char what[96];
    float *p = tl_randf(n, -1, 1), *g = tl_randf(n * nsteps, -1, 1);
    float *p0 = tl_dupf(p, n), *m = tl_zerosf(n), *v = tl_zerosf(n), *wout = tl_zerosf(n);
    double *pr = tl_tod(p, n), *mr = tl_zerosd(n), *vr = tl_zerosd(n);
    for (int t = 1; t <= nsteps; t++)
        vf_cpu_adamw(p, m, v, g + (t - 1) * n, wout, n, h.lr, h.b1, h.b2, h.eps, h.wd, h.gs, t);
    adamw_ref(pr, mr, vr, g, n, h, nsteps);
    VF_CHECK(memcmp(p, wout, sizeof(float) * n) == 0);
    snprintf(what, sizeof what, "adamw %d steps n=%lld wd=%g gs=%g", nsteps, (long long)n, h.wd,
             h.gs);
    VF_CHECK(params_close(what, p, pr, p0, n, nsteps));
    CHECK_FWD("  first moment", m, mr, n, 1e-5);
    CHECK_FWD("  second moment", v, vr, n, 1e-5);
    float *pt = tl_zerosf(n);
    if (with_torch && adamw_torch(p0, g, n, h, nsteps, pt)) {
        double *dt = tl_tod(pt, n);
        VF_CHECK(params_close("  vs torch.optim.AdamW", p, dt, p0, n, nsteps));
        free(dt);
    } else if (with_torch) {
        fprintf(stderr, "  (python3 with torch not available: torch comparison skipped)\n");
    }
    /* weights_out NULL is fine and changes nothing else */
    float *p2 = tl_dupf(p0, n), *m2 = tl_zerosf(n), *v2 = tl_zerosf(n);
    for (int t = 1; t <= nsteps; t++)
        vf_cpu_adamw(p2, m2, v2, g + (t - 1) * n, NULL, n, h.lr, h.b1, h.b2, h.eps, h.wd, h.gs, t);
    VF_CHECK(memcmp(p2, p, sizeof(float) * n) == 0);
    free(p), free(g), free(p0), free(m), free(v), free(wout), free(pr), free(mr), free(vr);
    free(pt), free(p2), free(m2), free(v2);
}

VF_TEST(adamw_steps)
{
    check_adamw(1, (hp){1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f}, 1, 0);
    check_adamw(257, (hp){1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f}, 3, 0);
    check_adamw(100, (hp){3e-2f, 0.8f, 0.95f, 1e-6f, 0.01f, 0.25f}, 5, 1); /* clipped grads; torch */
}

VF_TEST(sumsq)
{
    int64_t ns[] = {0, 1, 255, 256, 257, 100003};
    for (int k = 0; k < 6; k++) {
        int64_t n = ns[k];
        float *g = tl_randf(n, -3, 3);
        double want = 0;
        for (int64_t i = 0; i < n; i++) want += (double)g[i] * (double)g[i];
        double got = vf_cpu_sumsq(g, n);
        VF_CHECK_MSG(fabs(got - want) <= 1e-12 * want, "n=%lld got %.17g want %.17g", (long long)n,
                     got, want);
        free(g);
    }
}

typedef struct orun {
    int64_t n;
    float *p0, *g, *p, *m, *v, *w;
    double ss;
} orun;

static void o_run(void *vctx)
{
    orun *e = vctx;
    memcpy(e->p, e->p0, sizeof(float) * e->n);
    memset(e->m, 0, sizeof(float) * e->n);
    memset(e->v, 0, sizeof(float) * e->n);
    for (int t = 1; t <= 2; t++)
        vf_cpu_adamw(e->p, e->m, e->v, e->g, e->w, e->n, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.05f, 0.7f, t);
    e->ss = vf_cpu_sumsq(e->g, e->n);
}

VF_TEST(adamw_sumsq_same_bits_any_thread_count)
{
    orun e = {.n = 300007};
    e.p0 = tl_randf(e.n, -1, 1), e.g = tl_randf(e.n, -1, 1), e.p = tl_zerosf(e.n);
    e.m = tl_zerosf(e.n), e.v = tl_zerosf(e.n), e.w = tl_zerosf(e.n);
    void *bufs[] = {e.p, e.m, e.v, e.w, &e.ss};
    size_t b = sizeof(float) * e.n;
    size_t bytes[] = {b, b, b, b, sizeof(double)};
    VF_CHECK(tl_same_threads("adamw 2 steps, sumsq", o_run, &e, 5, bufs, bytes));
    free(e.p0), free(e.g), free(e.p), free(e.m), free(e.v), free(e.w);
}

/* The kernel's sequence for one element, written out plainly (no simd, no threads) */
static float adam_scalar(float *p, float *m, float *v, float g, hp h, int64_t t)
{
    double b1 = h.b1, b2 = h.b2;
    double step = (double)h.lr / (1.0 - pow(b1, (double)t)), sbc2 = sqrt(1.0 - pow(b2, (double)t));
    double gi = (double)g * (double)h.gs;
    float mf = (float)(b1 * (double)*m + (1.0 - b1) * gi), vf = (float)(b2 * (double)*v + (1.0 - b2) * gi * gi);
    double q = (double)*p * (1.0 - (double)h.lr * (double)h.wd);
    q -= step * (double)mf / (sqrt((double)vf) / sbc2 + (double)h.eps);
    *m = mf, *v = vf, *p = (float)q;
    return *p;
}

static uint16_t *to_bf16(const float *x, int64_t n)
{
    uint16_t *o = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) o[i] = vf_f32_to_bf16(x[i]);
    return o;
}

/* grad dtype gdt, output dtype wdt (wout NULL when nowout) over nsteps, against the scalar */
static int check_adamw_dt(int64_t n, hp h, int nsteps, vf_dtype gdt, vf_dtype wdt, int nowout)
{
    float *p = tl_randf(n, -1, 1), *g = tl_randf(n * nsteps, -2, 2);
    /* a few special values ride along: huge gradients make inf/NaN weights to round */
    if (n > 10) g[3] = 3e38f, g[7] = -INFINITY, p[5] = 3.3895e38f;
    float *pr = tl_dupf(p, n), *m = tl_zerosf(n), *v = tl_zerosf(n), *mr = tl_zerosf(n), *vr = tl_zerosf(n);
    uint16_t *gb = to_bf16(g, n * nsteps);
    size_t ws = wdt == VF_DTYPE_BF16 ? 2 : 4;
    void *w = calloc((size_t)n, ws), *wr = calloc((size_t)n, ws);
    for (int t = 1; t <= nsteps; t++) {
        const void *gt = gdt == VF_DTYPE_BF16 ? (const void *)(gb + (t - 1) * n) : (const void *)(g + (t - 1) * n);
        vf_cpu_adamw_dt(p, m, v, gt, gdt, nowout ? NULL : w, wdt, n, h.lr, h.b1, h.b2, h.eps, h.wd, h.gs, t);
        for (int64_t i = 0; i < n; i++) {
            float gi = gdt == VF_DTYPE_BF16 ? vf_bf16_to_f32(gb[(t - 1) * n + i]) : g[(t - 1) * n + i];
            float q = adam_scalar(pr + i, mr + i, vr + i, gi, h, t);
            if (wdt == VF_DTYPE_BF16) ((uint16_t *)wr)[i] = vf_f32_to_bf16(q);
            else ((float *)wr)[i] = q;
        }
    }
    int ok = !memcmp(p, pr, sizeof(float) * n) && !memcmp(m, mr, sizeof(float) * n) &&
             !memcmp(v, vr, sizeof(float) * n) && (nowout || !memcmp(w, wr, ws * (size_t)n));
    fprintf(stderr, "  adamw grad %s -> weights %s, n=%lld, %d steps: %s\n", vf_dtype_name(gdt),
            nowout ? "none" : vf_dtype_name(wdt), (long long)n, nsteps, ok ? "same bits as the scalar" : "DIFFERS");
    free(p), free(g), free(pr), free(m), free(v), free(mr), free(vr), free(gb), free(w), free(wr);
    return ok;
}

VF_TEST(adamw_every_dtype_form_same_bits_as_scalar)
{
    hp h = {3e-2f, 0.8f, 0.95f, 1e-6f, 0.01f, 0.25f};
    vf_dtype dts[] = {VF_DTYPE_F32, VF_DTYPE_BF16};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int nw = 0; nw < 2; nw++) {
                VF_CHECK(check_adamw_dt(20011, h, 3, dts[a], dts[b], nw));
                VF_CHECK(check_adamw_dt(5, h, 2, dts[a], dts[b], nw));
            }
}

VF_TEST(bf16_sumsq_and_axpy)
{
    int64_t n = 100003;
    float *g = tl_randf(n, -3, 3), *y = tl_randf(n, -3, 3);
    uint16_t *gb = to_bf16(g, n), *yb = to_bf16(y, n), *yr = to_bf16(y, n);
    /* sumsq: the same 256 blocks as the f32 form, on the widened values */
    float *gw = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) gw[i] = vf_bf16_to_f32(gb[i]);
    double a = vf_cpu_sumsq_dt(gb, VF_DTYPE_BF16, n), b = vf_cpu_sumsq(gw, n);
    VF_CHECK_MSG(a == b, "bf16 sumsq %.17g, f32 sumsq of the same values %.17g", a, b);
    vf_cpu_axpy_bf16(yb, gb, 0.75f, n);
    for (int64_t i = 0; i < n; i++)
        yr[i] = vf_f32_to_bf16((float)((double)vf_bf16_to_f32(yr[i]) + 0.75 * (double)vf_bf16_to_f32(gb[i])));
    VF_CHECK(memcmp(yb, yr, sizeof(uint16_t) * n) == 0);
    free(g), free(y), free(gb), free(yb), free(yr), free(gw);
}

typedef struct brun {
    int64_t n;
    float *p0, *p, *m, *v;
    uint16_t *g, *w;
    double ss;
} brun;

static void b_run(void *vctx)
{
    brun *e = vctx;
    memcpy(e->p, e->p0, sizeof(float) * e->n);
    memset(e->m, 0, sizeof(float) * e->n);
    memset(e->v, 0, sizeof(float) * e->n);
    for (int t = 1; t <= 2; t++)
        vf_cpu_adamw_dt(e->p, e->m, e->v, e->g, VF_DTYPE_BF16, e->w, VF_DTYPE_BF16, e->n, 1e-3f, 0.9f, 0.99f, 1e-8f,
                        0.05f, 0.7f, t);
    e->ss = vf_cpu_sumsq_dt(e->g, VF_DTYPE_BF16, e->n);
}

VF_TEST(bf16_adamw_sumsq_same_bits_any_thread_count)
{
    brun e = {.n = 300007};
    float *gf = tl_randf(e.n, -1, 1);
    e.p0 = tl_randf(e.n, -1, 1), e.g = to_bf16(gf, e.n), e.p = tl_zerosf(e.n);
    e.m = tl_zerosf(e.n), e.v = tl_zerosf(e.n), e.w = calloc((size_t)e.n, 2);
    void *bufs[] = {e.p, e.m, e.v, e.w, &e.ss};
    size_t b = sizeof(float) * e.n;
    size_t bytes[] = {b, b, b, sizeof(uint16_t) * e.n, sizeof(double)};
    VF_CHECK(tl_same_threads("bf16 adamw 2 steps, sumsq", b_run, &e, 5, bufs, bytes));
    free(gf), free(e.p0), free(e.g), free(e.p), free(e.m), free(e.v), free(e.w);
}

int main(void) { return vf_test_main(); }
