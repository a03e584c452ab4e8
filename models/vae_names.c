/* vae_names.c — where the VAE's weights come from: the original Wan names (the table of
 * vae.h; ComfyUI's wan_2.1_vae.safetensors), diffusers' AutoencoderKLWan names, or a
 * diffusers model directory (config.json + diffusion_pytorch_model.safetensors), and
 * the latent normalisation a diffusers config records and its application (see vae.h). */
#include "models/vae.h"
#include "formats/safetensors.h"
#include "runtime/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Replaces the first `from` in s (n bytes of room) by `to`; true when it did. */
static bool replace(char *s, size_t n, const char *from, const char *to)
{
    char *p = strstr(s, from);
    if (!p) return false;
    size_t lf = strlen(from), lt = strlen(to), tail = strlen(p + lf);
    if ((size_t)(p - s) + lt + tail + 1 > n) return false;
    memmove(p + lt, p + lf, tail + 1);
    memcpy(p, to, lt);
    return true;
}

/* The names shared by both halves: residual blocks, middle block, head. */
static void common_names(char *out, size_t n, const char *half)
{
    char a[64], b[64];
    snprintf(a, sizeof a, "%s.conv1.", half), snprintf(b, sizeof b, "%s.conv_in.", half);
    if (replace(out, n, a, b)) return;
    snprintf(a, sizeof a, "%s.head.0.", half), snprintf(b, sizeof b, "%s.norm_out.", half);
    if (replace(out, n, a, b)) return;
    snprintf(a, sizeof a, "%s.head.2.", half), snprintf(b, sizeof b, "%s.conv_out.", half);
    if (replace(out, n, a, b)) return;
    const char *mid[3] = {"mid_block.resnets.0", "mid_block.attentions.0", "mid_block.resnets.1"};
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s.middle.%d.", half, i);
        snprintf(b, sizeof b, "%s.%s.", half, mid[i]);
        replace(out, n, a, b);
    }
    replace(out, n, ".residual.0.", ".norm1.");
    replace(out, n, ".residual.2.", ".conv1.");
    replace(out, n, ".residual.3.", ".norm2.");
    replace(out, n, ".residual.6.", ".conv2.");
    replace(out, n, ".shortcut.", ".conv_shortcut.");
}

/* Inverse of diffusers' convert_wan_vae_to_diffusers. The decoder's upsamples.K counts
 * num_res_blocks + 1 residual blocks then one Resample per level: K = level·(R + 2) + j
 * is up_blocks.level.resnets.j, or up_blocks.level.upsamplers.0 for j = R + 1. */
/* Wan 2.2's nested names (half.{down,up}samples.i.{down,up}samples.j.rest): entry j of
 * level i is resnets.j, or the level's downsampler / upsampler after its residual
 * blocks (diffusers' convert_vae_22). False for any other name. */
static bool residual_name(const vf_vae_config *c, const char *name, char *out, size_t n)
{
    int enc = !strncmp(name, "encoder.downsamples.", 20);
    if (!enc && strncmp(name, "decoder.upsamples.", 18)) return false;
    const char *p = name + (enc ? 20 : 18), *what = enc ? ".downsamples." : ".upsamples.";
    char *end;
    long i = strtol(p, &end, 10);
    if (strncmp(end, what, strlen(what))) return false;
    long j = strtol(end + strlen(what), &end, 10);
    const char *half = enc ? "encoder" : "decoder", *blocks = enc ? "down_blocks" : "up_blocks";
    if (j == c->num_res_blocks + !enc)
        snprintf(out, n, "%s.%s.%ld.%s%s", half, blocks, i, enc ? "downsampler" : "upsampler", end);
    else
        snprintf(out, n, "%s.%s.%ld.resnets.%ld%s", half, blocks, i, j, end);
    common_names(out, n, half);
    return true;
}

void vf_vae_diffusers_name(const vf_vae_config *c, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s", name);
    if (c->residual && residual_name(c, name, out, n)) return;
    if (!strncmp(name, "conv1.", 6)) {
        snprintf(out, n, "quant_conv.%s", name + 6);
        return;
    }
    if (!strncmp(name, "conv2.", 6)) {
        snprintf(out, n, "post_quant_conv.%s", name + 6);
        return;
    }
    if (!strncmp(name, "decoder.upsamples.", 18)) {
        char *end;
        long k = strtol(name + 18, &end, 10), per = c->num_res_blocks + 2;
        if (k % per == per - 1)
            snprintf(out, n, "decoder.up_blocks.%ld.upsamplers.0%s", k / per, end);
        else
            snprintf(out, n, "decoder.up_blocks.%ld.resnets.%ld%s", k / per, k % per, end);
        common_names(out, n, "decoder");
        return;
    }
    replace(out, n, "encoder.downsamples.", "encoder.down_blocks.");
    common_names(out, n, !strncmp(name, "decoder.", 8) ? "decoder" : "encoder");
}

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static vf_json *read_json(const char *path, vf_status *st)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0, k;
    char chunk[4096];
    while ((k = fread(chunk, 1, sizeof chunk, fp)) > 0 && len < (1u << 20)) {
        if (len + k + 1 > cap) {
            cap = (len + k + 1) * 2;
            char *p = realloc(buf, cap);
            if (!p) break;
            buf = p;
        }
        memcpy(buf + len, chunk, k);
        len += k;
        buf[len] = 0;
    }
    fclose(fp);
    vf_json *j = buf ? vf_json_parse(buf, st) : NULL;
    free(buf);
    if (!j) vf_status_prefix(st, "%s", path);
    else if (j->type != VF_JSON_OBJ) {
        vf_json_free(j);
        j = NULL;
        vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: not a JSON object", path);
    }
    if (!j && st && st->code != VF_ENOMEM) st->code = VF_EBADINPUT;
    return j;
}

/* Checks a diffusers config against the model's: every structural field. */
static int check_config(const vf_json *j, const char *path, const vf_vae_config *c, vf_status *st)
{
    int rc = 0;
    const vf_json *mult = vf_json_get(j, "dim_mult"), *td = vf_json_get(j, "temperal_downsample");
    if (vf_json_get_int(j, "base_dim", 96) != c->dim)
        VF_FAIL(st, VF_EBADINPUT, "%s: base_dim %lld; the model has dim %d", path,
                (long long)vf_json_get_int(j, "base_dim", 96), c->dim);
    if (vf_json_get_int(j, "z_dim", 16) != c->z_dim)
        VF_FAIL(st, VF_EBADINPUT, "%s: z_dim %lld; the model has z_dim %d", path,
                (long long)vf_json_get_int(j, "z_dim", 16), c->z_dim);
    if (vf_json_get_int(j, "num_res_blocks", 2) != c->num_res_blocks)
        VF_FAIL(st, VF_EBADINPUT, "%s: num_res_blocks %lld; the model has %d", path,
                (long long)vf_json_get_int(j, "num_res_blocks", 2), c->num_res_blocks);
    if (mult && vf_json_len(mult) != c->nlevels)
        VF_FAIL(st, VF_EBADINPUT, "%s: dim_mult has %d entries; the model has %d", path, vf_json_len(mult), c->nlevels);
    for (int i = 0; mult && i < c->nlevels; i++)
        if ((int)vf_json_as_num(vf_json_at(mult, i)) != c->dim_mult[i])
            VF_FAIL(st, VF_EBADINPUT, "%s: dim_mult[%d] = %g; the model has %d", path, i,
                    vf_json_as_num(vf_json_at(mult, i)), c->dim_mult[i]);
    if (vf_json_get_int(j, "patch_size", 1) != vf_vae_patch(c))
        VF_FAIL(st, VF_EBADINPUT, "%s: patch_size %lld; the model has patch %d", path,
                (long long)vf_json_get_int(j, "patch_size", 1), vf_vae_patch(c));
    if (vf_json_get_bool(j, "is_residual", false) != (c->residual != 0))
        VF_FAIL(st, VF_EBADINPUT, "%s: is_residual %s; the model has residual %d", path,
                vf_json_get_bool(j, "is_residual", false) ? "true" : "false", c->residual);
    if (vf_json_get_int(j, "decoder_base_dim", vf_json_get_int(j, "base_dim", 96)) != vf_vae_dec_base(c))
        VF_FAIL(st, VF_EBADINPUT, "%s: decoder_base_dim %lld; the model has dec_dim %d", path,
                (long long)vf_json_get_int(j, "decoder_base_dim", vf_json_get_int(j, "base_dim", 96)),
                vf_vae_dec_base(c));
    if (td && vf_json_len(td) != c->nlevels - 1)
        VF_FAIL(st, VF_EBADINPUT, "%s: temperal_downsample has %d entries; the model has %d", path, vf_json_len(td),
                c->nlevels - 1);
    for (int i = 0; td && i + 1 < c->nlevels; i++) {
        const vf_json *e = vf_json_at(td, i);
        int v = e->type == VF_JSON_BOOL ? e->b : (int)vf_json_as_num(e);
        if (v != c->temporal_downsample[i])
            VF_FAIL(st, VF_EBADINPUT, "%s: temperal_downsample[%d] = %d; the model has %d", path, i, v,
                    c->temporal_downsample[i]);
    }
fail:
    return rc;
}

int vf_vae_weights_file(const char *path, const vf_vae_config *c, char *file, size_t n, vf_status *st)
{
    int rc = 0;
    vf_json *j = NULL;
    if (!is_dir(path)) {
        snprintf(file, n, "%s", path);
        return 0;
    }
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    snprintf(file, n, "%s/diffusion_pytorch_model.safetensors", path);
    if (!(j = read_json(cfg, st))) return st ? st->code : VF_EBADINPUT;
    VF_TRY(check_config(j, cfg, c, st));
fail:
    vf_json_free(j);
    return rc;
}

static int read_vec(const vf_json *j, const char *key, const char *path, int z, float *out, vf_status *st)
{
    const vf_json *a = vf_json_get(j, key);
    if (!a || a->type != VF_JSON_ARR || vf_json_len(a) != z)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: %s has %d values; the model has z_dim %d", path,
                             key, a ? vf_json_len(a) : 0, z);
    for (int i = 0; i < z; i++) {
        const vf_json *e = vf_json_at(a, i);
        if (!vf_json_is_number(e))
            return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "%s: %s[%d] is not a number", path, key, i);
        out[i] = (float)vf_json_as_num(e);
    }
    return 0;
}

int vf_vae_config_norm(const char *path, int z, float *mean, float *std, bool *found, vf_status *st)
{
    int rc = 0;
    vf_json *j = NULL;
    *found = false;
    if (!path || !is_dir(path)) return 0;
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (!(j = read_json(cfg, st))) return st ? st->code : VF_EBADINPUT;
    if (!vf_json_get(j, "latents_mean") && !vf_json_get(j, "latents_std")) goto fail; /* none recorded */
    VF_TRY(read_vec(j, "latents_mean", cfg, z, mean, st));
    VF_TRY(read_vec(j, "latents_std", cfg, z, std, st));
    *found = true;
fail:
    vf_json_free(j);
    return rc;
}

void vf_vae_normalise(float *lat, int64_t z, int64_t plane, const float *mean, const float *std)
{
    for (int64_t c = 0; c < z; c++)
        for (int64_t i = c * plane; i < (c + 1) * plane; i++) lat[i] = (lat[i] - mean[c]) / std[c];
}

void vf_vae_denormalise(float *lat, int64_t z, int64_t plane, const float *mean,
                        const float *std)
{
    for (int64_t c = 0; c < z; c++)
        for (int64_t i = c * plane; i < (c + 1) * plane; i++) lat[i] = lat[i] * std[c] + mean[c];
}

/* Whether `name` is prefix + suffix with prefix "" or ending in '.'; the prefix into out. */
static bool split_suffix(const char *name, const char *suffix, char *out, size_t n)
{
    size_t ln = strlen(name), ls = strlen(suffix);
    if (ln < ls || strcmp(name + ln - ls, suffix) != 0) return false;
    if (ln > ls && name[ln - ls - 1] != '.') return false;
    if (ln - ls + 1 > n) return false;
    memcpy(out, name, ln - ls);
    out[ln - ls] = 0;
    return true;
}

void vf_vae_file_naming(const vf_st_file *f, char *prefix, size_t n, bool *diffusers)
{
    prefix[0] = 0;
    *diffusers = false;
    for (int i = 0; i < vf_st_count(f); i++) {
        const char *name = vf_st_at(f, i)->name;
        if (split_suffix(name, "encoder.conv_in.weight", prefix, n)) {
            *diffusers = true;
            return;
        }
        if (split_suffix(name, "encoder.conv1.weight", prefix, n)) return;
        /* a decoder-only file */
        if (split_suffix(name, "decoder.conv_in.weight", prefix, n)) {
            *diffusers = true;
            return;
        }
        if (split_suffix(name, "decoder.conv1.weight", prefix, n)) return;
    }
    prefix[0] = 0; /* neither: the original names, which then name what is missing */
}
