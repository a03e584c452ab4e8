/* cudnn_att.cpp — attention through cuDNN's fused SDPA (flash attention, forward and
 * deterministic backward) for the CUDA backend, built with the header-only cudnn-frontend
 * (scripts/setup.sh fetches it; cudnn_att.h is the C face and says the rules).
 *
 * The device's cuDNN state (handle, graph cache, workspaces: cudnn_internal.h) is shared
 * with the convolution; attention graphs are keyed by (kind, B, Lq, Lk, H, D), built once
 * each, and use the attention workspace. The scale is a pass-by-value operand, so it is not
 * part of the key; the pointers are bound per call.
 *
 * Layout: q, k, v, out, dout, dq, dk, dv are BSHD (B, L, H, D) bf16, described to cuDNN
 * as (B, H, L, D) with strides (L·H·D, D, H·D, 1) — no transposes. Stats is (B, H, Lq, 1)
 * f32, packed: ln Σ_j exp(scale·q·k_j), the natural-log log-sum-exp of the scaled scores
 * (cuDNN's convention unless set_stats_use_log2 asks for base 2, which is not done here),
 * which is ops.h's lse, so the hand kernels and cuDNN read each other's lse.
 *
 * The backward is cuDNN's deterministic algorithm (set_deterministic_algorithm): on
 * Hopper the frontend then keeps the score gradient for every (query, key) pair in the
 * workspace instead of adding dQ with atomics, up to VFLOW_ATTN_WORKSPACE_MB; past it,
 * cuDNN 9.25 and newer add dQ in a fixed order in an f32 buffer, and an older cuDNN's
 * shape goes to the hand kernels. vf_attention_workspace_bound (kernels/ops.h) is what
 * the memory plan counts for it.
 */
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>

#include "kernels/cuda/cudnn_att.h"
#include "kernels/cuda/cudnn_internal.h"

namespace {

enum Uid : int64_t { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SCALE };
enum Kind { FWD_STATS, FWD, BWD };
const char *const kind_name[] = {"forward", "forward (no lse)", "backward"};

struct Shape {
    int kind;
    int64_t B, Lq, Lk, H, D;
};

std::string shape_str(const Shape &s)
{
    char b[160];
    snprintf(b, sizeof b, "attention %s B=%lld Lq=%lld Lk=%lld H=%lld D=%lld", kind_name[s.kind],
             (long long)s.B, (long long)s.Lq, (long long)s.Lk, (long long)s.H, (long long)s.D);
    return b;
}

} // namespace

/* ------------------------------------------------------------------ graphs */

/* (B, H, L, D) view of a BSHD (B, L, H, D) tensor */
static fe::graph::Tensor_attributes &bshd(fe::graph::Tensor_attributes &t, const Shape &s, int64_t L)
{
    return t.set_dim({s.B, s.H, L, s.D}).set_stride({L * s.H * s.D, s.D, s.H * s.D, 1});
}

/* lse (B, H, Lq) f32 as cuDNN's Stats (B, H, Lq, 1) */
static fe::graph::Tensor_attributes &stats(fe::graph::Tensor_attributes &t, const Shape &s)
{
    return t.set_dim({s.B, s.H, s.Lq, 1})
        .set_stride({s.H * s.Lq, s.Lq, 1, 1})
        .set_data_type(fe::DataType_t::FLOAT);
}

/* The graph of s, not yet validated. sm_version / sm_count > 0 describe the device
 * instead of asking the driver (what validates a graph on a machine without one). */
static std::shared_ptr<fe::graph::Graph> make_graph(const Shape &s, int sm_version, int sm_count)
{
    auto g = vf_cudnn_new_graph(sm_version, sm_count);
    auto input = [&](const char *name, Uid uid, int64_t L) {
        fe::graph::Tensor_attributes t;
        t.set_name(name).set_uid(uid);
        return g->tensor(bshd(t, s, L));
    };
    auto q = input("q", U_Q, s.Lq), k = input("k", U_K, s.Lk), v = input("v", U_V, s.Lk);
    fe::graph::Tensor_attributes sc;
    sc.set_name("scale")
        .set_uid(U_SCALE)
        .set_dim({1, 1, 1, 1})
        .set_stride({1, 1, 1, 1})
        .set_is_pass_by_value(true)
        .set_data_type(fe::DataType_t::FLOAT);
    auto scale = g->tensor(sc);
    if (s.kind != BWD) {
        fe::graph::SDPA_attributes opt;
        opt.set_name("sdpa").set_generate_stats(s.kind == FWD_STATS).set_attn_scale(scale);
        auto [o, lse] = g->sdpa(q, k, v, opt);
        bshd(*o, s, s.Lq).set_output(true).set_uid(U_O);
        if (lse) stats(*lse, s).set_output(true).set_uid(U_STATS);
    } else {
        auto o = input("out", U_O, s.Lq), dout = input("dout", U_DO, s.Lq);
        fe::graph::Tensor_attributes l;
        l.set_name("lse").set_uid(U_STATS);
        auto lse = g->tensor(stats(l, s));
        fe::graph::SDPA_backward_attributes opt;
        opt.set_name("sdpa_backward").set_attn_scale(scale).set_deterministic_algorithm(true);
        auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, lse, opt);
        bshd(*dq, s, s.Lq).set_output(true).set_uid(U_DQ);
        bshd(*dk, s, s.Lk).set_output(true).set_uid(U_DK);
        bshd(*dv, s, s.Lk).set_output(true).set_uid(U_DV);
    }
    return g;
}

/* ------------------------------------------------------------------ running */

/* Grows a's attention workspace to need bytes for s; false with the reason it is refused. */
static bool grow_ws(vf_cuda_ctx *c, vf_cudnn *a, const Shape &s, int64_t need, std::string *why)
{
    vf_device dev = {};
    dev.kind = VF_DEV_CUDA;
    dev.index = c->device;
    const int64_t bound = vf_attention_workspace_bound(dev, s.B, s.Lq, s.Lk, s.H, s.D);
    const int64_t limit = vf_attention_workspace_limit();
    if (need > bound && need > limit) { /* a cuDNN older than 9.25 past the limit (ops.h) */
        char m[200];
        snprintf(m, sizeof m,
                 "cuDNN %zu asks %lld bytes of workspace, over VFLOW_ATTN_WORKSPACE_MB's %lld (cuDNN 9.25 and "
                 "newer keep the deterministic backward's workspace linear in the sequence)",
                 vf_cudnn_loaded_version(), (long long)need, (long long)limit);
        *why = m;
        return false;
    }
    if (need > bound)
        fprintf(stderr,
                "vflow: %s: %s: cuDNN asks %lld bytes of workspace, above the %lld the memory plan counts "
                "(vf_attention_workspace_bound)\n",
                c->devname, shape_str(s).c_str(), (long long)need, (long long)bound);
    return vf_cudnn_grow(c, a->att_ws, need, why);
}

/* The built graph of s on c; nullptr when cuDNN does not take s (logged once). */
static fe::graph::Graph *graph_for(vf_cuda_ctx *c, vf_cudnn *a, const Shape &s)
{
    const vf_cudnn_key key = {VF_CUDNN_TAG_ATT, s.kind, s.B, s.Lq, s.Lk, s.H, s.D};
    return vf_cudnn_graph(c, a, key, shape_str(s), [&](std::string *why) -> std::shared_ptr<fe::graph::Graph> {
        auto g = make_graph(s, c->sm_version, 0);
        if (!vf_cudnn_build(*g, a->h, {fe::HeurMode_t::A}, nullptr, why)) {
            *why = "cuDNN has no plan for it (" + *why + ")";
            return nullptr;
        }
        int64_t ws = 0;
        fe::error_t e = g->get_workspace_size(ws);
        if (!e.is_good()) {
            *why = "cuDNN gives no workspace size (" + e.get_message() + ")";
            return nullptr;
        }
        return grow_ws(c, a, s, ws, why) ? g : nullptr;
    }, true);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Runs s's graph with pack (the pointers; the scale is added here). */
static int run(vf_cuda_ctx *c, const Shape &s, std::unordered_map<int64_t, void *> &pack, float scale,
               bool aligned)
{
    vf_cudnn *a = vf_cudnn_state(c);
    if (!a || s.Lq <= 0 || s.Lk <= 0) return VF_ENOTFOUND;
    if (!aligned) return vf_cudnn_refuse(c, a, shape_str(s), "an operand is not 16-byte aligned");
    try {
        fe::graph::Graph *g = graph_for(c, a, s);
        if (!g) return VF_ENOTFOUND;
        pack[U_SCALE] = &scale;
        fe::error_t e = g->execute(a->h, pack, a->att_ws.p);
        if (!e.is_good()) return vf_cudnn_fail(c, shape_str(s), "execute", e.get_message());
        return 0;
    } catch (const std::exception &x) {
        return vf_cudnn_fail(c, shape_str(s), "graph", x.what());
    }
}

extern "C" int vf_cudnn_att_fwd(vf_cuda_ctx *c, void *out, float *lse, const void *q, const void *k,
                                const void *v, int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D,
                                float scale)
{
    const Shape s{lse ? FWD_STATS : FWD, B, Lq, Lk, H, D};
    std::unordered_map<int64_t, void *> pack = {
        {U_Q, (void *)q}, {U_K, (void *)k}, {U_V, (void *)v}, {U_O, out}};
    if (lse) pack[U_STATS] = lse;
    const bool al = aligned16(q) && aligned16(k) && aligned16(v) && aligned16(out) && aligned16(lse);
    return run(c, s, pack, scale, al);
}

extern "C" int vf_cudnn_att_bwd(vf_cuda_ctx *c, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                const void *k, const void *v, const void *out, const float *lse, int64_t B,
                                int64_t Lq, int64_t Lk, int64_t H, int64_t D, float scale)
{
    const Shape s{BWD, B, Lq, Lk, H, D};
    if (!dq || !dk || !dv) { /* cuDNN's backward writes all three */
        vf_cudnn *a = vf_cudnn_state(c);
        return a ? vf_cudnn_refuse(c, a, shape_str(s), "only some gradients are wanted") : VF_ENOTFOUND;
    }
    std::unordered_map<int64_t, void *> pack = {
        {U_Q, (void *)q},       {U_K, (void *)k},   {U_V, (void *)v},   {U_O, (void *)out},
        {U_DO, (void *)dout},   {U_STATS, (void *)lse}, {U_DQ, dq}, {U_DK, dk}, {U_DV, dv}};
    bool al = true;
    for (const auto &kv : pack) al = al && aligned16(kv.second);
    return run(c, s, pack, scale, al);
}

extern "C" size_t vf_cudnn_att_workspace(vf_cuda_ctx *c) { return c->cudnn ? c->cudnn->att_ws.bytes : 0; }

extern "C" int vf_cudnn_att_check(int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t D, int sm_version,
                                  int sm_count, vf_status *st)
{
    int rc = vf_cudnn_load(st);
    if (rc) return rc;
    for (int kind : {FWD_STATS, BWD}) {
        const Shape s{kind, B, Lq, Lk, H, D};
        try {
            fe::error_t e = make_graph(s, sm_version, sm_count)->validate();
            if (!e.is_good())
                return vf_status_set(st, VF_ENOTFOUND, __FILE__, __LINE__, "%s on sm_%d: cuDNN refuses it: %s",
                                     shape_str(s).c_str(), sm_version, e.get_message().c_str());
        } catch (const std::exception &x) {
            return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "%s: cuDNN: %s", shape_str(s).c_str(), x.what());
        }
    }
    return 0;
}
