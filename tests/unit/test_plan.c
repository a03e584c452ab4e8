/* test_plan.c — the memory planner's pieces (runtime/plan*.c): budget and size parsing
 * (and their errors), budget precedence, categories of hook entries, the plan's sums,
 * and the knob search: every fix it reports is checked against an independent re-plan of
 * the script with the fix's --set pairs, and "fits" against the budget.
 */
#include "tests/vf_test.h"

#include "runtime/edge/edge_view.h"
#include "runtime/plan/plan.h"

#include <unistd.h>

static const int64_t GiB = (int64_t)1 << 30, MiB = (int64_t)1 << 20;

VF_TEST(sizes)
{
    struct {
        const char *s;
        int64_t want;
    } ok[] = {
        {"80GiB", 80 * GiB}, {"24G", 24 * GiB}, {"512MiB", 512 * MiB}, {"512M", 512 * MiB},
        {"1.5G", 3 * GiB / 2}, {"800MB", 800000000}, {"2TB", 2000000000000LL}, {"1TiB", 1024 * GiB},
        {"123", 123}, {"123B", 123}, {"4KiB", 4096}, {"4K", 4096}, {"4KB", 4000}, {"0", 0},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t v = -1;
        VF_CHECK_MSG(vf_size_parse(ok[i].s, &v) == 0 && v == ok[i].want, "%s -> %lld", ok[i].s, (long long)v);
    }
    const char *bad[] = {"", "G", "-1G", "1X", "1 GiB", "1GiBs", "inf", "nan", "1e30", "+1G", "GiB1", "1.5.5G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = 7;
        VF_CHECK_MSG(vf_size_parse(bad[i], &v) == VF_EINVAL, "'%s' should be refused (got %lld)", bad[i], (long long)v);
    }
}

VF_TEST(budget_spec)
{
    vf_budget b;
    vf_status st = {0};
    VF_CHECK(vf_budget_parse("cuda=80GiB,cpu=24GiB", &b, &st) == 0);
    VF_CHECK_EQ_INT(b.n, 2);
    VF_CHECK(b.e[0].any_cuda && b.e[0].bytes == 80 * GiB);
    VF_CHECK(!b.e[1].any_cuda && b.e[1].dev.kind == VF_DEV_CPU && b.e[1].bytes == 24 * GiB);
    /* a device of its own beats "cuda", whatever the order */
    VF_CHECK(vf_budget_parse("cuda:1=40GiB,cuda=80GiB", &b, &st) == 0);
    VF_CHECK_EQ_INT(vf_budget_for(&b, (vf_device){VF_DEV_CUDA, 1}), 40 * GiB);
    VF_CHECK_EQ_INT(vf_budget_for(&b, (vf_device){VF_DEV_CUDA, 0}), 80 * GiB);
    VF_CHECK_EQ_INT(vf_budget_for(&b, (vf_device){VF_DEV_CUDA, 7}), 80 * GiB);
    VF_CHECK_EQ_INT(vf_budget_for(&b, (vf_device){VF_DEV_CPU, 0}), -1);
    VF_CHECK(vf_budget_parse("cpu=512MiB", &b, &st) == 0 && vf_budget_for(&b, (vf_device){VF_DEV_CUDA, 0}) == -1);

    struct {
        const char *spec, *msg;
    } bad[] = {
        {"", "--budget: empty spec"},
        {"cpu", "--budget cpu: expected DEVICE=SIZE, got 'cpu'"},
        {"cpu=", "--budget cpu=: bad size '' (e.g. 24GiB, 800MB, 1.5G)"},
        {"cpu=abc", "--budget cpu=abc: bad size 'abc' (e.g. 24GiB, 800MB, 1.5G)"},
        {"cpu=-1G", "--budget cpu=-1G: bad size '-1G' (e.g. 24GiB, 800MB, 1.5G)"},
        {"gpu=1G", "--budget gpu=1G: unknown device 'gpu' (cpu, cuda or cuda:N)"},
        {"cuda:x=1G", "--budget cuda:x=1G: unknown device 'cuda:x' (cpu, cuda or cuda:N)"},
        {"cpu=1G,cpu=2G", "--budget cpu=1G,cpu=2G: 'cpu' is given twice"},
        {"cpu=1G,,", NULL}, /* empty tokens are skipped: fine */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vf_status_clear(&st);
        int rc = vf_budget_parse(bad[i].spec, &b, &st);
        if (!bad[i].msg) {
            VF_CHECK_MSG(rc == 0, "%s: %s", bad[i].spec, st.msg);
            continue;
        }
        VF_CHECK_MSG(rc == VF_EUSAGE, "%s: rc %d", bad[i].spec, rc);
        VF_CHECK_STR(st.msg, bad[i].msg);
    }
}

/* ------------------------------------------------------------------ plans and fixes */

/* A training pipeline that plans without a cache (latent_shape), all on the host. */
static const char *TRAIN_LUA =
    "local vf = require \"vflow\"\n"
    "local a = vf.args\n"
    "local p = vf.pipeline \"t\"\n"
    "local m = vf.models.dit \"tiny\"\n"
    "local data = p:stage(\"latent_reader\", { path = \"/nonexistent/cache\", batch = a.batch or 8,\n"
    "  text_len = m.text_len, latent_shape = { m.z, 8, 32, 32 } })\n"
    "local dit = p:pipeline_parallel(m, { stages = a.stages or 1, micro_batches = a.micro_batches or 1,\n"
    "  recompute = a.recompute == true, devices = \"cpu\" })\n"
    "local opt = p:stage(\"adamw\", { shards = a.shards or 1 })\n"
    "local ck = p:stage(\"checkpoint\", { dir = \"/tmp/x\" })\n"
    "p:train { data = data, model = dit, optimizer = opt, checkpoint = ck, steps = 10 }\n"
    "return p\n";

static char script_path[64];

static void write_script(void)
{
    snprintf(script_path, sizeof script_path, "/tmp/vf_test_plan_%d.lua", (int)getpid());
    FILE *f = fopen(script_path, "w");
    fputs(TRAIN_LUA, f);
    fclose(f);
}

static int64_t cpu_total(const char *const *sets, int n)
{
    vf_graph *g = NULL;
    vf_status st = {0};
    if (vf_plan_load(script_path, sets, n, &g, &st) < 0) {
        fprintf(stderr, "load: %s\n", st.msg);
        return -2;
    }
    vf_mplan p;
    int64_t t = -2;
    if (vf_mplan_build(g, &p, &st) == 0) {
        t = vf_mplan_dev(&p, (vf_device){VF_DEV_CPU, 0})->total;
        vf_mplan_free(&p);
    }
    vf_graph_free(g);
    return t;
}

/* The categories are the ones the stages declare (vf_mem_plan_add), carried into the
 * plan's lines; who holds the bytes decides the predicted account. */
static void expect_line(const vf_graph *g, const vf_mplan *p, const char *stage, const char *what, vf_mem_cat want,
                        int account_of)
{
    int si = vf_graph_find(g, stage), found = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->l[i].stage != si || strcmp(p->l[i].what, what) != 0) continue;
        found++;
        VF_CHECK_MSG(p->l[i].cat == want, "%s/%s -> %s, want %s", stage, what, vf_mem_cat_name(p->l[i].cat),
                     vf_mem_cat_name(want));
        if (account_of != -2) VF_CHECK_MSG(p->l[i].account == account_of, "%s/%s: account %d, want %d", stage, what,
                                           p->l[i].account, account_of);
    }
    VF_CHECK_MSG(found == 1, "%s/%s: %d lines", stage, what, found);
}

VF_TEST(categories)
{
    write_script();
    vf_graph *g = NULL;
    vf_status st = {0};
    static const char *const sets[] = {"stages=2"};
    VF_CHECK(vf_plan_load(script_path, sets, 1, &g, &st) == 0);
    if (!g) return;
    vf_mplan p;
    VF_CHECK(vf_mplan_build(g, &p, &st) == 0);
    int opt = vf_graph_find(g, "adamw_0"), ck = vf_graph_find(g, "checkpoint");
    VF_CHECK(opt >= 0 && ck >= 0);
    expect_line(g, &p, "dit_0", "weights (lent to the shards)", VF_MEM_WEIGHTS, vf_graph_find(g, "dit_0"));
    expect_line(g, &p, "dit_0", "gradients (lent to the shards)", VF_MEM_GRADS, vf_graph_find(g, "dit_0"));
    expect_line(g, &p, "dit_0", "saved activations (micro-batches in flight)", VF_MEM_ACTS, -2);
    expect_line(g, &p, "dit_0", "activation item being built", VF_MEM_ITEMS, -2);
    expect_line(g, &p, "dit_0", "partition workspace", VF_MEM_WORKSPACE, -2);
    expect_line(g, &p, "adamw_0", "master weights + moments (f32)", VF_MEM_OPTIM, opt);
    /* the slice's norm blocks across the two partitions' boundary: one chunk gathers them */
    expect_line(g, &p, "adamw_0", "gradient chunk (split blocks, other devices)", VF_MEM_GRADS, opt);
    expect_line(g, &p, "adamw_0", "host staging (init/resume, snapshot chunk)", VF_MEM_CKPT, opt);
    /* received snapshots: the producer's allocations (adamw in the same worker) */
    if (g->stages[opt].worker == g->stages[ck].worker)
        expect_line(g, &p, "checkpoint", "input snapshot chunk being written", VF_MEM_CKPT, opt);
    /* a library's buffer: in the totals, in no account */
    expect_line(g, &p, "checkpoint", "writer piece lists (library)", VF_MEM_CKPT, -1);
    expect_line(g, &p, "latent_reader", "batch being filled", VF_MEM_ITEMS, vf_graph_find(g, "latent_reader"));
    for (int c = 0; c < VF_MEM_CAT_COUNT; c++) VF_CHECK(strcmp(vf_mem_cat_name((vf_mem_cat)c), "?") != 0);
    vf_mplan_free(&p);
    vf_graph_free(g);
}

VF_TEST(plan_sums)
{
    write_script();
    vf_graph *g = NULL;
    vf_status st = {0};
    VF_CHECK(vf_plan_load(script_path, NULL, 0, &g, &st) == 0);
    if (!g) return;
    vf_mplan p;
    VF_CHECK(vf_mplan_build(g, &p, &st) == 0);
    /* the total is the sum of the lines, the categories the same sum, and every stage's
     * declarations are among the lines */
    int64_t lines = 0, cats = 0, decl = 0;
    for (int i = 0; i < p.n; i++)
        if (p.l[i].dev.kind == VF_DEV_CPU) lines += p.l[i].bytes;
    const vf_pdev *cpu = vf_mplan_dev(&p, (vf_device){VF_DEV_CPU, 0});
    for (int c = 0; c < VF_MEM_CAT_COUNT; c++) cats += cpu->cat[c];
    for (int i = 0; i < g->nstages; i++) decl += vf_mem_plan_total(&g->stages[i].mem, (vf_device){VF_DEV_CPU, 0});
    VF_CHECK_EQ_INT(cpu->total, lines);
    VF_CHECK_EQ_INT(cpu->total, cats);
    VF_CHECK(cpu->total > decl && decl > 0);
    VF_CHECK_EQ_INT(cpu->total, vf_plan_device_total(g, (vf_device){VF_DEV_CPU, 0}));
    /* an edge holds `capacity` items of its source port's largest size: the line named
     * after it carries capacity x that size, where a tensor lent as a view (not over TCP)
     * travels as its descriptor */
    int edges = 0;
    for (int i = 0; i < p.n; i++) {
        const vf_pline *x = &p.l[i];
        if (x->edge < 0 || strncmp(x->what, "edge ", 5) != 0) continue;
        const vf_port_spec *sp = vf_graph_edge_src_spec(g, x->edge);
        vf_port_spec q;
        if (sp) q = *sp;
        for (int t = 0; sp && g->edges[x->edge].transport != VF_TR_TCP && t < q.ntensors; t++)
            if (q.t[t].view) q.t[t].dtype = VF_DTYPE_U8, q.t[t].ndim = 1, q.t[t].dims[0] = VF_VIEW_WIRE_BYTES;
        int64_t item = sp ? vf_port_max_item_bytes(&q) : 0, cap = g->edges[x->edge].capacity;
        VF_CHECK_MSG(x->bytes == cap * item, "%s: %lld bytes, capacity %lld x item %lld", x->what,
                     (long long)x->bytes, (long long)cap, (long long)item);
        edges += cap > 1 && item > 0;
    }
    VF_CHECK(edges > 0);
    /* with recompute flipped the hook gives fewer activation bytes */
    int d = vf_graph_find(g, "dit_0");
    VF_CHECK(d >= 0 && p.acts_alt[d] > 0 && p.acts_alt[d] < cpu->cat[VF_MEM_ACTS]);
    /* budgets: over by one byte, and exactly at the total */
    vf_budget b;
    char spec[64];
    snprintf(spec, sizeof spec, "cpu=%lld", (long long)cpu->total - 1);
    VF_CHECK(vf_budget_parse(spec, &b, &st) == 0);
    vf_mplan_budget(&p, &b, NULL);
    VF_CHECK(p.nover == 1 && vf_mplan_refusal(&p, &st) == VF_EBUDGET);
    VF_CHECK(strstr(st.msg, "the plan needs") && strstr(st.msg, "on cpu, over the budget of"));
    snprintf(spec, sizeof spec, "cpu=%lld", (long long)cpu->total);
    vf_status_clear(&st);
    VF_CHECK(vf_budget_parse(spec, &b, &st) == 0);
    vf_mplan_budget(&p, &b, NULL);
    VF_CHECK(p.nover == 0 && vf_mplan_refusal(&p, &st) == 0);
    vf_mplan_free(&p);
    vf_graph_free(g);
}

static const vf_plan_fix *find_fix(const vf_plan_fix *f, int n, const char *knob)
{
    for (int i = 0; i < n; i++)
        if (strcmp(f[i].knob, knob) == 0) return &f[i];
    return NULL;
}

/* "--set a=1 --set b=2" -> {"a=1", "b=2"} */
static int split_sets(const char *change, char bufs[][128], const char **out, int max)
{
    int n = 0;
    const char *p = change;
    while ((p = strstr(p, "--set ")) && n < max) {
        p += 6;
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(bufs[n], 128, "%.*s", (int)len, p);
        out[n] = bufs[n];
        n++;
    }
    return n;
}

VF_TEST(knob_search)
{
    write_script();
    vf_graph *g = NULL;
    vf_status st = {0};
    VF_CHECK(vf_plan_load(script_path, NULL, 0, &g, &st) == 0);
    if (!g) return;
    vf_mplan p;
    VF_CHECK(vf_mplan_build(g, &p, &st) == 0);
    int64_t total = vf_mplan_dev(&p, (vf_device){VF_DEV_CPU, 0})->total;
    int64_t with_rc = cpu_total((const char *[]){"recompute=true"}, 1);
    VF_CHECK(with_rc > 0 && with_rc < total);

    /* a budget that recompute meets */
    vf_budget b;
    char spec[64];
    snprintf(spec, sizeof spec, "cpu=%lld", (long long)(with_rc + (total - with_rc) / 10));
    VF_CHECK(vf_budget_parse(spec, &b, &st) == 0);
    vf_mplan_budget(&p, &b, NULL);
    VF_CHECK(p.nover == 1);
    vf_plan_req req = {script_path, NULL, 0, spec, false};
    vf_plan_fix fix[VF_PLAN_MAX_FIXES];
    int n = vf_plan_fixes(&req, &p, &b, NULL, fix, VF_PLAN_MAX_FIXES);
    VF_CHECK(n >= 2);
    const vf_plan_fix *rc = find_fix(fix, n, "recompute");
    VF_CHECK(rc && rc->fits && strcmp(rc->change, "--set recompute=true") == 0 && rc->total[0] == with_rc);
    VF_CHECK(fix[0].fits); /* the best come first */
    /* every fix is what the script plans with its pairs, and fits iff within budget */
    for (int i = 0; i < n; i++) {
        char bufs[16][128];
        const char *sets[16];
        int ns = split_sets(fix[i].change, bufs, sets, 16);
        if (strstr(fix[i].change, "capacity =")) continue; /* edges: no --set form */
        if (strncmp(fix[i].note, "refused", 7) == 0) continue;
        int64_t again = cpu_total(sets, ns);
        VF_CHECK_MSG(again == fix[i].total[0], "%s (%s): %lld vs re-plan %lld", fix[i].knob, fix[i].change,
                     (long long)fix[i].total[0], (long long)again);
        VF_CHECK_MSG(fix[i].fits == (fix[i].total[0] <= b.e[0].bytes), "%s fits flag", fix[i].knob);
        VF_CHECK_MSG(fix[i].total[0] < total, "%s lowers the total", fix[i].knob);
    }
    const vf_plan_fix *mb = find_fix(fix, n, "micro_batches");
    VF_CHECK(mb && strncmp(mb->change, "--set micro_batches=", 20) == 0);

    /* nothing fits alone below everything: the knobs combined are tried (a knob the script
     * refuses, swap_blocks of a full fine-tune, has no total to compare) */
    snprintf(spec, sizeof spec, "cpu=%lld", (long long)(with_rc / 20));
    VF_CHECK(vf_budget_parse(spec, &b, &st) == 0);
    vf_mplan_budget(&p, &b, NULL);
    n = vf_plan_fixes(&req, &p, &b, NULL, fix, VF_PLAN_MAX_FIXES);
    const vf_plan_fix *all = find_fix(fix, n, "combined");
    VF_CHECK(all && !all->fits && strstr(all->change, "recompute=true") && strstr(all->note, "+"));
    if (all) {
        for (int i = 0; i < n; i++)
            if (fix[i].total[0] >= 0 && fix[i].total[0] < all->total[0] && strcmp(fix[i].knob, "capacity") != 0)
                VF_CHECK_MSG(false, "combined (%lld) above %s (%lld)", (long long)all->total[0], fix[i].knob,
                             (long long)fix[i].total[0]);
    }
    vf_mplan_free(&p);
    vf_graph_free(g);
    unlink(script_path);
}

int main(void) { return vf_test_main(); }
