// A 3-layer fc --model's whole training steps in one launch of fc3_step (train_cnn.hpp: Fc3Step,
// fc3_step_unfit): the forward pass, the loss, every gradient and the optimizer's update of every
// parameter, several steps a launch (ptx/fc3step.ptx, host/kernels/fc3step.hpp), on the model
// trainer's buffers. The launch between two steps costs about 4 us, so a chunk of steps is one
// launch; the layer-by-layer step stays for every other network and for evaluation.
#include "train_cnn.hpp"

#include "fc3step.hpp"
#include "optim.hpp"
#include "recipe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace ptxlab {

std::string fc3_step_unfit(const Model& m, const KernelChoice& k, unsigned B, Activation act) {
    if (!m.fc_only() || m.layers.size() != 3)
        return fmt::format("fc3_step takes networks of exactly 3 fc layers (no conv, pool or bn), not {}", m.text());
    if (act != Activation::Relu)
        return fmt::format("fc3_step takes ReLU hidden layers, not --activation {}", to_string(act));
    // Its products are TF32 (mma.sync): the tc set's precision, and tc-reference's, whose twin
    // (ptx/reference/fc3step.cu) computes the same bits; tc-bf16 and the FP32 sets keep theirs.
    if (k.design != Design::Tc || k.bf16)
        return fmt::format("fc3_step runs in the tc set and its twins (TF32 products), not {}", to_string(k));
    const std::vector<unsigned> w = m.fc_sizes();  // {I, H1, H2, O}
    if (std::string why = fc3_step_unfit(B, w[0], w[1], w[2], w[3]); !why.empty())
        return why.starts_with("fc3_step") ? why : "fc3_step: " + why;
    return {};
}

std::string fc3_step_absent(KernelSource source, const KernelDirs& dirs) {
    const KernelSpec& s = kernel_spec("fc3_step");
    const std::string path =
        source == KernelSource::Ptx ? kernel_ptx_path(dirs, s.file) : kernel_twin_path(dirs, s.file);
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return {};
    return fmt::format("fc3_step is left out: {} does not exist", path);
}

std::string fc3_step_unfit(const TrainConfig& cfg) {
    if (!cfg.model) return "fc3_step runs the model trainer's step (a --model or 3 fc layers)";
    if (!cfg.one_launch) return "the layer-by-layer step was asked for (one_launch off)";
    if (cfg.dense_program) return "dense_program was asked for (--dense-program)";
    if (std::string why = fc3_step_unfit(*cfg.model, cfg.kernels, cfg.batch, cfg.activation); !why.empty()) return why;
    // A set without the kernel's file (a --ptx-dir of other copies) keeps the layer-by-layer step.
    return fc3_step_absent(cfg.kernels.source, cfg.dirs);
}

std::string fc3_step_layer_kernels(const Model& m) {
    // The stages (fc3step.ptx): S1 fc1's forward pass; S2 fc2's, and fc3's partial outputs by H2
    // tile; S3 the logits, the loss, fc3's and fc2's backward passes and their updates (b3's in
    // S4), fc1's partial deltas; S4 fc1's deltas summed, its weight gradient and update.
    const char* rows[3][3] = {{"fc3_step (S1)", "-", "fc3_step (S4, and the update)"},
                              {"fc3_step (S2)", "fc3_step (S3, summed in S4)", "fc3_step (S3, and the update)"},
                              {"fc3_step (S2, S3: logits, loss)", "fc3_step (S3)", "fc3_step (S3, and the update)"}};
    std::string out = fmt::format("  {:<7} {:<32} {:<28} {}\n", "layer", "forward", "deltas to its input",
                                  "weight gradient");
    for (size_t l = 0; l < m.layers.size() && l < 3; ++l)
        out += fmt::format("  {:<7} {:<32} {:<28} {}\n", m.layers[l].name, rows[l][0], rows[l][1], rows[l][2]);
    return out;
}

namespace {
// fc3_step reads W1, b1, W2, b2, W3, b3 back to back from P (and M and V with P's layout): the
// model's flat layout must be exactly that, or the kernel would read the wrong tensors.
void check_layout(const Model& m) {
    if (!m.fc_only() || m.layers.size() != 3)
        PTXLAB_THROW(Error, "internal error: fc3_step runs 3 fc layers, not the model {}", m.text());
    size_t at = 0;
    for (const LayerSpec& l : m.layers) {
        if (l.weight_offset != at || l.weight_count() != size_t(l.width) * l.in.size() ||
            l.bias_offset != at + l.weight_count() || l.bias_count() != l.width)
            PTXLAB_THROW(Error,
                         "internal error: fc3_step takes W1, b1, W2, b2, W3, b3 back to back; the model {} has {}'s "
                         "weight at {} ({} floats) and bias at {} ({} floats), not at {}",
                         m.text(), l.name, l.weight_offset, l.weight_count(), l.bias_offset, l.bias_count(), at);
        at = l.bias_offset + l.bias_count();
    }
    if (at != m.param_count)
        PTXLAB_THROW(Error, "internal error: the model {} has {} parameters, its 3 fc layers {}", m.text(),
                     m.param_count, at);
}
}  // namespace

Fc3Step::Fc3Step(const Model& m, const CnnParams& p, const TrainConfig& cfg)
    : work_(kFc3StepWorkBytes, "fc3_step scratch"), per_launch_(cfg.steps_per_launch) {
    check_layout(m);
    if (p.count != m.param_count)
        PTXLAB_THROW(Error, "internal error: {} parameters on the GPU for the model {} of {}", p.count, m.text(),
                     m.param_count);
    // Zero once: the grid barrier's count starts at 0, and every launch leaves it a multiple of
    // the grid's blocks (the rest of the scratch is written before it is read, each step).
    work_.fill_u32(0);
    const std::vector<unsigned> w = m.fc_sizes();
    args_.P = p.params.ptr();
    args_.M = p.m_ptr(cfg.optim);
    args_.V = p.v_ptr(cfg.optim);
    args_.work = work_.ptr();
    args_.B = cfg.batch;
    args_.I = w[0], args_.H1 = w[1], args_.H2 = w[2], args_.O = w[3];
    args_.loss = loss_code(cfg.loss);
    args_.scale = grad_scale(cfg.loss, cfg.batch, kClasses);
    args_.optim = cfg.optim;
}

void Fc3Step::launch(const KernelSet& ks, const StepIO& first, unsigned steps, CUstream s) const {
    if (first.B != args_.B || first.I != args_.I)
        PTXLAB_THROW(Error, "internal error: fc3_step set up for batch {} of {} inputs, given {} of {}", args_.B,
                     args_.I, first.B, first.I);
    Fc3StepArgs a = args_;
    a.X = first.X, a.T = first.T, a.Y = first.Y, a.hyp = first.hyp;
    a.steps = steps;
    launch_fc3_step(ks.get("fc3_step"), a, s);
}

void Fc3Step::enqueue_steps(const KernelSet& ks, const StepIO& first, unsigned steps, CUstream s) const {
    // steps_per_launch steps a launch (0: all of them: the steps sit back to back in X, T, Y and
    // the step table, StepIO::next).
    const unsigned per = per_launch_ ? per_launch_ : std::max(steps, 1u);
    for (unsigned j = 0; j < steps; j += per) launch(ks, first.next(j), std::min(per, steps - j), s);
}

StepKernel Fc3Step::step_kernel(const KernelSet& ks, const StepIO& io,
                                const std::vector<StepKernel::Write>& params) const {
    // Y (the logits, written in S3 before any parameter changes), then the parameters in the
    // order their updates run: fc3's and fc2's in S3, fc1's in S4. No gradient, activation or
    // delta buffer of the model trainer: the rest lives in the kernel's scratch.
    StepKernel sk;
    sk.name = "fc3_step";
    for (size_t l = params.size() / 2; l-- > 0;)  // params: each layer's weight, then its bias
        sk.writes.insert(sk.writes.end(), {params[2 * l], params[2 * l + 1]});
    sk.y_offset = io.y_offset + 1;
    sk.y_after = 0;
    sk.launch = [this, &ks, io](CUstream s) { launch(ks, io, 1, s); };
    return sk;
}

}  // namespace ptxlab
