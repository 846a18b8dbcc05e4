// Training on the GPU: one loop (train.cpp) for every network, over a step program that holds
// the network on the GPU and launches its steps (step_program.hpp): the MLP's kernel sets for
// `--layers` of 2 or 3 layers (mlp_program.cpp) or the model trainer's layer-by-layer step for a
// `--model` (train_cnn.hpp). For the MLP:
//
// A step is forward, output deltas (the loss), the mean gradient, and one optimizer
// launch over every parameter (the parameters, their gradient and the optimizer's state
// each live in one flat allocation; recipe.hpp, ptx/optim.ptx):
//   seed design (--kernels ptx|reference): grad2/grad3, batch_mean per tensor, optimizer;
//   fast: fused_forward, fused_output, outer, batch_mean, optimizer;
//   fused: fused_forward, fused_output, fused_grad, optimizer; for batches up to 64 (and
//     ReLU), the one-launch fused_step instead, any loss and optimizer, many steps a launch.
// The training set lives on the GPU and is reshuffled once per epoch by the gather kernel
// (one upload of the new order per epoch, with the epoch's table of per-step learning rates
// and bias corrections). Steps run in chunks: each chunk is captured once into a CUDA graph
// and replayed every epoch; the host waits for the GPU once per chunk. Every step writes its
// outputs Y into a per-epoch log, from which the host computes the step losses.
#pragma once

#include "cuda.hpp"
#include "idx.hpp"
#include "kernels.hpp"
#include "model.hpp"
#include "recipe.hpp"
#include "reference.hpp"
#include "safetensors.hpp"

#include <atomic>
#include <map>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ptxlab {

// "64,784,128" -> {64, 784, 128}: whole numbers in [min, max]; `flag` names the option in errors.
std::vector<unsigned> parse_sizes(const std::string& text, const std::string& flag, unsigned long long max,
                                  unsigned long long min = 1);

// "784,128,10" -> {784, 128, 10}; 2 to kMaxLayers layers, each >= 1.
inline constexpr size_t kMaxLayers = 16;
std::vector<unsigned> parse_layers(const std::string& text);
std::string layers_text(const std::vector<unsigned>& sizes);


// Where a run stands, to continue it bit for bit (train --resume); every checkpoint that train
// --save writes holds it.
struct ResumeState {
    NetParams model;                    // an MLP run's parameters (TrainConfig::model not set)
    std::vector<float> params;          // a --model run's, flat (model.hpp's layout)
    std::vector<float> state1, state2;  // the optimizer's buffers, in the parameters' flat layout
    uint64_t step = 0;                  // steps done
    unsigned epoch = 1, k = 0;          // the epoch in progress (1-based) and its next step
    uint64_t epoch_rng = 0;             // the shuffle RNG's state before that epoch's shuffle
    bool reached = false;               // the target was reached, at target_step, after
    unsigned target_step = 0;           // train_ms_to_target of training
    double train_ms = 0, train_ms_to_target = 0;
    std::vector<float> buffers;         // a --model's bn running statistics (model.hpp's buffer layout)
};

struct TrainConfig {
    std::vector<unsigned> layers = {784, 128, 10};
    // Set: the model trainer's layer-by-layer step runs this network (train_cnn.hpp; `layers`
    // then holds its fc sizes when it has fc layers only, else is not used); not set: the MLP's
    // kernel sets run `layers`.
    std::optional<Model> model;
    unsigned batch = 64;
    float lr = 0.1f;            // the peak learning rate of the schedule
    unsigned epochs = 5;        // the schedule's length
    double target = 0.98;       // the test accuracy to reach; its first step and time are reported
    bool stop_at_target = false;  // stop once the target is reached (default: run the whole schedule)
    unsigned eval_every = 0;      // evaluate every N steps; 0: evals_per_epoch evenly spaced evaluations
    unsigned evals_per_epoch = 20;
    uint64_t seed = 1;
    Init init = Init::Torch;
    Loss loss = Loss::Ce;
    Activation activation = Activation::Relu;  // the hidden layers' (--activation)
    OptimConfig optim;            // Nesterov, momentum 0.9
    ScheduleConfig schedule;      // one-cycle, 20 % warm-up
    double step_every_epochs = 0; // Step schedule: epochs between decays (0: a third of the epochs)
    KernelChoice kernels;       // default: fused PTX
    bool graphs = true;         // replay chunks of steps as CUDA graphs (false: plain launches)
    bool pool_bwd_in_conv = false; // tc set: a pool's backward in the conv above's tc_conv_bwd_data
                                   // epilogue (false: its own pool_bwd launch; the same bits either
                                   // way). Off: the CNN's tc step took 117.67 us with it against
                                   // 117.11 without (H100, bench, medians of 3 in one run)
    bool overlap = true;        // fused set: programmatic dependent launches (each kernel is scheduled
                                // while the previous one drains; griddepcontrol in fused.ptx; fused_step
                                // is always launched plainly, see step.ptx)
    bool one_launch = true;     // fused set: the whole step in one launch (fused_step, step.ptx) for
                                // batches <= 64 and I <= 800, O <= 32; a --model of 3 fc layers on
                                // the tc set: fc3_step (train_cnn.hpp fc3_step_unfit)
    bool dense_program = false; // a --model of fc layers: the step as dense_program + the optimizer
                                // (train --dense-program; train_cnn.hpp dense_step_unfit)
    unsigned chunk = 0;         // steps per chunk; 0: 128 for the fused design, 8 for the seed design,
                                // 32 for a --model
    unsigned steps_per_launch = 0;  // fused_step, tc_step, fc3_step: steps run by one launch (0: every
                                    // step of a chunk; 1: a launch a step); the same results bit for bit
    KernelDirs dirs = KernelDirs::from_environment();
    unsigned max_steps = 0;     // stop after this many steps (0: no limit); for tests and smoke runs
    bool progress = true;       // progress bar on stderr when it is a terminal
    std::string log_csv;        // one row per evaluation
    std::string log_steps_csv;  // one row per step (its batch loss and lr)
    const ResumeState* resume = nullptr;  // continue this run (train --resume)
    // Called after each chunk of steps, once the host has waited for the GPU to finish it, before
    // the chunk's losses are read; not part of the timed training, and it must leave the run's
    // buffers and streams alone (what the run computes does not change). profile --train reads
    // CUPTI's PC samples there (PcSampler::drain), so that a long run's do not pile up.
    std::function<void()> between_chunks;
    void validate_flags() const;              // checks that need no data; throws InputError with the reason
    void validate_model_flags() const;        // those of *model and its kernels (train_cnn.cpp)
    void validate(const Split& train) const;  // validate_flags() plus the checks against the data
                                              // (and *resume's network, optimizer state and position)
    void validate_resume(const Split& train) const;  // those of *resume
    // The schedule with the step schedule's interval in steps (from step_every_epochs).
    ScheduleConfig schedule_for(unsigned steps_per_epoch) const;
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
    double test_loss = 0;
    double accuracy = 0;
    double train_s = 0;     // training time so far
    double elapsed_s = 0;   // training + evaluation time so far
    double lr = 0;          // the learning rate of the last step
};

struct TrainResult {
    bool reached = false, diverged = false, interrupted = false;
    unsigned steps = 0, epochs = 0;
    double accuracy = 0;
    std::vector<EvalPoint> curve;
    std::vector<double> step_losses;  // every step's batch loss
    double jit_ms = 0, train_ms = 0, eval_ms = 0;
    double graph_ms = 0;  // capturing and uploading the chunks' CUDA graphs, before the clock starts
    // The first evaluation at or above the target: its step and the training time until then
    // (kernels and shuffles, no evaluation).
    unsigned target_step = 0;
    double train_ms_to_target = 0;
    NetParams model;            // the final parameters of an MLP run
    std::vector<float> params;  // of a --model run, flat
    std::string stop_reason;
    std::string fault;  // set when a kernel wrote a non-finite value: which kernel, where
    // GPU time of each chunk of steps (device events around the chunk's launches) and its
    // number of steps; host wall time of each epoch's training (shuffle + steps, no evaluation).
    std::vector<double> chunk_gpu_ms;
    std::vector<unsigned> chunk_steps;
    std::vector<double> epoch_ms;
    ResumeState end;  // where the run stopped (for a checkpoint to resume from)
};

// Set from a SIGINT handler: training stops after the current step.
extern std::atomic<bool> g_stop_requested;

// The kernel entries a training run needs, and those of a forward pass (evaluation).
std::vector<std::string> training_entries(const TrainConfig& cfg);
std::vector<std::string> forward_entries(Design d, const std::vector<unsigned>& sizes);

// The launches of an MLP run's step and, when no one-launch step runs it, why (what train prints).
std::string mlp_step_kernels(const TrainConfig& cfg);

// "48.3 ms": milliseconds with three significant digits.
std::string format_ms(double ms);

// Evaluates a model on a split with the forward kernel(s) of `kernels`
// (forward2/forward3, or fused_forward + fused_output) and the hidden activation `act`.
EvalResult evaluate(const KernelSet& kernels, const NetParams& net, const Split& test, Loss loss = Loss::Ce,
                    Activation act = Activation::Relu);

// A checkpoint that train --resume continues: the model (PyTorch's layout), the optimizer's
// state and the position, with the flags that must not change (metadata).
void save_training_checkpoint(const std::string& path, const TrainConfig& cfg, const TrainResult& r,
                              const std::map<std::string, std::string>& metadata = {});
// Reads one and checks it against itself (check_checkpoint_metadata) and `cfg` (network, batch,
// seed, recipe): a difference is an InputError that names the flag and both values. Its
// position against the data (the steps an epoch) is checked by cfg.validate(train).
ResumeState load_training_checkpoint(const std::string& path, const TrainConfig& cfg);

// A checkpoint checked against its own metadata, before any GPU work (train --resume, eval
// --load), for each entry that train --save writes and the file has:
//   train.layers     names the network its tensors hold (`network`: "784,128,10", or the spec
//                    of a --model checkpoint, which train --save does not write it for);
//   train.optimizer  names an optimizer whose state buffers are exactly its optimizer.state1
//                    (and optimizer.state2) tensors, each of `param_count` floats;
//   resume.*         all eight present, whole numbers (the times: finite numbers >= 0) in range,
//                    reached 0 or 1, with train.optimizer and train.epochs beside them; the
//                    position inside the schedule (1 <= epoch <= train.epochs) and a run's:
//                    step = (epoch - 1) * K + k for some K >= max(k, 1) steps an epoch; the
//                    target's step and time (when reached) within the steps and time done.
// Returns the position (model left empty), or nothing for a file without resume.* entries.
// Throws InputError naming the file and the entry.
std::optional<ResumeState> check_checkpoint_metadata(const std::string& path,
                                                     const std::map<std::string, std::string>& metadata,
                                                     const ExtraTensors& extra, const std::string& network,
                                                     size_t param_count);
// The same for a checkpoint as load_model_checkpoint reads it (eval --load).
std::optional<ResumeState> check_checkpoint_metadata(const std::string& path, const ModelCheckpoint& ck);

// Trains; writes evaluation lines and the progress bar to `out`/stderr.
TrainResult train(const Context& ctx, const Dataset& data, const TrainConfig& cfg, std::ostream& out);

}  // namespace ptxlab
