// ptxlab bench: how fast each kernel and each training step runs, against the
// device's own measured ceilings.
//
// Kernels: every entry of each kernel set on the MNIST sizes (784-128-10) at the
// given batches, fresh random inputs (as verify makes them), timed with device
// events after warm-up: the median of many repetitions, each of back-to-back launches.
// Achieved GB/s and GFLOP/s use the least traffic and the arithmetic each kernel must
// do (each kernel's row in host/verify/registry.hpp: work); the ceilings are a device-to-device copy and a
// long FMA loop, measured on the same device in the same run.
// Steps: `ptxlab train`'s own loop (graph-replayed chunks), the GPU time per step from
// events around each chunk; epochs and time to target from a full training run.
#pragma once

#include "cuda.hpp"
#include "floors.hpp"
#include "idx.hpp"
#include "kernels.hpp"

#include <optional>
#include <string>
#include <vector>

namespace ptxlab {

// A set to time: a --kernels name, optionally with "/serial" (the fused set launched without
// programmatic dependent launches, as `train --no-overlap`), "/split" (the fused set's
// separate launches, as `train --three-launches`) or "/single" (one launch of fused_step a
// step, as `train --steps-per-launch 1`), then optionally a recipe: ":adam" (Adam, lr 1e-3)
// or ":classic" (`train --preset classic`: MSE, plain SGD, a constant lr); without one,
// `train`'s default recipe (cross-entropy, Nesterov, one-cycle). The fused set runs the
// one-launch fused_step at batches up to 64 with every recipe.
struct BenchSet {
    KernelChoice kernels;
    bool overlap = true;
    bool one_launch = true;
    unsigned steps_per_launch = 0;
    std::string recipe;  // "", "adam" or "classic"
};
BenchSet parse_bench_set(const std::string& name);  // InputError for an unknown name

struct BenchOptions {
    std::vector<unsigned> kernel_batches = {64, 1024};
    std::vector<unsigned> step_batches = {64, 256};
    std::vector<std::string> sets = {"ptx",         "reference",   "fast",       "fast-reference",   "fused",
                                     "fused-reference", "fused:adam", "fused/single", "fused/split", "fused/split:adam",
                                     "fused/serial", "fused:classic"};
    std::vector<std::string> target_sets = {"fused", "fused-reference", "fast"};
    // The model trainer's steps to time (train --model SPEC; fc-only lists of 3 layers or more
    // are what `train --layers` runs on it): "cnn" as "cnn-step:SET", others as "step[SPEC]:SET".
    std::vector<std::string> models = {"cnn"};
    unsigned model_batch = 64;  // the batch those steps (and PyTorch's beside them) are timed at
    double target = 0.98;
    unsigned epochs = 5;
    unsigned seed_steps = 160;  // steps timed for the (slow) seed design
    uint64_t seed = 1;
    KernelDirs dirs = KernelDirs::from_environment();
    std::string data_dir;
    std::string json;           // write the results here as JSON
    bool kernels = true, steps = true, to_target = true;
    // PyTorch's step beside each --models step (tools/torch_reference.py, when python3 imports torch).
    bool torch = true;
    // Only the four headline figures (headline.hpp) beside PyTorch's: the fused step at 64, the CNN
    // step, and their times to target.
    bool headline = false;
};

struct KernelTiming {
    std::string set, entry;
    unsigned batch = 0;
    double us = 0;              // median time per launch
    double bytes = 0, flops = 0;
    double gbps = 0, gflops = 0;
    double roofline_pct = 0;    // achieved / min(FMA peak, intensity x copy bandwidth)
};

struct StepTiming {
    std::string set;
    unsigned batch = 0, steps = 0;
    double us_per_step = 0;     // median over chunks of GPU time / steps
    double host_us_per_step = 0;  // wall time of the training loop / steps
};

struct TargetTiming {
    std::string set;
    bool reached = false;
    double ms_to_target = 0, accuracy = 0;
    unsigned epochs = 0, steps = 0;
    double median_epoch_ms = 0, jit_ms = 0, data_ms = 0;
};

// One of bench --headline's figures, ptxlab's and PyTorch's (eager and with a CUDA graph).
struct HeadlineRow {
    std::string figure, unit;
    double ptxlab = 0;
    std::optional<double> torch_eager = {}, torch_graph = {};  // absent: PyTorch did not run or not give it
};

struct BenchResult {
    std::string device;
    double copy_gbps = 0, fma_gflops = 0;
    std::vector<Floor> floors;  // ptx/probes/floors.ptx: one launch, barrier, load, mma
    std::vector<KernelTiming> kernels;
    std::vector<StepTiming> steps;
    std::vector<TargetTiming> targets;
    std::vector<HeadlineRow> headline;
    std::string torch_note;  // why PyTorch's headline figures are missing, or empty
};

// The entries timed for a kernel set at the MNIST sizes (each has its bench shape and work in
// the registry, registry.hpp), and those timed at the CNN's layers.
std::vector<std::string> bench_entries(const KernelChoice& k);
std::vector<std::string> bench_cnn_entries();

BenchResult run_bench(const Context& ctx, const BenchOptions& opt, std::ostream& out);
// The results as JSON (bench --json): device, copy_gbps, fma_gflops, floors and target, then one object
// a row of each table (kernels, steps, to_target), the numbers rounded as the tables show them.
std::string bench_json(const BenchResult& r, const BenchOptions& opt);

}  // namespace ptxlab
