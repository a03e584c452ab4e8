/* adamw_io.h — the optimizer shard's side of checkpoints (formats/ckpt.h has their
 * layout): the run config it vouches for, and its slice of the master weights read back
 * from a checkpoint written with any number of shards (a slice may cut tensors; the
 * reader takes the overlapping pieces and checks that they cover it). The moments come
 * back through formats/ckpt.h's vf_ckpt_read_moments.
 */
#ifndef VF_ADAMW_IO_H
#define VF_ADAMW_IO_H

#include "models/dit.h"
#include "runtime/json.h"

/* Flat config of a run as the shard's validated params describe it (ckpt.h "config"):
 * model.*, optim.*, train.*, data.* (from the `data` param: the reader's params as JSON,
 * defaults filled from the latent_reader schema). Caller owns *out. */
int vf_adamw_config(const vf_params *p, int64_t steps, vf_json **out, vf_status *st);

/* Host f32 master weights of flat elements [lo, hi) from the model file of step dir
 * ckpt_path (vf_ckpt_model_path: one file, or the files a sharded model's index maps). */
int vf_adamw_load_master(const char *ckpt_path, const vf_dit_layout *l, int64_t lo, int64_t hi,
                         float *dst, vf_status *st);

#endif /* VF_ADAMW_IO_H */
