/* test_params.c — params against schemas: defaults filled, numbers normalised, getters,
 * every validation message word for word, --set style overrides, did-you-mean. */
#include "tests/vf_test.h"

#include "runtime/json.h"
#include "runtime/core/params.h"

static const vf_param_spec model_fields[] = {
    {"dim", VF_P_INT, "8", VF_RANGE(1, 4096), "width", NULL, NULL},
    {"mult", VF_P_LIST_INT, "[1,2]", VF_RANGE(1, 8), "per level", NULL, NULL},
    {"name", VF_P_STR, NULL, VF_ANY, "preset", NULL, NULL},
    {0},
};

static const vf_param_spec schema[] = {
    {"micro_batch", VF_P_INT, "2", VF_RANGE(1, 64), "clips per forward", NULL, NULL},
    {"lr", VF_P_NUM, "0.001", VF_RANGE(0, 1), "learning rate", NULL, NULL},
    {"recompute", VF_P_BOOL, "false", VF_ANY, "recompute activations", NULL, NULL},
    {"path", VF_P_STR, NULL, VF_ANY, "where", NULL, NULL},
    {"mode", VF_P_STR, "\"fast\"", VF_ANY, "how", "fast|slow|exact", NULL},
    {"device", VF_P_DEVICE, "\"cpu\"", VF_ANY, "where it runs", NULL, NULL},
    {"size", VF_P_LIST_INT, "[256,256]", VF_RANGE(1, 8192), "H, W", NULL, NULL},
    {"betas", VF_P_LIST_NUM, "[0.9,0.999]", VF_RANGE(0, 1), "Adam betas", NULL, NULL},
    {"tags", VF_P_LIST_STR, "[]", VF_ANY, "labels", "a|b|c", NULL},
    {"weights", VF_P_STR, "null", VF_ANY, "optional file", NULL, NULL},
    {"model", VF_P_TABLE, "{\"name\":\"tiny\"}", VF_ANY, "preset", NULL, model_fields},
    {"extra", VF_P_TABLE, "{}", VF_ANY, "free-form", NULL, NULL},
    {0},
};

/* Validates json against the schema; returns the params (NULL on error, st filled). */
static vf_params *check(const char *json, vf_status *st)
{
    vf_status_clear(st);
    vf_params *p = vf_params_from_json(json, st);
    if (!p) return NULL;
    if (vf_params_validate_kind(p, schema, "vae", "vae_encode", "pipe.lua:7", st) < 0) {
        vf_params_free(p);
        return NULL;
    }
    return p;
}

static void expect_err(const char *json, const char *want)
{
    vf_status st = {0};
    vf_params *p = check(json, &st);
    VF_CHECK_MSG(p == NULL, "accepted %s", json);
    VF_CHECK_EQ_INT(st.code, VF_EUSAGE);
    VF_CHECK_STR(st.msg, want);
    vf_params_free(p);
}

VF_TEST(defaults_filled)
{
    vf_status st = {0};
    vf_params *p = check("{\"path\":\"x.lmdb\"}", &st);
    VF_CHECK_MSG(p != NULL, "%s", st.msg);
    if (!p) return;
    VF_CHECK_EQ_INT(vf_param_int(p, "micro_batch"), 2);
    VF_CHECK_NEAR(vf_param_num(p, "lr"), 0.001, 0);
    VF_CHECK(!vf_param_bool(p, "recompute"));
    VF_CHECK_STR(vf_param_str(p, "path"), "x.lmdb");
    VF_CHECK_STR(vf_param_str(p, "mode"), "fast");
    VF_CHECK_EQ_INT(vf_param_device(p, "device").kind, VF_DEV_CPU);
    VF_CHECK_EQ_INT(vf_param_len(p, "size"), 2);
    VF_CHECK_EQ_INT(vf_param_int_at(p, "size", 1), 256);
    VF_CHECK_NEAR(vf_param_num_at(p, "betas", 1), 0.999, 0);
    VF_CHECK_EQ_INT(vf_param_len(p, "tags"), 0);
    VF_CHECK(!vf_param_has(p, "weights")); /* "null" default: optional, absent */
    VF_CHECK(vf_param_str(p, "weights") == NULL);
    const vf_params *m = vf_param_table(p, "model");
    VF_CHECK(m != NULL);
    VF_CHECK_EQ_INT(vf_param_int(m, "dim"), 8);  /* nested defaults too */
    VF_CHECK_EQ_INT(vf_param_int_at(m, "mult", 1), 2);
    VF_CHECK_STR(vf_param_str(m, "name"), "tiny");
    VF_CHECK(vf_param_table(p, "extra") != NULL);
    char *j = vf_params_json(p);
    VF_CHECK_STR(j, "{\"betas\":[0.9,0.999],\"device\":\"cpu\",\"extra\":{},\"lr\":0.001,\"micro_batch\":2,"
                    "\"mode\":\"fast\",\"model\":{\"dim\":8,\"mult\":[1,2],\"name\":\"tiny\"},\"path\":\"x.lmdb\","
                    "\"recompute\":false,\"size\":[256,256],\"tags\":[]}");
    free(j);
    vf_params_free(p);
}

VF_TEST(values_and_normalisation)
{
    vf_status st = {0};
    /* 4.0 is an integer for an int param; 1 is a float for a number param, so equal
     * configs hash equal whichever way they were written. */
    vf_params *p = check("{\"path\":\"p\",\"micro_batch\":4.0,\"lr\":1,\"betas\":[1,0],\"device\":\"cuda:3\","
                         "\"tags\":[\"b\",\"a\"],\"extra\":[],\"model\":{\"dim\":16,\"name\":\"big\"},\"weights\":null}",
                         &st);
    VF_CHECK_MSG(p != NULL, "%s", st.msg);
    if (!p) return;
    const vf_json *t = vf_params_ctree(p);
    VF_CHECK_EQ_INT(vf_json_get(t, "micro_batch")->type, VF_JSON_INT);
    VF_CHECK_EQ_INT(vf_json_get(t, "lr")->type, VF_JSON_NUM);
    VF_CHECK_EQ_INT(vf_json_get(t, "extra")->type, VF_JSON_OBJ);
    VF_CHECK_EQ_INT(vf_param_int(p, "micro_batch"), 4);
    vf_device d = vf_param_device(p, "device");
    VF_CHECK_EQ_INT(d.kind, VF_DEV_CUDA);
    VF_CHECK_EQ_INT(d.index, 3);
    VF_CHECK_STR(vf_param_str_at(p, "tags", 1), "a");
    VF_CHECK(!vf_param_has(p, "weights"));
    char *j = vf_params_json(p);
    VF_CHECK(strstr(j, "\"lr\":1.0,") != NULL);
    VF_CHECK(strstr(j, "\"betas\":[1.0,0.0]") != NULL);
    VF_CHECK(strstr(j, "\"model\":{\"dim\":16,\"mult\":[1,2],\"name\":\"big\"}") != NULL);
    free(j);
    /* validating again changes nothing (workers re-validate the resolved graph) */
    char *a = vf_params_json(p);
    VF_CHECK_EQ_INT(vf_params_validate(p, schema, "vae", "x", &st), 0);
    char *b = vf_params_json(p);
    VF_CHECK_STR(a, b);
    free(a);
    free(b);
    vf_params *c = vf_params_clone(p, &st);
    VF_CHECK(vf_json_equal(vf_params_ctree(c), vf_params_ctree(p)));
    vf_params_free(c);
    vf_params_free(p);
    /* "cuda" alone is device 0 */
    p = check("{\"path\":\"p\",\"device\":\"cuda\"}", &st);
    VF_CHECK(p && vf_param_device(p, "device").kind == VF_DEV_CUDA && vf_param_device(p, "device").index == 0);
    vf_params_free(p);
}

VF_TEST(every_error_message)
{
    const char *P = "pipe.lua:7: stage 'vae' (vae_encode): ";
    char want[512];
#define E(json, tail)                                        \
    do {                                                     \
        snprintf(want, sizeof want, "%s%s", P, tail);        \
        expect_err(json, want);                              \
    } while (0)
    E("{\"path\":\"p\",\"micro_bach\":3}", "param 'micro_bach': unknown param; did you mean 'micro_batch'?");
    E("{\"path\":\"p\",\"zzz\":3}",
      "param 'zzz': unknown param (known: micro_batch, lr, recompute, path, mode, device, size, betas, tags, "
      "weights, model, extra)");
    E("{}", "param 'path': required param is missing");
    E("{\"path\":3}", "param 'path': expected a string, got number 3");
    E("{\"path\":\"p\",\"micro_batch\":\"4\"}", "param 'micro_batch': expected an integer, got string \"4\"");
    E("{\"path\":\"p\",\"micro_batch\":2.5}", "param 'micro_batch': expected an integer, got number 2.5");
    E("{\"path\":\"p\",\"micro_batch\":true}", "param 'micro_batch': expected an integer, got boolean true");
    E("{\"path\":\"p\",\"micro_batch\":0}", "param 'micro_batch': 0 is out of range [1, 64]");
    E("{\"path\":\"p\",\"micro_batch\":65}", "param 'micro_batch': 65 is out of range [1, 64]");
    E("{\"path\":\"p\",\"lr\":1.5}", "param 'lr': 1.5 is out of range [0, 1]");
    E("{\"path\":\"p\",\"lr\":[1]}", "param 'lr': expected a number, got list [1]");
    E("{\"path\":\"p\",\"recompute\":1}", "param 'recompute': expected a boolean, got number 1");
    E("{\"path\":\"p\",\"mode\":\"fst\"}", "param 'mode': \"fst\" is not one of: fast, slow, exact; did you mean 'fast'?");
    E("{\"path\":\"p\",\"mode\":\"zzzz\"}", "param 'mode': \"zzzz\" is not one of: fast, slow, exact");
    E("{\"path\":\"p\",\"device\":\"gpu:0\"}",
      "param 'device': unknown device \"gpu:0\" (expected \"cpu\", \"cuda\" or \"cuda:N\")");
    E("{\"path\":\"p\",\"device\":\"cuda:x\"}",
      "param 'device': unknown device \"cuda:x\" (expected \"cpu\", \"cuda\" or \"cuda:N\")");
    E("{\"path\":\"p\",\"device\":0}", "param 'device': expected a device (\"cpu\" or \"cuda:N\"), got number 0");
    E("{\"path\":\"p\",\"size\":256}", "param 'size': expected a list of integers, got number 256");
    E("{\"path\":\"p\",\"size\":[256,\"x\"]}", "param 'size': element 2: expected an integer, got string \"x\"");
    E("{\"path\":\"p\",\"size\":[256,0]}", "param 'size': element 2: 0 is out of range [1, 8192]");
    E("{\"path\":\"p\",\"betas\":[0.9,2]}", "param 'betas': element 2: 2 is out of range [0, 1]");
    E("{\"path\":\"p\",\"tags\":[\"a\",\"d\"]}", "param 'tags': element 2: \"d\" is not one of: a, b, c");
    E("{\"path\":\"p\",\"tags\":[1]}", "param 'tags': element 1: expected a string, got number 1");
    E("{\"path\":\"p\",\"model\":\"tiny\"}", "param 'model': expected a table, got string \"tiny\"");
    E("{\"path\":\"p\",\"model\":{\"name\":\"t\",\"dimm\":3}}", "param 'model.dimm': unknown param; did you mean 'dim'?");
    E("{\"path\":\"p\",\"model\":{\"dim\":3}}", "param 'model.name': required param is missing");
    E("{\"path\":\"p\",\"model\":{\"name\":\"t\",\"mult\":[1,9]}}", "param 'model.mult': element 2: 9 is out of range [1, 8]");
#undef E
}

/* A list of tables: free-form elements, or each checked against fields; element i by
 * vf_param_table_at; anything else refused naming the element. */
VF_TEST(list_of_tables_by_index)
{
    static const vf_param_spec lt[] = {
        {"buckets", VF_P_LIST_TABLE, "[]", VF_ANY, "free-form tables", NULL, NULL},
        {"rows", VF_P_LIST_TABLE, "[]", VF_ANY, "checked tables", NULL, model_fields},
        {0},
    };
    vf_status st = {0};
    vf_params *p = vf_params_from_json("{\"buckets\":[{\"w\":64,\"frames\":[1,5]},{}],\"rows\":[{\"name\":\"a\"}]}", &st);
    VF_CHECK(p && vf_params_validate_kind(p, lt, "r", "latent_reader", "x.lua:1", &st) == 0);
    VF_CHECK_EQ_INT(vf_param_len(p, "buckets"), 2);
    const vf_params *t = vf_param_table_at(p, "buckets", 0);
    VF_CHECK(t && vf_param_int(t, "w") == 64 && vf_param_len(t, "frames") == 2 && vf_param_int_at(t, "frames", 1) == 5);
    VF_CHECK(vf_param_table_at(p, "buckets", 1) != NULL && vf_param_table_at(p, "buckets", 2) == NULL);
    VF_CHECK(vf_param_int(vf_param_table_at(p, "rows", 0), "dim") == 8); /* the fields' defaults filled */
    vf_params_free(p);
    static const char *const bad[][2] = {
        {"{\"buckets\":{\"w\":1}}", "param 'buckets': expected a list of tables, got"},
        {"{\"buckets\":[{\"w\":1},3]}", "param 'buckets': element 2: expected a table, got number 3"},
        {"{\"rows\":[{\"name\":\"a\",\"dimm\":1}]}", "param 'rows[1].dimm': unknown param; did you mean 'dim'?"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vf_status_clear(&st);
        p = vf_params_from_json(bad[i][0], &st);
        VF_CHECK(p && vf_params_validate_kind(p, lt, "r", "latent_reader", "x.lua:1", &st) < 0);
        VF_CHECK_MSG(strstr(st.msg, bad[i][1]) != NULL, "%s: %s", bad[i][0], st.msg);
        vf_params_free(p);
    }
}

VF_TEST(long_values_are_cut)
{
    vf_status st = {0};
    vf_params *p = check("{\"path\":[\"a very long string that goes on and on and on\"]}", &st);
    VF_CHECK(p == NULL);
    VF_CHECK_STR(st.msg, "pipe.lua:7: stage 'vae' (vae_encode): param 'path': expected a string, got list "
                         "[\"a very long string that goes on and...");
}

VF_TEST(without_kind_or_where)
{
    vf_status st = {0};
    vf_params *p = vf_params_from_json("{\"q\":1}", &st);
    VF_CHECK(vf_params_validate(p, schema, "s", NULL, &st) < 0);
    VF_CHECK_STR(st.msg, "stage 's': param 'q': unknown param (known: micro_batch, lr, recompute, path, mode, "
                         "device, size, betas, tags, weights, model, extra)");
    vf_params_free(p);
    static const vf_param_spec none[] = {{0}};
    p = vf_params_from_json("{\"q\":1}", &st);
    vf_status_clear(&st);
    VF_CHECK(vf_params_validate(p, none, "s", "f.lua:1", &st) < 0);
    VF_CHECK_STR(st.msg, "f.lua:1: stage 's': param 'q': unknown param (this stage takes no params)");
    vf_params_free(p);
}

/* A list of tables: each element a table, checked against `fields` when given; the
 * stage reads it through the params' JSON tree. */
VF_TEST(list_of_tables)
{
    static const vf_param_spec item[] = {
        {"w", VF_P_INT, NULL, VF_RANGE(1, 100), "width", NULL, NULL},
        {"tag", VF_P_STR, "\"x\"", VF_ANY, "label", NULL, NULL},
        {0},
    };
    static const vf_param_spec lt[] = {
        {"items", VF_P_LIST_TABLE, "null", VF_ANY, "checked", NULL, item},
        {"free", VF_P_LIST_TABLE, "null", VF_ANY, "free-form", NULL, NULL},
        {0},
    };
    static const struct { const char *json, *err; } cases[] = {
        {"{\"items\":[{\"w\":3},{\"w\":4,\"tag\":\"y\"}],\"free\":[{\"a\":[1]},{}]}", NULL},
        {"{\"items\":{\"w\":3}}", "f.lua:1: stage 's': param 'items': expected a list of tables, got table {\"w\":3}"},
        {"{\"items\":[{\"w\":3},5]}", "f.lua:1: stage 's': param 'items': element 2: expected a table, got number 5"},
        {"{\"items\":[{\"w\":3},{\"w\":0}]}", "f.lua:1: stage 's': param 'items[2].w': 0 is out of range [1, 100]"},
        {"{\"items\":[{\"ww\":3}]}", "f.lua:1: stage 's': param 'items[1].ww': unknown param; did you mean 'w'?"},
        {"{\"free\":[[1,2]]}", "f.lua:1: stage 's': param 'free': element 1: expected a table, got list [1,2]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vf_status st = {0};
        vf_params *p = vf_params_from_json(cases[i].json, &st);
        VF_CHECK(p != NULL);
        if (!p) continue;
        int rc = vf_params_validate(p, lt, "s", "f.lua:1", &st);
        if (!cases[i].err) {
            VF_CHECK_MSG(rc == 0, "%s", st.msg);
            VF_CHECK_EQ_INT(vf_param_len(p, "items"), 2);
            const vf_json *it = vf_json_at(vf_json_get(vf_params_ctree(p), "items"), 0);
            VF_CHECK_EQ_INT(vf_json_get_int(it, "w", 0), 3);
            VF_CHECK_STR(vf_json_get_str(it, "tag", "?"), "x"); /* the element's default filled */
        } else {
            VF_CHECK_MSG(rc < 0, "accepted %s", cases[i].json);
            VF_CHECK_STR(st.msg, cases[i].err);
        }
        vf_params_free(p);
    }
}

VF_TEST(bad_schema_default)
{
    static const vf_param_spec bad[] = {{"n", VF_P_INT, "four", VF_ANY, "x", NULL, NULL}, {0}};
    vf_status st = {0};
    vf_params *p = vf_params_new();
    VF_CHECK(vf_params_validate(p, bad, "s", "f.lua:1", &st) < 0);
    VF_CHECK_EQ_INT(st.code, VF_EINVAL);
    VF_CHECK(strstr(st.msg, "the schema's default is not JSON (four)") != NULL);
    vf_params_free(p);
}

VF_TEST(set_json)
{
    vf_status st = {0};
    vf_params *p = vf_params_new();
    VF_CHECK_EQ_INT(vf_params_set_json(p, "micro_batch", "8", &st), 0);
    VF_CHECK_EQ_INT(vf_params_set_json(p, "path", "cache/x.lmdb", &st), 0); /* not JSON: a string */
    VF_CHECK_EQ_INT(vf_params_set_json(p, "size", "[64,64]", &st), 0);
    VF_CHECK_EQ_INT(vf_params_set_json(p, "model.dim", "16", &st), 0);
    VF_CHECK_EQ_INT(vf_params_set_json(p, "model.name", "\"x\"", &st), 0);
    VF_CHECK_EQ_INT(vf_params_set_json(p, "device", "cuda:1", &st), 0);
    char *j = vf_params_json(p);
    VF_CHECK_STR(j, "{\"device\":\"cuda:1\",\"micro_batch\":8,\"model\":{\"dim\":16,\"name\":\"x\"},"
                    "\"path\":\"cache/x.lmdb\",\"size\":[64,64]}");
    free(j);
    VF_CHECK(vf_params_set_json(p, "micro_batch.x", "1", &st) < 0);
    VF_CHECK_STR(st.msg, "param 'micro_batch.x': 'micro_batch' is not a table");
    VF_CHECK_EQ_INT(vf_params_validate(p, schema, "s", "f:1", &st), VF_OK);
    vf_params_free(p);
    vf_params *q = vf_params_from_json("[1]", &st);
    VF_CHECK(q == NULL);
}

VF_TEST(did_you_mean)
{
    const char *c[] = {"micro_batch", "chunk", "device", "weights"};
    VF_CHECK_STR(vf_did_you_mean("micro_bach", c, 4), "micro_batch");
    VF_CHECK_STR(vf_did_you_mean("chnk", c, 4), "chunk");
    VF_CHECK_STR(vf_did_you_mean("devcie", c, 4), "device");
    VF_CHECK(vf_did_you_mean("x", c, 4) == NULL);
    VF_CHECK(vf_did_you_mean("learning_rate", c, 4) == NULL);
    VF_CHECK_EQ_INT(vf_edit_distance("kitten", "sitting"), 3);
    VF_CHECK_EQ_INT(vf_edit_distance("", "abc"), 3);
    VF_CHECK_EQ_INT(vf_edit_distance("same", "same"), 0);
    /* two letters swapped is one typo: "stpes" is 1 from "steps", 2 by plain Levenshtein */
    VF_CHECK_EQ_INT(vf_edit_distance("stpes", "steps"), 1);
    VF_CHECK_EQ_INT(vf_edit_distance("ca", "abc"), 3); /* no swap reuses a letter twice */
    const char *k[] = {"steps", "batch", "stages", "shards", "lr"};
    VF_CHECK_STR(vf_did_you_mean("stpes", k, 5), "steps");
    VF_CHECK_STR(vf_did_you_mean("bacth", k, 5), "batch");
}

/* An int param with choices takes those words too, as strings; anything else names both. */
VF_TEST(int_or_word)
{
    static const vf_param_spec sch[] = {
        {"blocks", VF_P_INT, "0", VF_RANGE(0, 64), "how many", "auto", NULL},
        {0},
    };
    const char *ok[] = {"{\"blocks\":\"auto\"}", "{\"blocks\":7}", "{}"};
    for (int i = 0; i < 3; i++) {
        vf_status st = {0};
        vf_params *p = vf_params_from_json(ok[i], &st);
        VF_CHECK(p && vf_params_validate_kind(p, sch, "d", "dit", "pipe.lua:3", &st) == 0);
        if (p && i == 0) VF_CHECK_STR(vf_param_str(p, "blocks"), "auto");
        if (p && i == 1) VF_CHECK(vf_param_str(p, "blocks") == NULL && vf_param_int(p, "blocks") == 7);
        vf_params_free(p);
    }
    const char *bad[][2] = {
        {"{\"blocks\":\"some\"}", "pipe.lua:3: stage 'd' (dit): param 'blocks': \"some\" is not one of: auto"},
        {"{\"blocks\":1.5}", "pipe.lua:3: stage 'd' (dit): param 'blocks': expected an integer or auto, got number 1.5"},
        {"{\"blocks\":65}", "pipe.lua:3: stage 'd' (dit): param 'blocks': 65 is out of range [0, 64]"},
    };
    for (int i = 0; i < 3; i++) {
        vf_status st = {0};
        vf_params *p = vf_params_from_json(bad[i][0], &st);
        VF_CHECK(p && vf_params_validate_kind(p, sch, "d", "dit", "pipe.lua:3", &st) == VF_EUSAGE);
        VF_CHECK_STR(st.msg, bad[i][1]);
        vf_params_free(p);
    }
}

int main(void) { return vf_test_main(); }
