// Shared by the GPU tests: one context for the whole run, the kernel directories.
#pragma once

#include "cuda.hpp"
#include "idx.hpp"
#include "recipe.hpp"
#include "kernels.hpp"
#include "train.hpp"
#include "verify.hpp"

#include <string>

namespace ptxlab::test {
const Context& gpu();  // created by main() before any test runs
// `train --model spec --kernels tc` (or its twins: src) for `steps` steps of one epoch, quietly,
// at `batch` samples a step (0: train's default); its printout goes to the test's log.
// one_launch false: an fc-only network keeps the layer-by-layer step (not fc3_step for 3 fc layers).
TrainResult train_model_steps(const Dataset& data, const std::string& spec, unsigned steps, KernelSource src,
                              unsigned batch = 0, bool one_launch = true);
// A --model run's network and recipe, and its TrainConfig: `train --model r.model --kernels tc
// --optimizer r.optim --lr r.lr --epochs 1 --max-steps steps --no-progress` (--layers too where
// the model is fc-only).
struct ModelRun {
    const char* model;
    OptimKind optim;
    float lr;
};
TrainConfig model_run_config(const ModelRun& r, unsigned steps);
// One verify case of `entry` at `shape`: the PTX from ptx_dirs against the tree's twins, inputs from `seed`.
CaseResult verify_one(const std::string& entry, std::vector<unsigned> shape, const KernelDirs& ptx_dirs, unsigned seed);
// One verify case of `entry` at `shape` on fresh inputs (the seed printed on failure), the tree's
// PTX against its twins: each set on its own writes every output within the float64 bound, and
// the two agree to the bit.
void check_both_sets(const std::string& entry, const std::vector<unsigned>& shape);
// A planted bug: the case fails, the PTX differs from its twin and misses the float64
// reference, while the twin does not.
void check_planted_caught(const CaseResult& r);
// The device inputs of lrs.size() training steps on one batch: X, the targets T, step k's logits
// at y(k) (every row poisoned with NaN first) and step k's record at hyp(k) (step_hyper at lrs[k],
// the 1-based step k + 1).
struct StepBuffers {
    DeviceBuffer X, T, Y, H;
    size_t y_bytes;  // one step's logits
    StepBuffers(const std::vector<float>& x, const std::vector<float>& t, const OptimConfig& o,
                const std::vector<double>& lrs);
    CUdeviceptr y(size_t k) const { return Y.ptr() + k * y_bytes; }
    CUdeviceptr hyp(size_t k) const { return H.ptr() + k * sizeof(StepHyper); }
};
}
