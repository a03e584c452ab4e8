/* decode_guard.c — watchdog and crash records for the decode worker (decode_guard.h).
 *
 * The records are formatted while arming (in the stage thread), so the signal handler
 * and the watchdog only open, write and close: async-signal-safe calls.
 */
#include "stages/decode/decode_guard.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 8192
#define MAX_KNOWN 4096

static struct {
    bool on;
    char stage[VF_NAME_MAX];
    char qfile[PATH_MAX], ffile[PATH_MAX];
    /* (path, source) pairs of decode_fatal.jsonl, as "source\tpath" strings */
    char **known;
    char **known_why;
    int nknown;
    /* the armed file */
    pthread_mutex_t mu;
    volatile sig_atomic_t armed;
    double deadline;                 /* CLOCK_MONOTONIC seconds */
    char path[PATH_MAX], source[40];
    char crash_line[LINE_MAX_BYTES]; /* prefix: ends before the reason's closing quote */
    size_t crash_len;
    pthread_t thread;
    volatile int stop;
    double grace;
    struct sigaction old[6];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const int k_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static const char *const k_signames[] = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT"};

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static size_t json_str(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    if (cap < 3) return 0;
    out[n++] = '"';
    for (; *s && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[n++] = '\\'; out[n++] = (char)c; }
        else if (c < 0x20) n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        else out[n++] = (char)c;
    }
    out[n++] = '"';
    out[n] = 0;
    return n;
}

/* Value of "key":"..." in a line written by this file (escapes: \" \\ \u00XX). */
static char *json_field(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    char *out = malloc(strlen(p) + 1), *o = out;
    if (!out) return NULL;
    for (; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1] == 'u' && p[2] && p[3] && p[4] && p[5]) {
            char hex[5] = {p[2], p[3], p[4], p[5], 0};
            *o++ = (char)strtol(hex, NULL, 16);
            p += 5;
        } else if (*p == '\\' && p[1]) {
            *o++ = *++p;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return out;
}

static void append(const char *file, const char *buf, size_t n)
{
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t w = write(fd, buf, n);
    (void)w;
    close(fd);
}

/* Completes the preformatted record with a reason and writes it to both files. */
static void record(const char *reason)
{
    char line[LINE_MAX_BYTES + 256];
    size_t n = g.crash_len;
    memcpy(line, g.crash_line, n);
    for (const char *r = reason; *r && n + 8 < sizeof line; r++) line[n++] = *r;
    static const char tail[] = "\"}\n";
    memcpy(line + n, tail, sizeof tail - 1);
    n += sizeof tail - 1;
    append(g.qfile, line, n);
    append(g.ffile, line, n);
}

static void on_crash(int sig)
{
    if (g.armed) {
        const char *name = "a fatal signal";
        for (int i = 0; i < 5; i++)
            if (k_signals[i] == sig) name = k_signames[i];
        char reason[128] = "decoder crashed (";
        strcat(reason, name);
        strcat(reason, ") on this file; later runs skip it");
        record(reason);
    }
    /* SA_RESETHAND restored the default action: let it end the process */
    raise(sig);
}

static void *watchdog(void *arg)
{
    (void)arg;
    while (!g.stop) {
        struct timespec ts = {0, 200 * 1000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g.mu);
        bool fire = g.armed && mono() > g.deadline;
        pthread_mutex_unlock(&g.mu);
        if (!fire) continue;
        char reason[160];
        snprintf(reason, sizeof reason,
                 "decoder hung: no result %.0f s past the file's deadline; the worker was ended; "
                 "later runs skip it", g.grace);
        record(reason);
        dprintf(2, "vflow: decode '%s': %s: %s (recorded in %s)\n", g.stage, g.path, reason, g.ffile);
        _exit(3);
    }
    return NULL;
}

int vf_decode_guard_start(const char *run_dir, const char *stage, double grace_s, vf_status *st)
{
    if (g.on) return 0;
    snprintf(g.stage, sizeof g.stage, "%s", stage);
    snprintf(g.qfile, sizeof g.qfile, "%s/quarantine.jsonl", run_dir);
    snprintf(g.ffile, sizeof g.ffile, "%s/decode_fatal.jsonl", run_dir);
    g.grace = grace_s;
    FILE *fp = fopen(g.ffile, "r");
    if (fp) {
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, fp) > 0 && g.nknown < MAX_KNOWN) {
            char *path = json_field(line, "path"), *src = json_field(line, "source"),
                 *why = json_field(line, "reason");
            if (path && src) {
                char **k = realloc(g.known, (g.nknown + 1) * sizeof *k);
                char **w = realloc(g.known_why, (g.nknown + 1) * sizeof *w);
                if (k) g.known = k;
                if (w) g.known_why = w;
                size_t n = strlen(path) + strlen(src) + 2;
                char *key = k && w ? malloc(n) : NULL;
                if (key) {
                    snprintf(key, n, "%s\t%s", src, path);
                    g.known[g.nknown] = key;
                    g.known_why[g.nknown++] = why;
                    why = NULL;
                }
            }
            free(path);
            free(src);
            free(why);
        }
        free(line);
        fclose(fp);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 5; i++) sigaction(k_signals[i], &sa, &g.old[i]);
    g.stop = 0;
    if (pthread_create(&g.thread, NULL, watchdog, NULL) != 0) {
        for (int i = 0; i < 5; i++) sigaction(k_signals[i], &g.old[i], NULL);
        return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "decode: cannot start the watchdog thread");
    }
    g.on = true;
    return 0;
}

void vf_decode_guard_stop(void)
{
    if (!g.on) return;
    g.stop = 1;
    pthread_join(g.thread, NULL);
    for (int i = 0; i < 5; i++) sigaction(k_signals[i], &g.old[i], NULL);
    for (int i = 0; i < g.nknown; i++) {
        free(g.known[i]);
        free(g.known_why[i]);
    }
    free(g.known);
    free(g.known_why);
    g.known = g.known_why = NULL;
    g.nknown = 0;
    g.armed = 0;
    g.on = false;
}

bool vf_decode_guard_known(const char *path, const char *source, char *why, size_t whyn)
{
    for (int i = 0; i < g.nknown; i++) {
        const char *k = g.known[i];
        size_t ls = strlen(source);
        if (strncmp(k, source, ls) == 0 && k[ls] == '\t' && strcmp(k + ls + 1, path) == 0) {
            snprintf(why, whyn, "%s", g.known_why[i] ? g.known_why[i] : "");
            return true;
        }
    }
    return false;
}

static void fault_injection(const char *path)
{
    const char *f = getenv("VFLOW_FAULT_DECODE");
    if (!f) return;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!strncmp(f, "hang:", 5) && !strcmp(f + 5, base)) {
        for (;;) pause(); /* as stuck as a decoder in an endless loop */
    }
    if (!strncmp(f, "crash:", 6) && !strcmp(f + 6, base)) raise(SIGSEGV);
}

void vf_decode_guard_enter(const char *path, const char *source, double budget_s)
{
    if (!g.on) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    pthread_mutex_lock(&g.mu);
    g.armed = 0;
    snprintf(g.path, sizeof g.path, "%s", path);
    snprintf(g.source, sizeof g.source, "%s", source);
    size_t n = 0;
    char *b = g.crash_line;
    const size_t cap = sizeof g.crash_line - 512;
    n += (size_t)snprintf(b + n, cap - n, "{\"path\":");
    n += json_str(b + n, cap - n, path);
    n += (size_t)snprintf(b + n, cap - n, ",\"source\":\"%s\",\"stage\":", source);
    n += json_str(b + n, cap - n, g.stage);
    n += (size_t)snprintf(b + n, cap - n, ",\"t\":%.3f,\"reason\":\"", tv.tv_sec + tv.tv_usec * 1e-6);
    g.crash_len = n;
    g.deadline = mono() + budget_s + g.grace;
    g.armed = 1;
    pthread_mutex_unlock(&g.mu);
    fault_injection(path);
}

void vf_decode_guard_extend(double seconds)
{
    if (!g.on) return;
    pthread_mutex_lock(&g.mu);
    g.deadline += seconds;
    pthread_mutex_unlock(&g.mu);
}

void vf_decode_guard_leave(void)
{
    if (!g.on) return;
    pthread_mutex_lock(&g.mu);
    g.armed = 0;
    pthread_mutex_unlock(&g.mu);
}
