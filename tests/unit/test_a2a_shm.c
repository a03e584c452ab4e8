/* test_a2a_shm.c — the all-to-all of processes over shared memory (vflow.h "all-to-all
 * among ranks", runtime/edge/a2a_shm.c).
 *
 * The ranks are forked processes; rank 0 is this one. Checked:
 *   - for 1, 2, 3 and 4 ranks, over rounds of varying chunk sizes (odd ones, 0, the
 *     largest), every rank receives from each rank i exactly the bytes i meant for it: a
 *     pattern of (round, sender, receiver, offset) computed here, not by the collective;
 *     in place (send = recv) too;
 *   - a tokens <-> heads exchange: ranks holding contiguous token ranges of an (L, H, d)
 *     tensor end up with all L tokens of their H/N heads, compared with the slice taken
 *     from the whole tensor;
 *   - ranks that disagree on the chunk size of a call fail with VF_EINVAL naming both;
 *   - a rank that exits without calling, or closes, makes rank 0's call fail (not hang),
 *     naming it; a rank that is alive but never calls makes it time out (VF_ETIMEOUT);
 *   - the cancel test stops a wait; bad arguments are refused;
 *   - nothing is left in /dev/shm once the ranks are gone.
 */
#include "runtime/vflow.h"
#include "tests/vf_test.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 6
#define CMAX 4099

static unsigned char pat(int round, int from, int to, size_t i)
{
    return (unsigned char)(round * 131 + from * 37 + to * 11 + i * 7 + (i >> 8));
}

static size_t chunk_of(int round)
{
    static const size_t c[ROUNDS] = {1, 4099, 0, 64, 1000, 3};
    return c[round];
}

static void key_of(char *key, size_t n, const char *what)
{
    snprintf(key, n, "test_a2a_shm/%ld/%s", (long)getpid(), what);
}

/* Rounds of the pattern exchange as `rank`; the number of wrong bytes, or -1 on an error. */
static long pattern_rank(const char *key, int n, int rank, bool in_place)
{
    vf_status st = {0};
    vf_a2a *a = NULL;
    if (vf_a2a_open(key, n, rank, CMAX, NULL, &a, &st)) {
        fprintf(stderr, "rank %d: %s\n", rank, st.msg);
        return -1;
    }
    unsigned char *s = malloc((size_t)n * CMAX), *r = malloc((size_t)n * CMAX);
    long bad = 0;
    for (int k = 0; k < ROUNDS; k++) {
        size_t c = chunk_of(k);
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < c; i++) s[(size_t)j * c + i] = pat(k, rank, j, i);
        memset(r, 0xEE, (size_t)n * CMAX);
        unsigned char *dst = in_place ? s : r;
        if (vf_a2a_run(a, s, dst, c, &st)) {
            fprintf(stderr, "rank %d round %d: %s\n", rank, k, st.msg);
            bad = -1;
            break;
        }
        for (int i = 0; i < n; i++)
            for (size_t b = 0; b < c; b++) bad += dst[(size_t)i * c + b] != pat(k, i, rank, b);
    }
    free(s), free(r);
    vf_a2a_close(a);
    return bad;
}

/* Forks ranks 1..n-1 running fn(key, n, rank, arg) (their exit code: 0 when it returned
 * 0), runs rank 0 here and returns its result; *kids_ok says whether all children
 * exited 0. */
typedef long (*rank_fn)(const char *key, int n, int rank, long arg);

static long run_ranks(const char *key, int n, rank_fn fn, long arg, bool *kids_ok)
{
    pid_t kids[8];
    fflush(NULL);
    for (int r = 1; r < n; r++) {
        kids[r] = fork();
        if (kids[r] == 0) _exit(fn(key, n, r, arg) == 0 ? 0 : 1);
    }
    long res = fn(key, n, 0, arg);
    *kids_ok = true;
    for (int r = 1; r < n; r++) {
        int ws = 0;
        waitpid(kids[r], &ws, 0);
        *kids_ok = *kids_ok && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    }
    return res;
}

static long pattern_fn(const char *key, int n, int rank, long in_place)
{
    return pattern_rank(key, n, rank, in_place != 0);
}

static int shm_left(void)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "vflow-a2a-%u-", (unsigned)getuid());
    DIR *d = opendir("/dev/shm");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return n;
}

VF_TEST(exchange_matches_pattern)
{
    int before = shm_left();
    for (int n = 1; n <= 4; n++) {
        for (int in_place = 0; in_place < 2; in_place++) {
            char key[128];
            key_of(key, sizeof key, in_place ? "pattern-inplace" : "pattern");
            bool ok = false;
            long bad = run_ranks(key, n, pattern_fn, in_place, &ok);
            VF_CHECK_MSG(bad == 0 && ok, "%d ranks%s: rank 0 %ld wrong bytes, others %s", n,
                         in_place ? " in place" : "", bad, ok ? "fine" : "failed");
        }
    }
    VF_CHECK_EQ_INT(shm_left(), before);
}

/* x[l][h][c] of the whole (L, H, DH) tensor. */
#define L 10
#define H 6
#define DH 5
static float xval(int l, int h, int c) { return (float)(l * 1000 + h * 10 + c); }

/* Rank r of n (n divides L and H): its L/n tokens of all heads, packed per destination
 * rank (head group), exchanged, then checked as all L tokens of its H/n heads. */
static long heads_fn(const char *key, int n, int rank, long unused)
{
    (void)unused;
    int lt = L / n, hg = H / n;
    size_t chunk = sizeof(float) * (size_t)lt * hg * DH;
    float *s = malloc(chunk * (size_t)n), *r = malloc(chunk * (size_t)n);
    for (int j = 0; j < n; j++) /* to rank j: my tokens, heads [j·hg, (j+1)·hg) */
        for (int l = 0; l < lt; l++)
            for (int h = 0; h < hg; h++)
                for (int c = 0; c < DH; c++)
                    s[(((size_t)j * lt + l) * hg + h) * DH + c] = xval(rank * lt + l, j * hg + h, c);
    vf_status st = {0};
    vf_a2a *a = NULL;
    long bad = -1;
    if (vf_a2a_open(key, n, rank, chunk, NULL, &a, &st) == 0 && vf_a2a_run(a, s, r, chunk, &st) == 0) {
        bad = 0; /* chunk i holds tokens [i·lt, (i+1)·lt): in order, all L of them */
        for (int l = 0; l < L; l++)
            for (int h = 0; h < hg; h++)
                for (int c = 0; c < DH; c++) bad += r[((size_t)l * hg + h) * DH + c] != xval(l, rank * hg + h, c);
    } else {
        fprintf(stderr, "rank %d: %s\n", rank, st.msg);
    }
    vf_a2a_close(a);
    free(s), free(r);
    return bad;
}

VF_TEST(tokens_to_heads)
{
    for (int n = 1; n <= 2; n++) {
        char key[128];
        key_of(key, sizeof key, "heads");
        bool ok = false;
        long bad = run_ranks(key, n, heads_fn, 0, &ok);
        VF_CHECK_MSG(bad == 0 && ok, "%d ranks: %ld wrong values", n, bad);
    }
}

/* Rank 1 sends chunks one byte larger than the others'. */
static long mismatch_fn(const char *key, int n, int rank, long unused)
{
    (void)unused;
    vf_status st = {0};
    vf_a2a *a = NULL;
    unsigned char buf[2 * 64] = {0};
    long rc = vf_a2a_open(key, n, rank, 64, NULL, &a, &st);
    if (!rc) rc = vf_a2a_run(a, buf, buf, rank == 1 ? 33 : 32, &st);
    vf_a2a_close(a);
    bool named = strstr(st.msg, "33 bytes") && strstr(st.msg, "of 32") ? true
                 : strstr(st.msg, "of 33") && strstr(st.msg, "32 bytes");
    if (rank == 0 && rc != VF_EINVAL) fprintf(stderr, "rank 0: rc %ld: %s\n", rc, st.msg);
    return rc == VF_EINVAL && named ? 0 : 1;
}

VF_TEST(chunk_mismatch_names_both)
{
    char key[128];
    key_of(key, sizeof key, "mismatch");
    bool ok = false;
    long res = run_ranks(key, 2, mismatch_fn, 0, &ok);
    VF_CHECK_EQ_INT(res, 0);
    VF_CHECK(ok);
}

/* arg 0: rank 1 exits right after opening; 1: it closes and lingers; 2: it sleeps past
 * rank 0's deadline. Rank 0 calls once with a 2 s timeout and returns the code. */
static long absent_fn(const char *key, int n, int rank, long how)
{
    vf_status st = {0};
    vf_a2a *a = NULL;
    vf_a2a_opts o = {.timeout_ms = 2000};
    if (vf_a2a_open(key, n, rank, 16, &o, &a, &st)) return -100;
    if (rank == 1) {
        if (how == 0) _exit(0);
        if (how == 1) vf_a2a_close(a), a = NULL;
        usleep(how == 2 ? 5000000 : 500000); /* past the 2 s deadline with a margin for a loaded machine */
        vf_a2a_close(a);
        return 0;
    }
    unsigned char buf[32] = {0};
    long rc = vf_a2a_run(a, buf, buf, 16, &st);
    if (rc != VF_ETIMEOUT && !strstr(st.msg, "rank 1")) rc = -200;
    vf_a2a_close(a);
    return rc;
}

VF_TEST(absent_rank_fails_not_hangs)
{
    static const int want[3] = {VF_ESTOPPED, VF_ESTOPPED, VF_ETIMEOUT};
    for (int how = 0; how < 3; how++) {
        char key[128];
        key_of(key, sizeof key, "absent");
        bool ok = false;
        long rc = run_ranks(key, 2, absent_fn, how, &ok);
        VF_CHECK_MSG(rc == want[how], "case %d: rc %ld", how, rc);
    }
}

static bool always(void *user)
{
    (void)user;
    return true;
}

VF_TEST(cancel_and_bad_arguments)
{
    vf_status st = {0};
    vf_a2a *a = NULL;
    char key[128];
    key_of(key, sizeof key, "cancel");
    /* rank 1 of 2 with no rank 0: cancelled while it waits for the group to exist */
    vf_a2a_opts o = {.timeout_ms = 5000, .cancel = always};
    VF_CHECK_EQ_INT(vf_a2a_open(key, 2, 1, 16, &o, &a, &st), VF_ESTOPPED);
    VF_CHECK(a == NULL);
    st = (vf_status){0};
    VF_CHECK_EQ_INT(vf_a2a_open(key, 2, 2, 16, NULL, &a, &st), VF_EINVAL);
    VF_CHECK(strstr(st.msg, "rank 2 of 2") != NULL);
    st = (vf_status){0};
    VF_CHECK_EQ_INT(vf_a2a_open(key, 0, 0, 16, NULL, &a, &st), VF_EINVAL);
    st = (vf_status){0};
    VF_CHECK_EQ_INT(vf_a2a_open("", 1, 0, 16, NULL, &a, &st), VF_EINVAL);
    st = (vf_status){0};
    VF_CHECK_EQ_INT(vf_a2a_open(key, 1, 0, 16, NULL, &a, &st), 0);
    unsigned char buf[128];
    VF_CHECK_EQ_INT(vf_a2a_run(a, buf, buf, 65, &st), VF_EINVAL);
    VF_CHECK(strstr(st.msg, "65 bytes") != NULL);
    vf_a2a_close(a);
}

int main(void) { return vf_test_main(); }
