/* runlock.c — the lock of one run on its directories. See runlock.h. */
#include "runtime/driver/runlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The holder line of the lock file, trimmed ("" when empty or unreadable). */
static void read_holder(int fd, char *out, size_t n)
{
    ssize_t r = pread(fd, out, n - 1, 0);
    if (r < 0) r = 0;
    out[r] = 0;
    char *nl = strpbrk(out, "\r\n");
    if (nl) *nl = 0;
}

/* "pid=1 host=h started=T" -> "pid 1 on host h, started T" (other text as it is). */
static void describe(const char *holder, char *out, size_t n)
{
    int pid = 0;
    char host[128] = "", started[64] = "";
    if (sscanf(holder, "pid=%d host=%127s started=%63s", &pid, host, started) >= 2)
        snprintf(out, n, "pid %d on host %s%s%s", pid, host, started[0] ? ", started " : "", started);
    else
        snprintf(out, n, "%s", holder[0] ? holder : "a run that has not written its pid yet");
}

static bool dir_problem(int e)
{
    return e == EROFS || e == EACCES || e == EPERM || e == ENOTDIR || e == ENOENT || e == ELOOP;
}

int vf_runlock_take(vf_runlock *l, const char *dir, const char *what, vf_status *st)
{
    memset(l, 0, sizeof *l);
    if (snprintf(l->path, sizeof l->path, "%s/%s", dir, VF_RUNLOCK_FILE) >= (int)sizeof l->path)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s %s: path too long", what, dir);
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) {
            int e = errno;
            if (dir_problem(e))
                return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                                     "%s %s is not a writable directory: cannot create %s: %s", what, dir,
                                     l->path, strerror(e));
            return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", l->path, strerror(e));
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char holder[256], who[320];
            read_holder(fd, holder, sizeof holder);
            close(fd);
            if (e != EWOULDBLOCK)
                return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: flock: %s", l->path, strerror(e));
            describe(holder, who, sizeof who);
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                                 "%s %s is in use by another run (%s; lock %s): wait for it to end, or "
                                 "give this run another directory",
                                 what, dir, who, l->path);
        }
        /* The holder we waited on may have removed the file between our open and flock:
         * then we locked a name that is gone, and a third run could lock a new one. */
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(l->path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
            close(fd);
            continue;
        }
        read_holder(fd, l->stale, sizeof l->stale);
        char host[128] = "?", stamp[40], me[256];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        for (char *c = host; *c; c++)
            if (*c == ' ') *c = '_';
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
        int len = snprintf(me, sizeof me, "pid=%d host=%s started=%s\n", (int)getpid(), host, stamp);
        if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)len, 0) != len) {
            int e = errno;
            close(fd);
            return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", l->path, strerror(e));
        }
        if (l->stale[0]) {
            char who[320];
            describe(l->stale, who, sizeof who);
            snprintf(l->stale, sizeof l->stale, "%s", who);
        }
        l->fd = fd;
        l->held = true;
        return 0;
    }
    return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: the lock file keeps being replaced", l->path);
}

void vf_runlock_release(vf_runlock *l)
{
    if (!l || !l->held) return;
    unlink(l->path); /* still held: no one can have taken it meanwhile */
    close(l->fd);
    l->held = false;
}
