/* run_tally.h — the files tried and found bad by every decode instance of a run, for
 * a max_bad_fraction over the whole run's files rather than one instance's share.
 *
 * The instances of one decode group (the same list, dealt round-robin over nshards) are
 * processes of their own on the node; each owns one slot of a small file in the run dir,
 * <run dir>/decode-<hash of the list's origin>.tally, mapped shared, and reads the sum of
 * all slots. The file's header names the run (the pid and start time of the process that
 * started the workers), so a tally of an earlier run in the same run dir is reset, never
 * added to. Instances on other nodes of a multi-node run keep their node's tally. When
 * the file cannot be made (a read-only run dir), the tally holds this instance's counts
 * alone and says so in `shared`.
 */
#ifndef VF_RUN_TALLY_H
#define VF_RUN_TALLY_H
#include "runtime/vflow.h"

typedef struct vf_decode_tally {
    int64_t *slots;           /* 2 per shard: tried, bad (mapped, or own[]) */
    int64_t own[2];
    int shard, nshards;
    size_t map_bytes;         /* 0: not mapped */
    bool shared;              /* the counts are the group's, not only this instance's */
} vf_decode_tally;

/* Opens (or starts) the group's tally for instance `shard` of `nshards`, keyed by the
 * list's origin. Never fails: a file that cannot be used leaves an instance-only tally
 * (t->shared false) and its reason in why. */
void vf_decode_tally_open(vf_decode_tally *t, const char *run_dir, const char *origin, int shard, int nshards,
                          char *why, size_t whyn);
/* Adds one file tried (bad or not) to this instance's slot. */
void vf_decode_tally_add(vf_decode_tally *t, bool bad);
/* The sums over the group's instances. */
void vf_decode_tally_sum(const vf_decode_tally *t, int64_t *tried, int64_t *bad);
void vf_decode_tally_close(vf_decode_tally *t);
#endif
