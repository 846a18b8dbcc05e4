// The layer step table (see layer_steps.hpp): one section a layer kind with a row, its
// functions then its row.
#include "layer_steps.hpp"

#include "bn.hpp"
#include "layers.hpp"
#include "recipe.hpp"

#include <cstring>
#include <iterator>

namespace ptxlab {

namespace {

// ---- Host memory as the float64 kernels see it (LayerKernel::host64) ---------------------

template <class T> T* host(CUdeviceptr p) { return reinterpret_cast<T*>(static_cast<uintptr_t>(p)); }
std::vector<double> get(CUdeviceptr p, size_t n) { return {host<float>(p), host<float>(p) + n}; }
void put(CUdeviceptr p, const std::vector<double>& v) {
    for (size_t i = 0; i < v.size(); ++i) host<float>(p)[i] = static_cast<float>(v[i]);
}

// ---- bn: batch normalization (ptx/bn.ptx, kernels/bn.hpp) ---------------------------------
// A conv or fc under a bn runs without its activation (conv_fwd act 0: its output is written, no
// pool in its epilogue); bn_fwd normalizes it with the batch's statistics (kept in the layer's
// scratch buffer idx[l], [2][C]: mean, rstd) and moves the running ones (CnnBuffers::running),
// then applies ReLU or leaky-ReLU (bn's own codes); for tanh, sigmoid and GELU it runs with
// kBnActNone, writing Z (cnn_pre_activations), and act_fwd applies the activation. In evaluation
// on the running statistics. Backward: bn_bwd from the bn's output deltas and its output (the
// mask) writes dgamma, dbeta and the deltas of the layer below, whose passes then run with act 0;
// act_bwd first where act.ptx applied the activation; kBnActNone under the last fc, whose
// fused_output applied the derivative (ReLU's mask again with ReLU).

// bn_fwd reads X, gamma, beta (and running in evaluation) and writes Y, stats and running
// (training); bn_bwd reads dY, Y, X, gamma, stats and writes dX, dgamma, dbeta.
struct BnArgs {
    unsigned B = 0, C = 0, HW = 0, act = 0;
    bool train = true;
    float scale = 1.0f;
    CUdeviceptr Y = 0, stats = 0, running = 0, X = 0, gamma = 0, beta = 0, dX = 0, dgamma = 0, dbeta = 0, dY = 0;
};

// Whether bn_fwd and bn_bwd apply the activation themselves (ReLU, leaky-ReLU: bn.hpp's codes
// are recipe.hpp's); for tanh, sigmoid and GELU bn runs without (kBnActNone) and act.ptx's passes
// apply it.
bool bn_applies(Activation act) { return act == Activation::Relu || act == Activation::LeakyRelu; }

// A bn layer's arguments on the batch `in` (X); the forward pass's writes: its output (Z where
// act.ptx applies the activation), its batch statistics (training) and its running statistics.
BnArgs bn_args(const LayerSpec& ly, const CnnBuffers& b, CUdeviceptr in, size_t l, size_t L) {
    BnArgs a;
    a.B = b.B;
    a.C = ly.width;
    a.HW = ly.in.h * ly.in.w;
    const bool own = ly.activation && bn_applies(b.act);
    a.act = own ? act_code(b.act) : kBnActNone;
    a.train = b.train;
    a.Y = own || !ly.activation ? b.out[l] : cnn_pre_activations(b, l, L);
    a.stats = b.train ? b.idx[l] : 0;
    a.running = b.running + ly.buffer_offset * 4;
    a.X = in;
    a.gamma = b.params + ly.weight_offset * 4;
    a.beta = b.params + ly.bias_offset * 4;
    return a;
}

void require_bn_act(unsigned act) {
    if (act != kActRelu && act != kActLeakyRelu && act != kBnActNone)
        PTXLAB_THROW(Error, "internal error: bn's activation code {} (ReLU 0, leaky-ReLU 1 or none {})", act,
                     kBnActNone);
}

// bn_fwd in float64 on host memory: bn_forward64 (layers.hpp) on the buffers' float values.
void bn_fwd_host64(const BnArgs& a) {
    require_bn_act(a.act);
    const size_t n = size_t(a.B) * a.C * a.HW;
    std::vector<double> z(n), st(2 * size_t(a.C)), run = get(a.running, 2 * size_t(a.C));
    bn_forward64(get(a.X, n).data(), a.B, a.C, a.HW, get(a.gamma, a.C).data(), get(a.beta, a.C).data(), a.train,
                 run.data(), run.data() + a.C, z.data(), st.data(), st.data() + a.C);
    if (a.train) {
        put(a.running, run);
        put(a.stats, st);
    }
    for (auto& v : z)
        if (a.act != kBnActNone && !(v > 0)) v = a.act == kActLeakyRelu ? 0.01 * v : 0.0;
    put(a.Y, z);
}

// bn_bwd in float64 on host memory: the activation's derivative from Y, then bn_backward64.
void bn_bwd_host64(const BnArgs& a) {
    require_bn_act(a.act);
    const size_t n = size_t(a.B) * a.C * a.HW;
    std::vector<double> dz = get(a.dY, n), dx(n), dg(a.C), db(a.C);
    if (a.act != kBnActNone)
        for (size_t i = 0; i < n; ++i)
            if (!(host<float>(a.Y)[i] > 0.0f)) dz[i] *= a.act == kActLeakyRelu ? 0.01 : 0.0;
    const std::vector<double> st = get(a.stats, 2 * size_t(a.C));
    bn_backward64(get(a.X, n).data(), dz.data(), a.B, a.C, a.HW, get(a.gamma, a.C).data(), st.data(), st.data() + a.C,
                  dg.data(), db.data(), dx.data());
    for (unsigned c = 0; c < a.C; ++c) dg[c] *= a.scale, db[c] *= a.scale;
    put(a.dX, dx);
    put(a.dgamma, dg);
    put(a.dbeta, db);
}

// A bn layer's forward pass: bn_fwd, then act_fwd where act.ptx applies the activation.
void bn_forward(CnnOps& ops, const LayerSpec& ly, const CnnBuffers& b, CUdeviceptr in, size_t l, size_t L) {
    const BnArgs a = bn_args(ly, b, in, l, L);
    ops.layer_kernel({"bn_fwd", LayerKernel::kForward, {a.Y, a.stats, a.running},
                      [a](const Kernel& k, CUstream s) {
                          launch_bn_fwd(k, a.B, a.C, a.HW, a.Y, a.stats, a.running, a.X, a.gamma, a.beta, a.act,
                                        a.train, s);
                      },
                      [a] { bn_fwd_host64(a); }});
    if (a.Y != b.out[l]) ops.act_fwd(static_cast<unsigned>(b.B * ly.out.size()), b.out[l], a.Y, act_code(b.act));
}

// A bn layer's backward pass from dY = delta[l]: the activation's derivative (fused_output's
// for the layer under the last fc; act_bwd in place where act.ptx applied it; else bn_bwd's
// code), then bn_bwd (on the main stream: its dX is the next delta of the chain).
void bn_backward(CnnOps& ops, const LayerSpec& ly, const CnnBuffers& b, CUdeviceptr in, CUdeviceptr dX, size_t l,
                 size_t L, float scale) {
    BnArgs a = bn_args(ly, b, in, l, L);
    const CUdeviceptr dY = b.delta[l];
    if (a.Y != b.out[l] && l + 2 != L)
        ops.act_bwd(static_cast<unsigned>(b.B * ly.out.size()), dY, dY, b.out[l], a.Y, act_code(b.act));
    // Under the last fc, fused_output applied the derivative: bn_bwd without it (ReLU's mask, the
    // same twice, stays as bn had it).
    if (l + 2 == L && b.act != Activation::Relu) a.act = kBnActNone;
    a.dX = dX;
    a.dY = dY;
    a.dgamma = b.grads + ly.weight_offset * 4;
    a.dbeta = b.grads + ly.bias_offset * 4;
    a.scale = scale;
    ops.layer_kernel({"bn_bwd", LayerKernel::kDeltas, {a.dX, a.dgamma, a.dbeta},
                      [a](const Kernel& k, CUstream s) {
                          launch_bn_bwd(k, a.B, a.C, a.HW, a.dX, a.dgamma, a.dbeta, a.dY, a.Y, a.X, a.gamma, a.stats,
                                        a.act, a.scale, s);
                      },
                      [a] { bn_bwd_host64(a); }});
}

constexpr const char* kBnForward[] = {"bn_fwd"};
constexpr const char* kBnBackward[] = {"bn_bwd"};

// The batch's mean and rstd, [2][C].
size_t bn_scratch(const LayerSpec& ly, unsigned) { return 2 * size_t(ly.width); }

// PyTorch refuses one value a channel in training; evaluation takes any batch.
std::string bn_step_unfit(const LayerSpec& ly, unsigned B) {
    return bn_unfit(B, ly.width, ly.in.h * ly.in.w, kActRelu, true);
}

// ---- The table, in LayerKind order (null: conv, pool and fc are the data flow's own) -------

const LayerStepRow kBnStep{.forward = bn_forward,
                           .backward = bn_backward,
                           .forward_entries = kBnForward,
                           .backward_entries = kBnBackward,
                           .scratch = bn_scratch,
                           .scratch_name = "batch statistics",
                           .unfit = bn_step_unfit,
                           .weight_gradient = "in bn_bwd"};

const LayerStepRow* const kSteps[] = {nullptr, nullptr, nullptr, &kBnStep};

}  // namespace

const LayerStepRow* layer_step_row(LayerKind k) {
    const auto i = static_cast<size_t>(k);
    if (i >= std::size(kSteps) || i >= layer_rows().size())
        PTXLAB_THROW(Error, "internal error: layer kind {} has no place in the layer step table", i);
    // conv, pool and fc are the data flow's own; any other layer runs through its row.
    if (!kSteps[i] && k != LayerKind::Conv && k != LayerKind::Pool && k != LayerKind::Fc)
        PTXLAB_THROW(Error, "internal error: layer '{}' has no row in the layer step table (layer_steps.cpp)",
                     layer_rows()[i].token);
    return kSteps[i];
}

std::vector<std::string> layer_step_entries(bool backward) {
    std::vector<std::string> v;
    for (const LayerStepRow* r : kSteps) {
        if (!r) continue;
        for (const char* e : r->forward_entries) v.push_back(e);
        if (backward)
            for (const char* e : r->backward_entries) v.push_back(e);
    }
    return v;
}

}  // namespace ptxlab
