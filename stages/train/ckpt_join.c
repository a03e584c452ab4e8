/* ckpt_join.c — stage kind `ckpt_join`: the two-expert checkpoint of a run that trains both
 * experts of Wan 2.2 A14B (pipelines/finetune_wan22.lua, experts = both).
 *
 * Each expert's checkpoint stage commits its own one-model checkpoints (the ones a resume
 * continues from); their "done" outputs come here, on "high" and "low" ({step, path} per
 * commit). When both experts have committed a step, this stage commits <dir>/step-N in the
 * layout formats/ckpt.h describes (high_noise_model/ + low_noise_model/, or a LoRA run's
 * lora_high_noise / lora_low_noise, state.json with "experts" and "boundary"), its model
 * files hard links of the experts' (vf_ckpt_join_experts), and keeps the newest `keep`.
 * A step only one expert committed (the other's write failed), or one an expert's writer
 * already pruned (the join fell behind its `keep`), is passed over with a warning; the
 * final step of both failing to join fails the run. The joined steps are what `vflow sample` and people take; nothing resumes from
 * them, so a kill between two joins costs nothing a resume needs.
 */
#include "formats/ckpt.h"
#include "stages/train/dit_train.h"
#include "runtime/vflow.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const vf_param_spec join_params[] = {
    {"dir", VF_P_STR, "\"\"", VF_ANY, "the two-expert checkpoints' dir; \"\" = <run dir>/ckpt"},
    {"boundary", VF_P_NUM, "0.875", VF_RANGE(0, 1), "t (after the shift) where the experts switch, recorded in state.json"},
    {"keep", VF_P_INT, "2", VF_RANGE(1, 1e6), "joined checkpoints kept"},
    {0},
};

static int join_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out, vf_status *st)
{
    static const char *const names[2] = {"high", "low"};
    for (int e = 0; e < 2; e++) vf_port_add(out, names[e], VF_PORT_IN, true)->meta_bytes = 256 + PATH_MAX;
    return 0;
}

static int join_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out, vf_status *st)
{
    /* one manifest and one state.json in memory at a time, parsed (formats/ckpt.c reads
     * at most 64 MiB of either; a real one is a few KiB) */
    vf_mem_plan_add(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_CKPT, "manifest or state.json being joined", 1 << 20);
    return 0;
}

/* The next "done" item of one expert: 0 with *step, path and *resumed (the step the
 * expert's resumed run starts from), 1 at its end. */
static int next(vf_port *in, int64_t *step, char *path, size_t n, bool *resumed, vf_status *st)
{
    vf_item *it = NULL;
    int rc = vf_recv(in, &it, st);
    if (rc == VF_EOS) return 1;
    if (rc) return rc;
    double s = -1, r = 0;
    const char *p = vf_item_str(it, "path");
    vf_item_num(it, "step", &s);
    vf_item_num(it, "resumed", &r);
    *resumed = r != 0;
    *step = (int64_t)s;
    snprintf(path, n, "%s", p ? p : "");
    vf_item_free(it);
    if (s < 0 || !path[0])
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "ckpt_join: a \"done\" item without step and path");
    return 0;
}

static int join_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    const vf_params *p = vf_stage_params(s);
    char dir[PATH_MAX], path[2][PATH_MAX], out[PATH_MAX];
    vf_ckpt_dir(vf_param_str(p, "dir"), vf_run_dir(ctx), dir, sizeof dir);
    int rc = vf_ckpt_remove_tmp(dir, NULL, NULL, st);
    if (rc) return rc;
    /* a fresh run sets an earlier run's joined steps aside at its first join, once the
     * shards have read what the run starts from (which may be one of them) */
    bool aside = !vf_resuming(ctx);
    vf_port *in[2] = {vf_in(ctx, "high"), vf_in(ctx, "low")};
    int64_t step[2], last = -1, last_ok = -1;
    int end[2] = {0, 0};
    bool resumed[2] = {false, false};
    for (int e = 0; e < 2; e++) {
        end[e] = next(in[e], &step[e], path[e], sizeof path[e], &resumed[e], st);
        if (end[e] < 0) return end[e];
    }
    while (!end[0] && !end[1]) {
        if (step[0] == step[1]) {
            const char *from[2] = {path[0], path[1]};
            vf_status js;
            vf_status_clear(&js);
            char have[PATH_MAX + 64];
            snprintf(have, sizeof have, "%s/step-%lld/%s", dir, (long long)step[0], VF_CKPT_MANIFEST);
            if (aside) {
                aside = false;
                if ((rc = vf_train_ckpt_aside(ctx, vf_stage_name(s), dir, st))) return rc;
            }
            if (resumed[0] && resumed[1] && access(have, F_OK) == 0) {
                /* both experts resume from a step joined before (its parts verified as
                 * each expert found them): it stands */
                last_ok = step[0];
            } else if (vf_ckpt_join_experts(dir, step[0], from, vf_param_num(p, "boundary"),
                                            (int)vf_param_int(p, "keep"), out, sizeof out, &js) == 0) {
                vf_log(ctx, VF_LOG_INFO, "step %lld of both experts -> %s", (long long)step[0], out);
                vf_summary(ctx, "ckpt_join", "two-expert checkpoint of step %lld: %s", (long long)step[0], out);
                last_ok = step[0];
            } else {
                /* an expert's writer keeps its newest `keep` only, so a join that falls
                 * behind may find a step already gone: the next one serves */
                vf_log(ctx, VF_LOG_WARN, "step %lld not joined: %s", (long long)step[0], js.msg);
            }
            last = step[0];
        } else {
            vf_log(ctx, VF_LOG_WARN, "step %lld: only the %s expert's checkpoint is there, not joined",
                   (long long)(step[0] < step[1] ? step[0] : step[1]), step[0] < step[1] ? "high" : "low");
        }
        /* the expert behind (both on a join) moves on */
        int64_t lo = step[0] < step[1] ? step[0] : step[1];
        for (int e = 0; e < 2; e++)
            if (step[e] == lo) {
                end[e] = next(in[e], &step[e], path[e], sizeof path[e], &resumed[e], st);
                if (end[e] < 0) return end[e];
            }
    }
    /* the other expert's remaining commits have no partner */
    for (int e = 0; e < 2; e++)
        while (!end[e]) {
            end[e] = next(in[e], &step[e], path[e], sizeof path[e], &resumed[e], st);
            if (end[e] < 0) return end[e];
        }
    /* the final step of both is never pruned before it is joined: its failure is the run's */
    if (last >= 0 && last_ok != last)
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: the final step %lld of both experts is not joined "
                             "into %s (see the warning above)", vf_stage_name(s), (long long)last, dir);
    return 0;
}

static const vf_stage_ops join_ops = {
    .api_version = VF_API_VERSION,
    .kind = "ckpt_join",
    .doc = "two-expert checkpoints (high_noise_model/ + low_noise_model/) from both experts' checkpoint stages' "
           "\"done\" (inputs high, low)",
    .params = join_params,
    .ports = join_ports,
    .memory = join_memory,
    .run = join_run,
};
VF_REGISTER_STAGE(join_ops)
