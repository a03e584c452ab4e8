/* lr_cursor.h — the latent reader's resume cursor: the text stage kind `latent_reader`
 * (stages/reader/) puts on every batch as metadata "cursor", the optimizer shards gather
 * into a checkpoint's state.json ("cursors", formats/ckpt.h), and a resumed run hands
 * back to the reader (param `cursor`) and compares batches with (stages/train/).
 *
 * Two versions, one per order of the reader:
 *   plain     VF_LR_CURSOR_V1 "v1;epoch=E;pos=P;n=N;seed=S;shard=K/NS"
 *   bucketed  VF_LR_CURSOR_V2 "v2;epoch=E;batch=J;n=N;seed=S;shard=K/NS;buckets=H"
 * E the epoch, P the position in the rank's epoch list of entries (J: the place in the
 * epoch's list of batches) where the next batch starts, N the cache's entries the order
 * was drawn over, S the shuffle seed, K of NS the data-parallel rank, H (16 lower-case hex
 * digits) a hash of the buckets' names, entries and batch sizes. Numbers are decimal.
 * The fields after the position name the stream the order belongs to: two cursors of one
 * stream compare by (epoch, position).
 */
#ifndef VF_LR_CURSOR_H
#define VF_LR_CURSOR_H
#include "runtime/vflow.h"

/* The grammar of each version, for messages that name it. */
#define VF_LR_CURSOR_V1 "v1;epoch=E;pos=P;n=N;seed=S;shard=K/NS"
#define VF_LR_CURSOR_V2 "v2;epoch=E;batch=J;n=N;seed=S;shard=K/NS;buckets=H"

/* Bytes the longest cursor text takes, its NUL included. */
#define VF_LR_CURSOR_MAX 200

typedef struct vf_lr_cursor {
    int version;      /* 1: plain (pos counts entries), 2: bucketed (pos counts batches) */
    uint64_t epoch;
    int64_t pos;      /* >= 0 */
    int64_t n;        /* cache entries */
    uint64_t seed;
    int shard, nshards;
    uint64_t buckets; /* version 2: the hash of the buckets */
} vf_lr_cursor;

/* The text of c (its version's fields) into buf (VF_LR_CURSOR_MAX bytes hold any). */
void vf_lr_cursor_print(const vf_lr_cursor *c, char *buf, size_t n);
/* Parses text as a cursor of `version` (1 or 2) into *c: 0, or VF_EINVAL when it is not
 * one (another version, a field missing, out of order or not a number, bytes after the
 * last field, a negative position). */
int vf_lr_cursor_parse(const char *text, int version, vf_lr_cursor *c);

/* Compares where two cursors of either version stand, by epoch then position; only the
 * version tag, "epoch=" and "pos=" (version 2: "batch=") are read. 0 with *cmp < 0, 0,
 * > 0; VF_EINVAL (and *cmp unchanged) when either has no version tag or lacks one of
 * those fields. */
int vf_lr_cursor_cmp(const char *a, const char *b, int *cmp);
/* True when two cursors belong to one stream: every field but epoch and position
 * equal. */
bool vf_lr_cursor_same_stream(const char *a, const char *b);

#endif /* VF_LR_CURSOR_H */
