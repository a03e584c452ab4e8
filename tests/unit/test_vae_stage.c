/* test_vae_stage.c — the vae_encode stage's schema, ports and memory hooks: shape
 * propagation from the decoder's frames spec (T' = 1 + (T-1)/4, symbols kept), clip
 * lengths refused before launch, and a memory plan whose device part does not depend
 * on the clip length.
 */
#include "vf_test.h"

#include "../../models/vae.h"
#include "../../runtime/params.h"

#include <inttypes.h>

static const vf_stage_ops *ops(void)
{
    const vf_stage_ops *o = vf_stage_lookup("vae_encode");
    VF_CHECK(o != NULL);
    return o;
}

static vf_params *params(const char *json, vf_status *st)
{
    vf_params *p = vf_params_from_json(json, st);
    if (!p) return NULL;
    if (vf_params_validate(p, ops()->params, "vae", "test.lua:1", st) < 0) {
        vf_params_free(p);
        return NULL;
    }
    return p;
}

/* The spec a decoder with `frames` (sym: "" or "T") and size H x W sends. */
static void upstream(vf_port_specs *up, int64_t T, const char *tsym, int64_t H, int64_t W)
{
    memset(up, 0, sizeof *up);
    vf_port_spec *p = vf_port_add(up, "in", VF_PORT_IN, true);
    int64_t d[4] = {T, H, W, 3};
    const char *s[4] = {tsym, "", "", ""};
    vf_port_tensor(p, "frames", VF_DTYPE_U8, 4, d, s);
    p->meta_bytes = 4096;
}

static const vf_tensor_spec *find_tensor(const vf_port_specs *ps, const char *port,
                                         const char *name)
{
    const vf_port_spec *p = vf_port_find(ps, port);
    if (!p) return NULL;
    for (int i = 0; i < p->ntensors; i++)
        if (!strcmp(p->t[i].name, name)) return &p->t[i];
    return NULL;
}

VF_TEST(ports_propagate_shapes)
{
    vf_status st = {0};
    vf_params *p = params("{\"micro_batch\": 2, \"chunk\": 4, \"logvar\": true}", &st);
    VF_CHECK_MSG(p != NULL, "%s", st.msg);
    if (!p) return;
    vf_port_specs up, out = {0};
    upstream(&up, 17, "", 64, 48);
    VF_CHECK_MSG(ops()->ports(p, &up, &out, &st) == 0, "%s", st.msg);
    const vf_tensor_spec *l = find_tensor(&out, "out", "latent");
    VF_CHECK(l != NULL && find_tensor(&out, "out", "logvar") != NULL);
    if (l) {
        VF_CHECK_EQ_INT(l->dtype, VF_DTYPE_F32);
        VF_CHECK_EQ_INT(l->ndim, 4);
        VF_CHECK_EQ_INT(l->dims[0], 4);
        VF_CHECK_EQ_INT(l->dims[1], 5);
        VF_CHECK_EQ_INT(l->dims[2], 8);
        VF_CHECK_EQ_INT(l->dims[3], 6);
        VF_CHECK_STR(l->sym[1], "");
    }
    const vf_tensor_spec *f = find_tensor(&out, "in", "frames");
    VF_CHECK(f && f->dims[0] == 17 && f->dims[1] == 64 && f->dims[3] == 3);

    /* symbolic T with a bound: T' keeps a symbol, bound 1 + (33-1)/4 */
    upstream(&up, 33, "T", 64, 48);
    memset(&out, 0, sizeof out);
    VF_CHECK_MSG(ops()->ports(p, &up, &out, &st) == 0, "%s", st.msg);
    l = find_tensor(&out, "out", "latent");
    VF_CHECK(l && l->dims[1] == 9 && !strcmp(l->sym[1], "T'"));
    vf_params_free(p);
}

VF_TEST(ports_refuse_bad_clips)
{
    vf_status st = {0};
    vf_params *p = params("{}", &st);
    VF_CHECK_MSG(p != NULL, "%s", st.msg);
    if (!p) return;
    vf_port_specs up, out = {0};
    upstream(&up, 16, "", 64, 64);
    VF_CHECK(ops()->ports(p, &up, &out, &st) == VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "16 frames") && strstr(st.msg, "17"), "%s", st.msg);
    vf_status_clear(&st);
    memset(&out, 0, sizeof out);
    upstream(&up, 17, "", 60, 64);
    VF_CHECK(ops()->ports(p, &up, &out, &st) == VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "multiples of 8") != NULL, "%s", st.msg);
    vf_params_free(p);
}

VF_TEST(schema_checks_model_table)
{
    vf_status st = {0};
    vf_params *p = params("{\"model\": {\"name\": \"tiny\", \"z\": 4}}", &st);
    VF_CHECK(p == NULL);
    VF_CHECK_MSG(strstr(st.msg, "z_dim") != NULL, "%s", st.msg);
    vf_status_clear(&st);
    /* temporal_downsample must have one entry per level but the last */
    p = params("{\"model\": {\"dim_mult\": [1, 2, 2], \"temporal_downsample\": [0, 1, 1]}}", &st);
    VF_CHECK_MSG(p != NULL, "%s", st.msg);
    if (p) {
        vf_port_specs up, out = {0};
        upstream(&up, 17, "", 64, 64);
        VF_CHECK(ops()->ports(p, &up, &out, &st) == VF_EUSAGE);
        VF_CHECK_MSG(strstr(st.msg, "temporal_downsample") != NULL, "%s", st.msg);
        vf_params_free(p);
    }
}

static int64_t plan_bytes(const vf_mem_plan *m, const char *prefix)
{
    int64_t s = 0;
    for (int i = 0; i < m->n; i++)
        if (!strncmp(m->e[i].what, prefix, strlen(prefix))) s += m->e[i].bytes;
    return s;
}

static void plan_for(const char *json, int64_t T, vf_mem_plan *plan)
{
    vf_status st = {0};
    vf_params *p = params(json, &st);
    VF_CHECK_MSG(p != NULL, "%s", st.msg);
    memset(plan, 0, sizeof *plan);
    if (!p) return;
    vf_port_specs up, out = {0};
    upstream(&up, T, "", 256, 256);
    VF_CHECK_MSG(ops()->ports(p, &up, &out, &st) == 0, "%s", st.msg);
    VF_CHECK_MSG(ops()->memory(p, &out, plan, &st) == 0, "%s", st.msg);
    vf_params_free(p);
}

VF_TEST(memory_plan_bounded_by_chunk)
{
    const char *cfg =
        "{\"micro_batch\": 2, \"chunk\": 4, \"model\": {\"name\": \"wan\", \"dim\": 96, "
        "\"dim_mult\": [1,2,4,4], \"num_res_blocks\": 2, \"temporal_downsample\": [0,1,1], "
        "\"z_dim\": 16}}";
    vf_mem_plan a, b;
    plan_for(cfg, 17, &a);
    plan_for(cfg, 65, &b);
    int64_t wa = plan_bytes(&a, "vae weights");
    VF_CHECK_EQ_INT(wa, 53596928LL * 4);
    VF_CHECK_EQ_INT(plan_bytes(&a, "vae chunk workspace"), plan_bytes(&b, "vae chunk workspace"));
    VF_CHECK_EQ_INT(plan_bytes(&a, "vae causal caches"), plan_bytes(&b, "vae causal caches"));
    VF_CHECK(plan_bytes(&a, "vae chunk workspace") > 0);
    /* the clips held while a micro-batch fills scale with T; nothing else does */
    VF_CHECK_EQ_INT(plan_bytes(&a, "vae micro-batch clips"), 2LL * 17 * 256 * 256 * 3);
    vf_device cpu = {VF_DEV_CPU, 0};
    int64_t ta = vf_mem_plan_total(&a, cpu), tb = vf_mem_plan_total(&b, cpu);
    fprintf(stderr, "   wan preset, 256x256, micro_batch 2, chunk 4: declared %.1f MiB at 17 "
                    "frames, %.1f MiB at 65 (clip buffers %.1f / %.1f MiB)\n",
            ta / 1048576.0, tb / 1048576.0, plan_bytes(&a, "vae micro-batch") / 1048576.0,
            plan_bytes(&b, "vae micro-batch") / 1048576.0);
    VF_CHECK((double)tb <= 1.2 * (double)ta);

    /* a larger chunk costs more */
    vf_mem_plan c;
    plan_for("{\"micro_batch\": 2, \"chunk\": 8, \"model\": {\"name\": \"wan\", \"dim\": 96, "
             "\"dim_mult\": [1,2,4,4], \"num_res_blocks\": 2, \"temporal_downsample\": [0,1,1], "
             "\"z_dim\": 16}}",
             17, &c);
    VF_CHECK(plan_bytes(&c, "vae chunk workspace") > plan_bytes(&a, "vae chunk workspace"));
}

int main(void) { return vf_test_main(); }
