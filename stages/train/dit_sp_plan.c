/* dit_sp_plan.c — what sequence parallelism changes in a `dit` partition's memory plan.
 *
 * A rank of sp = N computes on ⌈L/N⌉ of each sample's L tokens (models/dit_sp.h) and
 * holds its partition, its saved stores and its x items for those tokens, as the stage
 * allocates them (dit_step.c, models/dit.h vf_dit_part_new_sp): the partition's lines are
 * one rank's. So are the targets: the first partition cuts each rank's rows of them on
 * the host (models/dit_sp.h vf_dit_sp_target_rows), and they travel to the last partition
 * and are staged there as those rows (z·patch values a token). The first partition's
 * embedding is per token too: its saved patches are the rank's tokens'; only the
 * patchify of the whole clips it takes them from is staged whole, a line of its own.
 * What SP adds: the self-attention's
 * scratch (its heads layout, vf_dit_sp_scratch_bytes), the all-to-all's own buffers (the
 * host group's shared memory on the CPU, the device group's staging on a GPU), and a
 * cuDNN attention workspace over every token for H/N heads, one sample at a time.
 */
#include "stages/train/dit_stage.h"

#include "models/dit_sp.h"

#include <stdio.h>

void vf_dit_sp_plan(vf_mem_plan *out, vf_device dev, const vf_dit_config *c, int sp, const vf_dit_dims *mx,
                    const vf_dit_dims *each, int neach, size_t as)
{
    if (sp <= 1) return;
    vf_mem_plan_add(out, dev, VF_MEM_WORKSPACE, "sequence parallel: attention heads layout",
                    vf_dit_sp_scratch_bytes(sp, mx->L, mx->B, c, as));
    int64_t host = 0, device = 0;
    vf_dit_sp_group_bytes(dev, sp, mx->L, mx->B, c, as, &host, &device);
    vf_device cpu = {VF_DEV_CPU, 0};
    if (host) vf_mem_plan_add(out, cpu, VF_MEM_ITEMS, "sequence parallel: all-to-all slots (shared memory)", host);
    if (device) vf_mem_plan_add(out, dev, VF_MEM_ITEMS, "sequence parallel: all-to-all staging", device);
    /* the attention over every token for H/N heads, sample by sample */
    vf_dit_config ch = *c;
    ch.heads = c->heads / sp;
    int64_t aws = 0;
    for (int i = 0; i < neach; i++) {
        vf_dit_dims one = each[i];
        one.B = 1;
        int64_t w = vf_dit_attn_workspace(&ch, &one, dev);
        aws = w > aws ? w : aws;
    }
    if (aws > 0) vf_mem_plan_add(out, dev, VF_MEM_WORKSPACE, "cuDNN attention workspace (bound, H/N heads)", aws);
}

void vf_dit_sp_ends_plan(vf_mem_plan *out, vf_device dev, const vf_dit_mem *m)
{
    if (m->ends)
        vf_mem_plan_add(out, dev, VF_MEM_WORKSPACE, "sequence parallel: whole clips' patchify (first partition)",
                        m->ends);
}

void vf_dit_sp_target_port(vf_port_spec *ps, const vf_dit_config *c, const vf_dit_dims *mr, const vf_dit_dims *mx,
                           int M, vf_dtype dt)
{
    static const char *const sym[3] = {"B", "L", ""};
    int64_t zP = (int64_t)c->z * c->patch[0] * c->patch[1] * c->patch[2];
    vf_port_tensor(ps, "target", dt, 3, (const int64_t[]){mr->B, mr->L, zP}, sym);
    if (!ps->geometries[0] && mx->B > 0)
        snprintf(ps->geometries, sizeof ps->geometries, "latent:%lld,%d,%d,%d,%d", (long long)mx->B * M, c->z, mx->T,
                 mx->H, mx->W);
}
