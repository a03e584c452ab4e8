/* test_driver_parts.c — the driver's pieces on their own: stage registry, text helpers,
 * run dir (incl. the sun_path fallback), control-plane framing, metrics rows, progress
 * line, and the context's quarantine / gauges. The whole driver runs in the integration
 * tests (tests/integration/test_run_*.sh). */
#include "tests/vf_test.h"

#include "runtime/driver/ctl.h"
#include "runtime/graph/graph.h"
#include "runtime/json.h"
#include "runtime/driver/metrics.h"
#include "runtime/core/obuf.h"
#include "runtime/core/params.h"
#include "runtime/driver/progress.h"
#include "runtime/driver/rundir.h"
#include "runtime/core/stage.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t r = fread(s, 1, (size_t)n, f);
    s[r] = 0;
    fclose(f);
    return s;
}

/* The temp dirs of this run, removed at exit (each run used to leave three behind). */
static char g_tmp[8][64];
static int g_ntmp;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    remove(path); /* best effort: keep going */
    return 0;
}

static void rm_tmpdirs(void)
{
    for (int i = 0; i < g_ntmp; i++) nftw(g_tmp[i], rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void tmpdir(char *buf, size_t n)
{
    snprintf(buf, n, "/tmp/vf_driver_parts_XXXXXX");
    VF_CHECK(mkdtemp(buf) != NULL);
    if (g_ntmp == 0) atexit(rm_tmpdirs);
    if (g_ntmp < 8) snprintf(g_tmp[g_ntmp++], sizeof g_tmp[0], "%s", buf);
}

VF_TEST(registry_has_generic_stages_sorted)
{
    VF_CHECK(vf_stage_lookup("synthetic") != NULL);
    VF_CHECK(vf_stage_lookup("null_sink") != NULL);
    VF_CHECK(vf_stage_lookup("passthrough") != NULL);
    VF_CHECK(vf_stage_lookup("no_such_kind") == NULL);
    const vf_stage_ops *k[256];
    int n = vf_stage_kinds(k, 256);
    VF_CHECK(n >= 3);
    for (int i = 1; i < n && i < 256; i++) VF_CHECK(strcmp(k[i - 1]->kind, k[i]->kind) < 0);
}

VF_TEST(obuf_json_escapes)
{
    vf_obuf b;
    vf_obuf_init(&b);
    vf_obuf_json_str(&b, "a\"b\\c\nd\x01");
    VF_CHECK_STR(vf_obuf_str(&b), "\"a\\\"b\\\\c\\nd\\u0001\"");
    vf_obuf_reset(&b);
    vf_obuf_json_num(&b, 3.0);
    vf_obuf_puts(&b, " ");
    vf_obuf_json_num(&b, 0.25);
    vf_obuf_puts(&b, " ");
    vf_obuf_json_num(&b, 1.0 / 0.0);
    VF_CHECK_STR(vf_obuf_str(&b), "3 0.25 null");
    /* growth past the first block */
    vf_obuf_reset(&b);
    for (int i = 0; i < 1000; i++) vf_obuf_printf(&b, "%04d", i);
    VF_CHECK_EQ_INT(b.len, 4000);
    VF_CHECK(strncmp(b.s + 3996, "0999", 4) == 0);
    vf_obuf_fini(&b);
}

VF_TEST(rundir_files_and_socket_dir)
{
    char base[64], dir[PATH_MAX], p[PATH_MAX + 32];
    tmpdir(base, sizeof base);
    snprintf(dir, sizeof dir, "%s/a/b", base);
    vf_rundir rd;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_rundir_open(&rd, dir, "x", false, &st), 0);
    VF_CHECK(rd.path[0] == '/');
    VF_CHECK(!rd.sock_tmp);
    VF_CHECK(strstr(rd.sock_dir, "/a/b/sock") != NULL);
    VF_CHECK_EQ_INT(vf_rundir_write(&rd, "graph.json", "{}", &st), 0);
    snprintf(p, sizeof p, "%s/graph.json", rd.path);
    char *s = slurp(p);
    VF_CHECK_STR(s, "{}");
    free(s);
    snprintf(p, sizeof p, "%s/run.log", rd.path);
    VF_CHECK(access(p, F_OK) == 0);
    snprintf(p, sizeof p, "%s/metrics.jsonl", rd.path);
    VF_CHECK(access(p, F_OK) == 0);
    vf_rundir_close(&rd);
    VF_CHECK(access(rd.path, F_OK) == 0); /* the run dir stays */

    /* a run dir whose sock/ path would not fit sun_path gets a /tmp socket dir */
    char longdir[PATH_MAX];
    snprintf(longdir, sizeof longdir, "%s/%0120d", base, 7);
    VF_CHECK_EQ_INT(vf_rundir_open(&rd, longdir, "x", false, &st), 0);
    VF_CHECK(rd.sock_tmp);
    VF_CHECK(strlen(rd.sock_dir) + VF_SOCK_NAME_MAX <= VF_SUN_PATH_MAX);
    struct stat sb;
    VF_CHECK(stat(rd.sock_dir, &sb) == 0 && S_ISDIR(sb.st_mode));
    char sockdir[VF_SUN_PATH_MAX + 1];
    snprintf(sockdir, sizeof sockdir, "%s", rd.sock_dir);
    vf_rundir_close(&rd);
    VF_CHECK(stat(sockdir, &sb) != 0); /* the /tmp fallback is removed */

    /* a run dir that cannot be created: message names the path */
    VF_CHECK(vf_rundir_open(&rd, "/proc/vflow-cannot/x", "x", false, &st) < 0);
    VF_CHECK(strstr(st.msg, "/proc/vflow-cannot/x") != NULL);
}

VF_TEST(ctl_round_trip)
{
    void *z = zmq_ctx_new(), *router = NULL, *dealer = NULL;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_ctl_router_open(z, "inproc://ctl-test", &router, &st), 0);
    VF_CHECK_EQ_INT(vf_ctl_dealer_open(z, "inproc://ctl-test", "w7-cpu", &dealer, &st), 0);
    const char *hello = "pid 42\nedge 3 tcp://127.0.0.1:5555\n";
    VF_CHECK_EQ_INT(vf_ctl_send(dealer, NULL, VF_CTL_HELLO, hello, strlen(hello), 1000), 0);
    vf_ctl_msg m;
    int got = 0;
    for (int i = 0; i < 100 && got != 1; i++) {
        zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 20);
        got = vf_ctl_recv(router, true, &m);
    }
    VF_CHECK_EQ_INT(got, 1);
    VF_CHECK_STR(m.ident, "w7-cpu");
    VF_CHECK_EQ_INT(m.type, VF_CTL_HELLO);
    VF_CHECK_STR(m.payload, hello);
    vf_ctl_msg_fini(&m);
    VF_CHECK_EQ_INT(vf_ctl_send(router, "w7-cpu", VF_CTL_STOP, "", 0, 0), 0);
    got = 0;
    for (int i = 0; i < 100 && got != 1; i++) {
        zmq_pollitem_t it = {dealer, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 20);
        got = vf_ctl_recv(dealer, false, &m);
    }
    VF_CHECK_EQ_INT(got, 1);
    VF_CHECK_EQ_INT(m.type, VF_CTL_STOP);
    VF_CHECK_EQ_INT(m.n, 0);
    vf_ctl_msg_fini(&m);
    /* ROUTER_MANDATORY: a peer that does not exist is an error, not a silent drop */
    VF_CHECK_EQ_INT(vf_ctl_send(router, "nobody", VF_CTL_ABORT, "", 0, 0), VF_ENOTFOUND);
    vf_ctl_close(dealer, 0);
    vf_ctl_close(router, 0);
    zmq_ctx_term(z);
}

/* A placed two-stage graph built by hand: src (synthetic) in w0, sink in w1. */
static vf_graph *two_stage_graph(void)
{
    vf_status st = {0};
    vf_graph *g = vf_graph_new("parts");
    vf_params *p1 = vf_params_from_json("{\"shape\":[4],\"count\":3}", &st);
    vf_params *p2 = vf_params_from_json("{}", &st);
    VF_CHECK(p1 && p2);
    VF_CHECK_EQ_INT(vf_graph_add_stage(g, "src", "synthetic", p1, "t.lua:1", &st), 0);
    VF_CHECK_EQ_INT(vf_graph_add_stage(g, "sink", "null_sink", p2, "t.lua:2", &st), 1);
    snprintf(g->stages[1].worker_hint, sizeof g->stages[1].worker_hint, "other");
    VF_CHECK(vf_graph_add_edge(g, 0, "out", 1, "in", 4, false, "t.lua:3", &st) >= 0);
    VF_CHECK_MSG(vf_graph_validate(g, &st) == 0, "%s", st.msg);
    VF_CHECK_MSG(vf_graph_place(g, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(g->nworkers, 2);
    return g;
}

/* The fill the rows would show for stage i's input "in" (through a final row's text). */
static double input_fill_of(vf_monitor *m, int i)
{
    vf_mon_stage *s = &m->stages[i];
    double f = 0;
    for (int p = 0; p < s->nports; p++)
        if (!s->ports[p].out && s->ports[p].capacity) f = (double)s->ports[p].inflight / s->ports[p].capacity;
    return f;
}

VF_TEST(metrics_rows_rates_and_events)
{
    char base[64], path[PATH_MAX];
    tmpdir(base, sizeof base);
    snprintf(path, sizeof path, "%s/metrics.jsonl", base);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    vf_graph *g = two_stage_graph();
    vf_monitor m;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_monitor_init(&m, g, fd, &st), 0);
    VF_CHECK(m.stages[0].source && !m.stages[1].source);
    int sink = 1, w = g->stages[sink].worker;
    char msg[512];
    /* two samples 1 s apart: 100 items, 0.25 s blocked -> 100 items/s, busy 0.75 */
    snprintf(msg, sizeof msg, "t 1000000000\ns %d 2 10 0 1000 0 0 0 64 128 0\np %d i in 1 4\n", sink, sink);
    vf_monitor_sample(&m, w, msg);
    /* the producer's view of the edge (exact: credits not returned) */
    snprintf(msg, sizeof msg, "t 1500000000\ns 0 2 0 0 0 0 0 0 0 0 0\np 0 o out 2 4\n");
    vf_monitor_sample(&m, g->stages[0].worker, msg);
    snprintf(msg, sizeof msg,
             "t 2000000000\ns %d 2 110 0 11000 0 250000000 0 64 4096 0\np %d i in 3 4\ng %d loss 0.5\n", sink,
             sink, sink);
    vf_monitor_sample(&m, w, msg);
    VF_CHECK_NEAR(input_fill_of(&m, sink), 0.75, 1e-9);
    /* a fuller producer view wins */
    snprintf(msg, sizeof msg, "t 2500000000\ns 0 2 0 0 0 0 0 0 0 0 0\np 0 o out 4 4\n");
    vf_monitor_sample(&m, g->stages[0].worker, msg);
    /* a worker cannot report a stage it does not host */
    snprintf(msg, sizeof msg, "t 3000000000\ns %d 2 999 0 0 0 0 0 0 0 0\n", sink);
    vf_monitor_sample(&m, 1 - w, msg);
    VF_CHECK_EQ_INT(m.stages[sink].in, 110);
    vf_monitor_event(&m, 0, "{\"event\":\"x\",\"n\":1}");
    vf_monitor_event(&m, 0, "not json");
    vf_monitor_final(&m, "done", "");
    close(fd);

    char *text = slurp(path);
    VF_CHECK(text != NULL);
    int lines = 0, stage_rows = 0, sink_rows = 0, events = 0, finals = 0, runs = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        lines++;
        vf_json *j = vf_json_parse(line, &st);
        VF_CHECK_MSG(j && j->type == VF_JSON_OBJ, "row %d is not a JSON object: %s", lines, line);
        const char *type = vf_json_get_str(j, "type", "");
        if (strcmp(type, "stage") == 0) {
            stage_rows++;
            if (strcmp(vf_json_get_str(j, "stage", ""), "sink") == 0) sink_rows++;
            if (stage_rows == 3) {
                VF_CHECK_EQ_INT(vf_json_get_int(j, "items", 0), 110);
                VF_CHECK_NEAR(vf_json_get_num(j, "items_s", 0), 100.0, 1e-9);
                VF_CHECK_NEAR(vf_json_get_num(j, "bytes_s", 0), 10000.0, 1e-9);
                VF_CHECK_NEAR(vf_json_get_num(j, "busy", 0), 0.75, 1e-9);
                VF_CHECK_NEAR(vf_json_get_num(vf_json_get(j, "fill"), "in", 0), 0.75, 1e-9);
                VF_CHECK_EQ_INT(vf_json_get_int(j, "peak", 0), 4096);
                VF_CHECK_NEAR(vf_json_get_num(vf_json_get(j, "gauges"), "loss", 0), 0.5, 1e-12);
            }
        } else if (strcmp(type, "final") == 0) {
            finals++;
            if (strcmp(vf_json_get_str(j, "stage", ""), "sink") == 0)
                VF_CHECK_NEAR(vf_json_get_num(vf_json_get(j, "fill"), "in", 0), 1.0, 1e-9);
        } else if (strcmp(type, "run") == 0) {
            runs++;
            VF_CHECK_STR(vf_json_get_str(j, "status", ""), "done");
        } else {
            events++;
            VF_CHECK_STR(vf_json_get_str(j, "stage", ""), "src");
            VF_CHECK(vf_json_get(j, "t") != NULL);
            if (events == 1) VF_CHECK_STR(vf_json_get_str(j, "event", ""), "x");
            if (events == 2) VF_CHECK_STR(vf_json_get_str(j, "bad_row", ""), "not json");
        }
        vf_json_free(j);
        line = nl ? nl + 1 : NULL;
    }
    VF_CHECK_EQ_INT(stage_rows, 4);
    VF_CHECK_EQ_INT(sink_rows, 2);
    VF_CHECK_EQ_INT(events, 2);
    VF_CHECK_EQ_INT(finals, 2);
    VF_CHECK_EQ_INT(runs, 1);
    free(text);

    char line[1024];
    vf_progress_line(&m, line, sizeof line);
    VF_CHECK_MSG(strstr(line, "sink 110 (100/s) loss=0.5") != NULL, "%s", line);
    vf_monitor_fini(&m);
    vf_graph_free(g);
}

VF_TEST(ctx_quarantine_and_gauges)
{
    char base[64], path[PATH_MAX];
    tmpdir(base, sizeof base);
    vf_status st = {0};
    vf_params *p = vf_params_from_json("{}", &st);
    vf_stage *s = vf_stage_new(vf_stage_lookup("null_sink"), "q", 0, p, &st);
    VF_CHECK(s != NULL);
    s->ctx.run_dir = base;
    vf_quarantine(&s->ctx, "/data/bad \"clip\".mp4", "truncated\nfile");
    vf_quarantine(&s->ctx, "/data/b.mp4", "zero bytes");
    snprintf(path, sizeof path, "%s/quarantine.jsonl", base);
    char *text = slurp(path);
    VF_CHECK(text != NULL);
    char *nl = text ? strchr(text, '\n') : NULL;
    VF_CHECK(nl != NULL);
    if (nl) {
        *nl = 0;
        vf_json *j = vf_json_parse(text, &st);
        VF_CHECK(j != NULL);
        VF_CHECK_STR(vf_json_get_str(j, "path", ""), "/data/bad \"clip\".mp4");
        VF_CHECK_STR(vf_json_get_str(j, "reason", ""), "truncated\nfile");
        VF_CHECK_STR(vf_json_get_str(j, "stage", ""), "q");
        VF_CHECK(vf_json_get_num(j, "t", 0) > 1.6e9);
        vf_json_free(j);
        VF_CHECK(strstr(nl + 1, "zero bytes") != NULL);
    }
    free(text);
    for (int i = 0; i < 40; i++) {
        char k[16];
        snprintf(k, sizeof k, "g%d", i);
        vf_metric(&s->ctx, k, i);
    }
    vf_metric(&s->ctx, "g3", 33);
    vf_gauge gs[VF_CTX_MAX_GAUGES];
    int n = vf_stage_gauges(s, gs, VF_CTX_MAX_GAUGES);
    VF_CHECK_EQ_INT(n, VF_CTX_MAX_GAUGES);
    VF_CHECK_STR(gs[3].key, "g3");
    VF_CHECK_NEAR(gs[3].value, 33, 0);
    VF_CHECK(!vf_stopping(&s->ctx));
    vf_stage_free(s);
    vf_params_free(p);
}

int main(void) { return vf_test_main(); }
