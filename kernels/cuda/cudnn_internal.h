/* cudnn_internal.h — the per-device cuDNN state and the graph cache that the attention
 * (cudnn_att.cpp) and the convolution (cudnn_conv.cpp) share, over the header-only
 * cudnn-frontend; made in cudnn_common.cpp. C++17, private to those three files.
 *
 * A device's state (vf_cuda_ctx.cudnn) is made on the first call cuDNN takes: one handle
 * bound to the backend's stream, the graphs built so far keyed by their user's tag and
 * shape (a shape cuDNN refuses is remembered as a null graph, its reason logged once), and
 * one workspace per user from the device pool, grown to the largest any of its graphs asks
 * for. Callers hold the backend's op bracket (vf_cuda_op_begin), which guards all of it.
 */
#ifndef VF_CUDNN_INTERNAL_H
#define VF_CUDNN_INTERNAL_H

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <cudnn_frontend.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_common.h"

namespace fe = cudnn_frontend;

/* One user's device workspace (a pool block; ws_bytes 0: none yet). */
struct vf_cudnn_ws {
    void *p = nullptr;
    size_t bytes = 0;
};

/* A graph's key: the user's tag (first) and the shape's numbers. */
typedef std::vector<int64_t> vf_cudnn_key;
enum { VF_CUDNN_TAG_ATT = 1, VF_CUDNN_TAG_CONV = 2 };

struct vf_cudnn {
    cudnnHandle_t h = nullptr;
    bool broken = false; /* no handle: cuDNN takes nothing on this device */
    std::map<vf_cudnn_key, std::shared_ptr<fe::graph::Graph>> graphs; /* null graph: refused */
    std::set<std::string> said;                                       /* lines already logged */
    vf_cudnn_ws att_ws, conv_ws;
};

/* c's state, made on first use; nullptr when no handle can be had (logged once, naming
 * what then runs on the hand kernels). */
vf_cudnn *vf_cudnn_state(vf_cuda_ctx *c);

/* Logs "<what>: <why>; the hand kernels run it" once per device and line. VF_ENOTFOUND. */
int vf_cudnn_refuse(vf_cuda_ctx *c, vf_cudnn *a, const std::string &what, const std::string &why);
/* A failure of cuDNN on a call it took: noted in c (sync returns it). VF_ECUDA. */
int vf_cudnn_fail(vf_cuda_ctx *c, const std::string &what, const char *step, const std::string &msg);

/* validate, lower, ask cuDNN's heuristics (modes, in order) for plans, drop the ones
 * `filter` bars (may be empty), check support and build the first plan left. false with
 * cuDNN's reason. */
bool vf_cudnn_build(fe::graph::Graph &g, cudnnHandle_t h, const std::vector<fe::HeurMode_t> &modes,
                    const std::function<void(fe::graph::Graph &)> &filter, std::string *why);

/* Grows ws to need bytes from the device pool: charged to the calling stage's account, as
 * the memory plan counts it under the stage. The new block comes first, so the graphs
 * built so far keep a workspace if it does not fit; the old one goes back to the pool,
 * whose next user is ordered after the work on the stream. false with the pool's reason. */
bool vf_cudnn_grow(vf_cuda_ctx *c, vf_cudnn_ws &ws, int64_t need, std::string *why);

/* The built graph of key on c; made by make (which builds it, sizes its workspace, or
 * says why not) the first time, nullptr when cuDNN does not take the shape (remembered;
 * logged once as vf_cudnn_refuse with `what` when `log`). An exception from cuDNN (an
 * entry point this libcudnn lacks) is a refusal too. */
fe::graph::Graph *vf_cudnn_graph(vf_cuda_ctx *c, vf_cudnn *a, const vf_cudnn_key &key, const std::string &what,
                                 const std::function<std::shared_ptr<fe::graph::Graph>(std::string *why)> &make,
                                 bool log);

/* The graph's io/compute types (bf16 io, f32 intermediates and compute) and, when
 * sm_version / sm_count > 0, the device it is for instead of the driver's answer (what
 * validates a graph on a machine without one). */
std::shared_ptr<fe::graph::Graph> vf_cudnn_new_graph(int sm_version, int sm_count);

/* 16, 8, 4 or 2: the largest power of two (up to 16) p is aligned to. */
int64_t vf_cudnn_align(const void *p);

#endif /* VF_CUDNN_INTERNAL_H */
