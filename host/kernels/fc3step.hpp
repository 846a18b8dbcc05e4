// fc3_step (ptx/fc3step.ptx): whole training steps of a 3-layer fc network (I -> H1 -> H2 -> O,
// ReLU) in ONE launch of G clusters of 4 blocks, every product on the tensor cores (TF32
// mma.sync), a grid barrier between its four stages, `steps` steps a launch with the W1 and W2
// tiles in shared memory. The model trainer's step for 3 fc layers at batches up to 64.
//
// Its float64 reference (family_fc3step.cpp) is the network's maths with bounds propagated
// through each sum in the kernel's order, the TF32 products carrying tc.hpp's tc_sum_bound.
#pragma once

#include "kernels.hpp"
#include "recipe.hpp"

#include <string>

namespace ptxlab {

inline constexpr unsigned kFc3StepCluster = 4;      // blocks a cluster (.reqnctapercluster 4)
inline constexpr unsigned kFc3StepBlock = 256;      // threads a block (8 warps)
inline constexpr unsigned kFc3StepSmem = 198528;    // dynamic shared memory a block (the PTX's map)
inline constexpr unsigned kFc3StepMaxB = 64, kFc3StepMaxI = 784, kFc3StepMaxH1 = 256, kFc3StepMaxH2 = 128,
                          kFc3StepMaxO = 16;
// The kernel's scratch (fc3step.ptx's `work`): the grid barrier's count, b3's gradient, A1, A2,
// the partial outputs and fc2's partial deltas. Zero before the first launch, kept between launches.
inline constexpr size_t kFc3StepWorkBytes = 655872;

// Why fc3_step cannot take these sizes (empty when it can): 1 <= B <= 64, I <= 784, H1 <= 256,
// H2 <= 128, O <= 16 (16 H1 tiles of 16 units, 4 ranks of 196 input columns, 8 H2 tiles).
std::string fc3_step_unfit(unsigned B, unsigned I, unsigned H1, unsigned H2, unsigned O);

// The clusters a launch takes: max(ceil(H1/16), ceil(H2/16)).
unsigned fc3_step_clusters(unsigned H1, unsigned H2);

struct Fc3StepArgs {
    // X [steps][B][I], T [steps][B][O], Y [steps][B][O]; P, M, V: W1, b1, W2, b2, W3, b3 back to
    // back (M, V 0 where the optimizer keeps none); hyp [steps][4] (StepHyper); work: the scratch.
    CUdeviceptr X = 0, T = 0, P = 0, M = 0, V = 0, Y = 0, hyp = 0, work = 0;
    unsigned B = 0, I = 0, H1 = 0, H2 = 0, O = 0, steps = 1;
    unsigned loss = 0;  // kLossDiff or kLossSoftmax (recipe.hpp)
    float scale = 0.0f; // grad_scale
    OptimConfig optim;
};

// a.steps steps in one launch. Throws InputError when the sizes do not fit, Error when the
// G clusters cannot all be resident on this GPU (the grid barrier needs them all).
void launch_fc3_step(const Kernel& k, const Fc3StepArgs& a, CUstream s);

}  // namespace ptxlab
