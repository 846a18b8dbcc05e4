// Training and evaluation of the MLP on the GPU with one kernel set.
//
// A step is, with the seed design (--kernels ptx|reference), the per-sample-gradient
// kernel (grad2/grad3) and the update kernel on every parameter array; with the
// fused design (--kernels fused|fused-reference), the one-launch fused_step for batches
// up to 64 (else, for shapes it does not take, or with --three-launches: fused_forward,
// fused_output and fused_sgd). The training set lives on the GPU and is reshuffled once per epoch by
// the gather kernel (one upload of the new order per epoch). Steps run in chunks:
// each chunk of steps is captured once into a CUDA graph and replayed every epoch;
// the host waits for the GPU once per chunk, not per step. Every step writes its
// outputs Y into a per-epoch log, from which the host computes the step losses.
#pragma once

#include "cuda.hpp"
#include "idx.hpp"
#include "kernels.hpp"
#include "recipe.hpp"
#include "reference.hpp"

#include <atomic>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ptxlab {

// "64,784,128" -> {64, 784, 128}: whole numbers in [1, max]; `flag` names the option in errors.
std::vector<unsigned> parse_sizes(const std::string& text, const std::string& flag, unsigned long long max);

// "784,128,10" -> {784, 128, 10}; 2 or 3 layers (3 or 4 numbers), each >= 1.
std::vector<unsigned> parse_layers(const std::string& text);
std::string layers_text(const std::vector<unsigned>& sizes);


struct TrainConfig {
    std::vector<unsigned> layers = {784, 128, 10};
    unsigned batch = 64;
    float lr = 0.2f;
    unsigned max_epochs = 20;
    double target = 0.97;       // stop once test accuracy >= target
    unsigned eval_every = 0;    // evaluate every N batches; 0 = once per epoch
    uint64_t seed = 1;
    Init init = Init::HeUniform;
    Loss loss = Loss::Mse;
    KernelChoice kernels;       // default: fused PTX
    bool graphs = true;         // replay chunks of steps as CUDA graphs (false: plain launches)
    bool overlap = true;        // fused set: programmatic dependent launches (each kernel is scheduled
                                // while the previous one drains; griddepcontrol in fused.ptx; fused_step
                                // is always launched plainly, see step.ptx)
    bool one_launch = true;     // fused set: the whole step in one launch (fused_step, step.ptx) for
                                // batches <= 64 and I <= 800, O <= 32; false (and otherwise):
                                // fused_forward, fused_output, fused_sgd
    unsigned chunk = 0;         // steps per chunk; 0: 128 for the fused design, 8 for the seed design
    unsigned steps_per_launch = 0;  // fused_step: steps run by one launch (0: every step of a chunk;
                                    // 1: a launch a step); the results are the same bit for bit
    KernelDirs dirs = KernelDirs::from_environment();
    unsigned max_steps = 0;     // stop after this many steps (0: no limit); for tests and smoke runs
    bool progress = true;       // progress bar on stderr when it is a terminal
    std::string log_csv;        // one row per evaluation
    void validate_flags() const;              // checks that need no data; throws InputError with the reason
    void validate(const Split& train) const;  // validate_flags() plus the checks against the data
};

struct EvalResult {
    double accuracy = 0;
    double loss = 0;  // the training loss (TrainConfig::loss) over the split
    size_t count = 0;
    std::vector<size_t> confusion;  // [true][predicted], kClasses x kClasses
};

struct EvalPoint {
    unsigned step = 0, epoch = 0;
    double train_loss = 0;  // mean loss of the batches since the previous evaluation
    double accuracy = 0;
    double elapsed_s = 0;   // training + evaluation time so far
};

struct TrainResult {
    bool reached = false, diverged = false, interrupted = false;
    unsigned steps = 0, epochs = 0;
    double accuracy = 0;
    std::vector<EvalPoint> curve;
    std::vector<double> step_losses;  // every step's batch loss
    double jit_ms = 0, train_ms = 0, eval_ms = 0;
    double train_ms_to_target = 0;  // training time (kernels only) until the target was reached
    NetParams model;
    std::string stop_reason;
    std::string fault;  // set when a kernel wrote a non-finite value: which kernel, where
    // GPU time of each chunk of steps (device events around the chunk's launches) and its
    // number of steps; host wall time of each epoch's training (shuffle + steps, no evaluation).
    std::vector<double> chunk_gpu_ms;
    std::vector<unsigned> chunk_steps;
    std::vector<double> epoch_ms;
};

// Set from a SIGINT handler: training stops after the current step.
extern std::atomic<bool> g_stop_requested;

// The kernel entries a design needs for a network of `sizes`.
std::vector<std::string> training_entries(Design d, const std::vector<unsigned>& sizes);

// Evaluates a model on a split with the forward kernel(s) of `kernels`
// (forward2/forward3, or fused_forward + fused_output).
EvalResult evaluate(const KernelSet& kernels, const NetParams& net, const Split& test, Loss loss = Loss::Mse);

// Trains; writes evaluation lines and the progress bar to `out`/stderr.
TrainResult train(const Context& ctx, const Dataset& data, const TrainConfig& cfg, std::ostream& out);

}  // namespace ptxlab
