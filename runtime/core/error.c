/* error.c — vf_status: the first error's code, a message with context, and the C
 * source location that raised it (LMDB style). Also the CLI exit-code
 * mapping and the abort path for broken invariants. */
#include "runtime/vflow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vf_status_set(vf_status *st, int code, const char *file, int line, const char *fmt, ...)
{
    /* Keep the FIRST error: later ones are usually consequences of it. */
    if (!st || st->code < 0) return code;
    st->code = code;
    st->file = file;
    st->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
    return code;
}

void vf_status_prefix(vf_status *st, const char *fmt, ...)
{
    if (!st) return;
    char pre[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    size_t pl = strlen(pre), ml = strlen(st->msg);
    if (pl + 2 >= sizeof st->msg) return;
    if (pl + 2 + ml >= sizeof st->msg) ml = sizeof st->msg - pl - 3; /* truncate the tail */
    memmove(st->msg + pl + 2, st->msg, ml);
    st->msg[pl + 2 + ml] = '\0';
    memcpy(st->msg, pre, pl);
    st->msg[pl] = ':';
    st->msg[pl + 1] = ' ';
}

void vf_status_clear(vf_status *st)
{
    if (!st) return;
    st->code = 0;
    st->line = 0;
    st->file = NULL;
    st->msg[0] = '\0';
}

const char *vf_strerror(int code)
{
    switch (code) {
    case VF_OK: return "ok";
    case VF_EOS: return "end of stream";
    case VF_EINVAL: return "invalid argument";
    case VF_ENOMEM: return "out of memory";
    case VF_EIO: return "I/O error";
    case VF_ECORRUPT: return "corrupt data";
    case VF_EVERSION: return "unsupported version";
    case VF_ESTOPPED: return "stopped";
    case VF_ETIMEOUT: return "timed out";
    case VF_EEXTERNAL: return "library call failed";
    case VF_ECUDA: return "CUDA error";
    case VF_ENOTFOUND: return "not found";
    case VF_EUSAGE: return "bad usage or topology";
    case VF_EBUDGET: return "over budget";
    case VF_EBADINPUT: return "bad input data";
    default: return "unknown error";
    }
}

int vf_exit_code(int code)
{
    if (code >= 0) return 0;
    if (code == VF_EUSAGE || code == VF_EBUDGET || code == VF_EBADINPUT) return 2;
    return 1;
}

void vf_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "vflow: %s:%d: internal error: assertion failed: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}
