// tc_step (ptx/tcstep.ptx): whole training steps of the 2-layer MLP in ONE cluster of 16
// blocks, the two large products (X W1^T, D1^T X) on the tensor cores (TF32 mma.sync), the
// rest in FP32, the parameters in shared memory for a whole launch. The --kernels tc set's
// step for batches up to 64 (train runs it as fused_step runs for the fused set).
//
// Its float64 reference is ref_fused_step with TcProducts (reference.hpp): the bounds of
// fused_step, with Z's sums and W1's gradient sums carrying tc.hpp's TF32 bound
// (tc_sum_bound) of their products.
#pragma once

#include "fused.hpp"
#include "reference.hpp"

#include <string>

namespace ptxlab {

inline constexpr unsigned kTcStepCluster = 16;      // blocks: the whole grid is one cluster
inline constexpr unsigned kTcStepBlock = 256;       // threads a block (8 warps)
inline constexpr unsigned kTcStepSmem = 224576;     // dynamic shared memory a block (the PTX's map)
inline constexpr unsigned kTcStepMaxB = 64, kTcStepMaxI = 896, kTcStepMaxH = 128, kTcStepMaxO = 16;

// Why tc_step cannot take these sizes (empty when it can): 1 <= B <= 64, I <= 896,
// H <= 128, O <= 16 (the shared-memory map holds one 64-sample batch, 56 columns of W1 a
// block for 16 blocks, 8 hidden units a block, 16 outputs).
std::string tc_step_unfit(unsigned B, unsigned I, unsigned H, unsigned O);

// a.steps steps in one launch, with the loss code a.loss, the gradient scale a.scale and the
// optimizer a.optim; P, M, V, hyp, A1 (A), Y as fused_step takes them (ReLU only; no Yp,
// sync or Z). Throws InputError when the sizes do not fit, Error when no cluster of 16
// such blocks fits on the GPU.
void launch_tc_step(const Kernel& k, const FusedArgs& a, CUstream s);

// The bounds of tc_step's two TF32 products for these sizes (ref_fused_step's TcProducts).
TcProducts tc_step_products(unsigned B, unsigned I);

}  // namespace ptxlab
