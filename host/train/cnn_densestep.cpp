// An fc-only --model's step as dense_program + the optimizer (train_cnn.hpp: DenseStep): the
// forward pass, the loss delta and every gradient in one launch (ptx/densestep.ptx), then the
// optimizer (ptx/optim.ptx), on the model trainer's buffers.
#include "train_cnn.hpp"

#include "densestep.hpp"
#include "densetc.hpp"
#include "optim.hpp"
#include "recipe.hpp"

#include <fmt/format.h>

namespace ptxlab {

namespace {
// The step's DenseNet on the model's buffers; X, T, Y those of one step.
DenseNet dense_net_of(const Model& m, const CnnParams& p, const CnnActs& a, float scale, unsigned loss,
                      CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y) {
    DenseNet n;
    n.B = a.B;
    n.sizes = m.fc_sizes();
    n.loss = loss;
    n.scale = scale;
    n.X = X, n.T = T, n.Y = Y, n.D = a.D2.ptr();
    for (size_t l = 0; l < m.layers.size(); ++l) {
        const LayerSpec& ly = m.layers[l];
        n.W.push_back(p.params.ptr() + ly.weight_offset * 4);
        n.b.push_back(p.params.ptr() + ly.bias_offset * 4);
        n.gW.push_back(p.grads.ptr() + ly.weight_offset * 4);
        n.gb.push_back(p.grads.ptr() + ly.bias_offset * 4);
        if (l + 1 < m.layers.size()) {
            n.act.push_back(a.out[l].ptr());
            n.delta.push_back(a.delta[l].ptr());
        }
    }
    return n;
}
}  // namespace

std::string dense_step_unfit(const Model& m, const KernelChoice& k, unsigned B, Activation act) {
    if (!m.fc_only()) return "dense_program takes networks of fc layers only (no conv, pool or bn)";
    if (act != Activation::Relu)
        return fmt::format("dense_program takes ReLU hidden layers, not --activation {}", to_string(act));
    if (k.design != Design::Fused && k.design != Design::Tc)
        return fmt::format("dense_program runs in the fused and tc sets, not {}", to_string(k));
    // A batch large enough for dense_tc (TF32, 128 x 128 tiles) on the tc set: the layer-by-layer
    // step runs its large products there, far faster than dense_program's FP32 64 x 64 tiles.
    if (k.design == Design::Tc) {
        const std::vector<unsigned> w = m.fc_sizes();
        for (size_t l = 0; l + 1 < w.size(); ++l)
            if (densetc_product(B, w[l + 1]) || densetc_product(B, w[l]) || densetc_product(w[l + 1], w[l]))
                return fmt::format("at batch {} the tc set runs the {}x{} layer's products on dense_tc (TF32 tiles), "
                                   "faster there than dense_program's FP32", B, w[l], w[l + 1]);
    }
    DenseNet n;  // the sizes alone: every buffer a placeholder address
    n.B = B;
    n.sizes = m.fc_sizes();
    const size_t L = n.layers();
    n.X = n.T = n.Y = n.D = 1;
    n.W = n.b = n.gW = n.gb = std::vector<CUdeviceptr>(L, 1);
    n.act = n.delta = std::vector<CUdeviceptr>(L ? L - 1 : 0, 1);
    return dense_net_unfit(n);
}

std::string dense_step_unfit(const TrainConfig& cfg) {
    if (!cfg.model) return "dense_program runs the model trainer's step (a --model or 3+ fc layers)";
    if (!cfg.one_launch) return "the layer-by-layer step was asked for (one_launch off)";
    // Measured slower than the layer-by-layer kernels (H100, bench --models fc256,fc128,fc10
    // fc1024,fc1024,fc10: 49.84 against 28.81 us, 123.95 against 78.38): six grid barriers and the
    // serial loss stage cost more than the launches they save. So it runs when asked for.
    if (!cfg.dense_program) return "dense_program, the step in one launch, runs with --dense-program (slower here)";
    return dense_step_unfit(*cfg.model, cfg.kernels, cfg.batch, cfg.activation);
}

std::string dense_step_layer_kernels(const Model& m) {
    const size_t L = m.layers.size();
    std::string out = fmt::format("  {:<7} {:<28} {:<20} {}\n", "layer", "forward", "deltas to its input",
                                  "weight gradient");
    // Stages (densestep.hpp densestep_phases): forward 1 .. L, the loss L+1, then layer l's
    // weight gradient and deltas in stage L + 1 + (L - l).
    for (size_t l = 0; l < L; ++l) {
        const size_t back = L + 1 + (L - l);
        out += fmt::format("  {:<7} {:<28} {:<20} {}\n", m.layers[l].name,
                           fmt::format("dense_program (stage {}{})", l + 1, l + 1 == L ? fmt::format(", loss {}", L + 1) : ""),
                           l == 0 ? std::string("-") : fmt::format("dense_program ({})", back),
                           fmt::format("dense_program ({})", back));
    }
    return out;
}

DenseStep::DenseStep(const Model& m, const CnnParams& p, const CnnActs& a, const TrainConfig& cfg)
    : m_(m), p_(p), a_(a), optim_(cfg.optim), loss_(loss_code(cfg.loss)),
      scale_(grad_scale(cfg.loss, a.B, kClasses)) {}

DenseStep::Table& DenseStep::table(const Kernel& k, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y) {
    auto it = tables_.find({&k, X, T, Y});
    if (it != tables_.end()) return it->second;
    prepare_one(k, {{X, T, Y}});
    return tables_.at({&k, X, T, Y});
}

void DenseStep::prepare_one(const Kernel& k, const std::vector<std::array<CUdeviceptr, 3>>& steps) {
    if (!sync_.count(&k)) {
        DeviceBuffer b(8, "dense_program grid barrier count");
        b.fill_u32(0);
        sync_.emplace(&k, std::move(b));
    }
    const unsigned nominal = densestep_nominal_clusters(), most = densestep_max_clusters(k);
    std::vector<DensePhase> all;
    std::vector<std::pair<std::array<CUdeviceptr, 3>, unsigned>> added;
    for (const auto& xty : steps) {
        if (tables_.count({&k, xty[0], xty[1], xty[2]})) continue;
        const DenseStepPlan plan =
            densestep_plan(dense_net_of(m_, p_, a_, scale_, loss_, xty[0], xty[1], xty[2]), nominal, most);
        nphases_ = unsigned(plan.phases.size());
        added.push_back({xty, plan.clusters});
        all.insert(all.end(), plan.phases.begin(), plan.phases.end());
    }
    if (added.empty()) return;
    pool_.emplace_back(all.size() * sizeof(DensePhase), "dense_program phase tables");
    pool_.back().upload(all);
    for (size_t i = 0; i < added.size(); ++i) {
        const auto& [xty, clusters] = added[i];
        tables_[{&k, xty[0], xty[1], xty[2]}] = {pool_.back().ptr() + i * nphases_ * sizeof(DensePhase), clusters};
    }
}

void DenseStep::prepare(const KernelSet& ks, const StepIO& first, unsigned steps) {
    std::vector<std::array<CUdeviceptr, 3>> v;
    for (unsigned j = 0; j < steps; ++j) {
        const StepIO io = first.next(j);
        v.push_back({io.X, io.T, io.Y});
    }
    prepare_one(ks.get("dense_program"), v);
}

void DenseStep::launch_program(const KernelSet& ks, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, CUstream s) {
    const Kernel& k = ks.get("dense_program");
    const Table& t = table(k, X, T, Y);
    launch_dense_program(k, t.ptr, nphases_, t.clusters, sync_.at(&k).ptr(), s);
}

void DenseStep::enqueue(const KernelSet& ks, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, CUdeviceptr hyp,
                        CUstream s) {
    launch_program(ks, X, T, Y, s);
    launch_optimizer(ks, optim_, p_.params.ptr(), p_.grads.ptr(), p_.m_ptr(optim_), p_.v_ptr(optim_), hyp,
                     static_cast<unsigned>(p_.count), s);
}

}  // namespace ptxlab
