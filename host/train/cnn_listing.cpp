// What a step of the model trainer launches, by layer, as `train` prints it (train_cnn.hpp:
// cnn_step_kernels, cnn_layer_kernels: the step's data flow run on RecordingOps), and which step
// a run takes (model_step_listing: fc3_step, dense_program or the layer-by-layer step).
#include "cnn_ops.hpp"
#include "dense.hpp"
#include "layer_steps.hpp"
#include "optim.hpp"
#include "train_cnn.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace ptxlab {

namespace {

using namespace cnn_detail;

class RecordingOps : public CnnOps {
public:
    RecordingOps(bool tc, size_t n_layers, bool pool_in_conv, bool wgk)
        : layers(n_layers), tc_(tc), wgk_(tc && wgk), pool_in_conv_(pool_in_conv) {}
    std::vector<std::string> names;
    // By layer: the kernels of its forward pass, of its deltas to its input, of its weight gradient.
    enum Role { kForward, kDeltas, kWeights };
    std::vector<std::array<std::string, 3>> layers;
    void begin_layer(size_t l) override { cur_ = l; }
    void conv_fwd(const ConvDims& d, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, unsigned,
                  CUdeviceptr idx) override {
        record(kForward, std::string(conv_fwd_kernel(d, tc_)) + (idx ? "+pool" : ""));
    }
    bool pools_in_conv(const ConvDims& d) const override { return conv_pool_unfit(d).empty(); }
    void conv_bwd_data(const ConvDims& d, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, unsigned) override {
        record(kDeltas, conv_bwd_data_kernel(d, tc_));
    }
    // KernelOps' rule (train_cnn.cpp): tc_conv_bwd_data takes the pool below into its epilogue
    // when TrainConfig::pool_bwd_in_conv asks for it.
    bool pools_in_conv_bwd(const ConvDims& d) const override {
        return pool_in_conv_ && std::string(conv_bwd_data_kernel(d, tc_)) == "tc_conv_bwd_data";
    }
    void conv_bwd_data_pool(const ConvDims& d, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, unsigned,
                            const PoolBelow&) override {
        record(kDeltas, std::string(conv_bwd_data_kernel(d, tc_)) + "+pool");
    }
    void conv_bwd_weights(const ConvDims& d, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, unsigned,
                          float) override {
        record(kWeights, conv_bwd_weights_kernel(d, tc_));
    }
    void pool_fwd(unsigned, unsigned, unsigned, CUdeviceptr, CUdeviceptr, CUdeviceptr) override { record(kForward, "pool_fwd"); }
    void pool_bwd(unsigned, unsigned, unsigned, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr) override {
        record(kDeltas, "pool_bwd");
    }
    void fused_output(const FusedArgs&) override { record(kForward, "fused_output"); }
    void fused_forward(const FusedArgs& a) override { record(kForward, fc_forward_kernel(a, tc_, wgk_)); }
    void fused_grad(const FusedArgs& a) override {  // dense_mm, the wide kernel: two launches, one table entry
        const std::string k = fused_grad_kernel(a, tc_);
        record(kWeights, k);
        if (k != "fused_grad") names.push_back(k);
    }
    void fc_bwd_data(unsigned B, unsigned I, unsigned O, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr,
                     unsigned) override {
        record(kDeltas, fc_bwd_data_kernel(B, I, O, tc_));
    }
    bool fc_deltas(const FcDeltas& d) override {  // KernelOps' rule
        const char* k = fc_deltas_kernel(d, tc_, wgk_);
        record(kDeltas, k);
        return fc_deltas_masked(d, k);
    }
    void transpose_weights(unsigned, unsigned, CUdeviceptr, CUdeviceptr) override { record(kDeltas, "transpose32"); }
    void act_fwd(unsigned, CUdeviceptr, CUdeviceptr, unsigned) override { record(kForward, "act_fwd"); }
    void act_bwd(unsigned, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, unsigned) override {
        record(kDeltas, "act_bwd");
    }
    void layer_kernel(const LayerKernel& k) override {
        record(k.role == LayerKernel::kForward ? kForward : k.role == LayerKernel::kDeltas ? kDeltas : kWeights, k.entry);
    }

private:
    void record(Role r, const std::string& name) {
        names.push_back(name);
        if (cur_ < layers.size()) layers[cur_][r] += (layers[cur_][r].empty() ? "" : ", ") + name;
    }
    bool tc_;
    bool wgk_;  // dense_wg_k loaded (KernelOps' rule, cnn_ops.hpp)
    bool pool_in_conv_;
    size_t cur_ = 0;
};
// One step of `m` recorded (RecordingOps), with addresses that are never read but not 0 (0
// means "none": a conv without its pool). W^T kept where the trainer keeps it: dense_wg_k and
// transpose32 both loaded (CnnActs::keep_transposes).
RecordingOps record_step(const Model& m, ConvKernels conv, unsigned B, Activation act, bool pool_in_conv, bool wgk,
                         bool transposes) {
    RecordingOps ops(conv == ConvKernels::Tc, m.layers.size(), pool_in_conv, wgk);
    CnnBuffers b;
    b.B = B;
    b.act = act;
    // Addresses that are never read, but not 0 (0 means "none": a conv without its pool).
    for (size_t l = 0; l < m.layers.size(); ++l) {
        b.out.push_back(CUdeviceptr(0x1000 * (3 * l + 1)));
        b.idx.push_back(CUdeviceptr(0x1000 * (3 * l + 2)));
        if (l + 1 < m.layers.size()) b.delta.push_back(CUdeviceptr(0x1000 * (3 * l + 3)));
        b.z.push_back(CUdeviceptr(0x100000 + 0x1000 * l));
        const bool wt = keeps_transposed_weights(m, l, conv == ConvKernels::Tc, wgk && transposes);
        b.wt.push_back(wt ? CUdeviceptr(0x200000 + 0x1000 * l) : 0);
    }
    b.running = 0x400;
    b.params = 0x1000000;  // 16-byte aligned as an allocation: each layer's W as aligned as in a run
    cnn_transpose_weights(ops, m, b);
    cnn_forward(ops, m, b, 0x100, 0x200, 0x300, 0);
    cnn_backward(ops, m, b, 0x100, 1.0f);
    return ops;
}

}  // namespace

std::string cnn_layer_kernels(const Model& m, ConvKernels conv, unsigned B, Activation act, bool pool_in_conv,
                              bool wgk, bool transposes) {
    const RecordingOps ops = record_step(m, conv, B, act, pool_in_conv, wgk, transposes);
    std::string out = fmt::format("  {:<7} {:<28} {:<22} {}\n", "layer", "forward", "deltas to its input",
                                  "weight gradient");
    const size_t L = m.layers.size();
    for (size_t l = 0; l < L; ++l) {
        const auto& k = ops.layers[l];
        std::string fwd = k[RecordingOps::kForward];
        if (fwd.empty() && l > 0) fwd = fmt::format("in {}'s epilogue", m.layers[l - 1].name);
        std::string wgt = k[RecordingOps::kWeights];
        if (wgt.empty() && l + 2 == L && m.layers[l].kind == LayerKind::Fc && !ops.layers[l + 1][2].empty())
            wgt = fmt::format("{} (with {})", ops.layers[l + 1][2], m.layers[l + 1].name);
        if (const LayerStepRow* row = layer_step_row(m.layers[l].kind); wgt.empty() && row && row->weight_gradient)
            wgt = row->weight_gradient;  // "in bn_bwd"
        std::string back = k[RecordingOps::kDeltas];
        // A pool whose backward runs in the deltas launch of the conv above (conv_bwd_data_pool).
        if (back.empty() && l > 0 && l + 1 < L && m.layers[l].kind == LayerKind::Pool &&
            ops.layers[l + 1][RecordingOps::kDeltas].ends_with("+pool"))
            back = fmt::format("in {}'s epilogue", m.layers[l + 1].name);
        if (l + 1 == L) {
            fwd += " (logits, loss)";
            if (back.empty()) back = "in fused_output";  // else fc_bwd_data: a pool below, no ReLU
        }
        out += fmt::format("  {:<7} {:<28} {:<22} {}\n", m.layers[l].name, fwd, back.empty() ? "-" : back,
                           wgt.empty() ? "-" : wgt);
    }
    return out;
}

bool cnn_wgk_loaded(const DeviceInfo& dev, KernelSource source, const KernelDirs& dirs) {
    return kernel_absent_reason(kernel_spec("dense_wg_k"), source, dev, dirs).empty();
}
bool cnn_transposes_loaded(const DeviceInfo& dev, KernelSource source, const KernelDirs& dirs) {
    return kernel_absent_reason(kernel_spec("transpose32"), source, dev, dirs).empty();
}

std::string cnn_step_kernels(const Model& m, ConvKernels conv, unsigned B, Activation act, bool pool_in_conv,
                             bool wgk, bool transposes) {
    const RecordingOps ops = record_step(m, conv, B, act, pool_in_conv, wgk, transposes);
    // "fused_forward x2, fused_output, ...": each name once, in the order of its first launch.
    std::vector<std::pair<std::string, unsigned>> seen;
    for (const auto& n : ops.names) {
        auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& p) { return p.first == n; });
        if (it == seen.end()) seen.push_back({n, 1});
        else ++it->second;
    }
    std::string out;
    for (const auto& [n, k] : seen) out += fmt::format("{}{}{}", out.empty() ? "" : ", ", n, k > 1 ? fmt::format(" x{}", k) : "");
    return out;
}

std::string model_step_listing(const TrainConfig& cfg, bool wgk, bool transposes) {
    const Model& m = *cfg.model;
    if (fc3_step_unfit(cfg).empty())  // the whole step, the optimizer included, in one launch
        return fmt::format("  a step: fc3_step (the whole step in one launch: every layer's forward pass, the loss, "
                           "every gradient and the optimizer's update; TF32 products; {} a launch)\n",
                           cfg.steps_per_launch ? fmt::format("{} steps", cfg.steps_per_launch)
                                                : std::string("every step of a chunk")) +
               fc3_step_layer_kernels(m);
    const std::string optim = optimizer_entry(cfg.optim.kind);
    if (dense_step_unfit(cfg).empty())  // the whole step but the optimizer in one launch (ptx/densestep.ptx)
        return fmt::format("  a step: dense_program, {} (one launch: every layer's forward pass, the loss, every "
                           "gradient; FP32; then the optimizer)\n",
                           optim) +
               dense_step_layer_kernels(m);
    // Why no one-launch step runs an fc network: fc3_step's reason where it has 3 layers.
    std::string why;
    if (m.fc_only())
        why = " (no one-launch step: " + (m.layers.size() == 3 ? fc3_step_unfit(cfg) : dense_step_unfit(cfg)) + ")";
    const ConvKernels conv = conv_kernels_of(cfg.kernels);
    return fmt::format("  a step: {}, {}{}\n",
                       cnn_step_kernels(m, conv, cfg.batch, cfg.activation, cfg.pool_bwd_in_conv, wgk, transposes),
                       optim, why) +
           cnn_layer_kernels(m, conv, cfg.batch, cfg.activation, cfg.pool_bwd_in_conv, wgk, transposes);
}

}  // namespace ptxlab
