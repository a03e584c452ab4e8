/* checkpoint.h — the writer behind stage kind `checkpoint` (checkpoint_write.c), exposed
 * so tests and the benchmark can write a checkpoint without a running graph.
 */
#ifndef VF_CHECKPOINT_H
#define VF_CHECKPOINT_H

#include "models/dit.h"

typedef struct vf_ckpt_write_stats {
    int64_t bytes;      /* all files */
    double seconds;     /* wall time of the whole commit */
    char path[4224];    /* the step dir written */
} vf_ckpt_write_stats;

/* Writes checkpoint `step` into dir from the S snapshot items of the optimizer shards
 * (snaps[k] from shard k: "master", "exp_avg", "exp_avg_sq" host f32 of its slice, meta
 * "off", "n", "lr", "shards", "replicas", "stages"; shard 0 also "cursors", "config",
 * "loss", "preset", and a LoRA run's "lora_alpha"): the files and the commit of
 * formats/ckpt.h, the model (names from l) as one file or, when its tensor bytes exceed
 * shard_bytes > 0, sharded; then the complete checkpoints beyond the newest `keep`
 * removed. On any failure the .tmp is removed, the previous checkpoints are untouched,
 * and st says what failed (the file and errno text). `fail_inject` (tests): fail after
 * the model files as a write error would. */
int vf_ckpt_write_step(const char *dir, int64_t step, vf_item *const *snaps, int S,
                       const vf_dit_layout *l, int keep, int64_t shard_bytes, bool fail_inject,
                       vf_ckpt_write_stats *out, vf_status *st);

#endif /* VF_CHECKPOINT_H */
