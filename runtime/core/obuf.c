/* obuf.c — growable text buffer with JSON appends, and one-write line appends.
 * See obuf.h. */
#include "runtime/core/obuf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

void vf_obuf_init(vf_obuf *b) { memset(b, 0, sizeof *b); }

void vf_obuf_fini(vf_obuf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

void vf_obuf_reset(vf_obuf *b)
{
    b->len = 0;
    b->oom = false;
    if (b->s) b->s[0] = 0;
}

bool vf_obuf_ok(const vf_obuf *b) { return !b->oom; }

static bool reserve(vf_obuf *b, size_t extra)
{
    if (b->oom) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->oom = true;
        return false;
    }
    b->s = s;
    b->cap = cap;
    return true;
}

void vf_obuf_add(vf_obuf *b, const char *s, size_t n)
{
    if (!reserve(b, n)) return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void vf_obuf_puts(vf_obuf *b, const char *s) { vf_obuf_add(b, s, strlen(s)); }

void vf_obuf_printf(vf_obuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        vf_obuf_add(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void vf_obuf_json_str(vf_obuf *b, const char *s)
{
    vf_obuf_add(b, "\"", 1);
    const char *run = s;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *esc = NULL;
        char u[8];
        switch (*p) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (*p < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", *p);
                esc = u;
            }
        }
        if (esc) {
            vf_obuf_add(b, run, (size_t)((const char *)p - run));
            vf_obuf_puts(b, esc);
            run = (const char *)p + 1;
        }
    }
    vf_obuf_add(b, run, strlen(run));
    vf_obuf_add(b, "\"", 1);
}

void vf_obuf_json_num(vf_obuf *b, double v)
{
    if (!isfinite(v)) {
        vf_obuf_puts(b, "null");
        return;
    }
    if (v == (double)(long long)v && fabs(v) < 9e15)
        vf_obuf_printf(b, "%lld", (long long)v);
    else
        vf_obuf_printf(b, "%.6g", v);
}

const char *vf_obuf_str(const vf_obuf *b) { return (b->s && !b->oom) ? b->s : ""; }

int vf_write_line(int fd, const char *line, size_t n)
{
    struct iovec iov[2] = {{(void *)line, n}, {"\n", 1}};
    /* A regular file opened O_APPEND takes the whole writev at one offset; a short
     * write only happens on a full disk, where the rest would fail too. */
    ssize_t w;
    do {
        w = writev(fd, iov, 2);
    } while (w < 0 && errno == EINTR);
    if (w < 0) return -errno;
    return (size_t)w == n + 1 ? 0 : -ENOSPC;
}

int vf_append_line(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    int rc = vf_write_line(fd, line, strlen(line));
    close(fd);
    return rc;
}
