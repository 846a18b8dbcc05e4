// Training of a --model with conv layers on the GPU (see train_cnn.hpp).
#include "train_cnn.hpp"

#include "step_program.hpp"

#include "act.hpp"
#include "cnn_ops.hpp"
#include "conv.hpp"
#include "dense.hpp"
#include "densetc.hpp"
#include "fused.hpp"
#include "layer_steps.hpp"
#include "optim.hpp"
#include "recipe.hpp"
#include "rng.hpp"

#include <fmt/ostream.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>

namespace ptxlab {

namespace {

constexpr unsigned kConvActNone = 0, kConvActRelu = 1;  // the conv kernels' act codes
constexpr unsigned kEvalBatch = 500;

// A conv or fc layer as the conv kernels see it (fc: a 1x1 convolution of a 1x1 image).
ConvDims kernel_dims(const LayerSpec& l, unsigned B) {
    if (l.kind == LayerKind::Fc) return {B, static_cast<unsigned>(l.in.size()), 1, 1, l.width, 1};
    return {B, l.in.c, l.in.h, l.in.w, l.width, l.ksize};
}

CUdeviceptr at(const DeviceBuffer& b, size_t floats) { return b.ptr() + floats * 4; }

}  // namespace

void TrainConfig::validate_model_flags() const {
    const Model& m = *model;
    if (m.layers.front().in != kMnistInput)
        PTXLAB_THROW(InputError, "--model {}: takes {}x{}x{} images; MNIST's are 1x28x28", m.text(),
                     m.layers.front().in.c, m.layers.front().in.h, m.layers.front().in.w);
    for (const LayerSpec& l : m.layers) {
        if (l.kind == LayerKind::Pool) continue;
        if (const LayerStepRow* row = layer_step_row(l.kind)) {  // a layer of its own kernels (bn)
            if (std::string why = row->unfit ? row->unfit(l, batch) : ""; !why.empty())
                PTXLAB_THROW(InputError, "--model {}: layer {} at --batch {}: {}", m.text(), l.name, batch, why);
        } else {
            for (unsigned B : {batch, kEvalBatch})
                if (std::string why = conv_unfit(kernel_dims(l, B)); !why.empty())
                    PTXLAB_THROW(InputError, "--model {}: layer {} ({}): {}", m.text(), l.name, l.text(), why);
        }
        if (activation != Activation::Relu && uint64_t(std::max(batch, kEvalBatch)) * l.out.size() > 0xffffffffu)
            PTXLAB_THROW(InputError, "--model {}: layer {} ({}): act_fwd takes up to 2^32 - 1 elements a launch; "
                                     "{} of {} are more (--activation {})",
                         m.text(), l.name, l.text(), std::max(batch, kEvalBatch), l.out.size(), to_string(activation));
    }
}

ConvKernels conv_kernels_of(const KernelChoice& k) { return k.design == Design::Tc ? ConvKernels::Tc : ConvKernels::Fp32; }

std::vector<std::string> cnn_forward_entries(ConvKernels conv) {
    std::vector<std::string> v = {"conv_fwd", "pool_fwd", "fused_forward", "fused_output", "act_fwd", "dense_mm"};
    for (const std::string& e : layer_step_entries(false)) v.push_back(e);  // bn_fwd
    // conv_fwd stays: layers of fewer than 8 channels; tc_forward: an fc under a bn; dense_tc: the
    // fc products of kDenseTcMinOutputs outputs or more (large batches); dense_wg_k: the hidden fc
    // layers' forward passes below that (loaded on a device of compute capability 9.0 only)
    if (conv == ConvKernels::Tc)
        for (const char* e : {"tc_conv_fwd", "tc_forward", "dense_tc", "dense_wg_k"}) v.push_back(e);
    return v;
}

std::vector<std::string> cnn_training_entries(const OptimConfig& o, ConvKernels conv) {
    std::vector<std::string> v = cnn_forward_entries(conv);
    v.push_back("conv_bwd_data");
    if (conv == ConvKernels::Tc)
        for (const char* e : {"tc_conv_bwd_data", "tc_conv_bwd_weights", "tc_grad_weights", "tc_grad_weights_wide",
                              "transpose32"})
            v.push_back(e);
    for (const char* e : {"conv_bwd_weights", "pool_bwd", "fused_grad", "fc_bwd_data", "act_bwd", "gather"})
        v.push_back(e);
    for (const std::string& e : layer_step_entries(true))  // bn_bwd (bn_fwd is above)
        if (std::find(v.begin(), v.end(), e) == v.end()) v.push_back(e);
    v.push_back(optimizer_entry(o.kind));
    return v;
}

CnnParams::CnnParams(const Model& m, const std::vector<float>& init, const OptimConfig& o,
                     const std::vector<float>& buffers)
    : count(m.param_count) {
    if (m.has_buffers()) {
        if (!buffers.empty() && buffers.size() != m.buffer_count)
            PTXLAB_THROW(Error, "internal error: {} running statistics for the model {} of {}", buffers.size(),
                         m.text(), m.buffer_count);
        running = DeviceBuffer(m.buffer_count * 4, "bn running statistics");
        running.upload(buffers.empty() ? m.initial_buffers() : buffers);
    }
    if (init.size() != count)
        PTXLAB_THROW(Error, "internal error: {} initial parameters for the model {} of {}", init.size(), m.text(),
                     count);
    params = DeviceBuffer(count * 4, "parameters");
    params.upload(init);
    grads = DeviceBuffer(count * 4, "gradients");
    grads.fill_u32(0x7fc00000u);  // NaN: a gradient no kernel writes shows
    const unsigned n = o.state_buffers();
    if (n > 0) state1 = DeviceBuffer(count * 4, "optimizer state 1 (m; RMSprop's v)");
    if (n > 1) state2 = DeviceBuffer(count * 4, "optimizer state 2 (Adam's v)");
    for (auto* st : {&state1, &state2})
        if (st->bytes()) st->fill_u32(0);  // PyTorch starts the state at zero
}

CUdeviceptr CnnParams::m_ptr(const OptimConfig& o) const { return optim_uses_m(o.kind) ? state1.ptr() : 0; }
CUdeviceptr CnnParams::v_ptr(const OptimConfig& o) const {
    if (!optim_uses_v(o.kind)) return 0;
    return optim_uses_m(o.kind) ? state2.ptr() : state1.ptr();
}

CnnActs::CnnActs(const Model& m, unsigned B_, Activation act_) : B(B_), act(act_) {
    for (size_t i = 0; i < m.layers.size(); ++i) {
        const LayerSpec& l = m.layers[i];
        const bool pre = act != Activation::Relu && l.activation && i + 1 < m.layers.size();
        z.emplace_back(pre ? DeviceBuffer(size_t(B) * l.out.size() * 4, fmt::format("{} pre-activations", l.name))
                           : DeviceBuffer());
        out.emplace_back(size_t(B) * l.out.size() * 4, fmt::format("{} output", l.name));
        if (const LayerStepRow* row = layer_step_row(l.kind); row && row->scratch)
            idx.emplace_back(std::max<size_t>(row->scratch(l, B), 1) * 4, fmt::format("{} {}", l.name, row->scratch_name));
        else idx.emplace_back(l.kind == LayerKind::Pool ? size_t(B) * l.out.size() * 4 : 4, fmt::format("{} argmax", l.name));
        if (i + 1 < m.layers.size()) delta.emplace_back(size_t(B) * l.out.size() * 4, fmt::format("{} deltas", l.name));
    }
    D2 = DeviceBuffer(size_t(B) * kClasses * 4, "output deltas");
}

void CnnActs::keep_transposes(const Model& m, const KernelSet& ks, ConvKernels conv) {
    if (!wt.empty()) return;
    const bool tc = conv == ConvKernels::Tc, wgk = ks.has("dense_wg_k") && ks.has("transpose32");
    for (size_t l = 0; l < m.layers.size(); ++l) {
        const LayerSpec& ly = m.layers[l];
        wt.emplace_back(cnn_detail::keeps_transposed_weights(m, l, tc, wgk)
                            ? DeviceBuffer(ly.weight_count() * 4, fmt::format("{} W^T", ly.name))
                            : DeviceBuffer());
    }
}

ConvDims cnn_kernel_dims(const LayerSpec& l, unsigned B) { return kernel_dims(l, B); }

namespace {

using namespace cnn_detail;

// The optimizer's update by layer (enqueue_cnn_step with side streams): a large conv or fc
// layer's parameters updated on the side stream of its gradient as soon as params_ready says so,
// beside the deltas of the layers below; `done` lists the ranges (first, count) updated that way,
// and the step updates the rest (smaller layers', the bn layers') after the join. The rule is
// elementwise, so the bits are those of one launch over the whole array.
struct LayerUpdates {
    OptimConfig optim;
    CUdeviceptr P = 0, G = 0, M = 0, V = 0, hyp = 0;
    std::vector<std::pair<size_t, size_t>> done;
};

// The optimizer over parameters [first, first + count) of the flat array (its state alike).
void launch_optimizer_range(const KernelSet& ks, const LayerUpdates& u, size_t first, size_t count, CUstream s) {
    auto at = [first](CUdeviceptr p) { return p ? p + first * 4 : CUdeviceptr(0); };  // 0: no such state
    launch_optimizer(ks, u.optim, at(u.P), at(u.G), at(u.M), at(u.V), u.hyp, static_cast<unsigned>(count), s);
}

// The operations as kernel launches on stream s; the conv layers on the FP32 kernels or the
// tensor cores (the same arguments). With a side stream the weight gradients run there, each
// after the main stream's work so far (cnn_backward issues them before the deltas below), and
// join() makes the main stream wait for them; with LayerUpdates, a large layer's optimizer
// update on its gradient's side stream too (params_ready).
class KernelOps : public CnnOps {
public:
    KernelOps(const KernelSet& ks, CUstream s, ConvKernels conv, CnnSideStream* side = nullptr,
              bool pool_in_conv = true, LayerUpdates* updates = nullptr)
        : ks_(ks), s_(s), tc_(conv == ConvKernels::Tc), wgk_(tc_ && ks.has("dense_wg_k")), side_(side),
          pool_in_conv_(pool_in_conv), updates_(side ? updates : nullptr) {}
    void join() {
        for (unsigned i = 0; i < CnnSideStream::kStreams; ++i) {
            if (!used_[i]) continue;
            side_->join[i].record(side_->stream[i].get());
            CU(cuStreamWaitEvent, s_, side_->join[i].get(), 0);
            used_[i] = false;
        }
    }
    void conv_fwd(const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b, CUdeviceptr Y, unsigned act,
                  CUdeviceptr idx) override {
        const std::string k = conv_fwd_kernel(d, tc_);
        if (k == "dense_tc") launch_dense_tc(ks_.get(k), dense_forward_args(d.N, d.C, d.K, X, Wt, b, Y, act), s_);
        else if (k == "tc_forward") launch_tc_forward(ks_.get(k), d.N, d.C, d.K, X, Wt, b, Y, act, s_);  // the same act codes
        else if (k == "tc_conv_fwd") launch_tc_conv_fwd(ks_.get(k), d, X, Wt, b, Y, act, s_, idx);
        else launch_conv_fwd(ks_.get(k), d, X, Wt, b, Y, act, s_, idx);
    }
    // Both conv_fwd and tc_conv_fwd pool in their epilogues (the same limits).
    bool pools_in_conv(const ConvDims& d) const override { return conv_pool_unfit(d).empty(); }
    void conv_bwd_data(const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr Wt,
                       unsigned act) override {
        const std::string k = conv_bwd_data_kernel(d, tc_);
        if (k == "tc_conv_bwd_data") launch_tc_conv_bwd_data(ks_.get(k), d, dX, dY, Y, Wt, act, s_);
        else launch_conv_bwd_data(ks_.get(k), d, dX, dY, Y, Wt, act, s_);
    }
    // tc_conv_bwd_data runs the pool's backward in its epilogue (pool_in_conv: cfg.pool_bwd_in_conv).
    bool pools_in_conv_bwd(const ConvDims& d) const override {
        return pool_in_conv_ && std::string(conv_bwd_data_kernel(d, tc_)) == "tc_conv_bwd_data";
    }
    void conv_bwd_data_pool(const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr Wt,
                            unsigned act, const PoolBelow& pool) override {
        launch_tc_conv_bwd_data(ks_.get("tc_conv_bwd_data"), d, dX, dY, Y, Wt, act, s_, pool);
    }
    void conv_bwd_weights(const ConvDims& d, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X, CUdeviceptr dY,
                          CUdeviceptr Y, unsigned act, float scale) override {
        const CUstream s = weights_stream();
        ScopedLaunchPriority least(0);
        const std::string k = conv_bwd_weights_kernel(d, tc_);
        if (k == "dense_tc")
            launch_dense_tc(ks_.get(k), dense_bwd_weights_args(d.N, d.C, d.K, dW, db, X, dY, Y, act, scale), s);
        else if (k == "dense_mm")
            launch_dense_mm(ks_.get(k), dense_bwd_weights_args(d.N, d.C, d.K, dW, db, X, dY, Y, act, scale), s);
        else if (k == "tc_grad_weights")
            launch_tc_grad_weights(ks_.get(k), d.N, d.C, d.K, dW, db, dY, Y, X, act, scale, s);
        else if (k == "tc_grad_weights_wide")
            launch_tc_grad_weights_wide(ks_.get(k), d.N, d.C, d.K, dW, db, dY, Y, X, act, scale, s);
        else if (k == "tc_conv_bwd_weights")
            launch_tc_conv_bwd_weights(ks_.get(k), d, dW, db, X, dY, Y, act, scale, s);
        else launch_conv_bwd_weights(ks_.get(k), d, dW, db, X, dY, Y, act, scale, s);
    }
    void pool_fwd(unsigned P, unsigned H, unsigned W, CUdeviceptr Y, CUdeviceptr idx, CUdeviceptr X) override {
        launch_pool_fwd(ks_.get("pool_fwd"), P, H, W, Y, idx, X, s_);
    }
    void pool_bwd(unsigned P, unsigned H, unsigned W, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr idx,
                  CUdeviceptr Yp) override {
        launch_pool_bwd(ks_.get("pool_bwd"), P, H, W, dX, dY, idx, Yp, s_);
    }
    void fused_output(const FusedArgs& a) override { launch_fused_output(ks_, a, s_); }
    void fused_forward(const FusedArgs& a) override {
        const std::string k = fc_forward_kernel(a, tc_, wgk_);
        if (k == "fused_forward") return launch_fused_forward(ks_, a, s_);
        if (k == "dense_wg_k")  // overlapped as fused_forward, which it stands in for
            return launch_dense_wg_k(ks_.get(k), densewgk_forward_args(a.B, a.I, a.H, a.X, a.W1, a.b1, a.A1, true), s_,
                                     a.overlap);
        if (k == "dense_tc")
            return launch_dense_tc(ks_.get(k), dense_forward_args(a.B, a.I, a.H, a.X, a.W1, a.b1, a.A1, 1), s_);
        launch_dense_mm(ks_.get("dense_mm"), dense_forward_args(a.B, a.I, a.H, a.X, a.W1, a.b1, a.A1, 1), s_);
    }
    void fused_grad(const FusedArgs& a) override {
        const CUstream s = weights_stream();
        ScopedLaunchPriority least(0);
        const std::string k = fused_grad_kernel(a, tc_);
        if (k == "tc_grad_weights_wide") launch_tc_grads_wide(ks_.get(k), a, s);
        else if (k == "dense_mm") launch_dense_grads(ks_.get(k), a, s);
        else launch_fused_grad(ks_, a, s);
    }
    void fc_bwd_data(unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr W,
                     unsigned act) override {
        const std::string k = fc_bwd_data_kernel(B, I, O, tc_);
        if (k == "fc_bwd_data") return launch_fc_bwd_data(ks_.get(k), B, I, O, dX, dY, Y, W, act, s_);
        if (k == "dense_tc") return launch_dense_tc(ks_.get(k), dense_bwd_data_args(B, I, O, dX, dY, Y, W, act), s_);
        launch_dense_mm(ks_.get("dense_mm"), dense_bwd_data_args(B, I, O, dX, dY, Y, W, act), s_);
    }
    bool fc_deltas(const FcDeltas& d) override {
        const char* k = fc_deltas_kernel(d, tc_, wgk_);
        if (std::string_view(k) != "dense_wg_k") return CnnOps::fc_deltas(d);
        launch_dense_wg_k(ks_.get(k), densewgk_deltas_args(d.B, d.I, d.O, d.dX, d.dY, d.Wt, d.Yb), s_);
        return fc_deltas_masked(d, k);
    }
    void transpose_weights(unsigned O, unsigned I, CUdeviceptr Wt, CUdeviceptr W) override {
        launch_transpose32(ks_.get("transpose32"), Wt, W, O, I, s_);
    }
    void act_fwd(unsigned n, CUdeviceptr A, CUdeviceptr Z, unsigned code) override {
        launch_act_fwd(ks_.get("act_fwd"), n, A, Z, code, s_);
    }
    void act_bwd(unsigned n, CUdeviceptr G, CUdeviceptr dA, CUdeviceptr A, CUdeviceptr Z, unsigned code) override {
        launch_act_bwd(ks_.get("act_bwd"), n, G, dA, A, Z, code, s_);
    }
    void layer_kernel(const LayerKernel& k) override { k.launch(ks_.get(k.entry), s_); }
    // With LayerUpdates: the update of a layer of kDenseMin parameters or more (dense.hpp: 512K)
    // on the side stream of the last weight gradient (the one that wrote these parameters'
    // gradient), after the main stream's launches so far (those that read them). Smaller ones wait
    // for the one launch after the join: the CNN's four updates apart made its step slower on an
    // H100 (117.5 against 110.1 us, tc), where 784,1024,1024,10's went from 45.0 to 36.3
    // (with tc_grad_weights_wide; BENCHMARKS.md).
    void params_ready(size_t first, size_t count) override {
        if (!updates_ || count < kDenseMin) return;
        if (!used_[last_])
            PTXLAB_THROW(Error, "internal error: parameters {}..{} ready before any weight gradient", first,
                         first + count);
        side_->fork.record(s_);
        const CUstream t = side_->stream[last_].get();
        CU(cuStreamWaitEvent, t, side_->fork.get(), 0);
        ScopedLaunchPriority least(0);
        launch_optimizer_range(ks_, *updates_, first, count, t);
        updates_->done.emplace_back(first, count);
    }

private:
    // Where a weight gradient goes: the next side stream in turn, after the main stream's work
    // so far, or the main stream when there are no side streams.
    CUstream weights_stream() {
        if (!side_) return s_;
        const unsigned i = next_;
        last_ = i;
        next_ = (next_ + 1) % CnnSideStream::kStreams;
        side_->fork.record(s_);
        CU(cuStreamWaitEvent, side_->stream[i].get(), side_->fork.get(), 0);
        used_[i] = true;
        return side_->stream[i].get();
    }
    const KernelSet& ks_;
    CUstream s_;
    bool tc_;
    bool wgk_;  // dense_wg_k loaded (a 9.0 device): the tc set's small fc forward passes (cnn_ops.hpp)
    CnnSideStream* side_;
    bool pool_in_conv_;
    LayerUpdates* updates_;  // the optimizer by layer (side streams only), else null
    unsigned next_ = 0, last_ = 0;
    bool used_[CnnSideStream::kStreams] = {};
};

CnnBuffers buffers_of(const CnnParams& p, const CnnActs& a) {
    CnnBuffers b;
    b.B = a.B;
    b.params = p.params.ptr();
    b.grads = p.grads.ptr();
    b.D2 = a.D2.ptr();
    b.act = a.act;
    b.running = p.running.bytes() ? p.running.ptr() : 0;
    for (const DeviceBuffer& d : a.delta) b.delta.push_back(d.ptr());
    for (const DeviceBuffer& z : a.z) b.z.push_back(z.bytes() ? z.ptr() : 0);
    for (const DeviceBuffer& t : a.wt) b.wt.push_back(t.bytes() ? t.ptr() : 0);
    for (size_t l = 0; l < a.out.size(); ++l) {
        b.out.push_back(a.out[l].ptr());
        b.idx.push_back(a.idx[l].ptr());
    }
    return b;
}

}  // namespace

void enqueue_cnn_forward(const KernelSet& ks, const Model& m, const CnnParams& p, const CnnActs& a, CUdeviceptr X,
                         CUdeviceptr T, CUdeviceptr Y, unsigned loss_code, CUstream s, ConvKernels conv, bool train) {
    KernelOps ops(ks, s, conv);
    CnnBuffers b = buffers_of(p, a);
    b.train = train;
    cnn_forward(ops, m, b, X, T, Y, loss_code);
}

void enqueue_cnn_step(const KernelSet& ks, const Model& m, const CnnParams& p, const CnnActs& a, CUdeviceptr X,
                      CUdeviceptr T, CUdeviceptr Y, const TrainConfig& cfg, CUdeviceptr hyp, CUstream s) {
    const ConvKernels conv = conv_kernels_of(cfg.kernels);
    // With side streams (cfg.overlap), the main chain goes first where both have blocks waiting.
    std::optional<ScopedLaunchPriority> first;
    if (cfg.overlap) first.emplace(ScopedLaunchPriority::greatest());
    // W^T of the layers whose deltas run on dense_wg_k, from this step's W: beside the forward
    // pass on a side stream (cfg.overlap), which the backward pass then waits for.
    const bool transposes = std::any_of(a.wt.begin(), a.wt.end(), [](const DeviceBuffer& t) { return t.bytes(); });
    if (transposes) {
        CUstream t = s;
        if (cfg.overlap) {
            a.side.fork.record(s);
            t = a.side.stream[0].get();
            CU(cuStreamWaitEvent, t, a.side.fork.get(), 0);
        }
        ScopedLaunchPriority least(0);
        KernelOps ops(ks, t, conv);
        cnn_transpose_weights(ops, m, buffers_of(p, a));
        if (cfg.overlap) a.side.wt_ready.record(t);
    }
    enqueue_cnn_forward(ks, m, p, a, X, T, Y, loss_code(cfg.loss), s, conv);
    if (transposes && cfg.overlap) CU(cuStreamWaitEvent, s, a.side.wt_ready.get(), 0);
    // The backward pass; with side streams each large layer's update there, right after its
    // gradient (LayerUpdates), and after the join the optimizer over the parameters left (all of
    // them without side streams), range by range.
    LayerUpdates u{cfg.optim, p.params.ptr(), p.grads.ptr(), p.m_ptr(cfg.optim), p.v_ptr(cfg.optim), hyp, {}};
    {
        KernelOps ops(ks, s, conv, cfg.overlap ? &a.side : nullptr, cfg.pool_bwd_in_conv, &u);
        cnn_backward(ops, m, buffers_of(p, a), X, grad_scale(cfg.loss, a.B, kClasses));
        ops.join();
    }
    std::sort(u.done.begin(), u.done.end());
    size_t next = 0;
    u.done.emplace_back(p.count, 0);  // the end
    for (const auto& [first, count] : u.done) {
        if (first > next) launch_optimizer_range(ks, u, next, first - next, s);
        next = std::max(next, first + count);
    }
}

CnnEvaluator::CnnEvaluator(const Model& m, const Split& test, Activation act)
    : test_(test), a_(m, kEvalBatch, act), X_(test.images.size() * 4, "test images"),
      T_(test.count * kClasses * 4, "test targets"), Y_(test.count * kClasses * 4, "test logits") {
    if (const unsigned tail = unsigned(test.count % kEvalBatch)) tail_.emplace(m, tail, act);
    X_.upload(test.images);
    T_.upload(one_hot(test.labels));
}

EvalResult CnnEvaluator::run(const KernelSet& ks, const Model& m, const CnnParams& p, Loss loss, ConvKernels conv,
                             CUstream s) {
    // Batches of 500, then the rest of the split in one smaller batch (each sample's logits are
    // its own: the batch they share does not change them).
    for (size_t first = 0; first < test_.count; first += kEvalBatch) {
        const CnnActs& a = first + kEvalBatch <= test_.count ? a_ : *tail_;
        enqueue_cnn_forward(ks, m, p, a, at(X_, first * test_.dim()), at(T_, first * kClasses),
                            at(Y_, first * kClasses), loss_code(loss), s, conv, false);
    }
    CU(cuStreamSynchronize, s);
    const std::vector<float> y = Y_.download_vector<float>();
    EvalResult r;
    r.count = test_.count;
    r.confusion.assign(kClasses * kClasses, 0);
    std::vector<uint8_t> pred;  // argmax of each row (the first of equal maxima)
    r.loss = batch_loss(loss, y.data(), test_.labels, 0, test_.count, &pred);
    size_t correct = 0;
    for (size_t i = 0; i < test_.count; ++i) {
        correct += pred[i] == test_.labels[i];
        ++r.confusion[test_.labels[i] * kClasses + pred[i]];
    }
    r.accuracy = double(correct) / double(test_.count);
    return r;
}

EvalResult evaluate_cnn(const KernelSet& ks, const Model& m, const CnnParams& p, const Split& test, Loss loss,
                        ConvKernels conv, Activation act) {
    CnnEvaluator ev(m, test, act);
    Stream stream;
    return ev.run(ks, m, p, loss, conv, stream.get());
}

namespace {

// A --model's step for the one training loop (step_program.hpp): the parameters, optimizer state
// and per-batch buffers on the GPU, the step as cnn_forward + cnn_backward + the optimizer.
// enqueue_steps launches it as enqueue_cnn_step does (the weight gradients on side streams with
// cfg.overlap); step_kernels gives the same launches one by one on one stream, each with the
// buffers it writes, for the NaN hunt. Where a one-launch step takes the network, it runs instead:
// fc3_step for 3 fc layers on the tc set (Fc3Step: a chunk's steps in one launch, the optimizer in
// it), dense_program + the optimizer when --dense-program asks (DenseStep).
class ModelProgram : public StepProgram {
public:
    ModelProgram(const TrainConfig& cfg, const Split& test)
        : cfg_(cfg), m_(*cfg.model), conv_(conv_kernels_of(cfg.kernels)),
          p_(m_, init_model_params(m_, cfg.init, cfg.seed), cfg.optim), a_(m_, cfg.batch, cfg.activation),
          eval_(m_, test, cfg.activation) {
        // Every buffer a launch writes, by its address: the layers' outputs, argmaxes and deltas,
        // the output deltas, and each tensor's parameters and gradient (views of the flat buffers).
        for (size_t l = 0; l < m_.layers.size(); ++l) {
            const LayerSpec& ly = m_.layers[l];
            name(a_.out[l], ly.out.size());
            if (ly.kind == LayerKind::Pool) name(a_.idx[l], ly.out.size());
            if (const LayerStepRow* row = layer_step_row(ly.kind); row && row->scratch) name(a_.idx[l], ly.width);
            if (l < a_.delta.size()) name(a_.delta[l], ly.out.size());
            if (a_.z[l].bytes()) name(a_.z[l], ly.out.size());
            if (ly.kind == LayerKind::Pool) continue;
            for (bool bias : {false, true}) {
                const size_t off = (bias ? ly.bias_offset : ly.weight_offset) * 4;
                const size_t bytes = (bias ? ly.bias_count() : ly.weight_count()) * 4;
                const std::string t = fmt::format("{}.{}", ly.name, bias ? "bias" : "weight");
                views_.push_back(std::make_unique<DeviceBuffer>(DeviceBuffer::view(p_.params, off, bytes, t)));
                // An fc weight [out][in] by rows (a message names [o][i]); a conv weight flat.
                params_.push_back({t, views_.back().get(), !bias && ly.kind == LayerKind::Fc ? ly.in.size() : 0});
                views_.push_back(
                    std::make_unique<DeviceBuffer>(DeviceBuffer::view(p_.grads, off, bytes, "grad " + t)));
                name(*views_.back(), 0);
            }
        }
        name(a_.D2, kClasses);
        if (p_.running.bytes()) name(p_.running, 0);
        // 3 fc layers on the tc set: whole steps in one launch of fc3_step (the optimizer in it);
        // --dense-program: the step as dense_program + the optimizer (two launches).
        if (fc3_step_unfit(cfg).empty()) fc3_ = std::make_unique<Fc3Step>(m_, p_, cfg);
        else if (dense_step_unfit(cfg).empty()) dense_ = std::make_unique<DenseStep>(m_, p_, a_, cfg);
    }

    std::vector<StepKernel> step_kernels(const KernelSet& ks, const StepIO& io) override;
    StepKernel dense_program_kernel(const KernelSet& ks, const StepIO& io);
    void enqueue_steps(const KernelSet& ks, const StepIO& first, unsigned steps, CUstream s) override {
        if (fc3(ks)) return fc3_->enqueue_steps(ks, first, steps, s);
        keep_transposes(ks);
        for (unsigned j = 0; j < steps; ++j) {
            const StepIO io = first.next(j);
            if (dense_) dense_->enqueue(ks, io.X, io.T, io.Y, io.hyp, s);
            else enqueue_cnn_step(ks, m_, p_, a_, io.X, io.T, io.Y, cfg_, io.hyp, s);
        }
    }
    void prepare_steps(const KernelSet& ks, const StepIO& first, unsigned steps) override {
        keep_transposes(ks);  // allocations: outside a graph's capture
        if (dense_) dense_->prepare(ks, first, steps);
    }
    // The W^T buffers of dense_wg_k's deltas, once the step's KernelSet is known (tc, dense_wg_k loaded).
    void keep_transposes(const KernelSet& ks) {
        if (!dense_ && !fc3(ks)) a_.keep_transposes(m_, ks, conv_);
    }
    // Whether fc3_step runs the steps with these kernels: its rule held (fc3_step_unfit) and the
    // set has it (else the layer-by-layer step: the same data, other kernels).
    bool fc3(const KernelSet& ks) const { return fc3_ && ks.has("fc3_step"); }
    std::vector<const DeviceBuffer*> state() const override {
        std::vector<const DeviceBuffer*> v = {&p_.params};
        for (const DeviceBuffer* st : {&p_.state1, &p_.state2, &p_.running})
            if (st->bytes()) v.push_back(st);
        return v;
    }
    EvalResult evaluate(const KernelSet& ks, CUstream s, Loss loss, bool) override {
        return eval_.run(ks, m_, p_, loss, conv_, s);
    }
    void load(const ResumeState& r) override {
        p_.params.upload(r.params);
        if (!r.state1.empty()) p_.state1.upload(r.state1);
        if (!r.state2.empty()) p_.state2.upload(r.state2);
        if (p_.running.bytes()) p_.running.upload(r.buffers);
    }
    void store(ResumeState& e) const override {
        e.params = p_.params.download_vector<float>();
        if (p_.state1.bytes()) e.state1 = p_.state1.download_vector<float>();
        if (p_.state2.bytes()) e.state2 = p_.state2.download_vector<float>();
        if (p_.running.bytes()) e.buffers = p_.running.download_vector<float>();
    }
    // fc3_step runs a chunk's steps in one launch (its prologue loads the W1 and W2 tiles): the
    // MLP's one-launch steps' 128; the layer-by-layer step's graphs hold 32.
    unsigned default_chunk() const override { return fc3_ ? 128u : 32u; }
    bool float_lr() const override { return false; }

    // What the NaN hunt reads after a launch that wrote at address p: the buffer that starts there.
    StepKernel::Write write(CUdeviceptr p) const {
        auto it = written_.find(p);
        return it == written_.end() ? StepKernel::Write{"", nullptr, 0} : it->second;
    }
    const TrainConfig& cfg() const { return cfg_; }
    std::vector<StepKernel::Write> parameters() const override { return params_; }

private:
    void name(const DeviceBuffer& b, size_t row_len) { written_[b.ptr()] = {b.name(), &b, row_len}; }
    const TrainConfig& cfg_;
    const Model& m_;
    ConvKernels conv_;
    CnnParams p_;
    CnnActs a_;
    CnnEvaluator eval_;
    std::vector<std::unique_ptr<DeviceBuffer>> views_;
    std::vector<StepKernel::Write> params_;
    std::map<CUdeviceptr, StepKernel::Write> written_;
    std::unique_ptr<DenseStep> dense_;  // the one-launch step (dense_step_unfit), or none
    std::unique_ptr<Fc3Step> fc3_;      // whole steps in one launch (fc3_step_unfit), or none
};

// The step's operations as StepKernels: each launches the operation alone on the stream it is
// given (KernelOps without side streams: the same bits), and names what it writes.
class StepKernelOps : public CnnOps {
public:
    StepKernelOps(const KernelSet& ks, ConvKernels conv, const ModelProgram& prog, const StepIO& io,
                  std::vector<StepKernel>& out)
        : ks_(ks), conv_(conv), tc_(conv == ConvKernels::Tc), wgk_(tc_ && ks.has("dense_wg_k")), prog_(prog), io_(io),
          out_(out) {}
    void conv_fwd(const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b, CUdeviceptr Y, unsigned act,
                  CUdeviceptr idx) override {
        add(conv_fwd_kernel(d, tc_), {Y, idx}, [=](KernelOps& k) { k.conv_fwd(d, X, Wt, b, Y, act, idx); });
    }
    bool pools_in_conv(const ConvDims& d) const override { return conv_pool_unfit(d).empty(); }
    void conv_bwd_data(const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr Wt,
                       unsigned act) override {
        add(conv_bwd_data_kernel(d, tc_), {dX}, [=](KernelOps& k) { k.conv_bwd_data(d, dX, dY, Y, Wt, act); });
    }
    bool pools_in_conv_bwd(const ConvDims& d) const override {
        return prog_.cfg().pool_bwd_in_conv && std::string(conv_bwd_data_kernel(d, tc_)) == "tc_conv_bwd_data";
    }
    void conv_bwd_data_pool(const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr Wt,
                            unsigned act, const PoolBelow& pool) override {
        add("tc_conv_bwd_data", {dX}, [=](KernelOps& k) { k.conv_bwd_data_pool(d, dX, dY, Y, Wt, act, pool); });
    }
    void conv_bwd_weights(const ConvDims& d, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X, CUdeviceptr dY,
                          CUdeviceptr Y, unsigned act, float scale) override {
        add(conv_bwd_weights_kernel(d, tc_), {dW, db},
            [=](KernelOps& k) { k.conv_bwd_weights(d, dW, db, X, dY, Y, act, scale); });
    }
    void pool_fwd(unsigned P, unsigned H, unsigned W, CUdeviceptr Y, CUdeviceptr idx, CUdeviceptr X) override {
        add("pool_fwd", {Y, idx}, [=](KernelOps& k) { k.pool_fwd(P, H, W, Y, idx, X); });
    }
    void pool_bwd(unsigned P, unsigned H, unsigned W, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr idx,
                  CUdeviceptr Yp) override {
        add("pool_bwd", {dX}, [=](KernelOps& k) { k.pool_bwd(P, H, W, dX, dY, idx, Yp); });
    }
    void fused_output(const FusedArgs& a) override {
        add("fused_output", {a.D2, a.D1}, [=](KernelOps& k) { k.fused_output(a); });
        out_.back().y_offset = io_.y_offset + 1;  // Y first, then D2 and D1
    }
    void fused_forward(const FusedArgs& a) override {
        add(fc_forward_kernel(a, tc_, wgk_), {a.A1, a.D1}, [=](KernelOps& k) { k.fused_forward(a); });  // D1: GELU's Z
    }
    void fused_grad(const FusedArgs& a) override {
        add(fused_grad_kernel(a), {a.GW1, a.Gb1, a.GW2, a.Gb2}, [=](KernelOps& k) { k.fused_grad(a); });
    }
    void fc_bwd_data(unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr W,
                     unsigned act) override {
        add(fc_bwd_data_kernel(B, I, O, tc_), {dX}, [=](KernelOps& k) { k.fc_bwd_data(B, I, O, dX, dY, Y, W, act); });
    }
    bool fc_deltas(const FcDeltas& d) override {
        const char* k = fc_deltas_kernel(d, tc_, wgk_);
        add(k, {d.dX}, [=](KernelOps& ops) { ops.fc_deltas(d); });
        return fc_deltas_masked(d, k);
    }
    void transpose_weights(unsigned O, unsigned I, CUdeviceptr Wt, CUdeviceptr W) override {
        add("transpose32", {}, [=](KernelOps& k) { k.transpose_weights(O, I, Wt, W); });
    }
    void act_fwd(unsigned n, CUdeviceptr A, CUdeviceptr Z, unsigned code) override {
        add("act_fwd", {A}, [=](KernelOps& k) { k.act_fwd(n, A, Z, code); });
    }
    void act_bwd(unsigned n, CUdeviceptr G, CUdeviceptr dA, CUdeviceptr A, CUdeviceptr Z, unsigned code) override {
        add("act_bwd", {G}, [=](KernelOps& k) { k.act_bwd(n, G, dA, A, Z, code); });
    }
    void layer_kernel(const LayerKernel& k) override {
        add(k.entry, k.writes, [=](KernelOps& ops) { ops.layer_kernel(k); });
    }

private:
    void add(std::string name, std::initializer_list<CUdeviceptr> writes, std::function<void(KernelOps&)> op) {
        add(std::move(name), std::vector<CUdeviceptr>(writes), std::move(op));
    }
    void add(std::string name, const std::vector<CUdeviceptr>& writes, std::function<void(KernelOps&)> op) {
        StepKernel sk;
        sk.name = std::move(name);
        for (CUdeviceptr p : writes)
            if (StepKernel::Write w = prog_.write(p); w.buf) sk.writes.push_back(w);
        sk.launch = [&ks = ks_, conv = conv_, op = std::move(op)](CUstream s) {
            KernelOps k(ks, s, conv);
            op(k);
        };
        out_.push_back(std::move(sk));
    }
    const KernelSet& ks_;
    ConvKernels conv_;
    bool tc_;
    bool wgk_;
    const ModelProgram& prog_;
    StepIO io_;
    std::vector<StepKernel>& out_;
};

// dense_program as one StepKernel: it writes the hidden outputs, Y, the output deltas, the hidden
// layers' deltas and the whole gradient (by tensor), in that order.
StepKernel ModelProgram::dense_program_kernel(const KernelSet& ks, const StepIO& io) {
    StepKernel sk;
    sk.name = "dense_program";
    for (size_t l = 0; l + 1 < m_.layers.size(); ++l)
        if (StepKernel::Write w = write(a_.out[l].ptr()); w.buf) sk.writes.push_back(w);
    sk.y_offset = io.y_offset + 1;
    sk.y_after = sk.writes.size();
    std::vector<CUdeviceptr> rest = {a_.D2.ptr()};
    for (const DeviceBuffer& d : a_.delta) rest.push_back(d.ptr());
    for (const LayerSpec& ly : m_.layers)
        for (size_t off : {ly.weight_offset, ly.bias_offset}) rest.push_back(p_.grads.ptr() + off * 4);
    for (CUdeviceptr p : rest)
        if (StepKernel::Write w = write(p); w.buf) sk.writes.push_back(w);
    DenseStep* d = dense_.get();
    sk.launch = [&ks, d, io](CUstream s) { d->launch_program(ks, io.X, io.T, io.Y, s); };
    return sk;
}

std::vector<StepKernel> ModelProgram::step_kernels(const KernelSet& ks, const StepIO& io) {
    if (fc3(ks)) return {fc3_->step_kernel(ks, io, params_)};  // the optimizer's update in it
    std::vector<StepKernel> v;
    if (dense_) {
        v.push_back(dense_program_kernel(ks, io));
    } else {
        keep_transposes(ks);
        StepKernelOps ops(ks, conv_, *this, io, v);
        const CnnBuffers b = buffers_of(p_, a_);
        cnn_transpose_weights(ops, m_, b);
        cnn_forward(ops, m_, b, io.X, io.T, io.Y, loss_code(cfg_.loss));
        cnn_backward(ops, m_, b, io.X, grad_scale(cfg_.loss, io.B, kClasses));
    }
    const OptimConfig o = cfg_.optim;
    const CUdeviceptr P = p_.params.ptr(), G = p_.grads.ptr(), M = p_.m_ptr(o), V = p_.v_ptr(o), hyp = io.hyp;
    const unsigned n = static_cast<unsigned>(p_.count);
    v.push_back({optimizer_entry(o.kind),
                 [&ks, o, P, G, M, V, hyp, n](CUstream s) { launch_optimizer(ks, o, P, G, M, V, hyp, n, s); },
                 params_, 0});
    return v;
}

}  // namespace

std::unique_ptr<StepProgram> make_model_program(const TrainConfig& cfg, const Split& test) {
    return std::make_unique<ModelProgram>(cfg, test);
}

}  // namespace ptxlab
