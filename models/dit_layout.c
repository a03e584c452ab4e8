/* dit_layout.c — the DiT's configuration, presets, flat parameter layout (names, shapes,
 * offsets, partition ranges) and its deterministic initialisation.
 *
 * The flat order is: embeddings (ET_*), blocks 0..depth-1 (BT_* each), head (HT_*); see
 * dit_internal.h. Names follow Wan 2.1's state dict ("blocks.3.self_attn.q.weight"),
 * plus "text_tokens.weight" for the built-in byte-token embedding, so a Wan checkpoint
 * maps by name and our model.safetensors loads into a WanModel-shaped PyTorch module.
 */
#include "models/dit_internal.h"

#include "runtime/philox.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ presets */

typedef struct dit_preset {
    const char *name;
    vf_dit_config c;
} dit_preset;

/* Keep in step with lua/model_dit.lua (tests/unit/test_dit.c compares the two). */
static const dit_preset presets[] = {
    {"tiny", {64, 4, 4, 16, 256, 4, {1, 2, 2}, 64, 32, 64, 1000.f, 1e-6f}},
    {"small", {256, 8, 4, 64, 1024, 16, {1, 2, 2}, 256, 128, 256, 1000.f, 1e-6f}},
    /* DiT-XL/2 widths with PixArt-α's text conditioning (T5 width 4096, 120 tokens) */
    {"dit-xl-2", {1152, 28, 16, 72, 4608, 4, {1, 2, 2}, 4096, 120, 256, 1000.f, 1e-6f}},
    /* Wan 2.1 T2V: conditioned on umT5-xxl embeddings (text_emb = 1) */
    {"wan-1.3b", {1536, 30, 12, 128, 8960, 16, {1, 2, 2}, 4096, 512, 256, 1000.f, 1e-6f, 1}},
    {"wan-14b", {5120, 40, 40, 128, 13824, 16, {1, 2, 2}, 4096, 512, 256, 1000.f, 1e-6f, 1}},
    /* Wan 2.1 I2V 14B (480p and 720p share the architecture): noisy 16 + mask 4 + first-frame
     * latent 16 = 36 input channels, CLIP ViT-H/14 features (257 × 1280) through img_emb */
    {"wan-i2v-14b",
     {5120, 40, 40, 128, 13824, 16, {1, 2, 2}, 4096, 512, 256, 1000.f, 1e-6f, 1, 36, 1280, 257}},
    /* Wan 2.2 T2V-A14B, one expert (high- and low-noise have this shape): Wan 2.1 T2V 14B's */
    {"wan2.2-a14b", {5120, 40, 40, 128, 13824, 16, {1, 2, 2}, 4096, 512, 256, 1000.f, 1e-6f, 1}},
    /* Wan 2.2 I2V-A14B, one expert (high- and low-noise have this shape): 36 input channels,
     * no image branch */
    {"wan2.2-i2v-a14b",
     {5120, 40, 40, 128, 13824, 16, {1, 2, 2}, 4096, 512, 256, 1000.f, 1e-6f, 1, 36, 0, 0}},
    /* Wan 2.2 TI2V-5B: the Wan 2.2 VAE's 48 latent channels in and out, a time embedding per
     * token (the image's latent frame sits at t = 0 while the rest is noisy) */
    {"wan2.2-ti2v-5b",
     {3072, 30, 24, 128, 14336, 48, {1, 2, 2}, 4096, 512, 256, 1000.f, 1e-6f, 1, 0, 0, 0, 1}},
};

int vf_dit_preset(const char *name, vf_dit_config *out, vf_status *st)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].name, name) == 0) {
            *out = presets[i].c;
            return 0;
        }
    }
    return vf_status_set(st, VF_ENOTFOUND, __FILE__, __LINE__,
                         "dit: unknown preset '%s' (tiny, small, dit-xl-2, wan-1.3b, wan-14b, "
                         "wan-i2v-14b, wan2.2-a14b, wan2.2-i2v-a14b, wan2.2-ti2v-5b)",
                         name);
}

int vf_dit_config_check(const vf_dit_config *c, vf_status *st)
{
#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
    CHECK(c->dim >= 1 && c->dim <= 65536, "dit config: dim = %d out of range [1, 65536]", c->dim);
    CHECK(c->depth >= 1 && c->depth <= 1024, "dit config: depth = %d out of range [1, 1024]",
          c->depth);
    CHECK(c->heads >= 1 && c->head_dim >= 6 && c->head_dim % 2 == 0,
          "dit config: heads = %d, head_dim = %d: need heads >= 1 and an even head_dim >= 6 "
          "(3D RoPE splits head_dim/2 frequencies over t, h, w)", c->heads, c->head_dim);
    CHECK((int64_t)c->heads * c->head_dim == c->dim,
          "dit config: heads (%d) x head_dim (%d) must equal dim (%d)", c->heads, c->head_dim,
          c->dim);
    CHECK(c->ffn >= 1, "dit config: ffn = %d must be >= 1", c->ffn);
    CHECK(c->z >= 1 && c->z <= 1024, "dit config: z = %d out of range [1, 1024]", c->z);
    for (int i = 0; i < 3; i++)
        CHECK(c->patch[i] >= 1 && c->patch[i] <= 16, "dit config: patch[%d] = %d out of [1, 16]",
              i, c->patch[i]);
    CHECK(c->text_dim >= 1, "dit config: text_dim = %d must be >= 1", c->text_dim);
    CHECK(c->text_len >= 1 && c->text_len <= 65536,
          "dit config: text_len = %d out of range [1, 65536]", c->text_len);
    CHECK(c->freq_dim >= 2 && c->freq_dim % 2 == 0, "dit config: freq_dim = %d must be even >= 2",
          c->freq_dim);
    CHECK(c->t_scale > 0 && isfinite(c->t_scale), "dit config: t_scale must be > 0");
    CHECK(c->eps > 0 && c->eps < 1, "dit config: eps = %g out of (0, 1)", (double)c->eps);
    CHECK(c->text_emb == 0 || c->text_emb == 1, "dit config: text_emb = %d is not 0 or 1",
          c->text_emb);
    CHECK(c->in_dim == 0 || (c->in_dim >= c->z && c->in_dim <= 1024),
          "dit config: in_dim = %d: 0 (= z) or z (%d) plus the conditioning channels, at most 1024",
          c->in_dim, c->z);
    CHECK(c->img_dim >= 0 && c->img_dim <= 65536, "dit config: img_dim = %d out of range [0, 65536]",
          c->img_dim);
    CHECK(c->img_dim == 0 ? c->img_len == 0 : c->img_len >= 1 && c->img_len <= 65536,
          "dit config: img_len = %d with img_dim = %d: image rows in [1, 65536] with an image branch, "
          "0 without", c->img_len, c->img_dim);
    CHECK(c->img_dim == 0 || c->text_emb,
          "dit config: an image branch (img_dim = %d) needs text = embeddings (Wan 2.1 I2V)",
          c->img_dim);
    CHECK(c->t_tokens == 0 || c->t_tokens == 1, "dit config: t_tokens = %d is not 0 or 1",
          c->t_tokens);
#undef CHECK
    return 0;
}

int vf_dit_config_str(const vf_dit_config *c, char *buf, size_t n)
{
    /* text=embeddings, in_dim, the image branch and time=token only when set, so the text
     * of a text-to-video model is unchanged */
    char extra[96] = "";
    if (vf_dit_in_dim(c) != c->z || c->img_dim > 0)
        snprintf(extra, sizeof extra, " in_dim=%d img_dim=%d img_len=%d", vf_dit_in_dim(c),
                 c->img_dim, c->img_len);
    return snprintf(buf, n,
                    "dim=%d depth=%d heads=%d head_dim=%d ffn=%d z=%d patch=%d,%d,%d "
                    "text_dim=%d text_len=%d freq_dim=%d t_scale=%g eps=%g%s%s%s",
                    c->dim, c->depth, c->heads, c->head_dim, c->ffn, c->z, c->patch[0],
                    c->patch[1], c->patch[2], c->text_dim, c->text_len, c->freq_dim,
                    (double)c->t_scale, (double)c->eps, c->text_emb ? " text=embeddings" : "", extra,
                    c->t_tokens ? " time=token" : "");
}

/* ------------------------------------------------------------------ layout */

typedef struct tdesc {
    const char *name; /* printf pattern: %d = block index, then %s = sub */
    int ndim;
    int64_t shape[5];
    const char *sub;
} tdesc;

static void embed_desc(const vf_dit_config *c, int k, tdesc *d)
{
    int64_t D = c->dim, Di = c->img_dim;
    if (k >= ET_IMG0_W && Di == 0) { /* no image branch: empty entries keep the indices */
        *d = (tdesc){"", 1, {0}};
        return;
    }
    switch (k) {
    case ET_PATCH_W: *d = (tdesc){"patch_embedding.weight", 5,
                                  {D, vf_dit_in_dim(c), c->patch[0], c->patch[1], c->patch[2]}};
        break;
    case ET_PATCH_B: *d = (tdesc){"patch_embedding.bias", 1, {D}}; break;
    case ET_TOK: /* text embeddings: no table (an empty entry keeps the indices) */
        if (c->text_emb) *d = (tdesc){"", 1, {0}};
        else *d = (tdesc){"text_tokens.weight", 2, {VF_DIT_VOCAB, c->text_dim}};
        break;
    case ET_TXT1_W: *d = (tdesc){"text_embedding.0.weight", 2, {D, c->text_dim}}; break;
    case ET_TXT1_B: *d = (tdesc){"text_embedding.0.bias", 1, {D}}; break;
    case ET_TXT2_W: *d = (tdesc){"text_embedding.2.weight", 2, {D, D}}; break;
    case ET_TXT2_B: *d = (tdesc){"text_embedding.2.bias", 1, {D}}; break;
    case ET_TIME1_W: *d = (tdesc){"time_embedding.0.weight", 2, {D, c->freq_dim}}; break;
    case ET_TIME1_B: *d = (tdesc){"time_embedding.0.bias", 1, {D}}; break;
    case ET_TIME2_W: *d = (tdesc){"time_embedding.2.weight", 2, {D, D}}; break;
    case ET_TIME2_B: *d = (tdesc){"time_embedding.2.bias", 1, {D}}; break;
    case ET_PROJ_W: *d = (tdesc){"time_projection.1.weight", 2, {6 * D, D}}; break;
    case ET_PROJ_B: *d = (tdesc){"time_projection.1.bias", 1, {6 * D}}; break;
    case ET_IMG0_W: *d = (tdesc){"img_emb.proj.0.weight", 1, {Di}}; break;
    case ET_IMG0_B: *d = (tdesc){"img_emb.proj.0.bias", 1, {Di}}; break;
    case ET_IMG1_W: *d = (tdesc){"img_emb.proj.1.weight", 2, {Di, Di}}; break;
    case ET_IMG1_B: *d = (tdesc){"img_emb.proj.1.bias", 1, {Di}}; break;
    case ET_IMG3_W: *d = (tdesc){"img_emb.proj.3.weight", 2, {D, Di}}; break;
    case ET_IMG3_B: *d = (tdesc){"img_emb.proj.3.bias", 1, {D}}; break;
    case ET_IMG4_W: *d = (tdesc){"img_emb.proj.4.weight", 1, {D}}; break;
    case ET_IMG4_B: *d = (tdesc){"img_emb.proj.4.bias", 1, {D}}; break;
    default: VF_ASSERT(0);
    }
}

static void block_desc(const vf_dit_config *c, int k, tdesc *d)
{
    static const char *const attn[] = {"q.weight", "q.bias", "k.weight", "k.bias",
                                       "v.weight", "v.bias", "o.weight", "o.bias",
                                       "norm_q.weight", "norm_k.weight"};
    int64_t D = c->dim;
    d->sub = NULL;
    if (k >= BT_CKI_W && k <= BT_CNKI && c->img_dim == 0) {
        *d = (tdesc){"", 1, {0}};
        return;
    }
    if (k <= BT_SNK || (k >= BT_CQ_W && k <= BT_CNK)) {
        int cross = k > BT_SNK;
        int j = cross ? k - BT_CQ_W : k;
        d->name = cross ? "blocks.%d.cross_attn.%s" : "blocks.%d.self_attn.%s";
        d->sub = attn[j];
        if (j < 8 && j % 2 == 0) {
            d->ndim = 2, d->shape[0] = D, d->shape[1] = D;
        } else {
            d->ndim = 1, d->shape[0] = D;
        }
        return;
    }
    switch (k) {
    case BT_N3_W: *d = (tdesc){"blocks.%d.norm3.weight", 1, {D}}; break;
    case BT_N3_B: *d = (tdesc){"blocks.%d.norm3.bias", 1, {D}}; break;
    case BT_CKI_W: *d = (tdesc){"blocks.%d.cross_attn.k_img.weight", 2, {D, D}}; break;
    case BT_CKI_B: *d = (tdesc){"blocks.%d.cross_attn.k_img.bias", 1, {D}}; break;
    case BT_CVI_W: *d = (tdesc){"blocks.%d.cross_attn.v_img.weight", 2, {D, D}}; break;
    case BT_CVI_B: *d = (tdesc){"blocks.%d.cross_attn.v_img.bias", 1, {D}}; break;
    case BT_CNKI: *d = (tdesc){"blocks.%d.cross_attn.norm_k_img.weight", 1, {D}}; break;
    case BT_F1_W: *d = (tdesc){"blocks.%d.ffn.0.weight", 2, {c->ffn, D}}; break;
    case BT_F1_B: *d = (tdesc){"blocks.%d.ffn.0.bias", 1, {c->ffn}}; break;
    case BT_F2_W: *d = (tdesc){"blocks.%d.ffn.2.weight", 2, {D, c->ffn}}; break;
    case BT_F2_B: *d = (tdesc){"blocks.%d.ffn.2.bias", 1, {D}}; break;
    case BT_MOD: *d = (tdesc){"blocks.%d.modulation", 3, {1, 6, D}}; break;
    default: VF_ASSERT(0);
    }
}

static void head_desc(const vf_dit_config *c, int k, tdesc *d)
{
    int64_t D = c->dim, out = (int64_t)c->z * c->patch[0] * c->patch[1] * c->patch[2];
    switch (k) {
    case HT_MOD: *d = (tdesc){"head.modulation", 3, {1, 2, D}}; break;
    case HT_W: *d = (tdesc){"head.head.weight", 2, {out, D}}; break;
    case HT_B: *d = (tdesc){"head.head.bias", 1, {out}}; break;
    default: VF_ASSERT(0);
    }
}

static int64_t desc_numel(const tdesc *d)
{
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

int64_t vf_dit_param_count(const vf_dit_config *c)
{
    tdesc d;
    int64_t n = 0;
    for (int k = 0; k < ET_COUNT; k++) embed_desc(c, k, &d), n += desc_numel(&d);
    int64_t blk = 0;
    for (int k = 0; k < BT_COUNT; k++) block_desc(c, k, &d), blk += desc_numel(&d);
    n += blk * c->depth;
    for (int k = 0; k < HT_COUNT; k++) head_desc(c, k, &d), n += desc_numel(&d);
    return n;
}

int vf_dit_layout_new(const vf_dit_config *c, vf_dit_layout **out, vf_status *st)
{
    int rc = 0;
    vf_dit_layout *l = NULL;
    *out = NULL;
    VF_TRY(vf_dit_config_check(c, st));
    l = vf_calloc(sizeof *l, st);
    if (!l) VF_FAIL(st, VF_ENOMEM, "dit layout: out of memory");
    l->cfg = *c;
    l->n = ET_COUNT + c->depth * BT_COUNT + HT_COUNT;
    l->t = vf_calloc(sizeof *l->t * (size_t)l->n, st);
    l->block_start = vf_calloc(sizeof *l->block_start * (size_t)(c->depth + 2), st);
    if (!l->t || !l->block_start) VF_FAIL(st, VF_ENOMEM, "dit layout: out of memory");
    int64_t off = 0;
    for (int i = 0; i < l->n; i++) {
        tdesc d = {0};
        int blk;
        if (i < ET_COUNT) {
            embed_desc(c, i, &d);
            blk = VF_DIT_EMBED;
        } else if (i < ET_COUNT + c->depth * BT_COUNT) {
            blk = (i - ET_COUNT) / BT_COUNT;
            block_desc(c, (i - ET_COUNT) % BT_COUNT, &d);
            if ((i - ET_COUNT) % BT_COUNT == 0) l->block_start[blk] = off;
        } else {
            blk = c->depth;
            head_desc(c, i - ET_COUNT - c->depth * BT_COUNT, &d);
            if (i == ET_COUNT + c->depth * BT_COUNT) l->block_start[blk] = off;
        }
        vf_dit_tensor *t = &l->t[i];
        snprintf(t->name, sizeof t->name, d.name, blk, d.sub ? d.sub : "");
        t->ndim = d.ndim;
        memcpy(t->shape, d.shape, sizeof t->shape);
        t->numel = desc_numel(&d);
        t->offset = off;
        t->block = blk;
        off += t->numel;
    }
    l->total = off;
    l->block_start[c->depth + 1] = off;
    *out = l;
    return 0;
fail:
    vf_dit_layout_free(l);
    return rc;
}

void vf_dit_layout_free(vf_dit_layout *l)
{
    if (!l) return;
    vf_free(l->t);
    vf_free(l->block_start);
    vf_free(l);
}

int vf_dit_layout_find(const vf_dit_layout *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (l->t[i].numel > 0 && strcmp(l->t[i].name, name) == 0) return i;
    return -1;
}

int vf_dit_layout_count(const vf_dit_layout *l)
{
    int n = 0;
    for (int i = 0; i < l->n; i++) n += l->t[i].numel > 0;
    return n;
}

void vf_dit_layout_range(const vf_dit_layout *l, int b0, int b1, int64_t *off, int64_t *n)
{
    VF_ASSERT(0 <= b0 && b0 < b1 && b1 <= l->cfg.depth);
    int64_t begin = b0 == 0 ? 0 : l->block_start[b0];
    int64_t end = b1 == l->cfg.depth ? l->total : l->block_start[b1];
    *off = begin;
    *n = end - begin;
}

/* ------------------------------------------------------------------ init */

enum { INIT_ZERO, INIT_ONE, INIT_XAVIER, INIT_NORMAL };

static void init_rule(const vf_dit_layout *l, int i, int *kind, double *arg)
{
    const vf_dit_config *c = &l->cfg;
    const vf_dit_tensor *t = &l->t[i];
    *arg = 0;
    if (i < ET_COUNT) {
        switch (i) {
        case ET_PATCH_W: /* xavier over the flattened (dim, z·P) kernel */
            *kind = INIT_XAVIER;
            *arg = sqrt(6.0 / (double)(t->shape[0] + t->numel / t->shape[0]));
            return;
        case ET_TOK: *kind = INIT_NORMAL, *arg = 1.0; return;
        case ET_TXT1_W: case ET_TXT2_W: case ET_TIME1_W: case ET_TIME2_W:
            *kind = INIT_NORMAL, *arg = 0.02;
            return;
        case ET_PROJ_W: case ET_IMG1_W: case ET_IMG3_W:
            *kind = INIT_XAVIER, *arg = sqrt(6.0 / (double)(t->shape[0] + t->shape[1]));
            return;
        case ET_IMG0_W: case ET_IMG4_W: *kind = INIT_ONE; return; /* LayerNorm gains */
        default: *kind = INIT_ZERO; return; /* biases */
        }
    }
    if (t->block < c->depth) {
        int k = (i - ET_COUNT) % BT_COUNT;
        switch (k) {
        case BT_SQ_W: case BT_SK_W: case BT_SV_W: case BT_SO_W: case BT_CQ_W: case BT_CK_W:
        case BT_CV_W: case BT_CO_W: case BT_F1_W: case BT_F2_W: case BT_CKI_W: case BT_CVI_W:
            *kind = INIT_XAVIER, *arg = sqrt(6.0 / (double)(t->shape[0] + t->shape[1]));
            return;
        case BT_SNQ: case BT_SNK: case BT_CNQ: case BT_CNK: case BT_N3_W: case BT_CNKI:
            *kind = INIT_ONE;
            return;
        case BT_MOD: *kind = INIT_NORMAL, *arg = 1.0 / sqrt((double)c->dim); return;
        default: *kind = INIT_ZERO; return;
        }
    }
    int k = i - ET_COUNT - c->depth * BT_COUNT;
    if (k == HT_MOD) {
        *kind = INIT_NORMAL, *arg = 1.0 / sqrt((double)c->dim);
    } else {
        *kind = INIT_ZERO; /* Wan zero-inits head.head.weight; biases are zero */
    }
}

void vf_dit_init(const vf_dit_layout *l, uint64_t seed, int64_t off, int64_t n, float *dst)
{
    for (int i = 0; i < l->n; i++) {
        const vf_dit_tensor *t = &l->t[i];
        int64_t lo = t->offset > off ? t->offset : off;
        int64_t hi = t->offset + t->numel < off + n ? t->offset + t->numel : off + n;
        if (lo >= hi) continue;
        int kind;
        double arg;
        init_rule(l, i, &kind, &arg);
        float *o = dst + (lo - off);
        int64_t cnt = hi - lo;
        uint64_t first = (uint64_t)(lo - t->offset); /* element index within the tensor */
        vf_rng r;
        vf_rng_init(&r, seed, 0, (uint64_t)i, VF_RNG_INIT);
        switch (kind) {
        case INIT_ZERO: memset(o, 0, sizeof *o * (size_t)cnt); break;
        case INIT_ONE: for (int64_t j = 0; j < cnt; j++) o[j] = 1.0f; break;
        case INIT_NORMAL:
            vf_rng_normal(&r, first, cnt, o);
            for (int64_t j = 0; j < cnt; j++) o[j] = (float)(o[j] * arg);
            break;
        case INIT_XAVIER:
            vf_rng_uniform(&r, first, cnt, o);
            for (int64_t j = 0; j < cnt; j++) o[j] = (float)((2.0 * o[j] - 1.0) * arg);
            break;
        }
    }
}
