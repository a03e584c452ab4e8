/* cudnn_att.cpp — attention through cuDNN's fused SDPA (flash attention, forward and
 * deterministic backward) for the CUDA backend, built with the header-only cudnn-frontend
 * (scripts/setup.sh fetches it; cudnn_att.h is the C face and says the rules).
 *
 * libcudnn is not linked: the frontend's NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING resolves
 * every cuDNN call through cudnn_frontend::cudnn_dlhandle, which vf_cudnn_load fills with
 * dlopen("libcudnn.so.9") once per process.
 *
 * Per device (vf_cuda_ctx.cudnn, made on the first call cuDNN takes): one handle bound to
 * the backend's stream, the graphs built so far keyed by (kind, B, Lq, Lk, H, D) —
 * building one runs cuDNN's heuristics and plan setup, so each shape is built once (a
 * shape cuDNN refuses is remembered too, and logged once) — and one workspace from the
 * device pool, grown to the largest any graph asks for. The scale is a pass-by-value
 * operand, so it is not part of the key; the pointers are bound per call.
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
#include <dlfcn.h>
#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include <cudnn_frontend.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_att.h"

namespace fe = cudnn_frontend;

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr; /* the frontend's handle on libcudnn (vf_cudnn_load) */
}

namespace {

enum Uid : int64_t { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SCALE };
enum Kind { FWD_STATS, FWD, BWD };
const char *const kind_name[] = {"forward", "forward (no lse)", "backward"};
const size_t max_graphs = 64; /* a model has a few shapes per bucket; past this, start over */

struct Shape {
    int kind;
    int64_t B, Lq, Lk, H, D;
    bool operator<(const Shape &o) const
    {
        return std::tie(kind, B, Lq, Lk, H, D) < std::tie(o.kind, o.B, o.Lq, o.Lk, o.H, o.D);
    }
};

std::string shape_str(const Shape &s)
{
    char b[160];
    snprintf(b, sizeof b, "attention %s B=%lld Lq=%lld Lk=%lld H=%lld D=%lld", kind_name[s.kind],
             (long long)s.B, (long long)s.Lq, (long long)s.Lk, (long long)s.H, (long long)s.D);
    return b;
}

} // namespace

struct vf_cudnn_att {
    cudnnHandle_t h = nullptr;
    bool broken = false; /* no handle: cuDNN takes nothing on this device */
    std::map<Shape, std::shared_ptr<fe::graph::Graph>> graphs; /* null graph: refused */
    void *ws = nullptr;
    size_t ws_bytes = 0;
    std::set<std::string> said; /* fallback lines already logged */
};

/* ------------------------------------------------------------------ loading libcudnn */

static pthread_mutex_t g_load_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_load_state; /* 0 not tried, 1 loaded, -1 failed */
static size_t g_version;
static char g_load_err[400];

extern "C" int vf_cudnn_load(vf_status *st)
{
    pthread_mutex_lock(&g_load_mu);
    if (g_load_state == 0) {
        g_load_state = -1;
        void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(g_load_err, sizeof g_load_err, "cannot load libcudnn.so.9: %s", dlerror());
        } else {
            fe::cudnn_dlhandle = h; /* before any frontend call: it caches the symbols it finds */
            try {
                g_version = fe::detail::get_backend_version();
                if (g_version / 10000 == 9) {
                    g_load_state = 1;
                    /* The frontend takes cuDNN's ordered-dQ deterministic backward (9.25+:
                     * workspace linear in the sequence) over the one that keeps the score
                     * gradient for every (query, key) pair only where this caps the latter
                     * below a shape's need; vflow's cap is VFLOW_ATTN_WORKSPACE_MB (a value
                     * the user gave the variable wins). */
                    char lim[32];
                    snprintf(lim, sizeof lim, "%lld", (long long)vf_attention_workspace_limit());
                    setenv("CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT", lim, 0);
                    /* the frontend reaches the CUDA runtime by dlopen too, taking the first
                     * of libcudart.so.12 / .13 it finds: it must be the one vflow runs on */
                    char rt[32];
                    snprintf(rt, sizeof rt, "libcudart.so.%d", CUDART_VERSION / 1000);
                    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", rt, 0);
                }
                else
                    snprintf(g_load_err, sizeof g_load_err,
                             "libcudnn.so.9 reports version %zu; this build speaks cuDNN 9", g_version);
            } catch (const std::exception &x) {
                snprintf(g_load_err, sizeof g_load_err, "libcudnn.so.9: %s", x.what());
            }
            if (g_load_state != 1) g_version = 0;
        }
    }
    const bool ok = g_load_state == 1;
    pthread_mutex_unlock(&g_load_mu);
    if (ok) return 0;
    return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__,
                         "cuDNN: %s (the lib directory of the CUDA toolkit's cuDNN or of PyTorch's "
                         "nvidia-cudnn wheel belongs on LD_LIBRARY_PATH)",
                         g_load_err);
}

extern "C" size_t vf_cudnn_loaded_version(void)
{
    pthread_mutex_lock(&g_load_mu);
    size_t v = g_version;
    pthread_mutex_unlock(&g_load_mu);
    return v;
}

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
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    if (sm_version > 0) g->set_sm_version(sm_version);
    if (sm_count > 0) g->set_sm_count(sm_count);
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

#define FE_TRY(call)                                                                               \
    do {                                                                                           \
        fe::error_t e_ = (call);                                                                   \
        if (!e_.is_good()) {                                                                       \
            *why = e_.get_message();                                                               \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

/* validate, lower, pick cuDNN's heuristic plan, build it; false with cuDNN's reason */
static bool build(fe::graph::Graph &g, cudnnHandle_t h, std::string *why)
{
    FE_TRY(g.validate());
    FE_TRY(g.build_operation_graph(h));
    FE_TRY(g.create_execution_plans({fe::HeurMode_t::A}));
    FE_TRY(g.check_support(h));
    FE_TRY(g.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE));
    return true;
}

/* ------------------------------------------------------------------ per-device state */

/* Logs a call cuDNN does not take, once per device and message. VF_ENOTFOUND. */
static int refuse(vf_cuda_ctx *c, vf_cudnn_att *a, const Shape &s, const std::string &why)
{
    std::string line = shape_str(s) + ": " + why;
    if (a->said.insert(line).second)
        fprintf(stderr, "vflow: %s: %s; the hand kernels run it\n", c->devname, line.c_str());
    return VF_ENOTFOUND;
}

/* A failure of cuDNN on a call it took: noted in c (sync returns it). VF_ECUDA. */
static int fail(vf_cuda_ctx *c, const Shape &s, const char *what, const std::string &msg)
{
    vf_cuda_note_msg(c, __FILE__, __LINE__, "cuDNN %s, %s: %s", what, shape_str(s).c_str(), msg.c_str());
    return VF_ECUDA;
}

/* c's cuDNN state, made on first use; nullptr when no handle can be had (logged once). */
static vf_cudnn_att *state(vf_cuda_ctx *c)
{
    if (!c->cudnn) {
        vf_cudnn_att *a = new (std::nothrow) vf_cudnn_att();
        if (!a) return nullptr;
        c->cudnn = a;
        try {
            cudnnStatus_t e = fe::detail::create_handle(&a->h);
            if (e == CUDNN_STATUS_SUCCESS) {
                e = fe::detail::set_stream(a->h, c->stream);
                if (e != CUDNN_STATUS_SUCCESS) fe::detail::destroy_handle(a->h);
            }
            if (e != CUDNN_STATUS_SUCCESS) {
                a->h = nullptr;
                a->broken = true;
                fprintf(stderr, "vflow: %s: cudnnCreate: %s; attention runs on the hand kernels\n", c->devname,
                        fe::detail::get_error_string(e));
            }
        } catch (const std::exception &x) {
            a->h = nullptr;
            a->broken = true;
            fprintf(stderr, "vflow: %s: cuDNN handle: %s; attention runs on the hand kernels\n", c->devname, x.what());
        }
    }
    return c->cudnn->broken ? nullptr : c->cudnn;
}

/* Grows a's workspace to need bytes, from the device pool: charged to the calling stage's
 * account, as the memory plan counts it under the stage. The new block comes first, so the
 * graphs built so far keep a workspace if this one does not fit; the old one goes back to
 * the pool, whose next user is ordered after the work on the stream. false: refused. */
static bool grow_ws(vf_cuda_ctx *c, vf_cudnn_att *a, const Shape &s, int64_t need)
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
        refuse(c, a, s, m);
        return false;
    }
    if (need > bound)
        fprintf(stderr,
                "vflow: %s: %s: cuDNN asks %lld bytes of workspace, above the %lld the memory plan counts "
                "(vf_attention_workspace_bound)\n",
                c->devname, shape_str(s).c_str(), (long long)need, (long long)bound);
    if ((size_t)need <= a->ws_bytes) return true;
    vf_status st = {};
    void *p = vf_cuda_pool_alloc(c->device, (size_t)need, &st);
    if (!p) {
        refuse(c, a, s, std::string("its workspace: ") + st.msg);
        return false;
    }
    vf_cuda_pool_free(c->device, a->ws);
    a->ws = p;
    a->ws_bytes = (size_t)need;
    return true;
}

/* The built graph of s on c; nullptr when cuDNN does not take s (logged once). */
static fe::graph::Graph *graph_for(vf_cuda_ctx *c, vf_cudnn_att *a, const Shape &s)
{
    auto it = a->graphs.find(s);
    if (it != a->graphs.end()) return it->second.get();
    if (a->graphs.size() >= max_graphs) a->graphs.clear();
    std::shared_ptr<fe::graph::Graph> &slot = a->graphs[s]; /* null until built: refused */
    std::shared_ptr<fe::graph::Graph> g;
    std::string why;
    int64_t ws = 0;
    try {
        g = make_graph(s, c->sm_version, 0);
        if (!build(*g, a->h, &why)) {
            refuse(c, a, s, "cuDNN has no plan for it (" + why + ")");
            return nullptr;
        }
        fe::error_t e = g->get_workspace_size(ws);
        if (!e.is_good()) {
            refuse(c, a, s, "cuDNN gives no workspace size (" + e.get_message() + ")");
            return nullptr;
        }
    } catch (const std::exception &x) { /* e.g. an entry point this libcudnn lacks */
        refuse(c, a, s, std::string("cuDNN: ") + x.what());
        return nullptr;
    }
    if (!grow_ws(c, a, s, ws)) return nullptr;
    slot = g;
    return g.get();
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Runs s's graph with pack (the pointers; the scale is added here). */
static int run(vf_cuda_ctx *c, const Shape &s, std::unordered_map<int64_t, void *> &pack, float scale,
               bool aligned)
{
    vf_cudnn_att *a = state(c);
    if (!a || s.Lq <= 0 || s.Lk <= 0) return VF_ENOTFOUND;
    if (!aligned) return refuse(c, a, s, "an operand is not 16-byte aligned");
    try {
        fe::graph::Graph *g = graph_for(c, a, s);
        if (!g) return VF_ENOTFOUND;
        pack[U_SCALE] = &scale;
        fe::error_t e = g->execute(a->h, pack, a->ws);
        if (!e.is_good()) return fail(c, s, "execute", e.get_message());
        return 0;
    } catch (const std::exception &x) {
        return fail(c, s, "graph", x.what());
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
        vf_cudnn_att *a = state(c);
        return a ? refuse(c, a, s, "only some gradients are wanted") : VF_ENOTFOUND;
    }
    std::unordered_map<int64_t, void *> pack = {
        {U_Q, (void *)q},       {U_K, (void *)k},   {U_V, (void *)v},   {U_O, (void *)out},
        {U_DO, (void *)dout},   {U_STATS, (void *)lse}, {U_DQ, dq}, {U_DK, dk}, {U_DV, dv}};
    bool al = true;
    for (const auto &kv : pack) al = al && aligned16(kv.second);
    return run(c, s, pack, scale, al);
}

extern "C" void vf_cudnn_att_free(vf_cuda_ctx *c)
{
    vf_cudnn_att *a = c->cudnn;
    if (!a) return;
    try {
        a->graphs.clear(); /* before the handle they were built with */
        if (a->h) fe::detail::destroy_handle(a->h);
    } catch (const std::exception &) {
        /* tearing down: nothing left to tell */
    }
    vf_cuda_pool_free(c->device, a->ws);
    delete a;
    c->cudnn = nullptr;
}

extern "C" size_t vf_cudnn_att_workspace(vf_cuda_ctx *c) { return c->cudnn ? c->cudnn->ws_bytes : 0; }

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
