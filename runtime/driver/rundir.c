/* rundir.c — creating, filling and closing the run directory. See rundir.h. */
#include "runtime/driver/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int vf_mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -ENAMETOOLONG;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST) return -errno;
        *p = '/';
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST) return -errno;
    struct stat sb;
    if (stat(tmp, &sb) < 0) return -errno;
    return S_ISDIR(sb.st_mode) ? 0 : -ENOTDIR;
}

/* Removes the socket files a killed earlier run may have left; a stale socket file
 * makes bind fail with EADDRINUSE. Only plain names we create are touched. */
static void clear_sockets(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISSOCK(sb.st_mode)) unlink(p);
    }
    closedir(d);
}

static int open_log(const vf_rundir *rd, const char *file, bool append, vf_status *st)
{
    char p[PATH_MAX];
    vf_rundir_file(rd, file, p, sizeof p);
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
    if (fd < 0)
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "run dir: cannot open %s: %s", p,
                             strerror(errno));
    return fd;
}

int vf_rundir_open(vf_rundir *rd, const char *dir, const char *name, bool append,
                   vf_status *st)
{
    int rc = 0;
    memset(rd, 0, sizeof *rd);
    rd->log_fd = rd->metrics_fd = -1;
    char want[PATH_MAX];
    if (dir && dir[0])
        snprintf(want, sizeof want, "%s", dir);
    else
        snprintf(want, sizeof want, "runs/%s", name && name[0] ? name : "run");
    int e = vf_mkdir_p(want);
    if (e < 0)
        VF_FAIL(st, e == -EROFS || e == -EACCES || e == -EPERM || e == -ENOTDIR ? VF_EBADINPUT : VF_EIO,
                "run dir: cannot create %s: %s", want, strerror(-e));
    if (!realpath(want, rd->path))
        VF_FAIL(st, VF_EIO, "run dir: %s: %s", want, strerror(errno));
    /* before anything is truncated or removed: those may be another run's files */
    VF_TRY(vf_runlock_take(&rd->lock, rd->path, "run dir", st));

    char sub[PATH_MAX];
    vf_rundir_file(rd, "workers", sub, sizeof sub);
    if ((e = vf_mkdir_p(sub)) < 0) VF_FAIL(st, VF_EIO, "run dir: cannot create %s: %s", sub, strerror(-e));

    /* ipc socket dir: inside the run dir when its longest name fits sun_path. */
    vf_rundir_file(rd, "sock", sub, sizeof sub);
    if (strlen(sub) + VF_SOCK_NAME_MAX <= VF_SUN_PATH_MAX) {
        if ((e = vf_mkdir_p(sub)) < 0)
            VF_FAIL(st, VF_EIO, "run dir: cannot create %s: %s", sub, strerror(-e));
        clear_sockets(sub);
        snprintf(rd->sock_dir, sizeof rd->sock_dir, "%s", sub);
    } else {
        const char *tmp = getenv("TMPDIR");
        char templ[VF_SUN_PATH_MAX + 1];
        if (!tmp || strlen(tmp) + 16 + VF_SOCK_NAME_MAX > VF_SUN_PATH_MAX) tmp = "/tmp";
        snprintf(templ, sizeof templ, "%s/vflow-XXXXXX", tmp);
        if (!mkdtemp(templ))
            VF_FAIL(st, VF_EIO, "run dir: cannot create a socket dir %s: %s", templ,
                    strerror(errno));
        snprintf(rd->sock_dir, sizeof rd->sock_dir, "%s", templ);
        rd->sock_tmp = true;
    }

    VF_TRY(rd->log_fd = open_log(rd, "run.log", append, st));
    VF_TRY(rd->metrics_fd = open_log(rd, "metrics.jsonl", append, st));
    if (!append) {
        /* quarantine.jsonl is created by the first bad input; a stale one from an
         * earlier run would be mistaken for this run's. */
        vf_rundir_file(rd, "quarantine.jsonl", sub, sizeof sub);
        unlink(sub);
    }
    return 0;
fail:
    vf_rundir_close(rd);
    return rc;
}

void vf_rundir_close(vf_rundir *rd)
{
    if (rd->sock_dir[0]) {
        clear_sockets(rd->sock_dir);
        rmdir(rd->sock_dir);
        rd->sock_dir[0] = 0;
    }
    if (rd->log_fd >= 0) close(rd->log_fd);
    if (rd->metrics_fd >= 0) close(rd->metrics_fd);
    rd->log_fd = rd->metrics_fd = -1;
    vf_runlock_release(&rd->lock);
}

void vf_rundir_file(const vf_rundir *rd, const char *rel, char *buf, size_t n)
{
    /* callers size buf PATH_MAX: a longer path is cut, and then fails to open */
    if (snprintf(buf, n, "%s/%s", rd->path, rel) >= (int)n && n) buf[n - 1] = 0;
}

int vf_rundir_write(const vf_rundir *rd, const char *file, const char *text, vf_status *st)
{
    int rc = 0, fd = -1;
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    vf_rundir_file(rd, file, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) VF_FAIL(st, VF_EIO, "run dir: cannot write %s: %s", tmp, strerror(errno));
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) VF_FAIL(st, VF_EIO, "run dir: cannot write %s: %s", tmp, strerror(errno));
        off += (size_t)w;
    }
    if (fsync(fd) < 0) VF_FAIL(st, VF_EIO, "run dir: fsync %s: %s", tmp, strerror(errno));
    close(fd);
    fd = -1;
    if (rename(tmp, path) < 0)
        VF_FAIL(st, VF_EIO, "run dir: rename %s: %s", path, strerror(errno));
    return 0;
fail:
    if (fd >= 0) close(fd);
    unlink(tmp);
    return rc;
}
