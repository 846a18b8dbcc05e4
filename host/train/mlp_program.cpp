// The MLP's step programs (step_program.hpp) for `--layers` of 2 or 3 layers: the notebook's
// design (one thread a sample, ptx/grad.ptx), fast, fused and tc, and the one-launch steps
// fused_step (ptx/step.ptx) and tc_step (ptx/tcstep.ptx) where the network and batch fit them.
#include "step_program.hpp"

#include "fused.hpp"
#include "optim.hpp"
#include "tc.hpp"
#include "tcstep.hpp"
#include "train_cnn.hpp"

#include <fmt/format.h>

#include <optional>

namespace ptxlab {

namespace {

// The one-launch step training with `cfg` runs, or empty: fused_step for the fused set (any
// loss, optimizer and activation, B <= 64), tc_step for the tensor-core set (B <= 64 and
// tcstep.hpp's limits), unless --three-launches asks for the separate launches.
std::string one_launch_entry(const TrainConfig& cfg) {
    if (!cfg.one_launch || cfg.layers.size() != 3) return {};
    const unsigned B = cfg.batch, I = cfg.layers[0], H = cfg.layers[1], O = cfg.layers[2];
    if (cfg.kernels.design == Design::Fused && fused_step_preferred(B, I, O)) return "fused_step";
    // tc_step is TF32 only: tc-bf16 runs its kernels one launch each.
    if (cfg.kernels.design == Design::Tc && !cfg.kernels.bf16 && tc_step_unfit(B, I, H, O).empty()) return "tc_step";
    return {};
}
bool uses_one_launch(const TrainConfig& cfg) { return !one_launch_entry(cfg).empty(); }

// A one-launch step kernel (fused_step or tc_step) on the buffers and recipe of `a`.
void launch_step_kernel(const Kernel& k, const FusedArgs& a, CUstream s) {
    if (k.spec->entry == "tc_step") launch_tc_step(k, a, s);
    else launch_fused_step(k, a, s);
}

// Parameters and the per-step buffers of one network on the GPU.
//   params        every W and b back to back (W1, b1, W2, b2, ...); W[l], b[l] are views of it
//   grads         the mean gradient, same layout (GW[l], Gb[l] views); state1/state2 the
//                 optimizer's buffers (momentum or Adam's m; Adam's v), same layout
//   acts          A1 (A2) and Y for one batch
//   seed design:  gW, gb  per-sample gradients [B][...]; fast: gW only
//   fused/fast:   D1 [B][H], D2 [B][O]  the deltas
struct DeviceNet {
    std::vector<unsigned> sizes;
    size_t count = 0;  // floats in params
    DeviceBuffer params, grads, state1, state2;
    std::vector<DeviceBuffer> W, b, GW, Gb, gW, gb, acts;
    DeviceBuffer D1, D2;
    DeviceBuffer Yp, sync;  // fused_step's scratch: partial outputs, grid barrier words
    unsigned act = kActRelu;  // the hidden activation's code (act_code) the forward and delta kernels take

    DeviceNet(const NetParams& net, unsigned batch, std::optional<Design> design, unsigned state_buffers = 0,
              bool fused_step = false)
        : sizes(net.sizes) {
        for (size_t l = 0; l < net.layers(); ++l) count += net.W[l].size() + net.b[l].size();
        params = DeviceBuffer(count * 4, "parameters");
        if (design) grads = DeviceBuffer(count * 4, "gradients");
        if (state_buffers > 0) state1 = DeviceBuffer(count * 4, "optimizer state 1 (m; RMSprop's v)");
        if (state_buffers > 1) state2 = DeviceBuffer(count * 4, "optimizer state 2 (Adam's v)");
        for (auto* st : {&state1, &state2})
            if (st->bytes()) st->fill_u32(0);  // PyTorch starts the state at zero
        size_t off = 0;
        for (size_t l = 0; l < net.layers(); ++l) {
            const size_t wb = net.W[l].size() * 4, bb = net.b[l].size() * 4;
            W.push_back(DeviceBuffer::view(params, off, wb, fmt::format("W{}", l + 1)));
            b.push_back(DeviceBuffer::view(params, off + wb, bb, fmt::format("b{}", l + 1)));
            if (design) {
                GW.push_back(DeviceBuffer::view(grads, off, wb, fmt::format("grad W{}", l + 1)));
                Gb.push_back(DeviceBuffer::view(grads, off + wb, bb, fmt::format("grad b{}", l + 1)));
            }
            W.back().upload(net.W[l]);
            b.back().upload(net.b[l]);
            off += wb + bb;
            const bool last = l + 1 == net.layers();
            acts.emplace_back(size_t(batch) * sizes[l + 1] * 4, last ? "Y" : fmt::format("A{}", l + 1));
            if (design == Design::Seed || design == Design::Fast)
                gW.emplace_back(size_t(batch) * net.W[l].size() * 4, fmt::format("gW{} (per-sample)", l + 1));
            if (design == Design::Seed)
                gb.emplace_back(size_t(batch) * net.b[l].size() * 4, fmt::format("gb{} (per-sample)", l + 1));
        }
        if (design && uses_fused_forward(*design)) {  // Fast's bias gradients are these deltas
            D1 = DeviceBuffer(size_t(batch) * sizes[1] * 4, "D1 (hidden deltas)");
            D2 = DeviceBuffer(size_t(batch) * sizes.back() * 4, "D2 (output deltas)");
        }
        if (fused_step) {
            Yp = DeviceBuffer(fused_step_partials(batch, sizes[1], sizes.back()) * 4, "Yp (fused_step partial outputs)");
            Yp.fill_u32(0);  // the padding past the last tile is loaded (and ignored): keep it defined
            sync = DeviceBuffer(8, "fused_step grid barrier");
            sync.fill_u32(0);
        }
    }

    NetParams download() const {
        NetParams n;
        n.sizes = sizes;
        for (size_t l = 0; l + 1 < sizes.size(); ++l) {
            n.W.push_back(W[l].download_vector<float>());
            n.b.push_back(b[l].download_vector<float>());
        }
        return n;
    }
    // The buffers a step changes and the NaN hunt restores: parameters and optimizer state.
    std::vector<const DeviceBuffer*> state() const {
        std::vector<const DeviceBuffer*> v = {&params};
        for (auto* st : {&state1, &state2})
            if (st->bytes()) v.push_back(st);
        return v;
    }
};

void launch_forward(const KernelSet& ks, const DeviceNet& n, CUdeviceptr X, unsigned B, CUstream s) {
    const auto& z = n.sizes;
    const unsigned grid = grid_for(B, 64);
    if (z.size() == 3)
        ks.get("forward2").launch(grid, 64, s, X, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                                  n.acts[0].ptr(), n.acts[1].ptr(), B, z[0], z[1], z[2], n.act);
    else
        ks.get("forward3").launch(grid, 64, s, X, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                                  n.W[2].ptr(), n.b[2].ptr(), n.acts[0].ptr(), n.acts[1].ptr(), n.acts[2].ptr(), B,
                                  z[0], z[1], z[2], z[3], n.act);
}

void launch_grad(const KernelSet& ks, const DeviceNet& n, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, unsigned B,
                 unsigned loss, CUstream s) {
    const auto& z = n.sizes;
    const unsigned grid = grid_for(B, 64);
    if (z.size() == 3)
        ks.get("grad2").launch(grid, 64, s, X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                               n.acts[0].ptr(), Y, n.gW[0].ptr(), n.gb[0].ptr(), n.gW[1].ptr(), n.gb[1].ptr(), B, z[0],
                               z[1], z[2], loss, n.act);
    else
        ks.get("grad3").launch(grid, 64, s, X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                               n.W[2].ptr(), n.b[2].ptr(), n.acts[0].ptr(), n.acts[1].ptr(), Y, n.gW[0].ptr(),
                               n.gb[0].ptr(), n.gW[1].ptr(), n.gb[1].ptr(), n.gW[2].ptr(), n.gb[2].ptr(), B, z[0], z[1],
                               z[2], z[3], loss, n.act);
}

// The seed design's mean gradient: batch_mean over the per-sample gradients of every tensor.
void launch_seed_means(const KernelSet& ks, const DeviceNet& n, unsigned B, float scale, CUstream s) {
    const Kernel& k = ks.get("batch_mean");
    for (size_t l = 0; l < n.W.size(); ++l) {
        const unsigned nw = static_cast<unsigned>(n.W[l].bytes() / 4), nb = static_cast<unsigned>(n.b[l].bytes() / 4);
        k.launch(grid_for(nw), 256, s, n.GW[l].ptr(), n.gW[l].ptr(), nw, B, scale);
        k.launch(grid_for(nb), 256, s, n.Gb[l].ptr(), n.gb[l].ptr(), nb, B, scale);
    }
}

// The buffers of a fused pass on batch X, T (outputs to Y); with a training config, also its
// recipe (loss code, gradient scale, optimizer) and fused_step's flat parameters and state.
FusedArgs fused_args(const DeviceNet& n, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, unsigned B,
                     const TrainConfig* cfg = nullptr) {
    FusedArgs a{X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(), n.acts[0].ptr(), Y, n.D2.ptr(), n.D1.ptr(),
                B, n.sizes[0], n.sizes[1], n.sizes[2]};
    a.Yp = n.Yp.ptr();
    a.sync = n.sync.ptr();
    a.P = n.params.ptr();
    if (cfg) {
        a.loss = loss_code(cfg->loss);
        a.scale = grad_scale(cfg->loss, B, n.sizes[2]);
        a.optim = cfg->optim;
        a.M = n.state1.ptr();
        a.V = n.state2.ptr();
        // An optimizer that keeps v alone (RMSprop) has it in the first buffer.
        if (!optim_uses_m(cfg->optim.kind) && optim_uses_v(cfg->optim.kind)) std::swap(a.M, a.V);
    }
    a.act = n.act;
    if (!n.GW.empty()) {
        a.GW1 = n.GW[0].ptr();
        a.Gb1 = n.Gb[0].ptr();
        a.GW2 = n.GW[1].ptr();
        a.Gb2 = n.Gb[1].ptr();
    }
    return a;
}

// Test-set evaluation with device-resident data, captured once into a graph.
class Evaluator {
public:
    Evaluator(const Split& test, const std::vector<unsigned>& sizes, Design design)
        : test_(test), design_(design), X_(test.images.size() * 4, "test images") {
        X_.upload(test.images);
        for (size_t l = 0; l + 1 < sizes.size(); ++l) {
            acts_.emplace_back(test.count * sizes[l + 1] * 4,
                               l + 2 == sizes.size() ? "test Y" : fmt::format("test A{}", l + 1));
        }
        if (uses_fused_forward(design)) {
            T_ = DeviceBuffer(test.count * kClasses * 4, "test targets");
            T_.upload(one_hot(test.labels));
            D1_ = DeviceBuffer(test.count * sizes[1] * 4, "test D1 (scratch)");
            D2_ = DeviceBuffer(test.count * kClasses * 4, "test D2 (scratch)");
        }
    }

    void enqueue(const KernelSet& ks, DeviceNet& net, CUstream s, Loss loss) {
        const unsigned n = static_cast<unsigned>(test_.count);
        if (uses_fused_forward(design_)) {
            FusedArgs a = fused_args(net, X_.ptr(), T_.ptr(), acts_.back().ptr(), n);
            a.A1 = acts_[0].ptr();
            a.D1 = D1_.ptr();
            a.D2 = D2_.ptr();
            a.loss = loss_code(loss);
            launch_hidden_forward(ks, a, design_, s);
            launch_fused_output(ks, a, s);
            return;
        }
        // Point the network's activation buffers at the test-sized ones for this launch.
        std::swap(net.acts, acts_);
        try {
            launch_forward(ks, net, X_.ptr(), n, s);
        } catch (...) {
            std::swap(net.acts, acts_);
            throw;
        }
        std::swap(net.acts, acts_);
    }

    EvalResult run(const KernelSet& ks, DeviceNet& net, CUstream s, Loss loss, bool use_graph) {
        if (use_graph) {
            if (!graph_) graph_.emplace(s, [&] { enqueue(ks, net, s, loss); });
            graph_->launch(s);
        } else {
            enqueue(ks, net, s, loss);
        }
        wait_for_stream(s);
        std::vector<float> Y = acts_.back().download_vector<float>();
        EvalResult r;
        r.count = test_.count;
        std::vector<uint8_t> pred;
        r.loss = batch_loss(loss, Y.data(), test_.labels, 0, test_.count, &pred);
        r.confusion.assign(kClasses * kClasses, 0);
        size_t right = 0;
        for (size_t i = 0; i < test_.count; ++i) {
            r.confusion[test_.labels[i] * kClasses + pred[i]]++;
            right += pred[i] == test_.labels[i];
        }
        r.accuracy = double(right) / double(test_.count);
        return r;
    }

private:
    const Split& test_;
    Design design_;
    DeviceBuffer X_, T_, D1_, D2_;
    std::vector<DeviceBuffer> acts_;
    std::optional<Graph> graph_;
};

class MlpProgram : public StepProgram {
public:
    MlpProgram(const TrainConfig& cfg, const Split& test)
        : cfg_(cfg), design_(cfg.kernels.design), sizes_(cfg.layers), one_launch_(uses_one_launch(cfg)),
          step_entry_(one_launch_entry(cfg)), evaluator_(test, cfg.layers, design_),
          net_(init_params(cfg.layers, cfg.init, cfg.seed), cfg.batch, design_, cfg.optim.state_buffers(),
               one_launch_ && design_ == Design::Fused) {
        net_.act = act_code(cfg.activation);
    }
    std::vector<StepKernel> step_kernels(const KernelSet& ks, const StepIO& io) override;
    void enqueue_steps(const KernelSet& ks, const StepIO& first, unsigned steps, CUstream s) override;
    std::vector<const DeviceBuffer*> state() const override { return net_.state(); }
    std::vector<StepKernel::Write> parameters() const override {
        std::vector<StepKernel::Write> v;
        for (size_t l = 0; l < net_.W.size(); ++l) {
            v.push_back({fmt::format("fc{}.weight", l + 1), &net_.W[l], sizes_[l]});
            v.push_back({fmt::format("fc{}.bias", l + 1), &net_.b[l], 0});
        }
        return v;
    }
    EvalResult evaluate(const KernelSet& ks, CUstream s, Loss loss, bool graph) override {
        return evaluator_.run(ks, net_, s, loss, graph);
    }
    void load(const ResumeState& r) override;
    void store(ResumeState& e) const override;
    unsigned default_chunk() const override { return design_ == Design::Seed ? 8u : 128u; }
    bool float_lr() const override { return true; }

private:
    const TrainConfig& cfg_;
    const Design design_;
    const std::vector<unsigned>& sizes_;
    const bool one_launch_;
    const std::string step_entry_;  // one_launch_'s kernel: fused_step or tc_step
    Evaluator evaluator_;
    DeviceNet net_;
};

std::vector<StepKernel> MlpProgram::step_kernels(const KernelSet& ks, const StepIO& io) {
    const CUdeviceptr Xb = io.X, Tb = io.T, Yk = io.Y;
    const size_t y_off = io.y_offset;
    const unsigned B_ = io.B, O_ = kClasses;
    DeviceNet& n = net_;
    std::vector<StepKernel::Write> params;
    for (size_t l = 0; l < n.W.size(); ++l) {
        params.push_back({n.W[l].name(), &n.W[l], sizes_[l]});
        params.push_back({n.b[l].name(), &n.b[l], 0});
    }
    std::vector<StepKernel> v;
    if (one_launch_) {  // the whole step in one launch
        FusedArgs a = fused_args(n, Xb, Tb, Yk, B_, &cfg_);
        a.hyp = io.hyp;
        const Kernel& fs = ks.get(step_entry_);
        std::vector<StepKernel::Write> w = {{"A1", &n.acts[0], sizes_[1]}};
        w.insert(w.end(), params.begin(), params.end());
        v.push_back({step_entry_, [&fs, a](CUstream st) { launch_step_kernel(fs, a, st); }, w, y_off + 1, 1});
        return v;
    }
    const float scale = grad_scale(cfg_.loss, B_, O_);
    std::vector<StepKernel::Write> grads;
    for (size_t l = 0; l < n.GW.size(); ++l) {
        grads.push_back({n.GW[l].name(), &n.GW[l], sizes_[l]});
        grads.push_back({n.Gb[l].name(), &n.Gb[l], 0});
    }
    if (uses_fused_forward(design_)) {
        FusedArgs a = fused_args(n, Xb, Tb, Yk, B_, &cfg_);
        // Both 2-layer designs start with the same forward pass and deltas. Only the fused
        // set's kernels all wait with griddepcontrol, so only it may overlap its launches.
        a.overlap = design_ == Design::Fused && cfg_.overlap;
        const bool tc = design_ == Design::Tc;
        v.push_back({tc ? "tc_forward" : "fused_forward",
                     [&ks, a, d = design_](CUstream st) { launch_hidden_forward(ks, a, d, st); },
                     {{"A1", &n.acts[0], sizes_[1]}}, 0});
        v.push_back({"fused_output", [&ks, a](CUstream st) { launch_fused_output(ks, a, st); },
                     {{"D2", &n.D2, O_}, {"D1", &n.D1, sizes_[1]}}, y_off + 1});
        if (design_ == Design::Fused || tc) {
            v.push_back({tc ? "tc_grad_weights" : "fused_grad",
                         [&ks, a, tc](CUstream st) { tc ? launch_tc_grads(ks, a, st) : launch_fused_grad(ks, a, st); },
                         grads, 0});
        } else {
            // Fast: per-sample weight gradients by `outer`, then batch_mean over the batch (the
            // bias gradients are the deltas D1, D2).
            const CUdeviceptr gW1 = n.gW[0].ptr(), gW2 = n.gW[1].ptr();
            v.push_back({"outer", [&ks, a, gW1, gW2](CUstream st) { launch_fast_outer(ks, a, gW1, gW2, st); },
                         {{"gW1", &n.gW[0], sizes_[0]}, {"gW2", &n.gW[1], sizes_[1]}}, 0});
            v.push_back({"batch_mean", [&ks, a, gW1, gW2](CUstream st) { launch_fast_mean(ks, a, gW1, gW2, st); },
                         grads, 0});
        }
    } else {
        const unsigned code = loss_code(cfg_.loss);
        StepKernel g{sizes_.size() == 4 ? "grad3" : "grad2",
                     [&ks, &n, Xb, Tb, Yk, B = B_, code](CUstream st) { launch_grad(ks, n, Xb, Tb, Yk, B, code, st); },
                     {}, y_off + 1};
        for (size_t l = 0; l + 1 < n.acts.size(); ++l)
            g.writes.push_back({fmt::format("A{}", l + 1), &n.acts[l], sizes_[l + 1]});
        for (size_t l = 0; l < n.W.size(); ++l) {
            g.writes.push_back({fmt::format("gW{}", l + 1), &n.gW[l], sizes_[l]});
            g.writes.push_back({fmt::format("gb{}", l + 1), &n.gb[l], sizes_[l + 1]});
        }
        v.push_back(std::move(g));
        v.push_back({"batch_mean", [&ks, &n, B = B_, scale](CUstream st) { launch_seed_means(ks, n, B, scale, st); },
                     grads, 0});
    }
    const OptimConfig& o = cfg_.optim;
    const CUdeviceptr hyp = io.hyp;
    // The state buffers in order: m (momentum, Adam), v (Adam); an optimizer that keeps v alone
    // (RMSprop) has it in the first.
    CUdeviceptr M = n.state1.ptr(), V = n.state2.ptr();
    if (!optim_uses_m(o.kind) && optim_uses_v(o.kind)) std::swap(M, V);
    v.push_back({optimizer_entry(o.kind),
                 [&ks, &n, o, hyp, M, V](CUstream st) {
                     launch_optimizer(ks, o, n.params.ptr(), n.grads.ptr(), M, V, hyp, static_cast<unsigned>(n.count),
                                      st);
                 },
                 params, 0});
    return v;
}

void MlpProgram::enqueue_steps(const KernelSet& ks, const StepIO& first, unsigned steps, CUstream s) {
    if (!one_launch_) return StepProgram::enqueue_steps(ks, first, steps, s);
    // steps_per_launch steps a launch (0: all of them)
    const unsigned per = cfg_.steps_per_launch ? cfg_.steps_per_launch : steps;
    const Kernel& fs = ks.get(step_entry_);
    for (unsigned j = 0; j < steps; j += per) {
        const StepIO io = first.next(j);
        FusedArgs fa = fused_args(net_, io.X, io.T, io.Y, io.B, &cfg_);
        fa.hyp = io.hyp;
        fa.steps = std::min(per, steps - j);
        launch_step_kernel(fs, fa, s);
    }
}

// Continue a run: its parameters and optimizer state (checked against this run before the GPU
// was touched, TrainConfig::validate).
void MlpProgram::load(const ResumeState& r) {
    for (size_t l = 0; l < net_.W.size(); ++l) {
        net_.W[l].upload(r.model.W[l]);
        net_.b[l].upload(r.model.b[l]);
    }
    if (!r.state1.empty()) net_.state1.upload(r.state1);
    if (!r.state2.empty()) net_.state2.upload(r.state2);
}

void MlpProgram::store(ResumeState& e) const {
    e.model = net_.download();
    if (net_.state1.bytes()) e.state1 = net_.state1.download_vector<float>();
    if (net_.state2.bytes()) e.state2 = net_.state2.download_vector<float>();
}

}  // namespace

std::unique_ptr<StepProgram> make_mlp_program(const TrainConfig& cfg, const Split& test) {
    return std::make_unique<MlpProgram>(cfg, test);
}

std::string mlp_step_kernels(const TrainConfig& cfg) {
    if (const std::string e = one_launch_entry(cfg); !e.empty())
        return fmt::format("{} (the whole step in one launch, {} a launch)", e,
                           cfg.steps_per_launch ? fmt::format("{} steps", cfg.steps_per_launch) : "every step of a chunk");
    const std::string optim = optimizer_entry(cfg.optim.kind);
    const bool bf16 = cfg.kernels.bf16;
    std::string launches;
    switch (cfg.kernels.design) {
        case Design::Fused: launches = "fused_forward, fused_output, fused_grad, " + optim; break;
        case Design::Fast: launches = "fused_forward, fused_output, outer, batch_mean, " + optim; break;
        case Design::Tc:
            launches = bf16 ? "tc_forward_bf16, fused_output, tc_grad_weights_bf16, " + optim
                            : "tc_forward, fused_output, tc_grad_weights, " + optim;
            break;
        case Design::Seed:
            launches = fmt::format("{}, batch_mean x{}, {}", cfg.layers.size() == 4 ? "grad3" : "grad2",
                                   2 * (cfg.layers.size() - 1), optim);
            break;
    }
    // Why no one-launch step runs.
    const unsigned B = cfg.batch, I = cfg.layers[0], O = cfg.layers.back();
    std::string why;
    if (cfg.layers.size() != 3) why = "fused_step and tc_step take networks of 2 fc layers";
    else if (cfg.kernels.design != Design::Fused && cfg.kernels.design != Design::Tc)
        why = fmt::format("the {} set has none (fused and tc have)", to_string(cfg.kernels));
    else if (!cfg.one_launch) why = "--three-launches";
    else if (cfg.kernels.design == Design::Tc && bf16) why = "tc_step is TF32 only";
    else if (cfg.kernels.design == Design::Tc) why = "tc_step: " + tc_step_unfit(B, I, cfg.layers[1], O);
    else if (B > 64) why = fmt::format("fused_step takes batches up to 64 (larger ones run faster as separate launches)");
    else why = fmt::format("fused_step takes I <= 800 and O <= 32 (here {} and {})", I, O);
    return fmt::format("{} (no one-launch step: {})", launches, why);
}

std::vector<std::string> training_entries(const TrainConfig& cfg) {
    if (cfg.model) {
        std::vector<std::string> v = cnn_training_entries(cfg.optim, conv_kernels_of(cfg.kernels));
        if (dense_step_unfit(cfg).empty()) v.push_back("dense_program");
        if (fc3_step_unfit(cfg).empty()) v.push_back("fc3_step");  // its file is there (fc3_step_absent)
        return v;
    }
    const auto& sizes = cfg.layers;
    const bool three = sizes.size() == 4;
    std::vector<std::string> v;
    switch (cfg.kernels.design) {
        case Design::Fused:
            v = {"fused_forward", "fused_output", "fused_grad"};
            if (uses_one_launch(cfg)) v = {"fused_forward", "fused_output", "fused_step"};
            break;
        case Design::Fast: v = {"fused_forward", "fused_output", "outer", "batch_mean"}; break;
        case Design::Tc:
            v = {"tc_forward", "fused_output", "tc_grad_weights"};
            if (uses_one_launch(cfg)) v = {"tc_forward", "fused_output", "tc_step"};
            break;
        case Design::Seed: v = {three ? "forward3" : "forward2", three ? "grad3" : "grad2", "batch_mean"}; break;
    }
    if (!uses_one_launch(cfg)) v.push_back(optimizer_entry(cfg.optim.kind));
    v.push_back("gather");
    return with_precision(v, cfg.kernels);
}

std::vector<std::string> forward_entries(Design d, const std::vector<unsigned>& sizes) {
    if (d == Design::Tc) return {"tc_forward", "fused_output"};
    if (uses_fused_forward(d)) return {"fused_forward", "fused_output"};
    return {sizes.size() == 4 ? "forward3" : "forward2"};
}

EvalResult evaluate(const KernelSet& kernels, const NetParams& net, const Split& test, Loss loss, Activation act) {
    if (net.sizes.front() != test.dim())
        PTXLAB_THROW(InputError, "the model takes {} inputs but the images have {}x{} = {} pixels", net.sizes.front(),
                     test.rows, test.cols, test.dim());
    if (net.sizes.back() != kClasses)
        PTXLAB_THROW(InputError, "the model has {} outputs but the labels have {} classes", net.sizes.back(), kClasses);
    const auto loaded = [&kernels](const char* entry) {
        try {
            kernels.get(entry);
            return true;
        } catch (const Error&) {
            return false;
        }
    };
    // The set's forward kernels (forward_entries): Fast evaluates as Fused.
    Design d = Design::Seed;
    if (net.sizes.size() == 3 && loaded("tc_forward")) d = Design::Tc;
    else if (net.sizes.size() == 3 && loaded("fused_forward")) d = Design::Fused;
    if (d == Design::Tc && act != Activation::Relu)
        PTXLAB_THROW(InputError, "the tensor-core forward (tc_forward) runs ReLU hidden layers; this model's is {}",
                     to_string(act));
    DeviceNet dnet(net, 1, std::nullopt);
    dnet.act = act_code(act);
    Evaluator ev(test, net.sizes, d);
    Stream stream;
    return ev.run(kernels, dnet, stream.get(), loss, false);
}

}  // namespace ptxlab
