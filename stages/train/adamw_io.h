/* adamw_io.h — the optimizer shard's side of checkpoints: the run config it vouches for,
 * and reading its slice of master weights and moments back from a checkpoint written
 * with any number of shards.
 *
 * File formats (written by stages/train/checkpoint.c):
 *   model.safetensors              every model tensor by name, F32 (the master weights);
 *                                  a LoRA run's lora.safetensors instead: the adapters;
 *                                  above the writer's model_shard_bytes instead
 *                                  model-0000k-of-0000N.safetensors and
 *                                  model.safetensors.index.json (formats/st_sharded.h)
 *   optimizer-kk-of-SS.safetensors "exp_avg", "exp_avg_sq": F32 (numel), the moments of
 *                                  the flat range [offset, offset + numel); metadata
 *                                  "offset", "numel", "shard", "shards", "step", "total"
 * A shard's slice may cut tensors and may span several optimizer files (a resume with
 * another S): readers take the overlapping pieces, and check that they cover the slice.
 */
#ifndef VF_ADAMW_IO_H
#define VF_ADAMW_IO_H

#include "models/dit.h"
#include "runtime/json.h"

/* Flat config of a run as the shard's validated params describe it (ckpt.h "config"):
 * model.*, optim.*, train.*, data.* (from the `data` param: the reader's params as JSON,
 * defaults filled from the latent_reader schema). Caller owns *out. */
int vf_adamw_config(const vf_params *p, int64_t steps, vf_json **out, vf_status *st);

/* Host f32 master weights of flat elements [lo, hi) from ckpt_dir/model.safetensors or,
 * when the checkpoint is sharded, the files its model.safetensors.index.json maps. */
int vf_adamw_load_master(const char *ckpt_path, const vf_dit_layout *l, int64_t lo, int64_t hi,
                         float *dst, vf_status *st);
/* Host f32 moments of [lo, hi) from the optimizer-*.safetensors files of ckpt_path. */
int vf_adamw_load_moments(const char *ckpt_path, int64_t lo, int64_t hi, float *m, float *v,
                          vf_status *st);

#endif /* VF_ADAMW_IO_H */
