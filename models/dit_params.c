/* dit_params.c — where the DiT meets the stage API: the `model` table param's schema (what
 * lua/model_dit.lua presets may say), its conversion to a vf_dit_config, and the port spec
 * of the items crossing a partition boundary. Separate from dit_layout.c so that code
 * using the model without the params/ports machinery does not pull it in.
 */
#include "models/dit.h"

#include <string.h>

const vf_param_spec vf_dit_model_fields[] = {
    {"name", VF_P_STR, "\"tiny\"", VF_ANY, "preset name (informational)"},
    {"dim", VF_P_INT, "64", VF_RANGE(1, 65536), "model width"},
    {"depth", VF_P_INT, "4", VF_RANGE(1, 1024), "number of blocks"},
    {"heads", VF_P_INT, "4", VF_RANGE(1, 1024), "attention heads (heads * head_dim == dim)"},
    {"head_dim", VF_P_INT, "16", VF_RANGE(6, 1024), "width per head, even"},
    {"ffn", VF_P_INT, "256", VF_RANGE(1, 1048576), "MLP hidden width"},
    {"z", VF_P_INT, "4", VF_RANGE(1, 1024), "latent channels (the VAE's z_dim)"},
    {"patch", VF_P_LIST_INT, "[1,2,2]", VF_RANGE(1, 16), "latent patch {pt, ph, pw}"},
    {"text_dim", VF_P_INT, "64", VF_RANGE(1, 65536),
     "width text_embedding takes: the text embeddings' (umT5-xxl 4096) or the byte-token table's"},
    {"text_len", VF_P_INT, "32", VF_RANGE(1, 65536),
     "caption tokens per sample (embedding rows zero-padded to it, or bytes)"},
    {"freq_dim", VF_P_INT, "64", VF_RANGE(2, 65536), "sinusoidal timestep features, even"},
    {"t_scale", VF_P_NUM, "1000", VF_RANGE(1e-6, 1e9), "timestep fed to the sinusoid = t * t_scale"},
    {"eps", VF_P_NUM, "1e-6", VF_RANGE(1e-12, 0.5), "LayerNorm / RMSNorm epsilon"},
    {"text", VF_P_STR, "\"bytes\"", VF_ANY,
     "caption conditioning: text embeddings (B, text_len, text_dim) from the data (Wan), or "
     "caption bytes through a learned table", "bytes|embeddings"},
    {"in_dim", VF_P_INT, "0", VF_RANGE(0, 1024),
     "channels patch_embedding takes: z plus image-to-video conditioning (Wan I2V 36); 0 = z"},
    {"img_dim", VF_P_INT, "0", VF_RANGE(0, 65536),
     "width of the image features img_emb takes (Wan 2.1 I2V: CLIP 1280); 0 = no image branch"},
    {"img_len", VF_P_INT, "0", VF_RANGE(0, 65536), "image feature rows per sample (Wan 2.1 I2V: 257)"},
    {"time", VF_P_STR, "\"sample\"", VF_ANY,
     "time embedding: one per sample, or one per token (Wan 2.2 TI2V: the first frame's tokens "
     "at t = 0)", "sample|token"},
    {0},
};

int vf_dit_config_from_params(const vf_params *m, vf_dit_config *c, vf_status *st)
{
    if (vf_param_len(m, "patch") != 3)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit model: patch needs 3 entries {pt, ph, pw}, got %d",
                             vf_param_len(m, "patch"));
    c->dim = (int)vf_param_int(m, "dim");
    c->depth = (int)vf_param_int(m, "depth");
    c->heads = (int)vf_param_int(m, "heads");
    c->head_dim = (int)vf_param_int(m, "head_dim");
    c->ffn = (int)vf_param_int(m, "ffn");
    c->z = (int)vf_param_int(m, "z");
    for (int i = 0; i < 3; i++) c->patch[i] = (int)vf_param_int_at(m, "patch", i);
    c->text_dim = (int)vf_param_int(m, "text_dim");
    c->text_len = (int)vf_param_int(m, "text_len");
    c->freq_dim = (int)vf_param_int(m, "freq_dim");
    c->t_scale = (float)vf_param_num(m, "t_scale");
    c->eps = (float)vf_param_num(m, "eps");
    c->text_emb = strcmp(vf_param_str(m, "text"), "embeddings") == 0;
    c->in_dim = (int)vf_param_int(m, "in_dim");
    c->img_dim = (int)vf_param_int(m, "img_dim");
    c->img_len = (int)vf_param_int(m, "img_len");
    c->t_tokens = strcmp(vf_param_str(m, "time"), "token") == 0;
    int rc = vf_dit_config_check(c, st);
    if (rc) vf_status_prefix(st, "model '%s'", vf_param_str(m, "name"));
    return rc;
}

void vf_dit_xfer_port(vf_port_spec *p, const vf_dit_config *c, const vf_dit_dims *max,
                      vf_dtype dt)
{
    const int64_t B = max->B, L = max->L, D = c->dim;
    const char *const sx[3] = {"B", "L", ""}, *const sb[3] = {"B", "", ""};
    const char *const s0[4] = {"", "B", "L", ""};
    vf_port_tensor(p, "x", dt, 3, (const int64_t[]){B, L, D}, sx);
    if (c->t_tokens) { /* one time row a token, e0's six chunks one after another */
        vf_port_tensor(p, "e", dt, 3, (const int64_t[]){B, L, D}, sx);
        vf_port_tensor(p, "e0", dt, 4, (const int64_t[]){6, B, L, D}, s0);
    } else {
        vf_port_tensor(p, "e", dt, 2, (const int64_t[]){B, D}, sb);
        vf_port_tensor(p, "e0", dt, 3, (const int64_t[]){B, 6, D}, sb);
    }
    vf_port_tensor(p, "ctx", dt, 3, (const int64_t[]){B, vf_dit_ctx_len(c), D}, sb);
}
