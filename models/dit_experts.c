/* dit_experts.c — finding each expert of a Wan 2.2 A14B source (dit_experts.h).
 *
 * The layouts are told apart by their subdirs alone (high_noise_model/ or transformer/),
 * not by config files, because a vflow checkpoint step holds the experts without one and
 * a diffusers pipeline's model_index.json is optional for loading a transformer.
 */
#include "models/dit_experts.h"

#include <errno.h>
#include "formats/ckpt.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

const char *vf_dit_expert_dir(const char *expert)
{
    if (!strcmp(expert, "high")) return VF_CKPT_EXPERT_HIGH;
    if (!strcmp(expert, "low")) return VF_CKPT_EXPERT_LOW;
    return NULL;
}

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The subdir `sub` of dir into out when it is a directory. */
static bool sub_dir(const char *dir, const char *sub, char *out, size_t n)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, sub) >= (int)sizeof p || !is_dir(p)) return false;
    snprintf(out, n, "%s", p);
    return true;
}

/* The expert's subdir of one directory (Wan-AI's layout or a diffusers pipeline): true
 * when found. */
static bool expert_in(const char *dir, const char *expert, char *out, size_t n)
{
    if (sub_dir(dir, vf_dit_expert_dir(expert), out, n)) return true;
    return sub_dir(dir, strcmp(expert, "high") == 0 ? "transformer" : "transformer_2", out, n);
}

int vf_dit_expert_path(const char *weights, const char *expert, char *out, size_t n, vf_status *st)
{
    int rc = 0;
    char other[PATH_MAX];
    if (n) out[0] = 0;
    if (!weights || !weights[0]) return 0;
    if (expert[0] && !vf_dit_expert_dir(expert))
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "weights: expert '%s' is not high or low", expert);
    struct stat sb;
    if (stat(weights, &sb) != 0)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "weights: %s: %s", weights, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) { /* one file (or index) holds one expert */
        snprintf(out, n, "%s", weights);
        return 0;
    }
    if (!expert[0]) {
        if (expert_in(weights, "high", other, sizeof other) && expert_in(weights, "low", other, sizeof other))
            VF_FAIL(st, VF_EBADINPUT,
                    "weights: %s holds two experts (high_noise_model/ and low_noise_model/, or transformer/ and "
                    "transformer_2/): name one (expert = high | low)", weights);
        snprintf(out, n, "%s", weights);
        return 0;
    }
    if (expert_in(weights, expert, out, n)) return 0;
    VF_FAIL(st, VF_EBADINPUT,
            "weights: %s: no %s-noise expert: neither %s/ (Wan-AI's layout) nor %s/ (a diffusers pipeline)", weights,
            expert, vf_dit_expert_dir(expert), strcmp(expert, "high") == 0 ? "transformer" : "transformer_2");
fail:
    return rc;
}

int vf_dit_wsrc_open_expert(const char *weights, const char *expert, vf_dit_wsrc **out, vf_status *st)
{
    char path[PATH_MAX];
    *out = NULL;
    int rc = vf_dit_expert_path(weights, expert, path, sizeof path, st);
    if (rc) return rc;
    return vf_dit_wsrc_open(path, out, st);
}
