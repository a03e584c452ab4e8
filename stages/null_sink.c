/* null_sink.c — stage kind `null_sink`: consumes everything and checksums it.
 *
 * Accepts any item on input "in" (its spec is whatever arrives). For each item it
 * updates the stream digest that synthetic.c documents (CRC32C over the id bytes then
 * each tensor's raw bytes; h = (h XOR crc) * 0x100000001b3, h0 = 0xcbf29ce484222325), in
 * arrival order, so loss, duplication, corruption or reordering changes it. At end of
 * stream it writes {"event":"null_sink_done","count","bytes","checksum"} as an event row
 * and a log line, then checks `expect_count` (-1: no check) and `expect_checksum` (hex,
 * "": no check): a difference fails the run with both values in the message.
 *
 * `delay_ms` sleeps after each item: a deliberately slow consumer for backpressure tests.
 */
#include "runtime/vflow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const vf_param_spec null_sink_params[] = {
    {"delay_ms", VF_P_NUM, "0", VF_RANGE(0, 3600000), "sleep after each item (slow consumer)", NULL, NULL},
    {"expect_count", VF_P_INT, "-1", VF_RANGE(-1, 1e15), "fail unless exactly this many items arrive; -1 = any", NULL, NULL},
    {"expect_checksum", VF_P_STR, "\"\"", VF_ANY, "fail unless the stream digest (hex) is this; \"\" = any", NULL, NULL},
    {0},
};

static int null_sink_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out,
                           vf_status *st)
{
    const vf_port_spec *up = upstream ? vf_port_find(upstream, "in") : NULL;
    vf_port_spec *in = vf_port_add(out, "in", VF_PORT_IN, true);
    /* mirror what arrives: any tensors are fine */
    if (up) {
        in->ntensors = up->ntensors;
        memcpy(in->t, up->t, sizeof in->t);
        in->meta_bytes = up->meta_bytes;
        in->device = up->device;
    }
    return 0;
}

static int null_sink_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out,
                            vf_status *st)
{
    /* the one received item it is hashing (charged, on an in-process edge, to the
     * producer that allocated it; a ZeroMQ receive to this stage) */
    const vf_port_spec *in = vf_port_find(ports, "in");
    int64_t item = in ? vf_port_max_item_bytes(in) : 0;
    if (item > 0) vf_mem_plan_add_input(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_ITEMS, "input item", item);
    return 0;
}

typedef struct sink {
    uint64_t digest;
    int64_t count, bytes;
} sink;

static int null_sink_init(vf_stage *s, const vf_params *p, vf_status *st)
{
    sink *k = calloc(1, sizeof *k);
    if (!k) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "null_sink %s: out of memory", vf_stage_name(s));
    k->digest = 0xcbf29ce484222325ull;
    vf_stage_set_state(s, k);
    return 0;
}

static void sleep_ms(double ms)
{
    if (ms <= 0) return;
    struct timespec d = {(time_t)(ms / 1000), (long)((ms - (time_t)(ms / 1000) * 1000.0) * 1e6)};
    nanosleep(&d, NULL);
}

static int consume(vf_stage *s, vf_ctx *ctx, vf_item *it, vf_status *st)
{
    sink *k = vf_stage_state(s);
    const char *id = vf_item_id(it);
    uint32_t c = vf_crc32c(0, id, strlen(id));
    for (int i = 0; i < vf_item_ntensors(it); i++) {
        vf_tensor *t = vf_item_tensor_at(it, i, NULL);
        size_t n = vf_tensor_nbytes(t);
        if (t->device.kind == VF_DEV_CPU) c = vf_crc32c(c, t->data, n);
        k->bytes += (int64_t)n;
    }
    k->digest = (k->digest ^ c) * 0x100000001b3ull;
    k->count++;
    vf_item_free(it);
    sleep_ms(vf_param_num(vf_stage_params(s), "delay_ms"));
    return 0;
}

static int null_sink_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    int rc = vf_run_map(s, ctx, "in", consume, st);
    if (rc < 0) return rc;
    sink *k = vf_stage_state(s);
    const vf_params *p = vf_stage_params(s);
    char hex[24], row[200];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)k->digest);
    snprintf(row, sizeof row, "{\"event\":\"null_sink_done\",\"count\":%lld,\"bytes\":%lld,\"checksum\":\"%s\"}",
             (long long)k->count, (long long)k->bytes, hex);
    vf_metric_row(ctx, row);
    vf_log(ctx, VF_LOG_INFO, "received %lld items (%lld bytes), checksum %s", (long long)k->count,
           (long long)k->bytes, hex);
    int64_t want = vf_param_int(p, "expect_count");
    if (want >= 0 && want != k->count)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "null_sink %s: expected %lld items, received %lld", vf_stage_name(s),
                             (long long)want, (long long)k->count);
    const char *sum = vf_param_str(p, "expect_checksum");
    if (sum[0] && strtoull(sum, NULL, 16) != k->digest)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "null_sink %s: expected checksum %s, received %s (%lld items)",
                             vf_stage_name(s), sum, hex, (long long)k->count);
    return 0;
}

static void null_sink_fini(vf_stage *s)
{
    free(vf_stage_state(s));
    vf_stage_set_state(s, NULL);
}

static const vf_stage_ops null_sink_ops = {
    .api_version = VF_API_VERSION,
    .kind = "null_sink",
    .doc = "consumes any items and checksums them (optional delay and expected count/checksum)",
    .params = null_sink_params,
    .ports = null_sink_ports,
    .memory = null_sink_memory,
    .init = null_sink_init,
    .run = null_sink_run,
    .fini = null_sink_fini,
};
VF_REGISTER_STAGE(null_sink_ops)
