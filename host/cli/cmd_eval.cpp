// ptxlab eval --load FILE: test accuracy and confusion matrix of a checkpoint.
#include "commands.hpp"
#include "flags.hpp"
#include "safetensors.hpp"
#include "train.hpp"
#include "train_cnn.hpp"

#include <set>
#include <string>

namespace ptxlab::cli {

namespace {

struct EvalOptions {
    std::string load, data, kernels = "auto", ptx_dir;
    int device = 0;
};

void print_result(const EvalResult& r) {
    fmt::print("test accuracy {:.2f} % ({} of {}), mean cross-entropy {:.5f}\n", 100.0 * r.accuracy,
               static_cast<size_t>(r.accuracy * double(r.count) + 0.5), r.count, r.loss);
    fmt::print("confusion matrix (rows: true label, columns: predicted)\n      ");
    for (unsigned p = 0; p < kClasses; ++p) fmt::print("{:>6}", p);
    fmt::print("\n");
    for (unsigned t = 0; t < kClasses; ++t) {
        fmt::print("{:>6}", t);
        for (unsigned p = 0; p < kClasses; ++p) fmt::print("{:>6}", r.confusion[t * kClasses + p]);
        fmt::print("\n");
    }
}

// The hidden activation a checkpoint was trained with: its metadata's "train.activation"
// (`train --save` records it; older checkpoints, without the entry, were ReLU).
template <class Metadata>
Activation activation_of(const EvalOptions& o, const Metadata& metadata) {
    auto it = metadata.find("train.activation");
    if (it == metadata.end()) return Activation::Relu;
    try {
        return parse_activation(it->second);
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{}: its metadata 'train.activation' is not an activation: {}", o.load, e.what());
    }
}

// A --model checkpoint with conv layers: the CNN's forward pass (train_cnn.hpp) with the hidden
// activation it was trained with (older checkpoints, without the entry, were ReLU).
int run_eval_cnn(const EvalOptions& o, const ModelCheckpoint& mc) {
    const Activation act = activation_of(o, mc.metadata);
    static const std::set<std::string> sets = {"auto", "ptx", "fused", "reference", "fused-reference", "tc",
                                               "tc-reference"};
    if (!sets.count(o.kernels))
        PTXLAB_THROW(InputError, "--kernels {}: a CNN checkpoint runs on the conv kernels: auto (the PTX), fused or "
                                 "ptx (FP32), tc (the conv layers on the tensor cores, TF32), or fused-reference, "
                                 "reference and tc-reference (their twins)",
                     o.kernels);
    const KernelDirs dirs = KernelDirs::for_ptx_dir_flag(o.ptx_dir);
    const std::string dir = o.data.empty() ? default_data_dir() : o.data;
    Dataset data = load_dataset(dir);
    if (mc.model.layers.front().in != Shape3{1, data.test.rows, data.test.cols})
        PTXLAB_THROW(InputError, "{}: the model {} takes {}x{}x{} images but the dataset in {} has 1x{}x{}", o.load,
                     mc.model.text(), mc.model.layers.front().in.c, mc.model.layers.front().in.h,
                     mc.model.layers.front().in.w, dir, data.test.rows, data.test.cols);
    Context ctx(o.device);
    const KernelSource src = o.kernels.ends_with("reference") ? KernelSource::Reference : KernelSource::Ptx;
    const ConvKernels conv = o.kernels == "tc" || o.kernels == "tc-reference" ? ConvKernels::Tc : ConvKernels::Fp32;
    KernelSet ks(src, ctx.info(), dirs, cnn_forward_entries(conv));
    const CnnParams p(mc.model, mc.params, OptimConfig{}, mc.buffers);
    const EvalResult r = evaluate_cnn(ks, mc.model, p, data.test, Loss::Ce, conv, act);
    fmt::print("eval: {} (--model {}, {}) on {} test images from {}, {} conv kernels{}, {}\n", o.load,
               mc.model.text(), to_string(act), r.count, dir, to_string(src), conv == ConvKernels::Tc ? " (tensor cores, TF32)" : "",
               ctx.info().name);
    print_result(r);
    return kExitOk;
}

int run_eval(const EvalOptions& o) {
    // Everything that needs no GPU first: the flags, the checkpoint, the data, the kernel directory.
    const KernelChoice k0 = o.kernels == "auto" ? KernelChoice{} : parse_kernel_choice(o.kernels);
    const KernelDirs dirs = KernelDirs::for_ptx_dir_flag(o.ptx_dir);
    // A --model checkpoint with conv layers (its tensors checked against its spec) runs on the
    // conv kernels; an MLP checkpoint goes on to the MLP's kernels. Either is first checked
    // against its own train.* and resume.* entries.
    const ModelCheckpoint mc = load_model_checkpoint(o.load);
    check_checkpoint_metadata(o.load, mc);
    if (!uses_mlp_format(mc.model)) return run_eval_cnn(o, mc);
    Checkpoint ck = load_checkpoint(o.load);
    NetParams& net = ck.net;
    // The forward kernels need the hidden activation the checkpoint was trained with
    // (`train --save` records it; older checkpoints, without the entry, were ReLU).
    const Activation act = activation_of(o, ck.metadata);
    const std::string dir = o.data.empty() ? default_data_dir() : o.data;
    Dataset data = load_dataset(dir);
    if (net.sizes.front() != data.test.dim() || net.sizes.back() != kClasses)
        PTXLAB_THROW(InputError,
                     "{}: the checkpoint's network is {} but the dataset in {} has {}x{} = {} pixels and {} classes",
                     o.load, layers_text(net.sizes), dir, data.test.rows, data.test.cols, data.test.dim(), kClasses);
    const bool three = net.sizes.size() == 4;
    const KernelChoice k =
        o.kernels == "auto" ? KernelChoice{three ? Design::Seed : Design::Fused, KernelSource::Ptx} : k0;
    if (uses_fused_forward(k.design) && three)
        PTXLAB_THROW(InputError, "--kernels {} runs 2-layer networks; {} has 3 layers (use --kernels ptx)",
                     to_string(k), o.load);
    Context ctx(o.device);
    KernelSet ks(k.source, ctx.info(), dirs, with_precision(forward_entries(k.design, net.sizes), k));
    use_precision(ks, k);
    EvalResult r = evaluate(ks, net, data.test, Loss::Ce, act);
    fmt::print("eval: {} ({} MLP, {}) on {} test images from {}, {} kernels, {}\n", o.load, layers_text(net.sizes),
               to_string(act), r.count, dir, to_string(k), ctx.info().name);
    print_result(r);
    return kExitOk;
}

}  // namespace

void setup_eval(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<EvalOptions>();
    auto* sub = app.add_subcommand(
        "eval", "Report the test accuracy and confusion matrix of a checkpoint saved by `ptxlab train --save`, "
                "computed with the forward kernel on the GPU.");
    sub->add_option("--load", o->load, "checkpoint (.safetensors)")->required()->check(kNonEmptyPath);
    sub->add_option("--data", o->data, "dataset directory (default: $PTXLAB_DATA_DIR or data/mnist)")->check(kNonEmptyPath);
    sub->add_option("--kernels", o->kernels, "kernel set: fused, fast, tc, tc-bf16, ptx, fused-reference, fast-reference, "
                    "tc-reference, tc-bf16-reference or reference; auto = fused for 2 layers, ptx for 3 (fast evaluates "
                    "with the fused forward kernels; tc with tc_forward, TF32 tensor cores, and tc-bf16 with "
                    "tc_forward_bf16, BF16 inputs, for ReLU models)")->capture_default_str();
    sub->add_option("--ptx-dir", o->ptx_dir,
                    "read the PTX from this directory; the twins stay in the reference directory, as in check and verify")->check(kNonEmptyPath);
    add_device_option(sub, o->device);
    sub->callback([o, &chosen] { chosen = [o] { return run_eval(*o); }; });
}

}  // namespace ptxlab::cli
