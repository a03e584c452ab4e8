/* help_cli.c — `vflow help [KIND|stages|--params-md]`: the usage text, the stage kinds,
 * the params of one kind (from its schema), or the README's generated params table. */
#include "cli/cli.h"
#include "runtime/core/params.h"
#include "runtime/core/stage.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void default_text(const vf_param_spec *p, char *buf, size_t n)
{
    if (!p->def) snprintf(buf, n, "required");
    else if (strcmp(p->def, "null") == 0) snprintf(buf, n, "-");
    else snprintf(buf, n, "%s", p->def);
}

static void num_text(double v, char *buf, size_t n)
{
    if (v == (double)(int64_t)v && v > -1e15 && v < 1e15) snprintf(buf, n, "%lld", (long long)v);
    else snprintf(buf, n, "%g", v);
}

static void range_text(const vf_param_spec *p, char *buf, size_t n)
{
    char lo[32], hi[32];
    buf[0] = 0;
    if (p->choices && p->type == VF_P_INT && p->min <= p->max) { /* an integer or one of the words */
        num_text(p->min, lo, sizeof lo);
        num_text(p->max, hi, sizeof hi);
        snprintf(buf, n, "%s .. %s or %s", lo, hi, p->choices);
    } else if (p->choices) {
        snprintf(buf, n, "%s", p->choices);
    } else if (p->min <= p->max) {
        num_text(p->min, lo, sizeof lo);
        num_text(p->max, hi, sizeof hi);
        snprintf(buf, n, "%s .. %s", lo, hi);
    }
}

/* Markdown table cell: '|' would end the cell. */
static void md_cell(const char *s)
{
    for (; *s; s++) {
        if (*s == '|') fputc('\\', stdout);
        fputc(*s, stdout);
    }
}

static void params_md(const vf_param_spec *spec, const char *prefix)
{
    char def[256], range[256];
    for (const vf_param_spec *p = spec; p && p->name; p++) {
        default_text(p, def, sizeof def);
        range_text(p, range, sizeof range);
        bool code = p->def && strcmp(p->def, "null") != 0;
        printf("| `%s%s` | %s | %s", prefix, p->name, vf_param_type_name(p->type), code ? "`" : "");
        md_cell(def);
        printf("%s | ", code ? "`" : "");
        md_cell(range);
        printf(" | ");
        md_cell(p->doc ? p->doc : "");
        printf(" |\n");
        if (p->type == VF_P_TABLE && p->fields) {
            char sub[128];
            snprintf(sub, sizeof sub, "%s%s.", prefix, p->name);
            params_md(p->fields, sub);
        }
    }
}

static void params_text(const vf_param_spec *spec, int indent)
{
    char def[256], range[256];
    for (const vf_param_spec *p = spec; p && p->name; p++) {
        default_text(p, def, sizeof def);
        range_text(p, range, sizeof range);
        printf("%*s%-18s %-15s %-14s %-14s %s\n", indent, "", p->name, vf_param_type_name(p->type), def, range,
               p->doc ? p->doc : "");
        if (p->type == VF_P_TABLE && p->fields) params_text(p->fields, indent + 2);
    }
}

int vf_cli_help(int argc, char **argv)
{
    const vf_stage_ops *kinds[256];
    int n = vf_stage_kinds(kinds, 256);
    if (n > 256) n = 256;
    if (argc < 3) {
        vf_cli_usage(stdout);
        return 0;
    }
    const char *topic = argv[2];
    if (strcmp(topic, "--params-md") == 0) {
        /* The README's generated table (scripts/gen_params_table). */
        for (int i = 0; i < n; i++) {
            printf("#### `%s`\n\n%s\n\n", kinds[i]->kind, kinds[i]->doc ? kinds[i]->doc : "");
            if (!kinds[i]->params || !kinds[i]->params[0].name) {
                printf("No params.\n\n");
                continue;
            }
            printf("| param | type | default | range / choices | meaning |\n|---|---|---|---|---|\n");
            params_md(kinds[i]->params, "");
            printf("\n");
            if (kinds[i]->expander_params) {
                printf("Taken by `p:stage(\"%s\", {...})` and consumed by its Lua expander (not a param of the "
                       "stages it makes):\n\n| key | type | default | range / choices | meaning |\n"
                       "|---|---|---|---|---|\n", kinds[i]->kind);
                params_md(kinds[i]->expander_params, "");
                printf("\n");
            }
        }
        return 0;
    }
    if (strcmp(topic, "stages") == 0) {
        for (int i = 0; i < n; i++) printf("%-18s %s\n", kinds[i]->kind, kinds[i]->doc ? kinds[i]->doc : "");
        return 0;
    }
    const vf_stage_ops *ops = vf_stage_lookup(topic);
    if (!ops) {
        const char *names[256];
        for (int i = 0; i < n; i++) names[i] = kinds[i]->kind;
        const char *near = vf_did_you_mean(topic, names, n);
        fprintf(stderr, "vflow: help: no stage kind '%s'", topic);
        if (near) fprintf(stderr, "; did you mean '%s'?", near);
        fprintf(stderr, " (`vflow help stages` lists them)\n");
        return 2;
    }
    printf("%s — %s\n\n", ops->kind, ops->doc ? ops->doc : "");
    printf("%-18s %-15s %-14s %-14s %s\n", "param", "type", "default", "range", "meaning");
    params_text(ops->params, 0);
    if (ops->expander_params) {
        printf("\np:stage(\"%s\", {...}) also takes (its Lua expander consumes them; the stages it makes "
               "never see them):\n", ops->kind);
        params_text(ops->expander_params, 0);
    }
    return 0;
}
