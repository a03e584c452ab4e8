/* test_ops_layout.c — CPU permute (1..6 dims, against direct index arithmetic, inverse
 * restores, identical bytes on 1/2/3 threads) and the memory functions (f32/bf16/f16
 * upload and download against the runtime's converters). */
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/ops_testlib.h"

/* out[i0..] = inp[j] where out axis a indexes inp axis perm[a] */
static void permute_ref(float *out, const float *inp, int nd, const int64_t *shape, const int *perm)
{
    int64_t n = 1, ostr[6], istr[6], s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        istr[i] = s;
        s *= shape[i];
    }
    n = s;
    s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        ostr[i] = s;
        s *= shape[perm[i]];
    }
    for (int64_t o = 0; o < n; o++) {
        int64_t j = 0;
        for (int a = 0; a < nd; a++) j += ((o / ostr[a]) % shape[perm[a]]) * istr[perm[a]];
        out[o] = inp[j];
    }
}

static void check_perm(int nd, const int64_t *shape, const int *perm)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    float *x = tl_randf(n, -1, 1), *got = tl_zerosf(n), *want = tl_zerosf(n), *back = tl_zerosf(n);
    vf_cpu_permute(got, x, nd, shape, perm);
    permute_ref(want, x, nd, shape, perm);
    VF_CHECK_MSG(memcmp(got, want, sizeof(float) * n) == 0, "permute nd=%d n=%lld", nd, (long long)n);
    /* inverse permutation on the permuted shape restores the input */
    int64_t pshape[6];
    int inv[6];
    for (int i = 0; i < nd; i++) {
        pshape[i] = shape[perm[i]];
        inv[perm[i]] = i;
    }
    vf_cpu_permute(back, got, nd, pshape, inv);
    VF_CHECK(memcmp(back, x, sizeof(float) * n) == 0);
    free(x), free(got), free(want), free(back);
}

VF_TEST(permute_all_ranks)
{
    int64_t s1[] = {7};
    int p1[] = {0};
    check_perm(1, s1, p1);
    int64_t s2[] = {3, 5};
    int p2[] = {1, 0};
    check_perm(2, s2, p2);
    int64_t s4[] = {2, 3, 5, 7}; /* (B, L, H, D) -> (B, H, L, D) */
    int p4[] = {0, 2, 1, 3};
    check_perm(4, s4, p4);
    int p4b[] = {3, 1, 0, 2};
    check_perm(4, s4, p4b);
    int64_t s5[] = {2, 3, 1, 4, 5}; /* (B, C, T, H, W) -> (B, T, H, W, C) */
    int p5[] = {0, 2, 3, 4, 1};
    check_perm(5, s5, p5);
    int64_t s6[] = {2, 3, 2, 5, 2, 3}; /* unpatchify-like 6-D shuffle */
    int p6[] = {0, 5, 1, 3, 2, 4};
    check_perm(6, s6, p6);
    int p6i[] = {0, 1, 2, 3, 4, 5}; /* identity */
    check_perm(6, s6, p6i);
    /* random permutations of random small shapes */
    for (int it = 0; it < 40; it++) {
        int nd = 1 + (int)(tl_next() % 6);
        int64_t sh[6];
        int pm[6];
        for (int i = 0; i < nd; i++) {
            sh[i] = 1 + (int64_t)(tl_next() % 5);
            pm[i] = i;
        }
        for (int i = nd - 1; i > 0; i--) {
            int j = (int)(tl_next() % (uint64_t)(i + 1)), t = pm[i];
            pm[i] = pm[j];
            pm[j] = t;
        }
        check_perm(nd, sh, pm);
    }
}

typedef struct prun {
    float *x, *out;
} prun;
static void p_run(void *vctx)
{
    prun *e = vctx;
    int64_t shape[] = {3, 64, 41, 37};
    int perm[] = {0, 2, 3, 1};
    vf_cpu_permute(e->out, e->x, 4, shape, perm);
}

VF_TEST(permute_same_bits_any_thread_count)
{
    int64_t n = 3 * 64 * 41 * 37;
    prun e = {tl_randf(n, -1, 1), tl_zerosf(n)};
    void *bufs[] = {e.out};
    size_t bytes[] = {sizeof(float) * n};
    VF_CHECK(tl_same_threads("permute 4-D", p_run, &e, 1, bufs, bytes));
    free(e.x), free(e.out);
}

VF_TEST(upload_download)
{
    int64_t n = 1000;
    float *x = tl_randf(n, -100, 100), *y = tl_zerosf(n);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-30f, x[3] = 65504.0f, x[4] = 3.0e38f;
    /* f32: exact copies */
    float *s32 = tl_zerosf(n);
    vf_cpu_upload(s32, x, n, VF_DTYPE_F32);
    vf_cpu_download(y, s32, n, VF_DTYPE_F32);
    VF_CHECK(memcmp(x, y, sizeof(float) * n) == 0);
    /* bf16 / f16: the runtime's round-to-nearest-even converters, element by element */
    uint16_t *h = calloc((size_t)n, sizeof(uint16_t));
    vf_cpu_upload(h, x, n, VF_DTYPE_BF16);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= h[i] == vf_f32_to_bf16(x[i]);
    VF_CHECK(ok);
    vf_cpu_download(y, h, n, VF_DTYPE_BF16);
    ok = 1;
    for (int64_t i = 0; i < n; i++) {
        ok &= y[i] == vf_bf16_to_f32(h[i]);
        ok &= fabs((double)y[i] - x[i]) <= fabs((double)x[i]) * (1.0 / 256); /* 8-bit mantissa */
    }
    VF_CHECK(ok);
    vf_cpu_upload(h, x, n, VF_DTYPE_F16);
    vf_cpu_download(y, h, n, VF_DTYPE_F16);
    ok = 1;
    for (int64_t i = 0; i < n; i++) {
        ok &= h[i] == vf_f32_to_f16(x[i]);
        ok &= y[i] == vf_f16_to_f32(h[i]);
    }
    VF_CHECK(ok);
    VF_CHECK(fabs(y[5] - x[5]) <= fabs(x[5]) * (1.0 / 1024)); /* an in-range value: 11 bits */
    free(x), free(y), free(s32), free(h);
}

int main(void) { return vf_test_main(); }
