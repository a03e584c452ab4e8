/* vae.c — the causal 3D VAE's config, parameter table and weights: seeded init,
 * safetensors load/save and the weights hash used in cache keys.
 *
 * A model holds one half: the encoder's tensors (vf_vae_new) or the decoder's
 * (vf_vae_dec_model_new). The forward passes (vae_enc.c, vae_dec.c, over the layers of
 * vae_walk.c) walk the same structure as build_enc_table / build_dec_table below and
 * take the tensors in table order. Architecture and the tensor names are documented in
 * vae.h.
 */
#include "models/vae.h"

#include "formats/safetensors.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

struct vf_vae {
    vf_vae_config cfg;
    int decoder;            /* 0: the encoder's tensors; 1: the decoder's */
    vf_backend *be;
    size_t es;              /* bytes per element of be->act_dtype */
    int np;
    vf_vae_param *tab;      /* np entries */
    double *bound;          /* per param: U(-b, b) init; 0 = a gain (init 1) */
    int64_t numel;
    int64_t max_numel;      /* largest tensor (host staging for init/load/save) */
    void *w;                /* flat weights, be storage */
    char hash[33];
};
/* vf_vae_mem (vae_enc.c) declares 1 KiB for this struct and the encoder's. */
_Static_assert(sizeof(struct vf_vae) <= 512, "vf_vae grew past its declared bookkeeping");

/* ------------------------------------------------------------------ config */

void vf_vae_config_wan(vf_vae_config *c)
{
    memset(c, 0, sizeof *c);
    c->dim = 96;
    c->nlevels = 4;
    c->dim_mult[0] = 1, c->dim_mult[1] = 2, c->dim_mult[2] = 4, c->dim_mult[3] = 4;
    c->num_res_blocks = 2;
    c->temporal_downsample[0] = 0, c->temporal_downsample[1] = 1;
    c->temporal_downsample[2] = 1;
    c->z_dim = 16;
    c->eps = 1e-12f; /* Wan normalises with F.normalize: eps only guards all-zero positions */
    c->scale = 1.0f;
    c->shift = 0.0f;
    c->patch = 1;
}

void vf_vae_config_wan22(vf_vae_config *c)
{
    vf_vae_config_wan(c);
    c->dim = 160;
    c->dec_dim = 256;
    c->z_dim = 48;
    c->residual = 1;
    c->patch = 2;
}

int vf_vae_dec_base(const vf_vae_config *c) { return c->dec_dim > 0 ? c->dec_dim : c->dim; }
int vf_vae_patch(const vf_vae_config *c) { return c->patch > 1 ? c->patch : 1; }
int vf_vae_io_channels(const vf_vae_config *c) { return 3 * vf_vae_patch(c) * vf_vae_patch(c); }

void vf_vae_config_tiny(vf_vae_config *c)
{
    vf_vae_config_wan(c);
    c->dim = 8;
    c->dim_mult[0] = 1, c->dim_mult[1] = 2, c->dim_mult[2] = 2, c->dim_mult[3] = 2;
    c->num_res_blocks = 1;
    c->z_dim = 4;
}

int vf_vae_config_check(const vf_vae_config *c, vf_status *st)
{
    int rc = 0;
    if (c->dim < 1 || c->dim > 4096)
        VF_FAIL(st, VF_EINVAL, "vae config: dim %d out of range [1, 4096]", c->dim);
    if (c->nlevels < 1 || c->nlevels > VF_VAE_MAX_LEVELS)
        VF_FAIL(st, VF_EINVAL, "vae config: dim_mult has %d entries, expected 1..%d", c->nlevels,
                VF_VAE_MAX_LEVELS);
    for (int i = 0; i < c->nlevels; i++)
        if (c->dim_mult[i] < 1 || (int64_t)c->dim_mult[i] * c->dim > 65536)
            VF_FAIL(st, VF_EINVAL, "vae config: dim_mult[%d] = %d out of range", i,
                    c->dim_mult[i]);
    for (int i = 0; i + 1 < c->nlevels; i++)
        if (c->temporal_downsample[i] != 0 && c->temporal_downsample[i] != 1)
            VF_FAIL(st, VF_EINVAL, "vae config: temporal_downsample[%d] = %d, expected 0 or 1",
                    i, c->temporal_downsample[i]);
    if (c->num_res_blocks < 1 || c->num_res_blocks > 16)
        VF_FAIL(st, VF_EINVAL, "vae config: num_res_blocks %d out of range [1, 16]",
                c->num_res_blocks);
    if (c->z_dim < 1 || c->z_dim > 1024)
        VF_FAIL(st, VF_EINVAL, "vae config: z_dim %d out of range [1, 1024]", c->z_dim);
    if (!(c->eps > 0) || !(c->eps < 1))
        VF_FAIL(st, VF_EINVAL, "vae config: eps %g out of range (0, 1)", (double)c->eps);
    if (!isfinite(c->scale) || c->scale == 0 || !isfinite(c->shift))
        VF_FAIL(st, VF_EINVAL, "vae config: scale %g / shift %g must be finite, scale != 0",
                (double)c->scale, (double)c->shift);
    if (c->patch < 0 || c->patch > 8)
        VF_FAIL(st, VF_EINVAL, "vae config: patch %d out of range [1, 8]", c->patch);
    if (c->dec_dim < 0 || c->dec_dim > 4096)
        VF_FAIL(st, VF_EINVAL, "vae config: dec_dim %d out of range [1, 4096]", c->dec_dim);
    if (c->residual != 0 && c->residual != 1)
        VF_FAIL(st, VF_EINVAL, "vae config: residual %d, expected 0 or 1", c->residual);
    VF_TRY(vf_vae_residual_check(c, st));
fail:
    return rc;
}

int vf_vae_time_factor(const vf_vae_config *c)
{
    int f = 1;
    for (int i = 0; i + 1 < c->nlevels; i++)
        if (c->temporal_downsample[i]) f *= 2;
    return f;
}

int vf_vae_space_factor(const vf_vae_config *c) { return vf_vae_patch(c) << (c->nlevels - 1); }

int64_t vf_vae_latent_frames(const vf_vae_config *c, int64_t T)
{
    int tf = vf_vae_time_factor(c);
    if (T < 1 || (T - 1) % tf != 0) return -1;
    return 1 + (T - 1) / tf;
}

void vf_vae_config_str(const vf_vae_config *c, char *buf, size_t n)
{
    /* Canonical and stable: it feeds the weights hash, hence the latent cache keys. */
    char mult[64] = "", td[64] = "";
    size_t a = 0, b = 0;
    for (int i = 0; i < c->nlevels; i++)
        a += (size_t)snprintf(mult + a, sizeof mult - a, "%s%d", i ? "," : "", c->dim_mult[i]);
    for (int i = 0; i + 1 < c->nlevels; i++)
        b += (size_t)snprintf(td + b, sizeof td - b, "%s%d", i ? "," : "",
                              c->temporal_downsample[i]);
    /* scale/shift are in: the latents a stage emits (and a cache stores) depend on them */
    snprintf(buf, n,
             "vae-enc-v1;dim=%d;dim_mult=%s;num_res_blocks=%d;temporal_downsample=%s;"
             "z_dim=%d;eps=%.9g;scale=%.9g;shift=%.9g",
             c->dim, mult, c->num_res_blocks, td, c->z_dim, (double)c->eps, (double)c->scale,
             (double)c->shift);
    /* Wan 2.2's fields only when set, so Wan 2.1 configs keep their text (and cache keys) */
    if (c->residual || vf_vae_patch(c) > 1 || c->dec_dim) {
        size_t l = strlen(buf);
        if (l < n)
            snprintf(buf + l, n - l, ";residual=%d;patch=%d;dec_dim=%d", c->residual,
                     vf_vae_patch(c), vf_vae_dec_base(c));
    }
}

/* ------------------------------------------------------------------ parameter table */

typedef struct table_builder {
    vf_vae_param *tab;  /* NULL: count only */
    double *bound;
    int n;
    int64_t numel, max_numel;
} table_builder;

static void add_param(table_builder *tb, double bound, int ndim, const int64_t *shape,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void add_param(table_builder *tb, double bound, int ndim, const int64_t *shape,
                      const char *fmt, ...)
{
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    if (tb->tab) {
        vf_vae_param *p = &tb->tab[tb->n];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->name, sizeof p->name, fmt, ap);
        va_end(ap);
        p->ndim = ndim;
        for (int i = 0; i < ndim; i++) p->shape[i] = shape[i];
        p->numel = numel;
        p->offset = tb->numel;
        tb->bound[tb->n] = bound;
    }
    tb->n++;
    tb->numel += numel;
    if (numel > tb->max_numel) tb->max_numel = numel;
}

/* Weight (OC, IC, k...) and bias (OC) of a conv; PyTorch's default init bound. */
static void add_conv(table_builder *tb, const char *prefix, int64_t oc, int64_t ic, int kt,
                     int kh, int kw, int ndim_k)
{
    int64_t shape[5] = {oc, ic, kt, kh, kw};
    if (ndim_k == 2) shape[2] = kh, shape[3] = kw;
    double b = 1.0 / sqrt((double)(ic * kt * kh * kw));
    add_param(tb, b, 2 + ndim_k, shape, "%s.weight", prefix);
    add_param(tb, b, 1, &oc, "%s.bias", prefix);
}

static void add_gain(table_builder *tb, const char *name, int64_t c, int images)
{
    int64_t shape[4] = {c, 1, 1, 1};
    add_param(tb, 0.0, images ? 3 : 4, shape, "%s", name);
}

static void add_resblock(table_builder *tb, const char *prefix, int64_t in, int64_t out)
{
    char n[VF_VAE_NAME_MAX];
    snprintf(n, sizeof n, "%s.residual.0.gamma", prefix);
    add_gain(tb, n, in, 0);
    snprintf(n, sizeof n, "%s.residual.2", prefix);
    add_conv(tb, n, out, in, 3, 3, 3, 3);
    snprintf(n, sizeof n, "%s.residual.3.gamma", prefix);
    add_gain(tb, n, out, 0);
    snprintf(n, sizeof n, "%s.residual.6", prefix);
    add_conv(tb, n, out, out, 3, 3, 3, 3);
    if (in != out) {
        snprintf(n, sizeof n, "%s.shortcut", prefix);
        add_conv(tb, n, out, in, 1, 1, 1, 3);
    }
}

/* The name prefix of level i's entry k: Wan 2.1 counts every entry of `half`s
 * downsamples/upsamples in one index space (k_flat); Wan 2.2 nests each level's entries,
 * half.{down,up}samples.i.{down,up}samples.k (wan/modules/vae2_2.py). */
static void entry_name(const vf_vae_config *c, char *n, size_t sz, const char *half, int i, int k,
                       int k_flat)
{
    const char *what = half[0] == 'e' ? "downsamples" : "upsamples";
    if (c->residual) snprintf(n, sz, "%s.%s.%d.%s.%d", half, what, i, what, k);
    else snprintf(n, sz, "%s.%s.%d", half, what, k_flat);
}

/* The encoder's tensors in flat-buffer order. vae_enc.c consumes them in this order. */
static void build_enc_table(const vf_vae_config *c, table_builder *tb)
{
    char n[VF_VAE_NAME_MAX], t[VF_VAE_NAME_MAX + 16];
    int64_t in = c->dim, out = c->dim;
    add_conv(tb, "encoder.conv1", c->dim, vf_vae_io_channels(c), 3, 3, 3, 3);
    int k = 0;
    for (int i = 0; i < c->nlevels; i++) {
        out = (int64_t)c->dim * c->dim_mult[i];
        for (int r = 0; r < c->num_res_blocks; r++) {
            entry_name(c, n, sizeof n, "encoder", i, r, k++);
            add_resblock(tb, n, in, out);
            in = out;
        }
        if (i != c->nlevels - 1) {
            entry_name(c, n, sizeof n, "encoder", i, c->num_res_blocks, k);
            snprintf(t, sizeof t, "%s.resample.1", n);
            add_conv(tb, t, out, out, 1, 3, 3, 2);
            if (c->temporal_downsample[i]) {
                snprintf(t, sizeof t, "%s.time_conv", n);
                add_conv(tb, t, out, out, 3, 1, 1, 3);
            }
            k++;
        }
    }
    add_resblock(tb, "encoder.middle.0", out, out);
    add_gain(tb, "encoder.middle.1.norm.gamma", out, 1);
    add_conv(tb, "encoder.middle.1.to_qkv", 3 * out, out, 1, 1, 1, 2);
    add_conv(tb, "encoder.middle.1.proj", out, out, 1, 1, 1, 2);
    add_resblock(tb, "encoder.middle.2", out, out);
    add_gain(tb, "encoder.head.0.gamma", out, 0);
    add_conv(tb, "encoder.head.2", 2 * (int64_t)c->z_dim, out, 3, 3, 3, 3);
    add_conv(tb, "conv1", 2 * (int64_t)c->z_dim, 2 * (int64_t)c->z_dim, 1, 1, 1, 3);
}

/* The decoder's tensors in flat-buffer order (Wan's Decoder3d + conv2); vae_dec.c
 * consumes them in this order. Level i of the decoder mirrors encoder level L-1-i. Wan
 * 2.1's spatial upsample halves the width; Wan 2.2's keeps it. */
static void build_dec_table(const vf_vae_config *c, table_builder *tb)
{
    char n[VF_VAE_NAME_MAX], t[VF_VAE_NAME_MAX + 16];
    int L = c->nlevels;
    int64_t d = vf_vae_dec_base(c);
    int64_t z = c->z_dim, top = d * c->dim_mult[L - 1], in = top, out = top;
    add_conv(tb, "conv2", z, z, 1, 1, 1, 3);
    add_conv(tb, "decoder.conv1", top, z, 3, 3, 3, 3);
    add_resblock(tb, "decoder.middle.0", top, top);
    add_gain(tb, "decoder.middle.1.norm.gamma", top, 1);
    add_conv(tb, "decoder.middle.1.to_qkv", 3 * top, top, 1, 1, 1, 2);
    add_conv(tb, "decoder.middle.1.proj", top, top, 1, 1, 1, 2);
    add_resblock(tb, "decoder.middle.2", top, top);
    int k = 0;
    for (int i = 0; i < L; i++) {
        out = d * c->dim_mult[L - 1 - i];
        for (int r = 0; r < c->num_res_blocks + 1; r++) {
            entry_name(c, n, sizeof n, "decoder", i, r, k++);
            add_resblock(tb, n, in, out);
            in = out;
        }
        if (i != L - 1) {
            int64_t up_out = c->residual ? out : out / 2;
            entry_name(c, n, sizeof n, "decoder", i, c->num_res_blocks + 1, k);
            if (vf_vae_dec_temporal(c, i)) {
                snprintf(t, sizeof t, "%s.time_conv", n);
                add_conv(tb, t, 2 * out, out, 3, 1, 1, 3);
            }
            snprintf(t, sizeof t, "%s.resample.1", n);
            add_conv(tb, t, up_out, out, 1, 3, 3, 2);
            in = up_out;
            k++;
        }
    }
    add_gain(tb, "decoder.head.0.gamma", out, 0);
    add_conv(tb, "decoder.head.2", vf_vae_io_channels(c), out, 3, 3, 3, 3);
}

static void build_table(const vf_vae_config *c, int decoder, table_builder *tb)
{
    if (decoder) build_dec_table(c, tb);
    else build_enc_table(c, tb);
}

int vf_vae_dec_temporal(const vf_vae_config *c, int i)
{
    return i >= 0 && i + 1 < c->nlevels ? c->temporal_downsample[c->nlevels - 2 - i] : 0;
}

int64_t vf_vae_count_params(const vf_vae_config *c, int64_t *max_tensor)
{
    table_builder tb = {0};
    build_enc_table(c, &tb);
    if (max_tensor) *max_tensor = tb.max_numel;
    return tb.numel;
}

int64_t vf_vae_dec_count_params(const vf_vae_config *c, int64_t *max_tensor)
{
    table_builder tb = {0};
    build_dec_table(c, &tb);
    if (max_tensor) *max_tensor = tb.max_numel;
    return tb.numel;
}

/* ------------------------------------------------------------------ hash */

/* A 128-bit streaming hash (two multiply-xorshift lanes over 8-byte words, finalised
 * with splitmix64). Not cryptographic: it only has to tell weights apart in cache keys. */
typedef struct hash128 {
    uint64_t a, b, len;
    uint8_t tail[8];
    int ntail;
} hash128;

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void hash_init(hash128 *h)
{
    memset(h, 0, sizeof *h);
    h->a = 0x6A09E667F3BCC908ull;
    h->b = 0xBB67AE8584CAA73Bull;
}

static inline void hash_word(hash128 *h, uint64_t w)
{
    h->a = (h->a ^ w) * 0x9E3779B97F4A7C15ull;
    h->a ^= h->a >> 32;
    h->b = (h->b + w) * 0xC2B2AE3D27D4EB4Full;
    h->b = (h->b << 29) | (h->b >> 35);
}

static void hash_update(hash128 *h, const void *data, size_t n)
{
    const uint8_t *p = data;
    h->len += n;
    while (n && h->ntail) {
        h->tail[h->ntail++] = *p++, n--;
        if (h->ntail == 8) {
            uint64_t w;
            memcpy(&w, h->tail, 8);
            hash_word(h, w);
            h->ntail = 0;
        }
    }
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        hash_word(h, w);
    }
    while (n) h->tail[h->ntail++] = *p++, n--;
}

static void hash_final(hash128 *h, char out[33])
{
    uint64_t w = 0;
    memcpy(&w, h->tail, (size_t)h->ntail);
    hash_word(h, w ^ ((uint64_t)h->ntail << 56));
    uint64_t x = splitmix64(h->a ^ splitmix64(h->len));
    uint64_t y = splitmix64(h->b ^ x);
    snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, x, y);
}

static void hash_param(hash128 *h, const vf_vae_param *p, const float *data)
{
    hash_update(h, p->name, strlen(p->name) + 1);
    int64_t nd = p->ndim;
    hash_update(h, &nd, sizeof nd);
    hash_update(h, p->shape, sizeof(int64_t) * (size_t)p->ndim);
    hash_update(h, data, sizeof(float) * (size_t)p->numel);
}

static void hash_begin(const vf_vae *m, hash128 *h)
{
    char cfg[512];
    vf_vae_config_str(&m->cfg, cfg, sizeof cfg);
    hash_init(h);
    /* the decoder's weights hash apart from the encoder's of the same config */
    if (m->decoder) hash_update(h, "decoder", 8);
    hash_update(h, cfg, strlen(cfg) + 1);
}

/* ------------------------------------------------------------------ model */

static int model_new(const vf_vae_config *cfg, int decoder, vf_backend *be, vf_vae **out,
                     vf_status *st)
{
    int rc = 0;
    vf_vae *m = NULL;
    *out = NULL;
    VF_TRY(vf_vae_config_check(cfg, st));
    /* Wan 2.1's decoder spatial upsamples halve the channels (Resample, dim // 2) */
    for (int i = 1; decoder && !cfg->residual && i < cfg->nlevels; i++)
        if (vf_vae_dec_base(cfg) * cfg->dim_mult[i] % 2)
            VF_FAIL(st, VF_EINVAL, "vae decoder: dim * dim_mult[%d] = %d must be even", i,
                    vf_vae_dec_base(cfg) * cfg->dim_mult[i]);
    if (!(m = vf_calloc(sizeof *m, st))) VF_FAIL(st, VF_ENOMEM, "vae: out of memory");
    m->cfg = *cfg;
    m->decoder = decoder;
    m->be = be;
    m->es = vf_dtype_size(be->act_dtype);
    table_builder tb = {0};
    build_table(cfg, decoder, &tb);
    m->np = tb.n;
    m->numel = tb.numel;
    m->max_numel = tb.max_numel;
    if (!(m->tab = vf_calloc(sizeof *m->tab * (size_t)m->np, st)) ||
        !(m->bound = vf_calloc(sizeof *m->bound * (size_t)m->np, st)))
        VF_FAIL(st, VF_ENOMEM, "vae: out of memory for the parameter table");
    table_builder fill = {.tab = m->tab, .bound = m->bound};
    build_table(cfg, decoder, &fill);
    VF_ASSERT(fill.n == m->np && fill.numel == m->numel);
    if (!(m->w = be->alloc(be, (size_t)m->numel * m->es, st))) {
        rc = st && st->code ? st->code : VF_ENOMEM;
        vf_status_prefix(st, "vae: weights (%" PRId64 " params)", m->numel);
        goto fail;
    }
    *out = m;
    return 0;
fail:
    vf_vae_free(m);
    return rc;
}

int vf_vae_new(const vf_vae_config *cfg, vf_backend *be, vf_vae **out, vf_status *st)
{
    return model_new(cfg, 0, be, out, st);
}

int vf_vae_dec_model_new(const vf_vae_config *cfg, vf_backend *be, vf_vae **out, vf_status *st)
{
    return model_new(cfg, 1, be, out, st);
}

int vf_vae_is_decoder(const vf_vae *m) { return m->decoder; }

void vf_vae_free(vf_vae *m)
{
    if (!m) return;
    if (m->w) m->be->free(m->be, m->w);
    vf_free(m->tab);
    vf_free(m->bound);
    vf_free(m);
}

const vf_vae_config *vf_vae_cfg(const vf_vae *m) { return &m->cfg; }
vf_backend *vf_vae_backend(const vf_vae *m) { return m->be; }
int vf_vae_nparams(const vf_vae *m) { return m->np; }
const vf_vae_param *vf_vae_param_at(const vf_vae *m, int i)
{
    return i >= 0 && i < m->np ? &m->tab[i] : NULL;
}
int64_t vf_vae_numel(const vf_vae *m) { return m->numel; }
void *vf_vae_weights(vf_vae *m) { return m->w; }
const char *vf_vae_hash(const vf_vae *m) { return m->hash; }

static void *param_ptr(vf_vae *m, int i) { return (char *)m->w + m->tab[i].offset * m->es; }

int vf_vae_init_seeded(vf_vae *m, uint64_t seed, vf_status *st)
{
    int rc = 0;
    float *host = vf_alloc(sizeof(float) * (size_t)m->max_numel, st);
    if (!host) VF_FAIL(st, VF_ENOMEM, "vae: out of memory for init staging");
    hash128 h;
    hash_begin(m, &h);
    for (int i = 0; i < m->np; i++) {
        const vf_vae_param *p = &m->tab[i];
        /* Key per tensor, then per element: values depend on (seed, tensor, element)
         * only, never on the order or the device the work runs on. */
        uint64_t key = splitmix64(seed ^ splitmix64(0xA0761D6478BD642Full + (uint64_t)i));
        double b = m->bound[i];
        for (int64_t e = 0; e < p->numel; e++) {
            if (b == 0) {
                host[e] = 1.0f;
                continue;
            }
            uint64_t r = splitmix64(key + (uint64_t)e * 0x9E3779B97F4A7C15ull);
            double u = (double)(r >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
            host[e] = (float)((2.0 * u - 1.0) * b);
        }
        hash_param(&h, p, host);
        m->be->upload(m->be, param_ptr(m, i), host, p->numel, m->be->act_dtype);
    }
    hash_final(&h, m->hash);
fail:
    vf_free(host);
    return rc;
}

int vf_vae_load(vf_vae *m, const char *path, vf_status *st)
{
    int rc = 0;
    vf_st_file *f = NULL;
    char file[4300];
    float *host = vf_alloc(sizeof(float) * (size_t)m->max_numel, st);
    if (!host) VF_FAIL(st, VF_ENOMEM, "vae: out of memory for load staging");
    VF_TRY(vf_vae_weights_file(path, &m->cfg, file, sizeof file, st));
    VF_TRY(vf_st_open(file, &f, st));
    /* diffusers or original names, maybe under a prefix: the first convolution says */
    bool diffusers;
    char prefix[128];
    vf_vae_file_naming(f, prefix, sizeof prefix, &diffusers);
    hash128 h;
    hash_begin(m, &h);
    for (int i = 0; i < m->np; i++) {
        const vf_vae_param *p = &m->tab[i];
        const vf_st_tensor *t;
        char base[2 * VF_VAE_NAME_MAX], name[2 * VF_VAE_NAME_MAX + 128];
        if (diffusers) vf_vae_diffusers_name(&m->cfg, p->name, base, sizeof base);
        else snprintf(base, sizeof base, "%s", p->name);
        snprintf(name, sizeof name, "%s%s", prefix, base);
        VF_TRY(vf_st_expect(f, name, p->ndim, p->shape, &t, st));
        VF_TRY(vf_st_read_f32(f, name, host, p->numel, st));
        for (int64_t e = 0; e < p->numel; e++)
            if (!isfinite(host[e]))
                VF_FAIL(st, VF_EBADINPUT, "%s: tensor %s: element %" PRId64 " is not finite",
                        file, name, e);
        hash_param(&h, p, host);
        m->be->upload(m->be, param_ptr(m, i), host, p->numel, m->be->act_dtype);
    }
    hash_final(&h, m->hash);
fail:
    if (rc < 0) vf_status_prefix(st, "vae weights");
    vf_st_close(f);
    vf_free(host);
    return rc;
}

int vf_vae_save(vf_vae *m, const char *path, vf_status *st)
{
    int rc = 0;
    vf_st_writer *w = NULL;
    float *host = vf_alloc(sizeof(float) * (size_t)m->numel, st);
    if (!host) VF_FAIL(st, VF_ENOMEM, "vae: out of memory for save staging");
    m->be->download(m->be, host, m->w, m->numel, m->be->act_dtype);
    if (!(w = vf_st_writer_new(st))) VF_FAIL(st, VF_ENOMEM, "vae: out of memory");
    for (int i = 0; i < m->np; i++) {
        const vf_vae_param *p = &m->tab[i];
        VF_TRY(vf_st_writer_add(w, p->name, VF_ST_F32, p->ndim, p->shape, host + p->offset,
                                st));
    }
    char cfg[512];
    vf_vae_config_str(&m->cfg, cfg, sizeof cfg);
    VF_TRY(vf_st_writer_meta(w, "vflow.vae", cfg, st));
    VF_TRY(vf_st_writer_save(w, path, VF_ST_ATOMIC, NULL, st));
fail:
    vf_st_writer_free(w);
    vf_free(host);
    return rc;
}
