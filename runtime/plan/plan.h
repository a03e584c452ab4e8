/* plan.h — `vflow plan`: every byte a run will hold, per worker and device, before
 * anything starts (docs/PLANNING.md), the budget check `vflow run` applies, the search
 * for knobs that make an over-budget run fit, and plan-vs-measured after a run.
 *
 * What is counted (one line of the plan each; lines carry a category):
 *   - each stage's `memory` hook, as declared (weights, gradients, optimizer state,
 *     activations, workspaces, items it holds or builds, staging …);
 *   - each edge: capacity x the largest item its source port allows (the items in
 *     flight), on the device of that port; for a ZeroMQ edge of host tensors they sit in
 *     the receiving worker (its ZeroMQ pipe) and the sending worker holds the item being
 *     transmitted until ZeroMQ has written it ("held while sent": its large tensors go
 *     from their own memory, and the stage may build its next item meanwhile, so this is
 *     one item more than the stage's own "item being built"); CUDA IPC edges keep their
 *     buffers on the sender's device; in-process edges hold the producer's items by
 *     pointer;
 *   - per worker process: its private baseline, the vf_alloc big-block cache, and on a
 *     CUDA device the context and the backend's workspaces; once per node the shared code.
 * The hook contract (docs/PLANNING.md): a stage declares its own state, the one item it
 * is building, and the received items it holds (a map stage one, vae_encode a
 * micro-batch …) as VF_MEM_INPUT entries (vf_mem_plan_add_input) — on an in-process edge
 * those bytes are charged to the producer's account (it allocated them); never the items
 * on its edges (the plan counts those). A VF_MEM_LIBRARY entry (vf_mem_plan_add_lib) is
 * memory a library allocates itself (libav): in the totals, in no account. Each entry
 * carries the category its stage gives it; the planner guesses nothing from its words. That is what
 * the per-stage prediction (vf_mplan.account) models for comparison with metrics.jsonl.
 *
 * Budgets: --budget "cuda=80GiB,cpu=24GiB,cuda:3=40GiB", else what the machine has (cpu:
 * MemTotal, or a container's cgroup limit; cuda: free memory from cuMemGetInfo, probed in
 * a child process). `plan`
 * accepts devices this machine lacks (plans for real sizes); `run` refuses them.
 */
#ifndef VF_PLAN_H
#define VF_PLAN_H

#include "runtime/graph/graph.h"

#include <stdio.h>

#define VF_BUDGET_MAX 16
#define VF_PLAN_MAX_DEVS 32

/* Process-level constants (measured; docs/PLANNING.md): the private memory of an idle
 * worker (PSS anon of `vflow __worker`, 5.2 MiB) and the code and libraries all vflow
 * processes of a node share (23 MiB). */
#define VF_PLAN_PROC_PRIVATE ((int64_t)6 << 20)
#define VF_PLAN_SHARED_CODE ((int64_t)24 << 20)
/* CUDA: a context on the device (typical of CUDA 12 with lazy module loading on H100;
 * the gpu test measures it) and the backend's own buffers (kernels/cuda/cuda_internal.h:
 * 32 MiB cuBLASLt workspace + 64 MiB scratch). */
#define VF_PLAN_CUDA_CONTEXT ((int64_t)512 << 20)
#define VF_PLAN_CUDA_BACKEND ((int64_t)96 << 20)

/* ------------------------------------------------------------------ budgets */

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

/* Parses a budget spec (sizes: 123, 1.5GiB, 800MB, 2G, 512MiB — K/M/G/T alone mean
 * KiB/MiB/…). VF_EUSAGE with a message on a bad spec. */
int vf_budget_parse(const char *spec, vf_budget *out, vf_status *st);
/* One size: "80GiB" -> bytes. 0 or VF_EINVAL. */
int vf_size_parse(const char *s, int64_t *out);
/* The budget for dev (a specific entry beats "cuda"), -1 when b has none. */
int64_t vf_budget_for(const vf_budget *b, vf_device dev);

/* What this machine has. */
typedef struct vf_machine {
    int64_t mem_total;   /* /proc/meminfo MemTotal, or the cgroup's limit when lower; -1 unknown */
    bool mem_limited;    /* mem_total is the cgroup limit */
    int ncuda;           /* CUDA devices seen (0: none, no driver, or the probe failed) */
    int64_t cuda_free[VF_PLAN_MAX_DEVS];  /* cuMemGetInfo free, with the probe's context open */
    int64_t cuda_total[VF_PLAN_MAX_DEVS];
} vf_machine;
/* Probes host memory and (cuda = true) the CUDA devices through libcuda.so.1 in a child
 * process, so the caller never holds a CUDA context. Never fails: unknowns stay -1/0. */
void vf_machine_probe(vf_machine *m, bool cuda);

/* ------------------------------------------------------------------ the plan */

/* "weights", "gradients", "optimizer", … (the categories stages give, vflow.h) */
const char *vf_mem_cat_name(vf_mem_cat c);

typedef struct vf_pline {
    int stage;           /* stage index, -1 if none */
    int edge;            /* edge index, -1 if none */
    int worker;          /* worker index, -1 = the node (shared code) or the driver */
    vf_device dev;
    vf_mem_cat cat;
    char what[160];
    int64_t bytes;       /* -1 = unbounded */
    int account;         /* stage whose vf_alloc account holds it (host), -1 none */
} vf_pline;

typedef struct vf_pdev {
    vf_device dev;
    int64_t total;                   /* -1 = unbounded */
    int64_t cat[VF_MEM_CAT_COUNT];
    int64_t budget;                  /* -1 = none known */
    const char *budget_src;          /* "--budget", "MemTotal", "cgroup", "cuMemGetInfo", "" */
    bool present;                    /* this machine has it (cpu: always) */
    bool over;                       /* total > budget (or unbounded with a budget) */
    int64_t params;                  /* the most parameters a stage here holds state of
                                        (vf_mem_plan_params; what the exchange's bytes
                                        are divided by); 0: none */
    int64_t state;                   /* bytes of training state here (vf_pline_is_state) */
} vf_pdev;

typedef struct vf_mplan {
    const vf_graph *g;               /* borrowed: validated and placed */
    int n, cap;
    vf_pline *l;
    int ndev;
    vf_pdev dev[VF_PLAN_MAX_DEVS];   /* cpu first, then cuda:N in order */
    int64_t *account;                /* per stage: predicted peak of its host account */
    int64_t *acts_alt;               /* per stage: activations with `recompute` flipped, -1 n/a */
    int nover;                       /* devices over budget */
    int node;                        /* -1: the whole graph; k: node k's workers (and a driver) only */
} vf_mplan;

/* Whether a line is training state: weights, gradients or optimizer state a stage
 * declares, or an edge that carries views between such stages (the exchange between a
 * partition and its optimizer shards: what is in flight between them). */
bool vf_pline_is_state(const vf_mplan *p, const vf_pline *x);

/* Builds the plan of a validated, placed graph. Caller frees with vf_mplan_free. */
int vf_mplan_build(const vf_graph *g, vf_mplan *out, vf_status *st);
/* The plan of what node `node` of a multi-node run holds: its workers' lines and the
 * driver and shared code every node has; budgets then apply per node. */
int vf_mplan_build_node(const vf_graph *g, int node, vf_mplan *out, vf_status *st);
void vf_mplan_free(vf_mplan *p);
/* Applies budgets: b's entries where it has one, else the machine's (m may be NULL), and
 * marks devices over budget (p->nover). Also sets `present` from m (NULL: all present). */
void vf_mplan_budget(vf_mplan *p, const vf_budget *b, const vf_machine *m);
const vf_pdev *vf_mplan_dev(const vf_mplan *p, vf_device d); /* NULL if untouched */

/* Bytes the graph holds on dev (the plan's total; -1 when an edge is unbounded). */
int64_t vf_plan_device_total(const vf_graph *g, vf_device dev);

/* ------------------------------------------------------------------ fixes */

#define VF_PLAN_MAX_FIXES 16

/* A knob change that was re-planned: the script re-run with `sets` (vf.args and
 * NAME.PARAM overrides, as on the command line) and, for capacity, edges changed. */
typedef struct vf_plan_fix {
    char knob[32];                   /* "recompute", "micro_batches", "stages", … */
    char change[512];                /* what to type: "--set recompute=true" */
    char note[160];                  /* how it was found / why it is not enough */
    int64_t total[VF_PLAN_MAX_DEVS]; /* predicted totals, indexed like the plan's devices */
    bool fits;                       /* every device within its budget */
} vf_plan_fix;

/* What the CLI asks for. */
typedef struct vf_plan_req {
    const char *script;
    const char *const *sets;         /* the user's --set pairs */
    int nsets;
    const char *budget;              /* --budget spec or NULL */
    bool json;
    int node;                        /* run: the devices of this node's stages must be here */
} vf_plan_req;

/* Searches knobs for a plan that fits: each knob changed alone (the smallest change
 * that fits, or the best reached), then all useful ones together. Every candidate is
 * re-planned for real: the script re-run with the user's --set pairs plus the knob's,
 * validated, placed, planned, budgeted. Returns the number of fixes written to out. */
int vf_plan_fixes(const vf_plan_req *req, const vf_mplan *base, const vf_budget *b,
                  const vf_machine *m, vf_plan_fix *out, int max);
/* The loading the fixes use (script + --set pairs -> validated, placed graph), the same
 * steps as the CLI: script knobs as vf.args, NAME.PARAM as stage overrides. */
int vf_plan_load(const char *script, const char *const *sets, int nsets, vf_graph **out,
                 vf_status *st);

/* ------------------------------------------------------------------ buckets */

#define VF_PLAN_MAX_BUCKETS 64

/* One bucket of a bucketed source planned alone (plan_bucket.c). */
typedef struct vf_plan_bucket {
    char stage[VF_NAME_MAX];         /* the source stage */
    char name[VF_NAME_MAX];          /* its bucket, "WxHxF" */
    char dims[96];                   /* "B,z,T',h',w'": its batch and latent */
    int64_t total[VF_PLAN_MAX_DEVS]; /* predicted totals, indexed like the plan's devices */
    int64_t cat[VF_PLAN_MAX_DEVS][VF_MEM_CAT_COUNT];
    int64_t acts_flip[VF_PLAN_MAX_DEVS]; /* activations with the stages' recompute flipped */
    bool recompute;                  /* the stages that recompute, do */
    bool fits;                       /* every device within its budget */
} vf_plan_bucket;

/* Each bucket of every stage whose output port lists geometries (and that has a param
 * `only`), re-planned alone: the script with the user's --set pairs plus
 * NAME.only=<bucket>, against the same budgets. Returns how many were written, or an
 * error of the re-planning (naming the bucket). */
int vf_plan_buckets(const vf_plan_req *req, const vf_mplan *base, const vf_budget *b, const vf_machine *m,
                    vf_plan_bucket *out, int max, vf_status *st);
/* The buckets' table (text) after a plan. */
void vf_plan_buckets_print(const vf_mplan *p, const vf_plan_bucket *bk, int n, FILE *out);
/* Adds "buckets": [...] to the plan's JSON object text (caller frees; NULL when out of
 * memory). */
char *vf_plan_buckets_json(const char *plan_json, const vf_mplan *p, const vf_plan_bucket *bk, int n);
/* The one-line refusal of the first bucket over a budget, into st (VF_EBUDGET), naming
 * the bucket, its need, the budget and the fixes. 0 when every bucket fits. */
int vf_plan_buckets_refusal(const vf_mplan *p, const vf_plan_bucket *bk, int n, vf_status *st);

/* Admission = "shrink": for every bucket over a budget whose source has param admission
 * "shrink", the largest batch that fits (re-planned alone with NAME.only and
 * NAME.shrink, halving then bisecting), or none: then the bucket is left out. One line
 * per such bucket on report. Writes the --set pairs that admit them
 * ("NAME.shrink=[\"WxHxF:B\",…]", one per source) into sets[k] (VF_PLAN_SET_MAX chars
 * each); returns their count (0: nothing to shrink), or an error. */
#define VF_PLAN_SET_MAX 2048
int vf_plan_admission(const vf_plan_req *req, const vf_mplan *base, const vf_budget *b, const vf_machine *m,
                      const vf_plan_bucket *bk, int nbk, char (*sets)[VF_PLAN_SET_MAX], int max, FILE *report,
                      vf_status *st);

/* ------------------------------------------------------------------ "auto" params */

/* Stage params set to "auto" (vf_knob_spec.auto_value, e.g. the DiT's swap_blocks),
 * resolved against the budgets `vflow run` uses (plan_auto.c): each to the smallest value
 * from its knob's min up with which the stage fits its device's budget, or its own
 * `auto_budget` size. Writes one "NAME.PARAM=V" pair per such stage into sets (the caller
 * loads the script again with them) and one line each on report (NULL: none); returns
 * their count (0: no "auto"), or VF_EBUDGET with one line naming the stage when even its
 * largest value does not fit (VF_EUSAGE for a bad auto_budget size). */
int vf_plan_auto(const vf_graph *g, const vf_plan_req *req, char (*sets)[VF_PLAN_SET_MAX], int max, FILE *report,
                 vf_status *st);

/* ------------------------------------------------------------------ output */

/* Text (or JSON) of the plan, its verdict and the fixes (nfix may be 0). */
int vf_mplan_print(const vf_mplan *p, const vf_plan_fix *fix, int nfix, FILE *out, bool json,
                   vf_status *st);
/* The JSON text alone (caller frees; NULL when out of memory). */
char *vf_mplan_json(const vf_mplan *p, const vf_plan_fix *fix, int nfix);
/* The one-line refusal for the first device over its budget, into st (VF_EBUDGET):
 * "SCRIPT: the plan needs X on DEV, over the budget of Y (see `vflow plan`; --force
 * runs anyway)". 0 when nothing is over. */
int vf_mplan_refusal(const vf_mplan *p, vf_status *st);

/* "1.50 MiB" */
void vf_bytes_str(int64_t bytes, char *buf, size_t n);

#endif /* VF_PLAN_H */
