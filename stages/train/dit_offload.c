/* dit_offload.c — the `dit` stage's side of activation offload (models/dit.h
 * vf_dit_part_set_offload): the `offload_activations` param checked against recompute,
 * and the plan's lines for it (the saved store that stays on the device, its host store
 * per micro-batch in flight, the device ring).
 */
#include "stages/train/dit_stage.h"

int vf_dit_offload_check(bool offload, int recompute, int p, vf_status *st)
{
    if (offload && recompute == VF_DIT_KEEP)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit partition %d: offload_activations needs recompute = true (it moves the block "
                             "inputs that recompute keeps to host memory)", p);
    return 0;
}

int64_t vf_dit_offload_plan(vf_mem_plan *out, vf_device dev, const vf_dit_config *c, int b0, int b1,
                            const vf_dit_dims *max, int sp, int recompute, size_t as, size_t gs, int nsv)
{
    vf_dit_offload_mem m;
    vf_dit_offload_memory(c, b0, b1, max, sp, recompute, as, gs, &m);
    vf_mem_plan_add(out, dev, VF_MEM_WORKSPACE, "activation offload ring (block inputs in flight)", m.ring);
    vf_mem_plan_add_pinned(out, VF_MEM_ACTS, "activation offload: saved block inputs (pinned host)",
                           (int64_t)nsv * m.host);
    return m.saved;
}
