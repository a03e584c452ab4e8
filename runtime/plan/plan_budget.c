/* plan_budget.c — budgets for `vflow plan` / `vflow run` (plan.h): the --budget spec,
 * sizes, and what the machine has (host MemTotal; CUDA devices and their free memory).
 *
 * The CUDA probe runs in a forked child through the driver API of libcuda.so.1 (opened
 * with dlopen, so vflow needs no CUDA at build time to plan for GPUs, and the driver
 * process never holds a CUDA context its workers would then compete with). The child
 * writes one line per device to a pipe and exits; the parent waits at most 20 s.
 */
#include "runtime/plan/plan.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void vf_bytes_str(int64_t bytes, char *buf, size_t n)
{
    if (bytes < 0) {
        snprintf(buf, n, "unbounded");
        return;
    }
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (fabs(v) >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, n, "%lld B", (long long)bytes);
    else snprintf(buf, n, "%.2f %s", v, unit[u]);
}

int vf_size_parse(const char *s, int64_t *out)
{
    char *end;
    while (*s == ' ') s++;
    if (!(*s >= '0' && *s <= '9') && *s != '.') return VF_EINVAL; /* no sign, no "inf" */
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0)) return VF_EINVAL;
    static const struct {
        const char *suffix;
        double mul;
    } units[] = {
        {"", 1},          {"B", 1},          {"K", 1024.0},       {"KiB", 1024.0},
        {"KB", 1e3},      {"M", 1048576.0},  {"MiB", 1048576.0},  {"MB", 1e6},
        {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9},
        {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].suffix) == 0) {
            double b = v * units[i].mul;
            if (b > 9.0e18) return VF_EINVAL;
            *out = (int64_t)llround(b);
            return 0;
        }
    return VF_EINVAL;
}

int vf_budget_parse(const char *spec, vf_budget *out, vf_status *st)
{
    int rc = 0;
    char buf[512];
    memset(out, 0, sizeof *out);
    if (strlen(spec) >= sizeof buf) VF_FAIL(st, VF_EUSAGE, "--budget: spec too long");
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) VF_FAIL(st, VF_EUSAGE, "--budget %s: expected DEVICE=SIZE, got '%s'", spec, tok);
        *eq = 0;
        if (out->n == VF_BUDGET_MAX) VF_FAIL(st, VF_EUSAGE, "--budget %s: too many entries", spec);
        vf_status dst = {0};
        if (strcmp(tok, "cuda") == 0) {
            out->e[out->n].any_cuda = true;
            out->e[out->n].dev = (vf_device){VF_DEV_CUDA, 0};
        } else if (vf_device_parse(tok, &out->e[out->n].dev, &dst) < 0) {
            VF_FAIL(st, VF_EUSAGE, "--budget %s: unknown device '%s' (cpu, cuda or cuda:N)", spec, tok);
        }
        for (int k = 0; k < out->n; k++)
            if (out->e[k].any_cuda == out->e[out->n].any_cuda && out->e[k].dev.kind == out->e[out->n].dev.kind &&
                out->e[k].dev.index == out->e[out->n].dev.index)
                VF_FAIL(st, VF_EUSAGE, "--budget %s: '%s' is given twice", spec, tok);
        if (vf_size_parse(eq + 1, &out->e[out->n].bytes) < 0)
            VF_FAIL(st, VF_EUSAGE, "--budget %s: bad size '%s' (e.g. 24GiB, 800MB, 1.5G)", spec, eq + 1);
        out->n++;
    }
    if (out->n == 0) VF_FAIL(st, VF_EUSAGE, "--budget: empty spec");
fail:
    return rc;
}

int64_t vf_budget_for(const vf_budget *b, vf_device dev)
{
    int64_t any = -1;
    for (int k = 0; k < b->n; k++) {
        if (b->e[k].any_cuda) {
            if (dev.kind == VF_DEV_CUDA) any = b->e[k].bytes;
        } else if (b->e[k].dev.kind == dev.kind && (dev.kind == VF_DEV_CPU || b->e[k].dev.index == dev.index)) {
            return b->e[k].bytes; /* a specific entry beats "cuda" whatever their order */
        }
    }
    return any;
}

/* ------------------------------------------------------------------ machine */

static int64_t mem_total(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb > 0 ? (int64_t)kb * 1024 : -1;
}

/* A container's memory limit (cgroup v2 memory.max, else v1 limit_in_bytes); -1 none. */
static int64_t cgroup_limit(void)
{
    static const char *const files[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        FILE *f = fopen(files[i], "r");
        if (!f) continue;
        char buf[64] = "";
        long long v = -1;
        if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3) != 0) v = atoll(buf);
        fclose(f);
        if (v > 0) return (int64_t)v;
    }
    return -1;
}

/* The child: "n\n" then "free total\n" per device; nothing on any failure. */
static void cuda_child(int fd)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) _exit(0);
    typedef int (*f_init)(unsigned);
    typedef int (*f_count)(int *);
    typedef int (*f_get)(int *, int);
    typedef int (*f_retain)(void **, int);
    typedef int (*f_setcur)(void *);
    typedef int (*f_meminfo)(size_t *, size_t *);
    typedef int (*f_release)(int);
    f_init init = (f_init)dlsym(h, "cuInit");
    f_count count = (f_count)dlsym(h, "cuDeviceGetCount");
    f_get get = (f_get)dlsym(h, "cuDeviceGet");
    f_retain retain = (f_retain)dlsym(h, "cuDevicePrimaryCtxRetain");
    f_setcur setcur = (f_setcur)dlsym(h, "cuCtxSetCurrent");
    f_meminfo meminfo = (f_meminfo)dlsym(h, "cuMemGetInfo_v2");
    f_release release = (f_release)dlsym(h, "cuDevicePrimaryCtxRelease_v2");
    int n = 0;
    if (!init || !count || !get || !retain || !setcur || !meminfo || init(0) != 0 || count(&n) != 0 || n < 0)
        _exit(0);
    if (n > VF_PLAN_MAX_DEVS) n = VF_PLAN_MAX_DEVS;
    char out[64 * VF_PLAN_MAX_DEVS + 16];
    int len = snprintf(out, sizeof out, "%d\n", n);
    for (int i = 0; i < n; i++) {
        int dev = 0;
        void *ctx = NULL;
        size_t fr = 0, tot = 0;
        if (get(&dev, i) == 0 && retain(&ctx, dev) == 0) {
            if (setcur(ctx) == 0) meminfo(&fr, &tot);
            if (release) release(dev);
        }
        len += snprintf(out + len, sizeof out - (size_t)len, "%zu %zu\n", fr, tot);
    }
    ssize_t w = write(fd, out, (size_t)len);
    (void)w;
    _exit(0);
}

static void cuda_probe(vf_machine *m)
{
    int fds[2];
    if (pipe(fds) != 0) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        cuda_child(fds[1]);
    }
    close(fds[1]);
    char buf[64 * VF_PLAN_MAX_DEVS + 16];
    size_t got = 0;
    for (;;) {
        struct pollfd pf = {fds[0], POLLIN, 0};
        int r = poll(&pf, 1, 20000);
        if (r <= 0) break; /* a hung driver: give up on the GPUs, never on the plan */
        ssize_t k = read(fds[0], buf + got, sizeof buf - 1 - got);
        if (k <= 0) break;
        got += (size_t)k;
        if (got == sizeof buf - 1) break;
    }
    buf[got] = 0;
    close(fds[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char *line = buf, *nl;
    int n = 0;
    if (sscanf(line, "%d", &n) != 1 || n <= 0) return;
    for (int i = 0; i < n && (nl = strchr(line, '\n')); i++) {
        line = nl + 1;
        unsigned long long fr = 0, tot = 0;
        if (sscanf(line, "%llu %llu", &fr, &tot) != 2) break;
        m->cuda_free[i] = (int64_t)fr;
        m->cuda_total[i] = (int64_t)tot;
        m->ncuda = i + 1;
    }
}

void vf_machine_probe(vf_machine *m, bool cuda)
{
    memset(m, 0, sizeof *m);
    m->mem_total = mem_total();
    /* in a container the limit is what this run can have */
    int64_t lim = cgroup_limit();
    m->mem_limited = lim > 0 && (m->mem_total < 0 || lim < m->mem_total);
    if (m->mem_limited) m->mem_total = lim;
    for (int i = 0; i < VF_PLAN_MAX_DEVS; i++) m->cuda_free[i] = m->cuda_total[i] = -1;
    if (cuda) cuda_probe(m);
}
