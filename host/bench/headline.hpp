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

// The headline rows: the MLP's and the CNN's step from the bench result (the fused set at batch 64,
// cnn-step:tc), their times to target from fresh runs (seed opt.seed), and PyTorch's when it runs.
// `torch_note` says why PyTorch's columns are empty (or is empty).
std::vector<HeadlineRow> bench_headline(const Context& ctx, const BenchOptions& opt, const Dataset& data,
                                        BenchResult& r, std::string& torch_note, std::ostream& out);

}  // namespace ptxlab
