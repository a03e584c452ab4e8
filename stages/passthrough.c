/* passthrough.c — stage kind `passthrough`: forwards every item from "in" to "out"
 * unchanged (the output spec is the input's), optionally sleeping `delay_ms` per item.
 * Used to build chains (end of stream across many stages and processes) and as the
 * simplest example of a map stage (vf_run_map).
 */
#include "runtime/vflow.h"

#include <string.h>
#include <time.h>

static const vf_param_spec passthrough_params[] = {
    {"delay_ms", VF_P_NUM, "0", VF_RANGE(0, 3600000), "sleep before forwarding each item", NULL, NULL},
    {0},
};

static int passthrough_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out,
                             vf_status *st)
{
    const vf_port_spec *up = upstream ? vf_port_find(upstream, "in") : NULL;
    vf_port_spec *in = vf_port_add(out, "in", VF_PORT_IN, true);
    vf_port_spec *o = vf_port_add(out, "out", VF_PORT_OUT, false);
    if (up) {
        /* what goes out is exactly what came in: same tensors, bounds and device */
        in->ntensors = o->ntensors = up->ntensors;
        memcpy(in->t, up->t, sizeof in->t);
        memcpy(o->t, up->t, sizeof o->t);
        in->meta_bytes = o->meta_bytes = up->meta_bytes;
        in->device = o->device = up->device;
    }
    return 0;
}

static int passthrough_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out,
                              vf_status *st)
{
    /* the one received item in hand until it is forwarded (charged, on an in-process
     * edge, to the producer that allocated it) */
    const vf_port_spec *in = vf_port_find(ports, "in");
    int64_t item = in ? vf_port_max_item_bytes(in) : 0;
    if (item > 0) vf_mem_plan_add_input(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_ITEMS, "input item", item);
    return 0;
}

static int forward(vf_stage *s, vf_ctx *ctx, vf_item *it, vf_status *st)
{
    double ms = vf_param_num(vf_stage_params(s), "delay_ms");
    if (ms > 0) {
        struct timespec d = {(time_t)(ms / 1000), (long)((ms - (time_t)(ms / 1000) * 1000.0) * 1e6)};
        nanosleep(&d, NULL);
    }
    vf_port *out = vf_out(ctx, "out");
    if (!out) {
        vf_item_free(it);
        return 0;
    }
    int rc = vf_send(out, it, st);
    /* every consumer closed its input: keep draining ours so upstream can finish */
    return rc == VF_EOS ? 0 : rc;
}

static int passthrough_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    return vf_run_map(s, ctx, "in", forward, st);
}

static const vf_stage_ops passthrough_ops = {
    .api_version = VF_API_VERSION,
    .kind = "passthrough",
    .doc = "forwards items unchanged (optional per-item delay); for chains and tests",
    .params = passthrough_params,
    .ports = passthrough_ports,
    .memory = passthrough_memory,
    .run = passthrough_run,
};
VF_REGISTER_STAGE(passthrough_ops)
