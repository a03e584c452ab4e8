/* rank.c — rank, world and meeting address from the launcher's variables (rank.h), and
 * Slurm's compact host lists. */
#include "runtime/driver/rank.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ Slurm host lists */

typedef struct hl_state {
    int count, max;
    int (*fn)(const char *, void *);
    void *arg;
    bool stop;
    vf_status *st;
    const char *list;
} hl_state;

static int parse_uint(const char *s, size_t n, long *out)
{
    if (n == 0 || n > 9) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* Expands `rest` (literal text and bracket groups) after `prefix` (plen bytes used). */
static int expand(hl_state *h, char *prefix, size_t plen, const char *rest, size_t rlen)
{
    if (h->stop) return 0;
    const char *open = memchr(rest, '[', rlen);
    if (!open) {
        if (plen + rlen >= VF_RANK_HOST_MAX)
            return vf_status_set(h->st, VF_EUSAGE, __FILE__, __LINE__, "host list \"%s\": a name over %d bytes",
                                 h->list, VF_RANK_HOST_MAX - 1);
        memcpy(prefix + plen, rest, rlen);
        prefix[plen + rlen] = 0;
        if (plen + rlen == 0)
            return vf_status_set(h->st, VF_EUSAGE, __FILE__, __LINE__, "host list \"%s\": an empty name", h->list);
        if (++h->count > h->max)
            return vf_status_set(h->st, VF_EUSAGE, __FILE__, __LINE__, "host list \"%s\": more than %d names",
                                 h->list, h->max);
        if (h->fn && h->fn(prefix, h->arg)) h->stop = true;
        return 0;
    }
    size_t lit = (size_t)(open - rest);
    const char *close = memchr(open, ']', rlen - lit);
    if (!close)
        return vf_status_set(h->st, VF_EUSAGE, __FILE__, __LINE__, "host list \"%s\": '[' without ']'", h->list);
    if (plen + lit >= VF_RANK_HOST_MAX)
        return vf_status_set(h->st, VF_EUSAGE, __FILE__, __LINE__, "host list \"%s\": a name over %d bytes",
                             h->list, VF_RANK_HOST_MAX - 1);
    memcpy(prefix + plen, rest, lit);
    size_t base = plen + lit;
    const char *after = close + 1;
    size_t alen = rlen - (size_t)(after - rest);
    /* the group: comma-separated numbers or ranges lo-hi, padded to the width of lo */
    const char *p = open + 1;
    while (p < close) {
        const char *comma = memchr(p, ',', (size_t)(close - p));
        const char *end = comma ? comma : close;
        const char *dash = memchr(p, '-', (size_t)(end - p));
        long lo, hi;
        size_t width = (size_t)((dash ? dash : end) - p);
        if (parse_uint(p, width, &lo) != 0 ||
            (dash ? parse_uint(dash + 1, (size_t)(end - dash - 1), &hi) : (hi = lo, 0)) != 0 || hi < lo ||
            hi - lo > 1000000)
            return vf_status_set(h->st, VF_EUSAGE, __FILE__, __LINE__,
                                 "host list \"%s\": bad range \"%.*s\" (expected N or LO-HI, LO <= HI)", h->list,
                                 (int)(end - p), p);
        for (long v = lo; v <= hi && !h->stop; v++) {
            char num[32];
            int n = snprintf(num, sizeof num, "%0*ld", (int)width, v);
            if (base + (size_t)n >= VF_RANK_HOST_MAX)
                return vf_status_set(h->st, VF_EUSAGE, __FILE__, __LINE__, "host list \"%s\": a name over %d bytes",
                                     h->list, VF_RANK_HOST_MAX - 1);
            memcpy(prefix + base, num, (size_t)n);
            int rc = expand(h, prefix, base + (size_t)n, after, alen);
            if (rc < 0) return rc;
        }
        p = end + 1;
    }
    if (close == open + 1)
        return vf_status_set(h->st, VF_EUSAGE, __FILE__, __LINE__, "host list \"%s\": empty '[]'", h->list);
    return 0;
}

int vf_slurm_hostlist(const char *list, int max_names, int (*fn)(const char *name, void *arg), void *arg,
                      vf_status *st)
{
    hl_state h = {.max = max_names, .fn = fn, .arg = arg, .st = st, .list = list};
    char name[VF_RANK_HOST_MAX];
    if (!list || !*list) return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "host list: empty");
    const char *p = list;
    for (;;) {
        /* an item ends at a comma outside brackets */
        const char *q = p;
        int depth = 0;
        while (*q && (depth > 0 || *q != ',')) {
            if (*q == '[') depth++;
            else if (*q == ']' && --depth < 0) break;
            q++;
        }
        if (depth != 0 || (*q && *q != ','))
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "host list \"%s\": unbalanced brackets", list);
        int rc = expand(&h, name, 0, p, (size_t)(q - p));
        if (rc < 0) return rc;
        if (!*q || h.stop) break;
        p = q + 1;
    }
    return h.count;
}

/* ------------------------------------------------------------------ environment */

typedef struct src_vars {
    const char *name;
    const char *rank, *world, *local_rank, *local_world, *node, *nnodes, *addr, *port;
} src_vars;

static const src_vars SOURCES[] = {
    {"vflow", "VFLOW_RANK", "VFLOW_WORLD_SIZE", "VFLOW_LOCAL_RANK", "VFLOW_LOCAL_WORLD_SIZE", "VFLOW_NODE_RANK",
     "VFLOW_NNODES", "VFLOW_MASTER_ADDR", "VFLOW_MASTER_PORT"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", NULL, "MASTER_ADDR",
     "MASTER_PORT"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK", NULL, NULL, NULL},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", NULL, NULL, NULL, NULL, NULL},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID",
     "SLURM_NNODES", NULL, NULL},
};

/* An integer variable: 0 with *out (def when unset), VF_EUSAGE when set but not an
 * integer in [lo, hi]. */
static int env_int(vf_getenv_fn get, const char *name, long def, long lo, long hi, long *out, vf_status *st)
{
    const char *v = name ? get(name) : NULL;
    *out = def;
    if (!v || !*v) return 0;
    /* Slurm writes SLURM_NTASKS_PER_NODE as "4(x2)" on uneven allocations: the first count */
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || errno || (*end && !(strcmp(name, "SLURM_NTASKS_PER_NODE") == 0 && *end == '(')) || x < lo ||
        x > hi)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s=\"%s\": expected an integer in %ld..%ld", name, v,
                             lo, hi);
    *out = x;
    return 0;
}

static int first_host(const char *name, void *arg)
{
    snprintf(arg, VF_RANK_HOST_MAX, "%s", name);
    return 1; /* stop: only the first is needed */
}

int vf_rank_from_env(vf_getenv_fn get, vf_rank_info *out, vf_status *st)
{
    int rc = 0;
    if (!get) get = (vf_getenv_fn)getenv;
    memset(out, 0, sizeof *out);
    out->source = "none";
    out->world = 1;
    out->local_world = -1;
    out->node = out->nnodes = -1;
    const src_vars *s = NULL;
    for (size_t i = 0; i < sizeof SOURCES / sizeof SOURCES[0]; i++) {
        const char *v = get(SOURCES[i].rank);
        if (v && *v) {
            s = &SOURCES[i];
            break;
        }
    }
    long rank = 0, world = 1, lr = 0, lw = -1, node = -1, nn = -1, port = 0;
    if (s) {
        out->source = s->name;
        VF_TRY(env_int(get, s->world, -1, 1, INT_MAX, &world, st));
        if (world < 1)
            VF_FAIL(st, VF_EUSAGE, "%s is set but %s is not: the launcher's world size is missing", s->rank, s->world);
        VF_TRY(env_int(get, s->rank, 0, 0, world - 1, &rank, st));
        VF_TRY(env_int(get, s->local_rank, 0, 0, INT_MAX, &lr, st));
        VF_TRY(env_int(get, s->local_world, -1, 1, INT_MAX, &lw, st));
        VF_TRY(env_int(get, s->node, -1, 0, INT_MAX, &node, st));
        VF_TRY(env_int(get, s->nnodes, -1, 1, INT_MAX, &nn, st));
        if (nn > 0 && node >= nn)
            VF_FAIL(st, VF_EUSAGE, "%s=%ld is not below %s=%ld", s->node, node, s->nnodes, nn);
        if (lw > 0 && lr >= lw) VF_FAIL(st, VF_EUSAGE, "%s=%ld is not below %s=%ld", s->local_rank, lr, s->local_world, lw);
        const char *addr = s->addr ? get(s->addr) : NULL;
        if (addr && *addr) snprintf(out->master_addr, sizeof out->master_addr, "%s", addr);
        VF_TRY(env_int(get, s->port, 0, 1, 65535, &port, st));
    }
    /* vflow's own meeting place wins over the source's (torchrun's agent listens on
     * MASTER_PORT itself), then the source's, then the others */
    const char *vaddr = get("VFLOW_MASTER_ADDR");
    if (vaddr && *vaddr) snprintf(out->master_addr, sizeof out->master_addr, "%s", vaddr);
    long vport = 0;
    VF_TRY(env_int(get, "VFLOW_MASTER_PORT", 0, 1, 65535, &vport, st));
    if (vport) port = vport;
    if (!out->master_addr[0]) {
        const char *names[] = {"VFLOW_MASTER_ADDR", "MASTER_ADDR"};
        for (int i = 0; i < 2 && !out->master_addr[0]; i++) {
            const char *a = get(names[i]);
            if (a && *a) snprintf(out->master_addr, sizeof out->master_addr, "%s", a);
        }
    }
    if (!out->master_addr[0]) {
        const char *list = get("SLURM_STEP_NODELIST");
        const char *var = "SLURM_STEP_NODELIST";
        if (!list || !*list) list = get("SLURM_JOB_NODELIST"), var = "SLURM_JOB_NODELIST";
        if (list && *list) {
            int n = vf_slurm_hostlist(list, 1 << 20, first_host, out->master_addr, st);
            if (n < 0) {
                vf_status_prefix(st, "%s", var);
                rc = n;
                goto fail;
            }
        }
    }
    if (!port) {
        const char *names[] = {"VFLOW_MASTER_PORT", "MASTER_PORT"};
        for (int i = 0; i < 2 && !port; i++) VF_TRY(env_int(get, names[i], 0, 1, 65535, &port, st));
    }
    if (!port) {
        long job = -1;
        VF_TRY(env_int(get, "SLURM_JOB_ID", -1, 0, LONG_MAX, &job, st));
        /* spread jobs over 20000..39999, below the usual ephemeral range */
        port = job >= 0 ? 20000 + job % 20000 : VF_RANK_DEFAULT_PORT;
    }
    out->rank = (int)rank;
    out->world = (int)world;
    out->local_rank = (int)lr;
    out->local_world = (int)lw;
    out->node = (int)node;
    out->nnodes = (int)nn;
    out->master_port = (int)port;
fail:
    return rc;
}
