// What the one training loop (train.cpp) runs: a network on the GPU and the launches of its steps.
// Two programs: the MLP's kernel sets (mlp_program.cpp: the notebook's design, fast, fused, tc and
// their one-launch steps fused_step and tc_step) and the model trainer's layer-by-layer step for
// any --model (train_cnn.cpp). The loop owns the data, the shuffle, the step table, the chunks and
// their CUDA graphs, the evaluations, the logs, interrupt and resume, and the NaN hunt.
#pragma once

#include "cuda.hpp"
#include "kernels.hpp"
#include "train.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ptxlab {

// One kernel launch of a step, with the buffers it writes (for the NaN hunt).
struct StepKernel {
    std::string name;
    std::function<void(CUstream)> launch;
    struct Write {
        std::string name;
        const DeviceBuffer* buf;
        size_t row_len;  // for coordinates in messages; 0: a vector
    };
    std::vector<Write> writes;
    size_t y_offset = 0;  // 1 + the byte offset into the Y log this launch writes at; 0: it writes no Y
    size_t y_after = 0;   // how many of `writes` come before Y in the data flow (checked first)
};

// Where step k of an epoch reads and writes: its batch of images X [B][I] and one-hot targets
// T [B][10], its logits Y [B][10] (in the epoch's Y log, at byte y_offset) and its StepHyper
// record. Steps k, k+1, ... sit back to back in each buffer (next()).
struct StepIO {
    CUdeviceptr X = 0, T = 0, Y = 0, hyp = 0;
    size_t y_offset = 0;
    unsigned B = 0, I = 0;
    StepIO next(unsigned steps = 1) const;
};

class StepProgram {
public:
    virtual ~StepProgram() = default;
    // The launches of one step in order, each with what it writes.
    virtual std::vector<StepKernel> step_kernels(const KernelSet& ks, const StepIO& io) = 0;
    // `steps` steps from `first` on, on stream s (captured into a chunk's graph); the default
    // launches each step's step_kernels.
    virtual void enqueue_steps(const KernelSet& ks, const StepIO& first, unsigned steps, CUstream s);
    // Before those steps are captured into a graph: what they need uploaded (dense_program's phase
    // tables), which cannot happen during a capture. The default: nothing.
    virtual void prepare_steps(const KernelSet&, const StepIO&, unsigned) {}
    // The buffers a step changes and the NaN hunt restores: parameters and optimizer state.
    virtual std::vector<const DeviceBuffer*> state() const = 0;
    // The parameters tensor by tensor, named as in a checkpoint (the NaN hunt's messages).
    virtual std::vector<StepKernel::Write> parameters() const = 0;
    // Test accuracy and loss of the current parameters (on stream s; `graph`: may replay a graph).
    virtual EvalResult evaluate(const KernelSet& ks, CUstream s, Loss loss, bool graph) = 0;
    // The parameters and optimizer state from a checkpoint's position, and back.
    virtual void load(const ResumeState& r) = 0;
    virtual void store(ResumeState& e) const = 0;
    virtual unsigned default_chunk() const = 0;  // steps a CUDA graph holds
    // Whether the step table takes the lr rounded to float first (the MLP's, as its one-launch
    // steps were measured with) or the schedule's double (the model trainer's).
    virtual bool float_lr() const = 0;
};

// Helpers of the programs and the loop (train.cpp):
// one-hot rows of the labels ([N][10]);
std::vector<float> one_hot(const std::vector<uint8_t>& labels);
// the mean loss over B rows of Y against labels[first..first+B) (loss_value of recipe.hpp), and
// the argmax predictions.
double batch_loss(Loss kind, const float* Y, const std::vector<uint8_t>& labels, size_t first, size_t B,
                  std::vector<uint8_t>* predictions = nullptr);

// The program `cfg` asks for: cfg.model's layer-by-layer step, else the MLP's kernel set.
std::unique_ptr<StepProgram> make_mlp_program(const TrainConfig& cfg, const Split& test);
std::unique_ptr<StepProgram> make_model_program(const TrainConfig& cfg, const Split& test);

}  // namespace ptxlab
