/* test_graph.c — the graph model: building, validation (port resolution, fan-in, cycles,
 * dtype/shape compatibility with symbol unification, propagation through `ports` hooks,
 * required ports, memory), placement, overrides, JSON round trip and DOT.
 *
 * Test-only stage kinds (t_*) are registered here, in this executable only. */
#include "tests/vf_test.h"

#include "runtime/graph/graph.h"
#include "runtime/json.h"
#include "runtime/core/params.h"

/* ---- t_src: one output "out" carrying tensor "x" of params dtype/shape/sym ---- */
static const vf_param_spec src_params[] = {
    {"dtype", VF_P_STR, "\"f32\"", VF_ANY, "dtype", "u8|i32|f32|bf16|f16", NULL},
    {"shape", VF_P_LIST_INT, "[4,3]", VF_RANGE(0, 1e9), "dims (bounds of symbolic ones)", NULL, NULL},
    {"sym", VF_P_LIST_STR, "[]", VF_ANY, "symbol per dim, \"\" = fixed", NULL, NULL},
    {"device", VF_P_DEVICE, "\"cpu\"", VF_ANY, "device", NULL, NULL},
    {0},
};

static void spec_from(const vf_params *p, const char *prefix, vf_port_spec *port, const char *tname)
{
    char k_dtype[32], k_shape[32], k_sym[32];
    snprintf(k_dtype, sizeof k_dtype, "%sdtype", prefix);
    snprintf(k_shape, sizeof k_shape, "%sshape", prefix);
    snprintf(k_sym, sizeof k_sym, "%ssym", prefix);
    vf_dtype dt = VF_DTYPE_F32;
    vf_dtype_parse(vf_param_str(p, k_dtype), &dt);
    int n = vf_param_len(p, k_shape);
    int64_t dims[VF_MAX_DIMS];
    const char *sym[VF_MAX_DIMS];
    for (int i = 0; i < n && i < VF_MAX_DIMS; i++) {
        dims[i] = vf_param_int_at(p, k_shape, i);
        sym[i] = i < vf_param_len(p, k_sym) ? vf_param_str_at(p, k_sym, i) : "";
    }
    vf_port_tensor(port, tname, dt, n, dims, sym);
}

static int src_ports(const vf_params *p, const vf_port_specs *up, vf_port_specs *out, vf_status *st)
{
    vf_port_spec *o = vf_port_add(out, "out", VF_PORT_OUT, false);
    o->device = vf_param_device(p, "device");
    spec_from(p, "", o, "x");
    return 0;
}

static const vf_stage_ops t_src = {
    .api_version = VF_API_VERSION, .kind = "t_src", .doc = "test source", .params = src_params,
    .flags = VF_STAGE_SOURCE, .ports = src_ports,
};
VF_REGISTER_STAGE(t_src)

/* ---- t_double: "in" mirrors upstream; "out" doubles dim 0 (propagation) ---- */
static int double_ports(const vf_params *p, const vf_port_specs *up, vf_port_specs *out, vf_status *st)
{
    const vf_port_spec *u = up ? vf_port_find(up, "in") : NULL;
    vf_port_spec *in = vf_port_add(out, "in", VF_PORT_IN, true);
    vf_port_spec *o = vf_port_add(out, "out", VF_PORT_OUT, false);
    if (u) {
        in->ntensors = o->ntensors = u->ntensors;
        memcpy(in->t, u->t, sizeof in->t);
        memcpy(o->t, u->t, sizeof o->t);
        for (int i = 0; i < o->ntensors; i++)
            if (o->t[i].ndim > 0) o->t[i].dims[0] *= 2;
    }
    return 0;
}
static const vf_stage_ops t_double = {
    .api_version = VF_API_VERSION, .kind = "t_double", .doc = "doubles dim 0", .ports = double_ports,
};
VF_REGISTER_STAGE(t_double)

/* ---- t_sink: "in" expects tensor "x" of expect_* (empty shape = anything) ---- */
static const vf_param_spec sink_params[] = {
    {"expect_dtype", VF_P_STR, "\"f32\"", VF_ANY, "dtype", NULL, NULL},
    {"expect_shape", VF_P_LIST_INT, "[]", VF_RANGE(0, 1e9), "dims; [] = accept anything", NULL, NULL},
    {"expect_sym", VF_P_LIST_STR, "[]", VF_ANY, "symbols", NULL, NULL},
    {"mem", VF_P_INT, "0", VF_RANGE(0, 1e15), "bytes it declares", NULL, NULL},
    {"device", VF_P_DEVICE, "\"cpu\"", VF_ANY, "device", NULL, NULL},
    {0},
};
static int sink_ports(const vf_params *p, const vf_port_specs *up, vf_port_specs *out, vf_status *st)
{
    vf_port_spec *in = vf_port_add(out, "in", VF_PORT_IN, true);
    if (vf_param_len(p, "expect_shape")) spec_from(p, "expect_", in, "x");
    return 0;
}
static int sink_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out, vf_status *st)
{
    if (vf_param_int(p, "mem") > 0) vf_mem_plan_add(out, vf_param_device(p, "device"), VF_MEM_OTHER, "state", vf_param_int(p, "mem"));
    return 0;
}
static const vf_stage_ops t_sink = {
    .api_version = VF_API_VERSION, .kind = "t_sink", .doc = "test sink", .params = sink_params,
    .ports = sink_ports, .memory = sink_memory,
};
VF_REGISTER_STAGE(t_sink)

/* ---- t_merge: multi input, one output; t_two: two outputs; t_own: own worker ---- */
static int merge_ports(const vf_params *p, const vf_port_specs *up, vf_port_specs *out, vf_status *st)
{
    vf_port_add(out, "in", VF_PORT_IN, true)->multi = true;
    vf_port_add(out, "grads", VF_PORT_IN, false);
    vf_port_add(out, "out", VF_PORT_OUT, false);
    return 0;
}
static const vf_stage_ops t_merge = {.api_version = VF_API_VERSION, .kind = "t_merge", .ports = merge_ports};
VF_REGISTER_STAGE(t_merge)

static int two_ports(const vf_params *p, const vf_port_specs *up, vf_port_specs *out, vf_status *st)
{
    vf_port_add(out, "in", VF_PORT_IN, false);
    vf_port_add(out, "a", VF_PORT_OUT, false);
    vf_port_add(out, "b", VF_PORT_OUT, false);
    return 0;
}
static const vf_stage_ops t_two = {.api_version = VF_API_VERSION, .kind = "t_two", .ports = two_ports};
VF_REGISTER_STAGE(t_two)

static const vf_param_spec own_params[] = {
    {"device", VF_P_DEVICE, "\"cpu\"", VF_ANY, "device", NULL, NULL},
    {0},
};
static int own_ports(const vf_params *p, const vf_port_specs *up, vf_port_specs *out, vf_status *st)
{
    vf_port_add(out, "in", VF_PORT_IN, false);
    vf_port_add(out, "out", VF_PORT_OUT, false);
    return 0;
}
static const vf_stage_ops t_own = {.api_version = VF_API_VERSION, .kind = "t_own", .params = own_params,
                                   .flags = VF_STAGE_OWN_WORKER, .ports = own_ports};
VF_REGISTER_STAGE(t_own)

/* ---------------------------------------------------------------- helpers */

static int add(vf_graph *g, const char *name, const char *kind, const char *json, int line)
{
    vf_status st = {0};
    char where[64];
    snprintf(where, sizeof where, "t.lua:%d", line);
    vf_params *p = json ? vf_params_from_json(json, &st) : NULL;
    int i = vf_graph_add_stage(g, name, kind, p, where, &st);
    VF_CHECK_MSG(i >= 0, "%s", st.msg);
    return i;
}

static void edge(vf_graph *g, int a, const char *ap, int b, const char *bp, bool loop, int line)
{
    vf_status st = {0};
    char where[64];
    snprintf(where, sizeof where, "t.lua:%d", line);
    int e = vf_graph_add_edge(g, a, ap, b, bp, 2, loop, where, &st);
    VF_CHECK_MSG(e >= 0, "%s", st.msg);
}

static void expect_invalid(vf_graph *g, const char *want)
{
    vf_status st = {0};
    int rc = vf_graph_validate(g, &st);
    VF_CHECK_EQ_INT(rc, VF_EUSAGE);
    VF_CHECK_STR(st.msg, want);
    vf_graph_free(g);
}

static void expect_valid(vf_graph *g)
{
    vf_status st = {0};
    int rc = vf_graph_validate(g, &st);
    VF_CHECK_MSG(rc == 0, "%s", st.msg);
}

/* ---------------------------------------------------------------- tests */

VF_TEST(add_and_find)
{
    vf_graph *g = vf_graph_new("t");
    vf_status st = {0};
    VF_CHECK_EQ_INT(add(g, "a", "t_src", NULL, 1), 0);
    VF_CHECK_EQ_INT(add(g, "b", "t_sink", NULL, 2), 1);
    VF_CHECK_EQ_INT(vf_graph_find(g, "b"), 1);
    VF_CHECK_EQ_INT(vf_graph_find(g, "c"), -1);
    VF_CHECK(vf_graph_add_stage(g, "a", "t_src", NULL, "t.lua:3", &st) < 0);
    VF_CHECK_STR(st.msg, "t.lua:3: duplicate stage name 'a' (first defined at t.lua:1)");
    vf_status_clear(&st);
    VF_CHECK(vf_graph_add_stage(g, "a.b", "t_src", NULL, "t.lua:4", &st) < 0);
    VF_CHECK_STR(st.msg, "t.lua:4: bad stage name 'a.b': it contains '.', which separates stage and param "
                         "in --set name.param=v");
    vf_status_clear(&st);
    VF_CHECK(vf_graph_add_edge(g, 0, "", 1, "", 0, false, "t.lua:5", &st) < 0);
    VF_CHECK_STR(st.msg, "t.lua:5: connect 'a' -> 'b': capacity must be at least 1, got 0");
    /* many stages: arrays grow */
    char name[16];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "s%d", i);
        add(g, name, "t_sink", NULL, 10 + i);
    }
    VF_CHECK_EQ_INT(g->nstages, 102);
    VF_CHECK_EQ_INT(vf_graph_find(g, "s99"), 101);
    vf_graph_free(g);
}

VF_TEST(propagation_in_topological_order)
{
    /* Added out of order: the sink first. src (4,3) -> double -> double -> (16,3). */
    vf_graph *g = vf_graph_new("t");
    int k = add(g, "sink", "t_sink", "{\"expect_shape\":[16,3]}", 1);
    int d2 = add(g, "d2", "t_double", NULL, 2);
    int d1 = add(g, "d1", "t_double", NULL, 3);
    int s = add(g, "src", "t_src", "{\"shape\":[4,3]}", 4);
    edge(g, d2, "", k, "", false, 5);
    edge(g, d1, "", d2, "", false, 6);
    edge(g, s, "", d1, "", false, 7);
    expect_valid(g);
    int order[4];
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_graph_topo_order(g, order, &st), 0);
    VF_CHECK_EQ_INT(order[0], s);
    VF_CHECK_EQ_INT(order[1], d1);
    VF_CHECK_EQ_INT(order[2], d2);
    VF_CHECK_EQ_INT(order[3], k);
    VF_CHECK_EQ_INT(g->stages[d2].ports.p[1].t[0].dims[0], 16);
    /* default ports were resolved */
    VF_CHECK_STR(g->edges[0].src_port, "out");
    VF_CHECK_STR(g->edges[0].dst_port, "in");
    vf_graph_free(g);

    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[5,3]}", 1);
    d1 = add(g, "d1", "t_double", NULL, 2);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[8,3]}", 3);
    edge(g, s, "", d1, "", false, 4);
    edge(g, d1, "", k, "", false, 5);
    expect_invalid(g, "t.lua:5: connect 'd1.out' -> 'sink.in': tensor 'x' shape mismatch: sends (10,3), "
                      "expects (8,3) (dim 0: 10 vs 8)");
}

VF_TEST(dtype_and_shape_compat)
{
    vf_graph *g = vf_graph_new("t");
    int s = add(g, "src", "t_src", "{\"dtype\":\"bf16\"}", 1);
    int k = add(g, "sink", "t_sink", "{\"expect_shape\":[4,3]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_invalid(g, "t.lua:3: connect 'src.out' -> 'sink.in': tensor 'x' dtype mismatch: sends bf16, expects f32");

    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[4,3,2]}", 1);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[4,3]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_invalid(g, "t.lua:3: connect 'src.out' -> 'sink.in': tensor 'x' shape mismatch: sends (4,3,2), "
                      "expects (4,3) (3 vs 2 dims)");

    /* fixed into symbolic within the bound: fine; beyond it: error */
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[4,3]}", 1);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[8,3],\"expect_sym\":[\"B\",\"\"]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_valid(g);
    vf_graph_free(g);
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[16,3]}", 1);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[8,3],\"expect_sym\":[\"B\",\"\"]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_invalid(g, "t.lua:3: connect 'src.out' -> 'sink.in': tensor 'x' shape mismatch: sends (16,3), "
                      "expects (B<=8,3) (dim 0: 16 exceeds B<=8)");

    /* variable into fixed: error; variable into a larger bound: fine */
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[17,3],\"sym\":[\"T\",\"\"]}", 1);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[17,3]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_invalid(g, "t.lua:3: connect 'src.out' -> 'sink.in': tensor 'x' shape mismatch: sends (T<=17,3), "
                      "expects (17,3) (dim 0 varies up to 17, expected exactly 17)");
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[17,3],\"sym\":[\"T\",\"\"]}", 1);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[33,3],\"expect_sym\":[\"F\",\"\"]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_valid(g);
    vf_graph_free(g);
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[33,3],\"sym\":[\"T\",\"\"]}", 1);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[17,3],\"expect_sym\":[\"T\",\"\"]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_invalid(g, "t.lua:3: connect 'src.out' -> 'sink.in': tensor 'x' shape mismatch: sends (T<=33,3), "
                      "expects (T<=17,3) (dim 0: up to 33 exceeds T<=17)");
    /* an unbounded (0) destination bound takes anything */
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[1000,3]}", 1);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[0,3],\"expect_sym\":[\"N\",\"\"]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_valid(g);
    vf_graph_free(g);
}

VF_TEST(symbol_unification)
{
    /* One symbol used twice in the destination must see the same thing twice. */
    vf_graph *g = vf_graph_new("t");
    int s = add(g, "src", "t_src", "{\"shape\":[4,3]}", 1);
    int k = add(g, "sink", "t_sink", "{\"expect_shape\":[8,8],\"expect_sym\":[\"B\",\"B\"]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_invalid(g, "t.lua:3: connect 'src.out' -> 'sink.in': symbol B is 4 (tensor 'x' dim 0) but 3 (tensor 'x' dim 1)");
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[4,4]}", 1);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[8,8],\"expect_sym\":[\"B\",\"B\"]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_valid(g);
    vf_graph_free(g);
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", "{\"shape\":[4,4],\"sym\":[\"H\",\"W\"]}", 1);
    k = add(g, "sink", "t_sink", "{\"expect_shape\":[8,8],\"expect_sym\":[\"S\",\"S\"]}", 2);
    edge(g, s, "", k, "", false, 3);
    expect_invalid(g, "t.lua:3: connect 'src.out' -> 'sink.in': symbol S is H (tensor 'x' dim 0) but W (tensor 'x' dim 1)");
}

VF_TEST(ports_resolution_errors)
{
    vf_graph *g = vf_graph_new("t");
    int s = add(g, "src", "t_src", NULL, 1);
    int k = add(g, "sink", "t_sink", NULL, 2);
    edge(g, s, "outt", k, "", false, 3);
    expect_invalid(g, "t.lua:3: connect: stage 'src' (t_src) has no output port 'outt'; did you mean 'out'?");

    g = vf_graph_new("t");
    s = add(g, "src", "t_src", NULL, 1);
    k = add(g, "sink", "t_sink", NULL, 2);
    edge(g, s, "", k, "zzz", false, 3);
    expect_invalid(g, "t.lua:3: connect: stage 'sink' (t_sink) has no input port 'zzz' (input ports: in)");

    g = vf_graph_new("t");
    int t2 = add(g, "two", "t_two", NULL, 1);
    k = add(g, "sink", "t_sink", NULL, 2);
    edge(g, t2, "", k, "", false, 3);
    expect_invalid(g, "t.lua:3: connect: stage 'two' (t_two) has several output ports (a, b); name one, "
                      "e.g. two:port(\"a\")");

    g = vf_graph_new("t");
    k = add(g, "sink", "t_sink", NULL, 1);
    int k2 = add(g, "sink2", "t_sink", NULL, 2);
    edge(g, k, "", k2, "", false, 3);
    expect_invalid(g, "t.lua:3: connect: stage 'sink' (t_sink) has no output port");

    g = vf_graph_new("t");
    s = add(g, "src", "t_src", NULL, 1);
    int d = add(g, "d", "t_double", NULL, 2);
    edge(g, s, "", d, "out", false, 3);
    expect_invalid(g, "t.lua:3: connect: port 'out' of stage 'd' (t_double) is an output, not an input");

    /* fan-in: only into multi inputs */
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", NULL, 1);
    int s2 = add(g, "src2", "t_src", NULL, 2);
    k = add(g, "sink", "t_sink", NULL, 3);
    edge(g, s, "", k, "", false, 4);
    edge(g, s2, "", k, "", false, 5);
    expect_invalid(g, "t.lua:5: connect: input 'in' of stage 'sink' (t_sink) already has an edge (from "
                      "'src.out' at t.lua:4) and takes only one");
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", NULL, 1);
    s2 = add(g, "src2", "t_src", NULL, 2);
    int m = add(g, "m", "t_merge", NULL, 3);
    edge(g, s, "", m, "in", false, 4);
    edge(g, s2, "", m, "in", false, 5);
    expect_valid(g);
    vf_graph_free(g);
}

VF_TEST(kinds_params_required)
{
    vf_graph *g = vf_graph_new("t");
    add(g, "x", "t_srcc", NULL, 1);
    expect_invalid(g, "t.lua:1: stage 'x': unknown stage kind 't_srcc'; did you mean 't_src'?");

    g = vf_graph_new("t");
    add(g, "x", "t_src", "{\"shap\":[1]}", 1);
    expect_invalid(g, "t.lua:1: stage 'x' (t_src): param 'shap': unknown param; did you mean 'shape'?");

    g = vf_graph_new("t");
    add(g, "sink", "t_sink", NULL, 7);
    expect_invalid(g, "t.lua:7: stage 'sink' (t_sink): required input 'in' is not connected");

    g = vf_graph_new("empty");
    snprintf(g->script, sizeof g->script, "e.lua");
    expect_invalid(g, "e.lua: pipeline 'empty' has no stages");
}

VF_TEST(cycles)
{
    /* a -> b -> c -> a: reported with the stages on the cycle and the closing edge */
    vf_graph *g = vf_graph_new("t");
    int a = add(g, "a", "t_merge", NULL, 1);
    int b = add(g, "b", "t_merge", NULL, 2);
    int c = add(g, "c", "t_merge", NULL, 3);
    edge(g, a, "out", b, "in", false, 4);
    edge(g, b, "out", c, "in", false, 5);
    edge(g, c, "out", a, "in", false, 6);
    expect_invalid(g, "t.lua:6: unintended cycle a -> b -> c -> a (mark the back edge of a training loop with "
                      "{loop = true})");
    /* self loop */
    g = vf_graph_new("t");
    a = add(g, "a", "t_merge", NULL, 1);
    edge(g, a, "out", a, "in", false, 2);
    expect_invalid(g, "t.lua:2: unintended cycle a -> a (mark the back edge of a training loop with {loop = true})");
    /* the same cycle through a loop edge is fine, and propagation skips it */
    g = vf_graph_new("t");
    int s = add(g, "src", "t_src", NULL, 1);
    a = add(g, "a", "t_merge", NULL, 2);
    b = add(g, "b", "t_merge", NULL, 3);
    edge(g, s, "", a, "in", false, 4);
    edge(g, a, "out", b, "in", false, 5);
    edge(g, b, "out", a, "grads", true, 6);
    expect_valid(g);
    int order[3];
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_graph_topo_order(g, order, &st), 0);
    VF_CHECK_EQ_INT(order[0], s);
    VF_CHECK_EQ_INT(order[1], a);
    VF_CHECK_EQ_INT(order[2], b);
    vf_graph_free(g);
    /* a cycle deeper in the graph: x -> y -> z -> y */
    g = vf_graph_new("t");
    int x = add(g, "x", "t_merge", NULL, 1);
    int y = add(g, "y", "t_merge", NULL, 2);
    int z = add(g, "z", "t_merge", NULL, 3);
    edge(g, x, "out", y, "in", false, 4);
    edge(g, y, "out", z, "in", false, 5);
    edge(g, z, "out", y, "grads", false, 6);
    expect_invalid(g, "t.lua:6: unintended cycle y -> z -> y (mark the back edge of a training loop with "
                      "{loop = true})");
}

VF_TEST(memory_and_placement)
{
    vf_graph *g = vf_graph_new("t");
    int s = add(g, "src", "t_src", "{\"device\":\"cuda:1\"}", 1);
    int o1 = add(g, "own1", "t_own", NULL, 2);
    int o2 = add(g, "own2", "t_own", NULL, 3);
    int k = add(g, "sink", "t_sink", "{\"mem\":1000,\"device\":\"cuda:1\"}", 4);
    int h1 = add(g, "h1", "t_own", NULL, 5);
    int h2 = add(g, "h2", "t_merge", NULL, 6);
    int c = add(g, "c", "t_merge", NULL, 7);
    snprintf(g->stages[h1].worker_hint, VF_NAME_MAX, "pinned");
    snprintf(g->stages[h2].worker_hint, VF_NAME_MAX, "pinned");
    edge(g, s, "", o1, "", false, 8);
    edge(g, o1, "", o2, "", false, 9);
    edge(g, o2, "", k, "", false, 10);
    edge(g, h1, "", h2, "in", false, 11);
    edge(g, h2, "out", c, "in", false, 12);
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_graph_validate(g, &st), 0);
    VF_CHECK_EQ_INT(g->stages[k].mem.n, 1);
    VF_CHECK_EQ_INT(vf_mem_plan_total(&g->stages[k].mem, (vf_device){VF_DEV_CUDA, 1}), 1000);
    VF_CHECK_EQ_INT(g->stages[s].device.kind, VF_DEV_CUDA);
    VF_CHECK_EQ_INT(g->stages[s].device.index, 1);
    VF_CHECK_EQ_INT(vf_graph_place(g, &st), 0);
    VF_CHECK_EQ_INT(g->nworkers, 5);
    VF_CHECK_STR(g->workers[0].name, "w0-cuda1");
    VF_CHECK_STR(g->workers[1].name, "w1-own1");
    VF_CHECK_STR(g->workers[2].name, "w2-own2");
    VF_CHECK_STR(g->workers[3].name, "w3-pinned");
    VF_CHECK_STR(g->workers[4].name, "w4-cpu");
    VF_CHECK_EQ_INT(g->workers[0].device.kind, VF_DEV_CUDA);
    VF_CHECK_EQ_INT(g->stages[k].worker, 0); /* same GPU as src */
    VF_CHECK_EQ_INT(g->stages[h1].worker, 3); /* the hint beats OWN_WORKER */
    VF_CHECK_EQ_INT(g->stages[h2].worker, 3);
    VF_CHECK_EQ_INT(g->stages[c].worker, 4);
    VF_CHECK_EQ_INT(g->edges[0].transport, VF_TR_IPC);
    VF_CHECK_EQ_INT(g->edges[3].transport, VF_TR_INPROC);
    VF_CHECK_EQ_INT(g->edges[4].transport, VF_TR_IPC);
    /* idempotent */
    VF_CHECK_EQ_INT(vf_graph_place(g, &st), 0);
    VF_CHECK_EQ_INT(g->nworkers, 5);
    VF_CHECK_EQ_INT(g->edges[3].transport, VF_TR_INPROC);
    vf_graph_free(g);

    /* a requested tcp edge stays tcp even inside one worker; inproc across workers fails */
    g = vf_graph_new("t");
    s = add(g, "src", "t_src", NULL, 1);
    k = add(g, "sink", "t_sink", NULL, 2);
    o1 = add(g, "own", "t_own", NULL, 3);
    edge(g, s, "", k, "", false, 4);
    g->edges[0].transport = VF_TR_TCP;
    edge(g, s, "", o1, "", false, 5);
    g->edges[1].transport = VF_TR_INPROC;
    VF_CHECK_EQ_INT(vf_graph_validate(g, &st), 0);
    VF_CHECK_EQ_INT(vf_graph_place(g, &st), VF_EUSAGE);
    VF_CHECK_STR(st.msg, "t.lua:5: connect 'src' -> 'own': transport \"inproc\" needs both stages in one worker, "
                         "but they run in 'w0-cpu' and 'w1-own'");
    g->edges[1].transport = VF_TR_AUTO;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_graph_place(g, &st), 0);
    VF_CHECK_EQ_INT(g->edges[0].transport, VF_TR_TCP);
    vf_graph_free(g);

    /* one worker, one GPU */
    g = vf_graph_new("t");
    s = add(g, "a", "t_src", "{\"device\":\"cuda:0\"}", 1);
    k = add(g, "b", "t_sink", "{\"device\":\"cuda:1\"}", 2);
    snprintf(g->stages[s].worker_hint, VF_NAME_MAX, "w");
    snprintf(g->stages[k].worker_hint, VF_NAME_MAX, "w");
    edge(g, s, "", k, "", false, 3);
    VF_CHECK_EQ_INT(vf_graph_validate(g, &st), 0);
    VF_CHECK_EQ_INT(vf_graph_place(g, &st), VF_EUSAGE);
    VF_CHECK_STR(st.msg, "t.lua:2: stage 'b' (t_sink): worker 'w' already drives cuda:0 (stage 'a'); one worker "
                         "uses one GPU");
    vf_graph_free(g);
}

VF_TEST(overrides)
{
    vf_graph *g = vf_graph_new("t");
    int s = add(g, "src", "t_src", NULL, 1);
    int k = add(g, "sink", "t_sink", "{\"expect_shape\":[4,3]}", 2);
    edge(g, s, "", k, "", false, 3);
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_graph_override(g, "src.shape", "[8,3]", &st), 0);
    VF_CHECK_EQ_INT(vf_graph_override(g, "src.dtype", "bf16", &st), 0); /* not JSON: a string */
    VF_CHECK(vf_graph_override(g, "srcc.shape", "1", &st) < 0);
    VF_CHECK_STR(st.msg, "--set srcc.shape=1: no stage named 'srcc'; did you mean 'src'?");
    vf_status_clear(&st);
    VF_CHECK(vf_graph_override(g, "nothing.shape", "1", &st) < 0);
    VF_CHECK_STR(st.msg, "--set nothing.shape=1: no stage named 'nothing'");
    vf_status_clear(&st);
    VF_CHECK(vf_graph_override(g, "src.shap", "1", &st) < 0);
    VF_CHECK_STR(st.msg, "--set src.shap=1: stage 'src' (t_src) has no param 'shap'; did you mean 'shape'?");
    vf_status_clear(&st);
    VF_CHECK(vf_graph_override(g, "src.", "1", &st) < 0);
    VF_CHECK_STR(st.msg, "--set src.=1: expected NAME.PARAM=VALUE");
    VF_CHECK_EQ_INT(vf_param_int_at(g->stages[s].params, "shape", 0), 8);
    VF_CHECK_STR(vf_param_str(g->stages[s].params, "dtype"), "bf16");
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_graph_validate(g, &st), VF_EUSAGE);
    VF_CHECK_STR(st.msg, "t.lua:3: connect 'src.out' -> 'sink.in': tensor 'x' dtype mismatch: sends bf16, expects f32");
    vf_graph_free(g);
}

static vf_graph *sample_graph(void)
{
    vf_graph *g = vf_graph_new("round");
    snprintf(g->script, sizeof g->script, "pipe \"x\".lua");
    int s = add(g, "src", "t_src", "{\"shape\":[2,3],\"dtype\":\"u8\"}", 1);
    int a = add(g, "a", "t_merge", NULL, 2);
    int b = add(g, "b", "t_merge", NULL, 3);
    int o = add(g, "own", "t_own", NULL, 4);
    snprintf(g->stages[b].worker_hint, VF_NAME_MAX, "pin");
    edge(g, s, "", a, "in", false, 5);
    edge(g, a, "out", b, "in", false, 6);
    edge(g, b, "out", a, "grads", true, 7);
    edge(g, b, "out", o, "", false, 8);
    g->edges[3].transport = VF_TR_TCP;
    g->edges[3].capacity = 7;
    return g;
}

VF_TEST(json_round_trip)
{
    vf_graph *g = sample_graph();
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_graph_validate(g, &st), 0);
    VF_CHECK_EQ_INT(vf_graph_place(g, &st), 0);
    char *j1 = vf_graph_to_json(g);
    VF_CHECK(j1 != NULL);
    vf_graph *h = NULL;
    VF_CHECK_EQ_INT(vf_graph_from_json(j1, &h, &st), 0);
    if (!h) return;
    VF_CHECK_STR(h->name, "round");
    VF_CHECK_STR(h->script, "pipe \"x\".lua");
    VF_CHECK_EQ_INT(h->nstages, 4);
    VF_CHECK_EQ_INT(h->nedges, 4);
    VF_CHECK_EQ_INT(h->nworkers, g->nworkers);
    for (int i = 0; i < 4; i++) {
        VF_CHECK_STR(h->stages[i].name, g->stages[i].name);
        VF_CHECK_STR(h->stages[i].where, g->stages[i].where);
        VF_CHECK_EQ_INT(h->stages[i].worker, g->stages[i].worker);
        VF_CHECK(vf_json_equal(vf_params_ctree(h->stages[i].params), vf_params_ctree(g->stages[i].params)));
        VF_CHECK(h->stages[i].ops == NULL); /* resolved by validating again */
    }
    VF_CHECK_STR(h->stages[2].worker_hint, "pin");
    VF_CHECK(h->edges[2].loop);
    VF_CHECK_EQ_INT(h->edges[3].transport, VF_TR_TCP);
    VF_CHECK_EQ_INT(h->edges[3].capacity, 7);
    VF_CHECK_EQ_INT(h->edges[1].transport, g->edges[1].transport);
    /* a worker validating the graph again gets the same port specs, placement untouched */
    VF_CHECK_EQ_INT(vf_graph_validate(h, &st), 0);
    VF_CHECK(memcmp(&h->stages[0].ports, &g->stages[0].ports, sizeof g->stages[0].ports) == 0);
    char *j2 = vf_graph_to_json(h);
    VF_CHECK_STR(j1, j2);
    free(j1);
    free(j2);
    vf_graph_free(h);
    vf_graph_free(g);

    const char *bad[] = {
        "", "[]", "{\"name\":\"x\"}", "{\"name\":\"x\",\"stages\":[{\"name\":\"a\"}],\"edges\":[]}",
        "{\"name\":\"x\",\"stages\":[],\"edges\":[{\"src\":\"a\",\"dst\":\"b\"}]}",
        "{\"name\":\"x\",\"stages\":[{\"name\":\"a\",\"kind\":\"k\",\"params\":{},\"worker\":3}],\"edges\":[]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vf_status_clear(&st);
        h = (vf_graph *)1;
        VF_CHECK_MSG(vf_graph_from_json(bad[i], &h, &st) < 0, "accepted %s", bad[i]);
        VF_CHECK(h == NULL);
        VF_CHECK(st.msg[0] != 0);
    }
}

VF_TEST(dot)
{
    vf_graph *g = sample_graph();
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_graph_validate(g, &st), 0);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    VF_CHECK_EQ_INT(vf_graph_dot(g, f), 0);
    fclose(f);
    VF_CHECK_STR(buf, "digraph \"round\" {\n"
                      "  rankdir=LR;\n"
                      "  node [shape=box, style=rounded];\n"
                      "  \"src\" [label=\"src\\nt_src\"];\n"
                      "  \"a\" [label=\"a\\nt_merge\"];\n"
                      "  \"b\" [label=\"b\\nt_merge\"];\n"
                      "  \"own\" [label=\"own\\nt_own\"];\n"
                      "  \"src\" -> \"a\" [label=\"out -> in\\ncap 2\"];\n"
                      "  \"a\" -> \"b\" [label=\"out -> in\\ncap 2\"];\n"
                      "  \"b\" -> \"a\" [label=\"out -> grads\\ncap 2\", style=dashed, constraint=false];\n"
                      "  \"b\" -> \"own\" [label=\"out -> in\\ncap 7, tcp\"];\n"
                      "}\n");
    free(buf);
    /* placed: one cluster per worker */
    VF_CHECK_EQ_INT(vf_graph_place(g, &st), 0);
    f = open_memstream(&buf, &n);
    vf_graph_dot(g, f);
    fclose(f);
    VF_CHECK(strstr(buf, "  subgraph \"cluster_0\" {\n    label=\"w0-cpu\";\n    \"src\" [label=\"src\\nt_src\"];\n"
                         "    \"a\" [label=\"a\\nt_merge\"];\n  }\n") != NULL);
    VF_CHECK(strstr(buf, "label=\"w1-pin\";\n    \"b\" [label=\"b\\nt_merge\"];") != NULL);
    VF_CHECK(strstr(buf, "label=\"w2-own\";\n    \"own\" [label=\"own\\nt_own\"];") != NULL);
    free(buf);
    vf_graph_free(g);
}

int main(void) { return vf_test_main(); }
