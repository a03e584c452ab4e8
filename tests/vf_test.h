/* vf_test.h — the tiny shared assert header for C tests (greatest/acutest style).
 *
 *   VF_TEST(name) { VF_CHECK(x == 1); VF_CHECK_NEAR(a, b, 1e-5); }
 *   int main(void) { return vf_test_main(); }
 *
 * Tests register from constructors and run in file order. A failed check prints
 * file:line and the expression, marks the test failed and continues. The last line is
 * "N passed, N failed" (the plain closing line CI reads). Return 77 to skip (no GPU).
 */
#ifndef VF_TEST_H
#define VF_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*vf_test_fn)(void);
static struct { const char *name; vf_test_fn fn; } vf_tests_[512];
static int vf_ntests_;
static int vf_test_failed_;
static int vf_test_filter_ok_(const char *name)
{
    const char *f = getenv("VF_TEST_FILTER");
    return !f || strstr(name, f) != NULL;
}

/* (the parameter is not called `name`: it would replace the `.name` member below) */
#define VF_TEST(tname)                                                           \
    static void vf_test_##tname(void);                                           \
    __attribute__((constructor)) static void vf_test_reg_##tname(void)           \
    {                                                                            \
        vf_tests_[vf_ntests_].name = #tname;                                     \
        vf_tests_[vf_ntests_++].fn = vf_test_##tname;                            \
    }                                                                            \
    static void vf_test_##tname(void)

#define VF_CHECK(cond)                                                           \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            vf_test_failed_ = 1;                                                 \
        }                                                                        \
    } while (0)
#define VF_CHECK_MSG(cond, ...)                                                  \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            vf_test_failed_ = 1;                                                 \
        }                                                                        \
    } while (0)
#define VF_CHECK_EQ_INT(a, b)                                                    \
    do {                                                                         \
        long long a_ = (long long)(a), b_ = (long long)(b);                      \
        if (a_ != b_) {                                                          \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__,   \
                    __LINE__, #a, #b, a_, b_);                                   \
            vf_test_failed_ = 1;                                                 \
        }                                                                        \
    } while (0)
#define VF_CHECK_STR(a, b)                                                       \
    do {                                                                         \
        const char *a_ = (a), *b_ = (b);                                         \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                 \
            fprintf(stderr, "%s:%d: %s == %s failed:\n  got:  %s\n  want: %s\n",  \
                    __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
            vf_test_failed_ = 1;                                                 \
        }                                                                        \
    } while (0)
/* |a-b| <= tol·max(1,|b|); NaN never passes. */
#define VF_CHECK_NEAR(a, b, tol)                                                 \
    do {                                                                         \
        double a_ = (a), b_ = (b);                                               \
        double s_ = fabs(b_) > 1 ? fabs(b_) : 1;                                 \
        if (!(fabs(a_ - b_) <= (tol) * s_)) {                                    \
            fprintf(stderr, "%s:%d: %s ≈ %s failed: %.9g vs %.9g (tol %g)\n",      \
                    __FILE__, __LINE__, #a, #b, a_, b_, (double)(tol));          \
            vf_test_failed_ = 1;                                                 \
        }                                                                        \
    } while (0)

static inline int vf_test_main(void)
{
    int passed = 0, failed = 0;
    for (int i = 0; i < vf_ntests_; i++) {
        if (!vf_test_filter_ok_(vf_tests_[i].name)) continue;
        vf_test_failed_ = 0;
        fprintf(stderr, "-- %s\n", vf_tests_[i].name);
        vf_tests_[i].fn();
        if (vf_test_failed_) {
            failed++;
            fprintf(stderr, "FAIL %s\n", vf_tests_[i].name);
        } else {
            passed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
#endif
