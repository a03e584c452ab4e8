/* test_vae_stage.c — the vae_encode stage: schema, ports and memory hooks (shape
 * propagation from the decoder's frames spec, T' = 1 + (T-1)/4 with symbols kept; clip
 * lengths refused before launch; a memory plan whose device part does not depend on the
 * clip length), and the stage running on its own thread between two in-process edges:
 * its latents equal the model's direct encode, metadata passes through (plus the hash
 * of weights + config + affine), micro-batches
 * flush on a shape change and at the end, and the peak of its memory account does not
 * grow with the clip length; fed over a ZeroMQ edge, that peak stays within what its
 * memory hook declares (received clips are held as whole records).
 */
#include "tests/vf_test.h"

#include "models/vae.h"
#include "runtime/core/alloc.h"
#include "runtime/edge/chan.h"
#include "runtime/core/params.h"
#include "runtime/core/stage.h"
#include "stages/latent_cache.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

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
    VF_CHECK_MSG(strstr(st.msg, "frames of 64x60 (WxH): training needs sides that are multiples of 16 = the VAE's "
                                "spatial stride 8 x the DiT's patch 2 (vae_encode.patch); e.g. 64x48 or 64x64") != NULL,
                 "%s", st.msg);
    vf_params_free(p);
    /* 72 is a multiple of the stride but not of stride x patch: training could not take it */
    p = params("{}", &st);
    vf_status_clear(&st);
    memset(&out, 0, sizeof out);
    upstream(&up, 17, "", 72, 72);
    VF_CHECK(ops()->ports(p, &up, &out, &st) == VF_EUSAGE);
    VF_CHECK_MSG(strstr(st.msg, "72x72 (WxH): training needs sides that are multiples of 16") != NULL, "%s", st.msg);
    vf_params_free(p);
    /* a DiT with patch 1 takes any multiple of the stride */
    p = params("{\"patch\":1}", &st);
    vf_status_clear(&st);
    memset(&out, 0, sizeof out);
    VF_CHECK_MSG(ops()->ports(p, &up, &out, &st) == 0, "%s", st.msg);
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

/* ------------------------------------------------------------------ running the stage */

#define HH 32
#define WW 32

typedef struct harness {
    vf_stage *s;
    vf_params *p;
    vf_status st;
    int rc;
    vf_port *out;  /* the stage's output port (closed when run returns, as a worker does) */
} harness;

static void *stage_main(void *arg)
{
    harness *h = arg;
    vf_account_set_current(h->s->account);
    h->rc = h->s->ops->init(h->s, h->p, &h->st);
    if (h->rc == 0) h->rc = h->s->ops->run(h->s, &h->s->ctx, &h->st);
    vf_status cst = {0};
    vf_close(h->out, &cst);
    h->s->ops->fini(h->s);
    vf_account_set_current(NULL);
    return NULL;
}

static vf_item *make_item(int i, int64_t T)
{
    vf_status st = {0};
    char id[32];
    snprintf(id, sizeof id, "clip.mp4#%d", i);
    vf_item *it = vf_item_new(id, &st);
    int64_t shape[4] = {T, HH, WW, 3};
    vf_tensor *f = vf_tensor_new(VF_DTYPE_U8, 4, shape, &st);
    uint8_t *d = f->data;
    for (int64_t k = 0; k < T * HH * WW * 3; k++) d[k] = (uint8_t)((k * 2654435761u + (uint64_t)i * 97) >> 7);
    vf_item_put(it, "frames", f, &st);
    vf_item_set_str(it, "caption", "a moving square", &st);
    vf_item_set_num(it, "clip", i, &st);
    return it;
}

/* Expected latent (and logvar) of make_item(i, T) straight from the model. */
static void expect_latent(const vf_params *p, int i, int64_t T, float **mean, float **lv,
                          char hash[33])
{
    vf_status st = {0};
    vf_vae_config c;
    vf_vae_config_tiny(&c);
    /* the stage's affine is part of the config its hash covers */
    if (vf_param_has(p, "scale")) c.scale = (float)vf_param_num(p, "scale");
    if (vf_param_has(p, "shift")) c.shift = (float)vf_param_num(p, "shift");
    vf_vae *m = NULL;
    vf_vae_enc *e = NULL;
    VF_CHECK(vf_vae_new(&c, vf_backend_cpu(), &m, &st) == 0);
    VF_CHECK(vf_vae_init_seeded(m, (uint64_t)vf_param_int(p, "seed"), &st) == 0);
    snprintf(hash, 33, "%s", vf_vae_hash(m));
    VF_CHECK(vf_vae_enc_new(m, 1, 3, HH, WW, &e, &st) == 0);
    int64_t n = c.z_dim * vf_vae_latent_frames(&c, T) * (HH / 8) * (WW / 8);
    *mean = calloc((size_t)n, sizeof(float));
    *lv = calloc((size_t)n, sizeof(float));
    vf_item *it = make_item(i, T);
    const uint8_t *fr = vf_item_get(it, "frames")->data;
    VF_CHECK(vf_vae_encode_begin(e, 1, T, &st) == 0);
    for (int64_t t0 = 0; t0 < T; t0 += 3) {
        int k = (int)(T - t0 < 3 ? T - t0 : 3);
        VF_CHECK(vf_vae_input_u8(e, 0, fr, t0, k, &st) == 0);
        VF_CHECK(vf_vae_encode_chunk(e, k, *mean, *lv, &st) >= 0);
    }
    VF_CHECK(vf_vae_encode_end(e, &st) >= 0);
    vf_item_free(it);
    vf_vae_enc_free(e);
    vf_vae_free(m);
}

/* Runs a vae_encode stage named `name` with params json over clips of the given
 * lengths; checks every output; returns the peak of the stage's account. */
static int64_t run_stage(const char *name, const char *json, const int64_t *Ts, int n,
                         int verify)
{
    vf_status st = {0};
    harness h = {0};
    h.p = params(json, &st);
    VF_CHECK_MSG(h.p != NULL, "%s", st.msg);
    if (!h.p) return -1;
    h.s = vf_stage_new(ops(), name, 0, h.p, &st);
    VF_CHECK_MSG(h.s != NULL, "%s", st.msg);
    vf_chan_hub *hub = vf_chan_hub_new(&st);
    vf_edge_desc e1 = {.id = 1, .transport = VF_TR_INPROC, .capacity = 16};
    vf_edge_desc e2 = {.id = 2, .transport = VF_TR_INPROC, .capacity = 16};
    snprintf(e1.name, sizeof e1.name, "test.out -> %s.in", name);
    snprintf(e2.name, sizeof e2.name, "%s.out -> test.in", name);
    vf_edge_end *a_out, *a_in, *b_out, *b_in;
    vf_port *src, *sin, *sout, *sink;
    VF_CHECK(vf_edge_open(hub, &e1, VF_PORT_OUT, &a_out, &st) == 0);
    VF_CHECK(vf_edge_open(hub, &e1, VF_PORT_IN, &a_in, &st) == 0);
    VF_CHECK(vf_edge_open(hub, &e2, VF_PORT_IN, &b_in, &st) == 0);
    VF_CHECK(vf_edge_open(hub, &e2, VF_PORT_OUT, &b_out, &st) == 0);
    vf_port_new("out", VF_PORT_OUT, &src, &st);
    vf_port_new("in", VF_PORT_IN, &sin, &st);
    vf_port_new("out", VF_PORT_OUT, &sout, &st);
    vf_port_new("in", VF_PORT_IN, &sink, &st);
    vf_port_attach(src, a_out, &st);
    vf_port_attach(sin, a_in, &st);
    vf_port_attach(sout, b_out, &st);
    vf_port_attach(sink, b_in, &st);
    vf_stage_attach_port(h.s, "in", VF_PORT_IN, sin, &st);
    vf_stage_attach_port(h.s, "out", VF_PORT_OUT, sout, &st);
    h.out = sout;
    pthread_t th;
    pthread_create(&th, NULL, stage_main, &h);

    double scale = vf_param_has(h.p, "scale") ? vf_param_num(h.p, "scale") : 1.0;
    double shift = vf_param_has(h.p, "shift") ? vf_param_num(h.p, "shift") : 0.0;
    /* per-channel normalisation (z = 4 values each) instead of the scalar affine */
    bool perch = vf_param_has(h.p, "latents_mean");
    double nm[4] = {0}, ns[4] = {1, 1, 1, 1};
    for (int c = 0; perch && c < 4; c++)
        nm[c] = vf_param_num_at(h.p, "latents_mean", c), ns[c] = vf_param_num_at(h.p, "latents_std", c);
    int sent = 0, got = 0;
    while (got < n) {
        /* keep a few clips in flight, read outputs as they come (as a consumer would) */
        while (sent < n && sent - got < 4) {
            VF_CHECK(vf_send(src, make_item(sent, Ts[sent]), &st) == 0);
            sent++;
        }
        if (sent == n) vf_close(src, &st);
        vf_item *it = NULL;
        int rc = vf_recv(sink, &it, &st);
        if (rc != 0) {
            VF_CHECK_MSG(rc == 0, "recv after %d items: %d %s / stage: %s", got, rc, st.msg, h.st.msg);
            break;
        }
        char id[32];
        snprintf(id, sizeof id, "clip.mp4#%d", got);
        VF_CHECK_STR(vf_item_id(it), id);
        VF_CHECK(vf_item_get(it, "frames") == NULL);
        VF_CHECK_STR(vf_item_str(it, "caption"), "a moving square");
        double v = -1;
        VF_CHECK(vf_item_num(it, "clip", &v) == 0 && v == got);
        if (perch) {
            VF_CHECK(vf_item_num(it, "vae_scale", &v) != 0 && vf_item_str(it, "latent_norm"));
        } else {
            VF_CHECK(vf_item_num(it, "vae_scale", &v) == 0 && fabs(v - scale) < 1e-7);
            VF_CHECK(vf_item_num(it, "vae_shift", &v) == 0 && fabs(v - shift) < 1e-7);
        }
        const vf_tensor *lat = vf_item_get(it, "latent"), *lv = vf_item_get(it, "logvar");
        VF_CHECK(lat && lv && lat->ndim == 4 && lat->shape[0] == 4 &&
                 lat->shape[1] == 1 + (Ts[got] - 1) / 4 && lat->shape[2] == HH / 8);
        if (!verify) {
            vf_item_free(it);
            got++;
            continue;
        }
        float *em, *el;
        char hash[33];
        expect_latent(h.p, got, Ts[got], &em, &el, hash);
        if (perch) { /* the hash of the weights and the normalisation text */
            const char *norm = vf_item_str(it, "latent_norm");
            char want[33];
            vf_cache_vae_id(hash, norm ? norm : "", want);
            VF_CHECK_STR(vf_item_str(it, "vae"), want);
            VF_CHECK_MSG(norm && strstr(norm, "\"mean\":[") && strstr(norm, "\"std\":["), "%s", norm);
        } else {
            VF_CHECK_STR(vf_item_str(it, "vae"), hash);
        }
        if (lat && lv) {
            double d = 0;
            int64_t plane = vf_tensor_numel(lat) / 4;
            for (int64_t k = 0; k < vf_tensor_numel(lat); k++) {
                int c = (int)(k / plane);
                double want = perch ? (em[k] - nm[c]) / ns[c] : (em[k] - shift) * scale;
                double wlv = perch ? el[k] - 2 * log(ns[c]) : el[k] + 2 * log(fabs(scale));
                d = fmax(d, fabs(((float *)lat->data)[k] - want));
                d = fmax(d, fabs(((float *)lv->data)[k] - wlv));
            }
            VF_CHECK_MSG(d <= 1e-5, "%s: stage output differs from the model by %g", id, d);
        }
        free(em), free(el);
        vf_item_free(it);
        got++;
    }
    vf_item *extra = NULL;
    VF_CHECK(vf_recv(sink, &extra, &st) == VF_EOS);
    pthread_join(th, NULL);
    VF_CHECK_MSG(h.rc == 0, "stage failed: %s", h.st.msg);
    int64_t peak = vf_account_peak(h.s->account);
    VF_CHECK_EQ_INT(vf_account_live(h.s->account), 0);
    vf_port_free(src), vf_port_free(sin), vf_port_free(sout), vf_port_free(sink);
    vf_stage_free(h.s);
    vf_chan_hub_free(hub);
    vf_params_free(h.p);
    return peak;
}

VF_TEST(stage_runs_micro_batches)
{
    /* micro_batch 2: (17, 17) | 9 flushes the pair early | (17, 17) | 5 at the end */
    const int64_t Ts[] = {17, 17, 9, 17, 17, 5};
    run_stage("vae_mb", "{\"micro_batch\": 2, \"chunk\": 4, \"seed\": 3, \"logvar\": true, "
              "\"scale\": 0.5, \"shift\": 0.25}", Ts, 6, 1);
}

VF_TEST(stage_normalises_per_channel)
{
    const int64_t Ts[] = {9, 9, 5};
    run_stage("vae_pc", "{\"micro_batch\": 2, \"chunk\": 4, \"seed\": 3, \"logvar\": true, "
              "\"latents_mean\": [0.5, -0.25, 1.5, 0.0], \"latents_std\": [2.0, 0.5, 1.25, 3.0]}", Ts, 3, 1);
}

VF_TEST(stage_refuses_bad_normalisation)
{
    static const char *const bad[][2] = {
        {"{\"latents_mean\": [0, 0, 0], \"latents_std\": [1, 1, 1, 1]}", "latents_mean has 3 values; z_dim is 4"},
        {"{\"latents_mean\": [0, 0, 0, 0], \"latents_std\": [1, 0, 1, 1]}", "latents_std[1] = 0"},
        {"{\"latents_mean\": [0, 0, 0, 0], \"latents_std\": [1, 1, 1, 1], \"scale\": 0.5}", "not both"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vf_status st = {0};
        vf_params *p = params(bad[i][0], &st);
        VF_CHECK_MSG(p != NULL, "%s", st.msg);
        if (!p) continue;
        vf_stage *s = vf_stage_new(ops(), "vae_bad", 0, p, &st);
        VF_CHECK_MSG(s != NULL, "%s", st.msg);
        if (!s) continue;
        vf_account_set_current(s->account);
        int rc = s->ops->init(s, p, &st);
        s->ops->fini(s);
        vf_account_set_current(NULL);
        VF_CHECK_MSG(rc == VF_EUSAGE && strstr(st.msg, bad[i][1]), "%s -> %d %s", bad[i][0], rc, st.msg);
        vf_stage_free(s);
        vf_params_free(p);
    }
}

VF_TEST(stage_peak_independent_of_clip_length)
{
    const int64_t T17[] = {17, 17}, T65[] = {65, 65};
    const char *cfg = "{\"micro_batch\": 2, \"chunk\": 4, \"seed\": 1, \"logvar\": true}";
    int64_t p17 = run_stage("vae_t17", cfg, T17, 2, 0), p65 = run_stage("vae_t65", cfg, T65, 2, 0);
    fprintf(stderr, "   vae_encode account peak, tiny, 32x32, micro_batch 2, chunk 4: "
                    "17 frames %" PRId64 " B, 65 frames %" PRId64 " B (ratio %.3f)\n",
            p17, p65, (double)p65 / (double)p17);
    VF_CHECK(p17 > 0);
    VF_CHECK((double)p65 <= 1.2 * (double)p17);
}

/* Over a ZeroMQ edge (a decode worker feeding the encoder, as in a precompute) the
 * receiver holds each clip as its whole record, metadata and codec headers included,
 * charged to the stage's account: the memory hook must declare that too. Clips with
 * long metadata (a caption and an extra column, 6 KB of a 8 KiB bound) make the
 * difference visible; the account's peak must stay within what the hook declares.
 * The output is a ZeroMQ edge too, as in a precompute: the item held while sent is the
 * planner's line, not the hook's, and is freed long before the next micro-batch's peak. */
VF_TEST(stage_peak_within_declared_over_zmq)
{
    enum { N = 4 };
    const int64_t T = 17;
    vf_status st = {0};
    harness h = {0};
    h.p = params("{\"micro_batch\": 2, \"chunk\": 4, \"seed\": 2}", &st);
    VF_CHECK_MSG(h.p != NULL, "%s", st.msg);
    if (!h.p) return;
    vf_port_specs up, ports = {0};
    upstream(&up, T, "", HH, WW);
    up.p[0].meta_bytes = 8192;
    VF_CHECK_MSG(ops()->ports(h.p, &up, &ports, &st) == 0, "%s", st.msg);
    vf_mem_plan plan = {0};
    VF_CHECK_MSG(ops()->memory(h.p, &ports, &plan, &st) == 0, "%s", st.msg);
    vf_device cpu = {VF_DEV_CPU, 0};
    int64_t declared = vf_mem_plan_total(&plan, cpu);

    h.s = vf_stage_new(ops(), "vae_zmq", 0, h.p, &st);
    VF_CHECK_MSG(h.s != NULL, "%s", st.msg);
    if (!h.s) return;
    vf_chan_hub *hub = vf_chan_hub_new(&st);
    vf_edge_desc e1 = {.id = 1, .transport = VF_TR_IPC, .capacity = 4};
    vf_edge_desc e2 = {.id = 2, .transport = VF_TR_IPC, .capacity = 16};
    snprintf(e1.addr, sizeof e1.addr, "ipc:///tmp/vf-test-vae-stage-%d-1.sock", (int)getpid());
    snprintf(e2.addr, sizeof e2.addr, "ipc:///tmp/vf-test-vae-stage-%d-2.sock", (int)getpid());
    e1.max_item_bytes = vf_port_max_item_bytes(&up.p[0]);
    e2.max_item_bytes = vf_port_max_item_bytes(vf_port_find(&ports, "out"));
    snprintf(e1.name, sizeof e1.name, "test.out -> vae_zmq.in");
    snprintf(e2.name, sizeof e2.name, "vae_zmq.out -> test.in");
    vf_edge_end *a_out, *a_in, *b_out, *b_in;
    vf_port *src, *sin, *sout, *sink;
    VF_CHECK(vf_edge_open(hub, &e1, VF_PORT_IN, &a_in, &st) == 0);
    VF_CHECK(vf_edge_open(hub, &e1, VF_PORT_OUT, &a_out, &st) == 0);
    VF_CHECK(vf_edge_open(hub, &e2, VF_PORT_IN, &b_in, &st) == 0);
    VF_CHECK(vf_edge_open(hub, &e2, VF_PORT_OUT, &b_out, &st) == 0);
    vf_port_new("out", VF_PORT_OUT, &src, &st);
    vf_port_new("in", VF_PORT_IN, &sin, &st);
    vf_port_new("out", VF_PORT_OUT, &sout, &st);
    vf_port_new("in", VF_PORT_IN, &sink, &st);
    vf_port_attach(src, a_out, &st);
    vf_port_attach(sin, a_in, &st);
    vf_port_attach(sout, b_out, &st);
    vf_port_attach(sink, b_in, &st);
    vf_stage_attach_port(h.s, "in", VF_PORT_IN, sin, &st);
    vf_stage_attach_port(h.s, "out", VF_PORT_OUT, sout, &st);
    h.out = sout;
    pthread_t th;
    pthread_create(&th, NULL, stage_main, &h);

    /* 3000 + 3000 + ~100 raw metadata bytes per clip, under the 8192 bound */
    char caption[3001], extra[3001];
    memset(caption, 'c', 3000), caption[3000] = 0;
    memset(extra, 'x', 3000), extra[3000] = 0;
    for (int i = 0; i < N; i++) {
        vf_item *it = make_item(i, T);
        VF_CHECK(vf_item_set_str(it, "caption", caption, &st) == 0);
        VF_CHECK(vf_item_set_str(it, "aesthetic_notes", extra, &st) == 0);
        VF_CHECK_MSG(vf_send(src, it, &st) == 0, "%s", st.msg);
    }
    vf_close(src, &st);
    int got = 0;
    for (;;) {
        vf_item *it = NULL;
        int rc = vf_recv(sink, &it, &st);
        if (rc == VF_EOS) break;
        VF_CHECK_MSG(rc == 0, "recv: %d %s / stage: %s", rc, st.msg, h.st.msg);
        if (rc != 0) break;
        VF_CHECK(vf_item_get(it, "latent") != NULL);
        VF_CHECK_EQ_INT(strlen(vf_item_str(it, "caption")), 3000);
        vf_item_free(it);
        got++;
    }
    pthread_join(th, NULL);
    VF_CHECK_MSG(h.rc == 0, "stage failed: %s", h.st.msg);
    VF_CHECK_EQ_INT(got, N);
    int64_t peak = vf_account_peak(h.s->account);
    fprintf(stderr, "   vae_encode over ipc, tiny, %dx%d, %" PRId64 " frames, micro_batch 2: "
                    "account peak %" PRId64 " B, declared %" PRId64 " B\n",
            HH, WW, T, peak, declared);
    VF_CHECK_MSG(peak <= declared, "account peak %" PRId64 " B > declared %" PRId64 " B", peak,
                 declared);
    VF_CHECK_EQ_INT(vf_account_live(h.s->account), 0);
    vf_port_free(src), vf_port_free(sin), vf_port_free(sout), vf_port_free(sink);
    vf_stage_free(h.s);
    vf_chan_hub_free(hub);
    vf_params_free(h.p);
}

/* ------------------------------------------------------------------ drain and abort */

typedef struct wired {
    harness h;
    atomic_bool stop; /* the worker's drain/abort flag (vf_stopping) */
    vf_chan_hub *hub;
    vf_port *src, *sin, *sout, *sink;
    pthread_t th;
} wired;

/* Starts a vae_encode stage between two in-process edges (the test feeds src and reads
 * sink), with its vf_stopping flag under the test's control. */
static int wire_start(wired *w, const char *name, const char *json, int id0)
{
    vf_status st = {0};
    memset(w, 0, sizeof *w);
    atomic_init(&w->stop, false);
    w->h.p = params(json, &st);
    VF_CHECK_MSG(w->h.p != NULL, "%s", st.msg);
    if (!w->h.p) return -1;
    w->h.s = vf_stage_new(ops(), name, 0, w->h.p, &st);
    VF_CHECK_MSG(w->h.s != NULL, "%s", st.msg);
    if (!w->h.s) return -1;
    w->h.s->ctx.stopping = &w->stop;
    w->hub = vf_chan_hub_new(&st);
    vf_edge_desc e1 = {.id = id0, .transport = VF_TR_INPROC, .capacity = 16};
    vf_edge_desc e2 = {.id = id0 + 1, .transport = VF_TR_INPROC, .capacity = 16};
    snprintf(e1.name, sizeof e1.name, "test.out -> %s.in", name);
    snprintf(e2.name, sizeof e2.name, "%s.out -> test.in", name);
    vf_edge_end *a_out, *a_in, *b_out, *b_in;
    VF_CHECK(vf_edge_open(w->hub, &e1, VF_PORT_OUT, &a_out, &st) == 0);
    VF_CHECK(vf_edge_open(w->hub, &e1, VF_PORT_IN, &a_in, &st) == 0);
    VF_CHECK(vf_edge_open(w->hub, &e2, VF_PORT_OUT, &b_out, &st) == 0);
    VF_CHECK(vf_edge_open(w->hub, &e2, VF_PORT_IN, &b_in, &st) == 0);
    vf_port_new("out", VF_PORT_OUT, &w->src, &st);
    vf_port_new("in", VF_PORT_IN, &w->sin, &st);
    vf_port_new("out", VF_PORT_OUT, &w->sout, &st);
    vf_port_new("in", VF_PORT_IN, &w->sink, &st);
    vf_port_attach(w->src, a_out, &st);
    vf_port_attach(w->sin, a_in, &st);
    vf_port_attach(w->sout, b_out, &st);
    vf_port_attach(w->sink, b_in, &st);
    vf_stage_attach_port(w->h.s, "in", VF_PORT_IN, w->sin, &st);
    vf_stage_attach_port(w->h.s, "out", VF_PORT_OUT, w->sout, &st);
    w->h.out = w->sout;
    pthread_create(&w->th, NULL, stage_main, &w->h);
    return 0;
}

static void wire_finish(wired *w)
{
    pthread_join(w->th, NULL);
    vf_port_free(w->src), vf_port_free(w->sin), vf_port_free(w->sout), vf_port_free(w->sink);
    vf_stage_free(w->h.s);
    vf_chan_hub_free(w->hub);
    vf_params_free(w->h.p);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Waits until the stage is encoding: its encoder (caches and workspace, allocated at
 * the first micro-batch) shows in its account. False after 60 s. */
static bool wait_encoding(wired *w, int64_t T)
{
    vf_status st = {0};
    vf_port_specs up, ports = {0};
    vf_mem_plan plan = {0};
    upstream(&up, T, "", HH, WW);
    VF_CHECK(ops()->ports(w->h.p, &up, &ports, &st) == 0);
    VF_CHECK(ops()->memory(w->h.p, &ports, &plan, &st) == 0);
    int64_t enc = plan_bytes(&plan, "vae weights") +
                  (plan_bytes(&plan, "vae causal caches") + plan_bytes(&plan, "vae chunk workspace")) / 2;
    for (int i = 0; i < 60000; i++) {
        if (vf_account_live(w->h.s->account) > enc) return true;
        usleep(1000);
    }
    return false;
}

/* One micro-batch of two long clips (17 chunks of 4 frames): a drain (vf_stopping) lets the
 * batch in hand finish and go out; an abort (the data plane's stop flag) makes the
 * stage return VF_ESTOPPED between two chunks, long before the batch would be done. */
VF_TEST(stage_drain_finishes_batch_abort_returns_between_chunks)
{
    const int64_t T = 65;
    const char *cfg = "{\"micro_batch\": 2, \"chunk\": 4, \"seed\": 4}";
    vf_status st = {0};
    wired w;

    /* drain while the batch is being encoded: both clips still come out, then EOS */
    if (wire_start(&w, "vae_drain", cfg, 21) < 0) return;
    for (int i = 0; i < 2; i++) VF_CHECK(vf_send(w.src, make_item(i, T), &st) == 0);
    VF_CHECK(wait_encoding(&w, T));
    double t0 = now_s();
    atomic_store(&w.stop, true);
    vf_close(w.src, &st); /* the drained source ends its stream */
    int got = 0;
    vf_item *it = NULL;
    while (vf_recv(w.sink, &it, &st) == 0) {
        VF_CHECK(vf_item_get(it, "latent") != NULL);
        vf_item_free(it);
        got++;
    }
    double t_batch = now_s() - t0;
    wire_finish(&w);
    VF_CHECK_MSG(w.h.rc == 0, "drained stage: %d %s", w.h.rc, w.h.st.msg);
    VF_CHECK_EQ_INT(got, 2);

    /* abort while the batch is being encoded: back within a few chunks */
    if (wire_start(&w, "vae_abort", cfg, 23) < 0) return;
    for (int i = 0; i < 2; i++) VF_CHECK(vf_send(w.src, make_item(i, T), &st) == 0);
    VF_CHECK(wait_encoding(&w, T));
    double t1 = now_s();
    vf_runtime_request_stop();
    pthread_join(w.th, NULL);
    double t_abort = now_s() - t1;
    vf_runtime_clear_stop();
    VF_CHECK_MSG(w.h.rc == VF_ESTOPPED, "aborted stage: %d %s", w.h.rc, w.h.st.msg);
    VF_CHECK_MSG(strstr(w.h.st.msg, "dropped a micro-batch of 2 clips") != NULL, "%s", w.h.st.msg);
    fprintf(stderr, "   micro-batch of 2 x %" PRId64 " frames, chunk 4: %.3f s to encode; "
                    "abort returned after %.3f s\n", T, t_batch, t_abort);
    /* No timing bound: on a loaded machine one chunk can take as long as a whole batch
     * took in the calmer drain run above (0.45 s of 0.58 s seen in CI). The message is
     * the proof: it is raised only between two chunks of the batch in hand, so the
     * stage returned mid-batch instead of encoding it to the end. */
    vf_port_free(w.src), vf_port_free(w.sin), vf_port_free(w.sout), vf_port_free(w.sink);
    vf_stage_free(w.h.s);
    vf_chan_hub_free(w.hub);
    vf_params_free(w.h.p);
}

/* ------------------------------------------------------------------ skip_cached */

/* Runs a stage over clips `ids` (T = 5, provenance metadata source "src<i>", transform
 * "frames=5") and returns how many came out; out_ids[] gets their clip numbers and, when
 * w is not NULL, the items go to that cache writer. */
static int run_skip(const char *name, const char *json, const int *ids, int n, int *out_ids,
                    vf_latent_writer *w, int id0)
{
    vf_status st = {0};
    wired h;
    if (wire_start(&h, name, json, id0) < 0) return -1;
    for (int k = 0; k < n; k++) {
        vf_item *it = make_item(ids[k], 5);
        char src[32];
        snprintf(src, sizeof src, "src%d", ids[k]);
        vf_item_set_str(it, "source", src, &st);
        vf_item_set_str(it, "transform", "frames=5", &st);
        VF_CHECK(vf_send(h.src, it, &st) == 0);
    }
    vf_close(h.src, &st);
    int got = 0;
    vf_item *it = NULL;
    while (vf_recv(h.sink, &it, &st) == 0) {
        double c = -1;
        vf_item_num(it, "clip", &c);
        out_ids[got++] = (int)c;
        if (w) {
            bool skipped = true;
            VF_CHECK_MSG(vf_latent_writer_add(w, it, &skipped, &st) == 0, "%s", st.msg);
            VF_CHECK(!skipped);
        } else {
            vf_item_free(it);
        }
    }
    wire_finish(&h);
    VF_CHECK_MSG(h.h.rc == 0, "%s: %s", name, h.h.st.msg);
    return got;
}

/* skip_cached: clips whose key the cache holds are dropped before encoding, with the
 * keys the writer derives (provenance with this VAE's hash, or the id for an id-keyed
 * cache); another VAE skips nothing; no cache there yet skips nothing. */
VF_TEST(stage_skip_cached)
{
    char dir[128], pa[160], pb[160], json[400];
    snprintf(dir, sizeof dir, "/tmp/vf-test-vae-skip-XXXXXX");
    if (!mkdtemp(dir)) { VF_CHECK(!"mkdtemp"); return; }
    snprintf(pa, sizeof pa, "%s/prov.lmdb", dir);
    snprintf(pb, sizeof pb, "%s/id.lmdb", dir);
    vf_status st = {0};
    int out[8], all[4] = {0, 1, 2, 3}, some[2] = {0, 2};

    /* no cache yet: nothing skipped; clips 0 and 2 go into a provenance-keyed cache */
    vf_latent_writer *w = NULL;
    vf_latent_writer_opts wo = {.path = pa, .commit_every = 4, .keying = VF_CACHE_KEY_PROVENANCE};
    snprintf(json, sizeof json, "{\"micro_batch\": 2, \"seed\": 5, \"skip_cached\": \"%s\"}", pa);
    VF_CHECK_MSG(vf_latent_writer_open(&wo, &w, &st) == 0, "%s", st.msg);
    int n = run_skip("vae_skip_a", json, some, 2, out, w, 31);
    VF_CHECK_EQ_INT(n, 2);
    VF_CHECK(vf_latent_writer_flush(w, &st) == 0);
    vf_latent_writer_close(w);
    /* the same VAE: 0 and 2 are dropped, 1 and 3 encoded */
    n = run_skip("vae_skip_b", json, all, 4, out, NULL, 33);
    VF_CHECK_EQ_INT(n, 2);
    if (n == 2) VF_CHECK(out[0] == 1 && out[1] == 3);
    /* another VAE (seed): another hash, nothing skipped */
    snprintf(json, sizeof json, "{\"micro_batch\": 2, \"seed\": 6, \"skip_cached\": \"%s\"}", pa);
    VF_CHECK_EQ_INT(run_skip("vae_skip_c", json, all, 4, out, NULL, 35), 4);
    /* a cache path without an environment: nothing skipped */
    snprintf(json, sizeof json, "{\"micro_batch\": 2, \"seed\": 5, \"skip_cached\": \"%s/none\"}", dir);
    VF_CHECK_EQ_INT(run_skip("vae_skip_d", json, all, 4, out, NULL, 37), 4);

    /* an id-keyed cache holding clip 1: skipped by its item id */
    wo.path = pb;
    wo.keying = VF_CACHE_KEY_ID;
    VF_CHECK_MSG(vf_latent_writer_open(&wo, &w, &st) == 0, "%s", st.msg);
    snprintf(json, sizeof json, "{\"micro_batch\": 2, \"seed\": 9, \"skip_cached\": \"%s\"}", pb);
    VF_CHECK_EQ_INT(run_skip("vae_skip_e", json, all + 1, 1, out, w, 39), 1);
    VF_CHECK(vf_latent_writer_flush(w, &st) == 0);
    vf_latent_writer_close(w);
    n = run_skip("vae_skip_f", json, all, 4, out, NULL, 41);
    VF_CHECK_EQ_INT(n, 3);
    if (n == 3) VF_CHECK(out[0] == 0 && out[1] == 2 && out[2] == 3);

    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    VF_CHECK(system(cmd) == 0);
}

int main(void) { return vf_test_main(); }
