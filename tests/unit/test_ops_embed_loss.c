/* test_ops_embed_loss.c — CPU embedding (lookup and deterministic scatter-add backward)
 * and MSE loss: against f64 references and f64 finite differences, repeated tokens,
 * accumulation, identical bytes on 1/2/3 threads. */
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

typedef struct em {
    int64_t N, C;
    const int32_t *tok;
    double *table;
} em;

static void em_ref(void *vctx, double *out)
{
    em *c = vctx;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t k = 0; k < c->C; k++) out[n * c->C + k] = c->table[c->tok[n] * c->C + k];
}

static void check_embed(int64_t N, int64_t C, int64_t V)
{
    char what[96];
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int64_t n = 0; n < N; n++) tok[n] = (int32_t)(tl_next() % (uint64_t)V);
    if (N > 2) tok[N - 1] = tok[0] = tok[1]; /* a token repeated, at both ends */
    float *table = tl_randf(V * C, -1, 1);
    em c = {N, C, tok, tl_tod(table, V * C)};
    double *want = tl_zerosd(N * C);
    em_ref(&c, want);
    float *out = tl_zerosf(N * C);
    vf_cpu_embed_fwd(out, tok, table, N, C);
    snprintf(what, sizeof what, "embed fwd N=%lld C=%lld V=%lld", (long long)N, (long long)C,
             (long long)V);
    CHECK_FWD(what, out, want, N * C, 0);
    float *r = tl_randf(N * C, -1, 1);
    double *rd = tl_tod(r, N * C);
    float *dt = tl_zerosf(V * C);
    vf_cpu_embed_bwd(dt, r, tok, N, C);
    CHECK_GRAD("  embed bwd", em_ref, &c, c.table, V * C, rd, N * C, dt, NULL, 500);
    float *t0 = tl_preset_like(dt, V * C), *t1 = tl_dupf(t0, V * C);
    vf_cpu_embed_bwd(t1, r, tok, N, C);
    CHECK_GRAD("  embed bwd accumulate", em_ref, &c, c.table, V * C, rd, N * C, t1, t0, 500);
    /* the scatter-add: each table row = its preset + the dout rows of its tokens summed
     * in f64 and rounded once */
    for (int64_t v = 0; v < V; v++)
        for (int64_t k = 0; k < C; k++) {
            double s = t0[v * C + k];
            for (int64_t n = 0; n < N; n++)
                if (tok[n] == v) s += r[n * C + k];
            VF_CHECK(t1[v * C + k] == (float)s);
        }
    free(tok), free(table), free(c.table), free(want), free(out), free(r), free(rd), free(dt);
    free(t0), free(t1);
}

VF_TEST(embedding)
{
    check_embed(1, 1, 1);
    check_embed(7, 3, 2);
    check_embed(37, 13, 11);
    check_embed(300, 5, 7); /* many repeats per row */
}

typedef struct ms {
    int64_t n;
    double *p;
    const double *t;
    double gscale;
} ms;

/* grad_scale · mean (p − t)²: the quantity whose gradient dpred receives */
static void ms_ref(void *vctx, double *out)
{
    ms *c = vctx;
    double s = 0;
    for (int64_t i = 0; i < c->n; i++) s += (c->p[i] - c->t[i]) * (c->p[i] - c->t[i]);
    out[0] = c->gscale * s / c->n;
}

static void check_mse(int64_t n, float gscale)
{
    char what[96];
    float *p = tl_randf(n, -2, 2), *t = tl_randf(n, -2, 2);
    double *td = tl_tod(t, n);
    ms c = {n, tl_tod(p, n), td, 1.0};
    double want;
    ms_ref(&c, &want);
    float *dp = tl_zerosf(n);
    double loss = vf_cpu_mse_fwd_bwd(dp, p, t, n, n, gscale);
    snprintf(what, sizeof what, "mse loss n=%lld", (long long)n);
    float lf = (float)loss;
    CHECK_FWD(what, &lf, &want, 1, 1e-7);
    VF_CHECK(fabs(loss - want) <= 1e-10 * want);
    c.gscale = gscale;
    double one = 1.0;
    CHECK_GRAD("  mse dpred", ms_ref, &c, c.p, n, &one, 1, dp, NULL, 400);
    float *d0 = tl_preset_like(dp, n), *d1 = tl_dupf(d0, n);
    VF_CHECK(vf_cpu_mse_fwd_bwd(d1, p, t, n, n, gscale) == loss);
    CHECK_GRAD("  mse dpred accumulate", ms_ref, &c, c.p, n, &one, 1, d1, d0, 400);
    VF_CHECK(vf_cpu_mse_fwd_bwd(NULL, p, t, n, n, gscale) == loss); /* loss only */
    /* two parts of one whole (count n each): every element's gradient the whole's bits,
     * the parts' losses adding up to the whole's */
    float *dh = tl_zerosf(n);
    int64_t h = n / 2;
    double parts = vf_cpu_mse_fwd_bwd(dh, p, t, h, n, gscale) + vf_cpu_mse_fwd_bwd(dh + h, p + h, t + h, n - h, n, gscale);
    VF_CHECK(memcmp(dh, dp, sizeof(float) * (size_t)n) == 0);
    VF_CHECK(fabs(parts - loss) <= 1e-12 * loss);
    free(dh);
    free(p), free(t), free(td), free(c.p), free(dp), free(d0), free(d1);
}

VF_TEST(mse)
{
    check_mse(1, 1.0f);
    check_mse(255, 0.5f);
    check_mse(257, 1.0f);
    check_mse(10007, 1000.0f); /* grad_scale keeps the per-element gradient O(1) */
    VF_CHECK(vf_cpu_mse_fwd_bwd(NULL, NULL, NULL, 0, 0, 1.0f) == 0.0);
}

typedef struct erun {
    int64_t N, C, V, n;
    int32_t *tok;
    float *table, *r, *out, *dt, *p, *t, *dp;
    double loss;
} erun;

static void e_run(void *vctx)
{
    erun *e = vctx;
    vf_cpu_embed_fwd(e->out, e->tok, e->table, e->N, e->C);
    memset(e->dt, 0, sizeof(float) * e->V * e->C);
    vf_cpu_embed_bwd(e->dt, e->r, e->tok, e->N, e->C);
    memset(e->dp, 0, sizeof(float) * e->n);
    e->loss = vf_cpu_mse_fwd_bwd(e->dp, e->p, e->t, e->n, e->n, 3.0f);
}

VF_TEST(embed_mse_same_bits_any_thread_count)
{
    erun e = {.N = 4000, .C = 96, .V = 50, .n = 1 << 20};
    e.tok = malloc(sizeof(int32_t) * e.N);
    for (int64_t i = 0; i < e.N; i++) e.tok[i] = (int32_t)(tl_next() % 50);
    e.table = tl_randf(e.V * e.C, -1, 1), e.r = tl_randf(e.N * e.C, -1, 1);
    e.out = tl_zerosf(e.N * e.C), e.dt = tl_zerosf(e.V * e.C);
    e.p = tl_randf(e.n, -1, 1), e.t = tl_randf(e.n, -1, 1), e.dp = tl_zerosf(e.n);
    void *bufs[] = {e.out, e.dt, e.dp, &e.loss};
    size_t bytes[] = {sizeof(float) * e.N * e.C, sizeof(float) * e.V * e.C, sizeof(float) * e.n,
                      sizeof(double)};
    VF_CHECK(tl_same_threads("embed fwd+bwd, mse", e_run, &e, 4, bufs, bytes));
    free(e.tok), free(e.table), free(e.r), free(e.out), free(e.dt), free(e.p), free(e.t), free(e.dp);
}

int main(void) { return vf_test_main(); }
