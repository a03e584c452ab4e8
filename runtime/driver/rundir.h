/* rundir.h — the run directory of `vflow run` (docs/run.md): runs/<name>/ with the
 * resolved graph (graph.json), the run log (run.log), metrics (metrics.jsonl), the
 * quarantine list (quarantine.jsonl, created by the first vf_quarantine), worker
 * stdout/stderr (workers/<worker>.log) and the ipc sockets of the run (sock/).
 *
 * The driver is the only writer of run.log and metrics.jsonl; workers send their lines
 * over the control plane. Socket paths must fit sun_path (107 bytes + NUL): when
 * <run dir>/sock/ is too long, the sockets go to a fresh /tmp/vflow-XXXXXX instead.
 */
#ifndef VF_RUNDIR_H
#define VF_RUNDIR_H
#include "runtime/driver/runlock.h"
#include "runtime/vflow.h"
#include <limits.h>

/* Longest socket file name the runtime puts in sock_dir ("/e123456", "/ctl"). */
#define VF_SOCK_NAME_MAX 16
#define VF_SUN_PATH_MAX 107

typedef struct vf_rundir {
    char path[PATH_MAX];     /* absolute */
    char sock_dir[VF_SUN_PATH_MAX + 1];
    bool sock_tmp;           /* sock_dir is a /tmp fallback (removed at close) */
    int log_fd;              /* run.log, O_APPEND */
    int metrics_fd;          /* metrics.jsonl, O_APPEND */
    vf_runlock lock;         /* <run dir>/run.lock, held from open to close */
} vf_rundir;

/* Creates (mkdir -p) and opens the run dir: `dir`, or runs/<name> when dir is NULL.
 * First it takes the run dir's lock (runlock.h): another run there is VF_EUSAGE naming
 * its pid and host, a dir that cannot be created or written VF_EBADINPUT; only then
 * run.log, metrics.jsonl and quarantine.jsonl start empty unless `append` (resume).
 * On failure st names the path. */
int vf_rundir_open(vf_rundir *rd, const char *dir, const char *name, bool append,
                   vf_status *st);
/* Removes the socket dir, closes the files and releases the lock. Safe on a zeroed or
 * failed rundir. */
void vf_rundir_close(vf_rundir *rd);
/* Writes <run dir>/<file> atomically (temp file, fsync, rename). */
int vf_rundir_write(const vf_rundir *rd, const char *file, const char *text, vf_status *st);
/* mkdir -p: 0, or -errno (-ENOTDIR when path or a parent is not a directory). */
int vf_mkdir_p(const char *path);
/* <run dir>/<rel> into buf. */
void vf_rundir_file(const vf_rundir *rd, const char *rel, char *buf, size_t n);

#endif /* VF_RUNDIR_H */
