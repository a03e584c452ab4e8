/* plan_cli.h — the planner as the `vflow` command line uses it (plan_cli.c): `vflow plan`,
 * the budget gate in front of `vflow run`, admission by shrinking buckets, and plan vs
 * measured once a run is over. The planner itself is runtime/plan/plan.h; these are the
 * steps the commands in pipeline_cli.c take with it.
 */
#ifndef VF_PLAN_CLI_H
#define VF_PLAN_CLI_H
#include "runtime/plan/plan.h"

#include <stdio.h>

/* admission = "shrink" before `vflow plan` and `vflow run`: when the plan is over a budget,
 * the --set pairs that shrink its buckets to fit (vf_plan_admission; one line per bucket
 * on report). Returns their count: the caller loads the script again with them. */
int vf_plan_admit(const vf_graph *g, const vf_plan_req *req, char (*sets)[VF_PLAN_SET_MAX], int max, FILE *report,
                  vf_status *st);
/* `vflow plan`: plan, budgets (explicit or the machine's), fixes when over; prints to
 * out. VF_EBUDGET (exit 2) when a device is over its budget. */
int vf_plan_command(const vf_graph *g, const vf_plan_req *req, FILE *out, vf_status *st);
/* `vflow run`, before launching: refuses (VF_EBUDGET; the plan, its verdict and fixes
 * printed on `report`) a plan over the budget of a device (--budget, else what this
 * machine has), and (VF_EUSAGE) stages on CUDA devices this machine lacks. force: a
 * budget refusal becomes a warning on stderr (missing devices still refuse). */
int vf_plan_gate(const vf_graph *g, const vf_plan_req *req, bool force, FILE *report, vf_status *st);
/* After a run: writes <run_dir>/plan.json, reads <run_dir>/metrics.jsonl (the last
 * "final" row of each stage) and prints the plan's per-stage account prediction next to
 * the measured peak. run_dir NULL = runs/<pipeline name>, as `vflow run` uses. */
int vf_plan_vs_measured(const vf_graph *g, const char *run_dir, FILE *out, vf_status *st);

#endif /* VF_PLAN_CLI_H */
