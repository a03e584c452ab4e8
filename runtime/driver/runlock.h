/* runlock.h — one run per directory: the lock `vflow run` holds on its run dir (and on
 * each directory a stage writes outside it, the checkpoint dir) for the run's life.
 *
 * The lock is flock(LOCK_EX | LOCK_NB) on <dir>/run.lock, a file that names its holder
 * ("pid=<pid> host=<host> started=<UTC time>"). The kernel drops a flock when its holder
 * dies, SIGKILL included, so a lock left by a killed run is free to take: the file still
 * names the dead holder, which is how the taker tells a stale lock (logged) from a fresh
 * one. A run that ends removes the file while it still holds the lock; a taker checks
 * after flock that the file it locked is still the one at the path (a holder may have
 * removed it in between) and otherwise tries again.
 *
 * Workers never hold it: every descriptor of the driver is close-on-exec in them.
 */
#ifndef VF_RUNLOCK_H
#define VF_RUNLOCK_H
#include "runtime/vflow.h"
#include <limits.h>

#define VF_RUNLOCK_FILE "run.lock"

typedef struct vf_runlock {
    bool held;
    int fd;                  /* the open lock file while held */
    char path[PATH_MAX];     /* <dir>/run.lock */
    char stale[320];         /* the holder a stale lock named ("" = it was free) */
} vf_runlock;

/* Takes the lock on dir (which must exist), `what` naming it in messages ("run dir",
 * "checkpoint dir of stage checkpoint"). VF_EUSAGE (exit code 2) when another run holds
 * it, naming that run's pid and host; VF_EBADINPUT when dir is not a writable directory
 * (read-only filesystem, no permission, a file). On success l->stale says whether a
 * killed run's lock was taken over. */
int vf_runlock_take(vf_runlock *l, const char *dir, const char *what, vf_status *st);
/* Removes the lock file and lets go. Safe on a lock not held (or zeroed). */
void vf_runlock_release(vf_runlock *l);

#endif /* VF_RUNLOCK_H */
