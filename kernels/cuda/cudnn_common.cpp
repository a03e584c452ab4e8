/* cudnn_common.cpp — what the CUDA backend's cuDNN users share (cudnn_common.h,
 * cudnn_internal.h): loading libcudnn, the per-device handle, the graph cache, plan
 * building, workspaces and the once-per-line logging of what cuDNN refuses.
 *
 * libcudnn is not linked: the frontend's NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING resolves
 * every cuDNN call through cudnn_frontend::cudnn_dlhandle, which vf_cudnn_load fills with
 * dlopen("libcudnn.so.9") once per process.
 */
#include <dlfcn.h>
#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cuda/cudnn_internal.h"

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr; /* the frontend's handle on libcudnn (vf_cudnn_load) */
}

/* a model has a few shapes per bucket and a VAE a few dozen layers; past this, start over */
static const size_t max_graphs = 256;

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

/* ------------------------------------------------------------------ per-device state */

int vf_cudnn_refuse(vf_cuda_ctx *c, vf_cudnn *a, const std::string &what, const std::string &why)
{
    std::string line = what + ": " + why;
    if (a->said.insert(line).second)
        fprintf(stderr, "vflow: %s: %s; the hand kernels run it\n", c->devname, line.c_str());
    return VF_ENOTFOUND;
}

int vf_cudnn_fail(vf_cuda_ctx *c, const std::string &what, const char *step, const std::string &msg)
{
    vf_cuda_note_msg(c, __FILE__, __LINE__, "cuDNN %s, %s: %s", step, what.c_str(), msg.c_str());
    return VF_ECUDA;
}

vf_cudnn *vf_cudnn_state(vf_cuda_ctx *c)
{
    if (!c->cudnn) {
        vf_cudnn *a = new (std::nothrow) vf_cudnn();
        if (!a) return nullptr;
        c->cudnn = a;
        std::string why;
        try {
            cudnnStatus_t e = fe::detail::create_handle(&a->h);
            if (e == CUDNN_STATUS_SUCCESS) {
                e = fe::detail::set_stream(a->h, c->stream);
                if (e != CUDNN_STATUS_SUCCESS) fe::detail::destroy_handle(a->h);
            }
            if (e != CUDNN_STATUS_SUCCESS) why = std::string("cudnnCreate: ") + fe::detail::get_error_string(e);
        } catch (const std::exception &x) {
            why = std::string("cuDNN handle: ") + x.what();
        }
        if (!why.empty()) {
            a->h = nullptr;
            a->broken = true;
            fprintf(stderr, "vflow: %s: %s; attention and convolutions run on the hand kernels\n", c->devname,
                    why.c_str());
        }
    }
    return c->cudnn->broken ? nullptr : c->cudnn;
}

#define FE_TRY(call)                                                                               \
    do {                                                                                           \
        fe::error_t e_ = (call);                                                                   \
        if (!e_.is_good()) {                                                                       \
            *why = e_.get_message();                                                               \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

bool vf_cudnn_build(fe::graph::Graph &g, cudnnHandle_t h, const std::vector<fe::HeurMode_t> &modes,
                    const std::function<void(fe::graph::Graph &)> &filter, std::string *why)
{
    FE_TRY(g.validate());
    FE_TRY(g.build_operation_graph(h));
    FE_TRY(g.create_execution_plans(modes));
    if (filter) filter(g);
    FE_TRY(g.check_support(h));
    FE_TRY(g.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE));
    return true;
}

bool vf_cudnn_grow(vf_cuda_ctx *c, vf_cudnn_ws &ws, int64_t need, std::string *why)
{
    if ((size_t)need <= ws.bytes) return true;
    vf_status st = {};
    void *p = vf_cuda_pool_alloc(c->device, (size_t)need, &st);
    if (!p) {
        *why = std::string("its workspace: ") + st.msg;
        return false;
    }
    vf_cuda_pool_free(c->device, ws.p);
    ws.p = p;
    ws.bytes = (size_t)need;
    return true;
}

fe::graph::Graph *vf_cudnn_graph(vf_cuda_ctx *c, vf_cudnn *a, const vf_cudnn_key &key, const std::string &what,
                                 const std::function<std::shared_ptr<fe::graph::Graph>(std::string *why)> &make,
                                 bool log)
{
    auto it = a->graphs.find(key);
    if (it != a->graphs.end()) return it->second.get();
    if (a->graphs.size() >= max_graphs) a->graphs.clear();
    std::shared_ptr<fe::graph::Graph> g;
    std::string why;
    try {
        g = make(&why);
    } catch (const std::exception &x) { /* e.g. an entry point this libcudnn lacks */
        g = nullptr;
        why = std::string("cuDNN: ") + x.what();
    }
    a->graphs[key] = g; /* null: refused, not asked again */
    if (!g && log) vf_cudnn_refuse(c, a, what, why);
    return g.get();
}

std::shared_ptr<fe::graph::Graph> vf_cudnn_new_graph(int sm_version, int sm_count)
{
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    if (sm_version > 0) g->set_sm_version(sm_version);
    if (sm_count > 0) g->set_sm_count(sm_count);
    return g;
}

int64_t vf_cudnn_align(const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    return (a & 15) == 0 ? 16 : (a & 7) == 0 ? 8 : (a & 3) == 0 ? 4 : 2;
}

extern "C" void vf_cudnn_free(vf_cuda_ctx *c)
{
    vf_cudnn *a = c->cudnn;
    if (!a) return;
    try {
        a->graphs.clear(); /* before the handle they were built with */
        if (a->h) fe::detail::destroy_handle(a->h);
    } catch (const std::exception &) {
        /* tearing down: nothing left to tell */
    }
    vf_cuda_pool_free(c->device, a->att_ws.p);
    vf_cuda_pool_free(c->device, a->conv_ws.p);
    delete a;
    c->cudnn = nullptr;
}
