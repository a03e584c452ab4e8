/* adamw_internal.h — what adamw.c (the running shard), adamw_geo.c (its slice, ports and
 * declared memory) and adamw_xchg.c (its side of the exchange with the partitions) share.
 * Private to the adamw stage. */
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
/* The bounded chunk buffers of the exchange (adamw_xchg.c) and whether the shard needs
 * them, from its geometry and params: cap elements each (param `chunk` rounded up to a
 * norm block, at most the slice); G (gradients) where a norm block crosses a partition
 * boundary or a partition is on another device (param `part_devices`), R (another
 * replica's gradients) and W (weights) where a partition is on another device. The
 * memory hook declares what this says; the exchange allocates each on first use. */
typedef struct vf_adamw_chunks {
    int64_t cap;
    bool g, r, w;
    /* A host shard of GPU partitions (offload): the first such GPU, whose backend makes the
     * chunk buffers page-locked, so each chunk's copy to and from the device is one DMA.
     * kind CPU otherwise (the buffers are the shard's own memory). */
    vf_device pin;
} vf_adamw_chunks;
void vf_adamw_chunks_of(const vf_params *p, const vf_adamw_geo *g, vf_adamw_chunks *c);

/* The shard's side of the exchange with the partitions (adamw_xchg.c: the protocol). */
#define VF_ADAMW_XCHG_OTHERS 8
typedef struct vf_adamw_xchg {
    const vf_adamw_geo *g;
    vf_backend *be;
    vf_dtype act, grad;
    size_t as, gs;
    int64_t cap;
    void *G, *R, *W;          /* chunk buffers (mem), made on first use */
    vf_backend *mem;          /* the backend that makes them: be, or the GPU of c->pin (pinned host) */
    bool pinned;
    vf_item **got;            /* [P·D] the items of the step, held (with their views) until the reply */
    bool *summed;             /* [P] replica 0's gradient view of piece q holds the replicas' sum */
    vf_tensor **wdata;        /* [P] weights going back as data (views that crossed as copies) */
    vf_bufpool *wpool;        /* their buffers, made on first use */
    vf_backend *other[VF_ADAMW_XCHG_OTHERS]; /* backends of other devices it read or wrote through */
    int nother;
    int64_t moved;            /* bytes copied this step (chunks, replicas' copies, data replies) */
    int delay_ms;             /* tests (VFLOW_TEST_XCHG_DELAY_MS): hold the views this much longer */
    bool kept;                /* the step took no update (routing, no sample): the reply says
                                 so ("kept") and brings no weights */
} vf_adamw_xchg;

typedef struct vf_adamw_hyper {
    float lr, beta1, beta2, eps, wd, scale;
    int64_t step;
} vf_adamw_hyper;

int vf_adamw_xchg_init(vf_adamw_xchg *x, const vf_adamw_geo *g, vf_backend *be, const vf_adamw_chunks *c,
                       vf_status *st);
void vf_adamw_xchg_fini(vf_adamw_xchg *x); /* fine on a zeroed one */
/* The P·D items of `step` (-1: the weights lent before the first step), checked and held.
 * VF_EOS when the input ended before the first of them. */
int vf_adamw_xchg_recv(vf_adamw_xchg *x, vf_stage *s, vf_ctx *ctx, int64_t step, vf_status *st);
/* Replicas summed into replica 0's views where those are read in place. */
int vf_adamw_xchg_sum(vf_adamw_xchg *x, vf_status *st);
/* The sum of squares of each norm block of the slice into partials[b0 .. b1). */
int vf_adamw_xchg_sumsq(vf_adamw_xchg *x, double *partials, vf_status *st);
/* The AdamW step over the slice: master, m, v (this shard's, n each) and the new weights
 * into the partitions' views (or the reply's data). */
int vf_adamw_xchg_update(vf_adamw_xchg *x, float *master, float *m, float *v, const vf_adamw_hyper *hp, vf_status *st);
/* The weights of slice elements [lo + a, lo + a + cnt) from host f32 (cnt elements) into
 * the lent views: the start, chunk by chunk. host is read before it returns. */
int vf_adamw_xchg_put(vf_adamw_xchg *x, const float *host, int64_t a, int64_t cnt, vf_status *st);
/* Ends the device work on the views and drops them. */
int vf_adamw_xchg_release(vf_adamw_xchg *x, vf_status *st);
/* Release, then the reply of `step` to every partition ("weights_p<q>"). */
int vf_adamw_xchg_reply(vf_adamw_xchg *x, vf_ctx *ctx, int64_t step, vf_status *st);

/* The stage's ports and memory hooks (vf_stage_ops). */
int vf_adamw_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out, vf_status *st);
int vf_adamw_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out, vf_status *st);

#endif /* VF_ADAMW_INTERNAL_H */
