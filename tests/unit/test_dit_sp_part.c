/* test_dit_sp_part.c — a partition of DiT blocks run sequence-parallel (models/dit_sp.h
 * vf_dit_part_set_sp) against the same partition on one rank.
 *
 * A middle partition (blocks [1, 3) of 4; 4 heads) takes x, e, e0, ctx and, backward,
 * the gradient of its output. sp forked ranks each hold their token range of x and of
 * that gradient (pads: finite values in x, zeros in the gradient, as a loss that masks
 * them gives), with the same weights. Checked, for sp = 1, 2, 4, sequences they divide
 * and do not, with and without recompute:
 *   - each real token's output and input gradient are the one-rank partition's bits;
 *   - the weight, e0 and ctx gradients (sums over the tokens, in grains whose running
 *     sums pass from rank to rank: models/dit_red.h) are on the last rank the one-rank
 *     gradients bit for bit, and zero on the others;
 *   - run twice, every rank's results, its partial gradients included, are the same bits.
 * The group opens with vf_dit_sp_chunk_bytes (a chunk too small fails the run), and
 * vf_dit_part_set_sp allocates vf_dit_sp_scratch_bytes, as the account sees it. The
 * embeddings and the head under sequence parallelism: test_dit_sp_ends.c.
 * Every computation runs in a forked child (the parent only compares), so no OpenMP
 * pool crosses a fork.
 */
#include "models/dit_sp.h"
#include "runtime/core/alloc.h"
#include "tests/unit/dit_testlib.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXR 4
#define ROLES (MAXR + 1)
#define CAP (1 << 16)

enum { O_X, O_DX, O_GW, O_DE0, O_DCTX, O_N };
static const char *const onames[O_N] = {"output", "input gradient", "weight gradients", "e0 gradient",
                                        "ctx gradient"};

typedef struct shared_out {
    float v[ROLES][O_N][CAP];
    int rc[ROLES];
    char msg[ROLES][512];
} shared_out;

static vf_dit_config cfg(void)
{
    vf_dit_config c = small_cfg();
    c.heads = 4, c.head_dim = 8; /* dim 32: sp = 1, 2, 4 divide the heads */
    return c;
}

static float fill(uint32_t which, int64_t i)
{
    uint32_t x = (uint32_t)(which * 2654435761u) ^ (uint32_t)(i * 40503u + 7);
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    return (float)(x % 2001) / 1000.0f - 1.0f;
}

/* role 0: one rank over the whole sequence; role 1 + r: rank r of n. */
static void role_main(shared_out *so, int role, int n, vf_dit_dims d, int recompute, const char *key)
{
    vf_status st = {0};
    vf_dit_config c = cfg();
    vf_dit_layout *l = NULL;
    vf_dit_part *p = NULL;
    vf_dit_saved *sv = NULL;
    vf_a2a *a = NULL;
    vf_dit_sp sp;
    vf_backend *be = vf_backend_cpu();
    int rc = vf_dit_layout_new(&c, &l, &st);
    int r = role - 1, sp_n = role == 0 ? 1 : n;
    int64_t L = d.L, D = c.dim, Nc = (int64_t)d.B * vf_dit_ctx_len(&c), lo = 0, cnt = L, Ll = L;
    float *params = NULL, *grads = NULL, *x = NULL, *y = NULL, *dy = NULL, *e = NULL, *e0 = NULL, *ctx = NULL;
    float *de = NULL, *de0 = NULL, *dctx = NULL;
    int64_t off = 0, np = 0;
    if (!rc) {
        if (sp_n > 1) {
            vf_a2a_opts o = {.timeout_ms = 60000};
            rc = vf_a2a_open(key, n, r, vf_dit_sp_chunk_bytes(n, L, d.B, &c, sizeof(float)), &o, &a, &st);
        }
        if (!rc) rc = vf_dit_sp_init(&sp, a, sp_n, r < 0 ? 0 : r, L, c.heads, &st);
    }
    if (!rc) {
        vf_dit_sp_range(&sp, &lo, &cnt);
        Ll = sp.Lr;
        vf_dit_dims mx = d;
        mx.L = Ll;
        params = random_params(l, 11);
        grads = calloc((size_t)l->total, sizeof(float));
        vf_dit_layout_range(l, 1, 3, &off, &np);
        rc = vf_dit_part_new(be, l, 1, 3, &mx, recompute, params + off, grads + off, &p, &st);
        int64_t live = vf_account_live(vf_account_current());
        if (!rc && role > 0) rc = vf_dit_part_set_sp(p, &sp, &st);
        if (!rc && role > 0 && vf_account_live(vf_account_current()) - live !=
                                   vf_dit_sp_scratch_bytes(n, L, d.B, &c, sizeof(float)))
            rc = vf_status_set(&st, VF_EINVAL, __FILE__, __LINE__, "the SP scratch took %lld bytes, %lld planned",
                               (long long)(vf_account_live(vf_account_current()) - live),
                               (long long)vf_dit_sp_scratch_bytes(n, L, d.B, &c, sizeof(float)));
        if (!rc) rc = vf_dit_saved_new(p, &sv, &st);
    }
    if (!rc) {
        size_t nx = (size_t)(d.B * Ll * D);
        x = malloc(nx * 4), y = calloc(nx, 4), dy = malloc(nx * 4);
        e = malloc((size_t)(d.B * D) * 4), e0 = malloc((size_t)(6 * d.B * D) * 4), ctx = malloc((size_t)(Nc * D) * 4);
        de = calloc((size_t)(d.B * D), 4), de0 = calloc((size_t)(6 * d.B * D), 4), dctx = calloc((size_t)(Nc * D), 4);
        for (int b = 0; b < d.B; b++)
            for (int64_t t = 0; t < Ll; t++)
                for (int64_t k = 0; k < D; k++) {
                    int64_t g = ((int64_t)b * L + lo + t) * D + k, i = ((int64_t)b * Ll + t) * D + k;
                    bool real = t < cnt;
                    x[i] = real ? fill(1, g) : 0.5f;
                    dy[i] = real ? fill(2, g) : 0.0f;
                }
        for (int64_t i = 0; i < d.B * D; i++) e[i] = fill(3, i);
        for (int64_t i = 0; i < 6 * d.B * D; i++) e0[i] = 0.1f * fill(4, i);
        for (int64_t i = 0; i < Nc * D; i++) ctx[i] = fill(5, i);
        vf_dit_batch bt = {0};
        bt.dims = d;
        bt.dims.L = Ll;
        vf_dit_xfer in = {x, e, e0, ctx}, out = {y, NULL, NULL, NULL}, g = {dy, de, de0, dctx};
        rc = vf_dit_part_forward(p, &bt, &in, &out, sv, &st);
        if (!rc) rc = vf_dit_part_backward(p, &bt, sv, &g, &st);
        for (int b = 0; b < d.B && !rc; b++) {
            memcpy(&so->v[role][O_X][((int64_t)b * L + lo) * D], &y[(int64_t)b * Ll * D], sizeof(float) * cnt * D);
            memcpy(&so->v[role][O_DX][((int64_t)b * L + lo) * D], &dy[(int64_t)b * Ll * D], sizeof(float) * cnt * D);
        }
        if (!rc) {
            memcpy(so->v[role][O_GW], grads + off, sizeof(float) * (size_t)np);
            memcpy(so->v[role][O_DE0], de0, sizeof(float) * (size_t)(6 * d.B * D));
            memcpy(so->v[role][O_DCTX], dctx, sizeof(float) * (size_t)(Nc * D));
        }
    }
    so->rc[role] = rc;
    snprintf(so->msg[role], sizeof so->msg[role], "%.500s", st.msg);
    vf_dit_saved_free(sv);
    vf_dit_part_free(p);
    vf_a2a_close(a);
    vf_dit_layout_free(l);
    free(params), free(grads), free(x), free(y), free(dy), free(e), free(e0), free(ctx), free(de), free(de0),
        free(dctx);
}

/* Runs one case and checks it; returns the ranks' results (caller munmaps) when keep. */
static shared_out *run_case_keep(int n, int T, int H, int W, int recompute, bool keep)
{
    vf_dit_config c = cfg();
    vf_dit_dims d = vf_dit_dims_of(&c, 2, T, H, W);
    int64_t L = d.L, D = c.dim, Nc = (int64_t)d.B * vf_dit_ctx_len(&c);
    shared_out *so = mmap(NULL, sizeof *so, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    VF_CHECK(so != MAP_FAILED);
    if (so == MAP_FAILED) return NULL;
    char key[96];
    snprintf(key, sizeof key, "test_dit_sp_part/%ld/%d/%lld/%d", (long)getpid(), n, (long long)L, recompute);
    pid_t kids[ROLES];
    fflush(NULL);
    for (int role = 0; role <= n; role++) {
        kids[role] = fork();
        if (kids[role] == 0) {
            role_main(so, role, n, d, recompute, key);
            _exit(0);
        }
    }
    for (int role = 0; role <= n; role++) {
        int ws = 0;
        waitpid(kids[role], &ws, 0);
        VF_CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "sp=%d L=%lld: process %d died", n, (long long)L, role);
        VF_CHECK_MSG(so->rc[role] == 0, "sp=%d L=%lld role %d: %s", n, (long long)L, role, so->msg[role]);
    }
    vf_dit_layout *l = NULL;
    vf_status st = {0};
    int64_t off = 0, np = 0;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    vf_dit_layout_range(l, 1, 3, &off, &np);
    vf_dit_layout_free(l);
    const int64_t count[O_N] = {d.B * L * D, d.B * L * D, np, 6 * d.B * D, Nc * D};
    for (int o = 0; o < O_N; o++) {
        VF_CHECK(count[o] <= CAP);
        const float *ref = so->v[0][o];
        if (o <= O_DX) { /* per token: assembled from the ranks, bit for bit */
            int64_t bad = 0;
            for (int64_t i = 0; i < count[o]; i++) {
                int64_t t = i / D % L, Lr = (L + n - 1) / n;
                bad += memcmp(&so->v[1 + t / Lr][o][i], &ref[i], sizeof(float)) != 0;
            }
            VF_CHECK_MSG(bad == 0, "sp=%d L=%lld recompute=%d: %lld %s values differ from one rank's", n,
                         (long long)L, recompute, (long long)bad, onames[o]);
        } else { /* sums over the tokens: whole on the last rank, zero on the others */
            double mx = 0;
            int64_t bad = 0, nonzero = 0;
            for (int64_t i = 0; i < count[o]; i++) {
                mx = fmax(mx, fabs(ref[i]));
                bad += memcmp(&so->v[n][o][i], &ref[i], sizeof(float)) != 0;
                for (int r = 0; r + 1 < n; r++) nonzero += so->v[1 + r][o][i] != 0.0f;
            }
            VF_CHECK_MSG(mx > 0 && bad == 0 && nonzero == 0,
                         "sp=%d L=%lld recompute=%d: %s: %lld values of the last rank differ from one rank's, %lld "
                         "of the other ranks are not zero",
                         n, (long long)L, recompute, onames[o], (long long)bad, (long long)nonzero);
        }
    }
    if (keep) return so;
    munmap(so, sizeof *so);
    return NULL;
}

static void run_case(int n, int T, int H, int W, int recompute) { run_case_keep(n, T, H, W, recompute, false); }

VF_TEST(blocks_match_one_rank)
{
    /* tiny's patch (1, 2, 2): (2, 4, 6) makes 12 tokens a sample, (3, 2, 2) makes 3 */
    run_case(1, 2, 4, 6, VF_DIT_KEEP);
    run_case(2, 2, 4, 6, VF_DIT_KEEP);
    run_case(4, 2, 4, 6, VF_DIT_KEEP);
    run_case(2, 3, 2, 2, VF_DIT_KEEP);
    run_case(4, 3, 2, 2, VF_DIT_KEEP);
    run_case(2, 3, 2, 2, VF_DIT_RECOMPUTE);
    run_case(2, 2, 4, 6, VF_DIT_RECOMPUTE_ALL);
}

/* Every rank's results, its partial gradients included, are the same bits run after run. */
VF_TEST(each_rank_is_deterministic)
{
    shared_out *a = run_case_keep(2, 3, 2, 2, VF_DIT_KEEP, true), *b = run_case_keep(2, 3, 2, 2, VF_DIT_KEEP, true);
    VF_CHECK(a && b);
    if (a && b)
        VF_CHECK(memcmp(a->v[1], b->v[1], sizeof a->v[1]) == 0 && memcmp(a->v[2], b->v[2], sizeof a->v[2]) == 0);
    if (a) munmap(a, sizeof *a);
    if (b) munmap(b, sizeof *b);
}

int main(void) { return vf_test_main(); }
