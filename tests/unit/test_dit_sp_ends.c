/* test_dit_sp_ends.c — the whole DiT in one partition (embeddings, blocks, head, loss) run
 * sequence-parallel (models/dit_sp.h vf_dit_part_set_sp at the ends) against one rank.
 *
 * sp forked ranks each patchify the whole clips and embed their token range, run the
 * blocks with the all-to-all, and the head and loss on their tokens against their rows of the
 * targets (vf_dit_sp_target_rows; one rank patchifies the whole latents on the backend);
 * their losses are their tokens' share of the whole mean. Checked for sp = 2, 3 on sequences they divide and do
 * not (pads), with several samples and text lengths:
 *   - the ranks' losses add up to the one-rank loss within 1e-6 relative;
 *   - their weight gradients (sums over the tokens, the embeddings' included, which run in
 *     grains passed from rank to rank: models/dit_red.h) are on the last rank the one-rank
 *     gradients bit for bit, and zero on the others;
 *   - run twice, every rank's loss and gradients are the same bits;
 *   - a rank's partition (vf_dit_part_new_sp) holds its ⌈L/sp⌉ tokens: its saved store and
 *     workspace are those of one rank's partition made for ⌈L/sp⌉ tokens (its patches
 *     included: the patch embedding runs on the rank's tokens), less the latent-shaped
 *     prediction and the patchify staging; its ends hold the whole clips' patchify apart;
 *     each as vf_dit_part_memory_sp plans it. The same for the first and the last
 *     partition alone; the last holds nothing whole: its targets come as the rank's rows
 *     (vf_dit_sp_target_rows), which the loss takes.
 * A rank that counted its pads, or lost the loss's share, is off by far more. Every
 * computation runs in a forked child (the parent only compares).
 */
#include "models/dit_sp.h"
#include "tests/unit/dit_testlib.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXR 3
#define ROLES (MAXR + 1)
#define CAP (1 << 17)

typedef struct shared_out {
    float g[ROLES][CAP];
    double loss[ROLES];
    int rc[ROLES];
    char msg[ROLES][512];
} shared_out;

/* The input channels of the case being run (0: z, a text-to-video model; above z the
 * image-to-video conditioning channels after x_t's); the forked roles inherit it. */
static int in_dim_case;

static vf_dit_config cfg(void)
{
    vf_dit_config c = small_cfg();
    c.heads = 6, c.head_dim = 8, c.dim = 48; /* sp = 2, 3 divide the heads */
    if (in_dim_case) c.in_dim = in_dim_case;
    return c;
}

static int64_t al64(int64_t b) { return (b + 63) / 64 * 64; }

/* What a rank of n allocates against vf_dit_part_memory_sp, and against an independent
 * count of what divides by n: one rank's partition made for ⌈L/n⌉ tokens a sample. */
static int check_memory(int n, vf_dit_dims d, const vf_dit_part *p, const vf_dit_saved *sv, vf_status *st)
{
    vf_dit_config c = cfg();
    vf_dit_mem m;
    vf_dit_part_memory_sp(&c, 0, c.depth, &d, n, VF_DIT_KEEP, 4, 4, &m);
    if ((int64_t)vf_dit_saved_bytes(sv) != m.saved || (int64_t)vf_dit_part_workspace_bytes(p) != m.workspace ||
        (int64_t)vf_dit_part_ends_bytes(p) != m.ends)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "sp=%d: allocated saved %zu, workspace %zu, ends "
                             "%zu; planned %lld, %lld, %lld", n, vf_dit_saved_bytes(sv), vf_dit_part_workspace_bytes(p),
                             vf_dit_part_ends_bytes(p), (long long)m.saved, (long long)m.workspace, (long long)m.ends);
    if (n < 2) return 0;
    /* the reference: one rank's partition made for ⌈L/n⌉ tokens a sample, less what a rank
     * holds not at all (the latent-shaped prediction of a last partition, the patchify
     * staging, which moves to the ends); the ends of a first partition: the whole clips'
     * patchify, its staging and its output. Whole model, first and last partition alone. */
    vf_dit_dims r = d;
    r.L = (d.L + n - 1) / n;
    int64_t P = (int64_t)c.patch[0] * c.patch[1] * c.patch[2], in = vf_dit_in_dim(&c);
    int64_t pz_r = al64(d.B * r.L * c.z * P * 4);                       /* a rank's prediction */
    int64_t pi_r = al64(d.B * r.L * in * P * 4), pi_w = al64(d.B * d.L * in * P * 4); /* patches */
    bool xin = in > c.z; /* x_t and cond concatenated: saved with one rank, in the ends with sp */
    static const int ranges[3][2] = {{0, -1}, {0, 1}, {1, -1}};
    for (int k = 0; k < 3; k++) {
        int b0 = ranges[k][0], b1 = ranges[k][1] < 0 ? c.depth : ranges[k][1];
        bool first = b0 == 0, last = b1 == c.depth;
        vf_dit_mem mk, one;
        vf_dit_part_memory_sp(&c, b0, b1, &d, n, VF_DIT_KEEP, 4, 4, &mk);
        vf_dit_part_memory(&c, b0, b1, &r, VF_DIT_KEEP, 4, 4, &one);
        int64_t saved = one.saved - (last ? pz_r : 0) - (first && xin ? pi_r : 0);
        int64_t ws = one.workspace - (first ? pi_r : last ? pz_r : 0), ends = first ? (xin ? 3 : 2) * pi_w : 0;
        if (mk.saved != saved || mk.workspace != ws || mk.ends != ends)
            return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "sp=%d over %lld tokens, blocks [%d, %d): a rank "
                                 "holds saved %lld, workspace %lld, ends %lld; want %lld, %lld, %lld (one rank of %lld "
                                 "tokens: saved %lld, workspace %lld)", n, (long long)d.L, b0, b1, (long long)mk.saved,
                                 (long long)mk.workspace, (long long)mk.ends, (long long)saved, (long long)ws,
                                 (long long)ends, (long long)r.L, (long long)one.saved, (long long)one.workspace);
    }
    return 0;
}

/* role 0: one rank over the whole sequence; role 1 + r: rank r of n. */
static void role_main(shared_out *so, int role, int n, vf_dit_dims d, const char *key)
{
    vf_status st = {0};
    vf_dit_config c = cfg();
    vf_dit_layout *l = NULL;
    vf_dit_part *p = NULL;
    vf_dit_saved *sv = NULL;
    vf_a2a *a = NULL;
    vf_dit_sp sp;
    float *params = NULL, *grads = NULL, *rows = NULL;
    mb m;
    memset(&m, 0, sizeof m);
    int rc = vf_dit_layout_new(&c, &l, &st);
    int r = role - 1;
    if (!rc && role > 0) {
        vf_a2a_opts o = {.timeout_ms = 60000};
        rc = vf_a2a_open(key, n, r, vf_dit_sp_chunk_bytes(n, d.L, d.B, &c, sizeof(float)), &o, &a, &st);
        if (!rc) rc = vf_dit_sp_init(&sp, a, n, r, d.L, c.heads, &st);
    }
    if (!rc && l->total > CAP) rc = vf_status_set(&st, VF_EINVAL, __FILE__, __LINE__, "model too large");
    if (!rc) {
        params = random_params(l, 5);
        grads = calloc((size_t)l->total, sizeof(float));
        rc = vf_dit_part_new_sp(vf_backend_cpu(), l, 0, c.depth, &d, role > 0 ? n : 1, VF_DIT_KEEP, params, grads,
                                &p, &st);
        if (!rc && role > 0) rc = vf_dit_part_set_sp(p, &sp, &st);
        if (!rc) rc = vf_dit_saved_new(p, &sv, &st);
        if (!rc) rc = check_memory(role > 0 ? n : 1, d, p, sv, &st);
    }
    if (!rc) {
        mb_make(&m, &c, d, 9, 0);
        if (role > 0) { /* a rank's targets: its rows, in the head's order */
            int64_t zP = (int64_t)c.z * c.patch[0] * c.patch[1] * c.patch[2];
            rows = malloc(sizeof(float) * (size_t)(d.B * sp.Lr * zP));
            if (rows) vf_dit_sp_target_rows(&c, &sp, &d, m.target, rows);
            else rc = vf_status_set(&st, VF_ENOMEM, __FILE__, __LINE__, "no memory for the target rows");
            m.b.target = rows;
            m.b.dims.L = sp.Lr;
        }
    }
    if (!rc) {
        rc = vf_dit_part_forward(p, &m.b, NULL, NULL, sv, &st);
        if (!rc) rc = vf_dit_part_loss(p, &m.b, sv, 0.5f, &so->loss[role], &st);
        if (!rc) rc = vf_dit_part_backward(p, &m.b, sv, NULL, &st);
        if (!rc) memcpy(so->g[role], grads, sizeof(float) * (size_t)l->total);
    }
    so->rc[role] = rc;
    snprintf(so->msg[role], sizeof so->msg[role], "%.500s", st.msg);
    mb_free(&m);
    vf_dit_saved_free(sv);
    vf_dit_part_free(p);
    vf_a2a_close(a);
    vf_dit_layout_free(l);
    free(params), free(grads), free(rows);
}

static shared_out *run_case(int n, int B, int T, int H, int W, int in_dim)
{
    in_dim_case = in_dim;
    vf_dit_config c = cfg();
    vf_dit_dims d = vf_dit_dims_of(&c, B, T, H, W);
    shared_out *so = mmap(NULL, sizeof *so, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    VF_CHECK(so != MAP_FAILED);
    if (so == MAP_FAILED) return NULL;
    char key[96];
    snprintf(key, sizeof key, "test_dit_sp_ends/%ld/%d/%lld/%d", (long)getpid(), n, (long long)d.L, in_dim);
    pid_t kids[ROLES];
    fflush(NULL);
    for (int role = 0; role <= n; role++) {
        kids[role] = fork();
        if (kids[role] == 0) {
            role_main(so, role, n, d, key);
            _exit(0);
        }
    }
    for (int role = 0; role <= n; role++) {
        int ws = 0;
        waitpid(kids[role], &ws, 0);
        VF_CHECK_MSG(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "sp=%d L=%lld: process %d died", n, (long long)d.L,
                     role);
        VF_CHECK_MSG(so->rc[role] == 0, "sp=%d L=%lld role %d: %s", n, (long long)d.L, role, so->msg[role]);
    }
    vf_dit_layout *l = NULL;
    vf_status st = {0};
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    int64_t total = l->total;
    vf_dit_layout_free(l);
    double ls = 0;
    for (int r = 0; r < n; r++) ls += so->loss[1 + r];
    VF_CHECK_MSG(fabs(ls - so->loss[0]) <= 1e-6 * fabs(so->loss[0]), "sp=%d L=%lld: the ranks' losses add up to %.9g, "
                 "one rank's is %.9g", n, (long long)d.L, ls, so->loss[0]);
    double mx = 0;
    int64_t bad = 0, nonzero = 0;
    for (int64_t i = 0; i < total; i++) {
        mx = fmax(mx, fabs(so->g[0][i]));
        bad += memcmp(&so->g[n][i], &so->g[0][i], sizeof(float)) != 0;
        for (int r = 0; r + 1 < n; r++) nonzero += so->g[1 + r][i] != 0.0f;
    }
    VF_CHECK_MSG(mx > 0 && bad == 0 && nonzero == 0,
                 "sp=%d L=%lld: %lld weight gradients of the last rank differ from one rank's, %lld of the other "
                 "ranks' are not zero",
                 n, (long long)d.L, (long long)bad, (long long)nonzero);
    return so;
}

VF_TEST(whole_model_matches_one_rank)
{
    /* the patch (1, 2, 2): (2, 4, 6) makes 12 tokens a sample, (3, 2, 2) makes 3, (1, 4, 10)
     * 10; the last case with 5 image-to-video conditioning channels (in_dim 9, z 4) */
    static const int cases[][6] = {{2, 2, 2, 4, 6, 0}, {3, 2, 2, 4, 6, 0}, {2, 3, 3, 2, 2, 0},
                                   {3, 3, 3, 2, 2, 0}, {3, 1, 1, 4, 10, 0}, {3, 2, 1, 4, 10, 9}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        shared_out *so = run_case(cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4], cases[i][5]);
        if (so) munmap(so, sizeof *so);
    }
}

/* Every rank's loss and partial gradients are the same bits run after run. */
VF_TEST(each_rank_is_deterministic)
{
    shared_out *a = run_case(3, 2, 1, 4, 10, 0), *b = run_case(3, 2, 1, 4, 10, 0);
    VF_CHECK(a && b);
    if (a && b)
        for (int role = 1; role <= 3; role++)
            VF_CHECK(memcmp(a->g[role], b->g[role], sizeof a->g[role]) == 0 && a->loss[role] == b->loss[role]);
    if (a) munmap(a, sizeof *a);
    if (b) munmap(b, sizeof *b);
}

int main(void) { return vf_test_main(); }
