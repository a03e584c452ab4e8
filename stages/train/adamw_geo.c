/* adamw_geo.c — what an optimizer shard is before it runs: its slice of the trainable
 * vector (the model's, or with LoRA the adapters'), the partitions' pieces of it, the ports
 * it declares and the memory it declares for the plan (adamw.c runs it). */
#include "stages/train/adamw_internal.h"
#include "models/dit_base.h"
#include "models/dit_experts.h"
#include "stages/train/dit_train.h"

#include <stdio.h>
#include <string.h>

void vf_adamw_geo_fini(vf_adamw_geo *g)
{
    vf_dit_lora_free(g->lora);
    vf_dit_layout_free(g->l);
    g->lora = NULL, g->l = NULL, g->tl = NULL;
}

int vf_adamw_geo_init(const vf_params *p, vf_adamw_geo *g, vf_status *st)
{
    int rc = 0;
    memset(g, 0, sizeof *g);
    VF_TRY(vf_train_model(p, &g->cfg, &g->l, &g->lora, st));
    g->tl = g->lora ? g->lora->l : g->l;
    g->k = (int)vf_param_int(p, "shard");
    g->S = (int)vf_param_int(p, "shards");
    g->D = (int)vf_param_int(p, "replicas");
    if (g->k >= g->S) VF_FAIL(st, VF_EUSAGE, "adamw: shard %d is not below shards %d", g->k, g->S);
    if (vf_param_len(p, "splits") == 0) {
        g->P = 1, g->splits[0] = 0, g->splits[1] = g->cfg.depth;
    } else {
        VF_TRY(vf_train_splits(p, g->cfg.depth, g->splits, &g->P, "adamw", st));
    }
    g->total = g->tl->total;
    g->block = vf_train_norm_block(g->total);
    g->nblk = (g->total + g->block - 1) / g->block;
    if (g->S > g->nblk)
        VF_FAIL(st, VF_EUSAGE, "adamw: %d shards for a model of %lld parameters (%lld norm blocks of "
                "%lld): at most %lld shards", g->S, (long long)g->total, (long long)g->nblk,
                (long long)g->block, (long long)g->nblk);
    vf_train_shard_range(g->total, g->block, g->S, g->k, &g->lo, &g->hi, &g->b0, &g->b1);
    g->n = g->hi - g->lo;
    for (int q = 0; q < g->P; q++) {
        int64_t off, n;
        vf_dit_layout_range(g->tl, g->splits[q], g->splits[q + 1], &off, &n);
        g->plo[q] = off, g->phi[q] = off + n;
    }
fail:
    if (rc) vf_adamw_geo_fini(g);
    return rc;
}

void vf_adamw_dtypes(const vf_params *p, vf_dtype *act, vf_dtype *grad)
{
    const char *dt = vf_param_str(p, "dtype");
    if (!strcmp(dt, "bf16")) *act = VF_DTYPE_BF16;
    else if (!strcmp(dt, "f32")) *act = VF_DTYPE_F32;
    else *act = vf_param_device(p, "device").kind == VF_DEV_CPU ? VF_DTYPE_F32 : VF_DTYPE_BF16;
    *grad = *act;
}

void vf_adamw_chunks_of(const vf_params *p, const vf_adamw_geo *g, vf_adamw_chunks *c)
{
    memset(c, 0, sizeof *c);
    vf_device dev = vf_param_device(p, "device");
    bool cross = false;
    c->pin = (vf_device){VF_DEV_CPU, 0};
    for (int i = 0; i < vf_param_len(p, "part_devices"); i++) {
        vf_device d;
        vf_status st = {0};
        if (vf_device_parse(vf_param_str_at(p, "part_devices", i), &d, &st)) continue;
        cross = cross || !(d.kind == dev.kind && (d.kind == VF_DEV_CPU || d.index == dev.index));
        if (dev.kind == VF_DEV_CPU && d.kind != VF_DEV_CPU && c->pin.kind == VF_DEV_CPU) c->pin = d;
    }
    /* a norm block read whole across a partition boundary that cuts it */
    bool straddle = false;
    for (int q = 1; q < g->P && !straddle; q++)
        straddle = g->plo[q] > g->lo && g->plo[q] < g->hi && g->plo[q] % g->block != 0;
    int64_t chunk = vf_param_int(p, "chunk");
    int64_t cap = cross ? (chunk + g->block - 1) / g->block * g->block : g->block;
    if (cap > g->n) cap = g->n;
    c->cap = cap > 0 ? cap : 1;
    c->g = straddle || cross;
    c->r = cross && g->D > 1;
    c->w = cross;
}

/* ------------------------------------------------------------------ ports, memory */

/* The weights file of param `weights` against the model, headers only (vflow check /
 * plan refuse a missing, extra or mis-shaped tensor before any worker starts): 0 and
 * *largest = 0 without weights. */
static int check_weights(const vf_params *p, const vf_adamw_geo *g, int64_t *largest, vf_status *st)
{
    const char *path = vf_param_str(p, "weights");
    vf_dit_wsrc *w = NULL;
    *largest = 0;
    if (!path || !path[0]) return 0;
    int rc = vf_dit_wsrc_open_expert(path, vf_param_str(p, "expert"), &w, st);
    if (rc == 0) rc = vf_dit_wsrc_check(w, g->l, st);
    if (rc == 0) *largest = vf_dit_wsrc_largest(w);
    vf_dit_wsrc_close(w);
    return rc;
}

/* The adapter file of param `lora_init` against the adapters, before any worker starts. */
static int check_lora_init(const vf_params *p, const vf_adamw_geo *g, vf_status *st)
{
    const char *path = vf_param_str(p, "lora_init");
    if (!path[0]) return 0;
    if (!g->lora)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "adamw: lora_init = %s needs the lora option", path);
    return vf_dit_lora_file_read(path, g->lora, NULL, 0, 0, st);
}

int vf_adamw_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out,
                    vf_status *st)
{
    vf_adamw_geo g;
    int64_t largest;
    int rc = vf_adamw_geo_init(p, &g, st);
    if (rc) return rc;
    if ((rc = check_weights(p, &g, &largest, st)) || (rc = check_lora_init(p, &g, st))) {
        vf_adamw_geo_fini(&g);
        return rc;
    }
    vf_device dev = vf_param_device(p, "device");
    vf_dtype act, grad;
    vf_adamw_dtypes(p, &act, &grad);
    /* the ports take the partitions' dtypes (param dtype, which p:train sets from their
     * devices): a shard in host memory next to bf16 partitions reads bf16 gradients and
     * sends bf16 weights, converting to and from its f32 state itself */
    if (dev.kind != VF_DEV_CPU && act != VF_DTYPE_BF16) {
        vf_adamw_geo_fini(&g);
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "adamw: param dtype = %s: a shard on a GPU keeps the partitions' weights in bf16; "
                             "put it on the host (device = \"cpu\") next to f32 partitions", vf_dtype_name(act));
    }
    const vf_port_spec *up = upstream ? vf_port_find(upstream, "grads") : NULL;
    for (int i = 0; up && i < up->ntensors; i++)
        if (!strcmp(up->t[i].name, "g") && up->t[i].dtype != grad) {
            vf_dtype sent = up->t[i].dtype;
            vf_adamw_geo_fini(&g);
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                                 "adamw: the partitions send %s gradients, but param dtype = %s makes this shard "
                                 "take %s (p:train sets it from the partitions' devices)",
                                 vf_dtype_name(sent), vf_param_str(p, "dtype"), vf_dtype_name(grad));
        }
    static const char *const sN[1] = {"N"};
    int64_t n1 = g.n > 0 ? g.n : 1;

    /* the exchange (adamw_xchg.c): the partitions' views in, replies out, which carry the
     * weights as data only where the views crossed as copies */
    vf_port_spec *gi = vf_port_add(out, "grads", VF_PORT_IN, true);
    gi->multi = true;
    gi->device = dev;
    vf_tensor_spec *t = vf_port_tensor(gi, "g", grad, 1, &n1, sN);
    t->optional = t->view = true;
    t = vf_port_tensor(gi, "w", act, 1, &n1, sN);
    t->optional = t->view = true;
    gi->meta_bytes = 1024;
    for (int q = 0; q < g.P; q++) {
        char name[VF_NAME_MAX];
        int64_t off, n;
        vf_train_overlap(g.lo, g.hi, g.plo[q], g.phi[q], &off, &n);
        if (n < 1) n = 1;
        snprintf(name, sizeof name, "weights_p%d", q);
        vf_port_spec *w = vf_port_add(out, name, VF_PORT_OUT, true);
        w->device = dev;
        t = vf_port_tensor(w, "w", act, 1, &n, sN);
        t->optional = t->view = true;
        w->meta_bytes = 256;
    }
    if (g.S > 1) {
        int64_t mine = 8 * (g.b1 - g.b0), most = 8 * ((g.nblk + g.S - 1) / g.S);
        static const char *const sK[1] = {"K"};
        vf_port_spec *no = vf_port_add(out, "norm_out", VF_PORT_OUT, true);
        vf_port_tensor(no, "partials", VF_DTYPE_U8, 1, &mine, sK);
        no->meta_bytes = 256;
        vf_port_spec *ni = vf_port_add(out, "norm_in", VF_PORT_IN, true);
        ni->multi = true;
        vf_port_tensor(ni, "partials", VF_DTYPE_U8, 1, &most, sK);
        ni->meta_bytes = 256;
    }
    vf_port_spec *sn = vf_port_add(out, "snap", VF_PORT_OUT, false);
    static const char *const snames[3] = {"master", "exp_avg", "exp_avg_sq"};
    int64_t ce = vf_adamw_chunk(&g, vf_param_int(p, "ckpt_chunk"));
    for (int i = 0; i < 3; i++) vf_port_tensor(sn, snames[i], VF_DTYPE_F32, 1, &ce, sN);
    sn->meta_bytes = 16384; /* cursors, config */
    vf_port_spec *ack = vf_port_add(out, "ack", VF_PORT_IN, false);
    ack->meta_bytes = 256;
    vf_adamw_geo_fini(&g);
    return 0;
}

int64_t vf_adamw_chunk(const vf_adamw_geo *g, int64_t ckpt_chunk)
{
    int64_t e = vf_train_ckpt_chunk_elems(ckpt_chunk);
    return e < g->n ? e : (g->n > 0 ? g->n : 1);
}

int64_t vf_adamw_weight_piece_most(const vf_adamw_geo *g)
{
    return vf_train_most_overlap(g->lo, g->hi, g->plo, g->phi, g->P);
}

int vf_adamw_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out,
                     vf_status *st)
{
    vf_adamw_geo g;
    int rc = vf_adamw_geo_init(p, &g, st);
    if (rc) return rc;
    vf_device dev = vf_param_device(p, "device"), cpu = {VF_DEV_CPU, 0};
    vf_dtype act, grad;
    vf_adamw_dtypes(p, &act, &grad);
    int64_t as = (int64_t)vf_dtype_size(act), gs = (int64_t)vf_dtype_size(grad);
    vf_mem_plan_add(out, dev, VF_MEM_OPTIM, "master weights + moments (f32)", 12 * g.n);
    vf_mem_plan_params(out, dev, g.n);
    /* the gradients and weights are the partitions' (lent, read and written in place);
     * here only the bounded chunks through which the shard reaches what it cannot */
    vf_adamw_chunks c;
    vf_adamw_chunks_of(p, &g, &c);
    bool pin = c.pin.kind != VF_DEV_CPU;
    if (c.g)
        vf_mem_plan_add(out, dev, VF_MEM_GRADS,
                        pin ? "gradient chunk (pinned, GPU partitions)"
                            : "gradient chunk (split blocks, other devices)",
                        gs * c.cap);
    if (c.r)
        vf_mem_plan_add(out, dev, VF_MEM_GRADS,
                        pin ? "gradient chunk of other replicas (pinned)" : "gradient chunk of other replicas", gs * c.cap);
    if (c.w)
        vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, pin ? "weight chunk (pinned, GPU partitions)" : "weight chunk (other devices)",
                        as * c.cap);
    vf_mem_plan_add(out, cpu, VF_MEM_OTHER, "norm partials", 8 * g.nblk);
    /* the start reads and uploads chunk by chunk (master, then both moments), and a
     * snapshot copies one chunk at a time into the item it sends */
    vf_mem_plan_add(out, cpu, VF_MEM_CKPT, "host staging (init/resume, snapshot chunk)",
                    12 * vf_adamw_chunk(&g, vf_param_int(p, "ckpt_chunk")));
    int64_t largest = 0;
    /* with LoRA the partitions load the base, the shards never read the file */
    if (!g.lora && vf_param_str(p, "weights")[0] && (rc = check_weights(p, &g, &largest, st))) {
        vf_adamw_geo_fini(&g);
        return rc;
    }
    /* shard 0 of a LoRA run reads the base once, hashing it for state.json's lora_base */
    if (g.lora && vf_param_int(p, "shard") == 0 && vf_param_str(p, "weights")[0])
        vf_mem_plan_add(out, cpu, VF_MEM_CKPT, "LoRA base hash buffer", VF_DIT_BASE_CHUNK);
    /* loading reads the file tensor by tensor into the staging above: what is resident
     * of the file at a time is about its largest tensor's pages */
    if (largest) vf_mem_plan_add(out, cpu, VF_MEM_CKPT, "weights file: its largest tensor (loading)", largest);
    vf_adamw_geo_fini(&g);
    return 0;
}

