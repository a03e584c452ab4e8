/* test_lmdb_store.c — the LMDB helper: round trip, skip of existing keys, map growth
 * from a tiny map (with a summary record updated inside the retried txn), the growth
 * ceiling, stale reader slots of a killed process, MDB_MAP_RESIZED seen by a reader
 * while another process grows the map, and error messages. */
#include "formats/lmdb_store.h"
#include "tests/vf_test.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[256];

static const char *dbpath(const char *name, char *buf, size_t n)
{
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/vf_lmdb_test.XXXXXX");
        VF_CHECK(mkdtemp(root) != NULL);
    }
    snprintf(buf, n, "%s/%s", root, name);
    return buf;
}

static void key_of(int i, char k[17]) { snprintf(k, 17, "key-%012d", i); }

static void fill_val(int i, unsigned char *v, size_t n)
{
    for (size_t j = 0; j < n; j++) v[j] = (unsigned char)(i * 31 + j * 7);
}

VF_TEST(round_trip_and_skip)
{
    char p[512];
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *db = NULL;
    VF_CHECK_EQ_INT(vf_lmdb_open(dbpath("rt/nested.lmdb", p, sizeof p), NULL, &db, &st), 0);
    VF_CHECK_MSG(db != NULL, "%s", st.msg);
    if (!db) return;
    vf_lmdb_batch *b = vf_lmdb_batch_new(&st);
    unsigned char v[300];
    for (int i = 0; i < 100; i++) {
        char k[17];
        key_of(i, k);
        fill_val(i, v, sizeof v);
        VF_CHECK_EQ_INT(vf_lmdb_batch_put(b, k, 16, v, (size_t)(i + 1), &st), 0);
    }
    VF_CHECK_EQ_INT(vf_lmdb_batch_count(b), 100);
    int nw = -1, ne = -1;
    VF_CHECK_EQ_INT(vf_lmdb_batch_commit(db, b, NULL, NULL, &nw, &ne, &st), 0);
    VF_CHECK_EQ_INT(nw, 100);
    VF_CHECK_EQ_INT(ne, 0);
    VF_CHECK_EQ_INT(vf_lmdb_batch_count(b), 0);
    /* rerun: half old, half new */
    for (int i = 50; i < 150; i++) {
        char k[17];
        key_of(i, k);
        fill_val(i, v, sizeof v);
        VF_CHECK_EQ_INT(vf_lmdb_batch_put(b, k, 16, v, (size_t)(i % 300 + 1), &st), 0);
    }
    VF_CHECK_EQ_INT(vf_lmdb_batch_commit(db, b, NULL, NULL, &nw, &ne, &st), 0);
    VF_CHECK_EQ_INT(nw, 50);
    VF_CHECK_EQ_INT(ne, 50);
    size_t n = 0;
    VF_CHECK_EQ_INT(vf_lmdb_count(db, &n, &st), 0);
    VF_CHECK_EQ_INT(n, 150);
    MDB_txn *txn = NULL;
    VF_CHECK_EQ_INT(vf_lmdb_read_begin(db, &txn, &st), 0);
    bool all = true;
    for (int i = 0; i < 150 && txn; i++) {
        char k[17];
        MDB_val got;
        key_of(i, k);
        fill_val(i, v, sizeof v);
        all &= vf_lmdb_get(db, txn, k, 16, &got, &st) == 0 && got.mv_size == (size_t)(i + 1) &&
               !memcmp(got.mv_data, v, got.mv_size);
    }
    VF_CHECK(all);
    MDB_val none;
    VF_CHECK_EQ_INT(vf_lmdb_get(db, txn, "nope", 4, &none, &st), VF_ENOTFOUND);
    VF_CHECK_EQ_INT(st.code, 0);
    if (txn) mdb_txn_abort(txn);
    bool ex = false;
    VF_CHECK_EQ_INT(vf_lmdb_exists(db, "key-000000000007", 16, &ex, &st), 0);
    VF_CHECK(ex);
    VF_CHECK_EQ_INT(vf_lmdb_exists(db, "key-000000000700", 16, &ex, &st), 0);
    VF_CHECK(!ex);
    vf_lmdb_batch_free(b);
    vf_lmdb_close(db);
    /* read-only reopen sees the same */
    vf_lmdb_opts ro = {.readonly = true};
    VF_CHECK_EQ_INT(vf_lmdb_open(p, &ro, &db, &st), 0);
    VF_CHECK_EQ_INT(vf_lmdb_count(db, &n, &st), 0);
    VF_CHECK_EQ_INT(n, 150);
    b = vf_lmdb_batch_new(&st);
    vf_lmdb_batch_put(b, "x", 1, "y", 1, &st);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_lmdb_batch_commit(db, b, NULL, NULL, NULL, NULL, &st), VF_EINVAL);
    vf_lmdb_batch_free(b);
    vf_lmdb_close(db);
}

/* Summary record "__n__" = number of entries stored so far, updated in the txn. */
static int count_fn(void *user, vf_lmdb *db, MDB_txn *txn, const vf_lmdb_batch *b,
                    const unsigned char *written, vf_status *st)
{
    int *calls = user;
    (*calls)++;
    MDB_val v;
    long n = 0;
    int rc = vf_lmdb_get(db, txn, "__n__", 5, &v, st);
    if (rc == 0) memcpy(&n, v.mv_data, sizeof n);
    else if (rc != VF_ENOTFOUND) return rc;
    for (int i = 0; i < vf_lmdb_batch_count(b); i++) n += written[i];
    /* large enough that its own put sometimes hits MAP_FULL (a retry after fn ran) */
    static unsigned char rec[24000];
    memcpy(rec, &n, sizeof n);
    return vf_lmdb_put(db, txn, "__n__", 5, rec, sizeof rec, 0, st);
}

VF_TEST(map_growth_from_tiny_map)
{
    char p[512];
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *db = NULL;
    vf_lmdb_opts o = {.map_size = 32 << 10};
    VF_CHECK_EQ_INT(vf_lmdb_open(dbpath("grow", p, sizeof p), &o, &db, &st), 0);
    if (!db) { fprintf(stderr, "%s\n", st.msg); return; }
    size_t first = vf_lmdb_map_size(db);
    VF_CHECK(first <= (64 << 10));
    vf_lmdb_batch *b = vf_lmdb_batch_new(&st);
    static unsigned char v[10000];
    int calls = 0;
    for (int i = 0; i < 300; i++) {
        char k[17];
        key_of(i, k);
        fill_val(i, v, sizeof v);
        void *dst;
        VF_CHECK_EQ_INT(vf_lmdb_batch_reserve(b, k, 16, sizeof v, &dst, &st), 0);
        VF_CHECK(((uintptr_t)dst & 63) == 0);
        memcpy(dst, v, sizeof v);
        if (vf_lmdb_batch_count(b) == 20) {
            int rc = vf_lmdb_batch_commit(db, b, count_fn, &calls, NULL, NULL, &st);
            VF_CHECK_MSG(rc == 0, "%s", st.msg);
        }
    }
    VF_CHECK(vf_lmdb_growths(db) >= 5);
    VF_CHECK(calls > 15); /* 15 commits, some retried after growth */
    VF_CHECK(vf_lmdb_map_size(db) >= 3000000);
    fprintf(stderr, "map %zu -> %zu after %d growths, %d callback runs for 15 commits\n", first,
            vf_lmdb_map_size(db), vf_lmdb_growths(db), calls);
    MDB_txn *txn = NULL;
    VF_CHECK_EQ_INT(vf_lmdb_read_begin(db, &txn, &st), 0);
    MDB_val got;
    bool all = true;
    for (int i = 0; i < 300 && txn; i++) {
        char k[17];
        key_of(i, k);
        fill_val(i, v, sizeof v);
        all &= vf_lmdb_get(db, txn, k, 16, &got, &st) == 0 && got.mv_size == sizeof v &&
               !memcmp(got.mv_data, v, sizeof v);
    }
    VF_CHECK(all);
    long n = 0;
    VF_CHECK_EQ_INT(vf_lmdb_get(db, txn, "__n__", 5, &got, &st), 0);
    memcpy(&n, got.mv_data, sizeof n);
    VF_CHECK_EQ_INT(n, 300); /* the retried callbacks did not double count */
    if (txn) mdb_txn_abort(txn);
    vf_lmdb_batch_free(b);
    vf_lmdb_close(db);
}

VF_TEST(growth_ceiling)
{
    char p[512];
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *db = NULL;
    vf_lmdb_opts o = {.map_size = 64 << 10, .max_map_size = 256 << 10};
    VF_CHECK_EQ_INT(vf_lmdb_open(dbpath("ceiling", p, sizeof p), &o, &db, &st), 0);
    if (!db) return;
    vf_lmdb_batch *b = vf_lmdb_batch_new(&st);
    static unsigned char v[100000];
    for (int i = 0; i < 5; i++) {
        char k[17];
        key_of(i, k);
        vf_lmdb_batch_put(b, k, 16, v, sizeof v, &st);
    }
    VF_CHECK_EQ_INT(vf_lmdb_batch_commit(db, b, NULL, NULL, NULL, NULL, &st), VF_EIO);
    VF_CHECK_MSG(strstr(st.msg, p) && strstr(st.msg, "map full"), "%s", st.msg);
    VF_CHECK_EQ_INT(vf_lmdb_batch_count(b), 5); /* kept for the caller */
    size_t n = 1;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_lmdb_count(db, &n, &st), 0);
    VF_CHECK_EQ_INT(n, 0); /* nothing of the failed batch stored */
    vf_lmdb_batch_free(b);
    vf_lmdb_close(db);
}

VF_TEST(stale_reader_cleared)
{
    char p[512];
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *db = NULL;
    /* this process keeps the env open: LMDB resets the reader table itself when the
     * first process opens an env, so a stale slot only survives next to a live user */
    VF_CHECK_EQ_INT(vf_lmdb_open(dbpath("stale", p, sizeof p), NULL, &db, &st), 0);
    pid_t pid = fork();
    if (pid == 0) { /* a reader that dies holding a read txn */
        vf_lmdb_opts ro = {.readonly = true};
        vf_lmdb *r = NULL;
        MDB_txn *t = NULL;
        vf_status s2;
        vf_status_clear(&s2);
        if (vf_lmdb_open(p, &ro, &r, &s2) || vf_lmdb_read_begin(r, &t, &s2)) _exit(3);
        kill(getpid(), SIGKILL);
        _exit(4);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    VF_CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    pid = fork();
    if (pid == 0) { /* the next process to open reports the slot it cleared */
        vf_lmdb_opts ro = {.readonly = true};
        vf_lmdb *r = NULL;
        vf_status s2;
        vf_status_clear(&s2);
        if (vf_lmdb_open(p, &ro, &r, &s2)) _exit(99);
        _exit(vf_lmdb_stale_readers(r));
    }
    waitpid(pid, &ws, 0);
    VF_CHECK(WIFEXITED(ws));
    VF_CHECK_EQ_INT(WEXITSTATUS(ws), 1);
    vf_lmdb_close(db);
}

VF_TEST(reader_sees_map_resized)
{
    char p[512];
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *db = NULL;
    vf_lmdb_opts o = {.map_size = 64 << 10};
    VF_CHECK_EQ_INT(vf_lmdb_open(dbpath("resized", p, sizeof p), &o, &db, &st), 0);
    vf_lmdb_batch *b = vf_lmdb_batch_new(&st);
    vf_lmdb_batch_put(b, "a", 1, "1", 1, &st);
    VF_CHECK_EQ_INT(vf_lmdb_batch_commit(db, b, NULL, NULL, NULL, NULL, &st), 0);
    vf_lmdb_batch_free(b);
    vf_lmdb_close(db);
    vf_lmdb_opts ro = {.readonly = true};
    VF_CHECK_EQ_INT(vf_lmdb_open(p, &ro, &db, &st), 0);
    if (!db) return;
    size_t before = vf_lmdb_map_size(db);
    pid_t pid = fork();
    if (pid == 0) { /* another process: the writer grows the map (never touches db) */
        vf_lmdb *w = NULL;
        vf_status s2;
        vf_status_clear(&s2);
        vf_lmdb_opts wo = {.map_size = 64 << 10};
        if (vf_lmdb_open(p, &wo, &w, &s2)) _exit(3);
        vf_lmdb_batch *wb = vf_lmdb_batch_new(&s2);
        static unsigned char v[50000];
        for (int i = 0; i < 40; i++) {
            char k[17];
            key_of(i, k);
            vf_lmdb_batch_put(wb, k, 16, v, sizeof v, &s2);
        }
        if (vf_lmdb_batch_commit(w, wb, NULL, NULL, NULL, NULL, &s2)) _exit(4);
        _exit(vf_lmdb_growths(w) > 0 ? 0 : 5);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    VF_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    MDB_txn *txn = NULL;
    VF_CHECK_EQ_INT(vf_lmdb_read_begin(db, &txn, &st), 0);
    VF_CHECK_MSG(vf_lmdb_map_size(db) > before, "map %zu -> %zu", before, vf_lmdb_map_size(db));
    MDB_val got;
    VF_CHECK_EQ_INT(txn ? vf_lmdb_get(db, txn, "key-000000000039", 16, &got, &st) : -1, 0);
    if (txn) mdb_txn_abort(txn);
    vf_lmdb_close(db);
}

VF_TEST(errors_name_path_and_key)
{
    char p[512];
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *db = NULL;
    vf_lmdb_opts ro = {.readonly = true};
    VF_CHECK_EQ_INT(vf_lmdb_open(dbpath("absent", p, sizeof p), &ro, &db, &st), VF_ENOTFOUND);
    VF_CHECK(strstr(st.msg, p) != NULL);
    FILE *f = fopen(dbpath("plainfile", p, sizeof p), "w");
    fclose(f);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_lmdb_open(p, NULL, &db, &st), VF_EINVAL);
    VF_CHECK(strstr(st.msg, "not a directory") != NULL);
    vf_status_clear(&st);
    int rc = vf_lmdb_status(&st, MDB_CORRUPTED, "x.c", 7, "/c/l.lmdb", "mdb_get(...)", "k\x01\"", 3);
    VF_CHECK_EQ_INT(rc, VF_ECORRUPT);
    VF_CHECK_MSG(strstr(st.msg, "/c/l.lmdb: mdb_get: ") && strstr(st.msg, "(key \"k\\x01\\x22\")"),
                 "%s", st.msg);
    VF_CHECK_EQ_INT(st.line, 7);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_lmdb_status(&st, ENOSPC, "x.c", 1, "p", "mdb_txn_commit(txn)", NULL, 0), VF_EIO);
    VF_CHECK_STR(st.msg, "p: mdb_txn_commit: no space left on device");
    /* EIO is LMDB's short write: on a file system with room it stays an I/O error */
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_lmdb_status(&st, EIO, "x.c", 1, "/", "mdb_txn_commit(txn)", NULL, 0), VF_EIO);
    VF_CHECK_MSG(strstr(st.msg, "/: mdb_txn_commit: ") && !strstr(st.msg, "no space"), "%s", st.msg);
}

VF_TEST(one_env_per_process)
{
    char p[512], p2[600];
    vf_status st;
    vf_status_clear(&st);
    vf_lmdb *a = NULL, *b = NULL, *c = NULL;
    VF_CHECK_EQ_INT(vf_lmdb_open(dbpath("shared", p, sizeof p), NULL, &a, &st), 0);
    snprintf(p2, sizeof p2, "%s/../shared/", p); /* another spelling of the same dir */
    vf_lmdb_opts ro = {.readonly = true};
    VF_CHECK_EQ_INT(vf_lmdb_open(p2, &ro, &b, &st), 0);
    VF_CHECK(a && a == b);
    vf_lmdb_close(a);
    size_t n;
    VF_CHECK_EQ_INT(vf_lmdb_count(b, &n, &st), 0); /* still open: one reference left */
    vf_lmdb_close(b);
    /* read-only first, then a writer: refused */
    VF_CHECK_EQ_INT(vf_lmdb_open(p, &ro, &b, &st), 0);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_lmdb_open(p, NULL, &c, &st), VF_EINVAL);
    VF_CHECK(strstr(st.msg, "read-only") != NULL);
    vf_lmdb_close(b);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_lmdb_open(p, NULL, &c, &st), 0); /* closed: a writer may open now */
    vf_lmdb_close(c);
}

VF_TEST(cleanup)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (root[0]) VF_CHECK(system(cmd) == 0);
}

int main(void) { return vf_test_main(); }
