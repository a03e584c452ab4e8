/* fuzz_json.c — libFuzzer target for the strict JSON parser, the graph JSON reader and
 * params validation (what a worker parses from the run dir and `--set` values feed).
 *
 * Properties beyond "no crash / no out-of-bounds read" (ASan):
 *   - a refused text leaves NULL and a "line L, column C: ..." message;
 *   - an accepted text emits canonical JSON that parses back to an equal tree and emits
 *     the same bytes again (one canonical form);
 *   - vf_graph_from_json either fails with a message or gives a graph whose JSON reads
 *     back to the same JSON;
 *   - params validation against a small schema either fails with a message or is
 *     idempotent (validating again changes nothing).
 * In the normal build it is linked with replay_main.c and runs over corpus/fuzz_json/.
 */
#include "runtime/graph/graph.h"
#include "runtime/json.h"
#include "runtime/core/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_json: property violated: %s\n", what);
    abort();
}

static const vf_param_spec inner[] = {
    {"dim", VF_P_INT, "8", VF_RANGE(1, 4096), "", NULL, NULL},
    {0},
};
static const vf_param_spec schema[] = {
    {"n", VF_P_INT, "2", VF_RANGE(1, 64), "", NULL, NULL},
    {"x", VF_P_NUM, "0.5", VF_RANGE(0, 1), "", NULL, NULL},
    {"s", VF_P_STR, "\"a\"", VF_ANY, "", "a|b", NULL},
    {"d", VF_P_DEVICE, "\"cpu\"", VF_ANY, "", NULL, NULL},
    {"l", VF_P_LIST_INT, "[1]", VF_ANY, "", NULL, NULL},
    {"m", VF_P_TABLE, "{}", VF_ANY, "", NULL, inner},
    {"o", VF_P_STR, "null", VF_ANY, "", NULL, NULL},
    {0},
};

static void check_tree(const char *text, size_t n)
{
    vf_status st = {0};
    vf_json *j = vf_json_parse_n(text, n, &st);
    if (!j) {
        if (st.code != VF_EINVAL || strncmp(st.msg, "line ", 5) != 0) fail("refusal without a position");
        return;
    }
    char *a = vf_json_emit(j, true, 0);
    if (!a) fail("accepted tree does not emit");
    vf_status st2 = {0};
    vf_json *k = vf_json_parse(a, &st2);
    if (!k || !vf_json_equal(j, k)) fail("canonical text does not read back equal");
    char *b = vf_json_emit(k, true, 0);
    if (!b || strcmp(a, b) != 0) fail("canonical text is not stable");
    char *pretty = vf_json_emit(j, false, 2);
    vf_json *p = pretty ? vf_json_parse(pretty, &st2) : NULL;
    if (!p || !vf_json_equal(j, p)) fail("indented text does not read back equal");
    vf_json_free(p);
    free(pretty);
    if (j->type == VF_JSON_OBJ) {
        vf_params *params = vf_params_adopt(vf_json_clone(j));
        vf_status ps = {0};
        if (vf_params_validate(params, schema, "s", "f:1", &ps) < 0) {
            if (!ps.msg[0]) fail("params refused without a message");
        } else {
            char *v1 = vf_params_json(params);
            if (vf_params_validate(params, schema, "s", "f:1", &ps) < 0) fail("validation not idempotent");
            char *v2 = vf_params_json(params);
            if (!v1 || !v2 || strcmp(v1, v2) != 0) fail("validation changed valid params");
            free(v1);
            free(v2);
        }
        vf_params_free(params);
    }
    free(a);
    free(b);
    vf_json_free(k);
    vf_json_free(j);
}

static void check_graph(const char *text)
{
    vf_status st = {0};
    vf_graph *g = (vf_graph *)1;
    if (vf_graph_from_json(text, &g, &st) < 0) {
        if (g != NULL || !st.msg[0]) fail("graph refused without a message");
        return;
    }
    char *a = vf_graph_to_json(g);
    vf_graph *h = NULL;
    if (!a || vf_graph_from_json(a, &h, &st) < 0) fail("graph JSON does not read back");
    char *b = vf_graph_to_json(h);
    if (!b || strcmp(a, b) != 0) fail("graph JSON not stable");
    free(a);
    free(b);
    vf_graph_free(h);
    vf_graph_free(g);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    check_tree((const char *)data, size);
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    if (strlen(text) == size) check_graph(text);
    free(text);
    return 0;
}
