/* vae_dec.c — the streaming causal VAE decoder: latent frames chunk by chunk, with
 * per-layer caches (Wan's Decoder3d; vae.h has the maths and the tensor names).
 *
 * The walker (vae_walk.h) measures the network for vf_vae_dec_mem and vf_vae_dec_new,
 * then runs it chunk by chunk. The frames n of a chunk double at each temporal upsample
 * (frame 0 of the clip passes alone), so the workspace follows the chunk's latent frames
 * and the frame size, never the clip length. The output clamp to [-1, 1] happens on the
 * host as the frames come down.
 */
#include "models/vae_walk.h"

#include <inttypes.h>
#include <string.h>

typedef vf_vw_act act;
typedef vf_vw_walk walk;

struct vf_vae_dec {
    vf_vw_ws ws;           /* buffers, caches; ws.in: (batch, z, n, h, w) of the next chunk */
    const vf_vae_config *cfg;
    int max_batch, chunk, h, w, sf, tf;
    float *stage;          /* host (3·p², tf·chunk, H/p, W/p) of one clip, for p > 1 */
    /* the current micro-batch */
    int active, batch;
    int64_t Tlat, T, t_in, t_out;
};

/* Temporal upsample: frame 0 of the stream passes alone; every later frame goes through
 * the causal conv 3x1x1 (C -> 2C, its own 2-frame cache, zeros before frame 1), whose
 * halves become frames 2t and 2t+1. The result is always in buffer `o` so later picks do
 * not depend on the data. */
static act tup(walk *w, act x, unsigned busy)
{
    const void *wt = vf_vw_param(w, "weight"), *bias = vf_vw_param(w, "bias");
    int64_t hw = x.H * x.W, BC = w->B * x.C;
    vf_vw_lstate *s = vf_vw_state(w, BC * 2 * hw);
    int64_t first = 0, m = x.n; /* frames through the conv */
    if (w->e) {
        first = !s->started;
        m = x.n - first;
    }
    int64_t L = m + 2, nout = first + 2 * m;
    if (!w->e) nout = 2 * x.n; /* the most any chunk of n frames can give */
    unsigned bx = busy | vf_vw_bit(x.buf);
    int p = vf_vw_pick(w, bx, BC * L * hw);
    int r = vf_vw_pick(w, bx | vf_vw_bit(p), 2 * BC * m * hw);
    int q = vf_vw_pick(w, bx | vf_vw_bit(r), 2 * BC * m * hw);
    int o = vf_vw_pick(w, bx | vf_vw_bit(r) | vf_vw_bit(q), BC * nout * hw);
    const vf_conv3d_shape cs = {w->B, x.C, L, x.H, x.W, 2 * x.C, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
    if (m > 0) {
        if (w->e) {
            char *cache = vf_vw_cache(w, s), *P = vf_vw_bp(w, p);
            vf_vw_copy_frames(w, P, L, 0, cache, 2, 0, 2, BC, hw);
            vf_vw_copy_frames(w, P, L, 2, vf_vw_bp(w, x.buf), x.n, first, m, BC, hw);
            vf_vw_copy_frames(w, cache, 2, 0, P, L, m, 2, BC, hw);
        }
        vf_vw_conv(w, r, p, wt, bias, &cs);
        if (w->e) {
            /* (B, 2, C, m, hw) -> (B, C, m, 2, hw): channel r·C + c is frame 2t + r */
            int64_t shp[5] = {w->B, 2, x.C, m, hw};
            int perm[5] = {0, 2, 3, 1, 4};
            w->e->be->permute(w->e->be, vf_vw_bp(w, first ? q : o), vf_vw_bp(w, r), 5, shp, perm);
        }
    }
    if (w->e) {
        if (first) {
            vf_vw_copy_frames(w, vf_vw_bp(w, o), nout, 0, vf_vw_bp(w, x.buf), x.n, 0, 1, BC, hw);
            vf_vw_copy_frames(w, vf_vw_bp(w, o), nout, 1, vf_vw_bp(w, q), 2 * m, 0, 2 * m, BC, hw);
        }
        s->started = 1;
    }
    return (act){o, x.C, nout, x.H, x.W};
}

/* Spatial upsample, per frame: nearest 2x, then conv 3x3 (padding 1), C -> co. The
 * nearest upsample is four copies of x permuted into place: out[p][2y+a][2x+b] =
 * copy[a][b][p][y][x]. */
static act up2d(walk *w, act x, int64_t co, unsigned busy)
{
    const void *wt = vf_vw_param(w, "weight"), *bias = vf_vw_param(w, "bias");
    int64_t planes = w->B * x.C * x.n, hw = x.H * x.W;
    int r = vf_vw_pick(w, busy | vf_vw_bit(x.buf), 4 * planes * hw);
    int u = vf_vw_pick(w, busy | vf_vw_bit(r), 4 * planes * hw);
    int o = vf_vw_pick(w, busy | vf_vw_bit(u), w->B * co * x.n * 4 * hw);
    if (w->e) {
        vf_backend *be = w->e->be;
        size_t bytes = (size_t)(planes * hw) * w->e->es;
        for (int i = 0; i < 4; i++)
            be->copy(be, vf_vw_bp(w, r) + i * bytes, vf_vw_bp(w, x.buf), bytes);
        int64_t shp[5] = {2, 2, planes, x.H, x.W};
        int perm[5] = {2, 3, 0, 4, 1};
        be->permute(be, vf_vw_bp(w, u), vf_vw_bp(w, r), 5, shp, perm);
    }
    const vf_conv3d_shape cs = {w->B, x.C, x.n, 2 * x.H, 2 * x.W, co, 1, 3, 3, 1, 1, 1, 0, 0, 1, 1, 1, 1};
    vf_vw_conv(w, o, u, wt, bias, &cs);
    return (act){o, co, x.n, 2 * x.H, 2 * x.W};
}

/* One Wan 2.2 residual level: residual blocks and upsamples, plus the shortcut
 * duplicated from the level's input (vae_res.c). */
static act res_level(walk *w, act x, int64_t cout, int i)
{
    const vf_vae_config *c = w->c;
    int td = vf_vae_dec_temporal(c, i);
    act x0 = x;
    unsigned keep = vf_vw_bit(x0.buf);
    for (int r = 0; r < c->num_res_blocks + 1; r++) x = vf_vw_resblock(w, x, cout, keep);
    if (td) x = tup(w, x, keep);
    x = up2d(w, x, cout, keep);
    act sc = vf_vw_dup_up(w, x0, cout, td ? 2 : 1, 2, vf_vw_bit(x.buf));
    if (w->e) {
        VF_ASSERT(x.n == sc.n);
        w->e->be->add(w->e->be, vf_vw_bp(w, x.buf), vf_vw_bp(w, x.buf), vf_vw_bp(w, sc.buf),
                      w->B * cout * x.n * x.H * x.W);
    }
    return x;
}

/* The whole decoder on one chunk of n latent frames; returns the (B, 3·p², m, H, W)
 * activation of its m output frames (patchified, before the clamp). */
static act forward(walk *w, int64_t n, int64_t h, int64_t wd)
{
    const vf_vae_config *c = w->c;
    int L = c->nlevels;
    int64_t d = vf_vae_dec_base(c), top = d * c->dim_mult[L - 1];
    act x = {VF_VW_IN, c->z_dim, n, h, wd};
    x = vf_vw_conv1x1(w, x, c->z_dim, 0); /* conv2 */
    x = vf_vw_conv3(w, x, top, 0);
    x = vf_vw_resblock(w, x, top, 0);
    x = vf_vw_attn(w, x, 0);
    x = vf_vw_resblock(w, x, top, 0);
    for (int i = 0; i < L; i++) {
        int64_t cout = d * c->dim_mult[L - 1 - i];
        if (c->residual && i != L - 1) {
            x = res_level(w, x, cout, i);
            continue;
        }
        for (int r = 0; r < c->num_res_blocks + 1; r++) x = vf_vw_resblock(w, x, cout, 0);
        if (i != L - 1) {
            if (vf_vae_dec_temporal(c, i)) x = tup(w, x, 0);
            x = up2d(w, x, x.C / 2, 0);
        }
    }
    return vf_vw_conv3(w, vf_vw_norm_silu(w, x, 0, 1), vf_vae_io_channels(c), 0);
}

static int check_geometry(int max_batch, int chunk, int h, int w, vf_status *st)
{
    int rc = 0;
    if (max_batch < 1) VF_FAIL(st, VF_EINVAL, "vae decoder: micro_batch %d < 1", max_batch);
    if (chunk < 1) VF_FAIL(st, VF_EINVAL, "vae decoder: chunk %d < 1 latent frames", chunk);
    if (h < 1 || w < 1) VF_FAIL(st, VF_EINVAL, "vae decoder: latent size %dx%d (hxw)", h, w);
fail:
    return rc;
}

/* Host floats of the unpatchify staging: one clip's frames of a chunk; 0 without patchify. */
static int64_t dec_stage_elems(const vf_vae_config *c, int chunk, int h, int w)
{
    int64_t sf = vf_vae_space_factor(c);
    if (vf_vae_patch(c) == 1) return 0;
    return 3 * (int64_t)vf_vae_time_factor(c) * chunk * (h * sf) * (w * sf);
}

static void measure(const vf_vae_config *c, int B, int chunk, int h, int wd, walk *w,
                    vf_vw_lstate *ls)
{
    vf_vw_measuring(w, c, B, ls, NULL, 0);
    (void)forward(w, chunk, h, wd);
}

int vf_vae_dec_conv_shapes(const vf_vae_config *c, int max_batch, int chunk, int h, int w,
                           vf_conv3d_shape *out, int cap, vf_status *st)
{
    int rc = 0;
    walk m;
    VF_TRY(vf_vae_config_check(c, st));
    VF_TRY(check_geometry(max_batch, chunk, h, w, st));
    vf_vw_measuring(&m, c, max_batch, NULL, out, cap);
    (void)forward(&m, chunk, h, w);
    return m.nconv;
fail:
    return rc;
}

int vf_vae_dec_mem(const vf_vae_config *c, size_t elem, int max_batch, int chunk, int h, int w,
                   vf_vae_mem_info *out, vf_status *st)
{
    int rc = 0;
    memset(out, 0, sizeof *out);
    VF_TRY(vf_vae_config_check(c, st));
    VF_TRY(check_geometry(max_batch, chunk, h, w, st));
    walk m;
    measure(c, max_batch, chunk, h, w, &m, NULL);
    int64_t max_tensor, in_elems = (int64_t)max_batch * c->z_dim * chunk * h * w;
    out->weights = vf_vae_dec_count_params(c, &max_tensor) * (int64_t)elem;
    out->caches = m.cache_elems * (int64_t)elem;
    out->workspace = vf_vw_bytes(&m, elem, in_elems) - out->caches;
    out->conv_workspace = m.conv_ws;
    /* the one-tensor load staging + bookkeeping: parameter table (name, shape, init
     * bound), layer states and the two structs (bounded by 1 KiB) */
    out->host = dec_stage_elems(c, chunk, h, w) * (int64_t)sizeof(float) +
                (int64_t)sizeof(float) * max_tensor +
                m.pi * (int64_t)(sizeof(vf_vae_param) + sizeof(double)) +
                m.si * (int64_t)sizeof(vf_vw_lstate) + (int64_t)sizeof(vf_vae_dec) + 1024;
fail:
    return rc;
}

int vf_vae_dec_new(vf_vae *m, int max_batch, int chunk, int h, int w, vf_vae_dec **out,
                   vf_status *st)
{
    int rc = 0;
    vf_vae_dec *d = NULL;
    const vf_vae_config *c = vf_vae_cfg(m);
    *out = NULL;
    if (!vf_vae_is_decoder(m))
        VF_FAIL(st, VF_EINVAL, "vae decoder: the model holds the encoder's weights "
                               "(make it with vf_vae_dec_model_new)");
    VF_TRY(check_geometry(max_batch, chunk, h, w, st));
    if (!(d = vf_calloc(sizeof *d, st))) VF_FAIL(st, VF_ENOMEM, "vae decoder: out of memory");
    d->ws.m = m;
    d->ws.be = vf_vae_backend(m);
    d->ws.es = vf_dtype_size(d->ws.be->act_dtype);
    d->cfg = c;
    d->max_batch = max_batch, d->chunk = chunk, d->h = h, d->w = w;
    d->sf = vf_vae_space_factor(c), d->tf = vf_vae_time_factor(c);
    walk ms;
    measure(c, max_batch, chunk, h, w, &ms, NULL);
    if (!(d->ws.ls = vf_calloc(sizeof *d->ws.ls * (size_t)(ms.si ? ms.si : 1), st)))
        VF_FAIL(st, VF_ENOMEM, "vae decoder: out of memory");
    measure(c, max_batch, chunk, h, w, &ms, d->ws.ls);
    if (vf_vw_alloc(&d->ws, &ms, (int64_t)max_batch * c->z_dim * chunk * h * w, st) < 0 ||
        (dec_stage_elems(c, chunk, h, w) &&
         !(d->stage = vf_alloc(sizeof(float) * (size_t)dec_stage_elems(c, chunk, h, w), st)))) {
        rc = st && st->code ? st->code : VF_ENOMEM;
        if (st && !st->code) vf_status_set(st, rc, __FILE__, __LINE__, "out of memory");
        vf_status_prefix(st, "vae decoder workspace (micro_batch %d, chunk %d, latent %dx%d)",
                         max_batch, chunk, h, w);
        goto fail;
    }
    *out = d;
    return 0;
fail:
    vf_vae_dec_free(d);
    return rc;
}

void vf_vae_dec_free(vf_vae_dec *d)
{
    if (!d) return;
    vf_vw_free(&d->ws);
    vf_free(d->stage);
    vf_free(d->ws.ls);
    vf_free(d);
}

int64_t vf_vae_dec_bytes(const vf_vae_dec *d) { return d->ws.bytes; }

int64_t vf_vae_decoded_frames(const vf_vae_config *c, int64_t Tlat)
{
    return Tlat < 1 ? -1 : 1 + (Tlat - 1) * vf_vae_time_factor(c);
}

int vf_vae_decode_begin(vf_vae_dec *d, int batch, int64_t Tlat, vf_status *st)
{
    int rc = 0;
    d->active = 0;
    if (batch < 1 || batch > d->max_batch)
        VF_FAIL(st, VF_EINVAL, "vae decoder: batch of %d clips, sized for 1..%d", batch,
                d->max_batch);
    if (Tlat < 1) VF_FAIL(st, VF_EINVAL, "vae decoder: %" PRId64 " latent frames", Tlat);
    d->batch = batch;
    d->Tlat = Tlat;
    d->T = vf_vae_decoded_frames(d->cfg, Tlat);
    d->t_in = d->t_out = 0;
    vf_vw_reset(&d->ws);
    d->active = 1;
fail:
    return rc;
}

int vf_vae_decode_chunk(vf_vae_dec *d, int n, const float *z, float *x, vf_status *st)
{
    int rc = 0;
    if (!d->active) VF_FAIL(st, VF_EINVAL, "vae decoder: decode_chunk outside begin/end");
    if (n < 1 || n > d->chunk || d->t_in + n > d->Tlat)
        VF_FAIL(st, VF_EINVAL,
                "vae decoder: %d latent frames from %" PRId64 " of %" PRId64 " (chunk 1..%d)", n,
                d->t_in, d->Tlat, d->chunk);
    vf_backend *be = d->ws.be;
    int64_t Z = d->cfg->z_dim, hw = (int64_t)d->h * d->w, es = (int64_t)d->ws.es;
    for (int64_t b = 0; b < d->batch; b++)
        for (int64_t c = 0; c < Z; c++)
            be->upload(be, (char *)d->ws.in + ((b * Z + c) * n) * hw * es,
                       z + ((b * Z + c) * d->Tlat + d->t_in) * hw, n * hw, be->act_dtype);
    walk w;
    memset(&w, 0, sizeof w);
    w.e = &d->ws;
    w.c = d->cfg;
    w.B = d->batch;
    act y = forward(&w, n, d->h, d->w);
    d->t_in += n;
    VF_ASSERT(d->t_out + y.n <= d->T);
    int64_t p = vf_vae_patch(d->cfg), HW = y.H * y.W * p * p, Wo = y.W * p;
    const char *Y = d->ws.buf[y.buf];
    for (int64_t b = 0; b < d->batch; b++) {
        if (p > 1) /* one clip's patchified frames, unfolded as diffusers' unpatchify */
            be->download(be, d->stage, Y + b * 3 * p * p * y.n * y.H * y.W * es,
                         3 * p * p * y.n * y.H * y.W, be->act_dtype);
        for (int64_t c = 0; c < 3; c++) {
            float *dst = x + ((b * 3 + c) * d->T + d->t_out) * HW;
            if (p == 1)
                be->download(be, dst, Y + ((b * 3 + c) * y.n) * HW * es, y.n * HW,
                             be->act_dtype);
            else
                for (int64_t t = 0; t < y.n; t++)
                    for (int64_t i = 0; i < HW; i++) {
                        int64_t yy = i / Wo, xx = i % Wo, ch = c * p * p + (xx % p) * p + yy % p;
                        dst[t * HW + i] =
                            d->stage[((ch * y.n + t) * y.H + yy / p) * y.W + xx / p];
                    }
            for (int64_t i = 0; i < y.n * HW; i++) /* as diffusers: clamp(-1, 1) */
                dst[i] = dst[i] < -1.0f ? -1.0f : dst[i] > 1.0f ? 1.0f : dst[i];
        }
    }
    d->t_out += y.n;
    return (int)d->t_out;
fail:
    return rc;
}

int vf_vae_decode_end(vf_vae_dec *d, vf_status *st)
{
    int rc = 0;
    if (!d->active) VF_FAIL(st, VF_EINVAL, "vae decoder: decode_end without begin");
    d->active = 0;
    if (d->t_in != d->Tlat)
        VF_FAIL(st, VF_EINVAL, "vae decoder: clip ended after %" PRId64 " of %" PRId64
                               " latent frames", d->t_in, d->Tlat);
    VF_ASSERT(d->t_out == d->T);
    return (int)d->t_out;
fail:
    return rc;
}

int vf_vae_decode_f32(vf_vae_dec *d, int batch, int64_t Tlat, const float *z, float *x,
                      vf_status *st)
{
    int rc = 0;
    VF_TRY(vf_vae_decode_begin(d, batch, Tlat, st));
    for (int64_t t0 = 0; t0 < Tlat; t0 += d->chunk) {
        int n = (int)(Tlat - t0 < d->chunk ? Tlat - t0 : d->chunk);
        if ((rc = vf_vae_decode_chunk(d, n, z, x, st)) < 0) goto fail;
    }
    rc = vf_vae_decode_end(d, st);
fail:
    if (rc < 0) d->active = 0;
    return rc;
}
