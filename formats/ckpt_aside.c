/* ckpt_aside.c — an earlier run's checkpoints moved out of the way of a fresh run (ckpt.h
 * vf_ckpt_set_aside).
 *
 * A run started without --resume in a run dir that already holds checkpoints trains from
 * scratch; left where they are, the earlier run's step dirs would pass for this run's: a
 * later --resume would continue the newest of them (another run's weights and optimizer
 * state), and `keep` would prune this run's steps before that run's higher ones. Moving
 * them (with `latest`) into one subdir of their own keeps every byte and takes them out
 * of every search, which looks at step-N names at the top of the dir only.
 */
#include "formats/ckpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int vf_ckpt_set_aside(const char *dir, char *moved, size_t n, int64_t *first, int64_t *last, vf_status *st)
{
    int64_t *steps = NULL;
    int k = 0;
    if (moved && n) moved[0] = 0;
    *first = *last = -1;
    int rc = vf_ckpt_list(dir, false, &steps, &k, st);
    if (rc || k == 0) goto out;
    /* earlier-<UTC time>, and -2, -3, … after it should two fresh starts share a second */
    char to[PATH_MAX], stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    for (int i = 1;; i++) {
        if (i == 1) snprintf(to, sizeof to, "%s/earlier-%s", dir, stamp);
        else snprintf(to, sizeof to, "%s/earlier-%s-%d", dir, stamp, i);
        if (mkdir(to, 0755) == 0) break;
        if (errno != EEXIST || i >= 1000) {
            rc = vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: mkdir: %s", to, strerror(errno));
            goto out;
        }
    }
    for (int i = 0; i < k; i++) {
        char a[PATH_MAX + 32], b[PATH_MAX + 32];
        snprintf(a, sizeof a, "%s/step-%lld", dir, (long long)steps[i]);
        snprintf(b, sizeof b, "%s/step-%lld", to, (long long)steps[i]);
        if (rename(a, b) != 0) {
            rc = vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: rename to %s: %s", a, b, strerror(errno));
            goto out;
        }
    }
    char a[PATH_MAX + 16], b[PATH_MAX + 16];
    snprintf(a, sizeof a, "%s/latest", dir);
    snprintf(b, sizeof b, "%s/latest", to);
    if (rename(a, b) != 0 && errno != ENOENT) {
        rc = vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: rename to %s: %s", a, b, strerror(errno));
        goto out;
    }
    /* the moves reach the disk as the writer's renames do: a crash after the fresh run's
     * first commit loses none of the earlier steps */
    if ((rc = vf_ckpt_fsync_dir(to, st)) || (rc = vf_ckpt_fsync_dir(dir, st))) goto out;
    *first = steps[0], *last = steps[k - 1];
    if (moved && n) snprintf(moved, n, "%s", to);
out:
    free(steps);
    return rc;
}
