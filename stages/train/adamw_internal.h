/* adamw_internal.h — what adamw.c (the running shard) and adamw_geo.c (its slice, ports
 * and declared memory) share. Private to the adamw stage. */
#ifndef VF_ADAMW_INTERNAL_H
#define VF_ADAMW_INTERNAL_H

#include "models/dit.h"
#include "models/dit_lora.h"
#include "stages/train/dit_train.h"
#include "runtime/vflow.h"

typedef struct vf_adamw_geo {
    vf_dit_config cfg;
    vf_dit_layout *l;        /* the model */
    vf_dit_lora *lora;       /* NULL: full fine-tune */
    const vf_dit_layout *tl; /* the trainable vector: the model's, or the adapters' */
    int k, S, P, D;
    int splits[VF_TRAIN_MAX_PARTS + 1];
    int64_t total, block, nblk, lo, hi, n, b0, b1;
    int64_t plo[VF_TRAIN_MAX_PARTS], phi[VF_TRAIN_MAX_PARTS];
} vf_adamw_geo;

/* The shard's geometry from its params (model, lora, shard, shards, replicas, splits);
 * VF_EUSAGE for a shard index or count that does not fit the model. Caller owns it
 * (vf_adamw_geo_fini). */
int vf_adamw_geo_init(const vf_params *p, vf_adamw_geo *g, vf_status *st);
void vf_adamw_geo_fini(vf_adamw_geo *g);
/* The dtypes of the weights the shard sends and the gradients it takes: the partitions'
 * (param dtype; "auto" = the shard device's own: f32 on the CPU, bf16 on a GPU). */
void vf_adamw_dtypes(const vf_params *p, vf_dtype *act, vf_dtype *grad);
/* Elements of the largest piece of this shard one partition receives: the size of every
 * weight item buffer (adamw_init's pool and the memory hook share it). */
int64_t vf_adamw_weight_piece_most(const vf_adamw_geo *g);
/* Elements of one snapshot chunk of the shard (ckpt_chunk bytes, at most its slice). */
int64_t vf_adamw_chunk(const vf_adamw_geo *g, int64_t ckpt_chunk);
/* The stage's ports and memory hooks (vf_stage_ops). */
int vf_adamw_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out, vf_status *st);
int vf_adamw_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out, vf_status *st);

#endif /* VF_ADAMW_INTERNAL_H */
