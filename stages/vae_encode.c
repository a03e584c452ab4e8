/* vae_encode.c — the `vae_encode` stage: decoded clips in, VAE latents out.
 *
 * Input "in": one item per clip with tensor "frames" u8 (T, H, W, 3) (docs/ITEMS.md).
 * Output "out": the same item, frames dropped, with "latent" f32 (z, T', H/s, W/s), the
 * encoder's mean normalised per channel as Wan's pipelines do,
 *   latent[c] = (mean[c] - latents_mean[c]) / latents_std[c],
 * with latents_mean/latents_std (z values each) from the stage params, else the
 * config.json of a diffusers VAE directory given as weights, else the model preset
 * (vf.models.vae "wan" carries AutoencoderKLWan's 16 defaults). Without per-channel
 * values the scalar affine (mean - shift)·scale applies (the tiny preset). Optionally
 * "logvar" (of that normalised latent: the encoder's logvar - 2·ln std[c], so a sample
 * is latent + exp(logvar/2)·ε). Metadata "vae": vf_vae_hash (weights, config, the scalar
 * affine), combined with the per-channel values when they apply
 * (vf_cache_vae_id), so a cache keyed by it never mixes latents normalised otherwise;
 * "latent_norm" = {"mean":[…],"std":[…]} (per channel) or "vae_scale", "vae_shift".
 *
 * Image-to-video (`first_frame`): each clip also gets "y" f32 (z, T', H/s, W/s), the
 * latent of [its first frame, zeros (0 in [-1, 1]) for the other T - 1 frames], a second
 * encode of the micro-batch normalised as the latent: what Wan's I2V models take beside
 * the noisy latent. A skip_cached cache of the other kind is refused at init.
 *
 * Image-to-video by the first frame (`ti2v`, Wan 2.2 TI2V): no second encode. The encoder
 * takes the first frame alone before the rest, so the latent's frame 0 is the image's
 * own encode; each clip gets metadata "first_frame" = 1, which makes its cache entry of
 * kind first_frame (formats/cache_format.h).
 *
 * Clips are gathered into micro-batches of `micro_batch` clips of the same shape (a
 * clip of another shape, or the end of the stream, flushes a partial batch) and encoded
 * `chunk` frames at a time through the streaming encoder of models/vae.h: its caches and
 * workspace depend on (micro_batch, chunk, H, W), never on T, and that is what `memory`
 * declares. The encoder is built at the first clip (its frame size) and rebuilt if the
 * frame size changes.
 *
 * Reruns: with `skip_cached` = the LMDB cache the run writes to, a clip whose cache key
 * (formats/cache_format.h: source, clip, transform and this encoder's vf_vae_hash, or
 * the item id for a cache keyed by id) already exists is dropped on arrival, before any
 * encoding, and counted (metric "skipped_cached", a log line at the end). The cache is
 * opened read-only through the process's LMDB registry and each lookup is a short read
 * txn of its own (no reader slot pinned while the writer, another process, commits or
 * grows the map; MDB_MAP_RESIZED is adopted by lmdb_store.c). No cache there yet (a
 * first run) means nothing to skip.
 *
 * Stopping (docs/run.md): on a drain the stage keeps consuming to the end of its input,
 * so the micro-batch in hand is finished and sent; on an abort it returns VF_ESTOPPED
 * between two chunks instead of finishing a batch nobody will read.
 */
#include "models/vae.h"
#include "formats/cache_format.h"
#include "runtime/vflow.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Fields of the `model` table (lua/model_vae.lua presets); defaults = the tiny preset. */
static const vf_param_spec model_fields[] = {
    {"name", VF_P_STR, "\"tiny\"", VF_ANY, "preset name (informational)"},
    {"dim", VF_P_INT, "8", VF_RANGE(1, 4096), "base channel width (Wan-2.1: 96)"},
    {"dim_mult", VF_P_LIST_INT, "[1,2,2,2]", VF_RANGE(1, 64),
     "width multiplier per level; levels - 1 spatial 2x downsamples"},
    {"num_res_blocks", VF_P_INT, "1", VF_RANGE(1, 16), "residual blocks per level"},
    {"temporal_downsample", VF_P_LIST_INT, "[0,1,1]", VF_RANGE(0, 1),
     "1 = 2x causal time downsample after level i (one entry per level but the last)"},
    {"z_dim", VF_P_INT, "4", VF_RANGE(1, 1024), "latent channels"},
    {"eps", VF_P_NUM, "1e-12", VF_RANGE(0, 1), "RMSNorm eps"},
    {"scale", VF_P_NUM, "1.0", VF_ANY, "latent scale: latent = (mean - shift) * scale"},
    {"shift", VF_P_NUM, "0.0", VF_ANY, "latent shift"},
    {"latents_mean", VF_P_LIST_NUM, "[]", VF_ANY,
     "per-channel normalisation (z values): latent = (mean - latents_mean) / latents_std"},
    {"latents_std", VF_P_LIST_NUM, "[]", VF_ANY, "per-channel std (z values), see latents_mean"},
    {"residual", VF_P_INT, "0", VF_RANGE(0, 1),
     "1 = Wan 2.2's residual levels (average-down shortcut around each level)"},
    {"patch_size", VF_P_INT, "1", VF_RANGE(1, 8),
     "pixel patchify before the encoder (Wan 2.2: 2, so 12 input channels)"},
    {"dec_dim", VF_P_INT, "0", VF_RANGE(0, 4096), "decoder base width (Wan 2.2: 256); 0 = dim"},
    {0},
};

static const vf_param_spec vae_params[] = {
    {"model", VF_P_TABLE,
     "{\"name\":\"tiny\",\"dim\":8,\"dim_mult\":[1,2,2,2],\"num_res_blocks\":1,"
     "\"temporal_downsample\":[0,1,1],\"z_dim\":4,\"eps\":1e-12,\"scale\":1.0,\"shift\":0.0}",
     VF_ANY, "VAE preset (vf.models.vae \"tiny\" | \"wan\" | \"wan2.2\")", NULL, model_fields},
    {"weights", VF_P_STR, "null", VF_ANY,
     "the VAE: safetensors file (Wan's original or diffusers' names) or a diffusers AutoencoderKLWan "
     "directory (models/vae.h); absent = seeded init"},
    {"seed", VF_P_INT, "0", VF_RANGE(0, 9007199254740991.0), "seed of the init without weights"},
    {"micro_batch", VF_P_INT, "1", VF_RANGE(1, 256), "clips per forward"},
    {"chunk", VF_P_INT, "4", VF_RANGE(1, 4096),
     "frames per causal chunk: bounds activation memory, not the result"},
    {"device", VF_P_DEVICE, "\"cpu\"", VF_ANY, "where the encoder runs"},
    {"logvar", VF_P_BOOL, "false", VF_ANY, "also emit \"logvar\""},
    {"scale", VF_P_NUM, "null", VF_ANY, "latent scale (default: the model's)"},
    {"shift", VF_P_NUM, "null", VF_ANY, "latent shift (default: the model's)"},
    {"latents_mean", VF_P_LIST_NUM, "null", VF_ANY,
     "per-channel latent mean (z values; default: a diffusers VAE's config.json, else the model's)"},
    {"latents_std", VF_P_LIST_NUM, "null", VF_ANY,
     "per-channel latent std (z values; default: a diffusers VAE's config.json, else the model's)"},
    {"patch", VF_P_INT, "2", VF_RANGE(1, 64),
     "spatial patch of the DiT that trains on these latents: frame sides must be multiples of the VAE's spatial "
     "stride x patch (1 = of the stride only)"},
    {"first_frame", VF_P_BOOL, "false", VF_ANY,
     "image-to-video: also emit \"y\", the latent of [the clip's first frame, zeros], encoded and normalised "
     "as the latent"},
    {"ti2v", VF_P_BOOL, "false", VF_ANY,
     "image-to-video by the first frame (Wan 2.2 TI2V): mark the latents as of kind first_frame, their frame 0 "
     "(the first frame encoded alone) the image's latent that training keeps clean"},
    {"skip_cached", VF_P_STR, "null", VF_ANY,
     "LMDB latent cache: drop clips whose key (source, clip, transform, this VAE) it holds, "
     "before encoding (a rerun redoes only what is missing)"},
    {0},
};

static int config_from_params(const vf_params *p, vf_vae_config *c, vf_status *st)
{
    int rc = 0;
    const vf_params *m = vf_param_table(p, "model");
    memset(c, 0, sizeof *c);
    c->dim = (int)vf_param_int(m, "dim");
    c->nlevels = vf_param_len(m, "dim_mult");
    if (c->nlevels < 1 || c->nlevels > VF_VAE_MAX_LEVELS)
        VF_FAIL(st, VF_EUSAGE, "vae_encode: model.dim_mult has %d entries, expected 1..%d",
                c->nlevels, VF_VAE_MAX_LEVELS);
    for (int i = 0; i < c->nlevels; i++) c->dim_mult[i] = (int)vf_param_int_at(m, "dim_mult", i);
    if (vf_param_len(m, "temporal_downsample") != c->nlevels - 1)
        VF_FAIL(st, VF_EUSAGE,
                "vae_encode: model.temporal_downsample has %d entries, expected %d (one per "
                "level of dim_mult but the last)",
                vf_param_len(m, "temporal_downsample"), c->nlevels - 1);
    for (int i = 0; i + 1 < c->nlevels; i++)
        c->temporal_downsample[i] = (int)vf_param_int_at(m, "temporal_downsample", i);
    c->num_res_blocks = (int)vf_param_int(m, "num_res_blocks");
    c->z_dim = (int)vf_param_int(m, "z_dim");
    c->eps = (float)vf_param_num(m, "eps");
    c->residual = (int)vf_param_int(m, "residual");
    c->patch = (int)vf_param_int(m, "patch_size");
    c->dec_dim = (int)vf_param_int(m, "dec_dim");
    c->scale = (float)(vf_param_has(p, "scale") ? vf_param_num(p, "scale")
                                                : vf_param_num(m, "scale"));
    c->shift = (float)(vf_param_has(p, "shift") ? vf_param_num(p, "shift")
                                                : vf_param_num(m, "shift"));
    rc = vf_vae_config_check(c, st);
    if (rc < 0) {
        rc = VF_EUSAGE;
        if (st) st->code = VF_EUSAGE;
        vf_status_prefix(st, "vae_encode: model");
    }
fail:
    return rc;
}

/* The clip geometry the upstream declares: (T, H, W) with T's symbol; 0 = unknown. */
typedef struct geom {
    int64_t T, H, W;
    char tsym[8], hsym[8], wsym[8]; /* symbols of varying dims (bucketed clips) */
} geom;

static void upstream_geom(const vf_port_specs *ports, geom *g)
{
    memset(g, 0, sizeof *g);
    const vf_port_spec *in = ports ? vf_port_find(ports, "in") : NULL;
    if (!in) return;
    for (int i = 0; i < in->ntensors; i++) {
        const vf_tensor_spec *t = &in->t[i];
        if (strcmp(t->name, "frames") != 0 || t->ndim != 4) continue;
        g->T = t->dims[0], g->H = t->dims[1], g->W = t->dims[2];
        snprintf(g->tsym, sizeof g->tsym, "%s", t->sym[0]);
        snprintf(g->hsym, sizeof g->hsym, "%s", t->sym[1]);
        snprintf(g->wsym, sizeof g->wsym, "%s", t->sym[2]);
    }
}

/* Frame sides W x H against what training on the latents needs: multiples of the VAE's
 * spatial stride sf times the DiT's patch (a side of 0 is not known yet). VF_EBADINPUT
 * naming both factors and the nearest sizes that fit. */
static int size_check(int64_t W, int64_t H, int sf, int patch, const char *what, vf_status *st)
{
    const int64_t m = (int64_t)sf * patch;
    if (W % m == 0 && H % m == 0 && W >= 0 && H >= 0) return 0;
    /* the nearest sizes below and above (a side that fits stays) */
    int64_t w0 = W / m * m > 0 ? W / m * m : m, h0 = H / m * m > 0 ? H / m * m : m;
    int64_t w1 = W % m ? w0 + m : w0, h1 = H % m ? h0 + m : h0;
    return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                         "vae_encode: %s of %" PRId64 "x%" PRId64 " (WxH): training needs sides that are multiples "
                         "of %" PRId64 " = the VAE's spatial stride %d x the DiT's patch %d (vae_encode.patch); e.g. "
                         "%" PRId64 "x%" PRId64 " or %" PRId64 "x%" PRId64, what, W, H, m, sf, patch, w0, h0, w1, h1);
}

static int vae_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out,
                     vf_status *st)
{
    int rc = 0;
    vf_vae_config c;
    geom g;
    VF_TRY(config_from_params(p, &c, st));
    upstream_geom(upstream, &g);
    int tf = vf_vae_time_factor(&c), sf = vf_vae_space_factor(&c);
    if (upstream && vf_port_find(upstream, "in") && !g.T)
        VF_FAIL(st, VF_EUSAGE, "vae_encode: input 'in' carries no tensor \"frames\" (T, H, W, 3)");
    if (g.T && !g.tsym[0] && vf_vae_latent_frames(&c, g.T) < 0)
        VF_FAIL(st, VF_EUSAGE,
                "vae_encode: clips of %" PRId64 " frames: the causal VAE encodes 1 + %d·k frames "
                "(e.g. %" PRId64 " or %" PRId64 "); set the decoder's frames accordingly",
                g.T, tf, 1 + (g.T - 1) / tf * tf, 1 + ((g.T - 1) / tf + 1) * tf);
    if (size_check(g.W, g.H, sf, (int)vf_param_int(p, "patch"), "frames", st)) {
        st->code = rc = VF_EUSAGE;
        goto fail;
    }
    vf_port_spec *in = vf_port_add(out, "in", VF_PORT_IN, true);
    in->multi = true; /* several decode workers feed one encoder */
    int64_t fd[4] = {g.T, g.H, g.W, 3};
    const char *fs[4] = {g.T ? g.tsym : "T", g.H ? g.hsym : "H", g.W ? g.wsym : "W", ""};
    vf_port_tensor(in, "frames", VF_DTYPE_U8, 4, fd, fs);

    vf_port_spec *o = vf_port_add(out, "out", VF_PORT_OUT, true);
    /* Latents leave the stage as host tensors, whatever device the encoder runs on. */
    char tsym[8] = "T'", hsym[8] = "", wsym[8] = "";
    if (g.T && g.tsym[0]) snprintf(tsym, sizeof tsym, "%.6s'", g.tsym);
    if (g.T && !g.tsym[0]) tsym[0] = 0;
    if (!g.H || g.hsym[0]) snprintf(hsym, sizeof hsym, "h");
    if (!g.W || g.wsym[0]) snprintf(wsym, sizeof wsym, "w");
    /* bound of T' for a symbolic T: the most latent frames any T <= bound gives */
    int64_t Tl = g.T ? 1 + (g.T - 1) / tf : 0;
    int64_t ld[4] = {c.z_dim, Tl, g.H / sf, g.W / sf};
    const char *ls[4] = {"", tsym, hsym, wsym};
    vf_port_tensor(o, "latent", VF_DTYPE_F32, 4, ld, ls);
    if (vf_param_bool(p, "logvar")) vf_port_tensor(o, "logvar", VF_DTYPE_F32, 4, ld, ls);
    if (vf_param_bool(p, "first_frame")) vf_port_tensor(o, VF_CACHE_Y_TENSOR, VF_DTYPE_F32, 4, ld, ls);
    /* Metadata passes through, plus the hash and the affine; so do a caption's text
     * embedding and a clip's CLIP image features (formats/cache_format.h), untouched. */
    const vf_port_spec *up = upstream ? vf_port_find(upstream, "in") : NULL;
    for (int i = 0; up && i < up->ntensors; i++)
        if (!strcmp(up->t[i].name, VF_CACHE_TEXT_TENSOR) || !strcmp(up->t[i].name, VF_CACHE_CLIP_TENSOR)) {
            const vf_tensor_spec *t = &up->t[i];
            const char *sym[VF_MAX_DIMS];
            for (int d = 0; d < t->ndim; d++) sym[d] = t->sym[d];
            vf_port_tensor(in, t->name, t->dtype, t->ndim, t->dims, sym);
            vf_port_tensor(o, t->name, t->dtype, t->ndim, t->dims, sym);
        }
    in->meta_bytes = up ? up->meta_bytes : 0;
    o->meta_bytes = up && up->meta_bytes ? up->meta_bytes + 256 + 64 + 40 * (int64_t)c.z_dim : 0;
fail:
    return rc;
}

static int vae_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out,
                      vf_status *st)
{
    int rc = 0;
    vf_vae_config c;
    geom g;
    VF_TRY(config_from_params(p, &c, st));
    upstream_geom(ports, &g);
    vf_device dev = vf_param_device(p, "device"), host = {VF_DEV_CPU, 0};
    size_t elem = dev.kind == VF_DEV_CUDA ? 2 : 4; /* bf16 storage on CUDA (ops.h) */
    int mb = (int)vf_param_int(p, "micro_batch"), chunk = (int)vf_param_int(p, "chunk");
    if (!g.H || !g.W) {
        /* Frame size unknown before launch: only the weights can be declared. */
        int64_t max_tensor;
        vf_mem_plan_add(out, dev, VF_MEM_VAE, "vae weights",
                        vf_vae_count_params(&c, &max_tensor) * (int64_t)elem);
        vf_mem_plan_add(out, host, VF_MEM_VAE, "vae load staging", max_tensor * 4);
        return 0;
    }
    vf_vae_mem_info mi;
    VF_TRY(vf_vae_mem(&c, elem, mb, chunk, (int)g.H, (int)g.W, &mi, st));
    vf_mem_plan_add(out, dev, VF_MEM_VAE, "vae weights", mi.weights);
    vf_mem_plan_add(out, dev, VF_MEM_VAE, "vae causal caches", mi.caches);
    vf_mem_plan_add(out, dev, VF_MEM_VAE, "vae chunk workspace", mi.workspace);
    if (dev.kind == VF_DEV_CUDA) /* cuDNN's, for the convolutions (vf_conv3d_workspace_bound) */
        vf_mem_plan_add(out, dev, VF_MEM_VAE, "vae conv workspace", mi.conv_workspace);
    vf_mem_plan_add(out, host, VF_MEM_VAE, "vae host staging", mi.host);
    /* Clips held while a micro-batch fills, and the latents of one micro-batch (the
     * encoder writes them there; each clip's item then gets its own copy). */
    int64_t T = g.T ? g.T : 1, Tl = 1 + (T - 1) / vf_vae_time_factor(&c);
    int64_t lat = (int64_t)c.z_dim * Tl * (g.H / vf_vae_space_factor(&c)) * (g.W / vf_vae_space_factor(&c)) * 4 *
                  (1 + vf_param_bool(p, "logvar") + vf_param_bool(p, "first_frame"));
    int64_t frames = T * g.H * g.W * 3;
    vf_mem_plan_add(out, host, VF_MEM_ITEMS, "vae micro-batch clips", mb * frames);
    /* A clip that came over a ZeroMQ edge (decode workers are processes of their own) is
     * held as its whole record, charged to this stage until its frames are dropped: the
     * id, metadata (path, caption, pass-through columns) and codec headers on top of
     * the frames. The input port's record bound less the frames is exactly that part. */
    const vf_port_spec *inp = vf_port_find(ports, "in");
    int64_t rec = inp ? vf_port_max_item_bytes(inp) : -1;
    if (rec > frames) vf_mem_plan_add(out, host, VF_MEM_ITEMS, "vae micro-batch item metadata", mb * (rec - frames));
    vf_mem_plan_add(out, host, VF_MEM_ITEMS, "vae micro-batch latents", mb * lat + lat);
fail:
    return rc;
}

typedef struct vae_state {
    vf_vae_config cfg;
    vf_backend *be;
    vf_vae *m;
    vf_vae_enc *enc;
    int micro_batch, chunk, enc_H, enc_W;
    int patch;                   /* the DiT's spatial patch the frame sides must allow */
    bool logvar;
    bool first_frame;            /* also emit "y", the latent of [first frame, zeros] */
    bool ti2v;                   /* mark the latents as of kind first_frame */
    vf_item **batch;
    int nb;
    int64_t bT, bH, bW;          /* shape of the clips in `batch` */
    float *mean, *lv;            /* (micro_batch, z, T', h, w) */
    int64_t out_cap;             /* floats in each */
    vf_lmdb *cache;              /* skip_cached, read-only; NULL = skip nothing */
    bool no_cache_yet;           /* skip_cached named a path without an environment */
    vf_cache_keying keying;      /* the cache's key scheme (its "__meta__") */
    float *nmean, *nstd;         /* per-channel normalisation (z each); NULL = scalar affine */
    char *norm_json;             /* {"mean":[…],"std":[…]} of nmean/nstd */
    char vae_id[VF_CACHE_KEY_LEN + 1]; /* metadata "vae" of the latents */
    int64_t skipped;             /* clips dropped because the cache has them */
} vae_state;

/* Opens skip_cached read-only and learns its key scheme. No environment there yet is
 * fine (nothing to skip); anything else wrong with it is an error naming the path. */
static int open_cache(vae_state *v, const char *path, vf_status *st)
{
    int rc = 0;
    MDB_txn *txn = NULL;
    vf_json *meta = NULL;
    vf_lmdb_opts o = {.readonly = true};
    rc = vf_lmdb_open(path, &o, &v->cache, st);
    if (rc == VF_ENOTFOUND) {
        vf_status_clear(st);
        v->cache = NULL;
        v->no_cache_yet = true;
        return 0;
    }
    if (rc < 0) goto fail;
    VF_TRY(vf_lmdb_read_begin(v->cache, &txn, st));
    VF_TRY(vf_cache_meta_read(v->cache, txn, &meta, st));
    v->keying = meta ? vf_cache_meta_keying(meta) : VF_CACHE_KEY_PROVENANCE;
    /* a clip of the cache is skipped whatever its conditioning: a cache of the other kind
     * would keep its entries and never get these */
    vf_cache_cond have = vf_cache_meta_cond(meta);
    bool fits = v->ti2v ? have == VF_CACHE_COND_FIRST_FRAME
                        : have != VF_CACHE_COND_FIRST_FRAME && (have != VF_CACHE_COND_TEXT) == v->first_frame;
    if (meta && vf_json_get_int(meta, "entries", 0) > 0 && !fits)
        VF_FAIL(st, VF_EBADINPUT, "%s holds entries of conditioning kind %s; this stage (first_frame = %s, ti2v = %s) "
                "writes %s entries: precompute into a cache of its own", path, vf_cache_cond_name(have),
                v->first_frame ? "true" : "false", v->ti2v ? "true" : "false",
                v->ti2v ? "first_frame" : v->first_frame ? "concat" : "text");
fail:
    if (txn) mdb_txn_abort(txn);
    vf_json_free(meta);
    if (rc < 0) vf_status_prefix(st, "vae_encode: skip_cached");
    return rc;
}

/* Copies list param `key` of q (z numbers) into out. */
static int norm_list(const vf_params *q, const char *key, const char *where, int z, float *out, vf_status *st)
{
    if (vf_param_len(q, key) != z)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "vae_encode: %s%s has %d values; z_dim is %d", where, key,
                             vf_param_len(q, key), z);
    for (int i = 0; i < z; i++) out[i] = (float)vf_param_num_at(q, key, i);
    return 0;
}

/* The per-channel normalisation (params, else the weights directory's config.json,
 * else the preset) and the "vae" metadata of the latents. */
static int resolve_norm(vae_state *v, const vf_params *p, vf_status *st)
{
    int rc = 0;
    const vf_params *m = vf_param_table(p, "model");
    int z = v->cfg.z_dim;
    bool found = false;
    snprintf(v->vae_id, sizeof v->vae_id, "%s", vf_vae_hash(v->m));
    if (!(v->nmean = vf_alloc(sizeof(float) * (size_t)z, st)) || !(v->nstd = vf_alloc(sizeof(float) * (size_t)z, st)))
        VF_FAIL(st, VF_ENOMEM, "vae_encode: out of memory");
    if (vf_param_has(p, "latents_mean") || vf_param_has(p, "latents_std")) {
        VF_TRY(norm_list(p, "latents_mean", "", z, v->nmean, st));
        VF_TRY(norm_list(p, "latents_std", "", z, v->nstd, st));
        found = true;
    }
    if (!found && vf_param_has(p, "weights") && vf_param_str(p, "weights")[0])
        VF_TRY(vf_vae_config_norm(vf_param_str(p, "weights"), z, v->nmean, v->nstd, &found, st));
    if (!found && (vf_param_len(m, "latents_mean") || vf_param_len(m, "latents_std"))) {
        VF_TRY(norm_list(m, "latents_mean", "model.", z, v->nmean, st));
        VF_TRY(norm_list(m, "latents_std", "model.", z, v->nstd, st));
        found = true;
    }
    if (!found) { /* the scalar affine */
        vf_free(v->nmean);
        vf_free(v->nstd);
        v->nmean = v->nstd = NULL;
        return 0;
    }
    if (v->cfg.scale != 1.0f || v->cfg.shift != 0.0f)
        VF_FAIL(st, VF_EUSAGE, "vae_encode: give either the per-channel latents_mean/latents_std or the scalar "
                "scale/shift (%g/%g), not both", (double)v->cfg.scale, (double)v->cfg.shift);
    size_t cap = 64 + (size_t)z * 40, o = 0;
    if (!(v->norm_json = vf_alloc(cap, st))) VF_FAIL(st, VF_ENOMEM, "vae_encode: out of memory");
    o += (size_t)snprintf(v->norm_json + o, cap - o, "{\"mean\":[");
    for (int i = 0; i < z; i++) o += (size_t)snprintf(v->norm_json + o, cap - o, "%s%.9g", i ? "," : "", (double)v->nmean[i]);
    o += (size_t)snprintf(v->norm_json + o, cap - o, "],\"std\":[");
    for (int i = 0; i < z; i++) {
        if (!isfinite(v->nstd[i]) || v->nstd[i] == 0 || !isfinite(v->nmean[i]))
            VF_FAIL(st, VF_EUSAGE, "vae_encode: latents_std[%d] = %g / latents_mean[%d] = %g: finite, std != 0", i,
                    (double)v->nstd[i], i, (double)v->nmean[i]);
        o += (size_t)snprintf(v->norm_json + o, cap - o, "%s%.9g", i ? "," : "", (double)v->nstd[i]);
    }
    snprintf(v->norm_json + o, cap - o, "]}");
    vf_cache_vae_id(vf_vae_hash(v->m), v->norm_json, v->vae_id);
fail:
    return rc;
}

static int vae_init(vf_stage *s, const vf_params *p, vf_status *st)
{
    int rc = 0;
    vae_state *v = vf_calloc(sizeof *v, st);
    if (!v) VF_FAIL(st, VF_ENOMEM, "vae_encode: out of memory");
    vf_stage_set_state(s, v);
    VF_TRY(config_from_params(p, &v->cfg, st));
    v->micro_batch = (int)vf_param_int(p, "micro_batch");
    v->chunk = (int)vf_param_int(p, "chunk");
    v->patch = (int)vf_param_int(p, "patch");
    v->logvar = vf_param_bool(p, "logvar");
    v->first_frame = vf_param_bool(p, "first_frame");
    v->ti2v = vf_param_bool(p, "ti2v");
    if (v->first_frame && v->ti2v)
        VF_FAIL(st, VF_EUSAGE, "vae_encode: first_frame and ti2v are two conditioning kinds (concat, "
                "first_frame): a cache holds one; choose one");
    if (!(v->batch = vf_calloc(sizeof *v->batch * (size_t)v->micro_batch, st)))
        VF_FAIL(st, VF_ENOMEM, "vae_encode: out of memory");
    vf_device dev = vf_param_device(p, "device");
    if (!(v->be = vf_backend_for(dev, st))) {
        rc = st && st->code ? st->code : VF_EINVAL;
        vf_status_prefix(st, "vae_encode: device");
        goto fail;
    }
    VF_TRY(vf_vae_new(&v->cfg, v->be, &v->m, st));
    if (vf_param_has(p, "weights") && vf_param_str(p, "weights")[0])
        VF_TRY(vf_vae_load(v->m, vf_param_str(p, "weights"), st));
    else
        VF_TRY(vf_vae_init_seeded(v->m, (uint64_t)vf_param_int(p, "seed"), st));
    VF_TRY(resolve_norm(v, p, st));
    if (vf_param_has(p, "skip_cached")) VF_TRY(open_cache(v, vf_param_str(p, "skip_cached"), st));
fail:
    return rc;
}

/* Whether the cache already holds clip `it` (encoded by this model). Items without the
 * provenance a provenance-keyed cache needs are never skipped: the writer reports them. */
static int is_cached(vae_state *v, const vf_item *it, bool *hit, vf_status *st)
{
    char key[VF_CACHE_KEY_LEN + 1];
    double clip = 0;
    *hit = false;
    if (!v->cache) return 0;
    if (v->keying == VF_CACHE_KEY_ID) {
        if (vf_cache_key_of_item(it, VF_CACHE_KEY_ID, key, st) < 0) return st->code;
    } else {
        const char *src = vf_item_str(it, "source"), *tf = vf_item_str(it, "transform");
        if (!src || !tf || vf_item_num(it, "clip", &clip) != 0) return 0;
        char th[VF_CACHE_KEY_LEN + 1], kh[VF_CACHE_KEY_LEN + 1];
        vf_cache_item_text_hash(it, th);
        vf_cache_item_cond_hash(it, th, kh);
        vf_cache_key_bucket(src, (int64_t)clip, tf, v->vae_id, kh, vf_item_str(it, "bucket"), key);
    }
    int rc = vf_lmdb_exists(v->cache, key, VF_CACHE_KEY_LEN, hit, st);
    if (rc < 0) vf_status_prefix(st, "vae_encode: skip_cached: item '%s'", vf_item_id(it));
    return rc;
}

static void drop_batch(vae_state *v)
{
    for (int i = 0; i < v->nb; i++) vf_item_free(v->batch[i]);
    v->nb = 0;
}

/* Runs the encoder over the gathered clips into v->mean / v->lv: the clips themselves,
 * or (first) their conditioning clips [first frame, zeros]. */
static int encode_pass(vae_state *v, vf_ctx *ctx, bool first, vf_status *st)
{
    int rc = 0;
    int64_t T = v->bT;
    VF_TRY(vf_vae_encode_begin(v->enc, v->nb, T, st));
    for (int64_t t0 = 0; t0 < T; t0 += v->chunk) {
        /* Abort (second SIGINT, a failed peer: the data plane's stop flag) ends the run
         * now: a micro-batch of long clips can take minutes, and nothing downstream will
         * take its latents. A drain (vf_stopping alone) lets the batch in hand finish. */
        if (vf_aborting(ctx))
            VF_FAIL(st, VF_ESTOPPED,
                    "vae_encode: the run is stopping: dropped a micro-batch of %d clips at frame "
                    "%" PRId64 " of %" PRId64, v->nb, t0, T);
        int n = (int)(T - t0 < v->chunk ? T - t0 : v->chunk);
        for (int b = 0; b < v->nb; b++) {
            const vf_tensor *f = vf_item_get(v->batch[b], "frames");
            if (first) VF_TRY(vf_vae_input_first_u8(v->enc, b, f->data, t0, n, st));
            else VF_TRY(vf_vae_input_u8(v->enc, b, f->data, t0, n, st));
        }
        VF_TRY(vf_vae_encode_chunk(v->enc, n, v->mean, first ? NULL : v->lv, st));
    }
    VF_TRY(vf_vae_encode_end(v->enc, st));
fail:
    return rc;
}

/* Puts clip b's normalised latent of the last pass into its item as tensor `name`
 * (shape (z, T', h, w), per = its values), and its logvar with `logvar`. */
static int put_latent(vae_state *v, int b, const char *name, bool logvar, const int64_t shape[4], int64_t per,
                      vf_status *st)
{
    int rc = 0;
    vf_item *it = v->batch[b];
    int64_t z = shape[0];
    float sc = v->cfg.scale, sh = v->cfg.shift, dlv = 2.0f * logf(fabsf(sc));
    vf_tensor *lat = vf_tensor_new(VF_DTYPE_F32, 4, shape, st);
    if (!lat) VF_FAIL(st, VF_ENOMEM, "vae_encode: out of memory for a latent");
    float *d = lat->data;
    const float *src = v->mean + b * per;
    int64_t plane = per / z; /* T'·h·w values per channel */
    if (v->nmean) {
        memcpy(d, src, sizeof(float) * (size_t)per);
        vf_vae_normalise(d, z, plane, v->nmean, v->nstd);
    } else {
        for (int64_t i = 0; i < per; i++) d[i] = (src[i] - sh) * sc;
    }
    VF_TRY(vf_item_put(it, name, lat, st));
    if (logvar) {
        vf_tensor *lv = vf_tensor_new(VF_DTYPE_F32, 4, shape, st);
        if (!lv) VF_FAIL(st, VF_ENOMEM, "vae_encode: out of memory for a logvar");
        float *dl = lv->data;
        const float *sl = v->lv + b * per;
        for (int64_t i = 0; i < per; i++)
            dl[i] = sl[i] + (v->nstd ? -2.0f * logf(fabsf(v->nstd[i / plane])) : dlv);
        VF_TRY(vf_item_put(it, "logvar", lv, st));
    }
fail:
    return rc;
}

/* Encodes the gathered clips and sends one item per clip. */
static int flush(vae_state *v, vf_ctx *ctx, vf_port *out, vf_status *st)
{
    int rc = 0;
    if (!v->nb) return 0;
    int64_t T = v->bT, H = v->bH, W = v->bW, sf = vf_vae_space_factor(&v->cfg);
    int64_t Tl = vf_vae_latent_frames(&v->cfg, T), z = v->cfg.z_dim;
    VF_ASSERT(Tl > 0);
    if (!v->enc || v->enc_H != H || v->enc_W != W) {
        vf_vae_enc_free(v->enc);
        v->enc = NULL;
        VF_TRY(vf_vae_enc_new(v->m, v->micro_batch, v->chunk, (int)H, (int)W, &v->enc, st));
        v->enc_H = (int)H, v->enc_W = (int)W;
    }
    int64_t per = z * Tl * (H / sf) * (W / sf), need = per * v->micro_batch;
    if (need > v->out_cap) {
        vf_free(v->mean);
        vf_free(v->lv);
        v->mean = v->lv = NULL;
        v->out_cap = 0;
        if (!(v->mean = vf_alloc(sizeof(float) * (size_t)need, st)) ||
            (v->logvar && !(v->lv = vf_alloc(sizeof(float) * (size_t)need, st))))
            VF_FAIL(st, VF_ENOMEM, "vae_encode: out of memory for %" PRId64 " latent floats", need);
        v->out_cap = need;
    }
    int64_t shape[4] = {z, Tl, H / sf, W / sf};
    VF_TRY(encode_pass(v, ctx, false, st));
    for (int b = 0; b < v->nb; b++) VF_TRY(put_latent(v, b, "latent", v->logvar, shape, per, st));
    if (v->first_frame) { /* its own encode: zeros do not encode to zero latents */
        VF_TRY(encode_pass(v, ctx, true, st));
        for (int b = 0; b < v->nb; b++) VF_TRY(put_latent(v, b, VF_CACHE_Y_TENSOR, false, shape, per, st));
    }
    for (int b = 0; b < v->nb; b++) {
        vf_item *it = v->batch[b];
        vf_tensor_unref(vf_item_take(it, "frames"));
        VF_TRY(vf_item_set_str(it, "vae", v->vae_id, st));
        if (v->ti2v) VF_TRY(vf_item_set_num(it, VF_CACHE_FIRST_FRAME_KEY, 1, st));
        if (v->norm_json) {
            VF_TRY(vf_item_set_str(it, "latent_norm", v->norm_json, st));
        } else {
            VF_TRY(vf_item_set_num(it, "vae_scale", v->cfg.scale, st));
            VF_TRY(vf_item_set_num(it, "vae_shift", v->cfg.shift, st));
        }
        v->batch[b] = NULL;
        rc = vf_send(out, it, st); /* takes the item, also on failure */
        if (rc < 0) {
            for (int k = b + 1; k < v->nb; k++) vf_item_free(v->batch[k]);
            v->nb = 0;
            return rc;
        }
    }
    v->nb = 0;
    return 0;
fail:
    drop_batch(v);
    return rc;
}

/* Checks one clip and returns its (T, H, W); errors name the item. */
static int clip_shape(vae_state *v, const vf_item *it, int64_t *T, int64_t *H, int64_t *W,
                      vf_status *st)
{
    int rc = 0;
    const vf_tensor *f = vf_item_get(it, "frames");
    int sf = vf_vae_space_factor(&v->cfg), tf = vf_vae_time_factor(&v->cfg);
    if (!f) VF_FAIL(st, VF_EBADINPUT, "vae_encode: item '%s' has no tensor \"frames\"", vf_item_id(it));
    if (f->dtype != VF_DTYPE_U8 || f->ndim != 4 || f->shape[3] != 3 || f->device.kind != VF_DEV_CPU) {
        char shp[96];
        vf_shape_str(f->ndim, f->shape, shp, sizeof shp);
        VF_FAIL(st, VF_EBADINPUT, "vae_encode: item '%s': frames are %s %s, expected host u8 (T, H, W, 3)",
                vf_item_id(it), vf_dtype_name(f->dtype), shp);
    }
    *T = f->shape[0], *H = f->shape[1], *W = f->shape[2];
    if (vf_vae_latent_frames(&v->cfg, *T) < 0)
        VF_FAIL(st, VF_EBADINPUT,
                "vae_encode: item '%s' has %" PRId64 " frames: the causal VAE encodes 1 + %d·k frames",
                vf_item_id(it), *T, tf);
    char what[300];
    snprintf(what, sizeof what, "item '%s': frames", vf_item_id(it));
    VF_TRY(size_check(*W, *H, sf, v->patch, what, st));
fail:
    return rc;
}

static int vae_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    int rc = 0;
    vae_state *v = vf_stage_state(s);
    vf_port *in = vf_in(ctx, "in"), *out = vf_out(ctx, "out");
    for (;;) {
        vf_item *it = NULL;
        rc = vf_recv(in, &it, st);
        if (rc == VF_EOS) break;
        if (rc < 0) goto fail;
        int64_t T = 0, H = 0, W = 0;
        if ((rc = clip_shape(v, it, &T, &H, &W, st)) < 0) {
            vf_item_free(it);
            goto fail;
        }
        bool hit;
        if ((rc = is_cached(v, it, &hit, st)) < 0) {
            vf_item_free(it);
            goto fail;
        }
        if (hit) { /* a rerun: encoded and stored by an earlier run */
            vf_item_free(it);
            vf_metric(ctx, "skipped_cached", (double)++v->skipped);
            continue;
        }
        if (v->nb && (T != v->bT || H != v->bH || W != v->bW)) VF_TRY(flush(v, ctx, out, st));
        v->bT = T, v->bH = H, v->bW = W;
        v->batch[v->nb++] = it;
        if (v->nb == v->micro_batch) VF_TRY(flush(v, ctx, out, st));
    }
    VF_TRY(flush(v, ctx, out, st));
    if (v->cache)
        vf_log(ctx, VF_LOG_INFO, "skipped %lld cached clips (already in %s)", (long long)v->skipped,
               vf_lmdb_path(v->cache));
    else if (v->no_cache_yet)
        vf_log(ctx, VF_LOG_INFO, "skipped 0 cached clips (no cache at skip_cached when the stage started)");
    return 0;
fail:
    drop_batch(v);
    return rc;
}

static void vae_fini(vf_stage *s)
{
    vae_state *v = vf_stage_state(s);
    if (!v) return;
    drop_batch(v);
    vf_vae_enc_free(v->enc);
    vf_vae_free(v->m);
    vf_free(v->mean);
    vf_free(v->lv);
    vf_free(v->batch);
    vf_lmdb_close(v->cache);
    vf_free(v->nmean);
    vf_free(v->nstd);
    vf_free(v->norm_json);
    vf_free(v);
    vf_stage_set_state(s, NULL);
}

/* What the planner may turn: fewer frames per causal chunk, fewer clips per forward. */
static const vf_knob_spec vae_encode_knobs[] = {
    {.name = "chunk", .param = "chunk", .arg = "chunk", .move = VF_KNOB_HALVE, .min = 1, .rank = 60},
    {.name = "micro_batch", .param = "micro_batch", .arg = "micro_batch", .move = VF_KNOB_HALVE, .min = 1, .rank = 70},
    {0},
};

static const vf_stage_ops vae_encode_ops = {
    .api_version = VF_API_VERSION,
    .kind = "vae_encode",
    .doc = "causal 3D VAE encoder (Wan 2.1 or Wan 2.2): clips -> latents, micro-batched, chunked",
    .params = vae_params,
    .ports = vae_ports,
    .memory = vae_memory,
    .init = vae_init,
    .run = vae_run,
    .fini = vae_fini,
    .knobs = vae_encode_knobs,
};
VF_REGISTER_STAGE(vae_encode_ops)
