// bench --headline (headline.hpp): ptxlab's four headline figures and PyTorch's, side by side.
#include "headline.hpp"

#include "error.hpp"
#include "model.hpp"
#include "process.hpp"
#include "train.hpp"
#include "train_cnn.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <regex>
#include <sstream>

#ifndef PTXLAB_SOURCE_DIR
#define PTXLAB_SOURCE_DIR "."
#endif

namespace ptxlab {

TorchFigures parse_torch_reference(const std::string& text) {
    TorchFigures f;
    std::smatch m;
    static const std::regex step(R"(per step at batch \d+ \([^)]*\): eager ([0-9.]+) us, CUDA graph ([0-9.]+) us)");
    if (std::regex_search(text, m, step)) {
        f.step_eager_us = std::stod(m[1].str());
        f.step_graph_us = std::stod(m[2].str());
    }
    static const std::regex reached(R"(reached [0-9.]+ % at step \d+ \(epoch \d+\) after ([0-9.]+) ms of training)");
    if (std::regex_search(text, m, reached)) f.ms_to_target = std::stod(m[1].str());
    return f;
}

// python3 through env (found on PATH), or a reason it cannot give PyTorch's figures.
std::string torch_missing() {
    try {
        const ProcessResult r = run_process("/usr/bin/env", {"python3", "-c", "import torch; assert torch.cuda.is_available()"});
        if (!r.ok()) return "PyTorch: not run (python3 cannot import torch with CUDA here)";
    } catch (const Error& e) {
        return fmt::format("PyTorch: not run ({})", e.what());
    }
    return "";
}

std::vector<std::string> torch_model_step_args(const std::string& spec, unsigned batch) {
    return {"--model", spec, "--max-steps", "20", "--batch", std::to_string(batch)};
}

TorchFigures run_torch(const std::vector<std::string>& args, const BenchOptions& opt, std::string& note) {
    std::vector<std::string> argv = {"python3", PTXLAB_SOURCE_DIR "/tools/torch_reference.py", "--seed",
                                     std::to_string(opt.seed), "--time-steps", "1000", "--stop-at-target"};
    if (!opt.data_dir.empty()) argv.insert(argv.end(), {"--data", opt.data_dir});
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = run_process("/usr/bin/env", argv);
    if (!r.ok()) {
        note = fmt::format("PyTorch: tools/torch_reference.py {}: {}", r.status_text(), r.err.substr(0, 400));
        return {};
    }
    return parse_torch_reference(r.out);
}

namespace {

// ptxlab's time to target for a TrainConfig, the first evaluation at or above it (training time).
double ms_to_target(const Context& ctx, const Dataset& data, TrainConfig cfg, std::ostream& out) {
    std::ostringstream quiet;
    const TrainResult tr = train(ctx, data, cfg, quiet);
    if (!tr.reached)
        fmt::print(out, "note: {} did not reach {:.2f} % (final {:.2f} %)\n",
                   cfg.model ? cfg.model->text() : "the MLP", 100.0 * cfg.target, 100.0 * tr.accuracy);
    return tr.reached ? tr.train_ms_to_target : std::nan("");
}

double find_step(const BenchResult& r, const std::string& set, unsigned batch) {
    for (const auto& s : r.steps)
        if (s.set == set && s.batch == batch) return s.us_per_step;
    for (const auto& k : r.kernels)
        if (k.set == set) return k.us;
    return std::nan("");
}

}  // namespace

std::vector<HeadlineRow> bench_headline(const Context& ctx, const BenchOptions& opt, const Dataset& data,
                                        BenchResult& r, std::string& torch_note, std::ostream& out) {
    TrainConfig mlp;  // train's default recipe: 784-128-10, fused, 5 epochs, 98 %
    mlp.seed = opt.seed;
    mlp.progress = false;
    mlp.dirs = opt.dirs;
    TrainConfig cnn = mlp;  // train --model cnn: tc, lr 0.05, 4 epochs, 99 %
    cnn.model = parse_model("cnn");
    cnn.kernels = {Design::Tc, KernelSource::Ptx};
    cnn.lr = kCnnDefaultLr;
    cnn.epochs = kCnnDefaultEpochs;
    cnn.target = 0.99;
    std::vector<HeadlineRow> rows = {
        {"MLP 784-128-10 step, batch 64 (fused)", "us", find_step(r, "fused", 64)},
        {"MLP time to 98 % (training)", "ms", ms_to_target(ctx, data, mlp, out)},
        {"CNN step, batch 64 (tc)", "us", find_step(r, "cnn-step:tc", 0)},
        {"CNN time to 99 % (training)", "ms", ms_to_target(ctx, data, cnn, out)},
    };
    torch_note = torch_missing();
    if (!torch_note.empty()) return rows;
    const TorchFigures tm = run_torch({"--target", "0.98"}, opt, torch_note);
    const TorchFigures tc = run_torch({"--model", "cnn", "--lr", "0.05", "--epochs", "4", "--target", "0.99"}, opt,
                                      torch_note);
    rows[0].torch_eager = tm.step_eager_us;
    rows[0].torch_graph = tm.step_graph_us;
    rows[1].torch_eager = tm.ms_to_target;
    rows[2].torch_eager = tc.step_eager_us;
    rows[2].torch_graph = tc.step_graph_us;
    rows[3].torch_eager = tc.ms_to_target;
    return rows;
}

}  // namespace ptxlab
