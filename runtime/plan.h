/* plan.h — `vflow plan`: what a validated graph declares it will hold, per stage, per
 * edge and per device, and the --budget check.
 *
 * This is the simple form (sums of each stage's memory hook and of the edges' buffers,
 * capacity x the largest item the source port allows); the memory planner of issue 6
 * replaces plan.c behind the same three calls.
 */
#ifndef VF_PLAN_H
#define VF_PLAN_H

#include "graph.h"

#define VF_BUDGET_MAX 16

/* A --budget "cuda=80GiB,cpu=24GiB,cuda:1=40GiB": "cuda" applies to every CUDA device
 * without an entry of its own; "cpu" to host memory. */
typedef struct vf_budget {
    int n;
    struct {
        vf_device dev;
        bool any_cuda;   /* the "cuda" entry */
        int64_t bytes;
    } e[VF_BUDGET_MAX];
} vf_budget;

/* Parses a budget spec (sizes: 123, 1.5GiB, 800MB, 2G — K/M/G/T alone mean KiB/MiB/…).
 * VF_EUSAGE with a message on a bad spec. */
int vf_budget_parse(const char *spec, vf_budget *out, vf_status *st);

/* Bytes the graph holds on dev: stage declarations plus edge buffers (charged to the
 * device of the source port); -1 when an edge is unbounded. The graph must be
 * validated (and placed, for workers). */
int64_t vf_plan_device_total(const vf_graph *g, vf_device dev);

/* Prints the plan as text (or JSON) to out. */
int vf_plan_print(const vf_graph *g, FILE *out, bool json, vf_status *st);

/* VF_EBUDGET naming the first device over its budget; 0 when all fit or budget is NULL. */
int vf_plan_check(const vf_graph *g, const char *budget, vf_status *st);

/* "1.50 MiB" */
void vf_bytes_str(int64_t bytes, char *buf, size_t n);

#endif /* VF_PLAN_H */
