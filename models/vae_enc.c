/* vae_enc.c — the streaming causal VAE encoder: chunk by chunk, with per-layer caches.
 *
 * The walker (vae_walk.h) measures the network for vf_vae_mem and vf_vae_enc_new, then
 * runs it chunk by chunk. The frames n of a chunk shrink at temporal downsamples, and
 * may reach 0, in which case the chunk produces no latent frame and the deeper layers
 * are not run. The temporal downsample keeps its 1-2 pending frames. See vae.h for the
 * maths.
 */
#include "models/vae_walk.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

typedef vf_vw_act act;
typedef vf_vw_walk walk;

struct vf_vae_enc {
    vf_vw_ws ws;           /* buffers, caches; ws.in: (batch, 3·p², n, H/p, W/p) of the next chunk */
    const vf_vae_config *cfg;
    int max_batch, chunk, H, W;
    float *stage;          /* host staging (3·chunk·H·W floats) for the u8 conversion and the patchify */
    uint8_t *in_set;       /* per clip: input given for the next chunk */
    int in_n;
    int64_t bytes;
    /* the current micro-batch */
    int active, batch;
    int64_t T, Tlat, t_fed, t_out;
};

/* Wan's downsample2d: ZeroPad2d((0, 1, 0, 1)) then conv 3x3 stride 2, per frame; the
 * pad is the convolution's own padding after H and W (no padded copy). */
static act down2d(walk *w, act x, unsigned busy)
{
    const void *wt = vf_vw_param(w, "weight"), *bias = vf_vw_param(w, "bias");
    int o = vf_vw_pick(w, busy | vf_vw_bit(x.buf), w->B * x.C * x.n * (x.H / 2) * (x.W / 2));
    const vf_conv3d_shape cs = {w->B, x.C, x.n, x.H, x.W, x.C, 1, 3, 3, 1, 2, 2, 0, 0, 0, 1, 0, 1};
    vf_vw_conv(w, o, x.buf, wt, bias, &cs);
    return (act){o, x.C, x.n, x.H / 2, x.W / 2};
}

/* Temporal downsample: y_0 = x_0, y_j = conv(x_{2j-2}, x_{2j-1}, x_{2j}) (kernel 3x1x1,
 * stride 2). State: whether x_0 went through, and the 1-2 frames from x_{2j} on that the
 * next output needs. The result is always in buffer `o` so later picks do not depend
 * on the data. */
static act tdown(walk *w, act x, unsigned busy)
{
    const void *wt = vf_vw_param(w, "weight"), *bias = vf_vw_param(w, "bias");
    int64_t hw = x.H * x.W, BC = w->B * x.C;
    vf_vw_lstate *s = vf_vw_state(w, BC * 2 * hw);
    int64_t L, outs, nout;
    int first = 0, pend = 0;
    if (!w->e) {
        L = x.n + 2;
        outs = nout = (x.n + 1) / 2; /* the most any chunk of n frames can give */
    } else {
        first = !s->started;
        pend = first ? 0 : s->pending;
        L = pend + x.n;
        outs = L >= 3 ? (L - 3) / 2 + 1 : 0;
        nout = outs + first;
    }
    int p = vf_vw_pick(w, busy | vf_vw_bit(x.buf), BC * L * hw);
    int r = vf_vw_pick(w, busy | vf_vw_bit(x.buf) | vf_vw_bit(p), BC * outs * hw);
    int o = vf_vw_pick(w, busy | vf_vw_bit(p) | vf_vw_bit(r), BC * nout * hw);
    char *cache = w->e ? vf_vw_cache(w, s) : NULL, *P = w->e ? vf_vw_bp(w, p) : NULL;
    if (w->e) {
        vf_vw_copy_frames(w, P, L, 0, cache, 2, 0, pend, BC, hw);
        vf_vw_copy_frames(w, P, L, pend, vf_vw_bp(w, x.buf), x.n, 0, x.n, BC, hw);
    }
    const vf_conv3d_shape cs = {w->B, x.C, L, x.H, x.W, x.C, 3, 1, 1, 2, 1, 1, 0, 0, 0, 0, 0, 0};
    if (outs > 0) vf_vw_conv(w, first ? r : o, p, wt, bias, &cs);
    if (w->e) {
        if (first) {
            vf_vw_copy_frames(w, vf_vw_bp(w, o), nout, 0, P, L, 0, 1, BC, hw);
            vf_vw_copy_frames(w, vf_vw_bp(w, o), nout, 1, vf_vw_bp(w, r), outs, 0, outs, BC, hw);
        }
        int64_t newp = L - 2 * outs;
        VF_ASSERT(newp >= 1 && newp <= 2);
        vf_vw_copy_frames(w, cache, 2, 0, P, L, 2 * outs, newp, BC, hw);
        s->pending = (int)newp;
        s->started = 1;
    }
    return (act){o, x.C, nout, x.H, x.W};
}

/* One Wan 2.2 residual level: its residual blocks and downsamples, plus the shortcut
 * averaged from the level's input (vae_res.c). */
static act res_level(walk *w, act x, int i)
{
    const vf_vae_config *c = w->c;
    int last = i == c->nlevels - 1, td = !last && c->temporal_downsample[i];
    int64_t cout = (int64_t)c->dim * c->dim_mult[i];
    act sc = vf_vw_avg_down(w, x, cout, td ? 2 : 1, last ? 1 : 2, 0);
    unsigned keep = vf_vw_bit(sc.buf);
    for (int r = 0; r < c->num_res_blocks; r++) x = vf_vw_resblock(w, x, cout, keep);
    if (!last) {
        x = down2d(w, x, keep);
        if (td) x = tdown(w, x, keep);
    }
    if (w->e) {
        VF_ASSERT(x.n == sc.n);
        w->e->be->add(w->e->be, vf_vw_bp(w, x.buf), vf_vw_bp(w, x.buf), vf_vw_bp(w, sc.buf),
                      w->B * cout * x.n * x.H * x.W);
    }
    return x;
}

/* The whole encoder on one chunk of n input frames (patchified: H, W of the network);
 * returns the (B, 2z, m, h, w) activation with m >= 0 new latent frames. */
static act forward(walk *w, int64_t n, int64_t H, int64_t W)
{
    const vf_vae_config *c = w->c;
    act x = {VF_VW_IN, vf_vae_io_channels(c), n, H, W};
    x = vf_vw_conv3(w, x, c->dim, 0);
    for (int i = 0; i < c->nlevels; i++) {
        if (c->residual) {
            x = res_level(w, x, i);
            if (x.n == 0) return x;
            continue;
        }
        int64_t cout = (int64_t)c->dim * c->dim_mult[i];
        for (int r = 0; r < c->num_res_blocks; r++) x = vf_vw_resblock(w, x, cout, 0);
        if (i != c->nlevels - 1) {
            x = down2d(w, x, 0);
            if (c->temporal_downsample[i]) {
                x = tdown(w, x, 0);
                if (x.n == 0) return x; /* nothing reaches deeper layers this chunk */
            }
        }
    }
    x = vf_vw_resblock(w, x, x.C, 0);
    x = vf_vw_attn(w, x, 0);
    x = vf_vw_resblock(w, x, x.C, 0);
    x = vf_vw_conv3(w, vf_vw_norm_silu(w, x, 0, 1), 2 * (int64_t)c->z_dim, 0);
    return vf_vw_conv1x1(w, x, 2 * (int64_t)c->z_dim, 0);
}

static int check_geometry(const vf_vae_config *c, int max_batch, int chunk, int H, int W,
                          vf_status *st)
{
    int rc = 0, sf = vf_vae_space_factor(c);
    if (max_batch < 1) VF_FAIL(st, VF_EINVAL, "vae: micro_batch %d < 1", max_batch);
    if (chunk < 1) VF_FAIL(st, VF_EINVAL, "vae: chunk %d < 1", chunk);
    if (H < sf || W < sf || H % sf || W % sf)
        VF_FAIL(st, VF_EINVAL, "vae: frame size %dx%d (HxW) is not a positive multiple of %d",
                H, W, sf);
fail:
    return rc;
}

/* Measures everything for (B, chunk, H, W); records cache offsets into ls when given. */
static void measure(const vf_vae_config *c, int B, int chunk, int H, int W, walk *w,
                    vf_vw_lstate *ls)
{
    vf_vw_measuring(w, c, B, ls, NULL, 0);
    (void)forward(w, chunk, H / vf_vae_patch(c), W / vf_vae_patch(c));
}

int vf_vae_conv_shapes(const vf_vae_config *c, int max_batch, int chunk, int H, int W,
                       vf_conv3d_shape *out, int cap, vf_status *st)
{
    int rc = 0;
    walk w;
    VF_TRY(vf_vae_config_check(c, st));
    VF_TRY(check_geometry(c, max_batch, chunk, H, W, st));
    vf_vw_measuring(&w, c, max_batch, NULL, out, cap);
    (void)forward(&w, chunk, H / vf_vae_patch(c), W / vf_vae_patch(c));
    return w.nconv;
fail:
    return rc;
}

int vf_vae_mem(const vf_vae_config *c, size_t elem, int max_batch, int chunk, int H, int W,
               vf_vae_mem_info *out, vf_status *st)
{
    int rc = 0;
    memset(out, 0, sizeof *out);
    VF_TRY(vf_vae_config_check(c, st));
    VF_TRY(check_geometry(c, max_batch, chunk, H, W, st));
    walk w;
    measure(c, max_batch, chunk, H, W, &w, NULL);
    int64_t max_tensor;
    out->weights = vf_vae_count_params(c, &max_tensor) * (int64_t)elem;
    out->caches = w.cache_elems * (int64_t)elem;
    int64_t ws = (int64_t)max_batch * 3 * chunk * H * W * (int64_t)elem /* input */
                 + (int64_t)sizeof(float) * w.need_lse;
    for (int i = 0; i < VF_VW_NBUF; i++) ws += w.need[i] * (int64_t)elem;
    int64_t conv = (int64_t)sizeof(float) * 3 * chunk * H * W;
    int64_t load = (int64_t)sizeof(float) * max_tensor;
    /* + bookkeeping: parameter table (name, shape, init bound), layer states, per-clip
     * flags and the two structs (bounded by 1 KiB) */
    out->host =
        (conv > load ? conv : load) + w.pi * (int64_t)(sizeof(vf_vae_param) + sizeof(double)) +
        w.si * (int64_t)sizeof(vf_vw_lstate) + max_batch + (int64_t)sizeof(vf_vae_enc) + 1024;
    out->workspace = ws;
    out->conv_workspace = w.conv_ws;
fail:
    return rc;
}

int vf_vae_enc_new(vf_vae *m, int max_batch, int chunk, int H, int W, vf_vae_enc **out,
                   vf_status *st)
{
    int rc = 0;
    vf_vae_enc *e = NULL;
    const vf_vae_config *c = vf_vae_cfg(m);
    *out = NULL;
    VF_TRY(check_geometry(c, max_batch, chunk, H, W, st));
    if (!(e = vf_calloc(sizeof *e, st))) VF_FAIL(st, VF_ENOMEM, "vae: out of memory");
    e->ws.m = m;
    e->ws.be = vf_vae_backend(m);
    e->cfg = c;
    e->ws.es = vf_dtype_size(e->ws.be->act_dtype);
    e->max_batch = max_batch, e->chunk = chunk, e->H = H, e->W = W;
    walk w;
    measure(c, max_batch, chunk, H, W, &w, NULL);
    if (!(e->ws.ls = vf_calloc(sizeof *e->ws.ls * (size_t)(w.si ? w.si : 1), st)) ||
        !(e->in_set = vf_calloc((size_t)max_batch, st)))
        VF_FAIL(st, VF_ENOMEM, "vae: out of memory");
    measure(c, max_batch, chunk, H, W, &w, e->ws.ls);
    if (vf_vw_alloc(&e->ws, &w, (int64_t)max_batch * 3 * chunk * H * W, st) < 0 ||
        !(e->stage = vf_alloc(sizeof(float) * 3 * (size_t)chunk * (size_t)H * (size_t)W, st)))
        goto nomem;
    e->bytes = e->ws.bytes + (int64_t)sizeof(float) * 3 * chunk * H * W;
    *out = e;
    return 0;
nomem:
    rc = st && st->code ? st->code : VF_ENOMEM;
    if (st && !st->code) vf_status_set(st, rc, __FILE__, __LINE__, "vae: out of memory");
    vf_status_prefix(st, "vae encoder workspace (micro_batch %d, chunk %d, %dx%d)", max_batch,
                     chunk, H, W);
fail:
    vf_vae_enc_free(e);
    return rc;
}

void vf_vae_enc_free(vf_vae_enc *e)
{
    if (!e) return;
    vf_vw_free(&e->ws);
    vf_free(e->stage);
    vf_free(e->in_set);
    vf_free(e->ws.ls);
    vf_free(e);
}

int64_t vf_vae_enc_bytes(const vf_vae_enc *e) { return e->bytes; }

int vf_vae_encode_begin(vf_vae_enc *e, int batch, int64_t T, vf_status *st)
{
    int rc = 0;
    int tf = vf_vae_time_factor(e->cfg);
    e->active = 0;
    if (batch < 1 || batch > e->max_batch)
        VF_FAIL(st, VF_EINVAL, "vae: batch of %d clips, the encoder was sized for 1..%d", batch,
                e->max_batch);
    if ((e->Tlat = vf_vae_latent_frames(e->cfg, T)) < 0)
        VF_FAIL(st, VF_EINVAL,
                "vae: clip of %" PRId64 " frames: the causal VAE encodes 1 + %d·k frames "
                "(1, %d, %d, %d, …)",
                T, tf, 1 + tf, 1 + 2 * tf, 1 + 3 * tf);
    e->batch = batch;
    e->T = T;
    e->t_fed = e->t_out = 0;
    e->in_n = 0;
    memset(e->in_set, 0, (size_t)e->max_batch);
    vf_vw_reset(&e->ws);
    e->active = 1;
fail:
    return rc;
}

static int check_input(vf_vae_enc *e, int b, int64_t t0, int n, vf_status *st)
{
    int rc = 0;
    if (!e->active) VF_FAIL(st, VF_EINVAL, "vae: input given outside begin/end");
    if (b < 0 || b >= e->batch)
        VF_FAIL(st, VF_EINVAL, "vae: clip %d outside the batch of %d", b, e->batch);
    if (n < 1 || n > e->chunk)
        VF_FAIL(st, VF_EINVAL, "vae: %d frames per chunk, the encoder takes 1..%d", n, e->chunk);
    if (t0 != e->t_fed || t0 + n > e->T)
        VF_FAIL(st, VF_EINVAL,
                "vae: frames [%" PRId64 ", %" PRId64
                ") given, expected the next frames from %" PRId64 " of %" PRId64,
                t0, t0 + n, e->t_fed, e->T);
    if (e->in_n && e->in_n != n)
        VF_FAIL(st, VF_EINVAL, "vae: clips of one chunk must give the same frame count (%d vs %d)",
                n, e->in_n);
    e->in_n = n;
    e->in_set[b] = 1;
fail:
    return rc;
}

/* Where pixel (c, t, y, x) of a chunk of n frames sits in the network's input (one
 * clip): channel c·p² + (x mod p)·p + (y mod p) at (y/p, x/p), as diffusers' patchify. */
static inline int64_t in_index(int64_t p, int64_t n, int64_t H, int64_t W, int64_t c, int64_t t,
                               int64_t y, int64_t x)
{
    int64_t ch = c * p * p + (x % p) * p + y % p;
    return ((ch * n + t) * (H / p) + y / p) * (W / p) + x / p;
}

int vf_vae_input_f32(vf_vae_enc *e, int b, const float *clip, int64_t t0, int n, vf_status *st)
{
    int rc = 0;
    VF_TRY(check_input(e, b, t0, n, st));
    int64_t hw = (int64_t)e->H * e->W, p = vf_vae_patch(e->cfg);
    char *dst = (char *)e->ws.in + (int64_t)b * 3 * n * hw * (int64_t)e->ws.es;
    if (p == 1) {
        for (int c = 0; c < 3; c++)
            e->ws.be->upload(e->ws.be, dst + (int64_t)c * n * hw * (int64_t)e->ws.es,
                             clip + ((int64_t)c * e->T + t0) * hw, n * hw, e->ws.be->act_dtype);
        return 0;
    }
    for (int64_t c = 0; c < 3; c++)
        for (int64_t t = 0; t < n; t++)
            for (int64_t y = 0; y < e->H; y++)
                for (int64_t x = 0; x < e->W; x++)
                    e->stage[in_index(p, n, e->H, e->W, c, t, y, x)] =
                        clip[((c * e->T + t0 + t) * e->H + y) * e->W + x];
    e->ws.be->upload(e->ws.be, dst, e->stage, 3 * n * hw, e->ws.be->act_dtype);
fail:
    return rc;
}

int vf_vae_input_u8(vf_vae_enc *e, int b, const uint8_t *clip, int64_t t0, int n, vf_status *st)
{
    int rc = 0;
    VF_TRY(check_input(e, b, t0, n, st));
    int64_t hw = (int64_t)e->H * e->W, p = vf_vae_patch(e->cfg);
    /* (n, H, W, 3) interleaved RGB -> the network's channel-first input in [-1, 1] */
    for (int64_t t = 0; t < n; t++) {
        const uint8_t *src = clip + (t0 + t) * hw * 3;
        for (int64_t i = 0; i < hw; i++)
            for (int c = 0; c < 3; c++)
                e->stage[in_index(p, n, e->H, e->W, c, t, i / e->W, i % e->W)] =
                    (float)src[i * 3 + c] / 127.5f - 1.0f;
    }
    e->ws.be->upload(e->ws.be, (char *)e->ws.in + (int64_t)b * 3 * n * hw * (int64_t)e->ws.es,
                     e->stage, 3 * n * hw, e->ws.be->act_dtype);
fail:
    return rc;
}

int vf_vae_input_first_u8(vf_vae_enc *e, int b, const uint8_t *clip, int64_t t0, int n, vf_status *st)
{
    int rc = 0;
    VF_TRY(check_input(e, b, t0, n, st));
    int64_t hw = (int64_t)e->H * e->W;
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < hw; i++)
            for (int c = 0; c < 3; c++)
                e->stage[((int64_t)c * n + t) * hw + i] = t0 + t == 0 ? (float)clip[i * 3 + c] / 127.5f - 1.0f : 0.0f;
    e->ws.be->upload(e->ws.be, (char *)e->ws.in + (int64_t)b * 3 * n * hw * (int64_t)e->ws.es,
                     e->stage, 3 * n * hw, e->ws.be->act_dtype);
fail:
    return rc;
}

int vf_vae_encode_chunk(vf_vae_enc *e, int n, float *mean, float *logvar, vf_status *st)
{
    int rc = 0;
    if (!e->active) VF_FAIL(st, VF_EINVAL, "vae: encode_chunk outside begin/end");
    if (n != e->in_n)
        VF_FAIL(st, VF_EINVAL, "vae: encode_chunk of %d frames, inputs were given for %d", n,
                e->in_n);
    for (int b = 0; b < e->batch; b++)
        if (!e->in_set[b]) VF_FAIL(st, VF_EINVAL, "vae: no input for clip %d of this chunk", b);
    walk w;
    memset(&w, 0, sizeof w);
    w.e = &e->ws;
    w.c = e->cfg;
    w.B = e->batch;
    act y = forward(&w, n, e->H / vf_vae_patch(e->cfg), e->W / vf_vae_patch(e->cfg));
    e->t_fed += n;
    e->in_n = 0;
    memset(e->in_set, 0, (size_t)e->max_batch);
    if (y.n > 0) {
        VF_ASSERT(e->t_out + y.n <= e->Tlat);
        int64_t z = e->cfg->z_dim, hw = y.H * y.W, es = (int64_t)e->ws.es;
        const char *Y = w.e->buf[y.buf];
        vf_backend *be = e->ws.be;
        for (int64_t b = 0; b < e->batch; b++)
            for (int64_t c = 0; c < z; c++) {
                be->download(be, mean + ((b * z + c) * e->Tlat + e->t_out) * hw,
                             Y + ((b * 2 * z + c) * y.n) * hw * es, y.n * hw, be->act_dtype);
                if (logvar)
                    be->download(be, logvar + ((b * z + c) * e->Tlat + e->t_out) * hw,
                                    Y + ((b * 2 * z + z + c) * y.n) * hw * es, y.n * hw,
                                 be->act_dtype);
            }
        e->t_out += y.n;
    }
    return (int)e->t_out;
fail:
    return rc;
}

int vf_vae_encode_end(vf_vae_enc *e, vf_status *st)
{
    int rc = 0;
    if (!e->active) VF_FAIL(st, VF_EINVAL, "vae: encode_end without begin");
    e->active = 0;
    if (e->t_fed != e->T)
        VF_FAIL(st, VF_EINVAL, "vae: clip ended after %" PRId64 " of %" PRId64 " frames", e->t_fed,
                e->T);
    VF_ASSERT(e->t_out == e->Tlat);
    return (int)e->t_out;
fail:
    return rc;
}

int vf_vae_encode_f32(vf_vae_enc *e, int batch, int64_t T, const float *x, float *mean,
                      float *logvar, vf_status *st)
{
    int rc = 0;
    int64_t clip = 3 * T * (int64_t)e->H * e->W;
    VF_TRY(vf_vae_encode_begin(e, batch, T, st));
    for (int64_t t0 = 0; t0 < T; t0 += e->chunk) {
        int n = (int)(T - t0 < e->chunk ? T - t0 : e->chunk);
        for (int b = 0; b < batch; b++) VF_TRY(vf_vae_input_f32(e, b, x + b * clip, t0, n, st));
        VF_TRY(vf_vae_encode_chunk(e, n, mean, logvar, st));
    }
    VF_TRY(vf_vae_encode_end(e, st));
fail:
    if (rc < 0) e->active = 0;
    return rc;
}
