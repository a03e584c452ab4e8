/* dit_stage.c — stage kind `dit`: one pipeline partition of the video DiT (docs/TRAINING.md).
 *
 * Partition p of P runs blocks [splits[p], splits[p+1]) of the model (the first also the
 * embeddings, the last also the head and the loss) on its device. It holds the weights
 * and gradients of its flat range once and lends them to the optimizer shards
 * (dit_xchg.c): before the first step it lends each shard the weights of their overlap,
 * then per step:
 *   1. wait for every shard's reply ("weights", one item per shard): the shard has
 *      written the weights in place and let go of the buffers; the first reply's step is
 *      where the run starts (0, or the checkpoint's with --resume);
 *   2. run the step's M micro-batches in 1F1B order (dit_step.c), accumulating the
 *      parameter gradients;
 *   3. lend each shard its piece of the gradients and weights ("grad_s<k>"), with the
 *      step's loss (last partition), reader cursor (first partition) and timings.
 * It stops after `steps`, or at a step boundary when its inputs end. Ports:
 *   batch    in   (first partition) latent_reader items
 *   act_in   in   (not first) activations, act_out out (not last)
 *   grad_in  in   (not last, a training-loop edge), grad_out out (not first)
 *   weights  in   multi, the S shards' replies (loop edges)
 *   grad_s<k> out one per shard: views of the overlap
 * With --resume the first partition replays the reader up to the checkpoint's cursor, so
 * the data continue exactly where the checkpointed step left them.
 */
#include "stages/train/dit_stage.h"
#include "models/dit_sp.h"
#include "formats/ckpt.h"
#include "models/dit_experts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the partition keeps of a block's forward (models/dit.h vf_dit_recompute) */
static int dit_recompute_of(const vf_params *prm)
{
    if (!vf_param_bool(prm, "recompute")) return VF_DIT_KEEP;
    return vf_param_bool(prm, "recompute_attention") ? VF_DIT_RECOMPUTE_ALL : VF_DIT_RECOMPUTE;
}

static const vf_param_spec dit_params[] = {
    {"model", VF_P_TABLE, VF_DIT_MODEL_DEFAULT, VF_ANY, "DiT preset (vf.models.dit \"tiny\")", NULL,
     vf_dit_model_fields},
    {"stage", VF_P_INT, "0", VF_RANGE(0, VF_TRAIN_MAX_PARTS - 1), "partition index p (set by pipeline_parallel)"},
    {"splits", VF_P_LIST_INT, "[]", VF_RANGE(0, 1 << 20), "block boundaries {0, …, depth} of the P partitions; [] = one"},
    {"micro_batches", VF_P_INT, "1", VF_RANGE(1, 4096), "micro-batches M per step (1F1B)"},
    {"recompute", VF_P_BOOL, "false", VF_ANY,
     "keep block inputs (and each self-attention's output and lse), recompute the rest in backward"},
    {"recompute_attention", VF_P_BOOL, "false", VF_ANY,
     "with recompute: rerun the self-attention in backward too, keeping only block inputs"},
    {"shards", VF_P_INT, "1", VF_RANGE(1, VF_TRAIN_MAX_SHARDS), "optimizer shards S (set by p:train)"},
    {"replicas", VF_P_INT, "1", VF_RANGE(1, 64), "data-parallel replicas D (set by p:train)"},
    {"replica", VF_P_INT, "0", VF_RANGE(0, 63), "this partition's replica r"},
    {"sp", VF_P_INT, "1", VF_RANGE(1, 64),
     "sequence parallelism: ranks N of the partition, each holding 1/N of every sample's tokens (set by "
     "pipeline_parallel; divides the heads)"},
    {"sp_rank", VF_P_INT, "0", VF_RANGE(0, 63), "this partition's rank among its sp ranks"},
    {"steps", VF_P_INT, "0", VF_RANGE(0, 1e12), "optimizer steps of the run (set by p:train)"},
    {"seed", VF_P_INT, "0", VF_RANGE(0, 9007199254740991.0), "noise / timestep seed (Philox key)"},
    {"t_mean", VF_P_NUM, "0", VF_ANY, "logit-normal timestep mean"},
    {"t_std", VF_P_NUM, "1", VF_RANGE(0, 100), "logit-normal timestep std"},
    {"t_sampling", VF_P_STR, "\"logit_normal\"", VF_ANY, "timestep distribution: logit_normal or uniform"},
    {"t_shift", VF_P_NUM, "1", VF_RANGE(0.001, 1000), "timestep shift: t <- shift*t / (1 + (shift-1)*t); 1 = none"},
    {"t_min", VF_P_NUM, "0", VF_RANGE(0, 1), "timesteps mapped linearly into [t_min, t_max] (after the shift)"},
    {"t_max", VF_P_NUM, "1", VF_RANGE(0, 1), "upper end of the timestep range"},
    {"route", VF_P_STR, "\"\"", VF_ANY,
     "one expert of two in one run (Wan 2.2 A14B): the samples whose t, drawn over [0, 1], is on this expert's "
     "side of boundary (high: t >= boundary, low: below) train it, cut into the M micro-batches (set by "
     "finetune_wan22.lua); \"\" = every sample"},
    {"boundary", VF_P_NUM, "0.875", VF_RANGE(0, 1), "with route: the experts' boundary in t (after the shift)"},
    {"ckpt_dir", VF_P_STR, "\"\"", VF_ANY, "checkpoint dir (first partition: data cursor on --resume); \"\" = <run dir>/ckpt"},
    {"device", VF_P_DEVICE, "\"cpu\"", VF_ANY, "where this partition runs"},
    {"lora", VF_P_STR, "\"\"", VF_ANY,
     "LoRA adapters as JSON {rank, alpha, targets} (set by p:train); \"\" = train every weight"},
    {"weights", VF_P_STR, "\"\"", VF_ANY,
     "with LoRA: the frozen base weights of this partition (set by p:train); \"\" = init from seed"},
    {"expert", VF_P_STR, "\"\"", VF_ANY,
     "with weights of a two-expert model (Wan 2.2 A14B): which expert this partition loads (set by p:train); "
     "\"\" = the weights are one model (high | low: checked with the weights)"},
    {"base_dtype", VF_P_STR, "\"\"", VF_ANY,
     "with LoRA: \"fp8\" holds the frozen base's block linears in FP8 E4M3 with a scale per tensor; "
     "\"\" = the model's dtype"},
    {"swap_blocks", VF_P_INT, "0", VF_RANGE(0, 4096),
     "the last K blocks of the partition keep their weights in pinned host memory (LoRA: the frozen base; "
     "a full fine-tune: weights and gradients, which go back after each block's backward), streamed in "
     "ahead of use (below the partition's blocks); \"auto\": the smallest K with which the "
     "partition fits its budget, resolved by `vflow plan` and `vflow run` before the run starts", "auto"},
    {"swap_budget", VF_P_STR, "\"\"", VF_ANY,
     "with swap_blocks \"auto\": the device memory the partition may hold (\"12GiB\"; what it declares on its "
     "device, the pinned host copies not counted), which the CPU backend (host and device memory one) needs; "
     "\"\" = its device's budget (--budget, else what the device has)"},
    {"offload_activations", VF_P_BOOL, "false", VF_ANY,
     "with recompute: the block inputs kept for backward wait in pinned host memory, copied out after "
     "each block's forward and back ahead of its backward"},
    {0},
};

/* ------------------------------------------------------------------ geometry */

typedef struct pgeo {
    vf_dit_config cfg;
    vf_dit_layout *l;
    vf_dit_lora *lora;       /* NULL: the trainable vector is the model's */
    int p, P, S, M;
    int swap;                /* swap_blocks */
    bool swap_auto;          /* swap_blocks "auto", planned as 0 until the planner resolves it */
    bool offload;            /* offload_activations */
    int splits[VF_TRAIN_MAX_PARTS + 1];
    int64_t off, n;          /* range of the trainable vector */
    int64_t boff, bn;        /* range of the model's vector */
    bool fp8;                /* base_dtype "fp8": the frozen base's block linears in FP8 */
    int64_t slo[VF_TRAIN_MAX_SHARDS], shi[VF_TRAIN_MAX_SHARDS];
    vf_dit_rf rf;            /* the timestep distribution */
    int route;               /* routing by the drawn t (dit_route.c) */
    double boundary;
} pgeo;

static void pgeo_fini(pgeo *g)
{
    vf_dit_lora_free(g->lora);
    vf_dit_layout_free(g->l);
    g->lora = NULL, g->l = NULL;
}

int64_t vf_dit_largest_in(const vf_dit_layout *l, int64_t off, int64_t n)
{
    int64_t most = 1;
    for (int i = 0; i < l->n; i++)
        if (l->t[i].offset >= off && l->t[i].offset + l->t[i].numel <= off + n && l->t[i].numel > most)
            most = l->t[i].numel;
    return most;
}

/* The timestep distribution of params t_* (models/dit.h: vf_dit_rf), refused at check
 * time when it names no distribution or an empty range. */
static int rf_of(const vf_params *prm, vf_dit_rf *rf, vf_status *st)
{
    int rc = 0;
    const char *name = vf_param_str(prm, "t_sampling");
    int kind = vf_dit_t_sampling_parse(name);
    if (kind < 0) VF_FAIL(st, VF_EUSAGE, "dit: t_sampling \"%s\" is not logit_normal or uniform", name);
    *rf = (vf_dit_rf){.seed = (uint64_t)vf_param_int(prm, "seed"),
                      .t_mean = (float)vf_param_num(prm, "t_mean"),
                      .t_std = (float)vf_param_num(prm, "t_std"),
                      .sampling = (vf_dit_t_sampling)kind,
                      .shift = vf_param_num(prm, "t_shift"),
                      .t_min = vf_param_num(prm, "t_min"),
                      .t_max = vf_param_num(prm, "t_max")};
    if (!(rf->t_min < rf->t_max))
        VF_FAIL(st, VF_EUSAGE, "dit: t_min %g is not below t_max %g", rf->t_min, rf->t_max);
fail:
    return rc;
}

static int pgeo_init(const vf_params *prm, pgeo *g, vf_status *st)
{
    int rc = 0;
    memset(g, 0, sizeof *g);
    VF_TRY(rf_of(prm, &g->rf, st));
    VF_TRY(vf_dit_route_param(prm, &g->rf, &g->route, &g->boundary, st));
    VF_TRY(vf_train_model(prm, &g->cfg, &g->l, &g->lora, st));
    const vf_dit_layout *tl = g->lora ? g->lora->l : g->l;
    if (vf_param_len(prm, "splits") == 0) {
        g->P = 1, g->splits[0] = 0, g->splits[1] = g->cfg.depth;
    } else {
        VF_TRY(vf_train_splits(prm, g->cfg.depth, g->splits, &g->P, "dit", st));
    }
    g->p = (int)vf_param_int(prm, "stage");
    g->S = (int)vf_param_int(prm, "shards");
    g->M = (int)vf_param_int(prm, "micro_batches");
    VF_TRY(vf_dit_base_dtype(prm, g->lora != NULL, &g->fp8, st));
    if (g->p >= g->P) VF_FAIL(st, VF_EUSAGE, "dit: stage %d is not below the %d partitions of splits", g->p, g->P);
    VF_TRY(vf_dit_sp_rank_check(&g->cfg, (int)vf_param_int(prm, "sp"), (int)vf_param_int(prm, "sp_rank"), st));
    VF_TRY(vf_dit_swap_param(prm, g->p, g->splits[g->p], g->splits[g->p + 1], &g->swap, &g->swap_auto, st));
    g->offload = vf_param_bool(prm, "offload_activations");
    VF_TRY(vf_dit_offload_check(g->offload, dit_recompute_of(prm), g->p, st));
    vf_dit_layout_range(g->l, g->splits[g->p], g->splits[g->p + 1], &g->boff, &g->bn);
    vf_dit_layout_range(tl, g->splits[g->p], g->splits[g->p + 1], &g->off, &g->n);
    int64_t block = vf_train_norm_block(tl->total), b0, b1;
    if (g->S > (tl->total + block - 1) / block)
        VF_FAIL(st, VF_EUSAGE, "dit: %d optimizer shards for %lld %sparameters (norm blocks of %lld)", g->S,
                (long long)tl->total, g->lora ? "LoRA " : "", (long long)block);
    for (int k = 0; k < g->S; k++) vf_train_shard_range(tl->total, block, g->S, k, &g->slo[k], &g->shi[k], &b0, &b1);
fail:
    if (rc) pgeo_fini(g);
    return rc;
}

static void dev_dtypes(vf_device d, vf_dtype *act, vf_dtype *grad)
{
    *act = d.kind == VF_DEV_CPU ? VF_DTYPE_F32 : VF_DTYPE_BF16;
    *grad = *act;
}

/* Micro-batch geometry bound from what arrives: the reader's latent (first partition) or
 * the previous partition's target; over a bucketed reader's buckets, the largest B, L
 * and B·L. Zeros when not known yet; an error naming a bucket the model cannot take. */
static int upstream_dims(const pgeo *g, const vf_port_specs *up, vf_dit_dims *mx, int64_t *Bmax,
                         vf_dit_dims *each, int *neach, vf_status *st)
{
    memset(mx, 0, sizeof *mx);
    *Bmax = 0;
    if (neach) *neach = 0;
    const vf_port_spec *in = up ? vf_port_find(up, g->p == 0 ? "batch" : "act_in") : NULL;
    if (in && in->geometries[0]) {
        int rc = vf_dit_bucket_max("dit", &g->cfg, g->M, in->geometries, mx, each, neach, st);
        *Bmax = mx->B;
        return rc;
    }
    for (int i = 0; in && i < in->ntensors; i++) {
        const vf_tensor_spec *t = &in->t[i];
        if (strcmp(t->name, g->p == 0 ? "latent" : "target") != 0 || t->ndim != 5) continue;
        int64_t B = t->dims[0];
        if (g->p == 0) B = (B + g->M - 1) / g->M;
        *mx = vf_dit_dims_of(&g->cfg, (int)B, (int)t->dims[2], (int)t->dims[3], (int)t->dims[4]);
        *Bmax = B;
        if (each) each[0] = *mx, *neach = 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ ports, memory */

static void mirror(vf_port_spec *dst, const vf_port_spec *src)
{
    dst->ntensors = src->ntensors;
    memcpy(dst->t, src->t, sizeof dst->t);
    dst->meta_bytes = src->meta_bytes;
    memcpy(dst->geometries, src->geometries, sizeof dst->geometries);
}

static void xfer_spec(vf_port_spec *ps, const pgeo *g, const vf_dit_dims *mx, vf_dtype dt, bool target)
{
    vf_dit_xfer_port(ps, &g->cfg, mx, dt);
    if (target) {
        static const char *const sym[5] = {"B", "", "", "", ""};
        int64_t d[5] = {mx->B, g->cfg.z, mx->T, mx->H, mx->W};
        vf_port_tensor(ps, "target", dt, 5, d, sym);
    }
    ps->meta_bytes = 512;
}

static int dit_ports(const vf_params *prm, const vf_port_specs *upstream, vf_port_specs *out,
                     vf_status *st)
{
    pgeo g;
    int rc = pgeo_init(prm, &g, st);
    if (rc) return rc;
    vf_device dev = vf_param_device(prm, "device");
    vf_dtype act, grad;
    dev_dtypes(dev, &act, &grad);
    vf_dit_dims mx;
    int64_t Bmax;
    VF_TRY(upstream_dims(&g, upstream, &mx, &Bmax, NULL, NULL, st));
    const vf_port_spec *up = upstream ? vf_port_find(upstream, g.p == 0 ? "batch" : "act_in") : NULL;
    if (mx.T && (mx.T % g.cfg.patch[0] || mx.H % g.cfg.patch[1] || mx.W % g.cfg.patch[2]))
        VF_FAIL(st, VF_EUSAGE, "dit: latents of T=%d H=%d W=%d are not divisible by the patch (%d,%d,%d)",
                mx.T, mx.H, mx.W, g.cfg.patch[0], g.cfg.patch[1], g.cfg.patch[2]);
    if (g.p == 0 && up) {
        for (int i = 0; i < up->ntensors; i++)
            if (!strcmp(up->t[i].name, "latent") && up->t[i].ndim == 5 && up->t[i].dims[1] != g.cfg.z)
                VF_FAIL(st, VF_EUSAGE, "dit: the data's latents have %lld channels, the model's z is %d",
                        (long long)up->t[i].dims[1], g.cfg.z);
        if (!up->geometries[0] && up->t[0].ndim == 5 && up->t[0].dims[0] > 0 && up->t[0].dims[0] < g.M)
            VF_FAIL(st, VF_EUSAGE, "dit: batches of %lld samples cannot be cut into %d micro-batches",
                    (long long)up->t[0].dims[0], g.M);
    }
    /* a rank of sequence parallelism sends and receives x for its tokens */
    int sp = (int)vf_param_int(prm, "sp");
    vf_dit_dims mr = vf_dit_sp_rank_max(&mx, sp);
    vf_port_spec *in = vf_port_add(out, g.p == 0 ? "batch" : "act_in", VF_PORT_IN, true);
    in->device = g.p == 0 ? (vf_device){VF_DEV_CPU, 0} : dev;
    if (up) mirror(in, up);
    if (g.p + 1 < g.P) {
        vf_port_spec *ao = vf_port_add(out, "act_out", VF_PORT_OUT, true);
        ao->device = dev;
        xfer_spec(ao, &g, &mr, act, sp < 2);
        if (up) /* the next partition sizes for the same buckets */
            memcpy(ao->geometries, up->geometries, sizeof ao->geometries);
        if (sp > 1) vf_dit_sp_target_port(ao, &g.cfg, &mr, &mx, g.M, act);
        vf_port_spec *gi = vf_port_add(out, "grad_in", VF_PORT_IN, true);
        gi->device = dev;
        xfer_spec(gi, &g, &mr, grad, false);
    }
    if (g.p > 0) {
        vf_port_spec *go = vf_port_add(out, "grad_out", VF_PORT_OUT, true);
        go->device = dev;
        xfer_spec(go, &g, &mr, grad, false);
    }
    /* the exchange with the shards (dit_xchg.c): views of the weights and gradients out,
     * replies in, which carry the weights as data only where the views crossed as copies */
    static const char *const sN[1] = {"N"};
    vf_port_spec *w = vf_port_add(out, "weights", VF_PORT_IN, true);
    w->multi = true;
    w->device = dev;
    vf_tensor_spec *wt = vf_port_tensor(w, "w", act, 1, &g.n, sN);
    wt->optional = wt->view = true;
    w->meta_bytes = 256;
    for (int k = 0; k < g.S; k++) {
        char name[VF_NAME_MAX];
        int64_t off, n;
        vf_train_overlap(g.off, g.off + g.n, g.slo[k], g.shi[k], &off, &n);
        if (n < 1) n = 1;
        snprintf(name, sizeof name, "grad_s%d", k);
        vf_port_spec *gs = vf_port_add(out, name, VF_PORT_OUT, true);
        gs->device = dev;
        vf_tensor_spec *t = vf_port_tensor(gs, "g", grad, 1, &n, sN);
        t->optional = t->view = true;
        t = vf_port_tensor(gs, "w", act, 1, &n, sN);
        t->optional = t->view = true;
        gs->meta_bytes = 1024;
    }
fail:
    pgeo_fini(&g);
    return rc;
}

static int dit_memory(const vf_params *prm, const vf_port_specs *ports, vf_mem_plan *out, vf_status *st)
{
    pgeo g;
    int rc = pgeo_init(prm, &g, st);
    if (rc) return rc;
    vf_device dev = vf_param_device(prm, "device"), cpu = {VF_DEV_CPU, 0};
    vf_dtype act, grad;
    dev_dtypes(dev, &act, &grad);
    size_t as = vf_dtype_size(act), gs = vf_dtype_size(grad);
    vf_dit_dims mx, each[VF_DIT_MAX_BUCKETS];
    int64_t Bmax;
    int neach = 0;
    if (upstream_dims(&g, ports, &mx, &Bmax, each, &neach, st)) {
        pgeo_fini(&g);
        return st ? st->code : VF_EINVAL;
    }
    /* a rank of a sequence-parallel partition holds its partition, saved stores, x items
     * and targets for its ⌈L/sp⌉ tokens (mr), the first partition's whole sequences apart
     * (vf_dit_sp_ends_plan), and adds what vf_dit_sp_plan lists */
    int sp = (int)vf_param_int(prm, "sp");
    vf_dit_dims mr = vf_dit_sp_rank_max(&mx, sp);
    if (g.lora && g.fp8) { /* with block swap its swapped blocks' FP8 bytes on the host */
        vf_dit_base_fp8_plan(out, dev, g.l, g.boff, g.bn, g.splits[g.p + 1], g.swap, as);
    } else if (g.lora) { /* the frozen base once, in the partition's dtype */
        int64_t hole = 0, hole_n = 0, blk_n = 0;
        if (g.swap) vf_dit_swap_split(g.l, g.splits[g.p], g.splits[g.p + 1], g.swap, &hole, &hole_n, &blk_n);
        vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "frozen base weights", (int64_t)as * (g.bn - hole_n));
        vf_dit_swap_plan(out, dev, g.l, g.splits[g.p], g.splits[g.p + 1], g.swap, as, 0);
    }
    if (g.lora) { /* gradients for the adapters only */
        vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "LoRA adapters (lent to the shards)", (int64_t)as * g.n);
        vf_mem_plan_add(out, dev, VF_MEM_GRADS, "LoRA gradients (lent to the shards)", (int64_t)gs * g.n);
        vf_mem_plan_add(out, cpu, VF_MEM_OTHER, "base loading: its largest tensor (f32 staging)",
                        4 * vf_dit_largest_in(g.l, g.boff, g.bn));
    } else { /* with block swap the swapped blocks' weights and gradients on the host */
        int64_t hole = 0, hole_n = 0, blk_n = 0;
        if (g.swap) vf_dit_swap_split(g.l, g.splits[g.p], g.splits[g.p + 1], g.swap, &hole, &hole_n, &blk_n);
        vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "weights (lent to the shards)", (int64_t)as * (g.n - hole_n));
        vf_mem_plan_add(out, dev, VF_MEM_GRADS, "gradients (lent to the shards)", (int64_t)gs * (g.n - hole_n));
        vf_dit_swap_plan(out, dev, g.l, g.splits[g.p], g.splits[g.p + 1], g.swap, as, gs);
    }
    vf_mem_plan_params(out, dev, g.lora ? g.bn : g.n);
    /* the pools behind sent items allocate only when none has come back, so what they
     * hold beyond the one item being built sits on the edges and in the receivers' hands,
     * which the plan counts there: one activation or gradient item */
    if (mx.B > 0) {
        vf_dit_mem m;
        bool last = g.p == g.P - 1, first = g.p == 0;
        vf_dit_part_memory_sp(&g.cfg, g.splits[g.p], g.splits[g.p + 1], &mx, sp, dit_recompute_of(prm), as, gs, &m);
        vf_1f1b_op *ops = calloc((size_t)(2 * g.M), sizeof *ops);
        int nsv = ops ? vf_train_1f1b(g.P, g.p, g.M, ops) : g.M;
        free(ops);
        if (g.offload)
            m.saved = vf_dit_offload_plan(out, dev, &g.cfg, g.splits[g.p], g.splits[g.p + 1], &mx, sp,
                                          dit_recompute_of(prm), as, gs, nsv);
        vf_mem_plan_add(out, dev, VF_MEM_ACTS, "saved activations (micro-batches in flight)",
                        nsv * m.saved);
        if (sp > 1) vf_dit_sp_ends_plan(out, dev, &m);
        vf_mem_plan_add(out, dev, VF_MEM_WORKSPACE, "partition workspace", m.workspace);
        if (dev.kind == VF_DEV_CPU) vf_mem_plan_add(out, dev, VF_MEM_WORKSPACE, "sums over tokens: grain scratch", m.grains);
        if (g.lora)
            vf_mem_plan_add(out, dev, VF_MEM_WORKSPACE, "LoRA scratch",
                            vf_dit_lora_workspace(&g.cfg, g.lora->cfg.rank, &mr, as, gs));
        /* the CUDA backend's cuDNN attention workspace, grown to the largest micro-batch
         * shape's (bucket by bucket: it scales with B·L², not with the largest B and L) */
        int64_t aws = 0;
        if (sp > 1) vf_dit_sp_plan(out, dev, &g.cfg, sp, &mx, each, neach, as);
        for (int i = 0; i < neach && sp <= 1; i++) {
            int64_t w = vf_dit_attn_workspace(&g.cfg, &each[i], dev);
            aws = w > aws ? w : aws;
        }
        if (aws > 0) vf_mem_plan_add(out, dev, VF_MEM_WORKSPACE, "cuDNN attention workspace (bound)", aws);
        /* latent values of the largest micro-batch: B·L tokens of z·patch values */
        int64_t ntok = mx.N ? mx.N : (int64_t)mx.B * mx.L;
        int64_t per = ntok * g.cfg.z * g.cfg.patch[0] * g.cfg.patch[1] * g.cfg.patch[2];
        int64_t tper = vf_dit_sp_target_values(&g.cfg, &mx, sp); /* the targets as a rank sends them */
        if (!last)
            vf_mem_plan_add(out, dev, VF_MEM_ITEMS, "activation item being built", m.xfer + (first ? (int64_t)as * tper : 0));
        if (last && !first) vf_mem_plan_add(out, dev, VF_MEM_ITEMS, "gradient item being built", m.xfer / (int64_t)as * (int64_t)gs);
        if (first) {
            vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "micro-batch pairs (host)", 8 * per + 8 * mx.B * (g.cfg.text_len + 2));
            if (g.cfg.text_emb) /* the micro-batch's embeddings, and the partition's zero-padded copy */
                vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "micro-batch text embeddings (host)",
                                8 * (int64_t)mx.B * g.cfg.text_len * g.cfg.text_dim);
            if (sp > 1) vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "sequence parallel: target rows (host)", 4 * tper);
            vf_mem_plan_add(out, dev, VF_MEM_ITEMS, "micro-batch input", (int64_t)as * (per + (last ? tper : 0)));
            vf_dit_cond_memory(&g.cfg, mx.B, per, (int64_t)as, dev, out);
        }
    }
    pgeo_fini(&g);
    return 0;
}

/* ------------------------------------------------------------------ init, fini */

/* With LoRA: the frozen base weights of the partition's range, from the `weights` file or
 * the seeded init (the same numbers the shards would have sent), uploaded once, tensor by
 * tensor through a host buffer of the largest one (partition ranges never cut a tensor). */
static int load_base(vf_stage *s, dit_part_state *h, const vf_params *prm, vf_status *st)
{
    int rc = 0;
    vf_dit_wsrc *w = NULL;
    float *host = vf_alloc(sizeof(float) * (size_t)vf_dit_largest_in(h->l, h->boff, h->bn), st);
    if (!host) VF_FAIL(st, VF_ENOMEM, "%s: no host staging for the base weights", vf_stage_name(s));
    int64_t resident = vf_dit_swap_resident(h);
    h->base = h->be->alloc(h->be, h->as * (size_t)(resident ? resident : 1), st);
    if (!h->base) VF_FAIL(st, st && st->code ? st->code : VF_ENOMEM, "%s: no memory for %lld base weights",
                          vf_stage_name(s), (long long)resident);
    if (h->swap_hole_n && !(h->swap_host = h->be->alloc_pinned(h->be, h->as * (size_t)h->swap_hole_n, st)))
        VF_FAIL(st, st && st->code ? st->code : VF_ENOMEM, "%s: no host memory for the %lld base weights of "
                "%d swapped blocks", vf_stage_name(s), (long long)h->swap_hole_n, h->swap);
    if (vf_param_str(prm, "weights")[0]) {
        VF_TRY(vf_dit_wsrc_open_expert(vf_param_str(prm, "weights"), vf_param_str(prm, "expert"), &w, st));
        VF_TRY(vf_dit_wsrc_check(w, h->l, st));
    }
    uint64_t seed = (uint64_t)vf_param_int(prm, "seed");
    for (int i = 0; i < h->l->n; i++) {
        const vf_dit_tensor *t = &h->l->t[i];
        if (t->numel == 0 || t->offset < h->boff || t->offset + t->numel > h->boff + h->bn) continue;
        if (w) VF_TRY(vf_dit_wsrc_read(w, h->l, host, t->offset, t->numel, st));
        else vf_dit_init(h->l, seed, t->offset, t->numel, host);
        bool on_host;
        void *dst = vf_dit_swap_dst(h, t->offset - h->boff, &on_host);
        if (on_host) /* the swapped blocks' host copy, converted to the partition's dtype here */
            vf_backend_cpu()->upload(vf_backend_cpu(), dst, host, t->numel, h->act);
        else
            h->be->upload(h->be, dst, host, t->numel, h->act);
    }
fail:
    vf_dit_wsrc_close(w);
    vf_free(host);
    return rc;
}

static int dit_init(vf_stage *s, const vf_params *prm, vf_status *st)
{
    int rc = 0;
    dit_part_state *h = calloc(1, sizeof *h);
    if (!h) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "dit: out of memory");
    vf_stage_set_state(s, h);
    pgeo g;
    VF_TRY(pgeo_init(prm, &g, st));
    if (g.swap_auto)
        VF_FAIL(st, VF_EUSAGE, "%s: swap_blocks \"auto\" reached the partition unresolved: `vflow run` resolves "
                "it against the budget before the run starts", vf_stage_name(s));
    h->cfg = g.cfg, h->l = g.l, h->lora = g.lora, h->p = g.p, h->P = g.P, h->S = g.S, h->M = g.M;
    h->boff = g.boff, h->bn = g.bn;
    h->swap = g.swap;
    h->offload = g.offload;
    if (h->swap) {
        int64_t blk_n;
        vf_dit_swap_split(g.l, g.splits[g.p], g.splits[g.p + 1], g.swap, &h->swap_hole, &h->swap_hole_n, &blk_n);
    }
    memcpy(h->splits, g.splits, sizeof h->splits);
    memcpy(h->slo, g.slo, sizeof h->slo);
    memcpy(h->shi, g.shi, sizeof h->shi);
    h->off = g.off, h->n = g.n;
    h->first = h->p == 0, h->last = h->p == h->P - 1;
    h->D = (int)vf_param_int(prm, "replicas");
    h->r = (int)vf_param_int(prm, "replica");
    if (h->r >= h->D) VF_FAIL(st, VF_EUSAGE, "%s: replica %d is not below replicas %d", vf_stage_name(s), h->r, h->D);
    h->sp = (int)vf_param_int(prm, "sp");
    h->sp_rank = (int)vf_param_int(prm, "sp_rank");
    VF_TRY(vf_dit_sp_rank_device(h->sp, vf_param_device(prm, "device"), st));
    h->recompute = dit_recompute_of(prm);
    h->steps = vf_param_int(prm, "steps");
    h->rf = g.rf;
    h->route = g.route, h->boundary = g.boundary;
    snprintf(h->ckpt_dir, sizeof h->ckpt_dir, "%s", vf_param_str(prm, "ckpt_dir"));
    h->be = vf_backend_for(vf_param_device(prm, "device"), st);
    if (!h->be) VF_FAIL(st, st && st->code ? st->code : VF_EINVAL, "%s: no backend", vf_stage_name(s));
    h->act = h->be->act_dtype, h->grad = h->be->grad_dtype;
    /* VFLOW_PEAK_TFLOPS: the peak of a device outside the table (any device, the CPU
     * included, which is how the tests see an MFU without a GPU) */
    const char *pk = getenv("VFLOW_PEAK_TFLOPS");
    h->peak = pk && atof(pk) > 0 ? atof(pk) * 1e12 : vf_device_bf16_peak(h->be->model);
    {
        char host[256] = "localhost", dev[32];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        vf_device_str(h->be->device, dev, sizeof dev);
        snprintf(h->peak_dev, sizeof h->peak_dev, "%s/%s", host, dev);
    }
    h->as = vf_dtype_size(h->act), h->gs = vf_dtype_size(h->grad);
    int64_t lent = vf_dit_swap_lent_n(h);
    h->params = h->be->alloc_shared(h->be, h->as * (size_t)(lent ? lent : 1), st);
    h->grads = h->params ? h->be->alloc_shared(h->be, h->gs * (size_t)(lent ? lent : 1), st) : NULL;
    if (!h->grads) VF_FAIL(st, st && st->code ? st->code : VF_ENOMEM, "%s: no memory for %lld weights",
                           vf_stage_name(s), (long long)lent);
    if (!h->lora && h->swap) VF_TRY(vf_dit_swap_host_alloc(s, h, st));
    if (h->lora && g.fp8) VF_TRY(vf_dit_base_fp8_load(s, h, prm, st));
    else if (h->lora) VF_TRY(load_base(s, h, prm, st));
fail:
    return rc;
}

static void dit_fini(vf_stage *s)
{
    dit_part_state *h = vf_stage_state(s);
    if (!h) return;
    vf_dit_stage_teardown(h);
    if (h->be && h->params) h->be->free_shared(h->be, h->params);
    if (h->be && h->grads) h->be->free_shared(h->be, h->grads);
    if (h->be && h->base) h->be->free(h->be, h->base);
    vf_dit_fp8_free(h->fp8);
    vf_dit_swap_host_free(h); /* a LoRA run's base copy too (pinned, no gradients) */
    vf_dit_lora_free(h->lora);
    vf_dit_layout_free(h->l);
    free(h->route_j);
    free(h);
    vf_stage_set_state(s, NULL);
}

/* ------------------------------------------------------------------ run */

static void warn_cb(void *user, const char *msg) { vf_log(user, VF_LOG_INFO, "%s", msg); }

/* First partition with --resume: where the reader must continue (the checkpoint the
 * shards resume from, found by the same rule). */
static int resume_cursor(vf_stage *s, vf_ctx *ctx, dit_part_state *h, int64_t start, vf_status *st)
{
    char dir[4096];
    vf_ckpt ck;
    vf_status fs;
    vf_status_clear(&fs);
    vf_ckpt_dir(h->ckpt_dir, vf_run_dir(ctx), dir, sizeof dir);
    int rc = vf_ckpt_find(dir, warn_cb, ctx, &ck, &fs);
    if (rc) {
        if (rc == VF_ENOTFOUND && start == 0) return vf_train_no_ckpt(ctx, &ck, &fs, false, st);
        *st = fs;
        return rc;
    }
    if (ck.step != start) {
        rc = vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                           "%s: the shards resume at step %lld but the newest checkpoint in %s is step %lld",
                           vf_stage_name(s), (long long)start, dir, (long long)ck.step);
    } else {
        const char *cur = vf_ckpt_state_cursor(ck.state, VF_DIT_LANE(h));
        snprintf(h->skip_to, sizeof h->skip_to, "%s", cur);
        if (!cur[0])
            rc = vf_status_set(st, VF_ECORRUPT, __FILE__, __LINE__, "%s: %s/state.json has no data cursor for replica %d",
                               vf_stage_name(s), ck.path, h->r);
    }
    vf_ckpt_fini(&ck);
    return rc;
}

/* Orderly end (dit_train.h vf_train_finish): our outputs first, then the reader is told
 * to stop and the other inputs are read to their end. */
static int finish(vf_ctx *ctx, dit_part_state *h, vf_status *st)
{
    char names[VF_TRAIN_MAX_SHARDS][VF_NAME_MAX];
    const char *outs[VF_TRAIN_MAX_SHARDS + 2] = {"act_out", "grad_out"};
    for (int k = 0; k < h->S; k++) {
        snprintf(names[k], sizeof names[k], "grad_s%d", k);
        outs[2 + k] = names[k];
    }
    static const char *const stop[] = {"batch"}, *const drain[] = {"act_in", "grad_in", "weights"};
    return vf_train_finish(ctx, outs, 2 + h->S, stop, 1, drain, 3, st);
}

static int dit_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    int rc = 0;
    dit_part_state *h = vf_stage_state(s);
    int64_t step = -1, busy_total = 0, t_run = vf_train_now_ns();
    h->ctx = ctx;
    snprintf(h->run_dir, sizeof h->run_dir, "%s", vf_run_dir(ctx));
    VF_TRY(vf_dit_xchg_lend(s, ctx, h, st));
    for (;;) {
        int64_t ws = step < 0 ? -1 : step;
        rc = vf_dit_xchg_recv(s, ctx, h, &ws, st);
        if (rc == VF_EOS) {
            rc = 0;
            break;
        }
        VF_TRY(rc);
        if (step < 0) {
            if (h->first && vf_resuming(ctx)) VF_TRY(resume_cursor(s, ctx, h, ws, st));
            if (ws > 0) vf_log(ctx, VF_LOG_INFO, "starting at step %lld", (long long)ws);
        }
        step = ws + 1;
        if (step > h->steps) break;
        if (h->first && vf_stopping(ctx)) break;
        int64_t t0 = vf_train_now_ns();
        dit_step_out o;
        rc = vf_dit_stage_step(s, ctx, h, step, &o, st);
        if (rc == VF_EOS) {
            vf_log(ctx, VF_LOG_INFO, "input ended before step %lld", (long long)step);
            rc = 0;
            break;
        }
        VF_TRY(rc);
        int64_t t1 = vf_train_now_ns();
        busy_total += o.busy_ns;
        VF_TRY(vf_dit_xchg_send(s, ctx, h, step, &o, t0, t1, st));
        if (h->last && h->sp_rank == 0) { /* every rank has the ranks' sum */
            char row[256];
            if (h->route && o.routed == 0) /* none of the replica's samples was this expert's: no loss */
                snprintf(row, sizeof row, "{\"event\":\"loss\",\"step\":%lld,\"replica\":%d,\"samples\":0}",
                         (long long)step, h->r);
            else if (h->route)
                snprintf(row, sizeof row, "{\"event\":\"loss\",\"step\":%lld,\"loss\":%.9g,\"replica\":%d,"
                         "\"samples\":%d}", (long long)step, o.loss, h->r, o.routed);
            else
                snprintf(row, sizeof row, "{\"event\":\"loss\",\"step\":%lld,\"loss\":%.9g,\"replica\":%d}",
                         (long long)step, o.loss, h->r);
            vf_metric_row(ctx, row);
            if (!h->route || o.routed > 0) vf_metric(ctx, "loss", o.loss);
        }
        char row[256];
        snprintf(row, sizeof row, "{\"event\":\"partition_step\",\"step\":%lld,\"partition\":%d,\"replica\":%d,"
                 "\"busy_s\":%.6f,\"window_s\":%.6f}", (long long)step, h->p, h->r, o.busy_ns * 1e-9,
                 (t1 - t0) * 1e-9);
        vf_metric_row(ctx, row);
        vf_dit_swap_metrics(ctx, h, step);
        double el = (double)(vf_train_now_ns() - t_run);
        vf_metric(ctx, "busy", el > 0 ? (double)busy_total / el : 0);
        if (step == h->steps) break;
    }
    rc = finish(ctx, h, st);
fail:
    return rc;
}

/* The partitions of the DiT: the sugar's `stages`, one more than the cuts in `splits`. */
static int64_t partitions(const vf_params *p)
{
    int n = vf_param_len(p, "splits") - 1;
    return n < 1 ? 1 : n;
}

/* What the planner may turn (vf_knob_spec): keep only block inputs (and the
 * self-attention's output, then not even that); more, smaller micro-batches (the 1F1B edges follow M, so only through the script); more partitions. */
static const vf_knob_spec dit_knobs[] = {
    {.name = "recompute", .param = "recompute", .arg = "recompute", .move = VF_KNOB_SET, .value = "true", .rank = 10},
    {.name = "recompute_attention", .param = "recompute_attention", .arg = "recompute_attention",
     .move = VF_KNOB_SET, .value = "true", .rank = 15, .note = "one more self-attention forward per block in the backward"},
    {.name = "micro_batches", .param = "micro_batches", .arg = "micro_batches", .arg_only = true,
     .move = VF_KNOB_DOUBLE, .max = 4096, .max_factor = 64, .rank = 20},
    {.name = "swap_blocks", .param = "swap_blocks", .arg = "swap_blocks", .move = VF_KNOB_STEP, .max = 64,
     .rank = 25, .note = "weights (a full fine-tune's gradients too) of K blocks a partition in pinned host memory, streamed in "
             "ahead of use",
     .auto_value = true, .auto_budget = "swap_budget"},
    {.name = "offload_activations", .param = "offload_activations", .arg = "offload_activations",
     .move = VF_KNOB_SET, .value = "true", .rank = 27,
     .note = "block inputs kept for backward in pinned host memory, copied out and back on a copy queue"},
    {.name = "stages", .param = "splits", .arg = "stages", .arg_only = true, .move = VF_KNOB_STEP, .max = 24,
     .max_factor = 4, .current = partitions, .rank = 30},
    {0},
};

/* What only a run needs: sequence parallelism on the CPU backend (a plan takes any device). */
static int dit_preflight(const vf_params *prm, vf_status *st)
{
    return vf_dit_sp_rank_device((int)vf_param_int(prm, "sp"), vf_param_device(prm, "device"), st);
}

static const vf_stage_ops dit_ops = {
    .api_version = VF_API_VERSION,
    .kind = "dit",
    .doc = "one pipeline partition of the video DiT: 1F1B over micro-batches, rectified-flow loss, "
           "its weights and gradients lent to the optimizer shards",
    .params = dit_params,
    .ports = dit_ports,
    .memory = dit_memory,
    .init = dit_init,
    .run = dit_run,
    .fini = dit_fini,
    .knobs = dit_knobs,
    .preflight = dit_preflight,
};
VF_REGISTER_STAGE(dit_ops)
