/* test_dit_sp.c — Ulysses self-attention over sequence-parallel ranks (models/dit_sp.h).
 *
 * N forked processes each hold a contiguous token range of q, k, v and dout (the last
 * ranks padded, the pads filled with large values that would show if they leaked) and
 * run the all-to-all attention forward and backward; one more process computes the
 * reference: the CPU backend's attention over the whole sequence on one rank, all B
 * samples and H heads in one call. Checked, for N = 1, 2, 3 and sequences N divides and
 * does not: every real token's out, dq, dk and dv are the reference's bits; dk and dv of
 * pads are zero. And sp = 4 with 6 heads is refused naming both numbers.
 * (Every computation runs in a child: the parent forks only, so no OpenMP pool is
 * inherited across a fork.)
 */
#include "models/dit_sp.h"
#include "tests/vf_test.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define B 2
#define H 6
#define DH 8
#define LMAX 16
#define PADV 1e4f

enum { R_OUT, R_DQ, R_DK, R_DV, R_N };
static const char *const rnames[R_N] = {"out", "dq", "dk", "dv"};

static float val(int which, int b, int l, int h, int c)
{
    uint32_t x = (uint32_t)(which * 7919 + b * 104729 + l * 1299709 + h * 15485863 + c * 32452843) * 2654435761u;
    x ^= x >> 15;
    return (float)(x % 2001) / 1000.0f - 1.0f;
}

/* shared results: [case role][R_N][B·L·H·DH]; role 0 the reference, 1 + r rank r's
 * (whole-sequence positions, pads dropped); dkpad, dvpad: max |value| of pad rows */
typedef struct shared_out {
    float r[5][R_N][B * LMAX * H * DH];
    float padmax[5];
    int rc[5];
    char msg[5][2048];
} shared_out;

static void reference(shared_out *so, int L)
{
    vf_backend *be = vf_backend_cpu();
    size_t n = (size_t)B * L * H * DH;
    float *q = malloc(4 * n), *k = malloc(4 * n), *v = malloc(4 * n), *dout = malloc(4 * n);
    float *lse = malloc(4 * (size_t)B * H * L);
    for (int b = 0; b < B; b++)
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++)
                for (int c = 0; c < DH; c++) {
                    size_t i = (((size_t)b * L + l) * H + h) * DH + c;
                    q[i] = val(0, b, l, h, c), k[i] = val(1, b, l, h, c), v[i] = val(2, b, l, h, c);
                    dout[i] = val(3, b, l, h, c);
                }
    float scale = 1.0f / sqrtf((float)DH);
    be->attention_fwd(be, so->r[0][R_OUT], lse, q, k, v, B, L, L, H, DH, scale);
    be->attention_bwd(be, so->r[0][R_DQ], so->r[0][R_DK], so->r[0][R_DV], dout, q, k, v, so->r[0][R_OUT], lse, B, L,
                      L, H, DH, scale);
    free(q), free(k), free(v), free(dout), free(lse);
}

static void rank_main(shared_out *so, const char *key, int n, int r, int L)
{
    vf_backend *be = vf_backend_cpu();
    vf_status st = {0};
    vf_a2a *a = NULL;
    vf_dit_sp sp;
    int rc = 0;
    float *buf[8] = {0};
    if (n > 1) {
        int64_t Lr = (L + n - 1) / n;
        vf_a2a_opts o = {.timeout_ms = 20000}; /* a broken exchange fails the test, never hangs it */
        rc = vf_a2a_open(key, n, r, sizeof(float) * (size_t)(B * Lr * H * DH / n), &o, &a, &st);
    }
    if (!rc) rc = vf_dit_sp_init(&sp, a, n, r, L, H, &st);
    if (!rc) {
        int64_t E = vf_dit_sp_elems(&sp, B, H, DH), lo, cnt;
        vf_dit_sp_range(&sp, &lo, &cnt);
        for (int i = 0; i < 8; i++) buf[i] = calloc((size_t)E, sizeof(float));
        float *q = buf[0], *k = buf[1], *v = buf[2], *dout = buf[3], *out = buf[4], *dq = buf[5], *dk = buf[6],
              *dv = buf[7];
        float *lse = calloc((size_t)(B * H * sp.Lr), sizeof(float));
        void *work[VF_DIT_SP_WORK_BWD];
        for (int i = 0; i < VF_DIT_SP_WORK_BWD; i++) work[i] = calloc((size_t)E, sizeof(float));
        for (int b = 0; b < B; b++)
            for (int l = 0; l < sp.Lr; l++)
                for (int h = 0; h < H; h++)
                    for (int c = 0; c < DH; c++) {
                        size_t i = (((size_t)b * sp.Lr + l) * H + h) * DH + c;
                        bool real = l < cnt;
                        int g = (int)lo + l;
                        q[i] = real ? val(0, b, g, h, c) : PADV, k[i] = real ? val(1, b, g, h, c) : PADV;
                        v[i] = real ? val(2, b, g, h, c) : PADV, dout[i] = real ? val(3, b, g, h, c) : PADV;
                    }
        float scale = 1.0f / sqrtf((float)DH);
        rc = vf_dit_sp_attention_fwd(be, &sp, out, lse, q, k, v, B, H, DH, scale, work, &st);
        if (!rc) rc = vf_dit_sp_attention_bwd(be, &sp, dq, dk, dv, dout, q, k, v, out, lse, B, H, DH, scale, work, &st);
        const float *res[R_N] = {out, dq, dk, dv};
        float pm = 0;
        for (int b = 0; b < B && !rc; b++)
            for (int l = 0; l < sp.Lr; l++)
                for (int j = 0; j < R_N; j++) {
                    const float *src = res[j] + ((size_t)b * sp.Lr + l) * H * DH;
                    if (l < cnt) {
                        memcpy(so->r[1 + r][j] + ((size_t)b * L + lo + l) * H * DH, src, sizeof(float) * H * DH);
                    } else if (j == R_DK || j == R_DV) {
                        for (int e = 0; e < H * DH; e++) pm = fmaxf(pm, fabsf(src[e]));
                    }
                }
        so->padmax[1 + r] = pm;
        free(lse);
        for (int i = 0; i < VF_DIT_SP_WORK_BWD; i++) free(work[i]);
    }
    so->rc[1 + r] = rc;
    snprintf(so->msg[1 + r], sizeof so->msg[1 + r], "%s", st.msg);
    for (int i = 0; i < 8; i++) free(buf[i]);
    vf_a2a_close(a);
}

static void run_case(int n, int L)
{
    shared_out *so = mmap(NULL, sizeof *so, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    VF_CHECK(so != MAP_FAILED);
    memset(so, 0, sizeof *so);
    char key[96];
    snprintf(key, sizeof key, "test_dit_sp/%ld/%d/%d", (long)getpid(), n, L);
    pid_t kids[5];
    fflush(NULL);
    for (int r = -1; r < n; r++) {
        kids[r + 1] = fork();
        if (kids[r + 1] == 0) {
            if (r < 0) reference(so, L);
            else rank_main(so, key, n, r, L);
            _exit(0);
        }
    }
    for (int i = 0; i <= n; i++) {
        int ws = 0;
        waitpid(kids[i], &ws, 0);
        VF_CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "sp=%d L=%d: process %d died", n, L, i);
    }
    size_t elems = (size_t)B * L * H * DH;
    for (int r = 0; r < n; r++) {
        VF_CHECK_MSG(so->rc[1 + r] == 0, "sp=%d L=%d rank %d: %s", n, L, r, so->msg[1 + r]);
        VF_CHECK_MSG(so->padmax[1 + r] == 0, "sp=%d L=%d rank %d: pad rows of dk/dv reach %g", n, L, r,
                     so->padmax[1 + r]);
    }
    /* the ranks' real rows tile the sequence: compare the assembled tensors */
    for (int j = 0; j < R_N; j++) {
        float *got = calloc(elems, sizeof(float));
        int64_t Lr = (L + n - 1) / n;
        for (int b = 0; b < B; b++)
            for (int l = 0; l < L; l++) {
                size_t o = ((size_t)b * L + l) * H * DH;
                memcpy(got + o, so->r[1 + l / Lr][j] + o, sizeof(float) * H * DH);
            }
        size_t bad = 0, first = elems;
        for (size_t i = 0; i < elems; i++)
            if (memcmp(&got[i], &so->r[0][j][i], sizeof(float))) bad++, first = first < i ? first : i;
        VF_CHECK_MSG(bad == 0, "sp=%d L=%d: %zu %s values differ from one rank's (first at %zu: %.9g vs %.9g)", n, L,
                     bad, rnames[j], first, first < elems ? got[first] : 0, first < elems ? so->r[0][j][first] : 0);
        free(got);
    }
    munmap(so, sizeof *so);
}

VF_TEST(ulysses_matches_one_rank_bitwise)
{
    static const int cases[][2] = {{1, 10}, {2, 10}, {3, 12}, {3, 10}, {2, 7}, {3, 16}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(cases[i][0], cases[i][1]);
}

VF_TEST(heads_not_divisible_is_refused)
{
    vf_dit_sp sp;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_dit_sp_init(&sp, NULL, 4, 0, 10, 6, &st), VF_EUSAGE);
    VF_CHECK(strstr(st.msg, "6 heads") && strstr(st.msg, "sp = 4"));
    st = (vf_status){0};
    VF_CHECK_EQ_INT(vf_dit_sp_init(&sp, NULL, 2, 0, 10, 6, &st), VF_EINVAL);
    st = (vf_status){0};
    VF_CHECK_EQ_INT(vf_dit_sp_init(&sp, NULL, 1, 0, 10, 6, &st), 0);
    VF_CHECK_EQ_INT(sp.Lr, 10);
}

int main(void) { return vf_test_main(); }
