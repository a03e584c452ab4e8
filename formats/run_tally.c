/* run_tally.c — the decode group's shared count of files tried and bad
 * (run_tally.h). */
#include "formats/run_tally.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TALLY_MAGIC 0x594c4c4154444656ULL /* "VFDTALLY" */

typedef struct tally_head {
    uint64_t magic;
    uint64_t run;             /* who started this run's workers (parent_identity) */
    int64_t nshards;
    int64_t pad;
} tally_head;

/* The parent process (the driver, or a node's driver) by pid and start time: the same
 * for every worker of one run, different for the next run in the same run dir. */
static uint64_t parent_identity(void)
{
    pid_t pp = getppid();
    uint64_t start = 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pp);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
        /* field 22 (starttime) counts from the one after the ")" ending the name */
        const char *p = strrchr(buf, ')');
        for (int field = 2; p && *p && field < 22; p++)
            if (*p == ' ') field++;
        if (p) start = strtoull(p, NULL, 10);
    }
    return ((uint64_t)pp << 40) ^ start;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

static void local_only(vf_decode_tally *t, char *why, size_t whyn, const char *what, const char *path)
{
    snprintf(why, whyn, "%s %s: %s; max_bad_fraction counts this instance's files only", what, path,
             strerror(errno));
    t->slots = t->own;
    t->shard = 0;
    t->shared = false;
}

void vf_decode_tally_open(vf_decode_tally *t, const char *run_dir, const char *origin, int shard, int nshards,
                          char *why, size_t whyn)
{
    memset(t, 0, sizeof *t);
    t->shard = shard;
    t->nshards = nshards;
    t->slots = t->own;
    why[0] = 0;
    if (nshards <= 1) { /* one instance: its own counts are the group's */
        t->shard = 0;
        t->shared = true;
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/decode-%016llx.tally", run_dir, (unsigned long long)fnv1a(origin));
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return local_only(t, why, whyn, "cannot open", path);
    size_t bytes = sizeof(tally_head) + (size_t)nshards * 2 * sizeof(int64_t);
    if (flock(fd, LOCK_EX) != 0) {
        local_only(t, why, whyn, "cannot lock", path);
        close(fd);
        return;
    }
    tally_head h = {0};
    uint64_t run = parent_identity();
    ssize_t got = pread(fd, &h, sizeof h, 0);
    if (got != (ssize_t)sizeof h || h.magic != TALLY_MAGIC || h.run != run || h.nshards != nshards) {
        /* another run's tally (or none yet): start this run's at zero */
        h = (tally_head){TALLY_MAGIC, run, nshards, 0};
        if (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)bytes) != 0 ||
            pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
            local_only(t, why, whyn, "cannot write", path);
            flock(fd, LOCK_UN);
            close(fd);
            return;
        }
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    flock(fd, LOCK_UN);
    close(fd);
    if (m == MAP_FAILED) return local_only(t, why, whyn, "cannot map", path);
    t->map_bytes = bytes;
    t->slots = (int64_t *)((char *)m + sizeof(tally_head));
    t->shared = true;
}

void vf_decode_tally_add(vf_decode_tally *t, bool bad)
{
    int64_t *s = t->slots + 2 * t->shard;
    __atomic_add_fetch(&s[0], 1, __ATOMIC_SEQ_CST);
    if (bad) __atomic_add_fetch(&s[1], 1, __ATOMIC_SEQ_CST);
}

void vf_decode_tally_sum(const vf_decode_tally *t, int64_t *tried, int64_t *bad)
{
    int n = t->map_bytes ? t->nshards : 1;
    *tried = *bad = 0;
    for (int k = 0; k < n; k++) {
        *tried += __atomic_load_n(&t->slots[2 * k], __ATOMIC_SEQ_CST);
        *bad += __atomic_load_n(&t->slots[2 * k + 1], __ATOMIC_SEQ_CST);
    }
}

void vf_decode_tally_close(vf_decode_tally *t)
{
    if (t->map_bytes) munmap((char *)t->slots - sizeof(tally_head), t->map_bytes);
    memset(t, 0, sizeof *t);
}
