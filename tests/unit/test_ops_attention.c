/* test_ops_attention.c — CPU attention (non-causal softmax(q·kᵀ·scale)·v on
 * (B, L, H, D)): output and lse against an f64 reference; dq, dk, dv against f64 finite
 * differences; cross-attention with Lq != Lk (short key length), D = 64 and odd D, H > 1,
 * lengths crossing the 64-row query/key blocks; gradients written, not accumulated (also
 * for no keys / no queries); NULL gradients; identical bytes on 1/2/3 threads. */
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

typedef struct at {
    int64_t B, Lq, Lk, H, D;
    double scale;
    double *q, *k, *v;
    double *lse; /* filled by the reference when not NULL */
} at;

static void at_ref(void *vctx, double *out)
{
    at *c = vctx;
    double *s = malloc(sizeof(double) * (size_t)(c->Lk > 0 ? c->Lk : 1));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Lq; i++) {
                const double *qi = c->q + ((b * c->Lq + i) * c->H + h) * c->D;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < c->Lk; j++) {
                    const double *kj = c->k + ((b * c->Lk + j) * c->H + h) * c->D;
                    double d = 0;
                    for (int64_t e = 0; e < c->D; e++) d += qi[e] * kj[e];
                    s[j] = d * c->scale;
                    if (s[j] > mx) mx = s[j];
                }
                for (int64_t j = 0; j < c->Lk; j++) sum += exp(s[j] - mx);
                if (c->lse) c->lse[(b * c->H + h) * c->Lq + i] = mx + log(sum);
                double *o = out + ((b * c->Lq + i) * c->H + h) * c->D;
                for (int64_t e = 0; e < c->D; e++) o[e] = 0;
                for (int64_t j = 0; j < c->Lk; j++) {
                    double p = exp(s[j] - mx) / sum;
                    const double *vj = c->v + ((b * c->Lk + j) * c->H + h) * c->D;
                    for (int64_t e = 0; e < c->D; e++) o[e] += p * vj[e];
                }
            }
    free(s);
}

static void check_attn(int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D, double scale,
                       int64_t maxfd)
{
    char what[128];
    int64_t nq = B * Lq * H * D, nk = B * Lk * H * D, nl = B * H * Lq;
    float *q = tl_randf(nq, -1.5, 1.5), *k = tl_randf(nk, -1.5, 1.5), *v = tl_randf(nk, -2, 2);
    at c = {B, Lq, Lk, H, D, (double)(float)scale, tl_tod(q, nq), tl_tod(k, nk), tl_tod(v, nk),
            tl_zerosd(nl)};
    double *want = tl_zerosd(nq);
    at_ref(&c, want);
    double *want_lse = c.lse;
    c.lse = NULL; /* the finite differences need no lse */
    float *out = tl_randf(nq, -9, 9), *lse = tl_zerosf(nl);
    vf_cpu_attention_fwd(out, lse, q, k, v, B, Lq, Lk, H, D, (float)scale);
    snprintf(what, sizeof what, "attn fwd B%lld Lq%lld Lk%lld H%lld D%lld", (long long)B,
             (long long)Lq, (long long)Lk, (long long)H, (long long)D);
    CHECK_FWD(what, out, want, nq, 1e-5);
    CHECK_FWD("  lse", lse, want_lse, nl, 1e-5);

    float *r = tl_randf(nq, -1, 1);
    double *rd = tl_tod(r, nq);
    float *dq = tl_zerosf(nq), *dk = tl_zerosf(nk), *dv = tl_zerosf(nk);
    vf_cpu_attention_bwd(dq, dk, dv, r, q, k, v, out, lse, B, Lq, Lk, H, D, (float)scale);
    if (Lk > 1) {
        CHECK_GRAD("  dq", at_ref, &c, c.q, nq, rd, nq, dq, NULL, maxfd);
        CHECK_GRAD("  dk", at_ref, &c, c.k, nk, rd, nq, dk, NULL, maxfd);
    } else {
        /* one key: the output is v whatever q and k are, so their gradients vanish; the
         * f32 roundings leave noise, a relative check against ~1e-11 would be meaningless */
        for (int64_t i = 0; i < nq; i++) VF_CHECK(fabs(dq[i]) <= 1e-6);
        for (int64_t i = 0; i < nk; i++) VF_CHECK(fabs(dk[i]) <= 1e-6);
    }
    CHECK_GRAD("  dv", at_ref, &c, c.v, nk, rd, nq, dv, NULL, maxfd);
    /* the gradients are written, not accumulated (ops.h): buffers holding garbage end up
     * with the same bytes as the zeroed ones */
    float *q1 = tl_randf(nq, -9, 9), *k1 = tl_randf(nk, -9, 9), *v1 = tl_randf(nk, -9, 9);
    vf_cpu_attention_bwd(q1, k1, v1, r, q, k, v, out, lse, B, Lq, Lk, H, D, (float)scale);
    VF_CHECK(memcmp(q1, dq, sizeof(float) * nq) == 0);
    VF_CHECK(memcmp(k1, dk, sizeof(float) * nk) == 0);
    VF_CHECK(memcmp(v1, dv, sizeof(float) * nk) == 0);
    /* each gradient alone equals the one computed with the others */
    float *only = tl_zerosf(nk);
    vf_cpu_attention_bwd(NULL, only, NULL, r, q, k, v, out, lse, B, Lq, Lk, H, D, (float)scale);
    VF_CHECK(memcmp(only, dk, sizeof(float) * nk) == 0);
    memset(only, 0, sizeof(float) * nk);
    vf_cpu_attention_bwd(NULL, NULL, only, r, q, k, v, out, lse, B, Lq, Lk, H, D, (float)scale);
    VF_CHECK(memcmp(only, dv, sizeof(float) * nk) == 0);
    float *oq = tl_zerosf(nq);
    vf_cpu_attention_bwd(oq, NULL, NULL, r, q, k, v, out, lse, B, Lq, Lk, H, D, (float)scale);
    VF_CHECK(memcmp(oq, dq, sizeof(float) * nq) == 0);

    free(q), free(k), free(v), free(c.q), free(c.k), free(c.v), free(want_lse), free(want);
    free(out), free(lse), free(r), free(rd), free(dq), free(dk), free(dv), free(q1), free(k1);
    free(v1), free(only), free(oq);
}

VF_TEST(attention_tiny)
{
    check_attn(1, 1, 1, 1, 1, 1.0, 1000);
    check_attn(2, 3, 3, 2, 4, 0.5, 1000);
}

VF_TEST(attention_cross_short_keys)
{
    /* caption cross-attention: many queries, few keys; Lq crosses the 64-query block */
    check_attn(2, 5, 3, 2, 4, 0.5, 1000);
    check_attn(1, 70, 3, 3, 5, 1.0 / sqrt(5.0), 200);
    check_attn(2, 9, 1, 2, 6, 0.4, 1000); /* a single key: output = v, zero dq/dk */
}

VF_TEST(attention_d64_and_long_keys)
{
    /* D = 64; Lk crosses the 64-key block of the dk/dv pass */
    check_attn(1, 5, 70, 2, 64, 0.125, 150);
    check_attn(1, 67, 67, 2, 16, 0.25, 150); /* self-attention, ragged blocks */
}

VF_TEST(attention_odd_d_peaky)
{
    /* odd D, a large scale (near one-hot probabilities) */
    check_attn(2, 7, 11, 3, 7, 3.0, 1000);
}

/* No keys (softmax over nothing: out 0, lse −inf) or no queries: nothing flows back, and
 * the gradients the caller asked for are zero whatever their buffers held. */
static void check_empty(int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D)
{
    int64_t nq = B * Lq * H * D, nk = B * Lk * H * D, nl = B * H * Lq;
    float *q = tl_randf(nq, -1, 1), *k = tl_randf(nk, -1, 1), *v = tl_randf(nk, -1, 1);
    float *out = tl_randf(nq, -9, 9), *lse = tl_randf(nl, -9, 9), *r = tl_randf(nq, -1, 1);
    vf_cpu_attention_fwd(out, lse, q, k, v, B, Lq, Lk, H, D, 0.5f);
    for (int64_t i = 0; i < nq; i++) VF_CHECK(out[i] == 0.0f);
    for (int64_t i = 0; i < nl; i++) VF_CHECK(lse[i] == -INFINITY);
    float *dq = tl_randf(nq, -9, 9), *dk = tl_randf(nk, -9, 9), *dv = tl_randf(nk, -9, 9);
    vf_cpu_attention_bwd(dq, dk, dv, r, q, k, v, out, lse, B, Lq, Lk, H, D, 0.5f);
    for (int64_t i = 0; i < nq; i++)
        VF_CHECK_MSG(dq[i] == 0.0f, "Lq %lld Lk %lld: dq[%lld] = %g", (long long)Lq, (long long)Lk,
                     (long long)i, dq[i]);
    for (int64_t i = 0; i < nk; i++)
        VF_CHECK_MSG(dk[i] == 0.0f && dv[i] == 0.0f, "Lq %lld Lk %lld: dk/dv[%lld] = %g/%g",
                     (long long)Lq, (long long)Lk, (long long)i, dk[i], dv[i]);
    free(q), free(k), free(v), free(out), free(lse), free(r), free(dq), free(dk), free(dv);
}

VF_TEST(attention_empty_writes_zero_gradients)
{
    check_empty(2, 3, 0, 2, 4); /* no keys */
    check_empty(2, 0, 5, 2, 4); /* no queries */
}

typedef struct arun {
    int64_t B, Lq, Lk, H, D;
    float *q, *k, *v, *r, *out, *lse, *dq, *dk, *dv;
} arun;

static void a_run(void *vctx)
{
    arun *e = vctx;
    vf_cpu_attention_fwd(e->out, e->lse, e->q, e->k, e->v, e->B, e->Lq, e->Lk, e->H, e->D, 0.18f);
    vf_cpu_attention_bwd(e->dq, e->dk, e->dv, e->r, e->q, e->k, e->v, e->out, e->lse, e->B, e->Lq,
                         e->Lk, e->H, e->D, 0.18f);
}

VF_TEST(attention_same_bits_any_thread_count)
{
    arun e = {2, 150, 130, 3, 32};
    int64_t nq = e.B * e.Lq * e.H * e.D, nk = e.B * e.Lk * e.H * e.D, nl = e.B * e.H * e.Lq;
    e.q = tl_randf(nq, -1, 1), e.k = tl_randf(nk, -1, 1), e.v = tl_randf(nk, -1, 1);
    e.r = tl_randf(nq, -1, 1), e.out = tl_zerosf(nq), e.lse = tl_zerosf(nl);
    e.dq = tl_zerosf(nq), e.dk = tl_zerosf(nk), e.dv = tl_zerosf(nk);
    void *bufs[] = {e.out, e.lse, e.dq, e.dk, e.dv};
    size_t bytes[] = {sizeof(float) * nq, sizeof(float) * nl, sizeof(float) * nq,
                      sizeof(float) * nk, sizeof(float) * nk};
    VF_CHECK(tl_same_threads("attention fwd+bwd B2 Lq150 Lk130 H3 D32", a_run, &e, 5, bufs, bytes));
    free(e.q), free(e.k), free(e.v), free(e.r), free(e.out), free(e.lse), free(e.dq), free(e.dk);
    free(e.dv);
}

int main(void) { return vf_test_main(); }
