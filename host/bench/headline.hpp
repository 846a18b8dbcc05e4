// bench --headline: the four figures the README leads with (issue 35), ptxlab's beside
// PyTorch's from the same GPU in the same run: the MLP's step and time to 98 %, the CNN's
// step and time to 99 %. PyTorch runs as tools/torch_reference.py (the same recipes) when
// python3 can import torch; without it the PyTorch columns say why they are empty.
#pragma once

#include "bench.hpp"

#include <optional>
#include <string>
#include <vector>

namespace ptxlab {

// What tools/torch_reference.py printed: "per step at batch 64 (...): eager E us, CUDA graph G us"
// and "reached 98.00 % at step N (epoch K) after T ms of training". Absent when the line is not there.
struct TorchFigures {
    std::optional<double> step_eager_us, step_graph_us, ms_to_target;
};
TorchFigures parse_torch_reference(const std::string& text);

// Why PyTorch's figures cannot be had here (python3 does not import torch with CUDA), or "".
std::string torch_missing();
// tools/torch_reference.py's arguments for PyTorch's step time of `train --model spec`'s recipe
// (20 steps of training, then --time-steps steps eager and as CUDA-graph replays).
std::vector<std::string> torch_model_step_args(const std::string& spec, unsigned batch);
// One tools/torch_reference.py run (seed opt.seed, --time-steps 1000, --stop-at-target, opt's
// --data): its figures, or absent ones with the reason in `note`.
TorchFigures run_torch(const std::vector<std::string>& args, const BenchOptions& opt, std::string& note);

// The headline rows: the MLP's and the CNN's step from the bench result (the fused set at batch 64,
// cnn-step:tc), their times to target from fresh runs (seed opt.seed), and PyTorch's when it runs.
// `torch_note` says why PyTorch's columns are empty (or is empty).
std::vector<HeadlineRow> bench_headline(const Context& ctx, const BenchOptions& opt, const Dataset& data,
                                        BenchResult& r, std::string& torch_note, std::ostream& out);

}  // namespace ptxlab
