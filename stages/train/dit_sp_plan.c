/* dit_sp_plan.c — what sequence parallelism changes in a `dit` partition's memory plan.
 *
 * A rank of sp = N holds ⌈L/N⌉ of each sample's L tokens (models/dit_sp.h): its saved
 * activations, its workspace and the items it sends and receives are those of a micro-
 * batch of that many tokens, so the plan carves the partition for the rank's geometry
 * (the same routine that allocates it, models/dit_mem.c). What SP adds: the self-
 * attention's scratch (its heads layout, vf_dit_sp_scratch_bytes), the all-to-all's own
 * buffers (the host group's shared memory on the CPU, the device group's staging on a
 * GPU), and a cuDNN attention workspace over every token for H/N heads, one sample at a
 * time, instead of over the rank's tokens for all heads.
 */
#include "stages/train/dit_stage.h"

#include "models/dit_sp.h"

/* the rank's share of n tokens: ⌈n/N⌉ */
static int64_t share(int64_t n, int N) { return (n + N - 1) / N; }

void vf_dit_sp_dims(int sp, vf_dit_dims *mx, const vf_dit_dims *each, int neach)
{
    if (sp <= 1) return;
    int64_t N = 0;
    for (int i = 0; i < neach; i++) {
        int64_t n = (int64_t)each[i].B * share(each[i].L, sp);
        N = n > N ? n : N;
    }
    mx->L = share(mx->L, sp);
    mx->N = N > 0 && N < (int64_t)mx->B * mx->L ? N : 0;
}

void vf_dit_sp_plan(vf_mem_plan *out, vf_device dev, const vf_dit_config *c, int sp, const vf_dit_dims *mx,
                    const vf_dit_dims *each, int neach, size_t as)
{
    if (sp <= 1) return;
    /* mx is the whole sequence's geometry here: the scratch is the rank's share of it */
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
