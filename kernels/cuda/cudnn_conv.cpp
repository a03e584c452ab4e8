/* cudnn_conv.cpp — conv3d_fwd through cuDNN's convolution for the CUDA backend, built
 * with the header-only cudnn-frontend (cudnn_conv.h is the C face and says the rules).
 *
 * A graph per (shape, operand alignments, bias fused or not), built once and kept in the
 * device's cuDNN state beside the attention's (cudnn_internal.h). The operands are NCDHW
 * bf16 as ops.h has them: x (B, C, T, H, W), w (OC, C, KT, KH, KW), y (B, OC, To, Ho, Wo),
 * packed; padding before and after each axis is cuDNN's pre- and post-padding. With a
 * bias the graph first tries y = conv(x, w) + bias in one (the convolution's result stays
 * f32 until the add); where cuDNN has no such plan, the plain convolution runs and a
 * kernel adds the bias (conv3d.cu), which rounds to bf16 once more.
 *
 * Plans: cuDNN's heuristics (mode A, then its fallback list), less those it marks
 * non-deterministic and those asking more workspace than vf_conv3d_workspace_bound (the
 * memory plan's figure); the first one left is built. Pointers into the VAE's flat
 * weight buffer may be less than 16-byte aligned: the alignment is part of the graph (and
 * of its key), so cuDNN picks engines that take it.
 */
#include <cstdio>
#include <string>
#include <unordered_map>

#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/cudnn_internal.h"

namespace {

enum Uid : int64_t { U_X = 1, U_W, U_Y, U_BIAS };

/* alignments of x, w, y, bias in bytes */
struct Align {
    int64_t x, w, y, b;
};

std::string shape_str(const vf_conv3d_shape &s, bool bias)
{
    char b[256];
    snprintf(b, sizeof b,
             "conv3d B=%lld C=%lld T=%lld H=%lld W=%lld -> OC=%lld, kernel %dx%dx%d, stride %d/%d/%d, pad "
             "%d+%d/%d+%d/%d+%d%s",
             (long long)s.B, (long long)s.C, (long long)s.T, (long long)s.H, (long long)s.W, (long long)s.OC, s.KT,
             s.KH, s.KW, s.st, s.sh, s.sw, s.pt0, s.pt1, s.ph0, s.ph1, s.pw0, s.pw1, bias ? ", bias fused" : "");
    return b;
}

/* dims and packed strides of an NCDHW tensor */
fe::graph::Tensor_attributes &ncdhw(fe::graph::Tensor_attributes &t, int64_t n, int64_t c, int64_t d, int64_t h,
                                    int64_t w)
{
    return t.set_dim({n, c, d, h, w}).set_stride({c * d * h * w, d * h * w, h * w, w, 1});
}

/* The graph of s, not yet validated. sm_version / sm_count > 0 describe the device
 * instead of asking the driver (what validates a graph on a machine without one). */
std::shared_ptr<fe::graph::Graph> make_graph(const vf_conv3d_shape &s, bool bias, const Align &al, int sm_version,
                                             int sm_count)
{
    auto g = vf_cudnn_new_graph(sm_version, sm_count);
    int64_t To, Ho, Wo;
    vf_conv3d_out(&s, &To, &Ho, &Wo);
    fe::graph::Tensor_attributes xa, wa;
    xa.set_name("x").set_uid(U_X).set_alignment(al.x);
    wa.set_name("w").set_uid(U_W).set_alignment(al.w);
    auto x = g->tensor(ncdhw(xa, s.B, s.C, s.T, s.H, s.W));
    auto w = g->tensor(ncdhw(wa, s.OC, s.C, s.KT, s.KH, s.KW));
    fe::graph::Conv_fprop_attributes opt;
    opt.set_name("conv")
        .set_pre_padding({s.pt0, s.ph0, s.pw0})
        .set_post_padding({s.pt1, s.ph1, s.pw1})
        .set_stride({s.st, s.sh, s.sw})
        .set_dilation({1, 1, 1});
    auto y = g->conv_fprop(x, w, opt);
    if (bias) {
        ncdhw(*y, s.B, s.OC, To, Ho, Wo);
        fe::graph::Tensor_attributes ba;
        ba.set_name("bias").set_uid(U_BIAS).set_alignment(al.b).set_dim({1, s.OC, 1, 1, 1}).set_stride(
            {s.OC, 1, 1, 1, 1});
        auto b = g->tensor(ba);
        fe::graph::Pointwise_attributes add;
        add.set_name("bias_add").set_mode(fe::PointwiseMode_t::ADD);
        y = g->pointwise(y, b, add);
    }
    ncdhw(*y, s.B, s.OC, To, Ho, Wo).set_output(true).set_uid(U_Y).set_alignment(al.y).set_data_type(
        fe::DataType_t::BFLOAT16);
    return g;
}

/* The built graph of s on c; nullptr when cuDNN does not take it (logged once, unless
 * `quiet`: a fused bias cuDNN has no plan for is no fallback to the hand kernel). */
fe::graph::Graph *graph_for(vf_cuda_ctx *c, vf_cudnn *a, const vf_conv3d_shape &s, bool bias, const Align &al,
                            bool quiet)
{
    const vf_cudnn_key key = {VF_CUDNN_TAG_CONV, bias, s.B,   s.C,   s.T,   s.H,   s.W,   s.OC,  s.KT,
                              s.KH,              s.KW, s.st,  s.sh,  s.sw,  s.pt0, s.pt1, s.ph0, s.ph1,
                              s.pw0,             s.pw1, al.x, al.w,  al.y,  al.b};
    vf_device dev = {};
    dev.kind = VF_DEV_CUDA;
    dev.index = c->device;
    const int64_t bound = vf_conv3d_workspace_bound(dev, &s);
    auto make = [&](std::string *why) -> std::shared_ptr<fe::graph::Graph> {
        auto g = make_graph(s, bias, al, c->sm_version, 0);
        auto filter = [&](fe::graph::Graph &gr) {
            gr.deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
            gr.deselect_workspace_greater_than(bound);
        };
        if (!vf_cudnn_build(*g, a->h, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}, filter, why)) {
            *why = "cuDNN has no deterministic plan for it within " + std::to_string(bound >> 20) +
                   " MiB of workspace (" + *why + ")";
            return nullptr;
        }
        int64_t ws = 0;
        fe::error_t e = g->get_workspace_size(ws);
        if (!e.is_good()) {
            *why = "cuDNN gives no workspace size (" + e.get_message() + ")";
            return nullptr;
        }
        return vf_cudnn_grow(c, a->conv_ws, ws, why) ? g : nullptr;
    };
    return vf_cudnn_graph(c, a, key, shape_str(s, bias), make, !quiet);
}

int run(vf_cuda_ctx *c, vf_cudnn *a, fe::graph::Graph *g, const vf_conv3d_shape &s, bool bias,
        std::unordered_map<int64_t, void *> &pack)
{
    try {
        fe::error_t e = g->execute(a->h, pack, a->conv_ws.p);
        if (!e.is_good()) return vf_cudnn_fail(c, shape_str(s, bias), "execute", e.get_message());
        return 0;
    } catch (const std::exception &x) {
        return vf_cudnn_fail(c, shape_str(s, bias), "graph", x.what());
    }
}

} // namespace

extern "C" int vf_cudnn_conv_fwd(vf_cuda_ctx *c, void *out, const void *inp, const void *w, const void *bias,
                                 const vf_conv3d_shape *s)
{
    vf_cudnn *a = vf_cudnn_state(c);
    if (!a) return VF_ENOTFOUND;
    const Align al = {vf_cudnn_align(inp), vf_cudnn_align(w), vf_cudnn_align(out), bias ? vf_cudnn_align(bias) : 16};
    std::unordered_map<int64_t, void *> pack = {{U_X, (void *)inp}, {U_W, (void *)w}, {U_Y, out}};
    if (bias) {
        fe::graph::Graph *g = graph_for(c, a, *s, true, al, true);
        if (g) {
            pack[U_BIAS] = (void *)bias;
            return run(c, a, g, *s, true, pack);
        }
    }
    fe::graph::Graph *g = graph_for(c, a, *s, false, al, false);
    if (!g) return VF_ENOTFOUND;
    int rc = run(c, a, g, *s, false, pack);
    if (rc == 0 && bias) {
        int64_t To, Ho, Wo;
        vf_conv3d_out(s, &To, &Ho, &Wo);
        vf_cuda_conv_bias(c, out, bias, s->B, s->OC, To * Ho * Wo);
    }
    return rc;
}

extern "C" size_t vf_cudnn_conv_workspace(vf_cuda_ctx *c) { return c->cudnn ? c->cudnn->conv_ws.bytes : 0; }

extern "C" int vf_cudnn_conv_check(const vf_conv3d_shape *s, int bias, int sm_version, int sm_count, vf_status *st)
{
    int rc = vf_cudnn_load(st);
    if (rc) return rc;
    const Align al = {16, 16, 16, 16};
    try {
        fe::error_t e = make_graph(*s, bias != 0, al, sm_version, sm_count)->validate();
        if (!e.is_good())
            return vf_status_set(st, VF_ENOTFOUND, __FILE__, __LINE__, "%s on sm_%d: cuDNN refuses it: %s",
                                 shape_str(*s, bias != 0).c_str(), sm_version, e.get_message().c_str());
    } catch (const std::exception &x) {
        return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "%s: cuDNN: %s", shape_str(*s, bias != 0).c_str(),
                             x.what());
    }
    return 0;
}
