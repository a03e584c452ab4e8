/* checkpoint.h — the writer behind stage kind `checkpoint` (checkpoint_write.c), exposed
 * so tests and the benchmark can write a checkpoint without a running graph.
 */
#ifndef VF_CHECKPOINT_H
#define VF_CHECKPOINT_H

#include "formats/ckpt.h"
#include "models/dit.h"

typedef struct vf_ckpt_write_stats {
    int64_t bytes;      /* all files */
    double seconds;     /* wall time from the files' opening to the commit */
    char path[4224];    /* the step dir written */
} vf_ckpt_write_stats;

/* One checkpoint being written from the optimizer shards' snapshot chunks, in any order
 * (checkpoint_write.c). begin: the step-N.tmp dir and every file opened with its header —
 * the model (names from l; one file or, when its tensor bytes exceed shard_bytes > 0,
 * sharded; preset in its metadata; alpha not NULL: a LoRA run's adapters file with each
 * module's alpha) and the S optimizer files of the shards' ranges (vf_train_shard_range).
 * On success *out is owned: commit or abort. */
typedef struct vf_ckpt_stream vf_ckpt_stream;
int vf_ckpt_stream_begin(const char *dir, int64_t step, int S, const vf_dit_layout *l, int64_t shard_bytes,
                         const char *preset, const float *alpha, vf_ckpt_stream **out, vf_status *st);
/* Shard k's range: flat elements [*lo, *lo + *n); VF_EINVAL for a k out of range. */
int vf_ckpt_stream_range(const vf_ckpt_stream *c, int k, int64_t *lo, int64_t *n);
/* A chunk of shard k: master weights and moments of flat elements [a, a + cnt) of its
 * range (host f32, borrowed), written at their places. A chunk outside the range or
 * beyond what the shard holds is VF_EINVAL; a write error VF_EIO naming the file. */
int vf_ckpt_stream_put(vf_ckpt_stream *c, int k, int64_t a, int64_t cnt, const float *master, const float *m,
                       const float *v, vf_status *st);
/* True once every shard's whole range has come. */
bool vf_ckpt_stream_complete(const vf_ckpt_stream *c);
/* The step-N.tmp dir being written (borrowed). */
const char *vf_ckpt_stream_dir(const vf_ckpt_stream *c);
/* Commits a complete checkpoint: the files checked to be whole, fsynced and listed,
 * state.json of info (its params and shards filled in here), then formats/ckpt.h's
 * commit and the removal of the complete checkpoints beyond the newest `keep`. c is
 * freed; on any failure the .tmp is removed, the previous checkpoints are untouched, and
 * st says what failed. `fail_inject` (tests): fail after the model files as a write
 * error would. */
int vf_ckpt_stream_commit(vf_ckpt_stream *c, const vf_ckpt_state_info *info, int keep, bool fail_inject,
                          vf_ckpt_write_stats *out, vf_status *st);
/* Gives the checkpoint up: the files closed, the .tmp removed, c freed. NULL is fine. */
void vf_ckpt_stream_abort(vf_ckpt_stream *c);

/* Writes checkpoint `step` into dir from the S snapshot items of the optimizer shards
 * (snaps[k] from shard k: "master", "exp_avg", "exp_avg_sq" host f32 of its slice, meta
 * "off", "n", "lr", "shards", "replicas", "stages"; shard 0 also "cursors", "config",
 * "loss", "preset", and a LoRA run's "lora_alpha"), each shard's slice as one chunk of
 * a vf_ckpt_stream (borrowed; the items stay the caller's). */
int vf_ckpt_write_step(const char *dir, int64_t step, vf_item *const *snaps, int S,
                       const vf_dit_layout *l, int keep, int64_t shard_bytes, bool fail_inject,
                       vf_ckpt_write_stats *out, vf_status *st);

#endif /* VF_CHECKPOINT_H */
